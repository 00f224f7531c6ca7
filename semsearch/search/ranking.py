"""Ranking priors applied after fusion: cheap, deterministic, and each one named in the result.

- A chunk that *defines* a symbol the query names (``def parse_header``, ``class Foo``,
  ``function foo``, ``fn foo``…) is boosted. A query word names a symbol when it has a capital
  letter, ``_``, a digit, ``.`` or ``::`` in it, or is the whole query: plain lower-case words of
  a sentence ("how the router works") do not. A query of one name typed in lower case
  (``joinset``) names its definition in any case (``JoinSet``).
- A file the query names is boosted: every word of its stem (``RetryMiddleware.php``,
  ``client/session.py``) is a word of the query, compared singular and without common endings.
- A chunk of imports and re-exports (``__init__.py``, ``index.js``) is lowered, so the
  definition wins over what passes it on.
- Chunks of tests, examples, fixtures, benchmarks, vendored and generated files, and of private
  modules (``_internal/``, ``_utils.py``), are down-weighted, unless the query asks for them.
- In hybrid mode, each file's best fused chunk gains a share of the best fused score by how much
  of the fused candidates' score its file holds (:func:`file_coherence`): the hub file rises,
  more for a question (:func:`coherence_weight`).
- Many chunks of one file get diminishing returns: the n-th chunk of a file is multiplied by
  ``FILE_DECAY ** (n - 1)``, so the top results spread over files.

The definition and file-name priors raise a score (:data:`RAISING_NOTES`); the search
divides the reported hybrid and bm25 scores by :func:`best_prior`, the product of the largest
factor of each among the results, to keep them in [0, 1] without changing their order.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from itertools import islice
from typing import NamedTuple

from semsearch.files.filetype import MAN_PAGE
from semsearch.text.lexical import (
    NAME_PATH,
    STOP_WORDS,
    definitions,
    path_terms,
    split_identifier,
)

# Each knob with the reason for its value; bench/RESULTS.md has the sweeps behind them.
# Each arm ranks max(POOL_PER_K x k, POOL_MIN) chunks: 200 measured best of 70 to 300 on the code
# sets, for +0.3 ms of a warm search at 10k chunks.
POOL_MIN = 200
POOL_PER_K = 5  # the arm pool per requested hit, so a large k still fuses deep lists
CANDIDATES = 60  # fused candidates the priors may reorder, at least; 100 measured no better
CANDIDATES_PER_K = 4  # ... or this many per requested hit when k is large
DEFINITION_POOL = 50  # chunks defining a queried name, best BM25 first (the definitions arm)
# ... read this deep when the query is one name and the first DEFINITION_POOL are all taken
# (on the given sets 4 in 1,500 generated name queries had their definer below 50: 54 to 86)
NAME_DEFINITION_POOL = 500
# The named-files arm (search/named_files.py): the best chunk of each file the query names, in
# cosine order, fused at this RRF weight (best of 0.15 to 1); none when more than NAMED_MAX files
# are named (5 and 20 measured the same).
NAMED_WEIGHT = 0.3
NAMED_MAX = 10
DEFINITION_BOOST = 1.3  # a chunk defining a queried symbol
# ... when the query is that one name (`JoinSet`, `Rails::Engine`): the definition comes first,
# above the files that use or re-export it, whatever their other priors.
NAME_DEFINITION_BOOST = 4.0
DEFINES_NOTE = "defines a queried symbol"  # how that prior is named in a hit's priors
# The n-th chunk of one file x FILE_DECAY**(n-1): the top results spread over files.
FILE_DECAY = 0.25
# A file the query names: every word of its stem (`RetryMiddleware.php`, `client/session.py`) is a
# word of the query ("retry middleware and backoff", "http client session").
STEM_BOOST = 2.3
STEM_NOTE = "file name in the query"
STEM_SINGLE_SHARE = 0.5  # the share of the boost a one-word file name gets
FOLDER_BOOST = 1.2  # a folder the query names (1.15 and 1.35 measured no better)
FOLDER_NOTE = "folder named in the query"
FOLDER_DEPTH = 3  # the last folders of a path that count
_GENERIC_FOLDERS_TEXT = (
    "src lib source sources main java kotlin scala go pkg internal include app apps packages "
    "modules core common util utils test tests spec"
)
_GENERIC_FOLDERS = frozenset(_GENERIC_FOLDERS_TEXT.split())
# Stems that name no topic: the folder names the file instead (`router/index.ts`, `http/mod.rs`).
_GENERIC_STEMS_TEXT = "index mod init __init__ main lib core utils util types base common helpers"
_GENERIC_STEMS = frozenset(_GENERIC_STEMS_TEXT.split())
_GENERIC_PARTS = frozenset(["util", "help", "impl", "base", "common", "default", "abstract"])

_PRIVATE_PART = re.compile(r"_[a-z]", re.IGNORECASE)  # a path part the "private" kind matches

# A query word names a symbol when it could not be plain prose: a capital letter, "_", a digit,
# "." or "::" inside it (or when the query is that one word).
_IDENTIFIER_LIKE = re.compile(r"[A-Z_0-9$]|\.|::")
_NAME_EDGES = "`'\""  # a name typed as code: `JoinSet`, "JoinSet"

# (label, path pattern, query words that lift the penalty, factor)
_PATH_KINDS: tuple[tuple[str, re.Pattern[str], frozenset[str], float], ...] = (
    (
        "test",
        re.compile(
            r"(^|/)(tests?|__tests__|spec|specs|testing|testdata)/|(^|/)test_[^/]*\.py$|"
            r"[_.-](test|spec)s?\.[^/]+$|(^|/)conftest\.py$"
        ),
        frozenset({"test", "tests", "testing", "spec", "specs", "unittest", "pytest", "fixture"}),
        0.6,
    ),
    (
        "example",
        # `_examples/`: Go's tools skip a folder named with a leading underscore (chi's examples)
        re.compile(r"(^|/)_?(examples?|samples?|demos?|docs_src|tutorials?)/"),
        frozenset({"example", "examples", "sample", "demo", "tutorial"}),
        0.7,
    ),
    (
        "fixture",
        re.compile(r"(^|/)(fixtures?|mocks?|stubs?)/"),
        frozenset({"fixture", "fixtures", "mock", "mocks", "stub"}),
        0.7,
    ),
    (
        "benchmark",
        re.compile(r"(^|/)(bench|benches|benchmarks?)/"),
        frozenset({"bench", "benchmark", "benchmarks", "performance"}),
        0.7,
    ),
    (
        "vendored",
        re.compile(r"(^|/)(vendor|vendored|third_party|thirdparty|external|node_modules)/"),
        frozenset({"vendor", "vendored", "third", "party"}),
        0.6,
    ),
    (
        "generated",
        re.compile(r"\.min\.(js|css)$|_pb2(_grpc)?\.py$|\.generated\.|(^|/)generated/|\.g\.dart$"),
        frozenset({"generated", "minified", "protobuf"}),
        0.6,
    ),
    (
        # Python's convention for implementation details: `_internal/`, `_utils.py`.
        "private",
        re.compile(r"(^|/)_[a-z][^/]*(/|\.py$)"),
        frozenset({"internal", "internals", "private"}),
        0.7,
    ),
    (
        # What a file of type declarations declares is defined elsewhere (0.65 measured lower).
        "type declarations",
        re.compile(r"(^|/)(types?|typings)/|\.d\.ts$"),
        frozenset({"type", "types", "typing", "typings", "interface", "interfaces", "declaration"}),
        0.8,
    ),
)


# Words that frame a question rather than name what it is about ("how does the router resolve a
# route", "where is the cache invalidated"): left out of the text the model embeds, so that the
# query vector is its topic's. Code has no "how does the", and mean pooling gave such words a share
# of the vector. The BM25 arm leaves out every stop word already. "and" and "for" stay: they
# join the topic's words (dropping them cost the code sets).
_FRAME_WORDS_TEXT = (
    "how what where when why which who does do did is are was were be been can could should "
    "would will the a an of in to"
)
FRAME_WORDS = frozenset(_FRAME_WORDS_TEXT.split())
FRAME_NOTE = "embedded as"  # how --explain names the text the model embedded
_WORD_EDGES = "?.,!:;'\"()"


# A query is a question when its first word is one of these; only a question loses its framing
# words: a statement, such as a SciFact claim, is embedded as typed.
_QUESTION_WORDS = FRAME_WORDS - frozenset(["be", "been", "the", "a", "an", "of", "in", "to"])


def embedding_text(query: str) -> str:
    """The query as the model embeds it: a question (its first word in ``_QUESTION_WORDS``)
    without the words that frame it (:data:`FRAME_WORDS`), or as typed when nothing else is
    left; any other query as typed."""
    words = query.split()
    if not words or words[0].lower().strip(_WORD_EDGES) not in _QUESTION_WORDS:
        return query
    kept = [word for word in words if word.lower().strip(_WORD_EDGES) not in FRAME_WORDS]
    return " ".join(kept) if kept else query


@dataclass(frozen=True)
class QueryInfo:
    """What the priors need to know: the query's words and names, and where the index has
    public Python modules (:func:`public_python_folders`; None: everywhere)."""

    words: frozenset[str]
    terms: frozenset[str]  # words and identifier parts, stop words too, singular (stem_words)
    names: tuple[str, ...]
    qualifiers: tuple[frozenset[str], ...]  # per name: lower-cased parts before it (std.mem.eql)
    public_folders: frozenset[str] | None = None
    is_name: bool = False  # the query is one identifier, qualified or not (`a::B`, `A\B`)
    is_question: bool = False  # its first word asks (`how`, `where`…): see _QUESTION_WORDS


def query_info(query: str) -> QueryInfo:
    """Lower-cased words and the identifier-like names of a query."""
    words = frozenset(word.lower() for word in re.findall(r"\w+", query))
    terms = frozenset(stem_words(re.findall(r"[A-Za-z0-9]+", query)))
    found = [m.group() for m in NAME_PATH.finditer(query)]
    symbols = tuple(
        dict.fromkeys(word for word in found if len(found) == 1 or _IDENTIFIER_LIKE.search(word))
    )
    qualified: dict[str, set[str]] = {}
    for symbol in symbols:
        *qualifiers, name = re.split(r"\.|::|\\|#", symbol)
        if len(name) > 1 and name.lower() not in STOP_WORDS:
            qualified.setdefault(name, set()).update(q.lower() for q in qualifiers)
    # PHP writes a fully qualified name with a leading backslash (`\Monolog\Logger`)
    is_name = bool(qualified) and bool(NAME_PATH.fullmatch(_bare_name(query)))
    parts = tuple(frozenset(q) for q in qualified.values())
    first = query.split(maxsplit=1)[0].lower().strip(_WORD_EDGES) if query.strip() else ""
    return QueryInfo(
        words, terms, tuple(qualified), parts, is_name=is_name, is_question=first in _QUESTION_WORDS
    )


def _bare_name(query: str) -> str:
    """The query without what may wrap a name typed alone: quotes or backticks, a call's ``()``
    and PHP's leading backslash (``\\Monolog\\Logger``)."""
    bare = query.strip().strip(_NAME_EDGES).strip()
    bare = bare[:-2].rstrip() if bare.endswith("()") else bare
    return bare.lstrip("\\")


