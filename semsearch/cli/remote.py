"""The CLI's client of a running ``semsearch serve`` (:mod:`semsearch.mcp.http`), for commands
that a warm process answers faster than a new one loads the library and the model.

One POST per call, written on a socket with the standard library: a single-exchange MCP request
of the 2026-07-28 revision (no ``initialize``, no session), which the MCP SDK's Streamable HTTP
transport serves beside the sessions MCP clients open. Measured here: the SDK's client takes
~0.5 s to import and ``http.client`` ~15 ms, a quarter of a search's budget; the 2025 handshake
(initialize, initialized, the call, closing the session) ~45 ms more than one exchange.

Whatever goes wrong (no server, a stale record, no token, a refused or failed request, a tool
error, an answer that cannot be printed exactly as this process would print its own) gives
None, and the command runs in-process: the output is the same either way, only slower.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any, NamedTuple

from semsearch.config import Settings
from semsearch.service import ServerRecord, client_token, running_server

# The tools' caps (semsearch.mcp.schema's MAX_K and MAX_CONTEXT_LINES), copied so that the CLI
# loads no MCP code; tests/test_serve.py checks that they agree.
TOOL_MAX_K = 50
TOOL_MAX_CONTEXT_LINES = 100
PROTOCOL_VERSION = "2026-07-28"
CONNECT_SECONDS = 2.0
ANSWER_SECONDS = 120.0  # a search may wait for the server's index update of a few files
_META = {
    "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "semsearch-cli", "version": "1"},
}


class Remote:
    """A running server for this process's index and settings, and the token it takes."""

    def __init__(self, record: ServerRecord, token: str) -> None:
        self.record = record
        self._token = token
        self._calls = 0

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
        """A tool's structured content; None for an error result or a failed request."""
        result = self._request("tools/call", {"name": tool, "arguments": arguments}, tool)
        if result is None or result.get("isError"):
            return None
        content = result.get("structuredContent")
        return content if isinstance(content, dict) else None

    def read(self, uri: str) -> str | None:
        """A resource's text; None when the server could not give it."""
        result = self._request("resources/read", {"uri": uri}, uri)
        if result is None:
            return None
        contents = result.get("contents")
        if not isinstance(contents, list) or len(contents) != 1:
            return None
        text = contents[0].get("text")
        return text if isinstance(text, str) else None

    def _request(self, method: str, params: dict[str, Any], name: str) -> dict[str, Any] | None:
        self._calls += 1
        request_id = self._calls
        body = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": method,
            "params": {**params, "_meta": _META},
        }
        headers = {
            "Authorization": f"Bearer {self._token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": PROTOCOL_VERSION,
            "Mcp-Method": method,
            "Mcp-Name": name,
        }
        try:  # a text that is not UTF-8 (a surrogate escape) cannot go: search here
            encoded = json.dumps(body, ensure_ascii=False).encode("utf-8")
            status, fields, payload = _post(self.record, headers, encoded)
        except (OSError, ValueError):
            return None
        if status != 200:
            return None
        return _answer(fields.get("content-type", ""), payload, request_id)


def connect(settings: Settings) -> Remote | None:
    """The server running for this index with these settings, if any and if this process has
    its token."""
    record = running_server(settings)
    if record is None:
        return None
    token = client_token(settings, record)
    return None if token is None else Remote(record, token)


