"""Model time on a tree of many checkouts (issue 38): texts the model embeds, index wall time.

    python bench/copies.py SOURCE [--copies 4] [--code LABEL=DIR]... [--work W] [--json PATH]

Copies the tree SOURCE (its ``.git`` left out) ``--copies`` times as sibling folders
``copy1 … copyN`` and edits the last one a little (a line appended to each of its three first
code files, by path), as checkouts of one repository at nearby revisions look. For each
``--code`` (a checkout of semsearch, put first on the child's PYTHONPATH; default: this one),
in a fresh index: ``semsearch add`` the copies, ``semsearch index --json`` them in one run (wall
time and peak RSS of that process), then add one more unedited copy and index again (a checkout
made after the others were indexed). Reports the chunks written, the distinct chunk texts in
the index, and what the model was given: ``chunksEmbedded`` chunk texts and ``pathsEmbedded``
rel paths.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchlib import DEFAULT_WORK, RssSampler, child_env, machine, write_json

CODE_SUFFIXES = (".py", ".js", ".ts", ".go", ".rs", ".c", ".h", ".java", ".rb", ".sh", ".zig")


def make_copies(source: Path, tree: Path, count: int) -> list[Path]:
    """``count`` copies of ``source`` under ``tree``, the last one edited; plus one spare copy
    (``copy{count + 1}``, unedited) for the later run. Returns all of them."""
    if tree.exists():
        shutil.rmtree(tree)
    copies = []
    for n in range(1, count + 2):
        target = tree / f"copy{n}"
        shutil.copytree(source, target, ignore=shutil.ignore_patterns(".git"))
        copies.append(target)
    edited = sorted(p for p in copies[count - 1].rglob("*") if p.suffix in CODE_SUFFIXES)[:3]
    for path in edited:
        with path.open("a", encoding="utf-8") as handle:
            handle.write("\n# edited in this checkout only\n")
    return copies


def semsearch(code: Path, work: Path, *args: str) -> tuple[dict[str, Any], float, float]:
    """Run ``python -m semsearch ARGS`` with ``code`` first on the path: its JSON output (when
    it prints one), wall seconds and peak RSS in MiB."""
    env = child_env(work)
    env["PYTHONPATH"] = str(code)
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "semsearch", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    sampler = RssSampler(proc.pid)
    out, _ = proc.communicate()
    wall = time.monotonic() - start
    sampler.stop()
    if proc.returncode:
        raise SystemExit(f"semsearch {' '.join(args)} failed ({proc.returncode}) with {code}")
    payload = json.loads(out) if out.startswith("{") else {}
    return payload, wall, sampler.peak_mib()


def distinct_texts(index: Path) -> tuple[int, int]:
    """(chunks, distinct chunk texts) in a SQLite index."""
    conn = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT count(*), count(DISTINCT text_hash) FROM chunks").fetchone()
    finally:
        conn.close()
    return int(row[0]), int(row[1])


def run_code(label: str, code: Path, copies: list[Path], work: Path) -> dict[str, Any]:
    """Index the copies with one checkout of semsearch, then the spare copy in a later run."""
    if work.exists():
        shutil.rmtree(work)
    semsearch(code, work, "add", *map(str, copies[:-1]))
    first, wall, rss = semsearch(code, work, "index", "--json")
    chunks, distinct = distinct_texts(work / "index.db")
    semsearch(code, work, "add", str(copies[-1]))
    later, later_wall, _ = semsearch(code, work, "index", "--json")
    row = {
        "code": label,
        "files": first["filesIndexed"],
        "chunks": chunks,
        "distinctTexts": distinct,
        "chunksEmbedded": first["chunksEmbedded"],
        "pathsEmbedded": first["pathsEmbedded"],
        "seconds": round(wall, 1),
        "peakRssMiB": round(rss),
        "laterChunksEmbedded": later["chunksEmbedded"],
        "laterPathsEmbedded": later["pathsEmbedded"],
        "laterSeconds": round(later_wall, 1),
    }
    print(json.dumps(row), flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", type=Path, help="the tree to copy (a repository checkout)")
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument(
        "--code", action="append", default=[], help="LABEL=DIR: a semsearch checkout to run"
    )
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK / "copies")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    codes = [tuple(spec.split("=", 1)) for spec in args.code] or [
        ("this", str(Path(__file__).resolve().parent.parent))
    ]
    copies = make_copies(args.source.resolve(), args.work / "tree", args.copies)
    rows = [run_code(label, Path(code), copies, args.work / label) for label, code in codes]
    facts = machine()
    print(json.dumps(facts))
    write_json(args.json, {"machine": facts, "copies": args.copies, "runs": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
