"""The SQLite index's row helpers: vectors read into numpy, stored vectors by text hash, and
file deletion. SQL of :mod:`semsearch.store.sqlite.store`, kept apart so that module stays readable.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePath
from typing import Any

import numpy as np

from semsearch.store.base import (
    ChunkPlace,
    ChunkRow,
    FloatArray,
    IdArray,
    PlaceCache,
    damaged_error,
    hash_keys,
    listed_rel,
)
from semsearch.store.packed import PackedVectors, VectorBlock
from semsearch.store.sqlite.blocks import (
    has_blocks_table,
    read_blocks,
    read_gone,
)
from semsearch.store.sqlite.schema import connect, has_column, read_int_meta


class VectorReader:
    """The vectors in memory and the chunk rows, read through a connection of their own.

    Search runs the lexical arm on the store's connection in a worker thread while the vector
    arm runs and chunk rows are read, and a connection is never used by two threads at once:
    this one's users take turns through a lock (the lexical worker reads rows too, for the
    definitions arm). The vectors are the packed blocks and, as ``vector_ids`` and ``vectors``
    give them, the chunks above ``meta.packed_through`` (all of them in an unpacked index).
    """

    def __init__(self, path: Path, read_only: bool) -> None:
        self.path = path
        self._conn = connect(path, read_only)
        self._lock = threading.RLock()  # held across a snapshot's reads
        self.has_blocks = has_blocks_table(self._conn)
        self.exact = PackedVectors(self)
        self.has_paths = has_column(self._conn, "files", "path_vector")
        self._paths: tuple[int, dict[int, FloatArray | None]] = (-1, {})  # generation, read
        self._places = PlaceCache(PLACES_KEPT)  # by the index's generation
        self._path_size = 0  # bytes of a path blob of the index's dimension (path_blob)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction around the reads inside it (and the lock held throughout)."""
        with self._lock:
            if self._conn.in_transaction:  # a snapshot inside a snapshot: the outer one holds
                yield
                return
            self._conn.execute("BEGIN")
            try:
                yield
            finally:
                self._conn.execute("COMMIT")

    def generation(self) -> int:
        """The store's write counter."""
        with self._lock:
            return read_int_meta(self._conn, "generation")

    def _packed_through(self) -> int:
        return read_int_meta(self._conn, "packed_through") if self.has_blocks else 0

    def vector_ids(self) -> IdArray:
        """The ids of the chunks that have a vector and are in no block, ascending."""
        with self._lock:
            return read_vector_ids(self._conn, self._packed_through())

    def vectors(self, min_id: int) -> tuple[IdArray, IdArray, FloatArray]:
        """(chunk ids, file ids, float32 matrix) for such chunks with id > min_id, in id order."""
        with self._lock:
            return read_vectors(self._conn, max(min_id, self._packed_through()), self.path)

    def pack_epoch(self) -> int:
        """Changes when the blocks are written anew."""
        with self._lock:
            return read_int_meta(self._conn, "pack_epoch") if self.has_blocks else 0

    def blocks(self, after: int) -> Iterator[VectorBlock]:
        """The blocks numbered above ``after``, in order."""
        if not self.has_blocks:
            return
        with self._lock:
            dim = read_int_meta(self._conn, "dim")
            yield from read_blocks(self._conn, after, dim, self.path)

    def gone(self) -> IdArray:
        """Ids of packed chunks deleted since."""
        if not self.has_blocks:
            return np.zeros(0, dtype=np.int64)
        with self._lock:
            return read_gone(self._conn)

    def vectors_of(self, ids: IdArray) -> tuple[IdArray, FloatArray]:
        """(ids, float32 matrix) of the stored vectors of those of ``ids`` that have one. Their
        places come with them, kept for :meth:`chunk_places`: a search reads next the places of
        the chunks it scored."""
        with self._lock:
            dim = read_int_meta(self._conn, "dim")
            found, blobs = read_vectors_of(self._conn, ids)
            self._places.keep(read_int_meta(self._conn, "generation"), found)
        got = np.fromiter((place.id for place in found), dtype=np.int64, count=len(found))
        return got, vectors_from_blobs(blobs, dim, self.path)

    def chunks(self, ids: Sequence[int]) -> list[ChunkRow]:
        """Stored chunks by id, in the order asked; unknown ids are left out."""
        with self._lock:
            return read_chunks(self._conn, ids)

    def chunk_places(self, ids: Sequence[int]) -> list[ChunkPlace]:
        """The places of chunks by id, in the order asked; unknown ids are left out. What was
        read (here or with the vectors) is kept until the index changes: a chunk's place never
        changes while it exists, and deleting it is a write."""
        with self._lock:
            generation = read_int_meta(self._conn, "generation")
            return self._places.places(
                generation,
                [int(i) for i in ids],
                lambda missing: read_places(self._conn, "id", missing),
            )

    def text_keys(
        self, ids: Sequence[int], from_vectors: bool = True
    ) -> dict[int, tuple[int, int | str]]:
        """Chunk id → (file id, text key) of those of ``ids`` that exist; copies share a key.
        ``from_vectors`` (the vectors are read first if need be): a packed chunk's key is the
        column it reads (:class:`Texts`, no row read), another chunk's the column of a packed
        copy of its text where one is alive, else its text hash (as without ``from_vectors``)."""
        texts = None
        if from_vectors:
            self.exact.refresh()
            texts = self.exact.texts()
        keys: dict[int, tuple[int, int | str]] = {}
        if texts is not None:
            keys.update(texts.keys(ids))
        places = self.chunk_places([i for i in ids if i not in keys])
        if texts is None or not places:
            return {**keys, **hash_keys(places)}
        with self._lock:  # a text in the blocks gives its column to its copies in the tail
            members = read_places(self._conn, "text_hash", list({p.text_hash for p in places}))
        packed = texts.keys([member.id for member in members])
        column = {m.text_hash: packed[m.id][1] for m in members if m.id in packed}
        for place in places:
            keys[place.id] = (place.file_id, column.get(place.text_hash, place.text_hash))
        return keys

    def text_places(self, hashes: Sequence[str]) -> list[ChunkPlace]:
        """The places of every chunk of these text hashes, by chunk id."""
        with self._lock:
            found = read_places(self._conn, "text_hash", list(set(hashes)))
        return sorted(found, key=lambda place: place.id)

    def path_vectors(self, file_ids: Sequence[int]) -> dict[int, FloatArray]:
        """File id → path vector of those of ``file_ids`` that have one ({} in a read-only
        index of schema version 3, which has none). What was read is kept until the store's
        generation changes, so a warm search reads only the files it has not seen."""
        if not self.has_paths or not file_ids:
            return {}
        generation = self.generation()
        with self._lock:
            if self._paths[0] != generation:
                self._paths = (generation, {})
                self._path_size = 4 + read_int_meta(self._conn, "dim")
            known = self._paths[1]
            missing = [int(i) for i in file_ids if int(i) not in known]
            if missing:
                marks = ",".join("?" * len(missing))
                rows = self._conn.execute(
                    f"SELECT id, path_vector FROM files WHERE id IN ({marks})", missing
                )
                for i, blob in rows:  # empty (a document), NULL, or damaged: none
                    right = blob is not None and len(blob) == self._path_size > 4
                    known[int(i)] = path_from_blob(blob) if right else None
                known.update((i, None) for i in missing if i not in known)
        return {int(i): v for i in file_ids if (v := known.get(int(i))) is not None}

    def close(self) -> None:
        """Stop building the blocks' sessions and close the connection."""
        self.exact.stop_building()
        with self._lock:
            self._conn.close()


