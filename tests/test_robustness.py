"""The CLI on the paths a new user meets: early exits, a full disk, a read-only index, a busy lock.

These run the real command in a subprocess where the exit code or an abort is the point.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from semsearch.config import Settings
from semsearch.embedder import HashEmbedder
from semsearch.index import Index
from tests.conftest import write_tree


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m semsearch ARGS`` with this test's environment (HOME, XDG dirs)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-m", "semsearch", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def hash_indexed(settings: Settings, root: Path) -> None:
    """Index ``root`` with the hashed embedder (no model needed to read it back)."""
    write_tree(root, {"a.py": "def alpha():\n    return 1\n", "notes.md": "# Notes\nbeta gamma\n"})
    index = Index(settings, embedder=HashEmbedder())
    try:
        index.update([root])
    finally:
        index.close()


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["search", "foo"], 1, "Run `semsearch index` first"),
        (["search", "foo", "--folder", "nosuch"], 2, "nosuch"),
        (["search", "foo", "--glob", "*.nothing"], 0, "No results."),
    ],
)
def test_early_search_exit_never_aborts(
    argv: list[str], code: int, message: str, settings: Settings, tmp_path: Path
) -> None:
    """The model's background load never outlives the process (it used to abort: exit 134)."""
    if code != 1:
        hash_indexed(settings, tmp_path / "proj")
    for _ in range(5):  # the abort depended on timing: try several times
        result = run_cli(*argv)
        assert "terminate called" not in result.stderr
        assert result.returncode == code, result.stderr
        assert message in result.stderr
