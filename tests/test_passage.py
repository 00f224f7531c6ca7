"""Passages: gather blocks (aligned context, fallbacks, fences, the byte cap) and line ranges."""

from __future__ import annotations

from pathlib import Path

import pytest

from semsearch.errors import PathRefusedError, SemsearchError, UsageError
from semsearch.files.access import Locator
from semsearch.files.ignore import IgnoreSettings
from semsearch.index import Index
from semsearch.search.hits import Hit
from semsearch.search.passage import (
    TEXT_CAP_BYTES,
    LineRange,
    Passage,
    cut_bytes,
    fence_for,
    format_section,
    gather_block,
    join_capped,
    longest_backtick_run,
    read_lines,
    read_passage,
    split_lines,
)
from tests.conftest import write_tree
from tests.docgen import write_pdf

NUMBERED = "".join(f"line {n}\n" for n in range(1, 21))  # "line 1" … "line 20"


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    """A configured folder named "notes" with a text, a PDF, a CRLF and a latin-1 file."""
    root = write_tree(
        tmp_path / "notes",
        {
            "numbered.txt": NUMBERED,
            "empty.txt": "",
            "crlf.txt": b"one\r\ntwo\r\nthree\r\n",
            "latin1.txt": "café\nnaïve\n".encode("latin-1"),
            "utf8.md": "# Überblick\n\nEin Absatz über Fließtext.\n",
        },
    )
    write_pdf(root / "paper.pdf", ["Page one text\nsecond line", "Page two text"])
    return root


@pytest.fixture
def locator(notes: Path) -> Locator:
    return Locator([notes], IgnoreSettings())


def make_hit(root: Path, rel: str, start: int, end: int, text: str, page: int | None = None) -> Hit:
    return Hit(
        path=str(root / rel),
        folder=root.name,
        folder_path=str(root),
        rel=rel,
        start_line=start,
        end_line=end,
        page=page,
        score=0.5,
        text=text,
    )


def numbered(first: int, last: int) -> str:
    return "\n".join(f"line {n}" for n in range(first, last + 1))


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("", []),
        ("a", ["a"]),
        ("a\n", ["a"]),
        ("a\nb", ["a", "b"]),
        ("a\n\n", ["a", ""]),
        ("\n", [""]),
        ("a\r\nb", ["a\r", "b"]),
    ],
)
def test_split_lines_numbers_lines_as_search_does(text: str, lines: list[str]) -> None:
    assert split_lines(text) == lines


@pytest.mark.parametrize(
    ("start", "end", "extra", "first", "last"),
    [
        (8, 10, 0, 8, 10),
        (8, 10, 3, 5, 13),
        (2, 4, 5, 1, 9),  # clamped at the top of the file
        (18, 20, 5, 13, 20),  # clamped at the end
        (1, 20, 100, 1, 20),
    ],
)
def test_context_lines_are_exactly_aligned(
    notes: Path, locator: Locator, start: int, end: int, extra: int, first: int, last: int
) -> None:
    hit = make_hit(notes, "numbered.txt", start, end, numbered(start, end) + "\n")
    assert read_passage(hit, extra, locator) == Passage(first, numbered(first, last))


def test_context_around_real_hits_of_an_index(tmp_path: Path, hash_index: Index) -> None:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    text = "".join(f"{word} paragraph about {word}s and more {word}s.\n\n" * 30 for word in words)
    root = write_tree(tmp_path / "book", {"long.md": text})
    hash_index.update([root])
    hits = hash_index.search("golf paragraph golfs", k=3)
    assert len(hits) == 3 and all(hit.start_line > 3 for hit in hits)
    lines = split_lines(text)
    locator = Locator([root], IgnoreSettings())
    for hit in hits:
        first, last = hit.start_line - 3, min(len(lines), hit.end_line + 3)
        passage = read_passage(hit, 3, locator)
        assert passage == Passage(first, "\n".join(lines[first - 1 : last]))
        assert hit.text.removesuffix("\n") in passage.text


@pytest.mark.parametrize(
    ("rel", "text", "page", "note"),
    [
        ("numbered.txt", "a paragraph that was edited away", None, "file changed since indexing"),
        ("numbered.txt", numbered(7, 9), None, "file changed since indexing"),  # shifted
        ("paper.pdf", "Page two text", 2, "no context for PDF/DOCX"),
        ("report.docx", "Some paragraph", None, "no context for PDF/DOCX"),
        ("gone.txt", "deleted since indexing", None, "file not readable"),
    ],
)
def test_context_falls_back_to_the_indexed_text(
    notes: Path, locator: Locator, rel: str, text: str, page: int | None, note: str
) -> None:
    hit = make_hit(notes, rel, 8, 10, text + "\n", page)
    assert read_passage(hit, 2, locator) == Passage(8, text, f"indexed text ({note})")


