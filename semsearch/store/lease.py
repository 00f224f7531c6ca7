"""The writer lease of an index on object storage: one index run (or removal) writes at a time.

There is no lock file to hold on a bucket, and a LanceDB table is no lock either (two processes
creating one both succeed now and then). The lease is one object, ``<prefix>/LEASE_NAME``,
taken with a conditional PUT (``If-None-Match: *``: of writers racing for it, exactly one gets
it) and holding ``{"host", "pid", "started"}``. The holder renews it four times a term (a PUT
with ``If-Match`` of its own ETag) from a background thread and deletes it when done (a DELETE
with ``If-Match``). A lease not renewed for a term (``LEASE_SECONDS``) by the server's clock
(its ``Date`` less the object's ``Last-Modified``) belongs to a writer that crashed: a waiter
takes it over with ``If-Match`` of the ETag it saw, so of several waiters only one does.

A holder whose renewal finds the lease taken over (it stalled for longer than the lease) stops
with :class:`StoreError` when its run ends, and says so. S3 and S3-compatible servers only
(:mod:`.s3`); on ``gs://`` and ``az://`` writers are not serialised (the README says so).
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator

from semsearch.config import RemoteLocation
from semsearch.errors import LockedError, StoreError
from semsearch.store.lock import LockHolder
from semsearch.store.s3 import Response, S3Client, refused_message

LEASE_NAME = "semsearch-writer.lease"
LEASE_SECONDS = 60.0  # a lease not renewed for this long is free
POLL_SECONDS = 1.0  # how often a waiter looks again


@contextlib.contextmanager
def write_lease(
    location: RemoteLocation,
    wait_seconds: float,
    on_wait: Callable[[LockHolder], None] | None = None,
    term: float = LEASE_SECONDS,
) -> Iterator[None]:
    """Hold the writer lease of the index at ``location``, waiting up to ``wait_seconds``.

    ``on_wait`` hears once, with the holder, as soon as the lease is found taken. A lease left
    unrenewed for ``term`` seconds (its writer crashed) is taken over. Raises
    ``LockedError`` when another writer still holds it after the wait, and ``StoreError`` when
    the store cannot be reached, refuses the credentials or the write.
    """
    if location.scheme != "s3":
        yield
        return
    lease = _Lease(S3Client(location), location, term)
    lease.take(wait_seconds, on_wait)
    try:
        yield
    finally:
        lease.release()
    if lease.lost:
        raise StoreError(
            f"This index run lost its writer lease on {location}: it stalled for more than "
            f"{term:.0f} s and another writer took over. Run `semsearch index` again."
        )


class _Lease:
    def __init__(self, client: S3Client, location: RemoteLocation, term: float) -> None:
        self._client = client
        self._location = location
        self._term = term
        self._key = "/".join(filter(None, [location.prefix, LEASE_NAME]))
        self._etag = ""
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.lost = False

    def take(self, wait_seconds: float, on_wait: Callable[[LockHolder], None] | None) -> None:
        deadline = time.monotonic() + wait_seconds
        told = False
        started = time.time()
        while True:
            answer = self._put({"If-None-Match": "*"}, started)
            if answer.status == 200:
                break
            if answer.status not in (409, 412):  # 409: a conditional PUT racing another
                raise StoreError(self._refused(answer))
            current = self._client.request("GET", self._key)
            if current.status == 404:  # released in between: try again at once
                continue
            if current.status != 200:
                raise StoreError(self._refused(current))
            holder = _holder(current.body)
            if _age(current) > self._term:  # its writer stopped renewing it: crashed
                taken = self._put({"If-Match": current.headers.get("etag", "")}, started)
                if taken.status == 200:
                    break
                continue
            if time.monotonic() >= deadline:
                raise LockedError(
                    f"Another `semsearch index` is writing {self._location} "
                    f"({holder.describe()}). Wait for it to finish, then run this again."
                )
            if on_wait is not None and not told:
                on_wait(holder)
                told = True
            time.sleep(POLL_SECONDS)
        self._renewer = threading.Thread(target=self._renew, args=(started,), daemon=True)
        self._renewer.start()

    def _put(self, condition: dict[str, str], started: float) -> Response:
        record = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": started,
            "renewed": time.time(),  # a new ETag at every renewal
        }
        body = json.dumps(record).encode()
        answer = self._client.request("PUT", self._key, body, condition)
        if answer.status == 200:
            self._etag = answer.headers.get("etag", "")
        return answer

    def _renew(self, started: float) -> None:
        while not self._stop.wait(self._term / 4):
            try:
                answer = self._put({"If-Match": self._etag}, started)
            except StoreError:  # the network may come back before the lease runs out
                continue
            if answer.status == 412:
                self.lost = True
                return

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if not self.lost:
            with contextlib.suppress(StoreError):  # the lease runs out by itself
                self._client.request("DELETE", self._key, headers={"If-Match": self._etag})

    def _refused(self, answer: Response) -> str:
        return refused_message(self._location, answer.code or str(answer.status), writing=True)


def _holder(body: bytes) -> LockHolder:
    """Who holds the lease, from its JSON."""
    try:
        record = json.loads(body)
        return LockHolder(int(record["pid"]), float(record["started"]), str(record["host"]))
    except (ValueError, KeyError, TypeError):
        return LockHolder(None, None)


def _age(answer: Response) -> float:
    """Seconds since the lease was last written, by the server's clock (0 when unknown)."""
    try:
        now = email.utils.parsedate_to_datetime(answer.headers["date"])
        written = email.utils.parsedate_to_datetime(answer.headers["last-modified"])
    except (KeyError, TypeError, ValueError):
        return 0.0
    return (now - written).total_seconds()
