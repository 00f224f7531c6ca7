"""Tests for files/listing.py: discovery in git and walk mode, with the ignore rules on top."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from semsearch.cli.commands import main
from semsearch.files.ignore import IgnoreSettings
from semsearch.files.listing import FileEntry, Listing, Skip, list_files
from tests.conftest import run_as_user

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
is_root = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(autouse=True)
def _isolated_git(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the developer's git config and repository environment out of the tests."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CEILING_DIRECTORIES"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An empty folder of the test's own (conftest puts a HOME folder in tmp_path)."""
    path = tmp_path / "folder"
    path.mkdir()
    return path


def git(cwd: Path, *args: str) -> None:
    """Run git in ``cwd`` the same way on any machine (identity and branch given here)."""
    identity = ["-c", "user.name=Test", "-c", "user.email=test@example.com"]
    options = [*identity, "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", *options, *args], cwd=cwd, check=True, capture_output=True)


def make_tree(root: Path, files: dict[str, str]) -> Path:
    """Create ``files`` (rel -> content) under ``root``."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    return root


def make_repo(root: Path, committed: dict[str, str], untracked: dict[str, str]) -> Path:
    """A git repository with ``committed`` files in one commit plus ``untracked`` files."""
    make_tree(root, committed)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return make_tree(root, untracked)


def rels(listing: Listing) -> list[str]:
    return [entry.rel for entry in listing.files]


def test_walk_mode_applies_default_patterns(folder: Path) -> None:
    make_tree(
        folder,
        {
            "README.md": "r",
            "src/app.py": "a",
            "src/build/gen.py": "g",
            "node_modules/pkg/index.js": "n",
            "vendor/lib/x.go": "v",
            "pkg/__pycache__/m.pyc.txt": "c",
            "lib.egg-info/PKG-INFO": "p",
            ".DS_Store": "d",
            ".github/workflows/ci.yml": "ci",
        },
    )
    listing = list_files(folder)
    assert listing.mode == "walk"
    assert rels(listing) == [".github/workflows/ci.yml", "README.md", "src/app.py"]
    assert Skip("node_modules/", "ignored by default pattern") in listing.skipped
    assert Skip(".DS_Store", "ignored by default pattern") in listing.skipped
    assert (listing.errors, listing.warnings) == ((), ())


def test_walk_mode_file_entries(folder: Path) -> None:
    make_tree(folder, {"a/b.txt": "hello"})
    (entry,) = list_files(folder / "a" / "..").files
    stat = (folder / "a" / "b.txt").stat()
    location = str(folder.resolve() / "a" / "b.txt")
    assert entry == FileEntry("a/b.txt", location, 5, stat.st_mtime_ns)
    assert entry.path == folder.resolve() / "a" / "b.txt"


def test_git_dir_never_listed_even_without_defaults(folder: Path) -> None:
    make_tree(folder, {".git/HEAD.txt": "x", "keep.txt": "k", "build/out.txt": "b"})
    listing = list_files(folder, IgnoreSettings(default_ignore_patterns=()))
    assert (listing.mode, rels(listing), listing.skipped) == (
        "walk",
        ["build/out.txt", "keep.txt"],
        (),
    )
    if shutil.which("git"):  # a .git that git rejects is worth a warning
        (warning,) = listing.warnings
        assert "not a git repository" in warning


@needs_git
def test_git_mode_honours_gitignore_rules(folder: Path) -> None:
    committed = {
        ".gitignore": "*.log\n!keep.log\nsecret/\n",
        "src/.gitignore": "local.txt\n",
        "build/x.sh": "echo build",
        "vendor/lib/x.go": "package lib",
        "src/main.py": "main",
    }
    untracked = {
        "new.md": "untracked, not ignored",
        "node_modules/pkg/index.js": "git decides, not the walk defaults",
        "debug.log": "ignored",
        "keep.log": "negated",
        "secret/s.md": "ignored dir",
        "src/local.txt": "nested gitignore",
        "src/other.txt": "kept",
    }
    listing = list_files(make_repo(folder, committed, untracked))
    assert listing.mode == "git"
    assert rels(listing) == [
        ".gitignore",
        "build/x.sh",
        "keep.log",
        "new.md",
        "node_modules/pkg/index.js",
        "src/.gitignore",
        "src/main.py",
        "src/other.txt",
        "vendor/lib/x.go",
    ]
    assert (listing.skipped, listing.errors, listing.warnings) == ((), (), ())


@needs_git
def test_git_mode_lists_subfolder_relative_to_it(folder: Path) -> None:
    make_repo(folder, {"docs/a.md": "a", "docs/sub/b.md": "b", "top.md": "t"}, {})
    listing = list_files(folder / "docs")
    assert (listing.mode, rels(listing)) == ("git", ["a.md", "sub/b.md"])
    assert listing.files[0].path == folder.resolve() / "docs" / "a.md"


@needs_git
def test_git_mode_drops_deleted_tracked_files(folder: Path) -> None:
    make_repo(folder, {"gone.md": "g", "here.md": "h"}, {})
    (folder / "gone.md").unlink()
    listing = list_files(folder)
    assert (rels(listing), listing.skipped, listing.errors) == (["here.md"], (), ())


@needs_git
def test_git_mode_lists_nested_repository(folder: Path) -> None:
    make_repo(folder, {"outer.md": "o"}, {})
    make_repo(folder / "nested", {"inner.md": "i", ".gitignore": "*.tmp\n"}, {"x.tmp": "t"})
    listing = list_files(folder)
    assert rels(listing) == ["nested/.gitignore", "nested/inner.md", "outer.md"]


@pytest.mark.parametrize("use_git", [False, pytest.param(True, marks=needs_git)])
def test_indexignore_applies_on_top(folder: Path, use_git: bool) -> None:
    files = {
        ".indexignore": "drafts/\n*.tmp\n!keep.tmp\n",
        "notes.md": "n",
        "drafts/d.md": "d",
        "a.tmp": "t",
        "keep.tmp": "k",
    }
    make_repo(folder, files, {}) if use_git else make_tree(folder, files)
    listing = list_files(folder)
    assert listing.mode == ("git" if use_git else "walk")
    assert rels(listing) == [".indexignore", "keep.tmp", "notes.md"]
    drafts = "drafts/d.md" if use_git else "drafts/"
    reason = "ignored by .indexignore"
    assert listing.skipped == (Skip("a.tmp", reason), Skip(drafts, reason))


@pytest.mark.parametrize("use_git", [False, pytest.param(True, marks=needs_git)])
def test_global_ignore_file_layers_under_root_file(folder: Path, use_git: bool) -> None:
    global_file = folder / "config" / ".indexignore"
    make_tree(folder, {"config/.indexignore": "*.secret\n*.md\n"})
    root = folder / "corpus"
    files = {
        ".indexignore": "!keep.md\n",
        "a.secret": "s",
        "b.md": "b",
        "keep.md": "k",
        "c.txt": "",
    }
    make_repo(root, files, {}) if use_git else make_tree(root, files)
    listing = list_files(root, IgnoreSettings(global_ignore_file=global_file))
    assert rels(listing) == [".indexignore", "c.txt", "keep.md"]
    reason = f"ignored by {global_file}"
    assert listing.skipped == (Skip("a.secret", reason), Skip("b.md", reason))


def test_indexignore_can_reinclude_a_default_pattern(folder: Path) -> None:
    make_tree(folder, {".indexignore": "!build/\n", "build/x.sh": "b", "dist/y.js": "d"})
    assert rels(list_files(folder)) == [".indexignore", "build/x.sh"]


@pytest.mark.skipif(os.name != "posix", reason="needs byte file names")
@pytest.mark.parametrize("use_git", [False, pytest.param(True, marks=needs_git)])
def test_any_file_name_is_listed(folder: Path, use_git: bool) -> None:
    names = ["ok.md", "new\nline.md", "tab\there.md", "back\\slash.md", 'quote".md']
    files = {name: "x" for name in names}
    make_repo(folder, files, {}) if use_git else make_tree(folder, files)
    (Path(os.fsdecode(os.fsencode(folder) + b"/bad\xff.md"))).write_text("x")
    (Path(os.fsdecode(os.fsencode(folder) + b"/caf\xe9/x\x01.md"))).parent.mkdir()
    (Path(os.fsdecode(os.fsencode(folder) + b"/caf\xe9/x\x01.md"))).write_text("x")
    listing = list_files(folder)
    expected = ["bad\udcff.md", "caf\udce9/x\x01.md", *names]
    assert rels(listing) == sorted(expected)
    assert listing.skipped == ()
    for entry in listing.files:  # each entry names its file, byte for byte
        assert entry.path.read_text() == "x"
        assert os.fsencode(entry.path) == os.fsencode(folder) + b"/" + os.fsencode(entry.rel)


def test_missing_global_ignore_file_is_fine(folder: Path) -> None:
    make_tree(folder, {"a.md": "a"})
    listing = list_files(folder, IgnoreSettings(global_ignore_file=folder / "nope"))
    assert (rels(listing), listing.warnings) == (["a.md"], ())


@pytest.mark.parametrize("use_git", [False, pytest.param(True, marks=needs_git)])
def test_binary_extension_and_size_caps(folder: Path, use_git: bool) -> None:
    files = {
        "logo.png": "x",
        "LOGO.PNG": "x",
        "archive.tar.gz": "x",
        "small.txt": "12345",
        "big.txt": "x" * 20,
        "report.pdf": "x" * 20,
        "letter.DOCX": "x" * 20,
        "huge.pdf": "x" * 200,
    }
    make_repo(folder, files, {}) if use_git else make_tree(folder, files)
    settings = IgnoreSettings(max_file_size=10, max_document_size=100)
    listing = list_files(folder, settings)
    assert rels(listing) == ["letter.DOCX", "report.pdf", "small.txt"]
    assert listing.skipped == (
        Skip("LOGO.PNG", "binary extension"),
        Skip("archive.tar.gz", "binary extension"),
        Skip("big.txt", "too large (20 bytes > 10)"),
        Skip("huge.pdf", "too large (200 bytes > 100)"),
        Skip("logo.png", "binary extension"),
    )


def test_size_reason_uses_thousands_separators(folder: Path) -> None:
    make_tree(folder, {"big.txt": "x" * 612_000})
    assert list_files(folder).skipped == (Skip("big.txt", "too large (612,000 bytes > 500,000)"),)


@pytest.mark.parametrize("use_git", [False, pytest.param(True, marks=needs_git)])
def test_symlinks_are_never_listed(folder: Path, use_git: bool) -> None:
    outside = make_tree(folder / "outside", {"secret.md": "s"})
    root = folder / "root"
    make_repo(root, {"real.md": "r"}, {}) if use_git else make_tree(root, {"real.md": "r"})
    (root / "link.md").symlink_to(root / "real.md")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    listing = list_files(root)
    assert rels(listing) == ["real.md"]
    assert listing.skipped == (Skip("link.md", "symlink"), Skip("linkdir", "symlink"))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("use_git", [False, pytest.param(True, marks=needs_git)])
def test_fifo_is_never_listed(folder: Path, use_git: bool) -> None:
    make_repo(folder, {"a.md": "a"}, {}) if use_git else make_tree(folder, {"a.md": "a"})
    os.mkfifo(folder / "pipe.txt")
    listing = list_files(folder)
    assert rels(listing) == ["a.md"]
    if not use_git:  # git does not list special files at all
        assert listing.skipped == (Skip("pipe.txt", "not a regular file"),)


LIST_AS_JSON = """
import json, sys
from pathlib import Path
from semsearch.files.listing import list_files
listing = list_files(Path(sys.argv[1]))
print(json.dumps({
    "mode": listing.mode,
    "files": [entry.rel for entry in listing.files],
    "skipped": [[skip.rel, skip.reason] for skip in listing.skipped],
    "errors": [[skip.rel, skip.reason] for skip in listing.errors],
    "warnings": list(listing.warnings),
    "unreadable": list(listing.unreadable),
}))
"""


def listing_as_user(root: Path) -> dict[str, Any]:
    """:func:`list_files` of ``root`` as an ordinary user sees it (see ``conftest.as_user``)."""
    result = run_as_user([sys.executable, "-c", LIST_AS_JSON, str(root)])
    assert result.returncode == 0, result.stderr
    listed: dict[str, Any] = json.loads(result.stdout)
    return listed


def unreadable_warning(path: Path) -> str:
    return (
        f"{path}: cannot read this folder (permission denied); skipped "
        "(list it in .indexignore to skip it quietly)"
    )


# 000: nothing; 0o500 minus read: it cannot be listed; read without search: what it lists
# cannot be looked at (stat fails), so it is unreadable too.
LOCKED_MODES = [0o000, 0o100, 0o400]


@pytest.mark.parametrize("mode", LOCKED_MODES, ids=oct)
@pytest.mark.parametrize("use_git", [False, pytest.param(True, marks=needs_git)])
def test_an_unreadable_folder_is_skipped_with_one_warning(
    folder: Path, use_git: bool, mode: int, set_mode: Callable[[Path, int], Path]
) -> None:
    """Issue 34.1: a mode-000 folder ended the walk in a PermissionError (the pyvenv.cfg
    check); in git mode its tracked files failed one by one and its untracked ones went unsaid."""
    tree = {"ok.md": "o", "locked/x.md": "x", "locked/deep/y.md": "y", "z/last.md": "l"}
    if use_git:
        make_repo(folder, tree, {"locked/untracked.md": "u"})
    else:
        make_tree(folder, tree)
    set_mode(folder / "locked", mode)
    listed = listing_as_user(folder)
    assert listed == {
        "mode": "git" if use_git else "walk",
        "files": ["ok.md", "z/last.md"],
        "skipped": [["locked/", "permission denied"]],
        "errors": [],
        "warnings": [unreadable_warning(folder / "locked")],
        "unreadable": ["locked/"],
    }


@needs_git
def test_a_folder_with_only_untracked_files_that_git_cannot_open_is_named(
    folder: Path, set_mode: Callable[[Path, int], Path]
) -> None:
    """git lists the rest and only warns on its stderr; the listing of a subfolder of the work
    tree names the folder relative to that subfolder."""
    make_repo(folder, {"sub/a.md": "a"}, {"sub/new/n.md": "n", "sub/new/more/m.md": "m"})
    set_mode(folder / "sub" / "new", 0)
    for root, rel in ((folder, "sub/new/"), (folder / "sub", "new/")):
        listed = listing_as_user(root)
        assert listed["files"] == [rel.removesuffix("new/") + "a.md"]
        assert (listed["skipped"], listed["unreadable"]) == ([[rel, "permission denied"]], [rel])
        assert listed["warnings"] == [unreadable_warning(folder / "sub" / "new")]


@needs_git
def test_a_tracked_file_in_an_ignored_unreadable_folder_names_the_folder(
    folder: Path, set_mode: Callable[[Path, int], Path]
) -> None:
    """git does not open an ignored folder, so it says nothing of it; its committed file cannot
    be looked at, and the folder that blocks it is named once."""
    make_repo(folder, {"a.md": "a", ".gitignore": "build/\n"}, {})
    make_tree(folder, {"build/out/one.md": "1", "build/out/two.md": "2"})
    git(folder, "add", "-f", "build")
    git(folder, "commit", "-q", "-m", "build")
    set_mode(folder / "build" / "out", 0)
    listed = listing_as_user(folder)
    assert listed["files"] == [".gitignore", "a.md"]
    assert listed["skipped"] == [["build/out/", "permission denied"]]
    assert listed["warnings"] == [unreadable_warning(folder / "build" / "out")]


@pytest.mark.parametrize("use_git", [False, pytest.param(True, marks=needs_git)])
def test_an_unreadable_folder_in_indexignore_is_left_out_quietly(
    folder: Path, use_git: bool, set_mode: Callable[[Path, int], Path]
) -> None:
    tree = {"ok.md": "o", "locked/x.md": "x", ".indexignore": "locked/\n"}
    make_repo(folder, tree, {}) if use_git else make_tree(folder, tree)
    set_mode(folder / "locked", 0)
    listed = listing_as_user(folder)
    assert listed["files"] == [".indexignore", "ok.md"]
    assert (listed["warnings"], listed["unreadable"], listed["errors"]) == ([], [], [])


@pytest.mark.parametrize("use_git", [False, pytest.param(True, marks=needs_git)])
def test_an_unreadable_file_is_listed_for_the_reader_to_report(
    folder: Path, use_git: bool, set_mode: Callable[[Path, int], Path]
) -> None:
    """Listing looks at a file's name and stat, which need no read permission on it."""
    tree = {"ok.md": "o", "secret-ish.md": "s"}
    make_repo(folder, tree, {}) if use_git else make_tree(folder, tree)
    set_mode(folder / "secret-ish.md", 0)
    listed = listing_as_user(folder)
    assert listed["files"] == ["ok.md", "secret-ish.md"]
    assert (listed["warnings"], listed["errors"]) == ([], [])


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda root: root / "missing", "folder not found"),
        (lambda root: make_tree(root, {"f.txt": "x"}) / "f.txt", "not a directory"),
        (lambda root: make_tree(root, {"f.txt": "x"}) / "f.txt" / "below", "not a directory"),
    ],
)
def test_bad_root_is_reported_not_raised(folder: Path, make: object, reason: str) -> None:
    assert callable(make)
    listing = list_files(make(folder))
    assert (listing.files, listing.errors) == ((), (Skip(".", reason),))