def test_context_of_a_file_outside_the_folders_is_the_indexed_text(
    tmp_path: Path, locator: Locator
) -> None:
    outside = write_tree(tmp_path / "elsewhere", {"numbered.txt": NUMBERED})
    hit = make_hit(outside, "numbered.txt", 8, 10, numbered(8, 10))
    assert read_passage(hit, 2, locator).note == "indexed text (file not readable)"


def test_negative_context_is_refused(notes: Path, locator: Locator) -> None:
    with pytest.raises(UsageError, match="at least 0"):
        read_passage(make_hit(notes, "numbered.txt", 1, 2, "line 1"), -1, locator)


@pytest.mark.parametrize(
    ("text", "run", "fence"),
    [
        ("", 0, "```"),
        ("no ticks", 0, "```"),
        ("`inline` code", 1, "```"),
        ("```py\nx = 1\n```", 3, "````"),
        ("a ````` b `` c", 5, "``````"),
    ],
)
def test_fence_is_longer_than_any_backtick_run(text: str, run: int, fence: str) -> None:
    assert longest_backtick_run(text) == run
    assert fence_for(text) == fence


def test_section_header_and_fence(notes: Path) -> None:
    hit = make_hit(notes, "paper.pdf", 3, 3, "```\ncode\n```", page=2)
    section = format_section(2, 5, hit, Passage(3, hit.text, "indexed text (no context)"))
    assert section == (
        "### [2/5]  notes  ·  paper.pdf  ·  line 3  ·  page 2  ·  score 0.500  ·  "
        "indexed text (no context)\n````\n```\ncode\n```\n````"
    )


def test_gather_block_of_two_hits(notes: Path, locator: Locator) -> None:
    hits = [
        make_hit(notes, "numbered.txt", 5, 5, "line 5\n"),
        make_hit(notes, "paper.pdf", 4, 4, "Page two text", page=2),
    ]
    assert gather_block(hits, 1, locator) == (
        "### [1/2]  notes  ·  numbered.txt  ·  line 4  ·  score 0.500\n"
        "```\nline 4\nline 5\nline 6\n```\n\n"
        "### [2/2]  notes  ·  paper.pdf  ·  line 4  ·  page 2  ·  score 0.500  ·  "
        "indexed text (no context for PDF/DOCX)\n```\nPage two text\n```"
    )


def test_gather_block_without_hits(locator: Locator) -> None:
    assert gather_block([], 3, locator) == "No results."


