"""The advisory writer lock beside an index: one index run (or removal) writes at a time.

The lock is the operating system's lock on the file `<index>.lock` (``flock``, or ``LockFileEx``
on Windows, both through filelock), so it ends with the process holding it, even one killed.
Where there is no such lock (``ENOSYS``), filelock's soft lock `<index>.lock.soft` stands in: a
marker file that filelock takes over once the process that made it is gone.

The lock file holds ``PID START_TIME`` (a Unix time) of the process holding it, so a second run
can say whom it waits for. A space comes first: on Windows the lock covers the first byte, which
other processes cannot read. Every write happens under the lock, so a write that fails for want
of space or access (LanceDB's errors, untyped) is translated here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from semsearch.errors import DiskFullError, LockedError, ReadOnlyError, StoreError

if TYPE_CHECKING:
    from filelock import BaseFileLock


@dataclass(frozen=True)
class LockHolder:
    """The process holding the writer lock, as its lock file tells (None when unreadable);
    ``host`` names its machine when that may be another (the lease of an index on object
    storage)."""

    pid: int | None
    started: float | None
    host: str | None = None

    def describe(self) -> str:
        """``pid 123, started 2026-12-01 10:02:03`` (or what of it is known), with ``on HOST``
        after the pid when the host is known."""
        if self.pid is None or self.started is None:
            return "pid unknown"
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        where = f" on {self.host}" if self.host else ""
        return f"pid {self.pid}{where}, started {stamp}"


def is_writable(index_path: Path) -> bool:
    """Whether this process may change the index (the file or folder, and what holds it)."""
    return os.access(index_path, os.W_OK) and os.access(index_path.parent, os.W_OK)


def read_only_message(index_path: Path) -> str:
    """What to tell a user who asks to change an index on read-only media or without access."""
    return (
        f"Index {index_path} is read-only: it can be searched but not updated. "
        "Copy it somewhere writable (and pass `--index COPY`) to index or remove folders."
    )


def disk_full_message(index_path: Path) -> str:
    """What to tell a user whose write to the index failed for want of space."""
    return (
        f"Cannot write index {index_path}: disk full. Free some space, then run "
        "`semsearch index` again: what was written is kept and the run resumes."
    )


def read_holder(lock_path: Path) -> LockHolder:
    """Who holds the lock, from the lock file's ``PID START_TIME``."""
    try:
        with lock_path.open("rb") as handle:
            try:
                record = handle.read()
            except OSError:  # Windows: the holder's lock covers the first byte
                handle.seek(1)
                record = handle.read()
        pid, started = record.decode("ascii").split()
        return LockHolder(int(pid), float(started))
    except (OSError, ValueError, UnicodeDecodeError):
        return LockHolder(None, None)


@contextlib.contextmanager
def write_lock(
    index_path: Path,
    wait_seconds: float,
    on_wait: Callable[[LockHolder], None] | None = None,
) -> Iterator[None]:
    """Hold the advisory writer lock `<index>.lock`, waiting up to ``wait_seconds`` for it.

    ``index_path`` is the SQLite file or the LanceDB folder; the lock file sits next to it.
    ``on_wait`` is called once, with the holder, as soon as the lock is found taken. Raises
    ``ReadOnlyError`` when the index cannot be written, ``LockedError`` when another writer
    still holds the lock after the wait.
    """
    if index_path.exists() and not is_writable(index_path):
        raise ReadOnlyError(read_only_message(index_path))
    lock_path = index_path.with_name(index_path.name + ".lock")
    try:
        index_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o600)
    except OSError as exc:
        raise StoreError(
            f"Cannot create index {index_path}: {exc.strerror}. "
            "Choose a writable place with `--index PATH`."
        ) from exc
    lock = _Lock(fd, lock_path)
    try:
        _acquire(lock, index_path, lock_path, wait_seconds, on_wait)
        with contextlib.suppress(OSError):  # who holds it is a courtesy to waiters
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, f" {os.getpid()} {time.time():.3f}\n".encode("ascii"))
        try:
            yield
        except (OSError, RuntimeError) as exc:  # LanceDB reports a full disk as these
            medium = _medium_error(index_path, exc)
            if medium is None:
                raise
            raise medium from exc
    finally:
        try:
            lock.release()
        finally:
            os.close(fd)  # which ends the operating system's lock


def is_medium_failure(exc: Exception) -> bool:
    """Whether an error is a write that failed for want of space or write access (the medium,
    not the index: ``write_lock`` translates it)."""
    return _medium_error(Path(), exc) is not None


def _medium_error(index_path: Path, exc: Exception) -> StoreError | None:
    """A write under the lock that failed for want of space or write access, in one line."""
    number = getattr(exc, "errno", None)
    if number == errno.ENOSPC or "No space left on device" in str(exc):
        return DiskFullError(disk_full_message(index_path))
    if number == errno.EROFS or "Read-only file system" in str(exc):
        return ReadOnlyError(read_only_message(index_path))
    return None


class _Lock:
    """The operating system's lock on the lock file's descriptor, or the soft lock beside it
    where there is none (see the module)."""

    def __init__(self, fd: int, lock_path: Path) -> None:
        self._fd = fd
        self._soft_path = lock_path.with_name(lock_path.name + ".soft")
        self._soft: BaseFileLock | None = None

    def try_acquire(self) -> bool:
        """Take the lock if it is free; False when another process holds it."""
        import filelock  # ~10 ms to import: only a writer takes the lock, never a search

        if self._soft is None:
            try:
                return filelock.lock_descriptor(self._fd, blocking=False)
            except OSError as exc:
                if exc.errno != errno.ENOSYS:
                    raise
                self._soft = filelock.SoftFileLock(self._soft_path)
        try:
            self._soft.acquire(blocking=False)
        except filelock.Timeout:
            return False
        return True

    def release(self) -> None:
        """Give back the soft lock (the operating system's goes with the descriptor)."""
        if self._soft is not None and self._soft.is_locked:
            self._soft.release()


def _acquire(
    lock: _Lock,
    index_path: Path,
    lock_path: Path,
    wait_seconds: float,
    on_wait: Callable[[LockHolder], None] | None,
) -> None:
    deadline = time.monotonic() + wait_seconds
    told = False
    while True:
        try:
            if lock.try_acquire():
                return
        except OSError as exc:
            raise StoreError(
                f"Cannot lock index {index_path}: {exc.strerror or exc}. "
                "Put the index on a local disk with `--index PATH`."
            ) from exc
        holder = read_holder(lock_path)
        if time.monotonic() >= deadline:
            raise LockedError(
                f"Another `semsearch index` is writing {index_path} ({holder.describe()}). "
                "Wait for it to finish, then run this again."
            )
        if on_wait is not None and not told:
            on_wait(holder)
            told = True
        time.sleep(0.2)
