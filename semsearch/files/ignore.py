"""Which paths a listing leaves out by name, and how large a kept file may be.

:class:`IgnoreSettings` holds the knobs: the binary-extension list, the default patterns of walk
mode, the per-folder and global ignore files, the size caps and the opt-ins for secret files and
skipped kinds. :class:`IgnoreRules` layers the ignore patterns (walk-mode defaults < global
ignore file < the folder's own file, gitignore syntax, last match wins across them all) and says
why a path is left out. :data:`SECRET_PATTERNS` name files that are never read in any mode
(:func:`secret_reason`). :func:`gitignore_reason` says which of walk mode's ``.gitignore`` files
leaves a path out. Every pattern here is matched as git matches it
(:class:`~.gitignore.PatternList`). Reading the ignore files is the listing's job
(:mod:`.listing`); nothing here touches the disk.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from semsearch.config import DEFAULT_IGNORE_FILE, DEFAULT_MAX_FILE_SIZE, SKIPPED_KINDS
from semsearch.errors import ConfigError
from semsearch.files.filetype import (
    BINARY_EXTENSIONS,
    MINIFIED_EXTENSIONS,
    extension_of,
    is_document,
    is_document_extension,
    skipped_kind,
)
from semsearch.files.gitignore import PatternList

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

SECRET_PATTERNS: tuple[str, ...] = (
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "*.p12",
    "*.pfx",
    ".netrc",
    "_netrc",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".git-credentials",
    ".htpasswd",
    "*.tfstate",
    "*.tfstate.backup",
    ".aws/credentials",
    ".docker/config.json",
    ".kube/config",
    "gcloud/credentials.db",
    "gcloud/access_tokens.db",
    "application_default_credentials.json",
    "credentials.tfrc.json",
    "gh/hosts.yml",
)
"""Secret files, never listed, read or grepped in any mode unless ``allowSecretPatterns`` opts
one back in. A pattern is a file name, or its last path components (``.aws/credentials``);
``*``, ``?`` and ``[...]`` work within one component and case is ignored."""

SECRET_TEMPLATES: tuple[str, ...] = (".env.example", ".env.sample", ".env.template", ".env.dist")
"""Committed ``.env`` templates (placeholders, meant to be shared): not secret files."""


@dataclass(frozen=True)
class IgnoreSettings:
    """Which files :func:`~semsearch.files.listing.list_files` keeps and how large they may be."""

    binary_extensions: frozenset[str] = BINARY_EXTENSIONS
    default_ignore_patterns: tuple[str, ...] = DEFAULT_IGNORE_PATTERNS
    ignore_file: str = DEFAULT_IGNORE_FILE
    global_ignore_file: Path | None = None
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    max_document_size: int = 50_000_000
    allow_secret_patterns: tuple[str, ...] = ()
    index_kinds: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = sorted(self.index_kinds - set(SKIPPED_KINDS))
        if unknown:
            raise ConfigError(
                f"Unknown kind {unknown[0]!r} in `indexKinds`. Use any of: "
                f"{', '.join(SKIPPED_KINDS)}."
            )
        try:
            if self.allow_secret_patterns:
                _allow_list(self.allow_secret_patterns)
        except ValueError as exc:
            raise ConfigError(
                f"Invalid pattern in `allowSecretPatterns`: {exc}. Fix it in the config file."
            ) from exc


DEFAULT_SETTINGS = IgnoreSettings()
"""The settings used when none are given."""


def size_cap(
    rel: str, settings: IgnoreSettings = DEFAULT_SETTINGS, extension: str | None = None
) -> int:
    """The largest size in bytes allowed for ``rel`` (whose :func:`extension_of` the caller may
    know already): documents get the larger cap."""
    document = is_document(rel) if extension is None else is_document_extension(extension)
    return settings.max_document_size if document else settings.max_file_size


def too_large_reason(size: int, cap: int) -> str:
    """Why a file of ``size`` bytes is left out: "too large (612,000 bytes > 500,000)"."""
    return f"too large ({size:,} bytes > {cap:,})"


def secret_pattern(rel: str) -> str | None:
    """The :data:`SECRET_PATTERNS` entry that ``rel`` (a file) matches, or None."""
    name = rel[rel.rfind("/") + 1 :]
    lower = name.lower()
    if lower in _SECRET_LAST_NAMES:  # a pattern with a "/" may match: ask them all
        found = _SECRETS.last_match(rel)
        pattern = None if found is None else SECRET_PATTERNS[found.line]
    else:  # the file name alone decides, without matching the whole path
        found = _SECRET_NAMES.last_match(name)
        pattern = None if found is None else found.text
    return None if pattern is None or lower in SECRET_TEMPLATES else pattern


def secret_reason(rel: str, settings: IgnoreSettings = DEFAULT_SETTINGS) -> str | None:
    """The reason "secret file (matches .env.*)" when ``rel`` is a secret file not opted back in.

    ``allowSecretPatterns`` entries are gitignore patterns matched against ``rel``.
    """
    pattern = secret_pattern(rel)
    if pattern is None:
        return None
    if settings.allow_secret_patterns and _allow_list(settings.allow_secret_patterns).matches(rel):
        return None
    return f"secret file (matches {pattern})"


@functools.lru_cache(maxsize=8)
def _allow_list(patterns: tuple[str, ...]) -> PatternList:
    return PatternList.parse(patterns, strict=True)


@dataclass(frozen=True)
class IgnoreRules:
    """Everything decided from a path's name: ignore patterns, secret files, binary extensions.

    The patterns of every source are one :class:`~.gitignore.PatternList`, so the last
    match wins across sources. In walk mode a path is matched by itself (the walk never enters
    an excluded folder); in git mode, which lists files only, an excluded folder also leaves
    out every file below it.
    """

    patterns: PatternList
    sources: tuple[tuple[int, str], ...]  # (index after the source's last line, reason)
    settings: IgnoreSettings
    mode: Literal["git", "walk"]

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
        lines: list[str] = []
        ends: list[tuple[int, str]] = []
        for source_lines, why in sources:
            lines.extend(source_lines)
            ends.append((len(lines), why))
        return cls(PatternList.parse(lines), tuple(ends), settings, mode)

    def reason(self, rel: str) -> str | None:
        """Why ``rel`` (directories end in "/") is left out by name, or None to keep it."""
        is_dir = rel.endswith("/")
        if not is_dir:
            secret = secret_reason(rel, self.settings)
            if secret is not None:
                return secret
        if self.mode == "git":
            found = self.patterns.excluding(rel)
        else:
            found = self.patterns.last_match(rel)
        if found is not None and not found.is_negated:
            return next(why for end, why in self.sources if found.line < end)
        if not is_dir and extension_of(rel) in self.settings.binary_extensions:
            return "binary extension"
        return None

    def size_and_kind(self, rel: str, size: int) -> tuple[str | None, bool]:
        """For a regular file of ``size`` bytes: why it is left out (over its size cap, or of a
        skipped kind: lockfile, ...) or None, and whether its head should be checked for
        minified content. One look at the name for all three: the listing asks for each file."""
        settings = self.settings
        extension = extension_of(rel)
        cap = size_cap(rel, settings, extension)
        if size > cap:
            return too_large_reason(size, cap), False
        found = skipped_kind(rel, size, extension)
        if found is not None and found[0] not in settings.index_kinds:
            return found[1], False
        return None, "minified" not in settings.index_kinds and extension in MINIFIED_EXTENSIONS


def gitignore_reason(files: tuple[PatternList, ...], rel: str) -> str | None:
    """The reason "ignored by a/.gitignore" when the deepest ``.gitignore`` deciding ``rel``
    (each a :class:`~semsearch.files.gitignore.PatternList` based at its folder) ignores it."""
    for gitignore in reversed(files):
        decision = gitignore.decides(rel)
        if decision is not None:
            return f"ignored by {gitignore.base}.gitignore" if decision else None
    return None


# A secret pattern with a "/" names the last path components, hence the leading "**/".
_SECRETS = PatternList.parse(
    [pattern if "/" not in pattern else "**/" + pattern for pattern in SECRET_PATTERNS],
    ignore_case=True,
)
_SECRET_NAMES = PatternList.parse(
    [pattern for pattern in SECRET_PATTERNS if "/" not in pattern], ignore_case=True
)
# The file names the patterns with a "/" end in (literal, lower case): any other file is
# decided by _SECRET_NAMES. A name that folds to one of them only as ASCII is ASCII, so its
# lower() is here too.
_SECRET_LAST_NAMES = frozenset(
    pattern.rsplit("/", 1)[1].lower() for pattern in SECRET_PATTERNS if "/" in pattern
)
