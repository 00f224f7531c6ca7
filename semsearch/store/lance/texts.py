"""The LanceDB index's distinct texts: one row per text hash, for the vector and BM25 arms of a
tree full of copies.

``texts(text_hash, vector, text, terms, defines, ids, files, starts, ends, pages)`` holds one
row per distinct text of the chunks: its vector, its text and the ``terms`` and ``defines`` of
its first chunk (the lowest id, as the SQLite index scores a text by its first chunk's FTS row),
and the place of every chunk of that text, by id, as lists: ids, file ids, start and end lines,
pages. In a tree of many checkouts ten chunks can share a text: the chunks' own vector index
then filled a pool of 200 with ~20 texts, the search asked again ten times deeper
(``search.copies.widened``), BM25 walked ten copies of every posting, and the copies' places took
a query of their own (bench/RESULTS.md, sessions 24 and 30). Here each arm asks for distinct
texts once, and their chunks' places come with them; an arm names each text by its first chunk
and the search picks the copy it shows among the rest (``LanceStore.choose_copies``); the
chunks table is read only for the hits' rows.

``maintain`` brings the table up to date when the chunks table has its vector index, holds
copies and no chunk waits for its vector: it deletes the rows of texts no chunk has any more or
whose chunks changed and writes them again (their first chunk read by id), builds the table's own
IVF-HNSW-SQ index past ``ANN_MIN_ROWS`` rows (retrained as the chunks' is, when the table has
doubled) and records in meta ``texts_of`` the chunks table's epoch and version it matches. A
search asks the table only while the chunks table is at that version and not within some files;
otherwise the chunks table answers as before. The full-text indexes (made with the table, kept
up by ``maintain``'s optimize) have the chunks table's settings. A write of the chunks' ``terms``
(a folder moved under a prefix, new rules) empties the table for the next ``maintain``. Like
``paths``, the table is kept while the chunks table lives (a reader's handle stays valid); it
goes with it.

Its rows all come from the chunks table, so damage to it is mended, not reported as the index's:
a search that meets a file of it missing or cut short says so once (per making of the table:
meta ``texts_made``) and reads the chunks table instead; ``maintain`` asks each of its indexes
once per run and reads every row (its hash, on a run that leaves the table as it is:
``_probe_texts``), dropping a damaged table and making it again.

Imported by :mod:`semsearch.store.lance.store`, which checks first that the lancedb extra loads.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
from lancedb.index import FTS, HnswSq
from lancedb.query import FullTextQuery

from semsearch.store.base import ChunkPlace
from semsearch.store.lance.query import ann_rows, full_text, prewarm_full_text
from semsearch.store.lance.tables import HAS_VECTOR, hashes_sql, ids_sql, retry
from semsearch.text.lexical import COLUMN_WEIGHTS, LexicalQuery

TEXTS_OF = "texts_of"  # meta key: "epoch.version" of the chunks table the texts table matches
TEXTS_ANN_ROWS = "texts_ann_rows"  # meta key: rows of the texts table when its index was trained
TEXTS_MADE = "texts_made"  # meta key: random, written when the table is made (anew)
BATCH = 4_096  # texts per look-up or delete while the table is brought up to date
_PLACES = ["ids", "files", "starts", "ends", "pages"]  # a text's chunks, by id: ChunkPlace's
# What a search reads of each text it finds: with its text, the hits' rows need no read of the
# chunks table (4-5 ms a search on 1.6M chunks, against ~1 ms more for the arms; session 32).
_FOUND = ["text_hash", "text", *_PLACES]

logger = logging.getLogger("semsearch.store")
_DAMAGE_SAID = threading.Lock()


def texts_schema(dim: int) -> pa.Schema:
    return pa.schema(
        [
            ("text_hash", pa.string()),
            ("vector", pa.list_(pa.float32(), dim)),
            ("text", pa.string()),
            ("terms", pa.string()),
            ("defines", pa.string()),
            ("ids", pa.list_(pa.int64())),
            ("files", pa.list_(pa.int64())),
            ("starts", pa.list_(pa.int32())),
            ("ends", pa.list_(pa.int32())),
            ("pages", pa.list_(pa.int32())),
        ]
    )


class FoundText(NamedTuple):
    """A text a search found: its hash, its score, the places of its chunks, by id, as the
    columns of ``_PLACES`` (no page: -1), made into places when asked (a text can have
    thousands of copies, and a search needs the places of a few), and the text itself. A
    ``HeldText``."""

    text_hash: str
    score: float
    columns: tuple[list[int], ...]
    text: str

    @property
    def ids(self) -> list[int]:
        return self.columns[0]

    @property
    def file_ids(self) -> list[int]:
        return self.columns[1]

    def place(self, at: int) -> ChunkPlace:
        """The place of its chunk at ``at`` (in id order)."""
        chunk_id, file_id, start, end, page = (column[at] for column in self.columns)
        return ChunkPlace(chunk_id, file_id, self.text_hash, start, end, None if page < 0 else page)

    def places(self) -> list[ChunkPlace]:
        """The places of all its chunks, by id."""
        return [self.place(at) for at in range(len(self.ids))]


class DistinctTexts:
    """The distinct-text side of :class:`~semsearch.store.lance.store.LanceStore` (a mixin,
    like ``lance.paths.PathVectors``)."""

    path: Any  # the index's Location
    _db: Any
    _names: set[str] | None = None  # the tables there are (``LanceStore._table_names``)
    _texts: Any = None  # the texts table, once it exists
    _texts_absent = False  # on object storage: found missing, not asked again until a sync
    _texts_warmed = -1  # the texts table's version whose full-text indexes LanceDB holds
    # meta (texts_of, texts_made) of a texts table a search found damaged: not asked again
    _texts_damaged: tuple[str | None, str | None] | None = None

    def _open_if_there(self, name: str) -> Any:
        raise NotImplementedError

    def meta(self, key: str) -> str | None:
        raise NotImplementedError

    def _put_meta(self, values: dict[str, str]) -> None:
        raise NotImplementedError

    @property
    def _is_remote(self) -> bool:
        raise NotImplementedError

    def _text_table(self) -> Any:
        if self._texts is None and not self._texts_absent:
            self._texts = self._open_if_there("texts")
            self._texts_absent = self._texts is None and self._is_remote
        return self._texts

    def _sync_texts(self) -> None:
        """Move the texts table on to its latest version, or look for it again
        (``LanceStore.sync`` on object storage)."""
        self._texts_absent = False
        if self._texts is not None:
            self._texts.checkout_latest()

    def _drop_texts(self) -> None:
        """Drop the texts table (the chunks table goes: another model, a rebuild; or it is
        damaged), without opening it."""
        if self._texts is not None or "texts" in self._table_names():
            self._db.drop_table("texts")
            self._names = None
        self._texts = None
        self._texts_absent = False

    def _table_names(self) -> set[str]:
        raise NotImplementedError

    def _probe_texts(self, rows: bool = True) -> None:
        """Read what a search reads of the texts table, cheaply: each of its indexes once and,
        with ``rows``, every row's hash (which opens each data file). Raises what LanceDB raises
        when a file is missing or cut short; ``maintain`` then makes the table again."""
        table = self._text_table()
        if table is None:
            return
        if rows:
            retry(table.search().select(["text_hash"]).limit(None).to_arrow)
        indexed = {column for index in table.list_indices() for column in index.columns}
        if "vector" in indexed:
            dim = int(table.schema.field("vector").type.list_size)
            ann_rows(table, np.full(dim, dim**-0.5, np.float32), 1, None, ["text_hash"])
        if indexed & set(COLUMN_WEIGHTS):
            query = full_text(LexicalQuery(("index",)))
            retry(table.search(query, query_type="fts").limit(1).to_arrow)

    def _texts_found_damaged(self, problem: str) -> None:
        """A search met damage in the texts table: say so once, and have searches read the
        chunks table instead until an index run makes the table again (``maintain``)."""
        found = (self.meta(TEXTS_OF), self.meta(TEXTS_MADE))
        with _DAMAGE_SAID:  # both arms of a hybrid search may meet it at once
            if self._texts_damaged == found:
                return
            self._texts_damaged = found
        logger.warning(
            "semsearch: the texts table of the index %s is damaged (%s); searching its chunks "
            "table instead, slower. The next `semsearch index` makes it again.",
            self.path,
            problem,
        )

    def _clear_texts(self) -> None:
        """Delete every row: the chunks' ``terms`` were written again (new path words, new
        rules), and the next ``maintain`` writes each text's row again from its first chunk."""
        table = self._text_table()
        if table is not None:
            table.delete("true")

    def _update_texts(self, chunks: Any, min_rows: int, partition_rows: int) -> None:
        """Bring the texts table up to date with ``chunks`` (see the module docstring); the
        caller records ``TEXTS_OF``."""
        dim = int(chunks.schema.field("vector").type.list_size)
        columns = ["text_hash", *_COLUMN_OF.values()]
        query = chunks.search().where(HAS_VECTOR).select(columns).limit(None)
        rows = retry(query.to_arrow).sort_by("id")
        grouped = rows.group_by("text_hash", use_threads=False).aggregate(
            [(column, "list") for column in _COLUMN_OF.values()]
        )
        hashes = grouped["text_hash"].to_pylist()
        ids_of = dict(zip(hashes, grouped["id_list"].to_pylist(), strict=True))
        places = pa.table({name: grouped[f"{column}_list"] for name, column in _COLUMN_OF.items()})
        row_of = {h: i for i, h in enumerate(hashes)}
        table = self._text_table()
        if table is not None and table.schema != texts_schema(dim):
            self._drop_texts()  # of another model's dimension
            table = None
        if table is None:
            table = self._texts = self._db.create_table("texts", schema=texts_schema(dim))
            self._texts_absent = False
            self._names = None
            self._put_meta({TEXTS_MADE: uuid.uuid4().hex})  # a search's damage was another's
            for column in COLUMN_WEIGHTS:
                table.create_index(
                    column, config=FTS(remove_stop_words=False, stem=True, ascii_folding=True)
                )
        held = retry(table.search().select(["text_hash", "ids"]).limit(None).to_arrow)
        stale = [  # gone, or its chunks changed (a chunk written again has a new id)
            h
            for h, ids in zip(held["text_hash"].to_pylist(), held["ids"].to_pylist(), strict=True)
            if ids_of.get(h) != ids
        ]
        for batch in _batches(stale):
            table.delete(f"text_hash IN ({hashes_sql(batch)})")
        kept = set(held["text_hash"].to_pylist()).difference(stale)
        for batch in _batches([h for h in hashes if h not in kept]):
            first = [ids_of[h][0] for h in batch]
            columns = ["text_hash", "vector", "text", "terms", "defines"]
            search = chunks.search().where(f"id IN ({ids_sql(first)})").select(columns)
            found = retry(search.limit(None).to_arrow)
            rows_of = pa.array([row_of[h] for h in found["text_hash"].to_pylist()], pa.int64())
            for name, column in places.take(rows_of).to_pydict().items():
                found = found.append_column(
                    name, pa.array(column, texts_schema(dim).field(name).type)
                )
            table.add(found)
        count = int(table.count_rows())
        trained = int(self.meta(TEXTS_ANN_ROWS) or 0)
        indexed = any("vector" in index.columns for index in table.list_indices())
        if count >= min_rows and (not indexed or count >= 2 * trained):
            partitions = max(1, round(count / partition_rows))
            config = HnswSq(distance_type="cosine", num_partitions=partitions)
            table.create_index("vector", config=config, replace=True)
            self._put_meta({TEXTS_ANN_ROWS: str(count)})

    def _warm_texts(self, table: Any) -> None:
        """On object storage, have LanceDB read the texts' full-text indexes whole, once per
        version (as ``LanceStore._warm_full_text`` does the chunks')."""
        if not self._is_remote or self._texts_warmed == table.version:
            return
        prewarm_full_text(table)
        self._texts_warmed = table.version

    def _texts_if_current(self, stamp: str) -> Any:
        """The texts table when it matches the chunks table at ``stamp`` ("epoch.version")."""
        if self.meta(TEXTS_OF) != stamp:
            return None
        damaged = self._texts_damaged
        if damaged is not None and damaged == (stamp, self.meta(TEXTS_MADE)):
            return None  # found damaged: the chunks table answers until the table is made again
        return self._text_table()

    def nearest_texts(
        self, query: np.ndarray[Any, Any], pool: int, stamp: str
    ) -> list[FoundText] | None:
        """The ``pool`` nearest distinct texts, best first (cosine); None when the table does
        not match the chunks table at ``stamp``."""
        table = self._texts_if_current(stamp)
        if table is None:
            return None
        found = ann_rows(table, query, pool, None, _FOUND)
        return _found(found, 1.0 - found["_distance"].to_numpy())

    def lexical_texts(
        self, expression: FullTextQuery, limit: int, stamp: str
    ) -> list[FoundText] | None:
        """The ``limit`` best distinct texts by BM25; None as for :meth:`nearest_texts`."""
        table = self._texts_if_current(stamp)
        if table is None:
            return None
        self._warm_texts(table)
        search = table.search(expression, query_type="fts").limit(limit)
        found = retry(search.select([*_FOUND, "_score"]).to_arrow)
        return _found(found, found["_score"].to_numpy())


# the places' columns in the texts table → in the chunks table
_COLUMN_OF = {
    "ids": "id",
    "files": "file_id",
    "starts": "start_line",
    "ends": "end_line",
    "pages": "page",
}


def _found(table: pa.Table, scores: Sequence[float]) -> list[FoundText]:
    """The texts of a search's answer (columns ``_FOUND``), with their ``scores``."""
    values = []
    for name in _PLACES:
        flat = table[name].combine_chunks().flatten()
        values.append((flat.fill_null(-1) if name == "pages" else flat).to_pylist())
    offsets = table["ids"].combine_chunks().offsets.to_pylist()
    hashes, texts = table["text_hash"].to_pylist(), table["text"].to_pylist()
    return [
        FoundText(h, float(score), tuple(v[offsets[n] : offsets[n + 1]] for v in values), text)
        for n, (h, score, text) in enumerate(zip(hashes, scores, texts, strict=True))
    ]


def _batches(values: list[str]) -> Iterable[list[str]]:
    for start in range(0, len(values), BATCH):
        yield values[start : start + BATCH]