def read_vector_ids(conn: sqlite3.Connection, above: int = 0) -> IdArray:
    rows = conn.execute(
        "SELECT id FROM chunks WHERE id > ? AND vector IS NOT NULL ORDER BY id", (above,)
    ).fetchall()
    return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))


def read_vectors(
    conn: sqlite3.Connection, min_id: int, path: Path
) -> tuple[IdArray, IdArray, FloatArray]:
    rows = conn.execute(
        "SELECT id, file_id, vector FROM chunks WHERE id > ? AND vector IS NOT NULL ORDER BY id",
        (min_id,),
    ).fetchall()
    dim = read_int_meta(conn, "dim")  # rows without a recorded dimension: "damaged" below
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    file_ids = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
    return ids, file_ids, vectors_from_blobs([r[2] for r in rows], dim, path)


VECTOR_DTYPE = "<f2"  # float16 since schema 5: cosines move by ~1e-4, rankings did not move
# ... and float32, what schema 4 and before wrote (such rows stay readable)
VECTOR_DTYPES = (VECTOR_DTYPE, "<f4")


def vector_blobs(vectors: FloatArray) -> list[bytes]:
    """Chunk vectors as stored: ``dim`` little-endian float16 values each (schema 5)."""
    return [row.tobytes() for row in np.ascontiguousarray(vectors, dtype=VECTOR_DTYPE)]


