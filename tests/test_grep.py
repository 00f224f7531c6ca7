"""Tests for semsearch.files.grep: exact search over the indexable files in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from semsearch.errors import UsageError
from semsearch.files.grep import GrepMatch, GrepOptions, Scope, excerpt, grep, resolve_scopes
from semsearch.files.ignore import IgnoreSettings
from tests.conftest import run_as_user, write_tree
from tests.docgen import write_pdf

IGNORE = IgnoreSettings()


def git(root: Path, *args: str) -> None:
    """Run git with a throwaway identity."""
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root), *args],
        check=True,
        capture_output=True,
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A walk-mode folder with text, an ignored file, a binary file and a too-large file."""
    return write_tree(
        tmp_path / "notes",
        {
            "a.md": "Alpha line\nthe Needle is here\nneedle again, lower case\n",
            "src/b.py": "x = 1\nprint('needle in code')\n",
            "src/c.txt": "a.b literal\naxb not literal\n",
            "private/secret.md": "needle in a private file\n",
            ".indexignore": "private/\n",
            "blob.txt": b"needle before a NUL\x00byte",
            "image.png": b"needle in a png",
            "big.txt": "needle " + "x" * 600_000 + "\n",
        },
    )


def lines_of(matches: list[GrepMatch] | tuple[GrepMatch, ...]) -> list[tuple[str, int]]:
    return [(m.rel, m.line) for m in matches]


def test_literal_search_is_case_insensitive_by_default(folder: Path) -> None:
    result = grep([folder], GrepOptions("needle"), IGNORE)
    assert lines_of(result.matches) == [("a.md", 2), ("a.md", 3), ("src/b.py", 2)]
    assert result.matches[0] == GrepMatch(
        "notes", str(folder), "a.md", 2, "the Needle is here", column=5
    )
    assert result.matches[0].path == str(folder / "a.md")
    assert (result.truncated, result.timed_out) == (False, False)
    assert result.files_searched == 4  # a.md, src/b.py, src/c.txt, .indexignore


def test_case_sensitive(folder: Path) -> None:
    result = grep([folder], GrepOptions("Needle", case_sensitive=True), IGNORE)
    assert lines_of(result.matches) == [("a.md", 2)]


def test_literal_mode_treats_regex_characters_literally(folder: Path) -> None:
    assert lines_of(grep([folder], GrepOptions("a.b"), IGNORE).matches) == [("src/c.txt", 1)]


def test_regex_mode(folder: Path) -> None:
    result = grep([folder], GrepOptions(r"a.b\s", regex=True), IGNORE)
    assert lines_of(result.matches) == [("src/c.txt", 1), ("src/c.txt", 2)]


@pytest.mark.parametrize(
    ("glob", "expected"),
    [
        ("*.py", [("src/b.py", 2)]),
        ("*.md", [("a.md", 2), ("a.md", 3)]),
        ("src/*", [("src/b.py", 2)]),
        ("*.rs", []),
    ],
)
def test_file_glob(folder: Path, glob: str, expected: list[tuple[str, int]]) -> None:
    assert lines_of(grep([folder], GrepOptions("needle", file_glob=glob), IGNORE).matches) == (
        expected
    )


def test_max_results_truncates(folder: Path) -> None:
    result = grep([folder], GrepOptions("needle", max_results=2), IGNORE)
    assert lines_of(result.matches) == [("a.md", 2), ("a.md", 3)]
    assert result.truncated


def test_exactly_max_results_is_not_truncated(folder: Path) -> None:
    result = grep([folder], GrepOptions("needle", max_results=3), IGNORE)
    assert len(result.matches) == 3
    assert not result.truncated


def test_ignored_binary_and_oversized_files_are_never_searched(folder: Path) -> None:
    matched = {m.rel for m in grep([folder], GrepOptions("needle"), IGNORE).matches}
    assert matched == {"a.md", "src/b.py"}


def test_the_size_cap_comes_from_the_settings(folder: Path) -> None:
    small = IgnoreSettings(max_file_size=30)
    assert {m.rel for m in grep([folder], GrepOptions("needle"), small).matches} == {"src/b.py"}


def test_gitignored_files_are_never_searched(tmp_path: Path) -> None:
    repo = write_tree(
        tmp_path / "repo",
        {".gitignore": ".env\n", ".env": "TOKEN=needle-secret\n", "app.py": "needle = 1\n"},
    )
    git(repo, "init", "-q")
    result = grep([repo], GrepOptions("needle"), IGNORE)
    assert lines_of(result.matches) == [("app.py", 1)]


def test_catastrophic_regex_stops_at_the_deadline(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "r", {"long.txt": "a" * 5000 + "!\n"})
    started = time.monotonic()
    result = grep([root], GrepOptions("(a+)+$", regex=True), IGNORE, timeout=1.0)
    assert time.monotonic() - started < 5
    assert result.timed_out
    assert result.matches == ()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (GrepOptions(""), "The pattern is empty"),
        (GrepOptions("x" * 1001), "longer than 1000"),
        (GrepOptions("a(", regex=True), "Invalid regular expression"),
        (GrepOptions("x", max_results=0), "at least 1"),
        (GrepOptions("x", file_glob="a/**/**/[z-a]"), "Invalid file glob"),
    ],
)
def test_bad_options_raise_usage_errors(folder: Path, options: GrepOptions, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        grep([folder], options, IGNORE)


def test_missing_folder_is_a_warning(folder: Path, tmp_path: Path) -> None:
    result = grep([tmp_path / "gone", folder], GrepOptions("alpha"), IGNORE)
    assert lines_of(result.matches) == [("a.md", 1)]
    assert result.warnings == (f"{tmp_path / 'gone'}: folder not found",)


GREP_AS_JSON = """
import json, os, sys
from semsearch import Index, load_settings
from semsearch.files.grep import GrepOptions
Index(load_settings(os.environ)).add([sys.argv[1]])
result = Index(load_settings(os.environ)).grep(GrepOptions(sys.argv[2]))
matches = [[m.rel, m.line] for m in result.matches]
print(json.dumps([matches, list(result.warnings), result.files_searched]))
"""


@pytest.mark.parametrize("is_git", [False, True])
def test_an_unreadable_folder_or_file_is_a_warning_and_the_rest_is_searched(
    tmp_path: Path, is_git: bool, set_mode: Callable[[Path, int], Path]
) -> None:
    """Issue 34.1: a mode-000 folder made grep fail ("grep failed: PermissionError"); a file
    that could not be read was passed over without a word. Run as an ordinary user."""
    root = write_tree(
        tmp_path / "notes",
        {"a.md": "needle\n", "locked/b.md": "needle\n", "no-access.md": "needle\n"},
    )
    if is_git:
        git(root, "init", "-q")
        git(root, "add", "-A")
    set_mode(root / "locked", 0)
    set_mode(root / "no-access.md", 0)
    result = run_as_user([sys.executable, "-c", GREP_AS_JSON, str(root), "needle"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        [["a.md", 1]],
        [
            f"{root / 'locked'}: cannot read this folder (permission denied); skipped "
            "(list it in .indexignore to skip it quietly)",
            f"{root / 'no-access.md'}: cannot read this file (permission denied); not searched",
        ],
        1,
    ]


def test_pdf_text_is_searched_with_pages(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    write_pdf(root / "manual.pdf", ["Installation\nUnpack it.", "Troubleshooting\nPaper jams."])
    (match,) = grep([root], GrepOptions("paper jams"), IGNORE).matches
    assert (match.rel, match.page, match.text) == ("manual.pdf", 2, "Paper jams.")


def test_long_lines_show_a_window_around_the_match() -> None:
    line = "x" * 1000 + "needle" + "y" * 1000
    shown = excerpt(line, 1000, 1006)
    assert "needle" in shown
    assert shown.startswith("…") and shown.endswith("…")
    assert len(shown) == 242
    assert excerpt("  short  ", 2, 4) == "short"


def test_child_runs_from_the_package_not_the_callers_cwd(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shadow = write_tree(tmp_path / "cwd", {"semsearch/__init__.py": "raise SystemExit(3)\n"})
    monkeypatch.chdir(shadow)
    assert os.getcwd() == str(shadow)
    assert len(grep([folder], GrepOptions("needle"), IGNORE).matches) == 3


@pytest.mark.parametrize("is_git", [False, True])
def test_secret_files_are_never_searched(tmp_path: Path, is_git: bool) -> None:
    root = write_tree(
        tmp_path / "app",
        {
            ".env": "SECRET=needle\n",
            "keys/deploy.pem": "needle\n",
            ".env.example": "SECRET=needle-placeholder\n",
            "app.py": "needle = 1\n",
        },
    )
    if is_git:  # committed secrets are secrets too
        git(root, "init", "-q")
        git(root, "add", "-A")
    result = grep([root], GrepOptions("needle"), IGNORE)
    assert lines_of(result.matches) == [(".env.example", 1), ("app.py", 1)]
    allowing = IgnoreSettings(allow_secret_patterns=(".env",))
    matched = lines_of(grep([root], GrepOptions("needle"), allowing).matches)
    assert matched == [(".env", 1), (".env.example", 1), ("app.py", 1)]


def test_gitignored_files_are_never_searched_outside_git(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path / "app",
        {".gitignore": "instance/\n", "instance/config.py": "KEY = 'needle'\n", "a.py": "needle\n"},
    )
    assert lines_of(grep([root], GrepOptions("needle"), IGNORE).matches) == [("a.py", 1)]


@pytest.fixture
def code(tmp_path: Path) -> Path:
    """A walk-mode folder of eight-line files, an ignored folder and notes."""
    lines = "".join(f"line {n}\n" for n in range(1, 9))
    return write_tree(
        tmp_path / "code",
        {
            "src/retry.py": "def retry(call):\n    retrying = 1\n    retry_count = 2\n# retry\n",
            "src/lines.txt": lines,
            "docs/guide.md": "How to retry.\n",
            "build/retry.py": "retry = 'generated'\n",
            ".indexignore": "build/\n",
        },
    )


def test_word_match_wants_no_word_character_around_the_match(code: Path) -> None:
    result = grep([code], GrepOptions("retry", word_match=True, case_sensitive=True), IGNORE)
    assert lines_of(result.matches) == [
        ("docs/guide.md", 1),
        ("src/retry.py", 1),
        ("src/retry.py", 4),
    ]
    # the pattern's own edges need not be word characters, unlike with \b
    punctuated = GrepOptions("= 2", word_match=True)
    assert lines_of(grep([code], punctuated, IGNORE).matches) == [("src/retry.py", 3)]
    alternation = GrepOptions("retry|retrying", regex=True, word_match=True)
    assert lines_of(grep([code / "src"], alternation, IGNORE).matches) == [
        ("retry.py", 1),
        ("retry.py", 2),
        ("retry.py", 4),
    ]


def test_context_lines_stop_at_the_file_edges(code: Path) -> None:
    options = GrepOptions(r"line [18]$", regex=True, context_before=2, context_after=3)
    first, last = grep([code], options, IGNORE).matches
    assert first == GrepMatch(
        "code", str(code), "src/lines.txt", 1, "line 1", after=("line 2", "line 3", "line 4")
    )
    assert (last.line, last.before, last.after) == (8, ("line 6", "line 7"), ())


def test_full_lines_are_given_as_they_are(tmp_path: Path) -> None:
    long_line = "    needle" + "x" * 500
    root = write_tree(tmp_path / "r", {"a.py": f"  above\n{long_line}\n"})
    options = GrepOptions("needle", context_before=1, full_lines=True)
    (match,) = grep([root], options, IGNORE).matches
    assert (match.text, match.before, match.column) == (long_line, ("  above",), 5)
    (cut,) = grep([root], GrepOptions("needle", context_before=1), IGNORE).matches
    assert cut.before == ("above",) and cut.text.endswith("…") and len(cut.text) == 241


@pytest.mark.parametrize(
    ("globs", "expected"),
    [
        (("*.py", "*.md"), {"docs/guide.md", "src/retry.py"}),
        (("!*.md",), {"src/lines.txt", "src/retry.py"}),
        (("src/", "!*.txt"), {"src/retry.py"}),
        (("!docs/", "!src/"), set()),
    ],
)
def test_several_globs_include_any_and_exclude_with_a_bang(
    code: Path, globs: tuple[str, ...], expected: set[str]
) -> None:
    result = grep([code], GrepOptions("retry|line", regex=True, file_glob=globs), IGNORE)
    assert {m.rel for m in result.matches} == expected


def test_a_scope_narrows_the_search_and_keeps_the_folders_rules(code: Path) -> None:
    options = GrepOptions("retry")
    in_src = grep([Scope(code, ("src",))], options, IGNORE)
    assert {m.rel for m in in_src.matches} == {"src/retry.py"}
    assert in_src.files_searched == 2
    one_file = grep([Scope(code, ("docs/guide.md", "build/retry.py"))], options, IGNORE)
    assert lines_of(one_file.matches) == [("docs/guide.md", 1)]  # build/ stays ignored
    assert grep([Scope(code, ("sr",))], options, IGNORE).matches == ()  # not a path prefix


def test_no_limit_and_no_deadline(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "r", {"many.txt": "hit\n" * 5000})
    result = grep([root], GrepOptions("hit", max_results=None), IGNORE, timeout=None)
    assert len(result.matches) == 5000
    assert (result.truncated, result.timed_out) == (False, False)


CHILD_OF_A_KILLED_PARENT = """
import sys
from pathlib import Path
from semsearch.files.grep import GrepOptions, grep
from semsearch.files.ignore import IgnoreSettings
grep([Path(sys.argv[1])], GrepOptions("(a+)+$", regex=True), IgnoreSettings(), timeout=None)
"""


def test_without_a_deadline_the_child_dies_with_its_parent(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "r", {"long.txt": "a" * 5000 + "!\n"})
    parent = subprocess.Popen([sys.executable, "-c", CHILD_OF_A_KILLED_PARENT, str(root)])
    children = Path(f"/proc/{parent.pid}/task/{parent.pid}/children")
    deadline = time.monotonic() + 30
    while not children.read_text().split():
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.05)
    (child,) = map(int, children.read_text().split())
    time.sleep(0.5)  # the child is matching by now
    parent.kill()
    parent.wait()
    while is_running(child):
        assert time.monotonic() < deadline, "the grep child outlived its killed parent"
        time.sleep(0.05)


def is_running(pid: int) -> bool:
    """Whether ``pid`` exists and is no zombie (a container's init may never reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_paths_resolve_to_scopes(code: Path, tmp_path: Path) -> None:
    other = write_tree(tmp_path / "other", {"inner/x.txt": "x\n", "y.txt": "y\n"})
    roots = [code]
    assert resolve_scopes(["src", "docs/guide.md"], roots, code) == [
        Scope(code, ("src", "docs/guide.md"))
    ]
    assert resolve_scopes([".", "src"], roots, code) == [Scope(code)]
    assert resolve_scopes([str(other), str(other / "inner")], roots) == [Scope(other)]
    assert resolve_scopes([str(other / "inner")], roots) == [Scope(other / "inner")]
    with pytest.raises(UsageError, match=r"y\.txt is a file outside the configured folders"):
        resolve_scopes([str(other / "y.txt")], roots)
    with pytest.raises(UsageError, match="nothing: no such file or folder"):
        resolve_scopes(["nothing"], roots, code)
