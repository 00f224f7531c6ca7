"""Search latency on a synthetic index of N chunks: warm (library) and cold (CLI) search.

    python bench/latency.py --chunks 10000 [--chunks 100000] [--reuse-index]
    python bench/latency.py --backend lancedb --chunks 100000 --chunks 1000000
    python bench/latency.py --index WORK/codebench-wide/code/vitest.db --queries QUERIES.jsonl

The index is written directly through the store's ``write_files``: unit vectors, text of ~150
words drawn with a Zipf-like law from the model's own vocabulary (so BM25 sees common and rare
words), 10 chunks per file named like code (``d0000/f000001.py``: the path term applies) with a
path vector each, and the real model id so vector searches run; then ``maintain`` (for
LanceDB: full-text indexes, the ANN index past its threshold, compaction). The vectors are
clustered (a Gaussian mixture, one centre per 500 chunks, cosine ~0.5 within a cluster) like
real embeddings; uniform random vectors have no neighbourhoods, which no ANN index can exploit.
Exact search costs the same on either. Warm latency is ``Index.search`` in one process (what the
MCP server does) after one warm-up query; cold latency is ``python -m semsearch --index DB search
QUERY`` wall time as a user runs it, median of runs. With an ANN index, recall@10 is the share
of the exact top 10 (numpy over all vectors) that the vector arm returns in its top 10, for 200
held-out vectors drawn from the same mixture.

With ``--index`` (repeatable) the warm searches run on an index built before, searched as it is
(``bench/codesearch.py`` leaves one per repo, ``REPO.db``), with the ``query`` of each line of
``--queries`` whose ``repo`` is the file's stem (every line when none is): the cost on real code,
where few chunks match most words, beside the synthetic worst case.
"""

# ruff: noqa: E402  (numpy must load after the thread setting below, as in the CLI)
from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from importlib import resources
from itertools import cycle, islice
from pathlib import Path
from typing import Any

from semsearch.process import configure_process  # light: loads no numpy

configure_process()  # what the CLI and the MCP server set up before numpy loads

import numpy as np
from benchlib import (
    DEFAULT_WORK,
    bench_env,
    child_env,
    machine,
    median,
    percentile,
    wait_for_quiet,
    write_json,
)

from semsearch.config import BACKENDS, load_settings
from semsearch.index import Index
from semsearch.model.embedder import OnnxEmbedder
from semsearch.search.ranking import POOL_MIN
from semsearch.store import ChunkRecord, FileWrite, open_store

CHUNKS_PER_FILE = 10
WORDS_PER_CHUNK = 150
DIM = 384
WARM_QUERIES = 200
COLD_RUNS = 7
RECALL_QUERIES = 200
CLUSTER_SIZE = 500
SPREAD = 0.8  # noise norm relative to the unit centre: cosine ~0.5 between cluster members