def stem_words(words: list[str]) -> list[str]:
    """Lower-case, singular parts of words and identifiers (``Headers`` → ``header``,
    ``RetryMiddleware`` → ``retry``, ``middleware``), the whole word too; digits dropped."""
    found: list[str] = []
    for word in words:
        parts = split_identifier(word)
        for part in (word.lower(), *parts) if len(parts) > 1 else (word.lower(),):
            if not part.isdigit():
                found.append(_singular(part))
    return found


# Endings stripped so that a word and its derived forms meet ("deserialization", "deserializer",
# "deserialized"; "formatter", "formatting"; "validator", "validation"; "routes", "route"), longest
# first ("-ies"/"-ied" become "y": "queries" = "query"), then a doubled last consonant and a final
# "e"; the stem keeps 4 letters or more (3 for a plural "s": "maps", "keys"). Crude, and only ever
# compared with words stripped the same way.
_ENDINGS = (
    "izations", "ization", "izing", "izers", "izer", "izes", "ized", "ize", "ations", "ation",
    "ators", "ator", "ates", "ated", "ate", "ings", "ing", "ers", "er", "ies", "ied", "ed", "es",
    "s",
)  # fmt: skip
_UNDOUBLED = frozenset("bdgkmnprt")  # `formatt(er)`, `mapp(ing)`, `runn(ing)`: not l, s, z, f
# The endings by their last letter, longest first: a word is checked against the few that can
# end it (a word ending in none of these letters against none), not all 24.
_ENDINGS_BY_LAST = {
    last: tuple(ending for ending in _ENDINGS if ending[-1] == last)
    for last in {ending[-1] for ending in _ENDINGS}
}


