"""The MCP servers under load while another process edits and re-indexes files (issue 37).

1. HTTP: ``semsearch serve`` and CLIENTS threads searching through it for SECONDS, each request
   one single-exchange POST on a new connection (the CLI's client, ``semsearch.cli.remote``).
2. stdio: ``semsearch mcp`` and one MCP SDK client calling ``search`` at full rate for SECONDS.

During both, an editor process rewrites one of LIVE notes about once a second (a new revision
number in its text) and re-indexes through the library (``Index.update``), then reports the
revision it committed. A failed request is one that got no result (a refused or broken request,
or a tool error). A stale hit is a hit of a note whose text shows an older revision than one the
editor had committed before the request was sent. Half the queries name a live note's marker
word, so its chunks come back.

3. The CLI, same index, same run: ``semsearch search QUERY`` as a user runs it, alternately
   through the running server and in-process (no server where it looks), wall time of each run.
   ``--cli PATH`` times that command (a regular install's console script, whose modules pip
   compiled: what a user runs) instead of ``python -m semsearch`` from this checkout;
   ``--cli-only`` skips phases 1 and 2.

Run from the repo root: ``PYTHONPATH=. python bench/load.py [--corpus DIR] [--json PATH]``
(default corpus: a copy of this package's source). Work files in /tmp/semsearch-bench/load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from benchlib import (
    DEFAULT_WORK,
    REPO,
    BusyMeter,
    child_env,
    machine,
    median,
    percentile,
    wait_for_quiet,
    write_json,
)
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from semsearch.cli.remote import connect
from semsearch.config import load_settings

LIVE = 8
EDIT_PAUSE = 0.5  # seconds between an edit's update and the next edit
QUERIES = [
    "how are chunks embedded in batches",
    "retry when the writer lock is held",
    "reciprocal rank fusion of the arms",
    "confine reads to the configured folders",
    "parse the gitignore patterns",
    "watch folders for changes",
    "damaged index set aside and rebuilt",
    "bearer token check",
]
REVISION = re.compile(r"revision r(\d+)x(\d+)")


def live_text(number: int, revision: int) -> str:
    """A live note: its marker word, its revision, and text that changes with the revision."""
    rng = random.Random(number * 100_003 + revision)
    words = " ".join(
        rng.choice(["tide", "keel", "mast", "buoy", "gull", "reef"]) for _ in range(60)
    )
    return (
        f"# Harbour log {number}\n\nzebracorn{number} revision r{revision}x{number} of the "
        f"harbour log, kept by the watch.\n\n{words}\n"
    )


def editor(corpus: Path) -> None:
    """The editing process: rewrite a live note, re-index, say which revision is committed."""
    from semsearch.index import Index  # the editor's own process loads the library

    index = Index(load_settings(os.environ))
    revision = 0
    try:
        while True:
            revision += 1
            number = revision % LIVE
            path = corpus / "live" / f"note{number}.md"
            path.write_text(live_text(number, revision), encoding="utf-8")
            index.update()
            event = {"note": number, "revision": revision, "at": time.time()}
            try:
                print(json.dumps(event), flush=True)
            except BrokenPipeError:  # the bench is gone
                return
            time.sleep(EDIT_PAUSE)
    finally:
        index.close()


class Committed:
    """What the editor has committed: note → [(wall time, revision)], from its stdout."""

    def __init__(self, stream: Any) -> None:
        self._lock = threading.Lock()
        self._log: dict[int, list[tuple[float, int]]] = {n: [] for n in range(LIVE)}
        self.edits = 0
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            event = json.loads(line)
            with self._lock:
                self._log[event["note"]].append((event["at"], event["revision"]))
                self.edits += 1

    def floor(self, note: int, before: float) -> int:
        """The newest revision of ``note`` committed before ``before`` (0: none)."""
        with self._lock:
            done = [revision for at, revision in self._log[note] if at < before]
        return max(done, default=0)


def stale_hits(hits: list[dict[str, Any]], committed: Committed, sent: float) -> tuple[int, int]:
    """Hits showing a revision older than one committed before the request was sent, and hits
    showing a revision at all (those the check could judge)."""
    stale = judged = 0
    for hit in hits:
        for revision, note in REVISION.findall(hit.get("text", "")):
            judged += 1
            if int(revision) < committed.floor(int(note), sent):
                stale += 1
    return stale, judged


def query(rng: random.Random) -> str:
    if rng.random() < 0.5:
        number = rng.randrange(LIVE)
        return f"zebracorn{number} harbour log revision"
    return rng.choice(QUERIES)


class Tally:
    """Latencies (ms), failures and stale hits of a phase."""

    def __init__(self, committed: Committed) -> None:
        self.committed = committed
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.failed = 0
        self.stale = 0
        self.judged = 0

    def add(self, seconds: float, hits: list[dict[str, Any]] | None, sent: float) -> None:
        """One request's latency and hits (None: it failed), judged against ``committed``."""
        stale, judged = (0, 0) if hits is None else stale_hits(hits, self.committed, sent)
        with self.lock:
            self.latencies.append(seconds * 1000)
            self.failed += hits is None
            self.stale += stale
            self.judged += judged

    def report(self, name: str, wall: float, edits: int) -> dict[str, Any]:
        p50, p99 = percentile(self.latencies, 50), percentile(self.latencies, 99)
        row = {
            "phase": name,
            "requests": len(self.latencies),
            "failed": self.failed,
            "stale_hits": self.stale,
            "revision_hits_judged": self.judged,
            "edits_committed": edits,
            "requests_per_s": round(len(self.latencies) / wall, 1),
            "p50_ms": round(p50, 1),
            "p90_ms": round(percentile(self.latencies, 90), 1),
            "p99_ms": round(p99, 1),
            "max_ms": round(max(self.latencies, default=float("nan")), 1),
            "p99_over_p50": round(p99 / p50, 2) if p50 else None,
        }
        print(
            f"{name}: {row['requests']} requests, {row['requests_per_s']}/s, failed "
            f"{row['failed']}, stale hits {row['stale_hits']} of {self.judged} judged, edits "
            f"committed {edits}; "
            f"p50 {row['p50_ms']} ms, p90 {row['p90_ms']} ms, p99 {row['p99_ms']} ms "
            f"(p99/p50 {row['p99_over_p50']}), max {row['max_ms']} ms"
        )
        return row


