"""The SQLite index's BM25 arm: FTS5 queries, with the words that cannot change the order left out.

FTS5's ``bm25()`` gives a word found in half the rows or more an IDF of 1e-6 (its formula would
make it zero or negative): such a word ranks nothing, yet every row it matches is scored and
sorted. A query of several alternatives is therefore asked first without them when the others
can fill the rows asked for; when they do not (the rest would be the rows only the common words
match, in the order those words give them) the whole query is asked. The order differs from the
whole query's only where rows tie on the other words (the common words' 1e-6 shares no longer
break the tie). It saves a sixth of a warm hybrid search where queries hold such words.

How many rows a word matches is asked of FTS5 itself (its tokenizer and stemmer decide what the
word is), counted up to half the table, and kept until the index changes.

A query's rows are kept until the index changes, and once a search has asked a query again,
deeper (``search.copies.widened``, when copies of a text fill its rows), each query is read
``READ_AHEAD`` times deeper than asked: BM25 scores every matching row however few are asked for,
so the deeper ask is then answered from the rows read. A shallower answer is the deeper one's
first rows: FTS5's order, ties included, does not depend on the limit. An index without copies
never asks deeper, and reads no more than asked (16 times deeper cost 1.5 ms of a warm hybrid
search at 10k chunks).

Each text is scored once. From schema 9 on only the first chunk of a text (its lowest id, see
``search.copies``) has an FTS row: a query finds the texts, best first, and puts each text's
copies right after it (:class:`TextRows`); a query within some files finds the texts that have a
chunk in them and gives those chunks (:func:`read_lexical`). A text ranks where its first
chunk's row does, though its copies differ in the words of their paths. On a tree of ten
checkouts (1.2M chunks, 120k texts) FTS5 then walks a tenth of the postings: 8 queries took
279 ms against 1,013 ms when the copies' rows were there, marked and left out (bench/RESULTS.md,
session 27). A file of schema 7 or 8 (read-only: a writer upgrades it) still has its copies'
rows, marked with ``schema.COPY_MARK``: a query over every file leaves them out (``... NOT
ss0copy0``) when they are ``COPY_SHARE`` of the rows or more, and scores every row below that.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from semsearch.store.sqlite.schema import COPY_MARK, FIRSTS_VERSION
from semsearch.text.lexical import COLUMNS, LexicalQuery

PRUNE_COMMON = True  # leave the words of half the rows or more out of a first query
_REMEMBERED = 10_000  # words whose counts are kept between writes, at most
# Rows read per row asked. Ten copies of a tree widen the BM25 arm's 200 rows to about 2,500;
# reading 3,200 rows instead of 200 cost ~5 ms at 1.2M chunks, a second query 50-330 ms.
READ_AHEAD = 16
_QUERIES_KEPT = 4  # queries whose rows are kept (a search asks one or two; the BM25 arm's again)
_EXPANDED_AT_ONCE = 500  # texts whose copies one statement looks up
_PREFIX_TEXTS = 8  # a search within files first looks among this many x limit best texts,
_PREFIX_MAX = 4_096  # and at most this many
_FEW_FILES = 20_000  # then, within up to this many files, from their texts' FTS rows
_ALLOWED = "IN (SELECT id FROM temp.allowed)"  # the files of a search within files (_allow)
COPY_SHARE = 0.25  # schema 7 and 8: the share of marked rows from which each text is scored once


class CountSource(Protocol):
    """What :class:`LexicalReader` asks of its store besides the connection."""

    def generation(self) -> int:
        """A number that changes with every committed write."""


class LexicalReader:
    """BM25 queries on a store's connection; the word counts follow ``source``'s generation."""

    def __init__(self, conn: sqlite3.Connection, source: CountSource) -> None:
        self._conn = conn
        self._source = source
        self._seen = -1  # the generation the counts below belong to
        self._half: int | None = None  # rows a common word matches: half the table, rounded up
        self._counts: dict[str, int] = {}  # alternative → the rows it matches, up to self._half
        # (FTS5 query, weights, file ids) → (the rows found, the limit they were read with)
        self._ahead: dict[tuple[str, str, tuple[int, ...] | None], tuple[list[int], int]] = {}
        self._texts: dict[tuple[str, str], TextRows] = {}  # (FTS5 query, weights) → its texts
        self._deepened = False  # a query was asked again deeper: read the next ones ahead
        self._marked: bool | None = None  # whether COPY_SHARE of the rows are copies
        self._chunks: int | None = None  # the FTS table's rows in this generation
        self._apart: bool | None = None  # copies have no FTS rows (schema 9 on)
        self._copies: bool | None = None  # the index has copies
        self._files_rows = FilesRows()  # the files whose texts' FTS rows temp.allowed_rows holds

    def read(
        self, query: LexicalQuery, weights: str, limit: int, file_ids: Sequence[int] | None
    ) -> list[int]:
        """Chunk ids matching the query, best BM25 (column ``weights``) first, optionally
        within files."""
        self._follow()
        rare = self._rare(query, limit) if PRUNE_COMMON else None
        if rare is not None:
            found = self._ranked(rare.fts5(), weights, limit, file_ids)
            if len(found) >= limit:
                return found
        return self._ranked(query.fts5(), weights, limit, file_ids)

    def _ranked(
        self, match: str, weights: str, limit: int, file_ids: Sequence[int] | None
    ) -> list[int]:
        """The first ``limit`` rows of the query: a text at a time when the index has copies and
        every file counts (:class:`TextRows`), else :meth:`_rows`."""
        if file_ids is not None or not self._by_text():
            return self._rows(match, weights, limit, file_ids)
        key = (match, weights)
        texts = self._texts.get(key)
        if texts is None:
            while len(self._texts) >= _QUERIES_KEPT:
                del self._texts[next(iter(self._texts))]
            marked = not self._copies_apart()
            texts = self._texts[key] = TextRows(self._conn, match, weights, self, marked)
        return texts.first(limit)

    def _by_text(self) -> bool:
        """Whether a query over every file is read a text at a time: the index has copies
        (schema 9 on), or ``COPY_SHARE`` of its rows are marked copies (schema 7 and 8)."""
        return self._has_copies() if self._copies_apart() else self._mostly_copies()

    def _copies_apart(self) -> bool:
        """Whether copies have no FTS rows (schema 9 on; a read-only older file has them)."""
        if self._apart is None:
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            self._apart = version >= FIRSTS_VERSION
        return self._apart

    def _has_copies(self) -> bool:
        """Whether any chunk is a copy, asked once per generation."""
        if self._copies is None:
            found = self._conn.execute("SELECT EXISTS(SELECT 1 FROM copies)").fetchone()[0]
            self._copies = bool(found)
        return self._copies

    def deeper(self, limit: int) -> int:
        """How deep to read a query asked ``limit`` rows: ``READ_AHEAD`` times once a search
        has asked a query again, deeper (see the module docstring)."""
        return limit * READ_AHEAD if self._deepened else limit

    def asked_deeper(self) -> None:
        """A query was asked again, deeper than it was read: read the next ones ahead."""
        self._deepened = True

    def _mostly_copies(self) -> bool:
        """Whether ``COPY_SHARE`` of the FTS rows or more are marked copies (none in a file
        before schema 7), counted once per generation."""
        if self._marked is None:
            share = max(1, math.ceil(self._fts_rows() * COPY_SHARE))
            self._marked = count_matches(self._conn, COPY_MARK, share) >= share
        return self._marked

    def _rows(
        self, match: str, weights: str, limit: int, file_ids: Sequence[int] | None
    ) -> list[int]:
        """:func:`read_lexical`'s first ``limit`` rows, from the rows an earlier call read ahead
        when they reach that deep (or are all there are)."""
        key = (match, weights, None if file_ids is None else tuple(file_ids))
        kept = self._ahead.get(key)
        if kept is None or (limit > kept[1] and len(kept[0]) >= kept[1]):
            if kept is not None:
                self.asked_deeper()
            deeper = self.deeper(limit)
            texts = file_ids is not None and self._copies_apart() and self._has_copies()
            found = read_lexical(
                self._conn, match, weights, deeper, file_ids, texts=texts, built=self._files_rows
            )
            kept = (found, deeper)
            while len(self._ahead) >= _QUERIES_KEPT:
                del self._ahead[next(iter(self._ahead))]
            self._ahead[key] = kept
        return kept[0][:limit]

    def _follow(self) -> None:
        """Forget the counts and rows read when the index has changed since."""
        generation = self._source.generation()
        if generation != self._seen:
            self._seen, self._half, self._counts, self._ahead = generation, None, {}, {}
            self._texts, self._marked, self._chunks = {}, None, None
            self._apart, self._copies = None, None
            self._files_rows.files = None

    def common(self, query: LexicalQuery) -> tuple[str, ...]:
        """The query's alternatives that match half the rows or more; none when the query has
        one alternative or is limited to some columns (their counts would be other counts)."""
        if query.columns != COLUMNS or len(query.alternatives) < 2:
            return ()
        self._follow()
        if self._half is None:
            self._half = (self._fts_rows() + 1) // 2
        if not self._half:
            return ()
        return tuple(word for word in query.alternatives if self._matched(word) >= self._half)

    def _rare(self, query: LexicalQuery, limit: int) -> LexicalQuery | None:
        """The query without its common alternatives; None when none or all are common, or
        when the others match fewer than ``limit`` rows together (the whole query is needed)."""
        common = self.common(query)
        rare = tuple(word for word in query.alternatives if word not in common)
        if not common or not rare or sum(map(self._matched, rare)) < limit:
            return None
        return LexicalQuery(rare, together=query.together)

    def _fts_rows(self) -> int:
        """The FTS table's rows (one per text from schema 9 on, one per chunk before), counted
        once per generation in its docsize table: 11 ms for 119,753 texts where counting the
        1,217,490 chunks and subtracting the copies took 170 ms (a new connection)."""
        if self._chunks is None:
            (self._chunks,) = self._conn.execute(
                "SELECT count(*) FROM chunks_fts_docsize"
            ).fetchone()
        return int(self._chunks)

    def _matched(self, word: str) -> int:
        """The rows an alternative matches, counted up to half the table."""
        rows = self._counts.get(word)
        if rows is None:
            if len(self._counts) >= _REMEMBERED:
                self._counts.clear()
            rows = self._counts[word] = count_matches(
                self._conn, LexicalQuery((word,)).fts5(), self._half
            )
        return int(rows)


class Depth(Protocol):
    """How deep :class:`TextRows` reads (its :class:`LexicalReader`'s read-ahead)."""

    def deeper(self, limit: int) -> int:
        """Rows to read for a query asked ``limit``."""

    def asked_deeper(self) -> None:
        """A query was asked again, deeper."""


class TextRows:
    """One query's rows over every file, a text at a time: each text's first chunk, best BM25
    first, followed by the other chunks of its text (by id). The texts are read once and their
    copies looked up as far as asked, until the index changes. ``marked``: the copies have FTS
    rows, marked (schema 7 and 8), which the query leaves out."""

    def __init__(
        self, conn: sqlite3.Connection, match: str, weights: str, depth: Depth, marked: bool
    ) -> None:
        self._conn = conn
        self._match = f"({match}) NOT {COPY_MARK}" if marked else match
        self._weights = weights
        self._depth = depth
        self._texts: list[int] = []  # each text's first chunk, best first
        self._read = 0  # the limit self._texts was read with (0: not read yet)
        self._rows: list[int] = []  # the first self._expanded texts and their copies
        self._expanded = 0

    def first(self, limit: int) -> list[int]:
        """The first ``limit`` rows (fewer when the query matches fewer)."""
        while len(self._rows) < limit:
            if self._expanded == len(self._texts):
                if self._read and len(self._texts) < self._read:
                    break  # every matching text is read
                if self._read:  # a text brings one row or more: limit texts are enough
                    self._depth.asked_deeper()
                    self._read = max(limit, 2 * self._read)
                else:
                    self._read = self._depth.deeper(limit)
                self._texts = read_lexical(self._conn, self._match, self._weights, self._read, None)
                if self._expanded == len(self._texts):
                    break
            batch = self._texts[self._expanded : self._expanded + _EXPANDED_AT_ONCE]
            batch = batch[: max(limit - len(self._rows), 1)]
            self._rows.extend(with_copies(self._conn, batch))
            self._expanded += len(batch)
        return self._rows[:limit]


def with_copies(conn: sqlite3.Connection, ids: Sequence[int]) -> list[int]:
    """``ids`` (chunks of distinct texts), each followed by the other chunks of its text, by id
    (the ``chunks_text_hash`` index holds both)."""
    marks = ",".join("?" * len(ids))
    hashes = dict(
        conn.execute(f"SELECT id, text_hash FROM chunks WHERE id IN ({marks})", list(ids))
    )
    wanted = sorted(set(hashes.values()))
    copies: dict[str, list[int]] = {}
    if wanted:
        rows = conn.execute(
            f"SELECT text_hash, id FROM chunks WHERE text_hash IN ({','.join('?' * len(wanted))})",
            wanted,
        )
        for text, cid in rows:
            copies.setdefault(text, []).append(cid)
    out: list[int] = []
    for cid in ids:
        out.append(cid)
        others = copies.get(hashes.get(cid, ""), [])
        out.extend(sorted(other for other in others if other != cid))
    return out


def _allow(conn: sqlite3.Connection, file_ids: Sequence[int]) -> None:
    """Put the file ids in the temporary table ``allowed``, a few hundred a statement: the
    connection commits each statement, and one a row took 0.25 s for 10,000 files."""
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS allowed(id INTEGER PRIMARY KEY)")
    conn.execute("DELETE FROM temp.allowed")
    ids = [int(i) for i in file_ids]
    for start in range(0, len(ids), _EXPANDED_AT_ONCE):
        part = ids[start : start + _EXPANDED_AT_ONCE]
        conn.execute(
            f"INSERT OR IGNORE INTO temp.allowed(id) VALUES {','.join(['(?)'] * len(part))}", part
        )


def read_lexical(
    conn: sqlite3.Connection,
    match: str,
    weights: str,
    limit: int,
    file_ids: Sequence[int] | None,
    *,
    texts: bool = False,
    built: FilesRows | None = None,
) -> list[int]:
    """Chunk ids matching an FTS5 query, best BM25 (column ``weights``) first, optionally
    within files (through a temporary table of their ids). ``texts``: copies have no FTS rows
    (schema 9 on), so a query within files finds the texts that have a chunk in them, whichever
    chunk holds the row, and gives each text's chunks in those files (by id); ``built`` says
    whose texts' rows the connection's temporary table holds, kept while the index is unchanged
    (the caller forgets it after a write)."""
    if file_ids is None:
        rows = conn.execute(
            "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?"
            f" ORDER BY bm25(chunks_fts, {weights}) LIMIT ?",
            (match, limit),
        )
        return [r[0] for r in rows]
    _allow(conn, file_ids)
    allowed = _ALLOWED
    if not texts:
        rows = conn.execute(
            "SELECT chunks_fts.rowid FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid"
            f" WHERE chunks_fts MATCH ? AND c.file_id {allowed}"
            f" ORDER BY bm25(chunks_fts, {weights}) LIMIT ?",
            (match, limit),
        )
        return [r[0] for r in rows]
    hashes = _texts_within(conn, match, weights, limit, file_ids, built or FilesRows())
    places: dict[str, list[int]] = {}
    for start in range(0, len(hashes), _EXPANDED_AT_ONCE):
        part = hashes[start : start + _EXPANDED_AT_ONCE]
        rows = conn.execute(  # by text (the unary + keeps the files' index out of the plan)
            f"SELECT text_hash, id FROM chunks WHERE text_hash IN ({','.join('?' * len(part))})"
            f" AND +file_id {allowed} ORDER BY id",
            part,
        )
        for text, cid in rows:
            places.setdefault(text, []).append(cid)
    return [cid for text in hashes for cid in places.get(text, [])][:limit]


@dataclass
class FilesRows:
    """Whose texts' FTS rows the connection's ``temp.allowed_rows`` holds (None: nobody's)."""

    files: tuple[int, ...] | None = None


def _texts_within(
    conn: sqlite3.Connection,
    match: str,
    weights: str,
    limit: int,
    file_ids: Sequence[int],
    built: FilesRows,
) -> list[str]:
    """The hashes of the first ``limit`` texts matching the query that have a chunk in the files
    of ``temp.allowed``, best BM25 first (schema 9 on: a text's FTS row is its lowest chunk
    id's)."""
    allowed = _ALLOWED
    in_files = (
        f"(c.file_id {allowed} OR EXISTS(SELECT 1 FROM chunks d"
        f" WHERE d.text_hash = c.text_hash AND d.file_id {allowed}))"
    )
    # The best texts of the whole index first: where the files' texts are common among them
    # (another checkout's folder, a glob over part of each), the first ``limit`` of the files'
    # are there, in the same order, and only those rows are looked up.
    prefix = min(_PREFIX_TEXTS * limit, _PREFIX_MAX)
    found = conn.execute(
        f"SELECT c.text_hash FROM (SELECT rowid, bm25(chunks_fts, {weights}) AS score"
        " FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY score LIMIT ?) m"
        f" JOIN chunks c ON c.id = m.rowid WHERE {in_files} ORDER BY m.score LIMIT ?",
        (match, prefix, limit),
    ).fetchall()
    if len(found) >= limit or count_matches(conn, match, prefix + 1) <= prefix:
        # enough, or every match was among the best: the whole answer
        return [text for (text,) in found]
    files = tuple(int(i) for i in file_ids)
    if len(files) > _FEW_FILES:  # every matching row, tested for a chunk in the files
        found = conn.execute(
            "SELECT c.text_hash FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid"
            f" WHERE chunks_fts MATCH ? AND {in_files}"
            f" ORDER BY bm25(chunks_fts, {weights}) LIMIT ?",
            (match, limit),
        ).fetchall()
        return [text for (text,) in found]
    # Else the FTS rows of the files' texts, found from their chunks once for as long as the
    # index and the files stay the same, and the matching rows among them. Testing each
    # matching row reads all of its copies.
    if built.files != files:
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS allowed_rows(id INTEGER PRIMARY KEY)")
        conn.execute("DELETE FROM temp.allowed_rows")
        conn.execute(
            "INSERT OR IGNORE INTO temp.allowed_rows(id) SELECT (SELECT min(d.id) FROM chunks d"
            f" WHERE d.text_hash = a.text_hash) FROM chunks a WHERE a.file_id {allowed}"
            " GROUP BY a.text_hash"
        )
        built.files = files
    found = conn.execute(  # the unary + keeps FTS5 from one lookup per allowed row
        "SELECT c.text_hash FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid"
        " WHERE chunks_fts MATCH ? AND +chunks_fts.rowid IN (SELECT id FROM temp.allowed_rows)"
        f" ORDER BY bm25(chunks_fts, {weights}) LIMIT ?",
        (match, limit),
    ).fetchall()
    return [text for (text,) in found]


def count_matches(conn: sqlite3.Connection, match: str, up_to: int | None) -> int:
    """The FTS rows an FTS5 query matches, counted up to ``up_to`` (None: all), unranked."""
    (count,) = conn.execute(
        "SELECT count(*) FROM (SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT ?)",
        (match, up_to),
    ).fetchone()
    return int(count)