def _singular(word: str) -> str:
    if word and not word.endswith("ss"):
        for ending in _ENDINGS_BY_LAST.get(word[-1], ()):
            if word.endswith(ending) and len(word) - len(ending) >= (3 if ending == "s" else 4):
                word = word[: -len(ending)] + ("y" if ending in ("ies", "ied") else "")
                if word[-1] == word[-2] and word[-1] in _UNDOUBLED:
                    word = word[:-1]
                break
    return word[:-1] if word.endswith("e") and len(word) > 4 else word


def file_name_words(rel: str) -> frozenset[str]:
    """The words of a file's stem (its folder's for a generic stem like ``index``), as
    :func:`stem_words` spells them; empty when there is no name to match."""
    return _name_words(file_name(rel))


def file_name(rel: str) -> str:
    """The name :func:`file_name_words` takes the words of: the file's stem, or its folder's
    name for a generic stem ("" at the top)."""
    parts = rel.rsplit("/", 2)
    # The name without its extension: `SqlMapper.Async.cs` is not named by "SqlMapper"
    stem = parts[-1].rsplit(".", 1)[0] if "." in parts[-1][1:] else parts[-1]
    if stem.lower() in _GENERIC_STEMS:
        return parts[-2] if len(parts) > 1 else ""
    return stem


