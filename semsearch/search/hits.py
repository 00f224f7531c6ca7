"""The top k hits of a search: candidate rows read, priors applied, overlaps and files decayed.

The fused scores rank the candidates; each chunk's priors (``ranking.chunk_priors``: its file's
name and folder, a definition of the queried name, imports only, a test or vendored file)
multiply its score, and the best k are chosen greedily, the n-th chunk of a file taking
``FILE_DECAY^(n-1)`` and a chunk half shown by a better one left out (:func:`choose`). Rows are
read only as far as they can matter (:func:`candidates`), some of them ahead, while the lexical
arm still runs (:func:`read_ahead`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from semsearch.search.ranking import (
    CANDIDATES,
    CANDIDATES_PER_K,
    COHERENCE_NOTE,
    FILE_DECAY,
    RAISING_NOTES,
    QueryInfo,
    best_prior,
    chunk_priors,
    prior_ceiling,
)
from semsearch.store import ChunkRow, FileRef, Store

# While the lexical worker runs, the search reads the rows of the vector arm's best chunks: up to
# READ_AHEAD of them, READ_AHEAD_STEP at a time (a step takes ~0.1 ms), stopping when it is done.
READ_AHEAD = 40
READ_AHEAD_STEP = 10
CANDIDATE_STEP = 15  # candidate rows read at a time while some may still reach the top k

Candidate = tuple[ChunkRow, list[tuple[str, float]]]  # a chunk's row and the priors it gets
Scored = tuple[float, ChunkRow, list[tuple[str, float]]]  # ... and its score with the priors


@dataclass(frozen=True)
class Copy:
    """Another place of a hit's text: a chunk of the same text in another file, or elsewhere in
    the same one (see :mod:`semsearch.search.copies`)."""

    path: str
    folder: str
    folder_path: str
    rel: str
    start_line: int
    end_line: int
    page: int | None

    def as_json(self) -> dict[str, Any]:
        """The JSON shape shared by the CLI and the MCP server."""
        return _place_json(self)


CopiesOf = Callable[[Sequence[ChunkRow]], dict[int, tuple[tuple[Copy, ...], int]]]
"""Chunk id → (its copies as listed, how many there are), for the chosen rows that have copies."""


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
    copies: tuple[Copy, ...] = ()  # the other places of the same text, by path (some of them)
    copy_count: int = 0  # how many other places hold the same text (all of them)

    def as_json(self) -> dict[str, Any]:
        """The JSON shape shared by the CLI and the MCP server."""
        return {
            **_place_json(self),
            "score": round(self.score, 6),
            "vectorRank": self.vector_rank,
            "cosineRank": self.cosine_rank,
            "pathCosine": None if self.path_cosine is None else round(self.path_cosine, 4),
            "fileCoherence": None if self.coherence is None else round(self.coherence, 4),
            "bm25Rank": self.lexical_rank,
            "definitionRank": self.definition_rank,
            "namedRank": self.named_rank,
            "priors": list(self.priors),
            "copies": [copy.as_json() for copy in self.copies],
            "copyCount": self.copy_count,
            "text": self.text,
        }


def _place_json(place: Copy | Hit) -> dict[str, Any]:
    """Where a hit or a copy is, as JSON: the keys both begin with."""
    return {
        "filePath": place.path,
        "folder": place.folder,
        "relPath": place.rel,
        "startLine": place.start_line,
        "endLine": place.end_line,
        "page": place.page,
    }


def file_path(folder_path: str, rel: str) -> str:
    """A file's path: its folder's path, "/", its path in the folder (the root folder is "/")."""
    return folder_path.rstrip("/") + "/" + rel


def _path(row: ChunkRow) -> str:
    return file_path(row.folder_path, row.rel)


def assemble(
    store: Store,
    info: QueryInfo,
    k: int,
    scores: dict[int, float],
    arms: dict[str, list[int]],
    path_cosine: dict[int, float] | None = None,
    shares: dict[int, float] | None = None,
    known: dict[int, Candidate] | None = None,
    files: Files | None = None,
    defined: frozenset[int] | None = None,
    rescale: bool = True,
    copies_of: CopiesOf | None = None,
) -> list[Hit]:
    """The top k hits (``path_cosine``: file id → the path term's cosine; ``shares``: chunk id →
    its file coherence share; both shown by ``--explain``); with ``rescale``, each score is
    divided by the largest product of raising priors among them (:func:`best_prior`).
    ``known``: candidates read already (:func:`read_ahead`); ``files``: the fused chunks'
    files, which let :func:`candidates` leave out the rows that cannot reach the top k;
    ``defined``: every chunk that defines a queried name, when known (none is parsed then);
    ``copies_of``: the copies of the chosen rows (none listed without)."""
    order = sorted(scores, key=lambda cid: -scores[cid])[: max(k * CANDIDATES_PER_K, CANDIDATES)]
    shares = shares or {}
    evaluated = candidates(store, info, k, order, scores, known or {}, files, shares, defined)
    picked, raising = choose(evaluated, k, shares)
    ceiling = best_prior(raising) if rescale else 1.0
    ranks = {name: {cid: at for at, cid in enumerate(ranked, 1)} for name, ranked in arms.items()}
    path_cosine = path_cosine or {}
    copies = {} if copies_of is None or not picked else copies_of([row for _, row, _ in picked])
    return [
        _hit(
            row,
            score / ceiling,
            {name: ranked.get(row.id) for name, ranked in ranks.items()},
            notes,
            path_cosine.get(row.file_id),
            shares.get(row.id),
            copies.get(row.id, ((), 0)),
        )
        for score, row, notes in picked
    ]


class Files:
    """The files of the fused chunks: chunk id → file id, and the store's file references."""

    def __init__(self, owners: dict[int, int], refs: dict[int, FileRef]) -> None:
        self.owners = owners
        self.refs = refs
        self._ceilings: dict[tuple[int, bool | None], float] = {}  # per file: few, asked often

    def ceiling(self, chunk_id: int, info: QueryInfo, defines: bool | None) -> float:
        """The largest product of priors the chunk can get (infinite when its file is not
        known); ``defines``: whether it defines a queried name, None when not known."""
        file_id = self.owners.get(chunk_id, -1)
        found = self._ceilings.get((file_id, defines))
        if found is None:
            ref = self.refs.get(file_id)
            found = math.inf if ref is None else prior_ceiling(ref.rel, info, defines)
            self._ceilings[file_id, defines] = found
        return found


