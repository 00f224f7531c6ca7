"""Directory change events through watchfiles (the Rust ``notify`` crate: inotify on Linux,
FSEvents on macOS, ReadDirectoryChangesW on Windows).

:class:`DirectoryWatcher` watches everything under some roots, new directories included, in a
daemon thread. Any change marks it dirty until :meth:`~DirectoryWatcher.clear`; it does not say
what changed (a caller that sees it dirty runs its full check). Changes inside a ``.git``
directory do not count (:mod:`semsearch.files.changes` follows git's own files by their stat).

Changes arrive a little after they happen: notify's thread reads them at once, and watchfiles
hands them on after a step of ``STEP_MS`` without new ones (at most ``DEBOUNCE_MS`` after the
first), so a change marks the watcher dirty 50 to 100 ms later. None is lost: a change made
after :meth:`~DirectoryWatcher.clear` returned marks it dirty then, also inside a directory
created after the watcher started, which notify watches as soon as it reads the event that
announced it (a step before that event is handed on).

It cannot be relied on, and :attr:`~DirectoryWatcher.problem` says why, for a root on (or with
a mount below it of) a file system that others change without this kernel seeing it (NFS, SMB,
FUSE, 9p as in WSL's ``/mnt/c``, cluster file systems; known from ``/proc/self/mountinfo``, so
on Linux only), when a directory cannot be listed or watched (the inotify watch limit, the
``max_watches`` given) or when notify reports an error. It is :attr:`~DirectoryWatcher.is_stale`
(start a new one) when a ``.git`` entry came or went under a root, after a batch large enough
that the kernel's event queue may have overflowed, or when a new directory is not watched:
notify reports neither of the last two, so on Linux the watcher looks for each new directory
in the kernel's list of its watches (``/proc/self/fdinfo``); the next watcher then meets the
watch limit at its start, where notify does report it.

notify follows symlinks to directories (watchfiles has no switch for it): changes beyond a link
to a place outside the roots are left out, as the indexer does not follow links either. The
``semsearch.watch`` logger lists the changes of each batch at DEBUG level.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import watchfiles

logger = logging.getLogger("semsearch.watch")

STEP_MS = 50
"""How long watchfiles waits for more changes before it hands a batch on (also the delay before
a new watcher is ready, and how often its thread wakes while nothing happens)."""
DEBOUNCE_MS = 100
"""The longest watchfiles gathers one batch while changes keep coming."""
LARGE_BATCH = 2000
"""A batch of this many changes may come with an overflow of the kernel's queue, which notify
does not report: the watcher is then stale."""

REMOTE_FILE_SYSTEMS: dict[str, str] = {
    "nfs": "NFS",
    "nfs4": "NFS",
    "smb3": "SMB",
    "smbfs": "SMB",
    "cifs": "CIFS",
    "fuse": "FUSE",  # sshfs, gcsfuse, ... (fuse.sshfs): changes may come from elsewhere
    "fuseblk": "FUSE",
    "virtiofs": "virtiofs",
    "9p": "9p",  # WSL's /mnt/c, QEMU shares
    "ceph": "Ceph",
    "afs": "AFS",
    "coda": "Coda",
    "vboxsf": "vboxsf",
    "lustre": "Lustre",
    "gfs2": "GFS2",
    "ocfs2": "OCFS2",
}
"""File system types (as ``/proc/self/mountinfo`` names them, before any ``.subtype``) where
files change without this kernel's knowledge, so no event reports every change."""

_ESCAPE = re.compile(rb"\\([0-7]{3})")  # mountinfo writes space, tab, newline, \ as \040 ...
_WATCH = re.compile(r"^inotify wd:\S+ ino:([0-9a-f]+) sdev:([0-9a-f]+)", re.MULTILINE)
_ABOUT = re.compile(r'about \["(.*?)"')  # where notify's error happened
_RUST_DETAIL = re.compile(r" \(Error \{.*\}\)$")  # notify's error again, as Rust debugs it
_starting = threading.Lock()  # one watcher starts at a time: the inotify descriptor that
# appears meanwhile is its own


