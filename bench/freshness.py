"""MCP freshness check cost: ``Index.pending_work`` on a 10,000-file folder with nothing changed.

Run from the repo root: ``PYTHONPATH=. python bench/freshness.py`` (work files in
/tmp/fresh10k). The hash embedder stands in for the model: only the check is timed, not indexing.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import semsearch
from semsearch.embedder import HashEmbedder

BASE = Path("/tmp/fresh10k/work")
FILES = 10_000
RUNS = 7


def make_tree(tree: Path) -> None:
    """FILES small Python files in folders of 100."""
    for n in range(FILES):
        folder = tree / f"pkg{n // 100:03}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod{n:05}.py").write_text(f"def f{n}(x):\n    return x + {n}\n")


def main() -> None:
    """Index the tree once, then time the check that finds nothing to do."""
    tree = BASE / "tree"
    if not tree.exists():
        make_tree(tree)
    env = {
        "HOME": str(BASE),
        "XDG_CONFIG_HOME": str(BASE / "cfg"),
        "XDG_DATA_HOME": str(BASE / "data"),
    }
    index = semsearch.Index(semsearch.load_settings(env), embedder=HashEmbedder())
    started = time.perf_counter()
    index.update([tree])
    print(f"index {time.perf_counter() - started:.1f} s")
    times = []
    work = -1
    for _ in range(RUNS):
        started = time.perf_counter()
        work = index.pending_work([tree])
        times.append(time.perf_counter() - started)
    runs = [round(t * 1000) for t in times]
    print(f"pending_work {work}  median {statistics.median(times) * 1000:.1f} ms  runs {runs}")
    index.close()


if __name__ == "__main__":
    main()
