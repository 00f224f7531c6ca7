"""The SQLite index's packed vectors: blocks of int8 vectors written from the chunk rows, read
whole by the vector arm (:mod:`semsearch.store.packed`).

A block packs ``PACK_ROWS`` consecutive chunks that have a vector, all below the first chunk still
waiting for one; ``meta.packed_through`` is the last chunk id packed, so the chunks above it are
the tail, read from their rows. Chunk ids only grow and a chunk's vector never changes, so a
block stays right but for deletions, which a trigger records in ``vector_gone``. When those are a
quarter of the packed chunks, the blocks are written anew (``meta.pack_epoch`` changes).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from semsearch.store.base import FloatArray, IdArray, damaged_error
from semsearch.store.packed import VectorBlock, pack_block
from semsearch.store.sqlite.schema import has_column, read_int_meta

PACK_ROWS = 16_384  # chunks a block: a 6 MB blob at 384 dimensions; the tail stays below this


_BLOCK_COLUMNS = "id, chunk_ids, file_ids, scales, errors, norms, codes"
_ITEM_BYTES = (8, 8, 4, 4, 4)  # chunk_ids, file_ids, scales, errors, norms: bytes a chunk
_MAX_PARAMETERS = 500  # text hashes a statement looks up


def read_blocks(
    conn: sqlite3.Connection, after: int, dim: int, path: Path
) -> Iterator[VectorBlock]:
    """The stored blocks numbered above ``after``, in order, one row in memory at a time; a
    block whose columns disagree on its number of chunks means the index at ``path`` is
    damaged."""
    firsts = "firsts" if has_column(conn, "vector_blocks", "firsts") else "NULL"
    rows = conn.execute(
        f"SELECT {_BLOCK_COLUMNS}, {firsts} FROM vector_blocks WHERE id > ? ORDER BY id",
        (after,),
    )
    for number, *blobs in rows:
        if not is_whole_block(blobs, dim):
            raise damaged_error(path, f"its vector block {number} is not whole")
        ids, file_ids, scales, errors, norms, codes, first_ids = blobs
        yield VectorBlock(
            number,
            np.frombuffer(ids, dtype="<i8"),
            np.frombuffer(file_ids, dtype="<i8"),
            np.frombuffer(scales, dtype="<f4"),
            np.frombuffer(errors, dtype="<f4"),
            np.frombuffer(norms, dtype="<f4"),
            np.frombuffer(codes, dtype=np.int8).reshape(dim, -1),
            None if first_ids is None else np.frombuffer(first_ids, dtype="<i8"),
        )


def is_whole_block(blobs: Sequence[bytes | None], dim: int) -> bool:
    """Whether a block's blobs (``_BLOCK_COLUMNS`` after the id, then ``firsts`` or None) hold
    one number of chunks, and codes for each of them or for each first chunk (schema 10)."""
    *items, codes, first_ids = blobs
    counts = {len(blob or b"") / size for blob, size in zip(items, _ITEM_BYTES, strict=True)}
    if len(counts) != 1 or codes is None or len(codes) % dim:
        return False
    chunks, columns = counts.pop(), len(codes) // dim
    if not chunks:
        return False
    if first_ids is None:
        return columns == chunks
    if len(first_ids) != 8 * chunks:
        return False
    if columns == chunks:
        return True
    firsts = np.frombuffer(first_ids, dtype="<i8")
    ids = np.frombuffer(items[0] or b"", dtype="<i8")
    return columns == int(np.count_nonzero(firsts == ids)) and bool((firsts <= ids).all())


def damaged_blocks(conn: sqlite3.Connection, dim: int) -> int:
    """How many stored blocks are not whole (``status --check``)."""
    firsts = "firsts" if has_column(conn, "vector_blocks", "firsts") else "NULL"
    rows = conn.execute(f"SELECT {_BLOCK_COLUMNS}, {firsts} FROM vector_blocks")
    return sum(not is_whole_block(row[1:], dim) for row in rows)


def read_gone(conn: sqlite3.Connection) -> IdArray:
    """Ids of packed chunks deleted since their block was written."""
    rows = conn.execute("SELECT id FROM vector_gone").fetchall()
    return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))


def write_block(conn: sqlite3.Connection, block: VectorBlock) -> None:
    """Store a block and move ``packed_through`` to its last chunk, in the caller's transaction."""
    conn.execute(
        "INSERT INTO vector_blocks(id, first_id, last_id, chunk_ids, file_ids, scales, errors,"
        " norms, codes, firsts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            block.number,
            int(block.ids[0]),
            int(block.ids[-1]),
            block.ids.astype("<i8").tobytes(),
            block.file_ids.astype("<i8").tobytes(),
            block.scales.astype("<f4").tobytes(),
            block.errors.astype("<f4").tobytes(),
            block.norms.astype("<f4").tobytes(),
            block.codes.tobytes(),
            None if block.firsts is None else block.firsts.astype("<i8").tobytes(),
        ),
    )
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('packed_through', ?)"
        " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (str(int(block.ids[-1])),),
    )


