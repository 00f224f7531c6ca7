"""Scale bench: a tree of 100,000+ real files, and a vector arm of 1.4M chunks.

Three arms, searches run in child processes so that peak RSS is the process's own:

``text``: copies real repositories (the bench's code-search and wide repos) side by side into
``--tree`` until it holds ``--files`` files (many checkouts of the same projects, as in a home
folder), then runs the first pass (every file lexically searchable) with the code at
``--code`` (default: this checkout; pass /work/main for today's), a re-index with nothing
changed, and cold and warm BM25 searches. The second pass (the model) is left out: it would take
hours here; its time is estimated from the distinct chunk texts (each embedded once) and the
model's rate on ``--sample`` of them.

``vectors``: writes ``--chunks`` chunks whose vectors are real embeddings of a sample of chunk
texts, each repeated with a small perturbation (there is no time to embed 1.4M chunks here), into
a SQLite index, packs them (the code at ``--code`` permitting), and measures the vector arm and
a hybrid search cold (a new process) and warm (a long-running one): latency and peak RSS.

``hybrid``: the same vectors for every chunk of the text arm's index (the real one of its text
where a quality index has it), packed, then vector and hybrid searches by this checkout and, on
a copy as schema 5 wrote it, by ``--old-code``.

``searches``: for each ``--pair CODE=INDEX`` (a checkout and an index it reads, e.g. today's
code on the hybrid arm's file and this checkout on a copy it upgraded), alternated ``--rounds``
times: a hybrid and a vector search child as above, and BM25 searches within files (``--glob``:
one checkout, one repository of it, a kind of file), p50 over 8 queries x 3 after a warm-up.

``lancedb``: the hybrid arm's index (files, chunks and vectors of its schema-5 copy) written into
a LanceDB index through the store, then ``maintain`` (full-text indexes, the ANN index, the
texts table, compaction), and the same vector and hybrid searches on it; with ``--queries``
also the given code sets' nDCG@10 over the whole tree (``QUALITY_CHILD``).

Searches run with the index in the page cache, as after an index run; ``--uncached`` drops it
from the cache before each search process (Linux), for a first search that reads the disk.

    PYTHONPATH=$PWD python bench/scale.py text --code /work/main --json /tmp/old.json
    PYTHONPATH=$PWD python bench/scale.py vectors --old-code /work/main --json /tmp/vec.json
    PYTHONPATH=$PWD python bench/scale.py hybrid --old-code /work/main --json /tmp/hyb.json
    PYTHONPATH=$PWD python bench/scale.py lancedb --json /tmp/lance.json
    PYTHONPATH=$PWD python bench/scale.py lancedb --keep --queries EVAL/codesearch \
        --queries EVAL/codebench-wide
    PYTHONPATH=$PWD python bench/scale.py searches --pair /tmp/old=/tmp/a.db --pair $PWD=/tmp/b.db

Without the quality bench's indexes (``--sources``), ``hybrid --seed-texts N`` embeds N of the
text arm's distinct texts with the default model first (~2 min for 4,096 here) and draws every
other chunk's vector from those.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchlib import DEFAULT_WORK, REPO, machine, write_json

SOURCES = (DEFAULT_WORK / "codesearch-repos", DEFAULT_WORK / "codebench-wide-repos")
QUERIES = (
    "parse the http request headers",
    "retry a failed connection with backoff",
    "validate the json schema of a model",
    "read the configuration file",
    "websocket client send message",
    "thread pool executor shutdown",
    "format a date as a string",
    "escape html in a template",
)

# The child of the text arm: the first pass with the code on its PYTHONPATH, then the same
# run again with nothing changed. The first pass tokenises with the model's tokenizer, as a real
# run does (it never runs the model on SQLite); sessions before 27 used HashEmbedder's word
# spans here. The second pass's rate is timed on --sample distinct texts (the default model,
# on this machine). ru_maxrss is this process's peak, in KiB.
TEXT_CHILD = """
import json, resource, sys, time
from pathlib import Path
import semsearch
print(semsearch.__file__, file=sys.stderr)
from semsearch.indexing.pipeline import Indexer, IndexerSettings
from semsearch.model.embedder import OnnxEmbedder
from semsearch.store.sqlite.store import SqliteStore
tree, db, sample = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
store = SqliteStore(db, create=True)
embedder = OnnxEmbedder()
indexer = Indexer(store, embedder, IndexerSettings())
started = time.monotonic()
report = indexer.index_folder(tree)
first = time.monotonic() - started
peak_first = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.monotonic()
again = indexer.index_folder(tree)
unchanged = time.monotonic() - started
chunks = store.chunk_count()
texts = [text for _, text in store.pending_texts(sample)]
embedder.embed(texts[:8])  # the session is made before the clock starts
started = time.monotonic()
embedder.embed(texts)
rate = len(texts) / (time.monotonic() - started)
store.close()
print(json.dumps({
    "files": report.indexed, "skipped": report.skipped, "chunks": chunks,
    "files_copied": getattr(indexer, "files_copied", None),
    "text_pass_s": round(first, 1), "unchanged_reindex_s": round(unchanged, 2),
    "unchanged_files": again.unchanged, "peak_rss_text_pass_mib": round(peak_first / 1024),
    "db_bytes": sum(p.stat().st_size for p in db.parent.glob(db.name + "*")),
    "embed_rate": round(rate, 1),
}))
"""

# The child of a search: an Index on the bench's settings, each query once (cold: the first)
# and then again (warm); --loops repeats the warm round.
SEARCH_CHILD = """
import json, resource, sys, time
from semsearch.config import load_settings
from semsearch.index import Index
import os
mode, queries = sys.argv[1], json.loads(sys.argv[2])
started = time.monotonic()
index = Index(load_settings(os.environ))
index.search(queries[0], mode=mode)
cold = time.monotonic() - started
peak_cold = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
warm = []
for query in queries[1:] * 3:
    t = time.monotonic()
    index.search(query, mode=mode)
    warm.append(time.monotonic() - t)
