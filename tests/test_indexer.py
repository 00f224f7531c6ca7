"""Incremental indexing with the hashed embedder: what is re-read, re-embedded, kept or purged."""

from __future__ import annotations

import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from semsearch.config import Settings
from semsearch.errors import LockedError, ModelMismatchError, UsageError
from semsearch.index import Index
from semsearch.indexing import pipeline
from semsearch.indexing.pipeline import EMBED_BATCH, FileEvent
from semsearch.model.embedder import FloatMatrix, HashEmbedder
from semsearch.store import open_store
from semsearch.store.sqlite.schema import SCHEMA_VERSION
from semsearch.text.chunking import chunk_text
from tests.conftest import BACKENDS, write_tree
from tests.docgen import write_docx, write_pdf


@pytest.fixture(params=BACKENDS)
def store_backend(request: pytest.FixtureRequest) -> str:
    """Every test here runs against both store backends."""
    return str(request.param)


class CountingEmbedder(HashEmbedder):
    """The hashed embedder, counting the chunk texts it embeds and, apart, the rel paths of
    code files (the path vectors: one word, no chunk text of these tests is)."""

    def __init__(self) -> None:
        super().__init__()
        self.embedded = 0
        self.paths: list[str] = []

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        paths = [text for text in texts if len(text.split()) == 1]
        self.embedded += len(texts) - len(paths)
        self.paths += paths
        return super().embed(texts)


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


@pytest.fixture
def index(settings: Settings, embedder: CountingEmbedder) -> Index:
    return Index(settings, embedder=embedder)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return write_tree(
        tmp_path / "notes",
        {
            "a.md": "# Alpha\n\nalpha apples and avocados\n",
            "b.md": "# Beta\n\nbeta bananas and blueberries\n",
            "sub/c.txt": "gamma grapes\n",
        },
    )


def rels(index: Index, query: str) -> list[str]:
    return [hit.rel for hit in index.search(query, k=10)]


def bump_mtime(path: Path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))


def test_second_run_reads_and_embeds_nothing(
    index: Index, folder: Path, embedder: CountingEmbedder
) -> None:
    first = index.update([folder]).folders[0]
    assert (first.indexed, first.chunks) == (3, 3)
    embedded = embedder.embedded
    second = index.update([folder]).folders[0]
    assert (second.indexed, second.unchanged, second.chunks) == (0, 3, 0)
    assert embedder.embedded == embedded


def test_touch_without_change_updates_mtime_only(
    index: Index, folder: Path, embedder: CountingEmbedder
) -> None:
    index.update([folder])
    embedded = embedder.embedded
    bump_mtime(folder / "a.md")
    events: list[FileEvent] = []
    report = index.update([folder], on_event=events.append).folders[0]
    assert [e.action for e in events if e.rel == "a.md"] == ["touched"]
    assert embedder.embedded == embedded and report.indexed == 0
    events.clear()
    index.update([folder], on_event=events.append)
    assert [e.action for e in events if e.rel == "a.md"] == ["unchanged"]


def test_changed_file_is_replaced(index: Index, folder: Path) -> None:
    index.update([folder])
    (folder / "a.md").write_text("# Alpha\n\nalpha apricots only\n")
    bump_mtime(folder / "a.md")
    assert index.update([folder]).folders[0].indexed == 1
    texts = [hit.text for hit in index.search("alpha", k=10) if hit.rel == "a.md"]
    assert texts == ["# Alpha\n\nalpha apricots only"]


@pytest.mark.parametrize(
    ("content", "status"),
    [
        (b"", "empty"),
        (b"   \n\n  ", "empty"),
        (b"bin\x00ary", "binary"),
        (b"x" * 600_000, "too large"),
    ],
)
def test_file_that_turns_unusable_loses_its_chunks(
    index: Index, folder: Path, content: bytes, status: str
) -> None:
    index.update([folder])
    assert "b.md" in rels(index, "bananas blueberries")
    (folder / "b.md").write_bytes(content)
    bump_mtime(folder / "b.md")
    index.update([folder])
    assert "b.md" not in rels(index, "bananas blueberries")


def test_deleted_file_is_pruned_only_in_its_folder(
    index: Index, folder: Path, tmp_path: Path
) -> None:
    other = write_tree(tmp_path / "other", {"a.md": "alpha in the other folder\n"})
    index.update([folder, other])
    (folder / "a.md").unlink()
    report = index.update([folder]).folders[0]
    assert report.deleted == 1
    hits = [(h.folder, h.rel) for h in index.search("alpha", k=10)]
    assert ("other", "a.md") in hits
    assert ("notes", "a.md") not in hits


def test_missing_folder_is_reported_and_the_rest_indexed(
    index: Index, folder: Path, tmp_path: Path
) -> None:
    report = index.update([tmp_path / "gone", folder])
    assert report.failed
    assert report.folders[0].failed and "not found" in report.folders[0].problems[0].reason
    assert report.folders[1].indexed == 3