def whole_blocks_with_copies(conn: sqlite3.Connection, dim: int) -> list[int]:
    """The blocks written before schema 10 that store codes for copies (``trim_block`` drops
    them), found without reading the codes."""
    rows = conn.execute(  # a block without copies has firsts equal to its ids, byte for byte
        "SELECT id FROM vector_blocks WHERE firsts IS NOT NULL AND firsts != chunk_ids"
        " AND length(codes) = ? * (length(chunk_ids) / 8)",
        (dim,),
    )
    return [number for (number,) in rows]


def trim_block(conn: sqlite3.Connection, number: int, dim: int) -> None:
    """Keep a block's codes of first chunks only, as blocks are written from schema 10 on; in the
    caller's transaction."""
    ids, firsts, codes = conn.execute(
        "SELECT chunk_ids, firsts, codes FROM vector_blocks WHERE id = ?", (number,)
    ).fetchone()
    own = np.frombuffer(firsts, dtype="<i8") == np.frombuffer(ids, dtype="<i8")
    kept = np.frombuffer(codes, dtype=np.int8).reshape(dim, -1)[:, own]
    conn.execute(
        "UPDATE vector_blocks SET codes = ? WHERE id = ?",
        (np.ascontiguousarray(kept).tobytes(), number),
    )


def next_block(
    conn: sqlite3.Connection,
    rows: int,
    decode: Callable[[Sequence[bytes]], FloatArray],
) -> VectorBlock | None:
    """The next block to pack (the ``rows`` chunks after ``packed_through`` that have a vector,
    all below the first chunk without one), or None when fewer wait."""
    through = read_int_meta(conn, "packed_through")
    first_pending = conn.execute("SELECT min(id) FROM chunks WHERE vector IS NULL").fetchone()[0]
    below = "" if first_pending is None else " AND id < ?"
    params = (through,) if first_pending is None else (through, first_pending)
    found = conn.execute(
        "SELECT id, file_id, vector, text_hash FROM chunks"
        f" WHERE id > ? AND vector IS NOT NULL{below} ORDER BY id LIMIT ?",
        (*params, rows),
    ).fetchall()
    if len(found) < rows:
        return None
    number = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM vector_blocks").fetchone()[0]
    ids = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
    file_ids = np.fromiter((r[1] for r in found), dtype=np.int64, count=len(found))
    first = first_chunks(conn, sorted({r[3] for r in found}))
    firsts = np.fromiter((first[r[3]] for r in found), dtype=np.int64, count=len(found))
    return pack_block(int(number), ids, file_ids, decode([r[2] for r in found]), firsts)


def first_chunks(conn: sqlite3.Connection, hashes: Sequence[str]) -> dict[str, int]:
    """Text hash → the lowest id of its chunks (the ``chunks_text_hash`` index has both)."""
    found: dict[str, int] = {}
    for start in range(0, len(hashes), _MAX_PARAMETERS):
        part = list(hashes[start : start + _MAX_PARAMETERS])
        rows = conn.execute(
            "SELECT text_hash, min(id) FROM chunks"
            f" WHERE text_hash IN ({','.join('?' * len(part))}) GROUP BY text_hash",
            part,
        )
        found.update(rows)
    return found


def needs_repack(conn: sqlite3.Connection) -> bool:
    """True when a quarter of the packed chunks are gone, or blocks written before schema 7
    hold copies they do not know of: the blocks are worth writing anew."""
    unknown = conn.execute("SELECT 1 FROM vector_blocks WHERE firsts IS NULL LIMIT 1").fetchone()
    if unknown is not None and conn.execute("SELECT 1 FROM copies LIMIT 1").fetchone():
        return True
    gone = conn.execute("SELECT count(*) FROM vector_gone").fetchone()[0]
    if not gone:
        return False
    packed = conn.execute(
        "SELECT coalesce(sum(length(chunk_ids)), 0) / 8 FROM vector_blocks"
    ).fetchone()[0]
    return bool(gone * 4 >= packed)


def drop_blocks(conn: sqlite3.Connection) -> None:
    """Forget every block (their chunks are the tail again), in the caller's transaction."""
    conn.execute("DELETE FROM vector_blocks")
    conn.execute("DELETE FROM meta WHERE key = 'packed_through'")
    conn.execute("DELETE FROM vector_gone")
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('pack_epoch', '1')"
        " ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1"
    )


def has_blocks_table(conn: sqlite3.Connection) -> bool:
    """False in a read-only file of schema version 5 or older, which has no blocks."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'vector_blocks'"
    ).fetchone()
    return row is not None