def vectors_from_blobs(blobs: Sequence[bytes], dim: int, path: Path) -> FloatArray:
    """The float32 matrix of stored chunk vectors: float16 rows, or float32 rows of an index
    written before schema 5 (one file may hold both: rows are decoded by their size). Rows of
    another size mean the index at ``path`` is damaged."""
    sizes = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs))
    kinds = [(dtype, sizes == dim * np.dtype(dtype).itemsize) for dtype in VECTOR_DTYPES]
    for dtype, chosen in kinds:
        if chosen.all():  # one kind of row (the usual case): decoded in one go
            matrix = np.frombuffer(b"".join(blobs), dtype=dtype).reshape(len(blobs), dim)
            return matrix.astype(np.float32, copy=False)
    if sum(int(chosen.sum()) for _, chosen in kinds) != len(blobs):
        problem = f"it holds chunk vectors that are not {dim} float16 or float32 values"
        raise damaged_error(path, problem)
    matrix = np.empty((len(blobs), dim), dtype=np.float32)
    for dtype, chosen in kinds:
        at = np.flatnonzero(chosen)
        joined = b"".join(blobs[i] for i in at.tolist())
        matrix[at] = np.frombuffer(joined, dtype=dtype).reshape(len(at), dim)
    return matrix


def read_stored_vectors(conn: sqlite3.Connection, hashes: Sequence[str]) -> dict[str, bytes]:
    """text hash → a stored vector of that text, for the hashes that have one."""
    found: dict[str, bytes] = {}
    unique = list(set(hashes))
    for start in range(0, len(unique), 500):  # below SQLite's bound-parameter limit
        part = unique[start : start + 500]
        rows = conn.execute(
            "SELECT text_hash, vector FROM chunks WHERE vector IS NOT NULL"
            f" AND text_hash IN ({','.join('?' * len(part))})",
            part,
        )
        found.update(rows.fetchall())
    return found


# The columns a place is read from, and the ones it may be looked up by (never user text).
PLACE_COLUMNS = "id, file_id, text_hash, start_line, end_line, page"
PLACE_KEYS = frozenset(["id", "text_hash"])
# Places a vector reader keeps, at most: a search of 1.2M chunks with ten copies of each text
# reads ~8,000 (~1.5 MB).
PLACES_KEPT = 32_768


def read_vectors_of(conn: sqlite3.Connection, ids: IdArray) -> tuple[list[ChunkPlace], list[bytes]]:
    """The places and stored vectors (blobs) of those of ``ids`` that have a vector, in one
    order: each row is read once for both."""
    places: list[ChunkPlace] = []
    blobs: list[bytes] = []
    wanted = ids.tolist()
    for start in range(0, len(wanted), 500):  # below SQLite's bound-parameter limit
        part = wanted[start : start + 500]
        rows = conn.execute(
            f"SELECT {PLACE_COLUMNS}, vector FROM chunks"
            f" WHERE id IN ({','.join('?' * len(part))}) AND vector IS NOT NULL",
            part,
        )
        for *place, blob in rows:
            places.append(ChunkPlace(*place))
            blobs.append(blob)
    return places, blobs


def read_places(
    conn: sqlite3.Connection, key: str, values: Sequence[int] | Sequence[str]
) -> list[ChunkPlace]:
    """The places of the chunks whose ``key`` column (``id`` or ``text_hash``, both indexed) is
    one of ``values``, in no set order."""
    assert key in PLACE_KEYS
    found: list[ChunkPlace] = []
    for start in range(0, len(values), 500):  # below SQLite's bound-parameter limit
        part = list(values[start : start + 500])
        rows = conn.execute(
            f"SELECT {PLACE_COLUMNS} FROM chunks WHERE {key} IN ({','.join('?' * len(part))})",
            part,
        )
        found.extend(ChunkPlace(*row) for row in rows)
    return found


def delete_files_where(conn: sqlite3.Connection, where: str, params: tuple[Any, ...]) -> None:
    """Delete files matching a fixed WHERE clause, their chunks first.

    The chunks go while their file rows still exist: the FTS delete trigger needs the path.
    """
    conn.execute(
        f"DELETE FROM chunks WHERE file_id IN (SELECT id FROM files WHERE {where})", params
    )
    conn.execute(f"DELETE FROM files WHERE {where}", params)


