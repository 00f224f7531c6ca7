"""Write small but real PDF and DOCX files for tests.

The PDF is hand-written PDF 1.4 (one Helvetica text object per page, a correct xref table), so
no PDF-writing dependency is needed; the DOCX is made with python-docx.
"""

from __future__ import annotations

from pathlib import Path

import docx

_PAGE_TEMPLATE = (
    "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
    "/Resources << /Font << /F1 3 0 R >> >> /Contents {contents} 0 R >>"
)
_FONT = "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"


def write_pdf(path: Path, pages: list[str]) -> None:
    """Write a PDF with one page per item of ``pages``; "\\n" in a page's text starts a new line.

    Text is drawn in Helvetica with WinAnsi encoding, so it must be encodable as cp1252.
    """
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        _pages_object(len(pages)),
        _FONT.encode("ascii"),
    ]
    for number, text in enumerate(pages):
        page_id = 4 + 2 * number
        objects.append(_PAGE_TEMPLATE.format(contents=page_id + 1).encode("ascii"))
        objects.append(_stream(_content(text)))
    path.write_bytes(_assemble(objects))


def _pages_object(count: int) -> bytes:
    kids = " ".join(f"{4 + 2 * number} 0 R" for number in range(count))
    return f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode("ascii")


def _content(text: str) -> bytes:
    """A content stream drawing each line 16 points below the previous one."""
    parts = [b"BT /F1 12 Tf 16 TL 72 720 Td"]
    for index, line in enumerate(text.split("\n")):
        operator = b"Tj" if index == 0 else b"'"  # ' moves to the next line, then shows
        parts.append(b"(" + _escape(line) + b") " + operator)
    parts.append(b"ET")
    return b"\n".join(parts)


def _escape(line: str) -> bytes:
    raw = line.encode("cp1252")
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def _stream(content: bytes) -> bytes:
    return b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content)


def _assemble(objects: list[bytes]) -> bytes:
    """Number the objects from 1 and add the xref table and trailer with exact offsets."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref_at = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(objects) + 1)
    out += b"startxref\n%d\n%%%%EOF\n" % xref_at
    return bytes(out)


def write_docx(
    path: Path,
    paragraphs: list[str],
    table: list[list[str]] | None = None,
    *,
    table_after: int | None = None,
) -> None:
    """Write a DOCX holding ``paragraphs`` and, optionally, ``table`` (a list of rows).

    The table goes after the first ``table_after`` paragraphs (default: after all of them).
    """
    document = docx.Document()
    split = len(paragraphs) if table_after is None else table_after
    for text in paragraphs[:split]:
        document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=max(len(row) for row in table))
        for row_cells, row in zip(grid.rows, table, strict=True):
            for cell, text in zip(row_cells.cells, row, strict=False):
                cell.text = text
    for text in paragraphs[split:]:
        document.add_paragraph(text)
    document.save(str(path))
