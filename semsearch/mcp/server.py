"""The ``semsearch mcp`` server: six tools over stdio (and over HTTP, :mod:`.http`), a thin
adapter over the library; and the index's status as a resource (``semsearch://status``).

Tools (the original tool's names and parameter names): ``search``, ``gather``, ``list_folders``,
``cat_file``, ``grep`` and ``index``. Every call re-reads the settings, so folders added or removed
with the CLI are seen at once; one :class:`~semsearch.index.Index` per index file keeps the model
and the vectors in memory and reloads only what another process changed.

Caps (each response says when it hit one): ``k`` ≤ 50 and a hit's text ≤ 4,000 characters
(search, gather); ``contextLines`` ≤ 100 and 256 KiB per gather block; 256 KiB of text per
``cat_file`` call; ``maxResults`` ≤ 500 lines of at most 240 characters and a 10 s budget for
``grep``; at most 50 problems per folder in an ``index`` report.

gather and cat_file are :func:`~semsearch.search.passage.gather` and
:func:`~semsearch.search.passage.read_lines`; :mod:`.schema` holds the parameter types and
result shapes. Every tool returns structured content, with an output schema, besides its text.
Errors are tool results with ``isError`` and a message saying what to do, never a traceback; bad
arguments get one plain sentence each (:mod:`semsearch.mcp.args`). stdout carries only the
protocol (the SDK points fd 1 at stderr while it serves); logs go to stderr.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any, ParamSpec

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.mcpserver.resources import FunctionResource
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from semsearch import __version__
from semsearch.config import Mode, Settings, load_settings
from semsearch.errors import SemsearchError
from semsearch.files.changes import ChangeMonitor
from semsearch.files.grep import DEFAULT_TIMEOUT, GrepOptions, GrepResult
from semsearch.index import Index, IndexCache
from semsearch.mcp.args import ArgumentCheck
from semsearch.mcp.progress import IndexProgress
from semsearch.mcp.schema import (
    HIT_TEXT_CHARS,
    MAX_GREP_RESULTS,
    MAX_K,
    AllCopies,
    ContextLines,
    ExcludeParam,
    FolderParam,
    FoldersOutput,
    GatherOutput,
    GrepCount,
    GrepOutput,
    IndexOutput,
    KParam,
    LineNumber,
    LinesOutput,
    MinScore,
    ModeParam,
    OptionalFlag,
    OptionalText,
    PathGlob,
    Query,
    SearchOutput,
    folder_json,
    gather_json,
    grep_json,
    hit_json,
    lines_json,
    plain_schema,
    readable,
    trim_report,
)
from semsearch.search.hits import Hit
from semsearch.service import STATUS_URI

logger = logging.getLogger("semsearch.mcp")
INDEXING_NOTE = "_Indexing is under way: results may miss the latest changes._\n\n"
PENDING_NOTE = "_{count} not embedded yet: found by words only until an index run embeds them._\n\n"

INDEX_LOCK_WAIT = 10.0

INSTRUCTIONS = (
    "Local semantic search over the user's configured folders. Call list_folders first to see "
    "what is indexed. Use search or gather to find passages by meaning, grep for exact text, "
    "cat_file to read a file (or a line range) returned by those tools, and index to refresh "
    "the index after files changed."
)


P = ParamSpec("P")


def _text(text: str, is_error: bool = False) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=readable(text))], is_error=is_error
    )


def _json(payload: dict[str, Any]) -> CallToolResult:
    shown = readable(payload)  # before json.dumps, so that the text is valid JSON too
    return _structured(json.dumps(shown, indent=2, ensure_ascii=False), shown)


def _structured(text: str, payload: dict[str, Any]) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=readable(text))],
        structured_content=readable(payload),
    )


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


@dataclass(frozen=True)
class Scope:
    """What search and gather filter and rank by, besides the query and k."""

    folder: str | None
    globs: list[str] | None
    exclude: list[str] | None
    mode: Mode | None
    min_score: float | None
    all_copies: bool = False


class Tools:
    """The tools' implementations; the open index they share lives in an :class:`IndexCache`."""

    def __init__(
        self,
        index_flag: str | None,
        changes: ChangeMonitor | None = None,
        warned: Iterable[str] = (),
    ) -> None:
        self._index_flag = index_flag
        self._indexes = IndexCache(changes)
        # config warnings shown already (``warned``: by the CLI, at start); settings are re-read
        self._warned = set(warned)

    def close(self) -> None:
        """Close the open indexes and wait for any model load (the server's shutdown)."""
        self._indexes.close()

    def settings(self) -> Settings:
        """The settings as they are now (the config file is small: read on every call); each
        config warning is logged once."""
        settings = load_settings(os.environ, self._index_flag)
        for warning in settings.warnings:
            if warning not in self._warned:
                self._warned.add(warning)
                logger.warning("%s", warning)
        return settings

    def _fresh(self, settings: Settings) -> tuple[Index, bool]:
        """The shared index, brought up to date first when ``mcpAutoIndex`` is on; and whether
        an index run is still under way."""
        index = self._indexes.get(settings)
        return index, settings.auto_index and index.freshen()

    def _search(self, index: Index, query: str, k: int | None, scope: Scope) -> list[Hit]:
        top = k if k is not None else min(index.settings.top_k, MAX_K)
        return index.search(
            query,
            k=top,
            folder=scope.folder or None,
            glob=scope.globs,
            exclude=scope.exclude,
            mode=scope.mode,
            min_score=scope.min_score,
            all_copies=scope.all_copies,
        )

    @_reported
    def search(
        self,
        query: Query,
        k: KParam = None,
        folder: FolderParam = None,
        pathGlob: PathGlob = None,
        exclude: ExcludeParam = None,
        mode: ModeParam = None,
        minScore: MinScore = None,
        allCopies: AllCopies = False,
    ) -> Annotated[CallToolResult, SearchOutput]:
        """Search the indexed files by meaning (hybrid: embeddings + BM25 keywords; mode picks
        one of them alone).

        Returns the best chunks with their absolute path, folder, relative path, 1-based
        inclusive line range, PDF page, score and text. Read more of a file with cat_file.
        chunksPending counts chunks not embedded yet, found by words only until then.
        pathGlob and exclude scope it to some paths (gitignore-style globs relative to the
        folder); filters that match no indexed path are an error saying so. The same text in
        several files (copies, checkouts at several revisions) is one result listing the other
        places in copies; allCopies lists each as its own result.
        """
        index, indexing = self._fresh(self.settings())
        scope = Scope(folder, pathGlob, exclude, mode, minScore, bool(allCopies))
        hits = self._search(index, query, k, scope)
        results = [hit_json(hit) for hit in hits]
        cut = any(len(hit.text) > HIT_TEXT_CHARS for hit in hits)
        pending = index.pending_vectors(folder or None)
        return _json(
            {"results": results, "truncated": cut, "indexing": indexing, "chunksPending": pending}
        )

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
        exclude: ExcludeParam = None,
        mode: ModeParam = None,
        minScore: MinScore = None,
        allCopies: AllCopies = False,
    ) -> Annotated[CallToolResult, GatherOutput]:
        """Search like `search`, formatted as one markdown block to drop into a context window.

        Each result is a header `### [i/n]  folder  ·  path  ·  line N  ·  score S` and the
        text in a fence. contextLines adds lines read from the file around the chunk (not for
        PDF/DOCX, nor when the file changed since it was indexed). At most 256 KiB. The
        structured content has the same results: each hit and the passage shown for it.
        """
        index, indexing = self._fresh(self.settings())
        scope = Scope(folder, pathGlob, exclude, mode, minScore, bool(allCopies))
        hits = self._search(index, query, k, scope)
        gathered = index.gather(hits, contextLines or 0)
        pending = index.pending_vectors(folder or None)
        payload = {**gather_json(gathered), "indexing": indexing, "chunksPending": pending}
        notes = INDEXING_NOTE if indexing else ""
        if pending:
            chunks = "1 chunk" if pending == 1 else f"{pending:,} chunks"
            notes += PENDING_NOTE.format(count=chunks)
        return _structured(notes + gathered.text, payload)

    @_reported
    def list_folders(self) -> Annotated[CallToolResult, FoldersOutput]:
        """List the configured folders: name, absolute path, whether each exists, files and
        chunks indexed. A good first call to learn what can be searched."""
        settings = self.settings()
        index = self._indexes.get(settings)
        rows = [folder_json(folder) for folder in index.folders()]
        payload: dict[str, Any] = {
            "folders": rows,
            "indexPath": str(settings.store_path),
            "indexExists": index.generation() is not None,
        }
        if not settings.roots and not settings.is_remote:  # a remote index brings its folders
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
    ) -> Annotated[CallToolResult, LinesOutput]:
        """Read a file inside a configured folder, optionally a line range.

        Files outside the folders, and files the indexer skips (.gitignore, .indexignore,
        binary), are refused. PDF/DOCX give their extracted text, with the line numbers that
        search reports. At most 256 KiB per call: ask for a line range to read the rest.
        """
        lines = self._indexes.get(self.settings()).read_lines(filePath, startLine, endLine)
        return _structured(lines.as_text(), lines_json(lines))

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
    ) -> Annotated[CallToolResult, GrepOutput]:
        """Exact search, line by line, in the files the indexer reads (never ignored or
        binary files). Literal and case-insensitive by default. Returns folder, relative path,
        line number and the line; stops after maxResults lines and a 10 s time budget."""
        options = GrepOptions(
            pattern, bool(regex), bool(caseSensitive), fileGlob or None, maxResults or 50
        )
        result = self._indexes.get(self.settings()).grep(options, folder, DEFAULT_TIMEOUT)
        return _grep_report(result, options)

    def status(self) -> str:
        """The index file, its model and size, then every configured or indexed folder with its
        files, skipped files, errors, chunks, last run and files changed since (JSON, the same
        as `semsearch status --json`)."""
        try:
            status = self._indexes.get(self.settings()).status()
        except SemsearchError as exc:
            raise ResourceError(str(exc)) from exc
        return json.dumps(readable(status.as_json()), indent=2, ensure_ascii=False)

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
            writer = self._indexes.writer(self.settings())
            try:
                roots = None if not root else [writer.holding_folder(root)]
                progress = IndexProgress(ctx)
                report = await anyio.to_thread.run_sync(
                    functools.partial(
                        writer.update,
                        roots,
                        force=bool(force),
                        max_files=maxFiles,
                        wait_seconds=INDEX_LOCK_WAIT,
                        on_event=progress,
                        on_wait=progress.waiting,
                    )
                )
            finally:
                writer.close()
            return _json(trim_report(report.as_json()))
        except Exception as exc:
            return _failure("index", exc)


