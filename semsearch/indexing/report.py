"""What :class:`~semsearch.index.Index` reports: an index run, the index's status, a move."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from semsearch.config import Location
from semsearch.files.folders import FolderInfo
from semsearch.indexing.pipeline import FolderReport
from semsearch.model.catalog import model_family
from semsearch.store.base import IndexCheck


@dataclass(frozen=True)
class IndexReport:
    """What an index run did, per folder and in total."""

    folders: tuple[FolderReport, ...]
    seconds: float
    chunks_embedded: int = 0  # texts the model embedded (vectors reused or shared not counted)
    chunks_pending: int = 0  # chunks still without a vector after the run
    paths_embedded: int = 0  # rel paths of code files the model embedded (the path term)
    model: str = ""  # the id of the model the index's vectors come from after the run
    replaced_model: str = ""  # the model whose vectors this run replaced (another was chosen)
    # the model whose index this run built beside the index and did not finish (SQLite): the
    # index keeps ``model`` until a run finishes it; ``chunks_pending`` are the next index's
    next_model: str = ""

    @property
    def model_name(self) -> str:
        """The name ``--model`` takes for ``model`` (its builds named as one)."""
        return model_family(self.model)

    @property
    def failed(self) -> bool:
        """True when a folder could not be indexed at all, or a file had an error."""
        return any(f.failed or f.problems for f in self.folders)

    @property
    def has_changes(self) -> bool:
        """True when the run changed the index (files indexed or deleted, vectors made) or
        something failed; False for a run that found everything as it was."""
        made = self.chunks_embedded or self.paths_embedded
        return bool(made) or self.failed or any(f.indexed or f.deleted for f in self.folders)

    def total(self, field_name: str) -> int:
        """Sum of one counter over folders."""
        return sum(int(getattr(folder, field_name)) for folder in self.folders)

    def as_json(self) -> dict[str, Any]:
        """Machine-readable summary (``index --json`` and the MCP ``index`` tool)."""
        return {
            "filesIndexed": self.total("indexed"),
            "filesUnchanged": self.total("unchanged"),
            "filesSkipped": self.total("skipped"),
            "filesDeleted": self.total("deleted"),
            "chunksWritten": self.total("chunks"),
            "chunksEmbedded": self.chunks_embedded,
            "chunksPending": self.chunks_pending,
            "pathsEmbedded": self.paths_embedded,
            "model": self.model,
            "replacedModel": self.replaced_model or None,
            "nextModel": self.next_model or None,
            "errors": sum(len(f.problems) for f in self.folders),
            "truncated": any(f.truncated for f in self.folders),
            "seconds": round(self.seconds, 3),
            "folders": [
                {
                    "path": f.path,
                    "name": f.name,
                    "mode": f.mode,
                    "failed": f.failed,
                    "indexed": f.indexed,
                    "unchanged": f.unchanged,
                    "skipped": f.skipped,
                    "deleted": f.deleted,
                    "chunks": f.chunks,
                    "truncated": f.truncated,
                    "problems": [{"path": p.path, "reason": p.reason} for p in f.problems],
                    "warnings": list(f.warnings),
                }
                for f in self.folders
            ],
        }


@dataclass(frozen=True)
class FolderStatus:
    """One folder of :meth:`Index.status`: its index counts and how its files stand now.

    ``skipped`` and ``errors`` count as an index run does (see :class:`FolderPlan`); with
    ``count_changes=False`` they and ``changed`` are 0.
    """

    info: FolderInfo
    is_indexed: bool  # in the index (an index run has started on it)
    changed: int = 0  # files new, changed or gone since the last run
    skipped: int = 0
    errors: int = 0

    def as_json(self) -> dict[str, Any]:
        """One folder of ``status --json``."""
        info = self.info
        return {
            "name": info.name,
            "path": str(info.path),
            "exists": info.path.is_dir(),
            "configured": info.is_configured,
            "indexed": self.is_indexed,
            "files": info.files,
            "skipped": self.skipped,
            "errors": self.errors,
            "chunks": info.chunks,
            "chunksPending": info.pending,
            "lastIndexed": utc_stamp(info.last_indexed),
            "commit": info.commit,
            "changed": self.changed,
        }


@dataclass(frozen=True)
class Status:
    """The index at a glance; ``folders`` are the configured ones, then those only indexed."""

    index_path: Location
    exists: bool
    size_bytes: int
    model: tuple[str, int] | None
    folders: tuple[FolderStatus, ...]
    chunks_pending: int = 0  # chunks searchable by words but still waiting for their vector
    next_model: str | None = None  # a change of model a run left unfinished beside the index
    next_size_bytes: int = 0  # the next model's index, on disk beside the index

    @property
    def files(self) -> int:
        """Indexed files with chunks."""
        return sum(f.info.files for f in self.folders)

    @property
    def chunks(self) -> int:
        """Stored chunks."""
        return sum(f.info.chunks for f in self.folders)

    @property
    def skipped(self) -> int:
        """Files left out, as the last index run counted them."""
        return sum(f.skipped for f in self.folders)

    @property
    def errors(self) -> int:
        """Files or folders that failed, as the last index run counted them."""
        return sum(f.errors for f in self.folders)

    def as_json(self) -> dict[str, Any]:
        """Machine-readable status (``status --json``)."""
        model = None if self.model is None else {"id": self.model[0], "dim": self.model[1]}
        return {
            "indexPath": str(self.index_path),
            "indexExists": self.exists,
            "sizeBytes": self.size_bytes,
            "model": model,
            "nextModel": self.next_model,
            "nextSizeBytes": self.next_size_bytes,
            "files": self.files,
            "skipped": self.skipped,
            "errors": self.errors,
            "chunks": self.chunks,
            "chunksPending": self.chunks_pending,
            "folders": [folder.as_json() for folder in self.folders],
        }


def utc_stamp(seconds: float | None) -> str | None:
    """A time as ISO 8601 in UTC to the second, e.g. ``2026-12-01T08:54:03+00:00``; None for
    none."""
    if not seconds:
        return None
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class MoveReport:
    """What :meth:`Index.move` did."""

    old: Path
    new: Path
    files: int  # indexed files that now belong to ``new``, kept without re-embedding
    is_configured: bool  # ``new`` is in the config now
    was_rewritten: bool  # ``old`` was configured and its entry became ``new``


@dataclass(frozen=True)
class RebuildReport:
    """What ``index --rebuild`` did: where the old index went (its file and companions, or
    folder; empty when there was none), what its check found, and the run that made the new one.
    """

    kept: tuple[Path, ...]
    check: IndexCheck | None
    run: IndexReport
