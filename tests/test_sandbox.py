"""The container recipe (``Dockerfile``) in its conditions, without a container engine.

Every command runs as ``docker run --read-only --network none -v VOLUME:/index`` runs it (see
:mod:`tests.sandbox`): in new user, mount and network namespaces, with every file system read-only
but the index volume, and no network interface up. The image's environment points the config
file, the index and the token file at the volume and keeps no model cache. Under these
conditions ``add``, ``index``, ``search`` and the six MCP tools (a real client over stdio) must
all work, and:

- nothing is written outside the volume: the read-only mounts make a write fail, and the test
  compares every file's size and mtime under the test's folders (home, the searched folder,
  the model cache) before and after;
- no connection is attempted. The network namespace makes any attempt fail, but a failure can be
  caught and ignored (a library that tries a download and carries on), so every Python process
  of the run (the CLI, the MCP server, grep's child) loads a ``sitecustomize`` that installs an
  audit hook (PEP 578): it reports each socket that is not AF_UNIX being made, each connect,
  bind or send to a non-local address and each name lookup, before the call happens, on
  stderr. No report may appear. Native code that makes its own sockets is not seen by the hook;
  the network namespace still stops it, and a run that needed it would fail.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_tree
from tests.sandbox import SANDBOX
from tests.test_mcp_server import Client, ok

AUDIT = "SANDBOX-AUDIT"
ARMED = "SANDBOX-HOOK-ARMED"  # each process says so once, so that a silent run proves something
AUDIT_HOOK = f"""
import os
import sys

AF_UNIX = 1
WATCHED = {{"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"}}
LOOKUPS = {{"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr",
           "socket.getnameinfo"}}


def report(event, args):
    os.write(2, f"{AUDIT} {{event}} {{args!r}}\\n".encode("utf-8", "replace"))


def hook(event, args):
    if event == "socket.__new__" and args[1] not in (AF_UNIX, -1):
        report(event, args[1:])
    elif event in WATCHED and not isinstance(args[1], (str, bytes)):  # not a Unix socket path
        report(event, args[1:])
    elif event in LOOKUPS:
        report(event, args)


sys.addaudithook(hook)
os.write(2, b"{ARMED}\\n")
"""
CORPUS: dict[str, str | bytes] = {
    "docs/retry.md": "When a payment keeps failing we retry it with exponential backoff.\n",
    "src/app.py": "def charge(order):\n    raise PaymentError('ERR_ZORBLATT_7741')\n",
    "notes/lighthouse.md": "The lighthouse keeper logs every passing ship in a ledger.\n",
}


def image_env() -> dict[str, str]:
    """The ``ENV`` settings of the Dockerfile."""
    text = (Path(__file__).parents[1] / "Dockerfile").read_text(encoding="utf-8")
    found: dict[str, str] = {}
    for block in re.findall(r"^ENV (.+)$", text.replace("\\\n", " "), re.M):
        found.update(pair.split("=", 1) for pair in block.split())
    return found


def test_the_image_keeps_every_write_on_the_volume() -> None:
    env = image_env()
    assert env["SS_INDEX_DIR"] == env["TMPDIR"] == "/index"
    assert env["SS_CONFIG_PATH"].startswith("/index/")
    assert env["XDG_STATE_HOME"].startswith("/index/")
    assert env["SS_MODEL_CACHE"] == "off"


@functools.cache
def _sandbox_problem() -> str | None:
    """Why :data:`SANDBOX` cannot run here, or None."""
    probe = [*SANDBOX, sys.executable, "-m", "tests.sandbox", "--", "true"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(probe, capture_output=True, text=True, env=env, check=False)
    return None if result.returncode == 0 else result.stderr.strip()


def snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder below ``roots``: (size, mtime in ns)."""
    found = {}
    for root in roots:
        for folder, dirs, files in os.walk(root):
            for name in [*dirs, *files]:
                info = os.lstat(os.path.join(folder, name))
                found[os.path.join(folder, name)] = (info.st_size, info.st_mtime_ns)
    return found


