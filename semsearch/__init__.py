"""semsearch: local semantic search over your files, in one SQLite index.

The library's public names live here: ``semsearch.Index(semsearch.load_settings(os.environ))``
indexes the configured folders and searches them. They load on first use (PEP 562), so
``import semsearch`` and ``semsearch --help`` import no numpy, onnxruntime or MCP SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "Copy",
    "Embedder",
    "ExtractError",
    "FileEvent",
    "FolderInfo",
    "FolderPlan",
    "FolderReport",
    "FolderStatus",
    "HashEmbedder",
    "Hit",
    "Index",
    "IndexMissingError",
    "IndexReport",
    "Listing",
    "LockedError",
    "ModelError",
    "ModelMismatchError",
    "NoMatchingFilesError",
    "OnnxEmbedder",
    "PathRefusedError",
    "SemsearchError",
    "Settings",
    "Status",
    "StoreError",
    "UsageError",
    "configure_process",
    "load_settings",
    "model_rows",
    "resolve_folder",
]

_ERRORS = (
    "SemsearchError",
    "ConfigError",
    "UsageError",
    "ModelError",
    "ModelMismatchError",
    "NoMatchingFilesError",
    "IndexMissingError",
    "StoreError",
    "LockedError",
    "ExtractError",
    "PathRefusedError",
)
_HOMES: dict[str, str] = {  # where each public name is defined
    "Index": "semsearch.index",
    "IndexReport": "semsearch.indexing.report",
    "Status": "semsearch.indexing.report",
    "FolderPlan": "semsearch.indexing.plan",
    "FolderStatus": "semsearch.indexing.report",
    "FolderReport": "semsearch.indexing.pipeline",
    "FileEvent": "semsearch.indexing.pipeline",
    "Listing": "semsearch.files.listing",
    "Hit": "semsearch.search.hits",
    "Copy": "semsearch.search.hits",
    "FolderInfo": "semsearch.files.folders",
    "resolve_folder": "semsearch.files.folders",
    "Settings": "semsearch.config",
    "load_settings": "semsearch.config",
    "Embedder": "semsearch.model.embedder",
    "OnnxEmbedder": "semsearch.model.embedder",
    "HashEmbedder": "semsearch.model.embedder",
    "configure_process": "semsearch.process",
    "model_rows": "semsearch.model.catalog",
    **dict.fromkeys(_ERRORS, "semsearch.errors"),
}

if TYPE_CHECKING:
    from semsearch.config import Settings, load_settings
    from semsearch.errors import (
        ConfigError,
        ExtractError,
        IndexMissingError,
        LockedError,
        ModelError,
        ModelMismatchError,
        NoMatchingFilesError,
        PathRefusedError,
        SemsearchError,
        StoreError,
        UsageError,
    )
    from semsearch.files.folders import FolderInfo, resolve_folder
    from semsearch.files.listing import Listing
    from semsearch.index import Index
    from semsearch.indexing.pipeline import FileEvent, FolderReport
    from semsearch.indexing.plan import FolderPlan
    from semsearch.indexing.report import FolderStatus, IndexReport, Status
    from semsearch.model.catalog import model_rows
    from semsearch.model.embedder import Embedder, HashEmbedder, OnnxEmbedder
    from semsearch.process import configure_process
    from semsearch.search.hits import Copy, Hit


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use, then keep the name here."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'semsearch' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, with the public ones not loaded yet."""
    return sorted({*globals(), *__all__})
