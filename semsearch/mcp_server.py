"""The ``semsearch mcp`` server: six tools over stdio, a thin adapter over the library.

Tools (the original tool's names and parameter names): ``search``, ``gather``, ``list_folders``,
``cat_file``, ``grep`` and ``index``. Every call re-reads the settings, so folders added or removed
with the CLI are seen at once; one :class:`~semsearch.index.Index` per index file keeps the model
and the vectors in memory and reloads only what another process changed.

Caps (each response says when it hit one): ``k`` ≤ 50 and a hit's text ≤ 4,000 characters
(search, gather); ``contextLines`` ≤ 100 and 256 KiB per gather block; 256 KiB of text per
``cat_file`` call; ``maxResults`` ≤ 500 lines of at most 240 characters and a 10 s budget for
``grep``; at most 50 problems per folder in an ``index`` report.

Errors are tool results with ``isError`` and a message saying what to do, never a traceback.
stdout carries only the protocol (the SDK points fd 1 at stderr while it serves); logs go to
stderr.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, ParamSpec

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema
from typing_extensions import NotRequired, TypedDict

from semsearch import __version__
from semsearch.config import Settings, load_settings
from semsearch.embedder import Embedder, OnnxEmbedder
from semsearch.errors import PathRefusedError, SemsearchError, UsageError
from semsearch.files import is_document
from semsearch.grep import GrepOptions, GrepResult, Locator, read_text
from semsearch.grep import grep as grep_files
from semsearch.index import Index, ignore_settings
from semsearch.indexer import FileEvent
from semsearch.search import Hit
from semsearch.store import Folder

logger = logging.getLogger("semsearch.mcp")

MAX_K = 50
HIT_TEXT_CHARS = 4000
MAX_CONTEXT_LINES = 100
TEXT_CAP_BYTES = 256 * 1024
MAX_GREP_RESULTS = 500
GREP_TIMEOUT = 10.0
MAX_PROBLEMS = 50
INDEX_LOCK_WAIT = 10.0
PROGRESS_INTERVAL = 0.25

INSTRUCTIONS = (
    "Local semantic search over the user's configured folders. Call list_folders first to see "
    "what is indexed. Use search or gather to find passages by meaning, grep for exact text, "
    "cat_file to read a file (or a line range) returned by those tools, and index to refresh "
    "the index after files changed."
)


def _whole_number(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("expected a whole number, not true/false")
    return value


def _between(low: int, high: int | None) -> Callable[[int | None], int | None]:
    def check(value: int | None) -> int | None:
        if value is not None and (value < low or (high is not None and value > high)):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise ValueError(f"must be {bound}, got {value}")
        return value

    return check


def _int_schema(low: int, high: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": low}
    return schema if high is None else {**schema, "maximum": high}


# Optional parameters accept an explicit null (some clients send one) but are published as plain
# types: no anyOf/nullable unions, which some clients (e.g. Gemini) reject.
TopK = Annotated[
    int | None,
    BeforeValidator(_whole_number),
    AfterValidator(_between(1, MAX_K)),
    WithJsonSchema(_int_schema(1, MAX_K)),
]
ContextLines = Annotated[
    int | None,
    BeforeValidator(_whole_number),
    AfterValidator(_between(0, MAX_CONTEXT_LINES)),
    WithJsonSchema(_int_schema(0, MAX_CONTEXT_LINES)),
]
LineNumber = Annotated[
    int | None,
    BeforeValidator(_whole_number),
    AfterValidator(_between(1, None)),
    WithJsonSchema(_int_schema(1)),
]
GrepCount = Annotated[
    int | None,
    BeforeValidator(_whole_number),
    AfterValidator(_between(1, MAX_GREP_RESULTS)),
    WithJsonSchema(_int_schema(1, MAX_GREP_RESULTS)),
]
OptionalText = Annotated[str | None, WithJsonSchema({"type": "string"})]
OptionalFlag = Annotated[bool | None, WithJsonSchema({"type": "boolean"})]

Query = Annotated[str, Field(description="What to look for, in natural language")]
FolderParam = Annotated[OptionalText, Field(description="Only this folder (name or path)")]
PathGlob = Annotated[
    OptionalText, Field(description='Only paths matching this glob, e.g. "*.md" or "src/**"')
]
KParam = Annotated[TopK, Field(description="Number of results (default 5)")]


class HitJson(TypedDict):
    """One search result."""

    filePath: Annotated[str, Field(description="Absolute path of the file")]
    folder: Annotated[str, Field(description="Name of the configured folder")]
    relPath: Annotated[str, Field(description="Path relative to the folder")]
    startLine: Annotated[int, Field(description="First line of the chunk (1-based)")]
    endLine: Annotated[int, Field(description="Last line of the chunk (inclusive)")]
    page: NotRequired[Annotated[int, Field(description="PDF page (PDFs only)")]]
    score: Annotated[float, Field(description="Relevance, higher is better (best 1.0)")]
    text: Annotated[str, Field(description="The chunk's text")]


class SearchOutput(TypedDict):
    """The search tool's structured result."""

    results: list[HitJson]
    truncated: Annotated[bool, Field(description="A text was cut at 4,000 characters")]


