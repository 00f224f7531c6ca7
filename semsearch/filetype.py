"""What kind of file a name or its first bytes say it is.

:data:`BINARY_EXTENSIONS` are never read; :data:`DOCUMENT_EXTENSIONS` (PDF, DOCX) have their text
extracted; :func:`is_binary_content` is the NUL-byte sniff every reader applies to the bytes.
"""

from __future__ import annotations

import os

from semsearch.extract import has_text_bom

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
:attr:`~semsearch.ignore.IgnoreSettings.max_document_size`."""

_SNIFF_BYTES = 4096


def extension_of(name: str) -> str:
    """The lower-cased extension of ``name`` with its dot ("" when it has none)."""
    return os.path.splitext(name)[1].lower()


def is_document(name: str) -> bool:
    """True for names ending in .pdf or .docx (any case)."""
    return extension_of(name) in DOCUMENT_EXTENSIONS


def looks_binary(head: bytes) -> bool:
    """True when the first 4096 bytes hold a NUL byte."""
    return b"\0" in head[:_SNIFF_BYTES]


def is_binary_content(rel: str, data: bytes) -> bool:
    """The one rule for binary content, shared by the indexer, grep and cat_file.

    A NUL byte in the first 4 KiB means binary, except for PDF/DOCX (extracted, not read as
    text) and for text with a byte-order mark (UTF-16 is full of NUL bytes).
    """
    return not is_document(rel) and not has_text_bom(data[:4]) and looks_binary(data)
