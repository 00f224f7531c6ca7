"""The CLI on the paths a new user meets: early exits, a full disk, a read-only index, a busy lock.

These run the real command in a subprocess where the exit code or an abort is the point.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from semsearch.cli.commands import main
from semsearch.config import Settings, load_settings
from semsearch.errors import DiskFullError
from semsearch.index import Index
from semsearch.model.embedder import HashEmbedder
from semsearch.store.lock import read_only_message
from semsearch.store.sqlite.schema import SCHEMA_VERSION
from tests.conftest import make_immutable, write_tree
from tests.test_store_copies import as_schema_8

LOREM = (
    "Harbour pilots guide the freighters past the sandbanks at dawn, while gulls follow the "
    "fishing boats home and the tide tables are pinned beside the lighthouse door. "
)


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m semsearch ARGS`` with this test's environment (HOME, XDG dirs)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-m", "semsearch", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def hash_indexed(settings: Settings, root: Path) -> None:
    """Index ``root`` with the hashed embedder (no model needed to read it back)."""
    write_tree(root, {"a.py": "def alpha():\n    return 1\n", "notes.md": "# Notes\nbeta gamma\n"})
    index = Index(settings, embedder=HashEmbedder())
    try:
        index.update([root])
    finally:
        index.close()


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["search", "foo"], 1, "Run `semsearch index` first"),
        (["search", "foo", "--folder", "nosuch"], 2, "nosuch"),
        (["search", "foo", "--glob", "*.nothing"], 1, "No indexed path matches the glob"),
    ],
)
def test_early_search_exit_never_aborts(
    argv: list[str], code: int, message: str, settings: Settings, tmp_path: Path
) -> None:
    """The model's background load never outlives the process (it used to abort: exit 134)."""
    if len(argv) > 2:  # a filter: there is an index to filter
        hash_indexed(settings, tmp_path / "proj")
    for _ in range(5):  # the abort depended on timing: try several times
        result = run_cli(*argv)
        assert "terminate called" not in result.stderr
        assert result.returncode == code, result.stderr
        assert message in result.stderr


def mounted(*command: str) -> None:
    """Run a mount command: an ordinary user's run skips the test; a root run (CI) that cannot
    mount fails it, never skips it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a size-capped or read-only file system")
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.fail(f"cannot mount here ({' '.join(command)}): {result.stderr.strip()}")


def capped_folder(path: Path, size: str, points: list[Path]) -> Path:
    """A tmpfs of ``size`` mounted at ``path``."""
    path.mkdir(parents=True)
    mounted("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    points.append(path)
    return path


def read_only_view(source: Path, path: Path, points: list[Path]) -> Path:
    """``source`` bind-mounted read-only at ``path`` (chmod does not stop root)."""
    path.mkdir(parents=True)
    mounted("mount", "--bind", str(source), str(path))
    points.append(path)
    mounted("mount", "-o", "remount,bind,ro", str(path))
    return path


def fill_disk(folder: Path, leave: int) -> Path:
    """Fill the file system of ``folder`` but ``leave`` bytes; returns the filler file."""
    filler = folder / "filler"
    # Unbuffered: a buffered file keeps what the full disk refused and fails again on close.
    with filler.open("wb", buffering=0) as handle:
        try:
            while handle.write(b"\0" * 65536):
                pass
        except OSError:
            pass
    with filler.open("r+b") as handle:
        handle.truncate(max(filler.stat().st_size - leave, 0))
    return filler


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def integrity(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def indexed_files(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM files").fetchone()[0])


def test_disk_full_is_one_line_and_the_next_run_resumes(
    tmp_path: Path, mount_points: list[Path]
) -> None:
    cap = capped_folder(tmp_path / "cap", "4m", mount_points)
    db = cap / "index.db"
    proj = write_tree(tmp_path / "proj", {"first.md": "The first note is about herons.\n"})
    assert run_cli("--index", str(db), "index", str(proj)).returncode == 0
    write_tree(proj, {f"n{i:02d}.md": f"Note {i}: " + LOREM * 6 for i in range(40)})
    filler = fill_disk(cap, leave=64 * 1024)

    full = run_cli("--index", str(db), "index", str(proj))
    assert full.returncode == 1, full.stderr
    (line,) = error_lines(full.stderr)
    assert str(db) in line and "disk full" in line
    assert integrity(db) == "ok"

    filler.unlink()
    again = run_cli("--index", str(db), "index", str(proj))
    assert again.returncode == 0, again.stderr
    assert integrity(db) == "ok"
    assert indexed_files(db) == 41


def test_a_search_on_a_full_disk_says_so_in_one_line(
    tmp_path: Path, mount_points: list[Path]
) -> None:
    """Every connection to a WAL index makes its shared-memory file first: on a full disk that
    is SQLite's "disk I/O error", which must read as a full disk, not as a damaged index."""
    cap = capped_folder(tmp_path / "cap", "4m", mount_points)
    db = cap / "index.db"
    proj = write_tree(tmp_path / "proj", {"herons.md": "Grey herons wait in the shallows.\n"})
    assert run_cli("--index", str(db), "index", str(proj)).returncode == 0
    assert not db.with_name("index.db-shm").exists()  # the last connection took it away
    filler = fill_disk(cap, leave=0)
    full = run_cli("--index", str(db), "search", "herons")
    assert full.returncode == 1, full.stderr
    (line,) = error_lines(full.stderr)
    assert str(db) in line and "disk full" in line
    filler.unlink()
    again = run_cli("--index", str(db), "search", "herons")
    assert again.returncode == 0, again.stderr
    assert "herons.md" in again.stdout


