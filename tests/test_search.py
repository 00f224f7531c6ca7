"""Ranking: FTS5 escaping, RRF, filters before top-k, deduplication of overlapping chunks."""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest

import semsearch
from semsearch.cli.output import explain
from semsearch.config import Mode, Settings
from semsearch.errors import NoMatchingFilesError, UsageError
from semsearch.index import Index
from semsearch.model.embedder import HashEmbedder, OnnxEmbedder
from semsearch.search import copies, ranking
from semsearch.search.fusion import SearchOptions, rrf, search
from semsearch.search.hits import READ_AHEAD_STEP, Files, candidates, choose
from semsearch.search.ranking import DEFINITION_POOL
from semsearch.store import ChunkRow, FileRef, Store, open_store
from semsearch.store.sqlite.store import SqliteStore
from semsearch.text.lexical import LexicalQuery
from tests.conftest import BACKENDS, write_tree

# How --explain names the priors at their current weights (semsearch/ranking.py).
DEFINES = f"{ranking.DEFINES_NOTE} x{ranking.DEFINITION_BOOST:g}"
NAME_DEFINES = f"{ranking.DEFINES_NOTE} x{ranking.NAME_DEFINITION_BOOST:g}"  # a one-name query
ONE_WORD_BOOST = 1 + (ranking.STEM_BOOST - 1) * ranking.STEM_SINGLE_SHARE
ONE_WORD_NAME = f"{ranking.STEM_NOTE} x{ONE_WORD_BOOST:g}"
FOLDER = f"{ranking.FOLDER_NOTE} x{ranking.FOLDER_BOOST:g}"


@pytest.fixture(params=BACKENDS)
def store_backend(request: pytest.FixtureRequest) -> str:
    """Every test here runs against both store backends."""
    return str(request.param)


def test_rrf_sums_reciprocal_ranks() -> None:
    fused = rrf([[1, 2], [2, 3]], 60)
    assert fused == pytest.approx({1: 1 / 61, 2: 1 / 62 + 1 / 61, 3: 1 / 62})


@pytest.fixture
def two_folders(tmp_path: Path, hash_index: Index) -> Index:
    a = write_tree(
        tmp_path / "alpha",
        {
            "src/retry.py": "def retry_payment():\n    backoff with jitter\n",
            "docs/notes.md": "retry notes and backoff advice\n",
        },
    )
    b = write_tree(
        tmp_path / "beta",
        {f"f{i}.md": f"retry backoff retry backoff copy {i}\n" for i in range(30)},
    )
    hash_index.update([a, b])
    return hash_index


def test_folder_filter_applies_before_top_k(two_folders: Index) -> None:
    hits = two_folders.search("retry backoff", k=2, folder="alpha")
    assert {h.rel for h in hits} == {"src/retry.py", "docs/notes.md"}
    assert all(h.folder == "alpha" for h in hits)


def test_glob_filter_applies_before_top_k(two_folders: Index) -> None:
    hits = two_folders.search("retry backoff", k=3, glob="*.py")
    assert [h.rel for h in hits] == ["src/retry.py"]


def test_a_filter_asked_again_sees_the_files_indexed_since(
    two_folders: Index, tmp_path: Path
) -> None:
    """The files of a filter are remembered until the index changes (an agent repeats its
    filters), never past a change: a file indexed since is searched with the same filter."""
    assert [h.rel for h in two_folders.search("retry backoff", k=3, glob="*.py")] == [
        "src/retry.py"
    ]
    write_tree(tmp_path / "alpha", {"src/backoff.py": "retry backoff backoff\n"})
    two_folders.update([tmp_path / "alpha"])
    hits = two_folders.search("retry backoff", k=3, glob="*.py")
    assert sorted(h.rel for h in hits) == ["src/backoff.py", "src/retry.py"]
    (tmp_path / "alpha" / "src" / "retry.py").unlink()
    two_folders.update([tmp_path / "alpha"])
    assert [h.rel for h in two_folders.search("retry backoff", k=3, glob="*.py")] == [
        "src/backoff.py"
    ]
    for _ in "ab":  # an invalid glob is refused each time, not remembered as a result
        with pytest.raises(UsageError, match="Invalid glob"):
            two_folders.search("retry", glob="[")


def test_any_of_several_globs_matches_before_top_k(two_folders: Index) -> None:
    hits = two_folders.search("retry backoff", k=2, glob=["*.py", "docs/**"])
    assert {h.rel for h in hits} == {"src/retry.py", "docs/notes.md"}


@pytest.mark.parametrize(
    ("glob", "exclude"),
    [
        ("!*.md", None),
        (None, "*.md"),
        (["src/**", "docs/**"], ["docs/"]),
        (["*", "!f*.md"], "docs/notes.md"),
    ],
)
def test_excluded_paths_are_left_out_before_top_k(
    two_folders: Index, glob: str | list[str] | None, exclude: str | list[str] | None
) -> None:
    hits = two_folders.search("retry backoff", k=1, glob=glob, exclude=exclude)
    assert [h.rel for h in hits] == ["src/retry.py"]


@pytest.mark.parametrize(
    ("glob", "exclude", "message"),
    [
        ("[", None, "Invalid glob '[': a '[' is never closed."),
        ("!src/[z-a]", None, "Invalid glob '!src/[z-a]': the range z-a is reversed."),
        ("*.md", ["ok", "a\\"], "Invalid glob 'a\\\\': it ends with a lone backslash."),
        (None, "!keep.md", "The exclude pattern '!keep.md' starts with '!'"),
    ],
)
def test_an_invalid_pattern_is_a_usage_error_naming_it(
    two_folders: Index, glob: str | None, exclude: list[str] | None, message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        two_folders.search("retry", glob=glob, exclude=exclude)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        (
            {"glob": "x/**"},
            "No indexed path matches the glob 'x/**'. Globs are gitignore patterns matched "
            "against the path inside its folder, e.g. '*.py', 'src/**' or 'docs/'.",
        ),
        (
            {"glob": ["*.txt", "*.rs"], "folder": "alpha"},
            "No indexed path in folder alpha matches the globs '*.txt' or '*.rs'.",
        ),
        (
            {"glob": "*.py", "exclude": ["src/", "tests/"]},
            "Every indexed path matching the glob '*.py' is excluded by 'src/' or 'tests/': "
            "nothing is left to search.",
        ),
        (
            {"glob": "!**", "folder": "beta"},
            "Every indexed path in folder beta is excluded by '**': nothing is left to search.",
        ),
    ],
)
def test_filters_that_match_no_indexed_path_say_so(
    two_folders: Index, filters: dict[str, Any], message: str
) -> None:
    with pytest.raises(NoMatchingFilesError) as caught:
        two_folders.search("retry", **filters)
    assert str(caught.value).startswith(message)


