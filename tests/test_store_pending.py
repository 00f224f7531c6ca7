"""Chunks written before their vectors: pending chunks, vectors reused by text hash, the
in-memory matrix picking them up, and the schema upgrades that made vectors optional.

Tests taking the ``store`` fixture run against both backends.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from semsearch.errors import ReadOnlyError
from semsearch.store import FileWrite, Store, text_hash
from semsearch.store.exact import ExactVectors
from semsearch.store.sqlite.schema import FTS_SQL, SCHEMA_VERSION, TABLES_SQL, connect
from semsearch.store.sqlite.store import SqliteStore
from tests.conftest import make_immutable
from tests.test_store import (
    CountingSource,
    assert_same_ranking,
    file_write,
    fts_count,
    record,
    small_index,
    words,
)


def pending_write(folder_id: int, rel: str, texts: list[str]) -> FileWrite:
    """A file's chunks written without vectors (the first pass of an index run)."""
    chunks = tuple(record(text, n + 1) for n, text in enumerate(texts))
    return FileWrite(folder_id, rel, 1, 10, "sha", "ok", "text", chunks)


def test_chunks_written_without_vectors_are_searchable_by_words_and_pending(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([pending_write(folder, "x.md", ["alpha one", "beta", "alpha one"])])
    assert fts_count(store, "alpha") == 2 and store.pending_count() == 3
    assert len(store.vectors(0)[0]) == 0 and len(store.vector_ids()) == 0
    query = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    assert store.nearest(query, 5, None) == []
    pending = store.pending_texts(10)
    assert [text for _, text in pending] == ["alpha one", "beta"]  # distinct, oldest first
    assert [h for h, _ in pending] == [text_hash("alpha one"), text_hash("beta")]
    first = np.eye(4, dtype=np.float32)[:1]
    assert store.set_vectors([pending[0][0]], first) == 2  # both chunks of that text
    assert store.pending_count() == 1 and store.pending_texts(10) == [pending[1]]
    ids = [int(i) for i in store.chunk_ids()]
    assert_same_ranking(store.nearest(query, 5, None), [(ids[0], 1.0), (ids[2], 1.0)])
    assert store.set_vectors([pending[1][0]], np.eye(4, dtype=np.float32)[1:2]) == 1
    assert store.pending_count() == 0 and store.pending_texts(10) == []
    found = store.nearest(np.array([0.0, 1.0, 0.0, 0.0], dtype=np.float32), 5, None)
    assert found[0] == (ids[1], pytest.approx(1.0))  # picked up without a full reload


def test_a_chunk_of_a_stored_text_takes_its_vector_from_anywhere_in_the_index(
    store: Store,
) -> None:
    a = store.ensure_folder("/srv/a", "a")
    b = store.ensure_folder("/srv/b", "b")
    store.write_files([file_write(a, "x.md", ["alpha", "beta"])])
    store.write_files([pending_write(b, "copy.md", ["beta", "new text"])])
    assert store.pending_texts(10) == [(text_hash("new text"), "new text")]
    store.write_files([pending_write(a, "x.md", ["gamma", "alpha"])])  # own old chunks lend too
    assert [text for _, text in store.pending_texts(10)] == ["new text", "gamma"]
    store.write_files([pending_write(b, "again.md", ["alpha"])], reuse=False)
    assert store.pending_count() == 3
    _, _, matrix = store.vectors(0)
    np.testing.assert_array_equal(matrix, np.eye(4, dtype=np.float32)[[1, 0]])


def test_pending_chunks_and_paths_of_some_folders(store: Store) -> None:
    a = store.ensure_folder("/srv/a", "a")
    b = store.ensure_folder("/srv/b", "b")
    store.write_files([pending_write(a, "x.py", ["alpha", "shared"])])
    store.write_files([pending_write(b, "y.py", ["beta", "shared"])])
    assert store.pending_count() == 4 and store.pending_count([a, b]) == 4
    assert (store.pending_count([a]), store.pending_count([b]), store.pending_count([])) == (
        2,
        2,
        0,
    )
    assert [text for _, text in store.pending_texts(10, [b])] == ["beta", "shared"]
    assert [text for _, text in store.pending_texts(1, [b])] == ["beta"]
    assert store.pending_texts(10, []) == []
    ids = {folder: next(iter(store.file_states(folder).values())).id for folder in (a, b)}
    assert store.pending_paths(10, [b]) == [(ids[b], "y.py")]
    assert store.pending_paths(10, [a, b]) == [(ids[a], "x.py"), (ids[b], "y.py")]
    # a text both folders hold gets its vector in both, whichever folder's run embeds it
    store.set_vectors([text_hash("shared")], np.eye(4, dtype=np.float32)[:1])
    assert (store.pending_count([a]), store.pending_count([b])) == (1, 1)


def test_exact_vectors_pick_up_chunks_that_got_their_vector_later() -> None:
    source = CountingSource()
    source.put(2, 10, [1.0, 0.0])
    source.put(5, 10, [0.0, 1.0])
    exact = ExactVectors(source)
    query = np.array([0.8, 0.6], dtype=np.float32)
    assert [cid for cid, _ in exact.nearest(query, 5, None)] == [2, 5]
    source.put(3, 20, [0.6, 0.8])  # chunk 3 was pending: its id is below the last one read
    assert_same_ranking(exact.nearest(query, 5, None), [(3, 0.96), (2, 0.8), (5, 0.6)])
    assert source.reads == [0, 2] and list(exact.ids) == [2, 3, 5]


OLD_V2_ROWS = """
INSERT INTO meta VALUES ('schema_version', '2'), ('generation', '3');
INSERT INTO folders VALUES (1, '/srv/a', 'a', NULL);
INSERT INTO files VALUES (1, 1, 'net/retryPolicy.py', 1, 1, 'x', 'ok', 'text');
INSERT INTO chunks VALUES (1, 1, 0, 1, 1, 0, 20, NULL, 'def parseHeaderLine(): pass', x'0000803f');
INSERT INTO chunks VALUES (2, 1, 1, 2, 2, 21, 30, NULL, 'gone soon', x'0000803f');
DELETE FROM chunks WHERE id = 2;
"""


def test_version_2_index_gets_nullable_vectors_and_text_hashes(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    old = connect(path)  # version 2's DDL: version 1's tables and the three-column FTS table
    old.executescript(TABLES_SQL + FTS_SQL + OLD_V2_ROWS + "PRAGMA user_version = 2;")
    old.close()
    store = SqliteStore(path)
    assert store.meta("schema_version") == str(SCHEMA_VERSION)
    assert store.lexical(words("parseHeaderLine"), 10) == [1]
    assert store.pending_count() == 0 and [int(i) for i in store.vector_ids()] == [1]
    store.write_files([pending_write(1, "b.md", ["def parseHeaderLine(): pass", "fresh"])])
    assert [int(i) for i in store.chunk_ids()] == [1, 3, 4]  # id 2 is never handed out again
    assert store.pending_texts(10) == [(text_hash("fresh"), "fresh")]  # hashed in the migration


def test_a_read_only_index_that_needs_an_upgrade_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    old = connect(path)
    old.executescript(TABLES_SQL + FTS_SQL + OLD_V2_ROWS + "PRAGMA user_version = 2;")
    old.close()
    make_immutable(path)
    try:
        with pytest.raises(ReadOnlyError) as caught:
            SqliteStore(path)
        assert str(path) in str(caught.value) and "schema version 2" in str(caught.value)
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    # with write access it upgrades
    assert SqliteStore(path).meta("schema_version") == str(
        SCHEMA_VERSION
    )  # with write access it upgrades


def test_a_read_only_version_3_index_is_searched_without_path_vectors(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    small_index(path, "a.py", ["alpha"])
    old = connect(path)  # as version 3 left it: no path_vector column
    old.executescript(
        "ALTER TABLE files DROP COLUMN path_vector; PRAGMA user_version = 3;"
        "UPDATE meta SET value = '3' WHERE key = 'schema_version';"
    )
    old.close()
    make_immutable(path)
    try:
        read_only = SqliteStore(path)  # cannot be upgraded, and is not refused
        ids = list(read_only.file_refs())
        assert read_only.read_only and len(ids) == 1
        assert read_only.path_vectors(ids) == {}
        assert read_only.pending_paths(10) == []  # no column to read, nothing to write
        assert read_only.meta("schema_version") == "3"
        read_only.close()
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    upgraded = SqliteStore(path)  # with write access it upgrades; the file's path is pending
    assert upgraded.meta("schema_version") == str(SCHEMA_VERSION)
    assert upgraded.pending_paths(10) == [(ids[0], "a.py")]
