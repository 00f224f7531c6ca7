"""Tests for semsearch.ignore: layered patterns, name checks and size caps, without the disk."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from semsearch.ignore import (
    DEFAULT_SETTINGS,
    IgnoreRules,
    IgnoreSettings,
    size_cap,
    too_large_reason,
)

GLOBAL_FILE = Path("/config/semsearch/ignore")  # only named in reasons, never read here
SETTINGS = IgnoreSettings(global_ignore_file=GLOBAL_FILE)
GLOBAL_LINES = ["*.secret"]
ROOT_LINES = ["!keep.secret", "!build/", "drafts/"]


@pytest.mark.parametrize(
    ("mode", "rel", "expected"),
    [
        ("walk", "node_modules/", "ignored by default pattern"),
        ("git", "node_modules/", None),  # git decides; the walk defaults are not applied
        ("walk", "src/app.py", None),
        ("walk", "a.secret", f"ignored by {GLOBAL_FILE}"),
        ("git", "a.secret", f"ignored by {GLOBAL_FILE}"),
        ("walk", "keep.secret", None),  # the root's file re-includes what the global one left out
        ("walk", "build/", None),  # ... and what a default pattern left out
        ("walk", "drafts/", "ignored by .indexignore"),
        ("git", "drafts/x.md", "ignored by .indexignore"),
        ("walk", "drafts/x.md", None),  # the walk prunes drafts/ itself, never its files
        ("walk", "logo.PNG", "binary extension"),
        ("walk", "icons.png/", None),  # extensions are checked on files only
        ("walk", "bad\udcff.md", "file name is not valid UTF-8"),
    ],
)
def test_rules_layer_defaults_global_and_root_patterns(
    mode: Literal["git", "walk"], rel: str, expected: str | None
) -> None:
    rules = IgnoreRules.build(SETTINGS, mode, GLOBAL_LINES, ROOT_LINES)
    assert rules.reason(rel) == expected


def test_rules_without_a_global_file() -> None:
    rules = IgnoreRules.build(DEFAULT_SETTINGS, "git", None, ["*.log"])
    assert (rules.reason("a.secret"), rules.reason("x.log")) == (None, "ignored by .indexignore")


def test_size_cap_is_larger_for_documents() -> None:
    settings = IgnoreSettings(max_file_size=10, max_document_size=100)
    assert [size_cap(rel, settings) for rel in ("a.txt", "b.PDF", "c.docx")] == [10, 100, 100]
    assert (size_cap("a.txt"), size_cap("b.pdf")) == (500_000, 50_000_000)


def test_too_large_reason_uses_thousands_separators() -> None:
    assert too_large_reason(612_000, 500_000) == "too large (612,000 bytes > 500,000)"
