"""Definitions first for name queries (issue 39): does a name typed alone rank its definition first?

    python bench/codesearch.py EVAL/codesearch EVAL/codebench-wide ...  # leaves the indexes
    python bench/names.py /tmp/semsearch-bench/codesearch --queries-out names.jsonl
    python bench/names.py --queries names.jsonl    # the same queries, after a change

The queries come from the code indexes ``codesearch.py`` leaves (``SOURCE/SET/code/REPO.db``),
the same for the same indexes: per repo, the names that ``lexical.definitions`` finds in exactly
one file, a source file (not one the ranking lowers as a test, example, fixture, benchmark,
vendored or generated file), and that 2 or more other files use as a word, most-used first.
Three sets: ``exact``, mixed-case names as typed (``JoinSet``); ``lower``, the same names
lower-cased (``joinset``), less those another defined name lower-cases to (``Request`` when
``request`` is defined too, as in httpx); ``method``, untyped JavaScript/TypeScript method names
(``lexical._METHOD``: ``handleClick(event) {``). Each query is searched with k = 10 on a copy of
its index under ``--work`` (made from SOURCE when missing: opening an index with a newer
semsearch rewrites its lexical columns, so SOURCE is only read) and scored by the rank of the
first hit in the defining file: MRR@10 and top-1, per set and per language (the repo's, from the
set's ``repos.json`` or ``packages.json`` under ``--eval``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path
from typing import Any

from benchlib import DEFAULT_WORK, REPO, bench_env, machine, write_json

from semsearch.config import load_settings
from semsearch.index import Index
from semsearch.search.ranking import _path_kinds
from semsearch.text import lexical

K = 10  # hits asked per query; MRR@10
SETS = ("exact", "lower", "method")
# The path kinds the ranking lowers whose files a user typing a name does not look for.
NOT_SOURCE_KINDS = frozenset({"test", "example", "fixture", "benchmark", "vendored", "generated"})
MIN_NAME_LENGTH = 4  # shorter names (`id`, `run`, `get`) are words of any file, not symbols
MIN_USING_FILES = 2  # files besides the definition that use the name: the uses it must beat
NAMES_PER_REPO = 20  # so no repo outweighs the others in a set
METHODS_PER_REPO = 40  # few repos have JS/TS: more of their methods for a sample of some size
JS_TS_EXTENSIONS = (".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".mts", ".cts")
_WORD = re.compile(r"[A-Za-z_$][\w$]*")  # a use of a name: the identifier as a whole word
# Lower-casing must change the name: `lower` asks the `exact` names lower-cased.
_MIXED_CASE = re.compile(r"(?=.*[A-Z])(?=.*[a-z])")
_METHOD = re.compile(lexical._METHOD, re.MULTILINE)


def is_source(rel: str) -> bool:
    """Whether a file is one the ranking does not lower as a test, example or the like."""
    return not any(label in NOT_SOURCE_KINDS for label, _, _ in _path_kinds(rel))


def repo_queries(db: Path) -> dict[str, list[tuple[str, str]]]:
    """The (name, defining file) pairs of each set for one index, most-used names first."""
    defined: dict[str, set[str]] = defaultdict(set)
    methods: dict[str, set[str]] = defaultdict(set)  # file -> the JS/TS methods it defines
    used: dict[str, set[str]] = defaultdict(set)
    with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as connection:
        rows = connection.execute(
            "SELECT f.rel, c.text FROM chunks c JOIN files f ON f.id = c.file_id"
        ).fetchall()
    for rel, text in rows:
        for name in lexical.definitions(text):
            defined[name].add(rel)
        if rel.endswith(JS_TS_EXTENSIONS):
            methods[rel].update(match.group("method") for match in _METHOD.finditer(text))
        for word in _WORD.findall(text):
            used[word].add(rel)
    single: dict[str, str] = {}  # name -> the one file defining it
    for name, rels in defined.items():
        if len(rels) != 1 or len(name) < MIN_NAME_LENGTH:
            continue
        (rel,) = rels
        if is_source(rel) and len(used[name] - rels) >= MIN_USING_FILES:
            single[name] = rel
    ordered = sorted(single, key=lambda name: (-len(used[name]), name))
    mixed = [name for name in ordered if _MIXED_CASE.match(name)][:NAMES_PER_REPO]
    method = [name for name in ordered if name in methods[single[name]]][:METHODS_PER_REPO]
    # A lower-cased query must stand for one name: with `Request` and `request` both defined,
    # `request` has two right answers, so it is not asked.
    folded = Counter(name.lower() for name in defined)
    return {
        "exact": [(name, single[name]) for name in mixed],
        "lower": [(name.lower(), single[name]) for name in mixed if folded[name.lower()] == 1],
        "method": [(name, single[name]) for name in method],
    }


def languages(eval_dir: Path) -> dict[tuple[str, str], str]:
    """(set, repo) -> the repo's language, from each set's repos.json or packages.json."""
    found: dict[tuple[str, str], str] = {}
    for meta in sorted([*eval_dir.glob("*/repos.json"), *eval_dir.glob("*/packages.json")]):
        for repo in json.loads(meta.read_text(encoding="utf-8")):
            found[meta.parent.name, repo["name"]] = repo.get("language", "unknown")
    return found


def generate(source: Path, eval_dir: Path) -> list[dict[str, Any]]:
    """Every index's queries, in a fixed order: by index path, then set, then rank of use."""
    language = languages(eval_dir)
    queries = []
    for db in sorted(source.glob("*/code/*.db")):
        index = db.relative_to(source).as_posix()
        benchmark, repo = db.parent.parent.name, db.stem
        for query_set, pairs in repo_queries(db).items():
            queries.extend(
                {
                    "set": query_set,
                    "repo": repo,
                    "language": language.get((benchmark, repo), "unknown"),
                    "index": index,
                    "query": query,
                    "expected": expected,
                }
                for query, expected in pairs
            )
    return queries


