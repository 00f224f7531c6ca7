"""Listing the files of one folder that semsearch may read (the indexer, grep and cat_file).

:func:`list_files` works in one of two modes. Inside a git work tree, git decides what is
ignored (``.gitignore`` files, ``.git/info/exclude``, ``core.excludesFile``); elsewhere the
folder is walked, its ``.gitignore`` files at every depth apply as git applies them, and
:data:`~semsearch.files.ignore.DEFAULT_IGNORE_PATTERNS` too. In both modes the secret-file list, the
folder's ``.indexignore``, the global ignore file, the binary-extension list, a regular-file
check, a size cap and the skipped kinds (lockfiles, minified files, source maps, data files, and
the Python virtual environments below the root) apply on top (:mod:`.ignore`, :mod:`.filetype`).
Names are what the file system holds: any byte but "/" and NUL, a byte that is not UTF-8 kept as
``os.fsdecode`` keeps it (a surrogate escape), so every file is listed whatever its name.
Nothing here raises for a missing folder or an unreadable entry: such problems come back in
:attr:`Listing.errors` and :attr:`Listing.warnings`. A folder below the root that cannot be read
(no read or search permission, e.g. mode 000) is skipped in both modes, with one warning naming
it: in git mode git says which folders it could not open, and a tracked file that cannot be
looked at names the folder that blocks it.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from semsearch.files.filetype import MINIFIED_SNIFF_BYTES, minified_reason
from semsearch.files.gitignore import PatternList
from semsearch.files.ignore import (
    DEFAULT_SETTINGS,
    IgnoreRules,
    IgnoreSettings,
    gitignore_reason,
)

_GIT_TIMEOUT = 300.0
# A folder below the root holding this file is a Python virtual environment (venv, virtualenv):
# third-party code, skipped whatever its name (the "venv" kind of ``indexKinds``).
VENV_MARKER = "pyvenv.cfg"
VENV_REASON = "virtual environment (pyvenv.cfg)"
_HEAD_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
# git lists the rest and warns "could not open directory 'sub/dir/': Permission denied" (the
# path relative to the work tree's top; translations keep the quoted path).
_GIT_UNOPENED = re.compile(r"'(.+/)'")


@dataclass(frozen=True)
class FileEntry:
    """A regular file to read: ``rel`` is POSIX and relative to the root, ``location`` its
    absolute path as the OS calls take it (``path`` makes a :class:`~pathlib.Path` of it when
    asked: a re-index with nothing changed never does, and one per file cost a tenth of the
    listing)."""

    rel: str
    location: str
    size: int
    mtime_ns: int

    @property
    def path(self) -> Path:
        return Path(self.location)


@dataclass(frozen=True)
class Skip:
    """A path left out (or that failed), with a human-readable reason. Directories end in "/"."""

    rel: str
    reason: str


@dataclass(frozen=True)
class Listing:
    """What :func:`list_files` found; ``files``, ``skipped`` and ``errors`` are sorted by rel.

    ``unreadable``: the folders (rel, ending in "/") that could not be read; each is in
    ``skipped`` too and named by a warning. What they hold is unknown, not gone.
    """

    root: Path
    mode: Literal["git", "walk"]
    files: tuple[FileEntry, ...]
    skipped: tuple[Skip, ...]
    errors: tuple[Skip, ...]
    warnings: tuple[str, ...]
    unreadable: tuple[str, ...] = ()

    def is_unreadable(self, rel: str) -> bool:
        """Whether ``rel`` lies in a folder that could not be read."""
        return rel.startswith(self.unreadable)


@dataclass
class _Acc:
    files: list[FileEntry] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    errors: list[Skip] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    ignore_file: str = DEFAULT_SETTINGS.ignore_file  # named in the unreadable folder's warning

    def skip_unreadable(self, rel: str, path: Path, reason: str) -> None:
        """Skip a folder that cannot be read, with one warning naming it."""
        self.skipped.append(Skip(rel, reason))
        self.unreadable.append(rel)
        self.warnings.append(
            f"{path}: cannot read this folder ({reason}); skipped (list it in {self.ignore_file} "
            "to skip it quietly)"
        )

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
            unreadable=tuple(sorted(self.unreadable)),
        )


class _GitFailure(Exception):
    """git cannot list this folder; the message says why (one line)."""


def list_files(root: Path, settings: IgnoreSettings = DEFAULT_SETTINGS) -> Listing:
    """List the readable files under ``root`` (git mode in a work tree, else walk mode).

    Never raises for a missing, non-directory or unreadable root: the listing then has one
    ``errors`` entry with rel ".". When git is present but cannot be used (it fails, or an
    enclosing repository ignores the root) the folder is walked and ``warnings`` says why.
    """
    acc = _Acc(ignore_file=settings.ignore_file)
    resolved, problem = _resolve_root(root)
    if problem is not None:
        acc.errors.append(Skip(".", problem))
        return acc.listing(resolved, "walk")
    if _has_git_marker(resolved):
        try:
            _check_work_tree(resolved)
            rels, unopened = _git_ls_files(resolved)
        except _GitFailure as exc:
            acc.warnings.append(
                f"{resolved}: {exc}; listed the folder without git (its .gitignore files "
                "apply, .git/info/exclude and core.excludesFile do not)"
            )
        else:
            rules = _load_rules(resolved, settings, "git", acc)
            _collect_git(resolved, "", rels, unopened, rules, acc)
            return acc.listing(resolved, "git")
    rules = _load_rules(resolved, settings, "walk", acc)
    _collect_walk(resolved, rules, acc)
    return acc.listing(resolved, "walk")


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


def head_commit(root: Path) -> str | None:
    """The commit checked out in the git work tree holding ``root`` (``git rev-parse HEAD``),
    or None (no git, no work tree, no commit yet)."""
    if not _has_git_marker(root):
        return None
    try:
        proc = _run_git(root, "rev-parse", "--verify", "--quiet", "HEAD")
    except _GitFailure:
        return None
    commit = proc.stdout.decode("ascii", "replace").strip()
    return commit if proc.returncode == 0 and commit else None


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


def _git_ls_files(root: Path) -> tuple[list[str], list[str]]:
    """Tracked and untracked-not-ignored paths under root, relative to it (sorted, unique), and
    the folders git could not open to look for untracked files (relative to root, ending "/";
    as git names them: :func:`_collect_git` checks them)."""
    proc = _run_git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    if proc.returncode != 0:
        raise _git_error(proc)
    # A conflicted path is listed once per stage, hence the set.
    rels = sorted({os.fsdecode(raw) for raw in proc.stdout.split(b"\0") if raw})
    named = [
        found.group(1)
        for line in os.fsdecode(proc.stderr).splitlines()
        if (found := _GIT_UNOPENED.search(line))
    ]
    if not named:
        return rels, []
    proc = _run_git(root, "rev-parse", "--show-prefix")
    top = os.fsdecode(proc.stdout).rstrip("\n") if proc.returncode == 0 else ""
    return rels, [name.removeprefix(top) for name in named if name.startswith(top)]


def _collect_git(
    root: Path, prefix: str, rels: list[str], unopened: list[str], rules: IgnoreRules, acc: _Acc
) -> None:
    """Filter git's paths (relative to ``root``, which is ``prefix`` below the listing root);
    ``unopened``: the folders git said it could not open."""
    venvs = _venvs_among(rels, rules)
    for venv in sorted(venvs):
        acc.skipped.append(Skip(prefix + venv + "/", VENV_REASON))
    blocked: set[str] = set()
    for folder in unopened:
        _block(root, prefix, folder, rules, blocked, acc)
    top = os.path.join(root, "")
    for raw in rels:
        name = raw.rstrip("/")
        if name.startswith("/") or ".." in name.split("/"):
            continue
        if (venvs and _under(name, venvs)) or (blocked and _under(name, blocked)):
            continue
        rel = prefix + name
        shown = rel + "/" if raw.endswith("/") else rel
        reason = rules.reason(shown)
        if reason is not None:
            acc.skipped.append(Skip(shown, reason))
            continue
        location = top + name
        try:
            info = os.lstat(location)
        except FileNotFoundError:
            continue  # deleted but still tracked
        except PermissionError as exc:
            # A tracked file in a folder without search permission that git did not report
            # (an ignored one): skip the folder that blocks it, as the walk would.
            if not _block(root, prefix, name, rules, blocked, acc):
                acc.errors.append(Skip(rel, _os_reason(exc)))
            continue
        except OSError as exc:
            acc.errors.append(Skip(rel, _os_reason(exc)))
            continue
        if stat.S_ISDIR(info.st_mode):
            _collect_nested_repo(root / name, rel + "/", rules, acc)
        else:
            _keep_if_regular(rel, location, info, rules, acc)


def _collect_nested_repo(folder: Path, prefix: str, rules: IgnoreRules, acc: _Acc) -> None:
    """List a nested repository or submodule (git shows it as a directory) with its own git."""
    if not (folder / ".git").exists():
        return  # e.g. a submodule that was never checked out
    try:
        rels, unopened = _git_ls_files(folder)
    except _GitFailure as exc:
        acc.warnings.append(f"{prefix}: nested git repository not listed ({exc})")
        return
    _collect_git(folder, prefix, rels, unopened, rules, acc)


def _block(
    root: Path, prefix: str, name: str, rules: IgnoreRules, blocked: set[str], acc: _Acc
) -> bool:
    """Skip the outermost folder on the way from ``root`` to ``name`` (a file, or a folder when
    it ends in "/") that cannot be read; True when there is one. ``blocked`` holds the folders
    skipped so far (relative to ``root``, no trailing slash), each named by one warning; one
    the ignore rules leave out is skipped without a warning, as its files would be."""
    parts = name.split("/")
    for depth in range(1, len(parts)):
        folder = "/".join(parts[:depth])
        if folder in blocked:
            return True
        problem = _unreadable_reason(root / folder)
        if problem is not None:
            blocked.add(folder)
            rel = prefix + folder + "/"
            if rules.reason(rel) is None:
                acc.skip_unreadable(rel, root / folder, problem)
            return True
    return False


def _unreadable_reason(folder: Path) -> str | None:
    """Why ``folder`` cannot be read, or None: it cannot be listed (no read permission) or what
    it holds cannot be looked up (no search permission: looking for a name fails with
    EACCES, where a readable folder says the name is not there)."""
    try:
        with os.scandir(folder):
            pass
        os.lstat(os.path.join(folder, VENV_MARKER))
    except PermissionError as exc:
        return _os_reason(exc)
    except OSError:
        return None
    return None


def _venvs_among(rels: list[str], rules: IgnoreRules) -> set[str]:
    """The folders below the root that git's paths show to be Python virtual environments (they
    hold a ``pyvenv.cfg``), unless ``indexKinds`` has "venv"."""
    if "venv" in rules.settings.index_kinds:
        return set()
    return {rel[: -len(VENV_MARKER) - 1] for rel in rels if rel.endswith("/" + VENV_MARKER)}


def _under(rel: str, folders: set[str]) -> bool:
    """Whether ``rel`` lies inside one of ``folders`` (root-relative, no trailing slash)."""
    parts = rel.split("/")
    return any("/".join(parts[:depth]) in folders for depth in range(1, len(parts)))


def _walk_skip(folder: str, rules: IgnoreRules) -> tuple[str, bool] | None:
    """Why the walk leaves out a folder below the root: (reason, True) when what it holds cannot
    be looked up (no search permission: looking for a name fails with EACCES, where a readable
    folder says the name is not there), (VENV_REASON, False) for a Python virtual environment
    (unless ``indexKinds`` has "venv"), else None. One look-up of its ``pyvenv.cfg`` tells both;
    a folder that cannot be listed (no read permission) is found when the walk scans it."""
    marker = os.path.join(folder, VENV_MARKER)
    try:
        info = os.lstat(marker)
    except PermissionError as exc:
        return _os_reason(exc), True
    except OSError:
        return None
    if "venv" in rules.settings.index_kinds:
        return None
    if stat.S_ISLNK(info.st_mode):  # a marker that is a symlink counts where it points
        try:
            info = os.stat(marker)
        except OSError:
            return None
    return (VENV_REASON, False) if stat.S_ISREG(info.st_mode) else None


Gitignores = tuple[PatternList, ...]


def _collect_walk(root: Path, rules: IgnoreRules, acc: _Acc) -> None:
    """Walk root depth-first without following symlinks, pruning ignored directories; each
    folder's ``.gitignore`` applies to it and below, a deeper one deciding first (as in git).

    Paths stay strings: the walk looks at every file of a tree on each index run, and a
    :class:`~pathlib.Path` per entry cost more than its ``lstat``."""
    top = os.path.join(root, "")
    pending: list[tuple[str, Gitignores]] = [("", ())]
    while pending:
        prefix, gitignores = pending.pop()
        entries = _scan(top + prefix, prefix, acc)
        gitignores = _with_gitignore(top, prefix, entries, gitignores, acc)
        subdirs: list[tuple[str, Gitignores]] = []
        for entry in entries:
            rel = prefix + entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError as exc:
                acc.errors.append(Skip(rel, _os_reason(exc)))
                continue
            if is_dir:
                if entry.name == ".git" or not _keep_name(rel + "/", rules, gitignores, acc):
                    continue
                skip = _walk_skip(entry.path, rules)
                if skip is None:
                    subdirs.append((rel + "/", gitignores))
                elif skip[1]:
                    acc.skip_unreadable(rel + "/", Path(entry.path), skip[0])
                else:
                    acc.skipped.append(Skip(rel + "/", skip[0]))
            elif _keep_name(rel, rules, gitignores, acc):
                _keep_entry(entry, rel, rules, acc)
        pending.extend(reversed(subdirs))


def _with_gitignore(
    top: str, prefix: str, entries: list[os.DirEntry[str]], outer: Gitignores, acc: _Acc
) -> Gitignores:
    """``outer`` plus the folder's own .gitignore, when ``entries`` (the folder's, sorted by
    name) hold one that is a regular file (git does not follow a symlinked .gitignore, nor
    does the walk)."""
    for entry in entries:
        if entry.name >= ".gitignore":
            break
    else:
        return outer
    try:
        if entry.name != ".gitignore" or not entry.is_file(follow_symlinks=False):
            return outer
    except OSError:
        return outer
    patterns = PatternList.parse(_read_ignore_file(Path(entry.path), acc), prefix)
    return (*outer, patterns) if patterns.patterns else outer


def _scan(folder: str, prefix: str, acc: _Acc) -> list[os.DirEntry[str]]:
    """The entries of one folder sorted by name; [] (and a skip or an error) when it cannot be
    read (it was found readable: its mode changed since)."""
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except PermissionError as exc:
        if prefix:
            acc.skip_unreadable(prefix, Path(folder), _os_reason(exc))
        else:
            acc.errors.append(Skip(".", _os_reason(exc)))
    except OSError as exc:
        acc.errors.append(Skip(prefix or ".", _os_reason(exc)))
    return []


def _keep_entry(entry: os.DirEntry[str], rel: str, rules: IgnoreRules, acc: _Acc) -> None:
    try:
        info = entry.stat(follow_symlinks=False)
    except FileNotFoundError:
        return  # removed during the walk
    except OSError as exc:
        acc.errors.append(Skip(rel, _os_reason(exc)))
        return
    _keep_if_regular(rel, entry.path, info, rules, acc)


def _keep_name(rel: str, rules: IgnoreRules, gitignores: Gitignores, acc: _Acc) -> bool:
    reason = rules.reason(rel) or gitignore_reason(gitignores, rel)
    if reason is None:
        return True
    acc.skipped.append(Skip(rel, reason))
    return False


def _keep_if_regular(
    rel: str, location: str, info: os.stat_result, rules: IgnoreRules, acc: _Acc
) -> None:
    """Add a FileEntry, or a Skip for a symlink, special file, file over its size cap or file
    of a skipped kind."""
    if stat.S_ISLNK(info.st_mode):
        reason: str | None = "symlink"
    elif not stat.S_ISREG(info.st_mode):
        reason = "not a regular file"
    else:
        reason, sniff = rules.size_and_kind(rel, info.st_size)
        if sniff:
            reason = minified_reason(_read_head(location))
    if reason is not None:
        acc.skipped.append(Skip(rel, reason))
    else:
        acc.files.append(FileEntry(rel, location, info.st_size, info.st_mtime_ns))


def _read_head(path: str) -> bytes:
    """The first bytes of a file for the minified sniff; b"" when it cannot be read (the
    reader then reports the problem)."""
    try:
        fd = os.open(path, _HEAD_FLAGS)
    except OSError:
        return b""
    try:
        return os.read(fd, MINIFIED_SNIFF_BYTES)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _load_rules(
    root: Path, settings: IgnoreSettings, mode: Literal["git", "walk"], acc: _Acc
) -> IgnoreRules:
    """Read the global ignore file, then the root's, and layer them (see IgnoreRules.build)."""
    global_lines = None
    if settings.global_ignore_file is not None:
        global_lines = _read_ignore_file(settings.global_ignore_file, acc)
    root_lines = _read_ignore_file(root / settings.ignore_file, acc)
    return IgnoreRules.build(settings, mode, global_lines, root_lines)


def _read_ignore_file(path: Path, acc: _Acc) -> list[str]:
    """The lines of an ignore file; [] when absent, [] and a warning when unreadable. As in
    git, lines end at "\\n" only, a UTF-8 BOM is dropped and other bytes are kept as they are
    (surrogate escapes), to match file names byte for byte."""
    try:
        return path.read_bytes().decode("utf-8-sig", "surrogateescape").split("\n")
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
