"""A pure-Python BERT WordPiece tokenizer: exactly what the ``tokenizers`` library gives.

semsearch reads ``.ids`` and ``.offsets`` of ``Tokenizer.encode`` / ``encode_batch`` on a BERT
``tokenizer.json`` (truncation and padding off). That library costs ~38 MB of dependencies, so
this module redoes the pipeline with the standard library:

1. Added tokens (``[CLS]``, ``[UNK]``, …) are matched in the raw text, leftmost-longest, even
   with ``add_special_tokens=False``; the text between them goes through steps 2-4.
2. ``BertNormalizer``: drop NUL, U+FFFD and control, format and private-use characters; turn
   whitespace into spaces; put spaces around CJK ideographs; NFD and drop non-spacing marks
   (``strip_accents``, by default ``lowercase``); lowercase.
3. ``BertPreTokenizer``: split at spaces and around each punctuation character.
4. ``WordPiece``: greedy longest match first; a word with no split, or longer than
   ``max_input_chars_per_word``, is one ``[UNK]`` spanning the word.
5. ``TemplateProcessing`` or ``BertProcessing``: ``[CLS] … [SEP]``, offsets (0, 0).

Offsets index the original ``str``: each normalised character points back at the input
character it came from, as the library's alignments do.

The library's character classes come from old Unicode tables (categories: Unicode 8; NFD:
Unicode 9). The tables below are its own sets, measured code point by code point against
``tokenizers`` 0.23, and do not depend on Python's ``unicodedata``. NFD and case mapping do:
on Python 3.11 they differ from the library only at _NO_DECOMPOSE and _LOWER_EXTRA; other
versions differ at more code points newer than Unicode 9, none in a BERT vocabulary.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
import unicodedata
from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Code-point sets of the library, as "start-end" hex ranges (see the module docstring).
# Removed by clean_text: NUL, U+FFFD and Cc/Cf/Co of Unicode 8, except tab, LF and CR.
_REMOVED = (
    "0-8 b-c e-1f 7f-9f ad 600-605 61c 6dd 70f 180e 200b-200f 202a-202e 2060-2064 2066-206f "
    "e000-f8ff feff fff9-fffb fffd 110bd 1bca0-1bca3 1d173-1d17a e0001 e0020-e007f f0000-ffffd "
    "100000-10fffd"
)
# Turned into a space by clean_text (Rust's char::is_whitespace, minus the controls above).
_SPACE = "9-a d a0 1680 2000-200a 2028-2029 202f 205f 3000"
# BertPreTokenizer punctuation: ASCII punctuation plus Unicode 8 categories P*.
_PUNCT = (
    "21-2f 3a-40 5b-60 7b-7e a1 a7 ab b6-b7 bb bf 37e 387 55a-55f 589-58a 5be 5c0 5c3 5c6 5f3-5f4 "
    "609-60a 60c-60d 61b 61e-61f 66a-66d 6d4 700-70d 7f7-7f9 830-83e 85e 964-965 970 af0 df4 e4f "
    "e5a-e5b f04-f12 f14 f3a-f3d f85 fd0-fd4 fd9-fda 104a-104f 10fb 1360-1368 1400 166d-166e "
    "169b-169c 16eb-16ed 1735-1736 17d4-17d6 17d8-17da 1800-180a 1944-1945 1a1e-1a1f 1aa0-1aa6 "
    "1aa8-1aad 1b5a-1b60 1bfc-1bff 1c3b-1c3f 1c7e-1c7f 1cc0-1cc7 1cd3 2010-2027 2030-2043 "
    "2045-2051 2053-205e 207d-207e 208d-208e 2308-230b 2329-232a 2768-2775 27c5-27c6 27e6-27ef "
    "2983-2998 29d8-29db 29fc-29fd 2cf9-2cfc 2cfe-2cff 2d70 2e00-2e2e 2e30-2e42 3001-3003 "
    "3008-3011 3014-301f 3030 303d 30a0 30fb a4fe-a4ff a60d-a60f a673 a67e a6f2-a6f7 a874-a877 "
    "a8ce-a8cf a8f8-a8fa a8fc a92e-a92f a95f a9c1-a9cd a9de-a9df aa5c-aa5f aade-aadf aaf0-aaf1 "
    "abeb fd3e-fd3f fe10-fe19 fe30-fe52 fe54-fe61 fe63 fe68 fe6a-fe6b ff01-ff03 ff05-ff0a "
    "ff0c-ff0f ff1a-ff1b ff1f-ff20 ff3b-ff3d ff3f ff5b ff5d ff5f-ff65 10100-10102 1039f 103d0 "
    "1056f 10857 1091f 1093f 10a50-10a58 10a7f 10af0-10af6 10b39-10b3f 10b99-10b9c 11047-1104d "
    "110bb-110bc 110be-110c1 11140-11143 11174-11175 111c5-111c9 111cd 111db 111dd-111df "
    "11238-1123d 112a9 114c6 115c1-115d7 11641-11643 1173c-1173e 12470-12474 16a6e-16a6f 16af5 "
    "16b37-16b3b 16b44 1bc9f 1da87-1da8b"
)
# Dropped by strip_accents after NFD: Unicode 8 category Mn.
_MARK = (
    "300-36f 483-487 591-5bd 5bf 5c1-5c2 5c4-5c5 5c7 610-61a 64b-65f 670 6d6-6dc 6df-6e4 6e7-6e8 "
    "6ea-6ed 711 730-74a 7a6-7b0 7eb-7f3 816-819 81b-823 825-827 829-82d 859-85b 8e3-902 93a 93c "
    "941-948 94d 951-957 962-963 981 9bc 9c1-9c4 9cd 9e2-9e3 a01-a02 a3c a41-a42 a47-a48 a4b-a4d "
    "a51 a70-a71 a75 a81-a82 abc ac1-ac5 ac7-ac8 acd ae2-ae3 b01 b3c b3f b41-b44 b4d b56 b62-b63 "
    "b82 bc0 bcd c00 c3e-c40 c46-c48 c4a-c4d c55-c56 c62-c63 c81 cbc cbf cc6 ccc-ccd ce2-ce3 d01 "
    "d41-d44 d4d d62-d63 dca dd2-dd4 dd6 e31 e34-e3a e47-e4e eb1 eb4-eb9 ebb-ebc ec8-ecd f18-f19 "
    "f35 f37 f39 f71-f7e f80-f84 f86-f87 f8d-f97 f99-fbc fc6 102d-1030 1032-1037 1039-103a "
    "103d-103e 1058-1059 105e-1060 1071-1074 1082 1085-1086 108d 109d 135d-135f 1712-1714 "
    "1732-1734 1752-1753 1772-1773 17b4-17b5 17b7-17bd 17c6 17c9-17d3 17dd 180b-180d 18a9 "
    "1920-1922 1927-1928 1932 1939-193b 1a17-1a18 1a1b 1a56 1a58-1a5e 1a60 1a62 1a65-1a6c "
    "1a73-1a7c 1a7f 1ab0-1abd 1b00-1b03 1b34 1b36-1b3a 1b3c 1b42 1b6b-1b73 1b80-1b81 1ba2-1ba5 "
    "1ba8-1ba9 1bab-1bad 1be6 1be8-1be9 1bed 1bef-1bf1 1c2c-1c33 1c36-1c37 1cd0-1cd2 1cd4-1ce0 "
    "1ce2-1ce8 1ced 1cf4 1cf8-1cf9 1dc0-1df5 1dfc-1dff 20d0-20dc 20e1 20e5-20f0 2cef-2cf1 2d7f "
    "2de0-2dff 302a-302d 3099-309a a66f a674-a67d a69e-a69f a6f0-a6f1 a802 a806 a80b a825-a826 "
    "a8c4 a8e0-a8f1 a926-a92d a947-a951 a980-a982 a9b3 a9b6-a9b9 a9bc a9e5 aa29-aa2e aa31-aa32 "
    "aa35-aa36 aa43 aa4c aa7c aab0 aab2-aab4 aab7-aab8 aabe-aabf aac1 aaec-aaed aaf6 abe5 abe8 "
    "abed fb1e fe00-fe0f fe20-fe2f 101fd 102e0 10376-1037a 10a01-10a03 10a05-10a06 10a0c-10a0f "
    "10a38-10a3a 10a3f 10ae5-10ae6 11001 11038-11046 1107f-11081 110b3-110b6 110b9-110ba "
    "11100-11102 11127-1112b 1112d-11134 11173 11180-11181 111b6-111be 111ca-111cc 1122f-11231 "
    "11234 11236-11237 112df 112e3-112ea 11300-11301 1133c 11340 11366-1136c 11370-11374 "
    "114b3-114b8 114ba 114bf-114c0 114c2-114c3 115b2-115b5 115bc-115bd 115bf-115c0 115dc-115dd "
    "11633-1163a 1163d 1163f-11640 116ab 116ad 116b0-116b5 116b7 1171d-1171f 11722-11725 "
    "11727-1172b 16af0-16af4 16b30-16b36 16f8f-16f92 1bc9d-1bc9e 1d167-1d169 1d17b-1d182 "
    "1d185-1d18b 1d1aa-1d1ad 1d242-1d244 1da00-1da36 1da3b-1da6c 1da75 1da84 1da9b-1da9f "
    "1daa1-1daaf 1e8d0-1e8d6 e0100-e01ef"
)
# handle_chinese_chars. The library's table, including its 0x2B920 (BERT has 0x2B820).
_CHINESE = "3400-4dbf 4e00-9fff f900-faff 20000-2a6df 2a700-2b81f 2b920-2ceaf 2f800-2fa1f"
# Combining marks (canonical combining class > 0) that NFD reorders but strip_accents keeps: the
# library's NFD table (Unicode 9) knows them, its Mn table (Unicode 8) does not. Reordering is
# only visible when one of these survives, so only then is it done (see _normalize_exact).
_KEPT_MARK = (
    "8d4-8e1 1b44 1baa 1bf2-1bf3 1dfb 302e-302f a953 a9c0 111c0 11235 1134d 11442 11446 116b6 "
    "11c3f 1d165-1d166 1d16d-1d172 1e000-1e006 1e008-1e018 1e01b-1e021 1e023-1e024 1e026-1e02a "
    "1e944-1e94a"
)
# Decomposed by unicodedata but not by the library (Unicode 13, newer than its NFD table).
_NO_DECOMPOSE = frozenset({0x11938})
# Lowercased by the library (Rust std, Unicode 16) but unknown to unicodedata before 3.14.
_LOWER_EXTRA = {
    0x1C89: 0x1C8A, 0xA7CB: 0x0264, 0xA7CC: 0xA7CD, 0xA7CE: 0xA7CF,
    0xA7D2: 0xA7D3, 0xA7D4: 0xA7D5, 0xA7DA: 0xA7DB, 0xA7DC: 0x019B,
    **{cp: cp + 0x20 for cp in range(0x10D50, 0x10D66)},
    **{cp: cp + 0x1B for cp in range(0x16EA0, 0x16EB9)},
}  # fmt: skip


def _ranges(spec: str) -> list[tuple[int, int]]:
    """Parse "a-b c …" hex ranges into (start, end) pairs."""
    items = [item.partition("-") for item in spec.split()]
    return [(int(low, 16), int(high or low, 16)) for low, _, high in items]


# What the normaliser does with a character, by code point (the ranges above do not overlap).
_OTHER, _REMOVE, _SPACE_OUT, _CJK, _DROP_MARK, _KEEP_MARK = range(6)
_KIND_RANGES = sorted(
    (start, end, kind)
    for kind, spec in [(1, _REMOVED), (2, _SPACE), (3, _CHINESE), (4, _MARK), (5, _KEPT_MARK)]
    for start, end in _ranges(spec)
)
_KIND_STARTS = [start for start, _, _ in _KIND_RANGES]


def _kind(cp: int) -> int:
    """The class of a code point: _REMOVE, _SPACE_OUT, _CJK, _DROP_MARK, _KEEP_MARK or _OTHER."""
    index = bisect.bisect_right(_KIND_STARTS, cp) - 1
    return _KIND_RANGES[index][2] if index >= 0 and cp <= _KIND_RANGES[index][1] else _OTHER


@functools.cache  # compiled on first use: 11 ms
def _word_pattern(limit: int) -> re.Pattern[str]:
    """(spaces, word or punctuation character) pairs for findall (faster than match objects) in
    text below ``limit``: a class without astral code points is a bitmap, 2-3 times as fast."""
    punct = "".join(rf"\U{a:08x}-\U{b:08x}" for a, b in _ranges(_PUNCT) if a < limit)
    return re.compile(rf"( *)([^ {punct}]+|[{punct}])")


# ASCII characters clean_text removes: when one is present the ASCII fast path is not exact.
_ASCII_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_ASCII_WORD = re.compile(r"([ \t\n\r]*)([^ \t\n\r!-/:-@\[-`{-~]+|[!-/:-@\[-`{-~])")


def _decompose(text: str) -> str:
    """NFD as the library does it, character by character (canonical reordering apart)."""
    return "".join(c if ord(c) in _NO_DECOMPOSE else unicodedata.normalize("NFD", c) for c in text)


def _lower(char: str) -> str:
    """Rust's ``char::to_lowercase``: Python's, plus the mappings of newer Unicode."""
    extra = _LOWER_EXTRA.get(ord(char))
    return chr(extra) if extra is not None else char.lower()


def _combining_class(char: str) -> int:
    """The canonical combining class in the library's NFD table (0 for marks newer than it)."""
    return unicodedata.combining(char) if _kind(ord(char)) >= _DROP_MARK else 0


