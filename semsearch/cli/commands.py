"""The ``semsearch`` command: a thin adapter over :mod:`semsearch.index` and :mod:`.config`.

Exit codes: 0 success, 1 failure, 2 usage error. Results go to stdout; progress, warnings and
errors to stderr.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from semsearch import __version__
from semsearch.cli.output import (
    Marker,
    Progress,
    file_rows,
    grep_json,
    json_text,
    print_check,
    print_grep,
    print_hits,
    print_lines,
    print_passages,
    print_pending,
    print_plan,
    print_rebuild,
    print_report,
    print_status,
    print_vimgrep,
    quote_path,
    rebuild_json,
    watch_line,
)
from semsearch.cli.remote import (
    TOOL_MAX_CONTEXT_LINES,
    TOOL_MAX_K,
    ServedHit,
    ServedLines,
    ServedPassage,
    connect,
    is_on_disk,
)
from semsearch.config import DEFAULT_SERVE_PORT, MODES, Location, Settings, load_settings
from semsearch.errors import SemsearchError, UsageError
from semsearch.process import cap_malloc_arenas, set_environment
from semsearch.service import STATUS_URI, running_server

if TYPE_CHECKING:  # the library loads inside the commands (see _index)
    from semsearch.index import Index
    from semsearch.indexing.report import IndexReport
    from semsearch.search.hits import Hit
    from semsearch.search.passage import Passage
    from semsearch.service import ServerRecord
    from semsearch.store import LockHolder

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


def _whole(
    least: int, most: int | None = None, what: str = "a whole number"
) -> Callable[[str], int]:
    """An argparse type: a whole number from ``least`` to ``most`` (no limit when None)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < least or (most is not None and value > most):
            bounds = f"at least {least}" if most is None else f"between {least} and {most}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {value}")
        return value

    return parse


_positive = _whole(1)
_count = _whole(0)
_port = _whole(0, 65535, "a port number")