def copy_missing(indexes: Iterable[str], source: Path, work: Path) -> list[str]:
    """Copy into ``work`` each index it does not hold yet (SQLite's backup, read-only source);
    return those found in neither."""
    missing = []
    for index in sorted(set(indexes)):
        target = work / index
        original = source / index
        if target.exists():
            continue
        if not original.exists():
            missing.append(index)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".copying")
        partial.unlink(missing_ok=True)
        uri = f"{original.resolve().as_uri()}?mode=ro"
        with (
            closing(sqlite3.connect(uri, uri=True)) as reader,
            closing(sqlite3.connect(partial)) as writer,
        ):
            reader.backup(writer)
        os.replace(partial, target)
    return missing


def search(queries: list[dict[str, Any]], work: Path, mode: str) -> list[dict[str, Any]]:
    """Each query's rank of its defining file (None past k) and its top 3 files."""
    by_index: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for query in queries:
        by_index[query["index"]].append(query)
    results = []
    for index_path, group in sorted(by_index.items()):
        env = bench_env(work)
        env["SS_INDEX_PATH"] = str(work / index_path)
        index = Index(load_settings(env))
        try:
            for query in group:
                hits = index.search(query["query"], k=K, mode=mode)
                rank = next(
                    (n for n, hit in enumerate(hits, 1) if hit.rel == query["expected"]), None
                )
                results.append({**query, "rank": rank, "top": [hit.rel for hit in hits[:3]]})
        finally:
            index.close()
    return results


def figures(results: list[dict[str, Any]]) -> dict[str, float]:
    """n, MRR@10 and top-1 share of some results."""
    n = len(results)
    reciprocal = sum(1 / r["rank"] for r in results if r["rank"])
    top1 = sum(r["rank"] == 1 for r in results)
    return {"n": n, "mrr@10": reciprocal / n if n else 0.0, "top1": top1 / n if n else 0.0}


