"""Progress notifications of the MCP ``index`` tool: index events from the worker thread,
throttled, plus one message at once when the run waits for the write lock."""

from __future__ import annotations

import logging
import time

import anyio.from_thread
from mcp.server.mcpserver import Context

from semsearch.indexing.pipeline import FileEvent
from semsearch.store import LockHolder

logger = logging.getLogger("semsearch.mcp")
PROGRESS_INTERVAL = 0.25


class IndexProgress:
    """Forwards index events from the worker thread as throttled progress notifications."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._done_before = 0
        self._folder = ("", -1, 0)  # name, files done, files in total
        self._sent = 0
        self._sent_at = 0.0

    def waiting(self, holder: LockHolder) -> None:
        """Say at once that the run waits for the one holding the writer lock."""
        self._send(0, None, f"waiting for the index run holding the lock ({holder.describe()})")

    def _send(self, done: float, total: float | None, message: str) -> None:
        try:
            anyio.from_thread.run(self._ctx.report_progress, done, total, message)
        except Exception:  # a client gone away must not abort the index run
            logger.debug("progress notification not sent", exc_info=True)

    def __call__(self, event: FileEvent) -> None:
        name, last_done, last_total = self._folder
        if event.folder != name or event.done < last_done:  # the next folder started
            self._done_before += last_total
        self._folder = (event.folder, event.done, event.total)
        done = self._done_before + event.done
        now = time.monotonic()
        is_due = now - self._sent_at >= PROGRESS_INTERVAL or event.done == event.total
        if done <= self._sent or not is_due:
            return
        self._sent, self._sent_at = done, now
        message = f"{event.folder}: {event.done}/{event.total} files, {event.chunks} chunks"
        if event.action in ("embedding", "embedded"):  # the second pass
            message = f"vectors: {event.done}/{event.total}"
        self._send(done, self._done_before + event.total, message)