def paths_found(stdout: str) -> list[str]:
    return [hit["relPath"] for hit in json.loads(stdout)["results"]]


def schema_version(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def test_an_index_that_needs_an_upgrade_is_searched_as_it_is_on_a_full_disk(
    tmp_path: Path, mount_points: list[Path]
) -> None:
    """Schema 9 rebuilds the FTS rows of an older file on open, which needs room on the disk.
    Without it a search reads the file as it is (as on read-only media) and says why on
    stderr; an index run says the disk is full; with room again the file is upgraded."""
    cap = capped_folder(tmp_path / "cap", "8m", mount_points)
    db = cap / "index.db"
    notes = {f"n{i:02d}.md": f"Note {i} on herons: " + LOREM * 8 for i in range(60)}
    proj = write_tree(tmp_path / "proj", notes)
    assert run_cli("--index", str(db), "index", str(proj)).returncode == 0
    as_schema_8(db)
    copy = tmp_path / "copy.db"
    shutil.copyfile(db, copy)
    upgraded = run_cli("--index", str(copy), "search", "herons", "-k", "5", "--json")
    filler = fill_disk(cap, leave=96 * 1024)  # room for the -shm file, not for the rebuild

    full = run_cli("--index", str(db), "search", "herons", "-k", "5", "--json")
    assert full.returncode == 0, full.stderr
    (line,) = error_lines(full.stderr)
    assert str(db) in line and "searching it as it is" in line
    assert paths_found(full.stdout) == paths_found(upgraded.stdout)
    assert (schema_version(db), integrity(db)) == (8, "ok")

    indexing = run_cli("--index", str(db), "index", str(proj))
    assert indexing.returncode == 1, indexing.stderr
    assert "disk full" in error_lines(indexing.stderr)[-1]
    assert (schema_version(db), integrity(db)) == (8, "ok")

    filler.unlink()
    again = run_cli("--index", str(db), "search", "herons", "-k", "3")
    assert (again.returncode, error_lines(again.stderr)) == (0, []), again.stderr
    assert (schema_version(db), integrity(db)) == (SCHEMA_VERSION, "ok")


def test_an_index_run_in_the_same_process_opens_the_file_again_to_upgrade_it(
    tmp_path: Path, mount_points: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that searched a file as it was on a full disk goes on serving; its first index
    run after space came back upgrades the file instead of saying the disk is full."""
    cap = capped_folder(tmp_path / "cap", "8m", mount_points)
    monkeypatch.setenv("SS_INDEX_PATH", str(cap / "index.db"))
    settings = load_settings(os.environ)
    notes = {f"n{i:02d}.md": f"Note {i} on herons: " + LOREM * 8 for i in range(60)}
    proj = write_tree(tmp_path / "proj", notes)
    index = Index(settings, embedder=HashEmbedder())
    index.update([proj])
    index.close()
    as_schema_8(settings.store_path)
    filler = fill_disk(cap, leave=96 * 1024)
    index = Index(settings, embedder=HashEmbedder())
    try:
        assert index.search("herons")
        assert schema_version(settings.store_path) == 8
        with pytest.raises(DiskFullError):
            index.update([proj])
        filler.unlink()
        assert index.update([proj]).total("unchanged") == 60
        assert index.search("herons")
    finally:
        index.close()
    assert schema_version(settings.store_path) == SCHEMA_VERSION


@pytest.fixture
def read_only_index(
    tmp_path: Path, mount_points: list[Path], monkeypatch: pytest.MonkeyPatch
) -> dict[str, Path]:
    """A folder indexed with the real model, its index then seen through a read-only mount."""
    proj = write_tree(
        tmp_path / "proj",
        {"herons.md": "Grey herons stand still in the shallows, waiting for fish.\n"},
    )
    source = tmp_path / "source"
    source.mkdir()
    monkeypatch.setenv("SS_INDEX_PATH", str(source / "index.db"))
    assert run_cli("add", str(proj)).returncode == 0
    assert run_cli("index").returncode == 0
    view = read_only_view(source, tmp_path / "ro", mount_points)
    monkeypatch.setenv("SS_INDEX_PATH", str(view / "index.db"))
    return {"proj": proj, "db": view / "index.db", "view": view}


def test_a_read_only_index_is_searched_and_refuses_updates(
    read_only_index: dict[str, Path],
) -> None:
    db = read_only_index["db"]
    found = run_cli("search", "birds waiting in shallow water")
    assert found.returncode == 0, found.stderr
    assert "herons.md" in found.stdout
    status = run_cli("status")
    assert status.returncode == 0, status.stderr
    assert str(db) in status.stdout and "chunks        1" in status.stdout
    refused = run_cli("index")
    assert refused.returncode == 1
    (line,) = error_lines(refused.stderr)
    assert "read-only" in line and str(db) in line and ".lock" not in line
    names = sorted(p.name for p in read_only_index["view"].iterdir())
    assert names == ["index.db", "index.db.lock"]  # the lock of the run that made it


def test_remove_on_a_read_only_index_leaves_the_config_as_it_was(
    read_only_index: dict[str, Path],
) -> None:
    before = run_cli("list").stdout
    refused = run_cli("remove", str(read_only_index["proj"]))
    assert refused.returncode == 1
    (line,) = error_lines(refused.stderr)
    assert "read-only" in line
    after = run_cli("list")
    assert after.stdout == before and str(read_only_index["proj"]) in after.stdout


def test_status_check_on_a_damaged_read_only_index_says_where_to_mend_it(
    read_only_index: dict[str, Path], tmp_path: Path
) -> None:
    """The advice names the run that mends the index, and that it needs somewhere the index can
    be written: here it is read-only, and `index --rebuild` would only say so."""
    from tests.test_damage import overwrite_middle

    overwrite_middle(tmp_path / "source" / "index.db")  # beneath the read-only view
    checked = run_cli("status", "--check")
    assert checked.returncode == 1 and "damaged" in checked.stdout
    (line,) = error_lines(checked.stderr)
    assert "`semsearch index --rebuild` where the index can be written" in line
    assert "read-only here" in line and str(read_only_index["db"]) in line
    assert "read-only" in error_lines(run_cli("index", "--rebuild").stderr)[0]


def test_a_search_leaves_no_onnxruntime_telemetry_in_the_home_folder(
    read_only_index: dict[str, Path], tmp_path: Path
) -> None:
    """onnxruntime 1.32 keeps a device id and an event store under
    ``~/.cache/Microsoft`` and warns on each model load where it cannot: semsearch turns that
    off (``ORT_DISABLE_TELEMETRY``) unless the user chose, whatever the parent process set."""
    home = tmp_path / "fresh-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    env.update(
        HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), PYTHONPATH=os.pathsep.join(sys.path)
    )
    found = subprocess.run(
        [sys.executable, "-m", "semsearch", "search", "birds waiting in shallow water"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert found.returncode == 0 and "herons.md" in found.stdout, found.stderr
    assert "telemetry" not in found.stderr
    assert not list(home.rglob("*onnxruntime*")) and not (home / ".cache" / "Microsoft").exists()


def test_the_mcp_read_tools_work_on_a_read_only_index(
    read_only_index: dict[str, Path], tmp_path: Path
) -> None:
    from tests.test_mcp_server import Client, ok, server_env

    env = {**server_env(Path(os.environ["HOME"])), "SS_INDEX_PATH": str(read_only_index["db"])}
    herons = read_only_index["proj"] / "herons.md"
    client = Client(env, tmp_path, tmp_path / "server.log")
    try:
        assert "herons.md" in ok(client.call("search", {"query": "birds in shallow water"}))
        assert "Grey herons" in ok(client.call("gather", {"query": "herons"}))
        assert "Grey herons" in ok(client.call("cat_file", {"filePath": str(herons)}))
        assert "herons.md" in ok(client.call("grep", {"pattern": "shallows"}))
        assert str(read_only_index["db"]) in ok(client.call("list_folders", {}))
    finally:
        client.close()


HOLDER = """
import sys
from pathlib import Path
from semsearch.store import write_lock
with write_lock(Path(sys.argv[1]), 0):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_second_index_run_says_at_once_whom_it_waits_for(
    settings: Settings, tmp_path: Path
) -> None:
    proj = write_tree(tmp_path / "proj", {"a.md": "Kingfishers dive for minnows.\n"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(settings.store_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    waiter = subprocess.Popen(
        [sys.executable, "-m", "semsearch", "index", str(proj)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    first: list[str] = []
    reader = threading.Thread(target=lambda: first.append(waiter.stderr.readline()))  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout=60)
    holder.communicate("")  # release the lock either way
    reader.join()
    _, rest = waiter.communicate(timeout=120)
    assert first and f"pid {holder.pid}, started " in first[0], first
    assert "waiting for the `semsearch index` run" in first[0]
    assert waiter.returncode == 0, rest


def file_size(settings: Settings) -> int:
    return settings.store_path.stat().st_size


@pytest.mark.parametrize("made_before_auto_vacuum", [False, True])
def test_removing_a_folder_shrinks_the_index_file(
    settings: Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    made_before_auto_vacuum: bool,
) -> None:
    keep = write_tree(tmp_path / "keep", {"k.md": "A small note that stays.\n"})
    # 300 notes: float16 vectors made rows small enough that the empty file's fixed pages
    # (~21 pages of 16 KiB) were half of what 150 notes left
    big = write_tree(
        tmp_path / "big", {f"n{i:03d}.md": f"Note {i}. " + LOREM * 8 for i in range(300)}
    )
    index = Index(settings, embedder=HashEmbedder())
    try:
        index.update([keep, big])
    finally:
        index.close()
    if made_before_auto_vacuum:  # the files semsearch wrote before it set auto_vacuum
        with sqlite3.connect(settings.store_path) as conn:
            conn.execute("PRAGMA auto_vacuum=NONE")
            conn.execute("VACUUM")
    before = file_size(settings)
    assert main(["remove", str(big)]) == 0
    assert "purged    300 files" in capsys.readouterr().out
    assert file_size(settings) < before / 2
    with sqlite3.connect(settings.store_path) as conn:
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    assert integrity(settings.store_path) == "ok"


@pytest.mark.lancedb
def test_lancedb_disk_full_is_one_line_and_the_next_run_resumes(
    tmp_path: Path, mount_points: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cap = capped_folder(tmp_path / "cap", "16m", mount_points)
    monkeypatch.setenv("SS_STORE_BACKEND", "lancedb")
    monkeypatch.setenv("SS_INDEX_PATH", str(cap / "lancedb"))
    settings = load_settings(os.environ)
    proj = write_tree(tmp_path / "proj", {"first.md": "The first note is about herons.\n"})
    index = Index(settings, embedder=HashEmbedder())
    try:
        index.update([proj])
        write_tree(proj, {f"n{i:02d}.md": f"Note {i}: " + LOREM * 6 for i in range(40)})
        filler = fill_disk(cap, leave=16 * 1024)
        with pytest.raises(DiskFullError) as caught:
            index.update([proj])
        assert "\n" not in str(caught.value)
        assert f"Cannot write index {settings.store_path}: disk full" in str(caught.value)
        filler.unlink()
        assert index.update([proj]).total("indexed") == 40
    finally:
        index.close()


def test_an_index_file_without_write_access_is_searched(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shared file the user may read but not write (root ignores modes: chattr +i)."""
    hash_indexed(settings, tmp_path / "proj")
    db = settings.store_path
    make_immutable(db)
    try:
        index = Index(settings, embedder=HashEmbedder())
        try:
            assert [hit.rel for hit in index.search("alpha", k=1)] == ["a.py"]
            assert index.status().chunks == 2
        finally:
            index.close()
        assert main(["search", "--mode", "bm25", "beta gamma"]) == 0
        assert "notes.md" in capsys.readouterr().out
        assert main(["index", str(tmp_path / "proj")]) == 1
        assert capsys.readouterr().err == f"semsearch: {read_only_message(db)}\n"
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)
