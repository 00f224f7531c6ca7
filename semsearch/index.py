"""The library's front door: :class:`Index` indexes folders and searches them.

The CLI and the MCP server are thin adapters over this class::

    import semsearch

    index = semsearch.Index(semsearch.load_settings(os.environ))
    index.update()                       # the configured folders
    for hit in index.search("how does the retry logic work"):
        print(hit.path, hit.start_line, hit.score)
"""

from __future__ import annotations

import operator
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semsearch.access import read_file_bytes
from semsearch.chunking import ChunkSettings
from semsearch.config import Mode, Settings
from semsearch.embedder import Embedder, OnnxEmbedder
from semsearch.errors import ExtractError, ModelMismatchError, UsageError
from semsearch.extract import extract
from semsearch.filetype import BINARY_EXTENSIONS, is_binary_content
from semsearch.folders import FolderInfo, resolve_folder
from semsearch.ignore import DEFAULT_IGNORE_PATTERNS, IgnoreSettings
from semsearch.indexer import (
    STORED_SKIP_REASONS,
    FileEvent,
    FolderReport,
    Indexer,
    IndexerSettings,
)
from semsearch.listing import FileEntry, Skip, list_files
from semsearch.search import Hit, SearchOptions, search
from semsearch.store import (
    FileState,
    Folder,
    Store,
    model_mismatch_message,
    open_store,
    write_lock,
)


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
class FolderStatus:
    """One folder of :meth:`Index.status`: its index counts and how its files stand now.

    ``skipped`` and ``errors`` count as an index run does (see :class:`FolderPlan`); with
    ``count_changes=False`` they and ``changed`` are 0.
    """

    info: FolderInfo
    is_indexed: bool  # in the index (an index run has started on it)
    changed: int = 0  # files new, changed or gone since the last run
    skipped: int = 0
    errors: int = 0


@dataclass(frozen=True)
class Status:
    """The index at a glance; ``folders`` are the configured ones, then those only indexed."""

    index_path: Path
    exists: bool
    size_bytes: int
    model: tuple[str, int] | None
    folders: tuple[FolderStatus, ...]

    @property
    def files(self) -> int:
        """Indexed files with chunks."""
        return sum(f.info.files for f in self.folders)

    @property
    def chunks(self) -> int:
        """Stored chunks."""
        return sum(f.info.chunks for f in self.folders)

    @property
    def skipped(self) -> int:
        """Files left out, as the last index run counted them."""
        return sum(f.skipped for f in self.folders)

    @property
    def errors(self) -> int:
        """Files or folders that failed, as the last index run counted them."""
        return sum(f.errors for f in self.folders)


@dataclass(frozen=True)
class FolderPlan:
    """What an index run would do with one folder (``index --dry-run``).

    The counts agree with the run's: ``files`` are what would be searchable, ``skipped`` every
    path left out with its reason (by name, kind or size, or read and found without text), and
    ``errors`` what would fail.
    """

    root: Path
    mode: str
    files: tuple[FileEntry, ...]
    skipped: tuple[Skip, ...]
    errors: tuple[Skip, ...]
    warnings: tuple[str, ...]


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


def _is_same(state: FileState, entry: FileEntry) -> bool:
    """True when a listed file has the mtime and size the index recorded (it is not read)."""
    return (state.mtime_ns, state.size) == (entry.mtime_ns, entry.size)


def _preview(entry: FileEntry, settings: IndexerSettings) -> tuple[str, str] | None:
    """Why an index run would skip or fail on a file (("skipped"|"error", reason)), or None.

    The same checks, in the same order and with the same reasons, as the indexer's read step
    (``Indexer._prepare`` and ``_chunk``): read, binary content, extraction, text size, no text.
    """
    try:
        data = read_file_bytes(entry, settings.ignore)
    except (OSError, ExtractError) as exc:
        return ("error", str(exc))
    if is_binary_content(entry.rel, data):
        return ("skipped", "binary: binary content")
    try:
        text = extract(entry.rel, data).text
    except ExtractError as exc:
        return ("error", str(exc))
    if len(text) > settings.max_text_size:
        return ("skipped", f"too_large: {len(text):,} characters of text")
    if not text.strip():
        return ("skipped", "empty: no text")
    return None


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

    def plan(self, roots: Sequence[str | Path] | None = None) -> list[FolderPlan]:
        """What an index run would index and skip (``index --dry-run``); loads no model.

        A file unchanged since the last run keeps its stored outcome; any other is read and its
        text extracted, as the run would, so that a file without text counts as skipped here too.
        """
        return [self._plan(root) for root in self._roots(roots)]

    def _plan(self, root: Path) -> FolderPlan:
        listing = list_files(root, ignore_settings(self.settings))
        states = self._states(listing.root)
        files: list[FileEntry] = []
        skipped, errors = list(listing.skipped), list(listing.errors)
        for entry in listing.files:
            state = states.get(entry.rel)
            if state is not None and state.status != "error" and _is_same(state, entry):
                reason = STORED_SKIP_REASONS.get(state.status, state.status)
                outcome = None if state.status == "ok" else ("skipped", reason)
            else:
                outcome = _preview(entry, self._indexer_settings())
            if outcome is None:
                files.append(entry)
            else:
                (skipped if outcome[0] == "skipped" else errors).append(Skip(entry.rel, outcome[1]))
        by_rel = operator.attrgetter("rel")
        return FolderPlan(
            listing.root,
            listing.mode,
            tuple(files),
            tuple(sorted(skipped, key=by_rel)),
            tuple(sorted(errors, key=by_rel)),
            listing.warnings,
        )

    def _states(self, root: Path) -> dict[str, FileState]:
        """The stored states of a folder's files ({} when it is not in the index)."""
        real = os.path.realpath(root)
        for folder in self._indexed_folders():
            if os.path.realpath(folder.path) == real:
                return self._open().file_states(folder.id)
        return {}

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
        """Index file, model, folders (configured or indexed) with counts; with
        ``count_changes``, each indexed folder is listed to count changed, skipped and failed
        files the way an index run would."""
        path = self.settings.store_path
        exists = path.exists()
        in_index = {os.path.realpath(f.path): f for f in self._indexed_folders()}
        rows: list[FolderStatus] = []
        for info in self.folders():
            folder = in_index.get(os.path.realpath(info.path))
            if folder is None:
                rows.append(FolderStatus(info, False))
            elif not count_changes:
                rows.append(FolderStatus(info, True))
            else:
                rows.append(self._folder_status(info, folder))
        if not exists:
            return Status(path, False, 0, None, tuple(rows))
        store = self._open()
        return Status(path, True, store.size_bytes(), store.model(), tuple(rows))

    def _folder_status(self, info: FolderInfo, folder: Folder) -> FolderStatus:
        root = Path(folder.path)
        if not root.is_dir():
            return FolderStatus(info, True)
        listing = list_files(root, ignore_settings(self.settings))
        states = self._open().file_states(folder.id)
        listed = {e.rel for e in listing.files}
        differs = sum(
            1 for e in listing.files if (s := states.get(e.rel)) is None or not _is_same(s, e)
        )
        gone = sum(1 for rel in states if rel not in listed)
        kept = [s.status for rel, s in states.items() if rel in listed]
        skipped = len(listing.skipped) + sum(1 for s in kept if s not in ("ok", "error"))
        errors = len(listing.errors) + kept.count("error")
        return FolderStatus(info, True, differs + gone, skipped, errors)

    def close(self) -> None:
        """Close the index file."""
        if self._store is not None:
            self._store.close()
            self._store = None