def _minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of minutes, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def _score(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


EXAMPLES = """\
examples:
  semsearch add ~/notes ~/src/my-api     # configure folders
  semsearch index                        # index them (incremental; run again any time)
  semsearch search "how are failed payments retried" -k 10
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (subcommands and their flags)."""
    parser = argparse.ArgumentParser(
        prog="semsearch",
        description="Local semantic search over your files: hybrid BM25 + embeddings, offline.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_global_flags(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add = sub.add_parser("add", help="add folders to the configuration")
    add.add_argument("paths", nargs="+", metavar="PATH", help="folders to add")
    remove = sub.add_parser("remove", aliases=["rm"], help="remove folders (and purge them)")
    remove.add_argument(
        "targets", nargs="+", metavar="NAME|PATH", help="folders to remove, by name or path"
    )
    remove.add_argument(
        "--keep-index", action="store_true", help="leave their chunks searchable (default: purge)"
    )
    sub.add_parser("list", aliases=["ls"], help="list configured folders")
    sub.add_parser("config", help="show where config, index and model live")
    status = sub.add_parser("status", help="folders, files, chunks, index size, model, changes")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.add_argument(
        "--check",
        action="store_true",
        help="read the whole index and report any damage instead (exit 1 if damaged)",
    )
    index = sub.add_parser("index", help="index configured folders (or PATH) incrementally")
    index.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help="index only this folder (default: the configured folders)",
    )
    index.add_argument(
        "--force",
        action="store_true",
        help="re-read and re-embed everything (default: new and changed files)",
    )
    index.add_argument(
        "--rebuild",
        action="store_true",
        help="set the index aside (kept, renamed) and index the configured folders anew: "
        "the way out of a damaged index",
    )
    index.add_argument(
        "--model",
        metavar="NAME",
        help="embed with this installed model (`semsearch config` lists them); an index of "
        "another model is chunked and embedded again (default: config `model`, else the "
        "index's own model)",
    )
    index.add_argument(
        "--max-files", type=_positive, metavar="N", help="stop after N files (default: no limit)"
    )
    index.add_argument(
        "--dry-run", action="store_true", help="list what would be indexed and skipped, and why"
    )
    index.add_argument("--json", action="store_true", help="print a JSON summary")
    index.add_argument(
        "-v", "--verbose", action="store_true", help="one line per file, with skip reasons"
    )
    index.add_argument(
        "--watch", action="store_true", help="keep indexing changes until interrupted"
    )
    search = sub.add_parser("search", help="search the index")
    search.add_argument("query", nargs="+", help="what to look for, in plain words or names")
    search.add_argument(
        "-k",
        "--top-k",
        type=_positive,
        metavar="N",
        dest="k",
        help="number of results (default: defaultTopK in the config, 5)",
    )
    search.add_argument(
        "--folder", metavar="NAME", help="only this folder, by name or path (default: all folders)"
    )
    search.add_argument(
        "--glob",
        metavar="PAT",
        action="append",
        help="only paths matching this gitignore-style glob, relative to the folder; repeat it "
        "for several (any may match); !PAT leaves paths out (default: all files)",
    )
    search.add_argument(
        "--exclude",
        metavar="PAT",
        action="append",
        help="leave out paths matching this gitignore-style glob; repeatable (default: none)",
    )
    search.add_argument("--mode", choices=MODES, help="ranking arms: %(choices)s (default: hybrid)")
    search.add_argument(
        "--min-score",
        type=_score,
        metavar="X",
        help="leave out hits scoring below X, on the 0 to 1 scale of scores (default: keep all)",
    )
    search.add_argument(
        "-C",
        "--context",
        type=_count,
        metavar="N",
        help="show each hit's whole chunk with N lines of its file before and after "
        "(default: the chunk's first 100 characters on one line)",
    )
    search.add_argument(
        "--full", action="store_true", help="show each hit's whole chunk (same as -C 0)"
    )
    search.add_argument(
        "--vimgrep", action="store_true", help="print path:line:col:text, one line per hit"
    )
    search.add_argument("--json", action="store_true", help="print JSON")
    search.add_argument(
        "--files-only", action="store_true", help="print matching paths only (JSON with --json)"
    )
    search.add_argument(
        "--explain", action="store_true", help="show each hit's arm ranks and ranking priors"
    )
    search.add_argument(
        "--all-copies",
        action="store_true",
        help="list each copy of a text as its own hit (default: one hit, its copies under it)",
    )
    sub.add_parser("mcp", help="run the MCP stdio server")
    serve = sub.add_parser(
        "serve",
        help="serve the MCP tools over HTTP on this machine: a warm process for MCP clients, "
        "which search, cat and status use too",
    )
    serve.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_SERVE_PORT,
        metavar="N",
        help="TCP port (default: %(default)s; 0: any free port)",
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="ADDR",
        help="address to listen on (default: %(default)s, this machine only); another one lets "
        "other machines reach it, with a warning",
    )
    serve.add_argument(
        "--idle-exit",
        type=_minutes,
        metavar="MINUTES",
        help="stop after MINUTES without a request (default: run until stopped)",
    )
    move = sub.add_parser("move", help="give a moved folder's index to its new path")
    move.add_argument("old", metavar="OLD", help="the folder's name or old path (may be gone)")
    move.add_argument("new", metavar="NEW", help="the folder's new path (a directory)")
    _add_grep(sub)
    cat = sub.add_parser(
        "cat", help="print a file of a configured folder (or some lines), as the indexer reads it"
    )
    cat.add_argument(
        "target", metavar="PATH[:FROM[-TO]]", help="the file, and lines FROM to TO (inclusive)"
    )
    cat.add_argument("-n", "--number", action="store_true", help="number the lines")
    for command in dict.fromkeys(sub.choices.values()):  # aliases share a parser
        _add_global_flags(command)
    return parser


