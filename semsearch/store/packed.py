"""The vector arm of a large index: int8 vectors in blocks, scanned in place, exact by a bound.

A float32 matrix of 1.4M chunks is 2.1 GB. A store that packs its vectors keeps them as
:class:`VectorBlock` s: ``rows`` chunks each, every vector as int8 with one scale per chunk (384
bytes a chunk for 384 dimensions), in the layout onnxruntime's ``MatMulInteger`` reads. The
blocks are read as stored, once, and scanned where they lie: the matrix is an input of the
kernel's session, not a constant it packs (which took 23 s and a second copy at 1.4M chunks).

The scan is exact as :mod:`semsearch.store.scan` explains: each chunk's approximate cosine ``a``
is within ``b`` of the true one, so only chunks whose ``a + b`` reaches the ``pool``-th largest
``a - b`` can be among the ``pool`` nearest; their stored vectors (float16 rows) are read back and
scored exactly, which is the score an unpacked index gives. Chunks not yet packed (the newest, or
all of a small index) are answered by :class:`~semsearch.store.exact.ExactVectors` over their
float rows (the tail), and chunks deleted since their block was written are left out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from semsearch.errors import ModelError
from semsearch.model.onnx_graph import matmul_integer_input_model, single_thread_session
from semsearch.store.base import FloatArray, IdArray
from semsearch.store.exact import ExactVectors
from semsearch.store.scan import QUERY_LEVEL, ROW_LEVEL, SLACK, quantised_query

Int8Array = np.ndarray[Any, np.dtype[np.int8]]


@dataclass(frozen=True)
class VectorBlock:
    """Stored chunks' vectors as int8: chunk i is ``codes[:, i] x scales[i]`` (dim x n codes,
    the kernel's layout), ``errors[i]`` the norm of what that misses of the stored vector (inf
    for a vector that is not finite), ``norms[i]`` the norm of the int8 form."""

    number: int
    ids: IdArray  # ascending
    file_ids: IdArray
    scales: FloatArray
    errors: FloatArray
    norms: FloatArray
    codes: Int8Array


def pack_block(number: int, ids: IdArray, file_ids: IdArray, matrix: FloatArray) -> VectorBlock:
    """The block of chunks ``ids`` (of files ``file_ids``) with these float32 vectors."""
    finite = np.asarray(np.isfinite(matrix).all(axis=1))
    rows = np.where(finite[:, None], matrix, np.float32(0)).astype(np.float32)
    peak = np.abs(rows).max(axis=1, initial=0)
    scales = (np.where(peak > 0, peak, 1) / ROW_LEVEL).astype(np.float32)
    rounded = np.rint(rows / scales[:, None])
    restored = rounded * scales[:, None]
    errors = np.sqrt(np.einsum("ij,ij->i", rows - restored, rows - restored)).astype(np.float32)
    errors[~finite] = np.inf
    norms = np.sqrt(np.einsum("ij,ij->i", restored, restored)).astype(np.float32)
    codes = np.ascontiguousarray(rounded.T.astype(np.int8))
    return VectorBlock(number, ids, file_ids, scales, errors, norms, codes)


class PackedSource(Protocol):
    """Where :class:`PackedVectors` reads: the tail as an ``ExactVectors`` source does, and the
    blocks, the chunks deleted from them and stored vectors by id."""

    def snapshot(self) -> contextlib.AbstractContextManager[None]:
        """One read transaction: what is read inside it is of one committed state."""

    def generation(self) -> int:
        """A number that changes with every committed write."""

    def vector_ids(self) -> IdArray:
        """The ids of the chunks that have a vector and are in no block, ascending."""

    def vectors(self, min_id: int) -> tuple[IdArray, IdArray, FloatArray]:
        """(chunk ids, file ids, float32 matrix) of such chunks with id > min_id."""

    def pack_epoch(self) -> int:
        """A number that changes when the blocks are written anew (not when one is added)."""

    def blocks(self, after: int) -> Iterator[VectorBlock]:
        """The blocks numbered above ``after``, in order."""

    def gone(self) -> IdArray:
        """Ids of chunks in blocks that have been deleted since."""

    def vectors_of(self, ids: IdArray) -> tuple[IdArray, FloatArray]:
        """(ids, float32 matrix) of the stored vectors of those of ``ids`` that have one."""


class PackedVectors:
    """A store's blocks in memory and its unpacked chunks' vectors, refreshed by generation."""

    def __init__(self, source: PackedSource) -> None:
        self._source = source
        self.tail = ExactVectors(source)
        self.generation = -1
        self._epoch = -1
        self._blocks: list[VectorBlock] = []
        self._session: Any = None  # built by the first scan
        self._join()

    @property
    def is_loaded(self) -> bool:
        """True once the vectors were read (later changes are read by ``nearest``)."""
        return self.generation != -1

    @property
    def packed(self) -> int:
        """Chunks held in blocks (deleted ones included)."""
        return len(self.ids)

    def _join(self) -> None:
        """The blocks' per-chunk arrays end to end, and which chunks are still stored."""
        parts = self._blocks
        self.ids = _joined([b.ids for b in parts], np.int64)
        self.file_ids = _joined([b.file_ids for b in parts], np.int64)
        self.scales = _joined([b.scales for b in parts], np.float32)
        self.errors = _joined([b.errors for b in parts], np.float32)
        self.norms = _joined([b.norms for b in parts], np.float32)
        self.alive = np.ones(len(self.ids), dtype=bool)

    def refresh(self) -> None:
        """Read the blocks added since, the deleted chunks and the tail's changes, from one
        committed state; nothing when the generation is unchanged."""
        with self._source.snapshot():
            generation = self._source.generation()
            if generation == self.generation:
                return
            epoch = self._source.pack_epoch()
            if epoch != self._epoch:
                self._blocks = []
            last = self._blocks[-1].number if self._blocks else 0
            added = list(self._source.blocks(last))
            if added or epoch != self._epoch:
                self._blocks.extend(added)
                self._join()
            gone = self._source.gone()
            self.alive = ~np.isin(self.ids, gone) if len(gone) else np.ones(len(self.ids), bool)
            self.tail.refresh()
            self.generation, self._epoch = generation, epoch

    def clear(self) -> None:
        """Forget everything read; the next refresh reads all."""
        self.generation = self._epoch = -1
        self._blocks = []
        self._join()
        self.tail.clear()

    def files_of(self, ids: Sequence[int]) -> dict[int, int]:
        """Chunk id → file id for those of ``ids`` held here."""
        found = self.tail.files_of(ids)
        if len(self.ids):
            wanted = np.asarray(ids, dtype=np.int64)
            at = np.minimum(np.searchsorted(self.ids, wanted), len(self.ids) - 1)
            held = (self.ids[at] == wanted) & self.alive[at]
            found.update(zip(wanted[held].tolist(), self.file_ids[at[held]].tolist(), strict=True))
        return found

    def nearest(
        self, query: np.ndarray[Any, Any], pool: int, file_ids: Sequence[int] | None
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine) of the ``pool`` nearest vectors among chunks of ``file_ids``."""
        self.refresh()
        tail = self.tail.nearest(query, pool, file_ids)
        if not len(self.ids):
            return tail
        vector = np.asarray(query, dtype=np.float32)
        approx, bound = self._bounds(vector)
        approx[~self.alive] = -np.inf
        if file_ids is not None:
            allowed = np.fromiter(file_ids, dtype=np.int64, count=len(file_ids))
            approx[~np.isin(self.file_ids, allowed)] = -np.inf
        lower = np.concatenate([approx - bound, np.array([s for _, s in tail], np.float32)])
        lower = lower[np.isfinite(lower)]
        if len(lower) > pool:
            floor = np.partition(lower, len(lower) - pool)[len(lower) - pool]
            chosen = np.flatnonzero(np.isfinite(approx) & (approx + bound >= floor))
        else:
            chosen = np.flatnonzero(np.isfinite(approx))
        ids, matrix = self._source.vectors_of(self.ids[chosen])
        scores = matrix @ vector if len(ids) else np.zeros(0, np.float32)
        merged = dict(tail)
        merged.update(zip(ids.tolist(), scores.tolist(), strict=True))
        ranked = sorted(
            ((i, s) for i, s in merged.items() if np.isfinite(s)), key=lambda h: (-h[1], h[0])
        )
        return ranked[:pool]

    def _bounds(self, query: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(approximate cosines, their error bounds) of every packed chunk."""
        feed, high_scale, low_scale, left = quantised_query(query)
        approx = np.empty(len(self.ids), dtype=np.float32)
        start = 0
        for block in self._blocks:
            sums = self._sums(feed, block.codes).astype(np.float32)
            end = start + len(block.ids)
            approx[start:end] = sums[0] * np.float32(high_scale) + sums[1] * np.float32(low_scale)
            start = end
        approx *= self.scales
        bound = self.errors * np.float32(np.linalg.norm(query))
        bound += self.norms * np.float32(left) + np.float32(SLACK)
        return approx, bound

    def _sums(self, feed: Any, codes: Int8Array) -> Any:
        """The kernel's integer products of the query rows and a block's codes."""
        if self._session is None:
            try:
                model = matmul_integer_input_model(codes.shape[0], QUERY_LEVEL + 1)
                self._session = single_thread_session(model)
            except ModelError:  # numpy answers alike, about three times slower
                self._session = False
        if self._session is False:
            rows = feed.astype(np.int32) - (QUERY_LEVEL + 1)
            return np.einsum("kd,dn->kn", rows, codes, dtype=np.int32)
        return self._session.run(None, {"q": feed, "m": codes})[0]


def _joined(parts: list[Any], dtype: Any) -> Any:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