def test_a_folder_with_nothing_indexed_says_so(tmp_path: Path, two_folders: Index) -> None:
    empty = tmp_path / "gamma"
    empty.mkdir()
    two_folders.add([str(empty)])
    with pytest.raises(NoMatchingFilesError, match=r"Folder .*gamma has no indexed files: run"):
        two_folders.search("retry", folder="gamma")


@pytest.mark.parametrize("mode", ["hybrid", "vector", "bm25"])
def test_min_score_drops_the_hits_below_it(two_folders: Index, mode: str) -> None:
    hits = two_folders.search("retry backoff jitter", k=10, mode=mode)  # type: ignore[arg-type]
    floor = sorted({hit.score for hit in hits})[1]  # the second lowest: some go, some stay
    kept = two_folders.search(
        "retry backoff jitter",
        k=10,
        mode=mode,  # type: ignore[arg-type]
        min_score=floor,
    )
    assert kept == [hit for hit in hits if hit.score >= floor]
    assert 0 < len(kept) < len(hits)


def test_a_min_score_that_is_not_a_number_is_a_usage_error(two_folders: Index) -> None:
    with pytest.raises(UsageError, match=r"The minimum score must be a number, got nan\."):
        two_folders.search("retry", min_score=float("nan"))


def test_unknown_folder_names_the_known_ones(two_folders: Index) -> None:
    with pytest.raises(UsageError, match="Indexed folders: alpha, beta"):
        two_folders.search("retry", folder="gamma")


@pytest.mark.parametrize("mode", ["hybrid", "vector", "bm25"])
def test_every_mode_finds_an_exact_identifier(two_folders: Index, mode: str) -> None:
    hits = two_folders.search("retry_payment", k=1, mode=mode)  # type: ignore[arg-type]
    assert hits[0].rel == "src/retry.py"


def test_hybrid_scores_are_on_one_scale(two_folders: Index) -> None:
    top = two_folders.search("retry_payment", k=1)[0]
    assert (top.vector_rank, top.lexical_rank) == (1, 1)
    # retry.py is named by the query too (its stem is a word of retry_payment)
    assert top.priors == (NAME_DEFINES, ONE_WORD_NAME)
    # fused score 1.0 (first in both arms) x both priors, / the same product: the best possible
    assert top.score == pytest.approx(1.0)
    no_word_matches = two_folders.search("zzzz qqqq", k=1)[0]
    assert no_word_matches.lexical_rank is None and no_word_matches.priors == ()
    assert no_word_matches.score == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize("bad", ["", "   "])
def test_empty_query_is_a_usage_error(two_folders: Index, bad: str) -> None:
    with pytest.raises(UsageError, match="query is empty"):
        two_folders.search(bad)


def test_k_below_one_is_a_usage_error(two_folders: Index) -> None:
    with pytest.raises(UsageError, match="k must be at least 1"):
        two_folders.search("retry", k=0)


@pytest.mark.parametrize(
    ("query", "shown"),
    [("caf\udcff", "'caf\\xff'"), ("text:\ud800", "'text:\\ud800'")],
)
@pytest.mark.parametrize("mode", ["hybrid", "bm25"])
def test_a_query_with_bytes_that_are_not_utf8_is_a_usage_error(
    two_folders: Index, query: str, shown: str, mode: Mode
) -> None:
    """Found by fuzzing: such a query ended in a UnicodeEncodeError from SQLite (and the model's
    tokenizer raises TypeError on it)."""
    with pytest.raises(UsageError) as caught:
        two_folders.search(query, mode=mode)
    assert str(caught.value).startswith(f"The query {shown} holds bytes that are not UTF-8 text.")


@pytest.mark.parametrize(
    ("query", "found"), [("NEAR(\x00", 0), ('text:"\x00', 0), ("retry\x00backoff", 5)]
)
def test_a_query_holding_a_nul_is_searched(two_folders: Index, query: str, found: int) -> None:
    """Found by fuzzing: SQLite's FTS5 answered "unterminated string" (an MCP client can send
    a NUL in JSON); the NUL parts words as a space does."""
    hits = two_folders.search(query, mode="bm25")
    assert len(hits) == found
    assert all("retry backoff" in hit.text for hit in hits)


def test_overlapping_chunks_of_one_file_are_deduplicated(tmp_path: Path, hash_index: Index) -> None:
    paragraphs = "\n\n".join(f"needle paragraph {i} " + "word " * 60 for i in range(12))
    root = write_tree(tmp_path / "long", {"long.md": paragraphs})
    hash_index.update([root])
    hits = hash_index.search("needle paragraph", k=20)
    assert len(hits) > 1
    for i, first in enumerate(hits):
        for second in hits[i + 1 :]:
            shared = (
                min(first.end_line, second.end_line) - max(first.start_line, second.start_line) + 1
            )
            assert shared * 2 < second.end_line - second.start_line + 1


def test_search_sees_writes_from_another_index_object(tmp_path: Path, hash_index: Index) -> None:
    root = write_tree(tmp_path / "live", {"one.md": "first document about otters\n"})
    hash_index.update([root])
    assert [h.rel for h in hash_index.search("otters", k=1)] == ["one.md"]
    (root / "two.md").write_text("second document about beavers\n")
    writer = Index(hash_index.settings, embedder=hash_index.embedder)
    writer.update([root])
    writer.close()
    assert hash_index.search("beavers", k=1)[0].rel == "two.md"


def test_definition_beats_call_sites_for_a_symbol_query(tmp_path: Path, hash_index: Index) -> None:
    calls = "\n".join(f"    total += compute_invoice_total(order_{i})" for i in range(6))
    root = write_tree(
        tmp_path / "shop",
        {
            "billing/report.py": f"def report(orders):\n    total = 0\n{calls}\n",
            "billing/invoice.py": "def compute_invoice_total(order):\n    return sum(order)\n",
        },
    )
    hash_index.update([root])
    top = hash_index.search("compute_invoice_total", k=2)
    assert top[0].rel == "billing/invoice.py"
    assert NAME_DEFINES in top[0].priors