@dataclass(frozen=True, slots=True)
class Encoding:
    """Token ids and their (start, end) character offsets in the text, as ``tokenizers`` has."""

    ids: list[int]
    offsets: list[tuple[int, int]]


@dataclass(frozen=True)
class _Config:
    """What the tokenizer uses of a tokenizer.json, validated."""

    vocab: dict[str, int]
    unk_token: str
    prefix: str  # of a word's continuing pieces, "##"
    max_chars: int  # longer words are one unknown token
    lowercase: bool
    strip_accents: bool
    chinese: bool  # handle_chinese_chars
    added: dict[str, int]  # content of each added token → its id
    before: list[int]  # ids the post-processor puts before the text
    after: list[int]  # … and after it


# A word's WordPiece ids and their (start, end) in the word; None: one token, the whole word.
_Pieces = tuple[tuple[int, ...], "tuple[tuple[int, int], ...] | None"]
_Offsets = list[tuple[int, int]]


class _Lazy(dict[int, Any]):
    """A ``str.translate`` table filled in on first use: code point → ``compute(code point)``."""

    def __init__(self, compute: Callable[[int], Any]) -> None:
        super().__init__()
        self._compute = compute

    def __missing__(self, cp: int) -> Any:
        return self.setdefault(cp, self._compute(cp))