def score(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per set: the figures over all its queries and per language."""
    scores: dict[str, Any] = {}
    for set_name in SETS:
        mine = [r for r in results if r["set"] == set_name]
        if not mine:
            continue
        by_language: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for result in mine:
            by_language[result["language"]].append(result)
        scores[set_name] = {
            **figures(mine),
            "languages": {lang: figures(rs) for lang, rs in sorted(by_language.items())},
        }
    return scores


def table(scores: dict[str, Any]) -> str:
    """The figures as text: one line per set, then per language MRR@10 / top-1 (n) per set."""
    lines = [f"{'set':8} {'n':>5} {'MRR@10':>7} {'top-1':>7}"]
    for set_name, fig in scores.items():
        lines.append(f"{set_name:8} {fig['n']:5} {fig['mrr@10']:7.4f} {fig['top1']:7.4f}")
    langs = sorted({lang for fig in scores.values() for lang in fig["languages"]})
    lines.append("\nper language, MRR@10 / top-1 (n)")
    lines.append(f"{'language':12}" + "".join(f" {s:>20}" for s in scores))
    for lang in langs:
        cells = []
        for fig in scores.values():
            cell = fig["languages"].get(lang)
            text = f"{cell['mrr@10']:.3f} / {cell['top1']:.3f} ({cell['n']})" if cell else "-"
            cells.append(f" {text:>20}")
        lines.append(f"{lang:12}" + "".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Generate (or read) the name queries, search them on a copy of the indexes, print MRR@10."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "source",
        type=Path,
        nargs="?",
        default=DEFAULT_WORK / "codesearch",
        help="code indexes as codesearch.py leaves them, SET/code/REPO.db (only read)",
    )
    parser.add_argument(
        "--work", type=Path, default=DEFAULT_WORK / "names", help="the copies searched"
    )
    parser.add_argument("--queries", type=Path, metavar="PATH", help="read a saved query set")
    parser.add_argument("--queries-out", type=Path, metavar="PATH", help="save the query set")
    parser.add_argument(
        "--eval", type=Path, default=REPO.parent / "shared" / "eval", help="where repos.json are"
    )
    parser.add_argument("--sets", type=lambda s: s.split(","), default=list(SETS), help="a,b")
    parser.add_argument("--mode", default="hybrid", choices=("hybrid", "vector", "bm25"))
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if unknown := set(args.sets) - set(SETS):
        parser.error(f"unknown sets {sorted(unknown)}; choose from {', '.join(SETS)}")
    if args.work.resolve() == args.source.resolve():
        parser.error("--work must not be SOURCE: searching rewrites an index's lexical columns")
    started = time.perf_counter()
    if args.queries:
        lines = args.queries.read_text(encoding="utf-8").splitlines()
        queries = [json.loads(line) for line in lines if line.strip()]
    else:
        if not any(args.source.glob("*/code/*.db")):
            parser.error(f"no SET/code/REPO.db index under {args.source}")
        queries = generate(args.source, args.eval)
        print(
            f"{len(queries)} queries from {len({q['index'] for q in queries})} indexes "
            f"in {time.perf_counter() - started:.1f} s",
            file=sys.stderr,
        )
    if args.queries_out:
        args.queries_out.parent.mkdir(parents=True, exist_ok=True)
        args.queries_out.write_text(
            "".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8"
        )
    queries = [q for q in queries if q["set"] in args.sets]
    if missing := copy_missing((q["index"] for q in queries), args.source, args.work):
        parser.error(f"{', '.join(missing)}: in neither {args.work} nor {args.source}")
    started = time.perf_counter()
    results = search(queries, args.work, args.mode)
    seconds = time.perf_counter() - started
    scores = score(results)
    print(f"{len(results)} searches ({args.mode}, k={K}) in {seconds:.1f} s on {args.work}")
    print(table(scores))
    write_json(
        args.json,
        {
            "machine": machine(),
            "source": str(args.source),
            "queries": str(args.queries) if args.queries else None,
            "mode": args.mode,
            "k": K,
            "search_seconds": round(seconds, 1),
            "sets": scores,
            "per_query": results,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
