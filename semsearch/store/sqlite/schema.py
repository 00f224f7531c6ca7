"""The SQLite index's DDL and migrations, and how its connections are opened.

The format itself is described in :mod:`semsearch.store.sqlite.store`.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sqlite3
import stat
from pathlib import Path

from semsearch.errors import DiskFullError, ReadOnlyError, StoreError
from semsearch.store.base import BlockMismatchError, listed_rel, text_hash
from semsearch.store.lock import disk_full_message, read_only_message
from semsearch.text.lexical import chunk_defines, chunk_terms

SCHEMA_VERSION = 10
BUSY_TIMEOUT_MS = 30_000
# What SQLite keeps beside a database file: its write-ahead log, the log's index, and the
# rollback journal of a file in another journal mode.
COMPANIONS = ("-wal", "-shm", "-journal")
LOG_WAIT_MS = 1_000  # how long an index run's end waits for reads to give the log back

# Schema version 1: the tables. Its first form also had an external-content FTS5 table over
# `text`; version 2 replaced it with the contentless three-column table (FTS_SQL).
TABLES_SQL = """
    CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE folders(
        id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, name TEXT NOT NULL, last_indexed REAL);
    CREATE TABLE files(
        id INTEGER PRIMARY KEY,
        folder_id INTEGER NOT NULL REFERENCES folders(id) ON DELETE CASCADE,
        rel TEXT NOT NULL, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL, sha256 TEXT,
        status TEXT NOT NULL, kind TEXT, UNIQUE(folder_id, rel));
    CREATE TABLE chunks(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
        ord INTEGER NOT NULL, start_line INTEGER NOT NULL, end_line INTEGER NOT NULL,
        start_offset INTEGER NOT NULL, end_offset INTEGER NOT NULL, page INTEGER,
        text TEXT NOT NULL, vector BLOB NOT NULL);
    CREATE INDEX chunks_file ON chunks(file_id);
"""

TRIGGERS_SQL = """
    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, text, terms, defines) VALUES (new.id, new.text,
            ss_terms((SELECT rel FROM files WHERE id = new.file_id), new.text),
            ss_defines(new.text));
    END;
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text, terms, defines) VALUES ('delete', old.id,
            old.text, ss_terms((SELECT rel FROM files WHERE id = old.file_id), old.text),
            ss_defines(old.text));
    END;
"""

_DROP_CHUNK_TRIGGERS = """
    DROP TRIGGER IF EXISTS chunks_ai;
    DROP TRIGGER IF EXISTS chunks_ad;
"""
# How the insert trigger notes a copy (version 7 on): its text is stored already.
_NOTE_COPY = """
        INSERT INTO copies(id) SELECT new.id WHERE EXISTS(
            SELECT 1 FROM chunks WHERE text_hash = new.text_hash AND id != new.id);
"""

# The contentless FTS5 table, dropped and made anew with no row (versions 2 and 7).
NEW_FTS_TABLE_SQL = (
    _DROP_CHUNK_TRIGGERS
    + """
    DROP TABLE IF EXISTS chunks_fts;
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        text, terms, defines, content='', tokenize='porter unicode61 remove_diacritics 2');
"""
)

FTS_SQL = (
    NEW_FTS_TABLE_SQL
    + TRIGGERS_SQL
    + """
    INSERT INTO chunks_fts(rowid, text, terms, defines)
        SELECT c.id, c.text, ss_terms(x.rel, c.text), ss_defines(c.text)
        FROM chunks c JOIN files x ON x.id = c.file_id;
"""
)

# Version 3: `vector` may be NULL (a chunk waiting for its vector) and `text_hash` keys vectors
# for reuse. SQLite cannot relax NOT NULL in place, so the table is copied with its ids (the FTS
# rows keep pointing at them) and its AUTOINCREMENT counter (ids are never reused).
NULLABLE_VECTORS_SQL = (
    """
    CREATE TABLE chunks_v3(
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
        ord INTEGER NOT NULL, start_line INTEGER NOT NULL, end_line INTEGER NOT NULL,
        start_offset INTEGER NOT NULL, end_offset INTEGER NOT NULL, page INTEGER,
        text TEXT NOT NULL, vector BLOB, text_hash TEXT NOT NULL);
    INSERT INTO chunks_v3(id, file_id, ord, start_line, end_line, start_offset, end_offset, page,
            text, vector, text_hash)
        SELECT id, file_id, ord, start_line, end_line, start_offset, end_offset, page, text,
            vector, ss_text_hash(text) FROM chunks;
    DELETE FROM sqlite_sequence WHERE name = 'chunks_v3';
    INSERT INTO sqlite_sequence(name, seq) SELECT 'chunks_v3', seq FROM sqlite_sequence
        WHERE name = 'chunks';
    DROP TABLE chunks;
    ALTER TABLE chunks_v3 RENAME TO chunks;
    CREATE INDEX chunks_file ON chunks(file_id);
    CREATE INDEX chunks_text_hash ON chunks(text_hash);
    CREATE INDEX chunks_pending ON chunks(id) WHERE vector IS NULL;
