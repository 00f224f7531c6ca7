"""What the ``semsearch`` command prints: summaries, the dry-run plan, status, hits, progress.

Results go to stdout; warnings, errors and progress to stderr. Counts follow one notion across
``index --dry-run``, ``index`` and ``status``: *files* are the files that are (or would be)
searchable, *skipped* every path left out with its reason, *errors* what failed.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

if TYPE_CHECKING:  # the library loads inside the commands (see commands._index)
    from semsearch.files.grep import GrepMatch, GrepResult
    from semsearch.indexing.pipeline import FileEvent
    from semsearch.indexing.plan import FolderPlan
    from semsearch.indexing.report import IndexReport, RebuildReport
    from semsearch.store import IndexCheck

SNIPPET_CHARS = 100  # a one-line result shows this much of its chunk
MARK_START, MARK_END = "\x1b[1;31m", "\x1b[0m"  # a query word on a terminal: bold red, as grep
PROGRESS_INTERVAL = 0.1  # seconds between redraws of the live line (unless chunks were written)
ETA_AFTER = 1.0  # seconds of a pass before its rate is trusted for an ETA
VECTOR_ACTIONS = ("embedding", "embedded")  # the events of the second pass (FileEvent)


# What the printers read of a result. A search run in this process gives them the library's
# objects (Hit, Passage, LineRange); one answered by a running server (.remote) gives them the
# same fields read from the tools' structured content, without loading the library.


class ShownCopy(Protocol):
    """Another place of a hit's text (:class:`~semsearch.search.hits.Copy`)."""

    @property
    def folder(self) -> str: ...
    @property
    def folder_path(self) -> str: ...
    @property
    def rel(self) -> str: ...
    @property
    def start_line(self) -> int: ...
    @property
    def page(self) -> int | None: ...


class ShownHit(Protocol):
    """A search hit (:class:`~semsearch.search.hits.Hit`)."""

    @property
    def path(self) -> str: ...
    @property
    def folder(self) -> str: ...
    @property
    def folder_path(self) -> str: ...
    @property
    def rel(self) -> str: ...
    @property
    def start_line(self) -> int: ...
    @property
    def end_line(self) -> int: ...
    @property
    def page(self) -> int | None: ...
    @property
    def score(self) -> float: ...
    @property
    def text(self) -> str: ...
    @property
    def vector_rank(self) -> int | None: ...
    @property
    def lexical_rank(self) -> int | None: ...
    @property
    def definition_rank(self) -> int | None: ...
    @property
    def named_rank(self) -> int | None: ...
    @property
    def priors(self) -> tuple[str, ...]: ...
    @property
    def cosine_rank(self) -> int | None: ...
    @property
    def path_cosine(self) -> float | None: ...
    @property
    def coherence(self) -> float | None: ...
    @property
    def copies(self) -> Sequence[ShownCopy]: ...
    @property
    def copy_count(self) -> int: ...


