"""Helpers shared by the benchmark scripts: machine facts, isolated settings, timing, RSS.

Benchmarks are scripts, not tests: they never run under pytest. Each builds its settings from an
env dict it makes itself (never the user's config or index) and reports how busy the machine was,
because a 2-core box shared with other work gives noisy timings.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_WORK = Path(os.environ.get("SS_BENCH_WORK", "/tmp/semsearch-bench"))


def machine() -> dict[str, Any]:
    """Date, cores, RAM and CPU model: the columns of every RESULTS.md row."""
    model = platform.processor() or "unknown"
    try:
        for line in subprocess.run(
            ["lscpu"], capture_output=True, text=True, check=False
        ).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    mem_kib = 0
    with open("/proc/meminfo", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cores": os.cpu_count(),
        "ram_gib": round(mem_kib / 2**20, 1),
        "cpu": model,
        "simd": simd_flags(),
        "python": platform.python_version(),
    }


def simd_flags() -> list[str]:
    """The x86 vector extensions this process sees through CPUID (numpy's dispatch probe), so a
    row run under bench/avx2only.sh says AVX2 where /proc/cpuinfo still lists AVX-512."""
    from semsearch.model.builds import cpu_features

    features = cpu_features()
    wanted = ("AVX2", "AVX512F", "AVX512VNNI", "AVX512BF16", "AVXVNNI", "AMX_INT8")
    return [name for name in wanted if features.get(name)]


def bench_env(work: Path) -> dict[str, str]:
    """An SS-style environment that points config, data and index into ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    env = {
        "HOME": str(work / "home"),
        "XDG_CONFIG_HOME": str(work / "home" / ".config"),
        "XDG_DATA_HOME": str(work / "home" / ".local" / "share"),
        "XDG_CACHE_HOME": str(work / "home" / ".cache"),
        "SS_CONFIG_PATH": str(work / "config.json"),  # never created: defaults only
        "SS_INDEX_PATH": str(work / "index.db"),
    }
    for name in (
        "SS_MODEL",
        "SS_MODEL_DIR",
        "SS_STORE_BACKEND",
        "SS_MODEL_CACHE",
        "SS_MODEL_VARIANT",
    ):
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


def child_env(work: Path) -> dict[str, str]:
    """Environment for a child process: the bench env plus PATH, PYTHONPATH and BLAS hints."""
    env = bench_env(work)
    # LD_PRELOAD carries bench/avx2only.sh's CPUID mask into the child.
    for name in ("PATH", "LANG", "OPENBLAS_CORETYPE", "PYTHONDONTWRITEBYTECODE", "LD_PRELOAD"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    return env


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: Sequence[float]) -> float:
    """Median, NaN for no values."""
    return statistics.median(values) if values else float("nan")


def _cpu_times() -> tuple[int, int]:
    with open("/proc/stat", encoding="ascii") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    return sum(fields), fields[3] + fields[4]


def cpu_idle(seconds: float = 0.5) -> float:
    """Fraction of all cores idle over a short window."""
    total0, idle0 = _cpu_times()
    time.sleep(seconds)
    total1, idle1 = _cpu_times()
    return (idle1 - idle0) / max(total1 - total0, 1)


def wait_for_quiet(threshold: float = 0.9, timeout: float = 60.0) -> float:
    """Wait (up to ``timeout``) until the machine is mostly idle; returns the last idle share."""
    deadline = time.monotonic() + timeout
    idle = cpu_idle()
    while idle < threshold and time.monotonic() < deadline:
        idle = cpu_idle()
    if idle < threshold:
        print(
            f"warning: machine busy ({1 - idle:.0%} CPU in use); timings are noisy", file=sys.stderr
        )
    return idle


class BusyMeter:
    """CPU used by the whole machine during a run, to tell how much was someone else's."""

    def __enter__(self) -> BusyMeter:
        self._start = _cpu_times()
        self._wall = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        total, idle = _cpu_times()
        ticks = os.sysconf("SC_CLK_TCK")
        self.busy_core_seconds = ((total - self._start[0]) - (idle - self._start[1])) / ticks
        self.wall = time.monotonic() - self._wall

    def foreign_share(self, own_cpu_seconds: float) -> float:
        """Share of the machine's capacity used by other processes during the run."""
        cores = os.cpu_count() or 1
        return max(0.0, (self.busy_core_seconds - own_cpu_seconds) / (self.wall * cores))


@dataclass
class RssSampler:
    """Samples a process's resident set size (VmRSS) every ``interval`` seconds."""

    pid: int
    interval: float = 0.1

    def __post_init__(self) -> None:
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = time.monotonic()
        self._thread.start()

    def _run(self) -> None:
        path = f"/proc/{self.pid}/status"
        while not self._stop.is_set():
            try:
                with open(path, encoding="ascii") as handle:
                    for line in handle:
                        if line.startswith("VmRSS:"):
                            kib = int(line.split()[1])
                            self.samples.append((time.monotonic() - self._started, kib))
            except (OSError, ValueError):
                return
            self._stop.wait(self.interval)

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()

    def peak_mib(self) -> float:
        """Largest sample, MiB."""
        return max((kib for _, kib in self.samples), default=0) / 1024


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    """Write a run's figures as JSON when ``--json PATH`` was given."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
