"""The index store: the SQLite backend (``sqlite``) and the optional LanceDB one (``lance``)."""

from __future__ import annotations

from semsearch.store.sqlite import (
    ChunkRecord,
    ChunkRow,
    FileRef,
    FileState,
    FileWrite,
    Folder,
    SqliteStore,
    Store,
    model_mismatch_message,
    open_store,
    write_lock,
)

__all__ = [
    "ChunkRecord",
    "ChunkRow",
    "FileRef",
    "FileState",
    "FileWrite",
    "Folder",
    "SqliteStore",
    "Store",
    "model_mismatch_message",
    "open_store",
    "write_lock",
]
