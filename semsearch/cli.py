"""The ``semsearch`` command: a thin adapter over :mod:`semsearch.index` and :mod:`.config`.

Exit codes: 0 success, 1 failure, 2 usage error. Results go to stdout; progress, warnings and
errors to stderr.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from semsearch import __version__
from semsearch.config import MODES, Settings, add_roots, load_settings, remove_roots
from semsearch.errors import SemsearchError, UsageError
from semsearch.folders import resolve_folder

if TYPE_CHECKING:  # the heavy modules load inside the commands (see cmd_search)
    from semsearch.embedder import Embedder
    from semsearch.index import Index, IndexReport
    from semsearch.indexer import FileEvent
    from semsearch.search import Hit

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

# Set before numpy loads (numpy is imported only inside the commands). OpenBLAS's worker threads
# spin after every call; the one matrix-vector product of a search gains little from them (100k
# chunks: 3.5 vs 4.9 ms) while their spinning halves the speed of the ONNX query embedding and
# the SQLite work beside it (10k-chunk hybrid search p50 7.4 -> 4.8 ms; bench/RESULTS.md).
# A user's own setting wins. Library users who search in a loop may want the same.
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1"}
M_ARENA_MAX = -8  # glibc's mallopt parameter number


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (subcommands and their flags)."""
    parser = argparse.ArgumentParser(
        prog="semsearch",
        description="Local semantic search over your files: hybrid BM25 + embeddings, offline.",
    )
    parser.add_argument("--version", action="version", version=f"semsearch {__version__}")
    parser.add_argument("--index", metavar="PATH", help="index file to use (default: XDG data dir)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add = sub.add_parser("add", help="add folders to the configuration")
    add.add_argument("paths", nargs="+", metavar="PATH")
    remove = sub.add_parser("remove", aliases=["rm"], help="remove folders (and purge them)")
    remove.add_argument("targets", nargs="+", metavar="NAME|PATH")
    remove.add_argument("--keep-index", action="store_true", help="leave their chunks searchable")
    sub.add_parser("list", aliases=["ls"], help="list configured folders")
    sub.add_parser("config", help="show where config, index and model live")
    sub.add_parser("status", help="folders, files, chunks, index size, model, changes")
    index = sub.add_parser("index", help="index configured folders (or PATH) incrementally")
    index.add_argument("path", nargs="?", metavar="PATH")
    index.add_argument("--force", action="store_true", help="re-read and re-embed everything")
    index.add_argument("--max-files", type=_positive, metavar="N", help="stop after N files")
    index.add_argument("--dry-run", action="store_true", help="list what would be indexed")
    index.add_argument("--json", action="store_true", help="print a JSON summary")
    index.add_argument("-v", "--verbose", action="store_true", help="one line per file")
    index.add_argument(
        "--watch", action="store_true", help="keep indexing changes until interrupted"
    )
    search = sub.add_parser("search", help="search the index")
    search.add_argument("query", nargs="+")
    search.add_argument("-k", "--top-k", type=_positive, metavar="N", dest="k")
    search.add_argument("--folder", metavar="NAME", help="only this folder (name or path)")
    search.add_argument("--glob", metavar="PAT", help="only paths matching this glob")
    search.add_argument("--mode", choices=MODES, help="ranking arms (default: hybrid)")
    search.add_argument("--json", action="store_true", help="print JSON")
    search.add_argument("--files-only", action="store_true", help="print matching paths only")
    search.add_argument(
        "--explain", action="store_true", help="show each hit's arm ranks and ranking priors"
    )
    sub.add_parser("mcp", help="run the MCP stdio server")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the CLI's single error boundary."""
    configure_process()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        settings = load_settings(os.environ, args.index)
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


def configure_process() -> None:
    """Process-wide settings of the CLI and the MCP server (the bench scripts apply them too).

    Call before numpy is imported: OpenBLAS reads its thread count when it loads.
    """
    for name, value in THREAD_ENV.items():
        os.environ.setdefault(name, value)
    _cap_malloc_arenas()


def _cap_malloc_arenas() -> None:
    """At most two glibc malloc arenas, unless MALLOC_ARENA_MAX says otherwise.

    glibc gives threads that allocate their own arenas; onnxruntime's workers and the search's
    lexical thread each kept one. Two arenas took the peak RSS of indexing the cpython-mix corpus
    from 302 to 295 MiB at the same speed (bench/RESULTS.md). Elsewhere (musl, macOS) a no-op.
    """
    if not sys.platform.startswith("linux") or "MALLOC_ARENA_MAX" in os.environ:
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_ARENA_MAX, 2)
    except (OSError, AttributeError):  # not glibc
        pass


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
    """``add PATH...``"""
    change = add_roots(settings.config_path, args.paths, Path.cwd())
    for path in change.changed:
        print(f"added     {path}")
    for path in change.unchanged:
        print(f"already   {path}")
    for raw in change.rejected:
        print(f"not a directory: {raw}", file=sys.stderr)
    if change.changed:
        count = len(change.roots)
        print(f"\n{count} folder{'s' if count != 1 else ''} configured in {settings.config_path}")
        print("Next: semsearch index")
    return EXIT_FAIL if change.rejected and not change.changed else EXIT_OK


