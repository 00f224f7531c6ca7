"""The CLI in-process: exit codes, messages, outputs; lazy model loading in a subprocess."""

from __future__ import annotations

import argparse
import errno
import io
import json
import os
import pty
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from semsearch import __version__
from semsearch.cli.commands import COMMANDS, MCP_ON_A_TERMINAL, build_parser, main
from semsearch.cli.output import Marker, Progress, progress_line, watch_line
from semsearch.config import load_settings
from semsearch.index import Index
from semsearch.indexing.pipeline import FileEvent, FolderReport, Problem
from semsearch.indexing.report import IndexReport
from semsearch.model.embedder import HashEmbedder
from semsearch.search import ranking
from semsearch.store import ChunkRecord, FileWrite, open_store
from tests.conftest import semsearch_as_user, write_tree


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_tree(
        tmp_path / "project",
        {
            "retry.py": "def retry_with_backoff(call):\n    '''Retry a failing call.'''\n",
            "big.log": "x" * 600_000,
            "image.png": b"\x89PNG\x00\x00",
        },
    )


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["search", "q", "-k", "-1"], 2, "must be at least 1, got -1"),
        (["search", "q", "-k", "abc"], 2, "expected a whole number, got 'abc'"),
        (["search", "q", "-k", "0"], 2, "must be at least 1, got 0"),
        (["index", "--max-files", "0"], 2, "must be at least 1, got 0"),
        (["bogus"], 2, "invalid choice: 'bogus'"),
        (["search"], 2, "the following arguments are required: query"),
        (["search", "q", "--mode", "fuzzy"], 2, "invalid choice: 'fuzzy'"),
        (["index"], 2, "No folders configured"),
        (["search", "anything"], 1, "Run `semsearch index` first"),
        (
            ["remove", "nothing-here"],
            2,
            "No folder named 'nothing-here'. No folders are configured",
        ),
        (["remove", "/nothing/here"], 2, "No folder at /nothing/here."),
        (["add", "/definitely/not/here"], 1, "not added: /definitely/not/here does not exist"),
        (["move", "old"], 2, "the following arguments are required: NEW"),
        (["move", "old", "/"], 2, "No folder named 'old'. No folders are configured"),
    ],
)
def test_errors_have_exit_codes_and_messages(
    capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str
) -> None:
    result, _, err = run(capsys, *argv)
    assert result == code
    assert message in err
    assert "Traceback" not in err


def test_malformed_config_is_one_line_without_traceback(
    capsys: pytest.CaptureFixture[str], isolated_env: Path
) -> None:
    config = isolated_env / ".config" / "semsearch" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text('{"defaultRoots": [}')
    code, _, err = run(capsys, "list")
    assert code == 1
    assert err.strip() == (
        f"semsearch: {config}:1:19: invalid JSON (Expecting value). "
        "Fix the file or delete it to start from defaults."
    )


def test_a_config_typo_is_one_warning_line(
    capsys: pytest.CaptureFixture[str], isolated_env: Path, project: Path
) -> None:
    config = isolated_env / ".config" / "semsearch" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"defaultRoots": [str(project)], "defaultTopk": 3}))
    code, out, err = run(capsys, "list")
    assert (code, out) == (0, f"project  {project}\n")
    assert err == (
        f"semsearch: warning: {config}: unknown key `defaultTopk` is ignored; "
        "did you mean `defaultTopK`?\n"
    )
    assert run(capsys, "add", str(project))[2] == err  # once, though add reads the file again


@pytest.mark.parametrize(
    ("config", "argv"),
    [
        ({"defaultRoots": ["a\x00b"]}, ["list"]),
        ({"ignoreFile": "a\x00b"}, ["index", "--dry-run", "PROJECT"]),
    ],
)
def test_a_nul_in_a_configured_path_is_one_line_without_traceback(
    capsys: pytest.CaptureFixture[str],
    isolated_env: Path,
    project: Path,
    config: dict[str, object],
    argv: list[str],
) -> None:
    """Found by fuzzing: a ValueError (embedded null byte) traceback."""
    path = isolated_env / ".config" / "semsearch" / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(config))
    code, out, err = run(capsys, *[str(project) if a == "PROJECT" else a for a in argv])
    assert (code, out) == (1, "")
    key = next(iter(config))
    assert err.startswith(f"semsearch: {path}: `{key}` must be ")
    assert err.endswith(' without a NUL character, got "a\\u0000b".\n')


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--index", "~semsearch-no-such-user/i.db", "status"], 0, ""),
        (["search", "x", "--folder", "~semsearch-no-such-user/p"], 2, "semsearch: No folder at "),
        (
            ["add", "~semsearch-no-such-user"],
            1,
            "not added: ~semsearch-no-such-user does not exist",
        ),
    ],
)
def test_a_tilde_of_an_unknown_user_is_a_path_as_typed(
    capsys: pytest.CaptureFixture[str],
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    code: int,
    message: str,
) -> None:
    """A shell passes `~nosuchuser/p` on as typed; found by fuzzing: a RuntimeError traceback
    ("Could not determine home directory")."""
    monkeypatch.chdir(project)
    hash_indexed(project)
    result, _, err = run(capsys, *argv)
    assert (result, err[: len(message)]) == (code, message)


