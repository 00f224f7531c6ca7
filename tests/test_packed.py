"""Packed vectors: a SQLite index's vectors in int8 blocks give the exact nearest chunks."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from semsearch.store import ChunkRecord, FileWrite
from semsearch.store.sqlite.schema import SCHEMA_VERSION
from semsearch.store.sqlite.store import SqliteStore
from tests.test_scan import DIM, queries, unit_rows

PACK = 64  # chunks a block in these tests: several blocks and a tail from a few hundred chunks


def write_files(store: SqliteStore, files: dict[str, Any], vectors: bool = True) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    writes = []
    for rel, matrix in files.items():
        chunks = tuple(
            ChunkRecord(n + 1, n + 1, 0, 4, None, f"{rel} chunk {n}") for n in range(len(matrix))
        )
        writes.append(
            FileWrite(folder, rel, 1, 10, "sha", "ok", "text", chunks, matrix if vectors else None)
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


def blocks_of(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM vector_blocks").fetchone()[0])


def test_a_packed_index_gives_the_nearest_chunks_of_an_unpacked_one(tmp_path: Path) -> None:
    files = make_files(600, seed=40)
    store = SqliteStore(tmp_path / "index.db", create=True, pack_rows=PACK)
    store.set_model("test-model", DIM)
    write_files(store, files)
    store.maintain()
    assert blocks_of(store.path) == 600 // PACK  # and a tail of 600 % 64 chunks
    for query in queries(unit_rows(600, seed=40), seed=41):
        found = store.nearest(query, 50, None)
        assert [cid for cid, _ in found] == brute(store, files, query, 50)
    store.close()


def test_chunks_deleted_after_packing_are_never_found_and_new_ones_are(tmp_path: Path) -> None:
    files = make_files(600, seed=42)
    store = SqliteStore(tmp_path / "index.db", create=True, pack_rows=PACK)
    store.set_model("test-model", DIM)
    write_files(store, files)
    store.maintain()
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
    store = SqliteStore(tmp_path / "index.db", create=True, pack_rows=PACK)
    store.set_model("test-model", DIM)
    write_files(store, files)
    store.maintain()
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
    store = SqliteStore(tmp_path / "index.db", create=True, pack_rows=PACK)
    store.set_model("test-model", DIM)
    write_files(store, files)
    store.maintain()
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
