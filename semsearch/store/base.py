"""What every index backend is: the :class:`Store` protocol and the records it reads and writes.

No backend is imported here; both import this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from semsearch.lexical import LexicalQuery

IdArray = np.ndarray[Any, np.dtype[np.int64]]
FloatArray = np.ndarray[Any, np.dtype[np.float32]]


@dataclass(frozen=True)
class Folder:
    """An indexed folder and its counts."""

    id: int
    path: str
    name: str
    last_indexed: float | None
    files: int
    chunks: int


@dataclass(frozen=True)
class FileState:
    """What the index remembers about one file."""

    id: int
    rel: str
    mtime_ns: int
    size: int
    sha256: str | None
    status: str


@dataclass(frozen=True)
class ChunkRecord:
    """A chunk to write (its vector travels separately, as a matrix row)."""

    start_line: int
    end_line: int
    start_offset: int
    end_offset: int
    page: int | None
    text: str


@dataclass(frozen=True)
class FileWrite:
    """Replace one file's row and chunks. ``chunks`` is empty for non-ok statuses."""

    folder_id: int
    rel: str
    mtime_ns: int
    size: int
    sha256: str | None
    status: str
    kind: str
    chunks: tuple[ChunkRecord, ...] = ()
    vectors: FloatArray | None = None


@dataclass(frozen=True)
class ChunkRow:
    """A stored chunk with its file and folder, as search returns it."""

    id: int
    file_id: int
    folder_path: str
    folder_name: str
    rel: str
    kind: str
    start_line: int
    end_line: int
    page: int | None
    text: str


@dataclass(frozen=True)
class FileRef:
    """A file's id, folder and relative path (the search filter works on these)."""

    id: int
    folder_id: int
    folder_name: str
    folder_path: str
    rel: str


class Store(Protocol):
    """What the indexer and search need from an index backend.

    Vector search: a store without an ANN index (``has_ann()`` false) hands its vectors to the
    caller's in-memory exact search (``vectors``, ``chunk_ids``); one with an ANN index answers
    ``ann_search`` itself. ``maintain`` runs after every index run and folder removal.
    """

    path: Path  # where the index lives, for messages

    def generation(self) -> int: ...
    def model(self) -> tuple[str, int] | None: ...
    def set_model(self, model_id: str, dim: int) -> None: ...
    def ensure_folder(self, path: str, name: str) -> int: ...
    def folders(self) -> list[Folder]: ...
    def file_states(self, folder_id: int) -> dict[str, FileState]: ...
    def file_refs(self) -> list[FileRef]: ...
    def write_files(self, writes: Sequence[FileWrite]) -> None: ...
    def touch_files(self, touches: Sequence[tuple[int, int]]) -> None: ...
    def delete_files(self, folder_id: int, rels: Iterable[str]) -> int: ...
    def remove_folder(self, path: str) -> int: ...
    def mark_indexed(self, folder_id: int) -> None: ...
    def clear_chunks(self) -> None: ...
    def chunk_count(self) -> int: ...
    def chunk_ids(self) -> IdArray: ...
    def vectors(self, min_id: int) -> tuple[IdArray, IdArray, FloatArray]: ...
    def has_ann(self) -> bool: ...
    def ann_search(
        self, query: np.ndarray[Any, Any], pool: int, file_ids: np.ndarray[Any, Any] | None
    ) -> list[tuple[int, float]]: ...
    def lexical(
        self, query: LexicalQuery, limit: int, file_ids: Sequence[int] | None
    ) -> list[int]: ...
    def chunks(self, ids: Sequence[int]) -> list[ChunkRow]: ...
    def maintain(self) -> None: ...
    def size_bytes(self) -> int: ...
    def close(self) -> None: ...


def model_mismatch_message(path: Path, stored: str, current: str) -> str:
    """The message for an index built with another model."""
    return (
        f"The index {path} was built with model {stored}, but the configured model is {current}. "
        "Rebuild it with `semsearch index --force`, or point --index at another file."
    )
