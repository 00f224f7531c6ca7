"""Reading listed files safely, and confining reads to the configured folders.

:func:`read_file_bytes` reads a listed file without following a symlink at its name and never
past its size cap; :func:`read_text` adds the NUL sniff and the text decoding or PDF/DOCX
extraction, so every reader sees a file as the indexer does. :class:`Locator` decides whether a
path may be read: it must resolve (symlinks included) to a file under a configured folder, not
be a secret file (:func:`~semsearch.files.ignore.secret_reason`) and be in that folder's listing.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from semsearch.config import roots_holding
from semsearch.errors import ExtractError, PathRefusedError
from semsearch.files.extract import Extracted, extract
from semsearch.files.filetype import is_binary_content
from semsearch.files.ignore import (
    DEFAULT_SETTINGS,
    IgnoreSettings,
    secret_reason,
    size_cap,
    too_large_reason,
)
from semsearch.files.listing import FileEntry, Listing, list_files

_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)  # opening a FIFO must not wait for a writer
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def read_file_bytes(entry: FileEntry, settings: IgnoreSettings = DEFAULT_SETTINGS) -> bytes:
    """Read a listed file, at most its size cap, without following a symlink at its name.

    Raises :class:`~semsearch.errors.ExtractError` when the file is now a symlink or not a
    regular file (FIFO, socket, device: never read from), or is larger than its cap
    (:func:`~semsearch.files.ignore.size_cap`). Other failures to open or read it raise
    :class:`OSError` unchanged, e.g. :class:`FileNotFoundError` when it was deleted since it was
    listed.
    """
    cap = size_cap(entry.rel, settings)
    try:
        fd = os.open(entry.location, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ExtractError(f"{entry.rel}: is a symlink; not read") from exc
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ExtractError(f"{entry.rel}: not a regular file; not read")
        if info.st_size > cap:
            raise ExtractError(f"{entry.rel}: {too_large_reason(info.st_size, cap)}; not read")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(cap + 1)
    finally:
        os.close(fd)
    if len(data) > cap:
        raise ExtractError(f"{entry.rel}: grew past {cap:,} bytes while being read; not read")
    return data


def read_failure(exc: OSError) -> str:
    """Why a listed file could not be read, in a few words: "permission denied", ..."""
    return (exc.strerror or str(exc)).lower()


def read_text(entry: FileEntry, ignore: IgnoreSettings) -> Extracted:
    """A listed file's text, read as the indexer reads it (size cap, NUL sniff, extraction).

    Raises :class:`ExtractError` for binary content or an unreadable document and
    :class:`OSError` when the file cannot be opened.
    """
    data = read_file_bytes(entry, ignore)
    if is_binary_content(entry.rel, data):
        raise ExtractError(f"{entry.rel}: binary content (a NUL byte in the first 4 KiB)")
    return extract(entry.rel, data)


_ESCAPED_BYTE = re.compile(r"\\x([89a-f][0-9a-f])")


def unescaped_name(path: str) -> str:
    """``path``, or, when no file has that name and it holds ``\\xHH`` escapes of bytes 0x80
    and up (the MCP tools write a file name's bytes that are not UTF-8 so), the name with those
    bytes (as ``os.fsdecode`` gives them) when that exists."""
    if "\\x" not in path or os.path.lexists(path):
        return path
    unescaped = _ESCAPED_BYTE.sub(lambda found: chr(0xDC00 + int(found[1], 16)), path)
    return unescaped if os.path.lexists(unescaped) else path


@dataclass(frozen=True)
class Located:
    """A readable file: the configured folder it belongs to and its listing entry."""

    root: Path
    entry: FileEntry


class Locator:
    """Confines reads to the configured folders; listings are cached for its lifetime.

    Create one per request so every request sees the folders as they are now.
    """

    def __init__(self, roots: Sequence[Path], ignore: IgnoreSettings) -> None:
        self._roots = list(roots)
        self.ignore = ignore
        self._listings: dict[str, Listing] = {}

    def locate(self, path: str) -> Located:
        """The readable file at ``path``; raises :class:`PathRefusedError` saying why not.

        The path is resolved with ``os.path.realpath`` first, so ``..``, symlinks pointing out
        of a folder and sibling folders sharing a name prefix are all outside. Inside, the file
        must not be a secret file and must be in the folder's listing (not ignored, not binary
        by extension, not too large, not a skipped kind).
        """
        path = unescaped_name(os.path.expanduser(path))
        if not os.path.isabs(path):
            raise PathRefusedError(
                f"Refused: {path!r} is not an absolute path. Use the filePath returned by "
                "search, gather or grep."
            )
        if "\x00" in path:  # no file name holds one; os calls would raise ValueError
            raise PathRefusedError(
                f"Refused: {path!r} holds a NUL character, which no file name holds. Use the "
                "filePath returned by search, gather or grep."
            )
        real = os.path.realpath(path)
        owners = self._owners(real)
        if not owners:
            raise PathRefusedError(
                f"Refused: {path} is not inside any configured folder, and only their files "
                "can be read: list_folders (or `semsearch list`) shows them."
            )
        if not os.path.isfile(real):
            folder = self._unreadable_folder(owners, real)
            if folder is not None:
                raise PathRefusedError(
                    f"Cannot read {path}: semsearch cannot read the folder {folder} "
                    f"({self._reason(owners, real)}), so it skips that folder."
                )
            kind = "a folder, not a file" if os.path.isdir(real) else "not found"
            raise PathRefusedError(f"{path} is {kind}.")
        self._refuse_secret(path, real, owners)
        for root, real_root in owners:
            listing = self._listing(real_root)
            rel = Path(os.path.relpath(real, real_root)).as_posix()
            for entry in listing.files:
                if entry.rel == rel:
                    return Located(root, entry)
        raise PathRefusedError(
            f"Refused: {path} is excluded from indexing ({self._reason(owners, real)}), "
            "so it cannot be read through semsearch."
        )

    def _refuse_secret(self, path: str, real: str, owners: list[tuple[Path, str]]) -> None:
        """Refuse a secret file before any listing (in every mode, committed or not)."""
        for _, real_root in owners:
            reason = secret_reason(Path(os.path.relpath(real, real_root)).as_posix(), self.ignore)
            if reason is not None:
                raise PathRefusedError(
                    f"Refused: {path} is a {reason}; semsearch never reads secret files. "
                    "To read it anyway, add a pattern for it to `allowSecretPatterns` in the "
                    "config file."
                )

    def _owners(self, real: str) -> list[tuple[Path, str]]:
        """Configured roots containing ``real`` with their real paths, innermost first."""
        return [(root, os.path.realpath(root)) for root in roots_holding(self._roots, real)]

    def _unreadable_folder(self, owners: list[tuple[Path, str]], real: str) -> Path | None:
        """The folder that cannot be read holding ``real``, as its folder's listing found."""
        for _, real_root in owners:
            listing = self._listing(real_root)
            rel = Path(os.path.relpath(real, real_root)).as_posix()
            for folder in listing.unreadable:
                if rel.startswith(folder):
                    return Path(real_root, folder)
        return None

    def _listing(self, real_root: str) -> Listing:
        if real_root not in self._listings:
            self._listings[real_root] = list_files(Path(real_root), self.ignore)
        return self._listings[real_root]

    def _reason(self, owners: list[tuple[Path, str]], real: str) -> str:
        for _, real_root in owners:
            rel = Path(os.path.relpath(real, real_root)).as_posix()
            for skip in self._listing(real_root).skipped:
                if rel == skip.rel or (skip.rel.endswith("/") and rel.startswith(skip.rel)):
                    return skip.reason
        return "ignored by .gitignore or git's exclude rules"
