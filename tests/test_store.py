"""The stores: format, transactions, FTS consistency, model guard, writer lock.

Tests taking the ``store`` fixture run against both backends; the rest are about one of them.
"""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

import numpy as np
import pytest

from semsearch.errors import IndexMissingError, LockedError, ModelMismatchError, StoreError
from semsearch.lexical import COLUMNS, LexicalQuery
from semsearch.store import ChunkRecord, FileWrite, Store, open_store, write_lock
from semsearch.store.sqlite import SqliteStore
from semsearch.store.sqlite_schema import SCHEMA_VERSION, TABLES_SQL
from tests.conftest import BACKENDS


def record(text: str, line: int = 1) -> ChunkRecord:
    return ChunkRecord(line, line, 0, len(text), None, text)


def file_write(folder_id: int, rel: str, texts: list[str], dim: int = 4) -> FileWrite:
    vectors = np.eye(dim, dtype=np.float32)[: len(texts)]
    chunks = tuple(record(text, n + 1) for n, text in enumerate(texts))
    return FileWrite(folder_id, rel, 1, 10, "sha", "ok", "text", chunks, vectors)


def words(*alternatives: str, columns: tuple[str, ...] = COLUMNS) -> LexicalQuery:
    return LexicalQuery(alternatives, columns)


def location(tmp_path: Path, backend: str) -> Path:
    return tmp_path / ("index.db" if backend == "sqlite" else "lancedb")


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    backend = str(request.param)
    opened = open_store(backend, location(tmp_path, backend), create=True)
    opened.set_model("model-a", 4)
    return opened


@pytest.fixture
def sqlite_store(tmp_path: Path) -> SqliteStore:
    return SqliteStore(tmp_path / "index.db", create=True)


def fts_count(store: Store, word: str) -> int:
    return len(store.lexical(words(word), 100, None))


@pytest.mark.parametrize("backend", BACKENDS)
def test_missing_index_is_a_clear_error(tmp_path: Path, backend: str) -> None:
    with pytest.raises(IndexMissingError, match="Run `semsearch index` first"):
        open_store(backend, location(tmp_path, backend))


def test_not_an_index_is_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.db"
    bogus.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreError, match="Is it a semsearch index"):
        SqliteStore(bogus)


def test_schema_version_and_wal(sqlite_store: SqliteStore, tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "index.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert sqlite_store.meta("schema_version") == str(SCHEMA_VERSION)


def test_vectors_are_little_endian_float32_blobs(sqlite_store: SqliteStore, tmp_path: Path) -> None:
    folder = sqlite_store.ensure_folder("/srv/a", "a")
    sqlite_store.write_files([file_write(folder, "x.md", ["alpha beta"])])
    blob = sqlite3.connect(tmp_path / "index.db").execute("SELECT vector FROM chunks").fetchone()[0]
    assert struct.unpack("<4f", blob) == (1.0, 0.0, 0.0, 0.0)


def test_vectors_come_back_in_id_order(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "x.md", ["alpha", "beta"])])
    store.write_files([file_write(folder, "y.md", ["gamma"])])
    ids, file_ids, matrix = store.vectors(0)
    assert matrix.dtype == np.float32 and matrix.shape == (3, 4)
    assert list(ids) == sorted(ids) and list(ids) == list(store.chunk_ids())
    np.testing.assert_array_equal(matrix, np.eye(4, dtype=np.float32)[[0, 1, 0]])
    later_ids, _, later = store.vectors(int(ids[1]))
    assert list(later_ids) == [ids[2]] and later.shape == (1, 4)
    refs = {r.id: r.rel for r in store.file_refs()}
    assert [refs[int(f)] for f in file_ids] == ["x.md", "x.md", "y.md"]


def test_replace_and_delete_keep_fts_in_step(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "x.md", ["alpha one", "alpha two"])])
    assert fts_count(store, "alpha") == 2
    store.write_files([file_write(folder, "x.md", ["gamma"])])
    assert (fts_count(store, "alpha"), fts_count(store, "gamma")) == (0, 1)
    assert store.delete_files(folder, ["x.md"]) == 1
    assert fts_count(store, "gamma") == 0
    assert store.chunk_count() == 0


def test_remove_folder_cascades(store: Store) -> None:
    a = store.ensure_folder("/srv/a", "a")
    b = store.ensure_folder("/srv/a-private", "a-private")
    store.write_files([file_write(a, "x.md", ["shared word"]), file_write(b, "y.md", ["shared"])])
    assert store.remove_folder("/srv/a") == 1
    assert [f.path for f in store.folders()] == ["/srv/a-private"]
    assert fts_count(store, "shared") == 1