class FolderJson(TypedDict):
    """A folder: configured, indexed, or both."""

    name: str
    path: str
    exists: Annotated[bool, Field(description="The folder exists on disk")]
    configured: Annotated[bool, Field(description="In the config (false: only in the index)")]
    files: Annotated[int, Field(description="Files indexed")]
    chunks: Annotated[int, Field(description="Chunks indexed")]
    lastIndexed: NotRequired[Annotated[str, Field(description="End of the last full run (UTC)")]]


class FoldersOutput(TypedDict):
    """The list_folders tool's structured result."""

    folders: list[FolderJson]
    indexPath: str
    indexExists: bool
    hint: NotRequired[str]


class IndexOutput(TypedDict):
    """The index tool's structured result (``IndexReport.as_json()``)."""

    filesIndexed: int
    filesUnchanged: int
    filesSkipped: int
    filesDeleted: int
    chunksWritten: int
    errors: int
    truncated: bool
    seconds: float
    folders: list[dict[str, Any]]


P = ParamSpec("P")


def _text(text: str, is_error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=is_error)


def _json(payload: dict[str, Any]) -> CallToolResult:
    text = json.dumps(payload, indent=2, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=payload)


def _failure(name: str, exc: Exception) -> CallToolResult:
    if isinstance(exc, SemsearchError):
        return _text(str(exc), is_error=True)
    logger.exception("tool %s failed", name)
    return _text(
        f"Internal error in {name}: {type(exc).__name__}: {exc}. "
        "The server's stderr log has the details.",
        is_error=True,
    )


