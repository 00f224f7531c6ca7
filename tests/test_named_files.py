"""The named-files arm: files whose name the query names, found even when both arms missed them."""

from __future__ import annotations

from pathlib import Path

import pytest

from semsearch.cli.output import explain
from semsearch.index import Index
from semsearch.search import fusion as search
from semsearch.search import named_files as named_module
from semsearch.search.derived import per_refs
from semsearch.search.named_files import named_files
from semsearch.search.ranking import query_info
from semsearch.store import FileRef
from tests.conftest import BACKENDS, write_tree


@pytest.fixture(params=BACKENDS)
def store_backend(request: pytest.FixtureRequest) -> str:
    """The search tests run against both store backends."""
    return str(request.param)


def refs_of(*rels: str) -> dict[int, FileRef]:
    return {i: FileRef(i, 1, "proj", "/proj", rel) for i, rel in enumerate(rels, start=1)}


def test_a_file_is_named_when_every_word_of_its_name_is_in_the_query() -> None:
    refs = refs_of(
        "src/Text/Pandoc/Options.hs",  # 1
        "src/Text/Pandoc/Format.hs",  # 2
        "src/RetryMiddleware.php",  # 3: two words, both needed
        "lib/retry/index.ts",  # 4: a generic stem is named by its folder
        "src/Writer.hs",  # 5
        "lib/core.py",  # 6: a generic stem at the top names nothing of its own
    )
    info = query_info("how pandoc options control output format and retries")
    assert named_files(refs, info) == [1, 2, 4]  # `retries` is `retry` as the names spell it
    assert named_files(refs, query_info("retry middleware")) == [3, 4]
    assert named_files(refs, query_info("options format"), allowed=[2, 5]) == [2]
    assert named_files(refs, query_info("nothing here matches")) == []


def test_the_name_index_is_made_once_per_refs_dict() -> None:
    refs = refs_of("a/session.py")
    info = query_info("http client session")
    assert named_files(refs, info) == [1]
    first = per_refs(refs, named_module.name_index)
    assert named_files(refs, info) == [1] and per_refs(refs, named_module.name_index) is first
    changed = refs_of("a/session.py", "b/client.py")  # the store hands a new dict after a write
    assert named_files(changed, info) == [1, 2]


@pytest.fixture
def named_corpus(tmp_path: Path, hash_index: Index) -> Index:
    # Twelve notes match the query's words far better than `billing/ledger.py`, whose text
    # shares none of them: only its name says it is what the query is about.
    notes = {
        f"notes/n{i:02}.md": f"ledger balance entries reconcile ledger balance {i}\n" * 3
        for i in range(12)
    }
    code = {
        "billing/ledger.py": "def post(entry):\n    totals.append(entry.amount)\n",
        "billing/ledger_test_data.py": "ROWS = [1, 2, 3]\n",
    }
    hash_index.update([write_tree(tmp_path / "proj", {**notes, **code})])
    return hash_index


def test_the_arm_brings_a_named_file_both_arms_missed(
    named_corpus: Index, store_backend: str
) -> None:
    store, embedder = named_corpus._store, named_corpus.embedder
    vector = embedder.embed_query("ledger balance")
    refs = store.file_refs()
    ledger = next(f for f, ref in refs.items() if ref.rel == "billing/ledger.py")
    if store_backend == "sqlite":  # LanceDB's BM25 ranks the short file's path words first
        lexical = store.lexical(search.lexical_query("ledger balance"), 5)
        arm_files = store.chunk_files([cid for cid, _ in store.nearest(vector, 5)] + lexical)
        assert ledger not in set(arm_files.values())  # in arms of 5, neither has it
    info = query_info("ledger balance")
    named = search._named_arm(store, vector, named_files(refs, info))
    assert store.chunk_files(named) == {named[0]: ledger}  # one chunk: `ledger_test_data` is not
    others = named_files(refs, info, [f for f in refs if f != ledger])
    assert search._named_arm(store, vector, others) == []


def test_explain_and_json_give_the_named_rank(named_corpus: Index) -> None:
    hits = {hit.rel: hit for hit in named_corpus.search("ledger balance", k=20)}
    ledger = hits["billing/ledger.py"]
    assert ledger.named_rank == 1
    assert "named file #1" in explain(ledger)
    assert ledger.as_json()["namedRank"] == 1
    assert all(hit.named_rank is None for rel, hit in hits.items() if rel != "billing/ledger.py")
    for mode in ("vector", "bm25"):  # a hybrid-mode arm
        others = named_corpus.search("ledger balance", k=20, mode=mode)  # type: ignore[arg-type]
        assert all(hit.named_rank is None for hit in others), mode


def test_no_arm_when_more_files_are_named_than_the_limit(
    named_corpus: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "NAMED_MAX", 1)
    # "ledger" and "data" name both ledger.py and ledger_test_data.py: two, over the limit of 1
    hits = named_corpus.search("ledger test data balance", k=20)
    assert hits and all(hit.named_rank is None for hit in hits)
    monkeypatch.setattr(search, "NAMED_MAX", 2)
    hits = named_corpus.search("ledger test data balance", k=20)
    assert sorted(hit.named_rank for hit in hits if hit.named_rank) == [1, 2]
