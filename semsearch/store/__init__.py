"""The index store: one :class:`Store` protocol, a SQLite backend and an optional LanceDB one.

``open_store`` picks the backend; lancedb and pyarrow are imported only when LanceDB is chosen.
The modules: ``base`` (the protocol and its records), ``sqlite`` (the default single-file index
and its on-disk format), ``lance`` (the LanceDB folder), ``exact`` (in-memory exact vector
search, used by both), ``lock`` (the writer lock) and ``repair`` (a damaged index: the full
check, and setting it aside).
"""

from __future__ import annotations

from pathlib import Path

from semsearch.store.base import (
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
from semsearch.store.lock import LockHolder, is_writable, write_lock
from semsearch.store.repair import check_index, has_index, set_aside
from semsearch.store.sqlite.store import SqliteStore

__all__ = [
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


def open_store(backend: str, path: Path, *, create: bool = False) -> Store:
    """The store of a backend (``sqlite`` or ``lancedb``) at ``path``.

    Raises ``IndexMissingError`` when there is no index at ``path`` and ``create`` is false,
    ``StoreError`` when ``path`` is not a semsearch index, and ``ConfigError`` when LanceDB is
    chosen but its extra is not installed.
    """
    if backend == "lancedb":
        # an optional extra: loaded only when chosen
        from semsearch.store.lance.store import LanceStore

        return LanceStore(path, create=create)
    return SqliteStore(path, create=create)