def _reported(fn: Callable[P, CallToolResult]) -> Callable[P, CallToolResult]:
    """Turn exceptions into error results (a sync tool)."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> CallToolResult:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            return _failure(fn.__name__, exc)

    return run


class Tools:
    """The tools' implementations and the state they share (model, vectors, settings)."""

    def __init__(self, index_flag: str | None) -> None:
        self._index_flag = index_flag
        self._lock = threading.Lock()
        self._embedders: dict[Path | None, Embedder] = {}
        self._reader: Index | None = None
        self._reader_key: tuple[Any, ...] = ()

    def settings(self) -> Settings:
        """The settings as they are now (the config file is small: read on every call)."""
        return load_settings(os.environ, self._index_flag)

    def _embedder(self, settings: Settings) -> Embedder:
        """The model for the settings, created once (call with the lock held)."""
        if settings.model_dir not in self._embedders:
            self._embedders[settings.model_dir] = OnnxEmbedder(settings.model_dir)
        return self._embedders[settings.model_dir]

    def _index(self, settings: Settings) -> Index:
        """The shared reading Index (call with the lock held); a replaced file gets a new one."""
        key = (settings.index_path, settings.model_dir, _identity(settings.index_path))
        if self._reader is None or key != self._reader_key:
            if self._reader is not None:
                self._reader.close()
            self._reader = Index(settings, embedder=self._embedder(settings))
            self._reader_key = key
        self._reader.settings = settings
        return self._reader

    def _search(
        self, settings: Settings, query: str, k: int | None, folder: str | None, glob: str | None
    ) -> list[Hit]:
        top = k if k is not None else min(settings.top_k, MAX_K)
        with self._lock:
            return self._index(settings).search(
                query, k=top, folder=folder or None, glob=glob or None
            )

    @_reported
    def search(
        self,
        query: Query,
        k: KParam = None,
        folder: FolderParam = None,
        pathGlob: PathGlob = None,
    ) -> Annotated[CallToolResult, SearchOutput]:
        """Search the indexed files by meaning (hybrid: embeddings + BM25 keywords).

        Returns the best chunks with their absolute path, folder, relative path, 1-based
        inclusive line range, PDF page, score and text. Read more of a file with cat_file.
        """
        hits = self._search(self.settings(), query, k, folder, pathGlob)
        results = [_hit_json(hit) for hit in hits]
        cut = any(len(hit.text) > HIT_TEXT_CHARS for hit in hits)
        return _json({"results": results, "truncated": cut})

    @_reported
    def gather(
        self,
        query: Query,
        k: KParam = None,
        contextLines: Annotated[
            ContextLines, Field(description="Extra lines of the file before and after each chunk")
        ] = 0,
        folder: FolderParam = None,
        pathGlob: PathGlob = None,
    ) -> CallToolResult:
        """Search like `search`, formatted as one markdown block to drop into a context window.

        Each result is a header `### [i/n]  folder  ·  path  ·  line N  ·  score S` and the
        text in a fence. contextLines adds lines read from the file around the chunk (not for
        PDF/DOCX, nor when the file changed since it was indexed). At most 256 KiB.
        """
        settings = self.settings()
        hits = self._search(settings, query, k, folder, pathGlob)
        if not hits:
            return _text("No results.")
        locator = Locator(settings.roots, ignore_settings(settings))
        sections = [
            _section(number, len(hits), hit, _context(hit, contextLines or 0, locator))
            for number, hit in enumerate(hits, start=1)
        ]
        return _text(_join_capped(sections))

    @_reported
    def list_folders(self) -> Annotated[CallToolResult, FoldersOutput]:
        """List the configured folders: name, absolute path, whether each exists, files and
        chunks indexed. A good first call to learn what can be searched."""
        settings = self.settings()
        with self._lock:
            indexed = {os.path.realpath(f.path): f for f in self._index(settings).folders()}
        rows: list[dict[str, Any]] = []
        for root in settings.roots:
            folder = indexed.pop(str(_real(root)), None)
            rows.append(_folder_json(root.name, str(root), True, folder))
        for path, only_indexed in indexed.items():
            rows.append(_folder_json(only_indexed.name, path, False, only_indexed))
        payload: dict[str, Any] = {
            "folders": rows,
            "indexPath": str(settings.index_path),
            "indexExists": settings.index_path.exists(),
        }
        if not settings.roots:
            payload["hint"] = "No folders configured: run `semsearch add PATH` in a terminal."
        elif not payload["indexExists"]:
            payload["hint"] = "Nothing indexed yet: call the index tool."
        return _json(payload)

    @_reported
    def cat_file(
        self,
        filePath: Annotated[str, Field(description="Absolute path, as returned by search/grep")],
        startLine: Annotated[
            LineNumber, Field(description="First line (1-based; default 1)")
        ] = None,
        endLine: Annotated[
            LineNumber, Field(description="Last line, inclusive (default: end of file)")
        ] = None,
    ) -> CallToolResult:
        """Read a file inside a configured folder, optionally a line range.

        Files outside the folders, and files the indexer skips (.gitignore, .indexignore,
        binary), are refused. PDF/DOCX give their extracted text, with the line numbers that
        search reports. At most 256 KiB per call: ask for a line range to read the rest.
        """
        if startLine is not None and endLine is not None and startLine > endLine:
            raise UsageError(f"startLine ({startLine}) is after endLine ({endLine}).")
        settings = self.settings()
        ignore = ignore_settings(settings)
        located = Locator(settings.roots, ignore).locate(filePath)
        try:
            text = read_text(located.entry, ignore).text
        except OSError as exc:
            raise PathRefusedError(f"Cannot read {filePath}: {exc.strerror or exc}.") from exc
        lines = _lines(text)
        first, last = startLine or 1, min(endLine or len(lines), len(lines))
        if first > len(lines) and lines:
            raise UsageError(f"startLine {first} is past the end of the file ({len(lines)} lines).")
        body, shown, note = _take_lines(lines, first, last)
        where = f"lines {first}–{shown} of {len(lines)}" if lines else "empty file"
        header = f"# {located.root.name}  ·  {located.entry.rel}  ·  {where}"
        return _text(f"{header}\n\n{body}{note}")

    @_reported
    def grep(
        self,
        pattern: Annotated[str, Field(description="Text to find (a regex when regex is true)")],
        folder: FolderParam = None,
        fileGlob: Annotated[
            OptionalText, Field(description='Only files matching this glob, e.g. "*.py"')
        ] = None,
        caseSensitive: Annotated[OptionalFlag, Field(description="Match case")] = False,
        maxResults: Annotated[GrepCount, Field(description="Stop after this many lines")] = 50,
        regex: Annotated[
            OptionalFlag, Field(description="Treat pattern as a Python regular expression")
        ] = False,
    ) -> CallToolResult:
        """Exact search, line by line, in the files the indexer reads (never ignored or
        binary files). Literal and case-insensitive by default. Returns folder, relative path,
        line number and the line; stops after maxResults lines and a 10 s time budget."""
        settings = self.settings()
        roots = _select_roots(settings, folder)
        options = GrepOptions(
            pattern, bool(regex), bool(caseSensitive), fileGlob or None, maxResults or 50
        )
        result = grep_files(roots, options, ignore_settings(settings), timeout=GREP_TIMEOUT)
        return _grep_report(result, options)

    async def index(
        self,
        ctx: Context,
        root: Annotated[
            OptionalText,
            Field(description="A configured folder (path or name) or a path inside one"),
        ] = None,
        force: Annotated[OptionalFlag, Field(description="Re-read and re-embed all files")] = False,
        maxFiles: Annotated[
            LineNumber, Field(description="Stop after this many new or changed files")
        ] = None,
    ) -> Annotated[CallToolResult, IndexOutput]:
        """Incrementally reindex the configured folders, or the one holding `root`.

        Only configured folders can be indexed (add one with `semsearch add PATH` in a
        terminal). Sends progress notifications; returns the run's summary.
        """
        try:
            settings = self.settings()
            roots = None if not root else [_configured_root(settings, root)]
            with self._lock:
                writer = Index(settings, embedder=self._embedder(settings))
            progress = _Progress(ctx)
            try:
                report = await anyio.to_thread.run_sync(
                    functools.partial(
                        writer.update,
                        roots,
                        force=bool(force),
                        max_files=maxFiles,
                        wait_seconds=INDEX_LOCK_WAIT,
                        on_event=progress,
                    )
                )
            finally:
                writer.close()
            return _json(_trim_report(report.as_json()))
        except Exception as exc:
            return _failure("index", exc)