def test_test_file_loses_to_the_source_it_tests(tmp_path: Path, hash_index: Index) -> None:
    root = write_tree(
        tmp_path / "lib",
        {
            "tests/test_throttle.py": (
                "def test_throttle():\n    # throttle limits requests per second\n"
                "    assert throttle limits requests per second\n"
            ),
            "src/throttle.py": "# throttle limits requests per second\nclass Throttle: pass\n",
        },
    )
    hash_index.update([root])
    hits = hash_index.search("how are requests per second limited", k=2)
    assert [h.rel for h in hits] == ["src/throttle.py", "tests/test_throttle.py"]
    assert hits[1].priors == ("test file x0.6",)
    asked = hash_index.search("tests for requests per second limits", k=2)
    assert all(hit.priors == () for hit in asked)


def test_more_chunks_of_one_file_get_diminishing_returns(tmp_path: Path, hash_index: Index) -> None:
    body = "\n\n".join(f"section {i} about caching layers " + "filler " * 150 for i in range(4))
    root = write_tree(
        tmp_path / "docs", {"cache.md": body, "other.md": "caching layers overview\n"}
    )
    hash_index.update([root])
    hits = hash_index.search("caching layers", k=3)
    repeated = [hit for hit in hits if hit.rel == "cache.md"]
    assert any(f"chunk 2 of this file x{ranking.FILE_DECAY:g}" in hit.priors for hit in repeated)
    assert "other.md" in [hit.rel for hit in hits]


def test_explain_names_the_file_lift(tmp_path: Path, hash_index: Index) -> None:
    # one file of four matching chunks among one-chunk notes: the lift reorders the vector arm
    strong = "\n".join(["queue worker drains jobs"] * 30)
    mid = "\n".join(["queue worker drains jobs"] * 10 + ["filler other words here"] * 20)
    notes = {f"n{i}.md": f"queue worker drains jobs note {i} " + "misc " * i for i in range(12)}
    root = write_tree(tmp_path / "q", {"w.md": "\n\n".join([strong, mid, mid, mid]), **notes})
    hash_index.update([root])
    hits = hash_index.search("queue worker drains jobs", k=10)
    assert all(hit.cosine_rank is not None for hit in hits)
    moved = [hit for hit in hits if hit.cosine_rank != hit.vector_rank]
    assert moved
    line = explain(moved[0])
    assert f"vector #{moved[0].vector_rank} (cosine #{moved[0].cosine_rank}, file lift)" in line
    still = [hit for hit in hits if hit.cosine_rank == hit.vector_rank]
    assert all("file lift" not in explain(hit) for hit in still)
    vector_mode = hash_index.search("queue worker drains jobs", k=10, mode="vector")
    assert all(hit.cosine_rank is None for hit in vector_mode)  # no lift outside hybrid


def test_the_path_term_ranks_code_files_by_their_path(tmp_path: Path, hash_index: Index) -> None:
    # the same chunk text in two code files and a note: only the path tells them apart (each
    # copy its own hit)
    text = "shared words here\n"
    root = write_tree(tmp_path / "p", {"x/alpha.py": text, "x/beta.py": text, "beta.md": text})
    hash_index.update([root])
    found = hash_index.search("shared words beta", k=3, all_copies=True)
    hits = {hit.rel: hit for hit in found}
    assert hits["x/beta.py"].path_cosine > 0 == hits["x/alpha.py"].path_cosine
    assert hits["x/beta.py"].vector_rank < hits["x/alpha.py"].vector_rank
    assert hits["beta.md"].path_cosine is None  # documents get no path term
    assert f"path cosine {hits['x/beta.py'].path_cosine:.2f}" in explain(hits["x/beta.py"])
    assert "path cosine" not in explain(hits["beta.md"])
    assert hits["x/beta.py"].as_json()["pathCosine"] == round(hits["x/beta.py"].path_cosine, 4)
    vector_mode = hash_index.search("shared words beta", k=3, mode="vector", all_copies=True)
    assert all(hit.path_cosine is None for hit in vector_mode)  # a hybrid-mode term


@pytest.mark.parametrize("store_backend", ["sqlite"])  # writes the SQLite file's path_vector
def test_damaged_path_vectors_count_as_none(tmp_path: Path, settings: Settings) -> None:
    text = "shared words here\n"
    root = write_tree(tmp_path / "p", {"alpha.py": text, "beta.py": text, "gamma.py": text})
    writer = Index(settings, embedder=HashEmbedder())
    writer.update([root])
    writer.close()
    with sqlite3.connect(settings.index_path) as conn:
        # a float32 blob of another encoding, and a blob too short for its scale
        conn.execute("UPDATE files SET path_vector = ? WHERE rel = 'alpha.py'", (bytes(1536),))
        conn.execute("UPDATE files SET path_vector = x'0102' WHERE rel = 'beta.py'")
    conn.close()
    reader = Index(settings, embedder=HashEmbedder())
    hits = {hit.rel: hit for hit in reader.search("shared words gamma", k=3, all_copies=True)}
    reader.close()
    assert hits["alpha.py"].path_cosine is None and hits["beta.py"].path_cosine is None
    assert hits["gamma.py"].path_cosine > 0


def test_a_package_whose_modules_are_all_private_keeps_its_rank(
    tmp_path: Path, hash_index: Index
) -> None:
    """httpx's shape: the implementation is `_client.py`, `_models.py`…, with no public module
    beside them; the private prior would push the whole implementation below its tests."""
    text = "redirects are followed up to max_redirects times\n"
    root = write_tree(
        tmp_path / "proj",
        {
            "httpx/__init__.py": "from ._client import Client\n",
            "httpx/_client.py": text,
            "httpx/_models.py": "a request and a response\n",
            "docs/redirects.md": text,
        },
    )
    hash_index.update([root])
    found = hash_index.search("how are redirects followed", k=3, all_copies=True)
    hits = {hit.rel: hit for hit in found}
    assert hits["httpx/_client.py"].priors == ()  # "private file x0.7" before


def test_private_module_loses_to_the_public_one(tmp_path: Path, hash_index: Index) -> None:
    text = "validators run before the model is built\n"
    root = write_tree(tmp_path / "pkg", {"pkg/_internal/_core.py": text, "pkg/validators.py": text})
    hash_index.update([root])
    hits = hash_index.search("when do validators run", k=2, all_copies=True)
    assert [h.rel for h in hits] == ["pkg/validators.py", "pkg/_internal/_core.py"]
    assert hits[1].priors == ("private file x0.7",)
    (collapsed,) = hash_index.search("when do validators run", k=2)  # the public one shown
    assert places([collapsed]) == [("pkg/validators.py", ["pkg/_internal/_core.py"])]
    asked = hash_index.search("internal validators", k=2, all_copies=True)
    assert all(not p.startswith("private file") for hit in asked for p in hit.priors)
    assert [p for hit in asked for p in hit.priors] == [
        ONE_WORD_NAME,
        FOLDER,  # the query names `_internal/`
    ]


