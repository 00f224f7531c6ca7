"""Tests for semsearch.files.extract: decoding text files and extracting PDF/DOCX text."""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import pytest

from semsearch.errors import ExtractError
from semsearch.files.extract import Extracted, decode_text, extract, has_text_bom, page_at
from tests.docgen import write_docx, write_pdf


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"plain ascii", "plain ascii"),
        ("héllo wörld ☃ 日本".encode(), "héllo wörld ☃ 日本"),
        (b"\xef\xbb\xbfwith bom", "with bom"),
        (b"a\r\nb\r\nc", "a\nb\nc"),
        (b"a\rb\rc", "a\nb\nc"),
        (b"a\r\n\r\nb\rc\n", "a\n\nb\nc\n"),
        (b"caf\xe9", "café"),  # latin-1
        (b"\x93quoted\x94 \x80", "\u201cquoted\u201d €"),  # cp1252 punctuation
        (b"undefined \x81 byte", "undefined \x81 byte"),  # not in cp1252: latin-1
        ("café".encode() + b" \xff bad", "café \ufffd bad"),  # UTF-8 with a bad byte
        (b"\xe9\xe9 mixed " + "ü".encode(), "\ufffd\ufffd mixed ü"),
        (b"\xff\xfe" + "utf16 ☃ é".encode("utf-16-le"), "utf16 ☃ é"),
        (b"\xfe\xff" + "big \r\nend".encode("utf-16-be"), "big \nend"),
        (b"", ""),
    ],
)
def test_decode_text(data: bytes, expected: str) -> None:
    assert decode_text(data) == expected


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"\xff\xfeh\x00i\x00", True),
        (b"\xfe\xff\x00h\x00i", True),
        (b"\xef\xbb\xbfhi", True),
        (b"hi", False),
        (b"\x00\xff\xfe", False),
        (b"", False),
    ],
)
def test_has_text_bom(head: bytes, expected: bool) -> None:
    assert has_text_bom(head) is expected


@pytest.mark.parametrize(
    ("pages", "offset", "expected"),
    [
        ((), 0, None),
        ((0,), 0, 1),
        ((0,), 500, 1),
        ((0, 10, 20), 0, 1),
        ((0, 10, 20), 9, 1),
        ((0, 10, 20), 10, 2),
        ((0, 10, 20), 25, 3),
        ((0, 10, 20), -5, 1),
    ],
)
def test_page_at(pages: tuple[int, ...], offset: int, expected: int | None) -> None:
    assert page_at(pages, offset) == expected


def test_extract_plain_text_by_default() -> None:
    assert extract("notes.md", b"\xef\xbb\xbfa\r\nb") == Extracted("a\nb", (), "text")


def test_extract_pdf_pages(tmp_path: Path) -> None:
    path = tmp_path / "two.pdf"
    write_pdf(path, ["Alpha first page\nsecond line (with parens)", "Bravo second page café"])
    result = extract("two.PDF", path.read_bytes())
    assert result.kind == "pdf"
    assert len(result.pages) == 2
    assert result.text.count("\n\n") == 1  # the page boundary is a paragraph boundary
    for word, page in [("Alpha", 1), ("parens", 1), ("Bravo", 2), ("café", 2)]:
        assert page_at(result.pages, result.text.index(word)) == page


def test_extract_pdf_quiet_on_stderr(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "one.pdf"
    write_pdf(path, ["only page"])
    broken = path.read_bytes().replace(b"startxref\n", b"startxref\n9")  # wrong xref offset
    assert "only page" in extract("one.pdf", broken).text
    assert capfd.readouterr() == ("", "")


def test_extract_docx_blocks_in_document_order(tmp_path: Path) -> None:
    path = tmp_path / "doc.docx"
    table = [["Name", "Role"], ["Ada", "Engineer"]]
    write_docx(path, ["Intro paragraph", "", "Before table", "After table"], table, table_after=3)
    result = extract("doc.docx", path.read_bytes())
    expected = "Intro paragraph\n\nBefore table\n\nName | Role\nAda | Engineer\n\nAfter table"
    assert result == Extracted(expected, (), "docx")


def _zip_without_document() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "not a word document")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("bad.pdf", b"this is not a pdf"),
        ("bad.pdf", b""),
        ("bad.pdf", b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\n"),
        ("bad.docx", b"PK\x03\x04 truncated zip"),
        ("bad.docx", b""),
        ("bad.docx", _zip_without_document()),
    ],
)
def test_extract_malformed_documents_raise(name: str, data: bytes) -> None:
    with pytest.raises(ExtractError, match=f"^{re.escape(name)}: cannot read"):
        extract(name, data)


def test_extract_encrypted_pdf_raises(tmp_path: Path) -> None:
    pypdf = pytest.importorskip("pypdf")
    plain = tmp_path / "plain.pdf"
    write_pdf(plain, ["secret words"])
    writer = pypdf.PdfWriter(clone_from=str(plain))
    writer.encrypt(user_password="pw", algorithm="RC4-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    with pytest.raises(ExtractError, match="encrypted"):
        extract("locked.pdf", buffer.getvalue())