def _post(
    record: ServerRecord, headers: dict[str, str], body: bytes
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 POST to the server's ``/mcp``, the connection closed after the answer."""
    host = record.local_host
    shown = f"[{host}]" if ":" in host else host
    lines = ["POST /mcp HTTP/1.1", f"Host: {shown}:{record.port}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(f"Content-Length: {len(body)}")
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    # A socket of the address's family, not create_connection: its name lookup loads the IDNA
    # codec (1 ms) even for a literal address such as 127.0.0.1 (a host name works here too).
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(CONNECT_SECONDS)
        sock.connect((host, record.port))
        sock.settimeout(ANSWER_SECONDS)
        sock.sendall(request)
        received = []
        while chunk := sock.recv(65536):
            received.append(chunk)
    head, _, payload = b"".join(received).partition(b"\r\n\r\n")
    status_line, *field_lines = head.decode("latin-1").split("\r\n")
    status = int(status_line.split()[1])
    fields = {}
    for line in field_lines:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    if "chunked" in fields.get("transfer-encoding", "").lower():
        payload = _unchunk(payload)
    return status, fields, payload


def _unchunk(payload: bytes) -> bytes:
    """A chunked body's bytes (RFC 9112 section 7.1)."""
    parts: list[bytes] = []
    while True:
        size_line, _, payload = payload.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return b"".join(parts)
        parts.append(payload[:size])
        payload = payload[size + 2 :]


def _answer(content_type: str, payload: bytes, request_id: int) -> dict[str, Any] | None:
    """The JSON-RPC result for ``request_id`` in a JSON body or a stream of server-sent events;
    None for an error or no answer."""
    if content_type.startswith("text/event-stream"):
        messages = []
        for event in payload.decode("utf-8").replace("\r\n", "\n").split("\n\n"):
            data = [line[5:].lstrip() for line in event.split("\n") if line.startswith("data:")]
            if data:
                messages.append(json.loads("\n".join(data)))
    else:
        messages = [json.loads(payload)]
    for message in messages:
        if isinstance(message, dict) and message.get("id") == request_id:
            result = message.get("result")
            return result if isinstance(result, dict) else None
    return None


def is_on_disk(paths: list[str]) -> bool:
    """Whether every path a server named is there: a file name whose bytes are not UTF-8 reaches
    the client written ``\\xHH`` (MCP's JSON is UTF-8), which names no file, and this process
    prints such a name in its own way."""
    return all(os.path.lexists(path) for path in paths)


def _folder_path(row: dict[str, Any]) -> str:
    """The folder's path of a hit or copy: its ``filePath`` is that folder's path, "/", its
    ``relPath``."""
    path: str = row["filePath"]
    return path[: len(path) - len(row["relPath"])].rstrip("/") or "/"


class ServedCopy(NamedTuple):
    """Another place of a served hit's text (``CopyJson``)."""

    folder: str
    folder_path: str
    rel: str
    start_line: int
    page: int | None

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> ServedCopy:
        return cls(
            folder=row["folder"],
            folder_path=_folder_path(row),
            rel=row["relPath"],
            start_line=row["startLine"],
            page=row.get("page"),
        )


class ServedHit(NamedTuple):
    """A search hit read from the ``search`` or ``gather`` tool (``--explain`` and ``--json``,
    which show the ranking's internals, run in-process, so those fields stay empty)."""

    path: str
    folder: str
    folder_path: str
    rel: str
    start_line: int
    end_line: int
    page: int | None
    score: float
    text: str
    copies: tuple[ServedCopy, ...] = ()
    copy_count: int = 0
    vector_rank: int | None = None
    lexical_rank: int | None = None
    definition_rank: int | None = None
    named_rank: int | None = None
    priors: tuple[str, ...] = ()
    cosine_rank: int | None = None
    path_cosine: float | None = None
    coherence: float | None = None

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> ServedHit:
        """A ``HitJson`` (a gather result has no text: its passage is read apart)."""
        return cls(
            path=row["filePath"],
            folder=row["folder"],
            folder_path=_folder_path(row),
            rel=row["relPath"],
            start_line=row["startLine"],
            end_line=row["endLine"],
            page=row.get("page"),
            score=row["score"],
            text=row.get("text", ""),
            copies=tuple(ServedCopy.from_json(copy) for copy in row.get("copies", ())),
            copy_count=row.get("copyCount", 0),
        )


class ServedPassage(NamedTuple):
    """The lines the ``gather`` tool shows for a hit (``PassageJson``)."""

    first_line: int
    text: str
    note: str = ""

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> ServedPassage:
        """A ``PassageJson``."""
        return cls(row["startLine"], row["text"], row.get("note", ""))


class ServedLines(NamedTuple):
    """A line range read by the ``cat_file`` tool (``LinesOutput``)."""

    first_line: int
    last_line: int
    text: str

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> ServedLines:
        """A ``LinesOutput``."""
        return cls(row["startLine"], row["endLine"], row["text"])
