"""The inotify watcher on real directories.

The kernel queues an inotify event before the system call that caused it returns, and
``is_dirty`` reads the queue first: so a change made before the call is always seen, and these
tests need no sleeps.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from semsearch.files.watcher import DirectoryWatcher, file_system_magic, remote_file_system
from tests.conftest import write_tree

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify: Linux")

TREE: dict[str, str | bytes] = {
    "readme.md": "Read me.\n",
    "src/app.py": "print('app')\n",
    "src/lib/util.py": "def util(): pass\n",
    "docs/guide.md": "# Guide\n",
}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "tree", TREE)


@pytest.fixture
def watcher(tree: Path) -> Iterator[DirectoryWatcher]:
    with DirectoryWatcher([tree]) as running:
        assert running.problem is None
        yield running


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(text)


CHANGES: dict[str, Callable[[Path, Path], object]] = {
    "overwrite": lambda t, _: (t / "readme.md").write_text("Changed.\n"),
    "append": lambda t, _: _append(t / "src/lib/util.py", "x = 1\n"),
    "create": lambda t, _: (t / "docs/new.md").write_text("New.\n"),
    "delete": lambda t, _: (t / "src/app.py").unlink(),
    "rename in a folder": lambda t, _: (t / "docs/guide.md").rename(t / "docs/manual.md"),
    "rename across folders": lambda t, _: (t / "docs/guide.md").rename(t / "src/guide.md"),
    "move in from outside": lambda t, o: (o / "in.md").rename(t / "src/in.md"),
    "move out": lambda t, o: (t / "readme.md").rename(o / "readme.md"),
    "touch": lambda t, _: os.utime(t / "docs/guide.md", ns=(1, 1)),
    "chmod": lambda t, _: (t / "src/app.py").chmod(0o600),
    "truncate": lambda t, _: os.truncate(t / "readme.md", 0),
    "new folder": lambda t, _: (t / "docs/drafts").mkdir(),
    "delete a folder": lambda t, _: shutil.rmtree(t / "src/lib"),
    "rename a folder": lambda t, _: (t / "src/lib").rename(t / "src/core"),
    "symlink": lambda t, o: (t / "link.md").symlink_to(o / "in.md"),
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_any_change_makes_it_dirty_until_cleared(
    watcher: DirectoryWatcher, tree: Path, tmp_path: Path, change: Callable[[Path, Path], object]
) -> None:
    outside = write_tree(tmp_path / "outside", {"in.md": "From outside.\n"})
    assert not watcher.is_dirty()
    change(tree, outside)
    assert watcher.is_dirty()
    assert watcher.is_dirty()  # until cleared
    watcher.clear()
    assert not watcher.is_dirty()
    assert watcher.problem is None and not watcher.is_stale


def test_nothing_changed_is_not_dirty(watcher: DirectoryWatcher, tree: Path) -> None:
    assert watcher.watches == 4  # tree, src, src/lib, docs
    (tree / "readme.md").read_text()  # reading is no change
    os.listdir(tree / "src")
    assert not watcher.is_dirty()


@pytest.mark.parametrize("make", [os.mkdir, os.makedirs], ids=["mkdir", "makedirs"])
def test_a_new_folder_is_watched_before_its_event_counts(
    watcher: DirectoryWatcher, tree: Path, make: Callable[[Path], None]
) -> None:
    folder = tree / "docs" / "a" if make is os.mkdir else tree / "docs" / "a" / "b" / "c"
    make(folder)
    (folder / "early.md").write_text("Written before the watcher read the mkdir.\n")
    assert watcher.is_dirty()
    watcher.clear()
    (folder / "early.md").write_text("Changed after the check.\n")
    assert watcher.is_dirty()
    watcher.clear()
    (folder / "late.md").write_text("Created after the check.\n")
    assert watcher.is_dirty()


def test_a_folder_moved_in_is_watched_all_the_way_down(
    watcher: DirectoryWatcher, tree: Path, tmp_path: Path
) -> None:
    outside = write_tree(tmp_path / "outside", {"pkg/sub/deep/mod.py": "x = 1\n"})
    (outside / "pkg").rename(tree / "pkg")
    assert watcher.is_dirty()
    watcher.clear()
    (tree / "pkg/sub/deep/mod.py").write_text("x = 2\n")
    assert watcher.is_dirty()


def test_a_renamed_folder_keeps_watching_new_folders_inside(
    watcher: DirectoryWatcher, tree: Path
) -> None:
    (tree / "src").rename(tree / "source")
    assert watcher.is_dirty()
    watcher.clear()
    (tree / "source/lib/fresh").mkdir()  # found under its new path
    watcher.clear()
    (tree / "source/lib/fresh/mod.py").write_text("y = 1\n")
    assert watcher.is_dirty()


def test_git_internals_are_not_watched_but_a_new_repository_makes_it_stale(
    tree: Path,
) -> None:
    (tree / ".git" / "objects").mkdir(parents=True)
    with DirectoryWatcher([tree]) as watcher:
        assert watcher.git_entries == [tree / ".git"]
        (tree / ".git" / "objects" / "ab").write_bytes(b"object")
        assert not watcher.is_dirty() and not watcher.is_stale
        (tree / "src" / ".git").mkdir()  # a nested repository: other git files decide now
        assert watcher.is_dirty() and watcher.is_stale


def test_a_symlinked_folder_is_not_followed(tree: Path, tmp_path: Path) -> None:
    elsewhere = write_tree(tmp_path / "elsewhere", {"far.md": "Far away.\n"})
    (tree / "far").symlink_to(elsewhere, target_is_directory=True)
    with DirectoryWatcher([tree]) as watcher:  # the indexer does not follow it either
        (elsewhere / "far.md").write_text("Changed far away.\n")
        assert not watcher.is_dirty()


def test_several_roots_and_a_missing_one(tmp_path: Path) -> None:
    one = write_tree(tmp_path / "one", {"a.md": "A\n"})
    two = write_tree(tmp_path / "two", {"b/c.md": "C\n"})
    with DirectoryWatcher([one, tmp_path / "missing", two]) as watcher:
        assert watcher.problem is None and watcher.watches == 3
        (two / "b" / "c.md").write_text("changed\n")
        assert watcher.is_dirty()


def test_more_folders_than_allowed_make_it_unreliable(tree: Path) -> None:
    with DirectoryWatcher([tree], max_watches=3) as watcher:
        assert watcher.problem == "more than 3 directories to watch"
        assert not any(t.name == "semsearch-watch" for t in threading.enumerate())


def test_a_new_folder_beyond_the_limit_makes_it_unreliable(tree: Path) -> None:
    with DirectoryWatcher([tree], max_watches=4) as watcher:
        assert watcher.problem is None
        (tree / "docs" / "more").mkdir()
        assert watcher.is_dirty()
        assert watcher.problem == "more than 4 directories to watch"


def test_close_stops_the_thread_and_closes_the_descriptor(tree: Path) -> None:
    watcher = DirectoryWatcher([tree])
    fds = set(os.listdir("/proc/self/fd"))
    assert any(t.name == "semsearch-watch" for t in threading.enumerate())
    watcher.close()
    watcher.close()  # again: nothing to do
    assert not any(t.name == "semsearch-watch" for t in threading.enumerate())
    assert len(fds - set(os.listdir("/proc/self/fd"))) == 3  # inotify and the wake pipe


@pytest.mark.parametrize("where", ["tmp", "/proc", "/dev/shm"])
def test_the_file_system_magic_is_what_stat_f_says(tmp_path: Path, where: str) -> None:
    path = tmp_path if where == "tmp" else Path(where)
    if not path.is_dir():
        pytest.skip(f"no {where} here")
    said = subprocess.run(["stat", "-f", "-c", "%t", str(path)], capture_output=True, text=True)
    assert file_system_magic(path) == int(said.stdout, 16)
    assert remote_file_system(path) is None  # local: inotify sees every change
    assert file_system_magic(tmp_path / "missing") is None
