"""What kind of file a name or its first bytes say it is.

:data:`BINARY_EXTENSIONS` are never read; :data:`DOCUMENT_EXTENSIONS` (PDF, DOCX) have their text
extracted; :func:`is_prose` tells documents from code; :func:`is_binary_content` is the NUL-byte
sniff every reader applies to the bytes.
:func:`skipped_kind` and :func:`minified_reason` name the text files nobody searches by meaning
(lockfiles, minified code, source maps, data files), left out unless their kind is opted in.
"""

from __future__ import annotations

import functools
import re

from semsearch.files.extract import has_text_bom

# The original tool's list, without the directory-only .framework/.xcarchive and with .dSYM
# lower-cased (the comparison is on lower-cased extensions, so .dSYM never matched).
_SEED_BINARY_EXTENSIONS = """
.png .jpg .jpeg .gif .bmp .ico .icns .tiff .webp .avif .heic .psd .ai .sketch .fig .mp3 .wav
.flac .ogg .m4a .aac .mp4 .mov .avi .mkv .webm .zip .gz .tgz .bz2 .xz .7z .rar .tar .jar .war
.aar .apk .aab .ipa .dmg .iso .deb .rpm .pkg .crx .whl .egg .so .dylib .dll .exe .o .a .lib
.class .pyc .pyo .wasm .node .bin .dsym .woff .woff2 .ttf .otf .eot .db .sqlite .sqlite3 .mdb
.realm .pack .idx .onnx .pt .pth .h5 .pb .tflite .mlmodel .safetensors .parquet .arrow .lance
.keystore .jks .p12 .pfx .cer .der .mobileprovision
"""
# Other formats that never hold searchable text (office formats other than .docx included).
_MORE_BINARY_EXTENSIONS = """
.tif .heif .m4v .wmv .flv .mpg .mpeg .opus .wma .aiff .zst .lz4 .lzma .cab .msi .pyd .obj .ttc
.npy .npz .pkl .pickle .ckpt .gguf .feather .epub .doc .xls .xlsx .ppt .pptx .odt .ods .odp
.swf .blend .glb .db-wal .db-shm .sqlite-wal .sqlite-shm
"""

BINARY_EXTENSIONS: frozenset[str] = frozenset(
    (_SEED_BINARY_EXTENSIONS + _MORE_BINARY_EXTENSIONS).split()
)
"""Lower-case extensions (with the dot) of files that are never read. ``.pdf``/``.docx`` are not
in it: their text is extracted."""

DOCUMENT_EXTENSIONS: frozenset[str] = frozenset({".pdf", ".docx"})
"""Documents whose text is extracted; they get
:attr:`~semsearch.files.ignore.IgnoreSettings.max_document_size`."""

_SNIFF_BYTES = 4096

_LOCKFILES = """
package-lock.json npm-shrinkwrap.json yarn.lock pnpm-lock.yaml bun.lock bun.lockb Cargo.lock
poetry.lock uv.lock pdm.lock Pipfile.lock go.sum composer.lock Gemfile.lock Podfile.lock
mix.lock pubspec.lock flake.lock packages.lock.json Package.resolved gradle.lockfile
"""
LOCKFILE_NAMES: frozenset[str] = frozenset(_LOCKFILES.split())
"""File names of dependency lockfiles (machine-written pins, kind "lockfile")."""

DATA_EXTENSIONS: frozenset[str] = frozenset({".csv", ".tsv", ".jsonl", ".ndjson"})
"""Extensions of tabular or line-per-record data files (kind "data")."""

LARGE_JSON_BYTES = 100_000
"""A ``.json`` file larger than this is data, not configuration (kind "data")."""

MINIFIED_EXTENSIONS: frozenset[str] = frozenset({".js", ".mjs", ".cjs", ".css"})
"""Extensions whose head is sniffed for minified content (:func:`minified_reason`)."""

MINIFIED_LINE_CHARS = 500
"""An average line longer than this (over the head) means minified or generated code."""

MINIFIED_SNIFF_BYTES = 8192
_MINIFIED_MIN_BYTES = 2048  # a short one-liner is harmless; don't second-guess it