def test_add_list_config_remove(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    code, out, _ = run(capsys, "add", str(project))
    assert code == 0 and out.startswith(f"added     {project}\n")
    assert run(capsys, "add", str(project))[1] == f"already   {project}\n"
    assert run(capsys, "list")[1] == f"project  {project}\n"
    assert f"folders       {project}" in run(capsys, "config")[1]
    code, out, _ = run(capsys, "rm", "--keep-index", "project")
    assert code == 0 and f"removed   {project}" in out and "--keep-index" in out
    assert "No folders configured yet" in run(capsys, "ls")[1]


def test_dry_run_lists_files_and_reasons(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    code, out, _ = run(capsys, "index", str(project), "--dry-run", "--json")
    assert code == 0
    (plan,) = json.loads(out)
    assert [f["path"] for f in plan["files"]] == ["retry.py"]
    reasons = {s["path"]: s["reason"] for s in plan["skipped"]}
    assert "too large" in reasons["big.log"] and "binary" in reasons["image.png"]


def test_summary_counts_the_vector_pass_and_the_whole_run_time(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    code, out, _ = run(capsys, "index", str(project))
    assert code == 0
    line = next(row for row in out.splitlines() if "vectors:" in row)
    assert line.startswith("  vectors: 1 chunks embedded, 1 file path  ")
    assert line.endswith("s in all")
    assert "vectors:" not in run(capsys, "index", str(project))[1]  # nothing left to embed


def test_summary_counts_a_run_that_only_embeds_paths(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    # an index upgraded from schema 3 has no path vectors: the run that makes them says so
    assert run(capsys, "index", str(project))[0] == 0
    with sqlite3.connect(load_settings(os.environ).store_path) as conn:
        conn.execute("UPDATE files SET path_vector = NULL")
    code, out, _ = run(capsys, "index", str(project))
    assert code == 0
    (line,) = [row for row in out.splitlines() if "vectors:" in row]
    assert line.startswith("  vectors: 0 chunks embedded, 1 file path  ")


def test_index_search_status_json(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    code, out, _ = run(capsys, "index", str(project), "--json")
    assert code == 0 and json.loads(out)["filesIndexed"] == 1
    code, out, _ = run(capsys, "search", "retry_with_backoff", "--json", "-k", "1")
    (hit,) = json.loads(out)["results"]
    assert (hit["relPath"], hit["startLine"], hit["endLine"]) == ("retry.py", 1, 2)
    assert set(hit) >= {"filePath", "folder", "startLine", "endLine", "page", "score", "text"}
    assert hit["vectorRank"] == 1 and hit["cosineRank"] == 1  # one chunk: nothing to lift
    assert hit["fileCoherence"] == ranking.FILE_COHERENCE  # the one file has the largest sum
    assert 0.0 < hit["pathCosine"] < 1.0  # a code file: the path term applies
    assert run(capsys, "search", "retry", "--files-only")[1] == f"{project / 'retry.py'}\n"
    code, out, _ = run(capsys, "search", "a failing call")
    assert code == 0 and "retry.py:1" in out
    code, out, _ = run(capsys, "search", "retry_with_backoff", "--explain")
    defines = f"{ranking.DEFINES_NOTE} x{ranking.NAME_DEFINITION_BOOST:g}"
    # one file: it holds the largest sum of fused scores, so its chunk gains the whole share
    coherence = f"{ranking.COHERENCE_NOTE} +{ranking.FILE_COHERENCE:.2f}  ·  "
    # the query names retry.py (its stem is a part of the name): the named-files arm has it too
    explained = r"vector #1 \(path cosine 0\.\d\d\)  ·  bm25 #1  ·  definitions #1  ·  "
    explained += r"named file #1  ·  "
    explained += re.escape(coherence)
    assert re.search(explained + re.escape(defines), out), out
    assert f"{ranking.FRAME_NOTE}:" not in out  # nothing left out of that query
    framed = ["how", "is", "a", "failing", "call", "retried"]
    code, out, _ = run(capsys, "search", *framed, "--explain")
    assert out.splitlines()[0] == f"{ranking.FRAME_NOTE}: failing call retried"
    code, out, _ = run(capsys, "status")
    assert "files         1" in out and "chunks        1" in out and "0 changed since" in out
    (project / "new.md").write_text("fresh\n")
    assert "1 changed since" in run(capsys, "status")[1]


def test_index_exits_1_when_a_folder_is_missing(
    capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path
) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    run(capsys, "add", str(gone), str(project))
    gone.rmdir()
    code, out, err = run(capsys, "index")
    assert code == 1
    assert f"error: {gone}: folder not found" in err
    assert "1 indexed" in out


def unreadable_warning(folder: Path) -> str:
    return (
        f"  warning: {folder}: cannot read this folder (permission denied); skipped "
        "(list it in .indexignore to skip it quietly)"
    )


def test_an_unreadable_folder_is_skipped_with_one_warning_and_the_rest_indexed(
    tmp_path: Path, set_mode: Callable[[Path, int], Path]
) -> None:
    """Issue 34.1: a mode-000 folder made `index` and `index --dry-run` end in a traceback.
    Run as an ordinary user: root reads any folder."""
    project = write_tree(
        tmp_path / "project",
        {"ok.md": "Harbour pilots\n", "locked/x.md": "lighthouse\n", "z/last.md": "tides\n"},
    )
    assert semsearch_as_user("index", str(project)).returncode == 0
    set_mode(project / "locked", 0)
    warning = unreadable_warning(project / "locked")
    dry = semsearch_as_user("index", "--dry-run", str(project))
    assert (dry.returncode, dry.stderr) == (0, "")
    assert "     skipped  locked/  (permission denied)\n" in dry.stdout
    assert dry.stdout.endswith(
        f"{warning}\n  2 files, 21 bytes would be indexed; 1 skipped; 0 errors\n"
    )
    ran = semsearch_as_user("index", str(project))
    assert (ran.returncode, ran.stderr) == (0, warning + "\n")
    # What the folder held is kept: it is unknown now, not gone.
    assert "  2 files (0 indexed, 2 unchanged)  1 skipped  0 errors  0 deleted" in ran.stdout
    ran = semsearch_as_user("index", "--json", str(project))
    assert ran.returncode == 0
    report = json.loads(ran.stdout)
    assert (report["filesSkipped"], report["errors"], report["filesDeleted"]) == (1, 0, 0)
    assert report["folders"][0]["warnings"] == [warning.removeprefix("  warning: ")]
    status = semsearch_as_user("status")
    assert "      3 files  1 skipped  0 errors  " in status.stdout
    assert status.stdout.endswith(" 0 changed since\n")


def test_an_unreadable_file_is_an_error_naming_it(
    tmp_path: Path, set_mode: Callable[[Path, int], Path]
) -> None:
    """A file that cannot be read fails as any file that cannot be read does (exit 1), with
    the reason in a few words rather than Python's "[Errno 13] ..." and the path twice."""
    project = write_tree(tmp_path / "project", {"ok.md": "Harbour pilots\n", "private.md": "p\n"})
    set_mode(project / "private.md", 0)
    dry = semsearch_as_user("index", "--dry-run", str(project))
    assert dry.returncode == 1
    assert "       error  private.md  (permission denied)\n" in dry.stdout
    ran = semsearch_as_user("index", str(project))
    assert (ran.returncode, ran.stderr) == (
        1,
        f"  error: {project / 'private.md'}: permission denied\n",
    )
    assert "  1 file (1 indexed, 0 unchanged)  0 skipped  1 error  0 deleted" in ran.stdout


LAZY = """
import sys
from semsearch import __version__
from semsearch.cli.commands import COMMANDS, build_parser, main
from semsearch.cli.output import Marker, Progress, progress_line
for argv in (["--help"], ["list"], ["add", sys.argv[1]], ["config"], ["status"],
             ["index", "--dry-run"]):
    try:
        main(argv)
    except SystemExit:
        pass
print("onnxruntime" in sys.modules, "mcp" in sys.modules)
"""


def test_light_commands_never_load_onnxruntime(project: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", LAZY, str(project)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=True,
    )
    assert result.stdout.strip().splitlines()[-1] == "False False"


def test_remove_purges_a_folder_indexed_but_never_configured(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    assert run(capsys, "index", str(project))[0] == 0
    code, out, err = run(capsys, "remove", str(project))
    assert code == 0, err
    assert "purged    1 file from the index" in out
    assert json.loads(run(capsys, "search", "retry_with_backoff", "--json")[1])["results"] == []


def test_configure_process_respects_the_users_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from semsearch.process import configure_process

    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    configure_process()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "3"
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    configure_process()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"


@pytest.fixture
def two_docs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path]:
    """Two configured, indexed folders both named docs; the working directory holds the first."""
    first = write_tree(tmp_path / "a" / "docs", {"x.md": "alpha otters\n"})
    second = write_tree(tmp_path / "b" / "docs", {"y.md": "beta otters\n"})
    assert run(capsys, "add", str(first), str(second))[0] == 0
    index = Index(load_settings(os.environ), embedder=HashEmbedder())
    index.update()
    index.close()
    monkeypatch.chdir(tmp_path / "a")
    return first, second


def indexed_files() -> list[tuple[str, int]]:
    index = Index(load_settings(os.environ))
    try:
        return [(str(f.path), f.files) for f in index.folders()]
    finally:
        index.close()


def test_remove_refuses_an_ambiguous_name_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], two_docs: tuple[Path, Path]
) -> None:
    first, second = two_docs
    for argv in (
        ["remove", "docs"],
        ["remove", "--keep-index", "docs"],
        ["rm", str(first), "docs"],
    ):
        code, out, err = run(capsys, *argv)
        assert (code, out) == (2, "")
        assert f"ambiguous: 2 folders have it ({first}, {second}). Pass the folder's path" in err
    assert run(capsys, "list")[1] == f"docs  {first}\ndocs  {second}\n"
    assert indexed_files() == [(str(first), 1), (str(second), 1)]
    code, out, _ = run(capsys, "remove", f"{second}/")
    assert code == 0
    assert out.startswith(f"removed   {second}\npurged    1 file from the index\n")
    assert run(capsys, "list")[1] == f"docs  {first}\n"
    assert indexed_files() == [(str(first), 1)]


def test_remove_of_an_unknown_target_changes_nothing(
    capsys: pytest.CaptureFixture[str], two_docs: tuple[Path, Path]
) -> None:
    first, second = two_docs
    code, out, err = run(capsys, "remove", str(first), "nope")
    assert (code, out) == (2, "")
    assert "No folder named 'nope'. Configured folders: docs, docs." in err
    assert indexed_files() == [(str(first), 1), (str(second), 1)]


def test_search_folder_refuses_an_ambiguous_name(
    capsys: pytest.CaptureFixture[str], two_docs: tuple[Path, Path]
) -> None:
    first, second = two_docs
    code, out, err = run(capsys, "search", "otters", "--folder", "docs", "--mode", "bm25")
    assert (code, out) == (2, "")
    assert f"ambiguous: 2 folders have it ({first}, {second})" in err
    for folder, expected in ((str(second), "y.md"), ("./docs", "x.md"), ("docs/", "x.md")):
        code, out, err = run(
            capsys, "search", "otters", "--folder", folder, "--mode", "bm25", "--json"
        )
        assert code == 0, err
        assert [hit["relPath"] for hit in json.loads(out)["results"]] == [expected]


# Counts agree: dry run, first run, later runs and status (issue 11, item 8).


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """Two files with text; one each skipped by name, by size, as empty and as binary content."""
    return write_tree(
        tmp_path / "mixed",
        {
            "retry.py": "def retry_with_backoff(call):\n    '''Retry a failing call.'''\n",
            "notes.md": "# Notes\n\nOtters hold hands while they sleep.\n",
            "image.png": b"\x89PNG\x00\x00",
            "big.log": "x" * 600_000,
            "empty.txt": "  \n",
            "blob.txt": b"abc\x00def",
        },
    )


MIXED_SKIPS = {
    "big.log": "too large (600,000 bytes > 500,000)",
    "blob.txt": "binary: binary content",
    "empty.txt": "empty: no text",
    "image.png": "binary extension",
}


def test_dry_run_counts_what_the_index_run_will_skip(
    capsys: pytest.CaptureFixture[str], mixed: Path
) -> None:
    code, out, _ = run(capsys, "index", str(mixed), "--dry-run", "--json")
    assert code == 0
    (plan,) = json.loads(out)
    assert [f["path"] for f in plan["files"]] == ["notes.md", "retry.py"]
    assert {s["path"]: s["reason"] for s in plan["skipped"]} == MIXED_SKIPS
    assert plan["errors"] == []
    code, out, _ = run(capsys, "index", str(mixed), "--dry-run")
    assert out.endswith("  2 files, 107 bytes would be indexed; 4 skipped; 0 errors\n")


def test_counts_agree_across_dry_run_runs_and_status(
    capsys: pytest.CaptureFixture[str], mixed: Path
) -> None:
    out = run(capsys, "index", str(mixed), "--dry-run", "--json")[1]
    (plan,) = json.loads(out)
    assert (len(plan["files"]), len(plan["skipped"])) == (2, 4)
    first = json.loads(run(capsys, "index", str(mixed), "--json")[1])
    assert (first["filesIndexed"], first["filesUnchanged"], first["filesSkipped"]) == (2, 0, 4)
    later = json.loads(run(capsys, "index", str(mixed), "--json")[1])
    assert (later["filesIndexed"], later["filesUnchanged"], later["filesSkipped"]) == (0, 2, 4)
    out = run(capsys, "index", str(mixed))[1]
    assert "  2 files (0 indexed, 2 unchanged)  4 skipped  0 errors  0 deleted" in out
    out = run(capsys, "index", str(mixed), "--dry-run", "--json")[1]
    (again,) = json.loads(out)
    assert (again["files"], again["skipped"]) == (plan["files"], plan["skipped"])
    out = run(capsys, "status")[1]
    assert "files         2\nskipped       4\nerrors        0\n" in out
    assert "      2 files  4 skipped  0 errors  " in out


def lines_naming(name: str, text: str) -> int:
    return sum(name in line for line in text.splitlines())


def test_verbose_lists_every_skip_and_each_error_once(
    capsys: pytest.CaptureFixture[str], mixed: Path
) -> None:
    (mixed / "broken.pdf").write_bytes(b"%PDF-1.4 not really a pdf")
    code, out, err = run(capsys, "index", str(mixed), "-v")
    assert code == 1
    for rel, reason in MIXED_SKIPS.items():
        assert f"  skipped   mixed/{rel}  ({reason})\n" in err
    assert lines_naming("broken.pdf", err) == 1
    assert "  2 files (2 indexed, 0 unchanged)  4 skipped  1 error  0 deleted" in out
    code, out, err = run(capsys, "index", str(mixed), "-v")
    for rel in MIXED_SKIPS:
        assert f"  skipped   mixed/{rel}  (" in err
    assert lines_naming("broken.pdf", err) == 1
    code, out, _ = run(capsys, "index", str(mixed), "--dry-run")
    assert code == 1 and "       error  broken.pdf  (" in out
    assert out.endswith("4 skipped; 1 error\n")
    assert "      2 files  4 skipped  1 error  " in run(capsys, "status")[1]


# Global flags before or after the subcommand (item 10).


@pytest.mark.parametrize(
    ("argv", "chosen"),
    [
        (["status", "--index", "{b}"], "b"),
        (["--index", "{a}", "status"], "a"),
        (["--index", "{a}", "status", "--index", "{b}"], "b"),
        (["list", "--index", "{b}"], None),
    ],
)
def test_global_flags_are_accepted_after_the_subcommand(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], chosen: str | None
) -> None:
    paths = {"a": tmp_path / "a.db", "b": tmp_path / "b.db"}
    code, out, err = run(capsys, *(arg.format(**paths) for arg in argv))
    assert code == 0, err
    if chosen is not None:
        assert f"index         {paths[chosen]}  (not created yet" in out


def test_search_takes_index_after_the_query(
    capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path
) -> None:
    db = tmp_path / "elsewhere.db"
    index = Index(load_settings({}, db), embedder=HashEmbedder())
    index.update([project])
    index.close()
    code, out, err = run(
        capsys, "search", "retry_with_backoff", "--mode", "bm25", "--index", str(db)
    )
    assert code == 0, err
    assert "retry.py:1" in out


@pytest.mark.parametrize("argv", [["--version"], ["status", "--version"], ["search", "--version"]])
def test_version_works_in_either_place(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, _ = run(capsys, *argv)
    assert (code, out) == (0, f"semsearch {__version__}\n")


# status lists configured folders not indexed yet (item 13).


def test_status_lists_configured_folders_not_indexed_yet(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    done = write_tree(tmp_path / "done", {"a.md": "alpha otters\n"})
    later = write_tree(tmp_path / "later", {"b.md": "beta otters\n"})
    run(capsys, "add", str(done), str(later))
    out = run(capsys, "status")[1]
    assert "(not created yet: run `semsearch index`)" in out
    assert out.count("not indexed yet: run `semsearch index`") == 2
    index = Index(load_settings(os.environ), embedder=HashEmbedder())
    index.update([done])
    index.close()
    code, out, _ = run(capsys, "status")
    assert code == 0
    assert "folders       2\nfiles         1\n" in out
    assert f"  done  {done}\n      1 file  0 skipped  0 errors  1 chunks" in out
    assert out.endswith(f"  later  {later}\n      not indexed yet: run `semsearch index`\n")


# The live progress line (item 14).

EVENT = FileEvent("project", "src/deep/retry.py", "indexed", 3, 10, 42)


class TtyBuffer(io.StringIO):
    """What a terminal was sent."""

    def isatty(self) -> bool:
        return True

    def last_line(self) -> str:
        return self.getvalue().rsplit("\r\x1b[2K", 1)[-1]


VECTORS = FileEvent("vectors", "384 of 3000", "embedded", 384, 3000, 384)


@pytest.mark.parametrize(
    ("event", "width", "eta", "rate", "line"),
    [
        (EVENT, 0, None, None, "  project  3/10 files · 42 chunks · src/deep/retry.py"),
        (EVENT, -1, None, None, "  project  3/10 files · 42 chunks · src/deep/retry.py"),
        (EVENT, 80, None, None, "  project  3/10 files · 42 chunks · src/deep/retry.py"),
        (EVENT, 54, None, None, "  project  3/10 files · 42 chunks · src/deep/retry.py"),
        (EVENT, 53, None, None, "  project  3/10 files · 42 chunks · …c/deep/retry.py"),
        (EVENT, 46, None, None, "  project  3/10 files · 42 chunks · …retry.py"),
        (EVENT, 20, None, None, "  project  3/10 fil"),
        (
            EVENT,
            0,
            65.4,
            2.5,
            "  project  3/10 files · 42 chunks · 2.5 files/s · ETA 1m05s · src/deep/retry.py",
        ),
        (EVENT, 0, 7322, None, "  project  3/10 files · 42 chunks · ETA 2h02m · src/deep/retry.py"),
        (VECTORS, 0, None, None, "  vectors  384/3000"),
        (VECTORS, 0, 124, 21.4, "  vectors  384/3000 · 21/s · ETA 2m04s"),
        (VECTORS, 24, 124, 21.4, "  vectors  384/3000 · 2"),
    ],
)
def test_progress_line_fits_the_width_and_keeps_the_end_of_the_path(
    event: FileEvent, width: int, eta: float | None, rate: float | None, line: str
) -> None:
    assert progress_line(event, width, eta, rate) == line
    assert width < 1 or len(line) <= width - 1


def test_progress_quotes_a_name_with_a_control_character() -> None:
    event = FileEvent("docs", "a\x1b[2Jb.md", "indexed", 1, 2, 0)
    assert progress_line(event, 0) == '  docs  1/2 files · 0 chunks · "a\\033[2Jb.md"'
    stream = io.StringIO()
    Progress(stream, verbose=True)(event)
    assert stream.getvalue() == '  indexed   "docs/a\\033[2Jb.md"\n'


def draw(progress: Progress, now: list[float], at: float, *events: FileEvent) -> None:
    """Send events at one moment of the fake clock."""
    now[0] = at
    for event in events:
        progress(event)


def test_progress_shows_each_written_chunk_count_and_the_end_of_each_pass() -> None:
    now = [100.0]
    stream = TtyBuffer()
    progress = Progress(stream, verbose=False, columns=lambda: 0, clock=lambda: now[0])
    for done, chunks in ((1, 0), (2, 0), (3, 4), (4, 9), (5, 9)):  # one burst: no time passes
        progress(FileEvent("docs", f"f{done}.md", "indexed", done, 5, chunks))
    frames = stream.getvalue().split("\r\x1b[2K")[1:]
    assert frames == [  # not f2.md: no new chunks, too soon; f5.md ends the pass
        "  docs  1/5 files · 0 chunks · f1.md",
        "  docs  3/5 files · 4 chunks · f3.md",
        "  docs  4/5 files · 9 chunks · f4.md",
        "  docs  5/5 files · 9 chunks · f5.md",
    ]


def test_progress_eta_covers_the_whole_run_once_it_can() -> None:
    now = [0.0]
    stream = TtyBuffer()
    progress = Progress(stream, verbose=False, columns=lambda: 0, clock=lambda: now[0])
    draw(progress, now, 0.0, FileEvent("docs", "a.md", "indexed", 1, 20, 10))
    draw(progress, now, 2.0, FileEvent("docs", "e.md", "indexed", 5, 20, 50))
    # chunks were written and the model's speed is not known yet: no ETA rather than the
    # ETA of the files alone
    assert stream.last_line() == "  docs  5/20 files · 50 chunks · 2.5 files/s · e.md"
    draw(progress, now, 8.0, FileEvent("docs", "t.md", "indexed", 20, 20, 200))
    draw(progress, now, 8.0, FileEvent("vectors", "", "embedding", 0, 220, 0))
    assert stream.last_line() == "  vectors  0/220"
    draw(progress, now, 18.0, FileEvent("vectors", "100 of 220", "embedded", 100, 220, 100))
    assert stream.last_line() == "  vectors  100/220 · 10/s · ETA 12s"
    draw(progress, now, 30.0, FileEvent("vectors", "220 of 220", "embedded", 220, 220, 200))
    assert stream.last_line() == "  vectors  220/220 · 10/s · ETA 0s"
    # the next run of index --watch: the files left, then their chunks at the model's speed
    draw(progress, now, 40.0, FileEvent("docs", "a.md", "indexed", 1, 10, 5))
    draw(progress, now, 42.0, FileEvent("docs", "e.md", "indexed", 5, 10, 22))
    # 5 files in 2 s: 5 more take 2 s; 22 chunks so far, 44 in all, at 10 a second: 4.4 s
    assert stream.last_line() == "  docs  5/10 files · 22 chunks · 2.5 files/s · ETA 6s · e.md"


def test_progress_of_a_run_with_nothing_to_embed_has_the_eta_of_its_files() -> None:
    now = [0.0]
    stream = TtyBuffer()
    progress = Progress(stream, verbose=False, columns=lambda: 0, clock=lambda: now[0])
    draw(progress, now, 0.0, FileEvent("docs", "a.md", "unchanged", 1, 40, 0))
    draw(progress, now, 2.0, FileEvent("docs", "j.md", "unchanged", 10, 40, 0))
    assert stream.last_line() == "  docs  10/40 files · 0 chunks · 5.0 files/s · ETA 6s · j.md"
    draw(progress, now, 2.0, FileEvent("vectors", "", "embedding", 0, 0, 0))
    assert stream.last_line() == "  docs  10/40 files · 0 chunks · 5.0 files/s · ETA 6s · j.md"


def test_the_live_line_ends_each_pass_on_the_counts_of_the_summary(project: Path) -> None:
    stream = TtyBuffer()
    progress = Progress(stream, verbose=False, columns=lambda: 0, clock=lambda: 0.0)
    index = Index(load_settings(os.environ), embedder=HashEmbedder())
    try:
        first = index.update([project], on_event=progress)
        frames = stream.getvalue().split("\r\x1b[2K")[1:]
        second = index.update([project], on_event=progress)
    finally:
        index.close()
    (folder,) = first.folders
    paths = folder.files + folder.skipped + len(folder.problems)
    assert (folder.files, folder.skipped, folder.chunks, paths) == (1, 2, 1, 3)
    assert frames[-3:] == [
        f"  project  {paths}/{paths} files · 1 chunk · retry.py",
        # retry.py's path: its one chunk took its vector in the first pass, which embeds one
        # to record the model before writing chunks (``Indexer._ensure_model``)
        "  vectors  0/1",
        "  vectors  1/1",
    ]
    assert first.chunks_embedded == 1 and first.paths_embedded == 1
    (folder,) = second.folders
    assert (folder.unchanged, folder.skipped) == (1, 2)
    last = stream.getvalue().split("\r\x1b[2K")[-1]
    assert last == f"  project  {paths}/{paths} files · 0 chunks · retry.py"


def test_progress_line_on_a_pty_of_zero_columns_keeps_the_whole_path(project: Path) -> None:
    primary, secondary = os.openpty()  # a new pty reports 0 columns
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "semsearch", "index", str(project)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=secondary,
        env={**env, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    os.close(secondary)
    received, data = b"", b"start"
    while data:
        try:
            data = os.read(primary, 4096)
        except OSError:  # EIO once the child has closed the pty
            data = b""
        received += data
    os.close(primary)
    assert proc.wait(timeout=300) == 0
    text = received.decode()
    assert "\r\x1b[2K  project  3/3 files · 1 chunk · " in text  # a rate may come between
    assert " · retry.py\r\x1b[2K" in text


# Help (item 16).


def test_help_ends_with_three_example_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    lines = out.rstrip("\n").splitlines()
    assert (code, lines[-4]) == (0, "examples:")
    assert all(line.startswith("  semsearch ") for line in lines[-3:])


def test_every_argument_has_help_and_says_its_default() -> None:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parsers = {"semsearch": parser, **sub.choices}
    assert set(parsers) >= set(COMMANDS)
    flags = (argparse._StoreTrueAction, argparse._HelpAction, argparse._VersionAction)
    for name, command in parsers.items():
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, (name, action.dest)
            if not isinstance(action, flags) and not action.required:
                assert "(default: " in action.help, (name, action.dest)


def hash_indexed(*roots: Path, index_file: str | None = None) -> None:
    """Index folders with the hashed embedder (no model load)."""
    index = Index(load_settings(os.environ, index_file), embedder=HashEmbedder())
    index.update(list(roots) or None)
    index.close()


def test_add_refuses_a_folder_inside_a_configured_one(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    (project / "sub").mkdir()
    assert run(capsys, "add", str(project))[0] == 0
    code, out, err = run(capsys, "add", str(project / "sub"))
    assert (code, out) == (1, "")
    assert f"not added: {project}/sub is inside {project}, which is already configured" in err
    assert run(capsys, "list")[1] == f"project  {project}\n"


def make_path(tmp_path: Path, kind: str) -> Path:
    """A path of ``kind`` under tmp_path, for `add` to refuse."""
    path = tmp_path / kind
    if kind == "file":
        path.write_text("x\n")
    elif kind == "dangling":
        path.symlink_to(tmp_path / "nowhere")
    elif kind == "loop":
        path.symlink_to(path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "below-a-file":
        (tmp_path / "file").write_text("x\n")
        path = tmp_path / "file" / "below"
    return path


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("missing", "does not exist"),
        ("file", "is a file, not a folder: add the folder that holds it"),
        ("dangling", "is a symlink to {tmp}/nowhere, which does not exist"),
        ("loop", "is a symlink loop: following it never reaches a folder"),
        ("fifo", "is not a folder (a device, socket or pipe)"),
        ("below-a-file", "does not exist (a part of it is a file)"),
    ],
)
def test_add_says_why_a_path_is_no_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str, reason: str
) -> None:
    path = make_path(tmp_path, kind)
    assert run(capsys, "add", str(path)) == (
        1,
        "",
        f"not added: {path} {reason.format(tmp=tmp_path)}\n",
    )


def test_add_names_a_folder_it_cannot_reach(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked" / "inner"
    real_stat = os.stat

    def stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if os.fspath(path) == str(locked):  # as for a user without access to `locked`
            raise PermissionError(errno.EACCES, "Permission denied", str(locked))
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", stat)
    code, _, err = run(capsys, "add", str(locked))
    assert (code, err) == (1, f"not added: {locked} cannot be reached (permission denied)\n")


def test_add_names_the_symlink_it_was_given(
    capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path
) -> None:
    (project / "sub").mkdir()
    (tmp_path / "sub-link").symlink_to(project / "sub")
    (tmp_path / "project-link").symlink_to(project)
    assert run(capsys, "add", str(tmp_path / "project-link"))[1].startswith(
        f"added     {project}  ({tmp_path}/project-link is a symlink to it)\n"
    )
    code, out, err = run(capsys, "add", str(tmp_path / "sub-link"))
    assert (code, out) == (1, "")
    assert err == (
        f"not added: {tmp_path}/sub-link (a symlink to {project}/sub) is inside {project}, "
        "which is already configured\n"
    )


def test_add_of_an_outer_folder_merges_the_inner_ones(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    inner = write_tree(project / "docs", {"guide.md": "otters sleep afloat\n"})
    assert run(capsys, "add", str(inner))[0] == 0
    hash_indexed()
    code, out, _ = run(capsys, "add", str(project))
    assert code == 0
    assert out.startswith(f"added     {project}\nmerged    {inner} into {project} (its index")
    assert run(capsys, "list")[1] == f"project  {project}\n"
    assert indexed_files() == [(str(project), 1)]


def test_move_gives_a_renamed_folder_its_index(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    assert run(capsys, "add", str(project))[0] == 0
    hash_indexed()
    moved = project.with_name("moved")
    project.rename(moved)
    code, out, err = run(capsys, "move", "project", str(moved))
    assert code == 0, err
    assert out == (
        f"moved     {project} -> {moved}  (1 indexed file kept, nothing to re-embed)\n"
        "Next: semsearch index  (finds the moved files unchanged)\n"
    )
    assert run(capsys, "list")[1] == f"moved  {moved}\n"
    assert indexed_files() == [(str(moved), 1)]


def test_move_on_a_copied_index_file(
    capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path
) -> None:
    hash_indexed(project, index_file=str(tmp_path / "ci.db"))
    copy = tmp_path / "copy.db"
    copy.write_bytes((tmp_path / "ci.db").read_bytes())
    here = project.with_name("checkout")
    project.rename(here)
    code, out, err = run(capsys, "--index", str(copy), "move", str(project), str(here))
    assert code == 0, err
    assert f"{here} is not in the config: run `semsearch add {here}`" in out
    code, out, _ = run(capsys, "--index", str(copy), "search", "retry", "--mode", "bm25", "--json")
    assert [hit["filePath"] for hit in json.loads(out)["results"]] == [str(here / "retry.py")]


def test_add_suggests_move_when_a_missing_folder_moved_here(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    assert run(capsys, "add", str(project))[0] == 0
    hash_indexed()
    moved = project.with_name("moved")
    project.rename(moved)
    code, out, err = run(capsys, "add", str(moved))
    assert (code, out) == (1, "")
    assert f"it looks like {project} moved here: run `semsearch move {project} {moved}`" in err


def test_index_watch_reports_each_run_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    notes = write_tree(tmp_path / "notes", {"a.md": "alpha apples\n"})
    child = subprocess.Popen(
        [sys.executable, "-m", "semsearch", "index", "--watch", "--json", str(notes)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        # Ctrl-C as in a terminal: a child inherits an ignored SIGINT, and Python then never
        # raises KeyboardInterrupt (the full suite sometimes runs with SIGINT ignored here)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert child.stdout is not None
    try:
        assert json.loads(child.stdout.readline())["filesIndexed"] == 1
        (notes / "b.md").write_text("beta bananas\n")
        second = json.loads(child.stdout.readline())
        assert (second["filesIndexed"], second["filesUnchanged"]) == (1, 1)
    finally:
        child.send_signal(signal.SIGINT)
        child.communicate(timeout=60)
    assert child.returncode == 0


MINILM = "all-MiniLM-L6-v2-dynint8@2d3757f950bbd648"


@pytest.mark.parametrize(
    ("notes", "src", "embedded", "model", "line"),
    [
        (
            FolderReport("/n", "notes", "walk", indexed=2, deleted=1),
            FolderReport("/s", "src", "git", unchanged=9),
            (5, 0),
            MINILM,
            "12:00:00  notes: 2 files indexed, 1 deleted, 5 chunks embedded  (0.4s)",
        ),
        (
            FolderReport("/n", "notes", "walk", indexed=1, problems=(Problem("/n/x", "gone"),)),
            FolderReport("/s", "src", "git", indexed=1),
            (1, 0),
            MINILM,
            "12:00:00  notes, src: 2 files indexed, 1 error, 1 chunk embedded  (0.4s)",
        ),
        (
            FolderReport("/n", "notes", "walk", unchanged=3),
            FolderReport("/s", "src", "git", unchanged=9),
            (0, 2),  # an index made before path vectors
            MINILM,
            "12:00:00  notes, src: file paths embedded  (0.4s)",
        ),
        (
            FolderReport("/n", "notes", "walk", indexed=3),
            FolderReport("/s", "src", "git", indexed=9),
            (40, 12),
            "minilm-cls@8199be6f699a395f",  # a change of model (`index --watch --model`)
            "12:00:00  notes, src: 12 files indexed, 40 chunks embedded, "
            "the model now minilm-cls  (0.4s)",
        ),
    ],
)
def test_a_watch_line_says_what_a_run_changed(
    notes: FolderReport, src: FolderReport, embedded: tuple[int, int], model: str, line: str
) -> None:
    replaced = "" if model == MINILM else MINILM
    report = IndexReport(
        (notes, src), 0.43, embedded[0], 0, embedded[1], model=model, replaced_model=replaced
    )
    assert report.has_changes and watch_line(report, "12:00:00") == line
    assert not IndexReport((FolderReport("/n", "notes", "walk", unchanged=3),), 0.1).has_changes


def test_index_watch_prints_a_line_per_change_and_one_while_idle(tmp_path: Path) -> None:
    notes = write_tree(tmp_path / "notes", {"a.md": "alpha apples\n"})
    child = subprocess.Popen(
        [sys.executable, "-m", "semsearch", "index", "--watch", str(notes)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # see above
    )
    assert child.stdout is not None
    line = r"\d\d:\d\d:\d\d  notes: {}  \(\d+\.\ds\)\n"
    try:
        first = child.stdout.readline()
        assert re.fullmatch(line.format("1 file indexed, 1 chunk embedded"), first), first
        os.utime(notes / "a.md", ns=(1, 1))  # a new mtime, the same text: a run, no change
        time.sleep(3)
        (notes / "b.md").write_text("beta bananas\n")
        second = child.stdout.readline()
        assert re.fullmatch(line.format("1 file indexed, 1 chunk embedded"), second), second
        (notes / "b.md").unlink()
        third = child.stdout.readline()
        assert re.fullmatch(line.format("1 deleted"), third), third
    finally:
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    assert (child.returncode, out) == (0, "")
    assert err == "watching 1 folder; Ctrl-C to stop\n"  # once: stderr is not a terminal


def test_status_shows_chunks_waiting_for_vectors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    settings = load_settings(os.environ)
    store = open_store(settings.store_backend, settings.store_path, create=True)
    folder = store.ensure_folder(str(tmp_path), "t")
    chunks = (ChunkRecord(1, 1, 0, 5, None, "alpha"), ChunkRecord(2, 2, 6, 10, None, "beta"))
    store.write_files([FileWrite(folder, "a.md", 1, 10, "sha", "ok", "text", chunks)])
    store.close()
    code, out, _ = run(capsys, "status")
    assert code == 0 and "pending       2 chunks waiting for vectors" in out


def test_search_and_status_say_how_many_chunks_wait_for_vectors(
    capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path
) -> None:
    other = write_tree(tmp_path / "other", {"otters.md": "Sea otters hold hands asleep.\n"})
    assert run(capsys, "add", str(project), str(other))[0] == 0
    assert run(capsys, "index")[0] == 0
    with sqlite3.connect(load_settings(os.environ).store_path) as conn:  # stopped after pass 1
        conn.execute(
            "UPDATE chunks SET vector = NULL"
            " WHERE file_id IN (SELECT id FROM files WHERE rel = 'retry.py')"
        )
    note = "semsearch: 1 chunk has no vector yet: {}; run `semsearch index` to finish\n"
    code, out, err = run(capsys, "search", "retry_with_backoff")
    assert (code, err) == (0, note.format("results come from words alone for them"))
    assert "retry.py:1" in out  # found by its words
    code, out, err = run(capsys, "search", "retry_with_backoff", "--json")
    assert err == ""  # the JSON carries the count instead
    found = json.loads(out)
    assert found["results"][0]["relPath"] == "retry.py" and found["chunksPending"] == 1
    code, out, err = run(capsys, "search", "retry_with_backoff", "--mode", "vector")
    assert err == note.format("vector mode cannot find them") and "retry.py" not in out
    assert run(capsys, "search", "retry_with_backoff", "--mode", "bm25")[2] == ""
    assert run(capsys, "search", "otters", "--folder", "other")[2] == ""  # none wait there
    code, out, _ = run(capsys, "status")
    assert "chunks        2\npending       1 chunk waiting for vectors\n" in out
    assert "  1 file  2 skipped  0 errors  1 chunks (1 waiting for vectors)  last" in out
    code, out, _ = run(capsys, "status", "--json")
    status = json.loads(out)
    assert (status["files"], status["chunks"], status["chunksPending"]) == (2, 2, 1)
    assert status["model"]["dim"] == 384 and status["indexExists"] is True
    first, second = status["folders"]
    assert first == {
        "name": "project",
        "path": str(project),
        "exists": True,
        "configured": True,
        "indexed": True,
        "files": 1,
        "skipped": 2,
        "errors": 0,
        "chunks": 1,
        "chunksPending": 1,
        "lastIndexed": first["lastIndexed"],
        "commit": None,  # not a git checkout
        "changed": 0,
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", first["lastIndexed"])
    assert (second["name"], second["chunksPending"]) == ("other", 0)
    assert run(capsys, "index")[0] == 0
    assert run(capsys, "search", "retry_with_backoff")[2] == ""


def test_status_json_before_any_index(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    run(capsys, "add", str(project))
    code, out, _ = run(capsys, "status", "--json")
    status = json.loads(out)
    assert (code, status["indexExists"], status["model"], status["chunksPending"]) == (
        0,
        False,
        None,
        0,
    )
    assert [(f["name"], f["indexed"], f["lastIndexed"]) for f in status["folders"]] == [
        ("project", False, None)
    ]


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_a_cold_search_uses_the_build_that_made_the_index(
    tmp_path: Path,
    variant: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = write_tree(tmp_path / "docs", {"pay.md": "Failed card payments are retried.\n"})
    index = Index(load_settings({**os.environ, "SS_MODEL_VARIANT": variant}))
    index.update([folder])
    index.close()
    other = "int8" if variant == "fp32" else "fp32"
    monkeypatch.setenv("SS_MODEL_VARIANT", other)  # the default now names the other build
    code, out, err = run(capsys, "search", "card payments retried", "--json")
    assert (code, err) == (0, "")
    assert [hit["relPath"] for hit in json.loads(out)["results"]] == ["pay.md"]


# Search filters and output options (issue 34, items 5, 6, 12 and 19).

WHY = " ".join(["the", "order", "waits", "while", "the", "bank", "answers"] * 7)
# Lines longer than the chunk overlap: an overlap that starts at a word cuts one of them.
RETRY_LINES = [
    f"def step_{n}(order):\n    return retry_payment(order, '{WHY}')\n" for n in range(40)
]


@pytest.fixture
def shop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A configured folder indexed with the hashed embedder: search it with ``--mode bm25``."""
    root = write_tree(
        tmp_path / "shop",
        {
            "src/retry.py": "def retry_payment(order):\n    '''Retry a failed payment.'''\n",
            "src/steps.py": "\n".join(RETRY_LINES),
            "src/legacy/retry.py": "def old_retry():\n    '''retry payment, the old way'''\n",
            "docs/retry.md": "# Retries\n\nA failed payment is retried with backoff.\n",
            "tests/test_retry.py": "def test_retry_payment():\n    assert retry_payment(1)\n",
        },
    )
    assert main(["add", str(root)]) == 0
    hash_indexed(root)
    capsys.readouterr()
    return root


def bm25(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run(capsys, "search", "retry payment", "--mode", "bm25", "-k", "20", *argv)


@pytest.mark.parametrize(
    ("filters", "rels"),
    [
        (["--glob", "*.md", "--glob", "tests/**"], {"docs/retry.md", "tests/test_retry.py"}),
        (["--glob", "src/**", "--glob", "!src/legacy/"], {"src/retry.py", "src/steps.py"}),
        (["--glob", "!src/"], {"docs/retry.md", "tests/test_retry.py"}),
        (["--exclude", "src/", "--exclude", "*.md"], {"tests/test_retry.py"}),
        (
            ["--glob", "*.py", "--exclude", "test_*", "--folder", "shop"],
            {"src/retry.py", "src/steps.py", "src/legacy/retry.py"},
        ),
    ],
)
def test_search_globs_repeat_and_exclude(
    capsys: pytest.CaptureFixture[str], shop: Path, filters: list[str], rels: set[str]
) -> None:
    code, out, err = bm25(capsys, "--files-only", "--json", *filters)
    assert (code, err) == (0, "")
    assert {row["relPath"] for row in json.loads(out)["files"]} == rels


@pytest.mark.parametrize(
    ("filters", "code", "message"),
    [
        (["--glob", "["], 2, "semsearch: Invalid glob '[': a '[' is never closed.\n"),
        (["--exclude", "src/[z-a]"], 2, "Invalid glob 'src/[z-a]': the range z-a is reversed."),
        (["--glob", "*.py", "--glob", "!a\\"], 2, "Invalid glob '!a\\\\': it ends with a lone"),
        (["--exclude", "!src/"], 2, "The exclude pattern '!src/' starts with '!'"),
        (
            ["--glob", "x/**"],
            1,
            "semsearch: No indexed path matches the glob 'x/**'. Globs are gitignore patterns",
        ),
        (
            ["--glob", "*.py", "--exclude", "**"],
            1,
            "semsearch: Every indexed path matching the glob '*.py' is excluded by '**': nothing",
        ),
        (["--min-score", "high"], 2, "--min-score: expected a number, got 'high'"),
        (["--min-score", "nan"], 2, "--min-score: expected a finite number, got 'nan'"),
        (["-C", "-1"], 2, "argument -C/--context: must be at least 0, got -1"),
        (["--vimgrep", "--json"], 2, "--vimgrep prints one line per hit: leave out --json"),
        (["-C", "2", "--json"], 2, "semsearch: -C shows chunks as text: leave out --json."),
        (["--full", "--files-only"], 2, "--full shows chunks as text: leave out --files-only."),
    ],
)
def test_search_filter_and_output_errors(
    capsys: pytest.CaptureFixture[str], shop: Path, filters: list[str], code: int, message: str
) -> None:
    result, out, err = bm25(capsys, *filters)
    assert (result, out) == (code, "")
    assert message in err and "No results" not in err and "Traceback" not in err


def test_files_only_json_lists_each_file_once_with_its_best_score(
    capsys: pytest.CaptureFixture[str], shop: Path
) -> None:
    hits = json.loads(bm25(capsys, "--json")[1])["results"]
    code, out, _ = bm25(capsys, "--json", "--files-only")
    best: dict[str, dict[str, object]] = {}
    for hit in hits:
        row = {key: hit[key] for key in ("filePath", "folder", "relPath", "score")}
        best.setdefault(hit["filePath"], row)
    assert code == 0 and json.loads(out) == {"files": list(best.values()), "chunksPending": 0}
    assert bm25(capsys, "--files-only")[1] == "".join(f"{path}\n" for path in best)


def numbered_blocks(out: str) -> list[tuple[str, int, int, list[tuple[int, str, str]]]]:
    """The -C/--full output: per hit its path, line range and (number, mark, text) lines."""
    blocks = []
    for block in out.rstrip("\n").split("\n\n"):
        header, *lines = block.split("\n")
        found = re.fullmatch(r"\d+  shop  (\S+):(\d+)-(\d+)  \d\.\d{3}", header)
        assert found, header
        rows = [re.fullmatch(r" *(\d+)([:-])(.*)", line) for line in lines]
        assert all(rows), lines
        numbered = [(int(r.group(1)), r.group(2), r.group(3)) for r in rows if r]
        blocks.append((found.group(1), int(found.group(2)), int(found.group(3)), numbered))
    return blocks


@pytest.mark.parametrize("context", [0, 2])
def test_context_shows_whole_lines_of_the_file_around_each_hit(
    capsys: pytest.CaptureFixture[str], shop: Path, context: int
) -> None:
    flags = ["--full"] if context == 0 else ["-C", str(context)]
    code, out, err = bm25(capsys, "--glob", "src/steps.py", *flags)
    assert (code, err) == (0, "")
    blocks = numbered_blocks(out)
    assert len(blocks) > 1  # the long file gives several chunks
    for rel, first, last, lines in blocks:
        text = (shop / rel).read_text().splitlines()
        start, end = max(1, first - context), min(len(text), last + context)
        assert [n for n, _, _ in lines] == list(range(start, end + 1))
        for number, mark, line in lines:
            assert line == text[number - 1]
            assert mark == (":" if first <= number <= last else "-")


def test_vimgrep_prints_path_line_col_and_the_first_line(
    capsys: pytest.CaptureFixture[str], shop: Path
) -> None:
    hits = json.loads(bm25(capsys, "--json")[1])["results"]
    code, out, _ = bm25(capsys, "--vimgrep")
    assert code == 0
    assert out.splitlines() == [
        f"{hit['filePath']}:{hit['startLine']}:1:{hit['text'].split(chr(10))[0]}" for hit in hits
    ]
    for line in out.splitlines():
        path, number, _, text = line.split(":", 3)
        assert Path(path).read_text().split("\n")[int(number) - 1] == text


def test_min_score_drops_the_hits_below_it(capsys: pytest.CaptureFixture[str], shop: Path) -> None:
    hits = json.loads(bm25(capsys, "--json")[1])["results"]
    lowest, second = sorted({hit["score"] for hit in hits})[:2]
    floor = (lowest + second) / 2  # clear of the rounding of the scores printed
    code, out, _ = bm25(capsys, "--json", "--min-score", str(floor))
    assert code == 0
    assert json.loads(out)["results"] == [hit for hit in hits if hit["score"] >= floor]
    assert bm25(capsys, "--min-score", "1.5") == (0, "", "No results scoring at least 1.5.\n")


def search_on_a_terminal(query: str, env: dict[str, str]) -> str:
    """What ``semsearch search`` writes to a terminal (its stdout a pty)."""
    primary, secondary = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "semsearch", "search", query, "--mode", "bm25", "-k", "3"],
        stdin=subprocess.DEVNULL,
        stdout=secondary,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **env},
    )
    os.close(secondary)
    received, data = b"", b"start"
    while data:
        try:
            data = os.read(primary, 4096)
        except OSError:  # EIO once the child has closed the pty
            data = b""
        received += data
    os.close(primary)
    assert proc.wait(timeout=300) == 0
    return received.decode()


def test_marked_words_start_a_word_or_a_part_of_an_identifier() -> None:
    red, end = "\x1b[1;31m", "\x1b[0m"
    assert Marker("the header retry")("parseHeaderLine retry_payment preretry THE Retry") == (
        f"parse{red}Header{end}Line {red}retry{end}_payment preretry THE {red}Retry{end}"
    )
    assert Marker("")("left alone") == "left alone"


def test_query_words_are_marked_on_a_terminal_only(
    capsys: pytest.CaptureFixture[str], shop: Path
) -> None:
    shown = search_on_a_terminal("failed payment", {})
    assert "\x1b[1;31mfailed\x1b[0m \x1b[1;31mpayment\x1b[0m" in shown
    assert "\x1b[" not in search_on_a_terminal("failed payment", {"NO_COLOR": "1"})
    code, out, _ = run(capsys, "search", "failed payment", "--mode", "bm25")
    assert code == 0 and "failed payment" in out and "\x1b[" not in out  # a pipe


def test_a_hit_shown_on_one_line_starts_at_its_line(
    capsys: pytest.CaptureFixture[str], shop: Path
) -> None:
    code, out, _ = bm25(capsys, "--glob", "src/steps.py")
    assert code == 0
    lines = (shop / "src/steps.py").read_text().split("\n")
    for row in out.splitlines():
        found = re.fullmatch(r" *\d+  shop  src/steps\.py:(\d+) +\d\.\d{3}  (.*)", row)
        assert found, row
        assert found.group(2).startswith(" ".join(lines[int(found.group(1)) - 1].split()))


def test_mcp_started_on_a_terminal_says_what_it_is() -> None:
    master, slave = pty.openpty()
    argv = [sys.executable, "-m", "semsearch", "mcp"]
    proc = subprocess.Popen(argv, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.close(slave)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline().decode()
        os.write(master, b"\x04")  # Ctrl-D: the terminal's end of input
        out, rest = proc.communicate(timeout=60)
    finally:
        os.close(master)
        proc.kill()
        proc.wait()
    assert first == MCP_ON_A_TERMINAL + "\n"
    assert 'command "semsearch", args ["mcp"]' in first
    assert (out, rest, proc.returncode) == (b"", b"", 0)  # stdout stays the protocol's


def test_mcp_started_by_a_client_says_nothing() -> None:
    argv = [sys.executable, "-m", "semsearch", "mcp"]
    done = subprocess.run(argv, input=b"", capture_output=True, timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def test_any_file_name_is_indexed_and_printed_unambiguously(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = write_tree(
        tmp_path / "names", {"new\nline.md": "zebra alpha\n", 'q"\t.md': "zebra beta\n"}
    )
    latin1 = Path(os.fsdecode(os.fsencode(root) + b"/caf\xe9.md"))
    latin1.write_text("zebra gamma\n")
    assert run(capsys, "add", str(root))[0] == 0
    code, out, _ = run(capsys, "index", "--dry-run")
    assert code == 0 and '"caf\\351.md"' in out and '"new\\nline.md"' in out
    hash_indexed()
    code, out, _ = run(capsys, "search", "zebra", "--mode", "bm25")
    shown = sorted(line.split()[2] for line in out.splitlines())
    assert shown == ['"caf\\351.md":1', '"new\\nline.md":1', '"q\\"\\t.md":1']
    code, out, _ = run(capsys, "search", "zebra", "--mode", "bm25", "--json")
    assert '"relPath": "caf\\udce9.md"' in out  # the byte that is not UTF-8, escaped
    paths = {hit["filePath"] for hit in json.loads(out)["results"]}
    assert paths == {str(latin1), f"{root}/new\nline.md", f'{root}/q"\t.md'}
    assert all(Path(path).read_text().startswith("zebra") for path in paths)
    out = run(capsys, "search", "zebra", "--mode", "bm25", "--files-only")[1]
    assert f'"{root}/caf\\351.md"' in out.splitlines()
    out = run(capsys, "grep", "gamma", str(root))[1]
    assert out == f'"{root}/caf\\351.md":1:zebra gamma\n'
    out = run(capsys, "grep", "--json", "gamma", str(root))[1]
    assert json.loads(out)["matches"][0]["filePath"] == str(latin1)
    assert run(capsys, "cat", str(latin1)) == (0, "zebra gamma\n", "")


def test_a_query_with_a_byte_that_is_not_utf8_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    """`semsearch search $'caf\\xff'`: Python decodes the byte to a lone surrogate (found by
    fuzzing: it ended in a UnicodeEncodeError traceback)."""
    hash_indexed(project)
    code, out, err = run(capsys, "search", "caf\udcff", "--mode", "bm25")
    assert (code, out) == (2, "")
    assert err == (
        "semsearch: The query 'caf\\xff' holds bytes that are not UTF-8 text. Type it again in "
        "UTF-8 (a terminal set to another encoding sends such bytes).\n"
    )


def test_search_shows_copies_under_one_hit_and_all_copies_lists_each(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A file at five revisions in one folder and once in another: one hit, an "also in" line
    naming three of its copies (the other folder's with its name) and how many more; the JSON
    lists them all; --all-copies gives each copy its own hit."""
    text = "def retry_payment(order):\n    '''Retry a failed payment.'''\n"
    repo = write_tree(tmp_path / "repo", {f"rev{n}/src/retry.py": text for n in range(1, 6)})
    mirror = write_tree(tmp_path / "mirror", {"src/retry.py": text})
    write_tree(repo, {"docs/other.md": "notes on payment refunds\n"})
    assert main(["add", str(repo), str(mirror)]) == 0
    hash_indexed(repo, mirror)
    capsys.readouterr()
    search = ["search", "retry payment", "--mode", "bm25", "-k", "2"]
    code, out, _ = run(capsys, *search, "--json")
    first, second = json.loads(out)["results"]
    assert code == 0 and (second["copies"], second["copyCount"]) == ([], 0)
    places = [(first["folder"], first["relPath"])]
    places += [(copy["folder"], copy["relPath"]) for copy in first["copies"]]
    assert sorted(places) == [("mirror", "src/retry.py")] + [
        ("repo", f"rev{n}/src/retry.py") for n in range(1, 6)
    ]
    assert first["copyCount"] == 5 and first["relPath"].endswith("src/retry.py")
    assert set(first["copies"][0]) == {
        "filePath", "folder", "relPath", "startLine", "endLine", "page"
    }  # fmt: skip
    named = [
        (f"{c['folder']}/" if c["folder"] != first["folder"] else "") + f"{c['relPath']}:1"
        for c in first["copies"][:3]
    ]
    code, out, _ = run(capsys, *search)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3
    assert lines[0].startswith(f"1  {first['folder']}") and lines[2].startswith("2  repo")
    assert lines[1] == f"     also in: {', '.join(named)} (+2 more)"
    code, out, _ = run(capsys, *search, "--full")
    assert out.splitlines()[1] == lines[1]
    code, out, _ = run(
        capsys, "search", "retry payment", "--mode", "bm25", "-k", "7", "--all-copies"
    )
    rows = out.splitlines()
    assert len(rows) == 7 and not any("also in" in row for row in rows)
    assert sum("src/retry.py:1" in row for row in rows) == 6
    code, out, _ = run(capsys, *search, "--files-only")
    assert code == 0 and out.splitlines() == [first["filePath"], second["filePath"]]
    code, out, _ = run(capsys, *search, "-k", "7", "--files-only", "--all-copies")
    assert code == 0 and len(out.splitlines()) == 7
