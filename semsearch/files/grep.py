"""Exact search over the indexable files, without the index.

:func:`grep` searches, line by line, exactly the files the indexer would read: the same
:func:`~semsearch.files.listing.list_files` listing (git/.gitignore, ``.indexignore``, binary
extensions, size caps) read through the same :func:`~semsearch.files.access.read_text` (NUL sniff,
text decoding, PDF/DOCX extraction). Patterns are literal by default; ``regex=True`` takes a
Python regular expression; ``word_match`` keeps only matches with no word character right before
or after them (as ``grep -w``); ``context_before``/``context_after`` bring the lines around each
match. A :class:`Scope` narrows a folder's search to some of its files or subfolders, its
listing (and so its ignore rules) unchanged.

Python's ``re`` cannot be interrupted, so every search runs in a child process (``python -m
semsearch.files.grep``, a JSON job on stdin, one JSON event per line on stdout) that is killed
at the deadline: a pattern such as ``(a+)+$`` on a long line costs at most the time budget.
The ``regex`` package's ``timeout=`` would not do: it counts the process's CPU time (all
threads), not wall time, and bounds neither compiling the pattern nor listing and reading the
files, which the child's deadline covers too.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import math
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semsearch.config import is_inside, roots_holding
from semsearch.errors import ExtractError, SemsearchError, UsageError
from semsearch.files.access import read_failure, read_text
from semsearch.files.extract import Extracted, page_at
from semsearch.files.gitignore import PatternList
from semsearch.files.ignore import IgnoreSettings
from semsearch.files.listing import FileEntry, Listing, list_files

DEFAULT_TIMEOUT = 10.0
MAX_PATTERN_CHARS = 1000
LINE_CHARS = 240
"""A matching line longer than this is shown as a window around the match."""
PR_SET_PDEATHSIG = 1  # prctl(2)


@dataclass(frozen=True)
class GrepOptions:
    """What to look for.

    ``file_glob`` is one gitignore-style glob or several, matched against the relative path: a
    file is searched when it matches any of those without a leading ``!`` (or there are none) and
    none of the ``!PAT`` ones. ``max_results`` None means no limit. ``full_lines`` gives each
    line as it is; otherwise lines are stripped and a long one is cut to a window (:func:`excerpt`).
    """

    pattern: str
    regex: bool = False
    case_sensitive: bool = False
    file_glob: str | tuple[str, ...] | None = None
    max_results: int | None = 50
    word_match: bool = False
    context_before: int = 0
    context_after: int = 0
    full_lines: bool = False


@dataclass(frozen=True)
class Scope:
    """A folder to search: ``root`` is listed (its ignore rules apply) and, unless ``paths`` is
    empty, only the files at or below these POSIX paths relative to it are searched."""

    root: Path
    paths: tuple[str, ...] = ()

    def holds(self, rel: str) -> bool:
        """Whether ``rel`` is one of ``paths`` or lies below one (always, without paths)."""
        return not self.paths or any(
            rel == path or rel.startswith(path.rstrip("/") + "/") for path in self.paths
        )


def resolve_scopes(
    paths: Sequence[str], roots: Sequence[Path], cwd: Path | None = None
) -> list[Scope]:
    """Where to search for the files or folders ``paths`` (relative to ``cwd``).

    A path inside a configured folder (``roots``) narrows that folder's search, whose listing
    and ignore rules stay those of the whole folder; a folder outside them is listed on its own,
    as ``semsearch add`` would have it indexed. Raises :class:`UsageError` for a path that does
    not exist or a file outside the configured folders.
    """
    base = cwd or Path.cwd()
    whole: dict[Path, None] = {}
    parts: dict[Path, list[str]] = {}
    for raw in paths:
        if not raw:
            raise UsageError("A path to search is empty.")
        real = Path(os.path.realpath(base / os.path.expanduser(raw)))
        if not real.exists():
            raise UsageError(f"{raw}: no such file or folder.")
        owners = roots_holding(roots, real)
        if owners:
            rel = Path(os.path.relpath(real, os.path.realpath(owners[0]))).as_posix()
            if rel == ".":
                whole[owners[0]] = None
            else:
                parts.setdefault(owners[0], []).append(rel)
        elif real.is_dir():
            whole[real] = None
        else:
            raise UsageError(
                f"{raw} is a file outside the configured folders: give its folder instead "
                "(searched as `semsearch add` would index it)."
            )
    scopes = [Scope(root) for root in whole]
    scopes += [Scope(root, tuple(rels)) for root, rels in parts.items() if root not in whole]
    # a folder given inside another given folder is searched once, as part of the outer one
    return [s for s in scopes if not any(is_inside(s.root, t.root) for t in scopes if t is not s)]


@dataclass(frozen=True)
class GrepMatch:
    """One matching line (``line`` and ``column``, the match's first character in the line,
    are 1-based; ``page`` only for PDFs); ``before`` and ``after`` are the context lines asked
    for, those of the file's first and last lines being fewer."""

    folder: str
    folder_path: str
    rel: str
    line: int
    text: str
    page: int | None = None
    column: int = 1
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        """Absolute path of the file."""
        return os.path.join(self.folder_path, self.rel)