# Keyed by the name, not the path: names repeat across a tree (`index`, `utils`, a project checked
# out ten times), so a pass over every file of 104k (named_files.name_index) stems 9k names.
@functools.lru_cache(maxsize=65_536)
def _name_words(name: str) -> frozenset[str]:
    """The words of a file's name (:func:`file_name`), as :func:`file_name_words` gives them."""
    # Stop words stay (`ToJSON` is not named by "JSON"), but a name of stop words alone names
    # nothing.
    words = frozenset(stem_words(split_identifier(name)))
    if not words - STOP_WORDS:
        return frozenset()
    # `BooleanUtils`, `RouterImpl`, `StringHelper`: the topic is the rest of the name.
    return words - _GENERIC_PARTS if words - _GENERIC_PARTS - STOP_WORDS else words


def folder_words(rel: str) -> frozenset[str]:
    """The words of the file's last ``FOLDER_DEPTH`` folders, generic ones (``src``, ``lib``)
    left out, as :func:`stem_words` spells them."""
    return _folders_words(tuple(rel.rsplit("/", FOLDER_DEPTH + 1)[:-1][-FOLDER_DEPTH:]))


# Keyed by the folders, not the path: the files of a folder share them.
@functools.lru_cache(maxsize=65_536)
def _folders_words(folders: tuple[str, ...]) -> frozenset[str]:
    """The words of :func:`folder_words` for a file's last folders."""
    words: set[str] = set()
    for folder in folders:
        if folder.lower() not in _GENERIC_FOLDERS:
            words.update(stem_words(split_identifier(folder)))
    return frozenset(word for word in words - STOP_WORDS if len(word) > 2)


def names_file(rel: str, info: QueryInfo) -> bool:
    """True when every word of the file's name is a word of the query."""
    name = _path_facts(rel).name_words
    return bool(name) and name <= info.terms


def defines_queried(rel: str, text: str, info: QueryInfo, path: str = "") -> bool:
    """True when the chunk defines a queried name; a qualified name (``std.mem.eql``) counts only
    in a file whose stem or folders hold one of its qualifiers (``mem.zig``). The folders are
    those of the file's whole ``path`` (``rel`` without one), the indexed folder's included:
    ``Rails::Engine`` is the ``class Engine`` of ``engine.rb`` in a folder
    ``railties/lib/rails`` indexed on its own."""
    defined = set(_definitions_of(rel, text, info.names, info.is_name))
    if not defined:
        return False
    folders = set(path_terms(path or rel))
    return any(
        not qualifiers or not qualifiers.isdisjoint(folders)
        for name, qualifiers in zip(info.names, info.qualifiers, strict=True)
        if name in defined
    )


def _definitions_of(rel: str, text: str, names: tuple[str, ...], strict: bool) -> list[str]:
    """The queried ``names`` the text defines. Definitions are one line each, so only the lines
    that hold a name are parsed: the full parse of 60 candidates cost more than the search.
    With ``strict`` (a query that is one name), a line that only declares what is defined
    elsewhere does not count (:func:`_declares_only`): the definition itself comes first; and
    a name typed in lower case matches a definition in any case (``joinset``: ``JoinSet``)."""
    folded = strict and all(name == name.lower() for name in names)
    searched = text.lower() if folded else text
    if not any(name in searched for name in names):
        return []
    is_c = rel.rsplit(".", 1)[-1].lower() in _C_EXTENSIONS
    found: list[str] = []
    at = 0
    for line in text.splitlines(keepends=True):
        seen = line.lower() if folded else line
        if any(name in seen for name in names):
            for name in definitions(line):
                queried = name.lower() if folded else name
                if queried not in names or queried in found:
                    continue
                if not strict or not _declares_only(text, at, line, name, is_c):
                    found.append(queried)
        at += len(line)
    return found