def test_hybrid_search_off_makes_vector_only_the_default(two_folders: Index) -> None:
    hybrid = two_folders.search("retry backoff", k=3)
    assert any(hit.lexical_rank is not None for hit in hybrid)
    vector_only = Index(two_folders.settings._replace(hybrid=False), two_folders.embedder)
    hits = vector_only.search("retry backoff", k=3)
    vector_only.close()
    assert hits and all(h.lexical_rank is None and h.vector_rank is not None for h in hits)


# --- Reported scores: the priors reorder, the scores stay in [0, 1] ---------------------------

RANKING_CORPUS: dict[str, str | bytes] = {
    "billing/invoice.py": (
        "def compute_invoice_total(order):\n    return sum(line.price for line in order)\n"
    ),
    "billing/report.py": (
        "def report(orders):\n    return [compute_invoice_total(o) for o in orders]\n"
    ),
    "tests/test_invoice.py": (
        "def test_compute_invoice_total():\n    assert compute_invoice_total([]) == 0\n"
    ),
    "net/retry.py": "class RetryPolicy:\n    def retry(self, call):\n        return call()\n",
    "net/_internal/_retry.py": "def retry(call):\n    # retry with backoff\n    return call()\n",
    "vendor/http/retry.py": "def retry(call, attempts):\n    return call()\n",
    "docs/retry.md": "# Retries\n\nFailed calls are retried with exponential backoff.\n",
    "examples/retry_demo.py": "from net.retry import RetryPolicy\nRetryPolicy().retry(print)\n",
    "docs/guide.md": "\n\n".join(
        f"## Section {i}\n\nThe parser reads header lines and retries on backoff. " + "text " * 80
        for i in range(5)
    ),
    "src/parser.py": "def parse_header(line):\n    name, _, value = line.partition(':')\n",
}
RANKING_QUERIES = (
    "compute_invoice_total",
    "retry",
    "RetryPolicy",
    "parse_header",
    "how are failed calls retried with backoff",
    "parser header lines",
    "tests for compute_invoice_total",
)
# Computed on the code before the scores were rescaled (commit 38c1b6b), and again for the queries
# the file-name prior, FILE_DECAY 0.4 and the named-files arm reorder (issue 14): the rescaling
# must not move them.
RANKING_ORDER: dict[tuple[str, str], list[str]] = {
    ("hybrid", "compute_invoice_total"): [
        "billing/invoice.py:1",
        "billing/report.py:1",
        "tests/test_invoice.py:1",
        "docs/guide.md:1",  # four chunks among the candidates, but a document counts its best
        "docs/retry.md:1",
        "net/retry.py:1",
        "src/parser.py:1",
        "examples/retry_demo.py:1",
    ],
    ("hybrid", "retry"): [
        "net/retry.py:1",
        "net/_internal/_retry.py:1",
        "docs/retry.md:1",
        "docs/guide.md:7",
        "examples/retry_demo.py:1",
        "billing/invoice.py:1",
        "billing/report.py:1",
        "src/parser.py:1",
    ],
    ("hybrid", "RetryPolicy"): [  # the files named `retry` rise with the named-files arm
        "net/retry.py:1",
        "docs/retry.md:1",
        "examples/retry_demo.py:1",
        "net/_internal/_retry.py:1",
        "docs/guide.md:1",
        "billing/invoice.py:1",
        "billing/report.py:1",
        "src/parser.py:1",
    ],
    ("hybrid", "parse_header"): [
        "src/parser.py:1",
        "billing/invoice.py:1",
        "docs/guide.md:1",
        "billing/report.py:1",
        "docs/retry.md:1",
        "net/retry.py:1",
        "examples/retry_demo.py:1",
        "net/_internal/_retry.py:1",
    ],
    ("hybrid", "how are failed calls retried with backoff"): [
        "docs/retry.md:1",
        "net/retry.py:1",  # above the guide since the path term: its path says "retry"
        "net/_internal/_retry.py:1",  # "retried" names it since session 9's endings (-ied = y)
        "docs/guide.md:1",
        "examples/retry_demo.py:1",
        "src/parser.py:1",
        "billing/report.py:1",
        "billing/invoice.py:1",
    ],
    ("hybrid", "parser header lines"): [
        "src/parser.py:1",
        "docs/guide.md:1",
        "billing/invoice.py:1",
        "billing/report.py:1",
        "docs/retry.md:1",
        "net/retry.py:1",
        "examples/retry_demo.py:1",  # the guide's second chunk (x0.25 since session 9) fell out
        "net/_internal/_retry.py:1",
    ],
    ("hybrid", "tests for compute_invoice_total"): [
        "billing/invoice.py:1",
        "tests/test_invoice.py:1",
        "billing/report.py:1",
        "net/retry.py:1",
        "docs/guide.md:11",
        "docs/retry.md:1",
        "examples/retry_demo.py:1",
        "src/parser.py:1",
    ],
    ("bm25", "compute_invoice_total"): [
        "billing/invoice.py:1",
        "billing/report.py:1",
        "tests/test_invoice.py:1",
    ],
    ("bm25", "retry"): [
        "net/retry.py:1",
        "net/_internal/_retry.py:1",
        "docs/retry.md:1",
        "docs/guide.md:1",
        "examples/retry_demo.py:1",
        "docs/guide.md:15",
        "docs/guide.md:7",
        "docs/guide.md:11",
    ],
    ("bm25", "RetryPolicy"): ["net/retry.py:1", "examples/retry_demo.py:1"],
    ("bm25", "parse_header"): ["src/parser.py:1"],
    ("bm25", "how are failed calls retried with backoff"): [
        "docs/retry.md:1",
        "net/retry.py:1",
        "net/_internal/_retry.py:1",
        "docs/guide.md:1",
        "examples/retry_demo.py:1",
        "docs/guide.md:15",
        "docs/guide.md:7",
        "docs/guide.md:11",
    ],
    ("bm25", "parser header lines"): [
        "src/parser.py:1",
        "docs/guide.md:1",
        "billing/invoice.py:1",
        "docs/guide.md:15",
        "docs/guide.md:7",
        "docs/guide.md:11",
    ],
    ("bm25", "tests for compute_invoice_total"): [
        "billing/invoice.py:1",
        "tests/test_invoice.py:1",
        "billing/report.py:1",
    ],
    ("vector", "compute_invoice_total"): [
        "billing/invoice.py:1",
        "tests/test_invoice.py:1",
        "billing/report.py:1",
        "docs/guide.md:1",
        "docs/guide.md:11",
        "docs/retry.md:1",
        "docs/guide.md:7",
        "examples/retry_demo.py:1",
    ],
    ("vector", "retry"): [
        "net/_internal/_retry.py:1",
        "net/retry.py:1",
        "examples/retry_demo.py:1",
        "billing/invoice.py:1",
        "docs/guide.md:7",
        "docs/guide.md:11",
        "docs/guide.md:1",
        "billing/report.py:1",
    ],
    ("vector", "RetryPolicy"): [
        "net/retry.py:1",
        "examples/retry_demo.py:1",
        "docs/guide.md:1",
        "billing/invoice.py:1",
        "docs/guide.md:7",
        "docs/guide.md:11",
        "billing/report.py:1",
        "docs/retry.md:1",
    ],
    ("vector", "parse_header"): [
        "src/parser.py:1",
        "billing/invoice.py:1",
        "docs/guide.md:1",
        "billing/report.py:1",
        "docs/guide.md:11",
        "docs/retry.md:1",
        "docs/guide.md:7",
        "examples/retry_demo.py:1",
    ],
    ("vector", "how are failed calls retried with backoff"): [
        "docs/retry.md:1",
        "net/_internal/_retry.py:1",
        "src/parser.py:1",
        "examples/retry_demo.py:1",
        "docs/guide.md:1",
        "docs/guide.md:15",
        "docs/guide.md:7",
        "docs/guide.md:11",
    ],
    ("vector", "parser header lines"): [
        "docs/guide.md:1",
        "docs/guide.md:15",
        "docs/guide.md:11",
        "docs/guide.md:7",
        "billing/invoice.py:1",
        "billing/report.py:1",
        "docs/retry.md:1",
        "examples/retry_demo.py:1",
    ],
    ("vector", "tests for compute_invoice_total"): [
        "billing/invoice.py:1",
        "tests/test_invoice.py:1",
        "billing/report.py:1",
        "examples/retry_demo.py:1",
        "net/retry.py:1",
        "docs/guide.md:11",
        "docs/guide.md:7",
        "docs/guide.md:1",
    ],
}