def candidates(
    store: Store,
    info: QueryInfo,
    k: int,
    order: list[int],
    scores: dict[int, float],
    known: dict[int, Candidate],
    files: Files | None,
    shares: dict[int, float],
    defined: frozenset[int] | None = None,
) -> list[Scored]:
    """The chunks of ``order`` (best fused first) as (score with priors, row, priors), in that
    order, leaving out those no prior can lift into the top k (``defined``: every chunk that
    defines a queried name, when known).

    With ``files``, rows are read a batch at a time, highest ceiling (fused score x the largest
    product of priors the chunk's file allows) first, until the k-th of the top k chosen from
    them (:func:`choose`) beats every ceiling left: a chunk whose score can only be lower is
    chosen after those k, so it changes neither them nor their order. Without, all are read.
    """
    done = {cid: known[cid] for cid in order if cid in known}
    ceiling = {}
    if files is not None:
        ceiling = {c: scores[c] * files.ceiling(c, info, _defines(c, defined)) for c in order}
    waiting = sorted((cid for cid in order if cid not in done), key=lambda c: -ceiling.get(c, 0))
    step = CANDIDATE_STEP if files else len(waiting)
    while waiting:
        if files is not None and len(done) >= k:
            picked, _ = choose(_listed(order, scores, done), k, shares)
            if len(picked) == k and picked[-1][0] > ceiling[waiting[0]]:
                break
        batch, waiting = waiting[:step], waiting[step:]
        done.update(_read(store, batch, info, defined))
    return _listed(order, scores, done)


def _listed(order: list[int], scores: dict[int, float], done: dict[int, Candidate]) -> list[Scored]:
    """(score with priors, row, priors) of the chunks of ``order`` in ``done``, in that order."""
    listed = []
    for cid in order:
        if cid in done:
            row, priors = done[cid]
            listed.append((scores[cid] * math.prod(f for _, f in priors), row, priors))
    return listed


def read_ahead(
    store: Store, ranked: list[int], info: QueryInfo, lexical: Future[Any]
) -> dict[int, Candidate]:
    """The rows and priors of the vector arm's best chunks (``ranked``), read a few at a time
    while the lexical arm is still running: most of them are among the candidates
    :func:`assemble` needs, which then reads only the others."""
    known: dict[int, Candidate] = {}
    for start in range(0, min(READ_AHEAD, len(ranked)), READ_AHEAD_STEP):
        if lexical.done():
            break
        known.update(_read(store, ranked[start : start + READ_AHEAD_STEP], info))
    return known


def _read(
    store: Store, ids: list[int], info: QueryInfo, defined: frozenset[int] | None = None
) -> dict[int, Candidate]:
    """The rows of ``ids`` with their priors (``defined``: see :func:`candidates`)."""
    rows = store.chunks(ids)
    return {
        r.id: (r, chunk_priors(r.rel, r.text, info, _defines(r.id, defined), _path(r)))
        for r in rows
    }


def _defines(chunk_id: int, defined: frozenset[int] | None) -> bool | None:
    """Whether the chunk defines a queried name; None when ``defined`` does not say."""
    return None if defined is None else chunk_id in defined


def choose(
    candidates: list[Scored],
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
    copies: tuple[tuple[Copy, ...], int],
) -> Hit:
    return Hit(
        path=file_path(row.folder_path, row.rel),
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
        copies=copies[0],
        copy_count=copies[1],
    )
