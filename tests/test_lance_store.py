"""What only the LanceDB backend has: ANN index, version clean-up, repair, read consistency.

Skipped without the lancedb extra (tests/test_store.py checks the message that names it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lancedb", reason='needs the lancedb extra: pip install "semsearch[lancedb]"')

import pyarrow as pa  # comes with lancedb

from semsearch.cli.commands import main
from semsearch.config import Settings
from semsearch.errors import StoreError
from semsearch.index import Index
from semsearch.model.embedder import HashEmbedder
from semsearch.store import ChunkRecord, FileWrite
from semsearch.store.lance import store as lance
from semsearch.store.lance.store import LanceStore, mended_by_index
from semsearch.store.lance.tables import retry
from semsearch.text.lexical import LexicalQuery
from tests.conftest import write_tree


@pytest.fixture
def store_backend() -> str:
    return "lancedb"


def random_writes(folder: int, files: int, per_file: int, seed: int) -> list[FileWrite]:
    rng = np.random.default_rng(seed)
    writes = []
    for number in range(files):
        vectors = rng.standard_normal((per_file, 16)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        chunks = tuple(
            ChunkRecord(i + 1, i + 1, 0, 1, None, f"chunk {i} of file {number} seed {seed}")
            for i in range(per_file)
        )
        writes.append(
            FileWrite(folder, f"s{seed}/f{number}.txt", 1, 1, "x", "ok", "text", chunks, vectors)
        )
    return writes


def versions(path: Path) -> int:
    return sum(len(list((table / "_versions").iterdir())) for table in path.glob("*.lance"))


def test_data_lives_in_the_lancedb_folder_beside_the_index_file(settings: Settings) -> None:
    assert settings.store_path == settings.index_path.parent / "lancedb"


def test_index_runs_clean_up_old_versions(settings: Settings, tmp_path: Path) -> None:
    root = write_tree(
        tmp_path / "notes", {f"n{i}.md": f"note {i} about otters\n" for i in range(40)}
    )
    index = Index(settings, embedder=HashEmbedder())
    index.update([root])
    after_first = versions(settings.store_path)
    for round_ in range(5):
        for i in range(0, 40, 3):
            (root / f"n{i}.md").write_text(f"note {i} revised {round_} about beavers\n")
        index.update([root])
    assert versions(settings.store_path) <= after_first
    assert versions(settings.store_path) <= 12  # about two per table, whatever the history
    chunks = LanceStore(settings.store_path)._chunk_table()
    indexes = {tuple(ix.columns): ix.num_unindexed_rows for ix in chunks.list_indices()}
    assert indexes == {
        ("text",): 0,
        ("terms",): 0,
        ("defines",): 0,
        ("id",): 0,
        ("text_hash",): 0,
        ("file_id",): 0,
    }
    hits = index.search("revised about beavers", k=3, mode="bm25")
    assert hits and all("revised 4" in hit.text for hit in hits)


@pytest.mark.parametrize("column", ["text_hash", "file_id"])
def test_maintain_gives_an_older_chunks_table_its_scalar_indexes(
    settings: Settings, tmp_path: Path, column: str
) -> None:
    """A table made before the text_hash B-tree (what copies of a text are found by) or the
    file_id one (a few files' chunks) gets it from the next index run's maintain."""
    index = Index(settings, embedder=HashEmbedder())
    index.update([write_tree(tmp_path / "notes", {"a.md": "otters\n", "b.md": "otters\n"})])
    chunks = LanceStore(settings.store_path)._chunk_table()
    (name,) = [ix.name for ix in chunks.list_indices() if ix.columns == [column]]
    chunks.drop_index(name)
    assert all(ix.columns != [column] for ix in chunks.list_indices())
    LanceStore(settings.store_path).maintain()
    store = LanceStore(settings.store_path)
    assert [column] in [ix.columns for ix in store._chunk_table().list_indices()]
    places = store.chunk_places([int(i) for i in store.chunk_ids()])
    assert len({p.text_hash for p in places}) == 1
    assert store.text_places([places[0].text_hash]) == places
    store.close()
    index.close()


def test_an_index_run_records_whether_two_chunks_share_a_text(
    settings: Settings, tmp_path: Path
) -> None:
    """Without copies a search skips their look-ups (requests, on object storage); the first
    copy written turns them back on, and the copy collapses into the hit."""
    index = Index(settings, embedder=HashEmbedder())
    notes = write_tree(tmp_path / "notes", {"a.md": "otters hold paws\n", "b.md": "beavers\n"})
    index.update([notes])
    assert LanceStore(settings.store_path).has_copies() is False
    (hit,) = index.search("otters hold paws", k=1)
    assert hit.copies == () and hit.copy_count == 0
    write_tree(notes, {"c.md": "otters hold paws\n"})
    index.update([notes])
    assert LanceStore(settings.store_path).has_copies() is True
    (hit,) = index.search("otters hold paws", k=1)
    assert hit.copy_count == 1
    assert {hit.rel, hit.copies[0].rel} == {"a.md", "c.md"}
    index.close()


def test_chunks_without_a_file_row_are_hidden_then_removed(settings: Settings) -> None:
    store = LanceStore(settings.store_path, create=True)
    store.set_model("m", 16)
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files(random_writes(folder, 2, 3, seed=1))
    lost = next(iter(store.file_refs().values()))
    # What a run killed between the chunks commit and the files commit leaves behind.
    store._files.delete(f"id = {lost.id}")
    found = store.chunks([int(i) for i in store.chunk_ids()])
    assert len(found) == 3 and lost.rel not in {row.rel for row in found}
    assert store.chunk_count() == 6
    store.maintain()
    assert store.chunk_count() == 3
    assert sum(f.chunks for f in store.folders()) == 3


def test_ann_index_is_built_past_the_threshold_and_retrained_as_it_grows(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lance, "ANN_MIN_ROWS", 400)
    store = LanceStore(settings.store_path, create=True)
    store.set_model("m", 16)
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files(random_writes(folder, 30, 10, seed=1))
    store.maintain()
    assert not store.has_ann()  # 300 chunks: exact search
    ids, _, matrix = store.vectors(0)
    query = matrix[7]
    exact = ids[np.argsort(-(matrix @ query))[:10]].tolist()
    assert [cid for cid, _ in store.nearest(query, 10, None)] == exact
    assert len(store._exact.ids) == 300  # answered from the matrix in memory
    store.write_files(random_writes(folder, 20, 10, seed=2))
    store.maintain()
    assert store.has_ann() and store.meta("ann_rows") == "500"
    ids, file_ids, matrix = store.vectors(0)
    rng = np.random.default_rng(9)
    recalls = []
    for _ in range(20):
        query = matrix[rng.integers(len(matrix))] + 0.3 * rng.standard_normal(16)
        query = (query / np.linalg.norm(query)).astype(np.float32)
        exact = set(ids[np.argsort(-(matrix @ query))[:10]].tolist())
        found = store.nearest(query, 10, None)
        assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
        cosines = {int(i): float(v @ query) for i, v in zip(ids, matrix, strict=True)}
        assert all(abs(score - cosines[cid]) < 1e-4 for cid, score in found)
        recalls.append(len(exact & {cid for cid, _ in found}) / 10)
    assert np.mean(recalls) >= 0.9
    assert not len(store._exact.ids)  # the index answered: the matrix was let go
    file_of = dict(zip(ids.tolist(), file_ids.tolist(), strict=True))
    chosen = int(file_ids[123])
    within = store.nearest(matrix[0], 5, [chosen])
    assert len(within) == 5 and {file_of[cid] for cid, _ in within} == {chosen}
    # with the matrix let go, the file ids of nearest chunks come from their rows
    assert store.chunk_files([cid for cid, _ in within]) == {cid: chosen for cid, _ in within}
    exact = {int(i): float(v @ matrix[0]) for i, v in zip(ids, matrix, strict=True)}
    assert all(abs(score - exact[cid]) < 1e-4 for cid, score in within)
    store.write_files(random_writes(folder, 30, 10, seed=3))
    store.maintain()
    assert store.meta("ann_rows") == "500"  # 800 < 2 x 500: new rows join the old index
    store.write_files(random_writes(folder, 30, 10, seed=4))
    store.maintain()
    assert store.meta("ann_rows") == "1100"


def test_search_uses_the_ann_index_through_the_same_code(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lance, "ANN_MIN_ROWS", 300)
    files = {f"d{i % 7}/n{i}.md": f"note {i} " + "filler words " * 60 for i in range(300)}
    files["d1/otters.md"] = "# Otters\n\nSea otters hold hands while they sleep.\n"
    root = write_tree(tmp_path / "notes", files)
    index = Index(settings, embedder=HashEmbedder())
    index.update([root])
    assert index.search("otters hold hands", k=1)[0].rel == "d1/otters.md"
    store = index._store
    assert isinstance(store, LanceStore) and store.has_ann()
    assert not len(store._exact.ids)  # the vector arm was answered by LanceDB's index
    assert index.search("otters hold hands", k=1, glob="d1/**")[0].rel == "d1/otters.md"
    assert index.search("otters hold hands", k=3, glob="d2/**")[0].rel.startswith("d2/")


READER = """
import sys
from semsearch.store.lance.store import LanceStore
from semsearch.text.lexical import LexicalQuery
store = LanceStore(__import__("pathlib").Path(sys.argv[1]))
print(len(store.lexical(LexicalQuery(("walrus",)), 10, None)), flush=True)
sys.stdin.readline()
print(len(store.lexical(LexicalQuery(("walrus",)), 10, None)), flush=True)
"""


def test_a_long_running_reader_sees_another_process_writes(settings: Settings) -> None:
    store = LanceStore(settings.store_path, create=True)
    store.set_model("m", 16)
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files(random_writes(folder, 1, 2, seed=1))
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(settings.store_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert reader.stdin is not None and reader.stdout is not None
    assert reader.stdout.readline().strip() == "0"
    write = random_writes(folder, 1, 1, seed=5)[0]
    chunk = ChunkRecord(1, 1, 0, 1, None, "a walrus on the ice")
    store.write_files(
        [FileWrite(folder, "walrus.md", 1, 1, "y", "ok", "text", (chunk,), write.vectors)]
    )
    store.maintain()
    reader.stdin.write("\n")
    reader.stdin.flush()
    assert reader.stdout.readline().strip() == "1"
    assert reader.wait(timeout=30) == 0
    assert store.lexical(LexicalQuery(("walrus",)), 10, None)


def test_remove_keeps_the_full_text_index_current_and_cleans_up(
    settings: Settings, tmp_path: Path
) -> None:
    keep = write_tree(tmp_path / "keep", {"a.md": "otters float on their backs\n"})
    gone = write_tree(tmp_path / "gone", {"b.md": "otters crack shells with stones\n"})
    index = Index(settings, embedder=HashEmbedder())
    index.update([keep, gone])
    assert {h.rel for h in index.search("otters", k=5, mode="bm25")} == {"a.md", "b.md"}
    assert index.purge(gone) == 1
    assert [h.rel for h in index.search("otters", k=5, mode="bm25")] == ["a.md"]
    assert [f.name for f in index.folders()] == ["keep"]
    assert versions(settings.store_path) <= 12


def test_terms_are_recomputed_when_their_rules_change(settings: Settings) -> None:
    store = LanceStore(settings.store_path, create=True)
    store.set_model("m", 16)
    folder = store.ensure_folder("/srv/a", "a")
    write = random_writes(folder, 1, 1, seed=1)[0]
    chunk = ChunkRecord(1, 1, 0, 1, None, "def parseHeaderLine(): pass")
    store.write_files(
        [FileWrite(folder, "net/retry.py", 1, 1, "x", "ok", "text", (chunk,), write.vectors)]
    )
    store._chunk_table().update(where="true", values={"terms": "", "defines": ""})
    store._put_meta({"terms_version": "0"})
    assert store.lexical(LexicalQuery(("header line",)), 10, None) == []
    reopened = LanceStore(settings.store_path, create=True)  # a writer opens it
    assert reopened.meta("terms_version") == lance.TERMS_VERSION
    assert len(reopened.lexical(LexicalQuery(("header line",)), 10, None)) == 1
    assert len(reopened.lexical(LexicalQuery(("parseHeaderLine",), ("defines",)), 10, None)) == 1


def test_an_index_from_a_newer_semsearch_is_refused(settings: Settings) -> None:
    LanceStore(settings.store_path, create=True)._put_meta({"schema_version": "99"})
    with pytest.raises(StoreError, match="Upgrade semsearch"):
        LanceStore(settings.store_path)


def test_a_folder_that_is_not_an_index_is_a_clear_error(settings: Settings) -> None:
    (settings.store_path / "meta.lance").mkdir(parents=True)
    with pytest.raises(StoreError, match="is damaged: its table folders is missing"):
        LanceStore(settings.store_path)


def test_generation_never_repeats_when_the_chunks_table_is_recreated(settings: Settings) -> None:
    store = LanceStore(settings.store_path, create=True)
    store.set_model("m", 16)
    folder = store.ensure_folder("/srv/a", "a")
    seen = [store.generation()]
    for seed in range(12):
        store.write_files(random_writes(folder, 1, 2, seed=seed))
        store.delete_files(folder, [f"s{seed}/f0.txt"])
        seen.append(store.generation())
    store.clear_chunks()
    seen.append(store.generation())
    store.set_model("m2", 16)  # a new chunks table: its own versions start again
    seen.append(store.generation())
    store.mark_indexed(folder)
    seen.append(store.generation())
    for seed in range(12):
        store.write_files(random_writes(folder, 1, 2, seed=seed))
        seen.append(store.generation())
    assert len(set(seen)) == len(seen), seen


def test_reads_retry_once_after_a_clean_up_race() -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("version 7 was cleaned up")
        return "rows"

    assert retry(flaky) == "rows" and len(calls) == 2

    def broken() -> str:
        raise OSError("still failing")

    with pytest.raises(OSError, match="still failing"):
        retry(broken)


def test_new_files_without_chunks_do_not_touch_the_chunks_table(settings: Settings) -> None:
    store = LanceStore(settings.store_path, create=True)
    store.set_model("m", 16)
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files(random_writes(folder, 1, 2, seed=1))
    before = store._chunk_table().version
    store.write_files([FileWrite(folder, "empty.md", 1, 0, "e", "empty", "")])
    assert store._chunk_table().version == before
    assert set(store.file_states(folder)) == {"s1/f0.txt", "empty.md"}
    store.write_files([FileWrite(folder, "s1/f0.txt", 2, 0, "e", "empty", "")])
    assert store.chunk_count() == 0


def test_chunks_before_the_model_is_recorded_are_refused(settings: Settings) -> None:
    store = LanceStore(settings.store_path, create=True)
    folder = store.ensure_folder("/srv/a", "a")
    with pytest.raises(StoreError, match="before the model was recorded"):
        store.write_files(random_writes(folder, 1, 1, seed=1))
    assert store.file_states(folder) == {}


def test_a_schema_1_chunks_table_gets_text_hashes_and_vector_flags(tmp_path: Path) -> None:
    store = LanceStore(tmp_path / "lancedb", create=True)
    store.set_model("model-a", 4)
    folder = store.ensure_folder("/srv/a", "a")
    chunks = (ChunkRecord(1, 1, 0, 5, None, "alpha"), ChunkRecord(2, 2, 6, 10, None, "beta"))
    vectors = np.eye(4, dtype=np.float32)[:2]
    store.write_files([FileWrite(folder, "x.md", 1, 10, "sha", "ok", "text", chunks, vectors)])
    store._chunk_table().drop_columns(["text_hash", "has_vector"])  # as schema 1 wrote it
    store._put_meta({"schema_version": "1"})
    store.close()
    reader = LanceStore(tmp_path / "lancedb")
    assert reader.pending_count() == 0 and len(reader.vector_ids()) == 2  # readable as it is
    store = LanceStore(tmp_path / "lancedb", create=True)
    assert store.meta("schema_version") == str(lance.SCHEMA_VERSION) == "3"
    assert store.pending_count() == 0 and len(store.vector_ids()) == 2
    again = (ChunkRecord(1, 1, 0, 4, None, "beta"), ChunkRecord(2, 2, 5, 9, None, "new"))
    store.write_files([FileWrite(folder, "y.md", 1, 10, "sha", "ok", "text", again)])
    assert [text for _, text in store.pending_texts(10)] == ["new"]  # "beta" was hashed


def ann_store(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, files: int
) -> tuple[LanceStore, int]:
    """A store of ``files`` random files of 10 chunks, past a lowered ANN threshold (its vector
    index built); and its folder's id."""
    monkeypatch.setattr(lance, "ANN_MIN_ROWS", 300)
    store = LanceStore(settings.store_path, create=True)
    store.set_model("m", 16)
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files(random_writes(folder, files, 10, seed=1))
    store.maintain()
    assert store.has_ann()
    return store, folder


def test_the_ann_index_never_answers_with_chunks_still_waiting_for_vectors(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, folder = ann_store(settings, monkeypatch, files=50)
    texts = tuple(ChunkRecord(n, n, 0, 1, None, f"waiting {n}") for n in range(40))
    store.write_files([FileWrite(folder, "new.md", 1, 10, "sha", "ok", "text", texts)])
    store.maintain()  # the waiting chunks' zero vectors go into the index too: LanceDB's cosine
    # distance to a zero vector is no number, and such rows are never returned
    waiting = set(store.chunk_ids().tolist()) - set(store.vector_ids().tolist())
    assert len(waiting) == 40 and store.pending_count() == 40
    query = store.vectors(0)[2][0]
    found = store.nearest(query, 600, None)
    assert len(found) > 100 and not waiting & {cid for cid, _ in found}


def test_within_a_few_files_the_nearest_chunks_are_ranked_exactly_without_the_index(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the ANN threshold, a vector search within a few files (those a query names) reads
    their chunks and ranks them exactly, never loading the vector index; chunks still waiting
    for their vectors stay out; files holding more than ``EXACT_ROWS`` chunks ask the index."""
    store, folder = ann_store(settings, monkeypatch, files=50)
    ids, _, matrix = store.vectors(0)
    owners = store.chunk_files(ids.tolist())
    files = sorted(set(owners.values()))[:3]
    mine = [n for n, i in enumerate(ids.tolist()) if owners[i] in files]
    texts = tuple(ChunkRecord(n, n, 0, 1, None, f"waiting {n}") for n in range(5))
    store.write_files([FileWrite(folder, "new.md", 1, 10, "sha", "ok", "text", texts)])
    waiting = {
        f for i, f in store.chunk_files(store.chunk_ids().tolist()).items() if i not in owners
    }
    asked = []
    chunks_ann = lance.ann_nearest
    monkeypatch.setattr(
        lance, "ann_nearest", lambda *a, **k: [asked.append(1), chunks_ann(*a, **k)][1]
    )
    query = matrix[mine[4]] + 0.5 * matrix[mine[17]]
    query = (query / np.linalg.norm(query)).astype(np.float32)
    found = store.nearest(query, 7, [*files, *waiting])
    exact = sorted(mine, key=lambda n: -float(matrix[n] @ query))[:7]
    assert [cid for cid, _ in found] == [int(ids[n]) for n in exact] and not asked
    scores = [float(matrix[n] @ query) for n in exact]
    assert all(abs(s - e) < 1e-5 for (_, s), e in zip(found, scores, strict=True))
    with monkeypatch.context() as patched:  # their places came with them
        patched.setattr(store, "_places", lambda where: pytest.fail(f"read again: {where}"))
        assert len(store.chunk_places([cid for cid, _ in found])) == 7
    assert store.nearest(query, 7, sorted(waiting)) == [] and not asked  # no vector yet
    monkeypatch.setattr(lance, "EXACT_ROWS", 29)  # 30 chunks in those files: too many
    assert [cid for cid, _ in store.nearest(query, 7, files)][:1] == [int(ids[exact[0]])]
    assert asked == [1]


def test_the_nearest_chunks_bring_their_places_until_the_table_changes(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the ANN threshold the places of the nearest chunks are read with them: asking for
    them (collapsing copies, the file lift) reads nothing more, and they are those of the
    table's current version, never of a file deleted since."""
    store, folder = ann_store(settings, monkeypatch, files=40)
    _, _, matrix = store.vectors(0)
    chosen = [cid for cid, _ in store.nearest(matrix[5], 20, None)]
    fresh = LanceStore(settings.store_path).chunk_places(chosen)
    assert len(fresh) == 20
    with monkeypatch.context() as patched:  # the places came with the nearest chunks
        patched.setattr(store, "_places", lambda where: pytest.fail(f"read again: {where}"))
        assert store.chunk_places(chosen) == fresh
        assert store.chunk_files(chosen) == {p.id: p.file_id for p in fresh}
    gone = fresh[0].file_id
    rel = next(r["rel"] for i, r in store._file_rows().items() if i == gone)
    assert store.delete_files(folder, [rel]) == 1
    left = [p for p in fresh if p.file_id != gone]
    assert store.chunk_places(chosen) == left
    assert gone not in store.chunk_files(chosen).values()


def test_a_search_reads_each_tables_version_once_and_the_next_sees_new_commits(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within ``reading`` (one search) a table's version is read once: another handle's commit
    in the meantime is not looked for; a search begun after it, or a read outside any search,
    sees it. A hybrid search over a tree of copies reads each table's version at most once."""
    index = copies_index(settings, tmp_path, monkeypatch)
    reader = LanceStore(settings.store_path)
    writer = LanceStore(settings.store_path)
    meta = reader._meta
    with reader.reading():
        before = reader._versions.of(meta)
        writer._put_meta({"written": "by another handle"})
        assert reader._versions.of(meta) == before and reader.meta("written") is None
        with reader.reading():  # a search begun later
            assert reader._versions.of(meta) == before + 1
        assert reader.meta("written") == "by another handle"
    assert reader._versions.of(meta) == before + 1
    read: list[str] = []
    table_type = type(meta)
    version = table_type.version
    monkeypatch.setattr(
        table_type, "version", property(lambda t: [read.append(t.name), version.fget(t)][1])
    )
    hits = index.search("retry payment", k=5, mode="hybrid")
    assert len(hits) == 5 and read and sorted(read) == sorted(set(read))
    index.close()


def copied_writes(folders: list[int], files: int, seed: int) -> list[FileWrite]:
    """The same ``files`` random files of 10 chunks in each folder: every text in each."""
    writes = random_writes(folders[0], files, 10, seed)
    return [replace(write, folder_id=folder) for folder in folders for write in writes]


def copies_store(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, revisions: int, files: int
) -> tuple[LanceStore, list[int]]:
    """A store of ``revisions`` folders holding the same ``files`` random files of 10 chunks,
    past a lowered ANN threshold, maintained; and the folders' ids."""
    monkeypatch.setattr(lance, "ANN_MIN_ROWS", 300)
    store = LanceStore(settings.store_path, create=True)
    store.set_model("m", 16)
    folders = [store.ensure_folder(f"/srv/rev{n}", f"rev{n}") for n in range(revisions)]
    store.write_files(copied_writes(folders, files, seed=1))
    store.maintain()
    return store, folders


def test_a_tree_of_copies_is_searched_through_its_distinct_texts(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the ANN threshold, in a tree of copies, the nearest chunks are those of the nearest
    distinct texts (the texts table's index), every copy of each, scored exactly; the chunks'
    own index answers while the texts table is behind the chunks table, and within files."""
    store, folders = copies_store(settings, monkeypatch, revisions=3, files=40)  # 400 texts
    assert store.has_ann() and store.has_copies()
    texts = store._text_table()
    assert texts.count_rows() == 400 and store.meta("texts_ann_rows") == "400"
    assert any("vector" in index.columns for index in texts.list_indices())
    ids, _, matrix = store.vectors(0)
    hash_of = {p.id: p.text_hash for p in store.chunk_places(ids.tolist())}
    asked = []
    chunks_ann = lance.ann_nearest
    monkeypatch.setattr(
        lance, "ann_nearest", lambda *a, **k: [asked.append(1), chunks_ann(*a, **k)][1]
    )
    rng = np.random.default_rng(5)
    recalls = []
    for _ in range(20):
        query = matrix[rng.integers(len(matrix))] + 0.3 * rng.standard_normal(16)
        query = (query / np.linalg.norm(query)).astype(np.float32)
        found = store.nearest(query, 10, None)
        assert len(found) == 10  # 10 texts, the first of each one's 3 copies (by id)
        copies = store.text_places([hash_of[cid] for cid, _ in found])
        assert len(copies) == 30 and {p.id for p in copies} >= {cid for cid, _ in found}
        assert all(
            cid == min(p.id for p in copies if p.text_hash == hash_of[cid]) for cid, _ in found
        )
        cosines = {int(i): float(v @ query) for i, v in zip(ids, matrix, strict=True)}
        assert all(abs(score - cosines[cid]) < 1e-4 for cid, score in found)
        best: dict[str, float] = {}
        for cid in np.argsort(-(matrix @ query)).tolist():
            best.setdefault(hash_of[int(ids[cid])], 0.0)
        exact = set(list(best)[:10])
        recalls.append(len(exact & {hash_of[cid] for cid, _ in found}) / 10)
    assert np.mean(recalls) >= 0.9 and not asked  # the texts' index answered
    # BM25 over the texts too: each text once, by its first copy; every copy's place known
    found = store.lexical(LexicalQuery(("f7",)), 4, None)  # f7.txt's path words
    assert len(found) == 4 and len({hash_of[cid] for cid in found}) == 4
    last = {}  # the file of the last copy (by id) of each text found
    with monkeypatch.context() as patched:  # their files and text hashes came with them
        patched.setattr(store, "_places", lambda where: pytest.fail(f"read again: {where}"))
        keys = store.text_keys(found)
        copies = store.text_places([hash_of[found[0]]])  # every copy of a text found
        chosen = store.choose_copies(
            [hash_of[cid] for cid in found],
            lambda ids, files: [last.setdefault(hash_of[ids[0]], files[-1]), len(ids) - 1][1],
        )
        assert store.chunk_places([p.id for p in chosen.values()]) == list(chosen.values())
    assert copies[0].id == found[0] and len(copies) == 3
    assert {cid: key[1] for cid, key in keys.items()} == {cid: hash_of[cid] for cid in found}
    assert {h: p.file_id for h, p in chosen.items()} == last and len(last) == 4
    assert all(p.id == max(c for c in hash_of if hash_of[c] == h) for h, p in chosen.items())
    one_file = [int(store.chunk_files([int(ids[0])])[int(ids[0])])]
    assert store.nearest(matrix[0], 5, one_file) and not asked  # within a file: read, exact
    monkeypatch.setattr(lance, "EXACT_FILES", 0)
    assert store.nearest(matrix[0], 5, one_file)
    assert asked == [1]  # within more files: the chunks' own index
    store.write_files(random_writes(folders[0], 1, 10, seed=9))  # no maintain yet
    assert len(store.nearest(matrix[0], 10, None)) == 10 and asked == [1, 1]
    store.maintain()
    assert store._text_table().count_rows() == 410
    assert len(store.nearest(matrix[0], 10, None)) == 10 and asked == [1, 1]
    versions = (store._text_table().version, store._meta.version)
    with monkeypatch.context() as patched:  # nothing changed: nothing read or written again
        patched.setattr(store, "_update_texts", lambda *a: pytest.fail("brought up to date"))
        store.maintain()
    assert (store._text_table().version, store._meta.version) == versions
    # a text no chunk has any more leaves the table; one some copy still has stays
    assert store.delete_files(folders[2], ["s1/f0.txt"]) == 1
    store.maintain()
    assert store._text_table().count_rows() == 410
    for folder in folders[:2]:
        assert store.delete_files(folder, ["s1/f0.txt"]) == 1
    store.maintain()
    assert store._text_table().count_rows() == 400
    gone = {hash_of[int(i)] for i in ids[:10]}  # s1/f0.txt's chunks in rev0, written first
    rows = store._text_table().search().select(["text_hash"]).limit(None).to_arrow()
    assert not gone & set(rows["text_hash"].to_pylist())


def test_the_texts_found_bring_the_rows_of_their_chunks(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A text the texts table answered with comes with its text: the rows of its chunks (the
    one an arm named, the copy a search chose) are made without reading the chunks table, and
    are those it holds."""
    store, _ = copies_store(settings, monkeypatch, revisions=3, files=20)
    ids, _, matrix = store.vectors(0)
    found = [cid for cid, _ in store.nearest(matrix[3], 10, None)]
    hashes = [p.text_hash for p in store.chunk_places(found)]
    chosen = store.choose_copies(hashes, lambda ids, files: len(ids) - 1)
    wanted = [*found, *(p.id for p in chosen.values())]
    fresh = LanceStore(settings.store_path).chunks(wanted)
    assert len(fresh) == 20 and len({row.id for row in fresh}) == 20
    chunks = store._chunk_table()
    with monkeypatch.context() as patched:
        patched.setattr(chunks, "search", lambda *a, **k: pytest.fail("read the chunks table"))
        assert store.chunks(wanted) == fresh
    other = [int(i) for i in ids if int(i) not in wanted][:3]  # not answered: read
    assert [row.id for row in store.chunks([*other, found[0]])] == [*other, found[0]]


def test_the_texts_table_goes_with_the_chunks_table(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, folders = copies_store(settings, monkeypatch, revisions=2, files=20)
    assert store._text_table().count_rows() == 200
    store.clear_chunks()
    assert store._text_table() is None and store.meta("texts_ann_rows") is None
    store.set_model("other", 8)  # another dimension: a texts table made anew for it
    rng = np.random.default_rng(2)
    writes = []
    for write in copied_writes(folders, 20, seed=3):
        vectors = rng.standard_normal((10, 8)).astype(np.float32)
        writes.append(replace(write, vectors=vectors / np.linalg.norm(vectors, axis=1)[:, None]))
    store.write_files(writes)
    store.maintain()
    texts = store._text_table()
    assert texts.schema.field("vector").type.list_size == 8 and texts.count_rows() == 200


COPIED = "def test_retry():\n    assert retry_payment(charge) == 'retry payment'\n"
OTHERS = {f"src/m{n}.py": f"def retry_{n}(payment):\n    return payment {n}\n" for n in range(4)}


def copies_index(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Index:
    """An index (hashed embedder) of a test file in 250 revisions and 4 other files, past a
    lowered ANN threshold: 5 distinct texts."""
    monkeypatch.setattr(lance, "ANN_MIN_ROWS", 200)
    tree = {f"rev{n:03}/tests/test_retry.py": COPIED for n in range(250)}
    index = Index(settings, embedder=HashEmbedder())
    index.update([write_tree(tmp_path / "repo", {**tree, **OTHERS})])
    return index


@contextlib.contextmanager
def texts_only(store: LanceStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail the test if a search reads the chunks' vector or full-text index."""
    with monkeypatch.context() as patched:
        patched.setattr(lance, "ann_nearest", lambda *a, **k: pytest.fail("the chunks' index"))
        patched.setattr(store, "_warm_full_text", lambda *a: pytest.fail("the chunks' FTS"))
        yield


def assert_copies_found(index: Index) -> None:
    """In each mode, "retry payment" finds the copied test once, listing its 249 other copies,
    and the four other files."""
    for mode in ("hybrid", "vector", "bm25"):
        hits = index.search("retry payment", k=5, mode=mode)  # type: ignore[arg-type]
        (copied_hit,) = [hit for hit in hits if hit.rel.endswith("tests/test_retry.py")]
        assert sorted(h.rel for h in hits if h is not copied_hit) == sorted(OTHERS), mode
        assert copied_hit.copy_count == 249, mode


def test_a_search_past_the_threshold_collapses_copies_through_the_texts_table(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test file in 250 revisions: the vector arm reads its distinct texts once, and the
    search still gives k distinct places, the copied one listing the other 249."""
    index = copies_index(settings, tmp_path, monkeypatch)
    store = index._store
    assert isinstance(store, LanceStore) and store.has_ann()
    assert store._text_table().count_rows() == 5
    chunks_fts = store._warm_full_text  # called on the way to the chunks' full-text index
    with texts_only(store, monkeypatch):
        assert_copies_found(index)
    monkeypatch.setattr(store, "_warm_full_text", chunks_fts)  # within files: the chunks table
    (hit,) = index.search("retry payment", k=1, mode="bm25", glob="rev007/**")
    assert hit.rel == "rev007/tests/test_retry.py" and hit.copy_count == 0
    index.close()


def test_past_the_threshold_the_copy_in_src_represents_those_in_tests(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The texts table names a text by its first copy (by id: here the first of 250 under
    ``tests/``); the hit is still the copy in ``src/``, the last by id, listing the others."""
    monkeypatch.setattr(lance, "ANN_MIN_ROWS", 200)
    tree = {f"rev{n:03}/tests/test_retry.py": COPIED for n in range(250)}
    index = Index(settings, embedder=HashEmbedder())
    index.update([write_tree(tmp_path / "repo", {**tree, **OTHERS, "src/billing.py": COPIED})])
    store = index._store
    assert isinstance(store, LanceStore) and store._text_table().count_rows() == 5
    rels = {r["id"]: r["rel"] for r in store._file_rows().values()}
    places = store.chunk_places(store.chunk_ids().tolist())
    (src,) = [p for p in places if rels[p.file_id] == "src/billing.py"]
    copies = store.text_places([src.text_hash])
    assert len(copies) == 251 and src.id == max(p.id for p in copies)  # written last
    with texts_only(store, monkeypatch):
        for mode in ("hybrid", "vector", "bm25"):
            hits = index.search("retry payment", k=5, mode=mode)  # type: ignore[arg-type]
            (copied_hit,) = [hit for hit in hits if hit.rel not in OTHERS]
            assert copied_hit.rel == "src/billing.py" and copied_hit.copy_count == 250, mode
    index.close()


def test_a_text_is_found_by_the_path_words_its_first_chunk_has_now(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The texts table's ``terms`` are its first chunk's: a folder moved under a prefix gives
    them new path words, which the next maintain writes."""
    store, _ = copies_store(settings, monkeypatch, revisions=3, files=20)
    query = LexicalQuery(("relocated",))
    assert store.lexical(query, 10, None) == []
    assert store.move_folder("/srv/rev0", "/srv/rev0", "relocated/") == 0  # same path: nothing
    assert store.move_folder("/srv/rev0", "/srv/new", "relocated/") == 20
    assert store._text_table().count_rows() == 0
    store.maintain()
    assert store._text_table().count_rows() == 200
    found = store.lexical(query, 10, None)
    assert len(found) == 10 and store.meta("texts_of") is not None
    rels = {r["id"]: r["rel"] for r in store._file_rows().values()}
    copies = store.text_places([str(key) for _, key in store.text_keys(found).values()])
    assert sum(rels[p.file_id].startswith("relocated/") for p in copies) == 10


def test_status_check_reads_the_texts_table_and_its_full_text_indexes(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search over every file asks the texts table's full-text indexes, not the chunks' (a
    search within files does): the check asks both."""
    store, _ = copies_store(settings, monkeypatch, revisions=2, files=20)
    assert store.check() == []
    for name in ("texts", "chunks"):
        table = store._text_table() if name == "texts" else store._chunk_table()
        index = next(i for i in table.list_indices() if i.columns == ["text"])
        folder = settings.store_path / f"{name}.lance" / "_indices" / index.index_uuid
        shutil.move(folder, folder.with_name("aside"))
        problems = LanceStore(settings.store_path).check()
        about = "table texts: full-text index: " if name == "texts" else "full-text index: "
        assert problems and all(p.startswith(about) for p in problems), name
        assert mended_by_index(problems) == (name == "texts")
        shutil.move(folder.with_name("aside"), folder)


def test_the_texts_table_waits_for_every_vector_and_replaces_one_of_another_shape(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks still waiting for their vectors leave the texts table unstamped (a search reads the
    chunks table) until a run gives them vectors; a texts table of another shape (another
    semsearch's) is made anew."""
    store, folders = copies_store(settings, monkeypatch, revisions=2, files=20)
    stamped = store.meta("texts_of")
    waiting = tuple(ChunkRecord(n, n, 0, 1, None, f"waiting {n}") for n in range(5))
    for folder in folders:
        store.write_files([FileWrite(folder, "new.md", 1, 10, "sha", "ok", "text", waiting)])
    store.maintain()
    assert store.pending_count() == 10 and store.meta("texts_of") == stamped
    assert store.nearest(store.vectors(0)[2][0], 5, None)  # the chunks table answered
    assert store._texts_if_current(store._chunks_stamp(store._chunk_table())) is None
    hashes = [h for h, _ in store.pending_texts(10)]
    store.set_vectors(hashes, np.eye(16, dtype=np.float32)[: len(hashes)])
    store.maintain()
    assert store.meta("texts_of") == store._chunks_stamp(store._chunk_table())
    assert store._text_table().count_rows() == 205
    store._db.drop_table("texts")
    store._texts = store._db.create_table("texts", schema=pa.schema([("text_hash", pa.string())]))
    store._texts.add(pa.table({"text_hash": ["0" * 32]}))
    store.write_files(random_writes(folders[0], 1, 10, seed=7))  # the chunks change
    store.maintain()
    texts = store._text_table()
    assert texts.count_rows() == 215 and "ids" in texts.schema.names


@pytest.mark.parametrize("changed", [False, True], ids=["nothing changed", "a file changed"])
@pytest.mark.parametrize("damage", ["data file", "full-text index"])
def test_a_damaged_texts_table_is_searched_around_and_made_again_by_an_index_run(
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    damage: str,
    changed: bool,
) -> None:
    """The texts table's rows all come from the chunks table: a file of it missing costs a
    search time, not its answer (the chunks table answers; said once), `status --check` says
    an index run mends it, and the next run makes it again, whether it leaves the table as it
    is (which reads it whole to find out) or brings it up to date; a reader open all along then
    reads it again."""
    index = copies_index(settings, tmp_path, monkeypatch)
    store = index._store
    assert isinstance(store, LanceStore)
    folder = settings.store_path / "texts.lance"
    if damage == "data file":
        (victim,) = (folder / "data").iterdir()
    else:
        text = next(i for i in store._text_table().list_indices() if i.columns == ["text"])
        victim = folder / "_indices" / text.index_uuid
    shutil.move(victim, tmp_path / "aside")
    caplog.set_level(logging.WARNING, "semsearch.store")
    reader = Index(settings, embedder=HashEmbedder())  # a long-running one, as an MCP server
    assert_copies_found(reader)
    assert_copies_found(reader)
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith(f"semsearch: the texts table of the index {settings.store_path}")
    assert "damaged (Not found: " in said and "searching its chunks table instead" in said
    assert main(["status", "--check"]) == 1
    out, err = capsys.readouterr()
    assert "damaged  (1 problem)\n  table texts: " in out
    assert "Run `semsearch index`: it makes the table again." in err and "--rebuild" not in err
    caplog.clear()
    if changed:  # a sixth text, which no search below finds
        (tmp_path / "repo" / "src" / "m4.py").write_text("def unrelated():\n    return 4\n")
    assert index.update([tmp_path / "repo"]).has_changes == changed
    (said,) = [r.getMessage() for r in caplog.records]
    assert "was damaged (Not found: " in said and "making it again from the chunks table" in said
    assert store._text_table().count_rows() == 5 + changed
    assert not (folder / "data" / victim.name).exists()
    assert main(["status", "--check"]) == 0
    capsys.readouterr()
    with texts_only(reader._store, monkeypatch):  # type: ignore[arg-type]
        assert_copies_found(reader)
    caplog.clear()
    index.update([tmp_path / "repo"])  # sound: nothing made again
    assert not caplog.records and store._text_table().count_rows() == 5 + changed
    index.close()
    reader.close()