class ShownPassage(Protocol):
    """The lines shown for a hit (:class:`~semsearch.search.passage.Passage`)."""

    @property
    def first_line(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def note(self) -> str: ...


class ShownLines(Protocol):
    """A file's line range (:class:`~semsearch.search.passage.LineRange`)."""

    @property
    def first_line(self) -> int: ...
    @property
    def last_line(self) -> int: ...
    @property
    def text(self) -> str: ...


def plural(count: int, word: str) -> str:
    """``1 file``, ``2 files``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def print_plan(plans: list[FolderPlan], as_json: bool) -> None:
    """``index --dry-run``: per folder the files that would be indexed, then what is skipped."""
    if as_json:
        print(json.dumps([_plan_json(plan) for plan in plans], indent=2))
        return
    for plan in plans:
        total = sum(f.size for f in plan.files)
        print(f"{plan.root}  ({plan.mode} mode)")
        for entry in plan.files:
            print(f"  {entry.size:>10,}  {quote_path(entry.rel)}")
        for skip in plan.skipped:
            print(f"  {'skipped':>10}  {quote_path(skip.rel)}  ({skip.reason})")
        for error in plan.errors:
            print(f"  {'error':>10}  {quote_path(error.rel)}  ({error.reason})")
        for warning in plan.warnings:
            print(f"  warning: {warning}")
        print(
            f"  {plural(len(plan.files), 'file')}, {total:,} bytes would be indexed; "
            f"{len(plan.skipped)} skipped; {plural(len(plan.errors), 'error')}"
        )


def _plan_json(plan: FolderPlan) -> dict[str, object]:
    return {
        "root": str(plan.root),
        "mode": plan.mode,
        "files": [{"path": f.rel, "size": f.size} for f in plan.files],
        "skipped": [{"path": s.rel, "reason": s.reason} for s in plan.skipped],
        "errors": [{"path": s.rel, "reason": s.reason} for s in plan.errors],
    }


def print_report(report: IndexReport) -> None:
    """The summary of an ``index`` run: one line per folder (and a total for several)."""
    if report.replaced_model:
        print(
            f"model {report.model} replaces {report.replaced_model}: every file was chunked and "
            "embedded again"
        )
    if report.next_model:
        print(
            f"model {report.next_model} will replace {report.model}: its index beside this one "
            f"is not whole yet; searches use {report.model} until `semsearch index` finishes it "
            f"with that model installed (`--model {report.model_name}` gives it up)"
        )
    for number, folder in enumerate(report.folders, start=1):
        print(f"[{number}/{len(report.folders)}] {folder.name}  {folder.path}")
        for warning in folder.warnings:
            print(f"  warning: {warning}", file=sys.stderr)
        for problem in folder.problems:
            print(f"  error: {quote_path(problem.path)}: {problem.reason}", file=sys.stderr)
        if folder.failed:
            continue
        print(
            f"  {plural(folder.files, 'file')} ({folder.indexed} indexed, "
            f"{folder.unchanged} unchanged)  {folder.skipped} skipped  "
            f"{plural(len(folder.problems), 'error')}  {folder.deleted} deleted  "
            f"{folder.chunks} chunks written  {folder.seconds:.1f}s"
            + ("  (truncated by --max-files)" if folder.truncated else "")
        )
    if report.chunks_embedded or report.chunks_pending or report.paths_embedded:  # second pass
        waiting = f", {report.chunks_pending} still waiting" if report.chunks_pending else ""
        paths = f", {plural(report.paths_embedded, 'file path')}" if report.paths_embedded else ""
        print(
            f"  vectors: {report.chunks_embedded} chunks embedded{waiting}{paths}"
            f"  {report.seconds:.1f}s in all"
        )
    if len(report.folders) > 1:
        errors = sum(len(f.problems) for f in report.folders)
        print(
            f"total  {plural(report.total('files'), 'file')} ({report.total('indexed')} indexed, "
            f"{report.total('unchanged')} unchanged)  {report.total('skipped')} skipped  "
            f"{plural(errors, 'error')}  {report.total('deleted')} deleted  "
            f"{report.total('chunks')} chunks written  {report.seconds:.1f}s"
        )


def watch_line(report: IndexReport, clock: str) -> str:
    """The one line of an ``index --watch`` run that changed something, ``clock`` its time:
    ``14:02:11  notes: 2 files indexed, 1 deleted, 5 chunks embedded  (0.4s)``."""
    changed = [f for f in report.folders if f.indexed or f.deleted or f.problems or f.failed]
    errors = sum(len(f.problems) for f in report.folders)
    parts = [
        f"{plural(report.total('indexed'), 'file')} indexed" if report.total("indexed") else "",
        f"{report.total('deleted')} deleted" if report.total("deleted") else "",
        plural(errors, "error") if errors else "",
        f"{plural(report.chunks_embedded, 'chunk')} embedded" if report.chunks_embedded else "",
        f"{report.chunks_pending} still waiting" if report.chunks_pending else "",
        f"the model now {report.model_name}" if report.replaced_model else "",
    ]
    what = ", ".join(part for part in parts if part) or "file paths embedded"
    where = ", ".join(f.name for f in changed) or ", ".join(f.name for f in report.folders)
    return f"{clock}  {where}: {what}  ({report.seconds:.1f}s)"


def print_rebuild(report: RebuildReport) -> None:
    """``index --rebuild``: where the old index went, then the run's summary."""
    check = report.check
    for number, path in enumerate(report.kept):
        if number:
            print(f"kept      {path}")
        elif check is not None and check.is_damaged:
            print(f"kept      {path}  (the damaged index: {check.problems[0]})")
        else:
            print(f"kept      {path}  (the old index, found sound)")
    if report.kept:
        print("          delete it once the new index serves you")
    print_report(report.run)


def rebuild_json(report: RebuildReport) -> dict[str, object]:
    """``index --rebuild --json``: the run's summary, where the old index went and its damage."""
    damage = list(report.check.problems) if report.check is not None else []
    return {**report.run.as_json(), "keptAs": [str(p) for p in report.kept], "damage": damage}


def print_check(check: IndexCheck) -> None:
    """``status --check``: what the checks found; the advice goes to stderr when damaged."""
    print(f"index         {check.path}")
    if not check.is_damaged:
        print(f"check         ok  ({', '.join(check.checks)})")
        return
    print(f"check         damaged  ({plural(len(check.problems), 'problem')})")
    for problem in check.problems:
        print(f"  {problem}")
    where = " where the index can be written (it is read-only here)" if check.read_only else ""
    if check.mended_by_index:
        print(
            f"semsearch: the texts table of the index {check.path} is damaged; searches read its "
            f"chunks table instead, slower. Run `semsearch index`{where}: it makes the table "
            "again.",
            file=sys.stderr,
        )
        return
    print(
        f"semsearch: the index {check.path} is damaged. Run `semsearch index --rebuild`{where} "
        "to set it aside (it is kept, renamed) and index the configured folders again.",
        file=sys.stderr,
    )


def _when(stamp: str | None) -> str:
    """A ``status --json`` time (ISO 8601, UTC) as local time to the minute."""
    if not stamp:
        return "never"
    from datetime import datetime  # ~1 ms: only status prints a time

    seconds = datetime.fromisoformat(stamp).timestamp()
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))


