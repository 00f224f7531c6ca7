"""The warm search's vector scan: an int8 copy of the matrix, exact by a bound.

A cosine scan of the float32 matrix reads 1.5 KB a chunk, and between two searches the model
run evicts the matrix from the CPU cache: at 10k chunks the product cost 1.5 ms inside a search
against 0.3 ms from cache. :class:`Int8Scan` holds each vector as int8 (one scale per row, 384
bytes a chunk) in an onnxruntime ``MatMulInteger`` session, which packs it once for its kernels
(VNNI where the CPU has it) and scans it in 0.1-0.25 ms. The query goes in as two rows of 7-bit
integers, the second the rounding left by the first, so its own rounding is ~1e-4 of its size.

The result stays exact: each row's approximate cosine ``a`` is within ``b`` of the true one,
where ``b`` = (the row's rounding error norm) x |q| + |x̂| x (the query's rounding error norm),
by Cauchy-Schwarz. If L is the ``pool``-th largest ``a - b``, at least ``pool`` rows have a true
cosine >= L, so no row with ``a + b < L`` is among the ``pool`` nearest; the others (~1.5x the
pool on real indexes) are scored again from the float32 matrix. Rows whose vector is not finite
are never candidates, as a NaN cosine is not in the float32 scan.

Why 7 bits for the query: without VNNI, the kernels add pairs of u8 x s8 products in 16 bits
(VPMADDUBSW), and 2 x 127 x 127 still fits where 2 x 255 x 127 would saturate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from semsearch.errors import ModelError, StoreError
from semsearch.model.onnx_graph import matmul_integer_model, single_thread_session
from semsearch.store.base import FloatArray, IdArray

QUERY_LEVEL = 63  # the query's integers lie in [-63, 63], stored as u8 with zero point 64
ROW_LEVEL = 127  # the rows' int8 values lie in [-127, 127]
SLACK = 1e-5  # float32 rounding of the scores, beside the quantisation bound

IntArray = np.ndarray[Any, np.dtype[np.intp]]
Int8Array = np.ndarray[Any, np.dtype[np.int8]]
BoolArray = np.ndarray[Any, np.dtype[np.bool_]]
BLOCK = 4096  # rows quantised at a time


class Int8Scan:
    """An int8 copy of a float32 matrix that finds the rows nearest a query exactly."""

    def __init__(self, matrix: FloatArray) -> None:
        self.rows, self.dim = matrix.shape
        self.scale = np.ones(self.rows, dtype=np.float32)
        self.error = np.zeros(self.rows, dtype=np.float32)
        self.norm = np.zeros(self.rows, dtype=np.float32)
        self.excluded: BoolArray = np.logical_not(np.isfinite(matrix).all(axis=1))
        columns = np.empty((self.dim, self.rows), dtype=np.int8)  # the kernel's layout
        for start in range(0, self.rows, BLOCK):  # a block at a time: no full float copies
            self._quantise(matrix, slice(start, start + BLOCK), columns)
        model = matmul_integer_model(columns, QUERY_LEVEL + 1)
        del columns  # the model bytes hold the only copy now; onnxruntime packs its own
        try:
            self._session = single_thread_session(model)
        except ModelError as exc:
            raise StoreError(f"onnxruntime could not build the int8 vector scan: {exc}") from exc

    def _quantise(self, matrix: FloatArray, rows: slice, columns: Int8Array) -> None:
        block = matrix[rows]
        if self.excluded[rows].any():
            block = np.where(self.excluded[rows, None], np.float32(0), block)
        peak = np.abs(block).max(axis=1, initial=0)
        scale = np.where(peak > 0, peak, 1).astype(np.float32) / ROW_LEVEL
        rounded = np.rint(block / scale[:, None])
        columns[:, rows] = rounded.T
        restored = rounded * scale[:, None]
        self.scale[rows] = scale
        self.error[rows] = np.sqrt(np.einsum("ij,ij->i", block - restored, block - restored))
        self.norm[rows] = np.sqrt(np.einsum("ij,ij->i", restored, restored))

    def bounds(self, query: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(approximate cosines, their error bounds), one per row; excluded rows get -inf."""
        feed, high_scale, low_scale, left = quantised_query(query)
        sums = self._session.run(None, {"q": feed})[0].astype(np.float32)
        approx = (sums[0] * np.float32(high_scale) + sums[1] * np.float32(low_scale)) * self.scale
        bound = self.error * np.float32(np.linalg.norm(query)) + self.norm * np.float32(left)
        approx[self.excluded] = -np.inf
        return approx, bound + np.float32(SLACK)


