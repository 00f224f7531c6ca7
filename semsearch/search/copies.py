"""Copies: one text stored in several places comes back as one hit that lists the others.

A vendored copy, a repository checked out at several revisions side by side, a copied file: their
chunks have the same text, so the same vector, and without this a search's top k could be one
passage k times. Two chunks are copies when their stored text hashes are equal (``text_hash``:
the same key the vectors are reused by), so the whole chunk text matches byte for byte.

The search collapses them before it picks the top k (:func:`collapse`): each arm's ranking keeps
one chunk per text, the representative, so k hits are k distinct texts. The representative is
the copy that would rank best on its own: its fused score over the arms times its path priors
(a copy under ``tests/`` or ``vendor/`` does not represent one in ``src/``), then the lowest
chunk id. An arm whose pool is mostly copies is read deeper (:func:`widened`) so that it still
holds ``pool`` distinct texts. Where the store ranks distinct texts itself (a LanceDB index's
texts table), an arm names each text by its first copy and the store holds the others: the
representative is then the copy with the best path priors among them (``Store.choose_copies``),
which costs one look-up a file instead of a place and a fused score a copy. The hits then list
their copies (:class:`CopyLister`), within the search's filters. Where no chunk has a copy,
every ranking and hit is what it was without this.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from semsearch.search.hits import Copy, file_path
from semsearch.search.ranking import PathPriorProducts, QueryInfo
from semsearch.store import ChooseCopy, ChunkPlace, ChunkRow, FileRef, Store

T = TypeVar("T")

COPIES_LISTED = 20  # copies a hit lists at most (``Hit.copy_count`` counts them all)
# An arm whose pool holds fewer than WIDEN_BELOW x pool distinct texts is read deeper, up to
# WIDEN_MAX x its pool, for pool distinct texts. A few copies only shorten the arm's tail, where
# a rank adds little to the fusion: reading deeper for them cost a second scan of the vectors
# on most queries of an index of site-packages (+20 ms of 13 in vector mode, 204k chunks).
WIDEN_BELOW = 0.75
WIDEN_MAX = 32
WIDEN_MARGIN = 1.25  # read this much deeper than the copies seen so far suggest
# Copies of one text (the first by id) a representative is chosen among, when the store holds
# them (``Store.choose_copies``): each is a file whose path priors a search computes once. A
# bound for a text in thousands of files (a licence header); a checkout's copy of a vendored
# file is rarely past the thousandth.
COPIES_CHOSEN_AMONG = 1_024


class Places:
    """The file and text key of the chunks a search met, read once each: copies share a key
    (``Store.text_keys``; with ``by_hash``, the text hash of their rows, which spares a search
    that uses no vectors from reading them)."""

    def __init__(self, store: Store, by_hash: bool = False) -> None:
        self._store = store
        self._by_hash = by_hash
        self.known: dict[int, tuple[int, int | str]] = {}  # chunk id → (file id, text key)

    def read(self, ids: Iterable[int]) -> None:
        """Read the keys of those of ``ids`` not known yet."""
        missing = [i for i in dict.fromkeys(ids) if i not in self.known]
        if missing:
            self.known.update(self._store.text_keys(missing, from_vectors=not self._by_hash))

    def text(self, chunk_id: int) -> int | str:
        """The chunk's text key; a chunk not known (gone since its arm ranked it) is a text of
        its own."""
        known = self.known.get(chunk_id)
        return f"#{chunk_id}" if known is None else known[1]

    def file_of(self, chunk_id: int) -> int | None:
        """The chunk's file id, None when it is not known."""
        known = self.known.get(chunk_id)
        return None if known is None else known[0]

    def distinct(self, ids: Sequence[int]) -> int:
        """How many distinct texts the chunks ``ids`` hold."""
        self.read(ids)
        return len({self.text(i) for i in ids})

    def choose(self, keys: Iterable[int | str], choose: ChooseCopy) -> dict[str, int]:
        """Text hash → the id of the copy ``choose`` picks, for those of ``keys`` whose copies
        the store holds already (``Store.choose_copies``; none in SQLite), its place known from
        now."""
        texts = [key for key in keys if isinstance(key, str)]
        chosen = self._store.choose_copies(texts, choose)
        self.known.update((p.id, (p.file_id, p.text_hash)) for p in chosen.values())
        return {text: place.id for text, place in chosen.items()}

    def merge(self, other: Places) -> None:
        """Take the keys ``other`` read (another thread's, of the same kind)."""
        self.known.update(other.known)


def widened(
    fetch: Callable[[int], list[T]],
    first: list[T],
    chunk_id: Callable[[T], int],
    pool: int,
    places: Places,
) -> list[T]:
    """An arm's ranking deep enough to hold about ``pool`` distinct texts: ``first`` is what
    ``fetch(pool)`` gave; while it is full but holds fewer than ``WIDEN_BELOW`` x ``pool``
    (then ``pool``), ``fetch`` is asked for more, up to ``WIDEN_MAX`` x ``pool`` items.
    ``first`` itself when it holds no copies."""
    found, size = first, pool
    limit = pool * WIDEN_MAX
    enough = pool * WIDEN_BELOW
    while len(found) >= size and size < limit:
        distinct = places.distinct([chunk_id(item) for item in found])
        if distinct >= enough:
            break
        enough = pool
        guess = math.ceil(size * pool / max(distinct, 1) * WIDEN_MARGIN)
        size = min(limit, max(2 * size, guess))
        found = fetch(size)
    places.read(chunk_id(item) for item in found)
    return found


