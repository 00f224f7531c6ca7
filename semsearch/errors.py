"""The one exception hierarchy of semsearch.

Every error a user can trigger is a :class:`SemsearchError` whose message says what failed,
names the path or value, and says what to do next. The CLI prints it without a traceback.
"""

from __future__ import annotations


class SemsearchError(Exception):
    """Base of every expected semsearch failure."""


class ConfigError(SemsearchError):
    """Raised when the config file is malformed or a setting has the wrong type or value."""


class UsageError(SemsearchError):
    """Raised when an argument is invalid (bad number, unknown folder, bad glob)."""


class NoMatchingFilesError(SemsearchError):
    """Raised when a search's folder or path filters leave none of the indexed files to search."""


class ModelError(SemsearchError):
    """Raised when the embedding model or tokenizer is missing, corrupt or fails to run."""


class ModelMismatchError(SemsearchError):
    """Raised when the index was built with another model than the one configured."""


class IndexMissingError(SemsearchError):
    """Raised when a search or status needs an index file that does not exist yet."""


class StoreError(SemsearchError):
    """Raised when the index file cannot be opened, read or written."""


class LockedError(SemsearchError):
    """Raised when another process holds the index write lock for longer than we wait."""


class ExtractError(SemsearchError):
    """Raised when a PDF or DOCX (or any file) cannot be turned into text."""


class PathRefusedError(SemsearchError):
    """Raised when a path lies outside the configured folders or is excluded by ignore rules."""


class ReadOnlyError(StoreError):
    """Raised when an index on read-only media (or without write access) is asked to change."""


class DiskFullError(StoreError):
    """Raised when a write to the index fails because the disk (or the file's quota) is full."""


class IndexDamagedError(StoreError):
    """Raised when the index file (or LanceDB folder) is damaged or is not an index at all:
    SQLite or LanceDB cannot read it. ``semsearch index --rebuild`` sets it aside and rebuilds.

    ``problem`` is what is wrong, in a few words (the message says it too, with the path and
    what to do).
    """

    def __init__(self, message: str, problem: str) -> None:
        super().__init__(message)
        self.problem = problem


class ServeError(SemsearchError):
    """Raised when ``semsearch serve`` cannot start: its token file or its record cannot be made
    or read, or the token file is readable by other users."""


class ServerRunningError(UsageError):
    """Raised when ``semsearch serve`` finds a server running for the same index already (the
    message says where)."""