_C_EXTENSIONS = frozenset(
    ["c", "h", "cc", "cpp", "cxx", "hpp", "hh", "hxx", "ipp", "inl", "m", "mm"]
)
# Rust's `impl Trait for Type` implements the trait for the type: it defines neither.
_IMPL_FOR = re.compile(r"[ \t]*(?:unsafe[ \t]+)?impl\b[^{;]*?[ \t]for[ \t]")
# Java and C#: a constructor (an access modifier, then the class's name and its parameters) is a
# member of the class its `class` line defines.
_CONSTRUCTOR = re.compile(
    r"[ \t]*(?:(?:public|protected|private|internal)[ \t]+)+([A-Z]\w*)[ \t]*\("
)
# C and C++: a type named after its keyword (`struct Curl_easy`); only a body or a base class list
# after the name defines it: not a forward declaration (`struct foo;`) nor a variable or a
# parameter of that type (`struct Curl_easy *data`).
_C_TYPE = re.compile(r"\b(?:class|struct|union|enum)[ \t]+(?:class[ \t]+|struct[ \t]+)?(\w+)")
_C_TYPE_BODY = re.compile(r"[ \t]*(?:final\b[ \t]*)?(?:\{|:(?!:)|\r?\n[ \t]*\{)")
_PROTOTYPE_SCAN = 400  # characters after a C name in which its body or its `;` shows
# A macro defines its name, whatever follows it: `#define CURL_HTTP_V2x (1 << 1)` and
# `#define Curl_bufref_clear(br) …` are no prototypes, though a `(` follows the name.
_C_MACRO = re.compile(r"[ \t]*#[ \t]*define[ \t]+(\w+)")


def _declares_only(text: str, at: int, line: str, name: str, is_c: bool) -> bool:
    """Whether ``line`` (the one at offset ``at`` of ``text``) only declares ``name``, defined
    elsewhere: a Rust ``impl Trait for Type``; a Java or C# constructor (its class's ``class``
    line defines the name); in C and C++, a type named without its body
    (a forward declaration, a variable of that type) or a function's prototype (its parameter
    list followed by ``;`` before any ``{``), so the function's body in the ``.c`` file ranks
    above its prototype in the header. A ``#define`` of the name always defines it."""
    if _IMPL_FOR.match(line):
        return True
    constructor = _CONSTRUCTOR.match(line)
    if constructor is not None and constructor.group(1) == name:
        return True
    if not is_c:
        return False
    macro = _C_MACRO.match(line)
    if macro is not None and macro.group(1) == name:
        return False
    for typed in _C_TYPE.finditer(line):
        if typed.group(1) == name:
            return _C_TYPE_BODY.match(text, at + typed.end()) is None
    named = re.search(rf"\b{re.escape(name)}[ \t]*\(", line)
    if named is None:
        return False
    depth = 0
    end = at + named.end()
    for char in text[end - 1 : end + _PROTOTYPE_SCAN]:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif depth == 0 and char in "{;":
            return char == ";"
    return False


# Lines that only bring in or pass on names defined elsewhere: imports, re-exports, `use`,
# `#include`, `require`, and the quoted names of an `__all__` list.
_IMPORT_WORDS = ("import", "export", "use ", "include", "require", "__all__", "using ", "package ")
_IMPORT_LINE = re.compile(
    r"(?:import\b|from\s+\S+\s+import\b|export\s+(?:\*|\{|type\s+\{)|pub\s+use\b|use\b|"
    r"#\s*include\b|(?:local\s+\w+\s*=\s*)?require\b|using\b|@_exported\b|package\b|"
    r"__all__\b|\}[ \t]*from\b)"
)
# An item or the end of a list (`"Client",`, `Session,`, `]`, `});`): counts neither way, so an
# `__all__` list is judged by its first line and a block of closing braces is not an import.
_LIST_LINE = re.compile(r"(?:[\"']?[\w.]+[\"']?,?|[\])};,]+)[ \t]*$")
REEXPORT_FACTOR = 0.7  # a chunk of imports and re-exports (`__init__.py`, `index.js`, `mod.rs`)
REEXPORT_SHARE = 0.6  # ... when this share of its lines import or re-export


