"""The writer lock across real processes: who holds it, a holder killed with SIGKILL, and a
Python without ``fcntl`` (as on Windows), where filelock's soft lock stands in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from semsearch.errors import LockedError
from semsearch.store import LockHolder, write_lock
from semsearch.store.lock import read_holder

NO_FCNTL = "import sys\nsys.modules['fcntl'] = None  # what a Python without fcntl sees\n"

HOLDER = """
import sys, time
from pathlib import Path
import semsearch
from semsearch.store import open_store, write_lock
db = Path(sys.argv[1])
store = open_store("sqlite", db, create=True)
with write_lock(db, 0):
    store.ensure_folder("/srv/notes", "notes")
    print("held", flush=True)
    time.sleep(120)
"""

TAKER = """
import sys
from pathlib import Path
from semsearch.errors import LockedError
from semsearch.store import open_store, write_lock
db = Path(sys.argv[1])
try:
    with write_lock(db, float(sys.argv[2])):
        print("took it", [f.name for f in open_store("sqlite", db).folders()])
except LockedError as exc:
    print(exc)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


@contextmanager
def holder(db: Path, prelude: str = "") -> Iterator[subprocess.Popen[str]]:
    """A process that opens the index, takes its lock and keeps it until killed."""
    child = subprocess.Popen(
        [sys.executable, "-c", prelude + HOLDER, str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line == "held\n", child.communicate()[1]
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()


def take(db: Path, prelude: str = "", wait: float = 0.0) -> str:
    """What a second process says when it asks for the lock, waiting up to ``wait`` seconds."""
    proc = subprocess.run(
        [sys.executable, "-c", prelude + TAKER, str(db), str(wait)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def kill_9(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait()


@pytest.mark.parametrize(
    ("prelude", "wait"),
    [("", 0.0), (NO_FCNTL, 1.0)],  # filelock before 4.2.1 takes a killed soft lock on a retry
    ids=["flock", "no fcntl"],
)
def test_a_holder_killed_with_sigkill_leaves_the_lock_to_the_next_writer(
    tmp_path: Path, prelude: str, wait: float
) -> None:
    db = tmp_path / "index.db"
    with holder(db, prelude) as child:
        said = take(db, prelude)
        assert said.startswith(f"Another `semsearch index` is writing {db} (pid {child.pid}, ")
        kill_9(child)
        assert take(db, prelude, wait) == "took it ['notes']"


def test_without_fcntl_semsearch_imports_and_a_soft_lock_stands_in(tmp_path: Path) -> None:
    db = tmp_path / "index.db"
    with holder(db, NO_FCNTL) as child:
        assert read_holder(db.with_name("index.db.lock")).pid == child.pid
        assert (tmp_path / "index.db.lock.soft").exists()
    assert (tmp_path / "index.db.lock.soft").exists()  # its holder was killed
    assert take(db, NO_FCNTL, 1.0) == "took it ['notes']"
    assert not (tmp_path / "index.db.lock.soft").exists()  # released by the one that took it
    with holder(db) as child:  # where flock works there is no marker
        assert read_holder(db.with_name("index.db.lock")).pid == child.pid
        assert not (tmp_path / "index.db.lock.soft").exists()


def test_the_lock_file_names_its_holder_after_a_space(tmp_path: Path) -> None:
    db = tmp_path / "index.db"
    lock_file = tmp_path / "index.db.lock"
    with write_lock(db, 0):
        pid, started = lock_file.read_bytes().decode("ascii").split(" ")[1:]
        assert lock_file.read_bytes().startswith(b" ")  # the byte Windows' lock covers
        assert read_holder(lock_file) == LockHolder(os.getpid(), float(started))
        assert int(pid) == os.getpid()
    lock_file.write_text("4242 1700000000.500\n", encoding="ascii")  # as earlier versions wrote
    assert read_holder(lock_file) == LockHolder(4242, 1700000000.5)


def test_on_wait_is_told_the_holder_once(tmp_path: Path) -> None:
    db = tmp_path / "index.db"
    told: list[LockHolder] = []
    with holder(db) as child, pytest.raises(LockedError), write_lock(db, 0.5, told.append):
        pass
    assert [h.pid for h in told] == [child.pid]