class WordPiece:
    """A BERT WordPiece tokenizer read from a ``tokenizer.json``; see the module docstring."""

    def __init__(self, config: _Config) -> None:  # a validated configuration (from_file)
        self._config = config
        self._first = config.vocab
        size = len(config.prefix)
        self._rest = {k[size:]: v for k, v in config.vocab.items() if k.startswith(config.prefix)}
        self._first_max = max(map(len, self._first))
        self._rest_max = max(map(len, self._rest), default=0)
        self._unk = config.vocab[config.unk_token]
        self._alphabet = frozenset("".join(config.vocab))
        # Code point → its normalised form; and → None (delete) if that is one character, so
        # that text.translate(self._odd) is empty when normalised offsets are the input's own.
        self._chars = _Lazy(lambda cp: self._normalize_char(chr(cp)))
        self._odd = _Lazy(lambda cp: None if len(self._chars[cp]) == 1 else "x")
        # Characters whose NFD holds a kept combining mark: text with one needs _normalize_exact.
        self._reordering: set[str] = set()
        contents = sorted(config.added, key=len, reverse=True)  # longest first at one position
        self._added = re.compile("|".join(map(re.escape, contents))) if contents else None
        self._pieces = functools.lru_cache(maxsize=1 << 16)(self._word_pieces)

    @classmethod
    def from_file(cls, path: Path) -> WordPiece:
        """Load a BERT ``tokenizer.json``; ValueError if it is malformed or of another kind."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except ValueError as exc:  # invalid JSON or UTF-8
            raise ValueError(f"{path} is not a valid tokenizer.json: {exc}") from exc
        try:
            return cls(_parse_config(data, str(path)))
        except (KeyError, IndexError, TypeError, AttributeError) as exc:  # a part of a wrong shape
            raise _refuse(str(path), f"malformed ({type(exc).__name__}: {exc})") from exc

    def encode(self, text: str, add_special_tokens: bool = True) -> Encoding:
        """Tokenise ``text``; ``add_special_tokens`` wraps it as the post-processor says."""
        config = self._config
        before, after = (config.before, config.after) if add_special_tokens else ([], [])
        ids = list(before)
        offsets: _Offsets = [(0, 0)] * len(before)
        fast = text.isascii() and _ASCII_CONTROL.search(text) is None
        source = text.lower() if fast and config.lowercase else text
        position = 0
        for match in self._added.finditer(text) if self._added is not None else ():
            self._encode_span(text, source, fast, position, match.start(), ids, offsets)
            ids.append(config.added[match.group()])
            offsets.append(match.span())
            position = match.end()
        self._encode_span(text, source, fast, position, len(text), ids, offsets)
        ids += after
        offsets += [(0, 0)] * len(after)
        return Encoding(ids, offsets)

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[Encoding]:
        """:meth:`encode` each text, in order."""
        return [self.encode(text, add_special_tokens) for text in texts]

    def _encode_span(
        self, text: str, source: str, fast: bool, start: int, end: int, ids: list[int],
        offsets: _Offsets,
    ) -> None:  # fmt: skip
        """Append the tokens of ``text[start:end]``, a span free of added tokens. ``fast``:
        the text is ASCII without controls, and ``source`` is it normalised."""
        if fast:
            self._emit(_ASCII_WORD, source, start, end, None, ids, offsets)
            return
        piece = text[start:end]
        normalized = piece.translate(self._chars)  # also fills self._reordering
        origin: Sequence[int]
        if self._reordering and not self._reordering.isdisjoint(piece):
            normalized, origin = self._normalize_exact(piece, start)
        elif not piece.translate(self._odd):  # one character out per character in
            origin = range(start, end)
        else:
            chars = self._chars
            origin = [i for i, c in enumerate(piece, start) for _ in range(len(chars[ord(c)]))]
        limit = 0x10000 if not normalized or max(normalized) < "\U00010000" else 0x110000
        self._emit(_word_pattern(limit), normalized, 0, len(normalized), origin, ids, offsets)

    def _emit(
        self, pattern: re.Pattern[str], normalized: str, start: int, end: int,
        origin: Sequence[int] | None, ids: list[int], offsets: _Offsets,
    ) -> None:  # fmt: skip
        """Append the tokens of the words ``pattern`` finds in ``normalized[start:end]``, whose
        character ``i`` comes from input character ``origin[i]`` (``i`` if ``origin`` is None)."""
        pieces = self._pieces
        stop = start
        for gap, word in pattern.findall(normalized, start, end):
            begin = stop + len(gap)
            stop = begin + len(word)
            word_ids, spans = pieces(word)
            ids += word_ids
            if spans is None:
                span = (begin, stop) if origin is None else (origin[begin], origin[stop - 1] + 1)
                offsets.append(span)
            elif origin is None:
                offsets += [(begin + a, begin + b) for a, b in spans]
            else:
                offsets += [(origin[begin + a], origin[begin + b - 1] + 1) for a, b in spans]

    def _normalize_char(self, char: str) -> str:
        """What BertNormalizer makes of one character (it works character by character, but
        for the canonical reordering of NFD: see :meth:`_normalize_exact`)."""
        cp = ord(char)
        if 0xD800 <= cp <= 0xDFFF:
            raise ValueError(f"Cannot tokenize a lone surrogate (U+{cp:04X}): it is not UTF-8.")
        kind = _kind(cp)
        if kind == _REMOVE:
            return ""
        if kind == _SPACE_OUT:
            return " "
        config = self._config
        out = f" {char} " if kind == _CJK and config.chinese else char
        if config.strip_accents:
            decomposed = _decompose(out)
            if decomposed != char or kind >= _DROP_MARK:
                kinds = [_kind(ord(c)) for c in decomposed]
                if _KEEP_MARK in kinds:
                    self._reordering.add(char)
                out = "".join(c for c, k in zip(decomposed, kinds, strict=True) if k != _DROP_MARK)
        if config.lowercase:
            out = _lower(out) if len(out) == 1 else "".join(map(_lower, out))
        return out

    def _normalize_exact(self, piece: str, shift: int) -> tuple[str, list[int]]:
        """Normalise ``piece`` with NFD's canonical reordering; also give the input index of
        every output character. Like the library: the first character of a decomposition takes
        the next input character's offsets, the others those of the last one taken; reordering
        moves that role with the character, so a moved mark can take its neighbour's offsets."""
        units: list[int] = []  # input index of each character left by clean_text and CJK
        entries: list[tuple[str, bool]] = []  # NFD characters, True: first of a decomposition
        for index, char in enumerate(piece, shift):
            kind = _kind(ord(char))
            if kind == _REMOVE:
                continue
            cjk = kind == _CJK and self._config.chinese
            for unit in " " if kind == _SPACE_OUT else f" {char} " if cjk else char:
                units.append(index)
                entries += [(c, not i) for i, c in enumerate(_decompose(unit))]
        start = 0  # NFD canonical ordering: stable-sort each run of marks by combining class
        while start < len(entries):
            end = start
            while end < len(entries) and _combining_class(entries[end][0]):
                end += 1
            entries[start:end] = sorted(entries[start:end], key=lambda e: _combining_class(e[0]))
            start = end + 1
        out: list[str] = []
        origin: list[int] = []
        taken = -1
        for char, first in entries:
            taken += first
            if _kind(ord(char)) != _DROP_MARK:
                text = _lower(char) if self._config.lowercase else char
                out.append(text)
                origin += [units[max(taken, 0)]] * len(text)
        return "".join(out), origin

    def _word_pieces(self, word: str) -> _Pieces:
        """WordPiece of one normalised word: greedy longest match first, else one unknown."""
        if len(word) > self._config.max_chars:
            return (self._unk,), None
        whole = self._first.get(word)
        if whole is not None:
            return (whole,), None
        if not self._alphabet.issuperset(word):  # a character no token has: no split exists
            return (self._unk,), None
        ids: list[int] = []
        spans: list[tuple[int, int]] = []
        start = 0
        while start < len(word):
            vocab = self._rest if start else self._first
            longest = self._rest_max if start else self._first_max
            for end in range(min(len(word), start + longest), start, -1):
                token = vocab.get(word[start:end])
                if token is not None:
                    break
            else:
                return (self._unk,), None
            ids.append(token)
            spans.append((start, end))
            start = end
        return tuple(ids), tuple(spans)