"""
    + TRIGGERS_SQL
)


# Version 4: each file's path vector (the embedding of its rel path: the ranking's path term),
# NULL until the second pass of an index run embeds it.
PATH_VECTORS_SQL = "ALTER TABLE files ADD COLUMN path_vector BLOB;"
# The last version without path vectors: read-only, such a file is searched without them.
NO_PATH_VECTORS_VERSION = 3

# Version 5: chunk vectors are written as float16 (768 bytes for 384 dimensions instead of 1,536).
# Nothing is rewritten: a version-4 file's float32 rows are read by their size, and the version
# number keeps an older semsearch from reading float16 rows as float32.
FLOAT16_VECTORS_SQL = ""

# Version 6: chunk vectors packed as int8 in blocks (semsearch.store.sqlite.blocks), the vector
# arm of a large index; the rows keep their float16 vectors, which score the scan's candidates.
# Nothing is packed here: the next index run packs what an older file holds.
PACKED_VECTORS_SQL = """
    CREATE TABLE IF NOT EXISTS vector_blocks(
        id INTEGER PRIMARY KEY, first_id INTEGER NOT NULL, last_id INTEGER NOT NULL,
        chunk_ids BLOB NOT NULL, file_ids BLOB NOT NULL, scales BLOB NOT NULL,
        errors BLOB NOT NULL, norms BLOB NOT NULL, codes BLOB NOT NULL);
    CREATE TABLE IF NOT EXISTS vector_gone(id INTEGER PRIMARY KEY);
    CREATE TRIGGER IF NOT EXISTS chunks_packed_ad AFTER DELETE ON chunks
        WHEN old.id <= (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'packed_through')
    BEGIN
        INSERT OR IGNORE INTO vector_gone(id) VALUES (old.id);
    END;
"""

# Version 7: each text's chunks but one are copies (their ids in `copies`), and their FTS rows
# carry COPY_MARK in `terms` (added by the three-argument `ss_terms`), so the BM25 arm can score
# one row per text (semsearch.store.sqlite.lexical). The chunk of a text that is no copy is its
# lowest id: a new chunk is a copy when its text is stored already; when the first goes, the
# lowest id left stops being a copy and its FTS row is written again without the mark. A table
# of its own, as a column would rewrite every chunk row when an older file is upgraded. The
# upgrade rebuilds the FTS rows (FTS_REBUILD_SQL) to mark the copies. Vector blocks gain each
# chunk's first (`firsts`, see semsearch.store.packed): copies are not scanned twice; blocks
# written before have none, and the next index run writes them anew when copies exist.
COPIES_VERSION = 7
COPY_MARK = "ss0copy0"  # one token for the porter/unicode61 tokenizer, kept as it is
_IS_COPY = "{0}.id IN (SELECT id FROM copies)"
_FIRST_LEFT = (  # the chunk that stands for old's text once old is gone, if it is marked a copy
    "(SELECT min(id) FROM chunks WHERE text_hash = old.text_hash) AS id"
    " WHERE id IN (SELECT id FROM copies)"
)
COPY_TRIGGERS_SQL = f"""{_DROP_CHUNK_TRIGGERS}
    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN{_NOTE_COPY}
        INSERT INTO chunks_fts(rowid, text, terms, defines) VALUES (new.id, new.text,
            ss_terms((SELECT rel FROM files WHERE id = new.file_id), new.text,
                {_IS_COPY.format("new")}),
            ss_defines(new.text));
    END;
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text, terms, defines) VALUES ('delete', old.id,
            old.text,
            ss_terms((SELECT rel FROM files WHERE id = old.file_id), old.text,
                {_IS_COPY.format("old")}),
            ss_defines(old.text));
        DELETE FROM copies WHERE id = old.id;
        INSERT INTO chunks_fts(chunks_fts, rowid, text, terms, defines)
            SELECT 'delete', c.id, c.text, ss_terms(x.rel, c.text, 1), ss_defines(c.text)
            FROM chunks c JOIN files x ON x.id = c.file_id
            WHERE c.id = (SELECT id FROM (SELECT {_FIRST_LEFT}));
        INSERT INTO chunks_fts(rowid, text, terms, defines)
            SELECT c.id, c.text, ss_terms(x.rel, c.text, 0), ss_defines(c.text)
            FROM chunks c JOIN files x ON x.id = c.file_id
            WHERE c.id = (SELECT id FROM (SELECT {_FIRST_LEFT}));
        DELETE FROM copies WHERE id = (SELECT id FROM (SELECT {_FIRST_LEFT}));
    END;
