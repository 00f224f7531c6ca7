"""A damaged index: whether there is an index at all."""

from __future__ import annotations

from pathlib import Path

from semsearch.store.lance import is_index_folder
from semsearch.store.sqlite.schema import is_index_file


def has_index(backend: str, path: Path) -> bool:
    """Whether an index is at ``path``, damaged or not. A zero-byte file (what an index run
    stopped before its first commit leaves) or an empty LanceDB folder is none yet."""
    return is_index_folder(path) if backend == "lancedb" else is_index_file(path)
