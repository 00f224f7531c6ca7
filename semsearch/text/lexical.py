"""What the BM25 arm sees and asks: chunk terms (text, path, split identifiers) and FTS5 queries.

The FTS5 table has three columns: ``text`` (the chunk), ``terms`` (the words a person would use
for it that the text does not spell out: the file's stem and folders, and identifiers split into
words: ``parseHeaderLine`` → ``parse header line``) and ``defines`` (the names the chunk defines,
see :func:`definitions`). Identifiers stay whole in ``text``, so an exact identifier still matches
exactly. The columns are derived from the chunk text and its path by :func:`chunk_terms` and
:func:`chunk_defines`, which must stay deterministic: the index deletes FTS rows by recomputing
them (bump ``TERMS_VERSION`` when they change).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import re
from dataclasses import dataclass

TERMS_VERSION = "11"

_IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_WORD = re.compile(r"\w")
_QUOTED = re.compile(r'"([^"]+)"')  # a phrase the user quoted
# A name as code spells it, qualified or not: `JoinSet`, `pkg.Bar`, `foo::Bar`, `A\B` (PHP),
# `Foo#bar` (Ruby).
NAME_PATH = re.compile(r"[A-Za-z_$][\w$]*(?:(?:\.|::|\\|#)[A-Za-z_$][\w$]*)*")

# Words too common to carry meaning in a natural-language query (Lucene's English list).
_STOP_WORDS_TEXT = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with how what which who whom why when where does do did "
    "i me my we our you your he she his her its can could should would"
)
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())


# Keywords that introduce a definition, in the languages of the code benchmarks: Python, JS/TS,
# Go, Rust, Zig, C/C++, Java, C#, Kotlin (`fun`, `object`), Scala (`def`, `trait`, `given`),
# Swift (`func`, `protocol`, `actor`), Elixir (`defmodule`, `def`, `defmacro`…), Haskell
# (`data`, `newtype`), Lua (`function`), PHP, Ruby and shell. A Swift `extension` or a Haskell
# `instance` adds to a type defined elsewhere: not its definition.
_DEFINERS = (
    r"def|class|function\*?|func|fun|fn|struct|enum|union|trait|interface|@interface|type|"
    r"typealias|impl|"
    r"module|macro|macro_rules!|const|let|var|val|object|record|protocol|actor|"
    r"typedef|alias|given|data|newtype|defmodule|defprotocol|defimpl|"
    r"defmacrop?|defguardp?|defdelegate|defp?"
)
# Words that may stand before a definer (`public static`, `data class`, `sealed trait`,
# `case class`, `@objc func`, `suspend fun`, TypeScript's `declare`); `data`, `enum` and `const`
# are definers too, and the regular expression backtracks when one stands alone (`data Value = …`).
_MODIFIERS = (
    r"export|default|pub(?:\([\w:]+\))?|async|static|public|private|protected|internal|inline|"
    r"extern|abstract|final|override|virtual|unsafe|local|readonly|sealed|open|case|implicit|"
    r"lazy|data|enum|value|inner|companion|suspend|operator|infix|tailrec|fileprivate|"
    r"mutating|convenience|required|indirect|partial|const|expect|actual|annotation|"
    r"(?:private|protected)\[[\w.]+\]|fun(?=\s+interface\b)|"
    r"@[A-Za-z_][\w.]*(?:\([^)\n]*\))?|template\s*<[^>\n]*>|declare"
)
# Words that can open a statement shaped like `TYPE NAME(`, so they are never a declared type.
_NOT_TYPES = (
    r"return|new|throw|throws|else|case|await|yield|delete|goto|echo|print|puts|not|and|or|in|of|"
    r"using|import|from|package|raise|assert|sizeof|typeof|defer|go|do|if|while|for|switch|catch|"
    r"when|with|elif|except|unless|until|then|local|require|include|try|errdefer|comptime|"
    r"nosuspend|resume|finally|super|this|self|break|continue|panic"
)
_NAME = r"[A-Za-z_$][\w$]*"
# The rest of a declaration's parameter list: to the end of the line, or closed and followed by
# what follows a signature (`{`, `;`, `:`, `->`, `throws`…), never by prose ("call foo(x) to").
_PARAMETERS = (
    r"(?:[^()\n]|\([^()\n]*\))*"
    r"(?:$|\)[ \t]*(?:[{;:]|=>|->|$|throws\b|const\b|noexcept\b|override\b|where\b))"
)
# How a declared parameter list starts: empty, `void`, to the end of the line, or a parameter
# with a type and a name (`final Object[] array`, `struct Curl_easy *data`, `ref Reader r`); a
# call's arguments (`expectEqual(1.0, r.ipart)`) do not.
_FIRST_PARAMETER = (
    r"[ \t]*(?:\)|void\b|\.\.\.|$|(?:(?:final|const|ref|out|in|params|this|struct|unsigned|"
    r"@\w+)[ \t]+)*[A-Za-z_][\w:.]*(?:<[^()\n]*>)?(?:\[\])*(?:\.\.\.)?[*&?]*[ \t]+[*&]*[A-Za-z_$])"
)
_QUALIFIED = rf"{_NAME}(?:(?:\.|::|:){_NAME})*"  # `M.load`, `Foo::Bar`, `M:method`
# Words a C declaration may put before its return type: `struct`, `unsigned`, or an export macro
# in capitals (`CURL_EXTERN CURL *curl_easy_init(void)`, `ABSL_MUST_USE_RESULT bool Foo(`).
_C_TYPE_PREFIX = (
    r"(?:(?:struct|union|enum|unsigned|signed|long|short|[A-Z][A-Z0-9_]{2,})[ \t]+){0,2}"
)
# Words that open a statement shaped like a JavaScript method, `NAME(…) {`, in the languages
# the parser reads (`if (x) {`, Kotlin's `when (x) {` and `require(x) {`, C#'s `lock (x) {`):
# never its name. A constructor (Swift's `init`) names no one thing.
_NOT_METHODS = (
    r"if|for|while|switch|catch|with|return|function|synchronized|lock|fixed|foreach|elseif|elif|"
    r"until|unless|using|sizeof|typeof|await|yield|new|throw|delete|do|else|try|super|this|when|"
    r"match|guard|select|case|assert|require|check|defer|go|checked|unchecked|constructor|init"
)
# A JavaScript or TypeScript method, untyped, in a class body or an object literal: indented,
# `[static|async|get|set…] [*]NAME(PARAMETERS) [: TYPE] {` and nothing after the brace
# (`handleClick(event) {`, `static from(x) {`, `get size() {`, `#flush() {`). A parameter list
# opens with a name, a pattern or `...`, never a string or a call's argument, and a call that
# takes a block (`foo(function () {`, `it('x', () => {`) does not close before its `{`.
_METHOD = (
    r"^[ \t]+(?:(?:static|async|get|set|public|private|protected|readonly|override)[ \t]+)*"
    rf"\*?#?(?!(?:{_NOT_METHODS})\b)(?P<method>{_NAME})[ \t]*(?:<[^()\n]*>)?"
    r"\((?=[ \t]*(?:\)|[A-Za-z_$\[{]|\.\.\.))(?:[^()\n'\"`]|\([^()\n'\"`]*\))*\)"
    r"[ \t]*(?::[^{};=\n]+)?\{[ \t]*$"
)
# A definition: a definer keyword (after modifiers, generics, an optional Go receiver or Haskell
# context) and the name, at any indentation, its last part when qualified (`function M.load`,
# `fun <T> Flow<T>.map`, `defmodule Plug.SSL`); a typed member or C function, `[modifiers] TYPE
# NAME(` (`public static String join(`, `absl::Status Foo::Bar(`); a `static NAME:` (Rust, a
# TypeScript field); or, at the start of a line: `NAME =` / `NAME :=` / Lua's `local NAME =`, a
# Haskell signature `name ::`, a shell `NAME() {`, a C function whose return type stands on the
# line above (`http_perhapsrewind(struct Curl_easy *data,`), the name a C `typedef struct {…}`
# closes with (`} CURLcode;`); a C macro (`#define NAME`); or an untyped JavaScript method.
_DEFINITION = re.compile(
    rf"^[ \t]*(?:(?:{_MODIFIERS})\s+)*(?P<definer>{_DEFINERS})(?:\s+|(?=<))(?:<[^>\n]*>\s*)?"
    r"(?:\([^)\n]*\)\s*(?:=>\s*)?)?"
    rf"[*&]?(?:{_NAME}(?:<[^>\n]*>)?\??[.:])*(?P<keyword>{_NAME})"
    rf"|^[ \t]*(?:(?:{_MODIFIERS})\s+)*(?!(?:{_NOT_TYPES}|{_DEFINERS})\b){_C_TYPE_PREFIX}"
    rf"{_QUALIFIED}(?:<[^()\n=;]*>|\[\])*[*&?]*[ \t]+[*&]*(?:{_NAME}::)*(?P<typed>{_NAME})"
    rf"[ \t]*(?:<[^()\n=;]*>)?[ \t]*\((?={_FIRST_PARAMETER}){_PARAMETERS}"
    rf"|^[ \t]*(?:(?:{_MODIFIERS})\s+)*static[ \t]+(?:mut[ \t]+)?(?P<static>{_NAME})[ \t]*:(?!:)"
    rf"|^(?:local[ \t]+)?(?:{_NAME}[.:])*(?P<assigned>{_NAME})[ \t]*(?::[^=\n]*)?(?:=(?!=)|:=)"
    r"|^(?P<signature>[a-z_][\w']*)[ \t]+::[ \t]"
    r"|^(?P<cfunc>[A-Za-z_]\w*)\((?:void\)|(?:const[ \t]+|struct[ \t]+|unsigned[ \t]+)*"
    r"[A-Za-z_]\w*[ \t*]+[*&]*[A-Za-z_]\w*[,)])"
    r"|^(?:function[ \t]+)?(?P<shell>[A-Za-z_][\w-]*)[ \t]*\(\)[ \t]*\{"
    rf"|^\}}[ \t]*(?P<closed>{_NAME})[ \t]*[,;]"
    rf"|^[ \t]*#[ \t]*define[ \t]+(?P<cmacro>{_NAME})"
    rf"|{_METHOD}",
    re.MULTILINE,
)
_GROUPS = (
    "keyword",
    "typed",
    "static",
    "assigned",
    "signature",
    "cfunc",
    "shell",
    "closed",
    "cmacro",
    "method",
)


# What follows an assigned name when it only re-exports or imports something defined elsewhere:
# `const expect = std.testing.expect;`, `AutoHashMap = hash_map.AutoHashMap`, `@import(...)`.
_ALIAS = re.compile(
    r"[ \t]*(?::[^=\n]*)?(?::=|=)[ \t]*"
    r"(?:@import\(|require[ \t]*[(\"']|import\(|"
    r"(?P<target>[\w$]+(?:\.[\w$]+)*)[ \t]*;?[ \t]*(?:$|//|#))",
    re.MULTILINE,
)


def definitions(text: str) -> list[str]:
    """Names the text defines (functions, classes, types, constants, top-level assignments).

    An alias (`const eql = std.mem.eql;`, `X = module.X`) or an import is not a definition.
    """
    names: dict[str, None] = {}
    for match in _DEFINITION.finditer(text):
        name = next((match.group(g) for g in _GROUPS if match.group(g)), None)
        if match.group("definer") in _C_TAGGED:
            name = _c_declared(text, match, name)
        if not name or len(name) < 2 or _is_alias(text, match, name):
            continue
        if match.group("keyword") and _MODULE_ALIAS.match(match.group()):
            continue
        names[name] = None
    return list(names)


_C_TAGGED = frozenset(["typedef", "struct", "union", "enum"])
# What a C function returning a tagged type names after it (`struct Curl_easy *Curl_open(void)`).
_C_RETURNING = re.compile(rf"(?:[ \t]*[*&]+|[ \t]+)[ \t]*(?P<function>{_NAME})[ \t]*\(")
# What a `typedef` names: a function pointer's name (`typedef int (*handler)(…)`), the last name
# before the `;` (`typedef struct Curl_easy Curl_easy;`) or the tag of the struct it opens
# (`typedef struct Curl_easy {`; its closing `} NAME;` is a definition of its own).
_TYPEDEF = re.compile(
    rf"[^;{{\n]*?(?:\([ \t]*\*[ \t]*(?P<pointer>{_NAME})[ \t]*\)"
    rf"|(?P<last>{_NAME})[ \t]*(?:\[[^\]\n]*\][ \t]*)?;)"
)
_TYPEDEF_TAG = re.compile(
    rf"[ \t]*(?:struct|union|enum)[ \t]+(?P<tag>{_NAME})[ \t]*(?:$|\{{)", re.M
)


def _c_declared(text: str, match: re.Match[str], name: str | None) -> str | None:
    """The name a C declaration that starts with ``typedef``, ``struct``, ``union`` or ``enum``
    defines: the typedef's name, or the function a tagged type is the return type of."""
    if match.group("definer") != "typedef":
        returning = _C_RETURNING.match(text, match.end())
        return returning.group("function") if returning else name
    rest = match.start("definer") + len("typedef")
    typedef = _TYPEDEF.match(text, rest)
    if typedef is not None:
        return typedef.group("pointer") or typedef.group("last")
    tag = _TYPEDEF_TAG.match(text, rest)
    return tag.group("tag") if tag is not None else None


