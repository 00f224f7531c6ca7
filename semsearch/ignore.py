"""Which paths a listing leaves out by name, and how large a kept file may be.

:class:`IgnoreSettings` holds the knobs: the binary-extension list, the default patterns of walk
mode, the per-folder and global ignore files and the size caps. :class:`IgnoreRules` layers the
ignore patterns (walk-mode defaults < global ignore file < the folder's own file, gitignore
syntax, last match wins across them all) and says why a path is left out. Reading the ignore
files is the listing's job (:mod:`semsearch.listing`); nothing here touches the disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pathspec

from semsearch.config import DEFAULT_IGNORE_FILE, DEFAULT_MAX_FILE_SIZE
from semsearch.filetype import BINARY_EXTENSIONS, extension_of, is_document

DEFAULT_IGNORE_PATTERNS: tuple[str, ...] = (
    "node_modules/",
    ".git/",
    ".hg/",
    ".svn/",
    "dist/",
    "build/",
    "coverage/",
    "vendor/",
    "target/",
    ".next/",
    ".nuxt/",
    ".svelte-kit/",
    ".turbo/",
    ".parcel-cache/",
    "bower_components/",
    "__pycache__/",
    ".venv/",
    "venv/",
    ".tox/",
    ".nox/",
    ".eggs/",
    "*.egg-info/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
    ".gradle/",
    ".terraform/",
    ".idea/",
    ".DS_Store",
)
"""gitignore-syntax patterns applied only when a folder is walked (not a git work tree)."""


@dataclass(frozen=True)
class IgnoreSettings:
    """Which files :func:`~semsearch.listing.list_files` keeps and how large they may be."""

    binary_extensions: frozenset[str] = BINARY_EXTENSIONS
    default_ignore_patterns: tuple[str, ...] = DEFAULT_IGNORE_PATTERNS
    ignore_file: str = DEFAULT_IGNORE_FILE
    global_ignore_file: Path | None = None
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    max_document_size: int = 50_000_000


DEFAULT_SETTINGS = IgnoreSettings()
"""The settings used when none are given."""


def size_cap(rel: str, settings: IgnoreSettings = DEFAULT_SETTINGS) -> int:
    """The largest size in bytes allowed for ``rel``: documents get the larger cap."""
    return settings.max_document_size if is_document(rel) else settings.max_file_size


def too_large_reason(size: int, cap: int) -> str:
    """Why a file of ``size`` bytes is left out: "too large (612,000 bytes > 500,000)"."""
    return f"too large ({size:,} bytes > {cap:,})"


@dataclass(frozen=True)
class _Layered:
    """Ignore patterns from several sources in one spec, so that gitignore's "last match wins"
    holds across sources (a root ``!pattern`` re-includes what a default excluded)."""

    spec: pathspec.PathSpec[Any]
    ends: tuple[tuple[int, str], ...]  # (end index in spec.patterns, reason) per source

    @classmethod
    def build(cls, sources: list[tuple[list[str], str]]) -> _Layered:
        # Plain "gitignore" patterns, not GitIgnoreSpec: pathspec 1.1's GitIgnoreSpec keeps
        # `*` + `!*/` ignoring directories, unlike git (so the allow-list `*`, `!*/`, `!*.py`
        # would index nothing). The walk never enters an ignored folder: git's other rule.
        spec = pathspec.PathSpec.from_lines("gitignore", [])
        ends: list[tuple[int, str]] = []
        for lines, reason in sources:
            spec += pathspec.PathSpec.from_lines("gitignore", lines)
            ends.append((len(spec.patterns), reason))
        return cls(spec, tuple(ends))

    def reason(self, rel: str) -> str | None:
        """The source that excludes ``rel``, or None."""
        result = self.spec.check_file(rel)
        if not result.include:
            return None
        index = result.index if result.index is not None else 0
        return next((why for end, why in self.ends if index < end), self.ends[-1][1])


@dataclass(frozen=True)
class IgnoreRules:
    """Everything decided from a path's name: ignore patterns, UTF-8 and binary extensions.

    In walk mode ignored directories are pruned, so files are matched only against patterns
    that can match a file (not ``dir/`` ones); that is both faster and closer to git.
    """

    dirs: _Layered
    files: _Layered
    settings: IgnoreSettings

    @classmethod
    def build(
        cls,
        settings: IgnoreSettings,
        mode: Literal["git", "walk"],
        global_lines: list[str] | None,
        root_lines: list[str],
    ) -> IgnoreRules:
        """Layer defaults (walk mode only) < the global ignore file's lines (None when no
        global file is set) < the lines of the folder's own ignore file."""
        sources: list[tuple[list[str], str]] = []
        if mode == "walk":
            sources.append((list(settings.default_ignore_patterns), "ignored by default pattern"))
        if global_lines is not None:
            sources.append((global_lines, f"ignored by {settings.global_ignore_file}"))
        sources.append((root_lines, f"ignored by {settings.ignore_file}"))
        everything = _Layered.build(sources)
        if mode == "git":
            return cls(everything, everything, settings)
        file_sources = [
            ([ln for ln in lines if not _is_dir_only(ln)], why) for lines, why in sources
        ]
        return cls(everything, _Layered.build(file_sources), settings)

    def reason(self, rel: str) -> str | None:
        """Why ``rel`` (directories end in "/") is left out by name, or None to keep it."""
        is_dir = rel.endswith("/")
        why = (self.dirs if is_dir else self.files).reason(rel)
        if why is not None:
            return why
        if not rel.isascii() and not _is_utf8_name(rel):
            return "file name is not valid UTF-8"
        if not is_dir and extension_of(rel) in self.settings.binary_extensions:
            return "binary extension"
        return None


def _is_dir_only(line: str) -> bool:
    return line.rstrip().endswith("/")


def _is_utf8_name(name: str) -> bool:
    """False for names holding undecodable bytes (surrogate escapes) that SQLite cannot store."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