@needs_git
def test_root_ignored_by_enclosing_repo_falls_back_to_walk(folder: Path) -> None:
    make_repo(folder, {".gitignore": "/*\n!.gitignore\n"}, {"notes/a.md": "a"})
    listing = list_files(folder / "notes")
    assert (listing.mode, rels(listing)) == ("walk", ["a.md"])
    (warning,) = listing.warnings
    assert "ignored by the enclosing git repository" in warning


@needs_git
@pytest.mark.skipif(not is_root, reason="needs root to give the repository another owner")
def test_dubious_ownership_falls_back_to_walk(folder: Path) -> None:
    make_repo(folder, {"a.md": "a"}, {})
    os.chown(folder, 65534, 65534)
    listing = list_files(folder)
    assert (listing.mode, rels(listing)) == ("walk", ["a.md"])
    (warning,) = listing.warnings
    assert "dubious ownership" in warning


@needs_git
def test_missing_git_falls_back_to_walk(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_repo(folder / "repo", {"a.md": "a", ".gitignore": "*.log\n"}, {"b.log": "b"})
    monkeypatch.setenv("PATH", str(folder / "no-bin"))
    listing = list_files(folder / "repo")
    # Without git the walk still applies the folder's .gitignore (issue 11.6).
    assert (listing.mode, rels(listing)) == ("walk", [".gitignore", "a.md"])
    assert listing.skipped == (Skip("b.log", "ignored by .gitignore"),)
    (warning,) = listing.warnings
    assert "git is not installed" in warning


def test_allow_list_ignore_file_keeps_folders_walkable(tmp_path: Path) -> None:
    root = tmp_path / "allow"
    (root / "pkg" / "sub").mkdir(parents=True)
    for rel in ("top.py", "notes.md", "pkg/mod.py", "pkg/sub/deep.py", "pkg/sub/data.json"):
        (root / rel).write_text("x\n")
    (root / ".indexignore").write_text("*\n!*/\n!*.py\n")
    assert [entry.rel for entry in list_files(root).files] == [
        "pkg/mod.py",
        "pkg/sub/deep.py",
        "top.py",
    ]


# Nested .gitignore files in walk mode, checked against real git on a copy of the same tree.
NESTED_TREE = {
    ".gitignore": (
        "# comment\n*.log\n!keep.log\n/top-only.txt\nbuild/\ndoc/*.tmp\n**/cache/\n"
        "\\#hash.txt\ntrailing.txt   \n*.py[co]\nfile?.bak\nout\n!out/\nlogs/**/deep.txt\n"
    ),
    "a.log": "x",
    "keep.log": "x",
    "top-only.txt": "x",
    "build/artifact.txt": "x",
    "src/build": "a file named build: dir-only patterns skip it",
    "doc/x.tmp": "x",
    "doc/sub/y.tmp": "anchored doc/*.tmp does not reach doc/sub",
    "deep/er/cache/c.txt": "x",
    "#hash.txt": "x",
    "trailing.txt": "x",
    "m.pyc": "x",
    "m.pyx": "x",
    "file1.bak": "x",
    "file10.bak": "x",
    "out/x.js": "out/ is re-included, and `out` matches no file in it",
    "logs/a/b/deep.txt": "x",
    "logs/deep.txt": "x",
    "a/.gitignore": "!*.log\n/local.txt\nsub/\n",
    "a/x.log": "the deeper file re-includes it",
    "a/local.txt": "x",
    "a/c/local.txt": "anchored to a/, so kept",
    "a/sub/s.txt": "x",
    "a/top-only.txt": "the root's /top-only.txt is anchored to the root",
    "a/b/.gitignore": "*\n!*/\n!*.py\n!.gitignore\n",
    "a/b/kept.py": "x",
    "a/b/dropped.md": "x",
    "a/b/c/deeper.py": "x",
    "a/b/c/deeper.txt": "x",
    "a/b/c/x.log": "a/b's `*` decides before a/'s `!*.log`",
    "gen/.gitignore": "*\n",
    "gen/out.txt": "x",
    "plain/readme.md": "x",
}


def git_ignored(root: Path, rels_: list[str]) -> set[str]:
    """The paths that `git check-ignore` says are ignored in the work tree at root."""
    proc = subprocess.run(
        ["git", "-C", str(root), "check-ignore", "--stdin", "-z"],
        input="\0".join(rels_).encode(),
        capture_output=True,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return {raw.decode() for raw in proc.stdout.split(b"\0") if raw}


@needs_git
def test_walk_mode_nested_gitignore_matches_git(tmp_path: Path) -> None:
    walked = make_tree(tmp_path / "walked", NESTED_TREE)
    repo = make_tree(tmp_path / "repo", NESTED_TREE)
    git(repo, "init", "-q")
    ignored = git_ignored(repo, sorted(NESTED_TREE))
    listing = list_files(walked, IgnoreSettings(default_ignore_patterns=()))
    assert listing.mode == "walk"
    assert rels(listing) == sorted(set(NESTED_TREE) - ignored)
    # A spot check that the tree exercises each rule (git agrees with all of these).
    assert {"a/x.log", "a/c/local.txt", "src/build", "out/x.js", "doc/sub/y.tmp"} <= set(
        rels(listing)
    )
    assert {"a/b/c/x.log", "a/b/dropped.md", "trailing.txt", "#hash.txt"} <= ignored


@needs_git
def test_walk_mode_gitignore_reasons(folder: Path) -> None:
    make_tree(folder, {".gitignore": "*.log\n", "a/.gitignore": "tmp/\n", "a/tmp/t.md": "t"})
    make_tree(folder, {"x.log": "x", "a/y.log": "y", "a/z.md": "z"})
    listing = list_files(folder)
    assert rels(listing) == [".gitignore", "a/.gitignore", "a/z.md"]
    assert listing.skipped == (
        Skip("a/tmp/", "ignored by a/.gitignore"),
        Skip("a/y.log", "ignored by .gitignore"),
        Skip("x.log", "ignored by .gitignore"),
    )


def test_walk_mode_skips_gitignored_instance_config_and_dotenv(folder: Path) -> None:
    """Issue 11.6: both were listed (so indexed, grepped and readable) outside git."""
    make_tree(
        folder,
        {
            ".gitignore": "instance/\n",
            ".env": "SECRET=hunter2\n",
            "instance/config.py": "SECRET_KEY = 'x'\n",
            "app.py": "print('hi')\n",
        },
    )
    listing = list_files(folder)
    assert rels(listing) == [".gitignore", "app.py"]
    assert listing.skipped == (
        Skip(".env", "secret file (matches .env)"),
        Skip("instance/", "ignored by .gitignore"),
    )


SECRET_FILES = {
    ".env": "SECRET=1",
    "web/.env.production": "SECRET=1",
    ".env.example": "SECRET=",
    "certs/server.pem": "-----BEGIN",
    "keys/id_ed25519": "-----BEGIN",
    "home/.aws/credentials": "[default]",
    "home/.docker/config.json": "{}",
    "home/.kube/config": "apiVersion: v1",
    ".npmrc": "//registry/:_authToken=x",
    "config.json": "{}",
    "README.md": "r",
}


@needs_git
@pytest.mark.parametrize("mode", ["walk", "git"])
def test_secret_files_are_skipped_in_both_modes(folder: Path, mode: str) -> None:
    if mode == "git":
        make_repo(folder, SECRET_FILES, {})  # committed secrets are still secrets
    else:
        make_tree(folder, SECRET_FILES)
    listing = list_files(folder)
    assert (listing.mode, rels(listing)) == (mode, [".env.example", "README.md", "config.json"])
    assert listing.skipped == (
        Skip(".env", "secret file (matches .env)"),
        Skip(".npmrc", "secret file (matches .npmrc)"),
        Skip("certs/server.pem", "secret file (matches *.pem)"),
        Skip("home/.aws/credentials", "secret file (matches .aws/credentials)"),
        Skip("home/.docker/config.json", "secret file (matches .docker/config.json)"),
        Skip("home/.kube/config", "secret file (matches .kube/config)"),
        Skip("keys/id_ed25519", "secret file (matches id_ed25519*)"),
        Skip("web/.env.production", "secret file (matches .env.*)"),
    )


def test_secret_files_opted_back_in(folder: Path) -> None:
    make_tree(folder, {".env.test": "X=1", "fixtures/key.pem": "k", "other/key.pem": "k"})
    settings = IgnoreSettings(allow_secret_patterns=(".env.test", "/fixtures/*.pem"))
    listing = list_files(folder, settings)
    assert rels(listing) == [".env.test", "fixtures/key.pem"]
    assert listing.skipped == (Skip("other/key.pem", "secret file (matches *.pem)"),)


def test_indexignore_cannot_re_include_a_secret(folder: Path) -> None:
    make_tree(folder, {".env": "X=1", ".indexignore": "!.env\n"})
    assert rels(list_files(folder)) == [".indexignore"]


KIND_FILES: dict[str, str] = {
    "package-lock.json": "{}",
    "web/yarn.lock": "x",
    "Cargo.lock": "x",
    "go.sum": "x",
    "static/app.min.js": "x",
    "static/app.min.css": "x",
    "static/app.js.map": "{}",
    "data/rows.csv": "a,b",
    "data/rows.tsv": "a\tb",
    "data/events.jsonl": "{}",
    "data/big.json": "[" + "1," * 60_000 + "1]",
    "config/small.json": '{"a": 1}',
    "static/bundle.js": "var a=1;" * 1000,
    "src/app.js": "const a = 1;\n" * 1000,
    "src/notes.md": "x " * 2000,  # one long line, but not code: not sniffed
}
KIND_REASONS = (
    Skip("Cargo.lock", "lockfile"),
    Skip("data/big.json", "data file (JSON over 100,000 bytes)"),
    Skip("data/events.jsonl", "data file (*.jsonl)"),
    Skip("data/rows.csv", "data file (*.csv)"),
    Skip("data/rows.tsv", "data file (*.tsv)"),
    Skip("go.sum", "lockfile"),
    Skip("package-lock.json", "lockfile"),
    Skip("static/app.js.map", "source map"),
    Skip("static/app.min.css", "minified (*.min.css)"),
    Skip("static/app.min.js", "minified (*.min.js)"),
    Skip("static/bundle.js", "minified (average line over 500 characters)"),
    Skip("web/yarn.lock", "lockfile"),
)


@needs_git
@pytest.mark.parametrize("mode", ["walk", "git"])
def test_skipped_kinds_in_both_modes(folder: Path, mode: str) -> None:
    if mode == "git":
        make_repo(folder, KIND_FILES, {})
    else:
        make_tree(folder, KIND_FILES)
    listing = list_files(folder)
    assert (listing.mode, rels(listing)) == (
        mode,
        ["config/small.json", "src/app.js", "src/notes.md"],
    )
    assert listing.skipped == KIND_REASONS


def test_index_kinds_opts_kinds_back_in(folder: Path) -> None:
    make_tree(folder, KIND_FILES)
    listing = list_files(folder, IgnoreSettings(index_kinds=frozenset({"lockfile", "minified"})))
    assert {skip.reason for skip in listing.skipped} == {
        "data file (JSON over 100,000 bytes)",
        "data file (*.jsonl)",
        "data file (*.csv)",
        "data file (*.tsv)",
        "source map",
    }
    assert {"package-lock.json", "static/bundle.js", "static/app.min.js"} <= set(rels(listing))


def test_dry_run_lists_secret_and_kind_reasons(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_tree(folder, {".env": "SECRET=1", "yarn.lock": "x", "a.md": "a"})
    assert main(["index", "--dry-run", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "skipped  .env  (secret file (matches .env))" in out
    assert "skipped  yarn.lock  (lockfile)" in out
    assert main(["index", "--dry-run", "--json", str(folder)]) == 0
    (plan,) = json.loads(capsys.readouterr().out)
    assert plan["files"] == [{"path": "a.md", "size": 1}]
    assert plan["skipped"] == [
        {"path": ".env", "reason": "secret file (matches .env)"},
        {"path": "yarn.lock", "reason": "lockfile"},
    ]


def test_walk_mode_does_not_follow_a_symlinked_gitignore(folder: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").write_text("*.md\n")
    make_tree(folder, {"a.md": "a"})
    (folder / ".gitignore").symlink_to(tmp_path / "elsewhere")
    assert rels(list_files(folder)) == ["a.md"]
    assert Skip(".gitignore", "symlink") in list_files(folder).skipped


VENV_TRACKED = {"app.py": "print('app')\n", "tools/run.py": "run()\n", "notvenv/lib.py": "z = 3\n"}
VENV_FILES = {
    "env311/pyvenv.cfg": "home = /usr/bin\n",
    "env311/lib/python3.11/site-packages/pkg/mod.py": "x = 1\n",
    "env311/bin/activate.py": "# activate\n",
    "tools/.venv-old/pyvenv.cfg": "home = /usr/bin\n",
    "tools/.venv-old/lib/site.py": "y = 2\n",
    "notvenv/pyvenv.txt": "not the marker\n",
}
VENV_SKIPS = [
    Skip("env311/", "virtual environment (pyvenv.cfg)"),
    Skip("tools/.venv-old/", "virtual environment (pyvenv.cfg)"),
]


@needs_git
@pytest.mark.parametrize("mode", ["walk", "git"])
def test_virtual_environments_are_skipped_whatever_their_name(folder: Path, mode: str) -> None:
    """A folder holding pyvenv.cfg is a venv: third-party code nobody searches, left out in
    both modes (git lists an untracked one that no .gitignore names file by file)."""
    if mode == "git":
        make_repo(folder, VENV_TRACKED, VENV_FILES)
    else:
        make_tree(folder, {**VENV_TRACKED, **VENV_FILES})
    listing = list_files(folder)
    assert (listing.mode, rels(listing)) == (
        mode,
        ["app.py", "notvenv/lib.py", "notvenv/pyvenv.txt", "tools/run.py"],
    )
    assert [skip for skip in listing.skipped if skip.rel.endswith("/")] == VENV_SKIPS


@needs_git
@pytest.mark.parametrize("mode", ["walk", "git"])
def test_index_kinds_venv_lists_virtual_environments(folder: Path, mode: str) -> None:
    if mode == "git":
        make_repo(folder, VENV_TRACKED, VENV_FILES)
    else:
        make_tree(folder, {**VENV_TRACKED, **VENV_FILES})
    listing = list_files(folder, IgnoreSettings(index_kinds=frozenset({"venv"})))
    assert {
        "env311/lib/python3.11/site-packages/pkg/mod.py",
        "tools/.venv-old/lib/site.py",
    } <= set(rels(listing))
    assert not [skip for skip in listing.skipped if skip.rel.endswith("/")]


def test_a_virtual_environment_added_as_the_root_is_listed(folder: Path) -> None:
    """The rule is for folders below the root: one asked for by name is indexed."""
    make_tree(folder, VENV_FILES)
    listing = list_files(folder / "env311")
    assert rels(listing) == [
        "bin/activate.py",
        "lib/python3.11/site-packages/pkg/mod.py",
        "pyvenv.cfg",
    ]