def print_status(status: dict[str, Any], as_json: bool = False) -> None:
    """``status``: the index, then every configured or indexed folder. ``status`` is
    :meth:`~semsearch.indexing.report.Status.as_json`, the shape a running server sends too."""
    if as_json:
        print(json.dumps(status, indent=2, ensure_ascii=False))
        return
    exists, path = status["indexExists"], status["indexPath"]
    if exists:
        model = status["model"]
        shown = f"{model['id']} (dim {model['dim']})" if model else "none yet"
        print(f"index         {path}  ({status['sizeBytes'] / 1e6:.1f} MB)")
        print(f"model         {shown}")
        if status.get("nextModel"):  # absent from an older server's status
            size = status.get("nextSizeBytes")  # absent from an older server too
            beside = "" if size is None else f" ({size / 1e6:.1f} MB)"
            print(
                f"next model    {status['nextModel']}: its index beside this one{beside} is not "
                "whole yet; `semsearch index` finishes it"
            )
    else:
        print(f"index         {path}  (not created yet: run `semsearch index`)")
    print(f"folders       {len(status['folders'])}")
    if exists:
        print(f"files         {status['files']}")
        print(f"skipped       {status['skipped']}")
        print(f"errors        {status['errors']}")
        print(f"chunks        {status['chunks']}")
        if status["chunksPending"]:
            pending = plural(status["chunksPending"], "chunk")
            print(f"pending       {pending} waiting for vectors")
    for row in status["folders"]:
        missing = "" if row["exists"] else "  (missing on disk)"
        unconfigured = "" if row["configured"] else "  (not configured)"
        print(f"  {row['name']}  {row['path']}{missing}{unconfigured}")
        if not row["indexed"]:
            print("      not indexed yet: run `semsearch index`")
            continue
        waiting = f" ({row['chunksPending']} waiting for vectors)" if row["chunksPending"] else ""
        print(
            f"      {plural(row['files'], 'file')}  {row['skipped']} skipped  "
            f"{plural(row['errors'], 'error')}  {row['chunks']} chunks{waiting}  "
            f"last indexed {_when(row['lastIndexed'])}  {row['changed']} changed since"
        )
        if row.get("commit"):
            print(f"      built from commit {row['commit']}")


