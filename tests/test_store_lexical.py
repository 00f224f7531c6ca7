"""The SQLite BM25 arm: words in half the rows or more are left out of a first query, on a real
index file, and the answers are those of the whole query."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from semsearch.store.sqlite.lexical import READ_AHEAD, LexicalReader, read_lexical
from semsearch.store.sqlite.store import BM25_WEIGHTS, SqliteStore
from semsearch.text.lexical import LexicalQuery
from tests.test_store import file_write

Built = tuple[SqliteStore, LexicalReader, sqlite3.Connection]


@pytest.fixture
def build(tmp_path: Path) -> Iterator[Callable[[list[str]], Built]]:
    """An index of one-chunk files with these texts, and a reader on a connection of its own
    (as the store's lexical worker has one); both closed after the test."""
    opened: list[tuple[SqliteStore, sqlite3.Connection]] = []

    def make(texts: list[str]) -> Built:
        store = SqliteStore(tmp_path / "index.db", create=True)
        folder = store.ensure_folder("/srv/a", "a")
        writes = [file_write(folder, f"f{n}.md", [text], 1) for n, text in enumerate(texts)]
        store.write_files(writes)
        conn = sqlite3.connect(store.path)
        opened.append((store, conn))
        return store, LexicalReader(conn, store), conn

    yield make
    for store, conn in opened:
        conn.close()
        store.close()


def corpus() -> list[str]:
    """30 rows that all say "shared"; "needle" in 6 of them, each of another length (no ties)."""
    texts = [f"shared filler{n} " + "pad " * (n % 7) for n in range(30)]
    for n in range(6):
        texts[n * 5] = "needle shared " + "word " * n
    return texts


def whole(conn: sqlite3.Connection, query: LexicalQuery, limit: int) -> list[int]:
    return read_lexical(conn, query.fts5(), BM25_WEIGHTS, limit, None)


def traced(conn: sqlite3.Connection, ask: Callable[[], list[int]]) -> tuple[list[int], list[str]]:
    """What ``ask`` found, and the ranking SQL statements it ran on the connection."""
    asked: list[str] = []
    conn.set_trace_callback(asked.append)
    try:
        found = ask()
    finally:
        conn.set_trace_callback(None)
    return found, [sql for sql in asked if "ORDER BY bm25" in sql]


def test_a_word_of_half_the_rows_is_common_as_fts5_stems_it(build: Callable[..., Built]) -> None:
    texts = [f"walks row{n}" for n in range(5)] + [f"other row{n}" for n in range(5, 10)]
    texts[9] = "rare other"
    _, reader, _ = build(texts)
    assert reader.common(LexicalQuery(("walking", "rare"))) == ("walking",)  # walks, walking: walk
    assert reader.common(LexicalQuery(("other", "rare"))) == ("other",)  # 5 of 10: idf clamped
    assert reader.common(LexicalQuery(("row9", "rare"))) == ()


def test_the_first_query_leaves_common_words_out_and_answers_as_the_whole(
    build: Callable[..., Built],
) -> None:
    store, reader, conn = build(corpus())
    query = LexicalQuery(("shared", "needle"))
    assert reader.common(query) == ("shared",)
    found, ranked = traced(conn, lambda: reader.read(query, BM25_WEIGHTS, 4, None))
    assert len(ranked) == 1 and '"shared"' not in ranked[0]  # the first query sufficed
    assert found == whole(conn, query, 4)
    assert {row.text.split()[0] for row in store.chunks(found)} == {"needle"}


def test_too_few_rows_without_them_asks_the_whole_query(build: Callable[..., Built]) -> None:
    _, reader, conn = build(corpus())
    query = LexicalQuery(("shared", "needle"))
    # 6 needles cannot fill 20: the whole query at once, no first try
    found, ranked = traced(conn, lambda: reader.read(query, BM25_WEIGHTS, 20, None))
    assert len(ranked) == 1 and '"shared"' in ranked[0]
    assert found == whole(conn, query, 20)
    assert len(found) == 20  # the needles, then rows of "shared" only


def test_a_short_first_answer_asks_the_whole_query(build: Callable[..., Built]) -> None:
    store, reader, conn = build(corpus())
    ids = {ref.rel: ref.id for ref in store.file_refs().values()}
    allowed = [ids["f0.md"], ids["f5.md"], ids["f1.md"]]
    query = LexicalQuery(("shared", "needle"))
    found = reader.read(query, BM25_WEIGHTS, 2, allowed)  # the two needles of those files
    assert sorted(row.rel for row in store.chunks(found)) == ["f0.md", "f5.md"]
    # 6 needles in the index, 2 in those files: the first query, read deeper, falls short of 3,
    # so the whole query is asked
    found, ranked = traced(conn, lambda: reader.read(query, BM25_WEIGHTS, 3, allowed))
    assert len(ranked) == 2 and '"shared"' not in ranked[0] and '"shared"' in ranked[1]
    assert sorted(row.rel for row in store.chunks(found)) == ["f0.md", "f1.md", "f5.md"]


def test_a_write_counts_again(build: Callable[..., Built]) -> None:
    store, reader, _ = build(corpus())
    query = LexicalQuery(("shared", "needle"))
    assert reader.common(query) == ("shared",)
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, f"g{n}.md", [f"new{n}"], 1) for n in range(40)])
    assert reader.common(query) == ()  # 30 of 70 rows now


