"""Split text into overlapping chunks that fit the embedding model's token window.

The text is tokenised once; everything after that works on character offsets, so chunking is
linear in the size of the text. Units, from coarse to fine:

* a *paragraph* is a maximal run of non-blank lines (a line holding only whitespace, including a
  stray ``"\\r"`` from CRLF text, is blank);
* a paragraph above the hard limit is split into its *lines*;
* a line above the hard limit is split into *segments* between tokens, cutting before a token
  that starts a new word where possible (never inside a WordPiece ``##`` continuation if a
  better cut exists).

These pieces are packed greedily into chunks of about ``target_tokens``. Every chunk after the
first starts with up to ``overlap_tokens`` tokens of the previous chunk's tail, starting at a line
start when the whole lines in that tail hold at least half of the budget and at a word start
otherwise. With ``whole_lines`` (code: a hit must not start inside a line, cutting off a ``def``)
the overlap is the whole lines that fit in the budget, or nothing when the tail's last line alone
is longer; a chunk then starts inside a line only where a line over the hard limit was cut into
segments. The overlap never repeats the whole previous chunk and never pushes a chunk over
``hard_token_limit``.

*An edited text* can be chunked to keep the chunks of its earlier version: given the old chunk
texts, a chunk that starts where an old one (still found verbatim) started ends where that one
ended, and the chunk an edit touched ends where the next old chunk then starts after the usual
overlap, as far as the hard limit allows. So an edit is re-embedded as the one or two chunks it
touches. Greedy packing alone would shift every later boundary of a long run of short lines,
because each chunk's end depends on where it started.

Chunk text is always a verbatim slice of the source; only leading blank lines and trailing
whitespace are trimmed from the slice.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left, bisect_right
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from semsearch.config import HARD_TOKEN_LIMIT, OVERLAP_TOKENS, TARGET_TOKENS
from semsearch.errors import ConfigError

_NON_SPACE = re.compile(r"\S")

# Code-point ranges BERT's basic tokenizer treats as one word per character.
_IDEOGRAPH_RANGES = (
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2CEAF),
    (0x2F800, 0x2FA1F),
)

# Ranks of a cut between two tokens: higher is a cleaner place to cut.
_RANK_GLUED = 0  # inside a run of word characters, e.g. before a "##" continuation
_RANK_PUNCT = 1  # next to punctuation or an ideograph: a word boundary without a space
_RANK_SPACE = 2  # after whitespace


class TokenSpans(Protocol):
    """Anything that can report where the model's tokens lie in a text: every
    :class:`~semsearch.model.embedder.Embedder` does."""

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """(start, end) character offsets in `text` of each model token, in order.

        Special tokens such as [CLS] and [SEP] are left out.
        """
        ...


# Places of an earlier version's chunks looked up in an edited text, at most.
MAX_OLD_PLACES = 100_000


@dataclass(frozen=True)
class ChunkSettings:
    """Chunk sizes in model tokens, not counting the [CLS]/[SEP] special tokens."""

    target_tokens: int = TARGET_TOKENS  # documents: DOCUMENT_TARGET_TOKENS (the indexer picks)
    overlap_tokens: int = OVERLAP_TOKENS  # documents: DOCUMENT_OVERLAP_TOKENS
    hard_token_limit: int = HARD_TOKEN_LIMIT
    whole_lines: bool = False  # overlap in whole lines only (see the module docstring)

    def __post_init__(self) -> None:
        if not 1 <= self.target_tokens <= self.hard_token_limit:
            raise ConfigError(
                f"Chunk target_tokens {self.target_tokens} must be between 1 and "
                f"hard_token_limit {self.hard_token_limit}. Lower target_tokens."
            )
        if not 0 <= self.overlap_tokens < self.target_tokens:
            raise ConfigError(
                f"Chunk overlap_tokens {self.overlap_tokens} must be at least 0 and below "
                f"target_tokens {self.target_tokens}. Lower overlap_tokens."
            )


@dataclass(frozen=True)
class Chunk:
    """One chunk: a verbatim slice of the source text and where it lies."""

    text: str  # == source[start_offset:end_offset]
    start_offset: int  # Python str index (code points)
    end_offset: int
    start_line: int  # 1-based line of start_offset
    end_line: int  # 1-based line of the chunk's last character, inclusive
    token_count: int  # model tokens in the slice, without special tokens


class _Doc:
    """The source text with its token starts and line starts, for O(log n) look-ups."""

    def __init__(self, text: str, spans: list[tuple[int, int]]) -> None:
        self.text = text
        self.starts = [start for start, _ in spans]
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def is_line_end(self, offset: int) -> bool:
        """True when only whitespace follows `offset` on its line."""
        newline = self.text.find("\n", offset)
        end = len(self.text) if newline < 0 else newline
        return _NON_SPACE.search(self.text, offset, end) is None

    def is_long_line(self, offset: int, limit: int) -> bool:
        """True when the line holding `offset` has more than `limit` tokens."""
        return self.count(*self.line_span(self.line_of(offset) - 1)) > limit

    def line_span(self, line: int) -> tuple[int, int]:
        """(start, end) of 0-based `line`, without its newline."""
        is_last = line + 1 == len(self.line_starts)
        end = len(self.text) if is_last else self.line_starts[line + 1] - 1
        return self.line_starts[line], end

    def count(self, start: int, end: int) -> int:
        """Number of tokens that start in text[start:end]."""
        return bisect_left(self.starts, end) - bisect_left(self.starts, start)

    def token_at(self, offset: int) -> int:
        """Index of the first token starting at or after `offset`."""
        return bisect_left(self.starts, offset)

    def line_of(self, offset: int) -> int:
        """1-based line number of the character at `offset`."""
        return bisect_right(self.line_starts, offset)

    def cut_rank(self, token: int) -> int:
        """How cleanly the text can be cut just before `token` (0 < token < len(starts))."""
        offset = self.starts[token]
        before, after = self.text[offset - 1 : offset], self.text[offset : offset + 1]
        if before.isspace() or not after:
            return _RANK_SPACE
        if _is_word_break(before) or _is_word_break(after):
            return _RANK_PUNCT
        return _RANK_GLUED


def _is_word_break(char: str) -> bool:
    """True if BERT's pre-tokenizer always ends a word at `char` (punctuation or ideograph)."""
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    if any(low <= code <= high for low, high in _IDEOGRAPH_RANGES):
        return True
    return unicodedata.category(char).startswith("P")


