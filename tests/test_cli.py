"""The CLI in-process: exit codes, messages, outputs; lazy model loading in a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from semsearch.cli import main
from semsearch.config import load_settings
from semsearch.embedder import HashEmbedder
from semsearch.index import Index
from semsearch.store import ChunkRecord, FileWrite, open_store
from tests.conftest import write_tree


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
        (["add", "/definitely/not/here"], 1, "not a directory: /definitely/not/here"),
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


def test_index_search_status_json(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    code, out, _ = run(capsys, "index", str(project), "--json")
    assert code == 0 and json.loads(out)["filesIndexed"] == 1
    code, out, _ = run(capsys, "search", "retry_with_backoff", "--json", "-k", "1")
    (hit,) = json.loads(out)
    assert (hit["relPath"], hit["startLine"], hit["endLine"]) == ("retry.py", 1, 2)
    assert set(hit) >= {"filePath", "folder", "startLine", "endLine", "page", "score", "text"}
    assert run(capsys, "search", "retry", "--files-only")[1] == f"{project / 'retry.py'}\n"
    code, out, _ = run(capsys, "search", "a failing call")
    assert code == 0 and "retry.py:1" in out
    code, out, _ = run(capsys, "search", "retry_with_backoff", "--explain")
    assert "vector #1  ·  bm25 #1  ·  definitions #1  ·  defines a queried symbol x1.5" in out
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


LAZY = """
import sys
from semsearch.cli import main
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
    assert run(capsys, "search", "retry_with_backoff", "--json")[1].strip() == "[]"


def test_configure_process_respects_the_users_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from semsearch.cli import configure_process

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
        assert [hit["relPath"] for hit in json.loads(out)] == [expected]


def test_index_watch_reports_each_run_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    notes = write_tree(tmp_path / "notes", {"a.md": "alpha apples\n"})
    child = subprocess.Popen(
        [sys.executable, "-m", "semsearch", "index", "--watch", "--json", str(notes)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
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