@dataclass(frozen=True)
class Mount:
    """A mounted file system: where, and its type as the kernel names it (``ext4``, ``nfs4``,
    ``fuse.sshfs``)."""

    point: Path
    kind: str


def read_mounts(table: bytes | None = None) -> list[Mount]:
    """The mounts of ``/proc/self/mountinfo`` (or of ``table``, in its format), in mount order;
    empty where there is no such file (off Linux)."""
    if table is None:
        try:
            table = Path("/proc/self/mountinfo").read_bytes()
        except OSError:
            return []
    mounts = []
    for line in table.splitlines():
        fields, _, rest = line.partition(b" - ")
        parts, kind = fields.split(), rest.split()
        if len(parts) >= 5 and kind:
            point = _ESCAPE.sub(lambda m: bytes([int(m[1], 8)]), parts[4])
            mounts.append(Mount(Path(os.fsdecode(point)), os.fsdecode(kind[0])))
    return mounts


def file_system_type(path: Path, mounts: Sequence[Mount] | None = None) -> str | None:
    """The type of the file system holding ``path`` (its nearest mount point at or above it);
    None when ``path`` does not exist or the mounts are unknown."""
    if not os.path.exists(path):
        return None
    real = Path(os.path.realpath(path))
    holder: Mount | None = None
    for mount in read_mounts() if mounts is None else mounts:
        deeper = holder is None or len(mount.point.parts) >= len(holder.point.parts)
        if deeper and real.is_relative_to(mount.point):  # a later mount hides an earlier one
            holder = mount
    return None if holder is None else holder.kind


def remote_file_system(path: Path, mounts: Sequence[Mount] | None = None) -> str | None:
    """The name of the network, FUSE or cluster file system holding ``path``; None otherwise
    (also when that is unknown)."""
    kind = file_system_type(path, mounts)
    return None if kind is None else REMOTE_FILE_SYSTEMS.get(kind.split(".", 1)[0])


def _remote_problem(roots: Sequence[Path], mounts: Sequence[Mount]) -> str | None:
    """Why events under ``roots`` miss changes: a root on, or a mount below one of, a remote
    file system."""
    for root in roots:
        places = [root] + [m.point for m in mounts if m.point.is_relative_to(root)]
        for place in places:
            kind = remote_file_system(place, mounts)
            if kind is not None:
                return f"{place} is on a {kind} file system, whose changes made elsewhere go unseen"
    return None


def _survey(tops: Iterable[Path], limit: int | None = None) -> tuple[list[str], list[Path]]:
    """The directories at and under ``tops`` (not following symlinks nor entering ``.git``; the
    walk stops past ``limit`` of them), and the ``.git`` entries among them. Raises OSError when
    a directory cannot be listed (one that is gone is skipped)."""
    pending = [os.fspath(top) for top in tops]
    folders: list[str] = []
    git_entries: list[Path] = []
    while pending and (limit is None or len(folders) <= limit):
        folder = pending.pop()
        try:
            with os.scandir(folder) as entries:
                listed = list(entries)
        except (FileNotFoundError, NotADirectoryError):
            continue
        folders.append(folder)
        for entry in listed:
            if entry.name == ".git":
                git_entries.append(Path(entry.path))
            elif entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
    return folders, git_entries


