"""The vector arm of a large index: int8 vectors in blocks, scanned in place, exact by a bound.

A float32 matrix of 1.4M chunks is 2.1 GB. A store that packs its vectors keeps them as
:class:`VectorBlock` s: ``rows`` chunks each, every vector as int8 with one scale per chunk (384
bytes a chunk for 384 dimensions), in the layout onnxruntime's ``MatMulInteger`` reads. The
blocks are read as stored, once. A new process scans them where they lie, each block's matrix an
input of one session (nothing to build, but the kernel re-arranges the matrix on every call);
from its second search on, each block gets a session of its own that arranged (packed) its
matrix once, about three times faster a scan, and the block's bytes are let go: one copy either
way. One session for all blocks took 23 s to build and kept two copies at 1.4M chunks.

Copies of one text have one vector, so one int8 column: a block that knows each chunk's *first*
(the lowest chunk id of its text when the block was written, ``VectorBlock.firsts``) stores and
keeps the codes of first chunks only (schema 10; earlier blocks stored every chunk's, which the
reader drops), and a copy reads the sums of its first's column. On a tree of ten checkouts the
scan, the codes held and the codes read are a tenth. The first's column stays right after the
first chunk is deleted (a block never changes; the copy that takes its place has the same
vector). A copy's first has a lower id, and every chunk below a block was packed before it, so a
copy always finds its first in an earlier block or its own.

The scan is exact as :mod:`semsearch.store.scan` explains: each chunk's approximate cosine ``a``
is within ``b`` of the true one, so only chunks whose ``a + b`` reaches the ``pool``-th largest
``a - b`` can be among the ``pool`` nearest; their stored vectors (float16 rows) are read back and
scored exactly, which is the score an unpacked index gives. Chunks not yet packed (the newest, or
all of a small index) are answered by :class:`~semsearch.store.exact.ExactVectors` over their
float rows (the tail), and chunks deleted since their block was written are left out.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from semsearch.errors import ModelError
from semsearch.model.onnx_graph import (
    matmul_integer_external_model,
    matmul_integer_input_model,
    single_thread_session,
)
from semsearch.process import release_freed_memory
from semsearch.store.base import BlockMismatchError, FloatArray, IdArray
from semsearch.store.exact import ExactVectors
from semsearch.store.scan import QUERY_LEVEL, ROW_LEVEL, SLACK, quantised_query

Int8Array = np.ndarray[Any, np.dtype[np.int8]]


@dataclass(frozen=True)
class VectorBlock:
    """Stored chunks' vectors as int8: chunk i is its column of ``codes`` x ``scales[i]`` (dim x
    columns, the kernel's layout), ``errors[i]`` the norm of what that misses of the stored
    vector (inf for a vector that is not finite), ``norms[i]`` the norm of the int8 form. The
    columns are those of the chunks that are their text's first (``firsts[i] == ids[i]``), in
    order; or every chunk's (``firsts`` unknown, or a block written before schema 10)."""

    number: int
    ids: IdArray  # ascending
    file_ids: IdArray
    scales: FloatArray
    errors: FloatArray
    norms: FloatArray
    codes: Int8Array
    firsts: IdArray | None = None  # per chunk, its text's lowest chunk id (None: unknown)


def pack_block(
    number: int,
    ids: IdArray,
    file_ids: IdArray,
    matrix: FloatArray,
    firsts: IdArray | None = None,
) -> VectorBlock:
    """The block of chunks ``ids`` (of files ``file_ids``) with these float32 vectors; a copy's
    vector must be its first's (``firsts``), as the stores write them, and only the first
    chunks' codes are kept."""
    finite = np.asarray(np.isfinite(matrix).all(axis=1))
    rows = np.where(finite[:, None], matrix, np.float32(0)).astype(np.float32)
    peak = np.abs(rows).max(axis=1, initial=0)
    scales = (np.where(peak > 0, peak, 1) / ROW_LEVEL).astype(np.float32)
    rounded = np.rint(rows / scales[:, None])
    restored = rounded * scales[:, None]
    errors = np.sqrt(np.einsum("ij,ij->i", rows - restored, rows - restored)).astype(np.float32)
    errors[~finite] = np.inf
    norms = np.sqrt(np.einsum("ij,ij->i", restored, restored)).astype(np.float32)
    if firsts is not None:
        rounded = rounded[firsts == ids]
    codes = np.ascontiguousarray(rounded.T.astype(np.int8))
    return VectorBlock(number, ids, file_ids, scales, errors, norms, codes, firsts)


