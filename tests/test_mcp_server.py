"""The MCP server end to end: a real MCP client over stdio against `python -m semsearch mcp`.

One server runs for the whole module (with the real ONNX model); the corpus is a git work tree
holding files that must never come back from any tool.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from anyio.from_thread import start_blocking_portal
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent

from semsearch.cli.commands import main
from semsearch.store import write_lock
from tests.conftest import as_user, write_tree

SECRETS = ("FAKE-RSA-KEY-0xDEADBEEF", "DOTENV-TOKEN-12345", "PRIVATE-NOTE-777", "SIBLING-KEY-42")
PARAGRAPHS = [
    f"Paragraph {n} talks about topic number {n}: " + " ".join(f"word{n}x{i}" for i in range(40))
    for n in range(12)
]
PARAGRAPHS[6] = (
    "The lighthouse keeper logs every passing ship in a leather ledger, noting its flag, "
    "its cargo and the hour it rounded the cape, even on foggy nights."
)
CORPUS: dict[str, str | bytes] = {
    "docs/retry.md": (
        "# Retries\n\nWhen a payment request keeps failing we retry it with exponential "
        "backoff: 200 ms, 400 ms, then 800 ms.\n"
    ),
    "src/app.py": "def charge(order):\n    raise PaymentError('ERR_ZORBLATT_7741')\n",
    "notes/ledger.md": "\n\n".join(PARAGRAPHS) + "\n",
    "notes/changing.md": "The weather station records wind speed every ten minutes.\n",
    "data/long.txt": "a" * 5000 + "!\n",
    "data/lines.txt": "".join(f"line {n:06d} " + "z" * 50 + "\n" for n in range(20)),
    "data/blob.txt": b"binary\x00" + SECRETS[0].encode(),
    ".gitignore": ".env\n",
    ".env": f"API_TOKEN={SECRETS[1]}\n",
    ".indexignore": "private/\n",
    "private/notes.md": f"{SECRETS[2]}\n",
}


class Client:
    """A synchronous facade over an MCP ClientSession running in a background event loop."""

    def __init__(
        self, env: dict[str, str], cwd: Path, log: Path, python: Sequence[str] = (sys.executable,)
    ) -> None:
        self._stack = ExitStack()
        self._errlog = self._stack.enter_context(log.open("w"))
        self._portal = self._stack.enter_context(start_blocking_portal())
        params = StdioServerParameters(
            command=python[0], args=[*python[1:], "-m", "semsearch", "mcp"], env=env, cwd=cwd
        )
        streams = stdio_client(params, errlog=self._errlog)
        read, write = self._stack.enter_context(self._portal.wrap_async_context_manager(streams))
        session = ClientSession(read, write)
        self.session = self._stack.enter_context(self._portal.wrap_async_context_manager(session))
        self._portal.call(self.session.initialize)
        self.seen: list[str] = []

    def call(self, name: str, args: dict[str, Any] | None = None, **kw: Any) -> CallToolResult:
        """Call a tool; every response is remembered for the final leak check."""
        call = functools.partial(self.session.call_tool, name, args or {}, **kw)
        result: CallToolResult = self._portal.call(call)
        self.seen.append(json.dumps(result.model_dump(mode="json", by_alias=True)))
        return result

    def list_tools(self) -> list[Any]:
        return list(self._portal.call(self.session.list_tools).tools)

    def close(self) -> None:
        self._stack.close()


def text(result: CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


def ok(result: CallToolResult) -> str:
    assert not result.is_error, text(result)
    return text(result)


def error(result: CallToolResult) -> str:
    assert result.is_error, text(result)
    return text(result)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Corpus (git repo), outside folders with fake keys, and an isolated HOME."""
    base = tmp_path_factory.mktemp("mcp")
    shop = write_tree(base / "shop", CORPUS)
    outside = write_tree(base / "outside", {"id_rsa": f"-----BEGIN {SECRETS[0]}-----\n"})
    sibling = write_tree(base / "shop-private", {"key.txt": f"{SECRETS[3]}\n"})
    (shop / "leak.txt").symlink_to(outside / "id_rsa")
    (shop / "docs" / "alias.md").symlink_to(shop / "docs" / "retry.md")
    identity = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "fixture"]):
        subprocess.run(["git", *identity, "-C", str(shop), *args], check=True, capture_output=True)
    home = base / "home"
    home.mkdir()
    return {"base": base, "shop": shop, "outside": outside, "sibling": sibling, "home": home}


def server_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SS_", "XDG_"))}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
    )
    return env


