"""The library's front door: :class:`Index` indexes folders and searches them.

The CLI and the MCP server are thin adapters over this class::

    import semsearch

    index = semsearch.Index(semsearch.load_settings(os.environ))
    index.update()                       # the configured folders
    for hit in index.search("how does the retry logic work"):
        print(hit.path, hit.start_line, hit.score)
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from semsearch.config import (
    Mode,
    RootChange,
    Settings,
    add_roots,
    is_inside,
    move_root,
    roots_holding,
)
from semsearch.errors import ModelMismatchError, UsageError
from semsearch.files.filetype import BINARY_EXTENSIONS
from semsearch.files.folders import (
    FolderInfo,
    check_move,
    check_not_nested,
    looks_moved,
    resolve_folder,
)
from semsearch.files.ignore import DEFAULT_IGNORE_PATTERNS, IgnoreSettings
from semsearch.files.listing import list_files
from semsearch.indexing.pipeline import (
    FileEvent,
    FolderReport,
    Indexer,
    IndexerSettings,
)
from semsearch.indexing.plan import FolderPlan, is_same, plan_folder
from semsearch.indexing.report import FolderStatus, IndexReport, MoveReport, Status
from semsearch.model.embedder import Embedder, OnnxEmbedder
from semsearch.search.fusion import SearchOptions, search
from semsearch.search.hits import Hit
from semsearch.store import (
    FileState,
    Folder,
    LockHolder,
    Store,
    model_mismatch_message,
    open_store,
    write_lock,
)
from semsearch.text.chunking import ChunkSettings

if TYPE_CHECKING:
    from semsearch.files.changes import ChangeMonitor

# pending_work counts pending path vectors up to this many (more only start a larger run)
PENDING_PATHS_COUNTED = 1_000


def _absorb(store: Store, outers: Sequence[Path]) -> None:
    """Take over the indexed folders inside ``outers``: rows re-keyed, nothing re-embedded."""
    for outer in outers:
        for inner in [f.path for f in store.folders() if is_inside(f.path, outer)]:
            prefix = Path(os.path.relpath(os.path.realpath(inner), os.path.realpath(outer)))
            store.move_folder(inner, str(outer), prefix.as_posix() + "/")


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
        allow_secret_patterns=settings.allow_secret_patterns,
        index_kinds=settings.index_kinds,
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
        """The folders to index: a path inside a configured or indexed folder means that one."""
        if roots is None:
            chosen = list(self.settings.roots)
        else:
            chosen = list(dict.fromkeys(self._covering(resolve_root(root)) for root in roots))
        if not chosen:
            raise UsageError(
                "No folders configured. Add one with `semsearch add PATH`, "
                "or index a folder directly with `semsearch index PATH`."
            )
        for root in chosen:
            check_not_nested(root, self.settings.roots)
        return chosen

    def plan(self, roots: Sequence[str | Path] | None = None) -> list[FolderPlan]:
        """What an index run would index and skip (``index --dry-run``); loads no model.

        A file unchanged since the last run keeps its stored outcome; any other is read and its
        text extracted, as the run would, so that a file without text counts as skipped here too.
        """
        return [self._plan(root) for root in self._roots(roots)]

    def _plan(self, root: Path) -> FolderPlan:
        listing = list_files(root, ignore_settings(self.settings))
        return plan_folder(listing, self._states(listing.root), self._indexer_settings())

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
        on_wait: Callable[[LockHolder], None] | None = None,
    ) -> IndexReport:
        """Index folders (default: the configured ones) incrementally; one writer at a time.

        ``on_wait`` hears at once, with the holder, when another run holds the writer lock.
        """
        chosen = self._roots(roots)
        if max_files is not None and max_files < 1:
            raise UsageError(f"max_files must be at least 1, got {max_files}.")
        started = time.monotonic()
        with write_lock(self.settings.store_path, wait_seconds, on_wait):
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
            _absorb(store, chosen)
            indexer = Indexer(store, embedder, self._indexer_settings(), on_event)
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
        return IndexReport(
            tuple(reports), seconds, indexer.embedded, pending, indexer.paths_embedded
        )

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
        every ``interval`` seconds, until ``stop`` is set (or the caller is interrupted). The
        check is skipped while a :class:`~semsearch.files.changes.ChangeMonitor` saw no change."""
        chosen = self._roots(roots)
        stop = stop or threading.Event()
        from semsearch.files.changes import (
            ChangeMonitor,  # inotify via ctypes: only what watch needs
        )

        monitor = ChangeMonitor()
        try:
            while not stop.is_set():
                report = self.update(chosen, on_event=on_event)
                if on_report is not None:
                    on_report(report)
                while not stop.wait(interval) and not self._has_work(chosen, monitor):
                    pass
        finally:
            monitor.close()

    def _has_work(self, roots: Sequence[Path], monitor: ChangeMonitor) -> bool:
        check = monitor.begin(roots, ignore_settings(self.settings), self.generation())
        if check is None:
            return False
        if self.pending_work(roots) > 0:
            return True
        monitor.confirm(check)
        return False

    def _indexer_settings(self) -> IndexerSettings:
        s = self.settings
        return IndexerSettings(
            ignore=ignore_settings(s),
            chunking=ChunkSettings(s.target_tokens, s.overlap_tokens, s.hard_token_limit),
            document_chunking=ChunkSettings(
                s.document_target_tokens, s.document_overlap_tokens, s.hard_token_limit
            ),
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
        :func:`~semsearch.files.folders.resolve_folder` (an ambiguous name is refused).
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

    def generation(self) -> int | None:
        """A number that changes with every write to the index, by any process; None while
        there is no index file."""
        if self._store is None and not self.settings.store_path.exists():
            return None
        return self._open().generation()

    def pending_work(self, roots: Sequence[str | Path] | None = None) -> int:
        """How much an ``update`` would do: files of the folders (default: the configured ones)
        that are new, changed (mtime or size) or gone since they were indexed, plus chunks still
        waiting for vectors and files whose path vector is not made yet (counted up to
        ``PENDING_PATHS_COUNTED``: an index of an older schema has none); 0 when all is current.
        Lists the folders with the rules ``update`` uses; reads no file.
        """
        chosen = list(self.settings.roots if roots is None else map(resolve_root, roots))
        exists = self.settings.store_path.exists()
        indexed = {f.path: f for f in self._indexed_folders()} if exists else {}
        changed = 0
        if exists:
            store = self._open()
            changed = store.pending_count() + len(store.pending_paths(PENDING_PATHS_COUNTED))
        for root in chosen:
            folder = indexed.get(str(root))
            if folder is not None:
                changed += self._compare(folder)[0]
            elif root.is_dir():
                changed += len(list_files(root, ignore_settings(self.settings)).files)
        return changed

    def add(
        self, paths: Sequence[str], cwd: Path | None = None, wait_seconds: float = 600.0
    ) -> RootChange:
        """Add folders to the config (:func:`~semsearch.config.add_roots`), never twice.

        A path inside a configured or indexed folder is refused (``covered``). An added folder
        takes over the configured and indexed folders inside it: their files and chunks are
        re-keyed to it, nothing is re-embedded. A path where a folder missing on disk seems to
        have moved is refused (``moved``): :meth:`move` that folder there instead.
        """
        base = cwd or Path.cwd()
        indexed = self._indexed_folders()
        moved = self._moved_here([resolve_root(path, base) for path in paths], indexed)
        wanted = [path for path in paths if resolve_root(path, base) not in moved]
        configured = {os.path.realpath(root) for root in self.settings.roots}
        only_indexed = [Path(f.path) for f in indexed if os.path.realpath(f.path) not in configured]
        change = add_roots(self.settings.config_path, wanted, base, only_indexed)
        self.settings = replace(self.settings, roots=change.roots)
        outers = [*change.changed, *change.unchanged]
        if any(is_inside(f.path, outer) for f in indexed for outer in outers):
            with write_lock(self.settings.store_path, wait_seconds):  # only then wait for it
                store = self._open()
                _absorb(store, outers)
                store.maintain()
        return replace(change, moved=tuple(moved.items()))

    def move(
        self,
        old: str | Path,
        new: str | Path,
        cwd: Path | None = None,
        wait_seconds: float = 600.0,
    ) -> MoveReport:
        """Give the folder ``old`` (a name or path, also when gone from disk) to the folder ``new``.

        ``old`` resolves among :meth:`folders` (configured or only indexed); ``new`` must be a
        directory. Its files and chunks now belong to ``new`` and its config entry, if any,
        becomes ``new``; nothing is re-embedded: the next :meth:`update` finds the files
        unchanged (by mtime and size, or else by sha256).
        """
        folder = resolve_folder(old, self.folders(), cwd)
        target = resolve_root(new, cwd)
        check_move(folder.path, target, self.folders())
        files = 0
        if self.settings.store_path.exists():
            with write_lock(self.settings.store_path, wait_seconds):
                store = self._open()
                files = store.move_folder(str(folder.path), str(target))
                store.maintain()
        rewritten = move_root(self.settings.config_path, folder.path, target)
        roots = (target if root == folder.path else root for root in self.settings.roots)
        self.settings = replace(self.settings, roots=tuple(dict.fromkeys(roots)))
        return MoveReport(folder.path, target, files, target in self.settings.roots, rewritten)

    def _covering(self, root: Path) -> Path:
        """The configured (else indexed) folder holding ``root``, or ``root`` itself."""
        indexed = [Path(f.path) for f in self._indexed_folders()]
        holders = roots_holding(self.settings.roots, root) or roots_holding(indexed, root)
        return holders[-1] if holders else root

    def _moved_here(self, targets: Sequence[Path], indexed: Sequence[Folder]) -> dict[Path, Path]:
        """target → indexed folder missing on disk whose files are found under the target."""
        gone = [f for f in indexed if not Path(f.path).is_dir()]
        if not gone:
            return {}
        store = self._open()
        found: dict[Path, Path] = {}
        for target in targets:
            for folder in gone:
                states = store.file_states(folder.id)
                rels = [rel for rel, state in states.items() if state.status == "ok"]
                if target.is_dir() and looks_moved(rels, target):
                    found[target] = Path(folder.path)
                    break
        return found

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
        size, model, pending = store.size_bytes(), store.model(), store.pending_count()
        return Status(path, True, size, model, tuple(rows), pending)

    def _folder_status(self, info: FolderInfo, folder: Folder) -> FolderStatus:
        return FolderStatus(info, True, *self._compare(folder))

    def _compare(self, folder: Folder) -> tuple[int, int, int]:
        """(changed, skipped, errors) of an indexed folder's files now, as an index run would
        count them; zeros when the folder is gone from disk. Lists the folder; reads no file."""
        root = Path(folder.path)
        if not root.is_dir():
            return 0, 0, 0
        listing = list_files(root, ignore_settings(self.settings))
        states = self._open().file_states(folder.id)
        listed = {e.rel for e in listing.files}
        differs = sum(
            1 for e in listing.files if (s := states.get(e.rel)) is None or not is_same(s, e)
        )
        gone = sum(1 for rel in states if rel not in listed)
        kept = [s.status for rel, s in states.items() if rel in listed]
        skipped = len(listing.skipped) + sum(1 for s in kept if s not in ("ok", "error"))
        errors = len(listing.errors) + kept.count("error")
        return differs + gone, skipped, errors

    def close(self) -> None:
        """Close the index file and wait for the model's background load, if one runs."""
        try:
            if self._store is not None:
                self._store.close()
                self._store = None
        finally:
            if self._embedder is not None:
                self._embedder.close()
