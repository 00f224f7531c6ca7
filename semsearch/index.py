"""The library's front door: :class:`Index` indexes folders and searches them.

The CLI and the MCP server are thin adapters over this class::

    from semsearch.config import load_settings
    from semsearch.index import Index

    index = Index(load_settings(os.environ))
    index.update()                       # the configured folders
    for hit in index.search("how does the retry logic work"):
        print(hit.path, hit.start_line, hit.score)
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semsearch.chunking import ChunkSettings
from semsearch.config import Mode, Settings
from semsearch.embedder import Embedder, OnnxEmbedder
from semsearch.errors import ModelMismatchError, UsageError
from semsearch.filetype import BINARY_EXTENSIONS
from semsearch.folders import FolderInfo, resolve_folder
from semsearch.ignore import DEFAULT_IGNORE_PATTERNS, IgnoreSettings
from semsearch.indexer import FileEvent, FolderReport, Indexer, IndexerSettings
from semsearch.listing import Listing, list_files
from semsearch.search import Hit, SearchOptions, search
from semsearch.store import Folder, Store, model_mismatch_message, open_store, write_lock


@dataclass(frozen=True)
class IndexReport:
    """What an index run did, per folder and in total."""

    folders: tuple[FolderReport, ...]
    seconds: float
    chunks_embedded: int = 0  # texts the model embedded (vectors reused or shared not counted)
    chunks_pending: int = 0  # chunks still without a vector after the run

    @property
    def failed(self) -> bool:
        """True when a folder could not be indexed at all, or a file had an error."""
        return any(f.failed or f.problems for f in self.folders)

    def total(self, field_name: str) -> int:
        """Sum of one counter over folders."""
        return sum(int(getattr(folder, field_name)) for folder in self.folders)

    def as_json(self) -> dict[str, Any]:
        """Machine-readable summary (``index --json`` and the MCP ``index`` tool)."""
        return {
            "filesIndexed": self.total("indexed"),
            "filesUnchanged": self.total("unchanged"),
            "filesSkipped": self.total("skipped"),
            "filesDeleted": self.total("deleted"),
            "chunksWritten": self.total("chunks"),
            "chunksEmbedded": self.chunks_embedded,
            "chunksPending": self.chunks_pending,
            "errors": sum(len(f.problems) for f in self.folders),
            "truncated": any(f.truncated for f in self.folders),
            "seconds": round(self.seconds, 3),
            "folders": [
                {
                    "path": f.path,
                    "name": f.name,
                    "mode": f.mode,
                    "failed": f.failed,
                    "indexed": f.indexed,
                    "unchanged": f.unchanged,
                    "skipped": f.skipped,
                    "deleted": f.deleted,
                    "chunks": f.chunks,
                    "truncated": f.truncated,
                    "problems": [{"path": p.path, "reason": p.reason} for p in f.problems],
                    "warnings": list(f.warnings),
                }
                for f in self.folders
            ],
        }


@dataclass(frozen=True)
class Status:
    """The index at a glance."""

    index_path: Path
    exists: bool
    size_bytes: int
    model: tuple[str, int] | None
    folders: tuple[Folder, ...]
    changed: dict[str, int]
    chunks_pending: int = 0  # chunks searchable by words but still waiting for their vector

    @property
    def files(self) -> int:
        """Indexed files with chunks."""
        return sum(f.files for f in self.folders)

    @property
    def chunks(self) -> int:
        """Stored chunks."""
        return sum(f.chunks for f in self.folders)


def ignore_settings(settings: Settings) -> IgnoreSettings:
    """The discovery rules the indexer and grep share."""
    return IgnoreSettings(
        binary_extensions=settings.binary_extensions or BINARY_EXTENSIONS,
        default_ignore_patterns=(
            DEFAULT_IGNORE_PATTERNS
            if settings.ignore_patterns is None
            else settings.ignore_patterns
        ),
        ignore_file=settings.ignore_file,
        global_ignore_file=settings.global_ignore_file,
        max_file_size=settings.max_file_size,
    )


def resolve_root(raw: str | Path, cwd: Path | None = None) -> Path:
    """An absolute, symlink-free folder path."""
    base = cwd or Path.cwd()
    return Path(os.path.realpath(base / Path(raw).expanduser()))


class Index:
    """An index file plus the model: update it from folders, search it."""

    def __init__(self, settings: Settings, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self._embedder = embedder
        self._indexed: tuple[int, list[Folder]] = (-1, [])  # (generation, folders) read last
        self._store: Store | None = None  # kept open: it holds the vectors between searches

    @property
    def embedder(self) -> Embedder:
        """The embedder, created on first use (the ONNX session loads on first embed)."""
        if self._embedder is None:
            self._embedder = OnnxEmbedder(self.settings.model_dir)
        return self._embedder

    def _open(self, create: bool = False) -> Store:
        if self._store is None:
            s = self.settings
            self._store = open_store(s.store_backend, s.store_path, create=create)
        return self._store

    def _roots(self, roots: Sequence[str | Path] | None) -> list[Path]:
        chosen = list(self.settings.roots if roots is None else map(resolve_root, roots))
        if not chosen:
            raise UsageError(
                "No folders configured. Add one with `semsearch add PATH`, "
                "or index a folder directly with `semsearch index PATH`."
            )
        return chosen

    def plan(self, roots: Sequence[str | Path] | None = None) -> list[Listing]:
        """What an index run would read (``index --dry-run``); loads no model."""
        return [list_files(root, ignore_settings(self.settings)) for root in self._roots(roots)]

    def update(
        self,
        roots: Sequence[str | Path] | None = None,
        *,
        force: bool = False,
        max_files: int | None = None,
        wait_seconds: float = 600.0,
        on_event: Callable[[FileEvent], None] | None = None,
    ) -> IndexReport:
        """Index folders (default: the configured ones) incrementally; one writer at a time."""
        chosen = self._roots(roots)
        if max_files is not None and max_files < 1:
            raise UsageError(f"max_files must be at least 1, got {max_files}.")
        started = time.monotonic()
        with write_lock(self.settings.store_path, wait_seconds):
            store = self._open(create=True)
            stored = store.model()
            if stored is not None and stored[0] != self.embedder.model_id:
                if not force:
                    raise ModelMismatchError(
                        model_mismatch_message(store.path, stored[0], self.embedder.model_id)
                    )
                store.clear_chunks()
            indexer = Indexer(store, self.embedder, self._indexer_settings(), on_event)
            reports: list[FolderReport] = []
            for root in chosen:
                left = None if max_files is None else max_files - sum(r.processed for r in reports)
                if left is not None and left <= 0:
                    reports.append(FolderReport(str(root), root.name, "", truncated=True))
                    continue
                reports.append(indexer.index_folder(root, force=force, max_files=left))
            indexer.embed_pending()
            store.maintain()
            pending = store.pending_count()
        seconds = time.monotonic() - started
        return IndexReport(tuple(reports), seconds, indexer.embedded, pending)

    def watch(
        self,
        roots: Sequence[str | Path] | None = None,
        *,
        interval: float = 2.0,
        stop: threading.Event | None = None,
        on_report: Callable[[IndexReport], None] | None = None,
        on_event: Callable[[FileEvent], None] | None = None,
    ) -> None:
        """Index the folders, then again whenever :meth:`pending_work` finds something, checking
        every ``interval`` seconds, until ``stop`` is set (or the caller is interrupted)."""
        chosen = self._roots(roots)
        stop = stop or threading.Event()
        while not stop.is_set():
            report = self.update(chosen, on_event=on_event)
            if on_report is not None:
                on_report(report)
            while not stop.wait(interval) and not self.pending_work(chosen):
                pass

    def _indexer_settings(self) -> IndexerSettings:
        s = self.settings
        return IndexerSettings(
            ignore=ignore_settings(s),
            chunking=ChunkSettings(s.target_tokens, s.overlap_tokens, s.hard_token_limit),
            max_text_size=s.max_file_size,
        )

    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        folder: str | Path | None = None,
        glob: str | None = None,
        mode: Mode | None = None,
    ) -> list[Hit]:
        """Top-k chunks for a query; filters apply before ranking.

        ``folder`` is a folder name or path, resolved among :meth:`folders` by
        :func:`~semsearch.folders.resolve_folder` (an ambiguous name is refused).
        """
        chosen = None
        if folder is not None:
            chosen = resolve_folder(folder, self.folders()).path
        options = SearchOptions(
            k=self.settings.top_k if k is None else k,
            folder=None if chosen is None else str(chosen),
            glob=glob,
            mode=mode or self.settings.default_mode,
            rrf_k=self.settings.rrf_k,
        )
        return search(self._open(), self.embedder, query, options)

    def folders(self) -> list[FolderInfo]:
        """The configured folders in config order, then those only in the index; with counts."""
        indexed = {os.path.realpath(f.path): f for f in self._indexed_folders()}
        rows: list[FolderInfo] = []
        for root in self.settings.roots:
            found = indexed.pop(os.path.realpath(root), None)
            counts = (found.files, found.chunks, found.last_indexed) if found else (0, 0, None)
            rows.append(FolderInfo(root.name, root, True, *counts))
        for f in indexed.values():
            rows.append(FolderInfo(f.name, Path(f.path), False, f.files, f.chunks, f.last_indexed))
        return rows

    def _indexed_folders(self) -> list[Folder]:
        """The index's folders with counts, read again only after the index changed."""
        if self._store is None and not self.settings.store_path.exists():
            return []
        store = self._open()
        generation = store.generation()
        if generation != self._indexed[0]:
            self._indexed = (generation, store.folders())
        return self._indexed[1]

    def purge(self, root: Path, wait_seconds: float = 600.0) -> int:
        """Remove a folder's files and chunks from the index; returns files purged."""
        if not self.settings.store_path.exists():
            return 0
        with write_lock(self.settings.store_path, wait_seconds):
            store = self._open()
            purged = store.remove_folder(str(root))
            store.maintain()
            return purged

    def status(self, count_changes: bool = True) -> Status:
        """Index file, model, folders with counts, and files changed since the last run."""
        path = self.settings.store_path
        if not path.exists():
            return Status(path, False, 0, None, (), {})
        store = self._open()
        folders = tuple(store.folders())
        changed = {f.path: self._changed(store, f) for f in folders} if count_changes else {}
        size, model, pending = store.size_bytes(), store.model(), store.pending_count()
        return Status(path, True, size, model, folders, changed, pending)

    def pending_work(self, roots: Sequence[str | Path] | None = None) -> int:
        """How much an ``update`` would do: files of the folders (default: the configured ones)
        that are new, changed (mtime or size) or gone since they were indexed, plus chunks still
        waiting for vectors; 0 when all is current. Lists the folders with the rules ``update``
        uses; reads no file.
        """
        chosen = list(self.settings.roots if roots is None else map(resolve_root, roots))
        if not self.settings.store_path.exists():
            return sum(len(listing.files) for listing in self.plan(chosen)) if chosen else 0
        store = self._open()
        indexed = {f.path: f for f in store.folders()}
        changed = store.pending_count()
        for root in chosen:
            folder = indexed.get(str(root))
            if folder is not None:
                changed += self._changed(store, folder)
            elif root.is_dir():
                changed += len(list_files(root, ignore_settings(self.settings)).files)
        return changed

    def _changed(self, store: Store, folder: Folder) -> int:
        root = Path(folder.path)
        if not root.is_dir():
            return 0
        listing = list_files(root, ignore_settings(self.settings))
        states = store.file_states(folder.id)
        listed = {e.rel for e in listing.files}
        differs = sum(
            1
            for e in listing.files
            if (s := states.get(e.rel)) is None or (s.mtime_ns, s.size) != (e.mtime_ns, e.size)
        )
        return differs + sum(1 for rel in states if rel not in listed)

    def close(self) -> None:
        """Close the index file."""
        if self._store is not None:
            self._store.close()
            self._store = None
