"""ChangeMonitor on real folders and git repositories: when the full freshness check may be
skipped, and the MCP tools falling back to it when the watcher cannot be relied on.

A change in a folder reaches the watcher 50 to 100 ms later, so a test waits for the check it
causes (``until_checked``); a change to a file followed by its stat is seen at once.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from semsearch.cli.commands import main
from semsearch.files.changes import ChangeMonitor, Check
from semsearch.files.ignore import IgnoreSettings
from semsearch.mcp.server import Tools
from tests.conftest import write_tree

IGNORE = IgnoreSettings()


@pytest.fixture
def monitor() -> Iterator[ChangeMonitor]:
    running = ChangeMonitor()
    yield running
    running.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "notes", {"a.md": "Alpha.\n", "sub/b.md": "Beta.\n"})


def git(cwd: Path, *args: str) -> None:
    identity = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", *identity, "-C", str(cwd), *args], check=True, capture_output=True)


def until_checked(
    monitor: ChangeMonitor, roots: list[Path], state: object = 0, seconds: float = 10.0
) -> Check:
    """The full check that ``begin`` asks for within ``seconds`` (fails without one)."""
    deadline = time.monotonic() + seconds
    while (check := monitor.begin(roots, IGNORE, state)) is None:
        assert time.monotonic() < deadline, "no check was due"
        time.sleep(0.01)
    return check


def settle(monitor: ChangeMonitor, roots: list[Path], state: object = 0) -> None:
    """A full check (due now, or once the last change arrived) that found nothing to do: the
    next call may skip it. Checks again while changes made before keep arriving."""
    check: Check | None = until_checked(monitor, roots, state)
    deadline = time.monotonic() + 10
    while check is not None:
        assert time.monotonic() < deadline, "changes kept arriving"
        monitor.confirm(check)
        time.sleep(0.2)  # twice the longest a change takes to arrive
        check = monitor.begin(roots, IGNORE, state)


def test_the_first_call_checks_and_a_confirmed_check_holds_until_a_change(
    monitor: ChangeMonitor, folder: Path
) -> None:
    check = monitor.begin([folder], IGNORE, 0)
    assert isinstance(check, Check) and monitor.problem is None
    monitor.confirm(check)
    assert monitor.begin([folder], IGNORE, 0) is None
    assert monitor.begin([folder], IGNORE, 0) is None
    (folder / "sub" / "b.md").write_text("Beta, changed.\n")
    check = until_checked(monitor, [folder])
    assert monitor.begin([folder], IGNORE, 0) is not None  # not confirmed: work was found
    monitor.confirm(check)
    assert monitor.begin([folder], IGNORE, 0) is None


def test_a_change_during_the_check_counts_for_the_next_call(
    monitor: ChangeMonitor, folder: Path
) -> None:
    check = monitor.begin([folder], IGNORE, 0)
    assert check is not None
    (folder / "c.md").write_text("Saved while the check listed the folder.\n")
    monitor.confirm(check)
    until_checked(monitor, [folder])


def test_the_index_changing_means_a_check(monitor: ChangeMonitor, folder: Path) -> None:
    settle(monitor, [folder], state=("index", 7))
    assert monitor.begin([folder], IGNORE, ("index", 8)) is not None


def test_other_ignore_settings_mean_a_check(monitor: ChangeMonitor, folder: Path) -> None:
    settle(monitor, [folder])
    wider = replace(IGNORE, index_kinds=frozenset({"lockfile"}))
    assert monitor.begin([folder], wider, 0) is not None


def test_other_folders_mean_a_check_and_a_watch_on_them(
    monitor: ChangeMonitor, folder: Path, tmp_path: Path
) -> None:
    other = write_tree(tmp_path / "other", {"c.md": "Gamma.\n"})
    settle(monitor, [folder])
    settle(monitor, [folder, other])
    (other / "c.md").write_text("Gamma, changed.\n")
    until_checked(monitor, [folder, other])


def test_a_check_is_due_after_recheck_seconds(folder: Path) -> None:
    monitor = ChangeMonitor(recheck_seconds=0.0)
    try:
        check = monitor.begin([folder], IGNORE, 0)
        assert check is not None
        monitor.confirm(check)
        assert monitor.begin([folder], IGNORE, 0) is not None
    finally:
        monitor.close()


def test_a_folder_replaced_at_its_path_is_watched_anew(
    monitor: ChangeMonitor, folder: Path, tmp_path: Path
) -> None:
    settle(monitor, [folder])
    folder.rename(tmp_path / "old-notes")
    write_tree(folder, {"z.md": "Zeta.\n"})
    settle(monitor, [folder])
    (folder / "z.md").write_text("Zeta, changed.\n")
    until_checked(monitor, [folder])


def test_a_git_work_tree_appearing_above_a_folder_means_a_check(
    monitor: ChangeMonitor, folder: Path, tmp_path: Path
) -> None:
    settle(monitor, [folder])
    git(tmp_path, "init", "-q")  # the listing switches to git mode
    assert monitor.begin([folder], IGNORE, 0) is not None


def test_the_global_ignore_file_is_followed(folder: Path, tmp_path: Path) -> None:
    ignore = replace(IGNORE, global_ignore_file=tmp_path / "global-ignore")
    monitor = ChangeMonitor()
    try:
        check = monitor.begin([folder], ignore, 0)
        assert check is not None
        monitor.confirm(check)
        (tmp_path / "global-ignore").write_text("*.md\n")
        assert monitor.begin([folder], ignore, 0) is not None
    finally:
        monitor.close()


GIT_CHANGES: dict[str, Callable[[Path], object]] = {
    "git rm --cached": lambda repo: git(repo, "rm", "-q", "--cached", "a.md"),
    "info/exclude": lambda repo: (repo / ".git/info/exclude").write_text("sub/\n"),
    "repository config": lambda repo: git(repo, "config", "core.excludesFile", "/nowhere"),
}


@pytest.mark.parametrize("change", GIT_CHANGES.values(), ids=GIT_CHANGES.keys())
def test_git_files_outside_the_watched_tree_are_followed(
    monitor: ChangeMonitor, folder: Path, change: Callable[[Path], object]
) -> None:
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "one"]):
        git(folder, *args)
    settle(monitor, [folder])
    change(folder)  # only .git changes: no event in the watched tree
    assert monitor.begin([folder], IGNORE, 0) is not None


def test_core_excludes_file_and_gitignores_above_a_folder_are_followed(
    monitor: ChangeMonitor, tmp_path: Path
) -> None:
    repo = write_tree(tmp_path / "repo", {"docs/deep/a.md": "A.\n", "docs/deep/b.log": "B.\n"})
    git(repo, "init", "-q")
    git(repo, "config", "core.excludesFile", str(tmp_path / "excludes"))
    root = repo / "docs" / "deep"
    settle(monitor, [root])
    (tmp_path / "excludes").write_text("*.log\n")
    settle(monitor, [root])
    (repo / "docs" / ".gitignore").write_text("b.log\n")
    settle(monitor, [root])
    (repo / ".gitignore").write_text("*.md\n")
    assert monitor.begin([root], IGNORE, 0) is not None


def test_a_linked_worktree_and_a_nested_repository_are_followed(
    monitor: ChangeMonitor, tmp_path: Path
) -> None:
    main_tree = write_tree(tmp_path / "main", {"a.md": "A.\n"})
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "one"]):
        git(main_tree, *args)
    worktree = tmp_path / "linked"
    git(main_tree, "worktree", "add", "-q", str(worktree))
    settle(monitor, [worktree])
    git(worktree, "rm", "-q", "--cached", "a.md")  # its index lives in main/.git/worktrees
    settle(monitor, [worktree])
    nested = worktree / "vendor" / "lib"
    write_tree(nested, {"lib.md": "Lib.\n"})
    git(nested, "init", "-q")  # a new repository: the watcher starts again
    settle(monitor, [worktree])
    git(nested, "add", "lib.md")  # its index, inside its .git: followed by its stat
    assert monitor.begin([worktree], IGNORE, 0) is not None


def test_an_unreliable_watcher_means_a_check_every_time(folder: Path) -> None:
    monitor = ChangeMonitor(max_watches=1)
    try:
        for _ in range(3):
            check = monitor.begin([folder], IGNORE, 0)
            assert check is not None
            monitor.confirm(check)
        assert monitor.problem == "more than 1 directories to watch"
    finally:
        monitor.close()


def _search(tools: Tools, query: str) -> list[dict[str, Any]]:
    result = tools.search(query)
    assert not result.is_error and result.structured_content is not None
    hits: list[dict[str, Any]] = result.structured_content["results"]
    return hits


@pytest.mark.parametrize("max_watches", [None, 1], ids=["reliable", "too many folders"])
def test_mcp_search_falls_back_to_the_full_check_when_the_watcher_is_unreliable(
    tmp_path: Path, max_watches: int | None
) -> None:
    """A file changed through a hard link from outside raises no event in the folder: only the
    full check sees it. The reliable watcher skips the check and misses it (the documented
    limit the periodic check covers); with more folders than allowed every call runs the full
    check, and the change is found."""
    outside = write_tree(tmp_path / "outside", {"otters.md": "Sea otters hold hands.\n"})
    notes = write_tree(tmp_path / "notes", {"sub/seals.md": "Seals sleep on rocks.\n"})
    os.link(outside / "otters.md", notes / "otters.md")
    assert main(["add", str(notes)]) == 0
    assert main(["index"]) == 0
    monitor = ChangeMonitor(max_watches=max_watches)
    tools = Tools(None, monitor)
    try:
        assert _search(tools, "otters holding hands")[0]["relPath"] == "otters.md"
        assert (monitor.problem is None) is (max_watches is None)
        (outside / "otters.md").write_text("A walrus hauls out on the ice floe.\n")
        hits = _search(tools, "walrus on the ice floe")
        is_found = hits[0]["text"] == "A walrus hauls out on the ice floe."
        assert is_found is (max_watches is not None)
    finally:
        tools.close()
