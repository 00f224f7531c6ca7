"""The SQLite store: format, transactions, FTS consistency, model guard, writer lock."""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

import numpy as np
import pytest

from semsearch.errors import IndexMissingError, LockedError, ModelMismatchError, StoreError
from semsearch.store import SCHEMA_VERSION, ChunkRecord, FileWrite, SqliteStore, write_lock


def record(text: str, line: int = 1) -> ChunkRecord:
    return ChunkRecord(line, line, 0, len(text), None, text)


def file_write(folder_id: int, rel: str, texts: list[str], dim: int = 4) -> FileWrite:
    vectors = np.eye(dim, dtype=np.float32)[: len(texts)]
    chunks = tuple(record(text, n + 1) for n, text in enumerate(texts))
    return FileWrite(folder_id, rel, 1, 10, "sha", "ok", "text", chunks, vectors)


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore(tmp_path / "index.db", create=True)


def fts_count(store: SqliteStore, word: str) -> int:
    return len(store.lexical(f'"{word}"', 100))


def test_missing_index_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(IndexMissingError, match="Run `semsearch index` first"):
        SqliteStore(tmp_path / "none.db")


def test_not_an_index_is_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.db"
    bogus.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreError, match="Is it a semsearch index"):
        SqliteStore(bogus)


def test_schema_version_and_wal(store: SqliteStore, tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "index.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.meta("schema_version") == str(SCHEMA_VERSION)


def test_vectors_are_little_endian_float32_blobs(store: SqliteStore, tmp_path: Path) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "x.md", ["alpha beta"])])
    blob = sqlite3.connect(tmp_path / "index.db").execute("SELECT vector FROM chunks").fetchone()[0]
    assert struct.unpack("<4f", blob) == (1.0, 0.0, 0.0, 0.0)
    _, _, matrix = store.vectors(0)
    assert matrix.dtype == np.float32 and matrix.shape == (1, 4)


def test_replace_and_delete_keep_fts_in_step(store: SqliteStore) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "x.md", ["alpha one", "alpha two"])])
    assert fts_count(store, "alpha") == 2
    store.write_files([file_write(folder, "x.md", ["gamma"])])
    assert (fts_count(store, "alpha"), fts_count(store, "gamma")) == (0, 1)
    assert store.delete_files(folder, ["x.md"]) == 1
    assert fts_count(store, "gamma") == 0
    assert store.chunk_count() == 0


def test_remove_folder_cascades(store: SqliteStore) -> None:
    a = store.ensure_folder("/srv/a", "a")
    b = store.ensure_folder("/srv/a-private", "a-private")
    store.write_files([file_write(a, "x.md", ["shared word"]), file_write(b, "y.md", ["shared"])])
    assert store.remove_folder("/srv/a") == 1
    assert [f.path for f in store.folders()] == ["/srv/a-private"]
    assert fts_count(store, "shared") == 1


def test_generation_bumps_on_every_write(store: SqliteStore) -> None:
    before = store.generation()
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "x.md", ["alpha"])])
    assert store.generation() == before + 2


def test_failed_transaction_leaves_no_trace(store: SqliteStore) -> None:
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


def test_model_guard(store: SqliteStore) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.set_model("model-a", 4)
    store.write_files([file_write(folder, "x.md", ["alpha"])])
    with pytest.raises(ModelMismatchError, match="semsearch index --force"):
        store.set_model("model-b", 4)
    store.clear_chunks()
    store.set_model("model-b", 8)
    assert store.model() == ("model-b", 8)


@pytest.mark.parametrize("expression", ['"foo AND (bar"', '""""', '"x" OR "NEAR("'])
def test_quoted_expressions_never_error(store: SqliteStore, expression: str) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "x.md", ["foo bar near"])])
    assert isinstance(store.lexical(expression, 10), list)


def test_lexical_filter_by_files(store: SqliteStore) -> None:
    a = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(a, "x.md", ["needle"]), file_write(a, "y.md", ["needle"])])
    ref = {r.rel: r.id for r in store.file_refs()}
    hits = store.lexical('"needle"', 10, [ref["y.md"]])
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


def test_terms_column_matches_path_and_split_identifiers(store: SqliteStore) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "net/retryPolicy.ts", ["const parseHeaderLine = 1"])])
    for words in ('"retry"', '"policy"', '"net"', '"header line"', '"parseHeaderLine"'):
        assert len(store.lexical(words, 10)) == 1, words
    store.delete_files(folder, ["net/retryPolicy.ts"])
    assert store.lexical('"retry"', 10) == []


OLD_V1_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE folders(
    id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, name TEXT NOT NULL, last_indexed REAL);
CREATE TABLE files(
    id INTEGER PRIMARY KEY, folder_id INTEGER NOT NULL REFERENCES folders(id) ON DELETE CASCADE,
    rel TEXT NOT NULL, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL, sha256 TEXT,
    status TEXT NOT NULL, kind TEXT, UNIQUE(folder_id, rel));
CREATE TABLE chunks(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    ord INTEGER NOT NULL, start_line INTEGER NOT NULL, end_line INTEGER NOT NULL,
    start_offset INTEGER NOT NULL, end_offset INTEGER NOT NULL, page INTEGER,
    text TEXT NOT NULL, vector BLOB NOT NULL);
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


def test_version_1_index_is_migrated_and_its_fts_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.executescript(OLD_V1_SCHEMA)
    old.close()
    store = SqliteStore(path)
    assert store.meta("schema_version") == str(SCHEMA_VERSION)
    assert store.generation() == 8
    for words in ('"parseHeaderLine"', '"header line"', '"retry"', 'defines : "parseHeaderLine"'):
        assert store.lexical(words, 10) == [1], words
    store.delete_files(1, ["net/retryPolicy.py"])
    assert store.lexical('"retry"', 10) == []


def test_new_index_uses_large_pages(store: SqliteStore, tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "index.db")
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 16384


def test_index_from_a_newer_semsearch_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match="Upgrade semsearch"):
        SqliteStore(path)
