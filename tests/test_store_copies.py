"""Copies in the SQLite index: each text has one chunk whose FTS row the BM25 arm scores, the
others' rows carry ``COPY_MARK``; the marks and the FTS rows stay right through writes, deletions,
moves and the upgrade of a file from before schema 7, and a query over every file answers a
text at a time, its copies right after it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from semsearch.store.base import listed_rel
from semsearch.store.sqlite import schema
from semsearch.store.sqlite.schema import COPY_MARK, FTS_SQL, SCHEMA_VERSION, connect
from semsearch.store.sqlite.store import SqliteStore
from semsearch.text.lexical import chunk_terms, definitions, identifier_terms
from tests.test_store import file_write, words

VOCABULARY = ("alpha", "beta", "gamma", "delta", "one", "two", "three", "four")


def fts_ids(conn: sqlite3.Connection, match: str) -> set[int]:
    rows = conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?", (match,))
    return {row[0] for row in rows}


def check_marks(path: Path) -> set[int]:
    """Assert that each text's lowest chunk id is its one chunk not marked, in the table and in
    the FTS rows, and that each word's FTS rows are exactly the chunks holding it (a delete
    given other words than were inserted leaves rows behind); the ids marked."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT id, text_hash, text FROM chunks ORDER BY id").fetchall()
        first: dict[str, int] = {}
        for cid, text_hash, _ in rows:
            first.setdefault(text_hash, cid)
        copies = {cid for cid, text_hash, _ in rows if first[text_hash] != cid}
        assert {row[0] for row in conn.execute("SELECT id FROM copies")} == copies
        assert fts_ids(conn, COPY_MARK) == copies
        for word in VOCABULARY:
            holding = {cid for cid, _, text in rows if word in text.split()}
            assert fts_ids(conn, f'"{word}"') == holding, word
        return copies
    finally:
        conn.close()


def test_one_chunk_of_each_text_is_unmarked_through_every_write(tmp_path: Path) -> None:
    path = tmp_path / "index.db"
    store = SqliteStore(path, create=True)
    a = store.ensure_folder("/srv/a", "a")
    b = store.ensure_folder("/srv/b", "b")
    store.write_files(
        [
            file_write(a, "x1.md", ["alpha one", "beta two"]),
            file_write(a, "x2.md", ["alpha one", "gamma three", "gamma three"]),
            file_write(b, "x1.md", ["alpha one", "beta two", "delta four"]),
        ]
    )
    assert len(check_marks(path)) == 4  # alpha one x2, beta two, gamma three
    store.delete_files(a, ["x1.md"])  # the first chunks of "alpha one" and "beta two"
    assert len(check_marks(path)) == 2
    store.write_files([file_write(a, "x2.md", ["gamma three", "alpha one"])])  # rewritten
    assert len(check_marks(path)) == 1
    store.move_folder("/srv/b", "/srv/a", "sub/")  # new rels: new path terms, marks kept
    assert len(check_marks(path)) == 1
    store.remove_folder("/srv/a")
    assert check_marks(path) == set()
    store.write_files([file_write(store.ensure_folder("/srv/c", "c"), "x.md", ["alpha one"] * 3)])
    assert len(check_marks(path)) == 2
    store.clear_chunks()
    assert check_marks(path) == set()
    store.close()


def test_a_query_over_every_file_gives_each_text_once_with_its_copies_after_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "index.db"
    store = SqliteStore(path, create=True)
    texts = ["alpha one", "alpha beta two", "alpha gamma three three", "alpha delta " * 4]
    writes = []
    for name in ("a", "b", "c"):  # the same rels in three folders: the rows score alike
        folder = store.ensure_folder(f"/srv/{name}", name)
        writes += [file_write(folder, f"x{n}.md", [text]) for n, text in enumerate(texts)]
    folder = store.ensure_folder("/srv/d", "d")
    writes.append(file_write(folder, "y.md", ["alpha alone"]))
    store.write_files(writes)
    query = words("alpha")
    every_file = list(store.file_refs())
    whole = store.lexical(query, 100, every_file)  # within files: every row scored
    assert len(whole) == 13
    hashes = dict(sqlite3.connect(path).execute("SELECT id, text_hash FROM chunks").fetchall())
    by_text: dict[str, list[int]] = {}
    for cid in whole:
        by_text.setdefault(hashes[cid], []).append(cid)
    expected = [cid for ids in by_text.values() for cid in sorted(ids)]
    asked: list[str] = []
    store._conn.set_trace_callback(asked.append)
    assert store.lexical(query, 100, None) == expected
    assert any(f"NOT {COPY_MARK}" in sql for sql in asked)
    for limit in range(1, 14):  # shallower and deeper asks of the same query
        assert store.lexical(query, limit, None) == expected[:limit]
    fresh = SqliteStore(path)
    assert [fresh.lexical(query, n, None) for n in (2, 7, 13)] == [expected[:n] for n in (2, 7, 13)]
    fresh.close()
    store.close()


