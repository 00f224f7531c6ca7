"""A broken index file as a user meets it: a zero-byte file, which is no index yet.

The indexes are made by a real index run with the real model, once per backend.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from semsearch.cli.commands import main
from tests.conftest import write_tree
from tests.test_mcp_server import server_env

NOTES: dict[str, str | bytes] = {
    "herons.md": "# Herons\n\nGrey herons stand still in the shallows, waiting for fish.\n",
    "tides.md": "# Tides\n\nThe tide tables are pinned beside the lighthouse door.\n",
    "retry.py": (
        "def retry_payment(order, attempts=3):\n"
        '    """Retry a failed payment with exponential backoff."""\n'
        "    return any(charge(order) for _ in range(attempts))\n"
    ),
}
HERONS = "birds standing still in shallow water waiting for fish"


def store_of(folder: Path, backend: str) -> Path:
    """Where the index of ``SS_INDEX_PATH=folder/index.db`` lives for ``backend``."""
    return folder / ("index.db" if backend == "sqlite" else "lancedb")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> dict[str, Path]:
    """The notes folder, its config, and a sound index of each backend made by `semsearch index`
    (the real model) in a subprocess."""
    base = tmp_path_factory.mktemp("damage")
    notes = write_tree(base / "notes", NOTES)
    home = base / "home"
    home.mkdir()
    made = {"notes": notes, "config": base / "config.json"}
    for backend in ("sqlite", "lancedb"):
        env = {
            **server_env(home),
            "SS_MODEL_CACHE": str(model_cache),
            "SS_CONFIG_PATH": str(made["config"]),
            "SS_INDEX_PATH": str(base / backend / "index.db"),
            "SS_STORE_BACKEND": backend,
            "PYTHONPATH": os.pathsep.join(sys.path),
        }
        for args in (["add", str(notes)], ["index"]):
            cli = [sys.executable, "-m", "semsearch", *args]
            subprocess.run(cli, env=env, check=True, capture_output=True)
        made[backend] = store_of(base / backend, backend)
    return made


def copy_index(source: Path, target: Path) -> Path:
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return target


@pytest.fixture
def use(
    made: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str, Callable[[Path], None] | None], Path]:
    """A copy of the sound index of a backend in this test's folder, damaged by ``damage``,
    with the environment pointing the CLI at it; returns where the index is."""

    def setup(backend: str, damage: Callable[[Path], None] | None) -> Path:
        monkeypatch.setenv("SS_CONFIG_PATH", str(made["config"]))
        monkeypatch.setenv("SS_INDEX_PATH", str(tmp_path / "index.db"))
        monkeypatch.setenv("SS_STORE_BACKEND", backend)
        index = copy_index(made[backend], store_of(tmp_path, backend))
        if damage is not None:
            damage(index)
        return index

    return setup


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- a zero-byte file is no index yet ---------------------------------------------------------


def test_a_zero_byte_file_is_no_index_yet(
    use: Any, capsys: pytest.CaptureFixture[str], made: dict[str, Path]
) -> None:
    """What an index run killed before its first commit leaves: search says to index, status
    shows nothing indexed, and index makes the index in that file."""
    index = use("sqlite", lambda path: path.write_bytes(b""))
    code, _, err = run(capsys, "search", HERONS)
    assert (code, err) == (1, f"semsearch: No index at {index}. Run `semsearch index` first.\n")
    assert index.stat().st_size == 0  # a search writes nothing
    code, out, err = run(capsys, "status")
    assert (code, err) == (0, "")
    assert "not created yet" in out and "not indexed yet" in out
    code, out, err = run(capsys, "index")
    assert code == 0, err
    assert "3 indexed" in out
    assert run(capsys, "search", HERONS, "-k", "1")[1].count("herons.md") == 1