def cmd_remove(args: argparse.Namespace, settings: Settings) -> int:
    """``remove [--keep-index] NAME|PATH...``: nothing changes unless every target resolves."""
    from semsearch.index import Index

    index = Index(settings)
    try:
        known = [f for f in index.folders() if f.is_configured or not args.keep_index]
        chosen = [resolve_folder(target, known, Path.cwd()).path for target in args.targets]
        chosen = list(dict.fromkeys(chosen))
        change = remove_roots(settings.config_path, chosen)
        files = 0 if args.keep_index else sum(index.purge(path) for path in chosen)
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
    note = "" if settings.config_exists else "  (not created yet: run `semsearch add`)"
    model = str(settings.model_dir) if settings.model_dir else "all-MiniLM-L6-v2 int8 (built in)"
    print(f"config file   {settings.config_path}{note}")
    print(f"index         {settings.store_path}  ({settings.store_backend})")
    print(f"model         {model}")
    print(f"ignore file   {settings.global_ignore_file} (+ {settings.ignore_file} in each folder)")
    roots = [str(r) for r in settings.roots] or ["(none configured)"]
    print(f"folders       {roots[0]}")
    for root in roots[1:]:
        print(f"              {root}")
    return EXIT_OK


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp)) if stamp else "never"


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    """``status``"""
    from semsearch.index import Index

    index = Index(settings)
    status = index.status()
    index.close()
    if not status.exists:
        print(f"index         {status.index_path}  (not created yet: run `semsearch index`)")
        return EXIT_OK
    model = f"{status.model[0]} (dim {status.model[1]})" if status.model else "none yet"
    print(f"index         {status.index_path}  ({status.size_bytes / 1e6:.1f} MB)")
    print(f"model         {model}")
    print(f"folders       {len(status.folders)}")
    print(f"files         {status.files}")
    print(f"chunks        {status.chunks}")
    if status.chunks_pending:
        print(f"pending       {status.chunks_pending} chunks waiting for vectors")
    for folder in status.folders:
        missing = "" if Path(folder.path).is_dir() else "  (missing on disk)"
        print(
            f"  {folder.name}  {folder.path}{missing}\n"
            f"      {folder.files} files  {folder.chunks} chunks  "
            f"last indexed {_when(folder.last_indexed)}  "
            f"{status.changed.get(folder.path, 0)} changed since"
        )
    return EXIT_OK


def cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    """``index [PATH]``"""
    from semsearch.index import Index, resolve_root

    roots = [resolve_root(args.path)] if args.path else None
    index = Index(settings)
    if args.dry_run:
        return _dry_run(index, roots, args.json)
    progress = _Progress(sys.stderr, args.verbose)
    if args.watch:
        return _watch(index, roots, progress, args.json)
    try:
        report = index.update(roots, force=args.force, max_files=args.max_files, on_event=progress)
    finally:
        progress.clear()
        index.close()
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
    else:
        _print_report(report)
    return EXIT_FAIL if report.failed else EXIT_OK


def _watch(index: Index, roots: list[Path] | None, progress: _Progress, as_json: bool) -> int:
    """``index --watch``: a report per run (one JSON line each with --json) until Ctrl-C."""

    def report(done: IndexReport) -> None:
        progress.clear()
        if as_json:
            print(json.dumps(done.as_json()), flush=True)
        else:
            _print_report(done)
            sys.stdout.flush()

    try:
        index.watch(roots, on_report=report, on_event=progress)
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        progress.clear()
        index.close()
    return EXIT_OK


def _dry_run(index: Index, roots: list[Path] | None, as_json: bool) -> int:
    listings = index.plan(roots)
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "root": str(plan.root),
                        "mode": plan.mode,
                        "files": [{"path": f.rel, "size": f.size} for f in plan.files],
                        "skipped": [
                            {"path": s.rel, "reason": s.reason} for s in plan.skipped + plan.errors
                        ],
                    }
                    for plan in listings
                ],
                indent=2,
            )
        )
        return EXIT_OK
    for listing in listings:
        total = sum(f.size for f in listing.files)
        print(f"{listing.root}  ({listing.mode} mode)")
        for entry in listing.files:
            print(f"  {entry.size:>10,}  {entry.rel}")
        for skip in listing.skipped + listing.errors:
            print(f"  {'skipped':>10}  {skip.rel}  ({skip.reason})")
        for warning in listing.warnings:
            print(f"  warning: {warning}")
        print(
            f"  {len(listing.files)} files, {total:,} bytes would be indexed; "
            f"{len(listing.skipped) + len(listing.errors)} skipped"
        )
    return EXIT_FAIL if any(plan.errors for plan in listings) else EXIT_OK


