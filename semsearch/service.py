"""A running ``semsearch serve``: one per index, its token, and the record the CLI finds it by.

The server takes an exclusive lock on ``serve-KEY.lock`` (KEY: a hash of the index path) in
:attr:`~semsearch.config.Settings.server_dir` and holds it while it runs, and writes
``serve-KEY.json`` beside it (:class:`ServerRecord`: its pid, address, index, config file and
token file). The lock is the operating system's (``flock``, or ``LockFileEx`` on Windows), so it
ends with the process, even a killed one: a record whose lock is free is stale. A new server then
replaces it, and :func:`running_server` ignores it without connecting to its port, where another
program may listen by now (and would be sent the token).

The token is ``SS_SERVE_TOKEN`` when set, else the ``serve-token`` file in the state folder, made
once from 32 random bytes (:mod:`secrets`) with mode 0600 and kept, so that clients configured
with it go on working after a restart.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, NamedTuple

from semsearch.config import Settings
from semsearch.errors import ServeError, ServerRunningError

if sys.platform == "win32":
    import msvcrt
else:
    import fcntl

STATUS_URI = "semsearch://status"
"""The MCP resource a server gives the index's status as (``status --json``)."""
CLAIM_WAIT = 1.0
"""Seconds a starting server retries the lock: a CLI's probe (:func:`running_server`) holds it
for a moment when no server runs."""
_HELD = (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK, errno.EDEADLK)