class UnsupportedTokenizer(ValueError):
    """A valid tokenizer.json of a kind this module does not implement (BPE, Unigram…)."""


def _refuse(source: str, problem: str) -> UnsupportedTokenizer:
    """The error for a tokenizer.json this module does not implement."""
    return UnsupportedTokenizer(
        f"Unsupported tokenizer {source}: {problem}. Only BERT WordPiece tokenizers "
        "(BertNormalizer, BertPreTokenizer, WordPiece, TemplateProcessing) are supported."
    )


def _component(data: dict[str, Any], key: str, kind: str, source: str) -> dict[str, Any]:
    """``data[key]``, which must be an object of type ``kind``."""
    value = data.get(key)
    found = value.get("type") if isinstance(value, dict) else value
    if not isinstance(value, dict) or found != kind:
        raise _refuse(source, f"{key} is {found!r}, not {kind!r}")
    return value


def _typed(data: dict[str, Any], key: str, kind: type, source: str) -> Any:
    """``data[key]``, which must be of ``kind`` (bool is not an int here)."""
    value = data.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _refuse(source, f"{key} is {value!r}, not a {kind.__name__}")
    return value


def _parse_config(data: Any, source: str) -> _Config:
    """Validate the parts of a tokenizer.json this module implements; refuse everything else."""
    if not isinstance(data, dict):
        raise _refuse(source, "the file is not a JSON object")
    normalizer = _component(data, "normalizer", "BertNormalizer", source)
    _component(data, "pre_tokenizer", "BertPreTokenizer", source)
    model = _component(data, "model", "WordPiece", source)
    if normalizer.get("clean_text") is not True:
        raise _refuse(source, "normalizer.clean_text is not true")
    lowercase = _typed(normalizer, "lowercase", bool, source)
    strip = normalizer.get("strip_accents")
    if strip is not None and not isinstance(strip, bool):
        raise _refuse(source, f"strip_accents is {strip!r}")
    vocab = _typed(model, "vocab", dict, source)
    if set(map(type, vocab.values())) != {int}:  # (JSON object keys are strings)
        raise _refuse(source, "model.vocab is not a non-empty object of token ids")
    unk = _typed(model, "unk_token", str, source)
    added = _added_tokens(data.get("added_tokens"), source)
    if unk not in vocab:
        raise _refuse(source, f"the unknown token {unk!r} is not in the vocabulary")
    before, after = _post_processor(data.get("post_processor"), ChainMap(vocab, added), source)
    return _Config(
        vocab=vocab,
        unk_token=unk,
        prefix=_typed(model, "continuing_subword_prefix", str, source),
        max_chars=_typed(model, "max_input_chars_per_word", int, source),
        lowercase=lowercase,
        strip_accents=lowercase if strip is None else strip,
        chinese=_typed(normalizer, "handle_chinese_chars", bool, source),
        added=added,
        before=before,
        after=after,
    )