@dataclass(frozen=True)
class Collapsed:
    """Each chunk the arms ranked → the representative of its text (itself when it has no
    copy among them)."""

    representative: dict[int, int]

    def ranked(self, ranking: Sequence[int], limit: int | None = None) -> list[int]:
        """``ranking`` with each chunk replaced by its text's representative, first place kept,
        at most ``limit`` long."""
        seen: dict[int, None] = {}
        for cid in ranking:
            seen.setdefault(self.representative.get(cid, cid))
            if limit is not None and len(seen) >= limit:
                break
        return list(seen)

    def scored(self, ranking: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
        """(chunk id, score) pairs, best first, collapsed as :meth:`ranked` does."""
        best: dict[int, float] = {}
        for cid, score in ranking:
            best.setdefault(self.representative.get(cid, cid), score)
        return list(best.items())


def collapse(
    arms: dict[str, list[int]],
    places: Places,
    refs: dict[int, FileRef],
    info: QueryInfo,
    rrf_k: int,
    every_file: bool = True,
) -> Collapsed:
    """The representative of each text the arms ranked (their places read already): among its
    copies, the best fused score over ``arms`` times the path priors, then the lowest id. In a
    search over ``every_file``, a text whose copies the store holds (an arm named one chunk of
    it) adds the copy with the best path priors among its first ``COPIES_CHOSEN_AMONG``,
    scoring as the best the arms named (within files, the arms name every copy there)."""
    own: dict[int, float] = {}
    for ranking in arms.values():
        for rank, cid in enumerate(ranking, start=1):
            own[cid] = own.get(cid, 0.0) + 1 / (rrf_k + rank)
    copies: dict[int | str, list[int]] = {}
    for cid in own:
        copies.setdefault(places.text(cid), []).append(cid)
    priors = _FilePriors(refs, info)
    for text, held in places.choose(copies if every_file else (), priors.best_copy).items():
        members = copies[text]
        if held not in own:
            own[held] = max(own[cid] for cid in members)
            members.append(held)
    representative: dict[int, int] = {}
    for members in copies.values():
        best = members[0]
        if len(members) > 1:
            best = max(members, key=lambda c: (own[c] * priors.of(places.file_of(c)), -c))
        representative.update((cid, best) for cid in members)
    return Collapsed(representative)


class _FilePriors:
    """The product of the path priors of each file a search's copies are in."""

    def __init__(self, refs: dict[int, FileRef], info: QueryInfo) -> None:
        self._refs = refs
        self._products = PathPriorProducts(info)

    def of(self, file_id: int | None) -> float:
        """The file's priors (1 when it is not known)."""
        ref = None if file_id is None else self._refs.get(file_id)
        return 1.0 if ref is None else self._products(ref.rel)

    def best_copy(self, ids: Sequence[int], file_ids: Sequence[int]) -> int:
        """Where, among the first ``COPIES_CHOSEN_AMONG`` copies of a text (by id), the first
        one whose file has the best priors is."""
        # :meth:`of` inlined: ~3,600 copies a search on ten checkouts, where a call and a key
        # tuple each cost 0.7-1.0 ms of the 3.5-4 ms (bench/RESULTS.md, session 32's review)
        refs, products = self._refs, self._products
        best, best_prior = 0, -1.0
        for at, file_id in enumerate(file_ids[:COPIES_CHOSEN_AMONG]):
            ref = refs.get(file_id)
            prior = 1.0 if ref is None else products(ref.rel)
            if prior > best_prior:
                best, best_prior = at, prior
        return best


class CopyLister:
    """The copies of the chosen hits: every other stored chunk of their text, in the files the
    search was allowed to see (``allowed``: their ids, None for every file)."""

    def __init__(self, store: Store, refs: dict[int, FileRef], allowed: list[int] | None) -> None:
        self._store = store
        self._refs = refs
        self._allowed = None if allowed is None else frozenset(allowed)

    def __call__(self, rows: Sequence[ChunkRow]) -> dict[int, tuple[tuple[Copy, ...], int]]:
        """Chunk id → (its copies, by path, at most ``COPIES_LISTED``; how many there are), for
        the rows that have copies."""
        places = self._store.chunk_places([row.id for row in rows])
        texts = {place.id: place.text_hash for place in places}
        found: dict[str, list[ChunkPlace]] = {}
        for place in self._store.text_places(sorted(set(texts.values()))):
            if place.file_id in self._refs and (
                self._allowed is None or place.file_id in self._allowed
            ):
                found.setdefault(place.text_hash, []).append(place)
        listed: dict[int, tuple[tuple[Copy, ...], int]] = {}
        for cid, text in texts.items():
            others = [self._copy(p) for p in found.get(text, []) if p.id != cid]
            if others:
                others.sort(key=lambda c: (c.folder_path, c.rel, c.start_line))
                listed[cid] = (tuple(others[:COPIES_LISTED]), len(others))
        return listed

    def _copy(self, place: ChunkPlace) -> Copy:
        ref = self._refs[place.file_id]
        return Copy(
            path=file_path(ref.folder_path, ref.rel),
            folder=ref.folder_name,
            folder_path=ref.folder_path,
            rel=ref.rel,
            start_line=place.start_line,
            end_line=place.end_line,
            page=place.page,
        )
