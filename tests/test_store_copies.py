"""Copies in the SQLite index: each text has one chunk with an FTS row (its first, the lowest
id), the others none; the copies and the FTS rows stay right through writes, deletions, moves
and the upgrade of a file from before schema 9, and a query answers a text at a time, its copies
right after it, over every file or within some. A read-only file of schema 7 or 8, whose copies
have marked rows, is searched as before."""

from __future__ import annotations

import itertools
import sqlite3
import subprocess
from pathlib import Path

import pytest

from semsearch.store.sqlite import lexical, schema
from semsearch.store.sqlite.schema import (
    COPY_MARK,
    COPY_TRIGGERS_SQL,
    FTS_SQL,
    NEW_FTS_TABLE_SQL,
    SCHEMA_VERSION,
    connect,
)
from semsearch.store.sqlite.store import BM25_WEIGHTS, SqliteStore
from tests.conftest import make_immutable
from tests.test_store import file_write, words

VOCABULARY = ("alpha", "beta", "gamma", "delta", "one", "two", "three", "four")


def fts_ids(conn: sqlite3.Connection, match: str) -> set[int]:
    rows = conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?", (match,))
    return {row[0] for row in rows}


def check_firsts(path: Path) -> set[int]:
    """Assert that each text's lowest chunk id is its one chunk not in ``copies`` and the one
    with FTS rows, and that each word's FTS rows are exactly the first chunks holding it (a
    delete given other words than were inserted leaves rows behind); the copies' ids."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT id, text_hash, text FROM chunks ORDER BY id").fetchall()
        first: dict[str, int] = {}
        for cid, text_hash, _ in rows:
            first.setdefault(text_hash, cid)
        copies = {cid for cid, text_hash, _ in rows if first[text_hash] != cid}
        assert {row[0] for row in conn.execute("SELECT id FROM copies")} == copies
        assert fts_ids(conn, COPY_MARK) == set()
        for word in VOCABULARY:
            holding = {cid for cid, _, text in rows if word in text.split() and cid not in copies}
            assert fts_ids(conn, f'"{word}"') == holding, word
        (count,) = conn.execute("SELECT count(*) FROM chunks_fts_docsize").fetchone()
        assert count == len(rows) - len(copies)
        return copies
    finally:
        conn.close()


def test_one_chunk_of_each_text_has_fts_rows_through_every_write(tmp_path: Path) -> None:
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
    assert len(check_firsts(path)) == 4  # alpha one x2, beta two, gamma three
    store.delete_files(a, ["x1.md"])  # the first chunks of "alpha one" and "beta two"
    assert len(check_firsts(path)) == 2
    store.write_files([file_write(a, "x2.md", ["gamma three", "alpha one"])])  # rewritten
    assert len(check_firsts(path)) == 1
    store.move_folder("/srv/b", "/srv/a", "sub/")  # new rels: new path terms, copies kept
    assert len(check_firsts(path)) == 1
    store.remove_folder("/srv/a")
    assert check_firsts(path) == set()
    store.write_files([file_write(store.ensure_folder("/srv/c", "c"), "x.md", ["alpha one"] * 3)])
    assert len(check_firsts(path)) == 2
    store.clear_chunks()
    assert check_firsts(path) == set()
    store.close()


def copies_store(path: Path) -> tuple[SqliteStore, list[int]]:
    """Four texts in three folders (the same rels: the texts' rows score alike) and one more;
    the folder ids."""
    store = SqliteStore(path, create=True)
    texts = ["alpha one", "alpha beta two", "alpha gamma three three", "alpha delta " * 4]
    writes, folders = [], []
    for name in ("a", "b", "c"):
        folders.append(store.ensure_folder(f"/srv/{name}", name))
        writes += [file_write(folders[-1], f"x{n}.md", [text]) for n, text in enumerate(texts)]
    folders.append(store.ensure_folder("/srv/d", "d"))
    writes.append(file_write(folders[-1], "y.md", ["alpha alone"]))
    store.write_files(writes)
    return store, folders


def by_text(path: Path, ranked: list[int]) -> list[list[int]]:
    """``ranked`` cut into runs of one text each."""
    hashes = dict(sqlite3.connect(path).execute("SELECT id, text_hash FROM chunks").fetchall())
    runs: list[list[int]] = []
    for cid in ranked:
        if runs and hashes[runs[-1][0]] == hashes[cid]:
            runs[-1].append(cid)
        else:
            runs.append([cid])
    return runs


def test_a_query_gives_each_text_once_with_its_copies_after_it(tmp_path: Path) -> None:
    path = tmp_path / "index.db"
    store, folders = copies_store(path)
    query = words("alpha")
    asked: list[str] = []
    store._conn.set_trace_callback(asked.append)
    ranked = store.lexical(query, 100, None)
    assert not any(COPY_MARK in sql for sql in asked)
    runs = by_text(path, ranked)
    assert sorted(map(len, runs)) == [1, 3, 3, 3, 3] and all(run == sorted(run) for run in runs)
    assert len({tuple(run) for run in runs}) == 5  # each text once
    for limit in range(1, 14):  # shallower and deeper asks of the same query
        assert store.lexical(query, limit, None) == ranked[:limit]
    fresh = SqliteStore(path)
    assert [fresh.lexical(query, n, None) for n in (2, 7, 13)] == [ranked[:n] for n in (2, 7, 13)]
    fresh.close()
    # within files: the texts that have a chunk there, in the same order, with those chunks
    refs = store.file_refs()
    every_file = list(refs)
    assert store.lexical(query, 100, every_file) == ranked
    in_c = [i for i, ref in refs.items() if ref.folder_id == folders[2]]
    within = store.lexical(query, 100, in_c)
    file_of = dict(sqlite3.connect(path).execute("SELECT id, file_id FROM chunks").fetchall())
    assert within == [cid for cid in ranked if refs[file_of[cid]].folder_id == folders[2]]
    assert len(within) == 4 and store.lexical(query, 2, in_c) == within[:2]
    store.close()


def test_within_files_the_best_texts_of_all_are_looked_at_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query within files first looks among the best texts of the whole index and, when
    fewer than it needs have a chunk in the files, at every matching text, or within a few
    files at their texts' rows: each way the files' texts in the order of the whole ranking,
    with their chunks there."""
    path = tmp_path / "index.db"
    store, folders = copies_store(path)
    query = words("alpha")
    ranked = store.lexical(query, 100, None)
    refs = store.file_refs()
    file_of = dict(sqlite3.connect(path).execute("SELECT id, file_id FROM chunks").fetchall())
    paths = {"best texts": 0, "every text": 0, "the files' texts": 0}
    for prefix, few, folder in itertools.product((1, 3), (0, 100), folders):
        monkeypatch.setattr(lexical, "_PREFIX_TEXTS", prefix)
        monkeypatch.setattr(lexical, "_FEW_FILES", few)
        ids = [i for i, ref in refs.items() if ref.folder_id == folder]
        expected = [cid for cid in ranked if refs[file_of[cid]].folder_id == folder]
        for limit in range(1, len(expected) + 2):
            asked: list[str] = []
            store._conn.set_trace_callback(asked.append)
            found = lexical.read_lexical(
                store._conn, query.fts5(), BM25_WEIGHTS, limit, ids, texts=True
            )
            store._conn.set_trace_callback(None)
            assert found == expected[:limit], (prefix, few, folder, limit)
            if any("allowed_rows" in sql for sql in asked):
                paths["the files' texts"] += 1
            else:
                scored = [sql for sql in asked if "bm25(" in sql]
                paths["every text" if len(scored) == 2 else "best texts"] += 1
    assert all(paths.values()), paths
    store.close()


def test_the_files_texts_rows_are_found_once_while_the_index_stays_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Searches within the same files reuse their texts' FTS rows; a write makes them anew."""
    path = tmp_path / "index.db"
    store, folders = copies_store(path)
    monkeypatch.setattr(lexical, "_PREFIX_TEXTS", 0)  # straight to the files' texts
    asked: list[str] = []
    store._conn.set_trace_callback(asked.append)

    def built(query: str, file_ids: list[int]) -> tuple[int, list[int]]:
        asked.clear()
        found = store.lexical(words(query), 10, file_ids)
        return sum("INTO temp.allowed_rows" in sql for sql in asked), found

    in_b = [i for i, ref in store.file_refs().items() if ref.folder_id == folders[1]]
    made, alpha = built("alpha", in_b)
    assert made == 1 and len(alpha) == 4
    assert built("three", in_b)[0] == 0  # the same files: their rows are reused
    assert built("beta", in_b[:2])[0] == 1  # other files
    assert built("gamma", in_b)[0] == 1  # these files again (alpha's rows were read ahead)
    store.write_files([file_write(folders[1], "z.md", ["alpha fresh"])])
    made, again = built("alpha", in_b)
    assert made == 1 and again == alpha  # the index changed: made anew, same files' texts
    new = [i for i, ref in store.file_refs().items() if ref.rel == "z.md"]
    made, more = built("alpha", in_b + new)
    assert made == 1 and len(more) == 5 and set(alpha) < set(more)
    store.close()


def test_a_file_from_before_schema_9_keeps_rows_for_first_chunks_only(tmp_path: Path) -> None:
    path = tmp_path / "index.db"
    store = SqliteStore(path, create=True)
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files(
        [file_write(folder, f"x{n}.md", ["alpha one", f"beta two {n}"]) for n in range(3)]
    )
    store.close()
    old = connect(path)  # as schema 6 left it: no copies table, version 2's triggers and rows
    old.executescript(
        "DROP TABLE copies;"
        + FTS_SQL
        + "PRAGMA user_version = 6; UPDATE meta SET value = '6' WHERE key = 'schema_version';"
    )
    assert len(fts_ids(old, '"alpha"')) == 3
    old.close()
    upgraded = SqliteStore(path)
    assert upgraded.meta("schema_version") == str(SCHEMA_VERSION)
    assert len(check_firsts(path)) == 2
    assert len(upgraded.lexical(words("alpha"), 10, None)) == 3
    upgraded.close()


def as_schema_8(path: Path) -> None:
    """Give the copies FTS rows marked with COPY_MARK and schema 7's triggers, as schema 7 and 8
    wrote them."""
    conn = connect(path)
    conn.executescript(
        NEW_FTS_TABLE_SQL
        + COPY_TRIGGERS_SQL
        + """
        INSERT INTO chunks_fts(rowid, text, terms, defines)
            SELECT c.id, c.text, ss_terms(x.rel, c.text, c.id IN (SELECT id FROM copies)),
                ss_defines(c.text)
            FROM chunks c JOIN files x ON x.id = c.file_id;
        PRAGMA user_version = 8; UPDATE meta SET value = '8' WHERE key = 'schema_version';
        """
    )
    conn.close()


def test_a_read_only_file_of_schema_8_leaves_its_marked_copies_out(tmp_path: Path) -> None:
    """A file whose copies have marked FTS rows, opened read-only (not upgraded), gives the same
    texts, each once with its copies after it; within files, each row of them."""
    path = tmp_path / "index.db"
    store, _ = copies_store(path)
    ranked = store.lexical(words("alpha"), 100, None)
    store.close()
    as_schema_8(path)
    with sqlite3.connect(path) as conn:
        assert len(fts_ids(conn, COPY_MARK)) == 8
    make_immutable(path)
    try:
        old = SqliteStore(path)
        assert old.read_only and old.meta("schema_version") == "8"
        asked: list[str] = []
        old._conn.set_trace_callback(asked.append)
        assert old.lexical(words("alpha"), 100, None) == ranked
        assert any(f"NOT {COPY_MARK}" in sql for sql in asked)
        every_file = list(old.file_refs())
        assert sorted(old.lexical(words("alpha"), 100, every_file)) == sorted(ranked)
        old.close()
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    upgraded = SqliteStore(path)
    assert upgraded.meta("schema_version") == str(SCHEMA_VERSION)
    assert len(check_firsts(path)) == 8
    assert upgraded.lexical(words("alpha"), 100, None) == ranked
    upgraded.close()


def test_an_index_with_few_copies_scores_each_text_once(tmp_path: Path) -> None:
    path = tmp_path / "index.db"
    store = SqliteStore(path, create=True)
    folder = store.ensure_folder("/srv/a", "a")
    texts = [f"alpha word{n}" for n in range(9)] + ["alpha word0"]  # 1 copy in 10 rows
    store.write_files([file_write(folder, f"x{n}.md", [text]) for n, text in enumerate(texts)])
    ranked = store.lexical(words("alpha"), 100, None)
    runs = by_text(path, ranked)
    assert len(ranked) == 10 and len(runs) == 9 and sorted(map(len, runs))[-1] == 2
    store.close()


def test_the_triggers_functions_refuse_a_chunk_without_a_file_row_and_mark_copies() -> None:
    """``ss_terms`` needs the chunk's rel (a missing file row would write other words than a
    later delete gives); version 7's three-argument form adds the copy mark."""
    with pytest.raises(ValueError, match="without a file row"):
        schema._terms(None, "def x(): pass")
    assert schema._marked_terms("a/b.py", "fetchValue", 1) == "b a fetch value ss0copy0"
    assert schema._marked_terms("a/b.py", "fetchValue", 0) == "b a fetch value"
