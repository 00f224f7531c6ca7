"""A team index on object storage: built once, searched from another machine.

Every test runs against moto's S3 server (started here, a fresh bucket per test); the "other
machine" is a second process with another working directory, another HOME and no config, for
which the indexed folder is gone. Requests are counted from the server's request log.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

pytest.importorskip("lancedb", reason='needs the lancedb extra: pip install "semsearch[lancedb]"')

import boto3
import lancedb
from moto.s3.responses import S3Response
from moto.server import ThreadedMotoServer

from semsearch.cli.commands import main
from semsearch.config import RemoteLocation, load_settings
from semsearch.errors import LockedError
from semsearch.index import Index
from semsearch.model.embedder import HashEmbedder
from semsearch.store import LockHolder, open_store, write_lock
from semsearch.store.lease import write_lease
from tests.conftest import write_tree
from tests.test_mcp_server import Client, error, ok

SECRET = "s3cr3t-Do-Not-Print-9f2c"
KEY_ID = "AKIDTEAMINDEX0001"
PROJECT = {
    "payments/retry.py": (
        "def retry_payment(order, attempts=3):\n"
        '    """Retry a failed card payment with exponential backoff."""\n'
        "    for attempt in range(attempts):\n"
        "        if charge(order):\n"
        "            return True\n"
        "    return False\n"
    ),
    "docs/otters.md": "# Otters\n\nThe otter sleeps in the river, holding paws.\n",
    "old/legacy.py": "def legacy_ledger():\n    return 'ledger of the old bank'\n",
}
WRITES = ("PUT", "POST", "DELETE")
T = TypeVar("T")


class RequestLog(logging.Handler):
    """The moto server's request log (werkzeug's access lines), kept as (method, path)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if '"' in message:
            method, _, rest = message.split('"', 2)[1].partition(" ")
            self.requests.append((method, rest.rsplit(" ", 1)[0]))

    def since(self, start: int) -> list[tuple[str, str]]:
        return self.requests[start:]


def one_at_a_time(method: Callable[..., T], lock: threading.Lock) -> Callable[..., T]:
    """``method``, run by one of the server's threads at a time."""

    @functools.wraps(method)
    def locked(*args: object, **kwargs: object) -> T:
        with lock:
            return method(*args, **kwargs)

    return locked


@pytest.fixture(scope="session")
def moto() -> Iterator[tuple[str, RequestLog]]:
    """moto's S3 server on a free port, with its request log.

    S3 applies a conditional PUT or DELETE (``If-None-Match: *``, ``If-Match``) atomically: of
    two writers taking a free lease at once, one gets 412. moto's server checks, then writes, in
    whichever of its threads serves the request, so on a loaded machine both got the lease once
    (`test_two_writers_started_together…`: "Table 'meta' already exists"). Its object writes are
    made one at a time here, as S3's are atomic.
    """
    log = RequestLog()
    werkzeug = logging.getLogger("werkzeug")
    werkzeug.addHandler(log)
    werkzeug.setLevel(logging.INFO)
    werkzeug.propagate = False
    writes = threading.Lock()
    with pytest.MonkeyPatch.context() as patch:
        for name in ("put_object", "delete_object"):
            patch.setattr(S3Response, name, one_at_a_time(getattr(S3Response, name), writes))
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}", log
        server.stop()
    werkzeug.removeHandler(log)


def s3_env(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }


@pytest.fixture
def bucket(moto: tuple[str, RequestLog], monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket; this process's environment points at the server with its keys."""
    endpoint, _ = moto
    name = f"team-{uuid.uuid4().hex[:12]}"
    client(endpoint).create_bucket(Bucket=name)
    for key, value in s3_env(endpoint).items():
        monkeypatch.setenv(key, value)
    return name


def client(endpoint: str) -> object:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )


def keys(endpoint: str, bucket: str) -> list[str]:
    listed = client(endpoint).list_objects_v2(Bucket=bucket)  # type: ignore[attr-defined]
    return [item["Key"] for item in listed.get("Contents", [])]


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def checkout(root: Path) -> str:
    """PROJECT as a git checkout with one commit; returns the commit."""
    write_tree(root, PROJECT)
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "-c", "user.email=ci@example.com", "-c", "user.name=CI", "commit", "-qm", "one")
    return git(root, "rev-parse", "HEAD")