class _Owners:
    """The chunks of the blocks read so far (ascending, blocks hold consecutive ranges), with
    the owner of the column each reads: where a later block's copy finds its first. Held in
    arrays that double as they fill, so that each block is looked up in one search, not one per
    earlier block its copies' firsts lie in."""

    def __init__(self) -> None:
        self._ids = np.zeros(0, dtype=np.int64)
        self._owners = np.zeros(0, dtype=np.int64)
        self._size = 0

    def add(self, ids: IdArray, owners: IdArray) -> None:
        end = self._size + len(ids)
        if end > len(self._ids):
            capacity = max(end, 2 * len(self._ids))
            self._ids = np.resize(self._ids, capacity)
            self._owners = np.resize(self._owners, capacity)
        self._ids[self._size : end] = ids
        self._owners[self._size : end] = owners
        self._size = end

    def find(self, wanted: IdArray) -> tuple[np.ndarray[Any, Any], IdArray]:
        """(which of ``wanted`` are chunks held here, the owner each found one reads)."""
        ids = self._ids[: self._size]
        if not len(ids) or not len(wanted):
            return np.zeros(len(wanted), dtype=bool), wanted.copy()
        at = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
        found = ids[at] == wanted
        return found, np.where(found, self._owners[at], wanted)


def _kernel_codes(block: VectorBlock, own: np.ndarray[Any, Any]) -> Int8Array:
    """The codes of the chunks of a block that own a column (``own``, as :func:`_own_columns`
    finds them)."""
    if block.codes.shape[1] == len(block.ids):  # every chunk's codes
        return block.codes if own.all() else block.codes[:, own]
    if block.firsts is None or not np.array_equal(own, block.firsts == block.ids):
        raise BlockMismatchError(f"vector block {block.number}: a copy's first is in no block")
    return block.codes


def _own_columns(block: VectorBlock, earlier: _Owners) -> tuple[np.ndarray[Any, Any], IdArray]:
    """Which of a block's chunks get a column of their own, and whose column each chunk reads
    (a chunk id: the column's owner). A copy reads the column its first reads when its first
    is one of the ``earlier`` blocks' chunks or owns a column in this block; else (the first
    was deleted before this block was written, or the block knows no firsts) it owns one."""
    ids = block.ids
    own = np.ones(len(ids), dtype=bool) if block.firsts is None else block.firsts == ids
    if own.all():
        return own, ids
    copies = ~own
    wanted = np.asarray(block.firsts, dtype=np.int64)[copies]
    found, owners = earlier.find(wanted)
    here = ids[own]
    if len(here):
        at = np.minimum(np.searchsorted(here, wanted), len(here) - 1)
        found |= here[at] == wanted
    of = ids.copy()
    of[copies] = np.where(found, owners, ids[copies])
    own[copies] = ~found
    return own, of