"""
COPIES_SQL = (
    """
    ALTER TABLE vector_blocks ADD COLUMN firsts BLOB;
    CREATE TABLE IF NOT EXISTS copies(id INTEGER PRIMARY KEY);
    DELETE FROM copies;
    INSERT INTO copies(id) SELECT id FROM chunks
        WHERE id > (SELECT min(id) FROM chunks c WHERE c.text_hash = chunks.text_hash);
"""
    + COPY_TRIGGERS_SQL
)
# Version 8: files are found by their content. A new file whose bytes and name a stored file
# has takes that file's chunks instead of being tokenised and chunked again (a tree of copies;
# see Store.copied_chunks).
FILES_BY_CONTENT_SQL = "CREATE INDEX IF NOT EXISTS files_sha256 ON files(sha256);"

# Version 9: only the first chunk of each text (the one not in `copies`) has an FTS row; copies
# have none. BM25 scores each text once and its copies follow it (semsearch.store.sqlite.lexical);
# a copy costs no full-text work when written (about three quarters of what a copied file cost
# the first pass once its chunks come from the store), no FTS pages, and no postings for a
# query to walk. When a text's first chunk goes, the lowest id left takes its FTS row. The
# upgrade rebuilds the FTS rows (FTS_REBUILD_SQL) without the copies' rows and marks.
FIRSTS_VERSION = 9
_IS_FIRST = "{0}.id NOT IN (SELECT id FROM copies)"
FIRSTS_TRIGGERS_SQL = f"""{_DROP_CHUNK_TRIGGERS}
    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN{_NOTE_COPY}
        INSERT INTO chunks_fts(rowid, text, terms, defines)
            SELECT new.id, new.text,
                ss_terms((SELECT rel FROM files WHERE id = new.file_id), new.text),
                ss_defines(new.text)
            WHERE {_IS_FIRST.format("new")};
    END;
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, text, terms, defines)
            SELECT 'delete', old.id, old.text,
                ss_terms((SELECT rel FROM files WHERE id = old.file_id), old.text),
                ss_defines(old.text)
            WHERE {_IS_FIRST.format("old")};
        DELETE FROM copies WHERE id = old.id;
        INSERT INTO chunks_fts(rowid, text, terms, defines)
            SELECT c.id, c.text, ss_terms(x.rel, c.text), ss_defines(c.text)
            FROM chunks c JOIN files x ON x.id = c.file_id
            WHERE c.id = (SELECT id FROM (SELECT {_FIRST_LEFT}));
        DELETE FROM copies WHERE id = (SELECT id FROM (SELECT {_FIRST_LEFT}));
    END;
"""
# The FTS rows of every text's first chunk under the current rules (run when TERMS_VERSION
# changes, and by the upgrade to version 9); FTS_SQL is version 2's, for the migrations before
# version 7, and COPY_TRIGGERS_SQL version 7's.
FTS_REBUILD_SQL = (
    NEW_FTS_TABLE_SQL
    + FIRSTS_TRIGGERS_SQL
    + f"""
    INSERT INTO chunks_fts(rowid, text, terms, defines)
        SELECT c.id, c.text, ss_terms(x.rel, c.text), ss_defines(c.text)
        FROM chunks c JOIN files x ON x.id = c.file_id WHERE {_IS_FIRST.format("c")};