@dataclass(frozen=True)
class GrepResult:
    """What :func:`grep` found: ``truncated`` when more than ``max_results`` lines match,
    ``timed_out`` when the time budget ran out first (the matches are then partial)."""

    matches: tuple[GrepMatch, ...]
    truncated: bool
    timed_out: bool
    files_searched: int
    seconds: float
    warnings: tuple[str, ...] = ()


def compile_pattern(options: GrepOptions) -> re.Pattern[str]:
    """The compiled pattern; raises :class:`UsageError` for an empty, huge or invalid one."""
    if not options.pattern:
        raise UsageError("The pattern is empty. Give the text to search for.")
    if len(options.pattern) > MAX_PATTERN_CHARS:
        raise UsageError(f"The pattern is longer than {MAX_PATTERN_CHARS} characters.")
    if options.max_results is not None and options.max_results < 1:
        raise UsageError(f"max_results must be at least 1, got {options.max_results}.")
    for name in ("context_before", "context_after"):
        if getattr(options, name) < 0:
            raise UsageError(f"{name} must be at least 0, got {getattr(options, name)}.")
    source = options.pattern if options.regex else re.escape(options.pattern)
    if options.word_match:  # grep -w: no word character touches the match on either side
        source = rf"(?<!\w)(?:{source})(?!\w)"
    try:
        return re.compile(source, 0 if options.case_sensitive else re.IGNORECASE)
    except re.error as exc:
        raise UsageError(
            f"Invalid regular expression {options.pattern!r}: {exc}. "
            "Fix it, or search for the text literally (regex: false over MCP, -F in the CLI)."
        ) from exc


@dataclass(frozen=True)
class GlobFilter:
    """The files :attr:`GrepOptions.file_glob` lets through: any include, none of the excludes."""

    include: PatternList | None
    exclude: PatternList | None

    def passes(self, rel: str) -> bool:
        """Whether the file at ``rel`` is searched."""
        if self.include is not None and not self.include.matches(rel):
            return False
        return self.exclude is None or not self.exclude.matches(rel)


def glob_spec(file_glob: str | Sequence[str] | None) -> GlobFilter | None:
    """The file filter (the same syntax as search's path glob); None lets every file through."""
    globs = [file_glob] if isinstance(file_glob, str) else list(file_glob or ())
    if not globs:
        return None
    include = [glob for glob in globs if not glob.startswith("!")]
    exclude = [glob[1:] for glob in globs if glob.startswith("!")]
    try:
        return GlobFilter(
            PatternList.parse(include, strict=True) if include else None,
            PatternList.parse(exclude, strict=True) if exclude else None,
        )
    except ValueError as exc:
        raise UsageError(f"Invalid file glob {exc}.") from exc


