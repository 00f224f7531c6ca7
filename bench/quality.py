"""Retrieval quality on a BEIR dataset through the public API: nDCG@10, Recall@10/100, MRR@10.

    python bench/quality.py /work/shared/eval/scifact [--limit-queries N] [--reuse-index]

Each document becomes a file (title, blank line, text) in a work folder, the folder is indexed
with ``Index(settings).update`` (settings built from an env dict pointing into the work folder),
and every test query is run in ``hybrid``, ``vector`` and ``bm25`` modes. Hits are chunks; a
document's rank is that of its best chunk (we ask for ``--k`` hits, 100 by default, and dedupe by
document). Metrics follow trec_eval: graded gains from the qrels, ideal DCG from the qrels, a query
with no relevant hit scores zero.

Code search (semble's benchmark, /work/shared/eval/codesearch) is scored per chunk by its own
``score.py``: ``python bench/quality.py --format codesearch CODESEARCH_DIR [--repos DIR]`` hands
over to ``bench/codesearch.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import codesearch
from benchlib import DEFAULT_WORK, bench_env, machine, percentile, wait_for_quiet, write_json

from semsearch.config import load_settings
from semsearch.index import Index

MODES = ("hybrid", "vector", "bm25")
CUTOFF = 10


@dataclass(frozen=True)
class Dataset:
    """Documents to index, test queries, and graded judgements."""

    name: str
    documents: dict[str, str]  # doc id -> file text
    queries: dict[str, str]  # query id -> text (test queries only)
    qrels: dict[str, dict[str, int]]  # query id -> doc id -> grade


def _jsonl(path: Path) -> Iterable[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def load_beir(folder: Path, split: str = "test") -> Dataset:
    """corpus.jsonl, queries.jsonl and qrels/<split>.tsv of a BEIR dataset."""
    qrels: dict[str, dict[str, int]] = {}
    with (folder / "qrels" / f"{split}.tsv").open(encoding="utf-8") as handle:
        for line in handle:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or parts[0] == "query-id":
                continue
            qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    documents = {
        str(row["_id"]): (row.get("title") or "").strip() + "\n\n" + (row.get("text") or "")
        for row in _jsonl(folder / "corpus.jsonl")
    }
    queries = {
        str(row["_id"]): row["text"]
        for row in _jsonl(folder / "queries.jsonl")
        if str(row["_id"]) in qrels
    }
    return Dataset(folder.name, documents, queries, qrels)


LOADERS: dict[str, Callable[[Path, str], Dataset]] = {"beir": load_beir}


def file_name(doc_id: str) -> str:
    """A safe, reversible-enough file name for a document id."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", doc_id) + ".txt"