def _best_cut(doc: _Doc, candidates: range) -> int:
    """The first of the (non-empty) candidate tokens with the highest cut rank."""
    best, best_rank = candidates[0], -1
    for token in candidates:
        rank = doc.cut_rank(token)
        if rank > best_rank:
            best, best_rank = token, rank
            if rank == _RANK_SPACE:
                break
    return best


def chunk_text(
    text: str,
    tokenizer: TokenSpans,
    settings: ChunkSettings = ChunkSettings(),
    previous: Collection[str] = (),
) -> list[Chunk]:
    """Split `text` into verbatim, overlapping chunks that each fit the model window.

    `tokenizer` is called exactly once, on the whole text. Whitespace-only text gives [].
    `previous`: the chunk texts of an earlier version of this text; chunks end where those
    ended where the sizes allow (see the module docstring). Without it the result depends on
    `text` alone.
    """
    if not text.strip():
        return []
    doc = _Doc(text, tokenizer.token_spans(text))
    pieces = _pieces(doc, settings)
    old = _OldChunks(doc, previous) if previous else None
    return [_make_chunk(doc, start, end) for start, end in _pack(doc, pieces, old, settings)]


class _OldChunks:
    """Where the chunks of an earlier version of the text lie in this one, verbatim: each
    occurrence's start and end (as :func:`_make_chunk` trims them)."""

    def __init__(self, doc: _Doc, previous: Collection[str]) -> None:
        self.ends: dict[int, list[int]] = {}
        for old in set(previous):
            at = doc.text.find(old) if old else -1
            while at >= 0 and len(self.ends) < MAX_OLD_PLACES:
                self.ends.setdefault(at, []).append(at + len(old))
                at = doc.text.find(old, at + 1)
        self.starts = sorted(self.ends)


