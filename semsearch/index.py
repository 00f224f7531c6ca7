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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semsearch.chunking import ChunkSettings
from semsearch.config import Mode, Settings
from semsearch.embedder import Embedder, OnnxEmbedder
from semsearch.errors import ModelMismatchError, UsageError
from semsearch.files import (
    BINARY_EXTENSIONS,
    DEFAULT_IGNORE_PATTERNS,
    IgnoreSettings,
    Listing,
    list_files,
)
from semsearch.indexer import FileEvent, FolderReport, Indexer, IndexerSettings
from semsearch.search import Hit, SearchOptions, VectorCache, search
from semsearch.store import Folder, Store, model_mismatch_message, open_store, write_lock


@dataclass(frozen=True)
class IndexReport:
    """What an index run did, per folder and in total."""

    folders: tuple[FolderReport, ...]
    seconds: float

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
        self._store: Store | None = None
        self._cache = VectorCache()

    @property
    def embedder(self) -> Embedder:
        """The embedder, created on first use (the ONNX session loads on first embed)."""
        if self._embedder is None:
            self._embedder = OnnxEmbedder(
                self.settings.model_dir, variant=self.settings.model_variant
            )
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
            embedder = self.embedder
            if stored is not None and not force:  # the model variant that built it goes on
                embedder = embedder.variant_for(stored[0])
            if stored is not None and stored[0] != embedder.model_id:
                if not force:
                    raise ModelMismatchError(
                        model_mismatch_message(store.path, stored[0], embedder.model_id)
                    )
                store.clear_chunks()
            indexer = Indexer(store, embedder, self._indexer_settings(), on_event)
            reports: list[FolderReport] = []
            for root in chosen:
                left = None if max_files is None else max_files - sum(r.processed for r in reports)
                if left is not None and left <= 0:
                    reports.append(FolderReport(str(root), root.name, "", truncated=True))
                    continue
                reports.append(indexer.index_folder(root, force=force, max_files=left))
            store.maintain()
        return IndexReport(tuple(reports), time.monotonic() - started)

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
        folder: str | None = None,
        glob: str | None = None,
        mode: Mode | None = None,
    ) -> list[Hit]:
        """Top-k chunks for a query; filters apply before ranking."""
        options = SearchOptions(
            k=self.settings.top_k if k is None else k,
            folder=folder,
            glob=glob,
            mode=mode or self.settings.default_mode,
            rrf_k=self.settings.rrf_k,
        )
        return search(self._open(), self.embedder, self._cache, query, options)

    def folders(self) -> list[Folder]:
        """Folders in the index with their counts ([] when there is no index yet)."""
        if self._store is None and not self.settings.store_path.exists():
            return []
        return self._open().folders()

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
        return Status(path, True, store.size_bytes(), store.model(), folders, changed)

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
