"""Score a run of the question set: nDCG@10 per query as semble computes it (chunk unit).

    python bench/questions/score.py RUN.jsonl [--json OUT.json] [--per-query OUT.jsonl]
                                    [--repo NAME ...]

The run file has one line per query, ``{"id": ..., "results": [{"path": ...}, ...]}``, best
first, paths relative to the repo. Every relevant file has gain 1; a target's rank is the first
result whose path is its path (or ends with "/" + it); ranks hit by one result count once. A
repo's score is the mean over its queries, the macro the mean over repos, and per category the
mean over repos of each repo's category mean: the shape ``bench/codesearch.py`` reads.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path
from statistics import mean

HERE = Path(__file__).resolve().parent
K = 10


def ndcg(results: list[str], relevant: list[str]) -> tuple[float, list[int | None]]:
    """nDCG@K of ranked result paths against the relevant paths, and each target's rank."""
    ranks: list[int | None] = []
    for target in relevant:
        ranks.append(
            next(
                (
                    at
                    for at, path in enumerate(results[:K], 1)
                    if path == target or path.endswith("/" + target)
                ),
                None,
            )
        )
    hit = sorted({rank for rank in ranks if rank is not None})
    dcg = sum(1 / math.log2(rank + 1) for rank in hit)
    ideal = sum(1 / math.log2(at + 1) for at in range(1, min(K, len(relevant)) + 1))
    return dcg / ideal, ranks


def main(argv: list[str] | None = None) -> int:
    """Score the run; print one line per repo and category; write the JSON files asked for."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--per-query", type=Path)
    parser.add_argument("--repo", action="append", default=[])
    args = parser.parse_args(argv)
    queries = [
        json.loads(line)
        for line in (HERE / "queries.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    runs = {}
    for line in args.run.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            runs[row["id"]] = [result["path"] for result in row["results"]]
    scored = []
    for query in queries:
        if args.repo and query["repo"] not in args.repo:
            continue
        relevant = [target["path"] for target in query["relevant"]]
        score, ranks = ndcg(runs.get(query["id"], []), relevant)
        scored.append(
            {
                **{key: query[key] for key in ("id", "repo", "language", "category")},
                "ndcg": score,
                "ranks": ranks,
                "n_relevant": len(relevant),
            }
        )
    per_repo: dict[str, list[float]] = defaultdict(list)
    by_category: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in scored:
        per_repo[row["repo"]].append(row["ndcg"])
        by_category[row["repo"]][row["category"]].append(row["ndcg"])
    result = {
        "run": str(args.run),
        "macro": mean(mean(scores) for scores in per_repo.values()),
        "per_repo": {repo: mean(scores) for repo, scores in per_repo.items()},
        "per_repo_by_category": {
            repo: {category: mean(s) for category, s in categories.items()}
            for repo, categories in by_category.items()
        },
    }
    for repo, score in result["per_repo"].items():
        categories = result["per_repo_by_category"][repo]
        shown = "  ".join(f"{category} {s:.3f}" for category, s in sorted(categories.items()))
        print(f"{repo:12} {score:.4f}   {shown}")
    print(f"macro        {result['macro']:.4f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if args.per_query:
        args.per_query.write_text(
            "".join(json.dumps(row) + "\n" for row in scored), encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
