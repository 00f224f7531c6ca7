"""No file indexed twice: nested folders refused or taken over, moved and copied indexes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from semsearch.config import Settings, add_roots, load_settings
from semsearch.errors import UsageError
from semsearch.index import Index
from semsearch.model.embedder import FloatMatrix, HashEmbedder
from tests.conftest import BACKENDS, write_tree

FILES = {
    "docs/guide.md": "Otters float on their backs while they sleep.\n",
    "docs/faq.md": "Do otters hold hands? Sea otters do, to keep together.\n",
    "src/main.py": "def count_otters(river):\n    return len(river)\n",
}


class CountingEmbedder(HashEmbedder):
    """The hashed embedder, counting the chunk texts it embeds (queries not included) and,
    apart, the rel paths of code files (the path vectors; no chunk text here is one word)."""

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0
        self.paths = 0

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        paths = sum(len(text.split()) == 1 for text in texts)
        self.texts += len(texts) - paths
        self.paths += paths
        return super().embed(texts)

    def embed_query(self, text: str) -> FloatMatrix:
        return super().embed([text])[0]


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "proj", FILES)


def fresh(index: Index) -> Index:
    """A new Index over the same store, with the settings as the config now says."""
    embedder = index.embedder
    index.close()
    return Index(load_settings(os.environ, str(index.settings.index_path)), embedder=embedder)


def hits(index: Index, query: str = "otters") -> list[str]:
    """The files of every hit, each once (duplicates would come back twice)."""
    return sorted(h.path for h in index.search(query, k=20))


ALL = sorted(FILES)


def test_adding_a_folder_inside_a_configured_one_is_refused_naming_it(
    proj: Path, settings: Settings
) -> None:
    add_roots(settings.config_path, [str(proj)], proj)
    change = add_roots(settings.config_path, ["docs", "src/"], proj)
    assert change.covered == ((proj / "docs", proj), (proj / "src", proj))
    assert change.changed == () and change.roots == (proj,)
    assert load_settings(os.environ).roots == (proj,)


def test_adding_a_folder_inside_an_indexed_one_is_refused(proj: Path, settings: Settings) -> None:
    index = Index(settings, embedder=HashEmbedder())
    index.update([proj])  # indexed, never configured
    change = index.add([str(proj / "docs")])
    assert change.covered == ((proj / "docs", proj),) and change.roots == ()
    index.close()


@pytest.mark.parametrize("store_backend", BACKENDS)
def test_an_outer_folder_takes_over_inner_ones_without_re_embedding(
    proj: Path, settings: Settings
) -> None:
    write_tree(proj, {"README.md": "A project about river otters.\n"})
    embedder = CountingEmbedder()
    index = Index(settings, embedder=embedder)
    index.add([str(proj / "docs")])
    index.update()
    index.update([proj / "src"])  # indexed only
    assert sorted(f.name for f in index.folders()) == ["docs", "src"]
    embedded, paths = embedder.texts, embedder.paths
    change = index.add([str(proj)])
    assert change.taken_over == ((proj / "docs", proj),)
    assert change.changed == (proj,) and load_settings(os.environ).roots == (proj,)
    folders = index.folders()
    assert [(f.path, f.is_configured, f.files) for f in folders] == [(proj, True, 3)]
    assert hits(index) == [str(proj / rel) for rel in ALL]
    index = fresh(index)
    report = index.update()
    assert (report.total("indexed"), report.total("unchanged"), report.total("chunks")) == (1, 3, 1)
    assert embedder.texts == embedded + 1  # README.md only
    assert embedder.paths == paths + 1  # main.py is src/main.py now: a new path vector
    assert hits(index) == [str(proj / rel) for rel in sorted([*FILES, "README.md"])]
    assert [f.path for f in index.folders()] == [proj]
    index.close()


def test_index_of_a_path_inside_a_configured_folder_updates_that_folder(
    proj: Path, settings: Settings
) -> None:
    add_roots(settings.config_path, [str(proj)], proj)
    index = Index(load_settings(os.environ), embedder=HashEmbedder())
    index.update()
    report = index.update([proj / "docs"])  # used to index docs again, as a folder of its own
    assert [(f.path, f.unchanged) for f in report.folders] == [(str(proj), 3)]
    report = index.update([proj / "docs" / "guide.md", proj / "src"])
    assert [(f.path, f.unchanged) for f in report.folders] == [(str(proj), 3)]
    assert [f.path for f in index.folders()] == [proj]
    assert hits(index) == [str(proj / rel) for rel in ALL]
    index.close()


def test_index_of_a_folder_holding_a_configured_one_is_refused(
    proj: Path, hash_index: Index
) -> None:
    hash_index.add([str(proj / "docs")])
    with pytest.raises(UsageError, match=f"{proj} holds the configured folder {proj}/docs"):
        hash_index.update([proj])


def test_overlapping_configured_folders_are_refused_until_merged_by_add(
    proj: Path, settings: Settings
) -> None:
    embedder = CountingEmbedder()
    index = Index(settings, embedder=embedder)
    index.add([str(proj / "docs")])
    index.update()
    config = {"defaultRoots": [str(proj / "docs"), str(proj)]}  # written before the rule
    settings.config_path.write_text(json.dumps(config), encoding="utf-8")
    index = fresh(index)
    with pytest.raises(UsageError, match=f"overlap: {proj}/docs is inside {proj}. Run `semsearch"):
        index.update()
    change = index.add([str(proj)])
    assert (change.unchanged, change.taken_over) == ((proj,), ((proj / "docs", proj),))
    embedded = embedder.texts
    report = fresh(index).update()
    assert (report.total("unchanged"), report.total("indexed")) == (2, 1)
    assert embedder.texts == embedded + 1  # src/main.py only


def test_move_of_a_renamed_folder_keeps_its_index(proj: Path, settings: Settings) -> None:
    embedder = CountingEmbedder()
    index = Index(settings, embedder=embedder)
    index.add([str(proj)])
    index.update()
    mtimes = {rel: (proj / rel).stat().st_mtime_ns for rel in FILES}
    moved = proj.with_name("renamed")
    subprocess.run(["mv", str(proj), str(moved)], check=True)
    assert {rel: (moved / rel).stat().st_mtime_ns for rel in FILES} == mtimes  # mv keeps them
    report = index.move("proj", moved)  # by name, though proj is gone from disk
    assert (report.old, report.new, report.files, report.is_configured) == (proj, moved, 3, True)
    assert load_settings(os.environ).roots == (moved,)
    embedded, paths = embedder.texts, embedder.paths
    index = fresh(index)
    run = index.update()
    assert (run.total("unchanged"), run.total("indexed"), run.total("chunks")) == (3, 0, 0)
    assert (embedder.texts, embedder.paths) == (embedded, paths)  # the rel paths stay
    assert hits(index) == [str(moved / rel) for rel in ALL]
    index.close()


def test_move_of_a_copied_tree_only_touches_files_by_sha256(proj: Path, hash_index: Index) -> None:
    hash_index.update([proj])
    copy = proj.with_name("copy")
    subprocess.run(["cp", "-r", str(proj), str(copy)], check=True)
    changed = [
        rel for rel in FILES if (copy / rel).stat().st_mtime_ns != (proj / rel).stat().st_mtime_ns
    ]
    assert changed  # cp -r gives new mtimes
    shutil.rmtree(proj)
    assert hash_index.move(str(proj), copy).files == 3
    events: list[str] = []
    run = hash_index.update([copy], on_event=lambda e: events.append(e.action))
    assert (run.total("unchanged"), run.total("chunks")) == (3, 0)
    assert events.count("touched") == len(changed)


def test_move_on_a_copied_index_file_whose_config_does_not_list_old(
    tmp_path: Path, settings: Settings
) -> None:
    checkout = write_tree(tmp_path / "ci" / "checkout", FILES)
    ci = Index(load_settings(os.environ, str(tmp_path / "ci.db")), embedder=HashEmbedder())
    ci.update([checkout])
    ci.close()
    shutil.copy(tmp_path / "ci.db", tmp_path / "copy.db")
    proj = tmp_path / "src" / "proj"
    shutil.copytree(checkout, proj)
    shutil.rmtree(tmp_path / "ci" / "checkout")
    embedder = CountingEmbedder()
    index = Index(load_settings(os.environ, str(tmp_path / "copy.db")), embedder=embedder)
    report = index.move(str(checkout), proj)
    assert (report.files, report.is_configured, report.was_rewritten) == (3, False, False)
    assert not settings.config_path.exists()  # the config is left alone
    assert [(f.path, f.is_configured) for f in index.folders()] == [(proj, False)]
    run = index.update([proj])
    assert (run.total("unchanged"), run.total("chunks"), embedder.texts) == (3, 0, 0)
    assert hits(index) == [str(proj / rel) for rel in ALL]
    index.close()


def test_add_suggests_the_move_when_a_missing_folder_moved_here(
    proj: Path, hash_index: Index, tmp_path: Path
) -> None:
    hash_index.add([str(proj)])
    hash_index.update()
    moved = tmp_path / "elsewhere" / "proj"
    moved.parent.mkdir()
    proj.rename(moved)
    unrelated = write_tree(tmp_path / "other", {"a.md": "something else\n"})
    change = hash_index.add([str(moved), str(unrelated)])
    assert change.moved == ((moved, proj),)
    assert change.changed == (unrelated,) and change.roots == (proj, unrelated)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("proj", "{tmp}/nowhere", "no such directory"),
        ("proj", "{tmp}/proj/docs/guide.md", "no such directory"),
        ("proj", "{tmp}/other/inner", "is inside {tmp}/other, which already covers it"),
        ("proj", "{tmp}", "{tmp} holds {tmp}/proj. To index"),
        ("proj", "{tmp}/proj/docs", "cannot move into itself"),
        ("nope", "{tmp}/other", "No folder named 'nope'"),
        ("proj", "{tmp}/proj", "nothing to move"),
    ],
)
def test_move_refusals(
    proj: Path, hash_index: Index, tmp_path: Path, old: str, new: str, message: str
) -> None:
    write_tree(tmp_path / "other", {"inner/a.md": "a\n"})
    hash_index.add([str(proj), str(tmp_path / "other")])
    with pytest.raises(UsageError, match=message.format(tmp=tmp_path).replace("(", r"\(")):
        hash_index.move(old, new.format(tmp=tmp_path))
    assert load_settings(os.environ).roots == (proj, tmp_path / "other")
