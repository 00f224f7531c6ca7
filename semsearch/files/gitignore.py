"""gitignore patterns, matched as git matches them.

:class:`PatternList` holds the lines of one source of gitignore patterns (a ``.gitignore``, the
``.indexignore``, a glob filter, an allow-list) read the way git's ``dir.c`` reads an ignore
file and matched the way its ``wildmatch.c`` matches a path: on the path's bytes, relative to
the folder of the file (``base``). A line without a "/" (a trailing one aside) matches the last
component at any depth; any other line is anchored to ``base``; a trailing "/" matches folders
only; ``*``, ``?`` and ``[...]`` (ranges, ``!``/``^`` negation, ``[:alpha:]`` classes) stop at
"/"; ``**`` spans folders when it is a whole component (git also counts a ``**`` right after
the literal start of a line, as in ``ab**/x``); ``\\`` escapes; trailing spaces are dropped
unless escaped; ``!`` re-includes; the last matching line wins.

A line git can never match (a trailing backslash, an unclosed ``[``, an unknown
``[:class:]``) matches nothing, as in git; with ``strict`` (globs and allow-lists, typed by a
user rather than found in a folder) it raises :class:`ValueError` instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_SLASH = ord("/")
_PRINTABLE = frozenset(range(0x20, 0x7F))
_ALNUM = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
# git's ctype: ASCII only, and its isspace() leaves out \v and \f.
_POSIX_CLASSES: dict[bytes, frozenset[int]] = {
    b"alnum": _ALNUM,
    b"alpha": frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"),
    b"blank": frozenset(b" \t"),
    b"cntrl": frozenset([*range(0x20), 0x7F]),
    b"digit": frozenset(b"0123456789"),
    b"graph": _PRINTABLE - {0x20},
    b"lower": frozenset(b"abcdefghijklmnopqrstuvwxyz"),
    b"print": _PRINTABLE,
    b"punct": _PRINTABLE - _ALNUM - {0x20},
    b"space": frozenset(b" \t\n\r"),
    b"upper": frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    b"xdigit": frozenset(b"0123456789ABCDEFabcdef"),
}


class _Invalid(ValueError):
    """A line that git can never match, or a range that matches nothing (says which)."""


@dataclass(frozen=True)
class Pattern:
    """One pattern line: ``line`` is its index among the lines given, ``text`` the line."""

    line: int
    text: str
    is_negated: bool
    is_dir_only: bool


@dataclass(frozen=True)
class _Alternation:
    """Several patterns in one regex, the last line first: the first alternative that matches
    the whole string is the last matching line."""

    regex: re.Pattern[bytes] | None
    order: tuple[int, ...]  # the pattern index of capturing group 1, 2, ...

    @classmethod
    def of(cls, bodies: list[tuple[int, bytes]], flags: int) -> _Alternation:
        chosen = list(reversed(bodies))
        if not chosen:
            return cls(None, ())
        source = b"|".join(b"(" + body + b")" for _, body in chosen)
        return cls(re.compile(source, flags | re.DOTALL), tuple(index for index, _ in chosen))

    def last(self, text: bytes) -> int | None:
        found = self.regex.fullmatch(text) if self.regex is not None else None
        return None if found is None or found.lastindex is None else self.order[found.lastindex - 1]


@dataclass(frozen=True)
class _Matcher:
    """The patterns that can match one kind of path (a folder, or a file), split as git splits
    them: a line without a "/" is matched against the last component only, which keeps each
    alternative from scanning the whole path."""

    names: _Alternation
    paths: _Alternation

    @classmethod
    def of(cls, bodies: list[tuple[int, bytes, bool]], flags: int) -> _Matcher:
        names = [(index, body) for index, body, is_name in bodies if is_name]
        paths = [(index, body) for index, body, is_name in bodies if not is_name]
        return cls(_Alternation.of(names, flags), _Alternation.of(paths, flags))

    def last(self, path: bytes) -> int | None:
        by_name = self.names.last(path[path.rfind(b"/") + 1 :])
        by_path = self.paths.last(path)
        if by_name is None or by_path is None:
            return by_path if by_name is None else by_name
        return max(by_name, by_path)


@dataclass(frozen=True)
class PatternList:
    """The patterns of one source, relative to its folder ``base`` ("" or "a/b/").

    Paths given to the methods are relative to the listing root; folders end in "/".
    """

    base: str
    patterns: tuple[Pattern, ...]
    _dirs: _Matcher
    _files: _Matcher
    _folders: dict[str, Pattern | None] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(
        cls,
        lines: Iterable[str],
        base: str = "",
        *,
        strict: bool = False,
        ignore_case: bool = False,
    ) -> PatternList:
        """Compile ``lines``; blank lines and comments are dropped. With ``strict``, a line that
        can never match raises :class:`ValueError` naming it. ``ignore_case`` folds ASCII
        letters, as git's ``core.ignoreCase`` does."""
        patterns: list[Pattern] = []
        dirs: list[tuple[int, bytes, bool]] = []
        files: list[tuple[int, bytes, bool]] = []
        for number, line in enumerate(lines):
            parsed = _parse_line(number, line, strict)
            if parsed is None:
                continue
            pattern, compiled = parsed
            if compiled is not None:
                dirs.append((len(patterns), *compiled))
                if not pattern.is_dir_only:
                    files.append((len(patterns), *compiled))
            patterns.append(pattern)
        flags = re.IGNORECASE if ignore_case else 0
        return cls(base, tuple(patterns), _Matcher.of(dirs, flags), _Matcher.of(files, flags))

    def last_match(self, rel: str) -> Pattern | None:
        """The last pattern matching ``rel`` itself (not one of its folders), or None."""
        if not rel.startswith(self.base) or len(rel) == len(self.base):
            return None
        is_dir = rel.endswith("/")
        path = rel[len(self.base) : -1 if is_dir else None].encode("utf-8", "surrogateescape")
        index = (self._dirs if is_dir else self._files).last(path)
        return None if index is None else self.patterns[index]

    def decides(self, rel: str) -> bool | None:
        """True when the last pattern matching ``rel`` excludes it, False when it re-includes it
        (``!``), None when no pattern matches."""
        found = self.last_match(rel)
        return None if found is None else not found.is_negated

    def excluding(self, rel: str) -> Pattern | None:
        """The pattern that leaves ``rel`` out as git would: the one excluding its outermost
        excluded folder (nothing below an excluded folder comes back), else the one excluding
        ``rel`` itself; None when ``rel`` is kept."""
        parent = rel[: rel.rfind("/", 0, len(rel) - 1) + 1]
        if parent:
            if parent not in self._folders:
                self._folders[parent] = self.excluding(parent)
            found = self._folders[parent]
            if found is not None:
                return found
        found = self.last_match(rel)
        return found if found is not None and not found.is_negated else None

    def matches(self, rel: str) -> bool:
        """Whether ``rel`` or one of its folders is excluded (what a glob filter keeps)."""
        return self.excluding(rel) is not None