def quantised_query(query: FloatArray) -> tuple[Any, float, float, float]:
    """The query as the kernel takes it: (2 x dim u8 rows, the first row's scale, the second's,
    the norm of what both leave). Row 1 is the query in 7-bit steps, row 2 what row 1 left."""
    peak = float(np.abs(query).max())
    high_scale = (peak or 1.0) / QUERY_LEVEL
    high = np.rint(query / high_scale)
    rest = query - high * high_scale
    low_scale = (float(np.abs(rest).max()) or 1.0) / QUERY_LEVEL
    low = np.rint(rest / low_scale)
    left = float(np.linalg.norm(rest - low * low_scale))
    feed = (np.stack([high, low]) + (QUERY_LEVEL + 1)).astype(np.uint8)
    return feed, high_scale, low_scale, left


class VectorScan:
    """An :class:`Int8Scan` of the vectors some chunks had, answering for the chunks there are
    now: chunks added since are scored from the float32 matrix, chunks gone are left out (a
    chunk's vector never changes: a changed chunk gets a new id). An edit between searches then
    costs the product of its few new vectors, not a new scan; :meth:`is_stale` says when the
    added or the gone are so many that a new scan is worth its build."""

    def __init__(self, ids: IdArray, matrix: FloatArray) -> None:
        self.ids = ids  # ascending, as ExactVectors keeps them (arrays it replaces, never edits)
        self.scan = Int8Scan(matrix)
        self._mapped: tuple[IdArray, IntArray, IntArray, IntArray] | None = None

    def _rows(self, ids: IdArray) -> tuple[IntArray, IntArray, IntArray]:
        """(rows of ``ids`` the scan holds, their rows in the scan, rows it does not hold)."""
        if self._mapped is None or self._mapped[0] is not ids:
            at = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
            held = self.ids[at] == ids
            self._mapped = (ids, np.flatnonzero(held), at[held], np.flatnonzero(~held))
        return self._mapped[1], self._mapped[2], self._mapped[3]

    def is_stale(self, ids: IdArray) -> bool:
        """True when an eighth of ``ids`` is not in the scan, or a quarter of the scan is gone."""
        held, _, added = self._rows(ids)
        return len(added) * 8 > len(ids) or (len(self.ids) - len(held)) * 4 > len(self.ids)

    def candidates(
        self,
        ids: IdArray,
        matrix: FloatArray,
        query: FloatArray,
        pool: int,
        allowed: IntArray | None,
    ) -> IntArray:
        """Rows of ``matrix`` (the vectors of ``ids``), ascending, that include every one of the
        ``pool`` rows nearest the query (among ``allowed`` rows when given); all of them when
        there are no more than ``pool``."""
        held, scanned, added = self._rows(ids)
        approx, bound = self.scan.bounds(query)
        if len(held) < len(self.ids) or len(added):  # the rows are not the scan's rows
            found, error = approx, bound
            approx = np.full(len(ids), -np.inf, dtype=np.float32)
            bound = np.full(len(ids), SLACK, dtype=np.float32)
            approx[held], bound[held] = found[scanned], error[scanned]
        if len(added):
            exact = matrix[added] @ query
            approx[added] = np.where(np.isfinite(exact), exact, -np.inf)
        if allowed is not None:
            keep = np.full(len(ids), -np.inf, dtype=np.float32)
            keep[allowed] = 0
            approx += keep
        return _within_reach(approx, bound, pool)


def _within_reach(approx: FloatArray, bound: FloatArray, pool: int) -> IntArray:
    """The rows whose highest possible cosine reaches the ``pool``-th largest lowest possible
    one; all the finite rows when there are no more than ``pool``."""
    lower = approx - bound
    finite = np.isfinite(lower)
    if int(finite.sum()) <= pool:
        return np.flatnonzero(finite)
    floor = np.partition(lower, len(lower) - pool)[len(lower) - pool]
    return np.flatnonzero(approx + bound >= floor)
