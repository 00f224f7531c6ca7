"""The full check of a SQLite index file (``status --check``), run in a child process.

Three steps: SQLite's ``PRAGMA integrity_check`` (every page and b-tree of the file); FTS5's
``integrity-check`` command (the full-text index: SQLite before 3.44 leaves FTS5 tables out of
the pragma; it needs write access, so a read-only file goes without it); then every row read back
the way semsearch reads it (text that is no longer UTF-8, vectors of another size or not of unit
length, chunks whose file is gone), which the pragma does not look into.

The FTS5 command can crash SQLite 3.40 on a damaged full-text index (a segfault, seen with 64
bytes overwritten in one of its pages), so the check runs as ``python -m
semsearch.store.sqlite.check PATH`` and its parent reports such a crash as damage. The child
reports each step and problem as a JSON line on stdout. When it found a problem it exits without
closing its connection: closing would checkpoint the write-ahead log into the file, and a damaged
file is left as it was found.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from semsearch.store.lock import is_writable
from semsearch.store.sqlite.blocks import damaged_blocks, has_blocks_table
from semsearch.store.sqlite.rows import VECTOR_DTYPES
from semsearch.store.sqlite.schema import connect, damage_problem, has_column, read_int_meta

STEPS = ("SQLite integrity_check", "FTS5 integrity-check", "every row read")
MAX_PROBLEMS = 20  # integrity_check lists every bad page: the first ones say enough
UNIT_TOLERANCE = 0.01  # a float16 vector's length is 1 within ~1e-3


def check_file(path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the steps run, the problems found) of the index file at ``path``; no problem when it
    is sound. Runs the check in a child process (see the module docstring)."""
    child = subprocess.run(
        [sys.executable, "-m", "semsearch.store.sqlite.check", str(path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[3],  # so `-m` never imports another semsearch
        check=False,
    )
    steps: list[str] = []
    problems: list[str] = []
    for line in child.stdout.splitlines():
        event = json.loads(line)
        if "step" in event:
            steps.append(event["step"])
        else:
            problems.append(event["problem"])
    if child.returncode < 0:
        name = signal.Signals(-child.returncode).name
        doing = steps[-1] if steps else "opening the file"
        problems.append(f"SQLite crashed ({name}) in the {doing}: the file is damaged there")
    elif child.returncode != 0:
        said = child.stderr.strip().splitlines()
        problems.append(f"the check failed: {said[-1] if said else f'exit {child.returncode}'}")
    return tuple(steps), tuple(problems[:MAX_PROBLEMS])


def problems_of(path: Path) -> Iterator[tuple[str, str]]:
    """("step", name) as each step starts and ("problem", text) for what it finds: the child's
    work. The connection is closed only when nothing was found."""
    read_only = not is_writable(path)
    try:
        conn = connect(path, read_only)
        conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
    except sqlite3.DatabaseError as exc:
        yield "problem", damage_problem(exc) or f"it is not a semsearch index ({exc})"
        return
    found = False
    for event in _steps(conn, read_only):
        found = found or event[0] == "problem"
        yield event
    if not found:
        conn.close()


def _steps(conn: sqlite3.Connection, read_only: bool) -> Iterator[tuple[str, str]]:
    yield "step", STEPS[0]
    try:
        for (said,) in conn.execute(f"PRAGMA integrity_check({MAX_PROBLEMS})"):
            for line in str(said).splitlines():
                if line != "ok" and not line.startswith("***"):  # "*** in database main ***"
                    yield "problem", line
    except sqlite3.DatabaseError as exc:
        yield "problem", _said(exc)
        return
    if not read_only:
        yield "step", STEPS[1]
        try:
            conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        except (sqlite3.DatabaseError, MemoryError) as exc:  # MemoryError: a length read as huge
            yield "problem", f"full-text index: {_said(exc) or 'out of memory reading it'}"
    yield "step", STEPS[2]
    try:
        yield from _read_rows(conn)
    except sqlite3.DatabaseError as exc:
        yield "problem", _said(exc)
    except ValueError:  # int() of a damaged meta value
        yield "problem", "the meta table holds a dimension that is not a number"


def _read_rows(conn: sqlite3.Connection) -> Iterator[tuple[str, str]]:
    """Every row decoded as semsearch decodes it; a chunk vector must have a stored size."""
    dim = read_int_meta(conn, "dim")
    sizes = {dim * np.dtype(dtype).itemsize for dtype in VECTOR_DTYPES}
    path_vector = ", path_vector" if has_column(conn, "files", "path_vector") else ""
    for table, columns in (
        ("meta", "key, value"),
        ("folders", "path, name"),
        ("files", f"rel, sha256, status, kind{path_vector}"),
        ("chunks", "text, text_hash"),
    ):
        for _ in conn.execute(f"SELECT {columns} FROM {table}"):
            pass
    wrong = bent = 0
    rows = conn.execute("SELECT vector FROM chunks WHERE vector IS NOT NULL")
    while batch := [blob for (blob,) in rows.fetchmany(4096)]:
        wrong += sum(len(blob) not in sizes for blob in batch)
        bent += _not_unit(batch, dim)
    if wrong:
        yield "problem", f"{wrong} chunk vectors that are not {dim} float16 or float32 values"
    if bent:
        yield "problem", f"{bent} chunk vectors that are not unit length (bytes overwritten)"
    if has_blocks_table(conn) and (broken := damaged_blocks(conn, dim)):
        yield "problem", f"{broken} vector blocks that are not whole (bytes cut or overwritten)"
    orphans = conn.execute("PRAGMA foreign_key_check").fetchall()
    if orphans:
        yield "problem", f"{len(orphans)} rows whose folder or file row is gone"


def _not_unit(blobs: list[bytes], dim: int) -> int:
    """How many of the vectors are neither of length 1, as embeddings are, nor all zeros (the
    test double's vector of a text without words); rows of a size no dtype has are counted
    apart."""
    count = 0
    for dtype in VECTOR_DTYPES:
        size = dim * np.dtype(dtype).itemsize
        mine = [blob for blob in blobs if len(blob) == size]
        if mine and dim:
            matrix = np.frombuffer(b"".join(mine), dtype=dtype).reshape(len(mine), dim)
            with np.errstate(all="ignore"):
                norms = np.linalg.norm(matrix.astype(np.float64), axis=1)
            count += int(np.sum(~((np.abs(norms - 1.0) < UNIT_TOLERANCE) | (norms == 0))))
    return count


def _said(exc: sqlite3.DatabaseError | MemoryError) -> str:
    if isinstance(exc, sqlite3.DatabaseError):
        return damage_problem(exc) or str(exc)
    return ""


def _main(argv: list[str]) -> None:
    for kind, text in problems_of(Path(argv[0])):
        print(json.dumps({kind: text}), flush=True)
    os._exit(0)  # a damaged file's connection stays open: closing would checkpoint the WAL


if __name__ == "__main__":
    _main(sys.argv[1:])