# A folder's chunks that have chunks_fts rows (each text's first, not in `copies`), as the
# triggers write them (folder id bound).
FTS_ROW = "rowid, text, terms, defines"
FTS_VALUES = (
    "c.id, c.text, ss_terms(x.rel, c.text), ss_defines(c.text)"
    " FROM chunks c JOIN files x ON x.id = c.file_id"
    " WHERE x.folder_id = ? AND c.id NOT IN (SELECT id FROM copies)"
)


def move_files(
    conn: sqlite3.Connection, old: int, new: int | None, new_path: str, prefix: str
) -> int:
    """Folder ``old``'s files to folder ``new`` (or ``old`` renamed to ``new_path`` when ``new`` is
    None), their rel paths under ``prefix``, inside the caller's transaction; ok files moved."""
    if new is not None:  # the files already there win
        delete_files_where(
            conn,
            "folder_id = ? AND ? || rel IN (SELECT rel FROM files WHERE folder_id = ?)",
            (old, prefix, new),
        )
    if prefix:  # the FTS `terms` come from rel: take them out under the old rel
        conn.execute(
            f"INSERT INTO chunks_fts(chunks_fts, {FTS_ROW}) SELECT 'delete', {FTS_VALUES}",
            (old,),
        )
        conn.execute(  # a new rel: its path vector is made again
            "UPDATE files SET rel = ? || rel, path_vector = NULL WHERE folder_id = ?", (prefix, old)
        )
        conn.execute(f"INSERT INTO chunks_fts({FTS_ROW}) SELECT {FTS_VALUES}", (old,))
    moved = conn.execute(
        "SELECT count(*) FROM files WHERE folder_id = ? AND status = 'ok'", (old,)
    ).fetchone()[0]
    if new is None:
        name = PurePath(new_path).name
        conn.execute("UPDATE folders SET path = ?, name = ? WHERE id = ?", (new_path, name, old))
    else:
        conn.execute("UPDATE files SET folder_id = ? WHERE folder_id = ?", (new, old))
        conn.execute("DELETE FROM folders WHERE id = ?", (old,))
    return int(moved)


def read_chunks(conn: sqlite3.Connection, ids: Sequence[int]) -> list[ChunkRow]:
    """Stored chunks by id, in the order asked; unknown ids are left out."""
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    rows = conn.execute(
        "SELECT c.id, c.file_id, f.path, f.name, x.rel, x.kind, c.start_line, c.end_line,"
        " c.page, c.text FROM chunks c JOIN files x ON x.id = c.file_id"
        f" JOIN folders f ON f.id = x.folder_id WHERE c.id IN ({marks})",
        list(ids),
    ).fetchall()
    by_id = {
        i: ChunkRow(i, file_id, path, name, listed_rel(rel), *rest)
        for i, file_id, path, name, rel, *rest in rows
    }
    return [by_id[i] for i in ids if i in by_id]


def read_pending_paths(
    conn: sqlite3.Connection, limit: int, folder_ids: Sequence[int] | None = None
) -> list[tuple[int, str]]:
    """(file id, rel) of up to ``limit`` ok files without a path vector, by id, of
    ``folder_ids`` when given ([] in a file without the column: a read-only version 3, which
    cannot be given any)."""
    if not has_column(conn, "files", "path_vector"):
        return []
    ids = () if folder_ids is None else tuple(int(i) for i in folder_ids)
    within = "" if folder_ids is None else f" AND folder_id IN ({', '.join('?' * len(ids))})"
    rows = conn.execute(
        "SELECT id, rel FROM files WHERE status = 'ok' AND path_vector IS NULL"
        f"{within} ORDER BY id LIMIT ?",
        (*ids, limit),
    )
    return [(int(i), listed_rel(rel)) for i, rel in rows]


def path_blob(vector: FloatArray) -> bytes:
    """A path vector as stored: its largest magnitude m as a little-endian float32, then each
    component as a signed byte, round(127 x value / m) (a quarter of float32's bytes; cosines
    move by ~1e-3), or empty for a zero vector (a file that has none: search leaves it out)."""
    scale = float(np.abs(vector).max())
    if not scale:
        return b""
    quantised = np.round(np.asarray(vector, dtype=np.float32) * (127.0 / scale)).astype(np.int8)
    return bytes(np.array([scale], dtype="<f4").tobytes()) + bytes(quantised.tobytes())


def path_from_blob(blob: bytes) -> FloatArray:
    """The float32 path vector of a stored blob (see :func:`path_blob`)."""
    scale = float(np.frombuffer(blob[:4], dtype="<f4")[0])
    vector: FloatArray = np.frombuffer(blob[4:], dtype=np.int8) * np.float32(scale / 127.0)
    return vector
