"""Incremental indexing in two passes: list → read → extract → chunk → write, then embed.

The first pass (:meth:`Indexer.index_folder`) makes every file it reads searchable by the
lexical arms: a file whose mtime and size are unchanged is skipped without being read, a changed
mtime with the same sha256 only updates the stored mtime, and otherwise the file's row and chunks
(text, FTS terms, definitions) are replaced in one transaction, written every ``FLUSH_CHUNKS``
chunks. Chunks whose text is stored already (anywhere in the index) take that chunk's vector;
the rest are left without one. Files that became empty, binary, too large or unreadable lose
their chunks; files gone from disk are pruned.

The second pass (:meth:`Indexer.embed_pending`) reads the texts of chunks still without a vector
back from the store (of the folders the run indexes), ``EMBED_BATCH`` distinct texts at a time,
embeds each once and stores the vector on every chunk of that text, then embeds the rel path of
each file that has no path vector yet (``Store.pending_paths``). What a killed run left pending
is found by the store, so the next run embeds only that. Memory stays bounded by one batch of
texts in either pass.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from semsearch.config import DEFAULT_MAX_FILE_SIZE, DOCUMENT_OVERLAP_TOKENS, DOCUMENT_TARGET_TOKENS
from semsearch.errors import ExtractError
from semsearch.files.access import read_failure, read_file_bytes
from semsearch.files.extract import Extracted, extract, page_at
from semsearch.files.filetype import is_binary_content, is_prose
from semsearch.files.ignore import IgnoreSettings
from semsearch.files.listing import FileEntry, Listing, head_commit, list_files
from semsearch.model.embedder import Embedder
from semsearch.store import ChunkRecord, FileState, FileWrite, Store, text_hash
from semsearch.text.chunking import ChunkSettings, chunk_text
from semsearch.text.lexical import name_text

FLUSH_CHUNKS = 256  # chunks per first-pass write
# Files read, then tokenised in one call, at a time in the first pass (the tokenizer spreads a
# call's texts over the cores); bounded by bytes too, as token spans take ~28 bytes a character.
TOKENISE_FILES = 32
TOKENISE_BYTES = 1 << 20
EMBED_BATCH = 384  # distinct texts per second-pass embedding call (their encodings take RSS)
# A code file longer than this many characters is chunked without overlap (0: never). Issue 38
# item 5, measured in bench/RESULTS.md.
LARGE_FILE_CHARS = 0

Action = Literal[
    "indexed", "unchanged", "touched", "skipped", "error", "deleted", "embedding", "embedded"
]

# Why a file unchanged since the run that skipped it is skipped again (by its stored status).
STORED_SKIP_REASONS = {
    "binary": "binary: binary content",
    "empty": "empty: no text",
    "too_large": "too_large: more text than maxFileSizeBytes",
}


def text_of(rel: str, data: bytes, max_text_size: int) -> tuple[Extracted | None, str, str]:
    """(text, status, reason) of a file's bytes as an index run takes them: ``ok`` with the
    extracted text, else ``binary``, ``error`` (extraction failed) or ``too_large``, with the
    reason. The dry-run plan (:mod:`.plan`) asks the same function, so both agree."""
    if is_binary_content(rel, data):
        return None, "binary", "binary content"
    try:
        extracted = extract(rel, data)
    except ExtractError as exc:
        return None, "error", str(exc)
    if len(extracted.text) > max_text_size:
        return None, "too_large", f"{len(extracted.text):,} characters of text"
    return extracted, "ok", ""


@dataclass(frozen=True)
class Problem:
    """A file or folder that could not be indexed, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class FileEvent:
    """Progress of an index run, in two passes.

    The first pass sends one event per path of a folder's listing, once its outcome is final
    (``indexed`` when its chunks are written, ``unchanged``, ``touched``, ``skipped`` or
    ``error``): ``done`` of ``total`` paths, so the last event of a folder has ``done ==
    total`` = its files + skipped + errors of the summary; ``chunks`` written in the folder so
    far. ``deleted`` events (files gone from disk) are not among them.

    The second pass (folder ``vectors``, see :meth:`Indexer.embed_pending`) starts with one
    ``embedding`` event whose ``total`` is what the run will embed: the chunks waiting for a
    vector and the file paths waiting for theirs; each batch then sends ``embedded`` with
    ``done`` of them made and ``chunks`` the chunks among them.
    """

    folder: str
    rel: str
    action: Action
    done: int
    total: int
    chunks: int
    detail: str = ""