@pytest.fixture
def ranking_corpus(tmp_path: Path, hash_index: Index) -> Index:
    hash_index.update([write_tree(tmp_path / "proj", RANKING_CORPUS)])
    return hash_index


@pytest.mark.parametrize("store_backend", ["sqlite"])  # the order was recorded on SQLite
def test_rescaled_scores_keep_the_order_of_hits(ranking_corpus: Index) -> None:
    for (mode, query), expected in RANKING_ORDER.items():
        hits = ranking_corpus.search(query, k=8, mode=mode)  # type: ignore[arg-type]
        assert [f"{h.rel}:{h.start_line}" for h in hits] == expected, (mode, query)


@pytest.mark.parametrize("mode", ["hybrid", "bm25"])
def test_scores_stay_within_zero_and_one_with_the_definition_boost(
    ranking_corpus: Index, mode: str
) -> None:
    boosted = 0
    for query in RANKING_QUERIES:
        hits = ranking_corpus.search(query, k=8, mode=mode)  # type: ignore[arg-type]
        assert all(0.0 <= hit.score <= 1.0 for hit in hits), (query, [h.score for h in hits])
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        boosted += sum(bool({DEFINES, NAME_DEFINES} & set(hit.priors)) for hit in hits)
    assert boosted >= 5
    (top,) = ranking_corpus.search("parse_header", k=1, mode=mode)  # type: ignore[arg-type]
    assert (top.rel, top.priors, top.score) == (
        "src/parser.py",
        (NAME_DEFINES, ONE_WORD_NAME),
        1.0,
    )


def test_a_symbol_query_nothing_defines_can_still_score_one(ranking_corpus: Index) -> None:
    # "exponential" names a symbol (a one-word query) that no chunk defines: no result carries
    # the definition boost, so the best result is not held below 1.0 by a boost nobody got.
    (top,) = ranking_corpus.search("exponential", k=1, mode="bm25")
    assert (top.rel, top.priors, top.score) == ("docs/retry.md", (), 1.0)


def test_the_query_vector_leaves_out_the_framing_words(ranking_corpus: Index) -> None:
    # the hash embedder gives "the" and "how" dimensions of their own: only if they are left out
    # do the two queries get one vector, and so the same cosines
    framed = ranking_corpus.search("how is the header parsed", k=5, mode="vector")
    bare = ranking_corpus.search("header parsed", k=5, mode="vector")
    assert [(h.rel, h.start_line) for h in framed] == [(h.rel, h.start_line) for h in bare]
    assert [h.score for h in framed] == pytest.approx([h.score for h in bare], abs=1e-9)
    embedder = HashEmbedder()
    assert (
        embedder.embed_query("how is the header parsed") @ embedder.embed_query("header parsed")
        < 0.99
    )  # the embedder itself tells them apart


def test_file_coherence_is_fused_in_hybrid_mode_only(ranking_corpus: Index) -> None:
    for mode in ("vector", "bm25"):
        hits = ranking_corpus.search("compute_invoice_total", k=8, mode=mode)  # type: ignore[arg-type]
        assert hits and all(hit.coherence is None for hit in hits), mode
    hits = ranking_corpus.search("compute_invoice_total", k=8)
    given = [hit for hit in hits if hit.coherence is not None]
    assert given and len({hit.rel for hit in given}) == len(given)  # one chunk per file at most
    assert max(hit.coherence for hit in given) <= ranking.FILE_COHERENCE
    for hit in given:
        assert f"{ranking.COHERENCE_NOTE} +{hit.coherence:.2f}" in explain(hit)
        assert hit.as_json()["fileCoherence"] == pytest.approx(hit.coherence, abs=1e-4)


def test_a_question_gives_file_coherence_more_weight(ranking_corpus: Index) -> None:
    assert ranking.QUESTION_COHERENCE > ranking.FILE_COHERENCE
    for query, weight in (
        ("how is the invoice total computed", ranking.QUESTION_COHERENCE),
        ("the invoice total computed", ranking.FILE_COHERENCE),
    ):
        given = [hit.coherence for hit in ranking_corpus.search(query, k=8)]
        # the file holding the largest sum of fused scores gains the whole weight
        assert max(c for c in given if c is not None) == pytest.approx(weight), query