def test_join_capped_keeps_whole_sections_under_the_cap() -> None:
    third = "x" * (TEXT_CAP_BYTES // 3 - 2)  # three of them and their separators just fit
    block = join_capped([third, third, third, "tail"])
    assert block == (
        f"{third}\n\n{third}\n\n{third}\n\n(3 of 4 results shown: the block is capped at "
        "256 KiB. Lower k or contextLines.)"
    )
    assert join_capped(["a", "b"]) == "a\n\nb"


def test_join_capped_cuts_a_first_section_larger_than_the_cap() -> None:
    huge = "é" * TEXT_CAP_BYTES  # 2 bytes a character: the cut falls between characters
    block = join_capped([huge, "next"])
    shown, note = block.rsplit("\n\n", 1)
    assert shown == "é" * (TEXT_CAP_BYTES // 2) + "\n…[cut at 256 KiB]"
    assert note.startswith("(1 of 2 results shown: the block is capped at 256 KiB.")


@pytest.mark.parametrize(
    ("text", "limit", "cut"),
    [("abc", 2, "ab"), ("abc", 10, "abc"), ("ééé", 3, "é"), ("ééé", 4, "éé"), ("a€", 3, "a")],
)
def test_cut_bytes_never_splits_a_character(text: str, limit: int, cut: str) -> None:
    assert cut_bytes(text, limit) == cut


@pytest.mark.parametrize(
    ("start", "end", "first", "last", "text"),
    [
        (None, None, 1, 20, numbered(1, 20)),
        (5, None, 5, 20, numbered(5, 20)),
        (None, 3, 1, 3, numbered(1, 3)),
        (7, 7, 7, 7, "line 7"),
        (18, 99, 18, 20, numbered(18, 20)),  # the end is clamped
        (20, None, 20, 20, "line 20"),
    ],
)
def test_read_lines_ranges(
    notes: Path,
    locator: Locator,
    start: int | None,
    end: int | None,
    first: int,
    last: int,
    text: str,
) -> None:
    got = read_lines(locator, str(notes / "numbered.txt"), start, end)
    assert got == LineRange("notes", "numbered.txt", first, last, 20, text)


@pytest.mark.parametrize(
    ("rel", "text"),
    [
        ("crlf.txt", "one\ntwo\nthree"),
        ("latin1.txt", "café\nnaïve"),
        ("utf8.md", "# Überblick\n\nEin Absatz über Fließtext."),
        ("paper.pdf", "Page one text\nsecond line\n\nPage two text"),
    ],
)
def test_read_lines_reads_as_the_indexer_does(
    notes: Path, locator: Locator, rel: str, text: str
) -> None:
    got = read_lines(locator, str(notes / rel))
    assert (got.text, got.line_count) == (text, len(split_lines(text)))


def test_read_lines_as_text(notes: Path, locator: Locator) -> None:
    assert read_lines(locator, str(notes / "numbered.txt"), 2, 3).as_text() == (
        "# notes  ·  numbered.txt  ·  lines 2–3 of 20\n\nline 2\nline 3"
    )
    empty = read_lines(locator, str(notes / "empty.txt"))
    assert empty == LineRange("notes", "empty.txt", 1, 0, 0, "")
    assert empty.as_text() == "# notes  ·  empty.txt  ·  empty file\n\n"


@pytest.mark.parametrize(
    ("start", "end", "error", "message"),
    [
        (21, None, UsageError, r"Line 21 is past the end of .* \(20 lines\)"),
        (21, 30, UsageError, "past the end"),
        (5, 3, UsageError, r"startLine \(5\) is after endLine \(3\)"),
        (0, None, UsageError, "startLine must be at least 1"),
        (None, -2, UsageError, "endLine must be at least 1"),
    ],
)
def test_read_lines_bad_ranges(
    notes: Path,
    locator: Locator,
    start: int | None,
    end: int | None,
    error: type[SemsearchError],
    message: str,
) -> None:
    with pytest.raises(error, match=message):
        read_lines(locator, str(notes / "numbered.txt"), start, end)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("{tmp}/elsewhere.txt", "not inside any configured folder"),
        ("{tmp}/notes/missing.txt", "not found"),
        ("notes/numbered.txt", "not an absolute path"),
    ],
)
def test_read_lines_refuses_paths(
    tmp_path: Path, locator: Locator, path: str, message: str
) -> None:
    (tmp_path / "elsewhere.txt").write_text("secret\n")
    with pytest.raises(PathRefusedError, match=message):
        read_lines(locator, path.format(tmp=tmp_path))


def test_read_lines_stops_at_the_cap_and_says_where_to_continue(
    notes: Path, locator: Locator
) -> None:
    line = f"line 000000 {'z' * 50}"  # 62 bytes and a newline
    write_tree(notes, {"big.txt": f"{line}\n" * 6000})
    shown = TEXT_CAP_BYTES // (len(line) + 1)
    got = read_lines(locator, str(notes / "big.txt"))
    assert (got.first_line, got.last_line, got.line_count) == (1, shown, 6000)
    assert len(got.text.encode()) <= TEXT_CAP_BYTES
    assert got.note == (
        f"[cat_file returns at most 256 KiB per call: lines 1–{shown} shown. "
        f"Ask for the rest with startLine={shown + 1}.]"
    )
    rest = read_lines(locator, str(notes / "big.txt"), shown + 1)
    assert (rest.first_line, rest.last_line, rest.note) == (shown + 1, 6000, "")


def test_read_lines_cuts_a_line_longer_than_the_cap(notes: Path, locator: Locator) -> None:
    huge = "ü" * (TEXT_CAP_BYTES // 2 + 10)  # 2 bytes a character: the cut falls between two
    write_tree(notes, {"huge.txt": f"short\n{huge}\nafter\n"})
    got = read_lines(locator, str(notes / "huge.txt"), 2)
    assert (got.first_line, got.last_line, got.line_count) == (2, 2, 3)
    assert got.text == "ü" * (TEXT_CAP_BYTES // 2)
    assert got.note == "[line 2 is longer than 256 KiB and was cut. Continue with startLine=3.]"
