"""Tests for semsearch.filetype: the binary-extension table, documents and the NUL sniff."""

from __future__ import annotations

import pytest

from semsearch.filetype import BINARY_EXTENSIONS, is_binary_content, is_document, looks_binary


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
