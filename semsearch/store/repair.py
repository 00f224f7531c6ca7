"""A damaged index: whether there is an index at all, its full check, and setting it aside.

A damaged index is never repaired in place, written over or deleted. ``index --rebuild``
(:meth:`semsearch.index.Index.rebuild`) renames it, holding the write lock, and indexes anew:
``index.db`` becomes ``index.db.damaged-20261205-081500`` (``.old-…`` when the check found it
sound), and its ``-wal`` and ``-shm`` files go with it under that name, so SQLite opens the kept
copy whole; a LanceDB folder is renamed the same way. The one exception is LanceDB's texts
table, whose rows all come from the chunks table: an index run makes it again
(``LanceStore.maintain``), and searches read the chunks table meanwhile.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from semsearch.config import Location, RemoteLocation
from semsearch.errors import IndexDamagedError, StoreError
from semsearch.store.base import IndexCheck
from semsearch.store.lance import is_index_folder
from semsearch.store.sqlite.check import check_file
from semsearch.store.sqlite.schema import COMPANIONS, is_index_file


def has_index(backend: str, path: Location) -> bool:
    """Whether an index is at ``path``, damaged or not. A zero-byte file (what an index run
    stopped before its first commit leaves) or an empty LanceDB folder is none yet; on object
    storage, a prefix holding no table."""
    if isinstance(path, RemoteLocation):
        # an optional extra: loaded only when chosen
        from semsearch.store.lance.store import has_tables

        return has_tables(path)
    return is_index_folder(path) if backend == "lancedb" else is_index_file(path)


def check_index(backend: str, path: Location) -> IndexCheck:
    """Read the whole index at ``path`` and say what is wrong with it (nothing when sound).

    SQLite: ``PRAGMA integrity_check``, FTS5's ``integrity-check`` and every row read back, in
    a child process (:mod:`semsearch.store.sqlite.check`). LanceDB: every table opened and read
    in full, and a full-text query. Neither writes to the index.
    """
    if isinstance(path, Path) and backend != "lancedb":
        steps, problems = check_file(path)
        return IndexCheck(path, steps, problems)
    # an optional extra: loaded only when chosen
    from semsearch.store.lance.store import LanceStore, mended_by_index

    steps = ("every table opened", "every row read", "a full-text query")
    try:
        store = LanceStore(path)
    except IndexDamagedError as exc:
        return IndexCheck(path, steps[:1], (exc.problem,))
    try:
        problems = tuple(store.check())
    finally:
        store.close()
    return IndexCheck(path, steps, problems, bool(problems) and mended_by_index(problems))


def set_aside(path: Path, reason: str, now: float | None = None) -> tuple[Path, ...]:
    """Rename the index at ``path`` (a file and its SQLite companions, or a LanceDB folder) to
    ``NAME.REASON-YYYYmmdd-HHMMSS`` beside it, never over an existing name; the new paths,
    the index's first. The caller holds the write lock.

    The companions move first: a ``-wal`` left behind would be read into the new index made at
    ``path``.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    base = f"{path.name}.{reason}-{stamp}"
    names = [base, *(f"{base}-{n}" for n in range(2, 100))]
    name = next(n for n in names if not any(_taken(path, n, end) for end in ("", *COMPANIONS)))
    kept: list[Path] = []
    try:
        for end in COMPANIONS:
            companion = path.with_name(path.name + end)
            if companion.exists():
                kept.append(companion.rename(path.with_name(name + end)))
        kept.insert(0, path.rename(path.with_name(name)))
    except OSError as exc:
        raise StoreError(
            f"Cannot set the index {path} aside: {exc.strerror}. Nothing was deleted; "
            f"{', '.join(map(str, kept)) or 'nothing'} moved so far."
        ) from exc
    return tuple(kept)


def _taken(path: Path, name: str, end: str) -> bool:
    with contextlib.suppress(OSError):
        return path.with_name(name + end).exists() or path.with_name(name + end).is_symlink()
    return True