def _added_tokens(tokens: Any, source: str) -> dict[str, int]:
    """Content → id of the added tokens, all matched as they are in the raw text."""
    if not isinstance(tokens, list):
        raise _refuse(source, "added_tokens is not a list")
    added: dict[str, int] = {}
    for token in tokens:
        if not isinstance(token, dict):
            raise _refuse(source, f"added token {token!r} is not an object")
        content = _typed(token, "content", str, source)
        for flag in ("single_word", "lstrip", "rstrip", "normalized"):
            if token.get(flag, False) is not False:
                raise _refuse(source, f"added token {content!r} has {flag} set")
        if content:
            added[content] = _typed(token, "id", int, source)
    return added


def _post_processor(
    spec: Any, known: Mapping[str, int], source: str
) -> tuple[list[int], list[int]]:
    """The ids that ``add_special_tokens`` puts before and after the text."""
    kind = spec.get("type") if isinstance(spec, dict) else spec
    if kind is None:
        return [], []
    if kind == "BertProcessing":
        (cls, cls_id), (sep, sep_id) = spec["cls"], spec["sep"]
        if cls not in known or sep not in known or {type(cls_id), type(sep_id)} != {int}:
            raise _refuse(source, "BertProcessing cls/sep are not [token, id] of known tokens")
        return [cls_id], [sep_id]
    if kind != "TemplateProcessing":
        raise _refuse(source, f"post_processor is {kind!r}, not 'TemplateProcessing'")
    sides: tuple[list[int], list[int]] = ([], [])
    side = 0
    for item in spec["single"]:
        if "Sequence" in item and item["Sequence"]["id"] == "A" and side == 0:
            side = 1
            continue
        special = spec["special_tokens"][item["SpecialToken"]["id"]]
        if not all(t in known for t in special["tokens"]) or any(
            type(i) is not int for i in special["ids"]
        ):
            raise _refuse(source, f"special token {special!r} has unknown tokens or bad ids")
        sides[side].extend(special["ids"])
    if side == 0:
        raise _refuse(source, "the single template has no sequence A")
    return sides
