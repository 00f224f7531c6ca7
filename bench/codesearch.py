"""Code-search quality: semble's benchmark on 7 repos rebuilt from PyPI/npm packages.

    bash /path/to/shared/eval/codesearch/fetch.sh --dest WORK/repos   # once (~107 MB)
    python bench/codesearch.py /path/to/shared/eval/codesearch --repos WORK/repos [--only zig]

For each repo in packages.json: index ``repos/<name>/<index_root>`` (code files only, the semble
protocol: an allow-list ``.indexignore`` next to the bench config), run the repo's queries with
k = 10, write the run file (one JSON line a query), then score it with the benchmark's own
``score.py`` (nDCG@10 exactly as semble computes it) and print its per-repo and per-category table.
Indexes are kept in the work folder and updated incrementally, so a re-run after a ranking-only
change only searches.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchlib import DEFAULT_WORK, bench_env

from semsearch.config import load_settings
from semsearch.index import Index

# semble's code extensions (its README: .md/.json/.yaml/.toml are not indexed).
_CODE_EXTENSIONS_TEXT = (
    "py js jsx ts tsx mjs cjs go rs java kt kts scala c h cc cpp cxx hpp hh hxx rb sh bash zsh "
    "zig swift cs php lua ex exs hs ml dart"
)
CODE_EXTENSIONS = _CODE_EXTENSIONS_TEXT.split()


def allow_list() -> str:
    """An ignore file that keeps only code files (folders stay walkable)."""
    return "*\n!*/\n" + "".join(f"!*.{ext}\n" for ext in CODE_EXTENSIONS)


def run_repo(
    package: dict[str, Any], repos: Path, queries: list[dict[str, Any]], work: Path, mode: str
) -> list[str]:
    """Index one repo and return its run lines."""
    env = bench_env(work)
    env["SS_INDEX_PATH"] = str(work / f"{package['name']}.db")
    (work / ".indexignore").write_text(allow_list(), encoding="utf-8")
    index = Index(load_settings(env))
    package_root = repos / package["name"]
    started = time.perf_counter()
    report = index.update([package_root / package["index_root"]])
    print(
        f"{package['name']}: {report.total('indexed')} files (re)indexed, "
        f"{report.total('chunks')} chunks, {time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    lines = []
    for query in queries:
        hits = index.search(query["query"], k=10, mode=mode)  # type: ignore[arg-type]
        results = [
            {
                "path": str(Path(h.path).relative_to(package_root)),
                "start_line": h.start_line,
                "end_line": h.end_line,
            }
            for h in hits
        ]
        lines.append(json.dumps({"id": query["id"], "results": results}))
    index.close()
    return lines


def main(argv: list[str] | None = None) -> int:
    """Index every repo, run its queries, score the run with the benchmark's score.py."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("benchmark", type=Path, help="the codesearch folder (packages.json, …)")
    parser.add_argument("--repos", type=Path, help="where fetch.sh put the repos")
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK / "codesearch")
    parser.add_argument("--mode", default="hybrid", choices=("hybrid", "vector", "bm25"))
    parser.add_argument("--only", help="comma-separated repo names")
    args = parser.parse_args(argv)
    repos = args.repos or args.benchmark / "repos"
    packages = json.loads((args.benchmark / "packages.json").read_text(encoding="utf-8"))
    queries = [
        json.loads(line)
        for line in (args.benchmark / "queries.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    only = set(args.only.split(",")) if args.only else None
    lines: list[str] = []
    for package in packages:
        if only is None or package["name"] in only:
            mine = [q for q in queries if q["repo"] == package["name"]]
            lines.extend(run_repo(package, repos, mine, args.work, args.mode))
    run_file = args.work / f"run-{args.mode}.jsonl"
    run_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    score = [sys.executable, str(args.benchmark / "score.py"), str(run_file)]
    if only and len(only) == 1:
        score += ["--repo", next(iter(only))]
    return subprocess.run(score, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