@dataclass(frozen=True)
class FolderReport:
    """What one folder's index run did."""

    path: str
    name: str
    mode: str
    indexed: int = 0
    unchanged: int = 0
    skipped: int = 0
    deleted: int = 0
    chunks: int = 0
    processed: int = 0  # files read this run (what max_files counts)
    truncated: bool = False
    failed: bool = False
    seconds: float = 0.0
    problems: tuple[Problem, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def files(self) -> int:
        """Files searchable after the run: indexed now or unchanged (skipped files not counted)."""
        return self.indexed + self.unchanged


@dataclass
class _Run:
    """Mutable counters of a folder run."""

    folder_id: int
    listing: Listing
    states: dict[str, FileState]
    indexed: int = 0
    unchanged: int = 0
    skipped: int = 0
    chunks: int = 0
    done: int = 0  # paths of the listing whose outcome is final (see FileEvent)
    processed: int = 0
    problems: list[Problem] = field(default_factory=list)
    pending: list[FileWrite] = field(default_factory=list)
    pending_chunks: int = 0
    touches: list[tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True)
class _File:
    """A file the first pass has read and extracted, waiting for its chunks: a stored copy's
    (``records``), else made by chunking it (``previous``: its chunk texts before an edit)."""

    entry: FileEntry
    digest: str
    extracted: Extracted
    records: tuple[ChunkRecord, ...]
    previous: list[str]

    @functools.cached_property
    def pages(self) -> list[tuple[int, int]]:
        """(start, end) of each page of the text with more than white space (the whole text
        when it has no pages): what is tokenised and chunked."""
        text, pages = self.extracted.text, self.extracted.pages
        bounds = itertools.pairwise([*pages, len(text)]) if pages else [(0, len(text))]
        return [(start, end) for start, end in bounds if text[start:end].strip()]


class _Spans:
    """A tokenizer answering with spans found before (of many texts at once), for the one text
    they belong to (``chunk_text`` asks once)."""

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        self._spans = spans

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        return self._spans


@dataclass(frozen=True)
class IndexerSettings:
    """Knobs of the indexer."""

    ignore: IgnoreSettings = field(default_factory=IgnoreSettings)
    # code is chunked in whole lines, so that no hit starts inside a line
    chunking: ChunkSettings = field(default_factory=lambda: ChunkSettings(whole_lines=True))
    # documents (filetype.is_prose) are chunked with these: their own size, less overlap, and
    # an overlap that may start inside a paragraph's line
    document_chunking: ChunkSettings = field(
        default_factory=lambda: ChunkSettings(DOCUMENT_TARGET_TOKENS, DOCUMENT_OVERLAP_TOKENS)
    )
    max_text_size: int = DEFAULT_MAX_FILE_SIZE


class Indexer:
    """Indexes folders into a store with an embedder."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        settings: IndexerSettings,
        on_event: Callable[[FileEvent], None] | None = None,
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._settings = settings
        self._on_event = on_event or (lambda event: None)
        self._reuse = True
        self._probe: tuple[str, np.ndarray[Any, Any]] | None = None  # text hash, its vector
        self._has_model = False  # the store has recorded this embedder's model
        self.embedded = 0  # chunk texts embedded by this indexer (rel paths not counted)
        self.paths_embedded = 0  # rel paths of code files embedded (the path term's vectors)
        self.files_copied = 0  # files that took a stored copy's chunks (see _copied)

    def embed_pending(self, folder_ids: Sequence[int] | None = None) -> int:
        """The second pass: embed the chunks that have no vector (of ``folder_ids``, else of
        the whole index) and then the paths of their files; returns texts embedded.

        Events (folder ``vectors``, see :class:`FileEvent`): ``embedding`` with what the pass
        will make, chunk vectors and path vectors; then one ``embedded`` per batch, ``done`` of
        ``total``. A text that several chunks share is embedded once and counts for each."""
        waiting = self._store.pending_count(folder_ids)
        # all of them for a count: a (file id, rel) per file, as file_states holds per folder
        paths = len(self._store.pending_paths(sys.maxsize, folder_ids))
        total = waiting + paths
        self._on_event(FileEvent("vectors", "", "embedding", 0, total, 0))
        embedded = chunks = 0
        while batch := self._store.pending_texts(EMBED_BATCH, folder_ids):
            hashes, texts = zip(*batch, strict=True)
            vectors = self._embedder.embed(texts)
            self._store.set_model(self._embedder.model_id, int(vectors.shape[1]))
            if not self._store.set_vectors(hashes, vectors):
                break  # nothing took them (cannot happen with a consistent store): stop
            embedded += len(texts)
            self.embedded += len(texts)
            pending = self._store.pending_count(folder_ids)
            chunks = max(waiting - pending, 0)
            detail = f"{pending} chunks waiting for vectors"
            self._on_event(
                FileEvent(
                    "vectors", f"{chunks} of {total}", "embedded", chunks, total, chunks, detail
                )
            )
        self._embed_paths(folder_ids, chunks, total)
        return embedded

    def _embed_paths(self, folder_ids: Sequence[int] | None, done: int, total: int) -> None:
        """Embed the rel paths of files that have no path vector (the ranking's path term):
        one short text per new or moved code file. Documents get a zero vector without the
        model: search gives them no path term (``filetype.is_prose``). ``done`` of ``total``:
        the second pass's count before the paths, for the ``embedded`` events."""
        chunks = done
        while batch := self._store.pending_paths(EMBED_BATCH, folder_ids):
            file_ids, rels = zip(*batch, strict=True)
            code = [at for at, rel in enumerate(rels) if not is_prose(rel)]
            # the same rel in several folders (copies of a tree) is one text for the model
            texts = list(dict.fromkeys(name_text(rels[at]) for at in code))
            embedded = None
            if code:
                distinct = self._embedder.embed(texts)
                self._store.set_model(self._embedder.model_id, int(distinct.shape[1]))
                self.paths_embedded += len(texts)
                row_of = {text: row for row, text in enumerate(texts)}
                embedded = distinct[[row_of[name_text(rels[at])] for at in code]]
            stored = self._store.model()
            if stored is None:
                break  # documents only, and no model recorded to size their zero vectors
            vectors = np.zeros((len(rels), stored[1]), dtype=np.float32)
            if embedded is not None:
                vectors[code] = embedded
            self._store.set_path_vectors(file_ids, vectors)
            if self._store.pending_paths(1, folder_ids)[:1] == batch[:1]:
                break  # nothing took them (cannot happen with a consistent store): stop
            done += len(batch)
            detail = f"{len(batch)} file paths"
            self._on_event(
                FileEvent("vectors", f"{done} of {total}", "embedded", done, total, chunks, detail)
            )

    def _ensure_model(self, text: str) -> None:
        """Record the model before the first chunks are written: LanceDB's schema holds the
        dimension, and a run stopped before its second pass (Ctrl-C, a full disk) must resume
        with the model it began with, not with whatever the next run would pick for an index
        that names none (`index --model X` stopped, then a plain `index`: the default). One
        chunk is embedded to learn the dimension, and keeps its vector."""
        if self._has_model:
            return
        stored = self._store.model()
        if stored is None or stored[0] != self._embedder.model_id:
            vector = self._embedder.embed([text])
            self.embedded += 1
            self._store.set_model(self._embedder.model_id, int(vector.shape[1]))
            self._probe = (text_hash(text), vector)
        self._has_model = True

    def index_folder(
        self, root: Path, *, force: bool = False, max_files: int | None = None
    ) -> FolderReport:
        """Bring the index in line with one folder; ``max_files`` caps files (re)processed."""
        started = time.monotonic()
        listing = list_files(root, self._settings.ignore)
        name = root.name or str(root)
        if any(problem.rel == "." for problem in listing.errors):
            reasons = "; ".join(p.reason for p in listing.errors if p.rel == ".")
            return FolderReport(
                str(root),
                name,
                listing.mode,
                failed=True,
                problems=(Problem(str(root), reasons),),
                seconds=_since(started),
            )
        self._reuse = not force  # --force recomputes every vector it writes
        folder_id = self._store.ensure_folder(str(root), name)
        run = _Run(folder_id, listing, self._store.file_states(folder_id))
        run.problems.extend(Problem(str(root / p.rel), p.reason) for p in listing.errors)
        for skip in listing.skipped:
            run.skipped += 1
            self._emit(name, skip.rel, "skipped", run, skip.reason)
        for error in listing.errors:
            self._emit(name, error.rel, "error", run, error.reason)
        truncated = self._process(run, name, force, max_files)
        self._flush(run, name)
        deleted = self._prune(run, name)
        if not truncated:
            commit = head_commit(listing.root) if listing.mode == "git" else None
            self._store.mark_indexed(run.folder_id, commit)
        return FolderReport(
            path=str(root),
            name=name,
            mode=listing.mode,
            indexed=run.indexed,
            unchanged=run.unchanged,
            processed=run.processed,
            skipped=run.skipped,
            deleted=deleted,
            chunks=run.chunks,
            truncated=truncated,
            seconds=_since(started),
            problems=tuple(run.problems),
            warnings=listing.warnings,
        )

    def _process(self, run: _Run, name: str, force: bool, max_files: int | None) -> bool:
        window: list[tuple[FileEntry, FileState | None]] = []  # files to read, tokenised at once
        held = 0  # their bytes
        for entry in run.listing.files:
            state = run.states.get(entry.rel)
            if not force and state is not None and _is_fresh(state, entry):
                if state.status == "ok":
                    run.unchanged += 1
                    self._emit(name, entry.rel, "unchanged", run)
                else:  # still empty, binary or too large: counted as skipped again
                    run.skipped += 1
                    reason = STORED_SKIP_REASONS.get(state.status, state.status)
                    self._emit(name, entry.rel, "skipped", run, reason)
                continue
            if max_files is not None and run.processed >= max_files:
                self._prepare(run, window, force, name)
                return True
            run.processed += 1
            window.append((entry, state))
            held += entry.size
            if len(window) >= TOKENISE_FILES or held >= TOKENISE_BYTES:
                self._prepare(run, window, force, name)
                window, held = [], 0
        self._prepare(run, window, force, name)
        return False

    def _prepare(
        self,
        run: _Run,
        window: Sequence[tuple[FileEntry, FileState | None]],
        force: bool,
        name: str,
    ) -> None:
        """Read the files, tokenise those to chunk in one call, and add their chunks."""
        files = [self._read(run, entry, state, force, name) for entry, state in window]
        read = [file for file in files if file is not None]
        chunked = [file for file in read if not file.records]
        texts = [file.extracted.text[a:b] for file in chunked for a, b in file.pages]
        spans = iter(self._embedder.token_spans_many(texts))
        for file in read:
            records = file.records
            if not records:
                records = self._records(file, [next(spans) for _ in file.pages])
            self._add(run, file.entry, file.digest, file.extracted, name, records)
            if run.pending_chunks >= FLUSH_CHUNKS:
                self._flush(run, name)

    def _read(
        self, run: _Run, entry: FileEntry, state: FileState | None, force: bool, name: str
    ) -> _File | None:
        """The file read and extracted, with a stored copy's chunks when one has its bytes;
        None when it yields no chunks to write (an error, no text, or unchanged bytes)."""
        try:
            data = read_file_bytes(entry, self._settings.ignore)
        except OSError as exc:
            self._record(run, entry, "error", None, read_failure(exc), name)
            return None
        except ExtractError as exc:
            self._record(run, entry, "error", None, str(exc), name)
            return None
        digest = hashlib.sha256(data).hexdigest()
        if not force and state is not None and state.sha256 == digest and state.status == "ok":
            run.touches.append((state.id, entry.mtime_ns))
            run.unchanged += 1
            self._emit(name, entry.rel, "touched", run)
            return None
        extracted, status, reason = text_of(entry.rel, data, self._settings.max_text_size)
        if extracted is None:
            self._record(run, entry, status, digest, reason, name)
            return None
        records = () if force else self._copied(entry, digest, extracted)
        # An edited file is chunked to keep its old chunks where the text is unchanged, so only
        # the chunks an edit touches are embedded again; --force chunks it afresh.
        previous = []
        if not records and state is not None and state.status == "ok" and not force:
            previous = self._store.chunk_texts(state.id)
        return _File(entry, digest, extracted, records, previous)

    def _copied(
        self, entry: FileEntry, digest: str, extracted: Extracted
    ) -> tuple[ChunkRecord, ...]:
        """The chunks of a stored file with the same bytes and name (the same file in another
        checkout, folder or vendored copy), when they still slice this text where they say:
        tokenising and chunking took over half of a first pass over a tree of copies
        (bench/RESULTS.md, session 27). () when there is none."""
        records = self._store.copied_chunks(digest, entry.rel.rsplit("/", 1)[-1])
        text, pages = extracted.text, extracted.pages
        for record in records:
            start, end = record.start_offset, record.end_offset
            if text[start:end] != record.text or page_at(pages, start) != record.page:
                return ()  # extracted otherwise now (a newer extractor): chunk it afresh
        if records:
            self.files_copied += 1
        return records

    def _add(
        self,
        run: _Run,
        entry: FileEntry,
        digest: str,
        extracted: Extracted,
        name: str,
        records: tuple[ChunkRecord, ...],
    ) -> None:
        if not records:
            self._record(run, entry, "empty", digest, "no text", name)
            return
        write = FileWrite(
            run.folder_id,
            entry.rel,
            entry.mtime_ns,
            entry.size,
            digest,
            "ok",
            extracted.kind,
            records,
        )
        run.pending.append(write)
        run.pending_chunks += len(records)

    def _records(self, file: _File, spans: list[list[tuple[int, int]]]) -> tuple[ChunkRecord, ...]:
        """Chunk the text; a paged document is chunked page by page so each chunk has one page.
        ``spans``: the token spans of each of the file's pages (:attr:`_File.pages`). The
        file's previous chunk texts steer the chunk ends (see ``chunking.chunk_text``); a
        document (``filetype.is_prose``) is chunked with ``document_chunking``."""
        rel, extracted = file.entry.rel, file.extracted
        settings = self._settings.document_chunking if is_prose(rel) else self._settings.chunking
        text = extracted.text
        if LARGE_FILE_CHARS and not is_prose(rel) and len(text) > LARGE_FILE_CHARS:
            settings = replace(settings, overlap_tokens=0)
        records: list[ChunkRecord] = []
        for (start, end), page_spans in zip(file.pages, spans, strict=True):
            line_shift = text.count("\n", 0, start)
            chunks = chunk_text(text[start:end], _Spans(page_spans), settings, file.previous)
            for c in chunks:
                records.append(
                    ChunkRecord(
                        c.start_line + line_shift,
                        c.end_line + line_shift,
                        c.start_offset + start,
                        c.end_offset + start,
                        page_at(extracted.pages, c.start_offset + start),
                        c.text,
                    )
                )
        return tuple(records)

    def _record(
        self, run: _Run, entry: FileEntry, status: str, digest: str | None, reason: str, name: str
    ) -> None:
        """Remember a file that yields no chunks (its old chunks go)."""
        write = FileWrite(run.folder_id, entry.rel, entry.mtime_ns, entry.size, digest, status, "")
        run.pending.append(write)
        if status == "error":
            run.problems.append(Problem(str(entry.path), reason))
        else:
            run.skipped += 1
        action: Action = "error" if status == "error" else "skipped"
        self._emit(name, entry.rel, action, run, f"{status}: {reason}")

    def _flush(self, run: _Run, name: str) -> None:
        if run.touches:
            self._store.touch_files(run.touches)
            run.touches.clear()
        if not run.pending:
            return
        writes = run.pending
        first = next((w.chunks[0].text for w in writes if w.chunks), None)
        if first is not None:
            self._ensure_model(first)
        self._store.write_files(writes, reuse=self._reuse)
        if self._probe is not None:
            self._store.set_vectors([self._probe[0]], self._probe[1])
            self._probe = None
        for write in writes:
            if write.chunks:
                run.indexed += 1
                run.chunks += len(write.chunks)
                self._emit(name, write.rel, "indexed", run, f"{len(write.chunks)} chunks")
        run.pending = []
        run.pending_chunks = 0

    def _prune(self, run: _Run, name: str) -> int:
        """Delete the files gone from the folder; those in a folder that could not be read, or
        that failed to be listed, are not known to be gone and keep their chunks."""
        listing = run.listing
        kept = {entry.rel for entry in listing.files} | {p.rel for p in listing.errors}
        gone = [rel for rel in run.states if rel not in kept and not listing.is_unreadable(rel)]
        for rel in gone:
            self._emit(name, rel, "deleted", run)
        return self._store.delete_files(run.folder_id, gone)

    def _emit(self, name: str, rel: str, action: Action, run: _Run, detail: str = "") -> None:
        if action != "deleted":  # a path of the listing is settled
            run.done += 1
        listing = run.listing
        total = len(listing.files) + len(listing.skipped) + len(listing.errors)
        self._on_event(FileEvent(name, rel, action, run.done, total, run.chunks, detail))


def _is_fresh(state: FileState | None, entry: FileEntry) -> bool:
    return (
        state is not None
        and state.status != "error"
        and state.mtime_ns == entry.mtime_ns
        and state.size == entry.size
    )


def _since(started: float) -> float:
    return round(time.monotonic() - started, 3)
