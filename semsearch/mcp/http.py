"""``semsearch serve``: the six MCP tools over Streamable HTTP, a warm process for every client.

The tools are :mod:`.server`'s (:func:`~.server.build_server`), served by the MCP SDK's Streamable
HTTP transport at ``/mcp`` under uvicorn. Safe by default:

- it listens on 127.0.0.1 unless told otherwise (``host``);
- every request needs ``Authorization: Bearer TOKEN`` (:func:`~semsearch.service.serve_token`):
  401 without it, compared in constant time;
- the Host and Origin headers are checked first (DNS rebinding: a web page that made its name
  point at 127.0.0.1 sends its own Host and Origin): a Host other than a loopback name or the
  address served gets 421, an Origin other than a loopback one 403 (the SDK's
  ``TransportSecuritySettings``); requests without an Origin (not from a browser) pass;
- one server per index (:class:`~semsearch.service.ServerSlot`), its record removed on the way
  out;
- ``idle_minutes``: it stops once no request was in flight for that long.

Both protocol eras of the SDK are served: sessions opened by ``initialize`` (what MCP clients do;
the ``index`` tool's progress comes as server-sent events) and the 2026-07-28 revision's
single-exchange requests, one POST each, which the CLI's client uses (:mod:`semsearch.cli.remote`).
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
import signal
import socket
from collections.abc import Callable, Iterable, Iterator

import anyio
import uvicorn
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from semsearch import __version__
from semsearch.config import Settings
from semsearch.errors import UsageError
from semsearch.mcp.server import Tools, build_server
from semsearch.service import IdleClock, ServerRecord, ServerSlot, record_for, serve_token

logger = logging.getLogger("semsearch.mcp")

DEFAULT_PORT = 8700
PATH = "/mcp"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
IDLE_CHECK_SECONDS = 30.0  # the longest an idle server waits between looks at its clock
SHUTDOWN_SECONDS = 3  # open event streams get this long to close when the server stops


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine's loopback (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def security_settings(host: str) -> TransportSecuritySettings:
    """The Host and Origin values accepted: the loopback names, and ``host`` when it is a
    particular address (a wildcard such as 0.0.0.0 names none)."""
    names = list(LOOPBACK_NAMES)
    if host not in ("0.0.0.0", "::", "") and not is_loopback(host):
        names.append(f"[{host}]" if ":" in host else host)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:*" for name in names],
        allowed_origins=[f"http://{name}:*" for name in names],
    )


class Guard:
    """The checks every HTTP request passes before the MCP transport sees it: Host and Origin,
    then the bearer token; and the idle clock's count of requests in flight."""

    def __init__(
        self, app: ASGIApp, token: str, security: TransportSecuritySettings, clock: IdleClock
    ) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()
        self._origin_check = TransportSecurityMiddleware(security)
        self._clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan events
            await self._app(scope, receive, send)
            return
        request = Request(scope)
        refused = await self._origin_check.validate_request(request)
        if refused is None and not self._is_authorized(request):
            refused = Response(
                "Missing or wrong bearer token: send `Authorization: Bearer TOKEN` (see "
                "`semsearch config` for the token file).\n",
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="semsearch"'},
            )
        if refused is not None:
            await refused(scope, receive, send)
            return
        self._clock.begin()
        try:
            await self._app(scope, receive, send)
        finally:
            self._clock.end()

    def _is_authorized(self, request: Request) -> bool:
        given = request.headers.get("authorization", "").encode("latin-1")
        return hmac.compare_digest(given, self._expected)


class _Server(uvicorn.Server):
    """uvicorn's server, but a signal only stops it: uvicorn raises the signal again once it has
    stopped, which would end the process (SIGTERM) before the record is removed."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def listen(host: str, port: int) -> socket.socket:
    """A listening socket; :class:`UsageError` when the address is taken or unknown."""
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = info[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise UsageError(f"Cannot listen on {host}: {exc.strerror or exc}.") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"Cannot listen on {host} port {port}: {exc.strerror or exc}. Pick another port "
            "with --port N (0: any free port)."
        ) from exc
    return sock


async def _announce(server: uvicorn.Server, announce: Callable[[], None]) -> None:
    """Run ``announce`` once the server accepts requests (its signal handlers are in place)."""
    while not server.started:
        if server.should_exit:
            return
        await anyio.sleep(0.01)
    announce()


async def _stop_when_idle(server: uvicorn.Server, clock: IdleClock, limit: float) -> None:
    while not server.should_exit:
        idle = clock.idle_seconds()
        if idle >= limit:
            logger.warning("no request for %.0f s: stopping (--idle-exit)", idle)
            server.should_exit = True
            return
        await anyio.sleep(min(limit - idle, IDLE_CHECK_SECONDS))


def serve(
    index_flag: str | None,
    settings: Settings,
    host: str,
    port: int,
    *,
    idle_minutes: float | None = None,
    warned: Iterable[str] = (),
    on_ready: Callable[[ServerRecord], None] | None = None,
) -> None:
    """Serve the tools over HTTP until interrupted (SIGINT, SIGTERM) or idle for
    ``idle_minutes``. The record is written, and ``on_ready`` hears it, once requests are
    answered."""
    token = serve_token(settings)
    with contextlib.ExitStack() as stack:
        slot = ServerSlot.take(settings)
        stack.callback(slot.release)
        sock = stack.enter_context(listen(host, port))
        tools = Tools(index_flag, warned=warned)
        stack.callback(tools.close)
        clock = IdleClock()
        security = security_settings(host)
        app = build_server(index_flag, tools).streamable_http_app(
            streamable_http_path=PATH, transport_security=security, host=host
        )
        config = uvicorn.Config(
            Guard(app, token, security, clock),
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=SHUTDOWN_SECONDS,
        )
        server = _Server(config)
        record = record_for(settings, host, sock.getsockname()[1], __version__)

        def announce() -> None:
            slot.publish(record)
            if on_ready is not None:
                on_ready(record)

        async def run() -> None:
            async with anyio.create_task_group() as group:
                group.start_soon(_announce, server, announce)
                if idle_minutes is not None:
                    group.start_soon(_stop_when_idle, server, clock, idle_minutes * 60)
                await server.serve(sockets=[sock])
                group.cancel_scope.cancel()

        anyio.run(run)
