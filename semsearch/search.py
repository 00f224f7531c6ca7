"""Hybrid retrieval: the store's cosine and BM25 arms fused by Reciprocal Rank Fusion.

Scores: in ``hybrid`` and ``bm25`` modes a hit's score is its RRF sum divided by the best sum
possible (a chunk ranked first by every arm scores 1.0), so scores are on one scale whichever
arms matched; in hybrid mode each file's best chunk then gains its file coherence share of the
best fused score (:func:`~semsearch.ranking.file_coherence`); the ranking priors multiply it, and
the reported score is then divided by the largest product of raising priors the results have
(:func:`~semsearch.ranking.best_prior`, 1 + the largest coherence share among them), so it stays
in [0, 1] and the order is the priors' order. In ``vector`` mode the score is the cosine
similarity times the priors, not rescaled.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pathspec

from semsearch.config import DEFAULT_TOP_K, MODES, Mode
from semsearch.embedder import Embedder
from semsearch.errors import ModelMismatchError, UsageError
from semsearch.lexical import LexicalQuery, lexical_query
from semsearch.named_files import named_files
from semsearch.ranking import (
    CANDIDATES,
    CANDIDATES_PER_K,
    COHERENCE_NOTE,
    DEFINITION_POOL,
    FILE_COHERENCE,
    FILE_DECAY,
    FILE_VECTOR_WEIGHT,
    FILE_VECTOR_WHOLE,
    NAMED_MAX,
    NAMED_WEIGHT,
    PATH_WEIGHT,
    POOL_MIN,
    POOL_PER_K,
    RAISING_NOTES,
    RRF_K,
    QueryInfo,
    best_prior,
    chunk_priors,
    defines_queried,
    embedding_text,
    file_coherence,
    file_lifted,
    is_prose,
    prior_ceiling,
    query_info,
)
from semsearch.store import ChunkRow, FileRef, Store, model_mismatch_message

# One worker for the lexical arms; one at a time, so a shared SQLite connection is never used by
# two threads at once (the caller waits for the result before touching the store again; the
# store's vector arm, which runs meanwhile, reads through a connection of its own).
_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="semsearch-lexical")
# While the lexical worker runs, the search reads the rows of the vector arm's best chunks: up to
# READ_AHEAD of them, READ_AHEAD_STEP at a time (a step takes ~0.1 ms), stopping when it is done.
READ_AHEAD = 40
READ_AHEAD_STEP = 10
CANDIDATE_STEP = 15  # candidate rows read at a time while some may still reach the top k
_OPTIONAL = frozenset(["definitions", "named"])  # arms that count in the fusion only when not empty
_ARM_WEIGHTS = {"named": NAMED_WEIGHT}  # RRF weights; the others weigh 1


Candidate = tuple[ChunkRow, list[tuple[str, float]]]  # a chunk's row and the priors it gets


@dataclass(frozen=True)
class Hit:
    """One search result: a chunk of a file, with where it came from and why it ranked."""

    path: str
    folder: str
    folder_path: str
    rel: str
    start_line: int
    end_line: int
    page: int | None
    score: float
    text: str
    vector_rank: int | None = None
    lexical_rank: int | None = None
    definition_rank: int | None = None
    named_rank: int | None = None  # the named-files arm's rank of the chunk (hybrid mode)
    priors: tuple[str, ...] = ()
    cosine_rank: int | None = None  # the chunk's own cosine rank, before the file lift
    path_cosine: float | None = None  # the query's cosine with the file's path vector
    coherence: float | None = None  # file coherence: the share of the best fused score added

    def as_json(self) -> dict[str, Any]:
        """The JSON shape shared by the CLI and the MCP server."""
        return {
            "filePath": self.path,
            "folder": self.folder,
            "relPath": self.rel,
            "startLine": self.start_line,
            "endLine": self.end_line,
            "page": self.page,
            "score": round(self.score, 6),
            "vectorRank": self.vector_rank,
            "cosineRank": self.cosine_rank,
            "pathCosine": None if self.path_cosine is None else round(self.path_cosine, 4),
            "fileCoherence": None if self.coherence is None else round(self.coherence, 4),
            "bm25Rank": self.lexical_rank,
            "definitionRank": self.definition_rank,
            "namedRank": self.named_rank,
            "priors": list(self.priors),
            "text": self.text,
        }


@dataclass(frozen=True)
class SearchOptions:
    """What to search for and where."""

    k: int = DEFAULT_TOP_K
    folder: str | None = None
    glob: str | None = None
    mode: Mode = "hybrid"
    rrf_k: int = RRF_K


def rrf(
    rankings: Sequence[Sequence[int]], rrf_k: int, weights: Sequence[float] | None = None
) -> dict[int, float]:
    """Reciprocal Rank Fusion: each list adds weight / (rrf_k + rank), rank from 1 (weight 1
    unless ``weights`` gives one per list)."""
    fused: dict[int, float] = {}
    for ranking, weight in zip(rankings, weights or [1.0] * len(rankings), strict=True):
        for rank, chunk_id in enumerate(ranking, start=1):
            fused[chunk_id] = fused.get(chunk_id, 0.0) + weight / (rrf_k + rank)
    return fused


def allowed_files(
    refs: dict[int, FileRef], folder: str | None, glob: str | None
) -> list[int] | None:
    """File ids passing the folder and glob filters, or None when there is no filter.

    ``folder`` is a folder's path, resolved from a name or path by the caller
    (:func:`semsearch.folders.resolve_folder`); a folder with no indexed files leaves no ids.
    """
    if folder is None and glob is None:
        return None
    chosen = list(refs.values())
    if folder is not None:
        chosen = [r for r in chosen if r.folder_path == folder]
    if glob is not None:
        try:
            spec = pathspec.GitIgnoreSpec.from_lines([glob])
        except (ValueError, re.error) as exc:
            raise UsageError(f"Invalid glob {glob!r}: {exc}") from exc
        chosen = [r for r in chosen if spec.match_file(r.rel)]
    return [r.id for r in chosen]


def check_model(store: Store, embedder: Embedder, stored: tuple[str, int] | None) -> None:
    """Refuse to compare a query vector with vectors from another model (``stored``: the
    store's recorded model, read once per search)."""
    if stored is not None and stored[0] != embedder.model_id:
        raise ModelMismatchError(model_mismatch_message(store.path, stored[0], embedder.model_id))


def search(store: Store, embedder: Embedder, query: str, options: SearchOptions) -> list[Hit]:
    """Rank the index's chunks for a query (see the module docstring for scores).

    In hybrid mode the lexical arms run in a worker thread while the query is embedded and the
    store ranks its vectors: SQLite, onnxruntime and numpy all release the GIL.
    """
    _validate(query, options)
    stored = store.model() if options.mode != "bm25" else None
    if options.mode != "bm25":
        if stored is not None:  # embed with the variant that built the index
            embedder = embedder.variant_for(stored[0])
        embedder.preload()  # the model session builds while the store reads its vectors
        store.preload()
    refs = store.file_refs()
    allowed = allowed_files(refs, options.folder, options.glob)
    if allowed is not None and not allowed:
        return []
    pool = max(options.k * POOL_PER_K, POOL_MIN)
    info = query_info(query)
    use_vectors = options.mode != "bm25" and bool(refs)
    if use_vectors:  # before the worker takes the connection: SQLite serialises its users
        check_model(store, embedder, stored)
    lexical: Future[dict[str, list[int]]] | None = None
    if options.mode != "vector":
        lexical = _WORKER.submit(_lexical_arms, store, query, info, pool, allowed)
    arms: dict[str, list[int]] = {}
    nearest: list[tuple[int, float]] = []
    path_cosine: dict[int, float] = {}
    file_of: dict[int, int] = {}  # chunk id → file id, of the vector arm's chunks
    known: dict[int, Candidate] = {}  # rows read while the lexical arm ran, with their priors
    try:
        if use_vectors:
            vector = embedder.embed_query(embedding_text(query))
            nearest = store.nearest(vector, pool, allowed)
            arms["vector"] = [cid for cid, _ in nearest]
            if options.mode == "hybrid" and (FILE_VECTOR_WEIGHT or PATH_WEIGHT):
                arms["vector"], path_cosine, file_of = _file_lifted(store, vector, nearest, refs)
            if options.mode == "hybrid" and NAMED_WEIGHT:
                arms["named"] = _named_arm(store, vector, refs, info, allowed)
            if lexical is not None:
                known = _read_ahead(store, arms["vector"], info, lexical)
    finally:
        if lexical is not None:
            arms.update(lexical.result())
    if options.mode == "vector":
        return _assemble(store, info, options.k, dict(nearest), arms, rescale=False)
    # the vector and BM25 arms count even when empty: a chunk only one of them found scores <= 1/2
    used = {name: ranking for name, ranking in arms.items() if ranking or name not in _OPTIONAL}
    weights = [_ARM_WEIGHTS.get(name, 1.0) for name in used]
    best_possible = 0.0  # the sum of a chunk first in every arm, added as rrf() adds it
    for weight in weights:
        best_possible += weight / (options.rrf_k + 1)
    fused = rrf(list(used.values()), options.rrf_k, weights)
    scores = {cid: s / best_possible for cid, s in fused.items()}
    shares: dict[int, float] = {}
    owners: dict[int, int] | None = None  # chunk id → file id, of every fused chunk
    if options.mode == "hybrid" and FILE_COHERENCE and scores:
        # the vector arm's chunks were looked up already (a LanceDB ANN index reads rows for it)
        missing = [cid for cid in scores if cid not in file_of]
        owners = {**file_of, **store.chunk_files(missing)}
        documents = set(owners.values()) & _documents(refs)
        shares = file_coherence(scores, owners, documents)
        best = max(scores.values())
        scores = {cid: s + best * shares.get(cid, 0.0) for cid, s in scores.items()}
    # Rescaled after ranking, so the order is exactly the priors' order. The cosine order is
    # shown by --explain beside the lifted vector rank; it is not fused.
    shown = {**arms, "cosine": [cid for cid, _ in nearest]}
    files = None if owners is None else Files(owners, refs)
    return _assemble(store, info, options.k, scores, shown, path_cosine, shares, known, files)


def _lexical_arms(
    store: Store, query: str, info: QueryInfo, pool: int, file_ids: list[int] | None
) -> dict[str, list[int]]:
    """The BM25 arm, and the definitions arm when the query names a symbol."""
    words = lexical_query(query)
    arms = {"bm25": store.lexical(words, pool, file_ids) if words else []}
    if info.names:
        arms["definitions"] = _definitions(store, info, file_ids)
    return arms


def _named_arm(
    store: Store,
    vector: np.ndarray[Any, Any],
    refs: dict[int, FileRef],
    info: QueryInfo,
    allowed: list[int] | None,
) -> list[int]:
    """The named-files arm: the best chunk by cosine of each file the query names
    (:mod:`semsearch.named_files`), best first; empty when more than ``NAMED_MAX`` files are
    named. A file none of whose chunks is among the ``POOL_MIN`` nearest of the named files'
    chunks is left out."""
    files = named_files(refs, info, allowed)
    if not files or len(files) > NAMED_MAX:
        return []
    nearest = store.nearest(vector, POOL_MIN, files)
    owners = store.chunk_files([cid for cid, _ in nearest])
    best: dict[int, int] = {}  # file id → its nearest chunk, in the order first met
    for cid, _ in nearest:
        best.setdefault(owners.get(cid, -cid), cid)
    return list(best.values())


def _validate(query: str, options: SearchOptions) -> None:
    if not query.strip():
        raise UsageError("The query is empty. Give some words to search for.")
    if options.k < 1:
        raise UsageError(f"k must be at least 1, got {options.k}.")
    if options.mode not in MODES:
        raise UsageError(f"Unknown mode {options.mode!r}: use one of {', '.join(MODES)}.")


def _definitions(store: Store, info: QueryInfo, file_ids: list[int] | None) -> list[int]:
    """Chunks that define a queried symbol, in BM25 order: a third arm for symbol queries.

    The FTS ``defines`` column finds them (case-folded and stemmed), the exact name confirms.
    """
    names = LexicalQuery(tuple(info.names), columns=("defines",))
    rows = store.chunks(store.lexical(names, DEFINITION_POOL, file_ids))
    return [row.id for row in rows if defines_queried(row.rel, row.text, info)]


_DOCUMENTS: list[tuple[dict[int, FileRef], frozenset[int]]] = []  # the last refs, their documents


def _documents(refs: dict[int, FileRef]) -> frozenset[int]:
    """The ids of the documents (``ranking.is_prose``) among ``refs``, found once per refs dict:
    the store hands out the same dict until the index changes."""
    known = _DOCUMENTS[0] if _DOCUMENTS else None
    if known is None or known[0] is not refs:
        known = (refs, frozenset(f for f, ref in refs.items() if is_prose(ref.rel)))
        _DOCUMENTS[:] = [known]  # one entry, replaced whole: safe beside another search
    return known[1]


def _file_lifted(
    store: Store,
    vector: np.ndarray[Any, Any],
    nearest: list[tuple[int, float]],
    refs: dict[int, FileRef],
) -> tuple[list[int], dict[int, float], dict[int, int]]:
    """The vector arm ranked with the file lift and the path term (``ranking.file_lifted``),
    the path cosines used (code file id → cosine) and the candidates' files (chunk id → file
    id). Code files count their missing candidates when ``FILE_VECTOR_WHOLE``; documents get no
    path term."""
    file_of = store.chunk_files([cid for cid, _ in nearest])
    code = (set(file_of.values()) & refs.keys()) - _documents(refs)
    path_cosine: dict[int, float] = {}
    if PATH_WEIGHT and code:
        paths = store.path_vectors(sorted(code))
        if paths:
            found = list(paths)
            cosines = np.stack([paths[f] for f in found]) @ vector.astype(np.float32)
            path_cosine = dict(zip(found, cosines.tolist(), strict=True))
    lifted = file_lifted(nearest, file_of, code if FILE_VECTOR_WHOLE else (), path_cosine)
    return lifted, path_cosine, file_of


def _assemble(
    store: Store,
    info: QueryInfo,
    k: int,
    scores: dict[int, float],
    arms: dict[str, list[int]],
    path_cosine: dict[int, float] | None = None,
    shares: dict[int, float] | None = None,
    known: dict[int, Candidate] | None = None,
    files: Files | None = None,
    rescale: bool = True,
) -> list[Hit]:
    """The top k hits (``path_cosine``: file id → the path term's cosine; ``shares``: chunk id →
    its file coherence share; both shown by ``--explain``); with ``rescale``, each score is
    divided by the largest product of raising priors among them (:func:`best_prior`).
    ``known``: candidates read already (:func:`_read_ahead`); ``files``: the fused chunks'
    files, which let :func:`_candidates` leave out the rows that cannot reach the top k."""
    order = sorted(scores, key=lambda cid: -scores[cid])[: max(k * CANDIDATES_PER_K, CANDIDATES)]
    shares = shares or {}
    candidates = _candidates(store, info, k, order, scores, known or {}, files, shares)
    picked, raising = _select(candidates, k, shares)
    ceiling = best_prior(raising) if rescale else 1.0
    ranks = {name: {cid: at for at, cid in enumerate(ranked, 1)} for name, ranked in arms.items()}
    path_cosine = path_cosine or {}
    return [
        _hit(
            row,
            score / ceiling,
            {name: found.get(row.id) for name, found in ranks.items()},
            notes,
            path_cosine.get(row.file_id),
            shares.get(row.id),
        )
        for score, row, notes in picked
    ]


@dataclass(frozen=True)
class Files:
    """The files of the fused chunks: chunk id → file id, and the store's file references."""

    owners: dict[int, int]
    refs: dict[int, FileRef]

    def ceiling(self, chunk_id: int, info: QueryInfo) -> float:
        """The largest product of priors the chunk can get (infinite when its file is not
        known)."""
        ref = self.refs.get(self.owners.get(chunk_id, -1))
        return math.inf if ref is None else prior_ceiling(ref.rel, info)


def _candidates(
    store: Store,
    info: QueryInfo,
    k: int,
    order: list[int],
    scores: dict[int, float],
    known: dict[int, Candidate],
    files: Files | None,
    shares: dict[int, float],
) -> list[tuple[float, ChunkRow, list[tuple[str, float]]]]:
    """The chunks of ``order`` (best fused first) as (score with priors, row, priors), in that
    order, leaving out those no prior can lift into the top k.

    With ``files``, rows are read a batch at a time, highest ceiling (fused score x the largest
    product of priors the chunk's file allows) first, until the k-th of the top k chosen from
    them (:func:`_select`) beats every ceiling left: a chunk whose score can only be lower is
    chosen after those k, so it changes neither them nor their order. Without, all are read.
    """
    done = {cid: known[cid] for cid in order if cid in known}
    ceiling = {cid: scores[cid] * files.ceiling(cid, info) for cid in order} if files else {}
    waiting = sorted((cid for cid in order if cid not in done), key=lambda c: -ceiling.get(c, 0))
    step = CANDIDATE_STEP if files else len(waiting)
    while waiting:
        if files is not None and len(done) >= k:
            picked, _ = _select(_listed(order, scores, done), k, shares)
            if len(picked) == k and picked[-1][0] > ceiling[waiting[0]]:
                break
        batch, waiting = waiting[:step], waiting[step:]
        for row in store.chunks(batch):
            done[row.id] = (row, chunk_priors(row.rel, row.text, info))
    return _listed(order, scores, done)


def _listed(
    order: list[int], scores: dict[int, float], done: dict[int, Candidate]
) -> list[tuple[float, ChunkRow, list[tuple[str, float]]]]:
    """(score with priors, row, priors) of the chunks of ``order`` in ``done``, in that order."""
    listed = []
    for cid in order:
        if cid in done:
            row, priors = done[cid]
            listed.append((scores[cid] * math.prod(f for _, f in priors), row, priors))
    return listed


def _read_ahead(
    store: Store, ranked: list[int], info: QueryInfo, lexical: Future[Any]
) -> dict[int, Candidate]:
    """The rows and priors of the vector arm's best chunks (``ranked``), read a few at a time
    while the lexical arm is still running: most of them are among the candidates
    :func:`_assemble` needs, which then reads only the others."""
    known: dict[int, Candidate] = {}
    for start in range(0, READ_AHEAD, READ_AHEAD_STEP):
        if lexical.done():
            break
        for row in store.chunks(ranked[start : start + READ_AHEAD_STEP]):
            known[row.id] = (row, chunk_priors(row.rel, row.text, info))
    return known


def _select(
    candidates: list[tuple[float, ChunkRow, list[tuple[str, float]]]],
    k: int,
    shares: dict[int, float],
) -> tuple[list[tuple[float, ChunkRow, tuple[str, ...]]], dict[str, float]]:
    """The best k candidates as (score, row, notes), skipping overlapping chunks, the n-th chunk
    of a file with FILE_DECAY^(n-1); and the largest factor of each raising prior among them.

    The decay only lowers scores, so a lazy max-heap gives the exact greedy order.
    """
    heap = [(-score, order, 0) for order, (score, _, _) in enumerate(candidates)]
    heapq.heapify(heap)
    per_file: dict[tuple[str, str], int] = {}
    picked: list[tuple[float, ChunkRow, tuple[str, ...]]] = []
    raising: dict[str, float] = {}
    while heap and len(picked) < k:
        negative, order, applied = heapq.heappop(heap)
        score, row, priors = candidates[order]
        seen = per_file.get((row.folder_path, row.rel), 0)
        if seen != applied:
            heapq.heappush(heap, (-score * FILE_DECAY**seen, order, seen))
            continue
        if _overlaps(row, [chosen for _, chosen, _ in picked]):
            continue
        per_file[(row.folder_path, row.rel)] = seen + 1
        for name, factor in priors:
            if name in RAISING_NOTES:
                raising[name] = max(factor, raising.get(name, 1.0))
        if row.id in shares:
            raising[COHERENCE_NOTE] = max(1 + shares[row.id], raising.get(COHERENCE_NOTE, 1.0))
        notes = [f"{name} x{factor:g}" for name, factor in priors]
        if seen:
            notes.append(f"chunk {seen + 1} of this file x{FILE_DECAY**seen:g}")
        picked.append((-negative, row, tuple(notes)))
    return picked, raising


def _overlaps(row: ChunkRow, shown: list[ChunkRow]) -> bool:
    """True when at least half of the chunk's lines are already shown by a better hit."""
    span = row.end_line - row.start_line + 1
    for hit in shown:
        if hit.folder_path != row.folder_path or hit.rel != row.rel or hit.page != row.page:
            continue
        shared = min(hit.end_line, row.end_line) - max(hit.start_line, row.start_line) + 1
        if shared * 2 >= span:
            return True
    return False


def _hit(
    row: ChunkRow,
    score: float,
    ranks: dict[str, int | None],
    priors: tuple[str, ...],
    path_cosine: float | None,
    coherence: float | None,
) -> Hit:
    path = row.folder_path.rstrip("/") + "/" + row.rel
    return Hit(
        path=path,
        folder=row.folder_name,
        folder_path=row.folder_path,
        rel=row.rel,
        start_line=row.start_line,
        end_line=row.end_line,
        page=row.page,
        score=score,
        text=row.text,
        vector_rank=ranks.get("vector"),
        lexical_rank=ranks.get("bm25"),
        definition_rank=ranks.get("definitions"),
        named_rank=ranks.get("named"),
        priors=priors,
        cosine_rank=ranks.get("cosine"),
        path_cosine=path_cosine,
        coherence=coherence,
    )
