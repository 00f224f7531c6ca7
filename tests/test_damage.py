"""A damaged index, as a user meets it: one line and exit 1 from every command that reads it, a
tool error from the MCP server, ``status --check`` saying what it found, and ``index --rebuild``
setting it aside (kept, renamed) and indexing anew.

The indexes are made by a real index run with the real model, once per backend, and damaged the
way a user's get damaged: bytes overwritten in the middle of the file, the file truncated, a text
file in its place, a LanceDB table or data file gone or cut short.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from semsearch.cli.commands import main
from tests.conftest import write_tree
from tests.test_mcp_server import Client, error, ok, server_env

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
ADVICE = "Run `semsearch index --rebuild`"


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


def digest(path: Path) -> str:
    """The bytes of a file, or of every file under a folder, as one hash."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    hasher = hashlib.sha256()
    for file in files:
        hasher.update(str(file.relative_to(path) if path.is_dir() else "").encode())
        hasher.update(file.read_bytes())
    return hasher.hexdigest()


# --- the damage, done to a copy of a sound index ------------------------------------------------


def overwrite_middle(path: Path) -> None:
    """Half the file, from a quarter in, overwritten with other bytes (a misdirected write)."""
    size = path.stat().st_size
    junk = b"a block of some other file landed here. " * (size // 40 + 1)
    with path.open("r+b") as handle:
        handle.seek(size // 4)
        handle.write(junk[: size // 2])


def truncate(path: Path) -> None:
    """The file cut at 40% (a copy that stopped, a full disk)."""
    os.truncate(path, path.stat().st_size * 2 // 5)


def text_file(path: Path) -> None:
    """A text file where the index was (a path mixed up, a file saved over it)."""
    path.write_text("Shopping list: eggs, flour, lighthouse batteries.\n")


def lance_table_gone(table: str) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        shutil.rmtree(path / f"{table}.lance")

    damage.__name__ = f"table_{table}_gone"
    return damage


def lance_data_truncated(path: Path) -> None:
    """Every data file of the files table cut in half."""
    for data in (path / "files.lance" / "data").iterdir():
        os.truncate(data, data.stat().st_size // 2)


DAMAGE: list[tuple[str, Callable[[Path], None]]] = [
    ("sqlite", overwrite_middle),
    ("sqlite", truncate),
    ("sqlite", text_file),
    ("lancedb", lance_table_gone("chunks")),
    ("lancedb", lance_table_gone("files")),
    ("lancedb", lance_data_truncated),
]
DAMAGE_IDS = [f"{backend}-{damage.__name__}" for backend, damage in DAMAGE]


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


def damaged_line(err: str, index: Path) -> str:
    """The one line a command printed about the damaged index (and nothing else on stderr)."""
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert line.startswith(f"semsearch: The index {index} is damaged: "), line
    assert ADVICE in line and "Traceback" not in err
    return line


# --- every command that reads the index: one line, exit 1, the index left as it was ----------


@pytest.mark.parametrize(("backend", "damage"), DAMAGE, ids=DAMAGE_IDS)
@pytest.mark.parametrize(
    "argv",
    [["search", HERONS], ["status"], ["index"], ["index", "--force"]],
    ids=["search", "status", "index", "index-force"],
)
def test_each_command_says_the_index_is_damaged_in_one_line(
    use: Any,
    capsys: pytest.CaptureFixture[str],
    backend: str,
    damage: Callable[[Path], None],
    argv: list[str],
) -> None:
    index = use(backend, damage)
    before = digest(index)
    code, out, err = run(capsys, *argv)
    assert code == 1, err
    damaged_line(err, index)
    assert out == ""
    assert digest(index) == before  # never written over, never deleted


@pytest.mark.parametrize(
    "argv",
    [["remove", "notes"], ["remove", "--keep-index", "notes"], ["move", "notes", "."]],
    ids=["remove", "remove-keep-index", "move"],
)
def test_remove_and_move_refuse_a_damaged_index_and_keep_the_config(
    use: Any, capsys: pytest.CaptureFixture[str], made: dict[str, Path], argv: list[str]
) -> None:
    index = use("sqlite", overwrite_middle)
    config = made["config"].read_text()
    code, _, err = run(capsys, *argv)
    assert code == 1
    damaged_line(err, index)
    assert made["config"].read_text() == config


def test_list_does_not_read_the_index_and_still_works(
    use: Any, capsys: pytest.CaptureFixture[str], made: dict[str, Path]
) -> None:
    use("sqlite", text_file)
    code, out, err = run(capsys, "list")
    assert (code, err) == (0, "")
    assert str(made["notes"]) in out


def test_damage_to_the_full_text_tables_alone_is_reported_by_search(
    use: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The FTS5 table's config page overwritten: "vtable constructor failed" from SQLite."""
    index = use("sqlite", None)
    with sqlite3.connect(index) as conn:
        (page,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'chunks_fts_config'"
        ).fetchone()
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    with index.open("r+b") as handle:
        handle.seek((page - 1) * size)
        handle.write(b"\xa5" * size)
    code, _, err = run(capsys, "search", "tide tables", "--mode", "bm25")
    assert code == 1
    assert "vtable constructor failed" in damaged_line(err, index)


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
    code, _, err = run(capsys, "status", "--check")
    assert (code, err) == (1, f"semsearch: No index at {index}. Run `semsearch index` first.\n")
    code, out, err = run(capsys, "index")
    assert code == 0, err
    assert "3 indexed" in out
    assert run(capsys, "search", HERONS, "-k", "1")[1].count("herons.md") == 1


# --- status --check --------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "lancedb"])
def test_status_check_of_a_sound_index_is_ok(
    use: Any, capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    index = use(backend, None)
    code, out, err = run(capsys, "status", "--check")
    assert (code, err) == (0, "")
    checks = (
        "SQLite integrity_check, FTS5 integrity-check, every row read"
        if backend == "sqlite"
        else "every table opened, every row read, a full-text query"
    )
    assert out == f"index         {index}\ncheck         ok  ({checks})\n"


@pytest.mark.parametrize(("backend", "damage"), DAMAGE, ids=DAMAGE_IDS)
def test_status_check_lists_the_problems_and_the_way_out(
    use: Any, capsys: pytest.CaptureFixture[str], backend: str, damage: Callable[[Path], None]
) -> None:
    index = use(backend, damage)
    before = digest(index)
    code, out, err = run(capsys, "status", "--check")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"index         {index}"
    assert re.fullmatch(r"check         damaged  \(\d+ problems?\)", lines[1])
    assert len(lines) > 2 and all(line.startswith("  ") for line in lines[2:])
    assert err == (
        f"semsearch: the index {index} is damaged. {ADVICE} to set it aside (it is kept, "
        "renamed) and index the configured folders again.\n"
    )
    assert digest(index) == before


def test_status_check_finds_overwritten_vectors_that_search_does_not_notice(
    use: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bytes overwritten inside a chunk's vector: SQLite's pages are sound, the vector is not
    of unit length any more."""
    index = use("sqlite", None)
    with sqlite3.connect(index) as conn:
        (vector,) = conn.execute("SELECT vector FROM chunks ORDER BY id LIMIT 1").fetchone()
    conn.close()
    data = index.read_bytes()
    at = data.index(vector) + len(vector) // 2
    index.write_bytes(data[:at] + b"\x7b" * 16 + data[at + 16 :])
    assert run(capsys, "search", HERONS)[0] == 0
    code, out, _ = run(capsys, "status", "--check")
    assert code == 1
    assert "  1 chunk vectors that are not unit length (bytes overwritten)" in out.splitlines()


# --- index --rebuild -------------------------------------------------------------------------


def kept_as(out: str) -> list[Path]:
    return [Path(line.split()[1]) for line in out.splitlines() if line.startswith("kept ")]


@pytest.mark.parametrize(("backend", "damage"), DAMAGE, ids=DAMAGE_IDS)
def test_rebuild_sets_the_damaged_index_aside_and_searches_again(
    use: Any, capsys: pytest.CaptureFixture[str], backend: str, damage: Callable[[Path], None]
) -> None:
    index = use(backend, damage)
    wal = index.with_name(index.name + "-wal")
    if backend == "sqlite":  # what a killed writer leaves beside the file
        wal.write_bytes(b"the write-ahead log of the damaged index")
        index.with_name(index.name + "-shm").write_bytes(b"its scratch index (rebuilt on open)")
    before = digest(index)
    code, out, err = run(capsys, "index", "--rebuild")
    assert code == 0, err
    kept = kept_as(out)
    assert re.fullmatch(re.escape(index.name) + r"\.damaged-\d{8}-\d{6}", kept[0].name)
    assert kept[0].parent == index.parent
    assert "(the damaged index: " in out.splitlines()[0]
    assert digest(kept[0]) == before
    if backend == "sqlite":  # the log moves with its file, as it was; no stale log is left
        assert kept[1:] == [kept[0].with_name(kept[0].name + end) for end in ("-wal", "-shm")]
        assert kept[1].read_bytes() == b"the write-ahead log of the damaged index"
    assert "3 files (3 indexed, 0 unchanged)" in out
    code, out, err = run(capsys, "search", HERONS, "-k", "1")
    assert code == 0, err
    assert "herons.md" in out
    assert run(capsys, "status", "--check")[0] == 0


def test_rebuild_of_a_sound_index_keeps_it_as_old(
    use: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A clean start on purpose: the sound index is set aside as ``.old-TIME``, not deleted."""
    index = use("sqlite", None)
    before = digest(index)
    code, out, err = run(capsys, "index", "--rebuild", "--json")
    assert code == 0, err
    report = json.loads(out)
    (kept,) = map(Path, report["keptAs"])
    assert re.fullmatch(r"index\.db\.old-\d{8}-\d{6}", kept.name)
    assert report["damage"] == [] and report["filesIndexed"] == 3
    assert digest(kept) == before
    assert "herons.md" in run(capsys, "search", HERONS, "-k", "1")[1]


def test_rebuild_twice_in_a_second_never_reuses_a_name(
    use: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    index = use("sqlite", text_file)
    assert run(capsys, "index", "--rebuild")[0] == 0
    text_file(index)
    assert run(capsys, "index", "--rebuild")[0] == 0
    text_file(index)
    assert run(capsys, "index", "--rebuild")[0] == 0
    kept = sorted(p.name for p in index.parent.glob("index.db.damaged-*"))
    assert len(kept) == 3
    for name in kept:
        assert (index.parent / name).read_text().startswith("Shopping list")


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (["index", "--rebuild", "notes"], "PATH"),
        (["index", "--rebuild", "--dry-run"], "--dry-run"),
        (["index", "--rebuild", "--watch"], "--watch"),
    ],
)
def test_rebuild_takes_no_path_dry_run_or_watch(
    use: Any, capsys: pytest.CaptureFixture[str], argv: list[str], refused: str
) -> None:
    index = use("sqlite", text_file)
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert err == (
        "semsearch: --rebuild indexes every configured folder into a new index: it takes no "
        f"{refused}.\n"
    )
    assert index.read_text().startswith("Shopping list")


HOLDER = """
import sys
from pathlib import Path
from semsearch.store import write_lock
with write_lock(Path(sys.argv[1]), 0):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_rebuild_waits_for_the_write_lock_before_it_moves_anything(use: Any) -> None:
    index = use("sqlite", overwrite_middle)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(index)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    rebuild = subprocess.Popen(
        [sys.executable, "-m", "semsearch", "index", "--rebuild"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    first: list[str] = []
    reader = threading.Thread(target=lambda: first.append(rebuild.stderr.readline()))  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout=60)
    untouched = sorted(p.name for p in index.parent.glob("index.db*"))
    holder.communicate("")
    reader.join()
    out, rest = rebuild.communicate(timeout=120)
    assert first and "waiting for the `semsearch index` run" in first[0], first
    assert untouched == ["index.db", "index.db.lock"]
    assert rebuild.returncode == 0, rest
    assert kept_as(out)[0].name.startswith("index.db.damaged-")


# --- the MCP server: a tool error with the same advice, never "Internal error" ----------------


def swap_in(source: Path, index: Path, away: Iterator[int]) -> None:
    """Put a copy of ``source`` at ``index``, moving what was there aside (a new inode, as a
    user's copy or rebuild gives, so the server opens it afresh)."""
    if index.exists():
        index.rename(index.with_name(f"{index.name}.gone-{next(away)}"))
    copy_index(source, index)


@pytest.mark.parametrize("backend", ["sqlite", "lancedb"])
def test_the_mcp_tools_report_each_damage_as_a_tool_error(
    made: dict[str, Path], tmp_path: Path, backend: str
) -> None:
    home = tmp_path / "home"
    env = {
        **server_env(home),
        "SS_CONFIG_PATH": str(made["config"]),
        "SS_INDEX_PATH": str(tmp_path / "index.db"),
        "SS_STORE_BACKEND": backend,
    }
    index = store_of(tmp_path, backend)
    kinds = [damage for kind, damage in DAMAGE if kind == backend]
    away = iter(range(100))
    client = Client(env, tmp_path, tmp_path / "server.log")
    try:
        for damage in kinds:
            swap_in(made[backend], index, away)
            damage(index)
            for tool, args in (("search", {"query": HERONS}), ("list_folders", {}), ("index", {})):
                said = error(client.call(tool, args))
                assert said.startswith(f"The index {index} is damaged: "), (damage, tool, said)
                assert ADVICE in said and "Internal error" not in said
        swap_in(made[backend], index, away)
        assert "herons.md" in ok(client.call("search", {"query": HERONS, "k": 1}))
        assert json.loads(ok(client.call("list_folders", {})))["folders"][0]["files"] == 3
    finally:
        client.close()
    assert "Traceback" not in (tmp_path / "server.log").read_text()
