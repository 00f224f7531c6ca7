"""The LanceDB backend's tables: Arrow schemas, chunk rows, a cache of the small tables.

Imported by :mod:`semsearch.store.lance`, which checks first that the lancedb extra loads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from semsearch.lexical import chunk_terms, definitions
from semsearch.store.base import ChunkRow, FileWrite, FloatArray, Folder, IdArray

T = TypeVar("T")

META = pa.schema([("key", pa.string()), ("value", pa.string())])
FOLDERS = pa.schema(
    [
        ("id", pa.int64()),
        ("path", pa.string()),
        ("name", pa.string()),
        ("last_indexed", pa.float64()),
    ]
)
FILES = pa.schema(
    [
        ("id", pa.int64()),
        ("folder_id", pa.int64()),
        ("rel", pa.string()),
        ("mtime_ns", pa.int64()),
        ("size", pa.int64()),
        ("sha256", pa.string()),
        ("status", pa.string()),
        ("kind", pa.string()),
    ]
)


def chunk_schema(dim: int) -> pa.Schema:
    """The chunks table's schema for vectors of ``dim`` dimensions."""
    return pa.schema(
        [
            ("id", pa.int64()),
            ("file_id", pa.int64()),
            ("ord", pa.int32()),
            ("start_line", pa.int32()),
            ("end_line", pa.int32()),
            ("start_offset", pa.int64()),
            ("end_offset", pa.int64()),
            ("page", pa.int32()),
            ("text", pa.string()),
            ("terms", pa.string()),
            ("defines", pa.string()),
            ("vector", pa.list_(pa.float32(), dim)),
        ]
    )


class TableRows:
    """A small table's rows by id, read again only when the table has a new version."""

    def __init__(self, table: Any) -> None:
        self._table = table
        self._version = -1
        self._rows: dict[int, dict[str, Any]] = {}

    def rows(self) -> dict[int, dict[str, Any]]:
        """id → row; the same dict until the table changes."""
        version = self._table.version
        if version != self._version:
            self._rows = {row["id"]: row for row in self._table.to_arrow().to_pylist()}
            self._version = version
        return self._rows


def chunk_rows(write: FileWrite, file_id: int, first: int) -> pa.Table:
    """A file's chunks as rows of the chunks table, with ids from ``first`` on."""
    assert write.vectors is not None
    count = len(write.chunks)
    vectors = np.ascontiguousarray(write.vectors, dtype=np.float32)
    dim = vectors.shape[1]
    chunks = write.chunks
    columns = {
        "id": pa.array(np.arange(first, first + count, dtype=np.int64)),
        "file_id": pa.array(np.full(count, file_id, dtype=np.int64)),
        "ord": pa.array(np.arange(count, dtype=np.int32)),
        "start_line": pa.array([c.start_line for c in chunks], pa.int32()),
        "end_line": pa.array([c.end_line for c in chunks], pa.int32()),
        "start_offset": pa.array([c.start_offset for c in chunks], pa.int64()),
        "end_offset": pa.array([c.end_offset for c in chunks], pa.int64()),
        "page": pa.array([c.page for c in chunks], pa.int32()),
        "text": pa.array([c.text for c in chunks], pa.string()),
        "terms": pa.array([chunk_terms(write.rel, c.text) for c in chunks], pa.string()),
        "defines": pa.array([" ".join(definitions(c.text)) for c in chunks], pa.string()),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim),
    }
    return pa.Table.from_pydict(columns, schema=chunk_schema(dim))


def file_row(write: FileWrite, file_id: int) -> dict[str, Any]:
    """A file's row of the files table."""
    return {
        "id": file_id,
        "folder_id": write.folder_id,
        "rel": write.rel,
        "mtime_ns": write.mtime_ns,
        "size": write.size,
        "sha256": write.sha256,
        "status": write.status,
        "kind": write.kind,
    }


def vector_arrays(table: pa.Table, dim: int) -> tuple[IdArray, IdArray, FloatArray]:
    """(chunk ids, file ids, float32 matrix) of chunk rows (id, file_id, vector), in id order."""
    order = np.argsort(table["id"].to_numpy(), kind="stable")
    flat = table["vector"].combine_chunks().flatten().to_numpy()
    matrix = np.asarray(flat, dtype=np.float32).reshape(-1, dim)[order]
    ids = table["id"].to_numpy()[order]
    return ids, table["file_id"].to_numpy()[order], np.ascontiguousarray(matrix)


def chunk_row(
    row: dict[str, Any], files: dict[int, dict[str, Any]], folders: dict[int, dict[str, Any]]
) -> ChunkRow | None:
    """A row of the chunks table as a ChunkRow; None when its file or folder row is missing."""
    file = files.get(row["file_id"])
    folder = folders.get(file["folder_id"]) if file is not None else None
    if file is None or folder is None:
        return None
    return ChunkRow(
        row["id"],
        row["file_id"],
        folder["path"],
        folder["name"],
        file["rel"],
        file["kind"],
        row["start_line"],
        row["end_line"],
        row["page"],
        row["text"],
    )


def retagged(table: pa.Table, files: dict[int, dict[str, Any]]) -> pa.Table:
    """The ``terms`` and ``defines`` columns, by today's rules, of chunks (id, file_id, text)."""
    rows = table.to_pylist()
    rels = [files[r["file_id"]]["rel"] if r["file_id"] in files else "" for r in rows]
    return pa.table(
        {
            "id": table["id"],
            "terms": [chunk_terms(rel, r["text"]) for rel, r in zip(rels, rows, strict=True)],
            "defines": [" ".join(definitions(r["text"])) for r in rows],
        }
    )


def ids_sql(values: Iterable[int]) -> str:
    """Integers as a SQL list for a LanceDB filter (``IN (...)``); ints only, never text."""
    return ",".join(str(int(v)) for v in values)


def retry(run: Callable[[], T]) -> T:
    """Run a read; once more if it raced a writer that cleaned up the version it was reading."""
    try:
        return run()
    except (OSError, RuntimeError, ValueError):
        return run()


def folder_records(
    folders: dict[int, dict[str, Any]],
    files: dict[int, dict[str, Any]],
    per_file: dict[int, int],
) -> list[Folder]:
    """The folders table's rows as records, with their ok files and chunks counted."""
    ok_files: dict[int, int] = {}
    chunk_counts: dict[int, int] = {}
    for file in files.values():
        folder_id = file["folder_id"]
        ok_files[folder_id] = ok_files.get(folder_id, 0) + (file["status"] == "ok")
        chunk_counts[folder_id] = chunk_counts.get(folder_id, 0) + per_file.get(file["id"], 0)
    result = [
        Folder(
            row["id"],
            row["path"],
            row["name"],
            row["last_indexed"],
            ok_files.get(row["id"], 0),
            chunk_counts.get(row["id"], 0),
        )
        for row in folders.values()
    ]
    return sorted(result, key=lambda f: f.path)
