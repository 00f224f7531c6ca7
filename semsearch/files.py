"""File discovery shared by the indexer and the MCP grep tool.

:func:`list_files` lists the files of one folder that semsearch may read. Inside a git work tree,
git decides what is ignored (``.gitignore`` files, ``.git/info/exclude``, ``core.excludesFile``);
elsewhere the folder is walked and :data:`DEFAULT_IGNORE_PATTERNS` apply. In both modes the
folder's ``.indexignore``, the global ignore file, the binary-extension list, a regular-file check
and a size cap apply on top. Nothing here raises for a missing folder or an unreadable entry: such
problems come back in :attr:`Listing.errors` and :attr:`Listing.warnings`.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pathspec

from semsearch.errors import ExtractError
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
"""Documents whose text is extracted; they get :attr:`IgnoreSettings.max_document_size`."""

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

_GIT_TIMEOUT = 300.0
_SNIFF_BYTES = 4096
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)  # opening a FIFO must not wait for a writer
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


@dataclass(frozen=True)
class IgnoreSettings:
    """Which files :func:`list_files` keeps and how large they may be."""

    binary_extensions: frozenset[str] = BINARY_EXTENSIONS
    default_ignore_patterns: tuple[str, ...] = DEFAULT_IGNORE_PATTERNS
    ignore_file: str = ".indexignore"
    global_ignore_file: Path | None = None
    max_file_size: int = 500_000
    max_document_size: int = 50_000_000


DEFAULT_SETTINGS = IgnoreSettings()
"""The settings used when none are given."""


@dataclass(frozen=True)
class FileEntry:
    """A regular file to read: ``rel`` is POSIX and relative to the root, ``path`` absolute."""

    rel: str
    path: Path
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class Skip:
    """A path left out (or that failed), with a human-readable reason. Directories end in "/"."""

    rel: str
    reason: str


@dataclass(frozen=True)
class Listing:
    """What :func:`list_files` found; ``files``, ``skipped`` and ``errors`` are sorted by rel."""

    root: Path
    mode: Literal["git", "walk"]
    files: tuple[FileEntry, ...]
    skipped: tuple[Skip, ...]
    errors: tuple[Skip, ...]
    warnings: tuple[str, ...]


@dataclass
class _Acc:
    files: list[FileEntry] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    errors: list[Skip] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def listing(self, root: Path, mode: Literal["git", "walk"]) -> Listing:
        def by_rel(item: FileEntry | Skip) -> str:
            return item.rel

        return Listing(
            root=root,
            mode=mode,
            files=tuple(sorted(self.files, key=by_rel)),
            skipped=tuple(sorted(self.skipped, key=by_rel)),
            errors=tuple(sorted(self.errors, key=by_rel)),
            warnings=tuple(self.warnings),
        )


class _GitFailure(Exception):
    """git cannot list this folder; the message says why (one line)."""


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
class _Rules:
    """Everything decided from a path's name: ignore patterns, UTF-8 and binary extensions.

    In walk mode ignored directories are pruned, so files are matched only against patterns
    that can match a file (not ``dir/`` ones); that is both faster and closer to git.
    """

    dirs: _Layered
    files: _Layered
    settings: IgnoreSettings

    def reason(self, rel: str) -> str | None:
        """Why ``rel`` (directories end in "/") is left out by name, or None to keep it."""
        is_dir = rel.endswith("/")
        why = (self.dirs if is_dir else self.files).reason(rel)
        if why is not None:
            return why
        if not rel.isascii() and not _is_utf8_name(rel):
            return "file name is not valid UTF-8"
        if not is_dir and _extension(rel) in self.settings.binary_extensions:
            return "binary extension"
        return None


def is_document(name: str) -> bool:
    """True for names ending in .pdf or .docx (any case)."""
    return _extension(name) in DOCUMENT_EXTENSIONS


def looks_binary(head: bytes) -> bool:
    """True when the first 4096 bytes hold a NUL byte."""
    return b"\0" in head[:_SNIFF_BYTES]


def is_binary_content(rel: str, data: bytes) -> bool:
    """The one rule for binary content, shared by the indexer, grep and cat_file.

    A NUL byte in the first 4 KiB means binary, except for PDF/DOCX (extracted, not read as
    text) and for text with a byte-order mark (UTF-16 is full of NUL bytes).
    """
    return not is_document(rel) and not has_text_bom(data[:4]) and looks_binary(data[:4096])


def size_cap(rel: str, settings: IgnoreSettings = DEFAULT_SETTINGS) -> int:
    """The largest size in bytes allowed for ``rel``: documents get the larger cap."""
    return settings.max_document_size if is_document(rel) else settings.max_file_size


def list_files(root: Path, settings: IgnoreSettings = DEFAULT_SETTINGS) -> Listing:
    """List the readable files under ``root`` (git mode in a work tree, else walk mode).

    Never raises for a missing, non-directory or unreadable root: the listing then has one
    ``errors`` entry with rel ".". When git is present but cannot be used (it fails, or an
    enclosing repository ignores the root) the folder is walked and ``warnings`` says why.
    """
    acc = _Acc()
    resolved, problem = _resolve_root(root)
    if problem is not None:
        acc.errors.append(Skip(".", problem))
        return acc.listing(resolved, "walk")
    if _has_git_marker(resolved):
        try:
            _check_work_tree(resolved)
            rels = _git_ls_files(resolved)
        except _GitFailure as exc:
            acc.warnings.append(
                f"{resolved}: {exc}; listed the folder without git, so .gitignore is not applied"
            )
        else:
            _collect_git(resolved, "", rels, _load_rules(resolved, settings, "git", acc), acc)
            return acc.listing(resolved, "git")
    rules = _load_rules(resolved, settings, "walk", acc)
    _collect_walk(resolved, rules, acc)
    return acc.listing(resolved, "walk")


def read_file_bytes(entry: FileEntry, settings: IgnoreSettings = DEFAULT_SETTINGS) -> bytes:
    """Read a listed file, at most its size cap, without following a symlink at its name.

    Raises :class:`~semsearch.errors.ExtractError` when the file is now a symlink or not a
    regular file (FIFO, socket, device: never read from), or is larger than its cap
    (:func:`size_cap`). Other failures to open or read it raise :class:`OSError` unchanged,
    e.g. :class:`FileNotFoundError` when it was deleted since it was listed.
    """
    cap = size_cap(entry.rel, settings)
    try:
        fd = os.open(entry.path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ExtractError(f"{entry.rel}: is a symlink; not read") from exc
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ExtractError(f"{entry.rel}: not a regular file; not read")
        if info.st_size > cap:
            raise ExtractError(f"{entry.rel}: {_too_large(info.st_size, cap)}; not read")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(cap + 1)
    finally:
        os.close(fd)
    if len(data) > cap:
        raise ExtractError(f"{entry.rel}: grew past {cap:,} bytes while being read; not read")
    return data


def _resolve_root(root: Path) -> tuple[Path, str | None]:
    """The absolute root and, when it cannot be listed, why."""
    try:
        resolved = root.resolve(strict=True)
    except OSError as exc:
        return root.absolute(), _os_reason(exc, missing="folder not found")
    except RuntimeError:  # symlink loop on Python < 3.13
        return root.absolute(), "symlink loop"
    if not resolved.is_dir():
        return resolved, "not a directory"
    try:
        with os.scandir(resolved):
            pass
    except OSError as exc:
        return resolved, _os_reason(exc, missing="folder not found")
    return resolved, None


def _has_git_marker(root: Path) -> bool:
    """True when root or a parent has a .git entry (so git may be worth asking)."""
    return any((folder / ".git").exists() for folder in (root, *root.parents))


def _run_git(cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run git with an argv list; raise _GitFailure when git cannot be run at all."""
    argv = ["git", "--no-optional-locks", "-c", "core.quotepath=off", "-C", str(cwd), *args]
    try:
        return subprocess.run(
            argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=_GIT_TIMEOUT, check=False
        )
    except FileNotFoundError as exc:
        raise _GitFailure("git is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise _GitFailure(f"git took longer than {_GIT_TIMEOUT:.0f}s") from exc
    except OSError as exc:
        raise _GitFailure(f"git could not be run ({exc.strerror or exc})") from exc


def _git_error(proc: subprocess.CompletedProcess[bytes]) -> _GitFailure:
    lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    detail = lines[0].removeprefix("fatal: ") if lines else f"exit status {proc.returncode}"
    return _GitFailure(f"git failed: {detail}")


def _check_work_tree(root: Path) -> None:
    """Raise _GitFailure unless root is a work tree folder that git does not ignore."""
    proc = _run_git(root, "rev-parse", "--is-inside-work-tree")
    if proc.returncode != 0:
        raise _git_error(proc)
    if proc.stdout.strip() != b"true":
        raise _GitFailure("the folder is not in a git work tree (inside a .git directory?)")
    proc = _run_git(root, "check-ignore", "-q", ".")
    if proc.returncode == 0:
        raise _GitFailure("the folder is ignored by the enclosing git repository")
    if proc.returncode != 1:
        raise _git_error(proc)


def _git_ls_files(root: Path) -> list[str]:
    """Tracked and untracked-not-ignored paths under root, relative to it (sorted, unique)."""
    proc = _run_git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    if proc.returncode != 0:
        raise _git_error(proc)
    # A conflicted path is listed once per stage, hence the set.
    return sorted({os.fsdecode(raw) for raw in proc.stdout.split(b"\0") if raw})


def _collect_git(root: Path, prefix: str, rels: list[str], rules: _Rules, acc: _Acc) -> None:
    """Filter git's paths (relative to ``root``, which is ``prefix`` below the listing root)."""
    for raw in rels:
        name = raw.rstrip("/")
        if name.startswith("/") or ".." in name.split("/"):
            continue
        rel = prefix + name
        shown = rel + "/" if raw.endswith("/") else rel
        reason = rules.reason(shown)
        if reason is not None:
            acc.skipped.append(Skip(shown, reason))
            continue
        path = root / name
        info = _lstat(path, rel, acc)
        if info is None:
            continue
        if stat.S_ISDIR(info.st_mode):
            _collect_nested_repo(path, rel + "/", rules, acc)
        else:
            _keep_if_regular(rel, path, info, rules, acc)


def _collect_nested_repo(folder: Path, prefix: str, rules: _Rules, acc: _Acc) -> None:
    """List a nested repository or submodule (git shows it as a directory) with its own git."""
    if not (folder / ".git").exists():
        return  # e.g. a submodule that was never checked out
    try:
        rels = _git_ls_files(folder)
    except _GitFailure as exc:
        acc.warnings.append(f"{prefix}: nested git repository not listed ({exc})")
        return
    _collect_git(folder, prefix, rels, rules, acc)


def _collect_walk(root: Path, rules: _Rules, acc: _Acc) -> None:
    """Walk root depth-first without following symlinks, pruning ignored directories."""
    pending = [""]
    while pending:
        prefix = pending.pop()
        subdirs: list[str] = []
        for entry in _scan(root / prefix, prefix, acc):
            rel = prefix + entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError as exc:
                acc.errors.append(Skip(rel, _os_reason(exc)))
                continue
            if is_dir:
                if entry.name != ".git" and _keep_name(rel + "/", rules, acc):
                    subdirs.append(rel + "/")
            elif _keep_name(rel, rules, acc):
                _keep_entry(entry, rel, rules, acc)
        pending.extend(reversed(subdirs))


def _scan(folder: Path, prefix: str, acc: _Acc) -> list[os.DirEntry[str]]:
    """The entries of one folder sorted by name; [] (and an error) when it cannot be read."""
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except OSError as exc:
        acc.errors.append(Skip(prefix or ".", _os_reason(exc)))
        return []


def _keep_entry(entry: os.DirEntry[str], rel: str, rules: _Rules, acc: _Acc) -> None:
    try:
        info = entry.stat(follow_symlinks=False)
    except FileNotFoundError:
        return  # removed during the walk
    except OSError as exc:
        acc.errors.append(Skip(rel, _os_reason(exc)))
        return
    _keep_if_regular(rel, Path(entry.path), info, rules, acc)


def _keep_name(rel: str, rules: _Rules, acc: _Acc) -> bool:
    reason = rules.reason(rel)
    if reason is None:
        return True
    acc.skipped.append(Skip(rel, reason))
    return False


def _lstat(path: Path, rel: str, acc: _Acc) -> os.stat_result | None:
    """lstat, or None: silently when the path vanished, with an error otherwise."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None  # deleted but still tracked, or removed during the walk
    except OSError as exc:
        acc.errors.append(Skip(rel, _os_reason(exc)))
        return None


def _keep_if_regular(rel: str, path: Path, info: os.stat_result, rules: _Rules, acc: _Acc) -> None:
    """Add a FileEntry, or a Skip for a symlink, special file or file over its size cap."""
    cap = size_cap(rel, rules.settings)
    if stat.S_ISLNK(info.st_mode):
        acc.skipped.append(Skip(rel, "symlink"))
    elif not stat.S_ISREG(info.st_mode):
        acc.skipped.append(Skip(rel, "not a regular file"))
    elif info.st_size > cap:
        acc.skipped.append(Skip(rel, _too_large(info.st_size, cap)))
    else:
        acc.files.append(FileEntry(rel, path, info.st_size, info.st_mtime_ns))


def _load_rules(
    root: Path, settings: IgnoreSettings, mode: Literal["git", "walk"], acc: _Acc
) -> _Rules:
    """Layer the ignore patterns: defaults (walk mode only) < global ignore file < root's file."""
    sources: list[tuple[list[str], str]] = []
    if mode == "walk":
        sources.append((list(settings.default_ignore_patterns), "ignored by default pattern"))
    if settings.global_ignore_file is not None:
        lines = _read_ignore_file(settings.global_ignore_file, acc)
        sources.append((lines, f"ignored by {settings.global_ignore_file}"))
    lines = _read_ignore_file(root / settings.ignore_file, acc)
    sources.append((lines, f"ignored by {settings.ignore_file}"))
    everything = _Layered.build(sources)
    if mode == "git":
        return _Rules(everything, everything, settings)
    file_sources = [([ln for ln in lines if not _is_dir_only(ln)], why) for lines, why in sources]
    return _Rules(everything, _Layered.build(file_sources), settings)


def _is_dir_only(line: str) -> bool:
    return line.rstrip().endswith("/")


def _read_ignore_file(path: Path, acc: _Acc) -> list[str]:
    """The lines of an ignore file; [] when absent, [] and a warning when unreadable."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []
    except OSError as exc:
        acc.warnings.append(f"{path}: cannot read ignore file ({_os_reason(exc)}); not applied")
        return []


def _os_reason(exc: OSError, missing: str = "not found") -> str:
    """A short reason for an OSError: "permission denied", "not a directory", ..."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.ENOENT:
        return missing
    if exc.errno == errno.ENOTDIR:
        return "not a directory"
    return (exc.strerror or str(exc)).lower()


def _too_large(size: int, cap: int) -> str:
    return f"too large ({size:,} bytes > {cap:,})"


def _extension(name: str) -> str:
    return os.path.splitext(name)[1].lower()


def _is_utf8_name(name: str) -> bool:
    """False for names holding undecodable bytes (surrogate escapes) that SQLite cannot store."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
