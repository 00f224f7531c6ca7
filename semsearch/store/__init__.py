"""The index store: one :class:`Store` protocol, a SQLite backend and an optional LanceDB one.

``open_store`` picks the backend; lancedb and pyarrow are imported only when LanceDB is chosen.
The modules: ``base`` (the protocol and its records), ``sqlite`` (the default single-file index
and its on-disk format), ``lance`` (the LanceDB folder), ``exact`` (in-memory exact vector
search, used by both), ``lock`` (the writer lock) and ``repair`` (a damaged index: the full
check, and setting it aside).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from semsearch.config import Location
from semsearch.store.base import (
    ChooseCopy,
    ChunkPlace,
    ChunkRecord,
    ChunkRow,
    FileRef,
    FileState,
    FileWrite,
    Folder,
    IndexCheck,
    Store,
    model_mismatch_message,
    text_hash,
)
from semsearch.store.lease import write_lease
from semsearch.store.lock import LockHolder
from semsearch.store.lock import is_writable as _is_writable
from semsearch.store.lock import write_lock as _write_lock
from semsearch.store.repair import check_index, has_index, set_aside
from semsearch.store.sqlite.store import SqliteStore

__all__ = [
    "ChooseCopy",
    "ChunkPlace",
    "ChunkRecord",
    "ChunkRow",
    "FileRef",
    "FileState",
    "FileWrite",
    "Folder",
    "IndexCheck",
    "LockHolder",
    "SqliteStore",
    "Store",
    "check_index",
    "has_index",
    "is_writable",
    "model_mismatch_message",
    "open_store",
    "set_aside",
    "text_hash",
    "write_lock",
]


def open_store(backend: str, path: Location, *, create: bool = False) -> Store:
    """The store of a backend (``sqlite`` or ``lancedb``) at ``path``.

    Raises ``IndexMissingError`` when there is no index at ``path`` and ``create`` is false,
    ``StoreError`` when ``path`` is not a semsearch index, and ``ConfigError`` when LanceDB is
    chosen but its extra is not installed.
    """
    if backend == "lancedb":
        # an optional extra: loaded only when chosen
        from semsearch.store.lance.store import LanceStore

        return LanceStore(path, create=create)
    assert isinstance(path, Path), "config refuses an object store for SQLite"
    return SqliteStore(path, create=create)


@contextlib.contextmanager
def write_lock(
    path: Location, wait_seconds: float, on_wait: Callable[[LockHolder], None] | None = None
) -> Iterator[None]:
    """Hold the writer lock of the index at ``path``: the lock file beside a local index
    (:func:`semsearch.store.lock.write_lock`), the lease object of one on object storage
    (:func:`semsearch.store.lease.write_lease`)."""
    held = (
        _write_lock(path, wait_seconds, on_wait)
        if isinstance(path, Path)
        else write_lease(path, wait_seconds, on_wait)
    )
    with held:
        yield


def is_writable(path: Location) -> bool:
    """Whether this process may change the index at ``path`` (on object storage only a write
    tells: assumed)."""
    return _is_writable(path) if isinstance(path, Path) else True