def _print_report(report: IndexReport) -> None:
    for number, folder in enumerate(report.folders, start=1):
        print(f"[{number}/{len(report.folders)}] {folder.name}  {folder.path}")
        for warning in folder.warnings:
            print(f"  warning: {warning}", file=sys.stderr)
        for problem in folder.problems:
            print(f"  error: {problem.path}: {problem.reason}", file=sys.stderr)
        if folder.failed:
            continue
        print(
            f"  {folder.indexed} indexed  {folder.unchanged} unchanged  {folder.skipped} skipped  "
            f"{folder.deleted} deleted  {folder.chunks} chunks  {folder.seconds:.1f}s"
            + ("  (truncated by --max-files)" if folder.truncated else "")
        )
    if len(report.folders) > 1:
        print(
            f"total  {report.total('indexed')} indexed  {report.total('unchanged')} unchanged  "
            f"{report.total('skipped')} skipped  {report.total('deleted')} deleted  "
            f"{report.total('chunks')} chunks  {report.seconds:.1f}s"
        )


class _Progress:
    """One live status line on a TTY; per-file lines with --verbose; silent otherwise."""

    def __init__(self, stream: TextIO, verbose: bool) -> None:
        self._stream = stream
        self._verbose = verbose
        self._live = stream.isatty()
        self._last = 0.0

    def __call__(self, event: FileEvent) -> None:
        if self._verbose and event.action != "unchanged":
            self.clear()
            detail = f"  ({event.detail})" if event.detail else ""
            print(f"  {event.action:<9} {event.folder}/{event.rel}{detail}", file=self._stream)
        if self._live and time.monotonic() - self._last > 0.1:
            self._last = time.monotonic()
            name = event.rel if len(event.rel) <= 50 else "…" + event.rel[-49:]
            line = f"  {event.done}/{event.total} · {event.chunks} chunks · {name}"
            self._stream.write("\r\x1b[2K" + line[: _columns() - 1])
            self._stream.flush()

    def clear(self) -> None:
        """Erase the live line."""
        if self._live:
            self._stream.write("\r\x1b[2K")
            self._stream.flush()


def _columns() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except OSError:
        return 80


def cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    """``search QUERY``"""
    embedder: Embedder | None = None
    if (args.mode or settings.default_mode) != "bm25":
        from semsearch.embedder import OnnxEmbedder

        # One query, then exit: an unoptimised session (built in ~0.04 s rather than ~0.17 s),
        # started in a background thread (onnxruntime releases the GIL) while the rest of
        # semsearch is imported and the index read.
        embedder = OnnxEmbedder(settings.model_dir, one_shot=True)
        embedder.preload()
    from semsearch.index import Index

    index = Index(settings, embedder=embedder)
    try:
        hits = index.search(
            " ".join(args.query), k=args.k, folder=args.folder, glob=args.glob, mode=args.mode
        )
    finally:
        index.close()
    if args.files_only:
        seen: list[str] = []
        for hit in hits:
            if hit.path not in seen:
                seen.append(hit.path)
        print("\n".join(seen)) if seen else None
    elif args.json:
        print(json.dumps([hit.as_json() for hit in hits], indent=2, ensure_ascii=False))
    else:
        _print_hits(hits, args.explain)
    return EXIT_OK


def _explain(hit: Hit) -> str:
    def rank(value: int | None) -> str:
        return f"#{value}" if value else "-"

    parts = [f"vector {rank(hit.vector_rank)}", f"bm25 {rank(hit.lexical_rank)}"]
    if hit.definition_rank:
        parts.append(f"definitions #{hit.definition_rank}")
    parts.extend(hit.priors)
    return "     " + "  ·  ".join(parts)


def _print_hits(hits: list[Hit], explain: bool = False) -> None:
    if not hits:
        print("No results.", file=sys.stderr)
        return
    rows = [
        (
            str(n),
            h.folder,
            f"{h.rel}:{h.start_line}" + (f" (p.{h.page})" if h.page else ""),
            f"{h.score:.3f}",
            " ".join(h.text.split())[:100],
        )
        for n, h in enumerate(hits, start=1)
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row, hit in zip(rows, hits, strict=True):
        cells = [row[0].rjust(widths[0]), *(row[i].ljust(widths[i]) for i in (1, 2, 3)), row[4]]
        print("  ".join(cells))
        if explain:
            print(_explain(hit))


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    """``mcp``: serve the index over stdio until stdin closes."""
    from semsearch.mcp_server import serve  # the MCP SDK loads only for this command

    serve(args.index)
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
}