def _events(
    scopes: Sequence[Scope], options: GrepOptions, ignore: IgnoreSettings
) -> Iterator[GrepMatch | str | int]:
    """Matches, warnings (str) and, last, the number of files searched (int)."""
    pattern = compile_pattern(options)
    spec = glob_spec(options.file_glob)
    searched = 0
    for scope in scopes:
        root = scope.root
        listing = list_files(root, ignore)
        for problem in listing.errors:
            if problem.rel == ".":
                yield f"{root}: {problem.reason}"
        yield from listing.warnings  # a folder that cannot be read, among others
        for entry in listing.files:
            if not scope.holds(entry.rel) or (spec is not None and not spec.passes(entry.rel)):
                continue
            try:
                extracted = read_text(entry, ignore)
            except (FileNotFoundError, ExtractError):
                continue  # deleted since it was listed, or binary: not searched, as in the index
            except OSError as exc:
                yield f"{entry.path}: cannot read this file ({read_failure(exc)}); not searched"
                continue
            searched += 1
            yield from _match_lines(root, listing, entry, extracted, pattern, options)
    yield searched


def _match_lines(
    root: Path,
    listing: Listing,
    entry: FileEntry,
    extracted: Extracted,
    pattern: re.Pattern[str],
    options: GrepOptions,
) -> Iterator[GrepMatch]:
    lines = extracted.text.split("\n")
    if lines and not lines[-1]:
        lines.pop()  # the text ends with a newline: no line after it
    offset = 0
    for number, line in enumerate(lines, start=1):
        found = pattern.search(line)
        if found is not None:
            before = lines[max(0, number - 1 - options.context_before) : number - 1]
            after = lines[number : number + options.context_after]
            yield GrepMatch(
                folder=root.name or str(root),
                folder_path=str(listing.root),
                rel=entry.rel,
                line=number,
                text=_shown(line, found.start(), found.end(), options),
                page=page_at(extracted.pages, offset),
                column=found.start() + 1,
                before=tuple(_shown(text, 0, 0, options) for text in before),
                after=tuple(_shown(text, 0, 0, options) for text in after),
            )
        offset += len(line) + 1


def _shown(line: str, start: int, end: int, options: GrepOptions) -> str:
    return line if options.full_lines else excerpt(line, start, end)