def test_malformed_document_is_reported_once_and_the_rest_indexed(
    index: Index, folder: Path
) -> None:
    (folder / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    write_docx(folder / "ok.docx", ["Quarterly figures for the orchard"])
    report = index.update([folder])
    assert [p.path for p in report.folders[0].problems] == [str(folder / "broken.docx")]
    assert report.folders[0].indexed == 4
    assert "ok.docx" in rels(index, "orchard figures")


def test_max_files_truncates_and_next_run_resumes(index: Index, folder: Path) -> None:
    first = index.update([folder], max_files=2).folders[0]
    assert (first.indexed, first.truncated) == (2, True)
    second = index.update([folder]).folders[0]
    assert (second.indexed, second.unchanged, second.truncated) == (1, 2, False)


def test_force_re_embeds_everything(index: Index, folder: Path, embedder: CountingEmbedder) -> None:
    (folder / "tool.py").write_text("def tool():\n    return 'a tool'\n")
    index.update([folder])
    before = embedder.embedded
    assert embedder.paths == ["tool.py"]  # the one code file's path vector
    report = index.update([folder], force=True)
    assert report.folders[0].indexed == 4 and embedder.embedded == before + 4
    assert (embedder.paths, report.paths_embedded) == (["tool.py", "tool.py"], 1)


def test_force_with_another_model_never_drops_a_folder_it_does_not_index(
    settings: Settings, folder: Path, tmp_path: Path
) -> None:
    """Found in review: `index --force PATH` where the configured model differs from the
    index's (an fp32 index on a CPU where `auto` picks int8) dropped every folder's chunks and
    indexed only PATH's."""
    other_folder = write_tree(tmp_path / "other", {"o.md": "otters in the river"})
    Index(settings, embedder=HashEmbedder(64)).update([folder, other_folder])
    other = Index(settings, embedder=HashEmbedder(32))
    with pytest.raises(UsageError, match=f"those of {other_folder} too, which this run does not"):
        other.update([folder], force=True)
    kept = Index(settings, embedder=HashEmbedder(64))
    assert kept.search("otters")[0].rel == "o.md"  # nothing dropped
    assert other.update([folder, other_folder], force=True).total("indexed") == 4
    assert other.search("otters")[0].rel == "o.md"


def test_another_model_is_refused_until_force(settings: Settings, folder: Path) -> None:
    Index(settings, embedder=HashEmbedder(64)).update([folder])
    other = Index(settings, embedder=HashEmbedder(32))
    with pytest.raises(ModelMismatchError, match="--force"):
        other.update([folder])
    with pytest.raises(ModelMismatchError, match="--force"):
        other.search("alpha")
    assert other.update([folder], force=True).folders[0].indexed == 3
    assert other.search("alpha apples")[0].rel == "a.md"


def test_many_small_files_share_embedding_batches(settings: Settings, tmp_path: Path) -> None:
    calls: list[int] = []

    class Recording(HashEmbedder):
        def embed(self, texts: Sequence[str]) -> FloatMatrix:
            calls.append(len(texts))
            return super().embed(texts)

    root = write_tree(tmp_path / "many", {f"f{i:03}.md": f"note number {i}\n" for i in range(300)})
    Index(settings, embedder=Recording()).update([root])
    assert sum(calls) == 300 and len(calls) <= 2


KILL_SCRIPT = """
import os, sys
from semsearch.config import load_settings
from semsearch.model.embedder import HashEmbedder
from semsearch.index import Index
index = Index(load_settings(os.environ), embedder=HashEmbedder())
def on_event(event):
    if event.action == "indexed":
        print("progress", flush=True)
index.update([sys.argv[1]], on_event=on_event)
print("finished", flush=True)
"""


def test_kill_9_mid_run_leaves_a_consistent_index_and_the_next_run_resumes(
    settings: Settings, tmp_path: Path
) -> None:
    files = {
        f"d{i // 100}/f{i:04}.md": f"document {i} " + "lorem ipsum " * 400 for i in range(1500)
    }
    root = write_tree(tmp_path / "big", files)
    child = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT, str(root)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "progress"
    child.send_signal(signal.SIGKILL)
    child.wait()
    if settings.store_backend == "sqlite":
        conn = sqlite3.connect(settings.index_path)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        conn.close()
    reader = Index(settings, embedder=HashEmbedder())
    assert reader.search("document lorem", k=3)  # searchable as the killed run left it
    done = reader.status(count_changes=False).files
    assert 0 < done < 1500
    report = Index(settings, embedder=HashEmbedder()).update([root]).folders[0]
    assert (report.unchanged, report.indexed) == (done, 1500 - done)
    store = open_store(settings.store_backend, settings.store_path)
    (folder,) = store.folders()
    assert (folder.files, folder.chunks) == (1500, store.chunk_count())  # no orphaned chunks


def test_concurrent_runs_wait_for_each_other(settings: Settings, folder: Path) -> None:
    from semsearch.store import write_lock

    index = Index(settings, embedder=HashEmbedder())
    with write_lock(settings.store_path, 0):
        started = time.monotonic()
        with pytest.raises(LockedError, match="Another `semsearch index` is writing"):
            index.update([folder], wait_seconds=0.5)
        assert time.monotonic() - started >= 0.5
    assert index.update([folder]).folders[0].indexed == 3


def test_max_files_counts_files_read_across_folders(
    index: Index, folder: Path, tmp_path: Path
) -> None:
    other = write_tree(tmp_path / "other", {f"o{i}.md": f"other note {i}\n" for i in range(3)})
    index.update([folder])
    bump_mtime(folder / "a.md")  # read again (hash unchanged), so it counts towards the cap
    (folder / "b.md").write_text("# Beta\n\nchanged bananas\n")
    bump_mtime(folder / "b.md")
    first, second = index.update([folder, other], max_files=3).folders
    assert (first.processed, first.indexed, first.truncated) == (2, 1, False)
    assert (second.processed, second.indexed, second.truncated) == (1, 1, True)
    assert index.update([folder, other]).folders[1].indexed == 2


@pytest.mark.parametrize("bad", [0, -3])
def test_max_files_below_one_is_a_usage_error(index: Index, folder: Path, bad: int) -> None:
    with pytest.raises(UsageError, match="max_files must be at least 1"):
        index.update([folder], max_files=bad)


GATED_SCRIPT = """
import os, sys, time
from pathlib import Path
from typing import Any
from semsearch.config import load_settings
from semsearch.model.embedder import HashEmbedder
from semsearch.index import Index

class Gate(HashEmbedder):
    def embed(self, texts):
        if len(texts) > 1:  # the second pass (the first embeds one text to learn the dimension)
            Path(sys.argv[2]).touch()
            while not Path(sys.argv[3]).exists():
                time.sleep(0.05)
        return super().embed(texts)

report = Index(load_settings(os.environ), embedder=Gate()).update([sys.argv[1]])
print(report.chunks_embedded, report.chunks_pending, flush=True)
"""


def start_gated_run(root: Path, tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    """An index run in another process, stopped before its second pass; returns it and the
    file that lets it go on."""
    waiting, go = tmp_path / "waiting", tmp_path / "go"
    child = subprocess.Popen(
        [sys.executable, "-c", GATED_SCRIPT, str(root), str(waiting), str(go)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    deadline = time.monotonic() + 120
    while not waiting.exists():
        assert child.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    return child, go


# Chunks embedded in the first pass of a fresh index: one, to record the model and its
# dimension before the first chunks are written (LanceDB's schema; a stopped run's resume).
PROBED = 1


def notes(count: int) -> dict[str, str]:
    return {f"n{i:02}.md": f"# Note {i}\n\nword{i}unique about topic {i}\n" for i in range(count)}


def test_a_search_during_an_index_run_finds_every_file_read_by_its_words(
    settings: Settings, tmp_path: Path
) -> None:
    root = write_tree(tmp_path / "notes", notes(12))
    child, go = start_gated_run(root, tmp_path)
    reader = Index(settings, embedder=HashEmbedder())
    try:
        status = reader.status(count_changes=False)
        waiting = 12 - PROBED
        assert (status.files, status.chunks, status.chunks_pending) == (12, 12, waiting)
        for i in range(12):
            assert f"n{i:02}.md" in rels(reader, f"word{i}unique")  # hybrid, by its lexical arms
            hits = reader.search(f"word{i}unique", mode="bm25")
            assert [hit.rel for hit in hits] == [f"n{i:02}.md"]
        assert len(reader.search("topic", mode="vector", k=20)) == PROBED
    finally:
        go.touch()
        out, _ = child.communicate(timeout=120)
    assert out.split() == ["12", "0"]
    assert reader.status(count_changes=False).chunks_pending == 0
    assert len(reader.search("topic", mode="vector", k=20)) == 12  # picked up as they came


def test_a_run_killed_before_its_vectors_resumes_embedding_only_what_is_missing(
    settings: Settings, tmp_path: Path, embedder: CountingEmbedder
) -> None:
    root = write_tree(tmp_path / "notes", notes(12))
    child, _ = start_gated_run(root, tmp_path)
    child.send_signal(signal.SIGKILL)
    child.wait()
    if settings.store_backend == "sqlite":
        conn = sqlite3.connect(settings.index_path)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()
    index = Index(settings, embedder=embedder)
    waiting = 12 - PROBED
    assert index.status(count_changes=False).chunks_pending == waiting
    report = index.update([root])
    assert (report.folders[0].indexed, report.folders[0].unchanged) == (0, 12)
    assert (report.chunks_embedded, report.chunks_pending) == (waiting, 0)
    assert embedder.embedded == waiting and report.as_json()["chunksEmbedded"] == waiting
    assert len(index.search("topic", mode="vector", k=20)) == 12


class StopsAtVectors(HashEmbedder):
    """Interrupted (Ctrl-C) as the second pass begins: the run's chunks keep no vector (the
    first pass may embed one text to learn the dimension)."""

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        if len(texts) > 1:
            raise KeyboardInterrupt
        return super().embed(texts)


def test_index_path_embeds_only_that_folder_s_pending_chunks(
    settings: Settings, tmp_path: Path, embedder: CountingEmbedder
) -> None:
    a = write_tree(tmp_path / "a", notes(3))
    b = write_tree(tmp_path / "b", {"tool.py": "def tool():\n    return 'a tool'\n"})
    stopped = Index(settings, embedder=StopsAtVectors())
    with pytest.raises(KeyboardInterrupt):
        stopped.update([a])
    stopped.close()
    index = Index(settings, embedder=embedder)
    waiting = 3 - PROBED
    assert (index.pending_work([b]), index.pending_work([a])) == (1, waiting + 3)  # + 3 paths
    report = index.update([b])
    assert (report.chunks_embedded, report.chunks_pending, embedder.embedded) == (1, 0, 1)
    assert embedder.paths == ["tool.py"] and index.pending_work([b]) == 0
    assert index.status(count_changes=False).chunks_pending == waiting  # a's still wait
    report = index.update([a])
    assert (report.chunks_embedded, report.chunks_pending) == (waiting, 0)
    assert index.pending_work([a]) == 0


def long_file(lines: int, seed: str = "", blank_every: int = 4) -> list[str]:
    """Paragraphs of ``blank_every - 1`` distinct lines and a blank line (0: no blank line)."""
    return [
        ""
        if blank_every and n % blank_every == blank_every - 1
        else f"line {n} {seed} " + " ".join(f"w{n}x{j}" for j in range(7))
        for n in range(lines)
    ]


def write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize(
    "change",
    [
        lambda lines: lines.__setitem__(500, lines[500] + " edited"),
        lambda lines: lines.insert(0, "a new first line above everything"),
        lambda lines: lines.__delitem__(700),
    ],
    ids=["edit", "insert-above", "delete"],
)
@pytest.mark.parametrize("blank_every", [4, 0], ids=["paragraphs", "no-blank-lines"])
def test_a_one_line_change_in_a_long_file_re_embeds_only_nearby_chunks(
    index: Index, tmp_path: Path, embedder: CountingEmbedder, change: Any, blank_every: int
) -> None:
    """Without blank lines the chunk ends are the edited file's old ones: greedy packing alone
    moved every boundary after the change (53 chunks embedded again for the inserted line)."""
    lines = long_file(1000, blank_every=blank_every)
    write_lines(tmp_path / "big" / "long.txt", lines)
    first = index.update([tmp_path / "big"])
    assert first.chunks_embedded == first.total("chunks") == embedder.embedded > 40
    change(lines)
    write_lines(tmp_path / "big" / "long.txt", lines)
    report = index.update([tmp_path / "big"])
    assert report.folders[0].indexed == 1 and report.total("chunks") > 40
    assert 1 <= report.chunks_embedded <= 3
    assert embedder.embedded == first.chunks_embedded + report.chunks_embedded


def test_force_chunks_an_edited_file_as_a_new_index_would(
    index: Index, tmp_path: Path, embedder: CountingEmbedder
) -> None:
    lines = long_file(1000, blank_every=0)
    write_lines(tmp_path / "big" / "long.txt", lines)
    index.update([tmp_path / "big"])
    lines.insert(0, "a new first line above everything")
    write_lines(tmp_path / "big" / "long.txt", lines)
    document = index._indexer_settings().document_chunking  # long.txt is a document
    fresh = {c.text for c in chunk_text("\n".join(lines) + "\n", embedder, document)}
    index.update([tmp_path / "big"])
    kept = {row.text for row in all_chunks(index)}
    index.update([tmp_path / "big"], force=True)
    assert {row.text for row in all_chunks(index)} == fresh != kept


def test_identical_chunk_text_is_embedded_once_per_run(
    index: Index, tmp_path: Path, embedder: CountingEmbedder
) -> None:
    header = "Licensed under the Apache License " + " ".join(f"clause{j}" for j in range(196))
    files = {f"src/m{i}.py": f"# {header}\n\ndef f{i}():\n    return {i}\n" for i in range(20)}
    files |= {f"licenses/copy{i}/LICENSE.txt": header + "\n" for i in range(5)}
    report = index.update([write_tree(tmp_path / "proj", files)])
    texts = {row.text for row in all_chunks(index)}
    assert report.total("chunks") > len(texts)
    assert report.chunks_embedded == embedder.embedded == len(texts)


class RecordingEmbedder(HashEmbedder):
    """The hashed embedder, keeping every text it is given to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        self.texts += texts
        return super().embed(texts)


@pytest.mark.parametrize("layout", ["folders", "revisions"])
def test_copies_of_a_tree_indexed_in_one_run_cost_no_model_time(
    settings: Settings, tmp_path: Path, layout: str
) -> None:
    """A tree copied three times (three configured folders, or three revision folders inside
    one), indexed in one run: the model sees each distinct text once, chunk texts and rel paths
    alike, over more second-pass batches than one; a fourth copy indexed later embeds no chunk."""
    tree = {
        f"pkg/mod{n}.py": "\n".join(long_file(60, seed=f"m{n}", blank_every=0)) + "\n"
        for n in range(50)
    }
    if layout == "folders":
        roots = [write_tree(tmp_path / f"rev{n}", tree) for n in (1, 2, 3)]
    else:
        roots = [
            write_tree(
                tmp_path / "repo",
                {f"rev{n}/{rel}": text for n in (1, 2, 3) for rel, text in tree.items()},
            )
        ]
    embedder = RecordingEmbedder()
    index = Index(settings, embedder=embedder)
    report = index.update(roots)
    texts = {row.text for row in all_chunks(index)}
    assert report.total("chunks") == 3 * len(texts) > EMBED_BATCH
    assert report.chunks_embedded == len(texts)
    assert len(embedder.texts) == len(set(embedder.texts))  # nothing embedded twice
    # a fourth copy indexed in a later run: its chunks take the stored vectors of their texts
    embedder.texts.clear()
    later = index.update([write_tree(tmp_path / "rev4", tree)])
    assert later.total("chunks") == len(texts) and later.chunks_embedded == 0
    assert len(embedder.texts) == later.paths_embedded
    index.close()


def all_chunks(index: Index) -> list[Any]:
    store = open_store(index.settings.store_backend, index.settings.store_path)
    rows = store.chunks([int(i) for i in store.chunk_ids()])
    store.close()
    return rows


def git(root: Path, *args: str) -> None:
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", *identity, "-C", str(root), *args], check=True, capture_output=True)


def test_a_branch_switch_re_embeds_only_chunks_whose_text_changed(
    index: Index, tmp_path: Path, embedder: CountingEmbedder
) -> None:
    root = tmp_path / "repo"
    for n in range(20):
        write_lines(root / f"pkg/mod{n}.txt", long_file(100, seed=f"m{n}"))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-qm", "main")
    git(root, "checkout", "-qb", "feature")
    (root / "moved").mkdir()
    git(root, "mv", "pkg/mod0.txt", "moved/mod0.txt")  # a move: same text, new path
    for n in (3, 11):  # 5 % of the lines: 100 of 2,000, in two files
        lines = long_file(100, seed=f"m{n}")
        write_lines(root / f"pkg/mod{n}.txt", [*lines[:50], *long_file(50, seed="feature")])
    git(root, "commit", "-qam", "feature")
    git(root, "checkout", "-q", "main")
    index.update([root])
    before = {row.text for row in all_chunks(index)}
    git(root, "checkout", "-q", "feature")
    report = index.update([root])
    changed = {row.text for row in all_chunks(index)} - before
    assert report.folders[0].indexed == 3 and 0 < len(changed) < report.total("chunks") / 2
    assert report.chunks_embedded == len(changed)


def test_the_second_pass_reports_each_batch_after_every_file_event(
    index: Index, folder: Path, settings: Settings
) -> None:
    events: list[FileEvent] = []
    report = index.update([folder], on_event=events.append)
    assert [(e.action, e.done, e.total) for e in events[:3]] == [
        ("indexed", n, 3) for n in (1, 2, 3)
    ]
    chunks = 3 - PROBED  # waiting for their vector: the pass also makes 3 path vectors
    start, *batches = events[3:]
    assert (start.folder, start.action, start.done, start.total) == (
        "vectors",
        "embedding",
        0,
        chunks + 3,
    )
    assert [(e.action, e.done, e.total, e.chunks, e.detail) for e in batches] == [
        ("embedded", chunks, chunks + 3, chunks, "0 chunks waiting for vectors"),
        ("embedded", chunks + 3, chunks + 3, chunks, "3 file paths"),  # documents: no model
    ]
    assert report.chunks_embedded == 3


def test_every_path_of_a_listing_is_one_event_counted_as_the_summary_counts(
    index: Index, tmp_path: Path
) -> None:
    root = write_tree(
        tmp_path / "mixed",
        {
            "a.md": "alpha\n",
            "empty.md": "",
            "image.png": b"\x89PNG\x00",
            ".indexignore": "ignored.md\n",
            "ignored.md": "never read\n",
            "gone.md": "soon deleted\n",
        },
    )
    index.update([root])
    (root / "gone.md").unlink()
    (root / "new.md").write_text("new words\n")
    events: list[FileEvent] = []
    (report,) = index.update([root], on_event=events.append).folders
    settled = [e for e in events if e.action not in ("deleted", "embedding", "embedded")]
    paths = report.files + report.skipped + len(report.problems)
    assert [e.done for e in settled] == list(range(1, paths + 1))
    assert {e.total for e in settled} == {paths}
    assert [e.rel for e in events if e.action == "deleted"] == ["gone.md"]
    assert (report.indexed, report.unchanged, report.deleted) == (1, 2, 1)  # + .indexignore


def test_watch_indexes_again_when_a_file_changes_until_stopped(index: Index, folder: Path) -> None:
    reports: list[Any] = []
    stop = threading.Event()
    watcher = threading.Thread(
        target=index.watch,
        args=([folder],),
        kwargs={"interval": 0.05, "stop": stop, "on_report": reports.append},
    )
    watcher.start()
    try:
        deadline = time.monotonic() + 30
        while not reports:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        (folder / "d.md").write_text("delta dates and durians\n")
        while len(reports) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        stop.set()
        watcher.join(timeout=30)
    assert not watcher.is_alive()
    assert [r.total("indexed") for r in reports[:2]] == [3, 1]
    assert rels(index, "durians")[0] == "d.md"


def test_pending_work_counts_what_an_update_would_do(tmp_path: Path, hash_index: Index) -> None:
    root = write_tree(
        tmp_path / "work",
        {"a.py": "def a():\n    return 1\n", "b.md": "# B\n\ntext\n", "blob.txt": b"ab\x00cd"},
    )
    assert not hash_index.settings.store_path.exists()
    # No index yet: every listed file is work, the binary-content one too (only reading it tells).
    assert hash_index.pending_work([root]) == 3
    assert not hash_index.settings.store_path.exists()  # asking created nothing
    hash_index.update([root])
    assert hash_index.pending_work([root]) == 0
    (root / "b.md").write_text("# B\n\nmore text\n")
    (root / "c.txt").write_text("new\n")
    (root / "a.py").unlink()
    assert hash_index.pending_work([root]) == 3  # changed, new and gone
    hash_index.update([root])
    assert hash_index.pending_work([root]) == 0


@pytest.mark.parametrize("store_backend", ["sqlite"])  # clears the column by SQL
def test_pending_work_counts_path_vectors_not_made_yet(tmp_path: Path, hash_index: Index) -> None:
    # an index upgraded from schema 3 has no path vectors: the MCP server and `index --watch`
    # act on pending_work, so with nothing else changed they must still make them
    files = {"src/a.py": "def a():\n    return 1\n", "src/b.py": "B = 2\n", "c.md": "# C\n"}
    root = write_tree(tmp_path / "work", files)
    hash_index.update([root])
    with sqlite3.connect(hash_index.settings.store_path) as conn:
        conn.execute("UPDATE files SET path_vector = NULL")
    assert hash_index.pending_work([root]) == 3
    report = hash_index.update([root])
    assert (report.total("indexed"), report.chunks_embedded) == (0, 0)  # only the paths
    assert report.paths_embedded == report.as_json()["pathsEmbedded"] == 2  # not c.md
    assert hash_index.pending_work([root]) == 0
    store = hash_index._open()
    code = [ref.id for ref in store.file_refs().values() if ref.rel.endswith(".py")]
    assert sorted(store.path_vectors(list(store.file_refs()))) == sorted(code)


def test_code_files_get_a_path_vector_once_and_keep_it_across_edits(
    index: Index, embedder: CountingEmbedder, tmp_path: Path
) -> None:
    root = write_tree(
        tmp_path / "proj",
        {
            "net/client_session.py": "def open_session(url):\n    return url\n",
            "notes.md": "hi there\n",
        },
    )
    index.update([root])
    assert embedder.paths == ["net/client_session.py"]  # documents get no path term
    store = index._open()
    refs = {ref.rel: ref.id for ref in store.file_refs().values()}
    vectors = store.path_vectors(list(refs.values()))
    expected = HashEmbedder().embed(["net/client_session.py"])[0]
    assert np.allclose(vectors[refs["net/client_session.py"]], expected, rtol=0, atol=0.01)
    assert refs["notes.md"] not in vectors and store.pending_paths(10) == []  # a document
    (root / "net/client_session.py").write_text("def open_session(url, timeout):\n    pass\n")
    index.update([root])
    assert embedder.paths == ["net/client_session.py"]  # the edit kept the rel: not again
    store = index._open()
    (new_id,) = [r.id for r in store.file_refs().values() if r.rel == "net/client_session.py"]
    assert np.allclose(store.path_vectors([new_id])[new_id], expected, rtol=0, atol=0.01)


def test_documents_are_chunked_with_less_overlap_than_code(index: Index, tmp_path: Path) -> None:
    lines = "\n".join(f"line {n} of the text says something about item {n}" for n in range(400))
    root = write_tree(tmp_path / "proj", {"notes.md": lines, "main.py": lines})
    index.update([root])
    rows = all_chunks(index)
    by_file = {rel: [r for r in rows if r.rel == rel] for rel in ("notes.md", "main.py")}
    settings = index._indexer_settings()
    for rel, overlap in (("notes.md", 20), ("main.py", 35)):
        chunks = sorted(by_file[rel], key=lambda r: r.start_line)
        assert len(chunks) > 3
        shared = [a.end_line - b.start_line + 1 for a, b in itertools.pairwise(chunks)]
        # the hashed embedder's tokens are words: 10 a line, so the overlap repeats 2 or 3 lines
        assert max(shared) == overlap // 10, (rel, shared)
    assert settings.document_chunking.overlap_tokens == 20
    assert settings.chunking.overlap_tokens == 35


def test_the_large_file_knob_drops_the_overlap_of_large_code_files_only(
    index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipeline, "LARGE_FILE_CHARS", 10_000)  # bench/tune.py's knob (0: off)
    lines = "\n".join(f"line {n} of the text says something about item {n}" for n in range(400))
    small = "\n".join(lines.splitlines()[:150])  # ~7,500 characters
    root = write_tree(tmp_path / "proj", {"big.py": lines, "small.py": small, "notes.md": lines})
    index.update([root])
    rows = all_chunks(index)
    for rel, overlap_lines in (("big.py", 0), ("small.py", 3), ("notes.md", 2)):
        chunks = sorted((r for r in rows if r.rel == rel), key=lambda r: r.start_line)
        shared = [a.end_line - b.start_line + 1 for a, b in itertools.pairwise(chunks)]
        assert len(chunks) > 2 and max(shared) == overlap_lines, (rel, shared)


def test_documents_and_code_have_their_own_chunk_size(settings: Settings, tmp_path: Path) -> None:
    sizes = {"target_tokens": 120, "overlap_tokens": 0, "document_target_tokens": 60}
    index = Index(settings._replace(**sizes), embedder=CountingEmbedder())
    lines = "\n".join(f"line {n} of the text says something about item {n}" for n in range(400))
    root = write_tree(tmp_path / "proj", {"notes.md": lines, "main.py": lines})
    index.update([root])
    rows = all_chunks(index)
    # the hashed embedder's tokens are words: 10 a line
    for rel, lines_per_chunk in (("notes.md", 6), ("main.py", 12)):
        sizes = [r.end_line - r.start_line + 1 for r in rows if r.rel == rel]
        assert max(sizes) == lines_per_chunk, (rel, sizes)


class TokenisingEmbedder(RecordingEmbedder):
    """The recording embedder, keeping too every text the first pass tokenises to chunk it."""

    def __init__(self) -> None:
        super().__init__()
        self.tokenised: list[str] = []

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        self.tokenised.append(text)
        return super().token_spans(text)


def chunk_places(index: Index, top: str) -> dict[str, list[tuple[Any, ...]]]:
    """Each file's chunks (lines, page, text) in order, by rel, of the folder named ``top``."""
    places: dict[str, list[tuple[Any, ...]]] = {}
    for row in sorted(all_chunks(index), key=lambda row: row.id):
        if row.folder_name == top:
            places.setdefault(row.rel, []).append(
                (row.start_line, row.end_line, row.page, row.text)
            )
    return places


def copies_tree(root: Path) -> Path:
    """A code file, a Markdown file and a two-page PDF, each long enough for several chunks."""
    write_tree(
        root,
        {
            "pkg/x.py": "\n".join(long_file(80, seed="x", blank_every=0)) + "\n",
            "docs/guide.md": "\n".join(long_file(80, seed="g")) + "\n",
        },
    )
    write_pdf(root / "docs" / "paper.pdf", [" ".join(long_file(30, seed=f"p{n}")) for n in (1, 2)])
    return root


def test_a_copy_takes_the_chunks_stored_for_its_bytes_and_name(
    settings: Settings, tmp_path: Path
) -> None:
    """A file whose bytes and name a stored file has is not tokenised again: it gets that file's
    chunks, the same that chunking it would give, in the same run or a later one, and its FTS
    rows (SQLite; LanceDB chunks every file). A file of the same bytes under another name, and
    an edited copy, are chunked."""
    embedder = TokenisingEmbedder()
    index = Index(settings, embedder=embedder)
    first, second = copies_tree(tmp_path / "rev1"), copies_tree(tmp_path / "rev2")
    index.update([first, second])
    fresh = chunk_places(index, "rev1")
    assert len(fresh) == 3 and all(len(chunks) > 1 for chunks in fresh.values())
    assert chunk_places(index, "rev2") == fresh
    if settings.store_backend == "sqlite":  # rev2 came from the store
        assert len(embedder.tokenised) == len(fresh) + 1  # the PDF's two pages
    else:
        assert len(embedder.tokenised) == 2 * (len(fresh) + 1)

    embedder.tokenised.clear()
    third = copies_tree(tmp_path / "rev3")
    code = (third / "pkg" / "x.py").read_text()
    (third / "pkg" / "y.py").write_text(code)  # the same bytes, another name
    (third / "docs" / "guide.md").write_text("A new first line.\n" + code)
    later = index.update([third])
    assert later.chunks_embedded < later.total("chunks")
    copied = chunk_places(index, "rev3")
    assert copied["pkg/x.py"] == fresh["pkg/x.py"] == copied["pkg/y.py"]
    assert copied["docs/paper.pdf"] == fresh["docs/paper.pdf"]
    assert copied["docs/guide.md"] != fresh["docs/guide.md"]
    tokenised = {code, "A new first line.\n" + code}
    if settings.store_backend == "sqlite":
        assert set(embedder.tokenised) == tokenised and len(embedder.tokenised) == 2
        db = sqlite3.connect(settings.store_path)
        rows = db.execute(
            "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'w3x2'"
        ).fetchone()[0]
        texts = db.execute(
            "SELECT count(DISTINCT text_hash) FROM chunks WHERE text LIKE '%w3x2%'"
        ).fetchone()[0]
        db.close()
        assert rows == texts == 2  # one row per text: x.py's chunk, rev3 guide.md's chunk
    else:
        assert tokenised < set(embedder.tokenised)
    # every copy is found by the BM25 arm, over every folder or within one
    found = {}
    for folder in (None, "rev2", "rev3"):
        hits = index.search("w3x2", k=50, mode="bm25", folder=folder, all_copies=True)
        found[folder] = {(hit.folder, hit.rel) for hit in hits}
    code_files = {
        (rev, rel) for rev in ("rev1", "rev2", "rev3") for rel in ("pkg/x.py", "pkg/y.py")
    }
    assert found[None] >= code_files - {("rev1", "pkg/y.py"), ("rev2", "pkg/y.py")}
    assert {("rev2", "pkg/x.py")} <= found["rev2"] == {p for p in found[None] if p[0] == "rev2"}
    assert {("rev3", "pkg/y.py")} <= found["rev3"] == {p for p in found[None] if p[0] == "rev3"}
    index.close()


OFFSETS = "SELECT c.start_offset, c.end_offset FROM chunks c JOIN files x ON x.id = c.file_id"


@pytest.mark.parametrize("store_backend", ["sqlite"])  # LanceDB finds no file by its content
def test_a_copy_whose_stored_chunks_no_longer_slice_it_is_chunked_afresh(
    settings: Settings, tmp_path: Path
) -> None:
    """Stored chunks that do not lie where they say in the copy's text (as a newer extractor
    could make them) are not taken: the copy is chunked; ``--force`` chunks every copy."""
    embedder = TokenisingEmbedder()
    index = Index(settings, embedder=embedder)
    index.update([copies_tree(tmp_path / "rev1")])
    fresh = chunk_places(index, "rev1")
    db = sqlite3.connect(settings.store_path)
    offsets = db.execute(f"{OFFSETS} WHERE x.rel = 'pkg/x.py' ORDER BY c.id").fetchall()
    with db:  # the offsets of x.py's chunks, one character off
        db.execute(
            "UPDATE chunks SET start_offset = start_offset + 1 WHERE file_id ="
            " (SELECT id FROM files WHERE rel = 'pkg/x.py')"
        )
    embedder.tokenised.clear()
    index.update([copies_tree(tmp_path / "rev2")])
    assert embedder.tokenised == [(tmp_path / "rev2" / "pkg" / "x.py").read_text()]
    assert chunk_places(index, "rev2") == fresh
    copy = db.execute(f"{OFFSETS} WHERE x.rel = 'pkg/x.py' ORDER BY c.id").fetchall()
    db.close()
    assert copy[len(offsets) :] == offsets  # rev1's shifted rows, then rev2's as chunked

    embedder.tokenised.clear()
    index.update([tmp_path / "rev2"], force=True)
    assert len(embedder.tokenised) == len(fresh) + 1  # the PDF's two pages
    assert chunk_places(index, "rev2") == fresh
    index.close()


@pytest.mark.parametrize("store_backend", ["sqlite"])  # LanceDB finds no file by its content
def test_an_index_from_before_version_8_finds_files_by_content_once_upgraded(
    settings: Settings, tmp_path: Path
) -> None:
    """A version-7 file gains the index on file content when first opened for writing, and a
    copy indexed then takes its chunks from the store."""
    embedder = TokenisingEmbedder()
    index = Index(settings, embedder=embedder)
    index.update([copies_tree(tmp_path / "rev1")])
    index.close()
    db = sqlite3.connect(settings.store_path)
    with db:
        db.execute("DROP INDEX files_sha256")
        db.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
        db.execute("PRAGMA user_version = 7")
    embedder.tokenised.clear()
    index = Index(settings, embedder=embedder)
    index.update([copies_tree(tmp_path / "rev2")])
    index.close()
    assert embedder.tokenised == []
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    indexes = db.execute("SELECT sql FROM sqlite_master WHERE name = 'files_sha256'").fetchall()
    db.close()
    assert indexes == [("CREATE INDEX files_sha256 ON files(sha256)",)]


class BatchingEmbedder(HashEmbedder):
    """The hashed embedder, keeping the texts of each call that tokenises several at once."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    def token_spans_many(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        self.batches.append(list(texts))
        return super().token_spans_many(texts)


def test_the_first_pass_tokenises_files_together_in_bounded_calls(
    settings: Settings, tmp_path: Path
) -> None:
    """Files are tokenised TOKENISE_FILES at a time, fewer once their bytes reach
    TOKENISE_BYTES; each file once, blank ones not at all, and chunked as it is alone."""
    tree = {f"m{n:03}.py": "\n".join(long_file(40, seed=str(n))) + "\n" for n in range(70)}
    for n in range(5):  # over TOKENISE_BYTES together, each below maxFileSizeBytes
        tree[f"big{n}.txt"] = f"word{n} " * (pipeline.TOKENISE_BYTES // 28)
    tree["blank.md"] = "\n  \n"
    embedder = BatchingEmbedder()
    index = Index(settings, embedder=embedder)
    index.update([write_tree(tmp_path / "tree", tree)])
    batches = embedder.batches
    assert sorted(text for batch in batches for text in batch) == sorted(
        text for rel, text in tree.items() if rel != "blank.md"
    )
    assert len(batches) >= 3 and max(map(len, batches)) <= pipeline.TOKENISE_FILES
    assert all(sum(map(len, batch[:-1])) < pipeline.TOKENISE_BYTES for batch in batches)
    rows = sorted(all_chunks(index), key=lambda row: row.id)
    for rel in ("m000.py", "m069.py"):
        alone = chunk_text(tree[rel], HashEmbedder(), pipeline.IndexerSettings().chunking)
        assert [chunk.text for chunk in alone] == [row.text for row in rows if row.rel == rel]
    index.close()
