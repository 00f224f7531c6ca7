"""`semsearch grep` and `semsearch cat` in-process: output, flags, exit codes, confinement."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from semsearch.cli.commands import main
from tests.conftest import write_tree
from tests.test_grep import is_running


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


RETRY = """\
import time


def retry(call, tries=3):
    for attempt in range(tries):
        try:
            return call()
        except OSError:
            time.sleep(2**attempt)
    raise RuntimeError("retrying failed")
"""


@pytest.fixture
def project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A configured git work tree with an ignored file and a secret; the cwd is its root."""
    root = write_tree(
        tmp_path / "project",
        {
            "src/retry.py": RETRY,
            "docs/guide.md": "Call retry() around flaky network calls.\nRetry is patient.\n",
            ".gitignore": "dist/\n",
            "dist/retry.py": "retry = 'built'\n",
            ".env": "RETRY_TOKEN=hunter2\n",
        },
    )
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    assert main(["add", str(root)]) == 0
    capsys.readouterr()
    return root


@pytest.fixture
def in_project(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(project)
    return project


def test_grep_prints_path_line_text_relative_to_the_cwd(
    capsys: pytest.CaptureFixture[str], in_project: Path
) -> None:
    code, out, err = run(capsys, "grep", "retry")
    assert (code, err) == (0, "")
    assert out == (
        "docs/guide.md:1:Call retry() around flaky network calls.\n"
        "src/retry.py:4:def retry(call, tries=3):\n"
        'src/retry.py:10:    raise RuntimeError("retrying failed")\n'
    )


def test_grep_is_a_case_sensitive_regex_by_default(
    capsys: pytest.CaptureFixture[str], in_project: Path
) -> None:
    assert run(capsys, "grep", r"Retry\b")[1] == "docs/guide.md:2:Retry is patient.\n"
    code, out, _ = run(capsys, "grep", "-i", r"retry\b", "docs")
    assert code == 0 and out.count("\n") == 2
    assert run(capsys, "grep", "retry()")[1].count("\n") == 3  # () is an empty group
    assert run(capsys, "grep", "-F", "retry()")[1] == (
        "docs/guide.md:1:Call retry() around flaky network calls.\n"
    )
    assert (
        run(capsys, "grep", "-w", "retry", "src")[1] == "src/retry.py:4:def retry(call, tries=3):\n"
    )


def test_grep_exit_codes(capsys: pytest.CaptureFixture[str], in_project: Path) -> None:
    assert run(capsys, "grep", "no such text anywhere") == (1, "", "")
    code, out, err = run(capsys, "grep", "retry(")
    assert (code, out) == (2, "")
    assert "Invalid regular expression 'retry('" in err and "-F in the CLI" in err
    code, _, err = run(capsys, "grep", "retry", "missing/")
    assert (code, err) == (2, "semsearch: missing/: no such file or folder.\n")
    code, _, err = run(capsys, "grep", "retry", "--glob", "[")
    assert code == 2 and "Invalid file glob" in err
    assert run(capsys, "grep", "retry", "-C", "-1")[0] == 2


def test_grep_leaves_out_what_the_indexer_leaves_out(
    capsys: pytest.CaptureFixture[str], in_project: Path
) -> None:
    code, out, _ = run(capsys, "grep", "-i", "retry", "dist", ".env", ".")
    assert code == 0
    assert "dist/" not in out and "hunter2" not in out and ".env" not in out


def test_grep_context_lines_merge_and_separate_groups(
    capsys: pytest.CaptureFixture[str], in_project: Path
) -> None:
    code, out, _ = run(capsys, "grep", "-C", "1", r"try:|raise|^import", "src")
    assert code == 0
    assert out == (
        "src/retry.py:1:import time\n"
        "src/retry.py-2-\n"
        "--\n"
        "src/retry.py-5-    for attempt in range(tries):\n"
        "src/retry.py:6:        try:\n"
        "src/retry.py-7-            return call()\n"
        "--\n"
        "src/retry.py-9-            time.sleep(2**attempt)\n"
        'src/retry.py:10:    raise RuntimeError("retrying failed")\n'
    )
    code, out, _ = run(capsys, "grep", "-A", "1", "-B", "0", "except", "src")
    assert out.splitlines() == [
        "src/retry.py:8:        except OSError:",
        "src/retry.py-9-            time.sleep(2**attempt)",
    ]
    code, out, _ = run(capsys, "grep", "-C", "2", "-B", "0", "except", "src")
    assert out.splitlines()[0] == "src/retry.py:8:        except OSError:"


def test_grep_globs_repeat_and_exclude(
    capsys: pytest.CaptureFixture[str], in_project: Path
) -> None:
    out = run(capsys, "grep", "-i", "retry", "--glob", "*.md", "--glob", "*.txt")[1]
    assert {line.split(":")[0] for line in out.splitlines()} == {"docs/guide.md"}
    out = run(capsys, "grep", "-i", "retry", "--glob", "!docs/")[1]
    assert {line.split(":")[0] for line in out.splitlines()} == {"src/retry.py"}


def test_grep_json(capsys: pytest.CaptureFixture[str], in_project: Path) -> None:
    code, out, _ = run(capsys, "grep", "--json", "-B", "1", "patient")
    assert code == 0
    assert json.loads(out) == {
        "matches": [
            {
                "filePath": str(in_project / "docs/guide.md"),
                "folder": "project",
                "relPath": "docs/guide.md",
                "line": 2,
                "column": 10,
                "text": "Retry is patient.",
                "before": ["Call retry() around flaky network calls."],
                "after": [],
            }
        ],
        "filesSearched": 3,  # src/retry.py, docs/guide.md, .gitignore
        "warnings": [],
    }
    code, out, _ = run(capsys, "grep", "--json", "nothing matches this")
    assert code == 1 and json.loads(out)["matches"] == []


def test_grep_paths_outside_the_configured_folders(
    capsys: pytest.CaptureFixture[str],
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_tree(
        tmp_path / "other", {".gitignore": "*.log\n", "a.txt": "retry\n", "b.log": "retry\n"}
    )
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "grep", "retry", "other", str(project / "docs"))
    assert code == 0
    assert (
        out
        == "other/a.txt:1:retry\nproject/docs/guide.md:1:Call retry() around flaky network calls.\n"
    )
    code, _, err = run(capsys, "grep", "retry", "other/a.txt")
    assert code == 2 and "other/a.txt is a file outside the configured folders" in err


def test_grep_without_folders(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "grep", "x")
    assert code == 2 and "No folders configured" in err
    root = write_tree(tmp_path / "loose", {"a.txt": "x marks the spot\n"})
    assert run(capsys, "grep", "x", str(root)) == (0, f"{root}/a.txt:1:x marks the spot\n", "")


def test_cat_prints_the_file_or_a_range(
    capsys: pytest.CaptureFixture[str], in_project: Path
) -> None:
    assert run(capsys, "cat", "src/retry.py") == (0, RETRY, "")
    assert run(capsys, "cat", "src/retry.py:4-5")[1] == (
        "def retry(call, tries=3):\n    for attempt in range(tries):\n"
    )
    assert run(capsys, "cat", "src/retry.py:9")[1] == (
        '            time.sleep(2**attempt)\n    raise RuntimeError("retrying failed")\n'
    )
    assert run(capsys, "cat", "-n", str(in_project / "docs/guide.md:2-2"))[1] == (
        "     2\tRetry is patient.\n"
    )
    assert (
        run(capsys, "cat", "src/retry.py:10-99")[1] == '    raise RuntimeError("retrying failed")\n'
    )


def test_cat_has_no_256_kib_cap(capsys: pytest.CaptureFixture[str], in_project: Path) -> None:
    text = "".join(f"{n:07d} " + "y" * 70 + "\n" for n in range(5000))  # 390 KB
    (in_project / "big.txt").write_text(text)
    assert run(capsys, "cat", "big.txt") == (0, text, "")


def test_cat_takes_a_name_with_a_colon_whole(
    capsys: pytest.CaptureFixture[str], in_project: Path
) -> None:
    (in_project / "notes:2").write_text("colon\n")
    assert run(capsys, "cat", "notes:2") == (0, "colon\n", "")


@pytest.mark.parametrize(
    ("target", "code", "message"),
    [
        ("src/retry.py:0-3", 2, "src/retry.py:0-3: lines are numbered from 1."),
        ("src/retry.py:5-3", 2, "the range ends (3) before it starts (5)"),
        ("src/retry.py:20", 2, "Line 20 is past the end of {root}/src/retry.py (10 lines)."),
        ("../elsewhere.txt", 1, "Refused: {tmp}/elsewhere.txt is not inside any configured folder"),
        ("dist/retry.py", 1, "is excluded from indexing (ignored by .gitignore"),
        (".env", 1, "is a secret file (matches .env); semsearch never reads secret files"),
        ("missing.py", 1, "{root}/missing.py is not found."),
        ("src", 1, "{root}/src is a folder, not a file."),
    ],
)
def test_cat_errors(
    capsys: pytest.CaptureFixture[str], in_project: Path, target: str, code: int, message: str
) -> None:
    (in_project.parent / "elsewhere.txt").write_text("outside\n")
    result, out, err = run(capsys, "cat", target)
    assert (result, out) == (code, "")
    assert message.format(root=in_project, tmp=in_project.parent) in err
    assert err.count("\n") == 1


def test_cat_in_a_folder_indexed_but_not_configured_says_how_to_allow_it(
    capsys: pytest.CaptureFixture[str], in_project: Path
) -> None:
    other = write_tree(in_project.parent / "other folder", {"notes.md": "Otters hold hands.\n"})
    assert main(["index", str(other)]) == 0
    capsys.readouterr()
    code, out, err = run(capsys, "cat", str(other / "notes.md"))
    assert (code, out) == (1, "")
    assert err == (
        f"semsearch: Refused: {other}/notes.md is in the folder other folder ({other}), which is "
        "indexed but not configured, and only the files of configured folders can be read: "
        f"`semsearch add '{other}'` allows it.\n"
    )
    assert main(["add", str(other)]) == 0
    capsys.readouterr()
    assert run(capsys, "cat", str(other / "notes.md")) == (0, "Otters hold hands.\n", "")


def test_ctrl_c_stops_grep_and_its_child_at_once(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "r", {"long.txt": "a" * 5000 + "!\n"})
    argv = [sys.executable, "-m", "semsearch", "grep", "(a+)+$", str(root)]
    # as a terminal's foreground job gets it: pytest started in the background by a shell
    # without job control (`make test &`) ignores SIGINT, and a child inherits that
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        deadline = time.monotonic() + 60
        while not children.read_text().split():  # the grep child, matching without a deadline
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        (child,) = map(int, children.read_text().split())
        time.sleep(1.0)  # the child is matching by now
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert (proc.returncode, out, err) == (130, b"", b"")
        assert not is_running(child)
    finally:  # a failure must not leave the child matching forever (it takes a core)
        if proc.poll() is None:
            proc.kill()  # the child follows it (PR_SET_PDEATHSIG)
            proc.wait()
