"""The LanceDB backend's tables: Arrow schemas, chunk rows, a cache of the small tables.

Imported by :mod:`semsearch.store.lance.store`, which checks first that the lancedb extra loads.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from semsearch.store.base import (
    ChunkRecord,
    ChunkRow,
    FileWrite,
    FloatArray,
    Folder,
    IdArray,
    listed_rel,
    stored_rel,
    text_hash,
)
from semsearch.store.lance.cache import ReadCache
from semsearch.text.lexical import chunk_defines, chunk_terms

T = TypeVar("T")

HAS_VECTOR = "has_vector = true"  # filters of the chunks table
PENDING = "has_vector = false"

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
            ("text_hash", pa.string()),
            ("has_vector", pa.bool_()),
        ]
    )


class Pins:
    """Tables' versions as one search reads them (``LanceStore.reading``): each asked once.

    A local index's tables are opened to see every commit at once (a read consistency interval
    of 0), so each ``table.version`` looks at the disk for a newer one: ~0.25 ms, 28 times in
    a warm hybrid search of a tree of copies (bench/RESULTS.md, session 32). Within
    :meth:`pinned` the first answer for a table stands; a search entered later starts afresh,
    so a long-running server that searches without pause still sees each new index run."""

    def __init__(self) -> None:
        self._pinned: dict[int, tuple[Any, int]] | None = None
        self._lock = threading.Lock()  # both arms of a hybrid search ask for the chunks' at once

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """Versions read once each until the block ends (or another search begins)."""
        mine: dict[int, tuple[Any, int]] = {}
        self._pinned = mine
        try:
            yield
        finally:
            if self._pinned is mine:
                self._pinned = None

    def of(self, table: Any) -> int:
        """The table's version: the one pinned for it, else its latest."""
        pinned = self._pinned
        if pinned is None:
            return int(table.version)
        with self._lock:
            known = pinned.get(id(table))
            if known is None or known[0] is not table:
                known = pinned[id(table)] = (table, int(table.version))
        return known[1]


class TableRows:
    """A small table's rows by id, read again only when the table has a new version; with
    ``has_rel`` (the files table) each row's ``rel`` is as the listing gives it
    (:func:`~semsearch.store.base.listed_rel`). With a ``cache`` (an index on object storage)
    a version read once is read from local disk by the next process."""

    def __init__(
        self,
        table: Any,
        has_rel: bool = False,
        cache: tuple[ReadCache, str] | None = None,
        versions: Pins | None = None,
    ) -> None:
        self._table = table
        self._has_rel = has_rel
        self._cache = cache
        self._versions = versions or Pins()
        self._version = -1
        self._rows: dict[int, dict[str, Any]] = {}

    def rows(self) -> dict[int, dict[str, Any]]:
        """id → row; the same dict until the table changes."""
        version = self._versions.of(self._table)
        if version != self._version:
            if self._cache is None:
                rows = self._table.to_arrow().to_pylist()
            else:
                cache, name = self._cache
                rows = cache.read(name, str(version), self._table.to_arrow).to_pylist()
            if self._has_rel:
                rows = [{**row, "rel": listed_rel(row["rel"])} for row in rows]
            self._rows = {row["id"]: row for row in rows}
            self._version = version
        return self._rows


def files_table(rows: Iterable[dict[str, Any]]) -> pa.Table:
    """Rows of the files table (their ``rel`` as the listing gives it) as the table stores them
    (:func:`~semsearch.store.base.stored_rel`)."""
    return pa.Table.from_pylist([{**row, "rel": stored_rel(row["rel"])} for row in rows], FILES)


def chunk_rows(
    write: FileWrite, file_id: int, first: int, vectors: FloatArray, has_vector: list[bool]
) -> pa.Table:
    """A file's chunks as rows of the chunks table, with ids from ``first`` on.

    ``vectors`` has a row per chunk; rows of chunks without a vector (``has_vector`` false) are
    zeros until ``set_vectors``.
    """
    count = len(write.chunks)
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
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
        "defines": pa.array([chunk_defines(c.text) for c in chunks], pa.string()),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim),
        "text_hash": pa.array([text_hash(c.text) for c in chunks], pa.string()),
        "has_vector": pa.array(has_vector, pa.bool_()),
    }
    return pa.Table.from_pydict(columns, schema=chunk_schema(dim))