class _Progress:
    """Forwards index events from the worker thread as throttled progress notifications."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._done_before = 0
        self._folder = ("", -1, 0)  # name, files done, files in total
        self._sent = 0
        self._sent_at = 0.0

    def __call__(self, event: FileEvent) -> None:
        name, last_done, last_total = self._folder
        if event.folder != name or event.done < last_done:  # the next folder started
            self._done_before += last_total
        self._folder = (event.folder, event.done, event.total)
        done = self._done_before + event.done
        now = time.monotonic()
        is_due = now - self._sent_at >= PROGRESS_INTERVAL or event.done == event.total
        if done <= self._sent or not is_due:
            return
        self._sent, self._sent_at = done, now
        message = f"{event.folder}: {event.done}/{event.total} files, {event.chunks} chunks"
        try:
            anyio.from_thread.run(
                self._ctx.report_progress, done, self._done_before + event.total, message
            )
        except Exception:  # a client gone away must not abort the index run
            logger.debug("progress notification not sent", exc_info=True)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _hit_json(hit: Hit) -> dict[str, Any]:
    text = hit.text
    if len(text) > HIT_TEXT_CHARS:
        text = text[:HIT_TEXT_CHARS] + f"\n…[cut at {HIT_TEXT_CHARS:,} characters: use cat_file]"
    row: dict[str, Any] = {
        "filePath": hit.path,
        "folder": hit.folder,
        "relPath": hit.rel,
        "startLine": hit.start_line,
        "endLine": hit.end_line,
        "score": round(hit.score, 6),
        "text": text,
    }
    if hit.page is not None:
        row["page"] = hit.page
    return row


def _folder_json(name: str, path: str, configured: bool, folder: Folder | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": name,
        "path": path,
        "exists": os.path.isdir(path),
        "configured": configured,
        "files": folder.files if folder else 0,
        "chunks": folder.chunks if folder else 0,
    }
    if folder is not None and folder.last_indexed:
        stamp = datetime.fromtimestamp(folder.last_indexed, tz=timezone.utc)
        row["lastIndexed"] = stamp.isoformat(timespec="seconds")
    return row


def _lines(text: str) -> list[str]:
    """The file's lines as search numbers them (split on "\\n" only)."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def _context(hit: Hit, extra: int, locator: Locator) -> tuple[int, str, str]:
    """(first line, text, note) for a gather section: whole lines of the file around the chunk
    when they still hold the chunk, else the stored text."""
    stored = hit.text.removesuffix("\n")
    if extra == 0:
        return hit.start_line, stored, ""
    if hit.page is not None or is_document(hit.rel):
        return hit.start_line, stored, "indexed text (no context for PDF/DOCX)"
    try:
        located = locator.locate(hit.path)
        lines = _lines(read_text(located.entry, locator.ignore).text)
    except (SemsearchError, OSError):
        return hit.start_line, stored, "indexed text (file not readable)"
    if stored not in "\n".join(lines[hit.start_line - 1 : hit.end_line]):
        return hit.start_line, stored, "indexed text (file changed since indexing)"
    first = max(1, hit.start_line - extra)
    last = min(len(lines), hit.end_line + extra)
    return first, "\n".join(lines[first - 1 : last]), ""


