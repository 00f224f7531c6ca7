"""Which paths a listing leaves out by name, and how large a kept file may be.

:class:`IgnoreSettings` holds the knobs: the binary-extension list, the default patterns of walk
mode, the per-folder and global ignore files, the size caps and the opt-ins for secret files and
skipped kinds. :class:`IgnoreRules` layers the ignore patterns (walk-mode defaults < global
ignore file < the folder's own file, gitignore syntax, last match wins across them all) and says
why a path is left out. :data:`SECRET_PATTERNS` name files that are never read in any mode
(:func:`secret_reason`). :class:`GitignoreFile` is one ``.gitignore`` with git's semantics, for
walk mode. Reading the ignore files is the listing's job (:mod:`.listing`); nothing here touches
the disk.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pathspec

from semsearch.config import DEFAULT_IGNORE_FILE, DEFAULT_MAX_FILE_SIZE, SKIPPED_KINDS
from semsearch.errors import ConfigError
from semsearch.files.filetype import (
    BINARY_EXTENSIONS,
    MINIFIED_EXTENSIONS,
    extension_of,
    is_document,
    skipped_kind,
)

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
                _allow_spec(self.allow_secret_patterns)
        except ValueError as exc:
            raise ConfigError(
                f"Invalid pattern in `allowSecretPatterns`: {exc}. Fix it in the config file."
            ) from exc


DEFAULT_SETTINGS = IgnoreSettings()
"""The settings used when none are given."""


def size_cap(rel: str, settings: IgnoreSettings = DEFAULT_SETTINGS) -> int:
    """The largest size in bytes allowed for ``rel``: documents get the larger cap."""
    return settings.max_document_size if is_document(rel) else settings.max_file_size


def too_large_reason(size: int, cap: int) -> str:
    """Why a file of ``size`` bytes is left out: "too large (612,000 bytes > 500,000)"."""
    return f"too large ({size:,} bytes > {cap:,})"


def secret_pattern(rel: str) -> str | None:
    """The :data:`SECRET_PATTERNS` entry that ``rel`` (a file) matches, or None."""
    lower = rel.lower()
    if lower.rsplit("/", 1)[-1] in SECRET_TEMPLATES or not _ANY_SECRET.fullmatch(lower):
        return None  # one regex for the common case; which pattern only on a hit
    return next(pattern for pattern, regex in _SECRET_REGEXES if regex.fullmatch(lower))


def secret_reason(rel: str, settings: IgnoreSettings = DEFAULT_SETTINGS) -> str | None:
    """The reason "secret file (matches .env.*)" when ``rel`` is a secret file not opted back in.

    ``allowSecretPatterns`` entries are gitignore patterns matched against ``rel``.
    """
    pattern = secret_pattern(rel)
    if pattern is None:
        return None
    if settings.allow_secret_patterns and _allow_spec(settings.allow_secret_patterns).match_file(
        rel
    ):
        return None
    return f"secret file (matches {pattern})"


@functools.lru_cache(maxsize=8)
def _allow_spec(patterns: tuple[str, ...]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(patterns)


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
        if not is_dir:
            secret = secret_reason(rel, self.settings)
            if secret is not None:
                return secret
        why = (self.dirs if is_dir else self.files).reason(rel)
        if why is not None:
            return why
        if not rel.isascii() and not _is_utf8_name(rel):
            return "file name is not valid UTF-8"
        if not is_dir and extension_of(rel) in self.settings.binary_extensions:
            return "binary extension"
        return None

    def kind_reason(self, rel: str, size: int) -> str | None:
        """Why a file of ``size`` bytes is left out as a skipped kind (lockfile, ...), or None."""
        found = skipped_kind(rel, size)
        if found is None or found[0] in self.settings.index_kinds:
            return None
        return found[1]

    def sniffs_minified(self, rel: str) -> bool:
        """True when ``rel``'s head should be checked for minified content."""
        return (
            "minified" not in self.settings.index_kinds and extension_of(rel) in MINIFIED_EXTENSIONS
        )


@dataclass(frozen=True)
class _GitPattern:
    regex: re.Pattern[str]
    is_negated: bool
    is_dir_only: bool