def hashes_sql(hashes: Iterable[str]) -> str:
    """Text hashes as a SQL list for a LanceDB filter; hex digits only, checked, never text."""
    checked = [h for h in hashes if len(h) == 32 and all(c in "0123456789abcdef" for c in h)]
    return ",".join(f"'{h}'" for h in checked) or "''"


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
            "defines": [chunk_defines(r["text"]) for r in rows],
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
    pending_per_file: dict[int, int],
) -> list[Folder]:
    """The folders table's rows as records, with their ok files, chunks and chunks without a
    vector counted."""
    ok_files: dict[int, int] = {}
    chunk_counts: dict[int, int] = {}
    pending: dict[int, int] = {}
    for file in files.values():
        folder_id = file["folder_id"]
        ok_files[folder_id] = ok_files.get(folder_id, 0) + (file["status"] == "ok")
        chunk_counts[folder_id] = chunk_counts.get(folder_id, 0) + per_file.get(file["id"], 0)
        pending[folder_id] = pending.get(folder_id, 0) + pending_per_file.get(file["id"], 0)
    result = [
        Folder(
            row["id"],
            row["path"],
            row["name"],
            row["last_indexed"],
            ok_files.get(row["id"], 0),
            chunk_counts.get(row["id"], 0),
            pending.get(row["id"], 0),
        )
        for row in folders.values()
    ]
    return sorted(result, key=lambda f: f.path)


def known_vectors(
    write: FileWrite, known: dict[str, FloatArray], dim: int
) -> tuple[FloatArray, list[bool]]:
    """A write's vectors, its own or from ``known`` (zeros where none is), and which are real."""
    if write.vectors is not None:
        assert len(write.vectors) == len(write.chunks)
        return write.vectors, [True] * len(write.chunks)
    matrix = np.zeros((len(write.chunks), dim), dtype=np.float32)
    has = [False] * len(write.chunks)
    for row, chunk in enumerate(write.chunks):
        found = known.get(text_hash(chunk.text))
        if found is not None:
            matrix[row], has[row] = found, True
    return matrix, has


def add_hash_columns(chunks: Any) -> None:
    """Schema 1 → 2: add ``text_hash`` (computed) and ``has_vector`` (true) to the chunks."""
    chunks.add_columns({"text_hash": "''", "has_vector": "true"})
    table = chunks.search().select(["id", "text"]).limit(None).to_arrow()
    if table.num_rows:
        hashes = pa.array([text_hash(t) for t in table["text"].to_pylist()], pa.string())
        update = pa.table({"id": table["id"], "text_hash": hashes})
        chunks.merge_insert("id").when_matched_update_all().execute(update)


# What a reader below the ANN threshold reads of every chunk (ChunkSnapshot), and the columns of
# a chunk's place.
SNAPSHOT_COLUMNS = (
    "id",
    "file_id",
    "start_line",
    "end_line",
    "page",
    "text",
    "text_hash",
    "has_vector",
    "vector",
)
PLACE_COLUMNS = ("id", "file_id", "text_hash", "start_line", "end_line", "page")


def snapshot_table(table: pa.Table) -> pa.Table:
    """Chunk rows (``SNAPSHOT_COLUMNS``) as :class:`ChunkSnapshot` keeps them: by id, one chunk
    per column."""
    return table.sort_by("id").combine_chunks()


