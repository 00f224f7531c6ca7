"""Packed vectors: a SQLite index's vectors in int8 blocks give the exact nearest chunks."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from semsearch.errors import IndexDamagedError, ModelError
from semsearch.store import ChunkRecord, FileWrite, packed
from semsearch.store.packed import PackedVectors, VectorBlock, pack_block, prepacked_kernel
from semsearch.store.scan import QUERY_LEVEL
from semsearch.store.sqlite.check import check_file
from semsearch.store.sqlite.schema import SCHEMA_VERSION
from semsearch.store.sqlite.store import SqliteStore
from tests.test_scan import DIM, queries, unit_rows

PACK = 64  # chunks a block in these tests: several blocks and a tail from a few hundred chunks


def write_files(
    store: SqliteStore, files: dict[str, Any], vectors: bool = True, folder: str = "/srv/a"
) -> None:
    folder_id = store.ensure_folder(folder, folder.rsplit("/", 1)[-1])
    writes = []
    for rel, matrix in files.items():
        chunks = tuple(
            ChunkRecord(n + 1, n + 1, 0, 4, None, f"{rel} chunk {n}") for n in range(len(matrix))
        )
        writes.append(
            FileWrite(
                folder_id, rel, 1, 10, "sha", "ok", "text", chunks, matrix if vectors else None
            )
        )
    store.write_files(writes)


def brute(store: SqliteStore, files: dict[str, Any], query: Any, pool: int) -> list[int]:
    """The ids of the ``pool`` chunks nearest ``query`` by their stored (float16) vectors."""
    rows = [r for r in store.chunks([int(i) for i in store.chunk_ids()]) if r.rel in files]
    stored = np.stack([files[r.rel][r.start_line - 1] for r in rows]).astype(np.float16)
    scores = stored.astype(np.float32) @ query
    ids = np.array([r.id for r in rows])
    return ids[np.argsort(-scores, kind="stable")[:pool]].tolist()


def make_files(count: int, seed: int) -> dict[str, Any]:
    matrix = unit_rows(count, seed=seed)
    return {f"f{n}.py": matrix[n * 8 : n * 8 + 8] for n in range(count // 8)}


def packed_store(tmp_path: Path, files: dict[str, Any]) -> SqliteStore:
    """A new index of ``files`` (blocks of PACK chunks and a tail), maintained as a run ends."""
    store = SqliteStore(tmp_path / "index.db", create=True, pack_rows=PACK)
    store.set_model("test-model", DIM)
    write_files(store, files)
    store.maintain()
    return store


def blocks_of(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM vector_blocks").fetchone()[0])


def test_a_packed_index_gives_the_nearest_chunks_of_an_unpacked_one(tmp_path: Path) -> None:
    files = make_files(600, seed=40)
    store = packed_store(tmp_path, files)
    assert blocks_of(store.path) == 600 // PACK  # and a tail of 600 % 64 chunks
    for query in queries(unit_rows(600, seed=40), seed=41):
        found = store.nearest(query, 50, None)
        assert [cid for cid, _ in found] == brute(store, files, query, 50)
    store.close()


def test_chunks_deleted_after_packing_are_never_found_and_new_ones_are(tmp_path: Path) -> None:
    files = make_files(600, seed=42)
    store = packed_store(tmp_path, files)
    query = queries(unit_rows(600, seed=42), seed=43)[0]
    assert store.nearest(query, 10, None)  # loaded, then changed under the reader
    nearest_file = store.chunks([store.nearest(query, 1, None)[0][0]])[0].rel
    store.delete_files(store.folders()[0].id, [nearest_file])
    del files[nearest_file]
    files["new.py"] = unit_rows(8, seed=44)
    write_files(store, {"new.py": files["new.py"]})
    found = store.nearest(query, 50, None)
    assert [cid for cid, _ in found] == brute(store, files, query, 50)
    assert nearest_file not in {r.rel for r in store.chunks([cid for cid, _ in found])}
    store.close()


def test_blocks_are_written_anew_when_a_quarter_of_their_chunks_are_gone(tmp_path: Path) -> None:
    files = make_files(512, seed=45)
    store = packed_store(tmp_path, files)
    assert blocks_of(store.path) == 8
    gone = [f"f{n}.py" for n in range(0, 64, 2)]  # 256 of 512 chunks
    store.delete_files(store.folders()[0].id, gone)
    for rel in gone:
        del files[rel]
    store.maintain()
    assert blocks_of(store.path) == 4
    query = queries(unit_rows(512, seed=45), seed=46)[1]
    assert [cid for cid, _ in store.nearest(query, 40, None)] == brute(store, files, query, 40)
    store.close()


def test_a_search_within_files_finds_packed_chunks_of_those_files_only(tmp_path: Path) -> None:
    files = make_files(400, seed=47)
    store = packed_store(tmp_path, files)
    refs = {ref.rel: file_id for file_id, ref in store.file_refs().items()}
    chosen = {"f3.py", "f30.py"}
    query = queries(unit_rows(400, seed=47), seed=48)[2]
    found = store.nearest(query, 10, [refs[r] for r in chosen])
    assert {r.rel for r in store.chunks([cid for cid, _ in found])} <= chosen
    assert [cid for cid, _ in found] == brute(store, {r: files[r] for r in chosen}, query, 10)
    store.close()


def test_chunks_waiting_for_vectors_stop_the_packing_until_they_have_them(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "index.db", create=True, pack_rows=PACK)
    store.set_model("test-model", DIM)
    waiting = make_files(96, seed=49)
    write_files(store, waiting, vectors=False)
    later = make_files(200, seed=50)
    write_files(store, {f"b{rel}": m for rel, m in later.items()})
    store.maintain()
    assert blocks_of(store.path) == 0  # the first chunks have no vector yet
    texts = store.pending_texts(1000)
    by_text = {f"{rel} chunk {n}": m[n] for rel, m in waiting.items() for n in range(len(m))}
    store.set_vectors([h for h, _ in texts], np.stack([by_text[t] for _, t in texts]))
    store.maintain()
    assert blocks_of(store.path) == (96 + 200) // PACK
    files = {**waiting, **{f"b{rel}": m for rel, m in later.items()}}
    query = queries(unit_rows(96, seed=49), seed=51)[0]
    assert [cid for cid, _ in store.nearest(query, 30, None)] == brute(store, files, query, 30)
    store.close()


def test_an_index_of_the_previous_schema_opens_and_is_packed_by_its_next_run(
    tmp_path: Path,
) -> None:
    files = make_files(300, seed=52)
    path = tmp_path / "index.db"
    store = SqliteStore(path, create=True, pack_rows=PACK)
    store.set_model("test-model", DIM)
    write_files(store, files)
    store.close()
    with sqlite3.connect(path) as conn:  # what version 5 had: no blocks, no trigger
        conn.execute("DROP TRIGGER chunks_packed_ad")
        conn.execute("DROP TABLE vector_blocks")
        conn.execute("DROP TABLE vector_gone")
        conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
        conn.execute("PRAGMA user_version=5")
    store = SqliteStore(path, pack_rows=PACK)
    query = queries(unit_rows(300, seed=52), seed=53)[0]
    assert [cid for cid, _ in store.nearest(query, 20, None)] == brute(store, files, query, 20)
    store.maintain()
    assert store.meta("schema_version") == str(SCHEMA_VERSION)
    assert blocks_of(path) == 300 // PACK
    assert [cid for cid, _ in store.nearest(query, 20, None)] == brute(store, files, query, 20)
    store.close()


def test_blocks_know_each_chunks_first_and_older_blocks_are_written_anew(tmp_path: Path) -> None:
    files = make_files(200, seed=56)
    store = packed_store(tmp_path, files)
    copied = dict(list(files.items())[:10])  # 80 copies: the same texts in another folder
    write_files(store, copied, folder="/srv/b")
    store.maintain()
    with sqlite3.connect(store.path) as conn:
        rows = conn.execute("SELECT id, text_hash FROM chunks ORDER BY id").fetchall()
        first: dict[str, int] = {}
        expected = [first.setdefault(text, cid) for cid, text in rows]
        stored = [
            cid
            for (blob,) in conn.execute("SELECT firsts FROM vector_blocks ORDER BY id")
            for cid in np.frombuffer(blob, dtype="<i8").tolist()
        ]
        assert stored == expected[: len(stored)] and len(stored) == 4 * PACK
    as_whole_blocks(store.path, keep_firsts=False)  # as schema 6 wrote them
    query = queries(unit_rows(200, seed=56), seed=57)[0]
    vectors = {  # as stored: float16
        row.id: files[row.rel][row.start_line - 1].astype(np.float16).astype(np.float32)
        for row in store.chunks(ids_of(store))
    }

    def check() -> None:
        found = store.nearest(query, 30, None)
        want = sorted(vectors, key=lambda i: (-float(vectors[i] @ query), i))[:30]
        assert_exact_with_copies(found, want, lambda i: vectors[i] @ query)

    check()
    store.maintain()  # copies exist: the blocks are written anew, with their firsts
    with sqlite3.connect(store.path) as conn:
        unknown = conn.execute("SELECT count(*) FROM vector_blocks WHERE firsts IS NULL")
        assert unknown.fetchone()[0] == 0
    check()
    store.close()


def as_whole_blocks(path: Path, keep_firsts: bool) -> None:
    """Give every block the codes of each of its chunks, a copy's those of its first, as blocks
    were written before schema 10 (and without ``firsts``, before schema 7)."""
    with sqlite3.connect(path) as conn:
        column: dict[int, Any] = {}  # first chunk id → its codes
        rows = conn.execute("SELECT id, chunk_ids, firsts, codes FROM vector_blocks ORDER BY id")
        for number, ids_blob, firsts_blob, codes_blob in rows.fetchall():
            ids = np.frombuffer(ids_blob, dtype="<i8")
            firsts = np.frombuffer(firsts_blob, dtype="<i8")
            codes = np.frombuffer(codes_blob, dtype=np.int8).reshape(DIM, -1)
            column.update(zip(ids[firsts == ids].tolist(), codes.T, strict=True))
            whole = np.stack([column[first] for first in firsts.tolist()], axis=1)
            conn.execute(
                "UPDATE vector_blocks SET codes = ?, firsts = ? WHERE id = ?",
                (
                    np.ascontiguousarray(whole).tobytes(),
                    firsts_blob if keep_firsts else None,
                    number,
                ),
            )


def codes_columns(path: Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT length(codes) FROM vector_blocks ORDER BY id").fetchall()
    return [length // DIM for (length,) in rows]


def test_blocks_keep_first_chunks_codes_and_older_whole_blocks_are_trimmed(
    tmp_path: Path,
) -> None:
    """Schema 10 stores the codes of each block's first chunks only; blocks written before it
    (every chunk's codes, firsts known) are read as they are, and trimmed by the next run."""
    files = make_files(200, seed=60)
    store = packed_store(tmp_path, files)
    write_files(store, files, folder="/srv/b")  # 200 copies: blocks 5 and 6 hold copies only
    store.maintain()
    query = queries(unit_rows(200, seed=60), seed=61)[0]
    trimmed = codes_columns(store.path)
    assert trimmed == [PACK, PACK, PACK, 200 - 3 * PACK, 0, 0]
    vectors = {  # as stored: float16
        row.id: files[row.rel][row.start_line - 1].astype(np.float16).astype(np.float32)
        for row in store.chunks(ids_of(store))
    }
    want = sorted(vectors, key=lambda i: (-float(vectors[i] @ query), i))[:40]
    found = store.nearest(query, 40, None)
    assert_exact_with_copies(found, want, lambda i: vectors[i] @ query)
    store.close()
    as_whole_blocks(store.path, keep_firsts=True)
    assert codes_columns(store.path) == [PACK] * 6
    store = SqliteStore(store.path, pack_rows=PACK)
    assert store.nearest(query, 40, None) == found
    store.maintain()
    assert codes_columns(store.path) == trimmed
    store.close()
    store = SqliteStore(store.path, pack_rows=PACK)
    assert store.nearest(query, 40, None) == found
    assert check_file(store.path)[1] == ()
    store.close()


def test_a_trimmed_block_whose_codes_disagree_with_its_firsts_is_damage(tmp_path: Path) -> None:
    files = make_files(200, seed=62)
    store = packed_store(tmp_path, files)
    write_files(store, dict(list(files.items())[:12]), folder="/srv/b")
    store.maintain()
    store.close()
    with sqlite3.connect(store.path) as conn:  # a copy in block 4 made a first: one column short
        ids, firsts = conn.execute(
            "SELECT chunk_ids, firsts FROM vector_blocks WHERE id = 4"
        ).fetchone()
        changed = np.frombuffer(firsts, dtype="<i8").copy()
        copy = int(np.flatnonzero(changed != np.frombuffer(ids, dtype="<i8"))[0])
        changed[copy] = np.frombuffer(ids, dtype="<i8")[copy]
        conn.execute("UPDATE vector_blocks SET firsts = ? WHERE id = 4", (changed.tobytes(),))
    assert_block_damaged(store.path, 4, queries(unit_rows(200, seed=62), seed=63)[0])


def test_a_trimmed_block_whose_copy_names_a_first_in_no_block_is_damage(tmp_path: Path) -> None:
    """Its columns count right (the full check passes), but a copy would read a column nobody
    stored: the search names the block rather than score it with another text's vector."""
    files = make_files(200, seed=64)
    store = packed_store(tmp_path, files)
    write_files(store, files, folder="/srv/b")  # blocks 5 and 6: copies only, no codes
    store.maintain()
    store.close()
    with sqlite3.connect(store.path) as conn:
        (firsts,) = conn.execute("SELECT firsts FROM vector_blocks WHERE id = 6").fetchone()
        changed = np.frombuffer(firsts, dtype="<i8").copy()
        changed[0] = 0  # no chunk has id 0
        conn.execute("UPDATE vector_blocks SET firsts = ? WHERE id = 6", (changed.tobytes(),))
    assert check_file(store.path)[1] == ()
    store = SqliteStore(store.path, pack_rows=PACK)
    with pytest.raises(IndexDamagedError, match="vector block 6: a copy's first is in no block"):
        store.nearest(queries(unit_rows(200, seed=64), seed=65)[0], 5, None)
    store.close()


def ids_of(store: SqliteStore) -> list[int]:
    return [int(i) for i in store.chunk_ids()]


def assert_block_damaged(path: Path, number: int, query: Any) -> None:
    """A search names the block as damage, and so does the full check."""
    store = SqliteStore(path, pack_rows=PACK)
    with pytest.raises(IndexDamagedError, match=f"its vector block {number} is not whole"):
        store.nearest(query, 5, None)
    store.close()
    assert check_file(path)[1] == ("1 vector blocks that are not whole (bytes cut or overwritten)",)


def test_a_block_cut_short_is_damage_the_search_and_the_check_name(tmp_path: Path) -> None:
    files = make_files(300, seed=54)
    store = packed_store(tmp_path, files)
    store.close()
    with sqlite3.connect(store.path) as conn:  # bytes lost from the middle block's codes
        conn.execute("UPDATE vector_blocks SET codes = substr(codes, 1, 100) WHERE id = 2")
    assert_block_damaged(store.path, 2, queries(unit_rows(300, seed=54), seed=55)[0])


def test_a_block_whose_firsts_are_cut_short_is_damage_too(tmp_path: Path) -> None:
    store = packed_store(tmp_path, make_files(300, seed=58))
    store.close()
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE vector_blocks SET firsts = substr(firsts, 1, 16) WHERE id = 3")
    assert_block_damaged(store.path, 3, queries(unit_rows(300, seed=58), seed=59)[0])


class BlockSource:
    """An in-memory PackedSource: float32 vectors of chunks 1..n, the first ``packed`` of them
    in blocks of ``rows``, the rest the tail; chunks can be deleted and added."""

    def __init__(self, matrix: Any, rows: int, packed: int, firsts: bool = False) -> None:
        self.vectors_by_id = {n + 1: matrix[n] for n in range(len(matrix))}
        self.files = {n + 1: n // 8 + 1 for n in range(len(matrix))}
        seen: dict[bytes, int] = {}  # with ``firsts``: equal rows are copies of the lowest id
        first = {i: seen.setdefault(row.tobytes(), i) for i, row in self.vectors_by_id.items()}
        self.packed_through = packed
        self.deleted: set[int] = set()
        self.changes = 0
        self.epoch = 1
        self.blocks_made = [
            pack_block(
                number + 1,
                np.arange(start + 1, start + rows + 1, dtype=np.int64),
                np.array([self.files[i] for i in range(start + 1, start + rows + 1)]),
                matrix[start : start + rows],
                np.array([first[i] for i in range(start + 1, start + rows + 1)], np.int64)
                if firsts
                else None,
            )
            for number, start in enumerate(range(0, packed, rows))
        ]

    def snapshot(self) -> Any:
        return contextlib.nullcontext()

    def generation(self) -> int:
        return self.changes

    def vector_ids(self) -> Any:
        tail = [i for i in self.vectors_by_id if i > self.packed_through and i not in self.deleted]
        return np.array(sorted(tail), dtype=np.int64)

    def vectors(self, min_id: int) -> tuple[Any, Any, Any]:
        ids = [i for i in self.vector_ids().tolist() if i > min_id]
        rows = [self.vectors_by_id[i] for i in ids]
        matrix = np.stack(rows) if rows else np.zeros((0, DIM), np.float32)
        return np.array(ids, np.int64), np.array([self.files[i] for i in ids], np.int64), matrix

    def pack_epoch(self) -> int:
        return self.epoch

    def blocks(self, after: int) -> Iterator[VectorBlock]:
        return iter([b for b in self.blocks_made if b.number > after])

    def gone(self) -> Any:
        return np.array(sorted(i for i in self.deleted if i <= self.packed_through), np.int64)

    def vectors_of(self, ids: Any) -> tuple[Any, Any]:
        kept = [int(i) for i in ids if int(i) not in self.deleted]
        rows = [self.vectors_by_id[i] for i in kept]
        return np.array(kept, np.int64), np.stack(rows) if rows else np.zeros((0, DIM), np.float32)

    def delete(self, ids: list[int]) -> None:
        self.deleted.update(ids)
        self.changes += 1

    def add(self, matrix: Any) -> None:
        first = max(self.vectors_by_id) + 1
        for n, row in enumerate(matrix):
            self.vectors_by_id[first + n] = row
            self.files[first + n] = 10_000
        self.changes += 1

    def float32_top(self, query: Any, pool: int, files: set[int] | None = None) -> list[int]:
        """The brute-force answer: every live chunk's float32 cosine, best first."""
        ids = [
            i
            for i in sorted(self.vectors_by_id)
            if i not in self.deleted and (files is None or self.files[i] in files)
        ]
        scores = np.stack([self.vectors_by_id[i] for i in ids]) @ query
        return [ids[n] for n in np.argsort(-scores, kind="stable")[:pool]]


def assert_exact(vectors: PackedVectors, source: BlockSource, query: Any, pool: int) -> None:
    found = vectors.nearest(query, pool, None)
    assert [cid for cid, _ in found] == source.float32_top(query, pool)
    wanted = np.stack([source.vectors_by_id[cid] for cid, _ in found]) @ query
    assert np.allclose([score for _, score in found], wanted, atol=1e-6)


def test_packed_vectors_give_the_float32_nearest_before_and_after_blocks_are_prepacked() -> None:
    """Blocks scanned as inputs (the first search), then by sessions of their own (from the
    second): both exact against every chunk's float32 cosine, blocks, tail and deletions."""
    matrix = unit_rows(1000, seed=60)
    source = BlockSource(matrix, rows=128, packed=896)  # 7 blocks and a tail of 104
    vectors = PackedVectors(source, background=False)
    probes = queries(matrix, seed=61)
    assert_exact(vectors, source, probes[0], 40)
    assert vectors.prepacked == 0  # a process that searched once built nothing
    for query in probes:
        assert_exact(vectors, source, query, 40)
    assert vectors.prepacked == 7
    source.delete([int(cid) for cid, _ in vectors.nearest(probes[1], 5, None)] + [1000])
    source.add(unit_rows(30, seed=62))
    for query in probes:
        assert_exact(vectors, source, query, 40)
        assert_exact(vectors, source, query, 1)


def assert_exact_with_copies(
    found: list[tuple[int, float]], want: list[int], score_of: Any
) -> None:
    """``found`` has the scores of ``want`` and its ids up to the order of equal vectors (BLAS
    may score two equal rows a last bit apart), and up to which copy fills the pool's edge."""
    wanted = [float(score_of(i)) for i in want]
    assert np.allclose([score for _, score in found], wanted, atol=1e-6)
    edge = wanted[-1] + 1e-6
    above = {i for i, s in zip(want, wanted, strict=True) if s > edge}
    assert {i for i, s in found if s > edge} == above


def test_copies_are_scanned_once_and_answer_as_their_first_even_once_it_is_gone() -> None:
    """Blocks that know each chunk's first keep one column per text; every answer stays the
    float32 one, before and after prepacking, after the first chunks are deleted, within
    files."""
    texts = unit_rows(300, seed=70)
    matrix = np.concatenate([texts, texts, texts[:150], unit_rows(50, seed=71)])
    source = BlockSource(matrix, rows=128, packed=768, firsts=True)  # 6 blocks, a tail of 32
    vectors = PackedVectors(source, background=False)
    probes = queries(texts, seed=72)

    def check(query: Any, pool: int, files: set[int] | None = None) -> None:
        found = vectors.nearest(query, pool, None if files is None else sorted(files))
        want = source.float32_top(query, pool, files)
        assert_exact_with_copies(found, want, lambda cid: source.vectors_by_id[cid] @ query)

    check(probes[0], 40)
    assert vectors.packed == 768 and vectors.columns == 300 + 18  # the new rows 751..768
    for query in probes:
        check(query, 40)
    assert vectors.prepacked == 4  # blocks 385..512 and 513..640 hold copies only
    source.delete(list(range(1, 300, 3)))  # first chunks: their copies read their columns
    for query in probes:
        check(query, 40)
        check(query, 1)
        check(query, 12, {1, 40, 80, 95})


def test_prepacking_in_a_thread_leaves_every_answer_exact() -> None:
    matrix = unit_rows(1200, seed=63)
    source = BlockSource(matrix, rows=64, packed=1152)  # 18 blocks
    vectors = PackedVectors(source)
    probes = queries(matrix, seed=64)
    for _ in range(40):  # searches while the thread replaces the blocks' kernels one by one
        for query in probes:
            assert_exact(vectors, source, query, 25)
        if vectors.prepacked == 18:
            break
        time.sleep(0.05)
    assert vectors.prepacked == 18
    vectors.stop_building()


def test_blocks_written_anew_while_sessions_are_built_are_read_anew() -> None:
    matrix = unit_rows(800, seed=65)
    source = BlockSource(matrix, rows=64, packed=768)
    vectors = PackedVectors(source)
    query = queries(matrix, seed=66)[0]
    assert_exact(vectors, source, query, 30)
    assert_exact(vectors, source, query, 30)  # the thread starts
    source.delete(list(range(1, 400, 2)))
    source.blocks_made, source.packed_through, source.epoch = [], 0, 2  # all in the tail now
    assert_exact(vectors, source, query, 30)
    assert vectors.packed == 0 and vectors.prepacked == 0
    source.blocks_made = BlockSource(matrix, rows=64, packed=768).blocks_made  # and packed again
    source.packed_through, source.epoch = 768, 3
    source.changes += 1
    for _ in range(3):
        assert_exact(vectors, source, query, 30)
    vectors.stop_building()


def test_a_search_within_files_is_exact_on_prepacked_blocks() -> None:
    matrix = unit_rows(640, seed=67)
    source = BlockSource(matrix, rows=128, packed=640)
    vectors = PackedVectors(source, background=False)
    query = queries(matrix, seed=68)[3]
    vectors.nearest(query, 10, None)
    files = {2, 17, 40, 79}
    for _ in range(2):
        found = vectors.nearest(query, 12, sorted(files))
        assert [cid for cid, _ in found] == source.float32_top(query, 12, files)
    assert vectors.prepacked == 5


def test_without_onnxruntime_kernels_numpy_scans_alike_and_nothing_is_prepacked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ModelError("no MatMulInteger here")

    monkeypatch.setattr(packed, "single_thread_session", refuse)  # both kernels are sessions
    matrix = unit_rows(700, seed=70)
    source = BlockSource(matrix, rows=128, packed=640)
    vectors = PackedVectors(source, background=False)
    for query in queries(matrix, seed=71):
        assert_exact(vectors, source, query, 30)
    assert vectors.prepacked == 0


def test_a_failed_prepack_stops_the_building_and_the_input_scan_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []

    def fail_second(codes: Any) -> Any:
        calls.append(codes.shape)
        if len(calls) > 1:
            raise MemoryError
        return prepacked_kernel(codes)

    monkeypatch.setattr(packed, "prepacked_kernel", fail_second)
    matrix = unit_rows(700, seed=72)
    source = BlockSource(matrix, rows=128, packed=640)  # 5 blocks
    vectors = PackedVectors(source, background=False)
    for query in queries(matrix, seed=73):
        assert_exact(vectors, source, query, 30)
    assert vectors.prepacked == 1 and len(calls) == 2  # one built, one failed, none after


def test_a_prepacked_kernel_gives_the_integer_sums_of_its_codes() -> None:
    rng = np.random.default_rng(69)
    codes = rng.integers(-127, 128, size=(DIM, 300), dtype=np.int8)
    feed = rng.integers(1, 2 * QUERY_LEVEL + 2, size=(2, DIM), dtype=np.uint8)
    kernel = prepacked_kernel(codes.copy())
    expected = (feed.astype(np.int64) - (QUERY_LEVEL + 1)) @ codes.astype(np.int64)
    assert (kernel.run(None, {"q": feed})[0] == expected).all()


def test_places_read_with_the_vectors_are_the_stored_ones_until_a_write(tmp_path: Path) -> None:
    files = make_files(600, seed=60)
    store = packed_store(tmp_path, files)
    query = queries(unit_rows(600, seed=60), seed=61)[0]
    scored = [cid for cid, _ in store.nearest(query, 50, None)]  # places read with the vectors
    fresh = SqliteStore(store.path)
    assert store.chunk_places(scored) == fresh.chunk_places(scored)
    assert [place.id for place in store.chunk_places(scored)] == scored
    gone = store.chunks(scored[:1])[0].rel
    fresh.delete_files(fresh.folders()[0].id, [gone])  # another writer: the generation moves
    left = [cid for cid in scored if cid in {p.id for p in fresh.chunk_places(scored)}]
    assert len(left) < len(scored)
    assert store.chunk_places(scored) == fresh.chunk_places(scored)
    assert [place.id for place in store.chunk_places(scored)] == left
    fresh.close()
    store.close()


class CountingSource(BlockSource):
    """A BlockSource that keeps the ids ``vectors_of`` is asked for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list[int] = []

    def vectors_of(self, ids: Any) -> tuple[Any, Any]:
        self.asked = [*self.asked, *np.asarray(ids).tolist()]
        return super().vectors_of(ids)


def test_a_copy_whose_first_went_before_its_block_reads_its_texts_one_column() -> None:
    """Three copies of 100 texts in three blocks; the third block was written after the first
    block's chunks were deleted, so its copies name the second block's chunks as their firsts:
    they read the same columns all the same, share their text keys, and a search reads one
    stored vector per text it scores."""
    texts = unit_rows(100, seed=80)
    source = CountingSource(
        np.concatenate([texts, texts, texts]), rows=100, packed=300, firsts=True
    )
    third = source.blocks_made[2]
    firsts = np.asarray(third.firsts) + 100  # 101..200: the lowest copies left then
    source.blocks_made[2] = dataclasses.replace(third, firsts=firsts)
    source.delete(list(range(1, 101)))
    vectors = PackedVectors(source, background=False)
    query = queries(texts, seed=81)[0]
    found = vectors.nearest(query, 30, None)
    assert vectors.columns == 100  # not 200: the third block's copies found their column
    want = source.float32_top(query, 30)
    assert_exact_with_copies(found, want, lambda cid: source.vectors_by_id[cid] @ query)
    texts_asked = [(cid - 1) % 100 for cid in source.asked]
    assert len(texts_asked) == len(set(texts_asked))  # one row per text scored
    assert {(cid - 1) % 100 for cid, _ in found} <= set(texts_asked)
    texts = vectors.texts()
    assert texts is not None
    keys = texts.keys(list(range(1, 301)))
    assert set(keys) == set(range(101, 301))  # deleted chunks have no key
    for n in range(101, 201):
        assert keys[n] == (source.files[n], keys[n][1]) and keys[n + 100][1] == keys[n][1]
    assert len({key for _, key in keys.values()}) == 100


def test_a_search_reads_a_text_whose_chosen_copy_went_from_its_other_copies() -> None:
    """A write between the refresh and the read-back took the copy a column was to be read
    from: the text's other copies are read instead, and keep their exact scores."""
    texts = unit_rows(60, seed=82)
    source = BlockSource(np.concatenate([texts, texts]), rows=40, packed=120, firsts=True)
    vectors = PackedVectors(source, background=False)
    query = queries(texts, seed=83)[0]
    best = vectors.nearest(query, 2, None)[0][0]  # the lower copy of the best text
    read = source.vectors_of

    def without_best(ids: Any) -> tuple[Any, Any]:  # as if it was deleted meanwhile
        return read(np.array([i for i in np.asarray(ids).tolist() if i != best], np.int64))

    source.vectors_of = without_best  # type: ignore[method-assign]
    found = dict(vectors.nearest(query, 4, None))
    assert best not in found and best + 60 in found
    assert np.isclose(found[best + 60], source.vectors_by_id[best] @ query, atol=1e-6)


def key_groups(keys: dict[int, tuple[int, Any]]) -> set[frozenset[int]]:
    groups: dict[Any, set[int]] = {}
    for cid, (_, key) in keys.items():
        groups.setdefault(key, set()).add(cid)
    return {frozenset(group) for group in groups.values()}


def test_text_keys_group_copies_as_their_text_hashes_do(tmp_path: Path) -> None:
    """Whether a text's chunks lie in blocks, in the tail or both, and in blocks written
    before firsts were stored: chunks share a text key exactly when they share a text."""
    files = make_files(200, seed=84)
    store = packed_store(tmp_path, files)
    write_files(store, dict(list(files.items())[:12]), folder="/srv/b")  # copies in the tail

    def check() -> None:
        ids = ids_of(store)
        by_hash: dict[str, set[int]] = {}
        for place in store.chunk_places(ids):
            by_hash.setdefault(place.text_hash, set()).add(place.id)
        keys = store.text_keys(ids)
        assert key_groups(keys) == {frozenset(group) for group in by_hash.values()}
        files_of = {place.id: place.file_id for place in store.chunk_places(ids)}
        assert {cid: file_id for cid, (file_id, _) in keys.items()} == files_of

    check()
    assert store.nearest(queries(unit_rows(200, seed=84), seed=85)[0], 5, None)
    store.maintain()  # the copies go into blocks too
    check()
    assert blocks_of(store.path) == 4
    store.delete_files(1, ["f0.py", "f3.py"])  # first chunks of copied texts
    check()
    store.close()
    as_whole_blocks(tmp_path / "index.db", keep_firsts=False)  # as schema 6 wrote them
    store = SqliteStore(tmp_path / "index.db")
    check()  # from the rows: each block chunk then owns its column
    store.close()