# Elixir's `alias Ecto.Query` (or `alias Ecto.Query.{Builder, Planner}`) makes a module defined
# elsewhere known by its last name: an import, not a definition.
_MODULE_ALIAS = re.compile(r"[ \t]*alias[ \t]+[\w$]+\.")


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
    terms: list[str] = []
    for word in dict.fromkeys(_IDENTIFIER.findall(text)):
        terms.extend(_compound_parts(word))
    return terms


# Per identifier, cached: a chunk's identifiers are mostly ones met before (`self`, `data`,
# `getValue`); on 10,940 chunks of curl, pydantic and tokio this function took 1.19 s splitting
# each again, 0.31 s with the cache.
@functools.lru_cache(maxsize=1 << 16)
def _compound_parts(word: str) -> tuple[str, ...]:
    """What :func:`identifier_terms` adds for an identifier: its parts when it has several and
    no ``_`` (FTS5's unicode61 splits on ``_`` itself); none otherwise."""
    if "_" in word:
        return ()
    pieces = split_identifier(word)
    return tuple(pieces) if len(pieces) > 1 else ()


def name_text(rel: str) -> str:
    """A file name as text for the model and the lexical terms: a byte of it that is not UTF-8
    (a surrogate escape of ``os.fsdecode``) becomes U+FFFD."""
    if rel.isascii():
        return rel
    return rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def chunk_terms(rel: str, text: str) -> str:
    """The ``terms`` column of a chunk: the words of its path, then its identifiers' parts."""
    path, words = _path_words(name_text(rel)), _text_columns(text)[1]
    return f"{path} {words}" if path and words else path or words


