"""Hybrid retrieval: the store's cosine and BM25 arms fused by Reciprocal Rank Fusion.

Scores: in ``hybrid`` and ``bm25`` modes a hit's score is its RRF sum divided by the best sum
possible (a chunk ranked first by every arm scores 1.0), so scores are on one scale whichever
arms matched; in hybrid mode each file's best chunk then gains its file coherence share of the
best fused score (:func:`~.ranking.file_coherence`); the ranking priors multiply it, and
the reported score is then divided by the largest product of raising priors the results have
(:func:`~.ranking.best_prior`, 1 + the largest coherence share among them), so it stays
in [0, 1] and the order is the priors' order. In ``vector`` mode the score is the cosine
similarity times the priors, not rescaled. The priors and the choice of the top k hits are
:mod:`semsearch.search.hits`'s. Chunks of one text in several places are collapsed into one
hit that lists the others, before the top k is chosen (:mod:`semsearch.search.copies`), unless
``all_copies`` is asked for.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from semsearch.config import DEFAULT_TOP_K, MODES, RRF_K, Mode
from semsearch.errors import ModelMismatchError, NoMatchingFilesError, UsageError
from semsearch.files.filetype import is_prose
from semsearch.files.gitignore import PatternList
from semsearch.model.catalog import mismatch_hints
from semsearch.model.embedder import Embedder
from semsearch.search.copies import CopyLister, Places, collapse, widened
from semsearch.search.derived import per_refs
from semsearch.search.hits import Candidate, Files, Hit, assemble, file_path, read_ahead
from semsearch.search.named_files import named_files
from semsearch.search.ranking import (
    DEFINITION_POOL,
    FILE_VECTOR_WEIGHT,
    FILE_VECTOR_WHOLE,
    NAME_DEFINITION_POOL,
    NAMED_MAX,
    NAMED_WEIGHT,
    PATH_WEIGHT,
    POOL_MIN,
    POOL_PER_K,
    QueryInfo,
    coherence_weight,
    defines_queried,
    embedding_text,
    file_coherence,
    file_lifted,
    public_python_folders,
    query_info,
)
from semsearch.store import ChunkRow, FileRef, Store, model_mismatch_message
from semsearch.text.lexical import LexicalQuery, lexical_query

# One worker for the lexical arms and the files a query names; one job at a time, so a shared
# SQLite connection is never used by two threads at once (the caller waits for the result before
# touching the store again; the store's vector arm, which runs meanwhile, reads through a
# connection of its own).
_FILTERS_KEPT = 16  # filters whose files are remembered per index state (_allowed)
_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="semsearch-lexical")
_OPTIONAL = frozenset(["definitions", "named"])  # arms that count in the fusion only when not empty
_WIDENED = frozenset(["vector", "bm25"])  # arms read deeper when copies fill them (copies.widened)


@dataclass(frozen=True)
class SearchOptions:
    """What to search for and where.

    ``globs`` and ``exclude`` are gitignore-style patterns matched against each file's path
    relative to its folder (:class:`~semsearch.files.gitignore.PatternList`): a file is searched
    when it matches one of the ``globs`` (any file when there is none; a glob starting with "!"
    excludes instead) and none of ``exclude``. ``min_score`` drops the hits scoring below it.
    ``all_copies`` gives each copy of a text its own hit instead of one hit listing the others.
    """

    k: int = DEFAULT_TOP_K
    folder: str | None = None
    globs: tuple[str, ...] = ()
    mode: Mode = "hybrid"
    rrf_k: int = RRF_K
    exclude: tuple[str, ...] = ()
    min_score: float | None = None
    all_copies: bool = False


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
    refs: dict[int, FileRef],
    folder: str | None,
    globs: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> list[int] | None:
    """File ids passing the folder and path filters (see :class:`SearchOptions`), or None when
    there is no filter.

    ``folder`` is a folder's path, resolved from a name or path by the caller
    (:func:`semsearch.files.folders.resolve_folder`). An invalid pattern is a
    :class:`UsageError` naming it; filters that leave no file (while some are indexed) are a
    :class:`NoMatchingFilesError` saying which filter did.
    """
    if folder is None and not globs and not exclude:
        return None
    wanted = [glob for glob in globs if not glob.startswith("!")]
    unwanted = [glob[1:] for glob in globs if glob.startswith("!")]
    for pattern in exclude:
        if pattern.startswith("!"):
            raise UsageError(
                f"The exclude pattern {pattern!r} starts with '!': give it as an include glob "
                "instead, or write \\! for a name that starts with '!'."
            )
        unwanted.append(pattern)
    for pattern in [*globs, *exclude]:
        _parse([pattern])  # each alone, so that an error names the pattern as it was given
    chosen = list(refs.values())
    if folder is not None:
        chosen = [r for r in chosen if r.folder_path == folder]
    if refs and not chosen:
        name = next((r.folder_name for r in refs.values() if r.folder_path == folder), folder)
        raise NoMatchingFilesError(
            f"Folder {name} has no indexed files: run `semsearch index` to index it."
        )
    if wanted:
        including = _parse(wanted)
        chosen = [r for r in chosen if including.matches(r.rel)]
        if refs and not chosen:
            raise NoMatchingFilesError(_no_match(folder, refs, wanted))
    if unwanted:
        excluding = _parse(unwanted)
        kept = [r for r in chosen if not excluding.matches(r.rel)]
        if chosen and not kept:
            raise NoMatchingFilesError(_all_excluded(folder, refs, wanted, unwanted))
        chosen = kept
    return [r.id for r in chosen]


def _allowed(refs: dict[int, FileRef], options: SearchOptions) -> list[int] | None:
    """:func:`allowed_files` of the options' filters, remembered for the last few filters until
    the index changes: an agent asks within one folder or glob again and again, and matching a
    glob against 100,000 paths takes 0.2 s. The list is shared: nobody changes it."""
    key = (options.folder, tuple(options.globs), tuple(options.exclude))
    if key == (None, (), ()):
        return None
    memo = per_refs(refs, _filter_memo)
    with contextlib.suppress(KeyError):  # another search may drop it meanwhile
        return memo[key]
    found = allowed_files(refs, *key)  # raises for a bad filter: nothing kept
    while len(memo) >= _FILTERS_KEPT:
        memo.pop(next(iter(memo)), None)
    memo[key] = found
    return found


def _filter_memo(refs: dict[int, FileRef]) -> dict[tuple[Any, ...], list[int] | None]:
    return {}


def _parse(patterns: Sequence[str]) -> PatternList:
    try:
        return PatternList.parse(patterns, strict=True)
    except ValueError as exc:
        raise UsageError(f"Invalid glob {exc}.") from exc


def _either(patterns: Sequence[str]) -> str:
    """'a', 'a' or 'b', 'a', 'b' or 'c'."""
    quoted = [repr(pattern) for pattern in patterns]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def _where(folder: str | None, refs: dict[int, FileRef]) -> str:
    if folder is None:
        return ""
    return " in folder " + next(r.folder_name for r in refs.values() if r.folder_path == folder)


def _no_match(folder: str | None, refs: dict[int, FileRef], wanted: Sequence[str]) -> str:
    plural = "s" if len(wanted) > 1 else ""
    return (
        f"No indexed path{_where(folder, refs)} matches the glob{plural} {_either(wanted)}. "
        "Globs are gitignore patterns matched against the path inside its folder, "
        "e.g. '*.py', 'src/**' or 'docs/'."
    )


def _all_excluded(
    folder: str | None, refs: dict[int, FileRef], wanted: Sequence[str], unwanted: Sequence[str]
) -> str:
    plural = "s" if len(wanted) > 1 else ""
    which = f" matching the glob{plural} {_either(wanted)}" if wanted else ""
    return (
        f"Every indexed path{_where(folder, refs)}{which} is excluded by {_either(unwanted)}: "
        "nothing is left to search."
    )


def check_model(store: Store, embedder: Embedder, stored: tuple[str, int] | None) -> None:
    """Refuse to compare a query vector with vectors from another model (``stored``: the
    store's recorded model, read once per search)."""
    if stored is not None and stored[0] != embedder.model_id:
        raise ModelMismatchError(
            model_mismatch_message(store.path, stored[0], embedder.model_id)
            + mismatch_hints(stored[0], embedder.model_id)
        )


def search(store: Store, embedder: Embedder, query: str, options: SearchOptions) -> list[Hit]:
    """Rank the index's chunks for a query (see the module docstring for scores).

    In hybrid mode the lexical arms run in a worker thread while the query is embedded and the
    store ranks its vectors: SQLite, onnxruntime and numpy all release the GIL. The store reads
    as one search (``Store.reading``).
    """
    _validate(query, options)
    with store.reading():
        return _search(store, embedder, query, options)


def _search(store: Store, embedder: Embedder, query: str, options: SearchOptions) -> list[Hit]:
    stored = store.model() if options.mode != "bm25" else None
    if options.mode != "bm25":
        if stored is not None:  # embed with the variant that built the index
            embedder = embedder.variant_for(stored[0])
        embedder.preload()  # the model session builds while the store reads its vectors (below)
    refs = store.file_refs()
    allowed = _allowed(refs, options)
    if allowed is not None and not allowed:  # nothing is indexed
        return []
    pool = max(options.k * POOL_PER_K, POOL_MIN)
    info = replace(query_info(query), public_folders=per_refs(refs, _public_folders))
    use_vectors = options.mode != "bm25" and bool(refs)
    if use_vectors:  # before the worker takes the connection: SQLite serialises its users
        check_model(store, embedder, stored)
    by_hash = not use_vectors  # text keys from rows, not from vectors it does not read
    collapsing = not options.all_copies and store.has_copies()
    places = Places(store, by_hash) if collapsing else None
    # The files the query names, in the worker: a new process indexes every file's name first
    # (named_files.name_index), while this thread reads the vectors.
    named: Future[list[int]] | None = None
    if use_vectors and options.mode == "hybrid" and NAMED_WEIGHT:
        named = _WORKER.submit(named_files, refs, info, allowed)
    lexical: Future[LexicalArms] | None = None
    if options.mode != "vector":
        lexical = _WORKER.submit(
            _lexical_arms, store, query, info, pool, allowed, collapsing, by_hash
        )
    arms: dict[str, list[int]] = {}
    nearest: list[tuple[int, float]] = []
    path_cosine: dict[int, float] = {}
    file_of: dict[int, int] = {}  # chunk id → file id, of the vector arm's chunks
    known: dict[int, Candidate] = {}  # rows read while the lexical arm ran, with their priors
    defined: frozenset[int] | None = None  # every chunk defining a queried name, when known
    try:
        if use_vectors:
            store.preload()  # while the worker runs, and the model session builds
            vector = embedder.embed_query(embedding_text(query))
            nearest = store.nearest(vector, pool, allowed)
            if places is not None:
                deeper = functools.partial(store.nearest, vector, file_ids=allowed)
                nearest = widened(deeper, nearest, _first, pool, places)
            arms["vector"] = [cid for cid, _ in nearest]
            if options.mode == "hybrid" and (FILE_VECTOR_WEIGHT or PATH_WEIGHT):
                arms["vector"], path_cosine, file_of = _file_lifted(store, vector, nearest, refs)
            if named is not None:
                arms["named"] = _named_arm(store, vector, named.result())
            if lexical is not None:
                known = read_ahead(store, arms["vector"], info, lexical)
    finally:
        if lexical is not None:
            answer = lexical.result()
            arms.update(answer.arms)
            defined = answer.defined
            if places is not None and answer.places is not None:
                places.merge(answer.places)
    copies_of = None
    if places is not None:
        places.read(cid for ranking in arms.values() for cid in ranking)
        collapsed = collapse(arms, places, refs, info, options.rrf_k, allowed is None)
        arms = {
            name: collapsed.ranked(ranking, pool if name in _WIDENED else None)
            for name, ranking in arms.items()
        }
        nearest = collapsed.scored(nearest)
        copies_of = CopyLister(store, refs, allowed)
    if options.mode == "vector":
        hits = assemble(
            store, info, options.k, dict(nearest), arms, rescale=False, copies_of=copies_of
        )
        return _at_least(hits, options.min_score)
    # the vector and BM25 arms count even when empty: a chunk only one of them found scores <= 1/2
    used = {name: ranking for name, ranking in arms.items() if ranking or name not in _OPTIONAL}
    # RRF weights: the named files' arm weighs NAMED_WEIGHT (read here, so a tuning run's value
    # counts), the others 1
    weights = [NAMED_WEIGHT if name == "named" else 1.0 for name in used]
    best_possible = 0.0  # the sum of a chunk first in every arm, added as rrf() adds it
    for weight in weights:
        best_possible += weight / (options.rrf_k + 1)
    fused = rrf(list(used.values()), options.rrf_k, weights)
    scores = {cid: s / best_possible for cid, s in fused.items()}
    shares: dict[int, float] = {}
    owners: dict[int, int] | None = None  # chunk id → file id, of every fused chunk
    coherence = coherence_weight(info)
    if options.mode == "hybrid" and coherence and scores:
        # the vector arm's chunks were looked up already (a LanceDB ANN index reads rows for it)
        missing = [cid for cid in scores if cid not in file_of]
        owners = {**file_of, **store.chunk_files(missing)}
        documents = _documents(set(owners.values()), refs)
        shares = file_coherence(scores, owners, documents, coherence)
        best = max(scores.values())
        scores = {cid: s + best * shares.get(cid, 0.0) for cid, s in scores.items()}
    # Rescaled after ranking, so the order is exactly the priors' order. The cosine order is
    # shown by --explain beside the lifted vector rank; it is not fused.
    shown = {**arms, "cosine": [cid for cid, _ in nearest]}
    files = None if owners is None else Files(owners, refs)
    hits = assemble(
        store,
        info,
        options.k,
        scores,
        shown,
        path_cosine,
        shares,
        known,
        files,
        defined,
        copies_of=copies_of,
    )
    return _at_least(hits, options.min_score)


def _at_least(hits: list[Hit], min_score: float | None) -> list[Hit]:
    """The hits scoring at least ``min_score`` (scores are those reported: rescaled first)."""
    return hits if min_score is None else [hit for hit in hits if hit.score >= min_score]


@dataclass(frozen=True)
class LexicalArms:
    """The lexical worker's answer: its arms, and the chunks that define a queried name (the
    definitions arm's, when they are all of them; None when more may); the places it read
    (when copies collapse)."""

    arms: dict[str, list[int]]
    defined: frozenset[int] | None
    places: Places | None = None


def _lexical_arms(
    store: Store,
    query: str,
    info: QueryInfo,
    pool: int,
    file_ids: list[int] | None,
    collapsing: bool = False,
    by_hash: bool = False,
) -> LexicalArms:
    """The BM25 arm, and the definitions arm when the query names a symbol. When copies
    collapse (``collapsing``), the BM25 arm is read deep enough to hold ``pool`` distinct
    texts, with places of its own (the caller's belong to its thread; ``by_hash`` as theirs)."""
    words = lexical_query(query)
    arms = {"bm25": store.lexical(words, pool, file_ids) if words else []}
    places = None
    if collapsing and words:
        places = Places(store, by_hash)
        deeper = functools.partial(store.lexical, words, file_ids=file_ids)
        arms["bm25"] = widened(deeper, arms["bm25"], _itself, pool, places)
    defined: frozenset[int] | None = frozenset()  # a query naming nothing: no chunk defines it
    if info.names:
        arms["definitions"], defined = _definitions(store, info, file_ids)
    return LexicalArms(arms, defined, places)


def _first(pair: tuple[int, float]) -> int:
    """The chunk id of a (chunk id, score) pair."""
    return pair[0]


def _itself(chunk_id: int) -> int:
    """A ranking's item is its chunk id."""
    return chunk_id


def _named_arm(store: Store, vector: np.ndarray[Any, Any], files: list[int]) -> list[int]:
    """The named-files arm: the best chunk by cosine of each of the ``files`` the query names
    (:func:`~semsearch.search.named_files.named_files`), best first; empty when more than
    ``NAMED_MAX`` files are named. A file none of whose chunks is among the ``POOL_MIN`` nearest
    of the named files' chunks is left out."""
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
    if _SURROGATE.search(query):
        raise UsageError(
            f"The query {_shown(query)} holds bytes that are not UTF-8 text. Type it again in "
            "UTF-8 (a terminal set to another encoding sends such bytes)."
        )
    if options.k < 1:
        raise UsageError(f"k must be at least 1, got {options.k}.")
    if options.mode not in MODES:
        raise UsageError(f"Unknown mode {options.mode!r}: use one of {', '.join(MODES)}.")
    if options.min_score is not None and not math.isfinite(options.min_score):
        raise UsageError(f"The minimum score must be a number, got {options.min_score}.")


# A lone surrogate: how Python decodes a byte of argv that is not UTF-8 (\xff → \udcff); neither
# SQLite nor the tokenizer takes one.
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _shown(query: str) -> str:
    """The query quoted, each byte that is not UTF-8 as ``\\xNN`` (other surrogates ``\\uNNNN``)."""
    return "'" + _SURROGATE.sub(_escape_surrogate, query) + "'"


def _escape_surrogate(match: re.Match[str]) -> str:
    point = ord(match.group())
    return f"\\x{point - 0xDC00:02x}" if 0xDC80 <= point <= 0xDCFF else f"\\u{point:04x}"


def _definitions(
    store: Store, info: QueryInfo, file_ids: list[int] | None
) -> tuple[list[int], frozenset[int] | None]:
    """Chunks that define a queried symbol, in BM25 order: a third arm for symbol queries; and
    the same as a set when the arm holds all of them (None when its pool was full).

    The FTS ``defines`` column finds them (case-folded and stemmed), the exact name confirms;
    a chunk whose ``defines`` column does not match defines no queried name.
    """
    names = LexicalQuery(tuple(info.names), columns=("defines",))
    pool = DEFINITION_POOL
    matched = store.lexical(names, pool, file_ids)
    found = [row.id for row in store.chunks(matched) if _defines(row, info)]
    if info.is_name and len(matched) == pool:
        # The name's word is in many defined names (`Request`: `request`, `parse_request`…), and
        # its own definition may rank below them: look deeper, once.
        deeper = store.lexical(names, NAME_DEFINITION_POOL, file_ids)
        rows = store.chunks(deeper[pool:])
        found += [row.id for row in rows if _defines(row, info)]
        matched, pool = deeper, NAME_DEFINITION_POOL
    return found, frozenset(found) if len(matched) < pool else None


def _defines(row: ChunkRow, info: QueryInfo) -> bool:
    """Whether the chunk defines a queried name (``ranking.defines_queried``)."""
    return defines_queried(row.rel, row.text, info, file_path(row.folder_path, row.rel))


def _documents(file_ids: set[int], refs: dict[int, FileRef]) -> set[int]:
    """The documents (``filetype.is_prose``) among ``file_ids`` that are in ``refs`` (asked of
    a search's candidates' files, not of every file: a new process searches at once)."""
    return {f for f in file_ids if f in refs and is_prose(refs[f].rel)}


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
    files = set(file_of.values()) & refs.keys()
    code = files - _documents(files, refs)
    path_cosine: dict[int, float] = {}
    if PATH_WEIGHT and code:
        paths = store.path_vectors(sorted(code))
        if paths:
            found = list(paths)
            cosines = np.stack([paths[f] for f in found]) @ vector.astype(np.float32)
            path_cosine = dict(zip(found, cosines.tolist(), strict=True))
    lifted = file_lifted(nearest, file_of, code if FILE_VECTOR_WHOLE else (), path_cosine)
    return lifted, path_cosine, file_of


def _public_folders(refs: dict[int, FileRef]) -> frozenset[str]:
    """The folders of ``refs`` with a public Python module (made once per refs dict)."""
    return public_python_folders(ref.rel for ref in refs.values())