class Vectors:
    """Unit vectors from a Gaussian mixture, seeded."""

    def __init__(self, chunks: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        centres = rng.standard_normal((max(chunks // CLUSTER_SIZE, 20), DIM)).astype(np.float32)
        self.centres = centres / np.linalg.norm(centres, axis=1, keepdims=True)

    def draw(self, count: int, rng: np.random.Generator) -> np.ndarray[Any, Any]:
        """``count`` vectors near randomly chosen centres."""
        picked = self.centres[rng.integers(0, len(self.centres), count)]
        noise = rng.standard_normal((count, DIM)).astype(np.float32) * (SPREAD / np.sqrt(DIM))
        vectors = picked + noise
        return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def vocabulary() -> list[str]:
    """Whole lowercase words (4+ letters) of the model's WordPiece vocabulary, in vocab order."""
    path = Path(str(resources.files("semsearch") / "data" / "all-MiniLM-L6-v2" / "tokenizer.json"))
    vocab: dict[str, int] = json.loads(path.read_text(encoding="utf-8"))["model"]["vocab"]
    words = sorted((w for w in vocab if w.isalpha() and w.islower() and len(w) >= 4), key=vocab.get)
    return words


class WordSource:
    """Zipf-like word sampler (weight 1/rank), seeded."""

    def __init__(self, seed: int) -> None:
        self.words = vocabulary()
        self.rng = random.Random(seed)
        weights = [1.0 / (rank + 1) for rank in range(len(self.words))]
        self.cumulative = list(np.cumsum(weights))

    def text(self, count: int) -> str:
        """``count`` words, ten to a line."""
        words = self.rng.choices(self.words, cum_weights=self.cumulative, k=count)
        return "\n".join(" ".join(words[i : i + 10]) for i in range(0, count, 10))


def build(backend: str, path: Path, chunks: int, model_id: str) -> dict[str, float]:
    """Write ``chunks`` synthetic chunks, then maintain; returns seconds taken by each."""
    started = time.perf_counter()
    for stale in path.parent.glob(path.name + "*"):
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    store = open_store(backend, path, create=True)
    store.set_model(model_id, DIM)
    folder = store.ensure_folder(str(path.parent / "synthetic"), "synthetic")
    rng = np.random.default_rng(0)
    mixture = Vectors(chunks, 0)
    source = WordSource(0)
    files = (chunks + CHUNKS_PER_FILE - 1) // CHUNKS_PER_FILE
    batch: list[FileWrite] = []
    for number in range(files):
        count = min(CHUNKS_PER_FILE, chunks - number * CHUNKS_PER_FILE)
        records = tuple(
            ChunkRecord(1 + 15 * i, 15 * (i + 1), 0, 0, None, source.text(WORDS_PER_CHUNK))
            for i in range(count)
        )
        vectors = mixture.draw(count, rng)
        batch.append(
            FileWrite(
                folder,
                f"d{number // 100:04d}/f{number:06d}.py",
                0,
                0,
                None,
                "ok",
                "text",
                records,
                vectors,
            )
        )
        if len(batch) == 200:
            store.write_files(batch)
            batch = []
    store.write_files(batch)
    while pending := store.pending_paths(1000):  # the path vectors an index run makes
        store.set_path_vectors([i for i, _ in pending], mixture.draw(len(pending), rng))
    store.mark_indexed(folder)
    written = time.perf_counter()
    store.maintain()
    store.close()
    return {"write_s": written - started, "maintain_s": time.perf_counter() - written}


def recall(backend: str, path: Path, chunks: int) -> dict[str, float] | None:
    """Recall@10 and latency of the ANN vector arm against exact search (None without ANN)."""
    if backend != "lancedb":
        return None
    from semsearch.store.lance.store import LanceStore  # optional extra: loaded only when chosen

    store = LanceStore(path)
    try:
        if not store.has_ann():
            return None
        ids, _, matrix = store.vectors(0)
        queries = Vectors(chunks, 0).draw(RECALL_QUERIES, np.random.default_rng(7))
        found, times = [], []
        for query in queries:
            exact = ids[np.argpartition(-(matrix @ query), 10)[:10]]
            started = time.perf_counter()
            nearest = store.nearest(query, POOL_MIN, None)
            times.append(time.perf_counter() - started)
            found.append(len(set(exact.tolist()) & {cid for cid, _ in nearest[:10]}) / 10)
    finally:
        store.close()
    return {
        "recall_at_10": float(np.mean(found)),
        "ann_p50_ms": percentile(times, 50) * 1000,
        "ann_p95_ms": percentile(times, 95) * 1000,
    }


def queries(count: int, seed: int = 1) -> list[str]:
    """Short queries (2-6 words) from the same word law."""
    source = WordSource(seed)
    return [source.text(source.rng.randint(2, 6)).replace("\n", " ") for _ in range(count)]


def warm(
    settings_env: dict[str, str], mode: str, asked: list[str] | None = None
) -> dict[str, float]:
    """p50/p95 of ``Index.search`` (k=10) in one process, after one warm-up query, over
    WARM_QUERIES searches (``asked`` in turn when given, else the synthetic queries)."""
    index = Index(load_settings(settings_env))
    try:
        started = time.perf_counter()
        index.search("warm up", k=10, mode=mode)  # type: ignore[arg-type]
        first = time.perf_counter() - started
        times = []
        texts = asked or queries(WARM_QUERIES)
        for query in islice(cycle(texts), max(WARM_QUERIES, len(texts))):
            started = time.perf_counter()
            index.search(query, k=10, mode=mode)  # type: ignore[arg-type]
            times.append(time.perf_counter() - started)
    finally:
        index.close()
    return {
        "first_ms": first * 1000,
        "p50_ms": percentile(times, 50) * 1000,
        "p95_ms": percentile(times, 95) * 1000,
    }


def cold(work: Path, index_path: Path, backend: str) -> dict[str, Any]:
    """Median wall time of the CLI search, and of the bare import of the CLI module.

    The children run in ``work``: ``python -m`` and ``-c`` put their working folder first on
    the path, so run from another checkout they would time that checkout's code."""
    env = {**child_env(work), "SS_STORE_BACKEND": backend}
    search = [sys.executable, "-m", "semsearch", "--index", str(index_path), "search", "-k", "10"]
    runs = []
    for query in queries(COLD_RUNS, seed=2):
        started = time.perf_counter()
        subprocess.run([*search, query], env=env, cwd=work, check=True, capture_output=True)
        runs.append(time.perf_counter() - started)
    imports = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", "import semsearch.cli.commands"], env=env, cwd=work, check=True
        )
        imports.append(time.perf_counter() - started)
    return {
        "cli_median_s": median(runs),
        "cli_runs_s": [round(r, 3) for r in runs],
        "import_cli_s": median(imports),
    }


def measure(backend: str, chunks: int, reuse: bool) -> dict[str, Any]:
    """Build (or reuse) the index of ``chunks`` chunks and time searches on it."""
    work = DEFAULT_WORK / (
        f"latency-{chunks}" if backend == "sqlite" else f"latency-{backend}-{chunks}"
    )
    env = {**bench_env(work), "SS_STORE_BACKEND": backend}
    settings = load_settings(env)
    index_path, path = settings.index_path, settings.store_path
    fig: dict[str, Any] = {"backend": backend, "chunks": chunks}
    if not (reuse and path.exists()):
        model_id = OnnxEmbedder(settings.model_dir).model_id
        fig["build"] = build(backend, path, chunks, model_id)
    store = open_store(backend, path)
    fig["index_bytes"] = store.size_bytes()
    store.close()
    wait_for_quiet()
    fig["ann"] = recall(backend, path, chunks)
    for mode in ("hybrid", "vector", "bm25"):
        fig[mode] = warm(env, mode)
    wait_for_quiet()
    fig.update(cold(work, index_path, backend))
    return fig


def measure_real(backend: str, index_path: Path, query_file: Path) -> dict[str, Any]:
    """Warm searches of an existing index with its repo's queries from ``query_file``."""
    if not index_path.exists():
        raise SystemExit(f"No index at {index_path}.")
    lines = [json.loads(line) for line in query_file.read_text().splitlines() if line.strip()]
    asked = [q["query"] for q in lines if q.get("repo") == index_path.stem]
    asked = asked or [q["query"] for q in lines]
    if not asked:
        raise SystemExit(f"No queries in {query_file}.")
    env = {**bench_env(DEFAULT_WORK / "latency-real"), "SS_STORE_BACKEND": backend}
    env["SS_INDEX_PATH"] = str(index_path)
    store = open_store(backend, load_settings(env).store_path)
    fig: dict[str, Any] = {"backend": backend, "index": str(index_path), "queries": len(asked)}
    fig["chunks"], fig["index_bytes"] = store.chunk_count(), store.size_bytes()
    store.close()
    wait_for_quiet()
    for mode in ("hybrid", "vector", "bm25"):
        fig[mode] = warm(env, mode, asked)
    return fig


def main(argv: list[str] | None = None) -> int:
    """Measure each requested size and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--chunks",
        type=int,
        action="append",
        metavar="N",
        help="index size (repeatable; default 10000)",
    )
    parser.add_argument("--backend", choices=BACKENDS, default="sqlite", help="store backend")
    parser.add_argument("--reuse-index", action="store_true", help="keep an index built before")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument(
        "--index", type=Path, action="append", metavar="DB", help="an existing index (repeatable)"
    )
    parser.add_argument("--queries", type=Path, metavar="JSONL", help="queries for --index")
    args = parser.parse_args(argv)
    if args.index:
        if args.queries is None or args.chunks:
            parser.error("--index needs --queries, and takes no --chunks")
        real = [measure_real(args.backend, db, args.queries) for db in args.index]
        print(f"backend {args.backend}")
        print(f"{'index':24} {'chunks':>7} {'mode':7} {'p50 ms':>7} {'p95 ms':>7}")
        for fig in real:
            for mode in ("hybrid", "vector", "bm25"):
                m = fig[mode]
                name = Path(fig["index"]).stem
                print(f"{name:24} {fig['chunks']:7} {mode:7} {m['p50_ms']:7.2f} {m['p95_ms']:7.2f}")
        write_json(args.json, {"machine": machine(), "results": real})
        return 0
    results = [measure(args.backend, n, args.reuse_index) for n in args.chunks or [10_000]]
    print(f"backend {args.backend}")
    print(f"{'chunks':>8} {'mode':7} {'first ms':>9} {'p50 ms':>7} {'p95 ms':>7}")
    for fig in results:
        for mode in ("hybrid", "vector", "bm25"):
            m = fig[mode]
            print(
                f"{fig['chunks']:8} {mode:7} {m['first_ms']:9.1f} {m['p50_ms']:7.1f} "
                f"{m['p95_ms']:7.1f}"
            )
        print(
            f"{fig['chunks']:8} cold `semsearch search`: median {fig['cli_median_s']:.3f} s "
            f"(runs {fig['cli_runs_s']}); `import semsearch.cli` {fig['import_cli_s']:.3f} s; "
            f"index {fig['index_bytes'] / 1e6:.1f} MB"
        )
        if fig["ann"]:
            ann = fig["ann"]
            print(
                f"{fig['chunks']:8} ANN vector arm: recall@10 {ann['recall_at_10']:.3f} "
                f"p50 {ann['ann_p50_ms']:.1f} ms p95 {ann['ann_p95_ms']:.1f} ms"
            )
        if "build" in fig:
            b = fig["build"]
            print(
                f"{fig['chunks']:8} build: write {b['write_s']:.0f} s, "
                f"maintain {b['maintain_s']:.0f} s"
            )
    write_json(args.json, {"machine": machine(), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
