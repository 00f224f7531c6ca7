"""MCP freshness check cost on a 10,000-file folder with nothing changed (issue 12).

Times, after indexing the folder once: the full check ``Index.pending_work`` (what the server
ran before every ``search`` and ``gather``), then the check as the server runs it now,
``Index.freshen`` (the change watcher, and the full check only when something may have
changed): its first call, which starts the watcher, then many calls with nothing changed. Last,
one file is saved and the next call's cost and result are shown (a full check and an inline
update).

Run from the repo root: ``PYTHONPATH=. python bench/freshness.py`` (work files in
/tmp/fresh10k; ``--git`` makes the folder a git work tree, listed with ``git ls-files``). The
hash embedder stands in for the model: only the check is timed, not indexing.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import semsearch
from semsearch.files.changes import ChangeMonitor
from semsearch.model.embedder import HashEmbedder

BASE = Path("/tmp/fresh10k/work")
FILES = 10_000


def make_tree(tree: Path) -> None:
    """FILES small Python files in folders of 100."""
    for n in range(FILES):
        folder = tree / f"pkg{n // 100:03}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod{n:05}.py").write_text(f"def f{n}(x):\n    return x + {n}\n")


def make_repo(tree: Path) -> None:
    """The tree as a git work tree with everything committed."""
    make_tree(tree)
    identity = ["-c", "user.name=b", "-c", "user.email=b@b", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "tree"]):
        subprocess.run(["git", *identity, "-C", str(tree), *args], check=True)


def timed(call: Callable[[], object], runs: int) -> list[float]:
    """Milliseconds of each of ``runs`` calls."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def summary(name: str, times: list[float]) -> str:
    ordered = sorted(times)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return (
        f"{name}: median {statistics.median(times):.3f} ms  p90 {p90:.3f} ms  "
        f"min {ordered[0]:.3f}  max {ordered[-1]:.3f}  ({len(times)} calls)"
    )


def main() -> None:
    """Index the tree once, then time the full check and the server's check."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full-runs", type=int, default=15, help="full checks timed")
    parser.add_argument("--runs", type=int, default=500, help="server checks timed")
    parser.add_argument("--git", action="store_true", help="a git work tree, not a plain folder")
    args = parser.parse_args()
    base = BASE / "git" if args.git else BASE
    tree = base / "tree"
    if not tree.exists():
        (make_repo if args.git else make_tree)(tree)
    env = {
        "HOME": str(base),
        "XDG_CONFIG_HOME": str(base / "cfg"),
        "XDG_DATA_HOME": str(base / "data"),
    }
    settings = semsearch.load_settings(env)
    index = semsearch.Index(settings, embedder=HashEmbedder())
    index.add([str(tree)])
    started = time.perf_counter()
    index.update()
    print(f"index {time.perf_counter() - started:.1f} s")
    print(f"pending_work {index.pending_work()}")
    print(summary("full check (pending_work)", timed(index.pending_work, args.full_runs)))
    index.close()

    monitor = ChangeMonitor()
    shared = semsearch.Index(settings, embedder=HashEmbedder(), monitor=monitor)
    try:
        print(summary("server check, first call", timed(shared.freshen, 1)))
        times = timed(shared.freshen, args.runs)
        print(summary("server check, nothing changed", times))
        print(f"watcher problem: {monitor.problem}")
        (tree / "pkg000" / "mod00000.py").write_text("def f0(x):\n    return x - 1\n")
        print(summary("server check, one file saved", timed(shared.freshen, 1)))
        print(summary("server check, the call after", timed(shared.freshen, 1)))
        print(summary("server check, nothing changed", timed(shared.freshen, 50)))
    finally:
        shared.close()
        monitor.close()
        (tree / "pkg000" / "mod00000.py").write_text("def f0(x):\n    return x + 0\n")


if __name__ == "__main__":
    main()
