"""The LanceDB index: the optional backend for indexes that outgrow one SQLite file.

Chosen with ``SS_STORE_BACKEND=lancedb`` (or config ``storeBackend``), installed with
``pip install "semsearch[lancedb]"``. Data lives in ``<index dir>/lancedb/``, six tables::

    meta(key, value)      schema_version, model_id, dim, terms_version, ann_rows (chunks when
                          the vector index was trained), next_files_id, next_chunks_id,
                          chunks_epoch (times the chunks table was created or dropped),
                          copies ("0" when the last run found no two chunks of one text),
                          folder_commit.ID (the git commit folder ID's last complete run read,
                          when a checkout), written (on object storage: the time of the last
                          commit of the last run, which remote readers look for),
                          index_id (random, made by the first writer: names the copies readers
                          keep on local disk, see ``lance.cache``), folders (on object storage:
                          the folders table's rows as JSON, written with ``written``; readers
                          take them from here and never open that table)
    folders(id, path, name, last_indexed)
    files(id, folder_id, rel, mtime_ns, size, sha256, status, kind)
                          rel: a byte of it that is not UTF-8 is a NUL and two hex digits
                          (`store.base.stored_rel`), as in the SQLite index
    chunks(id, file_id, ord, start_line, end_line, start_offset, end_offset, page,
           text, terms, defines, vector: fixed_size_list<float32>[dim], L2-normalised,
           text_hash, has_vector: bool)
    paths(file_id, vector: list<float32>)   a file's rel path embedded (dim long), see lance.paths
    texts(text_hash, vector, text, terms, defines, ids, files, starts, ends, pages)
                          one row per distinct text, past the ANN threshold in a tree of
                          copies: its first chunk's columns, the places of all its chunks as
                          lists (see lance.texts); meta texts_of, texts_ann_rows,
                          texts_made. Made again by an index run when damaged (its rows
                          all come from the chunks table)

A chunk written before its vector holds zeros and ``has_vector`` false (a flag, not a null
list, keeps ``vector`` a plain fixed-size list for the ANN index); ``text_hash`` keys vectors
for reuse (see ``lance_tables.VectorColumns``). Schema 1 lacked both; a writer adds them.
Schema 2 had no ``paths`` table: it is created with the first path vector.

The columns mean what they mean in the SQLite store (see ``store/sqlite/store.py``); ``terms`` and
``defines`` are written with the chunk instead of by triggers. Full-text indexes (LanceDB's own,
English stemming, no stop-word removal) cover ``text``, ``terms`` and ``defines``.

B-tree indexes cover ``id`` and ``text_hash`` (a table made before the latter gets it from
``maintain``). Vector search is exact (``semsearch.store.exact``, in memory) below
``ANN_MIN_ROWS`` chunks; at that size an IVF-HNSW-SQ index with cosine distance is built, and it
is retrained whenever the table has doubled since. ``maintain`` (after every index run and
folder removal) brings the full-text and vector indexes up to date, compacts the tables and
deletes old versions.

Consistency: every write is one LanceDB commit. A file's chunks are replaced in one commit
(merge-insert that also deletes the file's old chunks); its ``files`` row is written after, so a
run killed between the two leaves a row whose mtime/sha no longer match and the next run redoes
the file. Chunks whose file row never got written are invisible to search and deleted by the
next ``maintain``. Readers open tables with a read-consistency interval of zero: a long-running
MCP server sees what another process committed on its next query.

A folder holding some tables but not ``meta``, ``folders`` and ``files``, or ``ok`` files but
no ``chunks`` table, is damaged (an index run would find those files unchanged and never redo
them), as is a table LanceDB cannot open or read (``lance_problem``): every method then raises
``IndexDamagedError``. A folder without tables is no index yet.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import logging
import re
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path, PurePath
from typing import Any

import numpy as np

from semsearch.config import LANCEDB_MISSING, Location, RemoteLocation
from semsearch.errors import (
    ConfigError,
    IndexDamagedError,
    IndexMissingError,
    ModelMismatchError,
    StoreError,
)
from semsearch.store.base import (
    COMMIT_KEY,
    ChooseCopy,
    ChunkPlace,
    ChunkRow,
    FileRef,
    FileState,
    FileWrite,
    Folder,
    PlaceCache,
    damaged_error,
    hash_keys,
    model_mismatch_message,
    reports_damage,
    text_hash,
)
from semsearch.store.exact import ExactVectors
from semsearch.store.lance import is_index_folder
from semsearch.store.lock import is_medium_failure
from semsearch.store.s3 import refused_message, unreachable_message
from semsearch.text.lexical import COLUMN_WEIGHTS, TERMS_VERSION, LexicalQuery

try:  # the sibling modules import lancedb and pyarrow too
    import lancedb
    import pyarrow as pa
    import pyarrow.compute as pc
    from lancedb.index import FTS, BTree, HnswSq

    from semsearch.store.lance.cache import ReadCache
    from semsearch.store.lance.paths import PathVectors, moved_path_ids
    from semsearch.store.lance.query import (
        ann_nearest,
        exact_nearest,
        full_text,
        prewarm_full_text,
    )
    from semsearch.store.lance.tables import (
        FILES,
        FOLDERS,
        HAS_VECTOR,
        META,
        PENDING,
        PLACE_COLUMNS,
        SNAPSHOT_COLUMNS,
        ChunkSnapshot,
        Pins,
        TableRows,
        VectorColumns,
        add_hash_columns,
        chunk_row,
        chunk_rows,
        chunk_schema,
        file_row,
        files_table,
        folder_records,
        hashes_sql,
        ids_sql,
        known_vectors,
        retagged,
        retry,
        snapshot_table,
    )
    from semsearch.store.lance.texts import (
        TEXTS_ANN_ROWS,
        TEXTS_OF,
        DistinctTexts,
        FoundText,
    )
except ImportError as exc:  # found by config's check but broken (e.g. pyarrow missing)
    raise ConfigError(f"{LANCEDB_MISSING} ({exc})") from exc

SCHEMA_VERSION = 3
BASE_TABLES = ("meta", "folders", "files")  # made with the index; chunks with the model
# The meta key of the folders table's rows (JSON) as the last run left them, on object storage:
# a reader takes them from there instead of opening the table (3 requests of a cold search).
# They hold the run's ``written`` stamp: a later run by a semsearch that does not write them
# leaves another stamp, and readers open the table again.
PUBLISHED_FOLDERS = "folders"
ID_BLOCK = 65_536  # ids reserved per meta write
ANN_MIN_ROWS = 50_000  # below this many chunks, vector search is exact
# A vector search within at most EXACT_FILES files whose chunks are at most EXACT_ROWS reads
# them and ranks them exactly (``query.exact_nearest``): the files a query names, one file. A
# local index only: on object storage that read would scan the file ids with requests of its
# own, where the ANN query's are the ones the S3 bench measures (``bench/s3.py``).
EXACT_FILES = 64
EXACT_ROWS = 8_192
ANN_PARTITION_ROWS = 100_000  # rows per IVF partition of the HNSW index
# A lexical query within files names their rows, when a snapshot has them (``lexical``): up to
# this many, a filter LanceDB answers from its full-text index alone.
MAX_ROW_FILTER = 20_000
READ_CHECK = 1.0  # seconds between a remote reader's looks for a new version
PLACE_CACHE = 65_536  # chunk places a store keeps per version of the chunks table (~10 MB)
# Columns of the chunks table looked up by value: a chunk by id, the copies of a text (and the
# stored vector of a text) by text_hash; a B-tree finds 5 hashes among 1M rows in ~10 ms, a scan
# takes ~100 ms.
# B-trees of the chunks table: rows by id, copies by text hash, a few files' chunks by file id
# (``exact_nearest``: 36 → 3.5 ms for 10 files of 1.6M chunks; built in 0.2 s there)
SCALAR_INDEXED = ("id", "text_hash", "file_id")
TEXTS_PROBLEM = "table texts: "  # how ``LanceStore.check`` begins a problem of that table

logger = logging.getLogger("semsearch.store")


# A source location LanceDB appends to its messages: ", /root/.cargo/…/file.rs:12:34"
_SOURCE = re.compile(r",? \S+\.rs:\d+:\d+")
# The layers Lance wraps an error of a file in, before what it says about the file.
_WRAPPERS = re.compile(r"^(?:LanceError\(\w+\): |Generic \S+ error: |Wrapped error: )+")
# What LanceDB's object store says when a request failed: the HTTP status and the S3 error code
# of the answer, or the connection's failure.
_STATUS = re.compile(r"\bstatus: (\d{3})\b")
_CODE = re.compile(r"<Code>([^<]{1,100})</Code>")
_UNREACHABLE = re.compile(
    r"ConnectionRefused|Connection refused|tcp connect error|dns error|error sending request|"
    r"failed to lookup address|timed out|Connection reset",
    re.IGNORECASE,
)
# What LanceDB's object store says when a request cannot even be made: an S3 bucket's region
# not given and not found (no AWS_REGION, or AWS unreachable), and no credentials anywhere.
_NO_REGION = "Failed to resolve region"
_NO_CREDENTIALS = "Failed to get AWS credentials"
RETENTION = timedelta(0)  # old versions a local index keeps: none (readers retry once)
# ... and one on object storage: readers check for a new version at most once a query
# (READ_CHECK), so a reader may still be reading one that a writer has just superseded.
REMOTE_RETENTION = timedelta(minutes=10)


def _request_failure(text: str) -> tuple[str, str] | None:
    """("refused", code), ("unreachable", reason), ("region", "") or ("credentials", "") for a
    request to an object store that failed or could not be made; None for any other error (a
    missing object of the index is damage)."""
    if _NO_REGION in text:
        return "region", ""
    if _NO_CREDENTIALS in text:
        return "credentials", ""
    status = _STATUS.search(text)
    code = _CODE.search(text)
    if status is not None:
        number, name = status[1], (code[1] if code else "")
        if number in ("401", "403") or name == "NoSuchBucket":
            return "refused", name or number
        if number.startswith("5"):
            return "unreachable", f"it answered {number} {name}".strip()
    unreachable = _UNREACHABLE.search(text)
    return None if unreachable is None else ("unreachable", unreachable[0].lower())


def remote_failure(location: RemoteLocation, exc: Exception) -> str | None:
    """A request to the object store that failed (unreachable, a missing bucket, refused
    credentials), in one line; None for any other error."""
    found = _request_failure(str(exc))
    if found is None:
        return None
    kind, detail = found
    if kind == "refused":
        return refused_message(location, detail)
    if kind == "region":
        return (
            f"Cannot find the region of the bucket {location.bucket} (index {location}): set "
            "AWS_REGION (or storageOptions.aws_region), and AWS_ENDPOINT_URL for a server "
            "other than AWS."
        )
    if kind == "credentials":
        return (
            f"Found no credentials for {location}: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or storageOptions)."
        )
    return unreachable_message(location, detail)


def lance_problem(exc: Exception) -> str | None:
    """What a LanceDB error says about a damaged index folder, in a line; None for an error that
    is not damage (a full disk or read-only medium: ``write_lock`` says those; a request to an
    object store that failed: ``remote_failure``; a bad argument)."""
    text = str(exc).strip()
    if is_medium_failure(exc) or _request_failure(text) is not None:
        return None
    if isinstance(exc, ValueError) and text.startswith("Table ") and "was not found" in text:
        return f"{text.splitlines()[0]} (its folder is missing or incomplete)"
    if isinstance(exc, RuntimeError | OSError) and text.lower().startswith("lance error"):
        line = _SOURCE.sub("", text.splitlines()[0]).removeprefix("lance error: ")
        line = _WRAPPERS.sub("", line).replace("Wrapped error: ", "")
        return line if len(line) <= 200 else line[:199] + "…"
    return None


def _reports_remote_failures(cls: type[LanceStore]) -> type[LanceStore]:
    """Have the public methods of the store raise :class:`StoreError` in one line for a
    request to the object store that failed (``remote_failure``)."""

    def translated(method: Any) -> Any:
        @functools.wraps(method)
        def run(store: LanceStore, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(store, *args, **kwargs)
            except (OSError, ValueError, RuntimeError) as exc:
                path = store.path
                failed = remote_failure(path, exc) if isinstance(path, RemoteLocation) else None
                if failed is None:
                    raise
                raise StoreError(failed) from exc

        return run

    for name in dir(cls):
        member = inspect.getattr_static(cls, name)
        if not name.startswith("_") and inspect.isfunction(member):
            setattr(cls, name, translated(member))
    return cls


@_reports_remote_failures
@reports_damage(lance_problem)
class LanceStore(VectorColumns, PathVectors, DistinctTexts):
    """The LanceDB index folder (see the module docstring for the format).

    Every public method raises ``IndexDamagedError`` when a table or one of its files is
    missing or unreadable.
    """

    upgrade_pending = False  # LanceDB tables are upgraded by index runs only
    _names: set[str] | None = None
    _absent: set[str]  # on object storage: tables found missing since the last sync
    _checked = 0.0  # time.monotonic() of the last look for a new version (object storage)
    _is_writer = False  # once ``sync`` was called: reads go to the tables themselves
    _warmed = -1  # the chunks table's version whose full-text indexes LanceDB holds in memory

    def __init__(self, path: Location, *, create: bool = False) -> None:
        self.path = path
        self._absent = set()
        self._versions = Pins()  # the tables' versions, read once a search (``reading``)
        self._meta_cache: tuple[int, dict[str, str]] = (-1, {})
        self._published: tuple[int, dict[int, dict[str, Any]] | None] = (-1, None)
        self._read_cache = ReadCache(path) if isinstance(path, RemoteLocation) else None
        if isinstance(path, Path) and not create and not is_index_folder(path):
            raise IndexMissingError(f"No index at {path}. Run `semsearch index` first.")
        try:
            self._db = _connect(path, create)
            if self._is_remote:  # each table opened at once: a listing would cost a request
                base = {"meta": self._open_if_there("meta")}
                if base["meta"] is not None and not create:
                    self._meta = base["meta"]
                    if self._published_folders() is not None:  # folders needs no opening
                        base["folders"] = None
                for name in BASE_TABLES:
                    if name not in base:
                        base[name] = self._open_if_there(name)
                found = [name for name, table in base.items() if table is not None]
                found += ["folders"] if "meta" in found and base["folders"] is None else []
                others = not found and self._open_if_there("chunks") is not None
            else:
                names = self._table_names()
                base, found, others = {}, [n for n in BASE_TABLES if n in names], bool(names)
            if not found and not others and not create:  # on object storage: no folder first
                raise IndexMissingError(f"No index at {path}. Run `semsearch index` first.")
            missing = [name for name in BASE_TABLES if name not in found]
            if (found or others) and missing:  # never made anew beside the others: hides damage
                raise damaged_error(path, f"its table {missing[0]} is missing")
            for name, schema in (("meta", META), ("folders", FOLDERS), ("files", FILES)):
                if name not in found:
                    base[name] = self._db.create_table(name, schema=schema)
                    self._names = None
                elif name not in base:
                    base[name] = self._db.open_table(name)
            self._meta, self._folders, self._files = base["meta"], base["folders"], base["files"]
            self._checked = time.monotonic()  # the tables were just read at their latest
        except (OSError, ValueError, RuntimeError) as exc:
            if isinstance(path, RemoteLocation) and (failed := remote_failure(path, exc)):
                raise StoreError(failed) from exc
            problem = lance_problem(exc)
            if problem is not None:
                raise damaged_error(path, problem) from exc
            raise StoreError(f"Cannot open index {path}: {exc}. Is it a semsearch index?") from exc
        self._chunks: Any = None
        cache = self._read_cache
        self._file_cache = TableRows(
            self._files, True, None if cache is None else (cache, "files"), self._versions
        )
        self._folder_cache = TableRows(
            self._folders, False, None if cache is None else (cache, "folders"), self._versions
        )
        self._snap: ChunkSnapshot | None = None
        self._snap_lock = threading.Lock()
        self._ann: tuple[int, bool] = (-1, False)
        self._ann_of: Any = None  # the chunks table ``_ann`` was read of
        self._exact = ExactVectors(self)  # the vector arm below the ANN threshold
        self._refs: tuple[Any, Any, dict[int, FileRef]] = (None, None, {})
        # places read (with the nearest chunks, by id, of a text's copies) by chunks version
        self._place_cache = PlaceCache(PLACE_CACHE)
        self._reserved: dict[str, tuple[int, int]] = {}  # name → (next id, end of block)
        try:
            self._check_version(create)
            if self._chunk_table() is None and any(
                row["status"] == "ok" for row in self._file_rows().values()
            ):  # files indexed, their chunks gone: a run would find them unchanged, never redo
                raise damaged_error(path, "its table chunks is missing")
        except (OSError, ValueError, RuntimeError) as exc:
            problem = lance_problem(exc)
            if problem is None:
                raise
            raise damaged_error(path, problem) from exc

    def _table_names(self) -> set[str]:
        """The tables there are: listed at every call in a local folder; on object storage
        once, then again by ``sync`` (this store's own changes keep the set current)."""
        if self._names is None or not self._is_remote:
            self._names = set(self._db.list_tables().tables)
        return self._names

    def _open_if_there(self, name: str) -> Any:
        """The table ``name``, or None when there is none. On object storage without listing
        the tables: opening one lists its versions anyway, and a missing one costs as much."""
        if not self._is_remote:
            return self._db.open_table(name) if name in self._table_names() else None
        try:
            return self._db.open_table(name)
        except ValueError as exc:
            if not str(exc).startswith("Table ") or "was not found" not in str(exc):
                raise
            return None

    @property
    def _is_remote(self) -> bool:
        return isinstance(self.path, RemoteLocation)

    def sync(self) -> None:
        """See every commit made so far, by any process (a writer calls it once it holds the
        lock). A local index always does; on object storage the tables stay at the versions
        read last until this, or a reader's check (``_check_latest``), moves them on.

        From then on the store reads as a writer: never through the snapshot and the local
        copies (``_snapshot``), which would read every chunk for a count.
        """
        self._is_writer = True
        self._snap = None
        self._folder_table()
        self._move_on()

    def _move_on(self) -> None:
        """Move every table on to its latest version (object storage)."""
        if not self._is_remote:
            return
        self._checked = time.monotonic()
        epoch = self._meta_values().get("chunks_epoch")
        self._absent.clear()
        for table in (self._meta, self._folders, self._files):
            if table is not None:  # folders: None while its rows come from meta
                table.checkout_latest()
        if self._meta_values().get("chunks_epoch") != epoch:
            self._chunks = None  # recreated (another model): opened again
        elif self._chunks is not None:
            self._chunks.checkout_latest()
        self._sync_paths()
        self._sync_texts()

    def _check_latest(self) -> None:
        """On object storage, look for a new version of the index at most once every
        ``READ_CHECK`` seconds: one request for the meta table, which every index run writes
        last (``maintain``); the other tables move on only when it did.

        Called where a reader's operation starts (``model``, ``file_refs``, ``folders``,
        ``generation``), never in the middle of one: a search reads one version throughout,
        and a cold one that outlasts the interval (loading the model) does not look twice.
        """
        if not self._is_remote or time.monotonic() - self._checked < READ_CHECK:
            return
        self._checked = time.monotonic()
        before = self._meta.version
        self._meta.checkout_latest()
        if self._meta.version != before:
            self._move_on()

    def _check_version(self, create: bool) -> None:
        version = self.meta("schema_version")
        if version is not None and int(version) > SCHEMA_VERSION:
            raise StoreError(
                f"Index {self.path} has LanceDB schema version {version}; this semsearch knows "
                f"{SCHEMA_VERSION}. Upgrade semsearch."
            )
        if create and version is None:
            self._put_meta({"schema_version": str(SCHEMA_VERSION), "terms_version": TERMS_VERSION})
        elif create and self.meta("terms_version") != TERMS_VERSION:
            self._retag()
        if create and version is not None and int(version) < SCHEMA_VERSION:
            if self._chunk_table() is not None and not self.has_flags():
                add_hash_columns(self._chunk_table())  # schema 1 → 2
            self._put_meta({"schema_version": str(SCHEMA_VERSION)})

    # -- small tables --------------------------------------------------------------------

    def _meta_values(self) -> dict[str, str]:
        version = self._versions.of(self._meta)
        if self._meta_cache[0] != version:
            rows = self._meta.to_arrow().to_pylist()
            self._meta_cache = (version, {row["key"]: row["value"] for row in rows})
            if self._read_cache is not None:
                self._read_cache.use_index(self._meta_cache[1].get("index_id"))
        return self._meta_cache[1]

    def meta(self, key: str) -> str | None:
        """One meta value, or None."""
        return self._meta_values().get(key)

    def _put_meta(self, values: dict[str, str]) -> None:
        rows = pa.Table.from_pylist([{"key": k, "value": v} for k, v in values.items()], META)
        self._meta.merge_insert(
            "key"
        ).when_matched_update_all().when_not_matched_insert_all().execute(rows)

    def _file_rows(self) -> dict[int, dict[str, Any]]:
        return self._file_cache.rows()

    def _folder_rows(self) -> dict[int, dict[str, Any]]:
        """id → folder row: from the folders table, or for a reader of an index on object
        storage from the copy the last run published in meta (the same dict until meta
        changes)."""
        published = None if self._folders is not None else self._published_folders()
        if published is None:
            self._folder_table()
            return self._folder_cache.rows()
        return published

    def _published_folders(self) -> dict[int, dict[str, Any]] | None:
        """The folder rows the last run wrote into meta (``PUBLISHED_FOLDERS``), or None when
        it wrote none or they are not that run's (an older semsearch ran since)."""
        version = self._meta.version
        if self._published[0] != version:
            values = self._meta_values()
            held = json.loads(values.get(PUBLISHED_FOLDERS) or "{}")
            fresh = "rows" in held and held.get("written") == values.get("written")
            rows = {int(row["id"]): row for row in held["rows"]} if fresh else None
            self._published = (version, rows)
        return self._published[1]

    def _folder_table(self) -> Any:
        """The folders table, opened now if a reader had its rows from meta."""
        if self._folders is None:
            self._folders = self._db.open_table("folders")
            cache = None if self._read_cache is None else (self._read_cache, "folders")
            self._folder_cache = TableRows(self._folders, False, cache, self._versions)
        return self._folders

    def _chunk_table(self) -> Any:
        if self._chunks is None and "chunks" not in self._absent:
            self._chunks = self._open_if_there("chunks")
            if self._chunks is None and self._is_remote:  # not asked again until sync
                self._absent.add("chunks")
        return self._chunks

    def _snapshot(self) -> ChunkSnapshot | None:
        """On object storage below the ANN threshold, every chunk of the chunks table's
        version (``ChunkSnapshot``): read whole once, kept on local disk for the next process;
        None elsewhere (a local table is read where it lies; above the threshold no reader
        reads every vector)."""
        if self._read_cache is None or self._is_writer:
            return None
        chunks = self._chunk_table()
        if chunks is None or not self.has_flags() or self.has_ann():
            return None
        with self._snap_lock:
            version = int(chunks.version)
            if self._snap is None or self._snap.version != version:
                epoch = self.meta("chunks_epoch") or "0"

                def load() -> pa.Table:
                    query = chunks.search().select(list(SNAPSHOT_COLUMNS)).with_row_id(True)
                    return snapshot_table(retry(query.limit(None).to_arrow))

                table = self._read_cache.read("chunks", f"{epoch}.{version}", load)
                self._snap = ChunkSnapshot(version, table)
            return self._snap

    def _path_cache_of(self) -> ReadCache | None:
        """Where the whole paths table is kept: as the chunks (``_snapshot``), on object
        storage below the ANN threshold."""
        if self._read_cache is None or self._is_writer or self.has_ann():
            return None
        return self._read_cache

    def _allocate(self, name: str, count: int) -> int:
        """The first of ``count`` fresh ids for ``files`` or ``chunks``; ids are never reused.

        Ids are reserved in blocks recorded in meta (``next_files_id``, ``next_chunks_id``)
        before use, so another writer, or this one after a drop, never hands them out again.
        """
        start, end = self._reserved.get(name, (0, 0))
        if start + count > end:
            start = int(self.meta(f"next_{name}_id") or 1)
            end = start + max(count, ID_BLOCK)
            self._put_meta({f"next_{name}_id": str(end)})
        self._reserved[name] = (start + count, end)
        return start

    # -- the Store interface ---------------------------------------------------------------

    def generation(self) -> int:
        """The chunks table's epoch, then the sum of the tables' versions: every commit raises it.

        A recreated chunks table (another model) starts its versions again; the epoch, counted
        in meta, keeps the number from ever repeating one seen before.
        """
        self._check_latest()
        chunks = self._chunk_table()
        total: int = self._meta.version + self._files.version
        total += self._folders.version if self._folders is not None else 0
        total += chunks.version if chunks is not None else 0
        total += self.path_version()
        return (int(self.meta("chunks_epoch") or 0) << 40) + total

    def model(self) -> tuple[str, int] | None:
        """The (model id, dimension) the stored vectors were made with, if any."""
        self._check_latest()
        values = self._meta_values()
        model_id, dim = values.get("model_id"), values.get("dim")
        return None if model_id is None or dim is None else (model_id, int(dim))

    def set_model(self, model_id: str, dim: int) -> None:
        """Record the model and create the chunks table; refuses to switch while chunks exist."""
        current = self.model()
        chunks = self._chunk_table()
        if current == (model_id, dim) and chunks is not None:
            return
        if current is not None and current != (model_id, dim) and self.chunk_count() > 0:
            raise ModelMismatchError(model_mismatch_message(self.path, current[0], model_id))
        if chunks is not None:
            self._db.drop_table("chunks")
        self._drop_texts()
        self._drop_path_vectors(None)  # of another model (or none: a rebuild dropped them)
        self._chunks = self._db.create_table("chunks", schema=chunk_schema(dim))
        self._names = None
        for column in COLUMN_WEIGHTS:
            self._chunks.create_index(
                column, config=FTS(remove_stop_words=False, stem=True, ascii_folding=True)
            )
        for column in SCALAR_INDEXED:
            self._chunks.create_index(column, config=BTree())
        epoch = str(int(self.meta("chunks_epoch") or 0) + 1)
        # the new table has no vector index yet, nor the texts table
        self._meta.delete(f"key IN ('ann_rows', '{TEXTS_ANN_ROWS}')")
        self._put_meta({"model_id": model_id, "dim": str(dim), "chunks_epoch": epoch})

    def chunk_count(self) -> int:
        """Number of stored chunks."""
        chunks = self._chunk_table()
        return 0 if chunks is None else int(chunks.count_rows())

    def ensure_folder(self, path: str, name: str) -> int:
        """The folder's id, creating its row if needed."""
        for row in self._folder_rows().values():
            if row["path"] == path:
                return int(row["id"])
        folder_id = max(self._folder_rows(), default=0) + 1
        row = {"id": folder_id, "path": path, "name": name, "last_indexed": None}
        if COMMIT_KEY.format(folder_id) in self._meta_values():  # of a removed folder
            self._meta.delete(f"key = '{COMMIT_KEY.format(folder_id)}'")
        self._folder_table().add(pa.Table.from_pylist([row], FOLDERS))
        return folder_id

    def folders(self) -> list[Folder]:
        """Every folder in the index with file, chunk and pending-chunk counts."""
        self._check_latest()
        pending = self._chunks_per_file(PENDING) if self.has_flags() else {}
        records = folder_records(
            self._folder_rows(), self._file_rows(), self._chunks_per_file(), pending
        )
        values = self._meta_values()
        return [replace(f, commit=values.get(COMMIT_KEY.format(f.id))) for f in records]

    def _chunks_per_file(self, where: str | None = None) -> dict[int, int]:
        chunks = self._chunk_table()
        if chunks is None:
            return {}
        query = chunks.search().select(["file_id"]).limit(None)
        column = (query if where is None else query.where(where)).to_arrow()["file_id"]
        counts = pa.compute.value_counts(column).to_pylist()
        return {item["values"]: item["counts"] for item in counts}

    def file_states(self, folder_id: int) -> dict[str, FileState]:
        """rel → state for every file remembered under a folder."""
        return {
            row["rel"]: FileState(
                row["id"], row["rel"], row["mtime_ns"], row["size"], row["sha256"], row["status"]
            )
            for row in self._file_rows().values()
            if row["folder_id"] == folder_id
        }

    def file_refs(self) -> dict[int, FileRef]:
        """File id → reference for every file that has chunks; rebuilt when a table changed."""
        self._check_latest()
        files, folders = self._file_rows(), self._folder_rows()
        if self._refs[0] is not files or self._refs[1] is not folders:  # a table was re-read
            refs = {
                row["id"]: FileRef(
                    row["id"],
                    row["folder_id"],
                    folders[row["folder_id"]]["name"],
                    folders[row["folder_id"]]["path"],
                    row["rel"],
                )
                for row in files.values()
                if row["status"] == "ok" and row["folder_id"] in folders
            }
            self._refs = (files, folders, refs)
        return self._refs[2]

    def write_files(self, writes: Sequence[FileWrite], *, reuse: bool = True) -> None:
        """Replace several files: their chunks in one commit, then their rows in another.

        Chunks written without vectors take stored vectors of the same text when ``reuse``, and
        a file keeps its path vector; without ``reuse`` both are pending (the path vectors go
        in a third commit).
        """
        if not writes:
            return
        existing = {(r["folder_id"], r["rel"]): r["id"] for r in self._file_rows().values()}
        fresh = [w for w in writes if (w.folder_id, w.rel) not in existing]
        next_file = self._allocate("files", len(fresh)) if fresh else 0
        dim = int(self.meta("dim") or 0)
        wanted = {text_hash(c.text) for w in writes if w.vectors is None for c in w.chunks}
        known = self.stored_vectors(wanted, dim) if reuse and wanted else {}
        file_rows: list[dict[str, Any]] = []
        parts: list[pa.Table] = []
        for write in writes:
            file_id = existing.get((write.folder_id, write.rel))
            if file_id is None:
                file_id, next_file = next_file, next_file + 1
            file_rows.append(file_row(write, file_id))
            if write.chunks:
                first = self._allocate("chunks", len(write.chunks))
                parts.append(chunk_rows(write, file_id, first, *known_vectors(write, known, dim)))
        file_ids = ids_sql(row["id"] for row in file_rows)
        replaced = [existing[k] for k in ((w.folder_id, w.rel) for w in writes) if k in existing]
        chunks = self._chunk_table()
        if parts:
            if chunks is None:
                raise StoreError("Chunks written before the model was recorded (set_model).")
            chunks.merge_insert(
                "id"
            ).when_not_matched_insert_all().when_not_matched_by_source_delete(
                f"file_id IN ({file_ids})"
            ).execute(pa.concat_tables(parts))
        elif chunks is not None and replaced:  # new files have fresh ids: nothing to delete
            chunks.delete(f"file_id IN ({ids_sql(replaced)})")
        self._files.merge_insert(
            "id"
        ).when_matched_update_all().when_not_matched_insert_all().execute(files_table(file_rows))
        if not reuse:
            self._drop_path_vectors(replaced)

    def touch_files(self, touches: Sequence[tuple[int, int]]) -> None:
        """Record new mtimes, (file id, mtime_ns), of files whose content did not change."""
        rows = self._file_rows()
        changed = [{**rows[i], "mtime_ns": m} for i, m in touches if i in rows]
        if changed:
            self._files.merge_insert("id").when_matched_update_all().execute(files_table(changed))

    def delete_files(self, folder_id: int, rels: Iterable[str]) -> int:
        """Forget files (and their chunks) under a folder; returns how many were given."""
        wanted = set(rels)
        ids = [
            r["id"]
            for r in self._file_rows().values()
            if r["folder_id"] == folder_id and r["rel"] in wanted
        ]
        self._delete_file_ids(ids)
        return len(wanted)

    def _delete_file_ids(self, ids: list[int]) -> None:
        """Chunks first: a run killed in between leaves rows the next run deletes again."""
        if not ids:
            return
        chunks = self._chunk_table()
        if chunks is not None:
            chunks.delete(f"file_id IN ({ids_sql(ids)})")
        self._drop_path_vectors(ids)
        self._files.delete(f"id IN ({ids_sql(ids)})")

    def remove_folder(self, path: str) -> int:
        """Purge a folder and everything under it; returns the number of files purged."""
        folder = next((r for r in self._folder_rows().values() if r["path"] == path), None)
        if folder is None:
            return 0
        mine = [r for r in self._file_rows().values() if r["folder_id"] == folder["id"]]
        self._delete_file_ids([r["id"] for r in mine])
        self._folder_table().delete(f"id = {int(folder['id'])}")
        return sum(1 for r in mine if r["status"] == "ok")

    def move_folder(self, old_path: str, new_path: str, prefix: str = "") -> int:
        """Give a folder's files to ``new_path`` under ``prefix``; returns the ok files moved.

        Three commits, in this order: the chunks' ``terms`` (only when the rel paths change),
        the file rows (folder id and rel), the folder row (renamed, or deleted when the files
        joined a folder already in the index). A run killed in between leaves an index whose
        next run redoes the files whose rows no longer match the disk; nothing is searchable
        twice.
        """
        folders, files = self._folder_rows(), self._file_rows()
        self._drop_path_vectors(moved_path_ids((folders, files), old_path, new_path, prefix))
        old = next((r for r in folders.values() if r["path"] == old_path), None)
        new = next((r for r in folders.values() if r["path"] == new_path), None)
        if old is None or old_path == new_path:
            return 0
        chunk_table = self._chunk_table()
        taken = {
            r["rel"] for r in files.values() if new is not None and r["folder_id"] == new["id"]
        }
        mine = [r for r in files.values() if r["folder_id"] == old["id"]]
        dropped = [r["id"] for r in mine if prefix + r["rel"] in taken]
        if dropped:  # chunks first, as _delete_file_ids does
            if chunk_table is not None:
                chunk_table.delete(f"file_id IN ({ids_sql(dropped)})")
            self._files.delete(f"id IN ({ids_sql(dropped)})")
        target = old["id"] if new is None else new["id"]
        moving = [
            {**r, "folder_id": target, "rel": prefix + r["rel"]}
            for r in mine
            if prefix + r["rel"] not in taken
        ]
        if moving and prefix and chunk_table is not None:
            _retag(chunk_table, {r["id"]: r for r in moving})
            self._clear_texts()
        if moving:
            self._files.merge_insert("id").when_matched_update_all().execute(files_table(moving))
        if new is None:
            values = {"path": new_path, "name": PurePath(new_path).name}
            self._folder_table().update(where=f"id = {int(target)}", values=values)
        else:
            self._folder_table().delete(f"id = {int(old['id'])}")
        return sum(1 for r in moving if r["status"] == "ok")

    def mark_indexed(self, folder_id: int, commit: str | None = None) -> None:
        """Stamp the folder with the time of its last complete index run and the git commit it
        read (meta ``folder_commit.ID``)."""
        stamp = {"last_indexed": time.time()}
        self._folder_table().update(where=f"id = {int(folder_id)}", values=stamp)
        key = COMMIT_KEY.format(int(folder_id))
        if commit is not None:
            self._put_meta({key: commit})
        elif key in self._meta_values():
            self._meta.delete(f"key = '{key}'")

    def clear_chunks(self) -> None:
        """Drop every file and chunk (a rebuild with another model), keeping folders."""
        if self._chunk_table() is not None:
            # a new epoch: without the table's versions the sum could fall back to one seen
            epoch = str(int(self.meta("chunks_epoch") or 0) + 1)
            self._put_meta({"chunks_epoch": epoch})
            self._db.drop_table("chunks")
            self._chunks = None
            self._names = None
        self._drop_texts()
        self._drop_path_vectors(None)
        self._files.delete("true")
        self._meta.delete(f"key IN ('model_id', 'dim', 'ann_rows', '{TEXTS_ANN_ROWS}')")

    def reading(self) -> contextlib.AbstractContextManager[None]:
        """One search's reads: each table's version is read once for all of them (``Pins``),
        and the places it keeps last until it ends (a search chooses copies from them)."""
        self._place_cache.trim()
        return self._versions.pinned()

    def has_ann(self) -> bool:
        """True once the chunks table has its vector index."""
        chunks = self._chunk_table()
        if chunks is None:
            return False
        if self._ann[1] and self._ann_of is chunks:
            # an index is never dropped from a table (``set_model`` and ``clear_chunks`` make a
            # new one): no version to read, a search asks this several times
            return True
        if self._ann_of is not chunks:  # another table: its versions count anew
            self._ann, self._ann_of = (-1, False), chunks
        version = self._versions.of(chunks)
        if self._ann[0] != version and self._is_remote:
            # meta says it (a listing of the indexes reads each one's metadata: a request each)
            self._ann = (version, int(self.meta("ann_rows") or 0) > 0)
        elif self._ann[0] != version:
            found = any("vector" in index.columns for index in chunks.list_indices())
            self._ann = (version, found)
        return self._ann[1]

    def preload(self) -> None:
        """Below the ANN threshold, read the vectors into memory unless they are there."""
        if not self._exact.is_loaded and not self.has_ann():
            self._exact.refresh()

    def nearest(
        self, query: np.ndarray[Any, Any], pool: int, file_ids: Sequence[int] | None = None
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine) of the ``pool`` nearest chunks, best first.

        Exact in memory below the ANN threshold; from the vector index once it is built.
        """
        if not self.has_ann():
            return self._exact.nearest(query, pool, file_ids)
        self._exact.clear()  # the index answers from now on: free the matrix
        chunks = self._chunk_table()
        if file_ids is None and self.has_copies():
            by_text = self._nearest_by_text(chunks, query, pool)
            if by_text is not None:
                return by_text
        columns = PLACE_COLUMNS if self.has_flags() else ()
        answer = None
        if (
            file_ids is not None
            and columns
            and len(file_ids) <= EXACT_FILES
            and not self._is_remote
        ):
            where = f"{HAS_VECTOR} AND file_id IN ({ids_sql(file_ids)})"
            answer = exact_nearest(chunks, query, pool, where, columns, EXACT_ROWS)
        found, rows = answer or ann_nearest(chunks, query, pool, file_ids, columns)
        self._place_cache.keep(self._versions.of(chunks), _places(rows))
        return found

    def _nearest_by_text(
        self, chunks: Any, query: np.ndarray[Any, Any], pool: int
    ) -> list[tuple[int, float]] | None:
        """The first chunk of each of the ``pool`` nearest distinct texts (``lance.texts``); None
        while the texts table does not match the chunks table."""
        texts = self._ask_texts(chunks, lambda stamp: self.nearest_texts(query, pool, stamp))
        return None if texts is None else self._chunks_of(chunks, texts)

    def _ask_texts(
        self, chunks: Any, ask: Callable[[str], list[FoundText] | None]
    ) -> list[FoundText] | None:
        """What ``ask`` finds in the texts table at the chunks table's stamp; None when the
        table does not match the chunks table, or is damaged (said once; the chunks table
        answers until ``maintain`` makes it again)."""
        try:
            return ask(self._chunks_stamp(chunks))
        except IndexDamagedError as exc:
            self._texts_found_damaged(exc.problem)
            return None

    def _chunks_of(self, chunks: Any, texts: list[FoundText]) -> list[tuple[int, float]]:
        """(chunk id, its text's score) of the first chunk of each of ``texts`` (by id); the
        first chunks' places are kept by id, and every chunk of each text by text
        (``choose_copies``, ``text_places``), while the chunks table stays at its version.

        One chunk a text: the search picks a text's representative among its copies
        (``choose_copies``). Naming every copy (up to 64 a text, ~2,000 an arm on a tree of ten
        checkouts) cost a warm hybrid search 25 ms of 67 (bench/RESULTS.md, session 31)."""
        version = self._versions.of(chunks)
        texts = [text for text in texts if text.ids]
        self._place_cache.keep(version, (text.place(0) for text in texts))
        self._place_cache.keep_copies(version, texts)
        return [(text.ids[0], text.score) for text in texts]

    def _chunks_stamp(self, chunks: Any) -> str:
        """The chunks table's epoch and version: what the texts table is stamped with."""
        return f"{self.meta('chunks_epoch') or 0}.{self._versions.of(chunks)}"

    def lexical(
        self, query: LexicalQuery, limit: int, file_ids: Sequence[int] | None = None
    ) -> list[int]:
        """Chunk ids matching the query, best BM25 first, optionally within files."""
        chunks = self._chunk_table()
        expression = full_text(query)
        if chunks is None or expression is None:
            return []
        if file_ids is None and self.has_ann() and self.has_copies():
            texts = self._ask_texts(
                chunks, lambda stamp: self.lexical_texts(expression, limit, stamp)
            )
            if texts is not None:
                return [cid for cid, _ in self._chunks_of(chunks, texts)]
        self._warm_full_text(chunks)

        def run() -> list[int]:
            search = chunks.search(expression, query_type="fts").limit(limit)
            snapshot = self._snapshot()
            if snapshot is not None:  # the index answers with row ids, the snapshot has the rest
                where = None if file_ids is None else snapshot.row_ids_of_files(file_ids)
                if where is not None and not len(where):  # those files have no chunk
                    return []
                if where is None or len(where) <= MAX_ROW_FILTER:
                    if where is not None:
                        search = search.where(f"_rowid IN ({ids_sql(where)})", prefilter=True)
                    found = search.select(["_rowid", "_score"]).to_arrow()["_rowid"]
                    return snapshot.ids_of_rows(found.to_numpy().astype(np.int64))
            search = search.select(["id", "_score"])
            if file_ids is not None:
                search = search.where(f"file_id IN ({ids_sql(file_ids)})", prefilter=True)
            return [int(i) for i in search.to_arrow()["id"].to_numpy()]

        return retry(run)

    def _warm_full_text(self, chunks: Any) -> None:
        """On object storage, have LanceDB read the full-text indexes whole, once per version
        of the chunks table (a version whose indexes did not change costs nothing more).

        A query on a cold index reads them piecemeal, the same posting-list page again for
        each word and column: on the requests sdist, 42 requests for one query, against 20
        to load all three and then 1 (the ``id`` column of the hits) per query.
        """
        if not self._is_remote or self._warmed == chunks.version:
            return
        prewarm_full_text(chunks)
        self._warmed = chunks.version

    def chunk_files(self, ids: Sequence[int]) -> dict[int, int]:
        """Chunk id → file id: from the vectors in memory below the ANN threshold."""
        if not self.has_ann():
            return self._exact.files_of(ids)
        if not self.has_flags():  # no places in a table of schema 1
            return {row.id: row.file_id for row in self.chunks(ids)}
        files = self._file_rows()
        return {p.id: p.file_id for p in self.chunk_places(ids) if p.file_id in files}

    def chunks(self, ids: Sequence[int]) -> list[ChunkRow]:
        """Stored chunks by id, in the order asked (chunks of unknown files are left out)."""
        chunks = self._chunk_table()
        if not ids or chunks is None:
            return []
        columns = ["id", "file_id", "start_line", "end_line", "page", "text"]
        kept = {}  # of the texts table's answers: their text came with them
        if self._place_cache.holds_copies:
            kept = self._place_cache.with_texts(self._versions.of(chunks), ids)
        missing = [i for i in ids if i not in kept]

        def run() -> list[dict[str, Any]]:
            snapshot = self._snapshot()
            if snapshot is not None:
                return snapshot.rows(missing, columns)
            search = chunks.search().where(f"id IN ({ids_sql(missing)})").select(columns)
            rows: list[dict[str, Any]] = search.limit(len(missing)).to_arrow().to_pylist()
            return rows

        files, folders = self._file_rows(), self._folder_rows()
        rows = [{**place._asdict(), "text": text} for place, text in kept.values()]
        found = (
            chunk_row(row, files, folders) for row in [*rows, *(retry(run) if missing else [])]
        )
        by_id = {row.id: row for row in found if row is not None}
        return [by_id[i] for i in ids if i in by_id]

    def chunk_places(self, ids: Sequence[int]) -> list[ChunkPlace]:
        """The places of chunks by id, in the order asked ([] in a chunks table of schema 1,
        which has no text hashes)."""
        snapshot = self._snapshot() if ids else None
        if snapshot is not None:
            by_id = {place.id: place for place in _places(snapshot.rows(ids, PLACE_COLUMNS))}
            return [by_id[i] for i in ids if i in by_id]
        chunks = self._chunk_table()
        if chunks is None:
            return []
        return self._place_cache.places(
            self._versions.of(chunks),
            ids,
            lambda missing: _places(self._places(f"id IN ({ids_sql(missing)})")),
        )

    def text_keys(
        self, ids: Sequence[int], from_vectors: bool = True
    ) -> dict[int, tuple[int, int | str]]:
        """Chunk id → (file id, text hash), from the chunks' places either way."""
        return hash_keys(self.chunk_places(ids))

    def text_places(self, hashes: Sequence[str]) -> list[ChunkPlace]:
        """The places of every chunk of these text hashes, by chunk id."""
        chunks = self._chunk_table()
        if hashes and chunks is not None and self._place_cache.holds_copies:
            kept = self._place_cache.copies(self._versions.of(chunks), hashes)  # the texts table's
            if kept is not None:
                return kept
        snapshot = self._snapshot() if hashes else None
        if snapshot is not None:
            rows = snapshot.with_hashes(hashes, PLACE_COLUMNS)
        else:
            rows = self._places(f"text_hash IN ({hashes_sql(hashes)})" if hashes else "")
        places = sorted(_places(rows), key=lambda place: place.id)
        if snapshot is None and chunks is not None:
            self._place_cache.keep(self._versions.of(chunks), places)
        return places

    def choose_copies(self, hashes: Iterable[str], choose: ChooseCopy) -> dict[str, ChunkPlace]:
        """The copy ``choose`` picks of each of ``hashes`` the texts table's last answers
        named, by text hash (no read)."""
        chunks = self._chunk_table()
        if chunks is None or not self._place_cache.holds_copies:
            return {}
        return self._place_cache.chosen(self._versions.of(chunks), hashes, choose)

    def _places(self, where: str) -> list[dict[str, Any]]:
        """The place columns of the chunks ``where`` selects (none for an empty condition)."""
        chunks = self._chunk_table()
        if not where or chunks is None or not self.has_flags():
            return []

        def run() -> list[dict[str, Any]]:
            query = chunks.search().where(where).select(list(PLACE_COLUMNS)).limit(None)
            rows: list[dict[str, Any]] = query.to_arrow().to_pylist()
            return rows

        return retry(run)

    def maintain(self) -> None:
        """Repair, index, compact: run after every index run and folder removal."""
        chunks = self._chunk_table()
        if chunks is not None:
            known = set(self._file_rows())
            orphans = [f for f in self._chunks_per_file() if f not in known]
            if orphans:  # chunks of a run killed before their file rows were written
                chunks.delete(f"file_id IN ({ids_sql(orphans)})")
            if self.has_flags():  # a table made before text_hash or file_id had its index
                indexed = {c for index in chunks.list_indices() for c in index.columns}
                for column in SCALAR_INDEXED:
                    if column not in indexed:
                        chunks.create_index(column, config=BTree())
                self._note_copies(chunks)
            self._build_ann(chunks)
        texts = self._texts_kept(chunks)
        paths = self._path_table()
        kept = REMOTE_RETENTION if self._is_remote else RETENTION
        with warnings.catch_warnings():
            # "removes every version except the latest": intended. Writers are serialised by
            # the lock, and a reader that raced the clean-up retries once (retry).
            warnings.simplefilter("ignore", UserWarning)
            for table in (self._folders, self._files, chunks, paths, self._text_table()):
                if table is not None:
                    table.optimize(cleanup_older_than=kept)
            values = {TEXTS_OF: self._chunks_stamp(chunks)} if texts else {}
            if values and self.meta(TEXTS_OF) == values[TEXTS_OF]:
                values = {}  # nothing changed since the last run
            if self._is_remote:  # the last commit of a run: what remote readers look for
                stamp = f"{time.time():.3f}"
                folders = sorted(self._folder_rows().values(), key=lambda row: int(row["id"]))
                published = json.dumps({"written": stamp, "rows": folders})
                values |= {"written": stamp, PUBLISHED_FOLDERS: published}
                if self.meta("index_id") is None:  # names the copies readers keep (lance.cache)
                    values["index_id"] = uuid.uuid4().hex
            if values:
                self._put_meta(values)
            self._meta.optimize(cleanup_older_than=kept)

    def _texts_kept(self, chunks: Any) -> bool:
        """Whether the texts table matches ``chunks`` (``maintain``, which stamps it so): up to
        date already when the chunks did not change since its stamp (no chunk was waiting for a
        vector then), brought up to date when they did; False where it is not kept (no vector
        index, no copies, chunks still waiting for their vectors). A damaged table is dropped
        and made again."""
        if chunks is None or not (self.has_flags() and self.has_ann() and self.has_copies()):
            return False
        try:
            return self._texts_brought_up(chunks)
        except (OSError, ValueError, RuntimeError) as exc:
            problem = lance_problem(exc)
            if problem is None:
                raise
            logger.warning(
                "semsearch: the texts table of the index %s was damaged (%s); making it again "
                "from the chunks table",
                self.path,
                problem,
            )
            self._drop_texts()
        return self._texts_brought_up(chunks)

    def _texts_brought_up(self, chunks: Any) -> bool:
        """``_texts_kept`` once the table is known to be kept: read whole when it is current
        (``_probe_texts``: nothing else reads it on such a run), else brought up to date, which
        reads every row itself (its indexes are asked first: the run optimizes them)."""
        current = self.meta(TEXTS_OF) == self._chunks_stamp(chunks)
        current = current and self._text_table() is not None
        self._probe_texts(rows=current)
        if current:
            return True
        if self.pending_count():
            return False
        self._update_texts(chunks, ANN_MIN_ROWS, ANN_PARTITION_ROWS)
        return True

    def has_copies(self) -> bool:
        """False when the last index run found no two chunks of one text (meta ``copies``)."""
        return self.meta("copies") != "0"

    def _note_copies(self, chunks: Any) -> None:
        """Record whether two chunks share a text, so that a search of an index without copies
        skips their look-ups: on object storage those were 7 of a cold search's ~45 requests."""
        column = chunks.search().select(["text_hash"]).limit(None).to_arrow()["text_hash"]
        copies = "1" if len(pc.unique(column)) < len(column) else "0"
        if self.meta("copies") != copies:
            self._put_meta({"copies": copies})

    def _build_ann(self, chunks: Any) -> None:
        rows = int(chunks.count_rows())
        trained = int(self.meta("ann_rows") or 0)
        if rows < ANN_MIN_ROWS or (self.has_ann() and rows < 2 * trained):
            return
        partitions = max(1, round(rows / ANN_PARTITION_ROWS))
        config = HnswSq(distance_type="cosine", num_partitions=partitions)
        chunks.create_index("vector", config=config, replace=True)
        self._put_meta({"ann_rows": str(rows)})

    def _retag(self) -> None:
        """Recompute the ``terms`` and ``defines`` columns after their rules changed."""
        chunks = self._chunk_table()
        if chunks is not None and chunks.count_rows():
            table = chunks.search().select(["id", "file_id", "text"]).limit(None).to_arrow()
            update = retagged(table, self._file_rows())
            chunks.merge_insert("id").when_matched_update_all().execute(update)
        self._clear_texts()
        self._put_meta({"terms_version": TERMS_VERSION})

    def check(self) -> list[str]:
        """Read every row of every table and run a full-text query: the problems found (none
        when the folder is sound). What ``status --check`` runs; opening the store checked
        that the tables are all there."""
        names = self._table_names()
        # a reader takes the folders from meta, and opened the store without that table
        problems = [f"table {name}: missing" for name in BASE_TABLES if name not in names]
        for name in sorted(names):
            try:
                table = self._db.open_table(name)
                rows = table.count_rows()
                read = sum(batch.num_rows for batch in table.search().limit(None).to_batches())
                if read != rows:
                    problems.append(f"table {name}: {read} rows read of {rows}")
            except (OSError, RuntimeError, ValueError) as exc:
                problems.append(f"table {name}: {lance_problem(exc) or exc}")
        chunks = self._chunk_table() if mended_by_index(problems) else None
        if chunks is None:
            return problems
        texts = None if problems else self._text_table()  # read already: damaged
        # each table's own full-text indexes (a search asks the texts table's while it is
        # current); the texts table's problems are its own, which an index run mends
        for name, table in (("chunks", chunks), ("texts", texts)):
            if table is None:
                continue
            about = TEXTS_PROBLEM if name == "texts" else ""
            try:
                indexed = {c for index in table.list_indices() for c in index.columns}
                missing = [c for c in COLUMN_WEIGHTS if c not in indexed]
                problems += [f"{about}no full-text index on {name}.{c}" for c in missing]
                query = full_text(LexicalQuery(("index",)))
                table.search(query, query_type="fts").limit(1).to_arrow()
            except (OSError, RuntimeError, ValueError) as exc:
                problems.append(f"{about}full-text index: {lance_problem(exc) or exc}")
            except IndexDamagedError as exc:
                problems.append(f"{about}full-text index: {exc.problem}")
        return problems

    def size_bytes(self) -> int:
        """Bytes on disk under the index folder (of the tables' latest versions on object
        storage)."""
        if isinstance(self.path, Path):
            return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())
        tables = [self._meta, self._folder_table(), self._files]
        tables += [self._chunk_table(), self._path_table(), self._text_table()]
        return sum(int(t.stats()["total_bytes"]) for t in tables if t is not None)

    def close(self) -> None:
        """Forget the table handles (LanceDB holds no file open between calls)."""
        self._chunks = None


def mended_by_index(problems: Sequence[str]) -> bool:
    """Whether every problem ``LanceStore.check`` found is in the texts table, which an index
    run makes again from the chunks table (True for none)."""
    return all(problem.startswith(TEXTS_PROBLEM) for problem in problems)


def _places(rows: Iterable[dict[str, Any]]) -> list[ChunkPlace]:
    """Rows of ``PLACE_COLUMNS`` as places."""
    return [ChunkPlace(*(row[c] for c in PLACE_COLUMNS)) for row in rows]


def _retag(chunk_table: Any, files: dict[int, dict[str, Any]]) -> None:
    """Recompute the ``terms`` of these files' chunks from their rows' (new) rel paths."""
    query = chunk_table.search().where(f"file_id IN ({ids_sql(files)})")
    table = query.select(["id", "file_id", "text"]).limit(None).to_arrow()
    if table.num_rows:
        chunk_table.merge_insert("id").when_matched_update_all().execute(retagged(table, files))


def _connect(path: Location, create: bool) -> Any:
    """LanceDB's connection to a local folder (made when ``create``) or an object store.

    A local index is read at its latest version at every read (a long-running MCP server sees
    another process's commits at once); on object storage each such look is a request, so
    reads stay at the version read last until ``LanceStore._check_latest``.
    """
    if isinstance(path, RemoteLocation):
        return lancedb.connect(
            path.uri, storage_options=path.storage_options, read_consistency_interval=None
        )
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return lancedb.connect(str(path), read_consistency_interval=timedelta(0))


def has_tables(location: RemoteLocation) -> bool:
    """Whether the object store holds an index at ``location`` (a table under its prefix);
    :class:`StoreError` in one line when it cannot be asked."""
    try:
        return bool(_connect(location, create=False).list_tables().tables)
    except (OSError, ValueError, RuntimeError) as exc:
        failed = remote_failure(location, exc)
        if failed is None:
            raise StoreError(f"Cannot open index {location}: {exc}") from exc
        raise StoreError(failed) from exc