def print_pending(count: int, mode: str) -> None:
    """The stderr line of a search while chunks wait for their vector (``mode``: the search's),
    so that results of the lexical arms alone are not taken for the final ones."""
    if count == 0 or mode == "bm25":
        return
    have = "1 chunk has" if count == 1 else f"{count:,} chunks have"
    effect = "results come from words alone for them"
    if mode == "vector":
        effect = "vector mode cannot find them"
    print(
        f"semsearch: {have} no vector yet: {effect}; run `semsearch index` to finish",
        file=sys.stderr,
    )


_C_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\v": "\\v",
    "\f": "\\f",
    "\r": "\\r",
    '"': '\\"',
    "\\": "\\\\",
}
# What makes a path need quoting: a control character (C0, DEL, C1), a quote, a backslash, or
# a byte that is not UTF-8 (os.fsdecode's surrogate escapes, U+DC80-U+DCFF).
_NEEDS_QUOTES = re.compile(r'[\x00-\x1f\x7f-\x9f"\\\udc80-\udcff]')


def quote_path(path: str) -> str:
    """``path`` as it is, or quoted as git quotes names (``core.quotePath`` off) when it holds a
    control character, ``"``, ``\\`` or a byte that is not UTF-8: in double quotes, with C
    escapes (``\\n``, ``\\t``, ``\\"``, ``\\\\``) and other such bytes in octal (``\\351``)."""
    if _NEEDS_QUOTES.search(path) is None:
        return path
    parts = []
    for char in path:
        if char in _C_ESCAPES:
            parts.append(_C_ESCAPES[char])
        elif _NEEDS_QUOTES.fullmatch(char):
            raw = char.encode("utf-8", "surrogateescape")
            parts.append("".join(f"\\{byte:03o}" for byte in raw))
        else:
            parts.append(char)
    return '"' + "".join(parts) + '"'


def json_text(payload: object) -> str:
    """JSON with non-ASCII text as it is, but a file name's bytes that are not UTF-8 (surrogate
    escapes) as ``\\udcXX`` escapes: valid JSON, and ``os.fsencode(json.loads(...))`` gives
    the name's bytes back."""
    text = json.dumps(payload, indent=2, ensure_ascii=False)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shown_path(path: str, cwd: Path) -> str:
    """A path relative to ``cwd`` when it lies below it, else absolute; quoted if need be."""
    base = str(cwd).rstrip(os.sep) + os.sep
    return quote_path(path[len(base) :] if path.startswith(base) else path)


def print_grep(matches: Sequence[GrepMatch], cwd: Path, is_context: bool) -> None:
    """``grep`` as ripgrep prints it: ``path:line:text`` per match; with context lines, those
    as ``path-line-text`` and ``--`` between groups of lines that do not touch."""
    is_first = True
    for path, group in itertools.groupby(matches, key=lambda match: match.path):
        rows: dict[int, tuple[str, str]] = {}
        for match in group:
            start = match.line - len(match.before)
            for number, text in enumerate(match.before, start=start):
                rows.setdefault(number, ("-", text))
            rows[match.line] = (":", match.text)
            for number, text in enumerate(match.after, start=match.line + 1):
                rows.setdefault(number, ("-", text))
        shown = shown_path(path, cwd)
        previous = None
        for number in sorted(rows):
            if is_context and not is_first and previous != number - 1:
                print("--")
            mark, text = rows[number]
            print(f"{shown}{mark}{number}{mark}{text}")
            previous, is_first = number, False


def grep_json(result: GrepResult) -> dict[str, object]:
    """``grep --json``: the matches, the files searched, the warnings."""
    matches = []
    for match in result.matches:
        row: dict[str, object] = {
            "filePath": match.path,
            "folder": match.folder,
            "relPath": match.rel,
            "line": match.line,
            "column": match.column,
            "text": match.text,
        }
        if match.page is not None:
            row["page"] = match.page
        if match.before or match.after:
            row["before"] = list(match.before)
            row["after"] = list(match.after)
        matches.append(row)
    return {
        "matches": matches,
        "filesSearched": result.files_searched,
        "warnings": list(result.warnings),
    }


def print_lines(lines: ShownLines, is_numbered: bool) -> None:
    """``cat``: the lines as they are, or numbered as ``cat -n`` numbers them."""
    shown = lines.text.split("\n") if lines.last_line >= lines.first_line else []
    for number, line in enumerate(shown, start=lines.first_line):
        print(f"{number:>6}\t{line}" if is_numbered else line)


