"""Code-search quality: semble's benchmark, the 7-repo set and the 39-repo codebench-wide set.

    bash /path/to/shared/eval/codesearch/fetch.sh --dest WORK/repos7      # once (~107 MB)
    bash /path/to/shared/eval/codebench-wide/unpack.sh WORK/repos39      # once (seconds)
    python bench/codesearch.py EVAL/codesearch EVAL/codebench-wide \
        --repos WORK/repos7 --repos WORK/repos39 [--only zig,tokio] [--files all]
    python bench/codesearch.py bench/questions --repos WORK/questions-repos --files all

``bench/questions`` is a small set of our own: questions ("how does X work") about packages with
their docs, changelog and tests beside the code (``bench/questions/repos.json`` says where each
tree comes from), scored by its own ``score.py`` the same way.

Each positional argument is a benchmark folder (``packages.json`` or ``repos.json``,
``queries.jsonl``, ``score.py``); ``--repos`` gives, in the same order, where its trees are
(default ``<benchmark>/repos``). For each repo: index ``<repos>/<name>/<index_root>`` (``--files
code``, the default, is semble's protocol: an allow-list ``.indexignore`` that keeps code files
only; ``--files all`` indexes every file as a user would, starting from a copy of the code-only
index when there is one), run the repo's queries with k = 10,
write the run file, score it with that benchmark's own ``score.py`` (nDCG@10 as semble computes
it) and print its tables; then one summary over all sets: mean over repos, per category (mean over
repos of per-repo category means) and per language. Indexes are kept in the work folder and
updated incrementally, so a re-run after a ranking-only change only searches; after a chunking
change, ``--rechunk`` on a copy of the work folder chunks every file afresh and embeds only the
chunk texts that changed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from statistics import mean
from typing import Any

from benchlib import DEFAULT_WORK, bench_env, machine

from semsearch.config import load_settings
from semsearch.index import Index
from semsearch.indexing.pipeline import Indexer

# semble's code extensions (its README: .md/.json/.yaml/.toml are not indexed).
_CODE_EXTENSIONS_TEXT = (
    "py js jsx ts tsx mjs cjs go rs java kt kts scala sbt c h cc cpp cxx hpp hh hxx rb sh bash "
    "zsh zig swift cs php lua ex exs hs ml dart sql"
)
CODE_EXTENSIONS = _CODE_EXTENSIONS_TEXT.split()
CATEGORIES = ("architecture", "semantic", "symbol", "docs")  # docs: the question set's


def allow_list() -> str:
    """An ignore file that keeps only code files (folders stay walkable)."""
    return "*\n!*/\n" + "".join(f"!*.{ext}\n" for ext in CODE_EXTENSIONS)


def run_repo(
    repo: dict[str, Any], trees: Path, queries: list[dict[str, Any]], work: Path, args: Any
) -> list[str]:
    """Index one repo (incrementally) and return its run lines."""
    env = bench_env(work)
    env["SS_INDEX_PATH"] = str(work / f"{repo['name']}.db")
    seed = work.parent / "code" / f"{repo['name']}.db"
    if args.files == "all" and not (work / f"{repo['name']}.db").exists() and seed.exists():
        # The code files' chunks are the same: start from that index, index only the rest.
        with sqlite3.connect(seed) as source, sqlite3.connect(work / f"{repo['name']}.db") as copy:
            source.backup(copy)
    ignore = work / ".indexignore"
    if args.files == "code":
        ignore.write_text(allow_list(), encoding="utf-8")
    else:
        ignore.write_text("", encoding="utf-8")
    index = Index(load_settings(env))
    root = trees / repo["name"]
    if not args.no_update:
        started = time.perf_counter()
        with _rechunking(args.rechunk):
            report = index.update([root / repo["index_root"]])
        if report.total("indexed"):
            print(
                f"{repo['name']}: {report.total('indexed')} files (re)indexed, "
                f"{report.total('chunks')} chunks, {time.perf_counter() - started:.1f} s",
                file=sys.stderr,
            )
    lines = []
    for query in queries:
        hits = index.search(query["query"], k=10, mode=args.mode)
        results = [
            {
                "path": str(Path(h.path).relative_to(root)),
                "start_line": h.start_line,
                "end_line": h.end_line,
            }
            for h in hits
        ]
        lines.append(json.dumps({"id": query["id"], "results": results}))
    index.close()
    return lines


@contextlib.contextmanager
def _rechunking(on: bool) -> Iterator[None]:
    """With `on`, the indexer chunks every file afresh (as ``index --force`` does) but keeps
    the stored vector of every chunk text it already has: a chunking change is measured at
    the cost of embedding only the texts it changes."""
    if not on:
        yield
        return
    process = Indexer._process

    def forced(self: Indexer, run: Any, name: str, force: bool, max_files: int | None) -> bool:
        return process(self, run, name, True, max_files)

    Indexer._process = forced  # type: ignore[method-assign]
    try:
        yield
    finally:
        Indexer._process = process  # type: ignore[method-assign]


def run_set(benchmark: Path, trees: Path, args: Any) -> dict[str, Any] | None:
    """Index and query every selected repo of one benchmark; score it; return score.py's JSON."""
    meta = benchmark / "packages.json"
    if not meta.exists():
        meta = benchmark / "repos.json"
    repos = json.loads(meta.read_text(encoding="utf-8"))
    queries = [
        json.loads(line)
        for line in (benchmark / "queries.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    chosen = [r for r in repos if args.only is None or r["name"] in args.only]
    if not chosen:
        return None
    work = args.work / benchmark.name / args.files
    lines: list[str] = []
    for repo in chosen:
        mine = [q for q in queries if q["repo"] == repo["name"]]
        lines.extend(run_repo(repo, trees, mine, work, args))
    run_file = work / f"run-{args.mode}.jsonl"
    run_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    scores = work / f"score-{args.mode}.json"
    command = [sys.executable, str(benchmark / "score.py"), str(run_file), "--json", str(scores)]
    command += ["--per-query", str(work / f"per-query-{args.mode}.jsonl")]
    for repo in chosen:
        command += ["--repo", repo["name"]]
    if args.compare:
        command.append("--compare")
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    if not args.quiet:
        print(f"== {benchmark.name} ({args.files} files, {args.mode})\n{output}")
    result: dict[str, Any] = json.loads(scores.read_text(encoding="utf-8"))
    result["language"] = {r["name"]: r["language"] for r in chosen}
    return result


def summary(results: list[dict[str, Any]]) -> str:
    """Mean over all repos of all sets, per category and per language, as score.py counts them."""
    per_repo: dict[str, float] = {}
    by_category: dict[str, list[float]] = defaultdict(list)
    by_language: dict[str, list[float]] = defaultdict(list)
    for result in results:
        for repo, score in result["per_repo"].items():
            per_repo[repo] = score
            by_language[result["language"][repo]].append(score)
            for category, value in result["per_repo_by_category"][repo].items():
                if value == value:  # score.py writes NaN for a category the repo has no query of
                    by_category[category].append(value)
    sets = "  ".join(f"{Path(r['run']).parent.parent.name} {r['macro']:.4f}" for r in results)
    lines = [f"ALL {len(per_repo)} repos: mean {mean(per_repo.values()):.4f}   ({sets})"]
    lines.append(
        "  category: "
        + "  ".join(f"{c} {mean(by_category[c]):.4f}" for c in CATEGORIES if by_category[c])
    )
    lines.append(
        "  language: "
        + "  ".join(f"{lang} {mean(v):.3f}" for lang, v in sorted(by_language.items()))
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Index every repo of every set, run its queries, score each set and all of them together."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("benchmarks", type=Path, nargs="+", help="benchmark folders")
    parser.add_argument(
        "--repos", type=Path, action="append", default=[], help="trees, per benchmark in order"
    )
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK / "codesearch")
    parser.add_argument("--mode", default="hybrid", choices=("hybrid", "vector", "bm25"))
    parser.add_argument("--files", default="code", choices=("code", "all"))
    parser.add_argument("--only", type=lambda s: set(s.split(",")), help="repo names, a,b,c")
    parser.add_argument("--no-update", action="store_true", help="search the indexes as they are")
    parser.add_argument(
        "--rechunk",
        action="store_true",
        help="chunk every file afresh, keeping the vectors of unchanged chunk texts",
    )
    parser.add_argument("--compare", action="store_true", help="published figures per repo")
    parser.add_argument("--quiet", action="store_true", help="only the summary")
    args = parser.parse_args(argv)
    if args.rechunk and args.no_update:
        parser.error("--rechunk chunks the files again: it cannot go with --no-update")
    if len(args.repos) > len(args.benchmarks):
        parser.error("more --repos than benchmarks")
    results = []
    for position, benchmark in enumerate(args.benchmarks):
        trees = args.repos[position] if position < len(args.repos) else benchmark / "repos"
        result = run_set(benchmark, trees, args)
        if result is not None:
            results.append(result)
    if not results:
        parser.error("no repo selected")
    print(summary(results))
    print(f"machine: {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