@dataclass(frozen=True)
class GitignoreFile:
    """One ``.gitignore`` in folder ``prefix`` ("" or "a/b/"), matched as git matches it.

    Patterns are relative to the file's folder (anchored when they hold a "/"), ``!`` negates,
    a trailing "/" matches directories only, the last matching line wins. pathspec's
    ``GitIgnoreSpec`` is not used here: it keeps ``*`` + ``!*/`` ignoring directories and its
    patterns also match everything below a matched directory, where git (and the walk, which
    prunes ignored directories) decides each directory once.
    """

    prefix: str
    patterns: tuple[_GitPattern, ...]

    @classmethod
    def parse(cls, prefix: str, lines: list[str]) -> GitignoreFile:
        """The file's patterns; blank lines and comments are dropped."""
        parsed = (_parse_gitignore_line(line) for line in lines)
        return cls(prefix, tuple(p for p in parsed if p is not None))

    def decides(self, rel: str) -> bool | None:
        """True (ignored), False (re-included by ``!``) or None (no line matches) for ``rel``,
        relative to the listing root (directories end in "/") and inside this file's folder."""
        is_dir = rel.endswith("/")
        sub = rel[len(self.prefix) :].rstrip("/")
        for pattern in reversed(self.patterns):
            if (is_dir or not pattern.is_dir_only) and pattern.regex.fullmatch(sub):
                return not pattern.is_negated
        return None


def gitignore_reason(files: tuple[GitignoreFile, ...], rel: str) -> str | None:
    """The reason "ignored by a/.gitignore" when the deepest file deciding ``rel`` ignores it."""
    for gitignore in reversed(files):
        decision = gitignore.decides(rel)
        if decision is not None:
            return f"ignored by {gitignore.prefix}.gitignore" if decision else None
    return None


def _parse_gitignore_line(line: str) -> _GitPattern | None:
    line = line.rstrip("\r\n")
    while line.endswith(" ") and not line.endswith("\\ "):
        line = line[:-1]
    if not line or line.startswith("#"):
        return None
    is_negated = line.startswith("!")
    if is_negated:
        line = line[1:]
    is_dir_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    is_anchored = "/" in line
    body = _glob_regex(line.lstrip("/"))
    regex = body if is_anchored else "(?:.*/)?" + body
    return _GitPattern(re.compile(regex, re.DOTALL), is_negated, is_dir_only)


def _glob_regex(glob: str) -> str:
    """git's wildmatch for one pattern: ``*``/``?`` stop at "/", ``**`` spans folders."""
    out: list[str] = []
    i = 0
    while i < len(glob):
        at_start = i == 0 or glob[i - 1] == "/"
        if at_start and glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif at_start and glob[i:] == "**":
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[" and (end := _class_end(glob, i)) > 0:
            out.append(_class_regex(glob[i + 1 : end]))
            i = end + 1
        elif glob[i] == "\\" and i + 1 < len(glob):
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return "".join(out)


def _class_end(glob: str, start: int) -> int:
    """The index of the "]" closing the class opened at ``start``, or -1."""
    i = start + 1
    if i < len(glob) and glob[i] in "!^":
        i += 1
    if i < len(glob) and glob[i] == "]":
        i += 1
    return glob.find("]", i)


def _class_regex(inner: str) -> str:
    negated = inner[:1] in ("!", "^")
    body = inner[1:] if negated else inner
    escaped = "".join("\\" + ch if ch in "\\[]^" else ch for ch in body)
    return "[" + ("^/" if negated else "") + escaped + "]"


def _is_dir_only(line: str) -> bool:
    return line.rstrip().endswith("/")


def _is_utf8_name(name: str) -> bool:
    """False for names holding undecodable bytes (surrogate escapes) that SQLite cannot store."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _secret_regex(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """Match a lower-cased path whose last components match one of ``patterns``."""
    body = "|".join(_glob_regex(pattern.lower()) for pattern in patterns)
    return re.compile(f"(?:.*/)?(?:{body})", re.DOTALL)


_ANY_SECRET = _secret_regex(SECRET_PATTERNS)
_SECRET_REGEXES = tuple((pattern, _secret_regex((pattern,))) for pattern in SECRET_PATTERNS)