def _parse_line(
    number: int, line: str, strict: bool
) -> tuple[Pattern, tuple[bytes, bool] | None] | None:
    """The pattern of one line and its regex (see _pattern_regex; None: it never matches), or
    None for a blank line or a comment (which ``strict`` refuses: a glob is one pattern)."""
    raw = line.encode("utf-8", "surrogateescape").removesuffix(b"\r")
    if not raw or raw.startswith(b"#"):
        if strict:
            raise ValueError(
                f"{line!r}: a blank line or a comment matches no path (escape a leading # as \\#)"
            )
        return None
    raw = _trim_trailing_spaces(raw)
    is_negated = raw.startswith(b"!")
    if is_negated:
        raw = raw[1:]
    is_dir_only = raw.endswith(b"/")
    if is_dir_only:
        raw = raw[:-1]
    pattern = Pattern(number, line, is_negated, is_dir_only)
    try:
        if not raw:
            raise _Invalid("it matches no path")
        body = _pattern_regex(raw, strict)
    except _Invalid as exc:
        if strict:
            raise ValueError(f"{line!r}: {exc}") from None
        return pattern, None
    return pattern, body


def _trim_trailing_spaces(raw: bytes) -> bytes:
    """Drop trailing spaces (not tabs) unless the first of them is escaped, as git does."""
    last_space = None
    i = 0
    while i < len(raw):
        char = raw[i]
        if char == 0x20:
            last_space = i if last_space is None else last_space
        elif char == 0x5C:  # a backslash: the next byte is literal, and a lone one ends it
            i += 1
            if i == len(raw):
                return raw
            last_space = None
        else:
            last_space = None
        i += 1
    return raw if last_space is None else raw[:last_space]