def _add_grep(sub: Any) -> None:
    """``grep``: its flags follow grep and ripgrep."""
    grep = sub.add_parser(
        "grep", help="exact or regex search in the files semsearch indexes, without the index"
    )
    grep.add_argument("pattern", metavar="PATTERN", help="a Python regular expression")
    grep.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="files or folders to search (default: the configured folders)",
    )
    grep.add_argument("-i", "--ignore-case", action="store_true", help="ignore case")
    grep.add_argument("-w", "--word-regexp", action="store_true", help="match whole words only")
    grep.add_argument(
        "-F", "--fixed-strings", action="store_true", help="PATTERN is text, not a regex"
    )
    grep.add_argument(
        "--glob",
        action="append",
        metavar="PAT",
        help="only paths matching this gitignore-style glob, !PAT: not those; repeatable "
        "(default: all files)",
    )
    grep.add_argument(
        "-C", "--context", type=_count, metavar="N", help="N lines around each match (default: 0)"
    )
    grep.add_argument(
        "-A",
        "--after-context",
        dest="after",
        type=_count,
        metavar="N",
        help="N lines after each match (default: -C's N)",
    )
    grep.add_argument(
        "-B",
        "--before-context",
        dest="before",
        type=_count,
        metavar="N",
        help="N lines before each match (default: -C's N)",
    )
    grep.add_argument("--json", action="store_true", help="print JSON")


