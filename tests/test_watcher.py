"""The watchfiles watcher on real directories.

Changes reach the watcher 50 to 100 ms after they happen, so a test waits for the one it made.
To show that something did *not* count, a test changes a sentinel after it and waits until the
sentinel's change is logged: notify reads the kernel's events in order, so whatever came before
the sentinel has been counted (and logged) or left out by then.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from semsearch.files.watcher import (
    DirectoryWatcher,
    Mount,
    file_system_type,
    read_mounts,
    remote_file_system,
)
from tests.conftest import write_tree

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


def until(condition: Callable[[], object], seconds: float = 10.0) -> bool:
    """Whether ``condition`` held within ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def logged_changes(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every changed path the watcher counted, from its debug log."""
    return [
        path
        for record in caplog.records
        if record.name == "semsearch.watch" and isinstance(record.args, tuple)
        for path in record.args[1]
    ]


def counted_up_to(caplog: pytest.LogCaptureFixture, sentinel: Path) -> list[str]:
    """Change ``sentinel``, wait until the watcher counted it, and return what it counted."""
    os.utime(sentinel)
    assert until(lambda: str(sentinel) in logged_changes(caplog))
    return logged_changes(caplog)


@pytest.fixture
def debug_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="semsearch.watch")
    return caplog


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
    assert until(watcher.is_dirty)
    assert watcher.is_dirty()  # until cleared
    watcher.clear()
    assert not watcher.is_dirty()
    assert watcher.problem is None and not watcher.is_stale


def test_nothing_changed_is_not_dirty(
    watcher: DirectoryWatcher, tree: Path, debug_log: pytest.LogCaptureFixture
) -> None:
    (tree / "readme.md").read_text()  # reading is no change
    os.listdir(tree / "src")
    assert not watcher.is_dirty()
    assert counted_up_to(debug_log, tree / "docs" / "guide.md") == [str(tree / "docs/guide.md")]


def test_a_change_right_after_the_start_counts(tmp_path: Path) -> None:
    """Enough folders that setting up the watches takes a while: the watcher returns only once
    they are in place."""
    files: dict[str, str | bytes] = {f"d{i:03}/e/f.md": f"Note {i}.\n" for i in range(400)}
    tree = write_tree(tmp_path / "big", files)
    for where in ("d000/e/f.md", "d399/e/f.md"):
        with DirectoryWatcher([tree]) as watcher:
            (tree / where).write_text("Changed at once.\n")
            assert until(watcher.is_dirty), where


@pytest.mark.parametrize("make", [os.mkdir, os.makedirs], ids=["mkdir", "makedirs"])
def test_a_new_folder_is_watched_before_its_event_counts(
    watcher: DirectoryWatcher, tree: Path, make: Callable[[Path], None]
) -> None:
    folder = tree / "docs" / "a" if make is os.mkdir else tree / "docs" / "a" / "b" / "c"
    make(folder)
    (folder / "early.md").write_text("Written before the watcher read the mkdir.\n")
    assert until(watcher.is_dirty)
    watcher.clear()
    (folder / "early.md").write_text("Changed after the check.\n")
    assert until(watcher.is_dirty)
    watcher.clear()
    (folder / "late.md").write_text("Created after the check.\n")
    assert until(watcher.is_dirty)


def test_a_folder_moved_in_is_watched_all_the_way_down(
    watcher: DirectoryWatcher, tree: Path, tmp_path: Path
) -> None:
    outside = write_tree(tmp_path / "outside", {"pkg/sub/deep/mod.py": "x = 1\n"})
    (outside / "pkg").rename(tree / "pkg")
    assert until(watcher.is_dirty)
    watcher.clear()
    (tree / "pkg/sub/deep/mod.py").write_text("x = 2\n")
    assert until(watcher.is_dirty)


def test_a_renamed_folder_keeps_watching_new_folders_inside(
    watcher: DirectoryWatcher, tree: Path
) -> None:
    (tree / "src").rename(tree / "source")
    assert until(watcher.is_dirty)
    watcher.clear()
    (tree / "source/lib/fresh").mkdir()  # found under its new path
    assert until(watcher.is_dirty)
    watcher.clear()
    (tree / "source/lib/fresh/mod.py").write_text("y = 1\n")
    assert until(watcher.is_dirty)


def test_git_internals_do_not_count_but_a_new_repository_makes_it_stale(
    tree: Path, debug_log: pytest.LogCaptureFixture
) -> None:
    (tree / ".git" / "objects").mkdir(parents=True)
    with DirectoryWatcher([tree]) as watcher:
        assert watcher.git_entries == [tree / ".git"]
        (tree / ".git" / "objects" / "ab").write_bytes(b"object")
        assert counted_up_to(debug_log, tree / "readme.md") == [str(tree / "readme.md")]
        assert not watcher.is_stale
        (tree / "src" / ".git").mkdir()  # a nested repository: other git files decide now
        assert until(lambda: watcher.is_stale)
        assert watcher.is_dirty()


def test_a_repository_moved_in_makes_it_stale(tree: Path, tmp_path: Path) -> None:
    outside = write_tree(tmp_path / "outside", {"vendor/lib/.git/HEAD": "ref: main\n"})
    with DirectoryWatcher([tree]) as watcher:
        (outside / "vendor").rename(tree / "vendor")
        assert until(lambda: watcher.is_stale)
        assert watcher.is_dirty() and watcher.problem is None


def test_a_symlinked_folder_is_not_followed(
    tree: Path, tmp_path: Path, debug_log: pytest.LogCaptureFixture
) -> None:
    elsewhere = write_tree(tmp_path / "elsewhere", {"far.md": "Far away.\n"})
    (tree / "far").symlink_to(elsewhere, target_is_directory=True)
    with DirectoryWatcher([tree]) as watcher:  # the indexer does not follow it either
        (elsewhere / "far.md").write_text("Changed far away.\n")
        assert counted_up_to(debug_log, tree / "readme.md") == [str(tree / "readme.md")]
        assert watcher.problem is None


def test_several_roots_and_a_missing_one(tmp_path: Path) -> None:
    one = write_tree(tmp_path / "one", {"a.md": "A\n"})
    two = write_tree(tmp_path / "two", {"b/c.md": "C\n"})
    with DirectoryWatcher([one, tmp_path / "missing", two]) as watcher:
        assert watcher.problem is None
        (two / "b" / "c.md").write_text("changed\n")
        assert until(watcher.is_dirty)
        watcher.clear()
        (one / "a.md").write_text("changed\n")
        assert until(watcher.is_dirty)


def test_more_folders_than_allowed_make_it_unreliable(tree: Path) -> None:
    with DirectoryWatcher([tree], max_watches=3) as watcher:
        assert watcher.problem == "more than 3 directories to watch"
        assert not any(t.name == "semsearch-watch" for t in threading.enumerate())


def test_a_new_folder_beyond_the_limit_makes_it_unreliable(tree: Path) -> None:
    with DirectoryWatcher([tree], max_watches=4) as watcher:
        assert watcher.problem is None
        (tree / "docs" / "more").mkdir()
        assert until(watcher.is_dirty)
        assert watcher.problem == "more than 4 directories to watch"


def _native_threads() -> list[str]:
    names = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended since the listing
            names.append((task / "comm").read_text().strip())
    return names


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
def test_close_stops_the_threads_and_gives_the_watches_back(tree: Path) -> None:
    fds = set(os.listdir("/proc/self/fd"))
    watcher = DirectoryWatcher([tree])
    assert any(t.name == "semsearch-watch" for t in threading.enumerate())
    assert any(name.startswith("notify-rs") for name in _native_threads())
    assert len(set(os.listdir("/proc/self/fd")) - fds) >= 1  # the inotify descriptor
    watcher.close()
    watcher.close()  # again: nothing to do
    assert not any(t.name == "semsearch-watch" for t in threading.enumerate())
    # notify's own thread closes its descriptors once told to stop
    assert until(lambda: not any(name.startswith("notify-rs") for name in _native_threads()))
    assert until(lambda: set(os.listdir("/proc/self/fd")) <= fds)


LIMITED = """
import sys, time
from pathlib import Path
from semsearch.files.watcher import DirectoryWatcher
tree = Path(sys.argv[1])
with DirectoryWatcher([tree]) as watcher:
    if sys.argv[2] == "mkdir":
        assert watcher.problem is None
        (tree / "docs" / "more").mkdir()
        deadline = time.monotonic() + 10
        while not watcher.is_stale and time.monotonic() < deadline:
            time.sleep(0.01)
        print(watcher.is_stale, watcher.is_dirty(), watcher.problem)
with DirectoryWatcher([tree]) as watcher:  # what a stale watcher's caller does: start again
    print(watcher.problem)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify's per-user limit")
@pytest.mark.parametrize(("limit", "then"), [(3, "start"), (4, "mkdir")])
def test_the_watch_limit_makes_it_unreliable(tree: Path, limit: int, then: str) -> None:
    """In a user namespace of its own, a child process may lower the inotify watch limit: four
    directories do not fit three watches. A fifth one made later does not fit four, which
    notify does not report: the watcher sees it unwatched, goes stale, and the next one says
    why."""
    shell = f'echo {limit} > /proc/sys/user/max_inotify_watches && exec "$0" "$@"'
    argv = ["unshare", "--user", "--map-root-user", "sh", "-c", shell]
    proc = subprocess.run(
        [*argv, sys.executable, "-c", LIMITED, str(tree), then],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    *first, problem = proc.stdout.splitlines()
    assert first == ([] if then == "start" else ["True True None"])
    assert problem.startswith(f"the inotify watch limit was reached at {tree}")
    assert problem.endswith(" (raise the sysctl fs.inotify.max_user_watches)")


MOUNTINFO = rb"""22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:40 / /srv/my\040share rw,nosuid - fuse.sshfs me@host:/home rw,user_id=0
41 22 0:41 / /srv/plain rw - tmpfs tmpfs rw
42 22 0:42 / /mnt/c rw - 9p drvfs rw,dirsync
43 22 0:43 / /home/nfs rw - nfs4 server:/export rw
44 43 0:44 / /home/nfs/local rw - ext4 /dev/sdb1 rw
"""


def test_the_mount_table_is_read_with_its_escapes() -> None:
    mounts = read_mounts(MOUNTINFO)
    assert [m.point for m in mounts][:2] == [Path("/"), Path("/srv/my share")]
    assert [m.kind for m in mounts] == ["ext4", "fuse.sshfs", "tmpfs", "9p", "nfs4", "ext4"]


@pytest.mark.parametrize(
    ("where", "kind"),
    [
        ("/srv/my share", "FUSE"),
        ("/srv/plain", None),
        ("/mnt/c/Users", "9p"),
        ("/home/nfs/notes", "NFS"),
        ("/home/nfs/local/notes", None),  # a local disk mounted inside the share
        ("/srv", None),
    ],
)
def test_remote_file_systems_are_told_from_the_mount_table(
    tmp_path: Path, where: str, kind: str | None
) -> None:
    folder = tmp_path / where.lstrip("/")
    folder.mkdir(parents=True)
    mounts = [Mount(tmp_path / m.point.relative_to("/"), m.kind) for m in read_mounts(MOUNTINFO)]
    assert remote_file_system(folder, mounts) == kind


def test_a_root_on_or_above_a_remote_mount_makes_it_unreliable(tree: Path) -> None:
    (tree / "src" / "share").mkdir()
    mounts = [Mount(Path("/"), "ext4"), Mount(tree / "src" / "share", "fuse.sshfs")]
    with DirectoryWatcher([tree], mounts=mounts) as watcher:
        assert watcher.problem == (
            f"{tree / 'src' / 'share'} is on a FUSE file system, whose changes made elsewhere "
            "go unseen"
        )
        assert not any(t.name == "semsearch-watch" for t in threading.enumerate())
    with DirectoryWatcher([tree / "src" / "share"], mounts=mounts) as watcher:
        assert watcher.problem is not None and "FUSE" in watcher.problem


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/mountinfo")
@pytest.mark.parametrize("where", ["tmp", "/proc", "/dev/shm"])
def test_the_file_system_type_is_what_findmnt_says(tmp_path: Path, where: str) -> None:
    path = tmp_path if where == "tmp" else Path(where)
    if not path.is_dir():
        pytest.skip(f"no {where} here")
    said = subprocess.run(
        ["findmnt", "-n", "-o", "FSTYPE", "-T", str(path)], capture_output=True, text=True
    )
    assert file_system_type(path) == said.stdout.split()[-1]  # the last of stacked mounts
    assert remote_file_system(path) is None  # local: every change raises an event
    assert file_system_type(tmp_path / "missing") is None