def _trimmed_start(doc: _Doc, start: int) -> int:
    """Where a chunk that starts at `start` starts once leading blank lines are trimmed."""
    match = _NON_SPACE.search(doc.text, start)
    if match is None:
        return start
    newline = doc.text.rfind("\n", start, match.start())
    return newline + 1 if newline >= 0 else start


def _old_end(
    doc: _Doc, old: _OldChunks, start: int, new_start: int, settings: ChunkSettings
) -> tuple[int, int] | None:
    """(start, end) for the chunk that takes the text from `new_start` on, its overlap starting
    at `start` or later, chosen to keep an earlier version's chunks: the old chunk that starts
    in that overlap, else an end from which the usual overlap starts where the next old chunk
    does. None if neither fits the hard limit."""
    limit = settings.hard_token_limit
    first = _trimmed_start(doc, new_start)
    low = bisect_left(old.starts, _trimmed_start(doc, start))
    for at in old.starts[low : bisect_right(old.starts, first)]:
        for end in sorted(old.ends[at], reverse=True):
            if settings.whole_lines and not (doc.is_line_end(end) or doc.is_long_line(end, limit)):
                continue  # the next chunk would start inside a line
            if end > new_start and doc.count(at, end) <= limit:
                return at, end
    following = bisect_right(old.starts, first)
    if following == len(old.starts):
        return None
    target = old.starts[following]
    line = doc.line_of(target)  # candidate ends: each line end after the next old start
    while line < len(doc.line_starts):
        end = doc.line_starts[line] - 1
        line += 1
        if doc.count(start, end) > limit:
            return None
        overlap = _overlap_start(doc, (start, end), settings.overlap_tokens, settings.whole_lines)
        if _trimmed_start(doc, overlap) == target:
            return start, end
    return None


def _paragraphs(doc: _Doc) -> list[tuple[int, int]]:
    """(start, end) of each maximal run of non-blank lines, `end` before its last newline."""
    paragraphs: list[tuple[int, int]] = []
    open_start: int | None = None
    for line in range(len(doc.line_starts)):
        start, end = doc.line_span(line)
        is_blank = _NON_SPACE.search(doc.text, start, end) is None
        if is_blank and open_start is not None:
            paragraphs.append((open_start, start - 1))
            open_start = None
        elif not is_blank and open_start is None:
            open_start = start
    if open_start is not None:
        paragraphs.append((open_start, len(doc.text)))
    return paragraphs


def _pieces(doc: _Doc, settings: ChunkSettings) -> list[tuple[int, int]]:
    """Contiguous (start, end) pieces of text, each within the hard token limit."""
    limit = settings.hard_token_limit
    pieces: list[tuple[int, int]] = []
    for start, end in _paragraphs(doc):
        if doc.count(start, end) <= limit:
            pieces.append((start, end))
            continue
        for line in range(doc.line_of(start) - 1, doc.line_of(end - 1)):
            line_start, line_end = doc.line_span(line)
            if doc.count(line_start, line_end) <= limit:
                pieces.append((line_start, line_end))
            else:
                pieces.extend(_split_line(doc, line_start, line_end, settings))
    return pieces