class ChunkSnapshot:
    """Every chunk of one version of the chunks table (``snapshot_table``), in memory.

    A reader of an index on object storage below the ANN threshold reads all the vectors
    anyway (the exact vector arm); with the rest of each row read in the same pass, the hits'
    rows, their places and their copies are looked up here instead of a request or two each.
    """

    def __init__(self, version: int, table: pa.Table) -> None:
        self.version = version
        table = table.combine_chunks()  # one chunk a column (as read from a copy: no copy)
        self._table = table
        self._ids: IdArray = table["id"].to_numpy()
        self._has_vector = table["has_vector"].to_numpy(zero_copy_only=False)
        self._row_ids = table["_rowid"].to_numpy().astype(np.int64)  # LanceDB's, of the version
        self._by_row = np.argsort(self._row_ids, kind="stable")

    def _at(self, ids: Sequence[int]) -> IdArray:
        """The rows of ``ids`` that are here, in the order asked."""
        wanted = np.asarray(ids, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._ids, wanted), max(len(self._ids) - 1, 0))
        if not len(self._ids):
            return np.zeros(0, dtype=np.int64)
        found: IdArray = at[self._ids[at] == wanted]
        return found

    def ids_of_rows(self, row_ids: Sequence[int]) -> list[int]:
        """The chunk ids of LanceDB row ids of this version, in the order given (a row id not
        here is left out)."""
        wanted = np.asarray(row_ids, dtype=np.int64)
        if not len(self._row_ids) or not len(wanted):
            return []
        at = np.searchsorted(self._row_ids, wanted, sorter=self._by_row)
        at = np.minimum(at, len(self._row_ids) - 1)
        rows = self._by_row[at]
        found = self._row_ids[rows] == wanted
        ids: list[int] = self._ids[rows[found]].tolist()
        return ids

    def row_ids_of_files(self, file_ids: Sequence[int]) -> IdArray:
        """The LanceDB row ids of the chunks of these files."""
        keep = np.isin(self._table["file_id"].to_numpy(), np.asarray(file_ids, dtype=np.int64))
        row_ids: IdArray = self._row_ids[keep]
        return row_ids

    def rows(self, ids: Sequence[int], columns: Sequence[str]) -> list[dict[str, Any]]:
        """The rows of ``ids`` that are here, ``columns`` only, in the order asked."""
        rows: list[dict[str, Any]] = (
            self._table.select(list(columns)).take(self._at(ids)).to_pylist()
        )
        return rows

    def with_hashes(self, hashes: Iterable[str], columns: Sequence[str]) -> list[dict[str, Any]]:
        """The rows of every chunk whose text hash is one of ``hashes``, by id."""
        wanted = pa.array(list(hashes), pa.string())
        mask = pc.is_in(self._table["text_hash"], value_set=wanted)
        rows: list[dict[str, Any]] = self._table.select(list(columns)).filter(mask).to_pylist()
        return rows

    def pending(self, file_ids: Sequence[int] | None) -> int:
        """Chunks without a vector (of these files)."""
        waiting = ~self._has_vector
        if file_ids is not None:
            files = self._table["file_id"].to_numpy()
            waiting &= np.isin(files, np.asarray(file_ids, dtype=np.int64))
        return int(waiting.sum())

    def ids(self, with_vector: bool) -> IdArray:
        """All chunk ids (of the chunks that have a vector), ascending."""
        ids: IdArray = self._ids[self._has_vector] if with_vector else self._ids
        return ids

    def vectors(self, min_id: int, dim: int) -> tuple[IdArray, IdArray, FloatArray]:
        """(chunk ids, file ids, float32 matrix) of chunks with id > min_id that have a vector,
        in id order; the matrix is read-only, a view of the table when it can be."""
        keep = self._has_vector & (self._ids > min_id)
        flat = self._table["vector"].chunk(0).flatten() if self._table.num_rows else None
        values = np.zeros(0, np.float32) if flat is None else flat.to_numpy(zero_copy_only=False)
        matrix: FloatArray = np.asarray(values, dtype=np.float32).reshape(-1, dim)
        file_ids: IdArray = self._table["file_id"].to_numpy()
        if keep.all():
            return self._ids, file_ids, matrix
        return self._ids[keep], file_ids[keep], np.ascontiguousarray(matrix[keep])