def test_a_file_from_before_schema_7_gets_its_copies_marked(tmp_path: Path) -> None:
    path = tmp_path / "index.db"
    store = SqliteStore(path, create=True)
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files(
        [file_write(folder, f"x{n}.md", ["alpha one", f"beta two {n}"]) for n in range(3)]
    )
    store.close()
    old = connect(path)  # as schema 6 left it: no copies table, no marks, version 2's triggers
    old.executescript(
        "DROP TABLE copies;"
        + FTS_SQL
        + "PRAGMA user_version = 6; UPDATE meta SET value = '6' WHERE key = 'schema_version';"
    )
    assert fts_ids(old, COPY_MARK) == set()
    old.close()
    upgraded = SqliteStore(path)
    assert upgraded.meta("schema_version") == str(SCHEMA_VERSION)
    assert len(check_marks(path)) == 2
    assert len(upgraded.lexical(words("alpha"), 10, None)) == 3
    upgraded.close()


def test_an_index_with_few_copies_scores_every_row(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "index.db", create=True)
    folder = store.ensure_folder("/srv/a", "a")
    texts = [f"alpha word{n}" for n in range(9)] + ["alpha word0"]  # 1 copy in 10 rows
    store.write_files([file_write(folder, f"x{n}.md", [text]) for n, text in enumerate(texts)])
    asked: list[str] = []
    store._conn.set_trace_callback(asked.append)
    assert len(store.lexical(words("alpha"), 100, None)) == 10
    ranked = [sql for sql in asked if "ORDER BY bm25" in sql]
    assert ranked and not any(COPY_MARK in sql for sql in ranked)
    store.close()


CODE_PIECES = (
    "def ",
    "class ",
    "fn ",
    "struct ",
    "typedef ",
    "#define ",
    "export const ",
    "parseHeader",
    "HTTPServer",
    "x_y",
    "Foo::Bar",
    "(",
    ")",
    " {",
    "}",
    " = ",
    ";",
    ":",
    "\n",
    "\t",
    "    ",
    "int ",
    "*",
    "<T>",
    "$v",
    "é",
    "\ud800",
)


@given(
    pieces=st.lists(st.sampled_from(CODE_PIECES), max_size=40),
    rel=st.sampled_from(["", "a", "_", "src/HttpClient.py", "x/y/z/w/parseURL.ts", "n\x00ffé.c"]),
)
def test_the_fts_columns_through_the_memo_follow_the_lexical_rules(
    pieces: list[str], rel: str
) -> None:
    """What the triggers write (``ss_terms``, ``ss_defines``) is what ``semsearch.text.lexical``
    derives, asked once or again from the memo."""
    text = "".join(pieces)
    for _ in range(2):
        assert schema._terms(rel, text) == chunk_terms(listed_rel(rel), text)
        assert schema._defines(text) == " ".join(definitions(text))
        assert schema._marked_terms(rel, text, 1).endswith(f" {COPY_MARK}")


def test_the_memo_of_fts_columns_keeps_the_texts_seen_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    derived: list[str] = []

    def counted(text: str) -> list[str]:
        derived.append(text)
        return definitions(text)

    monkeypatch.setattr(schema, "definitions", counted)
    memo = schema._TextColumns(3)
    texts = [f"def name{n}(self):\n    return fetchValue{n}()\n" for n in range(10)]
    for text in texts:
        memo(text)
    memo(texts[7])  # seen again: kept over 8 and 9 when a new text comes
    memo("def other(): pass\n")
    assert len(memo) == 3 and len(derived) == 11
    derived.clear()
    memo(texts[7]), memo(texts[9])
    assert derived == []
    for text in texts:
        assert memo(text) == (" ".join(definitions(text)), " ".join(identifier_terms(text)))
    assert len(memo) == 3 and len(derived) == 10
