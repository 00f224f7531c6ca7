"""The folder resolver: paths, names, ambiguity and unknown targets; Index.folders()."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from semsearch.config import Settings, add_roots, load_settings
from semsearch.errors import NoMatchingFilesError, PathRefusedError, UsageError
from semsearch.files.folders import (
    FolderInfo,
    configured_folders,
    holding_folder,
    is_folder_name,
    resolve_folder,
    select_folders,
)
from semsearch.index import Index
from semsearch.model.embedder import HashEmbedder
from tests.conftest import write_tree


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two folders named docs, one named notes, a symlink to notes; HOME is tmp_path."""
    for folder in ("a/docs", "b/docs", "notes", "notes/sub"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "notes")
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def known(base: Path) -> list[FolderInfo]:
    """The configured folders a, b (both docs) and notes, and one folder only in the index."""
    roots = [base / "a/docs", base / "b/docs", base / "notes"]
    return [*configured_folders(roots), FolderInfo("old", base / "old", False, 3, 9)]


@pytest.mark.parametrize(
    ("target", "cwd", "expected"),
    [
        ("notes", "", "notes"),
        ("old", "", "old"),
        ("{base}/notes", "", "notes"),
        ("{base}/notes/", "", "notes"),
        ("{base}/a/docs", "", "a/docs"),
        ("{base}/notes/sub/..", "", "notes"),
        ("a/docs", ".", "a/docs"),
        ("b/docs/", ".", "b/docs"),
        ("./notes", ".", "notes"),
        ("docs/", "a", "a/docs"),
        (".", "notes", "notes"),
        ("..", "notes/sub", "notes"),
        ("{base}/link", "", "notes"),
        ("link/", ".", "notes"),
        ("~/notes", "", "notes"),
    ],
)
def test_a_path_or_a_name_resolves_to_one_folder(
    tree: Path, target: str, cwd: str, expected: str
) -> None:
    folder = resolve_folder(target.format(base=tree), known(tree), tree / cwd)
    assert folder == next(f for f in known(tree) if f.path == tree / expected)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            "docs",
            "The folder name 'docs' is ambiguous: 2 folders have it ({base}/a/docs, {base}/b/docs)."
            " Pass the folder's path instead.",
        ),
        (
            "nope",
            "No folder named 'nope'. Configured folders: docs, docs, notes. Indexed folders: old.",
        ),
        ("Notes", "No folder named 'Notes'."),
        ("sub", "No folder named 'sub'."),
        (
            "{base}/elsewhere",
            "No folder at {base}/elsewhere. Configured folders: docs, docs, notes.",
        ),
        ("{base}/notes/sub", "No folder at {base}/notes/sub."),
        ("", "The folder is empty"),
    ],
)
def test_ambiguous_and_unknown_targets_are_usage_errors(
    tree: Path, target: str, message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        resolve_folder(target.format(base=tree), known(tree), tree)
    assert message.format(base=tree) in str(caught.value)


def test_unknown_with_nothing_configured_says_how_to_add(tree: Path) -> None:
    with pytest.raises(UsageError, match="No folders are configured: add one with `semsearch add"):
        resolve_folder("docs", [], tree)


@pytest.mark.parametrize(
    ("target", "is_name"),
    [("docs", True), ("my.notes", True), ("docs/", False), ("a/b", False), (".", False),
     ("..", False), ("~", False), ("~/x", False), ("/", False)],
)  # fmt: skip
def test_what_counts_as_a_name(target: str, is_name: bool) -> None:
    assert is_folder_name(target) is is_name


def test_select_folders_is_every_folder_or_the_named_one(tree: Path) -> None:
    roots = [tree / "a/docs", tree / "notes"]
    assert select_folders(roots, None) == roots
    assert select_folders(roots, "") == roots
    assert select_folders(roots, "notes") == [tree / "notes"]
    with pytest.raises(UsageError, match="No folders configured"):
        select_folders([], None)
    with pytest.raises(UsageError, match="ambiguous"):
        select_folders([tree / "a/docs", tree / "b/docs"], "docs")


@pytest.mark.parametrize(
    ("target", "expected"),
    [("notes", "notes"), ("{base}/notes", "notes"), ("{base}/notes/sub/x.md", "notes/sub"),
     ("{base}/link/sub", "notes/sub"), ("{base}/a/docs/deep/er", "a/docs")],
)  # fmt: skip
def test_holding_folder_is_the_named_folder_or_the_innermost_holding_one(
    tree: Path, target: str, expected: str
) -> None:
    roots = [tree / "a/docs", tree / "notes", tree / "notes/sub"]
    assert holding_folder(target.format(base=tree), roots) == tree / expected


@pytest.mark.parametrize("target", ["{base}", "{base}/b/docs", "/", "shop2", "sub", ""])
def test_holding_folder_refuses_anything_outside(tree: Path, target: str) -> None:
    with pytest.raises(PathRefusedError, match=r"^Refused: .* `semsearch add"):
        holding_folder(target.format(base=tree), [tree / "a/docs", tree / "notes"])


def test_a_path_holding_a_nul_is_a_usage_error(tree: Path, settings: Settings) -> None:
    """Found by fuzzing: the MCP index tool given root "<folder>/retry.py\\x00" answered
    "Internal error ... ValueError: embedded null byte"."""
    target = f"{tree}/notes/retry.py\x00"
    message = f"No folder at '{tree}/notes/retry.py\\x00': a path cannot hold a NUL character."
    index = Index(settings, embedder=HashEmbedder())
    calls = [
        lambda: holding_folder(target, [tree / "notes"]),
        lambda: resolve_folder(target, known(tree), tree),
        lambda: index.update([target]),
        lambda: index.plan([target]),
    ]
    try:
        for call in calls:
            with pytest.raises(UsageError) as caught:
                call()
            assert str(caught.value) == message
    finally:
        index.close()


def test_holding_folder_refuses_an_ambiguous_name(tree: Path) -> None:
    with pytest.raises(UsageError, match=f"{tree}/a/docs, {tree}/b/docs"):
        holding_folder("docs", [tree / "a/docs", tree / "b/docs"])


@pytest.fixture
def docs_index(tree: Path, settings: Settings) -> Index:
    """The two docs folders configured and indexed, notes indexed only, `gone` configured."""
    for rel, text in (("a/docs/x.md", "alpha otters\n"), ("b/docs/y.md", "beta otters\n")):
        write_tree(tree, {rel: text})
    write_tree(tree, {"notes/z.md": "gamma otters\n", "gone/.keep": ""})
    add_roots(settings.config_path, ["a/docs", "b/docs", "gone"], tree)
    index = Index(load_settings(os.environ), embedder=HashEmbedder())
    index.update([tree / "a/docs", tree / "b/docs", tree / "notes"])
    return index


def test_index_folders_merges_configured_and_indexed_folders(tree: Path, docs_index: Index) -> None:
    folders = docs_index.folders()
    assert [(f.name, f.path, f.is_configured, f.files, f.chunks) for f in folders] == [
        ("docs", tree / "a/docs", True, 1, 1),
        ("docs", tree / "b/docs", True, 1, 1),
        ("gone", tree / "gone", True, 0, 0),
        ("notes", tree / "notes", False, 1, 1),
    ]
    assert all(f.last_indexed for f in folders if f.files)
    assert docs_index.purge(tree / "notes") == 1
    assert [f.name for f in docs_index.folders()] == ["docs", "docs", "gone"]


def test_index_search_resolves_the_folder_and_refuses_an_ambiguous_name(
    tree: Path, docs_index: Index
) -> None:
    with pytest.raises(UsageError, match=f"ambiguous.*{tree}/a/docs, {tree}/b/docs"):
        docs_index.search("otters", folder="docs")
    assert [h.rel for h in docs_index.search("otters", folder=tree / "b/docs")] == ["y.md"]
    assert [h.rel for h in docs_index.search("otters", folder="notes")] == ["z.md"]
    with pytest.raises(NoMatchingFilesError, match=r"Folder .*/gone has no indexed files: run"):
        docs_index.search("otters", folder="gone")  # configured, nothing indexed yet
    docs_index.close()