def is_reexport(text: str) -> bool:
    """True when most of the chunk's first lines import or re-export names defined elsewhere."""
    # Judged on the first lines (a chunk of imports starts with them): cheap on every candidate,
    # and most chunks have none of the words such lines need.
    head = text[:400]
    if not any(word in head for word in _IMPORT_WORDS):
        return False
    lines = list(islice(filter(None, map(str.lstrip, text.split("\n", 24))), 12))
    if len(lines) < 3:
        return False
    counted = [line for line in lines if not _LIST_LINE.match(line)]
    imports = sum(bool(_IMPORT_LINE.match(line)) for line in counted)
    return imports > 0 and imports >= REEXPORT_SHARE * len(counted)


def chunk_priors(
    rel: str, text: str, info: QueryInfo, defines: bool | None = None, path: str = ""
) -> list[tuple[str, float]]:
    """The (name, factor) priors that apply to one chunk; ``defines``: whether it defines a
    queried name, when that is known already (:func:`defines_queried` otherwise, with the
    file's whole ``path``)."""
    priors: list[tuple[str, float]] = []
    if REEXPORT_FACTOR != 1.0 and is_reexport(text):
        priors.append(("imports and re-exports", REEXPORT_FACTOR))
    if defines is None:
        defines = bool(info.names) and defines_queried(rel, text, info, path)
    if info.names and defines:
        priors.append((DEFINES_NOTE, definition_boost(info)))
    priors.extend(path_priors(rel, info))
    return priors


def definition_boost(info: QueryInfo) -> float:
    """The factor of a chunk that defines a queried name: ``NAME_DEFINITION_BOOST`` when the
    query is that name alone, ``DEFINITION_BOOST`` when it names it among other words."""
    return NAME_DEFINITION_BOOST if info.is_name else DEFINITION_BOOST


def path_priors(rel: str, info: QueryInfo) -> list[tuple[str, float]]:
    """The priors of :func:`chunk_priors` that depend on the chunk's file alone."""
    priors: list[tuple[str, float]] = []
    facts = _path_facts(rel)
    if names_file(rel, info):
        share = 1.0 if len(facts.name_words) > 1 else STEM_SINGLE_SHARE
        priors.append((STEM_NOTE, 1 + (STEM_BOOST - 1) * share))
    if FOLDER_BOOST != 1.0 and facts.folder_words & info.terms:
        priors.append((FOLDER_NOTE, FOLDER_BOOST))
    if info.is_question and not info.words & _DOC_WORDS and facts.is_documentation:
        priors.append((DOCUMENTATION_NOTE, DOCUMENTATION_FACTOR))
    for label, lifted_by, factor in facts.kinds:
        if label == "private" and not _is_private_beside_public(rel, info.public_folders):
            continue
        if not info.words & lifted_by:
            priors.append((f"{label} file", factor))
            break
    return priors


class _PathFacts(NamedTuple):
    """What :func:`path_priors` reads of a file's path, whatever the query."""

    name_words: frozenset[str]  # file_name_words
    folder_words: frozenset[str]
    is_documentation: bool
    kinds: tuple[tuple[str, frozenset[str], float], ...]  # _path_kinds
    private: bool  # one of the kinds is "private", whose prior reads the whole path


class PathPriorProducts:
    """The product of :func:`path_priors` of files, for one query: files whose paths have the
    same facts (one file in ten checkouts of a tree, each file of a folder) share it, computed
    once. A search choosing among thousands of copies' files asks for each (``search.copies``)."""

    def __init__(self, info: QueryInfo) -> None:
        self._info = info
        self._known: dict[object, float] = {}

    def __call__(self, rel: str) -> float:
        facts = _path_facts(rel)
        key = (facts, rel) if facts.private else facts
        product = self._known.get(key)
        if product is None:
            product = self._known[key] = math.prod(f for _, f in path_priors(rel, self._info))
        return product


# Cached per path: a search sees the same files again and again (the path kinds' seven regular
# expressions per chunk were a tenth of a warm search), and one look-up is cheaper than four.
@functools.lru_cache(maxsize=65_536)
def _path_facts(rel: str) -> _PathFacts:
    kinds = _path_kinds(rel)
    private = any(label == "private" for label, _, _ in kinds)
    return _PathFacts(
        file_name_words(rel), folder_words(rel), _is_documentation(rel), kinds, private
    )