def explain(hit: ShownHit) -> str:
    """The ``--explain`` line under a hit: its arm ranks and priors."""

    def rank(value: int | None) -> str:
        return f"#{value}" if value else "-"

    lift = []
    if hit.cosine_rank and hit.cosine_rank != hit.vector_rank:
        lift = [f"cosine #{hit.cosine_rank}", "file lift"]
    if hit.path_cosine is not None:  # the path term, part of the vector arm's lift
        lift.append(f"path cosine {hit.path_cosine:.2f}")
    vector = f"vector {rank(hit.vector_rank)}" + (f" ({', '.join(lift)})" if lift else "")
    parts = [vector, f"bm25 {rank(hit.lexical_rank)}"]
    if hit.definition_rank:
        parts.append(f"definitions #{hit.definition_rank}")
    if hit.named_rank:  # the named-files arm: the file's name is in the query
        parts.append(f"named file #{hit.named_rank}")
    if hit.coherence:  # the file's best chunk: its share of the best fused score, added
        from semsearch.search.ranking import COHERENCE_NOTE  # only with --explain

        parts.append(f"{COHERENCE_NOTE} +{hit.coherence:.2f}")
    parts.extend(hit.priors)
    return "     " + "  ·  ".join(parts)


COPIES_SHOWN = 3  # copies named on the "also in" line under a hit


def also_in(hit: ShownHit) -> str:
    """The line under a hit whose text is in other places too: the first ``COPIES_SHOWN`` of
    them (``folder/path:line`` for one in another folder) and how many more there are."""
    shown = []
    for copy in hit.copies[:COPIES_SHOWN]:
        where = f"{quote_path(copy.rel)}:{copy.start_line}" + (
            f" (p.{copy.page})" if copy.page else ""
        )
        if copy.folder_path != hit.folder_path:
            where = f"{quote_path(copy.folder)}/{where}"
        shown.append(where)
    more = hit.copy_count - len(shown)
    return "     also in: " + ", ".join(shown) + (f" (+{more} more)" if more > 0 else "")


class Marker:
    """Marks the words of ``query`` (:func:`~semsearch.text.lexical.query_words`) in a text for a
    terminal; leaves texts alone when ``query`` is empty.

    A word is marked where it starts a word or a part of an identifier (``retry`` in
    ``retry_payment``, ``header`` in ``parseHeaderLine``), in any case.
    """

    def __init__(self, query: str = "") -> None:
        self._pattern = None
        if not query:
            return
        from semsearch.text.lexical import query_words  # ~10 ms: only on a terminal

        words = query_words(query)
        if words:
            alternatives = "|".join(re.escape(word) for word in words)
            self._pattern = re.compile(
                rf"(?:(?<![A-Za-z0-9])|(?<=[a-z])(?=[A-Z]))(?i:{alternatives})"
            )

    def __call__(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: f"{MARK_START}{m.group()}{MARK_END}", text)


def print_hits(
    hits: Sequence[ShownHit],
    with_explain: bool = False,
    query: str | None = None,
    marker: Marker | None = None,
) -> None:
    """Search results as aligned rows; "No results." on stderr when there are none.

    With ``query`` (``--explain`` with the vector arm), a first line says which words of it
    were embedded when its question framing was left out. ``marker`` marks the query's words
    in the snippets (on a terminal)."""
    if not hits:
        print("No results.", file=sys.stderr)
        return
    if query is not None:
        from semsearch.search.ranking import FRAME_NOTE, embedding_text  # only with --explain

        embedded = embedding_text(query)
        if embedded != query:
            print(f"{FRAME_NOTE}: {embedded}")
    mark = marker or Marker()
    rows = [_row(n, h) for n, h in enumerate(hits, start=1)]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row, hit in zip(rows, hits, strict=True):
        cells = [row[0].rjust(widths[0]), *(row[i].ljust(widths[i]) for i in (1, 2, 3))]
        snippet = " ".join(hit.text.split())[:SNIPPET_CHARS]
        print("  ".join([*cells, mark(snippet)]))
        if hit.copies:
            print(also_in(hit))
        if with_explain:
            print(explain(hit))


