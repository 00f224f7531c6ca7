"""The library's front door: :class:`Index` indexes folders and searches them.

The CLI and the MCP server are thin adapters over this class::

    import semsearch

    index = semsearch.Index(semsearch.load_settings(os.environ))
    index.update()                       # the configured folders
    for hit in index.search("how does the retry logic work"):
        print(hit.path, hit.start_line, hit.score)
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ParamSpec, TypeVar

from semsearch.config import (
    Location,
    Mode,
    RemoteLocation,
    RootChange,
    Settings,
    add_roots,
    is_inside,
    move_root,
    remove_roots,
    roots_holding,
)
from semsearch.errors import (
    IndexMissingError,
    LockedError,
    ModelError,
    PathRefusedError,
    SemsearchError,
    UsageError,
)
from semsearch.files.access import Locator
from semsearch.files.changes import ChangeMonitor
from semsearch.files.filetype import BINARY_EXTENSIONS
from semsearch.files.folders import (
    FolderInfo,
    check_move,
    check_not_nested,
    holding_folder,
    looks_moved,
    resolve_folder,
    select_folders,
)
from semsearch.files.grep import DEFAULT_TIMEOUT, GrepOptions, GrepResult, resolve_scopes
from semsearch.files.grep import grep as grep_files
from semsearch.files.ignore import DEFAULT_IGNORE_PATTERNS, IgnoreSettings
from semsearch.files.listing import list_files
from semsearch.indexing.pipeline import (
    FileEvent,
    FolderReport,
    Indexer,
    IndexerSettings,
)
from semsearch.indexing.plan import FolderPlan, is_same, plan_folder
from semsearch.indexing.report import (
    FolderStatus,
    IndexReport,
    MoveReport,
    RebuildReport,
    Status,
)
from semsearch.model.catalog import find_model
from semsearch.model.embedder import Embedder, OnnxEmbedder
from semsearch.search.fusion import SearchOptions, check_model, search
from semsearch.search.hits import Hit
from semsearch.search.passage import (
    Gathered,
    LineRange,
    Passage,
    gather,
    read_lines,
    read_passage,
)
from semsearch.store import (
    FileState,
    Folder,
    IndexCheck,
    LockHolder,
    SqliteStore,
    Store,
    check_index,
    has_index,
    is_writable,
    open_store,
    set_aside,
    write_lock,
)
from semsearch.store.sqlite.switch import drop_next, left_model, next_bytes, open_next, switch
from semsearch.text.chunking import ChunkSettings

logger = logging.getLogger("semsearch.index")

# pending_work counts pending path vectors up to this many (more only start a larger run)
PENDING_PATHS_COUNTED = 1_000
# freshen() indexes up to this many changed files before a search answers; more run in the
# background, so that one search never waits for a large run.
INLINE_FILES = 20

P = ParamSpec("P")
R = TypeVar("R")


def _locked(method: Callable[P, R]) -> Callable[P, R]:
    """Run an :class:`Index` method holding the index's lock (the instance is the first arg)."""

    @functools.wraps(method)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        index = args[0]
        assert isinstance(index, Index)
        with index._lock:
            return method(*args, **kwargs)

    return run


def _uncovered(store: Store, chosen: Sequence[Path]) -> list[str]:
    """The index's folders with chunks that these folders neither are nor hold."""
    wanted = {os.path.realpath(root) for root in chosen}
    return [
        f.path
        for f in store.folders()
        if f.chunks
        and os.path.realpath(f.path) not in wanted
        and not any(is_inside(f.path, root) for root in chosen)
    ]


def _ids_of(folders: Sequence[Folder], roots: Sequence[Path]) -> list[int]:
    """The ids of those of ``folders`` that are these roots (a root not among them has none)."""
    wanted = {os.path.realpath(root) for root in roots}
    return [f.id for f in folders if os.path.realpath(f.path) in wanted]


