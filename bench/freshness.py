"""MCP freshness check cost: Index.pending_work on a 10,000-file folder with nothing changed.

Run from the repo root: `PYTHONPATH=. python bench/freshness.py` (work files in /tmp/fresh10k).
The hash embedder stands in for the model: only the check is timed, not indexing.
"""

import statistics
import time
from pathlib import Path

import semsearch
from semsearch.embedder import HashEmbedder

base = Path("/tmp/fresh10k/work")
tree = base / "tree"
if not tree.exists():
    for n in range(10_000):
        d = tree / f"pkg{n // 100:03}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{n:05}.py").write_text(f"def f{n}(x):\n    return x + {n}\n")
env = {"HOME": str(base), "XDG_CONFIG_HOME": str(base / "cfg"), "XDG_DATA_HOME": str(base / "data")}
settings = semsearch.load_settings(env)
index = semsearch.Index(settings, embedder=HashEmbedder())
t = time.perf_counter()
index.update([tree])
print("index", round(time.perf_counter() - t, 1), "s")
times = []
for _ in range(7):
    t = time.perf_counter()
    work = index.pending_work([tree])
    times.append(time.perf_counter() - t)
print(
    "pending_work",
    work,
    "median ms",
    round(statistics.median(times) * 1000, 1),
    [round(x * 1000) for x in times],
)