def _split_line(doc: _Doc, start: int, end: int, settings: ChunkSettings) -> list[tuple[int, int]]:
    """Split one over-long line between tokens into segments that leave room for overlap."""
    size = settings.target_tokens - settings.overlap_tokens
    segments: list[tuple[int, int]] = []
    first, stop = doc.token_at(start), doc.token_at(end)
    while stop - first > size:
        cut = _best_cut(doc, range(first + size, first + size // 2, -1))
        segments.append((start, doc.starts[cut]))
        first, start = cut, doc.starts[cut]
    segments.append((start, end))
    return segments


def _pack(
    doc: _Doc, pieces: list[tuple[int, int]], old: _OldChunks | None, settings: ChunkSettings
) -> list[tuple[int, int]]:
    """Greedily pack pieces into (start, end) chunk ranges, each with overlap after the first.

    A chunk ends at the last piece that keeps it within ``target_tokens``, unless `old` chunks
    give an end within the hard limit (:func:`_old_end`); a piece that end falls inside is cut
    there. Unchanged text therefore comes out chunked as before.
    """
    ranges: list[tuple[int, int]] = []
    pieces = list(pieces)
    index = 0
    while index < len(pieces):
        new_start, new_end = pieces[index]
        index += 1
        start = new_start
        if ranges:
            start = _overlap_start(doc, ranges[-1], settings.overlap_tokens, settings.whole_lines)
        while index < len(pieces) and doc.count(start, pieces[index][1]) <= settings.target_tokens:
            new_end = pieces[index][1]
            index += 1
        kept = _old_end(doc, old, start, new_start, settings) if old else None
        if kept is not None:
            start, new_end = kept
            index = bisect_left(pieces, new_end, key=lambda piece: piece[1])
            if index < len(pieces) and not doc.text[new_end : pieces[index][1]].strip():
                new_end = pieces[index][1]  # the untrimmed end, as packing alone would give
                index += 1
            elif index < len(pieces) and pieces[index][0] < new_end:
                pieces[index] = (new_end, pieces[index][1])  # the old end falls inside it
        spare = settings.hard_token_limit - doc.count(new_start, new_end)
        if ranges and doc.count(start, new_start) > spare:
            start = _overlap_start(doc, ranges[-1], spare, settings.whole_lines)
        ranges.append((start, new_end))
    return ranges


def _overlap_start(
    doc: _Doc, previous: tuple[int, int], budget: int, whole_lines: bool = False
) -> int:
    """Where the next chunk starts inside `previous` so it repeats at most `budget` tokens.

    Returns previous's end (no overlap) when there is no room, or with `whole_lines` when no
    line starts in the tail (unless previous ends inside a line: then the next chunk starts
    inside it anyway). The overlap always leaves out the previous chunk's first token, so it
    can never repeat the whole previous chunk.
    """
    prev_start, prev_end = previous
    first, stop = doc.token_at(prev_start), doc.token_at(prev_end)
    budget = min(budget, stop - first - 1)
    if budget <= 0:
        return prev_end
    earliest = stop - budget
    line = bisect_right(doc.line_starts, doc.starts[earliest - 1])
    if line < len(doc.line_starts) and doc.line_starts[line] <= doc.starts[stop - 1]:
        line_start = doc.line_starts[line]
        if whole_lines or 2 * doc.count(line_start, prev_end) >= budget:
            return line_start
    if whole_lines and doc.is_line_end(prev_end):
        return prev_end
    return doc.starts[_best_cut(doc, range(earliest, stop))]


def _make_chunk(doc: _Doc, start: int, end: int) -> Chunk:
    """The chunk for text[start:end] minus leading blank lines and trailing whitespace."""
    text = doc.text
    while end > start and text[end - 1].isspace():
        end -= 1
    match = _NON_SPACE.search(text, start, end)
    newline = text.rfind("\n", start, match.start() if match else end)
    if newline >= 0:
        start = newline + 1
    return Chunk(
        text=text[start:end],
        start_offset=start,
        end_offset=end,
        start_line=doc.line_of(start),
        end_line=doc.line_of(end - 1),
        token_count=doc.count(start, end),
    )