def _section(number: int, count: int, hit: Hit, context: tuple[int, str, str]) -> str:
    first, text, note = context
    parts = [hit.folder, hit.rel, f"line {first}"]
    if hit.page is not None:
        parts.append(f"page {hit.page}")
    parts.append(f"score {hit.score:.3f}")
    if note:
        parts.append(note)
    fence = "`" * max(3, _longest_backtick_run(text) + 1)
    return f"### [{number}/{count}]  " + "  ·  ".join(parts) + f"\n{fence}\n{text}\n{fence}"


def _longest_backtick_run(text: str) -> int:
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return longest


def _join_capped(sections: list[str]) -> str:
    shown: list[str] = []
    size = 0
    for section in sections:
        size += len(section.encode()) + 2
        if size > TEXT_CAP_BYTES:
            if not shown:
                shown.append(_cut_bytes(section, TEXT_CAP_BYTES) + "\n…[cut at 256 KiB]")
            shown.append(
                f"({len(shown)} of {len(sections)} results shown: the block is capped at 256 KiB."
                " Lower k or contextLines.)"
            )
            break
        shown.append(section)
    return "\n\n".join(shown)


def _cut_bytes(text: str, limit: int) -> str:
    return text.encode()[:limit].decode("utf-8", "ignore")


def _take_lines(lines: list[str], first: int, last: int) -> tuple[str, int, str]:
    """(text, last line shown, note) for lines first..last within TEXT_CAP_BYTES."""
    size = 0
    shown = first - 1
    for line in lines[first - 1 : last]:
        cost = len(line.encode()) + 1
        if size + cost > TEXT_CAP_BYTES:
            break
        size += cost
        shown += 1
    if shown == last:
        return "\n".join(lines[first - 1 : last]), last, ""
    if shown < first:  # one line longer than the cap
        return (
            _cut_bytes(lines[first - 1], TEXT_CAP_BYTES),
            first,
            f"\n\n[line {first} is longer than 256 KiB and was cut. "
            f"Continue with startLine={first + 1}.]",
        )
    return (
        "\n".join(lines[first - 1 : shown]),
        shown,
        f"\n\n[cat_file returns at most 256 KiB per call: lines {first}–{shown} shown. "
        f"Ask for the rest with startLine={shown + 1}.]",
    )


def _select_roots(settings: Settings, folder: str | None) -> list[Path]:
    if not settings.roots:
        raise UsageError("No folders configured. Add one with `semsearch add PATH` in a terminal.")
    if not folder:
        return list(settings.roots)
    chosen = [
        root
        for root in settings.roots
        if folder in (root.name, str(root))
        or (os.path.isabs(folder) and _real(root) == Path(os.path.realpath(folder)))
    ]
    if not chosen:
        names = ", ".join(root.name for root in settings.roots)
        raise UsageError(
            f"No configured folder named {folder!r}. Configured folders: {names}. "
            "Call list_folders for their paths."
        )
    return chosen