@dataclass(frozen=True)
class Texts:
    """One refresh's packed chunks (ascending ids): whether each is alive, its file and the
    column its vector is read from. Copies of a text read one column: its index is their
    text id (until the blocks are written anew)."""

    ids: IdArray
    alive: np.ndarray[Any, Any]
    file_ids: IdArray
    column: IdArray

    def keys(self, ids: Sequence[int]) -> dict[int, tuple[int, int]]:
        """Chunk id → (file id, text id) of those of ``ids`` held here and not deleted."""
        if not len(self.ids) or not len(ids):
            return {}
        wanted = np.asarray(ids, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.ids, wanted), len(self.ids) - 1)
        held = (self.ids[at] == wanted) & self.alive[at]
        at = at[held]
        pairs = zip(self.file_ids[at].tolist(), self.column[at].tolist(), strict=True)
        return dict(zip(wanted[held].tolist(), pairs, strict=True))


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
    """A store's blocks in memory and its unpacked chunks' vectors, refreshed by generation.

    Each block is scanned by a kernel: first its codes, passed to one session as an input
    (nothing to build: the cold path); from the second search on, a thread gives each block a
    session of its own that packed the codes once (:func:`prepacked_kernel`), and the codes are
    let go. ``background=False`` builds those sessions in the search that asks for them.
    """

    def __init__(self, source: PackedSource, background: bool = True) -> None:
        self._source = source
        self._background = background
        self.tail = ExactVectors(source)
        self.generation = -1
        self._epoch = -1
        self._last = 0  # the number of the last block read
        self._kernels: list[Any] = []  # per block: its codes, or a session that packed them
        self._sizes: list[int] = []  # columns a block's kernel holds (its first chunks)
        self._input_session: Any = None  # built by the first scan; False: numpy scans
        self._searches = 0  # nearest() calls, of any generation
        self._builder: tuple[threading.Thread, threading.Event] | None = None
        self._build_failed = False
        self._last_bounds: tuple[tuple[int, int, bytes], FloatArray, FloatArray] | None = None
        self._forget_blocks()

    @property
    def is_loaded(self) -> bool:
        """True once the vectors were read (later changes are read by ``nearest``)."""
        return self.generation != -1

    @property
    def packed(self) -> int:
        """Chunks held in blocks (deleted ones included)."""
        return len(self.ids)

    @property
    def columns(self) -> int:
        """Columns scanned: one per chunk that is no copy of a chunk in an earlier column."""
        return len(self._column_ids)

    @property
    def prepacked(self) -> int:
        """Blocks scanned by a session of their own (the others: by their codes as an input;
        a block of copies only is not scanned)."""
        return sum(not isinstance(kernel, np.ndarray) for kernel in self._kernels)

    def _forget_blocks(self) -> None:
        """Drop every block (a new epoch, or a clear) and stop building sessions for them."""
        self.stop_building()
        self._kernels, self._sizes, self._last = [], [], 0
        self.ids = np.zeros(0, dtype=np.int64)
        self.file_ids = np.zeros(0, dtype=np.int64)
        self.scales = self.errors = self.norms = np.zeros(0, dtype=np.float32)
        self.alive = np.ones(0, dtype=bool)
        self._column_ids = np.zeros(0, dtype=np.int64)  # the chunk of each column, ascending
        self.column = np.zeros(0, dtype=np.int64)  # per chunk, the column of its vector
        self._firsts_known = True  # every block read knew its chunks' firsts
        self._last_bounds = None
        self._texts: Texts | None = None  # what texts() gives, replaced whole

    def _append(self, blocks: Iterable[VectorBlock]) -> None:
        """Add blocks read after the last one, one at a time: their per-chunk arrays joined to
        the others', the codes of their first chunks kept as their kernels (a block's other
        bytes go as the next is read)."""
        parts: dict[str, list[Any]] = {
            name: [getattr(self, name)] for name in ("ids", "file_ids", "scales", "errors", "norms")
        }
        columns = [self._column_ids]
        vectors_of = [self._column_ids[self.column]]
        earlier = _Owners()
        earlier.add(self.ids, vectors_of[0])
        for block in blocks:
            for name, arrays in parts.items():
                arrays.append(getattr(block, name))
            own, of = _own_columns(block, earlier)
            columns.append(block.ids[own])
            vectors_of.append(of)
            earlier.add(block.ids, of)
            self._firsts_known &= block.firsts is not None
            if own.any():  # a block of copies only has no kernel
                self._kernels.append(_kernel_codes(block, own))
                self._sizes.append(int(own.sum()))
            self._last = block.number
        for name, arrays in parts.items():
            setattr(self, name, np.concatenate(arrays))
        self._column_ids = np.concatenate(columns)
        self.column = np.searchsorted(self._column_ids, np.concatenate(vectors_of))

    def refresh(self) -> None:
        """Read the blocks added since, the deleted chunks and the tail's changes, from one
        committed state; nothing when the generation is unchanged."""
        with self._source.snapshot():
            generation = self._source.generation()
            if generation == self.generation:
                return
            epoch = self._source.pack_epoch()
            if epoch != self._epoch:
                self._forget_blocks()
            self._append(self._source.blocks(self._last))
            gone = self._source.gone()
            self.alive = ~np.isin(self.ids, gone) if len(gone) else np.ones(len(self.ids), bool)
            self.tail.refresh()
            self.generation, self._epoch = generation, epoch
            known = self._firsts_known and len(self.ids) > 0
            self._texts = Texts(self.ids, self.alive, self.file_ids, self.column) if known else None

    def clear(self) -> None:
        """Forget everything read; the next refresh reads all."""
        self.generation = self._epoch = -1
        self._forget_blocks()
        self.tail.clear()

    def texts(self) -> Texts | None:
        """The text ids of the packed chunks as of the last refresh; None before the vectors
        are read, without blocks, or when a block knows no firsts (its copies then own columns
        of their own). Safe beside a refresh in another thread: one refresh's arrays."""
        return self._texts

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
        self._searches += 1
        tail = self.tail.nearest(query, pool, file_ids)
        if not len(self.ids):
            return tail
        if self._searches > 1:  # a process that searches again: worth packing each block once
            self._prepack()
        vector = np.asarray(query, dtype=np.float32)
        approx, bound = self._query_bounds(vector)
        if file_ids is not None:
            allowed = np.fromiter(file_ids, dtype=np.int64, count=len(file_ids))
            approx = np.where(np.isin(self.file_ids, allowed), approx, np.float32(-np.inf))
        lower = np.concatenate([approx - bound, np.array([s for _, s in tail], np.float32)])
        lower = lower[np.isfinite(lower)]
        if len(lower) > pool:
            floor = np.partition(lower, len(lower) - pool)[len(lower) - pool]
            chosen = np.flatnonzero(np.isfinite(approx) & (approx + bound >= floor))
        else:
            chosen = np.flatnonzero(np.isfinite(approx))
        ids, scores = self._exact_scores(chosen, vector)
        ids = np.concatenate([np.array([i for i, _ in tail], np.int64), ids])
        scores = np.concatenate([np.array([s for _, s in tail], np.float32), scores])
        kept = np.isfinite(scores)
        ids, scores = ids[kept], scores[kept]
        best = np.lexsort((ids, -scores))[:pool]  # best first, ties by chunk id
        return list(zip(ids[best].tolist(), scores[best].tolist(), strict=True))

    def _exact_scores(self, chosen: IdArray, query: FloatArray) -> tuple[IdArray, FloatArray]:
        """(chunk ids, exact cosines) of the chunks at ``chosen``: one stored vector read per
        column, its cosine given to every chunk that reads the column (copies have one vector).
        Where that chunk was deleted since the refresh, the column's others are read each."""
        columns = self.column[chosen]
        unique, first_at, of = np.unique(columns, return_index=True, return_inverse=True)
        if len(unique) == len(chosen):
            ids, matrix = self._source.vectors_of(self.ids[chosen])
            return ids, matrix @ query if len(ids) else np.zeros(0, np.float32)
        read = self.ids[chosen[first_at]]
        found, matrix = self._source.vectors_of(read)
        per_column = np.full(len(unique), np.nan, dtype=np.float32)
        if len(found):
            order = np.argsort(read)
            per_column[order[np.searchsorted(read[order], found)]] = matrix @ query
        scores = per_column[of]
        ids = self.ids[chosen]
        lost = np.isnan(scores) & ~np.isin(ids, read)
        if lost.any():  # rare: a column's first chosen chunk went in a write since the refresh
            again, matrix = self._source.vectors_of(ids[lost])
            rescored = dict(zip(again.tolist(), (matrix @ query).tolist(), strict=True))
            scores[lost] = [rescored.get(i, np.nan) for i in ids[lost].tolist()]
        kept = ~np.isnan(scores)
        return ids[kept], scores[kept]

    def _query_bounds(self, query: FloatArray) -> tuple[FloatArray, FloatArray]:
        """:meth:`_bounds` with deleted chunks at -inf, kept for the next call: a search that
        finds copies of one text asks again for the same query with a deeper pool."""
        key = (self.generation, len(self.ids), query.tobytes())
        if self._last_bounds is None or self._last_bounds[0] != key:
            approx, bound = self._bounds(query)
            approx[~self.alive] = -np.inf
            self._last_bounds = (key, approx, bound)
        return self._last_bounds[1], self._last_bounds[2]

    def _bounds(self, query: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(approximate cosines, their error bounds) of every packed chunk."""
        feed, high_scale, low_scale, left = quantised_query(query)
        per_column = np.empty(sum(self._sizes), dtype=np.float32)
        start = 0
        for kernel, size in zip(list(self._kernels), self._sizes, strict=True):
            sums = self._sums(feed, kernel).astype(np.float32)
            per_column[start : start + size] = sums[0] * np.float32(high_scale)
            per_column[start : start + size] += sums[1] * np.float32(low_scale)
            start += size
        approx = per_column[self.column] if self.columns < len(self.ids) else per_column
        approx *= self.scales
        bound = self.errors * np.float32(np.linalg.norm(query))
        bound += self.norms * np.float32(left)
        bound += np.float32(SLACK)
        return approx, bound

    def _sums(self, feed: Any, kernel: Any) -> Any:
        """The kernel's integer products of the query rows and a block's codes."""
        if not isinstance(kernel, np.ndarray):  # a session that holds the block, packed
            return kernel.run(None, {"q": feed})[0]
        if self._input_session is None:
            try:
                model = matmul_integer_input_model(kernel.shape[0], QUERY_LEVEL + 1)
                self._input_session = single_thread_session(model)
            except ModelError:  # numpy answers alike, about three times slower
                self._input_session = False
        if self._input_session is False:
            rows = feed.astype(np.int32) - (QUERY_LEVEL + 1)
            return np.einsum("kd,dn->kn", rows, kernel, dtype=np.int32)
        return self._input_session.run(None, {"q": feed, "m": kernel})[0]

    def _prepack(self) -> None:
        """Start giving each block still scanned by its codes a session of its own (in this
        thread when not ``background``), unless that is under way or failed before."""
        if self._build_failed or self._input_session is False:
            return
        if self._builder is not None and self._builder[0].is_alive():
            return
        if not any(isinstance(kernel, np.ndarray) for kernel in self._kernels):
            return
        stop = threading.Event()
        if not self._background:
            self._build(self._kernels, stop)
            return
        thread = threading.Thread(
            target=self._build, args=(self._kernels, stop), name="semsearch-prepack", daemon=True
        )
        self._builder = (thread, stop)
        _BUILDERS.add(self._builder)
        thread.start()

    def _build(self, kernels: list[Any], stop: threading.Event) -> None:
        """Replace each block's codes in ``kernels`` by a session that packed them, until
        ``stop`` is set. A search reads each slot once, so it scans either form."""
        at = 0
        while at < len(kernels) and not stop.is_set():
            codes = kernels[at]
            if isinstance(codes, np.ndarray):
                try:
                    kernels[at] = prepacked_kernel(codes)
                except (ModelError, MemoryError):  # an aid only: the input scan answers alike
                    self._build_failed = True
                    break
                del codes
                release_freed_memory()
            at += 1
        _BUILDERS.discard((threading.current_thread(), stop))

    def stop_building(self) -> None:
        """Stop the thread that builds the blocks' sessions, if one runs, and wait for it."""
        if self._builder is not None:
            thread, stop = self._builder
            stop.set()
            if thread is not threading.current_thread():
                thread.join()
            _BUILDERS.discard(self._builder)
            self._builder = None


def prepacked_kernel(codes: Int8Array) -> Any:
    """A session that holds ``codes`` (dim x n int8) packed for onnxruntime's kernel and gives
    ``sums`` = (q - zero) @ codes for a query ``q``; the caller's ``codes`` can go afterwards.
    Raises :class:`~semsearch.errors.ModelError` when onnxruntime cannot build it."""
    dim, rows = codes.shape
    model = matmul_integer_external_model(dim, rows, QUERY_LEVEL + 1, "codes")
    return single_thread_session(model, {"codes": memoryview(codes.data).cast("B")})


# Builder threads still running, stopped (after their current block) before the interpreter
# finalizes, so none is inside onnxruntime while it unloads.
_BUILDERS: set[tuple[threading.Thread, threading.Event]] = set()


@atexit.register
def _stop_builders() -> None:
    for thread, stop in list(_BUILDERS):
        stop.set()
        thread.join()