def test_a_manual_page_of_many_matching_chunks_is_not_the_hub(
    tmp_path: Path, hash_index: Index
) -> None:
    words = "the retry backoff schedule doubles the delay after each failed attempt"
    page = "".join(f".SH SECTION {n}\n{words} {'filler text ' * 60}\n\n" for n in range(6))
    tree = {"man/man1/tool.1": page, "lib/retry.py": f'def schedule():\n    """{words}"""\n'}
    hash_index.update([write_tree(tmp_path / "proj", tree)])
    page_chunks = [hit for hit in hash_index.search("filler", k=20) if hit.rel.startswith("man/")]
    assert len(page_chunks) >= 4
    hits = hash_index.search("how does the retry backoff schedule work", k=10)
    shares = {hit.rel: hit.coherence for hit in hits if hit.coherence is not None}
    # summed as code, the page's chunks would hold several times the code file's share
    assert shares["lib/retry.py"] > ranking.QUESTION_COHERENCE / 2, shares


@pytest.mark.parametrize("store_backend", ["sqlite"])
def test_vector_scores_are_not_rescaled(ranking_corpus: Index) -> None:
    # The scores the code before the rescaling gave: the cosine, times the priors (parse_header:
    # a cosine of 0.316228, times the definition and file-name priors; parser.py is named by it).
    for query, score, priors in [
        # "retried" names net/retry.py (a one-word name); the model embeds "failed calls retried
        # with backoff" (0.801784 with the question's framing words)
        ("how are failed calls retried with backoff", 0.790485 * ONE_WORD_BOOST, (ONE_WORD_NAME,)),
        (
            "parse_header",
            0.316228 * ranking.NAME_DEFINITION_BOOST * ONE_WORD_BOOST,
            (NAME_DEFINES, ONE_WORD_NAME),
        ),
    ]:
        (hit,) = ranking_corpus.search(query, k=1, mode="vector")
        # 1e-3: the SQLite file keeps vectors as float16 (a rescaling would move them far more)
        assert (hit.score, hit.priors) == (pytest.approx(score, abs=1e-3), priors)


class SlowLexical:
    """A store whose lexical arm takes 50 ms, so the search reads rows ahead meanwhile; it
    records the chunk ids each ``chunks`` call asks for."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.asked: list[list[int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def lexical(self, *args: Any) -> list[int]:
        time.sleep(0.05)
        return self.store.lexical(*args)

    def chunks(self, ids: Sequence[int]) -> list[ChunkRow]:
        self.asked.append(list(ids))
        return self.store.chunks(ids)


def test_rows_read_while_the_lexical_arm_runs_give_the_same_hits(
    two_folders: Index, settings: Settings
) -> None:
    store = open_store(settings.store_backend, settings.store_path)
    options = SearchOptions(k=5)
    expected = search(store, HashEmbedder(), "retry backoff jitter", options)
    slow = SlowLexical(store)
    found = search(cast(Store, slow), HashEmbedder(), "retry backoff jitter", options)
    assert found == expected and len(found) == 5
    ahead = slow.asked[0]  # the vector arm's best chunks, before the lexical arm answered
    assert 0 < len(ahead) <= READ_AHEAD_STEP
    assert not set(ahead) & {cid for ids in slow.asked[1:] for cid in ids}  # not read twice
    store.close()


class RowStore:
    """The one Store method candidates are read with, over rows made up by a test."""

    def __init__(self, rows: list[ChunkRow]) -> None:
        self.rows = {row.id: row for row in rows}
        self.read = 0

    def chunks(self, ids: Sequence[int]) -> list[ChunkRow]:
        self.read += len(ids)
        return [self.rows[i] for i in ids if i in self.rows]


# Files a query about "session pool" names, and others: tests and vendored code lowered, a
# folder it names; texts that define the queried name, that only import, and neither.
RELS = ["net/session_pool.py", "pool.py", "tests/test_pool.py", "vendor/x.py", "pool/io.py", "a.py"]
TEXTS = [
    "def SessionPool():\n    pass\n",
    "import os\nimport sys\nfrom pool import SessionPool\n",
    "session pool code here\n",
    "nothing to see\n",
]


@pytest.mark.parametrize("query", ["session pool", "SessionPool", "pool tests"])
def test_candidates_left_unread_change_no_hit(query: str) -> None:
    """The rows a search leaves unread (no prior could lift them into the top k) change
    nothing: the hits are those of reading every candidate. Fused scores close together and
    forty files, so the priors often reorder the candidates."""
    info = ranking.query_info(query)
    refs = {f: FileRef(f, 1, "r", "/r", f"d{f}/{RELS[f % len(RELS)]}") for f in range(40)}
    rng = random.Random(7)
    fewer = 0
    for trial in range(200):
        count = rng.randint(5, 60)
        rows = [
            ChunkRow(i, i % 40, "/r", "r", refs[i % 40].rel, "code", i, i, None, rng.choice(TEXTS))
            for i in range(count)
        ]
        scores = {row.id: rng.uniform(0.3, 1.0) for row in rows}
        order = sorted(scores, key=lambda cid: -scores[cid])
        # a chunk whose file is not known (written since the refs were read) is always read
        files = Files({row.id: row.file_id for row in rows if row.id % 11}, refs)
        known = {rows[0].id: (rows[0], ranking.chunk_priors(rows[0].rel, rows[0].text, info))}
        everything = candidates(
            cast(Store, RowStore(rows)), info, 10, order, scores, known, None, {}
        )
        store = RowStore(rows)
        pruned = candidates(cast(Store, store), info, 10, order, scores, known, files, {})
        assert choose(pruned, 10, {}) == choose(everything, 10, {}), trial
        fewer += store.read < count - 1
        # the chunks defining a queried name, known from the definitions arm: none parsed
        defined = frozenset(r.id for r in rows if ranking.defines_queried(r.rel, r.text, info))
        told = candidates(
            cast(Store, RowStore(rows)), info, 10, order, scores, known, files, {}, defined
        )
        assert choose(told, 10, {}) == choose(everything, 10, {}), trial
    assert fewer > 50  # and they are left unread often


DEFINING_LINES = [
    "def parse_header(line):",
    "class RetryMiddleware:",
    "function $http(config) {",
    "fun <T> Flow<T>.mapNotNull(transform: (T) -> R): Flow<R> {",
    "pub fn try_join_all<I>(iter: I) -> TryJoinAll<I::Item> {",
    "defmodule Plug.SSL do",
    "function M.load(path)",
    "absl::Status Foo::Bar(int x) {",
    "data Value = Object !Object | Array !Array",
    "int curl_easy_setopt(CURL *curl, CURLoption tag, ...);",
    "func (r *Router) ServeHTTP(w http.ResponseWriter, req *http.Request) {",
    "case class Décodeur(x: Int)",
    "const MAX_RETRIES = 5",
]


def test_a_chunk_defining_a_queried_name_matches_the_defines_column(
    tmp_path: Path, hash_index: Index, settings: Settings
) -> None:
    """The definitions arm's answer, when not full, is every chunk that defines a queried name
    (the search then parses no other chunk for one): a chunk the priors say defines the name
    is always among the chunks its ``defines`` column matches."""
    root = write_tree(
        tmp_path / "src", {f"f{n}.txt": f"{line}\n" for n, line in enumerate(DEFINING_LINES)}
    )
    hash_index.update([root])
    store = open_store(settings.store_backend, settings.store_path)
    rows = store.chunks([int(i) for i in store.chunk_ids()])
    checked = 0
    for row in rows:
        for name in ranking.definitions(row.text):
            info = ranking.query_info(name)
            if info.names and ranking.defines_queried(row.rel, row.text, info):
                names = LexicalQuery(info.names, columns=("defines",))
                assert row.id in store.lexical(names, DEFINITION_POOL, None), name
                checked += 1
    assert checked >= len(DEFINING_LINES)
    store.close()


def test_a_full_definitions_arm_leaves_the_other_definitions_to_the_priors(
    tmp_path: Path, hash_index: Index
) -> None:
    """Sixty files define the queried name, more than the definitions arm holds (its pool is
    50): each of the sixty hits still gets the definition boost, found from its own text."""
    files = {f"f{n:02}.py": f"def parse_header(line):\n    return line[{n}:]\n" for n in range(60)}
    hash_index.update([write_tree(tmp_path / "src", files)])
    hits = hash_index.search("parse_header", k=60)
    assert len(hits) == 60 > DEFINITION_POOL
    assert all(NAME_DEFINES in hit.priors for hit in hits)


def test_a_name_defined_below_a_full_definitions_arm_is_found_deeper(
    tmp_path: Path, hash_index: Index, settings: Settings
) -> None:
    """Sixty short chunks define names with the queried name's word in them (`request_7`), so
    they fill the definitions arm's pool ahead of the one long chunk that defines `Request`
    itself: for a query of that one name the arm reads deeper and the definition comes first."""
    files = {f"api/r{n:02}.py": f"def request_{n}(url):\n    return url\n" for n in range(60)}
    methods = "".join(f"    def method_{n}(self):\n        return {n}\n" for n in range(12))
    files["models.py"] = f'class Request:\n    """An HTTP request."""\n{methods}'
    hash_index.update([write_tree(tmp_path / "src", files)])
    store = open_store(settings.store_backend, settings.store_path)
    first = store.chunks(store.lexical(LexicalQuery(("Request",), ("defines",)), DEFINITION_POOL))
    store.close()
    assert "models.py" not in {row.rel for row in first}  # below the first DEFINITION_POOL
    hits = hash_index.search("Request", k=5)
    assert hits[0].rel == "models.py", [(h.rel, h.priors) for h in hits]
    assert NAME_DEFINES in hits[0].priors
    assert hits[0].definition_rank is not None  # the definitions arm holds it


class ModelTokens(HashEmbedder):
    """Hashed vectors over the model's own tokens: the indexer chunks as it does with the model."""

    def __init__(self) -> None:
        super().__init__()
        self._model = OnnxEmbedder()  # its tokenizer only: the ONNX session is never loaded

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        return self._model.token_spans(text)