@pytest.fixture
def box(tmp_path: Path, model_cache: Path) -> Iterator[dict[str, Any]]:
    problem = _sandbox_problem()
    if problem is not None:
        pytest.fail(f"the sandbox tests need {' '.join(SANDBOX)}: {problem}")
    folder = write_tree(tmp_path / "data" / "shop", CORPUS)
    volume = tmp_path / "index"
    volume.mkdir()
    home = tmp_path / "home"  # made by conftest's isolated_env
    hook = tmp_path / "audit"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(AUDIT_HOOK, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SS_", "XDG_"))}
    for name, value in image_env().items():  # with the volume at `volume`, HOME at `home`
        env[name] = value.replace("/index", str(volume)).replace("/home/semsearch", str(home))
    env["PYTHONPATH"] = os.pathsep.join([str(hook), *sys.path])
    before = snapshot(tmp_path / "data", home, model_cache, hook)
    yield {"env": env, "folder": folder, "volume": volume, "base": tmp_path}
    assert snapshot(tmp_path / "data", home, model_cache, hook) == before


def boxed(volume: Path) -> list[str]:
    """The command prefix that runs a program in the sandbox, ``volume`` writable."""
    return [*SANDBOX, sys.executable, "-m", "tests.sandbox", "--writable", str(volume), "--"]


def run_boxed(box: dict[str, Any], *args: str) -> tuple[int, str, str]:
    result = subprocess.run(
        [*boxed(box["volume"]), sys.executable, "-m", "semsearch", *args],
        env=box["env"],
        cwd=box["base"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert ARMED in result.stderr
    assert AUDIT not in result.stderr, result.stderr
    return result.returncode, result.stdout, result.stderr.replace(f"{ARMED}\n", "")


def test_the_sandbox_is_read_only_and_offline(box: dict[str, Any]) -> None:
    probe = (
        "import socket, pathlib, sys\n"
        "pathlib.Path(sys.argv[1], 'ok').write_text('x')\n"
        "for path in sys.argv[2:]:\n"
        "    try:\n"
        "        pathlib.Path(path, 'no').write_text('x')\n"
        "    except OSError as exc:\n"
        "        print(exc.errno, end=' ')\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', 9), timeout=5)\n"
        "except OSError as exc:\n"
        "    print(exc.errno)\n"
    )
    targets = [str(box["folder"]), str(box["base"] / "home"), "/tmp"]
    result = subprocess.run(
        [*boxed(box["volume"]), sys.executable, "-c", probe, str(box["volume"]), *targets],
        env=box["env"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["30", "30", "30", "101"]  # EROFS ×3, ENETUNREACH
    assert f"{AUDIT} socket.connect" in result.stderr  # the hook sees an attempt
    (box["volume"] / "ok").unlink()


def test_index_search_and_the_six_tools_in_the_sandbox(box: dict[str, Any]) -> None:
    folder, volume = box["folder"], box["volume"]
    assert run_boxed(box, "add", str(folder))[0] == 0
    code, out, err = run_boxed(box, "index")
    assert code == 0, err
    assert "3 files (3 indexed" in out
    code, out, err = run_boxed(box, "search", "failed payment retries", "-k", "1")
    assert code == 0, err
    assert "docs/retry.md:1" in out
    code, out, err = run_boxed(box, "status")
    assert code == 0, err
    log = box["base"] / "server.log"
    client = Client(box["env"], box["base"], log, python=[*boxed(volume), sys.executable])
    try:
        hits = json.loads(ok(client.call("search", {"query": "lighthouse keeper ledger"})))
        assert hits["results"][0]["relPath"] == "notes/lighthouse.md"
        assert "lighthouse.md" in ok(client.call("gather", {"query": "ships", "k": 1}))
        assert str(folder) in ok(client.call("list_folders"))
        app = str(folder / "src" / "app.py")
        assert "ERR_ZORBLATT_7741" in ok(client.call("cat_file", {"filePath": app}))
        assert "src/app.py:2" in ok(client.call("grep", {"pattern": "ERR_ZORBLATT"}))
        report = json.loads(ok(client.call("index", {"force": True})))
        assert report["filesIndexed"] == 3
    finally:
        client.close()
    server_log = log.read_text(encoding="utf-8")
    assert server_log.count(ARMED) >= 2  # the server, and grep's child process
    assert AUDIT not in server_log, server_log
    written = {path.name for path in volume.iterdir()}
    assert written <= {"config.json", "index.db", "index.db.lock", "index.db-wal", "index.db-shm"}