def elsewhere(tmp_path: Path, endpoint: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``semsearch ARGV`` on "another machine": a child process in an empty working directory,
    its own HOME, no config and no SS_* setting, only the object store's variables."""
    home = tmp_path / "reader-home"
    cwd = tmp_path / "reader-cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SS_", "XDG_", "AWS_"))
    }
    env.update(s3_env(endpoint), HOME=str(home), PYTHONPATH=os.pathsep.join(sys.path))
    env["SS_MODEL_CACHE"] = os.environ["SS_MODEL_CACHE"]
    return subprocess.run(
        [sys.executable, "-m", "semsearch", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def test_index_in_ci_then_search_and_status_from_another_machine(
    tmp_path: Path, bucket: str, moto: tuple[str, RequestLog], capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint, log = moto
    uri = f"s3://{bucket}/team"
    project = tmp_path / "ci" / "monorepo"
    commit = checkout(project)
    assert main(["--index", uri, "index", str(project)]) == 0
    (project / "payments/retry.py").write_text(
        PROJECT["payments/retry.py"].replace("exponential backoff", "jittered backoff")
    )
    (project / "old/legacy.py").unlink()
    git(project, "add", "-A")
    git(project, "-c", "user.email=ci@example.com", "-c", "user.name=CI", "commit", "-qm", "two")
    commit = git(project, "rev-parse", "HEAD")
    assert main(["--index", uri, "index", str(project)]) == 0
    written = capsys.readouterr()
    assert "1 deleted" in written.out
    shutil.rmtree(project.parent)  # the reader's machine has no checkout

    before = len(log.requests)
    found = elsewhere(tmp_path, endpoint, "--index", uri, "search", "retry card payment", "--json")
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)["results"]
    best = hits[0]
    assert (best["folder"], best["relPath"], best["startLine"], best["endLine"]) == (
        "monorepo",
        "payments/retry.py",
        1,
        6,
    )
    assert "jittered backoff" in best["text"]
    assert all(hit["relPath"] != "old/legacy.py" for hit in hits)
    status = elsewhere(tmp_path, endpoint, "--index", uri, "status", "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert (report["indexPath"], report["files"], report["chunks"]) == (uri, 2, 2)
    assert report["model"]["id"].startswith("all-MiniLM-L6-v2")
    (folder,) = report["folders"]
    assert (folder["name"], folder["commit"], folder["exists"]) == ("monorepo", commit, False)
    assert folder["lastIndexed"] is not None
    shown = elsewhere(tmp_path, endpoint, "--index", uri, "status")
    assert f"built from commit {commit}" in shown.stdout
    reads = log.since(before)
    assert reads and not [r for r in reads if r[0] in WRITES]  # a reader only reads

    made = sorted(p.name for p in (tmp_path / "reader-cwd").iterdir())
    assert made == []  # no "s3:" folder, no lancedb folder
    assert not (tmp_path / "reader-home" / ".local").exists()
    assert not list(tmp_path.rglob("lancedb")) and not list(tmp_path.rglob("s3:"))
    assert all(key.startswith("team/") for key in keys(endpoint, bucket))
    everything = written.out + written.err + found.stdout + found.stderr + status.stdout
    assert SECRET not in everything + status.stderr + shown.stdout + shown.stderr


def test_config_and_status_never_show_the_secret(
    tmp_path: Path, bucket: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.json"
    options = {"aws_session_token": "token-" + SECRET}
    config.write_text(json.dumps({"indexDir": f"s3://{bucket}/x", "storageOptions": options}))
    monkeypatch.setenv("SS_CONFIG_PATH", str(config))
    settings = load_settings(os.environ)
    assert settings.index_path.storage_options["aws_session_token"] == "token-" + SECRET
    assert settings.index_path.storage_options["aws_secret_access_key"] == SECRET
    assert SECRET not in repr(settings)
    assert main(["config"]) == 0
    assert main(["status"]) == 0
    shown = capsys.readouterr()
    assert f"s3://{bucket}/x" in shown.out
    assert SECRET not in shown.out + shown.err


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (
            ["--index", "s3://BUCKET/team", "index", "."],
            {"SS_STORE_BACKEND": "sqlite"},
            "only the LanceDB backend can open: set SS_STORE_BACKEND=lancedb",
        ),
        (
            ["--index", "s3:///team", "search", "otters"],
            {},
            "is not an object-store URI: write it as s3://BUCKET/PREFIX",
        ),
        (
            ["--index", "s3://BUCKET/a/../b", "status"],
            {},
            "is not an object-store URI",
        ),
        (  # one slash short: once a local folder ./s3:/BUCKET, indexed without a word
            ["--index", "s3:/BUCKET/team", "index", "."],
            {},
            "is not an object-store URI: write it as s3://BUCKET/PREFIX",
        ),
        (
            ["--index", "GS:team", "search", "otters"],
            {},
            "e.g. gs://my-bucket/team-index (a local folder: ./GS:team)",
        ),
        (
            ["--index", "s3://BUCKET/team", "index", "--rebuild"],
            {"SS_CONFIG_PATH": "CONFIG"},
            "on object storage cannot do. Index into a new prefix",
        ),
    ],
)
def test_refusals_exit_2_and_write_nothing(
    tmp_path: Path,
    bucket: str,
    moto: tuple[str, RequestLog],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    endpoint, log = moto
    monkeypatch.chdir(write_tree(tmp_path / "here", {"a.md": "otters\n"}))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if env.get("SS_CONFIG_PATH"):  # a configured folder: --rebuild has one to index
        config = tmp_path / "config.json"
        config.write_text(json.dumps({"defaultRoots": [str(tmp_path / "here")]}))
        monkeypatch.setenv("SS_CONFIG_PATH", str(config))
    before = len(log.requests)
    assert main([arg.replace("BUCKET", bucket) for arg in argv]) == 2
    assert message in one_line(capsys.readouterr().err)
    assert log.since(before) == [] and keys(endpoint, bucket) == []
    assert sorted(p.name for p in (tmp_path / "here").iterdir()) == ["a.md"]
    assert not (tmp_path / "home" / ".local").exists()


def test_a_crashed_writers_lease_is_taken_over_when_its_term_runs_out(
    tmp_path: Path, bucket: str, moto: tuple[str, RequestLog]
) -> None:
    """A writer killed while it holds the lease leaves it behind; the next one is refused while
    the lease is fresh, and once it has gone unrenewed for a term takes it over."""
    endpoint, _ = moto
    uri = f"s3://{bucket}/team"
    crash = (
        "import os, signal, sys\n"
        "from semsearch.config import load_settings\n"
        "from semsearch.store.lease import write_lease\n"
        "location = load_settings(os.environ, sys.argv[1]).store_path\n"
        "with write_lease(location, 0):\n"
        "    print(os.getpid(), flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    crashed = subprocess.run(
        [sys.executable, "-c", crash, uri], cwd=tmp_path, capture_output=True, text=True
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    location = load_settings(os.environ, uri).store_path
    holder = f"is writing {uri} \\(pid {crashed.stdout.strip()} on "
    with pytest.raises(LockedError, match=holder), write_lease(location, 0):
        pass
    heard: list[LockHolder] = []
    started = time.monotonic()
    with write_lease(location, 30, heard.append, term=2):
        waited = time.monotonic() - started
        assert [key for key in keys(endpoint, bucket) if key.endswith(".lease")]
    assert [holder.pid for holder in heard] == [int(crashed.stdout)]
    assert waited < 20
    assert not [key for key in keys(endpoint, bucket) if key.endswith(".lease")]


def test_without_the_lancedb_extra_a_remote_index_says_what_to_install(
    tmp_path: Path, bucket: str
) -> None:
    code = (
        "import sys; sys.modules['lancedb'] = None\n"
        "from semsearch.cli.commands import main\n"
        f"sys.exit(main(['--index', 's3://{bucket}/team', 'index', '.']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert 'needs the lancedb extra: pip install "semsearch[lancedb]"' in one_line(done.stderr)
    assert list(tmp_path.iterdir()) == [tmp_path / "home"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def strict_moto() -> Iterator[str]:
    """A second moto that checks keys (``INITIAL_NO_AUTH_ACTION_COUNT``): unknown ones get 403.
    Its own process, as moto reads the setting once."""
    port = free_port()
    code = (
        "import time; from moto.server import ThreadedMotoServer\n"
        f"ThreadedMotoServer(ip_address='127.0.0.1', port={port}, verbose=False).start()\n"
        "time.sleep(3600)\n"
    )
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    server = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    server.kill()
    server.wait()


@pytest.mark.parametrize("command", [["index", "."], ["search", "otters"], ["status"]])
@pytest.mark.parametrize(
    ("where", "cause"),
    [
        ("unreachable", "Cannot reach the object store at http://127.0.0.1:"),
        ("no-bucket", "The bucket no-such-bucket-here does not exist"),
        ("wrong-keys", "The object store refused the credentials for"),
        ("no-keys", "Found no credentials for s3://"),
    ],
)
def test_store_failures_exit_1_in_one_line_and_leave_nothing_behind(
    tmp_path: Path,
    bucket: str,
    moto: tuple[str, RequestLog],
    strict_moto: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    where: str,
    cause: str,
) -> None:
    endpoint, _ = moto
    monkeypatch.chdir(write_tree(tmp_path / "here", {"a.md": "otters in the river\n"}))
    uri = f"s3://{bucket}/team"
    if where == "unreachable":
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    elif where == "no-bucket":
        uri = "s3://no-such-bucket-here/team"
    elif where == "no-keys":
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    else:
        monkeypatch.setenv("AWS_ENDPOINT_URL", strict_moto)
    assert main(["--index", uri, *command]) == 1
    shown = capsys.readouterr()
    assert cause in one_line(shown.err)
    assert SECRET not in shown.out + shown.err and KEY_ID not in shown.out + shown.err
    assert sorted(p.name for p in (tmp_path / "here").iterdir()) == ["a.md"]
    assert keys(endpoint, bucket) == []
    if command[0] == "index":  # nothing half-written: the next run, once the store answers, works
        for key, value in s3_env(endpoint).items():  # the endpoint and keys put right
            monkeypatch.setenv(key, value)
        assert main(["--index", f"s3://{bucket}/team", "index", "."]) == 0
        capsys.readouterr()
        assert main(["--index", f"s3://{bucket}/team", "search", "otters", "--json"]) == 0
        (hit,) = json.loads(capsys.readouterr().out)["results"]
        assert hit["relPath"] == "a.md"


def test_a_bucket_whose_region_cannot_be_found_says_to_set_it(tmp_path: Path) -> None:
    """No AWS_REGION and no endpoint: LanceDB asks AWS for the bucket's region, which fails here
    (a network namespace with no network); once this read as a damaged index."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SS_", "AWS_"))}
    env.update(
        HOME=str(tmp_path / "home"),
        PYTHONPATH=os.pathsep.join(sys.path),
        SS_MODEL_CACHE=os.environ["SS_MODEL_CACHE"],
        AWS_ACCESS_KEY_ID=KEY_ID,
        AWS_SECRET_ACCESS_KEY=SECRET,
    )
    uri = "s3://some-team-bucket/x"
    for argv in (["status"], ["search", "otters"]):
        done = subprocess.run(
            ["unshare", "--net", sys.executable, "-m", "semsearch", "--index", uri, *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 1, done.stderr
        assert one_line(done.stderr) == (
            "semsearch: Cannot find the region of the bucket some-team-bucket (index "
            "s3://some-team-bucket/x): set AWS_REGION (or storageOptions.aws_region), and "
            "AWS_ENDPOINT_URL for a server other than AWS."
        )


def indexed_then_lost(tmp_path: Path, endpoint: str, bucket: str, part: str) -> str:
    """The URI of an index of PROJECT whose objects with ``part`` in their key were deleted."""
    uri = f"s3://{bucket}/team"
    assert main(["--index", uri, "index", str(write_tree(tmp_path / "p", PROJECT))]) == 0
    store = client(endpoint)
    for key in keys(endpoint, bucket):
        if part in key:
            store.delete_object(Bucket=bucket, Key=key)  # type: ignore[attr-defined]
    return uri


def test_a_damaged_remote_index_is_not_told_to_rebuild(
    tmp_path: Path, bucket: str, moto: tuple[str, RequestLog], capsys: pytest.CaptureFixture[str]
) -> None:
    """--rebuild renames the index aside, which an object store cannot do: the advice is a new
    prefix."""
    endpoint, _ = moto
    uri = indexed_then_lost(tmp_path, endpoint, bucket, "/chunks.lance/data/")
    capsys.readouterr()
    assert main(["--index", uri, "search", "retry card payment", "--mode", "bm25"]) == 1
    message = one_line(capsys.readouterr().err)
    assert f"The index {uri} is damaged" in message
    assert message.endswith(
        "Index into a new prefix and point readers at it (then delete this one)."
    )
    assert "--rebuild" not in message


def test_status_check_names_a_folders_table_readers_do_not_open(
    tmp_path: Path, bucket: str, moto: tuple[str, RequestLog]
) -> None:
    """Readers take the folders from meta and never open that table, so its loss does not stop
    a search; ``status --check`` still finds it gone (and an index run refuses to go on)."""
    endpoint, _ = moto
    uri = indexed_then_lost(tmp_path, endpoint, bucket, "/folders.lance/")
    found = elsewhere(tmp_path, endpoint, "--index", uri, "search", "retry card payment")
    assert found.returncode == 0 and "payments/retry.py" in found.stdout
    checked = elsewhere(tmp_path, endpoint, "--index", uri, "status", "--check")
    assert checked.returncode == 1, checked.stdout
    assert "table folders: missing" in checked.stdout + checked.stderr


def test_a_reader_with_another_model_gets_a_clear_error(
    tmp_path: Path, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"s3://{bucket}/team"
    project = write_tree(tmp_path / "p", PROJECT)
    writer = Index(load_settings(os.environ, uri), embedder=HashEmbedder())
    writer.update([project])
    writer.close()
    assert main(["--index", uri, "search", "retry payment"]) == 1
    message = one_line(capsys.readouterr().err)
    assert f"The index {uri} was built with model hash" in message
    assert "Search it with the semsearch version" in message
    assert main(["--index", uri, "search", "retry payment", "--mode", "bm25"]) == 0


def test_cat_and_grep_say_the_folder_is_not_on_this_machine(
    tmp_path: Path, bucket: str, moto: tuple[str, RequestLog]
) -> None:
    endpoint, _ = moto
    uri = f"s3://{bucket}/team"
    project = write_tree(tmp_path / "ci" / "repo", PROJECT)
    assert main(["--index", uri, "index", str(project)]) == 0
    shutil.rmtree(project)
    cat = elsewhere(tmp_path, endpoint, "--index", uri, "cat", f"{project}/docs/otters.md")
    assert cat.returncode == 1
    assert "is in the folder repo" in one_line(cat.stderr)
    assert "that folder is not on this machine" in cat.stderr
    grep = elsewhere(tmp_path, endpoint, "--index", uri, "grep", "otter")
    assert grep.returncode == 1
    assert "the folders of the index s3://" in one_line(grep.stderr)
    assert "(repo) are not on this machine" in grep.stderr
    context = elsewhere(tmp_path, endpoint, "--index", uri, "search", "otter river", "-C", "2")
    assert context.returncode == 0, context.stderr
    assert "indexed text (folder not on this machine)" in context.stdout


def test_the_mcp_server_searches_a_remote_index_and_never_writes(
    tmp_path: Path, bucket: str, moto: tuple[str, RequestLog]
) -> None:
    _, log = moto
    uri = f"s3://{bucket}/team"
    project = tmp_path / "ci" / "repo"
    commit = checkout(project)
    assert main(["--index", uri, "index", str(project)]) == 0
    shutil.rmtree(project)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SS_", "XDG_"))}
    env.update(HOME=str(tmp_path / "agent"), SS_INDEX_PATH=uri)
    env.update(SS_MODEL_CACHE=os.environ["SS_MODEL_CACHE"], PYTHONPATH=os.pathsep.join(sys.path))
    cwd = tmp_path / "agent-cwd"
    cwd.mkdir()
    before = len(log.requests)
    mcp = Client(env, cwd, tmp_path / "mcp.log")
    try:
        found = json.loads(ok(mcp.call("search", {"query": "retry card payment"})))
        best = found["results"][0]
        assert (best["folder"], best["relPath"], best["startLine"]) == (
            "repo",
            "payments/retry.py",
            1,
        )
        assert "exponential backoff" in best["text"]
        listed = json.loads(ok(mcp.call("list_folders")))
        assert listed["indexPath"] == uri and listed["indexExists"]
        assert [(f["name"], f["commit"]) for f in listed["folders"]] == [("repo", commit)]
        refused = error(mcp.call("cat_file", {"filePath": f"{project}/docs/otters.md"}))
        assert "that folder is not on this machine" in refused
        assert "are not on this machine" in error(mcp.call("grep", {"pattern": "otter"}))
    finally:
        mcp.close()
    reads = log.since(before)
    assert reads and not [r for r in reads if r[0] in WRITES]
    assert list(cwd.iterdir()) == []


def writer(tmp_path: Path, endpoint: str, uri: str, folder: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(s3_env(endpoint), PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen(
        [sys.executable, "-m", "semsearch", "--index", uri, "index", str(folder)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / f"{folder.name}.err").open("w"),
        text=True,
    )


def test_two_writers_started_together_leave_a_consistent_index(
    tmp_path: Path, bucket: str, moto: tuple[str, RequestLog]
) -> None:
    """Both runs start while the lease is held (by this test, as a writer on another machine
    would), so that they meet for sure: when it is released they race for it, one wins, the
    other waits for that one; each says that it waited, and for whom."""
    endpoint, _ = moto
    uri = f"s3://{bucket}/team"
    folders = [
        write_tree(
            tmp_path / name, {f"n{i}.md": f"{name} note {i} about otters\n" for i in range(6)}
        )
        for name in ("alpha", "beta")
    ]
    location = load_settings(os.environ, uri).store_path
    with write_lock(location, wait_seconds=0):
        runs = [writer(tmp_path, endpoint, uri, folder) for folder in folders]
        errors = [tmp_path / f"{folder.name}.err" for folder in folders]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(
            "waiting for" in path.read_text() for path in errors
        ):
            time.sleep(0.2)
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [p.read_text() for p in errors]
    for path in errors:
        said = path.read_text()
        assert f"waiting for the `semsearch index` run (pid {os.getpid()} on " in said
        assert f"that is writing {uri}" in said
    assert all("6 indexed" in out for out in outputs), outputs
    store = open_store("lancedb", location)
    folders_seen = {f.name: (f.files, f.chunks) for f in store.folders()}
    assert folders_seen == {"alpha": (6, 6), "beta": (6, 6)}
    ids = store.chunk_ids().tolist()
    assert len(ids) == len(set(ids)) == 12
    rels = [(ref.folder_name, ref.rel) for ref in store.file_refs().values()]
    assert len(rels) == len(set(rels)) == 12
    assert not [key for key in keys(endpoint, bucket) if key.endswith(".lease")]
    index = Index(load_settings(os.environ, uri), embedder=HashEmbedder())
    hits = index.search("beta note 3 about otters", mode="bm25")
    assert hits[0].folder == "beta" and hits[0].rel == "n3.md"


def test_a_warm_search_looks_for_a_new_version_once(
    tmp_path: Path, bucket: str, moto: tuple[str, RequestLog]
) -> None:
    """Request counts: a cold CLI search (a new process), the same in a new process whose
    copies of the tables are on disk, a warm search with nothing changed (the version check
    alone). The copies hold index content only, never a credential."""
    endpoint, log = moto
    uri = f"s3://{bucket}/team"
    project = write_tree(tmp_path / "p", PROJECT)
    assert main(["--index", uri, "index", str(project)]) == 0
    before = len(log.requests)
    cold = elsewhere(tmp_path, endpoint, "--index", uri, "search", "retry card payment")
    assert cold.returncode == 0, cold.stderr
    cold_requests = len(log.since(before))
    before = len(log.requests)
    again = elsewhere(tmp_path, endpoint, "--index", uri, "search", "retry card payment")
    assert again.returncode == 0, again.stderr
    cached_requests = len(log.since(before))
    assert again.stdout == cold.stdout
    index = Index(load_settings(os.environ, uri))
    index.search("retry card payment")
    time.sleep(1.1)  # past the interval: the next search looks for a new version
    before = len(log.requests)
    index.search("otters holding paws")
    warm = log.since(before)
    within = index.search("otter river paws payment", glob="docs/*", mode="bm25")
    index.close()
    assert [hit.rel for hit in within] == ["docs/otters.md"]
    assert cold_requests <= 40
    assert cached_requests <= 30, cached_requests
    assert len(warm) <= 5, warm
    assert len(warm) == 1, warm  # the meta table's versions, listed
    remote = tmp_path / "reader-home" / ".cache" / "semsearch" / "remote"
    copies = [p for p in remote.rglob("*") if p.is_file()]
    # folders: never read, its rows come with meta
    assert sorted(p.name.split("@")[0] for p in copies) == ["chunks", "files", "paths"]
    for path in copies:
        held = path.read_bytes()
        assert SECRET.encode() not in held and KEY_ID.encode() not in held
        assert SECRET not in str(path) and KEY_ID not in str(path)


def test_a_reader_sees_what_another_process_published_after_its_copies(
    tmp_path: Path, bucket: str, moto: tuple[str, RequestLog]
) -> None:
    """A running reader, and a new process with copies of the old version on disk, both
    search the version another process published since."""
    endpoint, _ = moto
    uri = f"s3://{bucket}/team"
    project = write_tree(tmp_path / "p", PROJECT)
    assert main(["--index", uri, "index", str(project)]) == 0
    first = elsewhere(tmp_path, endpoint, "--index", uri, "search", "otter river", "--json")
    assert "holding paws" in json.loads(first.stdout)["results"][0]["text"]
    reader = Index(load_settings(os.environ, uri))
    assert "holding paws" in reader.search("otter river", k=1)[0].text
    (project / "docs/otters.md").write_text("# Otters\n\nThe otter naps on a kelp raft.\n")
    run = writer(tmp_path, endpoint, uri, project)
    assert run.wait(timeout=300) == 0, (tmp_path / "p.err").read_text()
    time.sleep(1.1)  # past the interval: the reader looks for a new version
    hits = reader.search("otter kelp raft")
    reader.close()
    assert "kelp raft" in hits[0].text
    assert not [hit for hit in hits if "holding paws" in hit.text]
    later = elsewhere(tmp_path, endpoint, "--index", uri, "search", "otter kelp raft", "--json")
    found = json.loads(later.stdout)["results"]
    assert "kelp raft" in found[0]["text"]
    assert not [hit for hit in found if "holding paws" in hit["text"]]
    remote = tmp_path / "reader-home" / ".cache" / "semsearch" / "remote"
    chunks = list(remote.rglob("chunks@*.arrow"))
    assert len(chunks) == 1  # the copy of the old version went when the new one was made


def test_a_cache_folder_that_cannot_be_written_only_costs_requests(
    tmp_path: Path, bucket: str, moto: tuple[str, RequestLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only home (here: the cache folder's parent is a file) searches as before,
    silently, every process reading the tables again."""
    _, log = moto
    uri = f"s3://{bucket}/team"
    project = write_tree(tmp_path / "p", PROJECT)
    assert main(["--index", uri, "index", str(project)]) == 0
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a folder\n")
    monkeypatch.setenv("SS_REMOTE_CACHE", str(blocked / "remote"))
    counts, found = [], []
    for _ in range(2):
        before = len(log.requests)
        index = Index(load_settings(os.environ, uri))
        found.append([(hit.rel, hit.start_line) for hit in index.search("retry card payment")])
        index.close()
        counts.append(len(log.since(before)))
    assert found[0] == found[1] and found[0][0] == ("payments/retry.py", 1)
    assert counts[1] >= counts[0] - 2  # nothing kept: the second reads the same again
    assert blocked.read_text() == "a file, not a folder\n"
    assert not (tmp_path / "home" / ".cache").exists()


def test_readers_take_the_folders_from_meta_and_see_one_added_and_one_purged(
    tmp_path: Path, bucket: str, moto: tuple[str, RequestLog]
) -> None:
    """The last run publishes the folders table's rows in meta: a reader never opens that
    table, and a running reader sees a folder another process added, then one it purged."""
    endpoint, log = moto
    uri = f"s3://{bucket}/team"
    project = write_tree(tmp_path / "p", PROJECT)
    extra = write_tree(tmp_path / "q", {"notes/beavers.md": "# Beavers\n\nThey build dams.\n"})
    assert main(["--index", uri, "index", str(project)]) == 0
    reads: list[str] = []  # what the readers asked for

    def reading(action: Callable[[], T]) -> T:
        before = len(log.requests)
        result = action()
        reads.extend(path for _, path in log.since(before))
        return result

    reader = reading(lambda: Index(load_settings(os.environ, uri)))
    assert reading(lambda: [f.name for f in reader.folders()]) == ["p"]
    assert reading(lambda: reader.search("otter river", k=1))[0].folder == "p"
    assert main(["--index", uri, "index", str(extra)]) == 0
    time.sleep(1.1)  # past the interval: the reader looks for a new version
    assert reading(lambda: sorted(f.name for f in reader.folders())) == ["p", "q"]
    assert reading(lambda: reader.search("beavers build dams", k=1))[0].folder == "q"
    writing = Index(load_settings(os.environ, uri))
    assert writing.purge(project) == 3
    writing.close()
    time.sleep(1.1)
    assert reading(lambda: [f.name for f in reader.folders()]) == ["q"]
    assert reading(lambda: {hit.folder for hit in reader.search("otter river paws")}) == {"q"}
    reader.close()
    cold = reading(lambda: elsewhere(tmp_path, endpoint, "--index", uri, "search", "dams"))
    assert cold.returncode == 0, cold.stderr
    assert "notes/beavers.md" in cold.stdout
    assert any("files.lance" in path for path in reads)  # the log holds the readers' requests
    assert not [path for path in reads if "folders.lance" in path]
    status = elsewhere(tmp_path, endpoint, "--index", uri, "status", "--json")
    assert [f["name"] for f in json.loads(status.stdout)["folders"]] == ["q"]


def test_folders_an_older_semsearch_wrote_since_are_read_from_their_table(
    tmp_path: Path, bucket: str
) -> None:
    """A run by a semsearch that does not publish the folders (it stamps ``written`` and adds
    a folder row, as session 22's did) leaves meta's copy stale: readers see that by its stamp
    and read the table itself."""
    uri = f"s3://{bucket}/team"
    project = write_tree(tmp_path / "p", PROJECT)
    assert main(["--index", uri, "index", str(project)]) == 0
    location = load_settings(os.environ, uri).index_path
    assert isinstance(location, RemoteLocation)
    db = lancedb.connect(location.uri, storage_options=location.storage_options)
    row = {"id": 7, "path": str(tmp_path / "elder"), "name": "elder", "last_indexed": 1.0}
    db.open_table("folders").add([row])
    stamp = [{"key": "written", "value": "1.000"}]
    meta = db.open_table("meta")
    meta.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute(stamp)
    reader = Index(load_settings(os.environ, uri))
    names = sorted(f.name for f in reader.folders())
    reader.close()
    assert names == ["elder", "p"]


def test_a_tree_of_copies_on_object_storage_is_searched_through_its_texts(
    tmp_path: Path, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the ANN threshold, a reader on object storage asks the texts table for both arms,
    and a later run's change reaches it there."""
    from semsearch.store.lance import store as lance

    monkeypatch.setattr(lance, "ANN_MIN_ROWS", 60)
    uri = f"s3://{bucket}/team"
    handler = (
        "def handler_{0}(event):\n    '''dispatch webhook event number {0}'''\n    return {0}\n"
    )
    tree = {f"rev{r}/m{n}.py": handler.format(n) for r in range(3) for n in range(30)}
    project = write_tree(tmp_path / "p", tree)
    assert main(["--index", uri, "index", str(project)]) == 0
    reader = Index(load_settings(os.environ, uri))
    monkeypatch.setattr(lance, "ann_nearest", lambda *a, **k: pytest.fail("the chunks' index"))
    # the chunks' full-text indexes, which a reader on object storage reads whole first
    monkeypatch.setattr(
        lance.LanceStore, "_warm_full_text", lambda *a: pytest.fail("the chunks' FTS")
    )
    for mode in ("hybrid", "bm25"):
        (hit,) = reader.search("dispatch webhook event number 7", k=1, mode=mode)  # type: ignore[arg-type]
        assert hit.rel.endswith("/m7.py") and hit.copy_count == 2, mode
    (project / "rev1/m7.py").write_text(handler.format(7).replace("7'", "7, again'"))
    assert main(["--index", uri, "index", str(project)]) == 0
    time.sleep(1.1)  # past the interval: the reader looks for a new version
    hits = reader.search("dispatch webhook event number 7", k=2, mode="bm25")
    reader.close()
    places = {hit.rel: sorted(copy.rel for copy in hit.copies) for hit in hits}
    assert places in (
        {"rev0/m7.py": ["rev2/m7.py"], "rev1/m7.py": []},
        {"rev2/m7.py": ["rev0/m7.py"], "rev1/m7.py": []},
    ), places
