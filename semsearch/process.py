"""Process-wide settings for a program that searches: the CLI, the MCP server, the bench scripts.

:func:`configure_process` sets what must be set before numpy loads, so call it first. The CLI
calls its two halves apart: :func:`set_environment` first, :func:`cap_malloc_arenas` only when it
loads the library (:mod:`ctypes` costs 1.5 ms of a search that a running server answers).
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

# OpenBLAS's worker threads spin after every call: the one matrix-vector product of a search gains
# little from them while their spinning halves the speed of the ONNX query embedding and the
# SQLite work beside it (bench/RESULTS.md). A user's own setting wins.
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1"}
# LanceDB logs (Rust's env_logger) to stderr: warnings of its object store's retries among them.
# Every failure it reports reaches the user as one line of ours, so its own lines are off unless
# the user asks for them (LANCEDB_LOG=debug).
LOG_ENV = {"LANCEDB_LOG": "off"}
M_ARENA_MAX = -8  # glibc's mallopt parameter number


def configure_process() -> None:
    """Process-wide settings of the CLI and the MCP server (the bench scripts apply them too).

    Call before numpy is imported: OpenBLAS reads its thread count when it loads.
    """
    set_environment()
    cap_malloc_arenas()


def set_environment() -> None:
    """The environment the libraries read when they load (a user's own setting wins)."""
    for name, value in {**THREAD_ENV, **LOG_ENV}.items():
        os.environ.setdefault(name, value)


def cap_malloc_arenas() -> None:
    """At most two glibc malloc arenas, unless MALLOC_ARENA_MAX says otherwise.

    glibc gives threads that allocate their own arenas; onnxruntime's workers and the search's
    lexical thread each kept one. Two arenas took the peak RSS of indexing the cpython-mix corpus
    from 302 to 295 MiB at the same speed (bench/RESULTS.md). Elsewhere (musl, macOS) a no-op.
    """
    if "MALLOC_ARENA_MAX" in os.environ:
        return
    mallopt = _glibc("mallopt")
    if mallopt is not None:
        mallopt(M_ARENA_MAX, 2)


def release_freed_memory() -> None:
    """Give the memory freed so far back to the system, where the C library can (glibc's
    ``malloc_trim``; elsewhere nothing). glibc keeps freed blocks for reuse, and a vector
    block's codes (freed in the searching thread's heap) are not reused by the sessions built
    in another (:mod:`semsearch.store.packed`): at 1.4M chunks the process held 1.8 GB after
    the build, 0.83 GB once trimmed."""
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim(0)


@functools.cache
def _glibc(name: str) -> Any:
    """glibc's function ``name``, or None on another C library or system."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here: the CLI on its way to a running server has no use for it (1.5 ms)

    try:
        return getattr(ctypes.CDLL("libc.so.6"), name)
    except (OSError, AttributeError):  # not glibc
        return None
