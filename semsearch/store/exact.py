"""Exact vector search: a store's vectors in memory as one float32 matrix, cosine top-k by numpy.

Only chunks that have a vector are in the matrix (a chunk is written first and gets its vector
later, see ``Store.set_vectors``). The matrix is read once and then refreshed with only what
changed: chunk ids are never reused, so the rows of chunks that are gone are dropped, and the
chunks that got a vector since (new ones, or older ones that were pending) are read from the
lowest such id on.

From a generation's second search on, an index of ``SCAN_MIN_ROWS`` vectors or more is scanned
through an int8 copy (:class:`~semsearch.store.scan.VectorScan`) that finds the same nearest
chunks with a quarter of the memory traffic; the float32 matrix scores its candidates. When the
copy cannot be made (no memory, an onnxruntime failure) the matrix is scanned as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from semsearch.errors import StoreError
from semsearch.store.base import FloatArray, IdArray
from semsearch.store.scan import VectorScan

# The int8 scan (semsearch.store.scan) over this many vectors or more, built on the second search
# of a generation: a one-shot search would pay for the build (~3 ms per 1,000 vectors) and gain
# less than that. Below, the float32 matrix stays in the CPU cache between searches.
SCAN_MIN_ROWS = 4096


class VectorSource(Protocol):
    """Where :class:`ExactVectors` reads: a store's write counter, chunk ids and vectors."""

    def generation(self) -> int:
        """A number that changes with every committed write."""

    def vector_ids(self) -> IdArray:
        """The ids of all chunks that have a vector, ascending."""

    def vectors(self, min_id: int) -> tuple[IdArray, IdArray, FloatArray]:
        """(chunk ids, file ids, float32 matrix) of chunks with id > min_id that have a vector,
        in id order."""


class ExactVectors:
    """The vectors of a store in memory, refreshed when its generation changes."""

    def __init__(
        self,
        source: VectorSource,
        make_scan: Callable[[IdArray, FloatArray], VectorScan] = VectorScan,
    ) -> None:
        self._source = source
        self._make_scan = make_scan
        self.generation = -1  # of the source, when last read
        self.ids: IdArray = np.zeros(0, dtype=np.int64)  # ascending
        self.file_ids: IdArray = np.zeros(0, dtype=np.int64)
        self.matrix: FloatArray = np.zeros((0, 0), dtype=np.float32)
        self._scan: VectorScan | None = None  # built on a generation's second search
        self._searches = 0  # searches of this generation
        self._scan_failed = False  # its build failed in this generation: not tried again

    @property
    def is_loaded(self) -> bool:
        """True once the vectors were read (later changes are read by ``nearest``)."""
        return self.generation != -1

    def refresh(self) -> None:
        """Reload only what changed since the last refresh; nothing when nothing did."""
        generation = self._source.generation()
        if generation == self.generation:
            return
        stored = self._source.vector_ids() if len(self.ids) else None
        kept = None if stored is None else np.isin(self.ids, stored, assume_unique=True)
        if stored is not None and kept is not None and kept.any():
            self._add(kept, np.setdiff1d(stored, self.ids[kept], assume_unique=True))
        else:  # first load, or nothing left to keep: one read of everything
            self.ids, self.file_ids, self.matrix = self._source.vectors(0)
        self.generation = generation
        self._searches, self._scan_failed = 0, False

    def _add(self, kept: np.ndarray[Any, np.dtype[np.bool_]], new: IdArray) -> None:
        """Keep the rows still stored and read the ``new`` ids (ascending) in."""
        ids, file_ids, matrix = self.ids[kept], self.file_ids[kept], self.matrix[kept]
        if len(new):
            read_ids, read_files, read = self._source.vectors(int(new[0]) - 1)
            wanted = np.isin(read_ids, new, assume_unique=True)
            ids = np.concatenate([ids, read_ids[wanted]])
            file_ids = np.concatenate([file_ids, read_files[wanted]])
            matrix = np.concatenate([matrix, read[wanted]])
        order = np.argsort(ids, kind="stable")
        self.ids, self.file_ids = ids[order], file_ids[order]
        self.matrix = np.ascontiguousarray(matrix[order])

    def files_of(self, ids: Sequence[int]) -> dict[int, int]:
        """Chunk id → file id for those of ``ids`` held here."""
        wanted = np.asarray(ids, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.ids, wanted), max(len(self.ids) - 1, 0))
        found = self.ids[at] == wanted if len(self.ids) else np.zeros(len(wanted), dtype=bool)
        return dict(zip(wanted[found].tolist(), self.file_ids[at[found]].tolist(), strict=True))

    def clear(self) -> None:
        """Forget the matrix (its owner answers another way now); the next refresh reads all."""
        self.generation = -1
        self.ids = self.file_ids = np.zeros(0, dtype=np.int64)
        self.matrix = np.zeros((0, 0), dtype=np.float32)
        self._scan, self._searches = None, 0

    def nearest(
        self, query: np.ndarray[Any, Any], pool: int, file_ids: Sequence[int] | None
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine) of the ``pool`` nearest vectors among chunks of ``file_ids``."""
        self.refresh()
        if not len(self.ids):
            return []
        vector = query.astype(np.float32)
        rows = None
        if file_ids is not None:
            allowed = np.fromiter(file_ids, dtype=np.int64, count=len(file_ids))
            rows = np.flatnonzero(np.isin(self.file_ids, allowed))
            if not len(rows):
                return []
        few = rows is not None and len(rows) * 4 < len(self.ids)
        scan = None if few else self._warm_scan()
        if scan is not None:  # the rows that can be among the nearest, scored exactly
            rows = scan.candidates(self.ids, self.matrix, vector, pool, rows)
            ids, scores = self.ids[rows], self.matrix[rows] @ vector
        elif rows is None:
            ids, scores = self.ids, self.matrix @ vector
        elif few:  # a few files: the product of their rows only
            ids, scores = self.ids[rows], self.matrix[rows] @ vector
        else:  # most: one product, without copying the rows
            ids, scores = self.ids[rows], (self.matrix @ vector)[rows]
        best = best_first(scores, pool)
        return list(zip(ids[best].tolist(), scores[best].tolist(), strict=True))

    def _warm_scan(self) -> VectorScan | None:
        """The int8 scan, built (again) on a generation's second search when there is none or
        it is stale; None for a matrix of fewer than ``SCAN_MIN_ROWS`` vectors."""
        self._searches += 1
        if len(self.ids) < SCAN_MIN_ROWS:
            self._scan = None
            return None
        if self._scan is not None and self._scan.is_stale(self.ids):
            self._scan = None
        if self._scan is None and self._searches > 1 and not self._scan_failed:
            try:
                self._scan = self._make_scan(self.ids, self.matrix)
            except (StoreError, MemoryError):  # an aid only: the float32 product answers alike
                self._scan_failed = True
        return self._scan


def best_first(scores: FloatArray, pool: int) -> np.ndarray[Any, np.dtype[np.intp]]:
    """The positions of the ``pool`` highest of ``scores``, highest first (ties in order), the
    ones that are not a number left out."""
    pool = min(pool, len(scores))
    if pool <= 0:
        return np.zeros(0, dtype=np.intp)
    best = np.argpartition(-scores, pool - 1)[:pool]
    best = best[np.argsort(-scores[best], kind="stable")]
    return best[np.isfinite(scores[best])]
