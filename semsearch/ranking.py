"""Ranking priors applied after fusion: cheap, deterministic, and each one named in the result.

- A chunk that *defines* a symbol the query names (``def parse_header``, ``class Foo``,
  ``function foo``, ``fn foo``…) is boosted. A query word names a symbol when it has a capital
  letter, ``_``, a digit, ``.`` or ``::`` in it, or is the whole query: plain lower-case words of
  a sentence ("how the router works") do not.
- Chunks of tests, examples, fixtures, benchmarks, vendored and generated files, and of private
  modules (``_internal/``, ``_utils.py``), are down-weighted, unless the query asks for them.
- Many chunks of one file get diminishing returns: the n-th chunk of a file is multiplied by
  ``FILE_DECAY ** (n - 1)``, so the top results spread over files.

Only the definition boost raises a score, so :func:`best_prior` (the boost when the query names a
symbol, else 1) is the largest product of priors any chunk can get for a query; the search divides
the reported hybrid and bm25 scores by it to keep them in [0, 1] without changing their order.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from semsearch.lexical import STOP_WORDS, definitions, path_terms

# Each knob with the reason for its value; bench/RESULTS.md has the measurements behind them.
RRF_K = 20  # RRF constant: 20 beat the paper's 60 on SciFact and on code search
POOL_MIN = 100  # each arm ranks max(POOL_PER_K x k, POOL_MIN) chunks; came with rrfK 20 (+0.014)
POOL_PER_K = 5  # the arm pool per requested hit, so a large k still fuses deep lists
CANDIDATES = 60  # fused candidates the priors may reorder, at least; 100 measured no better
CANDIDATES_PER_K = 4  # ... or this many per requested hit when k is large
DEFINITION_POOL = 50  # chunks defining a queried name, best BM25 first (the definitions arm)
# BM25 weights of the FTS columns: the chunk text counts fully; the path/identifier terms and the
# defined names half, so a file's name lifts its chunks without drowning their text. (1, 1, 0.5),
# (1, 0.25, 0.5) and (1, 0.5, 1) measured within noise or worse.
COLUMN_WEIGHTS = {"text": 1.0, "terms": 0.5, "defines": 0.5}
DEFINITION_BOOST = 1.5  # a chunk defining a queried symbol; 2.0 measured no better
DEFINES_NOTE = "defines a queried symbol"  # how that prior is named in a hit's priors
FILE_DECAY = 0.5  # n-th chunk of one file x FILE_DECAY**(n-1): 0.35/0.7/1.0 measured worse

# A query word names a symbol when it could not be plain prose: a capital letter, "_", a digit,
# "." or "::" inside it (or when the query is that one word).
_IDENTIFIER_LIKE = re.compile(r"[A-Z_0-9$]|\.|::")
_QUERY_WORD = re.compile(r"[A-Za-z_$][\w$]*(?:(?:\.|::)[A-Za-z_$][\w$]*)*")

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
        re.compile(r"(^|/)(examples?|samples?|demos?|docs_src|tutorials?)/"),
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
)


@dataclass(frozen=True)
class QueryInfo:
    """What the priors need to know about a query."""

    words: frozenset[str]
    names: tuple[str, ...]
    qualifiers: tuple[frozenset[str], ...]  # per name: lower-cased parts before it (std.mem.eql)


def query_info(query: str) -> QueryInfo:
    """Lower-cased words and the identifier-like names of a query."""
    words = frozenset(word.lower() for word in re.findall(r"\w+", query))
    found = [m.group() for m in _QUERY_WORD.finditer(query)]
    symbols = tuple(
        dict.fromkeys(word for word in found if len(found) == 1 or _IDENTIFIER_LIKE.search(word))
    )
    qualified: dict[str, set[str]] = {}
    for symbol in symbols:
        *qualifiers, name = symbol.replace("::", ".").split(".")
        if len(name) > 1 and name.lower() not in STOP_WORDS:
            qualified.setdefault(name, set()).update(q.lower() for q in qualifiers)
    return QueryInfo(words, tuple(qualified), tuple(frozenset(q) for q in qualified.values()))


def defines_queried(rel: str, text: str, info: QueryInfo) -> bool:
    """True when the chunk defines a queried name; a qualified name (``std.mem.eql``) counts only
    in a file whose stem or folders hold one of its qualifiers (``mem.zig``)."""
    defined = set(definitions(text)).intersection(info.names)
    if not defined:
        return False
    folders = set(path_terms(rel))
    return any(
        not qualifiers or not qualifiers.isdisjoint(folders)
        for name, qualifiers in zip(info.names, info.qualifiers, strict=True)
        if name in defined
    )


def chunk_priors(rel: str, text: str, info: QueryInfo) -> list[tuple[str, float]]:
    """The (name, factor) priors that apply to one chunk."""
    priors: list[tuple[str, float]] = []
    if info.names and defines_queried(rel, text, info):
        priors.append((DEFINES_NOTE, DEFINITION_BOOST))
    for label, lifted_by, factor in _path_kinds(rel):
        if not info.words & lifted_by:
            priors.append((f"{label} file", factor))
            break
    return priors


def best_prior(info: QueryInfo, boosted: bool = True) -> float:
    """The largest product of priors a result can have: :data:`DEFINITION_BOOST` when the query
    names a symbol and a result (``boosted``) defines it, else 1 (the path kinds and the file
    decay only lower a score)."""
    return DEFINITION_BOOST if info.names and boosted else 1.0


@functools.lru_cache(maxsize=65_536)
def _path_kinds(rel: str) -> tuple[tuple[str, frozenset[str], float], ...]:
    """The path kinds a file belongs to, in priority order (cached: a search sees the same files
    again and again, and seven regular expressions per chunk were a tenth of a warm search)."""
    lowered = rel.lower()
    return tuple(
        (label, lifted_by, factor)
        for label, pattern, lifted_by, factor in _PATH_KINDS
        if pattern.search(lowered)
    )