LINE_QUERIES = [
    "chunk the text into overlapping pieces",
    "raise UsageError for an invalid glob",
    "def search",
    "class Index",
    "print the hits of a search",
    "the writer lock of the index",
    "gitignore pattern matching",
    "embed the pending chunks",
]


def test_every_hit_starts_at_the_start_of_its_line(tmp_path: Path, settings: Settings) -> None:
    """Real code, one long file, chunked by the model's tokenizer: no hit starts inside a line
    (a ``def`` cut off), and its start line is the line its text starts on."""
    package = Path(semsearch.__file__).parent
    source = "\n\n".join(path.read_text("utf-8") for path in sorted(package.rglob("*.py")))
    source = source[: source.rfind("\n", 0, 400_000)]  # under the indexer's size cap
    root = write_tree(tmp_path / "code", {"package.py": source})
    index = Index(settings, embedder=ModelTokens())
    try:
        index.update([root])
        hits = [
            hit
            for query in LINE_QUERIES
            for mode in ("hybrid", "bm25")
            for hit in index.search(query, k=20, mode=mode)  # type: ignore[arg-type]
        ]
    finally:
        index.close()
    lines = source.split("\n")
    assert len(hits) > 200
    for hit in hits:
        first = hit.text.split("\n")[0]
        assert lines[hit.start_line - 1].startswith(first), (hit.start_line, first)
        assert hit.end_line == hit.start_line + hit.text.count("\n")


# A small project, checked out at three revisions side by side: every chunk has two copies.
PROJECT = {
    "src/retry.py": "def retry_payment(charge):\n    '''retry a failed payment with backoff'''\n",
    "src/card.py": "class CardDeclined(Exception):\n    '''the bank refused the card payment'''\n",
    "src/refund.py": "def refund(payment):\n    '''refund a payment to the card'''\n",
    "src/ledger.py": "def post_entry(ledger, payment):\n    '''record a payment in the ledger'''\n",
    "docs/payments.md": "Failed payments are retried with exponential backoff.\n",
}
REVISIONS = ("rev1", "rev2", "rev3")


@pytest.fixture
def revisions(tmp_path: Path, hash_index: Index) -> Index:
    tree = {f"{rev}/{rel}": text for rev in REVISIONS for rel, text in PROJECT.items()}
    hash_index.update([write_tree(tmp_path / "repo", tree)])
    return hash_index


def places(hits: list[semsearch.Hit]) -> list[tuple[str, list[str]]]:
    """Each hit's rel path and those of its copies."""
    return [(hit.rel, [copy.rel for copy in hit.copies]) for hit in hits]


@pytest.mark.parametrize("mode", ["hybrid", "vector", "bm25"])
def test_copies_of_a_text_come_back_as_one_hit_listing_the_others(
    revisions: Index, mode: Mode
) -> None:
    hits = revisions.search("retry a failed payment", k=5, mode=mode)
    assert sorted(hit.rel.split("/", 1)[1] for hit in hits) == sorted(PROJECT)  # 5 texts
    for hit in hits:
        rev, rel = hit.rel.split("/", 1)
        assert [copy.rel for copy in hit.copies] == [f"{r}/{rel}" for r in REVISIONS if r != rev]
        assert hit.copy_count == 2
        assert [(c.start_line, c.end_line, c.page) for c in hit.copies] == [
            (hit.start_line, hit.end_line, None)
        ] * 2
        assert {c.path for c in hit.copies} == {f"{hit.folder_path}/{c.rel}" for c in hit.copies}
    # each copy its own hit, as before: the best text three times first
    every = revisions.search("retry a failed payment", k=5, mode=mode, all_copies=True)
    assert len({hit.rel.split("/", 1)[1] for hit in every}) < 5
    assert all(hit.copies == () and hit.copy_count == 0 for hit in every)


