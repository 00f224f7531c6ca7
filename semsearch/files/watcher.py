"""Directory change events on Linux: inotify through ctypes, one watch per directory.

:class:`DirectoryWatcher` watches every directory under some roots (not inside a ``.git``
directory: :mod:`.changes` follows git's own files by their stat) and reads the events
in a daemon thread. Any event marks it dirty until :meth:`~DirectoryWatcher.clear`; it does not
say what changed (a caller that sees it dirty runs its full check). A directory created or moved
in is watched, with everything below it, before the event that announced it counts, so a change
inside it after a check is never missed.

It cannot be relied on, and :attr:`~DirectoryWatcher.problem` says why, off Linux, for a root on
a file system that others change without this kernel seeing it (NFS, SMB, FUSE, 9p as in WSL's
``/mnt/c``, cluster file systems), when a directory cannot be watched (the
``fs.inotify.max_user_watches`` limit, permissions, the ``max_watches`` given) or after the
kernel's event queue overflowed. It is :attr:`~DirectoryWatcher.is_stale` (start a new one)
after an overflow, an unmount, or when a ``.git`` entry came or went under a root.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import select
import struct
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

logger = logging.getLogger("semsearch.watch")

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_UNMOUNT = 0x2000
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_DONT_FOLLOW = 0x2000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000  # O_NONBLOCK and O_CLOEXEC on Linux
IN_CLOEXEC = 0o2000000

WATCH_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
)
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name
_READ_SIZE = 64 * 1024
_STATFS_SIZE = 256  # struct statfs is 120 bytes on x86-64 and arm64; f_type comes first

REMOTE_FILE_SYSTEMS: dict[int, str] = {
    0x6969: "NFS",
    0x517B: "SMB",
    0xFF534D42: "CIFS",
    0xFE534D42: "SMB2",
    0x65735546: "FUSE",  # sshfs, virtiofs, gcsfuse, ...: changes may come from elsewhere
    0x01021997: "9p",  # WSL's /mnt/c, QEMU shares
    0x00C36400: "Ceph",
    0x5346414F: "AFS",
    0x6B414653: "AFS",
    0x73757245: "Coda",
    0x786F4256: "vboxsf",
    0x0BD00BD0: "Lustre",
    0x01161970: "GFS2",
    0x7461636F: "OCFS2",
}
"""statfs magic numbers of file systems where files change without this kernel's knowledge,
so inotify does not see every change."""


@functools.cache
def _libc() -> Any:
    """The C library, with inotify and statfs; OSError off Linux or without them."""
    if not sys.platform.startswith("linux"):
        raise OSError(f"inotify is Linux only (this is {sys.platform})")
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.statfs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    except AttributeError as exc:
        raise OSError(f"the C library has no inotify ({exc})") from exc
    return libc


def file_system_magic(path: Path) -> int | None:
    """statfs's ``f_type`` of the file system holding ``path``; None when statfs fails."""
    buffer = ctypes.create_string_buffer(_STATFS_SIZE)
    if _libc().statfs(os.fsencode(path), buffer) != 0:
        return None
    return int(ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF)


def remote_file_system(path: Path) -> str | None:
    """The name of the network, FUSE or cluster file system holding ``path``; None otherwise
    (also when statfs fails: the watch that follows then fails too)."""
    magic = file_system_magic(path)
    return None if magic is None else REMOTE_FILE_SYSTEMS.get(magic)


def _watch_problem(folder: Path, code: int) -> str:
    if code == errno.ENOSPC:
        return (
            f"the inotify watch limit was reached at {folder} (raise the sysctl "
            "fs.inotify.max_user_watches)"
        )
    return f"cannot watch {folder}: {os.strerror(code).lower()}"


