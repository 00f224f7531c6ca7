"""`semsearch serve`: a real server process on a free port, reached by the MCP SDK's Streamable
HTTP client and by the CLI (which must print what it prints in-process).

One server runs for the module, on an index built with the real model; the tests that stop or
kill servers start their own, on other index files.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from semsearch.cli import remote
from semsearch.cli.commands import main
from semsearch.config import load_settings
from semsearch.errors import ServerRunningError
from semsearch.mcp import schema
from semsearch.service import ServerSlot, read_record, record_path, running_server
from tests.conftest import write_tree

CORPUS: dict[str, str | bytes] = {
    "docs/retry.md": (
        "# Retries\n\nWhen a payment request keeps failing we retry it with exponential "
        "backoff: 200 ms, 400 ms, then 800 ms.\n"
    ),
    "src/app.py": (
        "def charge(order):\n    '''Charge the order's card.'''\n"
        "    raise PaymentError('ERR_ZORBLATT_7741')\n"
    ),
    "notes/lighthouse.md": (
        "The lighthouse keeper logs every passing ship in a leather ledger, noting its flag, "
        "its cargo and the hour it rounded the cape, even on foggy nights.\n"
    ),
    # a copy: the served hit lists it under the one it collapses into, as in-process
    "old/lighthouse.md": (
        "The lighthouse keeper logs every passing ship in a leather ledger, noting its flag, "
        "its cargo and the hour it rounded the cape, even on foggy nights.\n"
    ),
    "notes/ledger.md": "\n\n".join(
        f"Paragraph {n} is about topic {n}: " + " ".join(f"word{n}x{i}" for i in range(40))
        for n in range(8)
    )
    + "\n",
}
SIX_TOOLS = {"search", "gather", "list_folders", "cat_file", "grep", "index"}


@dataclass
class Served:
    """The module's server: its process, where it listens, its token; and the CLI's env."""

    process: subprocess.Popen[str]
    url: str
    port: int
    token: str
    env: dict[str, str]
    folder: Path
    base: Path


def base_env(home: Path, model_cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SS_", "XDG_"))}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        SS_MODEL_CACHE=str(model_cache),
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        PYTHONPATH=os.pathsep.join(sys.path),
    )
    return env


def semsearch(env: dict[str, str], *args: str, timeout: float = 300) -> tuple[int, str, str]:
    result = subprocess.run(
        [sys.executable, "-m", "semsearch", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return result.returncode, result.stdout, result.stderr


def start_server(env: dict[str, str], *args: str) -> tuple[subprocess.Popen[str], str]:
    """``semsearch serve --port 0 ARGS``, once it says where it listens (its stderr line)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "semsearch", "serve", "--port", "0", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    lines = []
    for line in process.stderr:
        lines.append(line)
        if " at http://" in line:
            return process, line
    process.wait(timeout=30)
    pytest.fail(f"the server did not start: {''.join(lines)}")


def stop(process: subprocess.Popen[str]) -> str:
    """SIGTERM, then what the server wrote to stderr after its ready line."""
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    return err


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("serve")
    folder = write_tree(base / "shop", CORPUS)
    home = base / "home"
    home.mkdir()
    env = base_env(home, model_cache)
    assert semsearch(env, "add", str(folder))[0] == 0
    assert semsearch(env, "index")[0] == 0
    process, _ = start_server(env)
    settings = load_settings(env)
    record = read_record(settings)
    assert record is not None
    token = settings.serve_token_file.read_text(encoding="ascii").strip()
    yield Served(process, record.url, record.port, token, env, folder, base)
    err = stop(process)
    assert process.returncode == 0, err
    assert not record_path(settings).exists()  # removed on the way out