@pytest.fixture
def cli(world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run the CLI in-process against the server's config and index."""
    for name, value in server_env(world["home"]).items():
        monkeypatch.setenv(name, value)

    def run(*argv: str) -> int:
        return main(list(argv))

    return run


@pytest.fixture(scope="module")
def client(world: dict[str, Path]) -> Iterator[Client]:
    """The server, started once for the module, with the corpus folder configured.

    It does not update the index before answering (SS_MCP_AUTO_INDEX=0): these tests change
    files and look at answers from the index as the ``index`` tool left it.
    """
    env = {**server_env(world["home"]), "SS_MCP_AUTO_INDEX": "0"}
    subprocess.run(
        [sys.executable, "-m", "semsearch", "add", str(world["shop"])],
        env=env,
        check=True,
        capture_output=True,
    )
    session = Client(env, world["base"], world["base"] / "server.log")
    yield session
    session.close()


@pytest.fixture(scope="module")
def indexed(client: Client) -> dict[str, Any]:
    """Before and after indexing through the `index` tool, with the progress it reported."""
    before = client.call("search", {"query": "retry"})
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    result = client.call("index", {}, progress_callback=on_progress)
    return {"before": before, "result": result, "progress": progress}


def search(client: Client, query: str, **args: Any) -> list[dict[str, Any]]:
    result = client.call("search", {"query": query, **args})
    payload = json.loads(ok(result))
    assert payload == result.structured_content
    hits: list[dict[str, Any]] = payload["results"]
    return hits


def walk(node: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk(item)


def test_six_tools_with_plain_schemas_and_annotations(client: Client) -> None:
    tools = {tool.name: tool for tool in client.list_tools()}
    assert set(tools) == {"search", "gather", "list_folders", "cat_file", "grep", "index"}
    for tool in tools.values():
        for schema in (tool.input_schema, tool.output_schema or {}):
            keys = {key for key, _ in walk(schema)}
            assert not keys & {"anyOf", "oneOf", "allOf", "$ref", "$defs", "nullable"}
            assert all(isinstance(v, str) for k, v in walk(schema) if k == "type")
        for name, prop in tool.input_schema["properties"].items():
            assert prop.get("description"), (tool.name, name)
            assert prop.get("default", "unset") is not None
        assert tool.title and tool.annotations and tool.annotations.title == tool.title
        assert tool.annotations.read_only_hint is (tool.name != "index")
    params = {name: list(tool.input_schema["properties"]) for name, tool in tools.items()}
    assert params == {
        "search": ["query", "k", "folder", "pathGlob", "exclude", "mode", "minScore", "allCopies"],
        "gather": [
            "query",
            "k",
            "contextLines",
            "folder",
            "pathGlob",
            "exclude",
            "mode",
            "minScore",
            "allCopies",
        ],
        "list_folders": [],
        "cat_file": ["filePath", "startLine", "endLine"],
        "grep": ["pattern", "folder", "fileGlob", "caseSensitive", "maxResults", "regex"],
        "index": ["root", "force", "maxFiles"],
    }
    assert {n: t.input_schema.get("required", []) for n, t in tools.items()} == {
        "search": ["query"],
        "gather": ["query"],
        "list_folders": [],
        "cat_file": ["filePath"],
        "grep": ["pattern"],
        "index": [],
    }
    assert tools["search"].input_schema["properties"]["k"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 50,
        "description": "Number of results (default 5)",
    }
    assert tools["search"].output_schema["required"] == ["results", "truncated"]
    props = tools["search"].input_schema["properties"]
    assert props["pathGlob"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": 'Only paths matching one of these globs, e.g. ["*.md", "src/**"]; one '
        'starting with "!" leaves the paths it matches out. A single string is one glob',
    }
    assert props["exclude"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": 'Leave out paths matching any of these globs, e.g. ["tests/**"]',
    }
    assert props["mode"] == {
        "type": "string",
        "enum": ["hybrid", "vector", "bm25"],
        "description": "Ranking arms: hybrid (embeddings + BM25 keywords), vector (embeddings "
        "only) or bm25 (keywords only); default hybrid, or the configured default mode",
    }
    assert props["minScore"] == {
        "type": "number",
        "description": "Leave out the hits scoring below this (scores run from 0 to 1)",
    }
    assert props["allCopies"] == {
        "type": "boolean",
        "default": False,
        "description": "List each copy of a text (the same chunk in several files) as its own "
        "result; by default a result lists its copies in copies",
    }
    shared = ("pathGlob", "exclude", "mode", "minScore", "allCopies")
    gather = tools["gather"].input_schema["properties"]
    assert {name: gather[name] for name in shared} == {name: props[name] for name in shared}


def test_search_before_indexing_says_what_to_do(indexed: dict[str, Any]) -> None:
    assert "Run `semsearch index`" in error(indexed["before"])


def test_index_tool_reports_progress_and_summary(indexed: dict[str, Any]) -> None:
    summary = json.loads(ok(indexed["result"]))
    assert summary == indexed["result"].structured_content
    assert summary["filesIndexed"] >= 5
    assert summary["errors"] == 0
    assert [folder["name"] for folder in summary["folders"]] == ["shop"]
    done = [event[0] for event in indexed["progress"]]
    assert done and done == sorted(set(done))
    last_done, last_total, message = indexed["progress"][-1]
    assert last_done == last_total and re.fullmatch(r"vectors: (\d+)/\1", message or "")


def test_search_returns_absolute_paths_and_exact_lines(
    client: Client, world: dict[str, Path], indexed: dict[str, Any]
) -> None:
    (hit,) = search(client, "ERR_ZORBLATT_7741", k=1)
    assert hit == {
        "filePath": str(world["shop"] / "src/app.py"),
        "folder": "shop",
        "relPath": "src/app.py",
        "startLine": 1,
        "endLine": 2,
        "score": hit["score"],
        "text": str(CORPUS["src/app.py"]).rstrip("\n"),
    }
    assert search(client, "exponential backoff for failing payments", k=1, folder="shop")[0][
        "relPath"
    ] == ("docs/retry.md")
    globbed = search(client, "payment", k=5, pathGlob="*.py")
    assert {h["relPath"] for h in globbed} == {"src/app.py"}


@pytest.mark.parametrize(
    ("filters", "rels"),
    [
        ({"pathGlob": ["*.py", "docs/**"]}, {"src/app.py", "docs/retry.md"}),
        ({"pathGlob": ["*.py", "*.md", "!docs/", "!notes/"], "folder": "shop"}, {"src/app.py"}),
        ({"exclude": ["*.md", "data/", ".*"]}, {"src/app.py"}),
        ({"pathGlob": "docs/**", "exclude": ""}, {"docs/retry.md"}),
    ],
)
def test_search_takes_lists_of_globs_and_excludes(
    client: Client, indexed: dict[str, Any], filters: dict[str, Any], rels: set[str]
) -> None:
    hits = search(client, "payment retry backoff", k=20, **filters)
    assert {h["relPath"] for h in hits} == rels
    gathered = structured(client, "gather", {"query": "payment retry", "k": 20, **filters})
    assert {h["relPath"] for h in gathered["results"]} == rels


def test_search_modes_and_min_score(client: Client, indexed: dict[str, Any]) -> None:
    assert search(client, "zzqqxx", k=3, mode="bm25") == []  # no word of it is indexed
    assert len(search(client, "zzqqxx", k=3, mode="vector")) == 3  # nearest vectors
    (hit,) = search(client, "ERR_ZORBLATT_7741", k=1, mode="bm25")
    assert hit["relPath"] == "src/app.py"
    hits = search(client, "payment retry backoff", k=10)
    lowest, second = sorted({hit["score"] for hit in hits})[:2]
    floor = (lowest + second) / 2  # clear of the rounding of the scores returned
    kept = search(client, "payment retry backoff", k=10, minScore=floor)
    assert kept == [hit for hit in hits if hit["score"] >= floor] and len(kept) < len(hits)
    gathered = structured(client, "gather", {"query": "payment retry backoff", "minScore": 2})
    assert gathered["results"] == []


def test_gather_formats_one_markdown_block(client: Client, indexed: dict[str, Any]) -> None:
    block = ok(client.call("gather", {"query": "exponential backoff", "k": 2}))
    headers = re.findall(r"^### .*$", block, flags=re.M)
    assert len(headers) == 2
    assert re.fullmatch(
        r"### \[1/2\]  shop  ·  docs/retry\.md  ·  line 1  ·  score \d\.\d{3}", headers[0]
    )
    assert "```\n# Retries\n" in block


def test_gather_context_lines_are_exactly_aligned(
    client: Client, world: dict[str, Path], indexed: dict[str, Any]
) -> None:
    (hit,) = search(client, "lighthouse keeper ledger of passing ships", k=1)
    assert hit["relPath"] == "notes/ledger.md" and hit["startLine"] > 3
    lines = (world["shop"] / "notes/ledger.md").read_text().split("\n")
    assert hit["text"] in "\n".join(lines[hit["startLine"] - 1 : hit["endLine"]])
    block = ok(
        client.call(
            "gather",
            {"query": "lighthouse keeper ledger of passing ships", "k": 1, "contextLines": 3},
        )
    )
    first = hit["startLine"] - 3
    assert f"·  line {first}  ·" in block
    expected = "\n".join(lines[first - 1 : hit["endLine"] + 3])
    assert f"```\n{expected}\n```" in block


def test_gather_falls_back_to_the_indexed_text_when_the_file_changed(
    client: Client, world: dict[str, Path], indexed: dict[str, Any]
) -> None:
    path = world["shop"] / "notes/changing.md"
    original = path.read_text()
    path.write_text("Completely different content now.\n" * 3)
    try:
        block = ok(
            client.call(
                "gather", {"query": "weather station wind speed", "k": 1, "contextLines": 2}
            )
        )
    finally:
        path.write_text(original)
    assert "file changed since indexing" in block
    assert original.strip() in block


def test_list_folders(client: Client, world: dict[str, Path], indexed: dict[str, Any]) -> None:
    result = client.call("list_folders")
    payload = json.loads(ok(result))
    assert payload == result.structured_content
    (folder,) = payload["folders"]
    assert folder["name"] == "shop" and folder["path"] == str(world["shop"])
    assert folder["exists"] and folder["configured"]
    assert folder["files"] >= 5 and folder["chunks"] >= folder["files"]
    assert folder["chunksPending"] == 0
    assert payload["indexExists"]


def test_cat_file_reads_a_line_range(client: Client, world: dict[str, Path]) -> None:
    path = str(world["shop"] / "notes/changing.md")
    assert ok(client.call("cat_file", {"filePath": path})) == (
        "# shop  ·  notes/changing.md  ·  lines 1–1 of 1\n\n"
        "The weather station records wind speed every ten minutes."
    )
    ranged = ok(
        client.call(
            "cat_file",
            {"filePath": str(world["shop"] / "data/lines.txt"), "startLine": 10, "endLine": 11},
        )
    )
    assert ranged.split("\n\n", 1)[1] == f"line 000009 {'z' * 50}\nline 000010 {'z' * 50}"


def test_cat_file_follows_symlinks_inside_a_folder(client: Client, world: dict[str, Path]) -> None:
    assert "# Retries" in ok(
        client.call("cat_file", {"filePath": str(world["shop"] / "docs/alias.md")})
    )


def test_cat_file_caps_large_files(client: Client, world: dict[str, Path], cli: Any) -> None:
    line = f"line 000000 {'z' * 50}\n"
    big = write_tree(world["base"] / "big", {"big.txt": line * 6000})
    assert cli("add", str(big)) == 0  # configured, never indexed: 6,000 chunks would be slow
    try:
        body = ok(client.call("cat_file", {"filePath": str(big / "big.txt")}))
    finally:
        assert cli("remove", "big") == 0
    assert len(body.encode()) < 256 * 1024 + 500
    shown = 256 * 1024 // len(line)
    assert f"lines 1–{shown} of 6000" in body
    assert f"Ask for the rest with startLine={shown + 1}" in body


def test_grep_literal_with_glob_and_case(client: Client, indexed: dict[str, Any]) -> None:
    assert ok(client.call("grep", {"pattern": "err_zorblatt"})) == (
        "shop  ·  src/app.py:2  raise PaymentError('ERR_ZORBLATT_7741')"
    )
    assert "No matches" in ok(
        client.call("grep", {"pattern": "err_zorblatt", "caseSensitive": True})
    )
    assert "No matches" in ok(  # a client that sends every value as a string
        client.call("grep", {"pattern": "err_zorblatt", "caseSensitive": "true"})
    )
    assert "No matches" in ok(client.call("grep", {"pattern": "ZORBLATT", "fileGlob": "*.md"}))


def test_grep_regex_and_truncation_note(client: Client) -> None:
    out = ok(client.call("grep", {"pattern": r"^line 00000\d", "regex": True, "maxResults": 3}))
    assert out.splitlines()[:3] == [
        f"shop  ·  data/lines.txt:{n + 1}  line 00000{n} {'z' * 50}" for n in range(3)
    ]
    assert "(showing first 3 matches; there are more." in out


def test_grep_catastrophic_regex_is_an_error_within_budget(client: Client) -> None:
    started = time.monotonic()
    message = error(client.call("grep", {"pattern": "(a+)+$", "regex": True}))
    assert time.monotonic() - started < 15
    assert "time budget" in message
    ok(client.call("list_folders"))  # the server still answers


@pytest.mark.parametrize(
    "path",
    [
        "{shop}/../outside/id_rsa",
        "{outside}/id_rsa",
        "{shop}/leak.txt",
        "{sibling}/key.txt",
        "{shop}/.env",
        "{shop}/private/notes.md",
        "{shop}/data/blob.txt",
        "/etc/passwd",
        "{shop}/src/app.py\x00",  # found by fuzzing: "Internal error ... embedded null byte"
    ],
)
def test_cat_file_refusals(client: Client, world: dict[str, Path], path: str) -> None:
    message = error(client.call("cat_file", {"filePath": path.format(**world)}))
    assert message.startswith(("Refused", "Cannot read")) or "binary" in message
    assert not any(secret in message for secret in SECRETS)


@pytest.mark.parametrize("root", ["{outside}", "{outside}/id_rsa", "{sibling}", "/", "shop2"])
def test_index_refuses_unconfigured_folders(
    client: Client, world: dict[str, Path], indexed: dict[str, Any], root: str
) -> None:
    message = error(client.call("index", {"root": root.format(**world)}))
    assert "Refused" in message and "semsearch add" in message


def test_a_root_holding_a_nul_is_a_plain_error(client: Client, world: dict[str, Path]) -> None:
    """Found by fuzzing: "Internal error in index: ValueError: embedded null byte"."""
    root = f"{world['shop']}/src/app.py\x00"
    message = error(client.call("index", {"root": root}))
    assert message == f"No folder at {root!r}: a path cannot hold a NUL character."


def test_index_of_a_subfolder_updates_its_configured_folder(
    client: Client, world: dict[str, Path], indexed: dict[str, Any]
) -> None:
    summary = json.loads(ok(client.call("index", {"root": str(world["shop"] / "docs")})))
    assert [(f["name"], f["path"]) for f in summary["folders"]] == [("shop", str(world["shop"]))]
    assert len(json.loads(ok(client.call("list_folders")))["folders"]) == 1


def test_index_waits_for_a_running_cli_index(
    client: Client, world: dict[str, Path], indexed: dict[str, Any]
) -> None:
    held = threading.Event()

    def hold_the_lock() -> None:
        with write_lock(world["home"] / ".local/share/semsearch/index.db", 0):
            held.set()
            time.sleep(1.5)

    other = threading.Thread(target=hold_the_lock)
    other.start()
    held.wait()
    started = time.monotonic()
    messages: list[str | None] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        messages.append(message)

    summary = json.loads(ok(client.call("index", {}, progress_callback=on_progress)))
    other.join()
    assert time.monotonic() - started > 1
    assert summary["errors"] == 0
    first = messages[0] or ""  # the lock holder is this test process
    assert first.startswith(f"waiting for the index run holding the lock (pid {os.getpid()}, ")


@pytest.mark.parametrize("secret", SECRETS)
def test_secrets_never_come_back(
    client: Client, world: dict[str, Path], indexed: dict[str, Any], secret: str
) -> None:
    hidden = {"data/blob.txt", ".env", "private/notes.md", "leak.txt"}
    for tool, args in [
        ("search", {"query": secret, "k": 20}),
        ("gather", {"query": secret, "k": 20, "contextLines": 5}),
    ]:
        result = client.call(tool, args)
        ok(result)
        assert result.structured_content is not None
        paths = {hit["relPath"] for hit in result.structured_content["results"]}
        assert paths and not paths & hidden, (tool, paths)
        assert secret not in json.dumps(result.model_dump(mode="json"))
    for pattern, regex in [(secret, False), (secret[:8], True)]:
        result = client.call("grep", {"pattern": pattern, "regex": regex})
        assert ok(result).startswith("No matches in ")
        assert result.structured_content is not None
        assert result.structured_content["matches"] == []
        assert result.structured_content["filesSearched"] >= 5
        assert secret not in json.dumps(result.model_dump(mode="json"))


def test_a_file_indexed_by_the_cli_is_found_by_the_next_search(
    client: Client, world: dict[str, Path], indexed: dict[str, Any], cli: Any
) -> None:
    assert search(client, "warm-up query", k=1)  # vectors are cached from here on
    write_tree(world["shop"], {"docs/new.md": "The quokka sanctuary opens at dawn.\n"})
    assert cli("index") == 0
    assert search(client, "quokka sanctuary", k=1)[0]["relPath"] == "docs/new.md"


def test_a_folder_added_by_the_cli_shows_in_list_folders(
    client: Client, world: dict[str, Path], cli: Any
) -> None:
    extra = write_tree(world["base"] / "extra", {"x.md": "extra\n"})
    assert cli("add", str(extra)) == 0
    names = [f["name"] for f in json.loads(ok(client.call("list_folders")))["folders"]]
    assert names == ["shop", "extra"]
    assert "extra  ·  x.md:1" in ok(client.call("grep", {"pattern": "extra", "folder": "extra"}))
    assert cli("remove", "extra") == 0
    names = [f["name"] for f in json.loads(ok(client.call("list_folders")))["folders"]]
    assert names == ["shop"]


def test_a_name_shared_by_two_folders_is_refused_by_every_tool(
    client: Client, world: dict[str, Path], indexed: dict[str, Any], cli: Any
) -> None:
    first = write_tree(world["base"] / "one" / "docs", {"a.md": "quagga ambiguity one\n"})
    second = write_tree(world["base"] / "two" / "docs", {"b.md": "quagga ambiguity two\n"})
    assert cli("add", str(first), str(second)) == 0
    try:
        for tool, args in [
            ("search", {"query": "quagga", "folder": "docs"}),
            ("gather", {"query": "quagga", "folder": "docs"}),
            ("grep", {"pattern": "quagga", "folder": "docs"}),
            ("index", {"root": "docs"}),
        ]:
            message = error(client.call(tool, args))
            assert f"'docs' is ambiguous: 2 folders have it ({first}, {second})" in message, tool
            assert "Pass the folder's path instead" in message
        found = ok(client.call("grep", {"pattern": "quagga", "folder": f"{second}/"}))
        assert found == "docs  ·  b.md:1  quagga ambiguity two"
        assert not any(
            f["files"] for f in json.loads(ok(client.call("list_folders")))["folders"][1:]
        )
    finally:
        assert cli("remove", str(first), str(second)) == 0


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("search", {"query": "x", "k": 0}, "must be between 1 and 50, got 0"),
        ("search", {"query": "x", "k": 51}, "must be between 1 and 50, got 51"),
        ("search", {"query": "x", "k": "many"}, "k must be a whole number between 1 and 50"),
        ("search", {"query": "x", "k": True}, "not true/false"),
        ("search", {}, "query"),
        ("search", {"query": "  "}, "The query is empty"),
        (
            "search",
            {"query": "x", "folder": "nope"},
            "No folder named 'nope'. Configured folders: shop.",
        ),
        ("gather", {"query": "x", "contextLines": -1}, "must be between 0 and 100"),
        ("cat_file", {"filePath": "/x", "startLine": 5, "endLine": 3}, "startLine (5) is after"),
        ("cat_file", {"filePath": "/x", "startLine": 0}, "must be at least 1"),
        ("cat_file", {"filePath": "relative.md"}, "not an absolute path"),
        (
            "grep",
            {"pattern": "x", "folder": "nope"},
            "No folder named 'nope'. Configured folders: shop.",
        ),
        (
            "grep",
            {"pattern": "x", "folder": "/nope"},
            "No folder at /nope. Configured folders: shop.",
        ),
        ("search", {"query": "x", "pathGlob": ["*.md", "["]}, "Invalid glob '[': a '['"),
        ("gather", {"query": "x", "exclude": ["!x"]}, "The exclude pattern '!x' starts with"),
        (
            "search",
            {"query": "x", "pathGlob": "x/**"},
            "No indexed path matches the glob 'x/**'. Globs are gitignore patterns",
        ),
        (
            "gather",
            {"query": "x", "folder": "shop", "exclude": ["**"]},
            "Every indexed path in folder shop is excluded by '**': nothing is left to search.",
        ),
        ("grep", {"pattern": "(", "regex": True}, "Invalid regular expression"),
        ("grep", {"pattern": ""}, "The pattern is empty"),
        ("grep", {"pattern": "x", "maxResults": 501}, "must be between 1 and 500"),
        ("index", {"maxFiles": 0}, "must be at least 1"),
    ],
)
def test_bad_arguments_are_clear_errors(
    client: Client, indexed: dict[str, Any], tool: str, args: dict[str, Any], message: str
) -> None:
    assert message in error(client.call(tool, args))


def test_cat_file_past_the_end(client: Client, world: dict[str, Path]) -> None:
    path = str(world["shop"] / "notes/changing.md")
    assert "past the end" in error(client.call("cat_file", {"filePath": path, "startLine": 9}))


def test_explicit_nulls_mean_defaults(client: Client, indexed: dict[str, Any]) -> None:
    args = {
        "query": "backoff",
        "k": None,
        "folder": None,
        "pathGlob": None,
        "exclude": None,
        "mode": None,
        "minScore": None,
    }
    assert json.loads(ok(client.call("search", args)))["results"]


def test_no_response_leaked_a_secret(client: Client, world: dict[str, Path]) -> None:
    assert client.seen
    for response in client.seen:
        assert not any(secret in response for secret in SECRETS)
    log = (world["base"] / "server.log").read_text()
    assert "Traceback" not in log


def test_a_model_that_is_not_installed_fails_only_the_tools_that_embed(
    world: dict[str, Path],
) -> None:
    """Found in review: with SS_MODEL naming a model no package offers, every call failed,
    status and list_folders too (the server made the model before any call)."""
    home = world["base"] / "nomodel-home"
    home.mkdir()
    notes = write_tree(world["base"] / "nomodel-notes", {"otters.md": "Sea otters hold hands.\n"})
    env = {**server_env(home), "SS_MODEL": "bge-small-en-v1.5", "SS_MCP_AUTO_INDEX": "0"}
    subprocess.run([sys.executable, "-m", "semsearch", "add", str(notes)], env=env, check=True)
    session = Client(env, world["base"], world["base"] / "nomodel-server.log")
    try:
        assert "otters.md" in ok(session.call("grep", {"pattern": "otters"}))
        assert json.loads(ok(session.call("list_folders")))["folders"][0]["path"] == str(notes)
        status = session._portal.call(session.session.read_resource, "semsearch://status")
        assert json.loads(status.contents[0].text)["indexExists"] is False
        assert "Run `semsearch index` first" in error(session.call("search", {"query": "x"}))
        message = error(session.call("index", {}))
        assert "No embedding model 'bge-small-en-v1.5' is installed" in message
    finally:
        session.close()
    assert "Traceback" not in (world["base"] / "nomodel-server.log").read_text()


@pytest.mark.lancedb
def test_the_server_works_the_same_on_the_lancedb_backend(world: dict[str, Path]) -> None:
    home = world["base"] / "lance-home"
    home.mkdir()
    notes = write_tree(world["base"] / "lance-notes", {"otters.md": "Sea otters hold hands.\n"})
    env = {**server_env(home), "SS_STORE_BACKEND": "lancedb"}
    subprocess.run([sys.executable, "-m", "semsearch", "add", str(notes)], env=env, check=True)
    session = Client(env, world["base"], world["base"] / "lance-server.log")
    try:
        ok(session.call("index", {}))
        assert search(session, "otters holding hands")[0]["relPath"] == "otters.md"
        (notes / "walrus.md").write_text("A walrus hauls out on the ice floe.\n")
        subprocess.run([sys.executable, "-m", "semsearch", "index"], env=env, check=True)
        assert search(session, "walrus on an ice floe")[0]["relPath"] == "walrus.md"
        listing = json.loads(ok(session.call("list_folders", {})))
        assert listing["indexPath"] == str(home / ".local" / "share" / "semsearch" / "lancedb")
    finally:
        session.close()


def test_copies_come_back_as_one_result_listing_the_others(world: dict[str, Path]) -> None:
    """A small project at three revisions side by side: search and gather give each text once,
    its copies listed (structured content valid against the output schemas); allCopies gives
    each copy its own result."""
    home = world["base"] / "copies-home"
    home.mkdir()
    project = {
        "src/retry.py": "def retry_payment(charge):\n    # retry a failed payment with backoff\n",
        "docs/payments.md": "Failed payments are retried with exponential backoff.\n",
    }
    tree = {
        f"{rev}/{rel}": text for rev in ("rev1", "rev2", "rev3") for rel, text in project.items()
    }
    repo = write_tree(world["base"] / "copies-repo", tree)
    env = server_env(home)
    subprocess.run([sys.executable, "-m", "semsearch", "add", str(repo)], env=env, check=True)
    session = Client(env, world["base"], world["base"] / "copies-server.log")
    try:
        ok(session.call("index", {}))
        hits = [hit for hit in search(session, "retry a failed payment", k=5)]
        assert len(hits) == 2 and {h["relPath"].split("/", 1)[1] for h in hits} == set(project)
        for hit in hits:
            rev, rel = hit["relPath"].split("/", 1)
            others = [r for r in ("rev1", "rev2", "rev3") if r != rev]
            assert hit["copyCount"] == 2
            assert hit["copies"] == [
                {
                    "filePath": str(repo / other / rel),
                    "folder": "copies-repo",
                    "relPath": f"{other}/{rel}",
                    "startLine": hit["startLine"],
                    "endLine": hit["endLine"],
                }
                for other in others
            ]
        every = search(session, "retry a failed payment", k=5, allCopies=True)
        assert len(every) == 5 and all("copies" not in hit for hit in every)
        gathered = structured(session, "gather", {"query": "retry a failed payment", "k": 5})
        assert [{k: v for k, v in h.items() if k != "passage"} for h in gathered["results"]] == [
            {k: v for k, v in hit.items() if k != "text"} for hit in hits
        ]
        block = ok(session.call("gather", {"query": "retry a failed payment", "k": 1}))
        rev, rel = hits[0]["relPath"].split("/", 1)
        others = [
            f"copies-repo  ·  {r}/{rel}  ·  line 1" for r in ("rev1", "rev2", "rev3") if r != rev
        ]
        assert f"\nalso in: {'; '.join(others)}\n```" in block
        structured(session, "search", {"query": "retry a failed payment"})
    finally:
        session.close()


# --- Plain argument errors; structured content of gather, cat_file and grep; scores <= 1 -------


@pytest.mark.parametrize(
    ("tool", "args", "sentence"),
    [
        ("search", {"query": "x", "k": 0}, "k must be between 1 and 50, got 0."),
        (
            "search",
            {"query": "x", "k": "many"},
            'k must be a whole number between 1 and 50, got "many".',
        ),
        (
            "search",
            {"query": "x", "limit": 3},
            'Unknown argument "limit": search takes query, k, folder, pathGlob, exclude, mode, '
            "minScore, allCopies.",
        ),
        (
            "gather",
            {"query": "x", "contextLines": 2.5},
            "contextLines must be a whole number between 0 and 100, got 2.5.",
        ),
        ("gather", {}, "query is required: what to look for, in natural language."),
        (
            "search",
            {"query": "x", "mode": "fuzzy"},
            'mode must be one of hybrid, vector, bm25, got "fuzzy".',
        ),
        ("search", {"query": "x", "minScore": "high"}, 'minScore must be a number, got "high".'),
        ("gather", {"query": "x", "minScore": True}, "minScore must be a number, got true."),
        (
            "search",
            {"query": "x", "pathGlob": ["*.md", 3]},
            "pathGlob must be a glob or a list of globs, got 3.",
        ),
        (
            "gather",
            {"query": "x", "exclude": 7},
            "exclude must be a glob or a list of globs, got 7.",
        ),
        (
            "list_folders",
            {"verbose": True},
            'Unknown argument "verbose": list_folders takes no arguments.',
        ),
        ("cat_file", {}, "filePath is required: absolute path, as returned by search/grep."),
        (
            "cat_file",
            {"filePath": "/x", "startLine": [1]},
            "startLine must be a whole number of at least 1, got [1].",
        ),
        ("grep", {"pattern": 7}, "pattern must be a string, got 7."),
        ("grep", {"pattern": "x", "regex": "maybe"}, 'regex must be true or false, got "maybe".'),
        # pydantic alone takes "yes", 1 and "on" as true: a re-embedding run must not start on one
        ("index", {"force": "yes"}, 'force must be true or false, got "yes".'),
        (
            "grep",
            {"pattern": "x", "caseSensitive": 1},
            "caseSensitive must be true or false, got 1.",
        ),
        ("grep", {"pattern": "x", "regex": "on"}, 'regex must be true or false, got "on".'),
        (
            "index",
            {"maxFiles": True},
            "maxFiles must be a whole number of at least 1, not true/false.",
        ),
    ],
)
def test_a_bad_argument_is_one_plain_sentence(
    client: Client, tool: str, args: dict[str, Any], sentence: str
) -> None:
    assert error(client.call(tool, args)) == sentence


def test_each_bad_argument_gets_its_own_sentence(client: Client) -> None:
    message = error(client.call("grep", {"pattern": None, "maxResults": 0, "color": "red"}))
    assert message == (
        'Unknown argument "color": grep takes pattern, folder, fileGlob, caseSensitive, '
        "maxResults, regex. pattern must be a string, got null. "
        "maxResults must be between 1 and 500, got 0."
    )
    assert "pydantic" not in message and "http" not in message and "\n" not in message


def output_schemas(client: Client) -> dict[str, dict[str, Any]]:
    return {tool.name: tool.output_schema for tool in client.list_tools() if tool.output_schema}


def structured(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """The tool's structured content, checked against the output schema the tool declares."""
    result = client.call(tool, args)
    ok(result)
    payload = result.structured_content
    assert isinstance(payload, dict)
    jsonschema.validate(payload, output_schemas(client)[tool])
    return payload


def test_every_tool_declares_an_output_schema(client: Client) -> None:
    schemas = output_schemas(client)
    assert set(schemas) == {"search", "gather", "list_folders", "cat_file", "grep", "index"}
    assert schemas["grep"]["required"] == ["matches", "truncated", "warnings"]
    assert schemas["cat_file"]["required"] == [
        "filePath",
        "folder",
        "relPath",
        "startLine",
        "endLine",
        "totalLines",
        "text",
        "truncated",
    ]
    assert schemas["gather"]["required"] == ["results", "truncated"]


def test_grep_matches_are_structured(
    client: Client, world: dict[str, Path], indexed: dict[str, Any]
) -> None:
    payload = structured(
        client, "grep", {"pattern": r"^line 00000\d", "regex": True, "maxResults": 2}
    )
    assert payload["matches"] == [
        {
            "filePath": str(world["shop"] / "data/lines.txt"),
            "folder": "shop",
            "relPath": "data/lines.txt",
            "line": n + 1,
            "text": f"line 00000{n} {'z' * 50}",
        }
        for n in range(2)
    ]
    assert payload["truncated"] is True and "filesSearched" not in payload
    none = structured(client, "grep", {"pattern": "no-such-text-anywhere"})
    assert (none["matches"], none["truncated"], none["warnings"]) == ([], False, [])
    assert none["filesSearched"] >= 5


def test_cat_file_line_range_is_structured(client: Client, world: dict[str, Path]) -> None:
    path = str(world["shop"] / "data/lines.txt")
    result = client.call("cat_file", {"filePath": path, "startLine": 10, "endLine": 11})
    payload = structured(client, "cat_file", {"filePath": path, "startLine": 10, "endLine": 11})
    assert payload == {
        "filePath": path,
        "folder": "shop",
        "relPath": "data/lines.txt",
        "startLine": 10,
        "endLine": 11,
        "totalLines": 20,
        "text": f"line 000009 {'z' * 50}\nline 000010 {'z' * 50}",
        "truncated": False,
    }
    assert text(result).endswith(payload["text"])  # the text content is still the header + text


def test_cat_file_cap_is_structured(client: Client, world: dict[str, Path], cli: Any) -> None:
    line = f"line 000000 {'z' * 50}\n"
    big = write_tree(world["base"] / "big2", {"big.txt": line * 6000})
    assert cli("add", str(big)) == 0
    try:
        payload = structured(client, "cat_file", {"filePath": str(big / "big.txt")})
    finally:
        assert cli("remove", "big2") == 0
    shown = 256 * 1024 // len(line)
    assert (payload["startLine"], payload["endLine"], payload["totalLines"]) == (1, shown, 6000)
    assert payload["truncated"] is True
    assert f"startLine={shown + 1}" in payload["note"]


def test_gather_hits_and_passages_are_structured(
    client: Client, world: dict[str, Path], indexed: dict[str, Any]
) -> None:
    query = "lighthouse keeper ledger of passing ships"
    (hit,) = search(client, query, k=1)
    args = {"query": query, "k": 1, "contextLines": 3}
    payload = structured(client, "gather", args)
    lines = (world["shop"] / "notes/ledger.md").read_text().split("\n")
    first, last = hit["startLine"] - 3, hit["endLine"] + 3
    expected = {key: value for key, value in hit.items() if key != "text"}
    expected["passage"] = {
        "startLine": first,
        "endLine": last,
        "text": "\n".join(lines[first - 1 : last]),
    }
    assert payload == {
        "results": [expected],
        "truncated": False,
        "indexing": False,
        "chunksPending": 0,
    }
    assert f"```\n{expected['passage']['text']}\n```" in ok(client.call("gather", args))
    nothing = {"query": "zzzz", "folder": "shop", "pathGlob": "*.nope"}
    assert error(client.call("gather", nothing)).startswith(
        "No indexed path in folder shop matches the glob '*.nope'."
    )


def test_scores_of_a_symbol_query_are_at_most_one(client: Client, indexed: dict[str, Any]) -> None:
    hits = search(client, "charge", k=5)
    assert hits[0]["relPath"] == "src/app.py"  # it defines charge: the definition boost applies
    assert all(0 <= hit["score"] <= 1 for hit in hits), [hit["score"] for hit in hits]
    gathered = structured(client, "gather", {"query": "charge", "k": 5})
    assert [r["score"] for r in gathered["results"]] == [hit["score"] for hit in hits]


def test_after_move_the_tools_use_the_new_path(
    client: Client, world: dict[str, Path], indexed: dict[str, Any], cli: Any
) -> None:
    shop, moved = world["shop"], world["base"] / "shop-moved"
    ok(client.call("index", {}))  # settle what earlier tests changed
    shop.rename(moved)
    try:
        assert cli("move", "shop", str(moved)) == 0
        folders = json.loads(ok(client.call("list_folders")))["folders"]
        assert [(f["name"], f["path"]) for f in folders] == [("shop-moved", str(moved))]
        text = ok(client.call("cat_file", {"filePath": str(moved / "notes/changing.md")}))
        assert text.startswith("# shop-moved  ·  notes/changing.md  ·  lines 1–1 of 1")
        found = ok(client.call("grep", {"pattern": "ERR_ZORBLATT_7741"}))
        assert "shop-moved  ·  src/app.py:2" in found
        summary = json.loads(ok(client.call("index", {})))
        assert (summary["filesIndexed"], summary["chunksWritten"]) == (0, 0)
        assert summary["folders"][0]["path"] == str(moved)
        hits = search(client, "payment retry backoff")
        assert hits and all(h["filePath"].startswith(f"{moved}{os.sep}") for h in hits)
        gathered = ok(client.call("gather", {"query": "payment retry backoff", "k": 1}))
        assert "shop-moved" in gathered
    finally:
        moved.rename(shop)
        assert cli("move", "shop-moved", str(shop)) == 0


def test_secret_and_gitignored_files_are_refused_and_never_grepped(world: dict[str, Path]) -> None:
    """Issue 11.6: outside git, .env and a .gitignore'd config were read and grepped."""
    home = world["base"] / "secrets-home"
    home.mkdir()
    plain = write_tree(
        world["base"] / "plain-app",
        {
            ".env": "SECRET=PLAIN-DOTENV-31337\n",
            ".gitignore": "instance/\n",
            "instance/config.py": "SECRET = 'INSTANCE-CONFIG-4242'\n",
            "app.py": "import os\nprint('nothing to hide')\n",
        },
    )
    repo = write_tree(world["base"] / "git-app", {".env": "SECRET=COMMITTED-DOTENV-99\n"})
    identity = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "oops, a committed .env"]):
        subprocess.run(["git", *identity, "-C", str(repo), *args], check=True, capture_output=True)
    env = server_env(home)
    for folder in (plain, repo):
        subprocess.run([sys.executable, "-m", "semsearch", "add", str(folder)], env=env, check=True)
    session = Client(env, world["base"], world["base"] / "secrets-server.log")
    try:
        for path in (plain / ".env", repo / ".env"):
            refused = error(session.call("cat_file", {"filePath": str(path)}))
            assert f"Refused: {path} is a secret file (matches .env)" in refused
        refused = error(session.call("cat_file", {"filePath": str(plain / "instance/config.py")}))
        assert "excluded from indexing (ignored by .gitignore)" in refused
        assert "No matches" in ok(session.call("grep", {"pattern": "SECRET"}))
        assert "nothing to hide" in ok(
            session.call("cat_file", {"filePath": str(plain / "app.py")})
        )
        for response in session.seen:
            assert not re.search(r"PLAIN-DOTENV|INSTANCE-CONFIG|COMMITTED-DOTENV", response)
    finally:
        session.close()


def test_a_folder_or_file_it_cannot_read_is_named_by_every_tool(
    world: dict[str, Path], set_mode: Callable[[Path, int], Path]
) -> None:
    """Issue 34.1, with the server run as an ordinary user (root reads a mode-000 folder)."""
    home = world["base"] / "locked-home"
    home.mkdir()
    notes = write_tree(
        world["base"] / "locked-notes",
        {
            "open.md": "The keeper logs ships.\n",
            "locked/x.md": "ships\n",
            "no-access.md": "ships\n",
        },
    )
    env = {**server_env(home), "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-m", "semsearch", "add", str(notes)], env=env, check=True)
    set_mode(notes / "locked", 0)
    set_mode(notes / "no-access.md", 0)
    warning = (
        f"{notes / 'locked'}: cannot read this folder (permission denied); skipped "
        "(list it in .indexignore to skip it quietly)"
    )
    log = world["base"] / "locked-server.log"
    session = Client(env, world["base"], log, python=as_user([sys.executable]))
    try:
        (folder,) = json.loads(ok(session.call("index", {})))["folders"]
        assert (folder["indexed"], folder["skipped"], folder["warnings"]) == (1, 1, [warning])
        unreadable = str(notes / "no-access.md")
        assert folder["problems"] == [{"path": unreadable, "reason": "permission denied"}]
        grep = session.call("grep", {"pattern": "ships"})
        assert [m["relPath"] for m in (grep.structured_content or {})["matches"]] == ["open.md"]
        assert (grep.structured_content or {})["warnings"] == [
            warning,
            f"{unreadable}: cannot read this file (permission denied); not searched",
        ]
        assert f"warning: {warning}" in ok(grep)
        hidden = notes / "locked" / "x.md"
        assert error(session.call("cat_file", {"filePath": str(hidden)})) == (
            f"Cannot read {hidden}: semsearch cannot read the folder {notes / 'locked'} "
            "(permission denied), so it skips that folder."
        )
        message = error(session.call("cat_file", {"filePath": unreadable}))
        assert message == f"Cannot read {unreadable}: Permission denied."
    finally:
        session.close()


def test_search_and_gather_bring_the_index_up_to_date_first(world: dict[str, Path]) -> None:
    home = world["base"] / "fresh-home"
    home.mkdir()
    notes = write_tree(world["base"] / "fresh-notes", {"otters.md": "Sea otters hold hands.\n"})
    env = server_env(home)
    subprocess.run([sys.executable, "-m", "semsearch", "add", str(notes)], env=env, check=True)
    session = Client(env, world["base"], world["base"] / "fresh-server.log")
    try:
        ok(session.call("index", {}))
        (notes / "walrus.md").write_text("A walrus hauls out on the ice floe.\n")
        result = session.call("search", {"query": "walrus on an ice floe"})
        assert result.structured_content is not None
        assert result.structured_content["indexing"] is False  # a small change: done inline
        assert result.structured_content["results"][0]["relPath"] == "walrus.md"
        (notes / "walrus.md").unlink()
        assert all(hit["relPath"] != "walrus.md" for hit in search(session, "walrus ice floe"))
        many = {
            f"bulk/seal{n:02}.md": f"Harbour seal number {n} sleeps on rock {n}.\n"
            for n in range(30)
        }
        write_tree(notes, many)
        block = ok(session.call("gather", {"query": "harbour seal sleeping on a rock"}))
        assert block.startswith("_Indexing is under way")  # a large change: in the background
        deadline = time.monotonic() + 180
        while True:
            result = session.call("search", {"query": "harbour seal rock", "k": 50})
            assert result.structured_content is not None and time.monotonic() < deadline
            found = {hit["relPath"] for hit in result.structured_content["results"]}
            if not result.structured_content["indexing"] and set(many) <= found:
                break
            time.sleep(0.5)
        (notes / "narwhal.md").write_text("A narwhal tusk is a long spiral tooth.\n")
        time.sleep(1.0)  # the watcher hears of a change 50 to 100 ms after it
        with write_lock(home / ".local" / "share" / "semsearch" / "index.db", 0):  # a CLI run
            result = session.call("search", {"query": "narwhal tusk spiral tooth"})
        assert result.structured_content is not None and result.structured_content["indexing"]
        assert all(h["relPath"] != "narwhal.md" for h in result.structured_content["results"])
        assert search(session, "narwhal tusk spiral tooth")[0]["relPath"] == "narwhal.md"
    finally:
        session.close()
    assert "Traceback" not in (world["base"] / "fresh-server.log").read_text()


def test_search_gather_and_list_folders_count_chunks_without_a_vector(
    world: dict[str, Path],
) -> None:
    home = world["base"] / "pending-home"
    home.mkdir()
    notes = write_tree(
        world["base"] / "pending-notes",
        {"otters.md": "Sea otters hold hands.\n", "seals.md": "Harbour seals sleep on rocks.\n"},
    )
    env = {**server_env(home), "SS_MCP_AUTO_INDEX": "0"}
    for argv in (["add", str(notes)], ["index"]):
        subprocess.run([sys.executable, "-m", "semsearch", *argv], env=env, check=True)
    index_file = home / ".local" / "share" / "semsearch" / "index.db"
    with sqlite3.connect(index_file) as conn:  # a run stopped after its text pass
        conn.execute(
            "UPDATE chunks SET vector = NULL"
            " WHERE file_id IN (SELECT id FROM files WHERE rel = 'otters.md')"
        )
    session = Client(env, world["base"], world["base"] / "pending-server.log")
    try:
        result = session.call("search", {"query": "otters holding hands"})
        assert result.structured_content is not None
        assert result.structured_content["chunksPending"] == 1
        assert result.structured_content["results"][0]["relPath"] == "otters.md"  # by words
        block = ok(session.call("gather", {"query": "otters holding hands"}))
        assert block.startswith("_1 chunk not embedded yet: found by words only until an index")
        folders = session.call("list_folders").structured_content
        assert folders is not None
        assert [(f["chunks"], f["chunksPending"]) for f in folders["folders"]] == [(2, 1)]
        ok(session.call("index", {}))
        result = session.call("search", {"query": "otters holding hands"})
        assert result.structured_content is not None
        assert result.structured_content["chunksPending"] == 0
        assert ok(session.call("gather", {"query": "otters holding hands"})).startswith("### ")
    finally:
        session.close()
    assert "Traceback" not in (world["base"] / "pending-server.log").read_text()


def _is_exact(folder: Path, hit: dict[str, Any]) -> bool:
    """The hit's text is in the file now, starting on its startLine and ending on its endLine
    (a chunk may start or end inside a long line)."""
    lines = (folder / hit["relPath"]).read_text().split("\n")
    first, last = lines[hit["startLine"] - 1], lines[hit["endLine"] - 1]
    shown = "\n".join(lines[hit["startLine"] - 1 : hit["endLine"]])
    at = shown.find(hit["text"])
    return (
        bool(hit["text"])
        and 0 <= at <= len(first)
        and at + len(hit["text"]) >= len(shown) - len(last)
    )


def test_search_sees_a_file_saved_a_second_before_at_its_exact_lines(
    world: dict[str, Path],
) -> None:
    """With the change watcher on (Linux): edits, new folders and deletions after a check that
    found nothing to do are all in the next answer."""
    home = world["base"] / "watch-home"
    home.mkdir()
    notes = write_tree(world["base"] / "watch-notes", {"ledger.md": "\n\n".join(PARAGRAPHS)})
    env = server_env(home)
    subprocess.run([sys.executable, "-m", "semsearch", "add", str(notes)], env=env, check=True)
    session = Client(env, world["base"], world["base"] / "watch-server.log")
    query = "lighthouse keeper logs every passing ship"
    try:
        ok(session.call("index", {}))
        first = search(session, query)[0]
        assert first["relPath"] == "ledger.md" and _is_exact(notes, first)
        assert search(session, query)[0] == first  # nothing changed
        ledger = notes / "ledger.md"
        ledger.write_text("# Ledger\n\nKept by the keeper.\n\n" + ledger.read_text())
        walrus = "new/deeper/walrus.md"
        write_tree(notes, {walrus: "# Walrus\n\nA walrus hauls out on the ice floe.\n"})
        time.sleep(1.0)
        moved = search(session, query)[0]
        assert moved["relPath"] == "ledger.md" and _is_exact(notes, moved)
        assert (moved["startLine"], moved["endLine"]) == (
            first["startLine"] + 4,
            first["endLine"] + 4,
        )
        found = search(session, "a walrus on the ice floe")[0]
        assert (found["relPath"], found["startLine"], found["endLine"]) == (walrus, 1, 3)
        (notes / walrus).write_text("# Walrus\n\n\n\nA walrus hauls out on the ice floe.\n")
        time.sleep(1.0)
        found = search(session, "a walrus on the ice floe")[0]  # in the folder made after a check
        assert (found["relPath"], found["startLine"], found["endLine"]) == (walrus, 1, 5)
        (notes / walrus).unlink()
        time.sleep(1.0)
        assert all(hit["relPath"] != walrus for hit in search(session, "walrus ice floe", k=50))
    finally:
        session.close()
    assert "Traceback" not in (world["base"] / "watch-server.log").read_text()


def test_config_typos_are_logged_once_on_stderr(world: dict[str, Path]) -> None:
    home = world["base"] / "typo-home"
    config = home / ".config" / "semsearch" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"defaultTopk": 3}))
    log = world["base"] / "typo-server.log"
    session = Client(server_env(home), world["base"], log)
    try:
        ok(session.call("list_folders"))
        config.write_text(json.dumps({"defaultTopk": 3, "mcpAutoIndx": False}))  # edited while up
        for _ in range(2):
            ok(session.call("list_folders"))
    finally:
        session.close()
    logged = log.read_text()
    assert logged.count("unknown key `defaultTopk` is ignored; did you mean `defaultTopK`?") == 1
    assert logged.count("unknown key `mcpAutoIndx` is ignored; did you mean `mcpAutoIndex`?") == 1
    assert "Traceback" not in logged


def test_names_that_are_not_utf8_come_back_escaped_and_read_back(world: dict[str, Path]) -> None:
    home = world["base"] / "names-home"
    home.mkdir()
    notes = write_tree(world["base"] / "names", {"tab\there.md": "A walrus naps on the floe.\n"})
    latin1 = Path(os.fsdecode(os.fsencode(notes) + b"/caf\xe9.md"))
    latin1.write_text("An otter cracks a clam on its belly.\n")
    env = server_env(home)
    subprocess.run([sys.executable, "-m", "semsearch", "add", str(notes)], env=env, check=True)
    session = Client(env, world["base"], world["base"] / "names-server.log")
    try:
        ok(session.call("index", {}))
        (hit,) = search(session, "otter cracking a clam", k=1)
        assert (hit["relPath"], hit["filePath"]) == ("caf\\xe9.md", f"{notes}/caf\\xe9.md")
        read = session.call("cat_file", {"filePath": hit["filePath"]})
        assert "An otter cracks a clam" in ok(read)
        assert read.structured_content is not None
        assert read.structured_content["relPath"] == "caf\\xe9.md"
        found = session.call("grep", {"pattern": "walrus|otter", "regex": True})
        assert found.structured_content is not None
        rels = [m["relPath"] for m in found.structured_content["matches"]]
        assert rels == ["caf\\xe9.md", "tab\there.md"]
        assert "caf\\xe9.md:1" in ok(found)
        block = ok(session.call("gather", {"query": "otter cracking a clam", "k": 1}))
        assert "caf\\xe9.md" in block
    finally:
        session.close()
    assert "Traceback" not in (world["base"] / "names-server.log").read_text()
