"""A reader's copy on local disk of what it reads whole from an index on object storage.

A LanceDB version never changes once committed, so what was read of a table at a version is
kept under a name holding that version, and a new version is a new name: nothing is ever
invalidated, only superseded (the file of an older version of the same read is deleted when a
newer one is written). The folder is ``<root>/<uri key>/<index id>/``: the URI key is a hash
of the index's URI and endpoint (no credential goes into it), the index id a random id the
first writer records in meta, so that an index deleted and made again under the same prefix,
whose versions count from 1 again, never meets the copies of the one before.

Each file is an Arrow IPC file of the rows read (index content only: paths, chunk texts,
vectors; never a storage option), written to a temporary name and renamed, so that a reader
sees a whole file or none. A folder that cannot be made or written (a read-only home, a full
disk) leaves the reads as they were, and a file that cannot be read is read from the store
again: the cache only ever saves requests.

Imported by :mod:`semsearch.store.lance.store`, which checks first that the lancedb extra loads.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from semsearch.config import RemoteLocation

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def uri_key(location: RemoteLocation) -> str:
    """The folder name of an index's copies: its URI and endpoint, hashed."""
    text = f"{location.uri}\n{location.endpoint or ''}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class ReadCache:
    """Reads of an index on object storage, kept on local disk by table version."""

    def __init__(self, location: RemoteLocation) -> None:
        self._root = None if location.cache is None else location.cache / uri_key(location)
        self._folder: Path | None = None

    def use_index(self, index_id: str | None) -> None:
        """Keep copies for the index of this id (None: an index made before ids, kept none)."""
        if self._root is None or not index_id:
            self._folder = None
            return
        self._folder = self._root / _SAFE.sub("_", index_id)

    def read(self, name: str, version: str, load: Callable[[], pa.Table]) -> pa.Table:
        """The read ``name`` of a table version: from disk when it is there, else ``load()``,
        which is then kept (superseding the copy of any other version of ``name``)."""
        folder = self._folder
        if folder is None:
            return load()
        path = folder / f"{name}@{version}.arrow"
        with contextlib.suppress(OSError, pa.ArrowException), pa.memory_map(str(path)) as source:
            return pa.ipc.open_file(source).read_all()
        table = load()
        with contextlib.suppress(OSError, pa.ArrowException):
            self._keep(folder, path, table)
        return table

    def _keep(self, folder: Path, path: Path, table: pa.Table) -> None:
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            for other in folder.parent.iterdir():  # copies of an index deleted and made again
                if other != folder and other.is_dir():
                    shutil.rmtree(other, ignore_errors=True)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".making-", suffix=".arrow")
        try:
            with os.fdopen(handle, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            os.replace(temporary, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        name = path.name.split("@", 1)[0]
        for older in folder.glob(f"{name}@*.arrow"):
            if older != path:
                with contextlib.suppress(OSError):
                    older.unlink()
