"""What an index run would do, without running it: the ``index --dry-run`` plan of a folder.

A file unchanged since the last run keeps its stored outcome; any other is read and its text
extracted as the run would, so the plan's counts agree with the run's.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from pathlib import Path

from semsearch.errors import ExtractError
from semsearch.files.access import read_failure, read_file_bytes
from semsearch.files.listing import FileEntry, Listing, Skip
from semsearch.indexing.pipeline import STORED_SKIP_REASONS, IndexerSettings, text_of
from semsearch.store import FileState


@dataclass(frozen=True)
class FolderPlan:
    """What an index run would do with one folder (``index --dry-run``).

    The counts agree with the run's: ``files`` are what would be searchable, ``skipped`` every
    path left out with its reason (by name, kind or size, or read and found without text), and
    ``errors`` what would fail.
    """

    root: Path
    mode: str
    files: tuple[FileEntry, ...]
    skipped: tuple[Skip, ...]
    errors: tuple[Skip, ...]
    warnings: tuple[str, ...]


def is_same(state: FileState, entry: FileEntry) -> bool:
    """True when a listed file has the mtime and size the index recorded (it is not read)."""
    return (state.mtime_ns, state.size) == (entry.mtime_ns, entry.size)


def preview(entry: FileEntry, settings: IndexerSettings) -> tuple[str, str] | None:
    """Why an index run would skip or fail on a file (("skipped"|"error", reason)), or None.

    The indexer's read step without the model: the same read, then :func:`indexer.text_of`;
    text that is only white space has no chunks, as the indexer finds when it chunks it.
    """
    try:
        data = read_file_bytes(entry, settings.ignore)
    except OSError as exc:
        return ("error", read_failure(exc))
    except ExtractError as exc:
        return ("error", str(exc))
    extracted, status, reason = text_of(entry.rel, data, settings.max_text_size)
    if status == "error":
        return ("error", reason)
    if extracted is None:
        return ("skipped", f"{status}: {reason}")
    if not extracted.text.strip():
        return ("skipped", "empty: no text")
    return None


def plan_folder(
    listing: Listing, states: dict[str, FileState], settings: IndexerSettings
) -> FolderPlan:
    """The plan of one listed folder, given the stored states of its files."""
    files: list[FileEntry] = []
    skipped, errors = list(listing.skipped), list(listing.errors)
    for entry in listing.files:
        state = states.get(entry.rel)
        if state is not None and state.status != "error" and is_same(state, entry):
            reason = STORED_SKIP_REASONS.get(state.status, state.status)
            outcome = None if state.status == "ok" else ("skipped", reason)
        else:
            outcome = preview(entry, settings)
        if outcome is None:
            files.append(entry)
        else:
            (skipped if outcome[0] == "skipped" else errors).append(Skip(entry.rel, outcome[1]))
    by_rel = operator.attrgetter("rel")
    return FolderPlan(
        listing.root,
        listing.mode,
        tuple(files),
        tuple(sorted(skipped, key=by_rel)),
        tuple(sorted(errors, key=by_rel)),
        listing.warnings,
    )