def test_the_copy_in_src_represents_those_in_tests_and_third_party(
    tmp_path: Path, hash_index: Index
) -> None:
    text = "def throttle(requests, per_second):\n    '''limit requests per second'''\n"
    tree = {"tests/fixtures/throttle.py": text, "third_party/lib/throttle.py": text}
    hash_index.update([write_tree(tmp_path / "lib", {**tree, "src/throttle.py": text})])
    for mode in ("hybrid", "vector", "bm25"):
        (hit,) = hash_index.search("limit requests per second", k=1, mode=mode)  # type: ignore[arg-type]
        assert places([hit]) == [("src/throttle.py", sorted(tree))], mode
        assert hit.priors == ()  # the priors of the copy shown, not of the others


def test_copies_are_listed_within_the_search_filters(revisions: Index) -> None:
    hits = revisions.search("retry a failed payment", k=5, exclude="rev3/")
    assert all(hit.copy_count == 1 for hit in hits)
    assert all(not copy.rel.startswith("rev3/") for hit in hits for copy in hit.copies)
    (hit,) = revisions.search("retry a failed payment", k=1, glob="rev2/**")
    assert (hit.rel.split("/")[0], hit.copies) == ("rev2", ())


def test_copies_in_other_folders_are_listed_with_their_folder(
    tmp_path: Path, hash_index: Index
) -> None:
    block = "def handler(event):\n    '''dispatch the webhook event'''\n    return event\n"
    one = write_tree(tmp_path / "one", {"hooks.py": block})
    two = write_tree(tmp_path / "two", {"app/hooks.py": block})
    hash_index.update([one, two])
    (hit,) = hash_index.search("dispatch the webhook event", k=1, mode="bm25")
    assert (hit.folder, hit.rel, hit.start_line) == ("one", "hooks.py", 1)
    assert [c.as_json() for c in hit.copies] == [
        {
            "filePath": str(two / "app/hooks.py"),
            "folder": "two",
            "relPath": "app/hooks.py",
            "startLine": 1,
            "endLine": 3,
            "page": None,
        }
    ]


def test_an_arm_full_of_copies_is_read_deeper_for_k_distinct_texts(
    tmp_path: Path, hash_index: Index
) -> None:
    """A test file in 250 revisions fills both arms' pools (200 chunks each for k=5) with one
    text: the arms are read deeper, and the other four places still come back."""
    copied = "def test_retry():\n    assert retry_payment(charge) == 'retry payment'\n"
    tree = {f"rev{n:03}/tests/test_retry.py": copied for n in range(250)}
    others = {
        f"src/m{n}.py": f"def retry_{n}(payment):\n    return payment {n}\n" for n in range(4)
    }
    hash_index.update([write_tree(tmp_path / "repo", {**tree, **others})])
    for mode in ("hybrid", "vector", "bm25"):
        hits = hash_index.search("retry payment", k=5, mode=mode)  # type: ignore[arg-type]
        (copied_hit,) = [hit for hit in hits if hit.rel.endswith("tests/test_retry.py")]
        assert sorted(h.rel for h in hits if h is not copied_hit) == sorted(others), mode
        assert copied_hit.copy_count == 249, mode
        assert len(copied_hit.copies) == copies.COPIES_LISTED


# Real code with no two chunks alike: the modules of semsearch's search and store packages.
SOURCES = sorted(
    path
    for package in ("search", "store")
    for path in (Path(semsearch.__file__).parent / package).rglob("*.py")
    if path.name != "__init__.py"
)
SOURCE_QUERIES = [
    "reciprocal rank fusion of the arms",
    "how are copies collapsed",
    "parse_header",
    "open the store",
    "vectors in memory refreshed when the generation changes",
    "damaged index",
    "LanceStore",
    "text_hash",
]


@pytest.mark.parametrize("mode", ["hybrid", "vector", "bm25"])
def test_without_copies_collapsing_changes_no_hit(
    tmp_path: Path, hash_index: Index, settings: Settings, mode: Mode
) -> None:
    files = {path.name: path.read_text(encoding="utf-8") for path in SOURCES}
    hash_index.update([write_tree(tmp_path / "code", files)])
    store = open_store(settings.store_backend, settings.store_path)
    texts = [row.text for row in store.chunks([int(i) for i in store.chunk_ids()])]
    store.close()
    assert len(texts) == len(set(texts)) > 300  # no copies
    for query in SOURCE_QUERIES:
        for k in (1, 5, 20):
            hits = hash_index.search(query, k=k, mode=mode)
            assert hits == hash_index.search(query, k=k, mode=mode, all_copies=True), (query, k)
            assert hits, (query, k)


@pytest.mark.parametrize("store_backend", ["sqlite"])  # blocks are the SQLite file's
@pytest.mark.parametrize("mode", ["hybrid", "vector", "bm25"])
def test_copies_collapse_alike_when_the_vectors_are_packed(
    revisions: Index, settings: Settings, mode: Mode
) -> None:
    """The text keys of packed chunks come from the blocks in memory, not their rows: the
    hits are the texts of the unpacked index, each with its other places listed. (Which copy
    shows may differ: the scan scores a text's copies alike, BLAS a last bit apart.)"""
    query = "retry a failed payment"

    def texts(hits: list[semsearch.Hit]) -> list[frozenset[str]]:
        return [frozenset([hit.rel, *(copy.rel for copy in hit.copies)]) for hit in hits]

    unpacked = texts(revisions.search(query, k=5, mode=mode))
    store = SqliteStore(settings.store_path, pack_rows=4)
    store.maintain()
    store.close()
    with sqlite3.connect(settings.store_path) as conn:
        assert conn.execute("SELECT count(*) FROM vector_blocks").fetchone()[0] == 3
    packed = Index(settings, embedder=HashEmbedder())
    try:
        assert texts(packed.search(query, k=5, mode=mode)) == unpacked
        assert len(unpacked) == 5 and all(len(places) == 3 for places in unpacked)
    finally:
        packed.close()
