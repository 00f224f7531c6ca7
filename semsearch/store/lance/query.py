"""The LanceDB backend's searches: full-text queries and the ANN vector arm.

Imported by :mod:`semsearch.store.lance.store`, which checks first that the lancedb extra loads.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from lancedb.query import (
    BooleanQuery,
    FullTextOperator,
    FullTextQuery,
    MatchQuery,
    MultiMatchQuery,
    Occur,
)

from semsearch.store.exact import best_first
from semsearch.store.lance.tables import ids_sql, retry
from semsearch.text.lexical import COLUMN_WEIGHTS, LexicalQuery

ANN_EF = 96  # HNSW search breadth; with one re-ranking pass, recall@10 0.995 at 1M (bench)
ANN_NPROBES = 4  # IVF partitions searched
_TOKEN = re.compile(r"\w+")
ANY, ALL = FullTextOperator.OR, FullTextOperator.AND


def full_text(query: LexicalQuery) -> FullTextQuery | None:
    """LanceDB's query for a LexicalQuery: each alternative in each column, any may match.

    A one-word alternative matches in any of the columns (column boosts as in SQLite); a phrase
    needs all its words in one column (the index keeps no positions); the words ``together``
    each in any column.
    """
    columns = list(query.columns)
    boosts = [COLUMN_WEIGHTS.get(c, 1.0) for c in columns]
    clauses: list[FullTextQuery] = []
    for alternative in query.alternatives:
        words = _TOKEN.findall(alternative)
        if not words:
            continue
        text = " ".join(words)
        if len(words) == 1:
            clauses.append(MultiMatchQuery(text, columns, boosts=boosts, operator=ANY))
        else:
            for column, boost in zip(columns, boosts, strict=True):
                clauses.append(
                    MatchQuery(
                        text,
                        column,
                        boost=boost,
                        fuzziness=0,
                        max_expansions=50,
                        operator=ALL,
                        prefix_length=0,
                        document_granularity=None,
                    )
                )
    together = [w for word in query.together for w in _TOKEN.findall(word)]
    if len(together) > 1:  # every word, each in any column
        clauses.append(
            BooleanQuery(
                [
                    (Occur.MUST, MultiMatchQuery(word, columns, boosts=boosts, operator=ANY))
                    for word in together
                ]
            )
        )
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else BooleanQuery([(Occur.SHOULD, c) for c in clauses])


def prewarm_full_text(table: Any) -> None:
    """Have LanceDB read a table's full-text indexes whole (see ``LanceStore._warm_full_text``)."""
    for column in COLUMN_WEIGHTS:
        # no such index, or a failed request: the query itself says so
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            table.prewarm_index(f"{column}_idx")


def ann_rows(
    table: Any,
    query: np.ndarray[Any, Any],
    pool: int,
    where: str | None,
    columns: Sequence[str],
) -> Any:
    """The ``pool`` rows of a table with a vector index nearest the query, best first: their
    ``columns`` and ``_distance`` (cosine distance), as an Arrow table."""

    def run() -> Any:
        search = table.search(np.asarray(query, dtype=np.float32), vector_column_name="vector")
        search = search.distance_type("cosine").nprobes(ANN_NPROBES).ef(max(ANN_EF, pool))
        # Re-rank the candidates on their stored vectors: the index's own distances are
        # approximate (and squared L2 of the normalised vectors, not cosine distance), while
        # rows not yet in the index are scored exactly; refining puts both on one scale.
        search = search.refine_factor(1)
        search = search.select([*dict.fromkeys(columns), "_distance"]).limit(pool)
        if where is not None:
            search = search.where(where, prefilter=True)
        return search.to_arrow()

    return retry(run)


def ann_nearest(
    chunks: Any,
    query: np.ndarray[Any, Any],
    pool: int,
    file_ids: Iterable[int] | None,
    columns: Sequence[str] = (),
) -> tuple[list[tuple[int, float]], list[dict[str, Any]]]:
    """(chunk id, cosine) of the approximate nearest chunks of a table with a vector index, and
    their rows of ``columns`` (read with them: a second look-up by id costs a query)."""
    where = None if file_ids is None else f"file_id IN ({ids_sql(file_ids)})"
    table = ann_rows(chunks, query, pool, where, ["id", *columns])
    distances = table["_distance"].to_numpy()
    found = [
        (int(i), 1.0 - float(d)) for i, d in zip(table["id"].to_numpy(), distances, strict=True)
    ]
    return found, table.select(list(columns)).to_pylist() if columns else []


def exact_nearest(
    table: Any,
    query: np.ndarray[Any, Any],
    pool: int,
    where: str,
    columns: Sequence[str],
    limit: int,
) -> tuple[list[tuple[int, float]], list[dict[str, Any]]] | None:
    """What :func:`ann_nearest` gives, ranked exactly over the rows ``where`` selects, read
    whole: at most ``limit`` of them, else None (the vector index answers then). A search
    within a few files (the files a query names) costs a filtered read (~35 ms on 1.6M chunks)
    instead of loading the table's whole vector index (1.7 s and 1.3 GB the first time)."""

    def run() -> Any:
        chosen = ["id", "vector", *dict.fromkeys(c for c in columns if c != "id")]
        return table.search().where(where).select(chosen).limit(limit + 1).to_arrow()

    found = retry(run)
    if found.num_rows > limit:
        return None
    if not found.num_rows:
        return [], []
    flat = found["vector"].combine_chunks().flatten().to_numpy(zero_copy_only=False)
    matrix = np.asarray(flat, dtype=np.float32).reshape(found.num_rows, -1)
    scores = matrix @ np.asarray(query, dtype=np.float32)
    order = best_first(scores, pool)
    ids = found["id"].to_numpy()
    ranked = [(int(ids[i]), float(scores[i])) for i in order]
    return ranked, found.select(list(columns)).take(order).to_pylist() if columns else []
