"""Tests for semsearch.files.filetype: the binary-extension table, documents and the NUL sniff."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from semsearch.files.filetype import (
    BINARY_EXTENSIONS,
    extension_of,
    is_binary_content,
    is_document,
    is_prose,
    looks_binary,
    minified_reason,
    skipped_kind,
)


@given(st.lists(st.sampled_from(["a", "B", ".", "/", " ", "é", "\udcff"]), max_size=12))
def test_extension_of_is_splitexts_lower_cased(parts: list[str]) -> None:
    """The listing's own extension rule agrees with ``os.path.splitext`` on any name: dots
    leading a component start no extension, a dot before the last "/" none either."""
    name = "".join(parts)
    assert extension_of(name) == os.path.splitext(name)[1].lower()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a/b.TXT", ".txt"),
        (".bashrc", ""),
        ("..x", ""),
        ("a.b/c", ""),
        ("x.", "."),
        ("a/.x.y", ".y"),
    ],
)
def test_extension_of_examples(name: str, expected: str) -> None:
    assert extension_of(name) == expected


def test_binary_extensions_table() -> None:
    assert ".pdf" not in BINARY_EXTENSIONS and ".docx" not in BINARY_EXTENSIONS
    assert {".png", ".dsym", ".sqlite", ".ico"} <= BINARY_EXTENSIONS
    assert {".framework", ".xcarchive", ".dSYM"}.isdisjoint(BINARY_EXTENSIONS)
    assert all(ext == ext.lower() and ext.startswith(".") for ext in BINARY_EXTENSIONS)


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"", False),
        (b"plain text\n", False),
        ("ünïcödé".encode(), False),
        (b"\x89PNG\r\n\x1a\n\x00\x00", True),
        (b"x" * 4095 + b"\x00", True),
        (b"x" * 4096 + b"\x00", False),  # only the first 4096 bytes are sniffed
    ],
)
def test_looks_binary(head: bytes, expected: bool) -> None:
    assert looks_binary(head) is expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [("a.pdf", True), ("A.PDF", True), ("b.docx", True), ("c.doc", False), ("pdf", False)],
)
def test_is_document(name: str, expected: bool) -> None:
    assert is_document(name) is expected


@pytest.mark.parametrize(
    ("rel", "data", "expected"),
    [
        ("a.txt", b"plain text", False),
        ("a.txt", b"nul\x00byte", True),
        ("a.txt", "utf-16 text".encode("utf-16"), False),
        ("a.pdf", b"%PDF-1.4\x00\x01", False),
        ("a.docx", b"PK\x03\x04\x00", False),
        ("a.txt", b"x" * 5000 + b"\x00", False),
    ],
)
def test_is_binary_content(rel: str, data: bytes, expected: bool) -> None:
    assert is_binary_content(rel, data) is expected


@pytest.mark.parametrize(
    ("rel", "size", "expected"),
    [
        ("package-lock.json", 10, ("lockfile", "lockfile")),
        ("sub/Cargo.lock", 10, ("lockfile", "lockfile")),
        ("bun.lockb", 10, ("lockfile", "lockfile")),
        ("cargo.lock", 10, None),  # lockfile names are exact
        ("dist/app.MIN.JS", 10, ("minified", "minified (*.min.js)")),
        ("app.min.css", 10, ("minified", "minified (*.min.css)")),
        ("admin.js", 10, None),
        ("app.js.map", 10, ("sourcemap", "source map")),
        ("rows.CSV", 10, ("data", "data file (*.csv)")),
        ("events.ndjson", 10, ("data", "data file (*.ndjson)")),
        ("big.json", 100_001, ("data", "data file (JSON over 100,000 bytes)")),
        ("tsconfig.json", 100_000, None),
        ("notes.md", 10_000_000, None),
    ],
)
def test_skipped_kind(rel: str, size: int, expected: tuple[str, str] | None) -> None:
    assert skipped_kind(rel, size) == expected


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"var a=1;" * 1000, "minified (average line over 500 characters)"),
        ((b"x" * 2000 + b"\n") * 4, "minified (average line over 500 characters)"),
        (b"const a = 1;\n" * 1000, None),
        ((b"x" * 400 + b"\n") * 20, None),
        (b"var a=1;" * 200, None),  # under 2 KiB: a one-liner, left alone
        (b"", None),
    ],
)
def test_minified_reason(head: bytes, expected: str | None) -> None:
    assert minified_reason(head) == expected


@pytest.mark.parametrize(
    ("rel", "prose"),
    [
        ("README.md", True),
        ("docs/guide.rst", True),
        ("notes/TODO", True),
        ("papers/a.PDF", True),
        ("src/mux.go", False),
        ("lib/index.d.ts", False),
        (".github/workflows/ci.yml", False),
        (".bashrc", True),
        ("man/man1/pyenv.1", True),  # a manual page, whatever its section's extension
        ("share/man/man8/sshd.8", True),
        ("doc/man/git-log.1", True),
        ("lib/version.1", False),  # such an extension outside a man folder
    ],
)
def test_documents_are_told_from_code_by_extension(rel: str, prose: bool) -> None:
    assert is_prose(rel) is prose