"""
)

# Version 10: a vector block stores the codes of its first chunks only (sqlite.blocks). Nothing
# in the file changes: older blocks, which store every chunk's, are read as they are, and the
# next index run (pack) trims them. The version keeps an older semsearch, which would find the
# new blocks "not whole", from reading the file.
FIRSTS_ONLY_BLOCKS_SQL = ""

# Migration n takes the schema from version n to n + 1. FTS_REBUILD_SQL also runs whenever the
# stored terms_version differs from lexical.TERMS_VERSION (the FTS columns are derived data), and
# for a file before version 9.
MIGRATIONS: tuple[str, ...] = (
    TABLES_SQL,
    FTS_SQL,
    NULLABLE_VECTORS_SQL,
    PATH_VECTORS_SQL,
    FLOAT16_VECTORS_SQL,
    PACKED_VECTORS_SQL,
    COPIES_SQL,
    FILES_BY_CONTENT_SQL,
    FIRSTS_TRIGGERS_SQL,  # and FTS_REBUILD_SQL, for any file before version 9
    FIRSTS_ONLY_BLOCKS_SQL,
)
PAGE_SIZE = 16_384  # ~2.2 KB rows: 4 KiB pages waste about a third of the file
AUTO_VACUUM_INCREMENTAL = 2  # PRAGMA auto_vacuum value: free pages are returned on request
SQLITE_READONLY, SQLITE_FULL, SQLITE_IOERR = 8, 13, 10  # primary result codes
NO_SPACE_BYTES = 64 * 1024  # less free space than this beside an index that failed I/O: full
SQLITE_CORRUPT, SQLITE_NOTADB = 11, 26
# What SQLite and Python's sqlite3 say when a file's pages or rows are not what was written
# (seen overwriting each page of a real index in turn): corrupt pages, an FTS5 table that cannot
# load its shadow tables, text that is no longer UTF-8 (semsearch writes only str), and a
# trigger's function given a chunk whose file row is unreadable.
DAMAGE_SIGNS: dict[str, str] = {
    "file is not a database": "it is not a SQLite database",
    "malformed": "",  # "database disk image is malformed", "malformed database schema"
    "vtable constructor failed": "",
    "fts5: corrupt": "",
    "Could not decode to UTF-8": "it holds text that is not UTF-8",
    "user-defined function raised exception": "its chunks no longer match their files",
}


def read_int_meta(conn: sqlite3.Connection, key: str) -> int:
    """An integer meta value (``generation``, ``dim``, ``packed_through``, ...), 0 when unset."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return 0 if row is None else int(row[0])


def has_column(conn: sqlite3.Connection, table: str, column: str) -> bool:
    """True when ``table`` has ``column`` (a read-only file of an older schema may lack it)."""
    return column in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


_ADD_COLUMN = re.compile(r"ALTER TABLE (\w+) ADD COLUMN (\w+)", re.IGNORECASE)


def adds_existing_column(conn: sqlite3.Connection, statement: str) -> bool:
    """Whether ``statement`` adds a column the table has already (a migration run again on a
    file that got that far: SQLite has no ``ADD COLUMN IF NOT EXISTS``)."""
    found = _ADD_COLUMN.match(statement.strip())
    return found is not None and has_column(conn, found[1], found[2])


