"""Turning a file's bytes into text.

Plain files are decoded by :func:`decode_text` (UTF-8, UTF-16 with a BOM, else Windows-1252 for
legacy 8-bit files). PDFs (pypdf) and DOCX files (python-docx) have their text extracted; those
libraries are imported only when such a file is met. All text comes out with "\\n" line ends.
"""

from __future__ import annotations

import bisect
import io
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from semsearch.errors import ExtractError

if TYPE_CHECKING:
    from docx.document import Document as DocxDocument
    from docx.table import Table

_UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = {b"\xff\xfe": "utf-16-le", b"\xfe\xff": "utf-16-be"}
_PAGE_SEPARATOR = "\n\n"

# One complete, well-formed multi-byte UTF-8 sequence (no overlongs, no surrogates).
_UTF8_MULTIBYTE = re.compile(
    rb"[\xc2-\xdf][\x80-\xbf]"
    rb"|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]"
    rb"|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2}"
)


def _cp1252_table() -> dict[int, str]:
    """Map latin-1-decoded code points 0x80-0x9F to their Windows-1252 characters."""
    table: dict[int, str] = {}
    for byte in range(0x80, 0xA0):
        try:
            table[byte] = bytes([byte]).decode("cp1252")
        except UnicodeDecodeError:
            continue  # undefined in cp1252 (0x81, 0x8D, ...): keep the latin-1 control char
    return table


_CP1252_FROM_LATIN1 = _cp1252_table()


@dataclass(frozen=True)
class Extracted:
    """The text of one file.

    ``pages`` holds, for a PDF, the offset in ``text`` where each page starts (page 1 first);
    it is empty for other kinds. ``kind`` is "text", "pdf" or "docx".
    """

    text: str
    pages: tuple[int, ...]
    kind: str


def has_text_bom(head: bytes) -> bool:
    """True when ``head`` starts with a UTF-8 or UTF-16 byte order mark.

    UTF-16 text is full of NUL bytes, so callers skip the NUL binary sniff for such files.
    """
    return head.startswith(_UTF8_BOM) or head[:2] in _UTF16_BOMS


def decode_text(data: bytes) -> str:
    """Decode a text file's bytes; never fails.

    A BOM decides when present (UTF-8, UTF-16 LE/BE) and is dropped. Otherwise strict UTF-8 is
    tried; bytes that fail it and hold no valid multi-byte UTF-8 sequence at all are taken as
    Windows-1252 (latin-1 for its undefined bytes), anything else is UTF-8 with U+FFFD for the
    bad bytes. CRLF and lone CR become LF.
    """
    return _normalise_newlines(_decode(data))


def _decode(data: bytes) -> str:
    if data.startswith(_UTF8_BOM):
        return data[len(_UTF8_BOM) :].decode("utf-8", errors="replace")
    encoding = _UTF16_BOMS.get(data[:2])
    if encoding is not None:
        return data[2:].decode(encoding, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if _UTF8_MULTIBYTE.search(data) is None:
        return data.decode("latin-1").translate(_CP1252_FROM_LATIN1)
    return data.decode("utf-8", errors="replace")


def _normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def page_at(pages: tuple[int, ...], offset: int) -> int | None:
    """The 1-based page holding ``offset`` (see :attr:`Extracted.pages`); None without pages."""
    if not pages:
        return None
    return max(1, bisect.bisect_right(pages, offset))


def extract(name: str, data: bytes) -> Extracted:
    """Turn a file's bytes into text, choosing by the extension of ``name``.

    Raises :class:`~semsearch.errors.ExtractError` ("<name>: <reason>") for a PDF or DOCX that
    cannot be read (malformed, encrypted with a password). Plain text never fails.
    """
    lowered = name.lower()
    if lowered.endswith(".pdf"):
        return _extract_pdf(name, data)
    if lowered.endswith(".docx"):
        return _extract_docx(name, data)
    return Extracted(decode_text(data), (), "text")


def _extract_pdf(name: str, data: bytes) -> Extracted:
    """Text of each page joined by a blank line, with each page's start offset."""
    # heavy optional import: only when a PDF is met
    import pypdf

    # pypdf logs a warning for every robustness fix it applies; that is noise for us.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise ExtractError(f"{name}: the PDF is encrypted with a password; cannot read it")
        texts = [_normalise_newlines(page.extract_text()) for page in reader.pages]
    except ExtractError:
        raise
    except Exception as exc:  # pypdf raises many unrelated types on malformed input
        raise ExtractError(f"{name}: cannot read the PDF ({_describe(exc)})") from exc
    starts: list[int] = []
    offset = 0
    for text in texts:
        starts.append(offset)
        offset += len(text) + len(_PAGE_SEPARATOR)
    return Extracted(_PAGE_SEPARATOR.join(texts), tuple(starts), "pdf")


def _extract_docx(name: str, data: bytes) -> Extracted:
    """Paragraphs and tables in document order, separated by blank lines."""
    # heavy optional import: only when a DOCX is met
    import docx

    try:
        document = docx.Document(io.BytesIO(data))
        blocks = [block for block in _docx_blocks(document) if block.strip()]
    except Exception as exc:  # zipfile, lxml, KeyError, ValueError... on malformed input
        raise ExtractError(f"{name}: cannot read the DOCX ({_describe(exc)})") from exc
    return Extracted(_normalise_newlines("\n\n".join(blocks)), (), "docx")


def _docx_blocks(document: DocxDocument) -> Iterator[str]:
    """One string per body paragraph or table, in document order."""
    # heavy optional import: only when a DOCX is met
    from docx.text.paragraph import Paragraph

    for block in document.iter_inner_content():
        if isinstance(block, Paragraph):
            yield block.text
        else:
            yield _table_text(block)


def _table_text(table: Table) -> str:
    """One line per row, cells joined by " | " (a merged cell counted once)."""
    lines = []
    for row in table.rows:
        cells = []
        previous = None
        for cell in row.cells:
            if cell._tc is previous:  # python-docx repeats a horizontally merged cell
                continue
            previous = cell._tc
            cells.append(" ".join(cell.text.split("\n")))
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def _describe(exc: Exception) -> str:
    message = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {message[0]}" if message else type(exc).__name__