class VectorColumns:
    """The chunks table's vector side, shared by :class:`~semsearch.store.lance.store.LanceStore`:
    what :class:`~semsearch.store.exact.ExactVectors` reads and the pending-vector methods.

    ``has_vector`` marks chunks whose ``vector`` is real; a chunks table of schema version 1
    has no such column (every chunk has its vector) until a writer adds it.
    """

    def _chunk_table(self) -> Any:
        raise NotImplementedError

    def _snapshot(self) -> ChunkSnapshot | None:
        """Every chunk in memory, when the store keeps them so; None to read the table."""
        return None

    def _file_rows(self) -> dict[int, dict[str, Any]]:
        raise NotImplementedError

    def meta(self, key: str) -> str | None:
        """One meta value, or None."""
        raise NotImplementedError

    _flagged: Any = None  # the chunks table known to have them: columns are never dropped

    def has_flags(self) -> bool:
        """True when the chunks table exists and has ``text_hash`` and ``has_vector``."""
        chunks = self._chunk_table()
        if chunks is None or chunks is self._flagged:
            return chunks is not None
        if "has_vector" not in chunks.schema.names:
            return False
        self._flagged = chunks
        return True

    def chunk_ids(self) -> IdArray:
        """All chunk ids, ascending."""
        return self._ids(None)

    def vector_ids(self) -> IdArray:
        """The ids of all chunks that have a vector, ascending."""
        return self._ids(HAS_VECTOR if self.has_flags() else None)

    def _ids(self, where: str | None) -> IdArray:
        snapshot = self._snapshot()
        if snapshot is not None:
            return snapshot.ids(with_vector=where is not None)
        chunks = self._chunk_table()
        if chunks is None:
            return np.zeros(0, dtype=np.int64)
        query = chunks.search().select(["id"]).limit(None)
        if where is not None:
            query = query.where(where)
        ids: IdArray = np.sort(query.to_arrow()["id"].to_numpy())
        return ids

    def vectors(self, min_id: int = 0) -> tuple[IdArray, IdArray, FloatArray]:
        """(chunk ids, file ids, float32 matrix) of chunks with id > min_id that have a vector,
        in id order."""
        chunks = self._chunk_table()
        dim = int(self.meta("dim") or 0)
        snapshot = self._snapshot()
        if snapshot is not None:
            return snapshot.vectors(min_id, dim)
        if chunks is None:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, dim), np.float32)
        query = chunks.search().select(["id", "file_id", "vector"]).limit(None)
        where = [f"id > {int(min_id)}"] if min_id else []
        where += [HAS_VECTOR] if self.has_flags() else []
        table = query.where(" AND ".join(where)).to_arrow() if where else query.to_arrow()
        return vector_arrays(table, dim)

    def stored_vectors(self, hashes: Iterable[str], dim: int) -> dict[str, FloatArray]:
        """text hash → a stored vector of that text, for those of ``hashes`` that have one."""
        if not self.has_flags():
            return {}
        where = f"{HAS_VECTOR} AND text_hash IN ({hashes_sql(hashes)})"
        query = self._chunk_table().search().where(where).select(["text_hash", "vector"])
        table = retry(query.limit(None).to_arrow)
        flat = table["vector"].combine_chunks().flatten().to_numpy()
        matrix = np.asarray(flat, dtype=np.float32).reshape(-1, dim)
        return dict(zip(table["text_hash"].to_pylist(), matrix, strict=True))

    def copied_chunks(self, sha256: str, name: str) -> tuple[ChunkRecord, ...]:
        """None: the files table has no index on content, and a scan per new file would make
        an index run quadratic; every file is chunked."""
        return ()

    def chunk_texts(self, file_id: int) -> list[str]:
        """The texts of one file's stored chunks, in order."""
        chunks = self._chunk_table()
        if chunks is None:
            return []
        query = chunks.search().where(f"file_id = {int(file_id)}").select(["ord", "text"])
        rows = retry(query.limit(None).to_arrow).to_pylist()
        return [row["text"] for row in sorted(rows, key=lambda row: row["ord"])]

    def pending_texts(
        self, limit: int, folder_ids: Sequence[int] | None = None
    ) -> list[tuple[str, str]]:
        """(text hash, text) of up to ``limit`` distinct texts still without a vector (of
        chunks of ``folder_ids`` when given)."""
        if not self.has_flags():
            return []
        where = PENDING
        if folder_ids is not None:  # the chunks table has no folder: its pending ids first
            ids = self._pending_ids(folder_ids)[: max(limit, 0)]
            if not len(ids):
                return []
            where = f"{PENDING} AND id IN ({ids_sql(ids)})"
        query = self._chunk_table().search().where(where).select(["id", "text_hash", "text"])
        rows = sorted(retry(query.limit(limit).to_arrow).to_pylist(), key=lambda r: r["id"])
        return list({r["text_hash"]: r["text"] for r in rows}.items())

    def _pending_ids(self, folder_ids: Sequence[int]) -> IdArray:
        """The ids of the chunks without a vector of files in ``folder_ids``, ascending."""
        wanted = set(folder_ids)
        files = [i for i, row in self._file_rows().items() if row["folder_id"] in wanted]
        query = self._chunk_table().search().where(PENDING).select(["id", "file_id"])
        table = retry(query.limit(None).to_arrow)
        keep = np.isin(table["file_id"].to_numpy(), np.asarray(files, dtype=np.int64))
        ids: IdArray = np.sort(table["id"].to_numpy()[keep])
        return ids

    def set_vectors(self, hashes: Sequence[str], vectors: FloatArray) -> int:
        """Give the chunks without a vector of each text hash their vector (one merge-insert)."""
        if not self.has_flags() or not len(hashes):
            return 0
        chunks = self._chunk_table()
        where = f"{PENDING} AND text_hash IN ({hashes_sql(hashes)})"
        rows = chunks.search().where(where).select(["id", "text_hash"]).limit(None).to_arrow()
        if not rows.num_rows:
            return 0
        row_of = {h: i for i, h in enumerate(hashes)}
        picks = [row_of[h] for h in rows["text_hash"].to_pylist()]
        picked = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32)[picks])
        vector = pa.FixedSizeListArray.from_arrays(pa.array(picked.reshape(-1)), picked.shape[1])
        has = pa.array(np.ones(rows.num_rows, dtype=bool))
        update = pa.table({"id": rows["id"], "vector": vector, "has_vector": has})
        chunks.merge_insert("id").when_matched_update_all().execute(update)
        return int(rows.num_rows)

    def pending_count(self, folder_ids: Sequence[int] | None = None) -> int:
        """Chunks still waiting for their vector (of ``folder_ids`` when given)."""
        if not self.has_flags():
            return 0
        snapshot = self._snapshot()
        if snapshot is not None:
            wanted = None if folder_ids is None else set(folder_ids)
            files = self._file_rows().items()
            mine = None if wanted is None else [i for i, r in files if r["folder_id"] in wanted]
            return snapshot.pending(mine)
        if folder_ids is not None:
            return len(self._pending_ids(folder_ids))
        return int(self._chunk_table().count_rows(PENDING))