def _add_global_flags(parser: argparse.ArgumentParser) -> None:
    """``--index`` and ``--version``, accepted before or after the subcommand.

    ``--index`` defaults to SUPPRESS on both levels, so that a value given before the subcommand
    is not overwritten by the subcommand parser's default (:func:`main` fills in None).
    """
    parser.add_argument("--version", action="version", version=f"semsearch {__version__}")
    parser.add_argument(
        "--index",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="index file to use (default: SS_INDEX_PATH, else index.db in the XDG data dir)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the CLI's single error boundary."""
    set_environment()  # before numpy loads; cap_malloc_arenas() runs when the library does
    _escape_unencodable(sys.stdout)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    args.index = getattr(args, "index", None)
    try:
        settings = load_settings(os.environ, args.index)
        for warning in settings.warnings:
            print(f"semsearch: warning: {warning}", file=sys.stderr)
        code: int = COMMANDS[args.command](args, settings)
        return code
    except UsageError as exc:
        print(f"semsearch: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SemsearchError as exc:
        print(f"semsearch: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        print(
            "semsearch: interrupted; the index is consistent, run again to resume.", file=sys.stderr
        )
        return 130


def _escape_unencodable(stream: TextIO) -> None:
    """Have ``stream`` print what its encoding cannot hold (a file name's bytes that are not
    UTF-8, kept as surrogate escapes) as backslash escapes rather than fail: inside a JSON
    string that is the ``\\udcXX`` escape :func:`~.output.json_text` writes."""
    if isinstance(stream, io.TextIOWrapper):
        stream.reconfigure(errors="backslashreplace")


def _index(settings: Settings, one_shot: bool = False) -> Index:
    """The library's front door for one command (see :class:`~semsearch.index.Index`)."""
    cap_malloc_arenas()
    # numpy, the store and the model code load here, not for --help, list or config
    from semsearch.index import Index

    return Index(settings, one_shot=one_shot)


def main_exit() -> None:
    """Console-script entry point."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # `semsearch search ... | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_OK
    sys.exit(code)


def cmd_add(args: argparse.Namespace, settings: Settings) -> int:
    """``add PATH...``: never a folder twice, not even nested."""
    index = _index(settings)
    try:
        change = index.add(args.paths, Path.cwd())
    finally:
        index.close()
    links = {target: raw for raw, target in change.links}

    def via(path: Path) -> str:
        return f"  ({links[path]} is a symlink to it)" if path in links else ""

    for path in change.changed:
        print(f"added     {path}{via(path)}")
    for path in change.unchanged:
        print(f"already   {path}{via(path)}")
    for inner, outer in change.taken_over:
        print(f"merged    {inner} into {outer} (its index moved over, nothing re-embedded)")
    for raw, reason in change.rejected:
        print(f"not added: {raw} {reason}", file=sys.stderr)
    for path, owner in change.covered:
        how = "configured" if owner in change.roots else "indexed (add that folder instead)"
        shown = f"{links[path]} (a symlink to {path})" if path in links else str(path)
        print(f"not added: {shown} is inside {owner}, which is already {how}", file=sys.stderr)
    for path, old in change.moved:
        print(
            f"not added: {path}: it looks like {old} moved here: run `semsearch move {old} "
            f"{path}` (keeps its index, nothing re-embedded), or `semsearch remove {old}` "
            "first to add it as a new folder",
            file=sys.stderr,
        )
    if change.changed or change.taken_over:
        count = len(change.roots)
        print(f"\n{count} folder{'s' if count != 1 else ''} configured in {settings.config_path}")
        print("Next: semsearch index")
    refused = change.rejected or change.covered or change.moved
    return EXIT_FAIL if refused and not (change.changed or change.taken_over) else EXIT_OK


def cmd_remove(args: argparse.Namespace, settings: Settings) -> int:
    """``remove [--keep-index] NAME|PATH...``: nothing changes unless every target resolves."""
    index = _index(settings)
    try:
        change, files = index.remove(args.targets, keep_index=args.keep_index, cwd=Path.cwd())
    finally:
        index.close()
    for path in change.changed:
        print(f"removed   {path}")
    if not args.keep_index:
        print(f"purged    {files} file{'s' if files != 1 else ''} from the index")
    if change.changed:
        count = len(change.roots)
        print(f"\n{count} folder{'s' if count != 1 else ''} remaining")
        if args.keep_index:
            print("Chunks left in place (--keep-index): run `semsearch remove` again to purge.")
    return EXIT_OK


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    """``list``"""
    if not settings.roots:
        print("No folders configured yet. Add one with:\n  semsearch add /path/to/your/project")
        return EXIT_OK
    width = max(len(root.name) for root in settings.roots)
    for root in settings.roots:
        note = "" if root.is_dir() else "  (missing on disk)"
        print(f"{root.name.ljust(width)}  {root}{note}")
    return EXIT_OK


def cmd_config(args: argparse.Namespace, settings: Settings) -> int:
    """``config``"""
    # the installed models, from the packages' metadata (no numpy, no model code)
    from semsearch import model_rows

    rows, problems = model_rows()
    note = "" if settings.config_exists else "  (not created yet: run `semsearch add`)"
    print(f"config file   {settings.config_path}{note}")
    print(f"index         {settings.store_path}  ({settings.store_backend})")
    print(f"model         {_model_choice(settings, rows[0][0])}")
    width = max(len(name) for name, _ in rows)
    print(f"models        {rows[0][0].ljust(width)}  {rows[0][1]}")
    for name, about in rows[1:]:
        print(f"              {name.ljust(width)}  {about}")
    for problem in problems:
        print(f"  warning: model package {problem}", file=sys.stderr)
    print(f"ignore file   {settings.global_ignore_file} (+ {settings.ignore_file} in each folder)")
    if settings.serve_token:
        print("serve token   from SS_SERVE_TOKEN")
    else:
        made = "" if settings.serve_token_file.exists() else "  (made by `semsearch serve`)"
        print(f"serve token   {settings.serve_token_file}{made}")
    server = running_server(settings)
    if server is not None:
        print(f"server        {server.describe()}")
    roots = [str(r) for r in settings.roots] or ["(none configured)"]
    print(f"folders       {roots[0]}")
    for root in roots[1:]:
        print(f"              {root}")
    return EXIT_OK


def _model_choice(settings: Settings, built_in: str) -> str:
    """The model the settings pick, in words."""
    if settings.model_dir is not None:
        return f"{settings.model_dir} (modelDir / SS_MODEL_DIR)"
    if settings.model is not None:
        return f"{settings.model} (config `model` / SS_MODEL)"
    return f"{built_in} for a new index; an existing index keeps the model it was built with"


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    """``status [--check]``; without ``--check``, answered by a running server when one serves
    this index."""
    status = None if args.check else _status_served(settings)
    if status is None:
        index = _index(settings)
        if args.check:
            return _check(index, settings)
        try:
            status = index.status().as_json()
        finally:
            index.close()
    print_status(status, args.json)
    return EXIT_OK


def _status_served(settings: Settings) -> dict[str, Any] | None:
    """``status --json`` from the status resource of a server running for this index; None to
    make it here (no server, an error, a folder name the server cannot send as it is)."""
    remote = connect(settings)
    text = None if remote is None else remote.read(STATUS_URI)
    if text is None:
        return None
    status: dict[str, Any] = json.loads(text)
    shown = [row["path"] for row in status["folders"] if row["exists"]]
    return status if is_on_disk(shown) else None


def _check(index: Index, settings: Settings) -> int:
    """``status --check``: exit 1 when the index is damaged."""
    try:
        check = index.check(on_wait=_say_waiting(settings.store_path))
    finally:
        index.close()
    print_check(check)
    return EXIT_FAIL if check.is_damaged else EXIT_OK


def cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    """``index [PATH]``"""
    roots = [args.path] if args.path else None
    clashing = [
        name
        for name, on in (("PATH", roots), ("--dry-run", args.dry_run), ("--watch", args.watch))
        if on
    ]
    if args.rebuild and clashing:
        raise UsageError(
            f"--rebuild indexes every configured folder into a new index: it takes no "
            f"{clashing[0]}."
        )
    if args.model is not None:
        if not args.model.strip():
            raise UsageError("--model needs a model's name (`semsearch config` lists them).")
        settings = settings._replace(model=args.model.strip(), model_dir=None)
    index = _index(settings)
    if args.dry_run:
        return _dry_run(index, roots, args.json)
    progress = Progress(sys.stderr, args.verbose, show_errors=args.json)
    if args.rebuild:
        return _rebuild(index, settings, progress, args)
    if args.watch:
        return _watch(index, roots, progress, args.json)
    try:
        report = index.update(
            roots,
            force=args.force,
            max_files=args.max_files,
            on_event=progress,
            on_wait=_say_waiting(settings.store_path),
        )
    finally:
        progress.clear()
        index.close()
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
    else:
        print_report(report)
    return EXIT_FAIL if report.failed else EXIT_OK


def _rebuild(index: Index, settings: Settings, progress: Progress, args: argparse.Namespace) -> int:
    """``index --rebuild``: the old index set aside, a new one made."""
    try:
        report = index.rebuild(
            max_files=args.max_files,
            on_event=progress,
            on_wait=_say_waiting(settings.store_path),
        )
    finally:
        progress.clear()
        index.close()
    if args.json:
        print(json.dumps(rebuild_json(report), indent=2))
    else:
        print_rebuild(report)
    return EXIT_FAIL if report.run.failed else EXIT_OK


def _say_waiting(index_path: Location) -> Callable[[LockHolder], None]:
    """Tell stderr at once that this run waits for the one holding the writer lock."""

    def say(holder: LockHolder) -> None:
        print(
            f"semsearch: waiting for the `semsearch index` run ({holder.describe()}) "
            f"that is writing {index_path}...",
            file=sys.stderr,
            flush=True,
        )

    return say


def _watch(index: Index, roots: list[Path] | None, progress: Progress, as_json: bool) -> int:
    """``index --watch`` until Ctrl-C: a line per run that changed something (a JSON object
    with --json), each problem and warning once, and one line while idle."""
    said: set[str] = set()

    def report(done: IndexReport) -> None:
        progress.clear()
        if done.has_changes:
            line = (
                json.dumps(done.as_json())
                if as_json
                else watch_line(done, time.strftime("%H:%M:%S"))
            )
            print(line, flush=True)
        for folder in done.folders:
            notes = [f"warning: {w}" for w in folder.warnings]
            notes += [f"error: {p.path}: {p.reason}" for p in folder.problems]
            for note in notes:
                if note not in said:
                    said.add(note)
                    print(f"  {note}", file=sys.stderr, flush=True)
        count = len(done.folders)
        progress.idle(f"watching {count} folder{'s' if count != 1 else ''}; Ctrl-C to stop")

    try:
        index.watch(roots, on_report=report, on_event=progress)
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        progress.clear()
        index.close()
    return EXIT_OK


def _dry_run(index: Index, roots: list[Path] | None, as_json: bool) -> int:
    try:
        plans = index.plan(roots)
    finally:
        index.close()
    print_plan(plans, as_json)
    return EXIT_FAIL if any(plan.errors for plan in plans) else EXIT_OK


def cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    """``search QUERY``: answered by a running server when one serves this index (see
    :func:`_search_served`), else here."""
    query = " ".join(args.query)
    mode = args.mode or settings.default_mode
    context = 0 if args.full and args.context is None else args.context
    _check_search_output(args, context)
    if args.json and not args.files_only:  # each hit's ranks and priors: the library's Hit
        found, _, pending = _search_here(args, settings, query, None)
        rows = [hit.as_json() for hit in found]
        print(json_text({"results": rows, "chunksPending": pending}))
        return EXIT_OK
    served = None if args.explain else _search_served(args, settings, query, context)
    hits, passages, pending = served or _search_here(args, settings, query, context)
    if args.json:
        print(json_text({"files": file_rows(hits), "chunksPending": pending}))
        return EXIT_OK
    if not hits:
        floor = "" if args.min_score is None else f" scoring at least {args.min_score:g}"
        print(f"No results{floor}.", file=sys.stderr)
    elif args.files_only:
        print("\n".join(quote_path(row["filePath"]) for row in file_rows(hits)))
    elif args.vimgrep:
        print_vimgrep(hits)
    else:
        color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        marker = Marker(query if color else "")
        if passages is not None:
            print_passages(hits, passages, marker, args.explain)
        else:
            uses_model = mode != "bm25"
            print_hits(hits, args.explain, query if args.explain and uses_model else None, marker)
    print_pending(pending, mode)
    return EXIT_OK


def _search_here(
    args: argparse.Namespace, settings: Settings, query: str, context: int | None
) -> tuple[list[Hit], list[Passage] | None, int]:
    """The hits, their passages (with ``-C``/``--full``) and the chunks waiting for vectors,
    from this process."""
    mode = args.mode or settings.default_mode
    index = _index(settings, one_shot=mode != "bm25")  # bm25 needs no model
    try:
        hits = index.search(
            query,
            k=args.k,
            folder=args.folder,
            glob=args.glob,
            mode=args.mode,
            exclude=args.exclude,
            min_score=args.min_score,
            all_copies=args.all_copies,
        )
        passages = None if context is None else index.passages(hits, context)
        pending = index.pending_vectors(args.folder) if mode != "bm25" else 0
    finally:
        index.close()
    return hits, passages, pending


def _search_served(
    args: argparse.Namespace, settings: Settings, query: str, context: int | None
) -> tuple[list[ServedHit], list[ServedPassage] | None, int] | None:
    """What :func:`_search_here` gives, from the ``search`` tool of a server running for this
    index (the ``gather`` tool with ``-C``/``--full``); None to search here instead: no server,
    more results or context lines than the tools give, a cut text, or a tool error (the error is
    then reported as this process words it)."""
    k = settings.top_k if args.k is None else args.k
    if k > TOOL_MAX_K or (context is not None and context > TOOL_MAX_CONTEXT_LINES):
        return None
    remote = connect(settings)
    if remote is None:
        return None
    folder = args.folder
    if folder is not None:
        from semsearch.files.folders import is_folder_name  # ~2 ms: only with --folder

        if not is_folder_name(folder):  # a path: the server has another working directory
            folder = os.path.join(os.getcwd(), os.path.expanduser(folder))
    given = {
        "query": query,
        "k": k,
        "folder": folder,
        "pathGlob": args.glob,
        "exclude": args.exclude,
        "mode": args.mode,
        "minScore": args.min_score,
        "allCopies": args.all_copies or None,
    }
    arguments = {name: value for name, value in given.items() if value is not None}
    if context is None:
        content = remote.call("search", arguments)
    else:
        content = remote.call("gather", {**arguments, "contextLines": context})
    if content is None or content["truncated"]:
        return None
    rows = content["results"]
    named = [row["filePath"] for row in rows]
    named += [copy["filePath"] for row in rows for copy in row.get("copies", ())]
    if not is_on_disk(named):
        return None
    hits = [ServedHit.from_json(row) for row in rows]
    passages = None
    if context is not None:
        passages = [ServedPassage.from_json(row["passage"]) for row in rows]
    mode = args.mode or settings.default_mode
    return hits, passages, content.get("chunksPending", 0) if mode != "bm25" else 0


def _check_search_output(args: argparse.Namespace, context: int | None) -> None:
    """Refuse output flags that do not go together."""
    if args.vimgrep and (args.json or args.files_only):
        raise UsageError("--vimgrep prints one line per hit: leave out --json and --files-only.")
    others = {"--json": args.json, "--files-only": args.files_only, "--vimgrep": args.vimgrep}
    chosen = [flag for flag, is_on in others.items() if is_on]
    if context is not None and chosen:
        shown = "-C" if args.context is not None else "--full"
        raise UsageError(f"{shown} shows chunks as text: leave out {' and '.join(chosen)}.")


MCP_ON_A_TERMINAL = (
    "semsearch: serving MCP on stdio, which is for an MCP client: configure one to start it "
    '(command "semsearch", args ["mcp"]; see docs/mcp.md). Ctrl-D stops it.'
)


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    """``mcp``: serve the index over stdio until stdin closes."""
    from semsearch.mcp.server import serve  # the MCP SDK loads only for this command

    cap_malloc_arenas()
    if sys.stdin.isatty():  # a person, not a client, started it
        print(MCP_ON_A_TERMINAL, file=sys.stderr, flush=True)
    serve(args.index, warned=settings.warnings)
    return EXIT_OK


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    """``serve``: the MCP tools over HTTP until interrupted, or idle for ``--idle-exit``."""
    from semsearch.mcp.http import is_loopback, serve  # the MCP SDK loads only for this command

    cap_malloc_arenas()
    if not is_loopback(args.host):
        print(
            f"semsearch: warning: listening on {args.host}, not only on this machine: anyone "
            "who can reach it and has the token can search and read your folders.",
            file=sys.stderr,
        )

    def ready(record: ServerRecord) -> None:
        token = record.token_file or "SS_SERVE_TOKEN"
        print(
            f"semsearch: serving {settings.store_path} at {record.url} (bearer token in "
            f"{token}); Ctrl-C stops it.",
            file=sys.stderr,
            flush=True,
        )

    serve(
        args.index,
        settings,
        args.host,
        args.port,
        idle_minutes=args.idle_exit,
        warned=settings.warnings,
        on_ready=ready,
    )
    return EXIT_OK


def cmd_grep(args: argparse.Namespace, settings: Settings) -> int:
    """``grep PATTERN [PATH...]``: exit 0 with matches, 1 without."""
    context = args.context or 0
    from semsearch.files.grep import GrepOptions  # ~20 ms: only for this command

    options = GrepOptions(
        args.pattern,
        regex=not args.fixed_strings,
        case_sensitive=not args.ignore_case,
        file_glob=tuple(args.glob or ()),
        max_results=None,
        word_match=args.word_regexp,
        context_before=context if args.before is None else args.before,
        context_after=context if args.after is None else args.after,
        full_lines=True,
    )
    index = _index(settings)
    try:
        result = index.grep(options, timeout=None, paths=args.paths, cwd=Path.cwd())
    except KeyboardInterrupt:  # Ctrl-C ends a grep without a time limit: nothing to resume
        return EXIT_INTERRUPTED
    finally:
        index.close()
    for warning in result.warnings:
        print(f"semsearch: warning: {warning}", file=sys.stderr)
    if args.json:
        print(json_text(grep_json(result)))
    else:
        is_context = bool(options.context_before or options.context_after)
        print_grep(result.matches, Path.cwd(), is_context)
    return EXIT_OK if result.matches else EXIT_FAIL


def _line_range(target: str) -> tuple[str, int | None, int | None]:
    """``PATH``, ``PATH:FROM`` (to the end) or ``PATH:FROM-TO``; a path that exists as given is
    taken whole, even with a colon in its name."""
    found = re.fullmatch(r"(.+):(\d+)(?:-(\d*))?", target)
    if found is None or os.path.lexists(target):
        return target, None, None
    first, last = int(found[2]), int(found[3]) if found[3] else None
    if first < 1:
        raise UsageError(f"{target}: lines are numbered from 1.")
    if last is not None and last < first:
        raise UsageError(f"{target}: the range ends ({last}) before it starts ({first}).")
    return found[1], first, last


def cmd_cat(args: argparse.Namespace, settings: Settings) -> int:
    """``cat PATH[:FROM[-TO]]``: a file of a configured folder, as the indexer reads it."""
    path, first, last = _line_range(args.target)
    full = os.path.abspath(os.path.expanduser(path))
    served = _lines_served(settings, full, first, last)
    if served is not None:
        print_lines(served, args.number)
        return EXIT_OK
    index = _index(settings)
    try:
        lines = index.read_lines(full, first, last, is_capped=False)
    finally:
        index.close()
    print_lines(lines, args.number)
    return EXIT_OK


def _lines_served(
    settings: Settings, path: str, first: int | None, last: int | None
) -> ServedLines | None:
    """The lines from the ``cat_file`` tool of a server running for this index; None to read
    them here: no server, an error, or more than the tool's 256 KiB (``cat`` has no cap)."""
    remote = connect(settings)
    if remote is None:
        return None
    given = {"filePath": path, "startLine": first, "endLine": last}
    content = remote.call("cat_file", {name: v for name, v in given.items() if v is not None})
    if content is None or content["truncated"]:
        return None
    return ServedLines.from_json(content)


def cmd_move(args: argparse.Namespace, settings: Settings) -> int:
    """``move OLD NEW``: the folder's files, chunks and config entry now belong to NEW."""
    index = _index(settings)
    try:
        report = index.move(args.old, args.new, Path.cwd())
    finally:
        index.close()
    files = f"{report.files} indexed file{'s' if report.files != 1 else ''}"
    print(f"moved     {report.old} -> {report.new}  ({files} kept, nothing to re-embed)")
    if report.is_configured:
        print("Next: semsearch index  (finds the moved files unchanged)")
    else:
        print(
            f"{report.new} is not in the config: run `semsearch add {report.new}` to have "
            "`semsearch index` and the MCP tools use it."
        )
    return EXIT_OK


COMMANDS: dict[str, Any] = {
    "add": cmd_add,
    "remove": cmd_remove,
    "rm": cmd_remove,
    "list": cmd_list,
    "ls": cmd_list,
    "config": cmd_config,
    "status": cmd_status,
    "index": cmd_index,
    "search": cmd_search,
    "mcp": cmd_mcp,
    "serve": cmd_serve,
    "move": cmd_move,
    "grep": cmd_grep,
    "cat": cmd_cat,
}