def test_a_deeper_ask_is_answered_from_the_rows_read_ahead(build: Callable[..., Built]) -> None:
    """Rows are read as deep as asked until a query is asked again deeper (copies widen an
    arm); from then on each query is read ``READ_AHEAD`` times deeper, and a deeper ask within
    what was read runs no SQL."""
    texts = [f"alpha row{n} " + "pad " * (n % 5) for n in range(60)]  # ties: same length
    texts += [f"beta row{n} " + "pad " * (n % 3) for n in range(60)]
    _, reader, conn = build(texts)
    alpha, beta = LexicalQuery(("alpha",)), LexicalQuery(("beta",))
    found, ranked = traced(conn, lambda: reader.read(alpha, BM25_WEIGHTS, 2, None))
    assert len(ranked) == 1 and found == whole(conn, alpha, 2)
    again, ranked = traced(conn, lambda: reader.read(alpha, BM25_WEIGHTS, 2, None))
    assert ranked == [] and again == found  # kept
    deeper, ranked = traced(conn, lambda: reader.read(alpha, BM25_WEIGHTS, 3, None))
    assert len(ranked) == 1 and deeper == whole(conn, alpha, 3) and deeper[:2] == found
    # that ask read 3 x READ_AHEAD (48) rows: any depth up to them is answered from them
    deepest, ranked = traced(conn, lambda: reader.read(alpha, BM25_WEIGHTS, 40, None))
    assert ranked == [] and deepest == whole(conn, alpha, 40)
    # deeper than what was read: asked again, 50 x READ_AHEAD deep, which is every row
    everything, ranked = traced(conn, lambda: reader.read(alpha, BM25_WEIGHTS, 50, None))
    assert len(ranked) == 1 and everything == whole(conn, alpha, 50)
    everything, ranked = traced(conn, lambda: reader.read(alpha, BM25_WEIGHTS, 1000, None))
    assert ranked == [] and everything == whole(conn, alpha, 1000) and len(everything) == 60
    # another query is now read ahead from its first ask
    first, ranked = traced(conn, lambda: reader.read(beta, BM25_WEIGHTS, 2, None))
    assert len(ranked) == 1 and first == whole(conn, beta, 2)
    more, ranked = traced(conn, lambda: reader.read(beta, BM25_WEIGHTS, 2 * READ_AHEAD, None))
    assert ranked == [] and more == whole(conn, beta, 2 * READ_AHEAD)


def test_rows_read_ahead_are_per_query_and_files_and_forgotten_after_a_write(
    build: Callable[..., Built],
) -> None:
    store, reader, conn = build(corpus())
    needle = LexicalQuery(("needle",))
    assert len(reader.read(needle, BM25_WEIGHTS, 7, None)) == 6  # every needle: all rows read
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "new.md", ["needle needle"], 1)])
    found, ranked = traced(conn, lambda: reader.read(needle, BM25_WEIGHTS, 7, None))
    assert len(ranked) == 1 and found == whole(conn, needle, 7)
    assert "new.md" in {row.rel for row in store.chunks(found)}
    ids = {ref.rel: ref.id for ref in store.file_refs().values()}
    within = reader.read(needle, BM25_WEIGHTS, 7, [ids["f5.md"]])
    assert [row.rel for row in store.chunks(within)] == ["f5.md"]


@pytest.mark.parametrize(
    ("query", "common"),
    [
        (LexicalQuery(("shared",)), ()),  # one alternative: nothing would rank without it
        (LexicalQuery(("shared", "filler3")), ("shared",)),  # filler3's 1 row cannot fill 10
        (LexicalQuery(("shared", "needle"), columns=("defines",)), ()),  # other columns' counts
        (LexicalQuery(("shared", "sharing")), ("shared", "sharing")),  # both "share": all common
    ],
)
def test_a_query_is_asked_whole_when_nothing_else_would_rank(
    build: Callable[..., Built], query: LexicalQuery, common: tuple[str, ...]
) -> None:
    _, reader, conn = build(corpus())
    assert reader.common(query) == common
    found, ranked = traced(conn, lambda: reader.read(query, BM25_WEIGHTS, 10, None))
    assert len(ranked) == 1
    assert found == whole(conn, query, 10)


def test_an_empty_index_has_no_common_word(build: Callable[..., Built]) -> None:
    _, reader, _ = build([])
    query = LexicalQuery(("shared", "needle"))
    assert reader.common(query) == ()
    assert reader.read(query, BM25_WEIGHTS, 10, None) == []
