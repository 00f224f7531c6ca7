"""Ranking: FTS5 escaping, RRF, filters before top-k, deduplication of overlapping chunks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from semsearch.errors import UsageError
from semsearch.index import Index
from semsearch.search import rrf
from tests.conftest import BACKENDS, write_tree


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
    assert top.priors == ("defines a queried symbol x1.5",)
    assert top.score == pytest.approx(1.5)  # fused score 1.0 (first in both arms) x the prior
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
    assert "defines a queried symbol x1.5" in top[0].priors


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
    assert any("chunk 2 of this file x0.5" in hit.priors for hit in repeated)
    assert "other.md" in [hit.rel for hit in hits]


def test_private_module_loses_to_the_public_one(tmp_path: Path, hash_index: Index) -> None:
    text = "validators run before the model is built\n"
    root = write_tree(tmp_path / "pkg", {"pkg/_internal/_core.py": text, "pkg/validators.py": text})
    hash_index.update([root])
    hits = hash_index.search("when do validators run", k=2)
    assert [h.rel for h in hits] == ["pkg/validators.py", "pkg/_internal/_core.py"]
    assert hits[1].priors == ("private file x0.7",)
    asked = hash_index.search("internal validators", k=2)
    assert all(hit.priors == () for hit in asked)


def test_hybrid_search_off_makes_vector_only_the_default(two_folders: Index) -> None:
    hybrid = two_folders.search("retry backoff", k=3)
    assert any(hit.lexical_rank is not None for hit in hybrid)
    vector_only = Index(replace(two_folders.settings, hybrid=False), two_folders.embedder)
    hits = vector_only.search("retry backoff", k=3)
    vector_only.close()
    assert hits and all(h.lexical_rank is None and h.vector_rank is not None for h in hits)