def is_index_file(path: Path) -> bool:
    """Whether an index is at ``path``. A zero-byte file is none yet: what an index run stopped
    before its first commit leaves (or `touch`); the next run creates the index in it."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # opening it says what is wrong
    return info.st_size > 0 or not stat.S_ISREG(info.st_mode)


def connect(path: Path, read_only: bool = False) -> sqlite3.Connection:
    """A connection with the busy timeout, foreign keys and the SQL functions the triggers call.

    ``read_only`` (the file or its folder is not writable): ``mode=ro``, which reads the WAL when
    its -shm file exists; without one on read-only media, ``immutable=1``, which is safe there as
    nobody can write the file. A WAL left with content but no -shm cannot be read that way.
    """
    if not read_only:
        return _configured(str(path), uri=False)
    target = path.resolve().as_uri()
    try:
        conn = _configured(f"{target}?mode=ro", uri=True)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError:
        wal = path.with_name(path.name + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise StoreError(
                f"Index {path} is read-only and its write-ahead log {wal.name} holds changes "
                "that cannot be read without write access. Copy both files somewhere writable."
            ) from None
    return _configured(f"{target}?immutable=1", uri=True)


def _configured(target: str, uri: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(
        target,
        timeout=BUSY_TIMEOUT_MS / 1000,
        isolation_level=None,
        check_same_thread=False,
        uri=uri,
    )
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.create_function("ss_terms", 2, _terms, deterministic=True)
    conn.create_function("ss_terms", 3, _marked_terms, deterministic=True)
    conn.create_function("ss_defines", 1, _defines, deterministic=True)
    conn.create_function("ss_text_hash", 1, text_hash, deterministic=True)
    return conn


def _defines(text: str) -> str:
    return chunk_defines(text)


def _terms(rel: str | None, text: str) -> str:
    if rel is None:  # the file row must still exist when its chunks are written or deleted
        raise ValueError("chunk without a file row")
    return chunk_terms(listed_rel(rel), text)


def _marked_terms(rel: str | None, text: str, is_copy: int) -> str:
    terms = _terms(rel, text)
    return f"{terms} {COPY_MARK}" if is_copy else terms


def split_sql(script: str) -> list[str]:
    """Split a migration into statements (triggers contain ';' inside BEGIN … END)."""
    statements: list[str] = []
    buffer = ""
    for line in script.strip().splitlines():
        buffer += line + "\n"
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    return statements


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+; callers read the message too
    return None if code is None else int(code) & 0xFF


def damage_problem(exc: Exception) -> str | None:
    """What a sqlite3 error says about a damaged index file, in a few words; None for an error
    that is not damage (a busy database, a full disk, a bad statement)."""
    if isinstance(exc, BlockMismatchError):
        return str(exc)
    if not isinstance(exc, sqlite3.DatabaseError):
        return None
    text = str(exc)
    for sign, problem in DAMAGE_SIGNS.items():
        if sign in text:
            return problem or text.splitlines()[0]
    if _primary_code(exc) in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return text.splitlines()[0] if text else "SQLite reports it corrupt"
    return None


def is_write_failure(exc: sqlite3.Error, path: Path | None = None) -> bool:
    """Disk full or read-only: failures of the medium, not of the statement. With the index's
    ``path``, an I/O error where its folder has no space left is a full disk too."""
    text = str(exc)
    return (
        _primary_code(exc) in (SQLITE_FULL, SQLITE_READONLY)
        or "disk is full" in text
        or "readonly database" in text
        or (path is not None and _is_full_disk_io(path, exc))
    )


def _is_full_disk_io(path: Path, exc: sqlite3.Error) -> bool:
    """An I/O error in a folder with no space left: what SQLite says when it cannot make the
    write-ahead log's shared-memory file (``-shm``) that every connection, a reader's too, needs
    (``disk I/O error``, not ``database or disk is full``)."""
    if _primary_code(exc) != SQLITE_IOERR:
        return False
    try:
        return shutil.disk_usage(path.parent).free < NO_SPACE_BYTES
    except OSError:
        return False


def write_error(path: Path, exc: sqlite3.Error) -> StoreError:
    """The StoreError of a failed write: disk full and read-only get their own one-line advice."""
    primary = _primary_code(exc)
    if primary == SQLITE_FULL or "disk is full" in str(exc) or _is_full_disk_io(path, exc):
        return DiskFullError(disk_full_message(path))
    if primary == SQLITE_READONLY or "readonly database" in str(exc):
        return ReadOnlyError(read_only_message(path))
    return StoreError(f"Cannot write index {path}: {exc}")


def give_back_log(conn: sqlite3.Connection) -> None:
    """Write the write-ahead log into the file and truncate it: while another process has the
    index open (an MCP server) SQLite keeps the log at its largest, as big as the index after
    a first run. Waits for reads under way for LOG_WAIT_MS at most; the log then stays as it is
    until a later run."""
    conn.execute(f"PRAGMA busy_timeout={LOG_WAIT_MS}")
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")


def reclaim_space(conn: sqlite3.Connection) -> None:
    """Give free pages back to the file system: incrementally in a file made with
    ``auto_vacuum=INCREMENTAL``; an older file is switched to it by one full VACUUM."""
    if not conn.execute("PRAGMA freelist_count").fetchone()[0]:
        return
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != AUTO_VACUUM_INCREMENTAL:
        conn.execute(f"PRAGMA auto_vacuum={AUTO_VACUUM_INCREMENTAL}")
        conn.execute("VACUUM")
    else:
        # execute() steps once and frees one page; a script runs the pragma to the end.
        conn.executescript("PRAGMA incremental_vacuum;")
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


def file_bytes(path: Path) -> int:
    """Bytes on disk of the SQLite file at ``path`` with its companions (0 for those absent) but
    the ``-shm`` file, 32 KiB that exists only while a connection is open."""
    total = 0
    for end in ("", *COMPANIONS):
        if end != "-shm":
            with contextlib.suppress(FileNotFoundError):
                total += path.with_name(path.name + end).stat().st_size
    return total