def skipped_kind(rel: str, size: int, extension: str | None = None) -> tuple[str, str] | None:
    """The kind and the reason for a file left out by its name (and size), or None.

    Kinds: "lockfile", "minified" (``*.min.js``/``*.min.css``), "sourcemap" (``*.map``) and
    "data" (``.csv``, ``.tsv``, ``.jsonl``, ``.ndjson``, and ``.json`` over
    :data:`LARGE_JSON_BYTES`). Minified code without ``.min`` in its name is caught by
    :func:`minified_reason` on its content.
    """
    name = rel[rel.rfind("/") + 1 :]
    lower = name.lower()
    ext = extension_of(lower) if extension is None else extension
    if name in LOCKFILE_NAMES:
        return "lockfile", "lockfile"
    if lower.endswith((".min.js", ".min.mjs", ".min.cjs", ".min.css")):
        return "minified", f"minified (*.min{ext})"
    if ext == ".map":
        return "sourcemap", "source map"
    if ext in DATA_EXTENSIONS:
        return "data", f"data file (*{ext})"
    if ext == ".json" and size > LARGE_JSON_BYTES:
        return "data", f"data file (JSON over {LARGE_JSON_BYTES:,} bytes)"
    return None


def minified_reason(head: bytes) -> str | None:
    """Why a file whose first bytes are ``head`` looks minified (long lines), or None.

    Only the first :data:`MINIFIED_SNIFF_BYTES` count; a file shorter than 2 KiB never does.
    """
    sample = head[:MINIFIED_SNIFF_BYTES]
    if len(sample) < _MINIFIED_MIN_BYTES:
        return None
    lines = sample.count(b"\n") + (0 if sample.endswith(b"\n") else 1)
    average = len(sample) // lines
    if average <= MINIFIED_LINE_CHARS:
        return None
    return f"minified (average line over {MINIFIED_LINE_CHARS} characters)"


def extension_of(name: str) -> str:
    """The lower-cased extension of ``name`` with its dot ("" when it has none), as
    ``os.path.splitext`` finds it (leading dots start no extension) in half its time: the
    listing asks for it several times for each file of a tree."""
    name = name[name.rfind("/") + 1 :]
    dot = name.rfind(".")
    if dot <= 0 or not name[:dot].strip("."):
        return ""
    return name[dot:].lower()


def is_document(name: str) -> bool:
    """True for names ending in .pdf or .docx (any case)."""
    return is_document_extension(extension_of(name))


def is_document_extension(extension: str) -> bool:
    """True for the extensions (as :func:`extension_of` gives them) of documents."""
    return extension in DOCUMENT_EXTENSIONS


# Prose, not code: chunked with the document sizes, and searched without a path term.
PROSE_EXTENSIONS = DOCUMENT_EXTENSIONS | frozenset(
    {".md", ".markdown", ".mdx", ".txt", ".text", ".rst", ".adoc", ".asciidoc", ".org", ".tex"}
    | {".html", ".htm", ".rtf"}
)


# A manual page (`man/man1/pyenv.1`): troff prose, whatever its section's extension.
MAN_PAGE = re.compile(r"(^|/)man[1-9]?/[^/]+\.[1-9][a-z]*$", re.IGNORECASE)


@functools.lru_cache(maxsize=65_536)
def is_prose(rel: str) -> bool:
    """True for documents (Markdown, plain text, PDF…), manual pages and files without an
    extension."""
    extension = extension_of(rel.rsplit("/", 1)[-1])
    return not extension or extension in PROSE_EXTENSIONS or bool(MAN_PAGE.search(rel))


def looks_binary(head: bytes) -> bool:
    """True when the first 4096 bytes hold a NUL byte."""
    return b"\0" in head[:_SNIFF_BYTES]


def is_binary_content(rel: str, data: bytes) -> bool:
    """The one rule for binary content, shared by the indexer, grep and cat_file.

    A NUL byte in the first 4 KiB means binary, except for PDF/DOCX (extracted, not read as
    text) and for text with a byte-order mark (UTF-16 is full of NUL bytes).
    """
    return not is_document(rel) and not has_text_bom(data[:4]) and looks_binary(data)
