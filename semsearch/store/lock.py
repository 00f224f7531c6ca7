"""The advisory writer lock beside an index: one index run (or removal) writes at a time."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from semsearch.errors import LockedError


@contextlib.contextmanager
def write_lock(index_path: Path, wait_seconds: float) -> Iterator[None]:
    """Hold the advisory writer lock `<index>.lock`, waiting up to ``wait_seconds`` for it.

    ``index_path`` is the SQLite file or the LanceDB folder; the lock file sits next to it.
    Raises ``LockedError`` when another writer still holds it after the wait.
    """
    index_path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = index_path.with_name(index_path.name + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockedError(
                        f"Another `semsearch index` is writing {index_path}. "
                        "Wait for it to finish, then run this again."
                    ) from None
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)