def chunk_defines(text: str) -> str:
    """The ``defines`` column of a chunk: :func:`definitions`, space-separated."""
    return _text_columns(text)[0]


@functools.lru_cache(maxsize=256)  # a file's chunks come one after another
def _path_words(rel: str) -> str:
    return " ".join(path_terms(rel))


# The derived columns of a text, by the BLAKE2b-128 digest of the text: a tree of copies (many
# checkouts, vendored packages) writes each text many times, and deriving `defines` and the
# identifier terms took ~25 % of a first pass over three copies of curl, pydantic and tokio
# (bench/RESULTS.md, session 27). The SQLite triggers also derive one text's columns several
# times in a row when its first chunk goes (its delete, then the next chunk's insert). Least
# recently used first out; ~350 bytes a text (most texts define a name or two), so ~45 MB full.
MEMO_TEXTS = 1 << 17


class TextColumns:
    """(defines, identifier terms) of texts, by digest, for the last ``size`` texts."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._memo: collections.OrderedDict[bytes, tuple[str, str]] = collections.OrderedDict()

    def __call__(self, text: str) -> tuple[str, str]:
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        found = self._memo.get(key)
        if found is not None:
            with contextlib.suppress(KeyError):  # another thread may have evicted it
                self._memo.move_to_end(key)
            return found
        columns = (" ".join(definitions(text)), " ".join(identifier_terms(text)))
        self._memo[key] = columns
        while len(self._memo) > self._size:
            with contextlib.suppress(KeyError):
                self._memo.popitem(last=False)
        return columns

    def __len__(self) -> int:
        return len(self._memo)


_text_columns = TextColumns(MEMO_TEXTS)


COLUMNS = ("text", "terms", "defines")  # the lexical columns of every backend
# BM25 weights of those columns: the chunk text and the path/identifier terms count fully, the
# defined names half (terms at 2 or 3 gained on code but cost SciFact; bench/RESULTS.md).
COLUMN_WEIGHTS = {"text": 1.0, "terms": 1.0, "defines": 0.5}


@dataclass(frozen=True)
class LexicalQuery:
    """Alternatives, any of which may match, in some of the lexical columns.

    An alternative is a word or a phrase of several words (``os.path.join`` is the phrase
    ``os path join``). Each backend turns this into its own query language.
    """

    alternatives: tuple[str, ...]
    columns: tuple[str, ...] = COLUMNS
    # One more alternative: words that must all be in the row, each in any column and any order
    # (the parts of a name typed alone: ``VitestProject`` finds a row of ``vitest`` … ``project``
    # where no row spells the name or the phrase).
    together: tuple[str, ...] = ()

    def fts5(self) -> str:
        """The SQLite FTS5 expression: every alternative quoted (safe for any input).

        Quoting turns ``ERR_ZORBLATT_7741`` or ``os.path.join`` into phrases of their parts. A NUL
        becomes a space: FTS5 reads it as the end of the query ("unterminated string").
        """
        quoted = ['"' + _fts5_text(word) + '"' for word in self.alternatives]
        if self.together:
            every = " AND ".join('"' + _fts5_text(word) + '"' for word in self.together)
            quoted.append(f"({every})")
        phrases = " OR ".join(quoted)
        if self.columns == COLUMNS:
            return phrases
        return "{" + " ".join(self.columns) + "} : (" + phrases + ")"


def _fts5_text(word: str) -> str:
    return word.replace('"', '""').replace("\x00", " ")


def lexical_query(query: str) -> LexicalQuery | None:
    """The BM25 arm's query for a user's query; None when it has no word at all.

    A camelCase word also matches its split form (``parseHeaderLine`` OR ``parse header line``),
    and a camelCase or qualified name typed alone also its parts anywhere in a row
    (:attr:`LexicalQuery.together`; on the 46 code repositories a name no file spells any more,
    `VitestProject`, found the file of `TestProject`; no other query moved). Stop words are
    dropped when other words remain. Words in double quotes are one exact phrase
    (``"retry budget"``), stop words kept.
    """
    phrases = [m.group(1).strip() for m in _QUOTED.finditer(query) if _WORD.search(m.group(1))]
    rest = _QUOTED.sub(" ", query)
    words = [word for word in dict.fromkeys(rest.split()) if _WORD.search(word)]
    meaningful = [word for word in words if word.lower().strip("?.,!:;'\"") not in STOP_WORDS]
    if phrases and not meaningful:
        words = []
    alternatives: list[str] = [" ".join(phrase.split()) for phrase in phrases]
    together: tuple[str, ...] = ()
    alone = len(meaningful or words) == 1 and not phrases
    for word in meaningful or words:
        alternatives.append(word)
        pieces = split_identifier(word)
        if len(pieces) > 1 and "_" not in word and "." not in word:
            alternatives.append(" ".join(pieces))
        parts = tuple(dict.fromkeys(piece.lower() for piece in pieces))
        # snake_case parts are prose words already (`retry_with_backoff`): its phrase suffices
        if alone and len(parts) > 1 and "_" not in word and NAME_PATH.fullmatch(word):
            together = parts
    if not alternatives:
        return None
    return LexicalQuery(tuple(dict.fromkeys(alternatives)), together=together)


def query_words(query: str) -> list[str]:
    """The words of a query to point out in a hit's text, longest first: each word and each
    part of an identifier (``retry_payment``: ``retry_payment``, ``retry``, ``payment``),
    lower-cased, without stop words and single characters."""
    words: dict[str, None] = {}
    for word in re.findall(r"\w+", query):
        for term in (word.lower(), *split_identifier(word)):
            if len(term) > 1 and term not in STOP_WORDS:
                words[term] = None
    return sorted(words, key=lambda term: (-len(term), term))
