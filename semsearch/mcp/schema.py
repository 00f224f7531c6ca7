"""The MCP tools' parameter types and result shapes, and the JSON schemas published for them.

Optional parameters accept an explicit null (some clients send one) but are published as plain
types: no anyOf/nullable unions, which some clients (e.g. Gemini) reject. :func:`plain_schema`
inlines ``$ref``s and drops titles and null defaults from the schemas the SDK generates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema
from typing_extensions import NotRequired, TypedDict

from semsearch.config import DEFAULT_TOP_K, MODES, Mode
from semsearch.files.folders import FolderInfo
from semsearch.files.grep import GrepResult
from semsearch.search.copies import COPIES_LISTED
from semsearch.search.hits import Copy, Hit
from semsearch.search.passage import Gathered, LineRange, Passage

MAX_K = 50
"""Most results a search or gather call returns."""
HIT_TEXT_CHARS = 4000
"""A search hit's text is cut after this many characters."""
MAX_CONTEXT_LINES = 100
"""Most contextLines a gather call may ask for."""
MAX_GREP_RESULTS = 500
"""Most maxResults a grep call may ask for."""
MAX_PROBLEMS = 50
"""Most problems per folder listed in an index report."""


def _whole_number(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("expected a whole number, not true/false")
    return value


def _flag(value: Any) -> Any:
    """true, false or null; "true"/"false" as strings. pydantic alone would also take 1, "yes",
    "on" or "t" as true: a value the published schema does not allow must not start a run."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError("expected true or false")


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


TopK = Annotated[
    int | None,
    BeforeValidator(_whole_number),
    AfterValidator(_between(1, MAX_K)),
    WithJsonSchema(_int_schema(1, MAX_K)),
]
"""A result count, 1 to MAX_K (null: the configured default)."""
ContextLines = Annotated[
    int | None,
    BeforeValidator(_whole_number),
    AfterValidator(_between(0, MAX_CONTEXT_LINES)),
    WithJsonSchema(_int_schema(0, MAX_CONTEXT_LINES)),
]
"""Lines of context, 0 to MAX_CONTEXT_LINES."""
LineNumber = Annotated[
    int | None,
    BeforeValidator(_whole_number),
    AfterValidator(_between(1, None)),
    WithJsonSchema(_int_schema(1)),
]
"""A 1-based line number (also used for other counts of at least 1)."""
GrepCount = Annotated[
    int | None,
    BeforeValidator(_whole_number),
    AfterValidator(_between(1, MAX_GREP_RESULTS)),
    WithJsonSchema(_int_schema(1, MAX_GREP_RESULTS)),
]
"""A grep match count, 1 to MAX_GREP_RESULTS."""
OptionalText = Annotated[str | None, WithJsonSchema({"type": "string"})]
"""A string, or null for its default."""
OptionalFlag = Annotated[bool | None, BeforeValidator(_flag), WithJsonSchema({"type": "boolean"})]
"""A boolean, or null for its default (the strings "true" and "false" too, as a client that
sends every value as a string gives them)."""


def _glob_list(value: Any) -> Any:
    """A glob given as one string (how pathGlob was first published) is a list of one; an empty
    string is none."""
    if isinstance(value, str):
        return [value] if value else []
    return value


def _number(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("expected a number, not true/false")
    return value


def _finite(value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value}")
    return value


GlobList = Annotated[
    list[str] | None,
    BeforeValidator(_glob_list),
    WithJsonSchema({"type": "array", "items": {"type": "string"}}),
]
"""Glob patterns (a single string is taken as a list of one; null: none)."""

Query = Annotated[str, Field(description="What to look for, in natural language")]
FolderParam = Annotated[OptionalText, Field(description="Only this folder (name or path)")]
PathGlob = Annotated[
    GlobList,
    Field(
        description='Only paths matching one of these globs, e.g. ["*.md", "src/**"]; one '
        'starting with "!" leaves the paths it matches out. A single string is one glob'
    ),
]
ExcludeParam = Annotated[
    GlobList, Field(description='Leave out paths matching any of these globs, e.g. ["tests/**"]')
]
ModeParam = Annotated[
    Mode | None,
    WithJsonSchema({"type": "string", "enum": list(MODES)}),
    Field(
        description="Ranking arms: hybrid (embeddings + BM25 keywords), vector (embeddings "
        "only) or bm25 (keywords only); default hybrid, or the configured default mode"
    ),
]
MinScore = Annotated[
    float | None,
    BeforeValidator(_number),
    AfterValidator(_finite),
    WithJsonSchema({"type": "number"}),
    Field(description="Leave out the hits scoring below this (scores run from 0 to 1)"),
]
AllCopies = Annotated[
    OptionalFlag,
    Field(
        description="List each copy of a text (the same chunk in several files) as its own "
        "result; by default a result lists its copies in copies"
    ),
]
KParam = Annotated[TopK, Field(description=f"Number of results (default {DEFAULT_TOP_K})")]
"""The k parameter of search and gather."""


class FileJson(TypedDict):
    """Where a result is: the fields every tool's results share."""

    filePath: Annotated[str, Field(description="Absolute path of the file")]
    folder: Annotated[str, Field(description="Name of the configured folder")]
    relPath: Annotated[str, Field(description="Path relative to the folder")]


class CopyJson(FileJson):
    """Another place of a result's text."""

    startLine: Annotated[int, Field(description="First line of the copy (1-based)")]
    endLine: Annotated[int, Field(description="Last line of the copy (inclusive)")]
    page: NotRequired[Annotated[int, Field(description="PDF page (PDFs only)")]]


CopiesField = Annotated[
    list[CopyJson],
    Field(
        description=(
            "Other places holding the same text (present when there are some; at most "
            f"{COPIES_LISTED}, by path): copies collapsed into this result"
        )
    ),
]
CopyCountField = Annotated[
    int, Field(description="How many other places hold the same text (all of them)")
]


class HitJson(FileJson):
    """One search result."""

    startLine: Annotated[int, Field(description="First line of the chunk (1-based)")]
    endLine: Annotated[int, Field(description="Last line of the chunk (inclusive)")]
    page: NotRequired[Annotated[int, Field(description="PDF page (PDFs only)")]]
    score: Annotated[
        float,
        Field(
            description=(
                "Relevance from 0 to 1, higher is better: the fused rank score times the ranking "
                "priors, divided by the largest product of priors possible for the query, so 1.0 "
                "is the best possible (vector mode: the cosine similarity times the priors)"
            )
        ),
    ]
    text: Annotated[str, Field(description="The chunk's text")]
    copies: NotRequired[CopiesField]
    copyCount: NotRequired[CopyCountField]


# The freshness flag of search and gather (see docs/mcp.md, "Freshness").
IndexingFlag = Annotated[
    bool, Field(description="An index run is under way: recent changes may miss")
]
PendingCount = Annotated[
    int,
    Field(
        description=(
            "Chunks (of the folder searched, else of the index) not embedded yet: found by "
            "words only until an index run embeds them"
        )
    ),
]


class SearchOutput(TypedDict):
    """The search tool's structured result."""

    results: list[HitJson]
    truncated: Annotated[bool, Field(description="A text was cut at 4,000 characters")]
    indexing: NotRequired[IndexingFlag]
    chunksPending: NotRequired[PendingCount]


class PassageJson(TypedDict):
    """The lines a gather result shows."""

    startLine: Annotated[int, Field(description="First line shown (1-based)")]
    endLine: Annotated[int, Field(description="Last line shown (inclusive)")]
    text: Annotated[str, Field(description="The lines (the indexed text when note says so)")]
    note: NotRequired[
        Annotated[str, Field(description="Why the indexed text is shown instead of the file's")]
    ]


class GatherHitJson(FileJson):
    """One gather result: the hit (as search gives it, without its text) and its passage."""

    startLine: Annotated[int, Field(description="First line of the chunk (1-based)")]
    endLine: Annotated[int, Field(description="Last line of the chunk (inclusive)")]
    page: NotRequired[Annotated[int, Field(description="PDF page (PDFs only)")]]
    score: Annotated[float, Field(description="Relevance from 0 to 1, as search reports it")]
    copies: NotRequired[CopiesField]
    copyCount: NotRequired[CopyCountField]
    passage: PassageJson


class GatherOutput(TypedDict):
    """The gather tool's structured result: the results the markdown block shows."""

    results: list[GatherHitJson]
    truncated: Annotated[
        bool, Field(description="The 256 KiB cap dropped results or cut the first one")
    ]
    indexing: NotRequired[IndexingFlag]
    chunksPending: NotRequired[PendingCount]


class LinesOutput(FileJson):
    """The cat_file tool's structured result."""

    startLine: Annotated[int, Field(description="First line shown (1-based)")]
    endLine: Annotated[int, Field(description="Last line shown, inclusive (0: empty file)")]
    totalLines: Annotated[int, Field(description="Lines in the whole file")]
    text: Annotated[str, Field(description="The lines, joined by newlines")]
    truncated: Annotated[bool, Field(description="The 256 KiB cap stopped before endLine")]
    note: NotRequired[Annotated[str, Field(description="Where to continue when truncated")]]


class GrepMatchJson(FileJson):
    """One matching line."""

    line: Annotated[int, Field(description="Line number (1-based)")]
    text: Annotated[str, Field(description="The line (a window around the match if long)")]
    page: NotRequired[Annotated[int, Field(description="PDF page (PDFs only)")]]


class GrepOutput(TypedDict):
    """The grep tool's structured result."""

    matches: list[GrepMatchJson]
    truncated: Annotated[bool, Field(description="More lines match than maxResults")]
    filesSearched: NotRequired[
        Annotated[int, Field(description="Files searched (absent when truncated: it stopped)")]
    ]
    warnings: Annotated[list[str], Field(description="Files that could not be read, and why")]


class FolderJson(TypedDict):
    """A folder: configured, indexed, or both."""

    name: str
    path: str
    exists: Annotated[bool, Field(description="The folder exists on disk")]
    configured: Annotated[bool, Field(description="In the config (false: only in the index)")]
    files: Annotated[int, Field(description="Files indexed")]
    chunks: Annotated[int, Field(description="Chunks indexed")]
    chunksPending: Annotated[
        int, Field(description="Chunks not embedded yet (found by words only until then)")
    ]
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
    chunksEmbedded: int
    chunksPending: int
    pathsEmbedded: int
    errors: int
    truncated: bool
    seconds: float
    folders: list[dict[str, Any]]


def hit_json(hit: Hit) -> dict[str, Any]:
    """The hit as search returns it; a text longer than HIT_TEXT_CHARS is cut and marked."""
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
    if hit.copies:
        row["copies"] = [_copy_json(copy) for copy in hit.copies]
        row["copyCount"] = hit.copy_count
    return row


def _copy_json(copy: Copy) -> dict[str, Any]:
    """A place of a hit's copy (:class:`CopyJson`)."""
    row = copy.as_json()
    if row["page"] is None:
        del row["page"]
    return row


def gather_json(gathered: Gathered) -> dict[str, Any]:
    """The gather tool's structured result (:class:`GatherOutput`)."""
    results = []
    for hit, passage in gathered.shown:
        row = hit_json(hit)
        del row["text"]
        row["passage"] = passage_json(passage)
        results.append(row)
    return {"results": results, "truncated": gathered.is_truncated}


def passage_json(passage: Passage) -> dict[str, Any]:
    """A gather result's passage (:class:`PassageJson`)."""
    row: dict[str, Any] = {
        "startLine": passage.first_line,
        "endLine": passage.last_line,
        "text": passage.text,
    }
    if passage.note:
        row["note"] = passage.note
    return row


def lines_json(lines: LineRange) -> dict[str, Any]:
    """The cat_file tool's structured result (:class:`LinesOutput`)."""
    row: dict[str, Any] = {
        "filePath": lines.path,
        "folder": lines.folder,
        "relPath": lines.rel,
        "startLine": lines.first_line,
        "endLine": lines.last_line,
        "totalLines": lines.line_count,
        "text": lines.text,
        "truncated": lines.is_truncated,
    }
    if lines.note:
        row["note"] = lines.note
    return row


def grep_json(result: GrepResult) -> dict[str, Any]:
    """The grep tool's structured result (:class:`GrepOutput`)."""
    matches = []
    for match in result.matches:
        row: dict[str, Any] = {
            "filePath": match.path,
            "folder": match.folder,
            "relPath": match.rel,
            "line": match.line,
            "text": match.text,
        }
        if match.page is not None:
            row["page"] = match.page
        matches.append(row)
    payload: dict[str, Any] = {
        "matches": matches,
        "truncated": result.truncated,
        "warnings": list(result.warnings),
    }
    if not result.truncated:
        payload["filesSearched"] = result.files_searched
    return payload


def folder_json(folder: FolderInfo) -> dict[str, Any]:
    """A list_folders row: the folder on disk and in the config, with its index counts."""
    row: dict[str, Any] = {
        "name": folder.name,
        "path": str(folder.path),
        "exists": folder.path.is_dir(),
        "configured": folder.is_configured,
        "files": folder.files,
        "chunks": folder.chunks,
        "chunksPending": folder.pending,
    }
    if folder.last_indexed:
        stamp = datetime.fromtimestamp(folder.last_indexed, tz=timezone.utc)
        row["lastIndexed"] = stamp.isoformat(timespec="seconds")
    if folder.commit:
        row["commit"] = folder.commit
    return row


def trim_report(report: dict[str, Any]) -> dict[str, Any]:
    """The index report with at most MAX_PROBLEMS problems per folder (in place)."""
    for folder in report.get("folders", []):
        problems = folder.get("problems", [])
        if len(problems) > MAX_PROBLEMS:
            folder["problems"] = problems[:MAX_PROBLEMS]
            folder["problemsOmitted"] = len(problems) - MAX_PROBLEMS
    return report


def readable(value: Any) -> Any:
    """``value`` (text, or JSON-like lists and dicts of it) with each byte of a file name that is
    not UTF-8 (a surrogate escape) written ``\\xHH``, as JSON over MCP must be UTF-8;
    ``cat_file`` takes such a path back (:meth:`~semsearch.files.access.Locator.locate`)."""
    if isinstance(value, str):
        if value.isascii():
            return value
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    if isinstance(value, list):
        return [readable(item) for item in value]
    if isinstance(value, dict):
        return {key: readable(item) for key, item in value.items()}
    return value


def plain_schema(schema: Any) -> Any:
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