late = warm[len(warm) * 2 // 3:]  # the last third: any warm-up of the process is over
warm.sort()
late.sort()
with open("/proc/self/statm") as statm:
    rss_end = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
print(json.dumps({"mode": mode, "cold_s": round(cold, 3),
    "warm_p50_ms": round(1000 * warm[len(warm) // 2], 1),
    "warm_last_third_p50_ms": round(1000 * late[len(late) // 2], 1),
    "peak_rss_cold_mib": round(peak_cold / 1024),
    "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    "rss_end_mib": round(rss_end / 2**20)}))
"""


# The child of a search within files: BM25 searches limited by a glob, each query once as a
# warm-up and then three times; p50 and min of those.
WITHIN_CHILD = """
import json, os, statistics, sys, time
from semsearch.config import load_settings
from semsearch.index import Index
glob, queries = sys.argv[1], json.loads(sys.argv[2])
index = Index(load_settings(os.environ))
for query in queries:
    index.search(query, mode="bm25", glob=glob)
times = []
for query in queries * 3:
    t = time.perf_counter()
    index.search(query, mode="bm25", glob=glob)
    times.append(time.perf_counter() - t)
print(json.dumps({"glob": glob, "p50_ms": round(1000 * statistics.median(times), 1),
    "min_ms": round(1000 * min(times), 1)}))
"""
WITHIN_GLOBS = ("c03/**", "c03/aiohttp/**", "*.py", "**/tests/**")

# The child of the lancedb arm: every file of a schema-5 SQLite index (vectors as float16
# blobs) written into a LanceDB index through the store, with the files' path vectors (from
# session 31: before, the LanceDB searches had no path term), then maintain.
LANCE_CHILD = """
import json, resource, sqlite3, sys, time
from pathlib import Path
import numpy as np
from semsearch.store import ChunkRecord, FileWrite, open_store
from semsearch.store.sqlite.rows import path_from_blob
source, target = sys.argv[1], Path(sys.argv[2])
db = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
meta = dict(db.execute("SELECT key, value FROM meta"))
dim = int(meta["dim"])
store = open_store("lancedb", target, create=True)
store.set_model(meta["model_id"], dim)
rows = db.execute("SELECT id, path, name FROM folders").fetchall()
folders = {i: store.ensure_folder(p, n) for i, p, n in rows}
started = time.monotonic()
files = db.execute("SELECT id, folder_id, rel, mtime_ns, size, sha256, status, kind FROM files"
                   " ORDER BY id").fetchall()
batch, size, chunks = [], 0, 0
for file_id, folder, rel, mtime_ns, nbytes, sha, status, kind in files:
    rows = db.execute("SELECT start_line, end_line, start_offset, end_offset, page, text, vector"
                      " FROM chunks WHERE file_id = ? ORDER BY ord", (file_id,)).fetchall()
    records = tuple(ChunkRecord(*row[:6]) for row in rows)
    vectors = None
    if rows:
        joined = b"".join(row[6] for row in rows)
        vectors = np.frombuffer(joined, dtype="<f2").reshape(len(rows), dim).astype(np.float32)
    batch.append(FileWrite(folders[folder], rel, mtime_ns, nbytes, sha, status, kind, records,
                           vectors))
    size += len(rows)
    chunks += len(rows)
    if size >= 4000:
        store.write_files(batch, reuse=False)
        batch, size = [], 0
store.write_files(batch, reuse=False)
# path vectors by rel (the scale tree is one folder); empty for a document, as indexed
blobs = dict(db.execute("SELECT rel, path_vector FROM files WHERE path_vector IS NOT NULL"))
while blobs and (pending := store.pending_paths(20_000)):
    vectors = np.zeros((len(pending), dim), dtype=np.float32)
    for at, (_, rel) in enumerate(pending):
        blob = blobs.get(rel) or b""
        if len(blob) == 4 + dim:
            vectors[at] = path_from_blob(blob)
    store.set_path_vectors([file_id for file_id, _ in pending], vectors)
for folder in folders.values():
    store.mark_indexed(folder)
written = time.monotonic()
store.maintain()
maintained = time.monotonic()
size_bytes = store.size_bytes()
store.close()
print(json.dumps({"files": len(files), "chunks": chunks, "write_s": round(written - started),
    "maintain_s": round(maintained - written), "lancedb_bytes": size_bytes,
    "peak_rss_build_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
"""

# The child of ``lancedb --queries``: the given code sets' queries searched over the whole tree
# (every project, every checkout, no filter), written as run files for each set's own score.py
# (``tree_quality``): a hit in the query's project by its path there (``cNN/<project>/`` cut),
# a hit in another project by a path no label can match.
QUALITY_CHILD = """
import json, os, sys, time
from pathlib import Path
from semsearch.config import load_settings
from semsearch.index import Index
index = Index(load_settings(os.environ))
out, started, queries = Path(sys.argv[1]), time.monotonic(), 0
for folder in map(Path, sys.argv[2:]):
    lines = []
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        query, results = json.loads(line), []
        for n, hit in enumerate(index.search(query["query"], k=10)):
            parts = hit.rel.split("/", 2)  # checkout, project, path in the project
            mine = len(parts) == 3 and parts[1] == query["repo"]
            results.append({"path": parts[2] if mine else f"/elsewhere/{n}",
                "start_line": hit.start_line, "end_line": hit.end_line})
        lines.append(json.dumps({"id": query["id"], "results": results}))
        queries += 1
    (out / f"{folder.name}.jsonl").write_text("\\n".join(lines) + "\\n", encoding="utf-8")
print(json.dumps({"queries": queries, "seconds": round(time.monotonic() - started)}))
"""

UNCACHED = "drop the index from the page cache before each search process"


def build_tree(tree: Path, files: int) -> int:
    """Copy the source repositories into tree/c00, c01, ... until ``files`` files are there."""
    repos = sorted(p for source in SOURCES if source.is_dir() for p in source.iterdir())
    if not repos:
        raise SystemExit(f"no repositories under {', '.join(map(str, SOURCES))}")
    count = sum(1 for p in tree.rglob("*") if p.is_file()) if tree.is_dir() else 0
    copy = len(list(tree.glob("c*"))) if tree.is_dir() else 0
    while count < files:
        target = tree / f"c{copy:02d}"
        for repo in repos:
            shutil.copytree(repo, target / repo.name, symlinks=True, dirs_exist_ok=True)
        count = sum(1 for p in tree.rglob("*") if p.is_file())
        copy += 1
    return count


def child_env(code: Path, work: Path) -> dict[str, str]:
    """The bench's isolated SS_* settings, and the code under test first on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SS_")}
    env.update(
        HOME=str(work / "home"),
        SS_CONFIG_PATH=str(work / "config.json"),
        SS_INDEX_PATH=str(work / "index.db"),
        PYTHONPATH=f"{code}{os.pathsep}{REPO / 'bench'}",
    )
    for name in ("SS_MODEL_DIR", "SS_MODEL_CACHE"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


def evict(path: Path) -> None:
    """Drop a file's pages from the page cache (Linux), so a new process reads it from disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # dirty pages are not dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def run_child(
    script: str, args: list[str], env: dict[str, str], uncached: bool = False
) -> dict[str, Any]:
    """Run a child script and return the JSON object it prints last, with the load average
    before it; ``uncached``: the index is dropped from the page cache first."""
    if uncached:
        evict(Path(env["SS_INDEX_PATH"]))
    load = os.getloadavg()[0]
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        cwd=env["HOME"],  # not this checkout: `-c` puts the working folder first on sys.path
    )
    if done.returncode:
        raise SystemExit(f"child failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["load_before"] = round(load, 2)
    if uncached:
        result["uncached"] = True
    return result


def text_arm(args: argparse.Namespace) -> dict[str, Any]:
    """The first pass over the tree, a re-index with nothing changed, BM25 searches."""
    tree_files = build_tree(args.tree, args.files)
    work = args.work
    if work.exists():
        shutil.rmtree(work)
    (work / "home").mkdir(parents=True)
    env = child_env(args.code, work)
    result = run_child(TEXT_CHILD, [str(args.tree), str(work / "index.db"), str(args.sample)], env)
    result["tree_files"] = tree_files
    result["code"] = str(args.code)
    result["db_bytes_per_file"] = round(result["db_bytes"] / max(result["files"], 1))
    result["db_bytes_per_chunk"] = round(result["db_bytes"] / max(result["chunks"], 1))
    with sqlite3.connect(work / "index.db") as conn:  # the second pass embeds each text once
        result["distinct_texts"] = conn.execute(
            "SELECT count(DISTINCT text_hash) FROM chunks"
        ).fetchone()[0]
    embed_s = result["distinct_texts"] / result["embed_rate"]
    result["embed_estimate_s"] = round(embed_s)
    result["text_share_of_whole"] = round(
        result["text_pass_s"] / (result["text_pass_s"] + embed_s), 3
    )
    result["bm25"] = run_child(SEARCH_CHILD, ["bm25", json.dumps(QUERIES)], env)
    return result


def real_vectors(sources: list[Path]) -> tuple[str, int, dict[str, bytes]]:
    """(model id, dim, text hash → stored float16 vector) of the bench's quality indexes."""
    found: dict[str, bytes] = {}
    model = ("", 0)
    for path in sources:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            if not model[0]:
                model = (meta["model_id"], int(meta["dim"]))
            if (meta["model_id"], int(meta["dim"])) != model:
                continue
            found.update(
                conn.execute(
                    "SELECT text_hash, vector FROM chunks WHERE length(vector) = ?",
                    (2 * model[1],),
                ).fetchall()
            )
    return model[0], model[1], found


def seed_vectors(db: Path, out: Path, texts: int) -> Path:
    """A file ``real_vectors`` reads: the default model's vectors of ``texts`` of the index's
    distinct texts (those it would embed first), as float16 by text hash."""
    import numpy as np  # the bench's parent needs numpy only for this arm

    from semsearch.model.embedder import OnnxEmbedder
    from semsearch.store.sqlite.store import SqliteStore

    store = SqliteStore(db)
    batch = store.pending_texts(texts)
    store.close()
    embedder = OnnxEmbedder()
    matrix = np.asarray(embedder.embed([text for _, text in batch]), dtype=np.float32)
    out.unlink(missing_ok=True)
    with sqlite3.connect(out) as conn:
        conn.executescript(
            "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
            "CREATE TABLE chunks(text_hash TEXT, vector BLOB);"
        )
        conn.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [("model_id", embedder.model_id), ("dim", str(matrix.shape[1]))],
        )
        conn.executemany(
            "INSERT INTO chunks VALUES (?, ?)",
            [(h, row.astype("<f2").tobytes()) for (h, _), row in zip(batch, matrix, strict=True)],
        )
    return out


def searches_arm(args: argparse.Namespace) -> dict[str, Any]:
    """Each code on its index, alternated: cold and warm hybrid and vector searches in a new
    process, and BM25 searches within files."""
    work = args.work
    (work / "home").mkdir(parents=True, exist_ok=True)
    queries = json.dumps(QUERIES)
    rounds: list[list[dict[str, Any]]] = []
    for _ in range(args.rounds):
        runs = []
        for pair in args.pair:
            code, index = pair.split("=", 1)
            env = {**child_env(Path(code), work), "SS_INDEX_PATH": index}
            run: dict[str, Any] = {"code": code, "index": index}
            for mode in ("hybrid", "vector"):
                run[mode] = run_child(SEARCH_CHILD, [mode, queries], env)
            run["within"] = [run_child(WITHIN_CHILD, [glob, queries], env) for glob in args.glob]
            runs.append(run)
            print(json.dumps(run), file=sys.stderr, flush=True)
        rounds.append(runs)
    return {"rounds": rounds}


def fill_vectors(db: Path, sources: list[Path], seed: int = 0) -> dict[str, Any]:
    """Give every chunk of ``db`` a vector through the store: the real one of its text where a
    quality index embedded that text, else a real one of another text with noise (norm 0.1).
    Every code file gets a path vector too, as an index run gives it (the file lift's path
    term reads them): a chunk's vector with noise, for the search's cost, not its ranking;
    documents a zero row, as the indexer writes. Before session 31 the scale indexes had no
    path vectors, so their searches skipped the path term."""
    import numpy as np  # the bench's parent needs numpy only for this arm

    from semsearch.files.filetype import is_prose
    from semsearch.store.sqlite.store import SqliteStore

    model_id, dim, known = real_vectors(sources)
    pool = list(known.values())
    rng = np.random.default_rng(seed)
    store = SqliteStore(db)
    store.set_model(model_id, dim)
    real = made = 0
    started = time.monotonic()
    while batch := store.pending_texts(20_000):
        hashes = [h for h, _ in batch]
        rows = np.empty((len(hashes), dim), dtype=np.float32)
        for at, text_hash in enumerate(hashes):
            blob = known.get(text_hash)
            if blob is not None:
                rows[at] = np.frombuffer(blob, dtype="<f2")
                real += 1
            else:
                base = np.frombuffer(pool[int(rng.integers(len(pool)))], dtype="<f2")
                noisy = base.astype(np.float32) + rng.standard_normal(dim) * (0.1 / dim**0.5)
                rows[at] = noisy / np.linalg.norm(noisy)
                made += 1
        store.set_vectors(hashes, rows)
    paths = 0
    while batch := store.pending_paths(20_000):
        file_ids = [file_id for file_id, _ in batch]
        rows = np.zeros((len(batch), dim), dtype=np.float32)
        for at, (_, rel) in enumerate(batch):
            if not is_prose(rel):
                base = np.frombuffer(pool[int(rng.integers(len(pool)))], dtype="<f2")
                noisy = base.astype(np.float32) + rng.standard_normal(dim) * (0.1 / dim**0.5)
                rows[at] = noisy / np.linalg.norm(noisy)
                paths += 1
        store.set_path_vectors(file_ids, rows)
    filled = time.monotonic() - started
    started = time.monotonic()
    store.maintain()  # packs the blocks
    packed = time.monotonic() - started
    chunks = store.chunk_count()
    store.close()
    return {
        "model_id": model_id,
        "chunks": chunks,
        "distinct_texts_real_vector": real,
        "distinct_texts_perturbed_vector": made,
        "path_vectors": paths,
        "fill_s": round(filled),
        "pack_s": round(packed),
        "db_bytes": sum(p.stat().st_size for p in db.parent.glob(db.name + "*")),
    }


def index_sizes(work: Path) -> dict[str, int]:
    """Bytes of the old and the new side's index (with its -wal and -shm files)."""
    return {
        f"db_bytes_{side}": sum(p.stat().st_size for p in (work / side).glob("index.db*"))
        for side in ("old", "new")
    }


def hybrid_arm(args: argparse.Namespace) -> dict[str, Any]:
    """Vectors for every chunk of the text arm's index, packed; then vector and hybrid searches
    by this checkout's code and by ``--old-code`` on a copy as schema 5 wrote it."""
    work = args.work
    db = work / "new" / "index.db"
    result: dict[str, Any] = {}
    if not args.keep:
        if work.exists():
            shutil.rmtree(work)
        for side in ("old", "new"):
            (work / side / "home").mkdir(parents=True)
        shutil.copyfile(args.text_index, db)
        sources = sorted(args.sources.rglob("*.db")) if args.sources.is_dir() else []
        if args.seed_texts:
            sources = [seed_vectors(db, work / "seed.db", args.seed_texts)]
        if not sources:
            raise SystemExit(f"no indexes with vectors under {args.sources}: pass --seed-texts")
        result.update(fill_vectors(db, sources))
        shutil.copyfile(db, work / "old" / "index.db")
        as_version_5(work / "old" / "index.db")
        result.update(index_sizes(work))
    queries = json.dumps(QUERIES)
    for side, code in (("new", REPO), ("old", args.old_code)):
        env = child_env(code, work / side)
        result[side] = {
            mode: [
                run_child(SEARCH_CHILD, [mode, queries], env, uncached=args.uncached) for _ in "ab"
            ]
            for mode in ("vector", "hybrid")
        }
    return result


def lancedb_arm(args: argparse.Namespace) -> dict[str, Any]:
    """The hybrid arm's chunks and vectors in a LanceDB index; its vector and hybrid searches."""
    work = args.work
    env = {**child_env(args.code, work), "SS_STORE_BACKEND": "lancedb"}
    result: dict[str, Any] = {}
    if not args.keep:
        if work.exists():
            shutil.rmtree(work)
        (work / "home").mkdir(parents=True)
        result["build"] = run_child(LANCE_CHILD, [str(args.source), str(work / "lancedb")], env)
    queries = json.dumps(QUERIES)
    result["searches"] = {
        mode: [run_child(SEARCH_CHILD, [mode, queries], env) for _ in "ab"]
        for mode in ("vector", "hybrid")
    }
    if args.queries:
        result["quality"] = tree_quality(args.queries, work / "quality", env)
    return result


def tree_quality(sets: list[Path], out: Path, env: dict[str, str]) -> dict[str, Any]:
    """The given code sets' queries over the whole tree (``QUALITY_CHILD``), each set's run
    scored by its own ``score.py`` as ``codesearch.py`` does: the mean over projects, and per
    category the mean over projects of their category means."""
    out.mkdir(parents=True, exist_ok=True)
    result = run_child(QUALITY_CHILD, [str(out), *map(str, sets)], env)
    per_repo: dict[str, float] = {}
    categories: dict[str, list[float]] = {}
    for folder in sets:
        scores = out / f"{folder.name}.json"
        run = [str(out / f"{folder.name}.jsonl"), "--paths", "repo", "--json", str(scores)]
        subprocess.run(
            [sys.executable, str(folder / "score.py"), *run],
            check=True,
            text=True,
            capture_output=True,
        )
        scored = json.loads(scores.read_text(encoding="utf-8"))
        per_repo.update(scored["per_repo"])
        for by_category in scored["per_repo_by_category"].values():
            for category, value in by_category.items():
                if value == value:  # NaN: no query of that category in the project
                    categories.setdefault(category, []).append(value)
    result["macro"] = round(statistics.mean(per_repo.values()), 4)
    result["categories"] = {c: round(statistics.mean(v), 4) for c, v in sorted(categories.items())}
    return result


def synthetic_index(db: Path, sources: list[Path], chunks: int, seed: int = 0) -> dict[str, Any]:
    """An index of ``chunks`` chunks, 10 a file, whose vectors are the quality indexes' real
    ones repeated, each copy after the first with noise of norm 0.1. The chunk texts are one
    word each, and the FTS trigger is dropped while they are written (bench only: this index is
    searched by vector, never modified): BM25 over 1.4M chunks is the text arm's figure."""
    import numpy as np  # the bench's parent needs numpy only for this arm

    from semsearch.store.sqlite.store import SqliteStore

    model_id, dim, known = real_vectors(sources)
    base = np.stack([np.frombuffer(b, dtype="<f2") for b in known.values()]).astype(np.float32)
    rng = np.random.default_rng(seed)
    store = SqliteStore(db, create=True)
    store.set_model(model_id, dim)
    folder = store.ensure_folder("/srv/scale", "scale")
    store.close()
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER chunks_ai")
    started = time.monotonic()
    step = 20_000
    for start in range(0, chunks, step):
        count = min(step, chunks - start)
        rows = base[np.arange(start, start + count) % len(base)]
        if start >= len(base):
            rows = rows + rng.standard_normal(rows.shape).astype(np.float32) * (0.1 / dim**0.5)
            rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        blobs = rows.astype("<f2")
        files = range(start // 10, (start + count + 9) // 10)
        conn.executemany(
            "INSERT INTO files(id, folder_id, rel, mtime_ns, size, sha256, status, kind)"
            " VALUES (?, ?, ?, 0, 0, '', 'ok', 'text')",
            [(f + 1, folder, f"f{f}.py") for f in files],
        )
        conn.executemany(
            "INSERT INTO chunks(file_id, ord, start_line, end_line, start_offset, end_offset,"
            " text, vector, text_hash) VALUES (?, ?, 1, 1, 0, 1, 'x', ?, ?)",
            [
                ((start + n) // 10 + 1, (start + n) % 10, blobs[n].tobytes(), f"{start + n:032x}")
                for n in range(count)
            ],
        )
        conn.commit()
    conn.close()
    written = time.monotonic() - started
    return {
        "model_id": model_id,
        "chunks": chunks,
        "real_vectors": len(base),
        "write_s": round(written),
    }


def as_version_5(db: Path) -> None:
    """Make a copy of the index what schema 5 had (no blocks), for today's code to open."""
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TRIGGER IF EXISTS chunks_packed_ad")
        conn.execute("DROP TABLE IF EXISTS vector_blocks")
        conn.execute("DROP TABLE IF EXISTS vector_gone")
        conn.execute("DELETE FROM meta WHERE key IN ('packed_through', 'pack_epoch')")
        conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
        conn.execute("PRAGMA user_version = 5")
    with sqlite3.connect(db) as conn:  # the blocks' pages back to the file system
        conn.execute("PRAGMA incremental_vacuum")


def vectors_arm(args: argparse.Namespace) -> dict[str, Any]:
    """1.4M chunks' vectors: today's code and this checkout's, cold and warm, RSS."""
    work = args.work
    db = work / "new" / "index.db"
    result: dict[str, Any] = {}
    if not args.keep:
        if work.exists():
            shutil.rmtree(work)
        for side in ("old", "new"):
            (work / side / "home").mkdir(parents=True)
        result.update(synthetic_index(db, sorted(args.sources.rglob("*.db")), args.chunks))
        shutil.copyfile(db, work / "old" / "index.db")
        as_version_5(work / "old" / "index.db")
        from semsearch.store.sqlite.store import SqliteStore

        started = time.monotonic()
        store = SqliteStore(db)
        store.maintain()
        store.close()
        result["pack_s"] = round(time.monotonic() - started)
        result.update(index_sizes(work))
    queries = json.dumps(QUERIES)
    for side, code in (("new", REPO), ("old", args.old_code)):
        env = child_env(code, work / side)
        result[side] = [
            run_child(SEARCH_CHILD, ["vector", queries], env, uncached=args.uncached) for _ in "ab"
        ]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="arm", required=True)
    text = sub.add_parser("text", help="the first pass over 100,000+ files")
    text.add_argument("--code", type=Path, default=REPO, help="checkout whose code is measured")
    text.add_argument("--tree", type=Path, default=DEFAULT_WORK / "scale-tree")
    text.add_argument("--files", type=int, default=100_000)
    text.add_argument("--work", type=Path, default=DEFAULT_WORK / "scale-text")
    text.add_argument("--sample", type=int, default=1024, help="texts the model's rate is timed on")
    text.add_argument("--json", help="write the figures here")
    sources = DEFAULT_WORK / "q-final"  # the quality bench's indexes: real vectors
    vectors = sub.add_parser("vectors", help="1.4M chunks' vectors, today's code and this")
    vectors.add_argument("--chunks", type=int, default=1_400_000)
    vectors.add_argument("--old-code", type=Path, required=True, help="today's checkout")
    vectors.add_argument("--sources", type=Path, default=sources, help="indexes with vectors")
    vectors.add_argument("--work", type=Path, default=DEFAULT_WORK / "scale-vectors")
    vectors.add_argument("--keep", action="store_true", help="search the indexes already there")
    vectors.add_argument("--json", help="write the figures here")
    vectors.add_argument("--uncached", action="store_true", help=UNCACHED)
    hybrid = sub.add_parser("hybrid", help="vectors for the text arm's chunks, hybrid search")
    hybrid.add_argument("--old-code", type=Path, required=True, help="today's checkout")
    hybrid.add_argument(
        "--text-index", type=Path, default=DEFAULT_WORK / "scale-text-new" / "index.db"
    )
    hybrid.add_argument("--sources", type=Path, default=sources, help="indexes with vectors")
    hybrid.add_argument("--work", type=Path, default=DEFAULT_WORK / "scale-hybrid")
    hybrid.add_argument("--keep", action="store_true", help="search the index already there")
    hybrid.add_argument("--json", help="write the figures here")
    hybrid.add_argument("--uncached", action="store_true", help=UNCACHED)
    hybrid.add_argument(
        "--seed-texts", type=int, default=0, help="embed this many texts instead of --sources"
    )
    searched = sub.add_parser("searches", help="codes on their indexes: hybrid, vector, within")
    searched.add_argument(
        "--pair", action="append", required=True, metavar="CODE=INDEX", help="repeatable"
    )
    searched.add_argument("--rounds", type=int, default=2)
    searched.add_argument("--glob", action="append", help="default: " + " ".join(WITHIN_GLOBS))
    searched.add_argument("--work", type=Path, default=DEFAULT_WORK / "scale-searches")
    searched.add_argument("--json", help="write the figures here")
    lance = sub.add_parser("lancedb", help="the hybrid arm's chunks in a LanceDB index")
    lance.add_argument(
        "--source", type=Path, default=DEFAULT_WORK / "scale-hybrid" / "old" / "index.db"
    )
    lance.add_argument("--code", type=Path, default=REPO, help="checkout whose code is measured")
    lance.add_argument("--work", type=Path, default=DEFAULT_WORK / "scale-lancedb")
    lance.add_argument("--keep", action="store_true", help="search the index already there")
    lance.add_argument("--json", help="write the figures here")
    lance.add_argument(
        "--queries",
        type=Path,
        action="append",
        help="a given code set (its queries.jsonl) to score over the whole tree; repeatable",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.arm == "searches" and not args.glob:
        args.glob = list(WITHIN_GLOBS)
    arms = {
        "text": text_arm,
        "vectors": vectors_arm,
        "hybrid": hybrid_arm,
        "lancedb": lancedb_arm,
        "searches": searches_arm,
    }
    arm = arms[args.arm]
    result = {"machine": machine(), **arm(args)}
    result["bench_s"] = round(time.monotonic() - started)
    print(json.dumps(result, indent=2))
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