def write_documents(dataset: Dataset, folder: Path) -> dict[str, str]:
    """One file per document; returns file name -> doc id."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    names: dict[str, str] = {}
    for doc_id, text in dataset.documents.items():
        name = file_name(doc_id)
        if name in names:
            raise ValueError(f"two document ids map to file {name}")
        names[name] = doc_id
        (folder / name).write_text(text, encoding="utf-8")
    return names


def dcg(gains: list[int]) -> float:
    """trec_eval DCG: gain / log2(rank + 1)."""
    return sum(g / math.log2(rank + 2) for rank, g in enumerate(gains) if g > 0)


def score_query(ranked: list[str], judged: dict[str, int]) -> dict[str, float]:
    """nDCG@10, Recall@10, Recall@100 and MRR@10 of one ranked list of doc ids."""
    relevant = {doc for doc, grade in judged.items() if grade > 0}
    ideal = dcg(sorted((g for g in judged.values() if g > 0), reverse=True)[:CUTOFF])
    gains = [judged.get(doc, 0) for doc in ranked[:CUTOFF]]
    first = next((r for r, doc in enumerate(ranked[:CUTOFF], 1) if doc in relevant), None)
    return {
        "ndcg@10": dcg(gains) / ideal if ideal else 0.0,
        "recall@10": len(relevant & set(ranked[:10])) / len(relevant) if relevant else 0.0,
        "recall@100": len(relevant & set(ranked[:100])) / len(relevant) if relevant else 0.0,
        "mrr@10": 1.0 / first if first else 0.0,
    }


def rank_documents(index: Index, query: str, mode: str, k: int, names: dict[str, str]) -> list[str]:
    """Doc ids in order of their best chunk."""
    ranked: list[str] = []
    seen: set[str] = set()
    for hit in index.search(query, k=k, mode=mode):  # type: ignore[arg-type]
        doc = names.get(Path(hit.rel).name)
        if doc is not None and doc not in seen:
            seen.add(doc)
            ranked.append(doc)
    return ranked


def evaluate(
    index: Index, dataset: Dataset, names: dict[str, str], query_ids: list[str], k: int
) -> dict[str, Any]:
    """Mean metrics and latency per mode."""
    results: dict[str, Any] = {}
    index.search("warm up the model and the vector cache", k=k)
    for mode in MODES:
        totals: dict[str, float] = {}
        latencies: list[float] = []
        for qid in query_ids:
            started = time.perf_counter()
            ranked = rank_documents(index, dataset.queries[qid], mode, k, names)
            latencies.append(time.perf_counter() - started)
            for metric, value in score_query(ranked, dataset.qrels[qid]).items():
                totals[metric] = totals.get(metric, 0.0) + value
        figures: dict[str, Any] = {m: round(v / len(query_ids), 4) for m, v in totals.items()}
        figures["p50_ms"] = round(percentile(latencies, 50) * 1000, 1)
        figures["p95_ms"] = round(percentile(latencies, 95) * 1000, 1)
        results[mode] = figures
    return results


def build_index(dataset: Dataset, work: Path, reuse: bool) -> tuple[Index, dict[str, str], dict]:
    """Write the documents and index them (or reuse the index a previous run built)."""
    docs = work / "docs"
    settings = load_settings(bench_env(work))
    names_file = work / "names.json"
    info: dict[str, Any] = {}
    if reuse and settings.store_path.exists() and names_file.exists():
        names = json.loads(names_file.read_text(encoding="utf-8"))
        info["reused"] = True
    else:
        for stale in [*work.glob("index.db*"), *work.glob("lancedb*")]:
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
        names = write_documents(dataset, docs)
        names_file.write_text(json.dumps(names), encoding="utf-8")
    index = Index(settings)
    if not info.get("reused"):
        started = time.perf_counter()
        report = index.update([docs.resolve()])
        info.update(
            index_seconds=round(time.perf_counter() - started, 1),
            files=report.total("indexed"),
            chunks=report.total("chunks"),
        )
        if report.failed:
            print(f"warning: index run reported problems: {report.as_json()}", file=sys.stderr)
    return index, names, info


def main(argv: list[str] | None = None) -> int:
    """Index the dataset, run its test queries, print the metrics table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "dataset", type=Path, help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/)"
    )
    parser.add_argument("--format", choices=[*sorted(LOADERS), "codesearch"], default="beir")
    parser.add_argument("--split", default="test")
    parser.add_argument(
        "--work", type=Path, help="work folder (default: under /tmp/semsearch-bench)"
    )
    parser.add_argument("--limit-queries", type=int, metavar="N", help="first N test queries only")
    parser.add_argument("--reuse-index", action="store_true", help="keep the index of a last run")
    parser.add_argument("-k", type=int, default=100, help="hits asked per query (default 100)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args, rest = parser.parse_known_args(argv)
    if args.format == "codesearch":
        return codesearch.main([str(args.dataset), *rest])
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    dataset = LOADERS[args.format](args.dataset, args.split)
    work = args.work or DEFAULT_WORK / f"quality-{dataset.name}"
    query_ids = list(dataset.queries)[: args.limit_queries]
    wait_for_quiet()
    index, names, info = build_index(dataset, work, args.reuse_index)
    try:
        results = evaluate(index, dataset, names, query_ids, args.k)
    finally:
        index.close()
    print(f"{dataset.name}: {len(dataset.documents)} docs, {len(query_ids)} queries, k={args.k}")
    if "index_seconds" in info:
        print(
            f"indexed {info['files']} files / {info['chunks']} chunks in {info['index_seconds']} s"
        )
    print(
        f"{'mode':8} {'nDCG@10':>8} {'R@10':>7} {'R@100':>7} {'MRR@10':>7} "
        f"{'p50 ms':>7} {'p95 ms':>7}"
    )
    for mode, fig in results.items():
        print(
            f"{mode:8} {fig['ndcg@10']:8.4f} {fig['recall@10']:7.4f} {fig['recall@100']:7.4f} "
            f"{fig['mrr@10']:7.4f} {fig['p50_ms']:7.1f} {fig['p95_ms']:7.1f}"
        )
    write_json(
        args.json,
        {
            "machine": machine(),
            "dataset": dataset.name,
            "queries": len(query_ids),
            "k": args.k,
            "index": info,
            "results": results,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
