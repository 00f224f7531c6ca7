"""Exact search over the indexable files, without the index.

:func:`grep` searches, line by line, exactly the files the indexer would read: the same
:func:`~semsearch.files.listing.list_files` listing (git/.gitignore, ``.indexignore``, binary
extensions, size caps) read through the same :func:`~semsearch.files.access.read_text` (NUL sniff,
text decoding, PDF/DOCX extraction). Patterns are literal by default; ``regex=True`` takes a
Python regular expression. Python's ``re`` cannot be interrupted, so every search runs in a child
process (``python -m semsearch.files.grep``, a JSON job on stdin, one JSON event per line on stdout)
that is killed at the deadline: a pattern such as ``(a+)+$`` on a long line costs at most the
time budget. The ``regex`` package's ``timeout=`` would not do: it counts the process's CPU time
(all threads), not wall time, and bounds neither compiling the pattern nor listing and reading
the files, which the child's deadline covers too.
"""

from __future__ import annotations

import contextlib
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


@dataclass(frozen=True)
class GrepOptions:
    """What to look for; ``file_glob`` is gitignore-style, matched against the relative path."""

    pattern: str
    regex: bool = False
    case_sensitive: bool = False
    file_glob: str | None = None
    max_results: int = 50


@dataclass(frozen=True)
class GrepMatch:
    """One matching line (``line`` is 1-based; ``page`` only for PDFs)."""

    folder: str
    folder_path: str
    rel: str
    line: int
    text: str
    page: int | None = None

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
    if options.max_results < 1:
        raise UsageError(f"max_results must be at least 1, got {options.max_results}.")
    source = options.pattern if options.regex else re.escape(options.pattern)
    try:
        return re.compile(source, 0 if options.case_sensitive else re.IGNORECASE)
    except re.error as exc:
        raise UsageError(
            f"Invalid regular expression {options.pattern!r}: {exc}. "
            "Fix it, or pass regex: false to search for the text literally."
        ) from exc


def glob_spec(file_glob: str | None) -> PatternList | None:
    """The file filter (the same syntax as search's path glob); None matches every file."""
    if not file_glob:
        return None
    try:
        return PatternList.parse([file_glob], strict=True)
    except ValueError as exc:
        raise UsageError(f"Invalid file glob {exc}.") from exc


def _events(
    roots: Sequence[Path], options: GrepOptions, ignore: IgnoreSettings
) -> Iterator[GrepMatch | str | int]:
    """Matches, warnings (str) and, last, the number of files searched (int)."""
    pattern = compile_pattern(options)
    spec = glob_spec(options.file_glob)
    searched = 0
    for root in roots:
        listing = list_files(root, ignore)
        for problem in listing.errors:
            if problem.rel == ".":
                yield f"{root}: {problem.reason}"
        yield from listing.warnings  # a folder that cannot be read, among others
        for entry in listing.files:
            if spec is not None and not spec.matches(entry.rel):
                continue
            try:
                extracted = read_text(entry, ignore)
            except (FileNotFoundError, ExtractError):
                continue  # deleted since it was listed, or binary: not searched, as in the index
            except OSError as exc:
                yield f"{entry.path}: cannot read this file ({read_failure(exc)}); not searched"
                continue
            searched += 1
            yield from _match_lines(root, listing, entry, extracted, pattern)
    yield searched


def _match_lines(
    root: Path, listing: Listing, entry: FileEntry, extracted: Extracted, pattern: re.Pattern[str]
) -> Iterator[GrepMatch]:
    lines = extracted.text.split("\n")
    if lines and not lines[-1]:
        lines.pop()  # the text ends with a newline: no line after it
    offset = 0
    for number, line in enumerate(lines, start=1):
        found = pattern.search(line)
        if found is not None:
            yield GrepMatch(
                folder=root.name or str(root),
                folder_path=str(listing.root),
                rel=entry.rel,
                line=number,
                text=excerpt(line, found.start(), found.end()),
                page=page_at(extracted.pages, offset),
            )
        offset += len(line) + 1


def excerpt(line: str, start: int, end: int) -> str:
    """The line, stripped, or a window of about LINE_CHARS characters around the match."""
    if len(line) <= LINE_CHARS:
        return line.strip()
    begin = max(0, min(start - LINE_CHARS // 3, len(line) - LINE_CHARS))
    window = line[begin : begin + LINE_CHARS]
    return ("…" if begin else "") + window + ("…" if begin + LINE_CHARS < len(line) else "")


def grep(
    roots: Sequence[Path],
    options: GrepOptions,
    ignore: IgnoreSettings,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> GrepResult:
    """Search in a child process, stopping at ``max_results`` matches or after ``timeout`` s."""
    compile_pattern(options)
    glob_spec(options.file_glob)
    job = {
        "timeout": timeout,
        "roots": [str(root) for root in roots],
        "options": dataclasses.asdict(options),
        "ignore": _ignore_to_json(ignore),
    }
    started = time.monotonic()
    child = _Child(json.dumps(job).encode())
    try:
        result = child.collect(options.max_results, started + timeout)
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
        assert self._proc.stdin is not None
        self._proc.stdin.write(job)
        self._proc.stdin.close()
        self._matches: list[GrepMatch] = []
        self._warnings: list[str] = []
        self._files = 0
        self._finished = False
        self._stderr = b""

    def collect(self, limit: int, deadline: float) -> GrepResult:
        """Read events until the child ends, ``limit`` is passed, or the deadline."""
        timed_out = False
        pending = b""
        assert self._proc.stdout is not None and self._proc.stderr is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self._proc.stdout, selectors.EVENT_READ, "out")
            selector.register(self._proc.stderr, selectors.EVENT_READ, "err")
            while selector.get_map() and len(self._matches) <= limit:
                left = deadline - time.monotonic()
                if left <= 0:
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
        if not timed_out and not self._finished and len(self._matches) <= limit:
            self._raise_failure()
        return GrepResult(
            matches=tuple(self._matches[:limit]),
            truncated=len(self._matches) > limit,
            timed_out=timed_out,
            files_searched=self._files,
            seconds=0.0,
            warnings=tuple(self._warnings),
        )

    def _take(self, event: dict[str, Any]) -> None:
        if "match" in event:
            self._matches.append(GrepMatch(**event["match"]))
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


def main() -> int:
    """Child entry point: read a JSON job on stdin, write one JSON event per line."""
    job = json.load(sys.stdin)
    # No Python handler for SIGALRM: the kernel ends the process even inside a regex match,
    # so an orphan (its parent killed before it could kill us) cannot spin forever.
    signal.alarm(math.ceil(float(job.get("timeout", DEFAULT_TIMEOUT))) + 5)
    roots = [Path(root) for root in job["roots"]]
    options = GrepOptions(**job["options"])
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