def excerpt(line: str, start: int, end: int) -> str:
    """The line, stripped, or a window of about LINE_CHARS characters around the match."""
    if len(line) <= LINE_CHARS:
        return line.strip()
    begin = max(0, min(start - LINE_CHARS // 3, len(line) - LINE_CHARS))
    window = line[begin : begin + LINE_CHARS]
    return ("…" if begin else "") + window + ("…" if begin + LINE_CHARS < len(line) else "")


def grep(
    roots: Sequence[Path | Scope],
    options: GrepOptions,
    ignore: IgnoreSettings,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> GrepResult:
    """Search in a child process, stopping at ``max_results`` matches or after ``timeout`` s
    (None: no time limit; the caller interrupts it)."""
    compile_pattern(options)
    glob_spec(options.file_glob)
    scopes = [root if isinstance(root, Scope) else Scope(root) for root in roots]
    job = {
        "timeout": timeout,
        "roots": [{"root": str(s.root), "paths": list(s.paths)} for s in scopes],
        "options": dataclasses.asdict(options),
        "ignore": _ignore_to_json(ignore),
        "parent": os.getpid(),
    }
    started = time.monotonic()
    child = _Child(json.dumps(job).encode())
    try:
        deadline = None if timeout is None else started + timeout
        result = child.collect(options.max_results, deadline)
    finally:
        child.stop()
    return dataclasses.replace(result, seconds=round(time.monotonic() - started, 3))


class _Child:
    """The ``python -m semsearch.files.grep`` process and the events it has streamed so far."""

    def __init__(self, job: bytes) -> None:
        package_parent = Path(__file__).resolve().parents[2]
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "semsearch.files.grep"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=package_parent,  # so `-m` never imports a semsearch from the caller's cwd
            start_new_session=True,  # its own process group: the deadline kills git too
        )
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(job)
            self._proc.stdin.close()
        except BaseException:  # Ctrl-C, or a child that died at once: never leave it running
            self.stop()
            raise
        self._matches: list[GrepMatch] = []
        self._warnings: list[str] = []
        self._files = 0
        self._finished = False
        self._stderr = b""

    def collect(self, limit: int | None, deadline: float | None) -> GrepResult:
        """Read events until the child ends, ``limit`` is passed, or the deadline (None: no
        limit, no deadline)."""
        timed_out = False
        pending = b""
        most = math.inf if limit is None else limit
        assert self._proc.stdout is not None and self._proc.stderr is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self._proc.stdout, selectors.EVENT_READ, "out")
            selector.register(self._proc.stderr, selectors.EVENT_READ, "err")
            while selector.get_map() and len(self._matches) <= most:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    timed_out = True
                    break
                for key, _ in selector.select(left):
                    data = os.read(key.fd, 65536)
                    if not data:
                        selector.unregister(key.fileobj)
                    elif key.data == "err":
                        self._stderr = (self._stderr + data)[-4000:]
                    else:
                        *lines, pending = (pending + data).split(b"\n")
                        for line in lines:
                            self._take(json.loads(line))
        if not timed_out and not self._finished and len(self._matches) <= most:
            self._raise_failure()
        return GrepResult(
            matches=tuple(self._matches[:limit]),
            truncated=len(self._matches) > most,
            timed_out=timed_out,
            files_searched=self._files,
            seconds=0.0,
            warnings=tuple(self._warnings),
        )

    def _take(self, event: dict[str, Any]) -> None:
        if "match" in event:
            match = event["match"]
            before, after = tuple(match.pop("before")), tuple(match.pop("after"))
            self._matches.append(GrepMatch(**match, before=before, after=after))
        elif "warning" in event:
            self._warnings.append(str(event["warning"]))
        elif "files" in event:
            self._files = int(event["files"])
            self._finished = True

    def _raise_failure(self) -> None:
        self._proc.wait()
        detail = self._stderr.decode("utf-8", "replace").strip().splitlines()
        reason = detail[-1] if detail else f"exit status {self._proc.returncode}"
        raise SemsearchError(f"grep failed: {reason}")

    def stop(self) -> None:
        """Kill the child and its process group (a no-op once it has exited)."""
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()


def _ignore_to_json(ignore: IgnoreSettings) -> dict[str, Any]:
    def plain(value: Any) -> Any:
        if isinstance(value, (frozenset, set)):
            return sorted(value)
        if isinstance(value, tuple):
            return list(value)
        return str(value) if isinstance(value, Path) else value

    return {f.name: plain(getattr(ignore, f.name)) for f in dataclasses.fields(ignore)}


def _ignore_from_json(data: dict[str, Any]) -> IgnoreSettings:
    defaults = IgnoreSettings()
    values: dict[str, Any] = {}
    for f in dataclasses.fields(IgnoreSettings):
        if f.name not in data:
            continue
        value, default = data[f.name], getattr(defaults, f.name)
        if isinstance(default, frozenset):
            value = frozenset(value)
        elif isinstance(default, tuple):
            value = tuple(value)
        elif "Path" in str(f.type) and value is not None:
            value = Path(value)
        values[f.name] = value
    return IgnoreSettings(**values)


def _die_with_parent(parent: int) -> None:
    """Have the kernel kill this child when its parent dies (Linux's PR_SET_PDEATHSIG): without a
    deadline, nothing else would end a regex match left running by a killed parent."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the call above
        os._exit(1)


def main() -> int:
    """Child entry point: read a JSON job on stdin, write one JSON event per line."""
    job = json.load(sys.stdin)
    # No Python handler for SIGALRM: the kernel ends the process even inside a regex match,
    # so an orphan (its parent killed before it could kill us) cannot spin forever. Without a
    # timeout the parent is a terminal's command: it kills us when interrupted.
    if job.get("timeout") is not None:
        signal.alarm(math.ceil(float(job["timeout"])) + 5)
    else:
        _die_with_parent(int(job["parent"]))
    roots = [Scope(Path(root["root"]), tuple(root["paths"])) for root in job["roots"]]
    fields = job["options"]
    if isinstance(fields["file_glob"], list):
        fields["file_glob"] = tuple(fields["file_glob"])
    options = GrepOptions(**fields)
    ignore = _ignore_from_json(job["ignore"])
    out = sys.stdout
    try:
        for event in _events(roots, options, ignore):
            if isinstance(event, GrepMatch):
                record: dict[str, Any] = {"match": dataclasses.asdict(event)}
            elif isinstance(event, str):
                record = {"warning": event}
            else:
                record = {"files": event}
            out.write(json.dumps(record) + "\n")
            out.flush()
    except BrokenPipeError:  # the parent has all it wants
        return 0
    except SemsearchError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
