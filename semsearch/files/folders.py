"""A folder by name or path: the one resolver behind ``remove``, ``search --folder`` and the
MCP tools' ``folder`` and ``root`` arguments.

A target holding a path separator (``docs/``, ``./docs``, ``/srv/docs``), or ``.``, ``..`` or
``~…``, is a path: resolved with realpath against the working directory, it matches the folder
with that real path (so a trailing slash or a symlink to the folder works). Any other target is a
folder name: it matches the folders whose last path component it is. A name shared by several
folders is ambiguous and refused with their paths; an unknown name or path is refused with the
folders there are. Both are :class:`UsageError` (exit 2 in the CLI, a tool error over MCP).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from semsearch.config import is_inside, roots_holding
from semsearch.errors import PathRefusedError, UsageError


@dataclass(frozen=True)
class FolderInfo:
    """A configured or indexed folder: where it is, whether it is configured, its index counts."""

    name: str
    path: Path
    is_configured: bool
    files: int = 0
    chunks: int = 0
    last_indexed: float | None = None
    pending: int = 0  # chunks still waiting for their vector
    commit: str | None = None  # the git commit its last complete index run read, if any


def is_folder_name(target: str) -> bool:
    """True when ``target`` is a bare folder name rather than a path."""
    has_separator = os.sep in target or bool(os.altsep and os.altsep in target)
    return not (has_separator or target in (".", "..") or target.startswith("~"))


def configured_folders(roots: Sequence[Path]) -> list[FolderInfo]:
    """The configured folders (``Settings.roots``) as :class:`FolderInfo`, without counts."""
    return [FolderInfo(root.name, root, True) for root in roots]


def resolve_folder(
    target: str | Path, folders: Sequence[FolderInfo], cwd: Path | None = None
) -> FolderInfo:
    """The one folder of ``folders`` that ``target`` names (see the module docstring).

    Relative paths resolve against ``cwd`` (default: the working directory). Raises
    :class:`UsageError` when a name is ambiguous or nothing matches.
    """
    raw = os.fspath(target)
    if not raw:
        raise UsageError("The folder is empty: give a folder name or path.")
    if is_folder_name(raw):
        return _named(raw, folders)
    real = _real(raw, cwd)
    for folder in folders:
        if os.path.realpath(folder.path) == real:
            return folder
    raise UsageError(f"No folder at {real}. {_listing(folders)}")


def select_folders(roots: Sequence[Path], target: str | None) -> list[Path]:
    """The configured folder ``target`` names, or all of them when it is None or empty."""
    if not roots:
        raise UsageError("No folders configured. Add one with `semsearch add PATH` in a terminal.")
    return [resolve_folder(target, configured_folders(roots)).path] if target else list(roots)


def holding_folder(target: str, roots: Sequence[Path], cwd: Path | None = None) -> Path:
    """The configured folder ``target`` names, or the innermost one holding the path ``target``.

    A name resolves as in :func:`resolve_folder` (ambiguous: :class:`UsageError`); a path or name
    outside every configured folder raises :class:`PathRefusedError`, as nothing may be added.
    """
    if is_folder_name(target):
        if target and any(root.name == target for root in roots):
            return _named(target, configured_folders(roots)).path
    else:
        owners = roots_holding(roots, _real(target, cwd))
        if owners:
            return owners[0]
    raise PathRefusedError(
        f"Refused: {target} is not a configured folder or inside one; the index tool only "
        f"updates configured folders. To add it, run `semsearch add {target}` in a terminal."
    )


def check_move(old: Path, new: Path, folders: Sequence[FolderInfo]) -> None:
    """Refuse (:class:`UsageError`) to move the folder ``old`` to ``new`` unless ``new`` is a
    directory that is no other folder, lies in none and holds none: no file is indexed twice."""
    if not new.is_dir():
        raise UsageError(
            f"Cannot move {old} to {new}: no such directory. Move or copy the files there "
            "first, then run this again."
        )
    if os.path.realpath(new) == os.path.realpath(old):
        raise UsageError(f"{old} is already the folder at {new}: nothing to move.")
    for other in [folder.path for folder in folders]:
        if is_inside(new, other) and other != old:
            raise UsageError(
                f"Refused: {new} is inside {other}, which already covers it. "
                f"Remove that folder first (`semsearch remove {other}`)."
            )
        if is_inside(other, new) and other == old:
            raise UsageError(
                f"Refused: {new} holds {old}. To index {old} as part of {new}, run "
                f"`semsearch add {new}` (it takes {old} over without re-embedding)."
            )
        if is_inside(other, new):
            raise UsageError(
                f"Refused: {new} holds the folder {other}; moving {old} there would index "
                f"{other}'s files twice. Remove it first (`semsearch remove {other}`)."
            )
    if is_inside(new, old):
        raise UsageError(f"Refused: {new} is inside {old}; a folder cannot move into itself.")


def check_not_nested(root: Path, roots: Sequence[Path]) -> None:
    """Refuse (:class:`UsageError`) to index a folder holding a configured one (``roots``):
    its files would be indexed twice."""
    inner = next((r for r in roots if is_inside(r, root)), None)
    if inner is None:
        return
    if root in roots:
        raise UsageError(
            f"Configured folders overlap: {inner} is inside {root}. Run `semsearch add "
            f"{root}` to merge it into {root} (its index moves over, nothing is re-embedded)."
        )
    raise UsageError(
        f"{root} holds the configured folder {inner}. Add it with `semsearch add {root}` "
        f"(it takes {inner} over without re-embedding), or index {inner} itself."
    )


def looks_moved(rels: Sequence[str], target: Path, sample: int = 200) -> bool:
    """True when most of a folder's indexed rel paths (``sample`` of them, evenly spread) are
    files under ``target``: the folder seems to have moved there."""
    ordered = sorted(rels)
    chosen = ordered[:: max(1, len(ordered) // sample)][:sample]
    found = sum(1 for rel in chosen if (target / rel).is_file())
    return bool(chosen) and 2 * found > len(chosen)


def _real(raw: str, cwd: Path | None) -> str:
    if "\x00" in raw:  # no path holds one; os.path.realpath would raise ValueError
        raise UsageError(f"No folder at {raw!r}: a path cannot hold a NUL character.")
    return os.path.realpath((cwd or Path.cwd()) / os.path.expanduser(raw))


def _named(name: str, folders: Sequence[FolderInfo]) -> FolderInfo:
    matches = [folder for folder in folders if folder.path.name == name]
    if len(matches) > 1:
        paths = ", ".join(str(folder.path) for folder in matches)
        raise UsageError(
            f"The folder name {name!r} is ambiguous: {len(matches)} folders have it ({paths}). "
            "Pass the folder's path instead."
        )
    if not matches:
        raise UsageError(f"No folder named {name!r}. {_listing(folders)}")
    return matches[0]


def _listing(folders: Sequence[FolderInfo]) -> str:
    """The folders a target may name: configured ones, then those only in the index."""
    configured = [folder.name for folder in folders if folder.is_configured]
    indexed = [folder.name for folder in folders if not folder.is_configured]
    text = "No folders are configured: add one with `semsearch add PATH`."
    if configured:
        text = f"Configured folders: {', '.join(configured)}."
    return text + (f" Indexed folders: {', '.join(indexed)}." if indexed else "")