# A question ("how does the retry work", "where is the encoding guessed") asks for the code that
# does it: a changelog, release notes or a manual page, which mention every feature in passing,
# rank below the code, unless the question asks for them ("what changed in 2.32"). A document
# on one topic keeps its rank: where no code does what is asked (a retry policy written down
# only in `docs/retry.md`), it is the answer.
DOCUMENTATION_FACTOR = 0.7
DOCUMENTATION_NOTE = "changelog or manual, for a question"
_DOC_WORDS_TEXT = (
    "doc docs documentation documented readme changelog changes history release releases news "
    "notes changed manual man upgrade upgrading migration"
)
_DOC_WORDS = frozenset(_DOC_WORDS_TEXT.split())
_CHANGELOG = re.compile(
    r"(^|/)(change_?log|changes|history|news|release[_-]?notes|releases?)"
    r"(\.(md|markdown|rst|txt|adoc))?$"
    r"|(^|/)(changes|changelog\.d|newsfragments)/"
)


def _is_documentation(rel: str) -> bool:
    """A changelog (``CHANGELOG``, ``HISTORY.md``, ``NEWS.rst``, towncrier's ``changes/*``) or a
    manual page (``man/man1/pyenv.1``, :data:`~semsearch.files.filetype.MAN_PAGE`)."""
    return bool(_CHANGELOG.search(rel.lower()) or MAN_PAGE.search(rel))


def public_python_folders(rels: Iterable[str]) -> frozenset[str]:
    """The folders ("" for the root, "a/b") holding a public Python module or a public folder of
    Python modules: an entry whose name does not start with "_"."""
    found: set[str] = set()
    for rel in rels:
        if rel.endswith(".py"):
            parts = rel.split("/")
            for depth, part in enumerate(parts):
                if not part.startswith("_"):
                    found.add("/".join(parts[:depth]))
    return frozenset(found)


def _is_private_beside_public(rel: str, public_folders: frozenset[str] | None) -> bool:
    """Whether the private module or folder of ``rel`` (``_utils.py``, ``_internal/``) sits
    beside a public one: only then is it an implementation detail of a public API. A package
    whose modules are all private (httpx's ``_client.py``, ``_models.py``…) is its own
    implementation, not a detail of it."""
    if public_folders is None:
        return True
    parts = rel.split("/")
    for depth, part in enumerate(parts):
        is_last = depth == len(parts) - 1
        if _PRIVATE_PART.match(part) and (not is_last or part.endswith(".py")):
            return "/".join(parts[:depth]) in public_folders
    return True


def prior_ceiling(rel: str, info: QueryInfo, defines: bool | None = None) -> float:
    """The largest product of :func:`chunk_priors` a chunk of the file ``rel`` can get, without
    its text: its path priors, times the text's priors where they can raise a score
    (``defines``: whether it defines a queried name, None when not known)."""
    ceiling = math.prod(factor for _, factor in path_priors(rel, info))
    if info.names and defines is not False:
        ceiling *= max(definition_boost(info), 1.0)
    return ceiling * max(REEXPORT_FACTOR, 1.0)


# The vector arm ranks a chunk by its cosine + FILE_VECTOR_WEIGHT x the mean cosine of its file's
# best FILE_VECTOR_TOP chunks among the arm's candidates (the chunk's own included): a file whose
# best chunks all match beats one lone spike among weak chunks.
# FILE_VECTOR_WHOLE: a code file's mean is over FILE_VECTOR_TOP even when fewer of its chunks
# are candidates (the missing ones count 0), so a file with several matching chunks — the hub
# file an architecture question is about — beats a small file with one; documents keep the mean
# of what they have (an abstract is one chunk; for every file alike it cost SciFact).
FILE_VECTOR_WEIGHT = 1.0
FILE_VECTOR_TOP = 3
FILE_VECTOR_WHOLE = True
# The path term: a code file's chunks also gain PATH_WEIGHT x the cosine of the query with the
# embedding of the file's rel path (`client_ws.py`, `persistence/hf.py`): what the file-name
# prior does for words the query shares with the path, for meanings ("WebSocket client").
# Documents get none (with them the code sets scored lower).
PATH_WEIGHT = 0.9


def file_lifted(
    nearest: list[tuple[int, float]],
    file_of: dict[int, int],
    whole: Collection[int] = (),
    path_cosine: dict[int, float] | None = None,
) -> list[int]:
    """The vector arm's chunk ids (``nearest``: (chunk id, cosine), best first) ranked by the
    cosine plus ``FILE_VECTOR_WEIGHT`` x the mean of the best ``FILE_VECTOR_TOP`` cosines of the
    chunk's file among them (``file_of``: chunk id → file id; a chunk missing from it is a file
    of its own), plus ``PATH_WEIGHT`` x its file's ``path_cosine`` (file id → the query's cosine
    with the file's path vector; 0 for a file not in it). For the files in ``whole`` the mean
    is over ``FILE_VECTOR_TOP`` even when fewer of their chunks are candidates."""
    path_cosine = path_cosine or {}
    per_file: dict[int, list[float]] = {}
    for chunk, cosine in nearest:
        per_file.setdefault(file_of.get(chunk, -chunk), []).append(cosine)
    mean = {
        f: sum(c[:FILE_VECTOR_TOP]) / (FILE_VECTOR_TOP if f in whole else len(c[:FILE_VECTOR_TOP]))
        for f, c in per_file.items()
    }
    lifted = []
    for at, (chunk, cosine) in enumerate(nearest):
        f = file_of.get(chunk, -chunk)
        lift = FILE_VECTOR_WEIGHT * mean[f] + PATH_WEIGHT * path_cosine.get(f, 0.0)
        lifted.append((cosine + lift, -at, chunk))
    return [chunk for *_, chunk in sorted(lifted, reverse=True)]