async def with_session(
    url: str, token: str, use: Callable[[ClientSession], Any], **headers: str
) -> Any:
    """Open an MCP session over Streamable HTTP with the SDK's client and ``use`` it."""
    sent = {"Authorization": f"Bearer {token}", **headers}
    async with (
        httpx2.AsyncClient(headers=sent, timeout=httpx2.Timeout(60, read=300)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return await use(session)


def text_of(result: Any) -> str:
    (block,) = result.content
    assert isinstance(block, TextContent)
    assert not result.is_error, block.text
    return block.text


def test_the_six_tools_answer_over_streamable_http(served: Served) -> None:
    app = served.folder / "src" / "app.py"
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async def use(session: ClientSession) -> dict[str, Any]:
        tools = await session.list_tools()
        calls = {
            "search": await session.call_tool("search", {"query": "payment retry backoff"}),
            "gather": await session.call_tool("gather", {"query": "lighthouse keeper", "k": 1}),
            "list_folders": await session.call_tool("list_folders", {}),
            "cat_file": await session.call_tool("cat_file", {"filePath": str(app), "endLine": 1}),
            "grep": await session.call_tool("grep", {"pattern": "ERR_ZORBLATT"}),
            "index": await session.call_tool(
                "index", {"root": str(served.folder)}, progress_callback=on_progress
            ),
        }
        status = await session.read_resource("semsearch://status")
        return {"tools": {tool.name for tool in tools.tools}, "calls": calls, "status": status}

    found = anyio.run(with_session, served.url, served.token, use)
    assert found["tools"] == SIX_TOOLS
    calls = found["calls"]
    for result in calls.values():
        text_of(result)
    hits = calls["search"].structured_content["results"]
    assert hits[0]["relPath"] == "docs/retry.md"
    assert calls["gather"].structured_content["results"][0]["relPath"] == "notes/lighthouse.md"
    (row,) = calls["list_folders"].structured_content["folders"]
    assert (row["path"], row["files"]) == (str(served.folder), len(CORPUS))
    assert calls["cat_file"].structured_content["text"] == "def charge(order):"
    (match,) = calls["grep"].structured_content["matches"]
    assert (match["relPath"], match["line"]) == ("src/app.py", 3)
    assert calls["index"].structured_content["filesUnchanged"] == len(CORPUS)
    (contents,) = found["status"].contents
    assert json.loads(contents.text)["folders"][0]["files"] == len(CORPUS)


def post(served: Served, headers: dict[str, str], host: str = "127.0.0.1") -> tuple[int, str]:
    """An ``initialize`` POST with these headers (Host: ``host`` and the port)."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
    sent = {
        "Host": f"{host}:{served.port}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        **headers,
    }
    try:
        connection.request("POST", "/mcp", json.dumps(body), sent)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_a_request_needs_the_bearer_token(served: Served) -> None:
    assert post(served, {"Authorization": f"Bearer {served.token}"})[0] == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": served.token}):
        status, text = post(served, headers)
        assert status == 401
        assert "bearer token" in text


@pytest.mark.parametrize(
    ("headers", "host", "status"),
    [
        ({"Origin": "http://evil.example"}, "127.0.0.1", 403),
        ({"Origin": "http://127.0.0.1.evil.example:80"}, "127.0.0.1", 403),
        ({"Origin": "http://localhost:3000"}, "localhost", 200),
        ({}, "evil.example", 421),  # DNS rebinding: a foreign name pointed at 127.0.0.1
    ],
)
def test_host_and_origin_are_checked(
    served: Served, headers: dict[str, str], host: str, status: int
) -> None:
    sent = {"Authorization": f"Bearer {served.token}", **headers}
    assert post(served, sent, host)[0] == status


def test_a_foreign_origin_is_refused_before_the_token_is_looked_at(served: Served) -> None:
    assert post(served, {"Origin": "http://evil.example"})[0] == 403


# The CLI through the server and in-process. A served run happens in a child process that
# reports whether it loaded the library's index (and so the model): it must not have, unless the
# row says the command runs in-process anyway.
SERVED_RUN = (
    "import sys\n"
    "from semsearch.cli.commands import main\n"
    "code = main(sys.argv[1:])\n"
    "sys.stdout.flush()\n"
    "print(f'\\n@@ {code} {\"semsearch.index\" in sys.modules}', file=sys.stderr)\n"
)


def run_served(served: Served, argv: list[str], cwd: Path) -> tuple[int, str, str, bool]:
    result = subprocess.run(
        [sys.executable, "-c", SERVED_RUN, *argv],
        env=served.env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    err, _, tail = result.stderr.rpartition("\n@@ ")
    code, loaded = tail.split()
    return int(code), result.stdout, err, loaded == "True"


def run_here(
    served: Served,
    argv: list[str],
    cwd: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, str, str]:
    """``main(argv)`` in this process, with the server's settings but where no server is: the
    record is looked for in another runtime folder."""
    for name, value in served.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(served.base / "no-server-here"))
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# (argv, answered by the server)
CLI_ROWS: list[tuple[list[str], bool]] = [
    (["search", "how are failed payments retried"], True),
    (["search", "ship ledger", "-k", "3", "--folder", "shop"], True),
    (["search", "ship ledger", "--folder", "."], True),  # a path: the server has another cwd
    (["search", "topic", "--glob", "notes/**", "--exclude", "*ledger*"], True),
    (["search", "word3x7 payment", "--mode", "bm25"], True),
    (["search", "payment", "--mode", "vector", "--min-score", "0.2"], True),
    (["search", "retry", "--files-only"], True),
    (["search", "retry", "--files-only", "--json"], True),
    (["search", "retry", "--vimgrep"], True),
    (["search", "lighthouse", "-C", "1", "-k", "2"], True),
    (["search", "lighthouse keeper ledger", "-k", "2"], True),
    (["search", "lighthouse keeper ledger", "-k", "2", "--all-copies"], True),
    (["search", "card charge", "--full"], True),
    (["search", "qqqzzz", "--mode", "bm25"], True),  # no results: stderr only
    (["search", "retry", "-k", "51"], False),  # more than the tool's 50
    (["search", "retry", "--explain"], False),  # the ranking's internals: in-process
    (["search", "retry", "--json"], False),  # each hit's ranks: in-process
    (["search", "retry", "--folder", "nosuch"], False),  # the tool's error: reported here
    (["cat", "src/app.py"], True),
    (["cat", "-n", "notes/ledger.md:3-5"], True),
    (["cat", "/etc/hostname"], False),  # outside the folders: the error comes from here
    (["status"], True),
    (["status", "--json"], True),
    (["grep", "ERR_ZORBLATT"], False),  # see the README: grep runs here
]


@pytest.mark.parametrize(("argv", "is_served"), CLI_ROWS, ids=[" ".join(r[0]) for r in CLI_ROWS])
def test_the_cli_prints_the_same_through_the_server(
    served: Served,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    is_served: bool,
) -> None:
    code, out, err, loaded = run_served(served, argv, served.folder)
    assert loaded is not is_served, err
    assert (code, out, err) == run_here(served, argv, served.folder, capsys, monkeypatch)
    assert out or err
    if argv[:2] == ["search", "lighthouse keeper ledger"]:  # the copy: listed, or its own hit
        lines = out.splitlines()
        if "--all-copies" in argv:
            assert "also in" not in out and "old/lighthouse.md" in out
        else:
            shown, copy = lines[0].split()[2], lines[1].split()
            assert copy[:2] == ["also", "in:"] and len(copy) == 3, out
            assert {shown, copy[2]} == {"old/lighthouse.md:1", "notes/lighthouse.md:1"}, out


def test_a_file_saved_after_the_server_started_is_found(served: Served) -> None:
    saved = served.folder / "notes" / "saved-later.md"
    saved.write_text("The quartermaster counts barrels of salted herring in the hold.\n")
    # The server's watcher reports a change 50 to 100 ms after it is made (docs/mcp.md, "Never
    # stale"), later on a loaded machine: a search sent within that window may miss the file.
    # The suite on a busy 2-core host missed it with the child's start as the only delay.
    time.sleep(1)
    try:
        code, out, err, loaded = run_served(
            served, ["search", "herring barrels", "-k", "1", "--files-only"], served.base
        )
        assert (code, loaded) == (0, False), err
        assert out == f"{saved}\n"
    finally:
        saved.unlink()


def test_a_second_server_for_the_index_is_refused(served: Served) -> None:
    code, _, err = semsearch(served.env, "serve", "--port", "0")
    assert code == 2
    assert f"is running already: {served.url} (pid {served.process.pid}" in err
    assert served.process.poll() is None


def other_index(served: Served, name: str) -> dict[str, str]:
    """The module's settings with another index file (another server slot)."""
    return {**served.env, "SS_INDEX_PATH": str(served.base / name / "index.db")}


def test_a_killed_servers_record_is_ignored_and_replaced(served: Served) -> None:
    env = other_index(served, "killed")
    process, _ = start_server(env)
    process.kill()
    process.wait(timeout=30)
    settings = load_settings(env)
    stale = read_record(settings)
    assert stale is not None and stale.pid == process.pid  # left behind by SIGKILL
    assert running_server(settings) is None  # its lock is free: never connected to
    code, out, _ = semsearch(env, "status")
    assert code == 0
    assert "not created yet" in out
    again, _ = start_server(env)
    try:
        fresh = read_record(settings)
        assert fresh is not None and fresh.pid == again.pid
        assert running_server(settings) == fresh
    finally:
        stop(again)


def test_an_idle_server_stops(served: Served) -> None:
    env = other_index(served, "idle")
    process, line = start_server(env, "--idle-exit", "0.02", "--host", "0.0.0.0")
    assert process.wait(timeout=60) == 0
    assert process.stderr is not None
    err = line + process.stderr.read()
    assert "no request for 1 s: stopping (--idle-exit)" in err
    assert not record_path(load_settings(env)).exists()


def test_a_host_other_than_loopback_is_warned_about(served: Served) -> None:
    env = other_index(served, "wide")
    process = subprocess.run(
        [sys.executable, "-m", "semsearch", "serve", "--host", "0.0.0.0", "--idle-exit", "0.01"],
        env={**env, "SS_SERVE_TOKEN": "t"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "warning: listening on 0.0.0.0, not only on this machine" in process.stderr


def test_config_shows_the_token_file_and_the_server(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = load_settings(served.env).serve_token_file
    assert token_file.stat().st_mode & 0o777 == 0o600
    code, out, _ = run_here(served, ["config"], served.base, capsys, monkeypatch)
    assert code == 0
    assert f"serve token   {token_file}\n" in out
    assert "server " not in out  # none where this run looks
    out = run_served(served, ["config"], served.base)[1]
    assert f"server        {served.url} (pid {served.process.pid}, started " in out


def test_a_token_file_others_can_read_is_refused(
    capsys: pytest.CaptureFixture[str], isolated_env: Path
) -> None:
    token_file = load_settings(os.environ).serve_token_file
    token_file.parent.mkdir(parents=True)
    token_file.write_text("secret\n")
    token_file.chmod(0o644)
    assert main(["serve", "--port", "0"]) == 1
    assert f"chmod 600 {token_file}" in capsys.readouterr().err


def test_config_names_the_token_before_it_is_made(
    capsys: pytest.CaptureFixture[str], isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["config"]) == 0
    token_file = isolated_env / ".local" / "state" / "semsearch" / "serve-token"
    assert f"serve token   {token_file}  (made by `semsearch serve`)\n" in capsys.readouterr().out
    monkeypatch.setenv("SS_SERVE_TOKEN", "from-the-environment")
    assert main(["config"]) == 0
    assert "serve token   from SS_SERVE_TOKEN\n" in capsys.readouterr().out


def test_the_settings_repr_leaves_the_token_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SS_SERVE_TOKEN", "secret-from-the-environment")
    settings = load_settings(os.environ)
    assert settings.serve_token == "secret-from-the-environment"
    shown = repr(settings)
    assert "secret-from-the-environment" not in shown
    assert (
        shown.startswith("Settings(config_path=") and f"index_path={settings.index_path!r}" in shown
    )


def test_one_slot_per_index(isolated_env: Path) -> None:
    settings = load_settings(os.environ)
    first = ServerSlot.take(settings)
    try:
        with pytest.raises(ServerRunningError, match="is running already"):
            ServerSlot.take(settings, clock=itertools.count().__next__, sleep=lambda _: None)
    finally:
        first.release()
    ServerSlot.take(settings).release()


def test_the_clis_copy_of_the_tool_caps_agrees() -> None:
    assert (remote.TOOL_MAX_K, remote.TOOL_MAX_CONTEXT_LINES) == (
        schema.MAX_K,
        schema.MAX_CONTEXT_LINES,
    )


def test_the_server_stops_on_sigterm_and_removes_its_record(served: Served) -> None:
    env = other_index(served, "stopped")
    process, _ = start_server(env)
    settings = load_settings(env)
    assert read_record(settings) is not None
    stop(process)
    assert process.returncode == 0
    assert not record_path(settings).exists()


def test_one_client_answers_calls_from_many_threads(served: Served) -> None:
    client = remote.connect(load_settings(served.env))
    assert client is not None
    answers: list[dict[str, Any] | None] = []

    def ask() -> None:
        for _ in range(4):
            answers.append(client.call("search", {"query": "payment retry", "k": 1}))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 32
    assert all(a is not None and a["results"][0]["relPath"] == "docs/retry.md" for a in answers)
