"""The LanceDB index's path vectors: the ``paths`` table and the ``Store`` methods that use it.

``paths(file_id, vector: list<float32>)`` holds one row per file whose rel path is embedded
(``Store.pending_paths``). It is created by the first ``set_path_vectors`` and never dropped:
a rebuild or a change of model deletes its rows, so its versions only grow (``generation``
sums them) and a reader's handle stays valid. The list has no fixed size for that reason (the
dimension is the model's; ``set_path_vectors`` checks it). Rows go when their file goes, or
when a move changes its rel (before the files' rows change, so a run killed in between leaves
files that are pending again, never a vector of another rel).

Imported by :mod:`semsearch.store.lance.store`, which checks first that the lancedb extra loads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from semsearch.store.base import FloatArray
from semsearch.store.lance.cache import ReadCache
from semsearch.store.lance.tables import Pins, ids_sql, retry

PATHS = pa.schema([("file_id", pa.int64()), ("vector", pa.list_(pa.float32()))])

Rows = dict[int, dict[str, Any]]


class PathVectors:
    """The path-vector side of :class:`~semsearch.store.lance.store.LanceStore` (a mixin, like
    ``lance_tables.VectorColumns``).

    Two caches, each valid for one version of the ``paths`` table: the ids of the files that
    have a path vector (for ``pending_paths``; this store's own writes keep it current), and
    the vectors that ``path_vectors`` looked up, so that a search costs one version check when
    nothing changed.
    """

    _db: Any
    _versions: Pins  # the tables' versions as a search reads them
    _paths: Any = None  # the paths table, once it exists
    _paths_absent = False  # on object storage: found missing, not asked again until a sync
    _path_ids: tuple[int, frozenset[int]] = (-1, frozenset())
    _path_cache: tuple[int, dict[int, FloatArray | None]] | None = None

    def _file_rows(self) -> Rows:
        raise NotImplementedError

    def model(self) -> tuple[str, int] | None:
        """The (model id, dimension) the stored vectors were made with, if any."""
        raise NotImplementedError

    def _open_if_there(self, name: str) -> Any:
        raise NotImplementedError

    def _path_cache_of(self) -> ReadCache | None:
        """Where to keep the whole table, read once per version, when the store reads it whole
        (an index on object storage); None to look up the files a search asks for."""
        return None

    @property
    def _is_remote(self) -> bool:
        raise NotImplementedError

    def _path_table(self, *, create: bool = False) -> Any:
        if self._paths is None and not self._paths_absent:
            self._paths = self._open_if_there("paths")
            self._paths_absent = self._paths is None and self._is_remote
        if self._paths is None and create:
            self._paths = self._db.create_table("paths", schema=PATHS)
            self._paths_absent = False
        return self._paths

    def _sync_paths(self) -> None:
        """Move the paths table on to its latest version, or look for it again
        (``LanceStore.sync`` on object storage)."""
        self._paths_absent = False
        if self._paths is not None:
            self._paths.checkout_latest()

    def path_version(self) -> int:
        """The paths table's version (0 before it exists): part of ``generation``."""
        table = self._path_table()
        return 0 if table is None else int(table.version)

    def _stored_path_ids(self) -> frozenset[int]:
        """The ids of the files that have a path vector (read again when the table changed)."""
        table = self._path_table()
        if table is None:
            return frozenset()
        version = table.version
        if self._path_ids[0] != version:
            query = table.search().select(["file_id"]).limit(None)
            ids = frozenset(retry(query.to_arrow)["file_id"].to_pylist())
            self._path_ids = (version, ids)
        return self._path_ids[1]

    def _note_path_write(self, before: int, ids: frozenset[int]) -> None:
        """Keep the id cache current across this store's own commit (``ids``: the new set)."""
        if self._path_ids[0] == before:
            self._path_ids = (int(self._paths.version), ids)

    def pending_paths(
        self, limit: int, folder_ids: Sequence[int] | None = None
    ) -> list[tuple[int, str]]:
        """(file id, rel) of up to ``limit`` ok files without a path vector, by id (of
        ``folder_ids`` when given)."""
        done = self._stored_path_ids()
        rows = self._file_rows()
        wanted = None if folder_ids is None else set(folder_ids)
        pending = sorted(
            i
            for i, r in rows.items()
            if r["status"] == "ok"
            and i not in done
            and (wanted is None or r["folder_id"] in wanted)
        )
        return [(i, rows[i]["rel"]) for i in pending[: max(limit, 0)]]

    def set_path_vectors(self, file_ids: Sequence[int], vectors: FloatArray) -> None:
        """Store row ``i`` of ``vectors`` as the path vector of file ``file_ids[i]`` (one
        merge-insert); ids of files no longer stored are ignored."""
        matrix = np.ascontiguousarray(vectors, dtype=np.float32)
        model = self.model()
        assert matrix.ndim == 2 and len(matrix) == len(file_ids)
        assert model is None or matrix.shape[1] == model[1], "path vectors of another dimension"
        files = self._file_rows()
        row_of = {int(i): n for n, i in enumerate(file_ids) if int(i) in files}  # the last wins
        if not row_of:
            return
        picked = matrix[list(row_of.values())]
        offsets = pa.array(np.arange(len(picked) + 1, dtype=np.int32) * picked.shape[1])
        update = pa.table(
            {
                "file_id": pa.array(list(row_of), pa.int64()),
                "vector": pa.ListArray.from_arrays(offsets, pa.array(picked.reshape(-1))),
            },
            schema=PATHS,
        )
        table = self._path_table(create=True)
        before, ids = table.version, self._stored_path_ids()
        table.merge_insert(
            "file_id"
        ).when_matched_update_all().when_not_matched_insert_all().execute(update)
        self._note_path_write(before, ids | set(row_of))

    def path_vectors(self, file_ids: Sequence[int]) -> dict[int, FloatArray]:
        """File id → path vector (read-only), for those of ``file_ids`` that have one.

        Looked up once per version of the paths table; only this store's caches are touched,
        so it may run while the lexical arm reads the chunks table in another thread.
        """
        table = self._path_table()
        if table is None or not file_ids:
            return {}
        version = self._versions.of(table)  # read first: rows read after are as new or newer
        cache = self._path_cache
        known = cache[1] if cache is not None and cache[0] == version else None
        whole = self._path_cache_of()
        if whole is not None:
            if known is None:
                query = table.search().select(["file_id", "vector"]).limit(None)
                found = whole.read("paths", str(version), lambda: retry(query.to_arrow))
                known = dict(_vectors_by_file(found))
                self._path_cache = (version, known)
            return {int(i): v for i in file_ids if (v := known.get(int(i))) is not None}
        known = {} if known is None else known
        missing = [i for i in dict.fromkeys(int(i) for i in file_ids) if i not in known]
        if missing:
            found = _read_path_vectors(table, missing)
            known.update({i: found.get(i) for i in missing})
            self._path_cache = (version, known)
        return {int(i): v for i in file_ids if (v := known.get(int(i))) is not None}

    def _drop_path_vectors(self, file_ids: Iterable[int] | None) -> None:
        """Forget the path vectors of these files (of every file when None): one commit, none
        when no such file has one."""
        stored = self._stored_path_ids()  # empty before the table exists
        dropped = stored if file_ids is None else stored.intersection(file_ids)
        if not dropped:
            return
        table = self._path_table()
        before = table.version
        table.delete("true" if file_ids is None else f"file_id IN ({ids_sql(dropped)})")
        self._note_path_write(before, stored - dropped)


def _read_path_vectors(table: Any, file_ids: list[int]) -> dict[int, FloatArray]:
    """file id → stored path vector of those of ``file_ids`` that have one (a zero row, stored
    for a document, is none)."""
    query = table.search().where(f"file_id IN ({ids_sql(file_ids)})").select(["file_id", "vector"])
    return _vectors_by_file(retry(query.limit(None).to_arrow))


def _vectors_by_file(found: pa.Table) -> dict[int, FloatArray]:
    """file id → path vector of rows (file_id, vector) of the paths table, zero rows left out."""
    if not found.num_rows:
        return {}
    flat = np.asarray(found["vector"].combine_chunks().flatten().to_numpy(), dtype=np.float32)
    matrix = flat.reshape(found.num_rows, -1)
    matrix.flags.writeable = False  # the rows handed out are views of the cache
    ids = found["file_id"].to_pylist()
    real: list[bool] = np.any(matrix != 0, axis=1).tolist()
    return {i: row for i, row, keep in zip(ids, matrix, real, strict=True) if keep}


def moved_path_ids(rows: tuple[Rows, Rows], old_path: str, new_path: str, prefix: str) -> list[int]:
    """The files whose path vectors ``move_folder(old_path, new_path, prefix)`` makes stale:
    all of the folder's when ``prefix`` changes their rels, else those the target's files of
    the same rel replace (see ``LanceStore.move_folder``, which reads the same rows)."""
    folders, files = rows
    old = next((r for r in folders.values() if r["path"] == old_path), None)
    new = next((r for r in folders.values() if r["path"] == new_path), None)
    if old is None or old_path == new_path:
        return []
    mine = [r for r in files.values() if r["folder_id"] == old["id"]]
    if prefix:
        return [r["id"] for r in mine]
    taken = {r["rel"] for r in files.values() if new is not None and r["folder_id"] == new["id"]}
    return [r["id"] for r in mine if r["rel"] in taken]