def _pattern_regex(raw: bytes, strict: bool) -> tuple[bytes, bool]:
    """The regex of a pattern (leading "!" and trailing "/" removed) and whether it matches the
    last path component (True) or the path relative to the pattern's folder (False)."""
    if _SLASH not in raw:
        return _wildmatch_regex(raw, strict), True
    raw = raw.removeprefix(b"/")
    # git compares the literal start itself and runs wildmatch on the rest, so a "**" right
    # after the literal start counts as a leading one.
    literal = re.match(rb"[^*?\[\\]*", raw)
    start = literal.end() if literal is not None else 0
    return re.escape(raw[:start]) + _wildmatch_regex(raw[start:], strict), False


def _wildmatch_regex(glob: bytes, strict: bool) -> bytes:
    """git's wildmatch with WM_PATHNAME as a regex over bytes."""
    out: list[bytes] = []
    i = 0
    while i < len(glob):
        char = glob[i]
        if char == 0x2A:  # "*"
            end = i
            while end < len(glob) and glob[end] == 0x2A:
                end += 1
            at_start = i == 0 or glob[i - 1] == _SLASH
            rest = glob[end:]
            if end - i > 1 and at_start and (not rest or rest[:1] == b"/" or rest[:2] == b"\\/"):
                if rest[:1] == b"/":
                    out.append(b"(?:.*/)?")
                    end += 1
                else:
                    out.append(b".*")
            else:
                out.append(b"[^/]*")
            i = end
        elif char == 0x3F:  # "?"
            out.append(b"[^/]")
            i += 1
        elif char == 0x5B:  # "["
            members, i = _bracket(glob, i, strict)
            out.append(_byte_class(members))
        elif char == 0x5C:  # "\\"
            if i + 1 == len(glob):
                raise _Invalid("it ends with a lone backslash")
            out.append(re.escape(glob[i + 1 : i + 2]))
            i += 2
        else:
            out.append(re.escape(glob[i : i + 1]))
            i += 1
    return b"".join(out)


def _bracket(glob: bytes, start: int, strict: bool) -> tuple[frozenset[int], int]:
    """The bytes the bracket expression at ``start`` matches and the index after its "]",
    following wildmatch's loop ("]" first is literal, "a-" before "]" is two members, a
    reversed range adds nothing; ``strict`` refuses one)."""
    i = start + 1
    is_negated = i < len(glob) and glob[i] in b"!^"
    if is_negated:
        i += 1
    members: set[int] = set()
    previous = 0
    while True:
        if i >= len(glob):
            raise _Invalid("a '[' is never closed")
        char = glob[i]
        if char == 0x5C:
            i += 1
            if i >= len(glob):
                raise _Invalid("a '[' is never closed")
            char = glob[i]
            members.add(char)
        elif char == 0x2D and previous and i + 1 < len(glob) and glob[i + 1] != 0x5D:
            i += 1
            high = glob[i]
            if high == 0x5C:
                i += 1
                if i >= len(glob):
                    raise _Invalid("a '[' is never closed")
                high = glob[i]
            if high < previous and strict:
                raise _Invalid(f"the range {chr(previous)}-{chr(high)} is reversed")
            members.update(range(previous, high + 1))
            char = 0
        elif char == 0x5B and glob[i + 1 : i + 2] == b":":
            close = glob.find(b"]", i + 2)
            if close < 0:
                raise _Invalid("a '[' is never closed")
            if close - (i + 2) >= 1 and glob[close - 1] == 0x3A:
                name = glob[i + 2 : close - 1]
                if name not in _POSIX_CLASSES:
                    raise _Invalid(f"[:{name.decode(errors='replace')}:] is no class")
                members.update(_POSIX_CLASSES[name])
                i = close
                char = 0
            else:
                members.add(char)  # no ":]": a plain "[" (the ":" comes next)
        else:
            members.add(char)
        previous = char
        i += 1
        if i < len(glob) and glob[i] == 0x5D:
            break
    matched = frozenset(range(256)) - members if is_negated else frozenset(members)
    return matched - {_SLASH}, i + 1


def _byte_class(members: frozenset[int]) -> bytes:
    """A regex class of exactly these bytes (one that matches nothing when there are none)."""
    runs: list[list[int]] = []
    for byte in sorted(members):
        if runs and runs[-1][1] == byte - 1:
            runs[-1][1] = byte
        else:
            runs.append([byte, byte])
    if not runs:
        return b"(?!)"
    spans = (
        b"\\x%02x" % low if low == high else b"\\x%02x-\\x%02x" % (low, high) for low, high in runs
    )
    return b"[" + b"".join(spans) + b"]"