def _inotify_descriptors() -> set[int]:
    """This process's inotify descriptors (none off Linux)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return set()
    found = set()
    for name in names:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}") == "anon_inode:inotify":
                found.add(int(name))
    return found


def _unwatched(fd: int, folders: Sequence[str]) -> list[str]:
    """The ``folders`` that the inotify descriptor ``fd`` does not watch (none when its watches
    cannot be read; a folder that is gone counts as watched)."""
    try:
        listing = Path(f"/proc/self/fdinfo/{fd}").read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return []
    watched = set()
    for match in _WATCH.finditer(listing):
        device = int(match[2], 16)  # the kernel's encoding: major above bit 20
        watched.add((os.makedev(device >> 20, device & 0xFFFFF), int(match[1], 16)))
    missing = []
    for folder in folders:
        with contextlib.suppress(OSError):
            info = os.stat(folder)
            if (info.st_dev, info.st_ino) not in watched:
                missing.append(folder)
    return missing


class _ChangeFilter:
    """The changes that count: none inside a ``.git`` directory (a ``.git`` entry itself counts)
    nor beyond a symlink to a directory outside the roots (notify follows those)."""

    def __init__(self, roots: Sequence[Path]) -> None:
        self._roots = sorted(roots, key=lambda root: len(root.parts), reverse=True)

    def __call__(self, change: watchfiles.Change, path: str) -> bool:
        changed = Path(path)
        root = next((r for r in self._roots if changed.is_relative_to(r)), None)
        if root is None:
            return True  # not expected from notify; counting it costs only a full check
        parts = changed.relative_to(root).parts
        if ".git" in parts[:-1]:
            return False
        if len(parts) < 2:
            return True  # the root or an entry in it
        real_parent = Path(os.path.realpath(changed.parent))
        return any(real_parent.is_relative_to(r) for r in self._roots)


class _Readiness:
    """The stop event given to watchfiles, which asks it once a step: the first time, notify's
    watches are in place."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.ready = threading.Event()

    def is_set(self) -> bool:
        self.ready.set()
        return self.stop.is_set()


def _backend_problem(exc: Exception) -> str:
    """What a watchfiles error means for the watcher, in one line."""
    detail = _RUST_DETAIL.sub("", str(exc)).strip() or type(exc).__name__
    if "watch limit" in detail:
        place = _ABOUT.search(detail)
        where = f" at {place[1]}" if place else ""
        return (
            f"the inotify watch limit was reached{where} (raise the sysctl "
            "fs.inotify.max_user_watches)"
        )
    if isinstance(exc, PermissionError):
        return f"cannot watch a directory: {detail}"
    return f"the watcher stopped: {detail}"


