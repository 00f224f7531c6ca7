"""Indexing throughput and memory: index a folder from scratch in a child process.

    python bench/throughput.py CORPUS_DIR [--json PATH] [--no-raw] [--variant fp32|int8|auto]
                               [--raw-variants fp32,int8]

Reports wall time as a user sees it (interpreter start, imports, model load, index run), files,
chunks, model tokens (special tokens included, clipped to the 256-token window), chunks/s and
tokens/s of the index run, peak RSS of the child (``ru_maxrss`` from ``wait4``, plus a 0.1 s
VmRSS sample curve), index size on disk per chunk, and the raw model speed: tokens/s of
onnxruntime alone on a sample of the same chunk texts, sorted by length, at the best of batch
sizes 4-32 and the pipeline's own token budget (``budget``), run as indexing runs the model (one
batch per worker thread at once, each single-threaded).
``efficiency`` = pipeline tokens/s ÷ raw tokens/s.

``--variant`` picks the packaged model variant the index run uses (default: the embedder's CPU
rule). ``--raw-variants fp32,int8`` measures the raw speed of each listed variant side by side,
interleaved batch size by batch size, best of two passes each; ``efficiency`` stays relative to
the variant that indexed.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

from benchlib import (
    DEFAULT_WORK,
    BusyMeter,
    RssSampler,
    bench_env,
    child_env,
    machine,
    wait_for_quiet,
    write_json,
)

RAW_SAMPLE = 384
RAW_BATCHES = (4, 8, 16, 32)
RAW_PASSES = 2
WINDOW = 256


def child(corpus: Path, out: Path, variant: str) -> int:
    """Runs in the child: import, load the model, index the corpus, write timings as JSON."""
    started = time.perf_counter()
    from semsearch.process import configure_process

    configure_process()  # as `semsearch index` runs
    from semsearch.config import load_settings
    from semsearch.index import Index
    from semsearch.model.embedder import OnnxEmbedder

    imported = time.perf_counter()
    settings = load_settings(os.environ)
    embedder = OnnxEmbedder(settings.model_dir, variant=variant)
    embedder.embed(["load the model"])
    loaded = time.perf_counter()
    index = Index(settings, embedder)
    report = index.update([corpus.resolve()])
    index.close()
    done = time.perf_counter()
    payload = {
        "import_s": imported - started,
        "model_load_s": loaded - imported,
        "update_s": done - loaded,
        "files": report.total("indexed"),
        "chunks": report.total("chunks"),
        "skipped": report.total("skipped"),
        "variant": embedder.variant,
        "model_id": embedder.model_id,
        "errors": sum(len(f.problems) for f in report.folders),
    }
    out.write_text(json.dumps(payload), encoding="utf-8")
    return 0


def run_child(corpus: Path, work: Path, variant: str) -> dict[str, Any]:
    """Index in a fresh process; wall time, rusage peak RSS and sampled RSS."""
    out = work / "child.json"
    command = [sys.executable, __file__, "--child", str(corpus), "--child-out", str(out)]
    command += ["--variant", variant]
    with BusyMeter() as meter:
        started = time.perf_counter()
        proc = subprocess.Popen(command, env=child_env(work), cwd=work)
        sampler = RssSampler(proc.pid)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        sampler.stop()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"the index child failed with exit code {proc.returncode}")
    figures = json.loads(out.read_text(encoding="utf-8"))
    cpu = usage.ru_utime + usage.ru_stime
    figures.update(
        wall_s=wall,
        child_cpu_s=cpu,
        peak_rss_mib=usage.ru_maxrss / 1024,
        sampled_peak_rss_mib=sampler.peak_mib(),
        rss_curve_mib=[
            round(kib / 1024) for _, kib in sampler.samples[:: max(1, len(sampler.samples) // 40)]
        ],
        other_load=round(meter.foreign_share(cpu), 3),
    )
    return figures


def stored_chunks(index_path: Path) -> tuple[list[str], int]:
    """Every chunk text in the index, through the store's API, and the index's bytes on disk
    (measured once the store is closed, so no WAL/SHM files of the reader are counted)."""
    from semsearch.store.sqlite.store import SqliteStore

    store = SqliteStore(index_path)
    try:
        ids = [int(i) for i in store.chunk_ids()]
        texts = [
            row.text
            for start in range(0, len(ids), 500)
            for row in store.chunks(ids[start : start + 500])
        ]
    finally:
        store.close()
    return texts, store.size_bytes()


def token_ids(texts: list[str]) -> list[list[int]]:
    """Model token ids with [CLS]/[SEP], clipped to the window as the embedder does."""
    from semsearch.model.embedder import load_tokenizer

    path = Path(str(resources.files("semsearch") / "data" / "all-MiniLM-L6-v2" / "tokenizer.json"))
    tokenizer = load_tokenizer(path)
    ids = [enc.ids for enc in tokenizer.encode_batch(texts, add_special_tokens=True)]
    return [x if len(x) <= WINDOW else [*x[: WINDOW - 1], x[-1]] for x in ids]


def raw_model_speed(
    ids: list[list[int]], settings_env: dict[str, str], variants: list[str]
) -> dict[str, dict[str, Any]]:
    """Tokens/s of session.run alone on length-sorted batches of a sample, per variant and batch
    size, run as indexing runs them (the indexing session, one batch per worker thread at once);
    the variants take turns at each batch size so they see the same machine."""
    from semsearch.config import load_settings
    from semsearch.model.embedder import OnnxEmbedder, model_inputs
    from semsearch.model.run import batches, indexing_workers

    model_dir = load_settings(settings_env).model_dir
    embedders = {v: OnnxEmbedder(model_dir, variant=v) for v in variants}
    sessions = {v: e._load(indexing=True) for v, e in embedders.items()}
    workers = indexing_workers(os.cpu_count() or 1)
    sample = sorted(random.Random(0).sample(ids, min(RAW_SAMPLE, len(ids))), key=len)
    tokens = sum(len(x) for x in sample)
    order, lengths = list(range(len(sample))), [len(x) for x in sample]
    speeds: dict[str, dict[int | str, float]] = {v: {} for v in variants}
    shapes: dict[int | str, list[list[list[int]]]] = {
        size: [sample[start : start + size] for start in range(0, len(sample), size)]
        for size in RAW_BATCHES
    }
    for size in [*shapes, "budget"]:
        for _ in range(RAW_PASSES):
            for variant, session in sessions.items():
                if size == "budget":  # the variant's own token budget
                    groups = batches(order, lengths, embedders[variant].batch_tokens)
                    shapes[size] = [[sample[i] for i in group] for group in groups]
                feeds = [model_inputs(session, ids)[0] for ids in shapes[size]]
                session.run(None, feeds[0])
                wait_for_quiet(timeout=20)
                started = time.perf_counter()
                with ThreadPoolExecutor(max_workers=workers) as pool:
                    list(pool.map(functools.partial(session.run, None), feeds[::-1]))
                speed = tokens / (time.perf_counter() - started)
                speeds[variant][size] = max(speeds[variant].get(size, 0.0), speed)
    figures = {}
    for variant, by_batch in speeds.items():
        best = max(by_batch, key=lambda s: by_batch[s])
        figures[variant] = {
            "raw_tokens_per_s": by_batch[best],
            "raw_best_batch": best,
            "raw_by_batch": {k: round(v) for k, v in by_batch.items()},
            "raw_sample": len(sample),
            "raw_workers": workers,
        }
    return figures


def main(argv: list[str] | None = None) -> int:
    """Index CORPUS_DIR from scratch and print the throughput figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument(
        "--work", type=Path, help="work folder (default: under /tmp/semsearch-bench)"
    )
    parser.add_argument("--no-raw", action="store_true", help="skip the raw model measurement")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument(
        "--variant", default="auto", choices=("auto", "fp32", "int8"), help="model variant"
    )
    parser.add_argument(
        "--raw-variants", metavar="LIST", help="raw speed of these variants (e.g. fp32,int8)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.corpus, args.child_out, args.variant)
    corpus = args.corpus.resolve()
    work = (args.work or DEFAULT_WORK / f"throughput-{corpus.name}").resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    corpus_bytes = sum(p.stat().st_size for p in corpus.rglob("*") if p.is_file())
    wait_for_quiet()
    fig = run_child(corpus, work, args.variant)
    index_path = Path(bench_env(work)["SS_INDEX_PATH"])
    texts, stored_bytes = stored_chunks(index_path)
    ids = token_ids(texts)
    fig.update(
        corpus_mb=corpus_bytes / 1e6,
        tokens=sum(len(x) for x in ids),
        index_bytes=stored_bytes,
    )
    fig["chunks_per_s"] = fig["chunks"] / fig["update_s"]
    fig["tokens_per_s"] = fig["tokens"] / fig["update_s"]
    fig["bytes_per_chunk"] = fig["index_bytes"] / max(fig["chunks"], 1)
    fig["index_breakdown"] = table_sizes(index_path)
    if not args.no_raw:
        listed = args.raw_variants.split(",") if args.raw_variants else []
        variants = list(dict.fromkeys([fig["variant"] or "auto", *listed]))
        raw = raw_model_speed(ids, bench_env(work), variants)
        fig.update(raw[variants[0]])
        fig["efficiency"] = fig["tokens_per_s"] / fig["raw_tokens_per_s"]
        if len(raw) > 1:
            fig["raw_by_variant"] = raw
    report(corpus, fig)
    write_json(args.json, {"machine": machine(), "corpus": str(corpus), **fig})
    return 0


def table_sizes(index_path: Path) -> dict[str, int]:
    """Bytes per table/index (SQLite's dbstat), read-only; {} when dbstat is unavailable."""
    conn = sqlite3.connect(f"file:{index_path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    except sqlite3.Error:
        return {}
    finally:
        conn.close()
    return {name: int(size) for name, size in sorted(rows, key=lambda r: -r[1])}


def report(corpus: Path, fig: dict[str, Any]) -> None:
    """Print the figures, one per line."""
    print(f"corpus            {corpus}  ({fig['corpus_mb']:.2f} MB)")
    print(f"model             {fig['model_id']} (variant {fig['variant']})")
    print(f"files / chunks    {fig['files']} / {fig['chunks']}  ({fig['tokens']:,} model tokens)")
    print(
        f"wall (user view)  {fig['wall_s']:.1f} s  = import {fig['import_s']:.2f} + model "
        f"{fig['model_load_s']:.2f} + index {fig['update_s']:.1f} (+ interpreter start)"
    )
    print(
        f"pipeline          {fig['chunks_per_s']:.1f} chunks/s, {fig['tokens_per_s']:,.0f} tokens/s"
    )
    if "raw_tokens_per_s" in fig:
        print(
            f"raw model         {fig['raw_tokens_per_s']:,.0f} tokens/s "
            f"(batch {fig['raw_best_batch']}, {fig['raw_workers']} at once; "
            f"{fig['raw_by_batch']})"
        )
        print(f"efficiency        {fig['efficiency']:.2f}")
    for variant, raw in fig.get("raw_by_variant", {}).items():
        print(
            f"raw {variant:<14}{raw['raw_tokens_per_s']:,.0f} tokens/s "
            f"(batch {raw['raw_best_batch']}; {raw['raw_by_batch']})"
        )
    print(
        f"peak RSS          {fig['peak_rss_mib']:.0f} MiB "
        f"(sampled {fig['sampled_peak_rss_mib']:.0f})"
    )
    print(
        f"index on disk     {fig['index_bytes'] / 1e6:.2f} MB, "
        f"{fig['bytes_per_chunk']:,.0f} B/chunk"
    )
    print(f"other load        {fig['other_load']:.0%} of the machine used by other processes")


if __name__ == "__main__":
    sys.exit(main())
