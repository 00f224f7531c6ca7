"""The int8 scan of the warm search: exact results from int8 sums and an error bound."""

from __future__ import annotations

import shutil
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from semsearch.errors import ModelError
from semsearch.model.onnx_graph import single_thread_session
from semsearch.store import ChunkRecord, FileWrite
from semsearch.store.exact import SCAN_MIN_ROWS, ExactVectors
from semsearch.store.scan import QUERY_LEVEL, Int8Scan, VectorScan
from semsearch.store.sqlite.store import SqliteStore

DIM = 384


def unit_rows(count: int, seed: int, clusters: int = 25) -> np.ndarray[Any, Any]:
    """Clustered unit vectors with a few large dimensions, as sentence embeddings have."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, DIM))
    centres[:, :3] *= 6  # outlier dimensions: a row's largest value sets its int8 scale
    rows = centres[rng.integers(clusters, size=count)] + rng.standard_normal((count, DIM)) * 0.9
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def unit(vector: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def queries(matrix: np.ndarray[Any, Any], seed: int) -> list[np.ndarray[Any, Any]]:
    """Queries near a row (many close cosines), far from all, and with one large component."""
    rng = np.random.default_rng(seed)
    near = [
        unit(matrix[i] + rng.standard_normal(DIM) * 0.1) for i in rng.integers(len(matrix), size=6)
    ]
    spiky = np.full(DIM, 0.01)
    spiky[7] = 1.0
    return [*near, unit(rng.standard_normal(DIM)), unit(spiky)]


def scan_of(matrix: np.ndarray[Any, Any]) -> tuple[VectorScan, Any]:
    """A scan of ``matrix`` whose chunk ids are its row numbers + 1, and a function of (query,
    pool, allowed rows) giving its candidate rows."""
    ids = np.arange(1, len(matrix) + 1, dtype=np.int64)
    scan = VectorScan(ids, matrix)
    return scan, lambda query, pool, allowed=None: scan.candidates(
        ids, matrix, query, pool, allowed
    )


def exact_top(matrix: np.ndarray[Any, Any], query: np.ndarray[Any, Any], pool: int) -> set[int]:
    scores = matrix.astype(np.float64) @ query.astype(np.float64)
    return set(np.argsort(-scores, kind="stable")[:pool].tolist())


def test_every_approximate_cosine_is_within_its_bound() -> None:
    matrix = unit_rows(3000, seed=1)
    scan = Int8Scan(matrix)
    for query in queries(matrix, seed=2):
        approx, bound = scan.bounds(query)
        true = matrix.astype(np.float64) @ query.astype(np.float64)
        assert (np.abs(approx - true) <= bound).all()
        assert 0 < float(bound.max()) < 0.05  # a bound, and a useful one


def test_the_bound_holds_for_the_query_that_meets_a_rows_rounding_head_on() -> None:
    """A query along a row's own rounding error makes the error as large as it can be: the
    bound must still hold (it is not a typical error but a worst case)."""
    matrix = unit_rows(1000, seed=13)
    scan = Int8Scan(matrix)
    for row in (0, 1, 500):
        restored = np.rint(matrix[row] / scan.scale[row]) * scan.scale[row]
        query = unit(matrix[row] - restored)
        approx, bound = scan.bounds(query)
        error = abs(float(approx[row]) - float(matrix[row].astype(np.float64) @ query))
        assert 0.9 * float(bound[row]) < error + 2e-5 <= float(bound[row]) + 2e-5


def test_no_row_left_out_could_beat_pool_rows_kept() -> None:
    """The rule itself: for every row left out, ``pool`` rows are surely nearer (their lowest
    possible cosine is above its highest)."""
    matrix = unit_rows(3000, seed=14)
    scan, candidates = scan_of(matrix)
    for query in queries(matrix, seed=15):
        approx, bound = scan.scan.bounds(query)
        kept = np.zeros(3000, dtype=bool)
        kept[candidates(query, 100)] = True
        highest_left_out = float((approx + bound)[~kept].max())
        assert int(((approx - bound) >= highest_left_out).sum()) >= 100


@pytest.mark.parametrize("pool", [1, 10, 200, 2999, 3000, 5000])
def test_candidates_hold_the_exact_nearest_rows(pool: int) -> None:
    matrix = unit_rows(3000, seed=3)
    _, candidates = scan_of(matrix)
    for query in queries(matrix, seed=4):
        rows = candidates(query, pool)
        assert exact_top(matrix, query, min(pool, 3000)) <= set(rows.tolist())
        assert (np.diff(rows) > 0).all()  # ascending, no repeats
        if pool < 1000:
            assert len(rows) < 3 * pool + 50  # far fewer than all rows


def test_candidates_stay_within_the_rows_allowed() -> None:
    matrix = unit_rows(3000, seed=5)
    _, candidates = scan_of(matrix)
    allowed = np.flatnonzero(np.random.default_rng(6).random(3000) < 0.6)
    for query in queries(matrix, seed=7):
        rows = candidates(query, 50, allowed)
        assert set(rows.tolist()) <= set(allowed.tolist())
        among = exact_top(matrix[allowed], query, 50)
        assert {int(allowed[i]) for i in among} <= set(rows.tolist())
    few = allowed[:20]
    assert sorted(candidates(queries(matrix, seed=8)[0], 50, few).tolist()) == few.tolist()


def test_rows_that_are_not_finite_are_never_candidates() -> None:
    matrix = unit_rows(500, seed=9)
    matrix[[3, 40]] = np.nan
    matrix[77, 5] = np.inf
    _, candidates = scan_of(matrix)
    query = unit(matrix[3 + 1])
    for pool in (10, 497, 500):
        rows = set(candidates(query, pool).tolist())
        assert not rows & {3, 40, 77}
    assert len(candidates(query, 500)) == 497


def test_the_integer_sums_do_not_saturate_at_the_extremes() -> None:
    """The largest query values against the largest row values of one sign: on CPUs without
    VNNI a pair of u8 x s8 products is added in 16 bits, which 8-bit queries would overflow."""
    matrix = np.zeros((4, DIM), dtype=np.float32)
    matrix[0] = 1.0  # every value rounds to +127 (one scale per row)
    matrix[1] = -1.0
    matrix[2, ::2], matrix[2, 1::2] = 1.0, -1.0
    matrix[3, 0] = 1.0  # a zero row would be 0; one non-zero value keeps the scale
    matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    scan = Int8Scan(matrix)
    for query in (np.full(DIM, 1.0), np.full(DIM, -1.0), np.tile([1.0, -1.0], DIM // 2)):
        query = unit(query)
        approx, bound = scan.bounds(query)
        assert np.abs(approx - matrix @ query).max() <= bound.max()
        assert (2 * QUERY_LEVEL + 1) * 127 * 2 < 2**15  # the largest pair of u8 x s8 products fits


def test_a_scan_answers_for_chunks_added_and_gone_since_it_was_built() -> None:
    """Built on the chunks there were; asked about the chunks there are: the new ones are scored
    exactly (a NaN one left out), the gone ones are never candidates."""
    old = unit_rows(3000, seed=16)
    ids = np.arange(1, 3001, dtype=np.int64)
    scan = VectorScan(ids, old)
    kept = np.flatnonzero(np.random.default_rng(17).random(3000) < 0.9)  # ~300 gone
    added = unit_rows(300, seed=18)
    added[5] = np.nan
    now_ids = np.concatenate([ids[kept], np.arange(5001, 5301, dtype=np.int64)])
    now = np.concatenate([old[kept], added])
    assert not scan.is_stale(now_ids)
    for query in [*queries(now, seed=19), unit(added[0]), unit(added[7])]:
        rows = scan.candidates(now_ids, now, query, 100, None)
        finite = np.isfinite(now).all(axis=1)
        best = np.argsort(-np.where(finite, now @ query, -np.inf), kind="stable")[:100]
        assert set(best.tolist()) <= set(rows.tolist())
        assert len(kept) + 5 not in rows.tolist()  # the NaN vector's row
    assert len(kept) + 6 in scan.candidates(now_ids, now, unit(added[6]), 1, None).tolist()


@pytest.mark.parametrize(
    ("gone", "added", "stale"),
    [(0, 0, False), (749, 0, False), (751, 0, True), (0, 428, False), (0, 429, True)],
)
def test_a_scan_is_stale_when_many_chunks_came_or_went(gone: int, added: int, stale: bool) -> None:
    ids = np.arange(1, 3001, dtype=np.int64)
    scan = VectorScan(ids, unit_rows(3000, seed=20))
    now = np.concatenate([ids[gone:], np.arange(10_001, 10_001 + added, dtype=np.int64)])
    assert scan.is_stale(now) is stale


class MatrixSource:
    """A VectorSource over one matrix whose rows can be replaced (each replacement is a write)."""

    def __init__(self, matrix: np.ndarray[Any, Any]) -> None:
        self.ids = np.arange(1, len(matrix) + 1, dtype=np.int64)
        self.files = (self.ids - 1) // 10  # ten chunks a file
        self.matrix = matrix
        self.written = 0

    def replace(self, rows: np.ndarray[Any, Any], vectors: np.ndarray[Any, Any]) -> None:
        """New chunk ids for ``rows`` (ids are never reused), with new vectors."""
        self.ids = self.ids.copy()
        self.ids[rows] = self.ids.max() + 1 + np.arange(len(rows))
        self.matrix = self.matrix.copy()
        self.matrix[rows] = vectors
        order = np.argsort(self.ids)
        self.ids, self.files, self.matrix = self.ids[order], self.files[order], self.matrix[order]
        self.written += 1

    def generation(self) -> int:
        return self.written

    def vector_ids(self) -> np.ndarray[Any, Any]:
        return self.ids

    def vectors(self, min_id: int) -> tuple[Any, Any, Any]:
        keep = self.ids > min_id
        return self.ids[keep], self.files[keep], self.matrix[keep]


def brute(source: MatrixSource, query: np.ndarray[Any, Any], pool: int, files: Any) -> list[int]:
    scores = source.matrix @ query
    rows = np.arange(len(scores)) if files is None else np.flatnonzero(np.isin(source.files, files))
    best = rows[np.argsort(-scores[rows], kind="stable")[:pool]]
    return source.ids[best].tolist()


def test_exact_vectors_answer_the_same_before_and_after_the_scan_is_built() -> None:
    """Searches of a large matrix through its changes: the first search of each generation
    multiplies the float32 matrix, the later ones use the int8 scan (with the chunks changed
    since it was built scored apart, or a new scan once they are many); every answer is the
    numpy top k, in order."""
    source = MatrixSource(unit_rows(SCAN_MIN_ROWS + 500, seed=10))
    exact = ExactVectors(source)
    rng = np.random.default_rng(11)
    files = np.unique(source.files)
    most, few = files[: int(len(files) * 0.7)].tolist(), files[:5].tolist()
    for step, changes in enumerate([300, 300, 1000, 0]):
        for query in queries(source.matrix, seed=12 + step):
            for chosen in (None, most, few):
                found = exact.nearest(query, 200, chosen)
                assert [cid for cid, _ in found] == brute(source, query, 200, chosen)
                scores = dict(
                    zip(source.ids.tolist(), (source.matrix @ query).tolist(), strict=True)
                )
                expected = [scores[cid] for cid, _ in found]
                assert [s for _, s in found] == pytest.approx(expected, abs=1e-6)
        changed = rng.choice(len(source.ids), size=changes, replace=False)
        source.replace(changed, unit_rows(changes, seed=20 + step))


def test_a_sqlite_index_searched_again_and_again_gives_the_exact_nearest(tmp_path: Any) -> None:
    """Through a real index file: float16 vectors as stored, a write between searches."""
    store = SqliteStore(tmp_path / "index.db", create=True)
    store.set_model("test-model", DIM)
    folder = store.ensure_folder("/srv/a", "a")
    matrix = unit_rows(SCAN_MIN_ROWS + 100, seed=30)
    files = {f"f{n}.py": matrix[n * 10 : n * 10 + 10] for n in range(len(matrix) // 10)}

    def write(rel: str) -> FileWrite:
        chunks = tuple(
            ChunkRecord(n + 1, n + 1, 0, 4, None, f"c{n}") for n in range(len(files[rel]))
        )
        return FileWrite(folder, rel, 1, 10, "sha", "ok", "text", chunks, files[rel])

    store.write_files([write(rel) for rel in files])
    for step in range(2):
        rows = store.chunks([int(i) for i in store.chunk_ids()])
        stored = np.stack([files[r.rel][r.start_line - 1] for r in rows]).astype(np.float16)
        ids = np.array([r.id for r in rows])
        for query in queries(matrix, seed=32 + step)[:4]:
            expected = ids[np.argsort(-(stored.astype(np.float32) @ query), kind="stable")[:50]]
            for _ in range(2):  # the first search of a generation, then the scan
                found = store.nearest(query, 50, None)
                assert [cid for cid, _ in found] == expected.tolist()
        files["new.py"] = unit_rows(30, seed=31)
        store.write_files([write("new.py")])
    store.close()


SUMS_AT_THE_EXTREMES = """
import numpy as np
from semsearch.model.onnx_graph import matmul_integer_model, single_thread_session
from semsearch.store import scan
columns = np.zeros((384, 4), dtype=np.int8)
columns[:, 0], columns[:, 1] = 127, -127
columns[::2, 2], columns[1::2, 2] = 127, -127
columns[:, 3] = np.arange(384) % 255 - 127
session = single_thread_session(matmul_integer_model(columns, scan.QUERY_LEVEL + 1))
level = scan.QUERY_LEVEL
worst = 0
for values in ([level] * 384, [-level] * 384, [level, -level] * 192, list(range(-192, 192))):
    query = np.clip(np.array([values, values[::-1]]), -level, level)
    sums = session.run(None, {"q": (query + level + 1).astype(np.uint8)})[0]
    worst = max(worst, int(np.abs(sums - query @ columns.astype(np.int64)).max()))