def start_editor(env: dict[str, str], corpus: Path) -> tuple[subprocess.Popen[str], Committed]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--editor", str(corpus)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    return process, Committed(process.stdout)


def http_phase(env: dict[str, str], corpus: Path, clients: int, seconds: float) -> dict[str, Any]:
    remote = connect(load_settings(env))
    assert remote is not None, "the server is not running"
    process, committed = start_editor(env, corpus)
    tally = Tally(committed)
    stop = time.monotonic() + seconds

    def client(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop:
            sent = time.time()
            started = time.perf_counter()
            content = remote.call("search", {"query": query(rng), "k": 5})
            elapsed = time.perf_counter() - started
            hits = None if content is None else content["results"]
            tally.add(elapsed, hits, sent)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    started = time.monotonic()
    with BusyMeter() as meter:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    wall = time.monotonic() - started
    process.terminate()
    process.wait()
    row = tally.report(f"HTTP, {clients} clients", wall, committed.edits)
    row["machine_busy_share"] = round(meter.busy_core_seconds / (wall * (os.cpu_count() or 1)), 2)
    return row


def stdio_phase(env: dict[str, str], corpus: Path, seconds: float) -> dict[str, Any]:
    process, committed = start_editor(env, corpus)
    tally = Tally(committed)
    rng = random.Random(1)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "semsearch", "mcp"], env=env, cwd=str(corpus.parent)
    )

    async def run() -> float:
        with open(corpus.parent / "mcp-stderr.log", "w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                await session.call_tool("search", {"query": "warm up"})
                started = time.monotonic()
                while time.monotonic() < started + seconds:
                    sent = time.time()
                    begun = time.perf_counter()
                    result = await session.call_tool("search", {"query": query(rng), "k": 5})
                    elapsed = time.perf_counter() - begun
                    content = result.structured_content
                    hits = None if result.is_error or content is None else content["results"]
                    tally.add(elapsed, hits, sent)
                return time.monotonic() - started

    wall = anyio.run(run)
    process.terminate()
    process.wait()
    return tally.report("stdio, 1 client at full rate", wall, committed.edits)


def cli_phase(env: dict[str, str], runs: int, cwd: Path, cli: list[str]) -> dict[str, Any]:
    """Wall time of ``python -m semsearch search`` through the server and in-process,
    alternately (the in-process runs look for a server in another runtime folder), and the CPU
    time of the CLI's process, which other processes on the machine do not inflate as much."""
    here = {**env, "XDG_RUNTIME_DIR": str(cwd / "no-server-here")}
    argv = [*cli, "search", "how are chunks embedded in batches"]
    floor_argv = [*cli, "--version"]
    timings: dict[str, list[float]] = {"served": [], "in-process": [], "--version": []}
    cpu: dict[str, list[float]] = {name: [] for name in timings}
    outputs: dict[str, str] = {}

    def timed(name: str, command: list[str], run_env: dict[str, str]) -> None:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        result = subprocess.run(command, env=run_env, capture_output=True, text=True, check=True)
        timings[name].append((time.perf_counter() - started) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        cpu[name].append(used * 1000)
        outputs[name] = result.stdout

    for _ in range(2):  # warm the page cache and the server
        timed("served", argv, env)
        timed("in-process", argv, here)
    for key in timings:
        timings[key].clear()
        cpu[key].clear()
    for _ in range(runs):
        timed("served", argv, env)
        timed("in-process", argv, here)
        timed("--version", floor_argv, env)
    assert outputs["served"] == outputs["in-process"], "the two paths printed different results"
    served, local = median(timings["served"]), median(timings["in-process"])
    row = {
        "runs": runs,
        "cli": " ".join(cli),
        "served_p50_ms": round(served, 1),
        "served_p90_ms": round(percentile(timings["served"], 90), 1),
        "in_process_p50_ms": round(local, 1),
        "in_process_p90_ms": round(percentile(timings["in-process"], 90), 1),
        "speedup_p50": round(local / served, 2),
        "version_p50_ms": round(median(timings["--version"]), 1),
        "cpu_p50_ms": {name: round(median(values), 1) for name, values in cpu.items()},
    }
    print(
        f"CLI search, {runs} runs each, alternating: through the server p50 {row['served_p50_ms']} "
        f"ms (p90 {row['served_p90_ms']}), in-process p50 {row['in_process_p50_ms']} ms "
        f"(p90 {row['in_process_p90_ms']}): {row['speedup_p50']}x; `semsearch --version` p50 "
        f"{row['version_p50_ms']} ms (the interpreter and the CLI's imports); CPU time of the "
        f"CLI's process, p50: {row['cpu_p50_ms']} ms"
    )
    return row


def prepare(work: Path, source: Path) -> tuple[dict[str, str], Path]:
    """A fresh copy of the corpus with LIVE notes, configured and indexed."""
    if work.exists():
        shutil.rmtree(work)
    corpus = work / "corpus"
    shutil.copytree(source, corpus, ignore=shutil.ignore_patterns("__pycache__", "*.onnx"))
    (corpus / "live").mkdir()
    for number in range(LIVE):
        (corpus / "live" / f"note{number}.md").write_text(live_text(number, 0), encoding="utf-8")
    env = {**os.environ, **child_env(work)}
    env["XDG_STATE_HOME"] = str(work / "home" / ".local" / "state")
    env.pop("XDG_RUNTIME_DIR", None)
    for args in (["add", str(corpus)], ["index"]):
        subprocess.run([sys.executable, "-m", "semsearch", *args], env=env, check=True)
    return env, corpus


def serve(env: dict[str, str]) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "semsearch", "serve", "--port", "0"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    for line in process.stderr:
        if " at http://" in line:
            print(line.strip())
            return process
    raise SystemExit("the server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=REPO / "semsearch")
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK / "load")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--cli-runs", type=int, default=20)
    parser.add_argument("--cli", metavar="PATH", help="the semsearch command the CLI phase times")
    parser.add_argument("--cli-only", action="store_true", help="only the CLI phase")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--editor", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.editor is not None:
        editor(args.editor)
        return
    env, corpus = prepare(args.work, args.corpus)
    facts = machine()
    print(json.dumps(facts))
    wait_for_quiet()
    server = serve(env)
    cli = [args.cli] if args.cli else [sys.executable, "-m", "semsearch"]
    phases: list[Callable[[], dict[str, Any]]] = [
        lambda: cli_phase(env, args.cli_runs, args.work, cli)
    ]
    if not args.cli_only:
        phases.append(lambda: http_phase(env, corpus, args.clients, args.seconds))
    rows = []
    try:
        for phase in phases:
            rows.append(phase())
    finally:
        server.terminate()
        server.wait()
    if not args.cli_only:
        rows.append(stdio_phase(env, corpus, args.seconds))
    write_json(args.json, {"machine": facts, "rows": rows})


if __name__ == "__main__":
    main()