def _check_switch_covers(store: Store, chosen: Sequence[Path], model: str) -> None:
    """Refuse a change of model (``--model``, ``--force``) that would drop the chunks of folders
    this run does not index: another model's vectors cannot stay beside the new ones."""
    left = _uncovered(store, chosen)
    if left:
        shown = ", ".join(left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
        raise UsageError(
            f"Embedding the index with {model} drops every chunk of the model it holds, those of "
            f"{shown} too, which this run does not index. Run it without a PATH to index every "
            "configured folder (`semsearch add` or `semsearch remove` the folders only the "
            "index holds first)."
        )


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
    """An absolute, symlink-free folder path; a path holding a NUL is a :class:`UsageError`."""
    if "\x00" in os.fspath(raw):  # os.path.realpath would raise ValueError
        raise UsageError(f"No folder at {os.fspath(raw)!r}: a path cannot hold a NUL character.")
    base = cwd or Path.cwd()
    return Path(os.path.realpath(base / os.path.expanduser(raw)))


class Index:
    """An index file plus the model: update it from folders, search it.

    One instance may serve several threads (the MCP server's tools): its methods take turns
    through a lock. ``one_shot`` says this process searches once and exits (``semsearch
    search``): the query's model session then skips graph optimisation, which costs more than
    it saves for one query.
    """

    def __init__(
        self,
        settings: Settings,
        embedder: Embedder | None = None,
        *,
        one_shot: bool = False,
        monitor: ChangeMonitor | None = None,
    ) -> None:
        self.settings = settings
        self._embedder = embedder
        self._one_shot = one_shot
        self._indexed: tuple[int, list[Folder]] = (-1, [])  # (generation, folders) read last
        self._store: Store | None = None  # kept open: it holds the vectors between searches
        self._lock = threading.RLock()
        # freshen's, to skip its check while nothing changed; closed here only if made here
        self._monitor = monitor
        self._owns_monitor = monitor is None
        if one_shot and embedder is None:
            # One search, then exit: the model's session starts building now, beside the store
            # being opened (search() switches to another build if the index was made by one).
            self.embedder.preload()
        self._updater: threading.Thread | None = None  # freshen's background index run
        self._rebuilding = False  # rebuild() holds the write lock for its update()

    @property
    def embedder(self) -> Embedder:
        """The embedder, created on first use (the ONNX session loads on first embed)."""
        if self._embedder is None:
            self._embedder = make_embedder(self.settings, one_shot=self._one_shot)
        return self._embedder

    def use_settings(self, settings: Settings) -> None:
        """Go on with settings read again (folders added or removed since, another top-k); the
        index file stays the one this index opened."""
        if settings.store_path != self.settings.store_path:
            raise ValueError(f"{settings.store_path} is not {self.settings.store_path}")
        with self._lock:
            self.settings = settings

    def _open(self, create: bool = False) -> Store:
        if create and self._store is not None and self._store.upgrade_pending:
            self._forget_store()  # searched as it was on a full disk: an index run upgrades it
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

    @_locked
    def plan(self, roots: Sequence[str | Path] | None = None) -> list[FolderPlan]:
        """What an index run would index and skip (``index --dry-run``); loads no model, but
        raises ModelError, as the run would, when the model the settings name is not installed.

        A file unchanged since the last run keeps its stored outcome; any other is read and its
        text extracted, as the run would, so that a file without text counts as skipped here too.
        """
        if self.settings.model is not None and self.settings.model_dir is None:
            find_model(self.settings.model)  # the packages' metadata only
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

    @_locked
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
        The second pass embeds the chunks and paths of these folders that wait for a vector
        (another folder's wait for its own run). Another model than the index's (chosen by
        name, or left by a stopped change) embeds every file again: on SQLite into a new index
        beside it, copied in once whole (:mod:`semsearch.store.sqlite.switch`); on LanceDB in
        place.

        ``on_wait`` hears at once, with the holder, when another run holds the writer lock.
        """
        chosen = self._roots(roots)
        if max_files is not None and max_files < 1:
            raise UsageError(f"max_files must be at least 1, got {max_files}.")
        started = time.monotonic()
        with self._write_lock(wait_seconds, on_wait):
            store = self._open(create=True)
            store.sync()  # what another writer committed while this one waited
            stored = store.model()
            embedder = self.embedder
            # the model of a change a stopped run left beside the index (SQLite), if any
            waiting = left_model(store.path) if stored and isinstance(store, SqliteStore) else None
            resumed = None
            if stored is not None and not force:  # the model variant that built it goes on
                embedder = embedder.variant_for(stored[0])
                resumed = self._resumed_model(waiting, embedder, store, chosen)
                embedder = resumed or embedder
            replaced = ""
            target = store  # the store this run writes: the index, or its next one
            if stored is not None and stored[0] != embedder.model_id:
                # a model chosen by name (`index --model`, config `model`) replaces the index's
                if not force and not self._chooses_model and resumed is None:
                    check_model(store, embedder, stored)  # raises: another model's vectors
                _check_switch_covers(store, chosen, embedder.model_id)
                # the new model must run (its file's checksum, its outputs) before the vectors
                # it replaces are gone: a model that cannot would leave the index with none
                embedder.embed(["semsearch"])
                if isinstance(store, SqliteStore):  # built beside it, searched meanwhile
                    folders = {os.path.realpath(root) for root in chosen}
                    target = open_next(store, embedder.model_id, folders)
                else:
                    store.clear_chunks()
                replaced = stored[0]
            model, next_model = embedder.model_id, ""  # the index's model after the run
            if target is store and isinstance(store, SqliteStore):
                if waiting is None or waiting == embedder.model_id or self._chooses_model:
                    drop_next(store.path)  # none, or a change given up by naming a model
                else:  # not installed here, `index PATH`, `--force`: kept for a later run
                    next_model = waiting
            try:
                reports, indexer, pending = self._index_into(
                    target, embedder, chosen, force, max_files, on_event
                )
                if target is not store:
                    assert isinstance(store, SqliteStore) and isinstance(target, SqliteStore)
                    if pending or any(r.failed or r.truncated for r in reports):
                        # the index keeps its model and vectors until the next one is whole
                        model, next_model, replaced = replaced, embedder.model_id, ""
                    else:  # readers of the index (this one too) see a new generation
                        switch(store, target)
            finally:
                if target is not store:
                    target.close()
        seconds = time.monotonic() - started
        return IndexReport(
            tuple(reports),
            seconds,
            indexer.embedded,
            pending,
            indexer.paths_embedded,
            model=model,
            replaced_model=replaced,
            next_model=next_model,
        )

    def _resumed_model(
        self, waiting: str | None, embedder: Embedder, store: Store, chosen: Sequence[Path]
    ) -> Embedder | None:
        """The embedder of ``waiting``, the model a stopped change left building beside the
        index, when the settings name no model, that one is installed and this run indexes
        every folder of the index (``index PATH`` updates the index with its model meanwhile);
        else None."""
        if waiting is None or waiting == embedder.model_id or self._chooses_model:
            return None
        if _uncovered(store, chosen):
            return None
        resumed = self.embedder.variant_for(waiting)
        return resumed if resumed.model_id == waiting else None

    def _index_into(
        self,
        store: Store,
        embedder: Embedder,
        chosen: Sequence[Path],
        force: bool,
        max_files: int | None,
        on_event: Callable[[FileEvent], None] | None,
    ) -> tuple[list[FolderReport], Indexer, int]:
        """Index the chosen folders into ``store``, then embed what waits in them: (the
        folders' reports, the indexer, the chunks still waiting)."""
        _absorb(store, chosen)
        indexer = Indexer(store, embedder, self._indexer_settings(), on_event)
        reports: list[FolderReport] = []
        for root in chosen:
            left = None if max_files is None else max_files - sum(r.processed for r in reports)
            if left is not None and left <= 0:
                reports.append(FolderReport(str(root), root.name, "", truncated=True))
                continue
            reports.append(indexer.index_folder(root, force=force, max_files=left))
        owned = _ids_of(store.folders(), chosen)  # another folder's pending chunks wait
        indexer.embed_pending(owned)
        store.maintain()
        return reports, indexer, store.pending_count(owned)

    @property
    def _chooses_model(self) -> bool:
        """The settings name a model (``model``): another model's index is embedded again."""
        return self.settings.model is not None and self.settings.model_dir is None

    @_locked
    def rebuild(
        self,
        *,
        max_files: int | None = None,
        wait_seconds: float = 600.0,
        on_event: Callable[[FileEvent], None] | None = None,
        on_wait: Callable[[LockHolder], None] | None = None,
    ) -> RebuildReport:
        """Set the index aside and index the configured folders into a new one
        (``index --rebuild``): the way out of a damaged index, or a clean start.

        Holding the write lock, the index is checked (:meth:`check`) and renamed beside itself,
        ``NAME.damaged-TIME`` when the check found a problem, else ``NAME.old-TIME``, with its
        ``-wal`` and ``-shm`` files (:func:`~semsearch.store.repair.set_aside`): it is never
        deleted or written to. Folders that are in the index but not in the config are not
        indexed again (``index PATH`` does that).
        """
        self._roots(None)  # no folder configured: refused before anything moves
        s = self.settings
        if isinstance(s.store_path, RemoteLocation):
            raise UsageError(
                f"--rebuild sets the index aside by renaming it, which {s.store_path} on object "
                f"storage cannot do. Index into a new prefix (--index {s.store_path}-2) and "
                "point readers there, or run `semsearch index --force` to re-embed in place."
            )
        with write_lock(s.store_path, wait_seconds, on_wait):
            self._forget_store()
            found = kept = None
            if has_index(s.store_backend, s.store_path):
                found = check_index(s.store_backend, s.store_path)
                kept = set_aside(s.store_path, "damaged" if found.is_damaged else "old")
            self._rebuilding = True
            try:
                run = self.update(max_files=max_files, on_event=on_event)
            finally:
                self._rebuilding = False
        return RebuildReport(kept or (), found, run)

    @_locked
    def check(
        self,
        wait_seconds: float = 600.0,
        on_wait: Callable[[LockHolder], None] | None = None,
    ) -> IndexCheck:
        """Read the whole index and say what is wrong with it (``status --check``; see
        :func:`~semsearch.store.repair.check_index`); writes nothing. Holds the write lock, so
        that no index run changes what is being read (not on a read-only index, which none can
        change); :class:`~semsearch.errors.IndexMissingError` when there is no index.
        """
        s = self.settings
        if not self._exists():
            raise IndexMissingError(f"No index at {s.store_path}. Run `semsearch index` first.")
        if s.is_remote:  # readers need no write access
            return check_index(s.store_backend, s.store_path)
        if not is_writable(s.store_path):
            return replace(check_index(s.store_backend, s.store_path), read_only=True)
        with write_lock(s.store_path, wait_seconds, on_wait):
            return check_index(s.store_backend, s.store_path)

    def _write_lock(
        self, wait_seconds: float, on_wait: Callable[[LockHolder], None] | None
    ) -> contextlib.AbstractContextManager[None]:
        """The write lock for an index run; nothing to take while :meth:`rebuild` holds it."""
        if self._rebuilding:
            return contextlib.nullcontext()
        return write_lock(self.settings.store_path, wait_seconds, on_wait)

    def _exists(self) -> bool:
        """Whether there is an index, damaged or not (a zero-byte file is none yet)."""
        return has_index(self.settings.store_backend, self.settings.store_path)

    def _forget_store(self) -> None:
        """Close the open store (its file is about to be set aside)."""
        if self._store is not None:
            self._store.close()
            self._store = None
        self._indexed = (-1, [])

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
            chunking=ChunkSettings(
                s.target_tokens, s.overlap_tokens, s.hard_token_limit, whole_lines=True
            ),
            document_chunking=ChunkSettings(
                s.document_target_tokens, s.document_overlap_tokens, s.hard_token_limit
            ),
            max_text_size=s.max_file_size,
        )

    @_locked
    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        folder: str | Path | None = None,
        glob: str | Sequence[str] | None = None,
        mode: Mode | None = None,
        exclude: str | Sequence[str] | None = None,
        min_score: float | None = None,
        all_copies: bool = False,
    ) -> list[Hit]:
        """Top-k chunks for a query; filters apply before ranking.

        ``folder`` is a folder name or path, resolved among :meth:`folders` by
        :func:`~semsearch.files.folders.resolve_folder` (an ambiguous name is refused).
        ``glob`` is one gitignore-style pattern or several, matched against paths inside their
        folder: a file matching any of them is searched, and one starting with "!" excludes;
        ``exclude`` patterns leave files out. Filters that leave no indexed file raise
        :class:`~semsearch.errors.NoMatchingFilesError`. Hits scoring below ``min_score`` are
        dropped (so fewer than k may come back). Chunks of one text in several places come back
        as one hit listing the others in ``copies`` (:mod:`~semsearch.search.copies`), so k
        hits are k distinct texts; ``all_copies`` gives each its own hit instead.
        """
        chosen = None
        if folder is not None:
            chosen = resolve_folder(folder, self.folders()).path
        options = SearchOptions(
            k=self.settings.top_k if k is None else k,
            folder=None if chosen is None else str(chosen),
            globs=_patterns(glob),
            mode=mode or self.settings.default_mode,
            rrf_k=self.settings.rrf_k,
            exclude=_patterns(exclude),
            min_score=min_score,
            all_copies=all_copies,
        )
        return search(self._open(), self.embedder, query, options)

    def freshen(self, inline_files: int = INLINE_FILES) -> bool:
        """Bring an existing index up to date with its folders before a search, as the MCP
        server does; True while an index run is under way in the background.

        The full check (:meth:`pending_work`) is skipped while a
        :class:`~semsearch.files.changes.ChangeMonitor` says nothing changed since one found no
        work. Up to ``inline_files`` changed files are indexed before this returns; more, or
        chunks waiting for vectors, start a run in a background thread (sharing the model). A
        run another process holds the write lock for (a CLI ``index``) is left alone: searches
        answer from what it has committed.
        """
        if self._updater is not None and self._updater.is_alive():
            return True
        if self.settings.is_remote:  # published by its own writer (CI): readers never write
            return False
        with self._lock:
            if not self._exists():
                return False
            if self._monitor is None:
                self._monitor = ChangeMonitor()
            s = self.settings
            check = self._monitor.begin(s.roots, ignore_settings(s), self.generation())
            if check is None:
                return False
            work = self.pending_work()
            if work == 0:
                self._monitor.confirm(check)
                return False
            if work <= inline_files:
                try:
                    self.update(wait_seconds=0)
                    return False
                except LockedError:
                    return True
            writer = Index(s, embedder=self.embedder)
            self._updater = threading.Thread(target=_update_quietly, args=(writer,), daemon=True)
            self._updater.start()
        return True

    @_locked
    def passages(self, hits: Sequence[Hit], context_lines: int = 0) -> list[Passage]:
        """Each hit's whole lines with ``context_lines`` more of its file before and after
        (:func:`~semsearch.search.passage.read_passage`: the indexed text, with a note saying
        why, when the file cannot give them)."""
        locator = self._locator()
        return [read_passage(hit, context_lines, locator) for hit in hits]

    @_locked
    def gather(self, hits: Sequence[Hit], context_lines: int = 0) -> Gathered:
        """The hits as one markdown block to put in a context window, with ``context_lines``
        read from each file around its chunk (:func:`~semsearch.search.passage.gather`)."""
        return gather(hits, context_lines, self._locator())

    @_locked
    def read_lines(
        self,
        path: str,
        start_line: int | None = None,
        end_line: int | None = None,
        *,
        is_capped: bool = True,
    ) -> LineRange:
        """A line range of a file inside the configured folders, as the indexer reads it
        (:func:`~semsearch.search.passage.read_lines`, at most 256 KiB unless ``is_capped`` is
        False): files outside them, or ones the indexer leaves out, are refused, saying so when
        the file is in an indexed folder that is not on this machine (an index built elsewhere).
        """
        try:
            return read_lines(self._locator(), path, start_line, end_line, is_capped=is_capped)
        except PathRefusedError:
            away = self._unconfigured(path)
            if away is None:
                raise
            if away.path.is_dir():
                raise PathRefusedError(
                    f"Refused: {path} is in the folder {away.name} ({away.path}), which is "
                    "indexed but not configured, and only the files of configured folders can "
                    f"be read: `semsearch add {shlex.quote(str(away.path))}` allows it."
                ) from None
            raise PathRefusedError(
                f"{path} is in the folder {away.name} ({away.path}) of the index "
                f"{self.settings.store_path}, and that folder is not on this machine: its files "
                "cannot be read here. Search results carry the indexed text; to read whole "
                "files, check the folder out here and `semsearch add` it."
            ) from None

    def _unconfigured(self, path: str) -> FolderInfo | None:
        """The indexed folder holding ``path`` that is not configured, if there is one."""
        for info in self.folders():
            if not info.is_configured and is_inside(os.path.abspath(path), info.path):
                return info
        return None

    def _not_here(self, path: str | None = None) -> FolderInfo | None:
        """The indexed, unconfigured folder holding ``path`` (any, when None) that is not on
        this machine, if there is one."""
        for info in self.folders():
            if info.is_configured or info.path.is_dir():
                continue
            if path is None or is_inside(os.path.abspath(path), info.path):
                return info
        return None

    def grep(
        self,
        options: GrepOptions,
        folder: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        *,
        paths: Sequence[str] = (),
        cwd: Path | None = None,
    ) -> GrepResult:
        """Exact search, line by line, in the files an index run would read (of ``folder``, a
        configured folder's name or path, or of them all), without the index.

        ``paths`` (relative to ``cwd``) narrow it instead of ``folder``: a file or folder inside
        a configured folder is searched with that folder's ignore rules; a folder outside them
        is listed as if it were added (:func:`~semsearch.files.grep.resolve_scopes`).
        """
        ignore = ignore_settings(self.settings)
        if paths:
            if folder:
                raise UsageError("Give either a folder or paths to grep, not both.")
            scopes = resolve_scopes(paths, self.settings.roots, cwd)
            return grep_files(scopes, options, ignore, timeout=timeout)
        if not self.settings.roots or (folder and self._names_folder_not_here(folder)):
            away = [f.name for f in self.folders() if not f.is_configured and not f.path.is_dir()]
            if away:
                raise PathRefusedError(
                    f"grep reads the files themselves, and the folders of the index "
                    f"{self.settings.store_path} ({', '.join(away)}) are not on this machine. "
                    "Search the index instead, or check a folder out here and `semsearch add` it."
                )
        roots = select_folders(self.settings.roots, folder)
        return grep_files(roots, options, ignore, timeout=timeout)

    def _names_folder_not_here(self, folder: str) -> bool:
        """Whether ``folder`` names (or is the path of) an indexed folder not on this machine."""
        return any(
            not f.is_configured and not f.path.is_dir() and folder in (f.name, str(f.path))
            for f in self.folders()
        )

    def holding_folder(self, target: str) -> Path:
        """The configured folder ``target`` names, or the one holding the path ``target``;
        :class:`~semsearch.errors.PathRefusedError` for anything else."""
        return holding_folder(target, self.settings.roots)

    def _locator(self) -> Locator:
        return Locator(self.settings.roots, ignore_settings(self.settings))

    @_locked
    def folders(self) -> list[FolderInfo]:
        """The configured folders in config order, then those only in the index; with counts."""
        indexed = {os.path.realpath(f.path): f for f in self._indexed_folders()}
        rows: list[FolderInfo] = []
        for root in self.settings.roots:
            found = indexed.pop(os.path.realpath(root), None)
            counts = (
                (found.files, found.chunks, found.last_indexed, found.pending, found.commit)
                if found
                else (0, 0, None, 0, None)
            )
            rows.append(FolderInfo(root.name, root, True, *counts))
        for f in indexed.values():
            counts = (f.files, f.chunks, f.last_indexed, f.pending, f.commit)
            rows.append(FolderInfo(f.name, Path(f.path), False, *counts))
        return rows

    @_locked
    def pending_vectors(self, folder: str | Path | None = None) -> int:
        """Chunks searchable by words but still waiting for their vector (an index run stopped
        after its first pass, or still under way), of ``folder`` (a name or path, resolved as
        :meth:`search` does) or of the whole index: the vector arm cannot find them yet."""
        if self._store is None and not self._exists():
            return 0
        if folder is None:
            return self._open().pending_count()
        chosen = resolve_folder(folder, self.folders()).path
        return self._open().pending_count(self._folder_ids([chosen]))

    def _folder_ids(self, roots: Sequence[Path]) -> list[int]:
        """The index's ids of these folders (a folder not in the index has none)."""
        return _ids_of(self._indexed_folders(), roots)

    def _indexed_folders(self) -> list[Folder]:
        """The index's folders with counts, read again only after the index changed."""
        if self._store is None and not self._exists():
            return []
        store = self._open()
        generation = store.generation()
        if generation != self._indexed[0]:
            self._indexed = (generation, store.folders())
        return self._indexed[1]

    @_locked
    def remove(
        self, targets: Sequence[str | Path], *, keep_index: bool = False, cwd: Path | None = None
    ) -> tuple[RootChange, int]:
        """Remove folders (names or paths) from the config and, unless ``keep_index``, purge
        them from the index; returns the config change and the files purged.

        Nothing changes unless every target resolves (an ambiguous or unknown one is a
        :class:`UsageError`); a folder only in the index can be purged by naming it. The index is
        purged first: if it cannot be written (read-only, disk full), the config stays too.
        """
        known = [f for f in self.folders() if f.is_configured or not keep_index]
        chosen = list(dict.fromkeys(resolve_folder(t, known, cwd).path for t in targets))
        files = 0 if keep_index else sum(self.purge(path) for path in chosen)
        change = remove_roots(self.settings.config_path, chosen)
        gone = {os.path.realpath(path) for path in change.changed}
        roots = tuple(r for r in self.settings.roots if os.path.realpath(r) not in gone)
        self.settings = self.settings._replace(roots=roots)
        return change, files

    @_locked
    def purge(self, root: Path, wait_seconds: float = 600.0) -> int:
        """Remove a folder's files and chunks from the index; returns files purged."""
        if not self._exists():
            return 0
        with write_lock(self.settings.store_path, wait_seconds):
            store = self._open()
            store.sync()
            purged = store.remove_folder(str(root))
            store.maintain()
            return purged

    @_locked
    def generation(self) -> int | None:
        """A number that changes with every write to the index, by any process; None while
        there is no index file."""
        if self._store is None and not self._exists():
            return None
        return self._open().generation()

    @_locked
    def pending_work(self, roots: Sequence[str | Path] | None = None) -> int:
        """How much an ``update`` would do: files of the folders (default: the configured ones)
        that are new, changed (mtime or size) or gone since they were indexed, plus their chunks
        still waiting for vectors and their files whose path vector is not made yet (counted up to
        ``PENDING_PATHS_COUNTED``: an index of an older schema has none); 0 when all is current.
        Lists the folders with the rules ``update`` uses; reads no file.
        """
        chosen = list(self.settings.roots if roots is None else map(resolve_root, roots))
        exists = self._exists()
        indexed = {f.path: f for f in self._indexed_folders()} if exists else {}
        changed = 0
        if exists:
            store, owned = self._open(), self._folder_ids(chosen)
            paths = store.pending_paths(PENDING_PATHS_COUNTED, owned)
            changed = store.pending_count(owned) + len(paths)
        for root in chosen:
            folder = indexed.get(str(root))
            if folder is not None:
                changed += self._compare(folder)[0]
            elif root.is_dir():
                changed += len(list_files(root, ignore_settings(self.settings)).files)
        return changed

    @_locked
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
        self.settings = self.settings._replace(roots=change.roots)
        outers = [*change.changed, *change.unchanged]
        if any(is_inside(f.path, outer) for f in indexed for outer in outers):
            with write_lock(self.settings.store_path, wait_seconds):  # only then wait for it
                store = self._open()
                store.sync()
                _absorb(store, outers)
                store.maintain()
        return change._replace(moved=tuple(moved.items()))

    @_locked
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
        if self._exists():
            with write_lock(self.settings.store_path, wait_seconds):
                store = self._open()
                store.sync()
                files = store.move_folder(str(folder.path), str(target))
                store.maintain()
        rewritten = move_root(self.settings.config_path, folder.path, target)
        roots = (target if root == folder.path else root for root in self.settings.roots)
        self.settings = self.settings._replace(roots=tuple(dict.fromkeys(roots)))
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

    @_locked
    def status(self, count_changes: bool = True) -> Status:
        """Index file, model, folders (configured or indexed) with counts; with
        ``count_changes``, each indexed folder is listed to count changed, skipped and failed
        files the way an index run would."""
        path = self.settings.store_path
        exists = self._exists()
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
        following, beside = None, 0
        if isinstance(store, SqliteStore):
            following = left_model(store.path)
            beside = next_bytes(store.path) if following else 0
        return Status(path, True, size, model, tuple(rows), pending, following, beside)

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
        gone = sum(1 for rel in states if rel not in listed and not listing.is_unreadable(rel))
        kept = [s.status for rel, s in states.items() if rel in listed]
        skipped = len(listing.skipped) + sum(1 for s in kept if s not in ("ok", "error"))
        errors = len(listing.errors) + kept.count("error")
        return differs + gone, skipped, errors

    def close(self) -> None:
        """Close the index file and the change monitor, and wait for the model's background
        load, if one runs (a background index run of :meth:`freshen` closes its own)."""
        with self._lock:
            try:
                if self._monitor is not None and self._owns_monitor:
                    self._monitor.close()
                    self._monitor = None
                if self._store is not None:
                    self._store.close()
                    self._store = None
            finally:
                if self._embedder is not None:
                    self._embedder.close()


def _patterns(given: str | Sequence[str] | None) -> tuple[str, ...]:
    """One pattern or several as a tuple."""
    if given is None:
        return ()
    return (given,) if isinstance(given, str) else tuple(given)


def _update_quietly(writer: Index) -> None:
    """:meth:`Index.freshen`'s background run; a run that cannot take the lock is skipped."""
    try:
        writer.update(wait_seconds=0)
    except LockedError:
        logger.info("another index run is writing; the background update was skipped")
    except SemsearchError as exc:
        logger.warning("background index update failed: %s", exc)
    finally:
        writer.close()


@dataclass
class _Open:
    index: Index
    identity: tuple[int, int] | None  # the index file's (device, inode) when it was opened
    embedder: Embedder | None  # the one it was given (None: it makes its own when it embeds)


class IndexCache:
    """The open indexes of a long-running process (the MCP server): one :class:`Index` per
    index file, keeping its model and vectors in memory between calls, and one model per model
    folder and variant. An index file replaced on disk (a copy moved over it, a rebuild) gets a
    new :class:`Index`.
    """

    def __init__(self, monitor: ChangeMonitor | None = None) -> None:
        self._lock = threading.Lock()
        self._embedders: dict[tuple[Path | None, str | None, str], Embedder] = {}
        self._open: dict[Location, _Open] = {}
        self._monitor = monitor or ChangeMonitor()  # shared by the indexes' freshen()

    def get(self, settings: Settings) -> Index:
        """The shared index for ``settings``, using them from now on (settings read again)."""
        with self._lock:
            identity = _identity(settings.store_path)
            embedder = self._embedder(settings)
            found = self._open.get(settings.store_path)
            if found is not None and (found.identity != identity or found.embedder is not embedder):
                found.index.close()
                found = None
            if found is None:
                index = Index(settings, embedder, monitor=self._monitor)
                found = _Open(index, identity, embedder)
                self._open[settings.store_path] = found
            found.index.use_settings(settings)
            return found.index

    def writer(self, settings: Settings) -> Index:
        """A new index for one index run beside the shared one's searches (same model); the
        caller closes it."""
        with self._lock:
            return Index(settings, embedder=self._embedder(settings))

    def _embedder(self, settings: Settings) -> Embedder | None:
        """The shared embedder of the settings' model; None when it cannot be made (a model
        that is not installed, a model folder that is gone): the index then raises why when it
        embeds, and status, listing, grep and cat, which need no model, still answer."""
        key = (settings.model_dir, settings.model, settings.model_variant)
        if key not in self._embedders:
            try:
                self._embedders[key] = make_embedder(settings)
            except ModelError:
                return None
        return self._embedders[key]

    def close(self) -> None:
        """Close every open index and wait for any model load (the server's shutdown)."""
        with self._lock:
            for found in self._open.values():
                found.index.close()
            self._open.clear()
            for embedder in self._embedders.values():
                embedder.close()
            self._monitor.close()


def make_embedder(settings: Settings, one_shot: bool = False) -> OnnxEmbedder:
    """The embedder the settings ask for: a model folder (``modelDir``), an installed model by
    name (``model``; raises ModelError when it is not installed), else the built-in model, which
    hands over to the model an existing index was built with when that one is installed."""
    package = None if settings.model is None else find_model(settings.model)
    return OnnxEmbedder(
        settings.model_dir,
        one_shot=one_shot,
        variant=settings.model_variant,
        package=package,
        follow_index=settings.model is None,
    )


def _identity(path: Location) -> tuple[int, int] | None:
    if not isinstance(path, Path):  # on object storage: no file to be replaced
        return None
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino
