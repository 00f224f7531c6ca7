"""Tests for files/gitignore.py beyond the git comparison of tests/test_ignore_git.py: where a
pattern list is based, what strict parsing refuses and how case folding works."""

from __future__ import annotations

import pytest

from semsearch.files.gitignore import Pattern, PatternList


def test_patterns_are_relative_to_their_folder() -> None:
    patterns = PatternList.parse(["*.md", "/local.txt", "!keep.md"], "a/")
    assert [patterns.decides(rel) for rel in ("x.md", "a/x.md", "a/b/x.md", "a/keep.md")] == [
        None,
        True,
        True,
        False,
    ]
    assert [patterns.decides(rel) for rel in ("a/local.txt", "a/b/local.txt", "a/")] == [
        True,
        None,
        None,
    ]


def test_last_match_names_the_line() -> None:
    patterns = PatternList.parse(["# notes", "", "build/", "*.log", "!keep.log"])
    assert patterns.last_match("build/") == Pattern(2, "build/", False, True)
    assert patterns.last_match("build") is None  # a file: "build/" names folders only
    assert patterns.last_match("d/keep.log") == Pattern(4, "!keep.log", True, False)


def test_excluding_names_the_outermost_excluded_folder() -> None:
    patterns = PatternList.parse(["build/", "!build/keep.txt", "*.tmp"])
    assert patterns.excluding("build/keep.txt") == Pattern(0, "build/", False, True)
    assert patterns.excluding("src/a.tmp") == Pattern(2, "*.tmp", False, False)
    assert patterns.excluding("src/a.txt") is None
    assert (patterns.matches("build/x/y.txt"), patterns.matches("src/build")) == (True, False)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("foo\\", "'foo\\\\': it ends with a lone backslash"),
        ("[abc", "'[abc': a '[' is never closed"),
        ("[[:word:]]", "'[[:word:]]': [:word:] is no class"),
        ("a/**/[z-a]", "'a/**/[z-a]': the range z-a is reversed"),
        ("!", "'!': it matches no path"),
        ("/", "'/': it matches no path"),
        ("   ", "'   ': it matches no path"),
        ("#notes", "'#notes': a blank line or a comment matches no path (escape a leading # as"),
    ],
)
def test_strict_refuses_a_line_that_matches_nothing(line: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        PatternList.parse([line], strict=True)
    assert str(caught.value).startswith(message)
    assert not PatternList.parse([line]).matches("foo")  # an ignore file just skips it, as git


def test_ignore_case_folds_ascii_letters_only() -> None:
    patterns = PatternList.parse(["*.pem", "é.txt"], ignore_case=True)
    assert [patterns.matches(rel) for rel in ("A.PEM", "é.txt", "É.txt")] == [True, True, False]
    assert not PatternList.parse(["*.pem"]).matches("A.PEM")