def test_generation_bumps_on_every_write(store: Store) -> None:
    seen = [store.generation()]
    folder = store.ensure_folder("/srv/a", "a")
    seen.append(store.generation())
    store.write_files([file_write(folder, "x.md", ["alpha"])])
    seen.append(store.generation())
    store.touch_files([(store.file_refs()[0].id, 5)])
    seen.append(store.generation())
    store.delete_files(folder, ["x.md"])
    seen.append(store.generation())
    assert seen == sorted(set(seen)), seen


def test_sqlite_generation_counts_transactions(sqlite_store: SqliteStore) -> None:
    before = sqlite_store.generation()
    folder = sqlite_store.ensure_folder("/srv/a", "a")
    sqlite_store.write_files([file_write(folder, "x.md", ["alpha"])])
    assert sqlite_store.generation() == before + 2


def test_failed_transaction_leaves_no_trace(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    broken = FileWrite(
        folder,
        "bad.md",
        1,
        1,
        "s",
        "ok",
        "text",
        (record("x"), record("y")),
        np.zeros((1, 4), np.float32),
    )
    with pytest.raises(AssertionError):
        store.write_files([file_write(folder, "good.md", ["fine"]), broken])
    assert store.file_states(folder) == {}


def test_model_guard(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "x.md", ["alpha"])])
    with pytest.raises(ModelMismatchError, match="semsearch index --force"):
        store.set_model("model-b", 4)
    store.clear_chunks()
    store.set_model("model-b", 8)
    assert store.model() == ("model-b", 8)


@pytest.mark.parametrize("alternatives", [("foo AND (bar",), ('"',), ("x", "NEAR("), ("*:-",)])
def test_any_query_text_is_safe(store: Store, alternatives: tuple[str, ...]) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "x.md", ["foo bar near"])])
    found = store.lexical(words(*alternatives), 10, None)
    assert found == ([store.chunk_ids()[0]] if alternatives[0] == "x" else [])


def test_lexical_filter_by_files(store: Store) -> None:
    a = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(a, "x.md", ["needle"]), file_write(a, "y.md", ["needle"])])
    ref = {r.rel: r.id for r in store.file_refs()}
    hits = store.lexical(words("needle"), 10, [ref["y.md"]])
    assert [row.rel for row in store.chunks(hits)] == ["y.md"]


def test_writer_lock_excludes_a_second_writer(tmp_path: Path) -> None:
    db = tmp_path / "index.db"
    with (
        write_lock(db, 0),
        pytest.raises(LockedError, match="Another `semsearch index`"),
        write_lock(db, 0.3),
    ):
        pass
    with write_lock(db, 0):
        pass


def test_terms_column_matches_path_and_split_identifiers(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "net/retryPolicy.ts", ["const parseHeaderLine = 1"])])
    for word in ("retry", "policy", "net", "header line", "parseHeaderLine"):
        assert len(store.lexical(words(word), 10, None)) == 1, word
    assert len(store.lexical(words("parseHeaderLine", columns=("defines",)), 10, None)) == 1
    assert store.lexical(words("retry", columns=("defines",)), 10, None) == []
    store.delete_files(folder, ["net/retryPolicy.ts"])
    assert store.lexical(words("retry"), 10, None) == []


OLD_V1_SCHEMA = (
    TABLES_SQL
    + """
CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id');
CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
END;
INSERT INTO meta VALUES ('schema_version', '1'), ('generation', '7');
INSERT INTO folders VALUES (1, '/srv/a', 'a', NULL);
INSERT INTO files VALUES (1, 1, 'net/retryPolicy.py', 1, 1, 'x', 'ok', 'text');
INSERT INTO chunks VALUES (1, 1, 0, 1, 1, 0, 20, NULL, 'def parseHeaderLine(): pass', x'0000803f');
PRAGMA user_version = 1;
"""
)


def test_version_1_index_is_migrated_and_its_fts_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.executescript(OLD_V1_SCHEMA)
    old.close()
    store = SqliteStore(path)
    assert store.meta("schema_version") == str(SCHEMA_VERSION)
    assert store.generation() == 8
    for query in (
        words("parseHeaderLine"),
        words("header line"),
        words("retry"),
        words("parseHeaderLine", columns=("defines",)),
    ):
        assert store.lexical(query, 10) == [1], query
    store.delete_files(1, ["net/retryPolicy.py"])
    assert store.lexical(words("retry"), 10) == []


def test_new_index_uses_large_pages(sqlite_store: SqliteStore, tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "index.db")
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 16384


def test_index_from_a_newer_semsearch_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match="Upgrade semsearch"):
        SqliteStore(path)
