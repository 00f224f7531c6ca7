"""A change of model built beside the index, then copied in whole (SQLite).

A change of model (``index --model``) chunks and embeds every file again. The new model's index
is built in a file of its own beside the index, ``NAME.next`` (with its ``-wal`` and ``-shm``),
while searches read the old index whole, with the old model. When every chunk has its vector,
:meth:`~semsearch.store.sqlite.store.SqliteStore.replace_with` copies it into the index file in
one transaction, and the file goes. A run stopped before (Ctrl-C, a full disk, ``--max-files``)
leaves it: the next index run for that model goes on where it stopped.

Readers keep what they read by chunk id (:mod:`semsearch.store.exact`), so the next index gives
its chunks ids above every id the index ever gave (``ID_GAP`` above, made sure again before the
copy: a next index whose ids the index has since reached is made anew). LanceDB changes its
model in place (``clear_chunks``).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

from semsearch.errors import StoreError
from semsearch.store.sqlite.schema import COMPANIONS, file_bytes, is_index_file
from semsearch.store.sqlite.store import SqliteStore

# The next index's chunk ids start this far above the index's: room for the chunks that runs
# updating the index with its own model (``index PATH``) write while the change waits.
ID_GAP = 1 << 32


def next_path(path: Path) -> Path:
    """Where the index at ``path`` builds its next model's index."""
    return path.with_name(path.name + ".next")


def next_bytes(path: Path) -> int:
    """Bytes on disk of the next index beside the index at ``path`` (0 when there is none)."""
    return file_bytes(next_path(path))


def left_model(path: Path) -> str | None:
    """The model of the next index a stopped run left beside the index at ``path``; None when
    there is none, it recorded no model yet, or it cannot be read (a new one replaces it)."""
    beside = next_path(path)
    if not is_index_file(beside):
        return None
    try:
        store = SqliteStore(beside)
    except StoreError:
        return None
    try:
        model = store.model()
    finally:
        store.close()
    return None if model is None else model[0]


def open_next(index: SqliteStore, model_id: str, folders: Collection[str]) -> SqliteStore:
    """The next index of ``index`` for ``model_id``: the one a stopped run left when it is of
    that model (or none yet) and holds only ``folders`` (real paths), else a new one."""
    path = next_path(index.path)
    if is_index_file(path):
        try:
            kept = SqliteStore(path, create=True)
        except StoreError:  # damaged, or of another version: made again
            pass
        else:
            model = kept.model()
            same = model is None or model[0] == model_id
            if (
                same
                and {os.path.realpath(f.path) for f in kept.folders()} <= set(folders)
                and kept.page_size() == index.page_size()
                and kept.start_ids_after(index.last_chunk_id())
            ):
                return kept
            kept.close()
    drop_next(index.path)  # and what a run stopped before its first commit left
    built = SqliteStore(path, create=True, page_size=index.page_size())
    built.start_ids_after(index.last_chunk_id() + ID_GAP)
    return built


def switch(index: SqliteStore, built: SqliteStore) -> None:
    """Copy the finished next index ``built`` into ``index`` and remove its file."""
    built.prepare_copy(index)
    index.replace_with(built)
    built.close()
    drop_next(index.path)


def drop_next(path: Path) -> None:
    """Remove the next index of the index at ``path`` (abandoned or copied in), if any."""
    beside = next_path(path)
    # the companions first: a -wal left behind would be read into the next file made there
    for end in (*COMPANIONS, ""):
        try:
            beside.with_name(beside.name + end).unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StoreError(
                f"Cannot remove {beside.name}{end}, a change of model left beside the index "
                f"{path}: {exc.strerror}. Remove it by hand."
            ) from exc