print(worst)
"""


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind (Debian: valgrind)")
def test_the_integer_sums_are_exact_on_the_kernels_of_a_cpu_without_vnni() -> None:
    """valgrind's virtual CPU has AVX2 and no AVX-512 or VNNI, so onnxruntime runs its AVX2
    kernels under it, which add pairs of u8 x s8 products in 16 bits: the 7-bit query keeps
    every pair in range (an 8-bit one is off by millions there)."""
    command = [sys.executable, "-c", SUMS_AT_THE_EXTREMES]
    assert subprocess.run(command, capture_output=True, text=True, check=True).stdout == "0\n"
    under = subprocess.run(
        ["valgrind", "--tool=none", "-q", *command], capture_output=True, text=True
    )
    assert under.returncode == 0, under.stderr[-2000:]
    assert under.stdout == "0\n"


def test_a_search_scans_the_float32_matrix_when_the_int8_copy_cannot_be_made() -> None:
    """No memory for the copy, or onnxruntime refusing it: the answers stay the numpy top k,
    and the copy is not tried again until the vectors change."""
    source = MatrixSource(unit_rows(SCAN_MIN_ROWS + 10, seed=40))
    tried: list[int] = []

    def no_memory(ids: Any, matrix: Any) -> VectorScan:
        tried.append(len(ids))
        raise MemoryError

    exact = ExactVectors(source, make_scan=no_memory)
    for step in range(2):
        for query in queries(source.matrix, seed=41 + step):
            found = exact.nearest(query, 50, None)
            assert [cid for cid, _ in found] == brute(source, query, 50, None)
        assert len(tried) == step + 1  # once on the generation's second search, then not again
        source.replace(np.arange(3), unit_rows(3, seed=45))


def test_onnxruntime_refusing_a_model_is_a_model_error() -> None:
    with pytest.raises(ModelError, match=r"(?i)protobuf|invalid|parse|load"):
        single_thread_session(b"not an onnx model")
