"""Ignore patterns checked against real git: for each row a repository is built in tmp_path,
git says which of its files it keeps (``git ls-files -o --exclude-standard``: parent folders
excluded count), and the walk of a plain copy of the same tree must keep exactly those files,
whether the patterns sit in ``.gitignore`` files, the folder's ``.indexignore`` or the global
ignore file; a glob or an allow-list holding the same lines matches exactly the files git
leaves out."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from semsearch.files.gitignore import PatternList
from semsearch.files.ignore import IgnoreSettings
from semsearch.files.listing import list_files

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

# (id, ignore files by path, the other files of the tree). Every file holds "x".
ROWS: list[tuple[str, dict[str, str], tuple[str, ...]]] = [
    (
        "allow-list",
        {".gitignore": "*\n!*/\n!*.py\n"},
        ("top.py", "notes.md", "pkg/mod.py", "pkg/sub/deep.py", "pkg/sub/data.txt"),
    ),
    ("dir-only", {".gitignore": "dir/\n"}, ("a/dir", "b/dir/x.txt", "dir/y.txt", "keep.txt")),
    ("dir-or-file", {".gitignore": "dir\n"}, ("a/dir", "b/dir/x.txt", "dir/y.txt", "keep.txt")),
    (
        "anchored",
        {".gitignore": "/top.txt\n/sub/x.txt\nmid/x.txt\n/*.md\n"},
        (
            "top.txt",
            "a/top.txt",
            "sub/x.txt",
            "a/sub/x.txt",
            "mid/x.txt",
            "a/mid/x.txt",
            "r.md",
            "d/r.md",
        ),
    ),
    (
        "anchored-dir",
        {".gitignore": "/build/\na/b/\n"},
        ("build/x.txt", "a/build/y.txt", "a/b/c.txt", "x/a/b/d.txt", "a/bfile", "y/a/b"),
    ),
    (
        "double-star-middle",
        {".gitignore": "a/**/b\n"},
        ("a/b", "a/x/b", "a/x/y/b", "c/a/x/b", "a/bb", "a/x/y/b2/z.txt", "a/q/b/z.txt"),
    ),
    (
        "double-star-leading",
        {".gitignore": "**/name\n**/cache/**\n"},
        (
            "name",
            "x/name",
            "x/y/name/f.txt",
            "xname",
            "cache.txt",
            "p/cache/c.txt",
            "cache/d/e.txt",
        ),
    ),
    (
        "double-star-trailing",
        {".gitignore": "logs/**\n!logs/keep.txt\n"},
        ("logs/a.txt", "logs/keep.txt", "logs/sub/b.txt", "x/logs/c.txt"),
    ),
    ("double-star-alone", {".gitignore": "**\n!*.md\n"}, ("a.md", "b.txt", "d/c.md")),
    (
        "double-star-after-a-literal-prefix",
        {".gitignore": "ab**/x\nq/a**\\/y\n"},
        ("abc/x", "ab/q/x", "ab/x", "abq/r/x", "zz/ab/x", "q/a/c/y", "q/a/y", "q/b/y"),
    ),
    (
        "double-star-not-a-segment",
        {".gitignore": "a**b\nx/**y\n"},
        ("ab", "axxb", "a/b", "x/y", "x/zy", "x/z/y"),
    ),
    (
        "negation",
        {".gitignore": "*.log\n!keep.log\n"},
        ("a.log", "keep.log", "d/keep.log", "d/b.log", "log.txt"),
    ),
    (
        "char-class",
        {".gitignore": "[abc].txt\nfile[0-9].md\n[!x]y.dat\n*.py[co]\n[]]z\n[^q]w\n"},
        (
            "a.txt",
            "d.txt",
            "ab.txt",
            "file1.md",
            "filex.md",
            "ay.dat",
            "xy.dat",
            "m.pyc",
            "m.pyx",
            "]z",
            "qw",
            "rw",
        ),
    ),
    (
        "char-class-posix",
        {".gitignore": "[[:digit:]]x.txt\n[[:upper:][:space:]]u.txt\n[[:nope:]]n.txt\n"},
        ("1x.txt", "ax.txt", "Bu.txt", " u.txt", "bu.txt", "1n.txt", ":n.txt"),
    ),
    (
        "char-class-ranges",
        {".gitignore": "[a-c]r.txt\n[z-a]\n[z-ab]s.txt\n[a-]m.txt\n"},
        ("br.txt", "dr.txt", "z", "a", "bs.txt", "zs.txt", "ys.txt", "-m.txt", "bm.txt"),
    ),
    ("unclosed-class", {".gitignore": "[abc\n*.log\n"}, ("[abc", "a", "b.log")),
    (
        "escapes",
        {".gitignore": "\\#hash.txt\n\\!bang.txt\n\\*star\nback\\slash\n"},
        ("#hash.txt", "!bang.txt", "hash.txt", "bang.txt", "*star", "xstar", "backslash"),
    ),
    ("trailing-backslash", {".gitignore": "foo\\\n*.log\n"}, ("foo", "foo\\", "a.log")),
    (
        "trailing-space",
        {".gitignore": "trailing.txt   \nescaped\\ \ntab.txt\t\n  lead.txt\n"},
        (
            "trailing.txt",
            "trailing.txt ",
            "escaped ",
            "escaped",
            "tab.txt",
            "tab.txt\t",
            "lead.txt",
            "  lead.txt",
        ),
    ),
    (
        "comment-blank-crlf",
        {".gitignore": "# comment\n\n*.tmp\r\n#not-a-comment.txt\n"},
        ("# comment", "a.tmp", "#not-a-comment.txt", "b.txt"),
    ),
    ("question-mark", {".gitignore": "file?.bak\n"}, ("file1.bak", "file10.bak", "file/.bak")),
    (
        "star-in-path",
        {".gitignore": "doc/*.tmp\nfoo/*\n!foo/keep/\n"},
        (
            "doc/x.tmp",
            "doc/sub/y.tmp",
            "a/doc/z.tmp",
            "foo/a.txt",
            "foo/bar/b.txt",
            "foo/keep/k.txt",
            "x/foo/c.txt",
        ),
    ),
    ("star-slash", {".gitignore": "*/\n!src/\n"}, ("a.txt", "d/x.txt", "src/y.txt", "src/s/z.txt")),
    ("re-include-dir", {".gitignore": "out\n!out/\n"}, ("out/x.js", "a/out", "b/out/y.js")),
    (
        "build-keep",
        {".gitignore": "build/\n!build/keep.txt\n"},
        ("build/keep.txt", "build/x.txt", "src/build/y.txt", "keep.txt"),
    ),
    (
        "names-with-spaces-and-non-ascii",
        {".gitignore": "my notes/\nCafé*.md\n日本語.txt\n/dir with space/a b.txt\ncaf?.txt\n"},
        (
            "my notes/a.md",
            "Café au lait.md",
            "Cafe.md",
            "日本語.txt",
            "d/日本語.txt",
            "dir with space/a b.txt",
            "dir with space/ab.txt",
            "résumé.txt",
            "café.txt",
            "cafe.txt",
        ),
    ),
    ("case", {".gitignore": "README.md\n"}, ("readme.md", "README.md", "d/README.md")),
    (
        "nested",
        {".gitignore": "*.log\n/local.txt\n", "sub/.gitignore": "!*.log\n/local.txt\nbuild/\n"},
        (
            "a.log",
            "local.txt",
            "sub/a.log",
            "sub/local.txt",
            "sub/x/local.txt",
            "sub/x/y.log",
            "sub/build/b.txt",
            "build/c.txt",
        ),
    ),
    (
        "nested-deeper-decides",
        {
            ".gitignore": "*.md\n",
            "a/.gitignore": "!*.md\n",
            "a/b/.gitignore": "*\n!*/\n!*.py\n!.gitignore\n",
        },
        ("x.md", "a/y.md", "a/b/z.md", "a/b/k.py", "a/b/c/d.py", "a/b/c/e.md"),
    ),
    (
        "nested-cannot-reach-into-excluded-dir",
        {".gitignore": "build/\n", "build/.gitignore": "!keep.txt\n"},
        ("build/keep.txt", "other.txt"),
    ),
    ("nested-dir-star", {"gen/.gitignore": "*\n"}, ("gen/out.txt", "plain.txt")),
]

ROOT_ONLY = [row for row in ROWS if set(row[1]) == {".gitignore"}]


def build(root: Path, ignore_files: dict[str, str], files: tuple[str, ...]) -> Path:
    """Write the tree; ignore files are written as bytes so CRLF and spaces survive."""
    for rel, content in [*ignore_files.items(), *((rel, "x") for rel in files)]:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode())
    return root


def git_kept(root: Path, ignore_files: dict[str, str], files: tuple[str, ...]) -> list[str]:
    """The files git keeps in a new repository holding the tree (its ignored ones left out)."""
    build(root, ignore_files, files)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    proc = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    )
    return sorted(os.fsdecode(raw) for raw in proc.stdout.split(b"\0") if raw)


def walk_kept(root: Path, settings: IgnoreSettings) -> list[str]:
    listing = list_files(root, settings)
    assert (listing.mode, listing.errors, listing.warnings) == ("walk", (), ())
    return [entry.rel for entry in listing.files]


NO_DEFAULTS = IgnoreSettings(default_ignore_patterns=())


@pytest.mark.parametrize(("ignore_files", "files"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_walk_mode_gitignore_keeps_what_git_keeps(
    tmp_path: Path, ignore_files: dict[str, str], files: tuple[str, ...]
) -> None:
    expected = git_kept(tmp_path / "repo", ignore_files, files)
    walked = build(tmp_path / "walked", ignore_files, files)
    assert walk_kept(walked, NO_DEFAULTS) == expected


@pytest.mark.parametrize(
    ("ignore_files", "files"), [r[1:] for r in ROOT_ONLY], ids=[r[0] for r in ROOT_ONLY]
)
def test_indexignore_keeps_what_git_keeps(
    tmp_path: Path, ignore_files: dict[str, str], files: tuple[str, ...]
) -> None:
    expected = git_kept(tmp_path / "repo", ignore_files, files)
    walked = build(tmp_path / "walked", {".indexignore": ignore_files[".gitignore"]}, files)
    renamed = [".indexignore" if rel == ".gitignore" else rel for rel in expected]
    assert walk_kept(walked, NO_DEFAULTS) == sorted(renamed)


@pytest.mark.parametrize(
    ("ignore_files", "files"), [r[1:] for r in ROOT_ONLY], ids=[r[0] for r in ROOT_ONLY]
)
def test_global_ignore_file_keeps_what_git_keeps(
    tmp_path: Path, ignore_files: dict[str, str], files: tuple[str, ...]
) -> None:
    expected = git_kept(tmp_path / "repo", ignore_files, files)
    global_file = build(tmp_path / "config", {"ignore": ignore_files[".gitignore"]}, ()) / "ignore"
    walked = build(tmp_path / "walked", {}, files)
    settings = IgnoreSettings(default_ignore_patterns=(), global_ignore_file=global_file)
    assert walk_kept(walked, settings) == [rel for rel in expected if rel != ".gitignore"]


@pytest.mark.parametrize(
    ("ignore_files", "files"), [r[1:] for r in ROOT_ONLY], ids=[r[0] for r in ROOT_ONLY]
)
def test_glob_and_allow_list_match_what_git_ignores(
    tmp_path: Path, ignore_files: dict[str, str], files: tuple[str, ...]
) -> None:
    """Globs and allowSecretPatterns match a file as git ignores it: by its own name or by
    an excluded folder above it."""
    kept = git_kept(tmp_path / "repo", ignore_files, files)
    patterns = PatternList.parse(ignore_files[".gitignore"].split("\n"))
    every = sorted({*files, ".gitignore"})
    assert [rel for rel in every if not patterns.matches(rel)] == kept
