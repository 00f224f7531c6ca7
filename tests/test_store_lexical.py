"""The SQLite BM25 arm: words in half the rows or more are left out of a first query, on a real
index file, and the answers are those of the whole query."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from semsearch.lexical import LexicalQuery
from semsearch.store.sqlite import BM25_WEIGHTS, SqliteStore
from semsearch.store.sqlite_lexical import LexicalReader, read_lexical
from tests.test_store import file_write


def build(tmp_path: Path, texts: list[str]) -> SqliteStore:
    store = SqliteStore(tmp_path / "index.db", create=True)
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, f"f{n}.md", [text], 1) for n, text in enumerate(texts)])
    return store


def corpus() -> list[str]:
    """30 rows that all say "shared"; "needle" in 6 of them, each of another length (no ties)."""
    texts = [f"shared filler{n} " + "pad " * (n % 7) for n in range(30)]
    for n in range(6):
        texts[n * 5] = "needle shared " + "word " * n
    return texts


def reader_of(store: SqliteStore) -> tuple[LexicalReader, sqlite3.Connection]:
    conn = sqlite3.connect(store.path)
    return LexicalReader(conn, store.generation), conn


def whole(conn: sqlite3.Connection, query: LexicalQuery, limit: int) -> list[int]:
    return read_lexical(conn, query.fts5(), BM25_WEIGHTS, limit, None)


def test_a_word_of_half_the_rows_is_common_as_fts5_stems_it(tmp_path: Path) -> None:
    texts = [f"walks row{n}" for n in range(5)] + [f"other row{n}" for n in range(5, 10)]
    texts[9] = "rare other"
    store = build(tmp_path, texts)
    reader, _ = reader_of(store)
    assert reader.common(LexicalQuery(("walking", "rare"))) == ("walking",)  # walks, walking: walk
    assert reader.common(LexicalQuery(("other", "rare"))) == ("other",)  # 5 of 10: idf clamped
    assert reader.common(LexicalQuery(("row9", "rare"))) == ()


def test_the_first_query_leaves_common_words_out_and_answers_as_the_whole(tmp_path: Path) -> None:
    store = build(tmp_path, corpus())
    reader, conn = reader_of(store)
    query = LexicalQuery(("shared", "needle"))
    assert reader.common(query) == ("shared",)
    asked: list[str] = []
    conn.set_trace_callback(asked.append)
    found = reader.read(query, BM25_WEIGHTS, 4, None)
    conn.set_trace_callback(None)
    assert [q for q in asked if "ORDER BY bm25" in q and '"shared"' in q] == []  # pruned only
    assert found == whole(conn, query, 4)
    assert {row.text.split()[0] for row in store.chunks(found)} == {"needle"}


def test_too_few_rows_without_them_asks_the_whole_query(tmp_path: Path) -> None:
    store = build(tmp_path, corpus())
    reader, conn = reader_of(store)
    query = LexicalQuery(("shared", "needle"))
    asked: list[str] = []
    conn.set_trace_callback(asked.append)
    found = reader.read(query, BM25_WEIGHTS, 20, None)  # 6 needles, then rows of "shared" only
    conn.set_trace_callback(None)
    assert found == whole(conn, query, 20)
    assert len(found) == 20
    ranked = [q for q in asked if "ORDER BY bm25" in q]  # 6 needles cannot fill 20: no first try
    assert len(ranked) == 1 and '"shared"' in ranked[0]


def test_within_files_the_rows_are_those_files_rows(tmp_path: Path) -> None:
    store = build(tmp_path, corpus())
    reader, _ = reader_of(store)
    ids = {ref.rel: ref.id for ref in store.file_refs().values()}
    allowed = [ids["f0.md"], ids["f5.md"], ids["f1.md"]]
    found = reader.read(LexicalQuery(("shared", "needle")), BM25_WEIGHTS, 2, allowed)
    assert sorted(row.rel for row in store.chunks(found)) == ["f0.md", "f5.md"]
    found = reader.read(LexicalQuery(("shared", "needle")), BM25_WEIGHTS, 3, allowed)
    assert sorted(row.rel for row in store.chunks(found)) == ["f0.md", "f1.md", "f5.md"]


def test_a_write_counts_again(tmp_path: Path) -> None:
    store = build(tmp_path, corpus())
    reader, _ = reader_of(store)
    query = LexicalQuery(("shared", "needle"))
    assert reader.common(query) == ("shared",)
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, f"g{n}.md", [f"new{n}"], 1) for n in range(40)])
    assert reader.common(query) == ()  # 30 of 70 rows now


@pytest.mark.parametrize(
    "query",
    [
        LexicalQuery(("shared",)),  # one alternative: nothing to rank it by without it
        LexicalQuery(("shared", "filler3")),  # the other word rarer, so it is left out
        LexicalQuery(("shared", "needle"), columns=("defines",)),  # other columns, other counts
    ],
)
def test_a_query_is_whole_when_nothing_else_would_rank(tmp_path: Path, query: LexicalQuery) -> None:
    store = build(tmp_path, corpus())
    reader, conn = reader_of(store)
    expected = whole(conn, query, 10)
    assert reader.read(query, BM25_WEIGHTS, 10, None) == expected
    if len(query.alternatives) == 1 or query.columns != ("text", "terms", "defines"):
        assert reader.common(query) == ()


def test_all_words_common_is_the_whole_query(tmp_path: Path) -> None:
    store = build(tmp_path, corpus())
    reader, conn = reader_of(store)
    query = LexicalQuery(("shared", "sharing"))  # both stem to "share", in every row
    assert reader.common(query) == ("shared", "sharing")
    assert reader.read(query, BM25_WEIGHTS, 5, None) == whole(conn, query, 5)
