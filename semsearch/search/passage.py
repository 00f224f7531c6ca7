"""Passages of the indexed files as text for a reader: gather blocks and capped line ranges.

:func:`gather_block` formats search hits as one markdown block: a header per hit and its text in
a backtick fence longer than any backtick run inside it. With ``context_lines`` the text is
whole lines read from the file around the chunk, exactly aligned with the line numbers search
reports; when that cannot be done (PDF/DOCX, file unreadable, file changed since indexing) the
indexed text is shown instead and the header says why; :func:`gather` also gives the hits and
passages the block shows, for structured output. :func:`read_lines` reads a line range of
a file inside the configured folders, as the indexer reads it (PDF/DOCX give their extracted
text).

Both stay within :data:`TEXT_CAP_BYTES` of UTF-8 and end with a note saying so when they hit
it. Lines are numbered as search numbers them: 1-based, split on "\\n" only, and a final "\\n"
ends the last line rather than starting another.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from semsearch.errors import PathRefusedError, SemsearchError, UsageError
from semsearch.files.access import Locator, read_text
from semsearch.files.filetype import is_document
from semsearch.search.hits import Hit

TEXT_CAP_BYTES = 256 * 1024
TEXT_CAP = f"{TEXT_CAP_BYTES // 1024} KiB"  # how messages name the cap
"""At most this many bytes of UTF-8 text per gather block or :func:`read_lines` call."""


@dataclass(frozen=True)
class Passage:
    """The text shown for a hit: whole lines from ``first_line`` on.

    ``note`` is empty when the lines were read from the file; otherwise the text is the indexed
    text and the note says why ("indexed text (file changed since indexing)").
    """

    first_line: int
    text: str
    note: str = ""

    @property
    def last_line(self) -> int:
        """The last line shown (inclusive)."""
        return self.first_line + self.text.count("\n")


@dataclass(frozen=True)
class Gathered:
    """What a gather call shows: the hits with their passages, the block, the hits found.

    ``shown`` holds the hits whose sections fit in :data:`TEXT_CAP_BYTES` (a first section larger
    than the cap is shown cut, its passage text cut with it); ``is_truncated`` when some hits were
    dropped or a text was cut.
    """

    shown: tuple[tuple[Hit, Passage], ...]
    found: int
    text: str
    is_truncated: bool = False


@dataclass(frozen=True)
class LineRange:
    """Lines ``first_line``–``last_line`` of a file of ``line_count`` lines.

    ``last_line`` is the last line shown: fewer than asked for when the range passed
    :data:`TEXT_CAP_BYTES`, and then ``note`` says where to continue. ``folder`` is the name of
    the configured folder holding the file, ``rel`` its path inside that folder and ``path`` its
    absolute path (the folder's path joined with ``rel``, so left out of comparisons).
    """

    folder: str
    rel: str
    first_line: int
    last_line: int
    line_count: int
    text: str
    note: str = ""
    path: str = field(default="", compare=False)

    @property
    def is_truncated(self) -> bool:
        """True when the cap stopped the range early (the note says where to continue)."""
        return bool(self.note)

    def as_text(self) -> str:
        """A header naming the folder, file and lines, a blank line, the text, then the note."""
        if self.line_count:
            where = f"lines {self.first_line}–{self.last_line} of {self.line_count}"
        else:
            where = "empty file"
        note = f"\n\n{self.note}" if self.note else ""
        return f"# {self.folder}  ·  {self.rel}  ·  {where}\n\n{self.text}{note}"


def split_lines(text: str) -> list[str]:
    """The text's lines as search numbers them (split on "\\n" only; no line after a final one)."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def gather_block(hits: Sequence[Hit], context_lines: int, locator: Locator) -> str:
    """The hits as one markdown block of at most :data:`TEXT_CAP_BYTES` ("No results." if none).

    Each hit is a header ``### [i/n]  folder  ·  path  ·  line N  ·  score S`` (plus the PDF
    page and a fallback note when there is one; a line naming its copies when it has some,
    :func:`copies_line`) and its :func:`read_passage` text in a fence.
    """
    return gather(hits, context_lines, locator).text


def gather(hits: Sequence[Hit], context_lines: int, locator: Locator) -> Gathered:
    """The :func:`gather_block` of the hits, with the hits and passages it shows."""
    if not hits:
        return Gathered((), 0, "No results.")
    passages = [read_passage(hit, context_lines, locator) for hit in hits]
    sections = [
        format_section(number, len(hits), hit, passage)
        for number, (hit, passage) in enumerate(zip(hits, passages, strict=True), start=1)
    ]
    fitting = count_fitting(sections)
    shown = list(zip(hits[:fitting], passages[:fitting], strict=True))
    if not fitting:  # the first section alone is over the cap: it is shown cut
        shown = [(hits[0], replace(passages[0], text=cut_bytes(passages[0].text, TEXT_CAP_BYTES)))]
    is_cut = fitting < len(sections)
    return Gathered(tuple(shown), len(hits), join_capped(sections), is_cut)


def read_passage(hit: Hit, context_lines: int, locator: Locator) -> Passage:
    """The hit's lines plus ``context_lines`` whole lines of the file before and after them.

    Lines are read through ``locator`` only when the file still holds the indexed text at the
    hit's line numbers; otherwise, and for PDF/DOCX, the passage is the indexed text with a note.
    """
    if context_lines < 0:
        raise UsageError(f"context_lines must be at least 0, got {context_lines}.")
    stored = hit.text.removesuffix("\n")
    if context_lines == 0:
        return Passage(hit.start_line, stored)
    if hit.page is not None or is_document(hit.rel):
        return Passage(hit.start_line, stored, "indexed text (no context for PDF/DOCX)")
    try:
        located = locator.locate(hit.path)
        lines = split_lines(read_text(located.entry, locator.ignore).text)
    except (SemsearchError, OSError):
        if not os.path.isdir(hit.folder_path):  # an index built on another machine
            return Passage(hit.start_line, stored, "indexed text (folder not on this machine)")
        return Passage(hit.start_line, stored, "indexed text (file not readable)")
    if stored not in "\n".join(lines[hit.start_line - 1 : hit.end_line]):
        return Passage(hit.start_line, stored, "indexed text (file changed since indexing)")
    first = max(1, hit.start_line - context_lines)
    last = min(len(lines), hit.end_line + context_lines)
    return Passage(first, "\n".join(lines[first - 1 : last]))


def format_section(number: int, count: int, hit: Hit, passage: Passage) -> str:
    """One hit of a gather block: its ``### [number/count]`` header and the fenced passage."""
    parts = [hit.folder, hit.rel, f"line {passage.first_line}"]
    if hit.page is not None:
        parts.append(f"page {hit.page}")
    parts.append(f"score {hit.score:.3f}")
    if passage.note:
        parts.append(passage.note)
    fence = fence_for(passage.text)
    header = f"### [{number}/{count}]  " + "  ·  ".join(parts)
    if hit.copies:
        header += "\n" + copies_line(hit)
    return f"{header}\n{fence}\n{passage.text}\n{fence}"


def copies_line(hit: Hit) -> str:
    """The line under a gather header naming the other places of the hit's text: ``also in:``
    and each as ``folder  ·  rel/path  ·  line N``, with how many more when not all are listed."""
    places = [
        f"{copy.folder}  ·  {copy.rel}  ·  line {copy.start_line}"
        + (f"  ·  page {copy.page}" if copy.page is not None else "")
        for copy in hit.copies
    ]
    more = hit.copy_count - len(places)
    return "also in: " + "; ".join(places) + (f" (+{more} more)" if more > 0 else "")


def fence_for(text: str) -> str:
    """A backtick fence for ``text``: at least three backticks, longer than any run inside it."""
    return "`" * max(3, longest_backtick_run(text) + 1)


def longest_backtick_run(text: str) -> int:
    """The length of the longest run of consecutive backticks in ``text`` (0 if none)."""
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return longest


def join_capped(sections: Sequence[str]) -> str:
    """The sections joined by blank lines, stopping before :data:`TEXT_CAP_BYTES` is passed.

    A note after the last section shown says how many were shown; a first section larger than
    the cap is itself cut (at a character boundary) and marked.
    """
    fitting = count_fitting(sections)
    shown = list(sections[:fitting])
    if fitting < len(sections):
        if not shown:
            shown.append(cut_bytes(sections[0], TEXT_CAP_BYTES) + f"\n…[cut at {TEXT_CAP}]")
        shown.append(
            f"({len(shown)} of {len(sections)} results shown: the block is capped at "
            f"{TEXT_CAP}. Lower k or contextLines.)"
        )
    return "\n\n".join(shown)


def count_fitting(sections: Sequence[str]) -> int:
    """How many of the first sections, joined by blank lines, fit in :data:`TEXT_CAP_BYTES`."""
    size = 0
    for count, section in enumerate(sections):
        size += len(section.encode("utf-8", "surrogateescape")) + 2  # a name's bytes
        if size > TEXT_CAP_BYTES:
            return count
    return len(sections)


def cut_bytes(text: str, limit: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 encoding fits in ``limit`` bytes (a file
    name's bytes that are not UTF-8, in a header, are left out)."""
    return text.encode("utf-8", "surrogateescape")[:limit].decode("utf-8", "ignore")


def read_lines(
    locator: Locator,
    path: str,
    start_line: int | None = None,
    end_line: int | None = None,
    *,
    is_capped: bool = True,
) -> LineRange:
    """Lines ``start_line``–``end_line`` (1-based, inclusive; default the whole file) of the
    file at ``path``, capped at :data:`TEXT_CAP_BYTES` unless ``is_capped`` is False (the
    extracted text is capped at the file size cap anyway).

    ``locator`` confines the read to the configured folders and their listings
    (:class:`PathRefusedError` otherwise, or when the file cannot be opened); an end past the
    last line is clamped, a start past it is a :class:`UsageError`.
    """
    _check_range(start_line, end_line)
    located = locator.locate(path)
    try:
        text = read_text(located.entry, locator.ignore).text
    except OSError as exc:
        raise PathRefusedError(f"Cannot read {path}: {exc.strerror or exc}.") from exc
    lines = split_lines(text)
    first, last = start_line or 1, min(end_line or len(lines), len(lines))
    if first > len(lines) and lines:
        raise UsageError(f"Line {first} is past the end of {path} ({len(lines)} lines).")
    if is_capped:
        body, shown, note = take_lines(lines, first, last)
    else:
        body, shown, note = "\n".join(lines[first - 1 : last]), last, ""
    where = str(located.entry.path)
    return LineRange(
        located.root.name, located.entry.rel, first, shown, len(lines), body, note, where
    )


def _check_range(start_line: int | None, end_line: int | None) -> None:
    for name, value in (("startLine", start_line), ("endLine", end_line)):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be at least 1, got {value}.")
    if start_line is not None and end_line is not None and start_line > end_line:
        raise UsageError(f"startLine ({start_line}) is after endLine ({end_line}).")


def take_lines(lines: Sequence[str], first: int, last: int) -> tuple[str, int, str]:
    """(text, last line shown, note) for lines ``first``–``last`` within :data:`TEXT_CAP_BYTES`.

    The note is empty when every line fits. Otherwise it says where to continue; a single line
    longer than the cap is cut at a character boundary.
    """
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
            cut_bytes(lines[first - 1], TEXT_CAP_BYTES),
            first,
            f"[line {first} is longer than {TEXT_CAP} and was cut. "
            f"Continue with startLine={first + 1}.]",
        )
    return (
        "\n".join(lines[first - 1 : shown]),
        shown,
        f"[cat_file returns at most {TEXT_CAP} per call: lines {first}–{shown} shown. "
        f"Ask for the rest with startLine={shown + 1}.]",
    )
