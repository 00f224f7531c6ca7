"""The optional LanceDB index: a folder of Lance tables, for indexes that outgrow one file."""

from __future__ import annotations

from pathlib import Path


def is_index_folder(path: Path) -> bool:
    """Whether an index is at ``path``: a folder holding a table (an empty one is none yet).

    Needs no lancedb, so that a missing index is told from a damaged one without it.
    """
    return path.is_dir() and any(path.glob("*.lance"))
