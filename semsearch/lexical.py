"""What the BM25 arm sees and asks: chunk terms (text, path, split identifiers) and FTS5 queries.

The FTS5 table has three columns: ``text`` (the chunk), ``terms`` (the words a person would use
for it that the text does not spell out: the file's stem and folders, and identifiers split into
words: ``parseHeaderLine`` → ``parse header line``) and ``defines`` (the names the chunk defines,
see :func:`definitions`). Identifiers stay whole in ``text``, so an exact identifier still matches
exactly. The columns are derived from the chunk text and its path by :func:`chunk_terms` and
:func:`definitions`, which must stay deterministic: the index deletes FTS rows by recomputing
them (bump ``TERMS_VERSION`` when they change).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TERMS_VERSION = "3"

_IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_WORD = re.compile(r"\w")

# Words too common to carry meaning in a natural-language query (Lucene's English list).
_STOP_WORDS_TEXT = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with how what which who whom why when where does do did "
    "i me my we our you your he she his her its can could should would"
)
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())


_DEFINERS = (
    r"def|class|function|func|fn|struct|enum|union|trait|interface|type|impl|module|macro|"
    r"const|let|var|val|object|record|protocol|typedef|namespace|alias|defmodule|defp?"
)
_MODIFIERS = (
    r"export|default|pub(?:\([\w:]+\))?|async|static|public|private|protected|internal|inline|"
    r"extern|abstract|final|override|virtual|unsafe|local|readonly|template\s*<[^>\n]*>"
)
# A definition: a definer keyword (after modifiers, with an optional Go receiver) and the name,
# at any indentation; or, at the start of a line, `NAME =` / `NAME :=` / a shell `NAME() {`.
_DEFINITION = re.compile(
    rf"^[ \t]*(?:(?:{_MODIFIERS})\s+)*(?:{_DEFINERS})\s+(?:\([^)\n]*\)\s*)?[*&]?"
    rf"(?P<keyword>[A-Za-z_$][\w$]*)"
    r"|^(?P<assigned>[A-Za-z_$][\w$]*)[ \t]*(?::[^=\n]*)?(?:=(?!=)|:=)"
    r"|^(?:function[ \t]+)?(?P<shell>[A-Za-z_][\w-]*)[ \t]*\(\)[ \t]*\{",
    re.MULTILINE,
)


# What follows an assigned name when it only re-exports or imports something defined elsewhere:
# `const expect = std.testing.expect;`, `AutoHashMap = hash_map.AutoHashMap`, `@import(...)`.
_ALIAS = re.compile(
    r"[ \t]*(?::[^=\n]*)?(?::=|=)[ \t]*"
    r"(?:@import\(|require\(|import\(|(?P<target>[\w$]+(?:\.[\w$]+)*)[ \t]*;?[ \t]*(?:$|//|#))",
    re.MULTILINE,
)


def definitions(text: str) -> list[str]:
    """Names the text defines (functions, classes, types, constants, top-level assignments).

    An alias (`const eql = std.mem.eql;`, `X = module.X`) or an import is not a definition.
    """
    names: dict[str, None] = {}
    for match in _DEFINITION.finditer(text):
        name = match.group("keyword") or match.group("assigned") or match.group("shell")
        if not name or len(name) < 2 or _is_alias(text, match, name):
            continue
        names[name] = None
    return list(names)


def _is_alias(text: str, match: re.Match[str], name: str) -> bool:
    start = match.end("assigned") if match.group("assigned") else match.end()
    alias = _ALIAS.match(text, start)
    if alias is None:
        return False
    target = alias.group("target")
    return target is None or target.rsplit(".", 1)[-1] == name or "." in target


def split_identifier(word: str) -> list[str]:
    """Lower-case parts of a camelCase, PascalCase, snake_case or dotted identifier."""
    return [part.lower() for part in _PART.findall(word)]


def path_terms(rel: str) -> list[str]:
    """The file's stem and its last three folders, whole and split into words."""
    parts = rel.split("/")
    stem = parts[-1].split(".")[0]
    names = [stem, *parts[-4:-1]]
    terms: list[str] = []
    for name in names:
        pieces = split_identifier(name)
        terms.extend([name.lower(), *pieces] if len(pieces) > 1 else [name.lower()])
    return [term for term in terms if term]


def identifier_terms(text: str) -> list[str]:
    """Parts of every compound identifier in the text, each identifier once."""
    seen: set[str] = set()
    terms: list[str] = []
    for match in _IDENTIFIER.finditer(text):
        word = match.group()
        if word in seen:
            continue
        seen.add(word)
        pieces = split_identifier(word)
        if len(pieces) > 1 and "_" not in word:  # unicode61 already splits on "_"
            terms.extend(pieces)
    return terms


def chunk_terms(rel: str, text: str) -> str:
    """The ``terms`` column of a chunk."""
    return " ".join([*path_terms(rel), *identifier_terms(text)])


COLUMNS = ("text", "terms", "defines")  # the lexical columns of every backend


@dataclass(frozen=True)
class LexicalQuery:
    """Alternatives, any of which may match, in some of the lexical columns.

    An alternative is a word or a phrase of several words (``os.path.join`` is the phrase
    ``os path join``). Each backend turns this into its own query language.
    """

    alternatives: tuple[str, ...]
    columns: tuple[str, ...] = COLUMNS

    def fts5(self) -> str:
        """The SQLite FTS5 expression: every alternative quoted (safe for any input).

        Quoting turns ``ERR_ZORBLATT_7741`` or ``os.path.join`` into phrases of their parts.
        """
        phrases = " OR ".join('"' + word.replace('"', '""') + '"' for word in self.alternatives)
        if self.columns == COLUMNS:
            return phrases
        return "{" + " ".join(self.columns) + "} : (" + phrases + ")"


def lexical_query(query: str) -> LexicalQuery | None:
    """The BM25 arm's query for a user's query; None when it has no word at all.

    A camelCase word also matches its split form (``parseHeaderLine`` OR ``parse header line``).
    Stop words are dropped when other words remain.
    """
    words = [word for word in dict.fromkeys(query.split()) if _WORD.search(word)]
    meaningful = [word for word in words if word.lower().strip("?.,!:;'\"") not in STOP_WORDS]
    alternatives: list[str] = []
    for word in meaningful or words:
        alternatives.append(word)
        pieces = split_identifier(word)
        if len(pieces) > 1 and "_" not in word and "." not in word:
            alternatives.append(" ".join(pieces))
    return LexicalQuery(tuple(dict.fromkeys(alternatives))) if alternatives else None