def _row(number: int, hit: ShownHit, end_line: int | None = None) -> tuple[str, str, str, str]:
    """A result's number, folder, ``path:line`` (``path:first-last`` with ``end_line``, and the
    PDF page) and score. The score is rounded to 6 places first, as JSON and the MCP tools give
    it, so that a search answered by a server prints the same digits."""
    lines = f"{hit.start_line}" if end_line is None else f"{hit.start_line}-{end_line}"
    where = f"{quote_path(hit.rel)}:{lines}" + (f" (p.{hit.page})" if hit.page else "")
    return str(number), hit.folder, where, f"{round(hit.score, 6):.3f}"


def print_passages(
    hits: Sequence[ShownHit],
    passages: Sequence[ShownPassage],
    marker: Marker | None = None,
    with_explain: bool = False,
) -> None:
    """Search results as blocks (``-C N``, ``--full``): a header row per hit, then its passage's
    numbered lines: ``12:`` for the chunk's lines, ``10-`` for context lines read around it."""
    mark = marker or Marker()
    for number, (hit, passage) in enumerate(zip(hits, passages, strict=True), start=1):
        if number > 1:
            print()
        note = f"  ({passage.note})" if passage.note else ""
        print("  ".join(_row(number, hit, hit.end_line)) + note)
        if hit.copies:
            print(also_in(hit))
        if with_explain:
            print(explain(hit))
        lines = passage.text.split("\n")
        width = len(str(passage.first_line + len(lines) - 1))
        for at, line in enumerate(lines, start=passage.first_line):
            is_chunk = bool(passage.note) or hit.start_line <= at <= hit.end_line
            print(f"{at:>{width}}{':' if is_chunk else '-'}{mark(line)}")


def print_vimgrep(hits: Sequence[ShownHit]) -> None:
    """``--vimgrep``: ``path:line:col:text`` per hit, the text being its first line (Vim's
    ``:cexpr``, VS Code and other editors jump to each)."""
    for hit in hits:
        first = hit.text.split("\n", 1)[0]
        print(f"{quote_path(hit.path)}:{hit.start_line}:1:{first}")


def file_rows(hits: Sequence[ShownHit]) -> list[dict[str, Any]]:
    """``--files-only``: each file once, in the order of its best hit, with that hit's score."""
    rows: dict[str, dict[str, Any]] = {}
    for hit in hits:
        if hit.path not in rows:
            row = {"filePath": hit.path, "folder": hit.folder, "relPath": hit.rel}
            rows[hit.path] = {**row, "score": round(hit.score, 6)}
    return list(rows.values())


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _rate(per_second: float) -> str:
    return f"{per_second:.0f}" if per_second >= 10 else f"{per_second:.1f}"


def progress_line(
    event: FileEvent, width: int, eta: float | None = None, rate: float | None = None
) -> str:
    """The live line for an event, at most ``width - 1`` characters (the cursor stays on the
    line); a ``width`` below 1 (a terminal that reports no size) means no limit.

    While files are read, ``  folder  12/340 files · 57 chunks · 31 files/s · ETA 1m05s ·
    path/of/the/file.py`` (a path too long for the width keeps its end); while vectors are
    made, ``  vectors  384/3000 · 21/s · ETA 2m04s``. ``rate`` per second; no rate or ETA
    when they are None.
    """
    vectors = event.action in VECTOR_ACTIONS
    parts = [f"  {event.folder}  {event.done}/{event.total}" + ("" if vectors else " files")]
    if not vectors:
        parts.append(plural(event.chunks, "chunk"))
    if rate is not None:
        parts.append(_rate(rate) + ("/s" if vectors else " files/s"))
    if eta is not None:
        parts.append(f"ETA {_duration(eta)}")
    if vectors:
        line = " · ".join(parts)
        return line if width < 1 else line[: width - 1]
    head = " · ".join(parts) + " · "
    name = quote_path(event.rel)
    if width < 1:
        return head + name
    room = width - 1 - len(head)
    if len(name) > room:
        name = "…" + name[len(name) - room + 1 :] if room > 1 else ""
    return (head + name)[: width - 1]