# File coherence, in hybrid mode: after fusion, each file's best chunk gains FILE_COHERENCE x the
# best fused score x the file's sum of fused scores over the largest file's sum, so the file that
# many candidates of both arms come from rises — the hub file an architecture question is about
# (semble's design). The reported score's ceiling counts it (best_prior).
FILE_COHERENCE = 0.2
# ... for a question ("how does vitest run test files", see QueryInfo.is_question), which asks how
# something works: the file doing most of it matters more than the one chunk that names it best.
# 46 repos: 0.2 / 0.3 / 0.5 / 0.7 / 1.0 → 0.8942 / 0.8955 / 0.8957 / 0.8964 / 0.8951
# (architecture 0.861 → 0.869 at 0.5); bench/questions (docs, changelogs and tests indexed too):
# 0.2 / 0.35 / 0.5 / 0.7 → 0.830 / 0.851 / 0.851 / 0.830. A statement such as a SciFact claim
# keeps FILE_COHERENCE.
QUESTION_COHERENCE = 0.5
COHERENCE_NOTE = "file coherence"  # --explain: "file coherence +0.20" (x the best fused score)


# A document (prose: Markdown, text, PDF…, see is_prose) counts its best fused score, not the
# sum: several matching chunks of one document make it long (an abstract in three chunks), not
# the hub a code file with several is (the sum lifted long abstracts on SciFact).
DOCUMENT_COHERENCE_SUM = False


def coherence_weight(info: QueryInfo) -> float:
    """How much file coherence counts for this query: ``QUESTION_COHERENCE`` for a question,
    ``FILE_COHERENCE`` for anything else."""
    return QUESTION_COHERENCE if info.is_question else FILE_COHERENCE


def file_coherence(
    scores: dict[int, float],
    file_of: dict[int, int],
    documents: Collection[int] = (),
    weight: float = FILE_COHERENCE,
) -> dict[int, float]:
    """The share of the best fused score each file's best chunk gains (chunk id → share), from
    the fused ``scores``: ``weight`` x the file's sum over the largest file's sum. A chunk
    missing from ``file_of`` (no vector in memory: a file indexed lexically only) is a file of
    its own. The files in ``documents`` count their best chunk's score instead of the sum
    (``DOCUMENT_COHERENCE_SUM``)."""
    if not scores:
        return {}
    sums: dict[int, float] = {}
    best: dict[int, int] = {}
    for chunk, score in scores.items():
        file = file_of.get(chunk, -chunk)
        if DOCUMENT_COHERENCE_SUM or file not in documents:
            sums[file] = sums.get(file, 0.0) + score
        else:
            sums[file] = max(sums.get(file, 0.0), score)
        if file not in best or score > scores[best[file]]:
            best[file] = chunk
    largest = max(sums.values())
    return {chunk: weight * sums[file] / largest for file, chunk in best.items()}


# The priors that raise a score; the file coherence counts as 1 + its share (a fused score of at
# most 1 plus at most its share of the best).
RAISING_NOTES = (DEFINES_NOTE, STEM_NOTE, FOLDER_NOTE, COHERENCE_NOTE)


def best_prior(raising: dict[str, float]) -> float:
    """The largest product of priors a result can have, given the largest factor of each raising
    prior among the results (the path kinds and the file decay only lower a score)."""
    return math.prod(raising.get(note, 1.0) for note in RAISING_NOTES)


def _path_kinds(rel: str) -> tuple[tuple[str, frozenset[str], float], ...]:
    """The path kinds a file belongs to, in priority order."""
    lowered = rel.lower()
    return tuple(
        (label, lifted_by, factor)
        for label, pattern, lifted_by, factor in _PATH_KINDS
        if pattern.search(lowered)
    )