class DirectoryWatcher:
    """A watch on everything under ``roots`` and a dirty flag (see the module).

    Returns once the watch is in place; a watcher that cannot be relied on has :attr:`problem`
    set and no thread. ``max_watches`` caps the directories it takes on (outside ``.git``; for
    tests and small budgets). ``mounts`` is the mount table (read from the system when None).
    """

    def __init__(
        self,
        roots: Sequence[Path],
        max_watches: int | None = None,
        mounts: Sequence[Mount] | None = None,
    ) -> None:
        self.problem: str | None = None  # why it cannot be relied on; None while it can
        self.is_stale = False  # start a new watcher: the one running misses things
        self.git_entries: list[Path] = []  # the .git entries under the roots (not followed)
        self._max_watches = max_watches
        self._directories = 0
        self._dirty = False
        self._lock = threading.Lock()  # the flags, set by the thread and read by callers
        self._readiness = _Readiness()
        self._thread: threading.Thread | None = None
        self._inotify: int | None = None  # notify's descriptor, where it can be told
        real = (Path(os.path.realpath(root)) for root in roots)
        self._roots = [root for root in dict.fromkeys(real) if root.is_dir()]
        self.problem = _remote_problem(self._roots, read_mounts() if mounts is None else mounts)
        if self.problem is None:
            self._start()

    def is_dirty(self) -> bool:
        """True when a change arrived since the last :meth:`clear`."""
        with self._lock:
            return self._dirty

    def clear(self) -> None:
        """Forget the changes so far: call it before a full check, so that a change during the
        check leaves the watcher dirty."""
        with self._lock:
            self._dirty = False

    def close(self) -> None:
        """Stop the thread, which gives the watches back (again: nothing to do)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._readiness.stop.set()
            thread.join()

    def __enter__(self) -> DirectoryWatcher:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self) -> None:
        try:
            folders, self.git_entries = _survey(self._roots, self._max_watches)
        except OSError as exc:
            self.problem = f"cannot list {exc.filename}: {(exc.strerror or str(exc)).lower()}"
            return
        self._directories = len(folders)
        if self._max_watches is not None and self._directories > self._max_watches:
            self.problem = f"more than {self._max_watches} directories to watch"
            return
        if not self._roots:
            return  # nothing to watch; a root that appears is a new layout for the caller
        self._thread = threading.Thread(target=self._run, name="semsearch-watch", daemon=True)
        with _starting:
            before = _inotify_descriptors()
            self._thread.start()
            self._readiness.ready.wait()
            mine = _inotify_descriptors() - before
        self._inotify = mine.pop() if len(mine) == 1 else None

    def _run(self) -> None:
        """The thread: count each batch of changes, until :meth:`close` or a problem."""
        import watchfiles  # its Rust module: loaded by a process that watches, not by a search

        batches = watchfiles.watch(
            *self._roots,
            watch_filter=_ChangeFilter(self._roots),
            debounce=DEBOUNCE_MS,
            step=STEP_MS,
            stop_event=self._readiness,
            rust_timeout=0,  # no timeout: the stop event is asked every step anyway
            debug=False,  # these four given, watchfiles reads no environment variable
            raise_interrupt=False,
            force_polling=False,
            ignore_permission_denied=False,
        )
        try:
            with contextlib.closing(batches):  # closing it gives notify's watches back
                for changes in batches:
                    self._count(changes)
                    if self.problem is not None:
                        return
        except Exception as exc:  # fail safe: unreliable (full checks), never silently blind
            # One line, not a traceback: what follows is the documented fallback.
            logger.warning("the directory watcher stopped (%s); full checks from now on", exc)
            logger.debug("the directory watcher's failure", exc_info=True)
            with self._lock:
                self.problem = _backend_problem(exc)
                self.is_stale = self.is_stale or isinstance(exc, FileNotFoundError)
        finally:
            self._readiness.ready.set()  # one that failed to start keeps no caller waiting

    def _count(self, changes: set[tuple[watchfiles.Change, str]]) -> None:
        """Mark the watcher dirty, after noting what the batch means for it."""
        from watchfiles import Change  # loaded already: _run imported watchfiles

        tops: list[Path] = []  # the new directories, none below another
        for kind, path in sorted(changes, key=lambda change: Path(change[1])):
            if kind != Change.added or (tops and Path(path).is_relative_to(tops[-1])):
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                tops.append(Path(path))
        problem, missing = None, []
        try:
            folders, git_entries = _survey(tops)
            total = self._directories + len(folders)
            if self._max_watches is not None and total > self._max_watches:
                total = len(_survey(self._roots, self._max_watches)[0])  # some may be gone
                if total > self._max_watches:
                    problem = f"more than {self._max_watches} directories to watch"
        except OSError as exc:  # notify cannot watch it either, and says nothing
            folders, git_entries, total = [], [], self._directories
            problem = f"cannot list {exc.filename}: {(exc.strerror or str(exc)).lower()}"
        if self._inotify is not None and folders:
            # notify 8.0 drops the error of a new directory it cannot watch (the inotify limit):
            # check that it watches them, after a step for any it has yet to reach
            missing = _unwatched(self._inotify, folders)
            if missing:
                time.sleep(STEP_MS / 1000)
                missing = _unwatched(self._inotify, missing)
            if missing:
                logger.warning("%s is not watched (the inotify watch limit?)", missing[0])
        new_repository = any(os.path.basename(path) == ".git" for _, path in changes)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%d changes: %s", len(changes), sorted(path for _, path in changes))
        with self._lock:
            self._directories = total
            if new_repository or git_entries or missing or len(changes) >= LARGE_BATCH:
                self.is_stale = True
            self.problem = self.problem or problem
            self._dirty = True