def terminal_columns(stream: TextIO) -> int:
    """The width of the terminal behind ``stream``: ``COLUMNS`` when set, else what the terminal
    reports (0 when it reports no size), else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = -1
    if columns >= 0:
        return columns
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError):
        return 80


class Progress:
    """One live status line on a TTY; with ``verbose`` a line per file (not the unchanged ones).

    The line follows the run's two passes: each folder's files, then the vectors. Its ETA is
    for the whole run, so it is shown only when it can be: in the vector pass from that pass's
    rate; while files are read, when no chunk was written yet (nothing to embed after), or
    with the vector rate of an earlier run of this process (``index --watch``). The last event
    of each pass is always drawn, so the line ends on the summary's counts.

    ``show_errors`` prints error events too; leave it off when the summary lists them, so each
    error is printed once. ``columns`` and ``clock`` are seams for tests.
    """

    def __init__(
        self,
        stream: TextIO,
        verbose: bool,
        show_errors: bool = False,
        columns: Callable[[], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._verbose = verbose
        self._show_errors = show_errors
        self._live = stream.isatty()
        self._columns = columns or (lambda: terminal_columns(stream))
        self._clock = clock
        self._started = clock()
        self._drawn: tuple[float, int] = (float("-inf"), -1)  # when, and the chunks shown
        self._pass = ""  # "vectors", or the folder whose files are read
        self._written = 0  # chunks written by the run's earlier folders
        self._chunks = 0  # chunks written in the folder being read, as last heard
        self._vector_rate: float | None = None  # vectors per second, once measured
        self._idle_shown = False

    def __call__(self, event: FileEvent) -> None:
        vectors = event.action in VECTOR_ACTIONS
        hidden = ("unchanged", "embedding") + (() if self._show_errors else ("error",))
        if self._verbose and event.action not in hidden:
            self.clear()
            detail = f"  ({event.detail})" if event.detail else ""
            name = quote_path(f"{event.folder}/{event.rel}")
            print(f"  {event.action:<9} {name}{detail}", file=self._stream)
        if not self._live:
            return
        now = self._clock()
        self._begin("vectors" if vectors else event.folder, now)
        if not vectors:
            self._chunks = event.chunks
        if event.total == 0:
            return  # an empty folder, or nothing to embed
        at, chunks = self._drawn
        # Written chunks arrive in bursts (one event per file after each write): draw each, so
        # the line never stops on a stale count; and the end of a pass.
        if now - at < PROGRESS_INTERVAL and event.chunks == chunks and event.done < event.total:
            return
        self._drawn = (now, event.chunks)
        rate, eta = self._estimate(event, vectors, now - self._started)
        line = progress_line(event, self._columns(), eta, rate)
        self._stream.write("\r\x1b[2K" + line)
        self._stream.flush()

    def _begin(self, name: str, now: float) -> None:
        """A new pass (a folder, or the vectors) starts its own clock and draws at once."""
        if name == self._pass:
            return
        if self._pass == "vectors":
            self._written = 0  # the vectors ended a run: the next event starts another
        elif self._pass:
            self._written += self._chunks
        self._pass, self._started, self._chunks = name, now, 0
        self._drawn = (float("-inf"), -1)

    def _estimate(
        self, event: FileEvent, vectors: bool, elapsed: float
    ) -> tuple[float | None, float | None]:
        """(rate, ETA of the whole run) once the rate is trusted, else (None, None); the ETA is
        None when it cannot cover the rest of the run."""
        if elapsed < ETA_AFTER or event.done <= 0:
            return None, None
        rate = event.done / elapsed
        left = (event.total - event.done) / rate
        if vectors:
            self._vector_rate = rate
            return rate, left
        written = self._written + event.chunks
        if written == 0:
            return rate, left
        if self._vector_rate is None:
            return rate, None
        coming = self._written + event.chunks * event.total / event.done  # as read so far
        return rate, left + coming / self._vector_rate

    def idle(self, text: str) -> None:
        """A line that stands while nothing happens (``index --watch``): the live line on a
        TTY, until the next event or :meth:`clear`; elsewhere printed, once."""
        if self._live:
            self._stream.write("\r\x1b[2K" + text)
            self._stream.flush()
        elif not self._idle_shown:
            print(text, file=self._stream, flush=True)
        self._idle_shown = True

    def clear(self) -> None:
        """Erase the live line."""
        if self._live:
            self._stream.write("\r\x1b[2K")
            self._stream.flush()