class ServerRecord(NamedTuple):
    """Where a running server listens and what it serves (``serve-KEY.json``).

    ``token_file`` is None when the server's token came from ``SS_SERVE_TOKEN``. ``settings`` is
    :func:`identity` of the server's settings: a CLI with other settings searches in-process.
    """

    pid: int
    host: str
    port: int
    index_path: str
    token_file: str | None
    version: str
    started: float
    settings: dict[str, str | None]

    @property
    def url(self) -> str:
        """The MCP endpoint, for a client on this machine."""
        return f"http://{_url_host(self.host)}:{self.port}/mcp"

    @property
    def local_host(self) -> str:
        """The address a client on this machine connects to (loopback for a wildcard bind)."""
        return _WILDCARDS.get(self.host, self.host)

    def describe(self) -> str:
        """``http://127.0.0.1:8700/mcp (pid 123, started 2026-12-01 10:02:03)``."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"{self.url} (pid {self.pid}, started {stamp})"


_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def _url_host(host: str) -> str:
    local = _WILDCARDS.get(host, host)
    return f"[{local}]" if ":" in local else local


def identity(settings: Settings) -> dict[str, str | None]:
    """What must be the same for a server to answer for a CLI: the index, the config file (read
    again on every call by both) and the model the environment may choose."""
    return {
        "index": str(settings.store_path),
        "config": str(settings.config_path),
        "modelDir": None if settings.model_dir is None else str(settings.model_dir),
        "model": settings.model,
        "modelVariant": settings.model_variant,
    }


def _key(settings: Settings) -> str:
    """The index path's CRC-32, in hex: :mod:`hashlib` would add 2.7 ms (OpenSSL loading) to a
    CLI search through a server. Two indexes whose paths share one (a chance in 4 billion) can
    be served one at a time only: a record names its index, so neither is ever confused for the
    other."""
    return f"{zlib.crc32(os.fsencode(str(settings.store_path))):08x}"


def record_path(settings: Settings) -> Path:
    """The record of the server for this index (present only while one runs, or stale)."""
    return settings.server_dir / f"serve-{_key(settings)}.json"


def _lock_path(settings: Settings) -> Path:
    return settings.server_dir / f"serve-{_key(settings)}.lock"


def _try_lock(handle: IO[bytes]) -> bool:
    """Take the lock on ``handle`` without waiting; False when another process holds it."""
    try:
        if sys.platform == "win32":
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        else:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in _HELD:
            return False
        raise
    return True


def _unlock(handle: IO[bytes]) -> None:
    if sys.platform == "win32":
        msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
    else:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def read_record(settings: Settings) -> ServerRecord | None:
    """The record for this index as written, live or stale; None when there is none (or it
    cannot be read)."""
    try:
        data = json.loads(record_path(settings).read_text(encoding="utf-8"))
        return ServerRecord(**data)
    except (OSError, ValueError, TypeError):
        return None


def running_server(settings: Settings) -> ServerRecord | None:
    """The server running for this index with these settings, or None (none runs, its record is
    stale, or it serves other settings). Connects to nothing: a record counts only while its
    server holds the lock."""
    record = read_record(settings)
    if record is None or record.settings != identity(settings):
        return None
    try:
        with _lock_path(settings).open("rb") as handle:
            if _try_lock(handle):  # nobody holds it: the server that wrote the record is gone
                _unlock(handle)
                return None
    except OSError:
        return None
    return record


class ServerSlot:
    """The right to serve an index: the lock held and the record written while a server runs."""

    def __init__(self, settings: Settings, handle: IO[bytes]) -> None:
        self._settings = settings
        self._handle: IO[bytes] | None = handle
        self._record: ServerRecord | None = None

    @classmethod
    def take(
        cls,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> ServerSlot:
        """Take the index's slot; :class:`ServerRunningError` naming the server that has it.
        ``clock`` and ``sleep`` are seams for tests."""
        folder = settings.server_dir
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            handle = _lock_path(settings).open("a+b")
        except OSError as exc:
            raise ServeError(
                f"Cannot write the server record in {folder}: {exc.strerror or exc}. Set "
                "XDG_RUNTIME_DIR or XDG_STATE_HOME to a folder this user can write."
            ) from exc
        deadline = clock() + CLAIM_WAIT
        try:
            while not _try_lock(handle):
                if clock() >= deadline:
                    raise ServerRunningError(_running_message(settings))
                sleep(0.05)
        except BaseException:
            handle.close()
            raise
        return cls(settings, handle)

    def publish(self, record: ServerRecord) -> None:
        """Write the record (atomically: a reader sees the old one or this one, whole)."""
        path = record_path(self._settings)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            temporary.write_text(json.dumps(record._asdict(), indent=2) + "\n", encoding="utf-8")
            os.replace(temporary, path)
        except OSError as exc:
            raise ServeError(f"Cannot write the server record {path}: {exc}") from exc
        self._record = record

    def release(self) -> None:
        """Remove the record (if it is still this server's) and let the lock go."""
        if self._handle is None:
            return
        if self._record is not None and read_record(self._settings) == self._record:
            with contextlib.suppress(OSError):  # a stale record is harmless: its lock is free
                record_path(self._settings).unlink()
        self._handle.close()  # closing the descriptor releases the lock
        self._handle = None


def _running_message(settings: Settings) -> str:
    record = read_record(settings)
    where = record.describe() if record is not None else "(its record is not written yet)"
    return (
        f"A server for the index {settings.store_path} is running already: {where}. "
        "Use it, or stop it first (one server per index)."
    )


def serve_token(settings: Settings) -> str:
    """The token a server requires: ``SS_SERVE_TOKEN``, else the token file's, made on first
    use (mode 0600). :class:`ServeError` when the file is readable by others or empty."""
    if settings.serve_token:
        return settings.serve_token
    path = settings.serve_token_file
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_token_file(path)
    except OSError as exc:
        raise ServeError(
            f"Cannot make the token file {path}: {exc.strerror or exc}. Set SS_SERVE_TOKEN, "
            "or XDG_STATE_HOME to a folder this user can write."
        ) from exc
    import secrets  # ~2 ms: only `serve` makes a token, not the CLI that finds a server

    token = secrets.token_urlsafe(32)
    with os.fdopen(descriptor, "w", encoding="ascii") as handle:
        handle.write(token + "\n")
    return token


def _read_token_file(path: Path) -> str:
    try:
        info = path.stat()
        token = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ServeError(f"Cannot read the token file {path}: {exc}") from exc
    if sys.platform != "win32" and info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ServeError(
            f"The token file {path} is readable by other users: run `chmod 600 {path}` (or "
            "delete it to have a new token made)."
        )
    if not token:
        raise ServeError(f"The token file {path} is empty: delete it to have a new one made.")
    return token


def client_token(settings: Settings, record: ServerRecord) -> str | None:
    """The token to send to ``record``'s server: ``SS_SERVE_TOKEN``, else its token file's;
    None when this process has neither."""
    if settings.serve_token:
        return settings.serve_token
    if record.token_file is None:
        return None
    try:
        return Path(record.token_file).read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


class IdleClock:
    """How long a server has gone unused: a request in flight (an open event stream too) counts
    as use. Driven from the server's event loop only."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._busy = 0
        self._since = clock()

    def begin(self) -> None:
        """A request started."""
        self._busy += 1

    def end(self) -> None:
        """A request ended."""
        self._busy -= 1
        self._since = self._clock()

    def idle_seconds(self) -> float:
        """Seconds since the last request ended; 0 while one is in flight."""
        return 0.0 if self._busy else self._clock() - self._since


def record_for(settings: Settings, host: str, port: int, version: str) -> ServerRecord:
    """This process's record, serving ``settings``'s index at ``host:port``."""
    token_file = None if settings.serve_token else str(settings.serve_token_file)
    return ServerRecord(
        pid=os.getpid(),
        host=host,
        port=port,
        index_path=str(settings.store_path),
        token_file=token_file,
        version=version,
        started=time.time(),
        settings=identity(settings),
    )