def _grep_report(result: GrepResult, options: GrepOptions) -> CallToolResult:
    lines = [
        f"{m.folder}  ·  {m.rel}:{m.line}{f' (p. {m.page})' if m.page else ''}  {m.text}"
        for m in result.matches
    ]
    lines += [f"warning: {warning}" for warning in result.warnings]
    if result.timed_out:
        found = "\n\nMatches found before it stopped:\n" + "\n".join(lines) if lines else ""
        return _text(
            f"grep stopped after its {DEFAULT_TIMEOUT:.0f} s time budget. A regular expression "
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
    return _structured("\n".join(lines), grep_json(result))


TOOLS: tuple[tuple[str, str, bool], ...] = (
    ("search", "Semantic file search", True),
    ("gather", "Semantic search → formatted context block", True),
    ("list_folders", "List indexed folders", True),
    ("cat_file", "Read file content", True),
    ("grep", "Exact text search across folders", True),
    ("index", "Reindex folders", False),
)


def build_server(index_flag: str | None, tools: Tools | None = None) -> MCPServer:
    """The MCP server with the six tools (names, titles and annotations in :data:`TOOLS`) and
    the index's status as a resource (:data:`STATUS_URI`)."""
    tools = tools or Tools(index_flag)
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
        tool.parameters = plain_schema(tool.parameters)
        if tool.fn_metadata.output_schema is not None:
            tool.fn_metadata.output_schema = plain_schema(tool.fn_metadata.output_schema)
        registered.append(tool)
    status = FunctionResource.from_function(
        tools.status,
        uri=STATUS_URI,
        name="status",
        title="Index status",
        description=inspect.cleandoc(tools.status.__doc__ or ""),
        mime_type="application/json",
    )
    return MCPServer(
        "semsearch",
        version=__version__,
        instructions=INSTRUCTIONS,
        tools=registered,
        resources=[status],
        extensions=[ArgumentCheck(registered)],
        log_level="WARNING",
    )


def serve(index_flag: str | None, warned: Iterable[str] = ()) -> None:
    """Serve the tools over stdio until the client closes stdin; then close the index.

    ``warned``: the config warnings the caller has shown (the others are logged to stderr)."""
    tools = Tools(index_flag, warned=warned)
    try:
        build_server(index_flag, tools).run("stdio")
    finally:
        tools.close()