def _grep_report(result: GrepResult, options: GrepOptions) -> CallToolResult:
    lines = [
        f"{m.folder}  ·  {m.rel}:{m.line}{f' (p. {m.page})' if m.page else ''}  {m.text}"
        for m in result.matches
    ]
    lines += [f"warning: {warning}" for warning in result.warnings]
    if result.timed_out:
        found = "\n\nMatches found before it stopped:\n" + "\n".join(lines) if lines else ""
        return _text(
            f"grep stopped after its {GREP_TIMEOUT:.0f} s time budget. A regular expression "
            "with nested repetition such as (a+)+ can take exponential time: simplify the "
            "pattern, or narrow the search with folder or fileGlob." + found,
            is_error=True,
        )
    if not result.matches:
        lines.insert(0, f"No matches in {result.files_searched} files.")
    elif result.truncated:
        lines.append(
            f"(showing first {options.max_results} matches; there are more. Narrow the search "
            f"with folder or fileGlob, or raise maxResults, at most {MAX_GREP_RESULTS}.)"
        )
    return _text("\n".join(lines))


def _configured_root(settings: Settings, raw: str) -> Path:
    """The configured folder to index for ``root``: itself, or the innermost one holding it."""
    named = [root for root in settings.roots if root.name == raw]
    if os.sep not in raw and len(named) == 1:
        return named[0]
    real = os.path.realpath(os.path.expanduser(raw))
    owners = [
        root
        for root in settings.roots
        if real == str(_real(root)) or real.startswith(str(_real(root)).rstrip(os.sep) + os.sep)
    ]
    if not os.path.isabs(os.path.expanduser(raw)) or not owners:
        raise PathRefusedError(
            f"Refused: {raw} is not a configured folder or inside one; the index tool only "
            f"updates configured folders. To add it, run `semsearch add {raw}` in a terminal."
        )
    return max(owners, key=lambda root: len(str(_real(root))))


def _trim_report(report: dict[str, Any]) -> dict[str, Any]:
    for folder in report.get("folders", []):
        problems = folder.get("problems", [])
        if len(problems) > MAX_PROBLEMS:
            folder["problems"] = problems[:MAX_PROBLEMS]
            folder["problemsOmitted"] = len(problems) - MAX_PROBLEMS
    return report


def _plain(schema: Any) -> Any:
    """The schema with ``$ref``s inlined, without titles and null defaults."""
    defs = schema.get("$defs", {}) if isinstance(schema, dict) else {}

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return walk(defs[node["$ref"].rsplit("/", 1)[-1]])
        return {
            key: walk(value)
            for key, value in node.items()
            if key not in ("$defs", "title") and not (key == "default" and value is None)
        }

    return walk(schema)


TOOLS: tuple[tuple[str, str, bool], ...] = (
    ("search", "Semantic file search", True),
    ("gather", "Semantic search → formatted context block", True),
    ("list_folders", "List indexed folders", True),
    ("cat_file", "Read file content", True),
    ("grep", "Exact text search across folders", True),
    ("index", "Reindex folders", False),
)


def build_server(index_flag: str | None) -> MCPServer:
    """The MCP server with the six tools (names, titles and annotations in :data:`TOOLS`)."""
    tools = Tools(index_flag)
    registered: list[Tool] = []
    for name, title, read_only in TOOLS:
        hints = ToolAnnotations(
            title=title,
            read_only_hint=read_only,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        )
        fn = getattr(tools, name)
        tool = Tool.from_function(
            fn,
            name=name,
            title=title,
            description=inspect.cleandoc(fn.__doc__ or ""),
            annotations=hints,
        )
        tool.parameters = _plain(tool.parameters)
        if tool.fn_metadata.output_schema is not None:
            tool.fn_metadata.output_schema = _plain(tool.fn_metadata.output_schema)
        registered.append(tool)
    return MCPServer(
        "semsearch",
        version=__version__,
        instructions=INSTRUCTIONS,
        tools=registered,
        log_level="WARNING",
    )


def serve(index_flag: str | None) -> None:
    """Serve the tools over stdio until the client closes stdin."""
    build_server(index_flag).run("stdio")