class DirectoryWatcher:
    """inotify watches on every directory under ``roots`` and a dirty flag (see the module).

    Starts at once; a watcher that cannot be relied on has :attr:`problem` set and no thread.
    ``max_watches`` lowers the number of directories it takes on (for tests and small budgets).
    """

    def __init__(self, roots: Sequence[Path], max_watches: int | None = None) -> None:
        self.problem: str | None = None  # why it cannot be relied on; None while it can
        self.is_stale = False  # start a new watcher: the one running misses things
        self.git_entries: list[Path] = []  # the .git entries under the roots (not followed)
        self._max_watches = max_watches
        self._dirty = False
        self._lock = threading.Lock()  # the event reading, from the thread or a caller
        self._paths: dict[int, Path] = {}  # watch descriptor → directory
        self._fd = -1
        self._wake = (-1, -1)  # a pipe that stops the thread
        self._thread: threading.Thread | None = None
        self._start(roots)

    @property
    def watches(self) -> int:
        """How many directories are watched."""
        return len(self._paths)

    def is_dirty(self) -> bool:
        """True when an event arrived since the last :meth:`clear` (queued events count)."""
        with self._lock:
            self._drain()
            return self._dirty

    def clear(self) -> None:
        """Forget the events so far, queued ones too: call it before a full check, so that an
        event during the check leaves the watcher dirty."""
        with self._lock:
            self._drain()
            self._dirty = False

    def close(self) -> None:
        """Stop the thread and close the inotify descriptor (again: nothing to do)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            os.write(self._wake[1], b"x")
            thread.join()
        with self._lock:
            self._release()
            for fd in self._wake:
                if fd >= 0:
                    os.close(fd)
            self._wake = (-1, -1)

    def __enter__(self) -> DirectoryWatcher:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self, roots: Sequence[Path]) -> None:
        try:
            self._fd = int(_libc().inotify_init1(IN_NONBLOCK | IN_CLOEXEC))
            if self._fd < 0:
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
            for root in roots:
                if self.problem is None:
                    self._add_tree(Path(os.path.realpath(root)), is_new=False)
            if self.problem is None:
                self._wake = os.pipe()
                self._thread = threading.Thread(
                    target=self._run, name="semsearch-watch", daemon=True
                )
                self._thread.start()
        except OSError as exc:
            self.problem = f"inotify is not available: {exc}"
        if self.problem is not None:
            self._release()

    def _release(self) -> None:
        """Close the inotify descriptor, which drops every watch (call with the lock held, or
        before the thread starts)."""
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1
        self._paths.clear()

    def _add_tree(self, top: Path, is_new: bool) -> None:
        """Watch ``top`` and every directory below it, not following symlinks nor entering
        ``.git``; a directory on a remote file system makes the watcher unreliable."""
        pending: list[tuple[Path, int]] = [(top, -1)]  # directory, its parent's st_dev
        walked: set[int] = set()
        while pending and self.problem is None:
            folder, parent_device = pending.pop()
            try:
                device = os.lstat(folder).st_dev
            except OSError:
                continue  # gone since it was listed: its parent's watch saw that
            if device != parent_device and (kind := remote_file_system(folder)):
                self.problem = f"{folder} is on a {kind} file system, whose changes inotify misses"
                return
            wd = self._add_watch(folder)
            if wd is None or wd in walked:
                continue
            walked.add(wd)
            for entry in self._entries(folder):
                if entry.name == ".git":
                    self.git_entries.append(Path(entry.path))
                    self.is_stale = self.is_stale or is_new
                elif entry.is_dir(follow_symlinks=False):
                    pending.append((Path(entry.path), device))

    def _add_watch(self, folder: Path) -> int | None:
        """The watch descriptor of ``folder`` (the same one again for a watched directory);
        None when it is gone, or when it cannot be watched (then :attr:`problem` says why)."""
        wd = int(_libc().inotify_add_watch(self._fd, os.fsencode(folder), WATCH_MASK))
        if wd < 0:
            code = ctypes.get_errno()
            if code not in (errno.ENOENT, errno.ENOTDIR):  # those: gone or replaced, and seen
                self.problem = _watch_problem(folder, code)
            return None
        self._paths[wd] = folder
        if self._max_watches is not None and len(self._paths) > self._max_watches:
            self.problem = f"more than {self._max_watches} directories to watch"
        return wd

    def _entries(self, folder: Path) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(folder) as entries:
                return list(entries)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            self.problem = f"cannot list {folder}: {(exc.strerror or str(exc)).lower()}"
            return []

    def _run(self) -> None:
        """The thread: read events as they come, until :meth:`close` or a problem."""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake[0], select.POLLIN)
        try:
            while self.problem is None:
                if any(fd == self._wake[0] for fd, _ in poller.poll()):
                    return
                with self._lock:
                    self._drain()
        except Exception as exc:  # fail safe: unreliable (full checks), never silently blind
            logger.warning("the directory watcher stopped: %s", exc, exc_info=True)
            self.problem = f"the watcher stopped: {exc}"
        with self._lock:  # unreliable from now on: give the watches back to the system
            self._release()

    def _drain(self) -> None:
        """Read and handle every queued event (call with the lock held)."""
        while self._fd >= 0 and self.problem is None:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return
            except OSError as exc:
                self.problem = f"reading inotify events failed: {exc}"
                return
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _cookie, size = _EVENT.unpack_from(data, offset)
                start = offset + _EVENT.size
                offset = start + size
                self._handle(wd, mask, os.fsdecode(data[start:offset].split(b"\0", 1)[0]))
            self._dirty = True  # after the new directories' watches are in place

    def _handle(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            self.problem = "more changes at once than the inotify queue holds"
            self.is_stale = True
            return
        if mask & IN_UNMOUNT:
            self.is_stale = True
        if mask & IN_IGNORED:  # the directory is gone (or unmounted): its watch with it
            self._paths.pop(wd, None)
            return
        folder = self._paths.get(wd)
        if folder is None or not name:
            return
        if name == ".git":
            self.is_stale = True  # a repository came, went or moved: other git files decide
        elif mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
            self._add_tree(folder / name, is_new=True)
