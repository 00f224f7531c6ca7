"""Moving a folder in the LanceDB index: ``LanceStore.move_folder`` (see ``Store.move_folder``).

Three commits, in this order: the chunks' ``terms`` (only when the rel paths change), the file
rows (folder id and rel), the folder row (renamed, or deleted when the files joined a folder
already in the index). A run killed in between leaves an index whose next run redoes the files
whose rows no longer match the disk; nothing is searchable twice.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

import pyarrow as pa

from semsearch.store.lance.tables import FILES, ids_sql, retagged

Rows = dict[int, dict[str, Any]]


def move_folder(
    tables: tuple[Any, Any, Any], rows: tuple[Rows, Rows], old_path: str, new_path: str, prefix: str
) -> int:
    """Move the folder ``old_path``'s files to ``new_path`` under ``prefix``; ok files moved.

    A helper of ``LanceStore.move_folder``, kept apart so that ``lance.py`` stays a readable
    size: ``tables`` are the store's (folders, files, chunks or None) tables and ``rows`` its
    current (folder, file) rows by id.
    """
    folder_table, file_table, chunk_table = tables
    folders, files = rows
    old = next((r for r in folders.values() if r["path"] == old_path), None)
    new = next((r for r in folders.values() if r["path"] == new_path), None)
    if old is None or old_path == new_path:
        return 0
    taken = {r["rel"] for r in files.values() if new is not None and r["folder_id"] == new["id"]}
    mine = [r for r in files.values() if r["folder_id"] == old["id"]]
    dropped = [r["id"] for r in mine if prefix + r["rel"] in taken]
    if dropped:  # chunks first, as LanceStore deletes files
        if chunk_table is not None:
            chunk_table.delete(f"file_id IN ({ids_sql(dropped)})")
        file_table.delete(f"id IN ({ids_sql(dropped)})")
    target = old["id"] if new is None else new["id"]
    moving = [
        {**r, "folder_id": target, "rel": prefix + r["rel"]}
        for r in mine
        if prefix + r["rel"] not in taken
    ]
    if moving and prefix and chunk_table is not None:
        _retag(chunk_table, {r["id"]: r for r in moving})
    if moving:
        file_table.merge_insert("id").when_matched_update_all().execute(
            pa.Table.from_pylist(moving, FILES)
        )
    if new is None:
        values = {"path": new_path, "name": PurePath(new_path).name}
        folder_table.update(where=f"id = {int(target)}", values=values)
    else:
        folder_table.delete(f"id = {int(old['id'])}")
    return sum(1 for r in moving if r["status"] == "ok")


def _retag(chunk_table: Any, files: Rows) -> None:
    """Recompute the ``terms`` of these files' chunks from their rows' (new) rel paths."""
    query = chunk_table.search().where(f"file_id IN ({ids_sql(files)})")
    table = query.select(["id", "file_id", "text"]).limit(None).to_arrow()
    if table.num_rows:
        chunk_table.merge_insert("id").when_matched_update_all().execute(retagged(table, files))
