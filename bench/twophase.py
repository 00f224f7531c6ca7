"""Two-phase indexing (issue 12): how soon a fresh folder is searchable by words, and what an
edit or a branch change costs in embedded chunks.

    python bench/twophase.py CORPUS_DIR [--json PATH]

Part 1 indexes a copy of the corpus from scratch in a child process, as ``semsearch index`` does
(the model loads inside the run) and reports when the first pass ended (the last file event:
every file is then committed with its text and FTS terms) as a fraction of the run's wall time,
and the child's peak RSS. Part 2, in this process, edits one line in the middle of the corpus's
longest file, and then changes 5 % of the lines of the whole copy (a synthetic branch switch:
hunks of 10 consecutive lines rewritten at random places, seed 0, as a diff between branches
looks), and counts ``chunksEmbedded`` of each run against the chunks that held a changed line
before the change (``chunks_touched``: what any chunking has to embed again).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchlib import DEFAULT_WORK, child_env, machine, write_json


def child(corpus: Path, out: Path) -> int:
    """Runs in the child: index the corpus from scratch; times of the first pass and the run."""
    from semsearch.process import configure_process

    configure_process()
    from semsearch.config import load_settings
    from semsearch.index import Index
    from semsearch.indexing.pipeline import FileEvent

    last_event = [0.0]

    def on_event(event: FileEvent) -> None:
        if event.action != "embedded":  # a first-pass event: that file is committed
            last_event[0] = time.perf_counter()

    index = Index(load_settings(os.environ))
    started = time.perf_counter()
    report = index.update([corpus.resolve()], on_event=on_event)
    done = time.perf_counter()
    index.close()
    payload = {
        "first_pass_s": last_event[0] - started,
        "update_s": done - started,
        "chunks": report.total("chunks"),
        "embedded": report.chunks_embedded,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    out.write_text(json.dumps(payload), encoding="utf-8")
    return 0


def index_json(work: Path, folder: Path) -> dict[str, Any]:
    """``semsearch index --json FOLDER`` in a child, as a user runs it."""
    command = [sys.executable, "-m", "semsearch", "index", "--json", str(folder)]
    done = subprocess.run(command, env=child_env(work), cwd=work, capture_output=True, text=True)
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def text_files(root: Path) -> list[Path]:
    suffixes = {".py", ".rst", ".md", ".txt", ".cfg", ".toml", ".in"}
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in suffixes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.corpus, args.child_out)
    work = DEFAULT_WORK / "twophase"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    copy = work / args.corpus.name
    shutil.copytree(args.corpus, copy)
    out = work / "child.json"
    command = [sys.executable, __file__, "--child", str(copy), "--child-out", str(out)]
    subprocess.run(command, env=child_env(work), cwd=work, check=True)
    fresh = json.loads(out.read_text(encoding="utf-8"))
    longest = max(text_files(copy), key=lambda p: len(p.read_text(errors="replace").splitlines()))
    lines = longest.read_text(errors="replace").splitlines()
    longest_lines = len(lines)
    lines[len(lines) // 2] += "  # edited"
    longest.write_text("\n".join(lines) + "\n")
    edit = index_json(work, copy)
    hunks = branch_change(text_files(copy), share=0.05, hunk=10)
    touched = touched_chunks(work / "index.db", copy, hunks)
    branch = index_json(work, copy)
    changed, total = sum(len(lines) for lines in hunks.values()), count_lines(text_files(copy))
    figures = {
        "machine": machine(),
        "fresh": fresh,
        "searchable_fraction": fresh["first_pass_s"] / fresh["update_s"],
        "edit": {"file": longest.name, "lines": longest_lines, **_counts(edit)},
        "branch": {
            "lines_changed": changed,
            "lines": total,
            "chunks_touched": touched,
            **_counts(branch),
            "embedded_per_touched": branch["chunksEmbedded"] / max(touched, 1),
        },
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        write_json(args.json, figures)
    return 0


def branch_change(paths: list[Path], share: float, hunk: int) -> dict[Path, set[int]]:
    """Rewrite ``share`` of all lines in hunks of ``hunk`` lines at random places (seed 0);
    returns the changed line numbers (1-based) of each changed file."""
    texts = {p: p.read_text(errors="replace").splitlines() for p in paths}
    places = [(p, n) for p, lines in texts.items() for n in range(0, len(lines), hunk)]
    total = sum(len(lines) for lines in texts.values())
    chosen = random.Random(0).sample(places, round(total * share / hunk))
    changed: dict[Path, set[int]] = {}
    for path, start in chosen:
        lines = texts[path]
        for n in range(start, min(start + hunk, len(lines))):
            lines[n] = f"# branch change {n}: " + lines[n]
            changed.setdefault(path, set()).add(n + 1)
    for path, lines in texts.items():
        path.write_text("\n".join(lines) + "\n")
    return changed


def count_lines(paths: list[Path]) -> int:
    return sum(len(p.read_text(errors="replace").splitlines()) for p in paths)


def touched_chunks(db: Path, folder: Path, changed: dict[Path, set[int]]) -> int:
    """Stored chunks that hold a changed line: what any chunking has to embed again (the
    figure's "chunks whose text changed")."""
    conn = sqlite3.connect(db)
    touched = 0
    for path, lines in changed.items():
        rows = conn.execute(
            "SELECT c.start_line, c.end_line FROM chunks c JOIN files f ON f.id = c.file_id"
            " WHERE f.rel = ?",
            (path.relative_to(folder).as_posix(),),
        ).fetchall()
        touched += sum(1 for start, end in rows if any(start <= n <= end for n in lines))
    conn.close()
    return touched


def _counts(summary: dict[str, Any]) -> dict[str, Any]:
    keys = ("filesIndexed", "chunksWritten", "chunksEmbedded", "seconds")
    return {key: summary[key] for key in keys}


if __name__ == "__main__":
    raise SystemExit(main())
