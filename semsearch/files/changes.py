"""Whether folders may differ from the index since a full check last found nothing to do.

The MCP server (before ``search`` and ``gather``) and ``semsearch index --watch`` ask a
:class:`ChangeMonitor` before they run :meth:`~semsearch.index.Index.pending_work`, which lists
every folder and compares each file's mtime and size with the index. The check is skipped when,
since the last one that found no work, nothing it depends on can have changed:

- the watcher (:mod:`semsearch.files.watcher`) saw no change under the folders, and can be relied on
  (local file systems, enough watches);
- the folders, the ignore settings and the index (its write counter) are the same, and each
  folder is still the same directory with the same ``.git`` entries at and above it;
- the files the listing reads from outside the watched trees have the same stat: the global
  ignore file, each repository's ``index``, ``config`` and ``info/exclude``, its
  ``core.excludesFile`` and the ``.gitignore`` files between a work tree's top and a folder
  inside it;
- and less than ``recheck_seconds`` passed: a safety net for changes no event reports (a file
  written through a hard link from outside the folders or through a shared mmap, a file system
  mounted inside a folder, a global git config edit).

Otherwise :meth:`ChangeMonitor.begin` returns a :class:`Check` and the caller runs the full
check; :meth:`ChangeMonitor.confirm` records it when it found nothing to do. A change reaches the
watcher 50 to 100 ms after it is made: a call sooner than that may not see it yet, the next one
does.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

from semsearch.files.ignore import IgnoreSettings
from semsearch.files.watcher import DirectoryWatcher

RECHECK_SECONDS = 60.0
_GIT_TIMEOUT = 10.0

Stat = tuple[int, int, int, int] | None  # inode, size, mtime and ctime in ns; None: no file


@dataclass(frozen=True)
class Check:
    """A full check about to run and what it starts from; give it to
    :meth:`ChangeMonitor.confirm` when the check found nothing to do."""

    watcher: DirectoryWatcher
    index_state: Hashable
    control: tuple[Stat, ...]
    started: float


class ChangeMonitor:
    """Tells when the full freshness check can be skipped (see the module).

    ``max_watches`` caps the directories watched (beyond it every call runs the full check).
    Not thread-safe: one caller at a time.
    """

    def __init__(
        self, recheck_seconds: float = RECHECK_SECONDS, max_watches: int | None = None
    ) -> None:
        self._recheck = recheck_seconds
        self._max_watches = max_watches
        self._watcher: DirectoryWatcher | None = None
        self._key: tuple[object, ...] = ()
        self._controls: tuple[Path, ...] = ()
        self._verified: Check | None = None

    @property
    def problem(self) -> str | None:
        """Why every call runs the full check (None while the watcher can be relied on)."""
        return "not started" if self._watcher is None else self._watcher.problem

    def begin(
        self, roots: Sequence[Path], ignore: IgnoreSettings, index_state: Hashable
    ) -> Check | None:
        """None when nothing can have changed since a full check found no work: skip it.

        Otherwise the :class:`Check` to run; changes from now on count for the next call.
        ``index_state`` is anything that changes with the index (its write counter).
        """
        watcher = self._current(roots, ignore)
        is_dirty = watcher.is_dirty()
        control = tuple(_stat(path) for path in self._controls)
        last, now = self._verified, time.monotonic()
        if (
            not is_dirty
            and watcher.problem is None
            and last is not None
            and last.watcher is watcher
            and last.index_state == index_state
            and last.control == control
            and now - last.started < self._recheck
        ):
            return None
        self._verified = None  # until this check finds nothing to do
        watcher.clear()
        return Check(watcher, index_state, control, now)

    def confirm(self, check: Check) -> None:
        """The full check begun as ``check`` found nothing to do: skip the next ones until
        something changes."""
        if check.watcher is self._watcher:
            self._verified = check

    def close(self) -> None:
        """Stop the watcher (its thread and watches)."""
        if self._watcher is not None:
            self._watcher.close()
        self._watcher, self._key, self._verified = None, (), None

    def _current(self, roots: Sequence[Path], ignore: IgnoreSettings) -> DirectoryWatcher:
        """The watcher of these folders, a new one when they, the ignore settings or their
        layout changed, or when the one running went stale."""
        key = (tuple(roots), ignore, _layout(roots))
        watcher = self._watcher
        if watcher is not None and key == self._key and not watcher.is_stale:
            return watcher
        self.close()
        watcher = DirectoryWatcher(roots, self._max_watches)
        self._watcher, self._key = watcher, key
        self._controls = ()
        if watcher.problem is None:
            self._controls = _control_files(roots, ignore, watcher.git_entries)
        return watcher


def _layout(roots: Sequence[Path]) -> tuple[object, ...]:
    """Per folder: its real path, which directory it is, and which of it and its parents hold
    a ``.git`` entry (what decides the listing's git or walk mode)."""
    rows: list[object] = []
    for root in roots:
        real = Path(os.path.realpath(root))
        try:
            info = os.stat(real)
            identity: tuple[int, int] | None = (info.st_dev, info.st_ino)
        except OSError:
            identity = None
        marks = tuple(os.path.exists(folder / ".git") for folder in (real, *real.parents))
        rows.append((real, identity, marks))
    return tuple(rows)


def _stat(path: Path) -> Stat:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def _control_files(
    roots: Sequence[Path], ignore: IgnoreSettings, git_entries: Sequence[Path]
) -> tuple[Path, ...]:
    """The files outside the watched trees that decide what the folders list."""
    files: list[Path] = []
    if ignore.global_ignore_file is not None:
        files.append(ignore.global_ignore_file)
    for root in roots:
        real = Path(os.path.realpath(root))
        top = next((f for f in (real, *real.parents) if os.path.exists(f / ".git")), None)
        if top is None:
            continue
        files += _git_files(top / ".git")
        files += [folder / ".gitignore" for folder in real.parents if folder.is_relative_to(top)]
        excludes = _excludes_file(real)
        if excludes is not None:
            files.append(excludes)
    for entry in git_entries:
        files += _git_files(entry)
    return tuple(dict.fromkeys(files))


def _git_files(dotgit: Path) -> list[Path]:
    """A repository's files that decide what ``git ls-files`` lists: its index, config and
    info/exclude; a ``.git`` file (a worktree or submodule) names the git directory."""
    gitdir, files = dotgit, []
    if os.path.isfile(dotgit):
        files.append(dotgit)
        try:
            text = dotgit.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return files
        if not text.startswith("gitdir:"):
            return files
        gitdir = dotgit.parent / text.removeprefix("gitdir:").strip()
    common = gitdir
    with contextlib.suppress(OSError):  # no commondir: not a linked worktree
        common = gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()
    files += [gitdir / "index", gitdir / "config.worktree", common / "config"]
    return [*files, common / "info" / "exclude"]


def _excludes_file(root: Path) -> Path | None:
    """``core.excludesFile`` as git reads it for the work tree holding ``root`` (None when it
    is not set or git cannot say; the default file is left to the periodic check)."""
    argv = ["git", "-C", str(root), "config", "--path", "--get", "core.excludesFile"]
    try:
        proc = subprocess.run(
            argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=_GIT_TIMEOUT, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    value = os.fsdecode(proc.stdout).strip()
    return root / value if proc.returncode == 0 and value else None
