"""The SQLite index: one file. Only this module and its DDL (sqlite_schema) write SQL.

On-disk format (schema version 10, ``PRAGMA user_version``)::

    meta(key TEXT PRIMARY KEY, value TEXT)
        schema_version, model_id, dim, generation (bumped by every write), terms_version
        (the rules of the FTS ``terms`` and ``defines`` columns; see semsearch.text.lexical),
        packed_through (the last chunk id in a vector block), pack_epoch (changes when the
        blocks are written anew),
        folder_commit.ID (the git commit folder ID's last complete run read, when a checkout)
    folders(id INTEGER PRIMARY KEY, path TEXT UNIQUE, name TEXT, last_indexed REAL)
        path: absolute path of the folder on the machine that indexed it
    files(id INTEGER PRIMARY KEY, folder_id -> folders ON DELETE CASCADE, rel TEXT,
          mtime_ns INTEGER, size INTEGER, sha256 TEXT, status TEXT, kind TEXT,
          UNIQUE(folder_id, rel), path_vector BLOB NULL)
        rel: POSIX path relative to the folder, so a copied index still searches; a byte of it
        that is not UTF-8 is a NUL and two hex digits (`store.base.stored_rel`);
        path_vector: the embedding of rel (sqlite_rows.path_blob: a byte a component); empty
        for a file without one (a document), NULL until embedded;
        status: ok | empty | binary | too_large | error (files without chunks are remembered so
        an unchanged one is not re-read);
        sha256: of the file's bytes, indexed (`files_sha256`): a new file whose bytes and name
        an ok file has takes that file's chunks instead of being chunked again
    chunks(id INTEGER PRIMARY KEY AUTOINCREMENT, file_id -> files ON DELETE CASCADE, ord INTEGER,
           start_line INTEGER, end_line INTEGER, start_offset INTEGER, end_offset INTEGER,
           page INTEGER NULL, text TEXT, vector BLOB NULL, text_hash TEXT)
        text: a verbatim slice of the extracted text; offsets are str (code point) indices;
        lines are 1-based and inclusive; vector: `dim` little-endian float16 values (float32 in
        rows from before version 5, kept and read), L2-normalised, or NULL while the chunk waits
        (an index run writes text first, vectors after; `chunks_pending` finds those);
        text_hash: 32 hex digits of BLAKE2b-128 of the UTF-8 text (`store.base.text_hash`),
        indexed, so a chunk of the same text anywhere in the index lends its vector.
        Chunk ids are never reused, so a reader can refresh only what changed.
    vector_blocks(id INTEGER PRIMARY KEY, first_id INTEGER, last_id INTEGER, chunk_ids BLOB,
                  file_ids BLOB, scales BLOB, errors BLOB, norms BLOB, codes BLOB, firsts BLOB)
        ``sqlite.blocks.PACK_ROWS`` consecutive chunks that have a vector, packed: their ids and
        file ids as little-endian int64, per chunk a float32 scale, the norm of the quantisation
        error and the norm of the int8 vector, the int8 vectors as ``dim`` x columns (value x
        scale), and per chunk the lowest chunk id of its text when the block was written, as
        int64 (NULL in blocks from before version 7: the search then scans each copy; the next
        run writes them anew). The columns are those of the block's first chunks (``firsts``
        = own id), in order: a copy reads its first's, in this block or an earlier one. Blocks
        from before version 10 hold every chunk's column (column i is chunk i); the next run
        keeps those of first chunks only. Derived from the chunk rows, which keep their
        vectors; the chunks above ``packed_through`` are read from their rows.
    copies(id INTEGER PRIMARY KEY)
        every chunk of a text but the one of lowest id (triggers keep it so)
    vector_gone(id INTEGER PRIMARY KEY)
        packed chunks deleted since their block was written (trigger ``chunks_packed_ad``)
    chunks_fts: contentless FTS5 table, rowid = chunk id, one row per text: the first chunk
        of each text (not in `copies`) has one, copies none (the BM25 arm scores a text once
        and lists its copies after it). Columns `text` (the chunk text), `terms` (path and
        split-identifier words) and `defines` (names the chunk defines; see text/lexical.py),
        tokenizer `porter unicode61 remove_diacritics 2`. Triggers keep it in step with
        `chunks`; they call the SQL functions `ss_terms(rel, text)` and `ss_defines(text)`,
        which every connection of semsearch registers (a connection without them cannot write
        chunks, rather than corrupt the FTS index).

WAL mode and a busy timeout let readers (the MCP server) work while an index run writes. Writers
serialise on an advisory lock file next to the database (`<index>.lock`, semsearch.store.lock).
A change of model builds the new model's index in `<index>.next` beside it, then copies it in
whole (semsearch.store.sqlite.switch).
New files use ``auto_vacuum=INCREMENTAL`` (``maintain`` frees pages, and empties the WAL; older
files are switched by one VACUUM). A file that cannot be written is opened read-only
(``mode=ro`` / ``immutable=1``).
A zero-byte file is no index yet (``schema.is_index_file``): opening it for an index run creates
the index in it. A damaged file (pages, rows or the FTS5 tables unreadable, or not SQLite at all)
raises ``IndexDamagedError`` from any method (``schema.damage_problem`` says which errors are
damage); ``store.repair`` checks it in full and sets it aside, never writing to it.
Version 1 had an external-content FTS5 table over `text` alone; version 2 had `vector` NOT NULL
and no `text_hash`; version 3 no `path_vector`; version 4 wrote float32 vectors; version 5 had no
vector blocks; version 6 no `copies` and an FTS row per chunk; versions 7 and 8 an FTS row per
chunk too, a copy's `terms` ending with the word ``schema.COPY_MARK``; version 7 no index on
sha256. Opening such a file migrates it (sqlite_schema.MIGRATIONS; a read-only version 3 file
has no path vectors, a read-only version 5 file is searched from its rows, a read-only version 6
file scores every copy's FTS row, a read-only version 7 or 8 file leaves its marked rows out;
a file whose upgrade failed for want of disk space is searched so too, ``upgrade_pending``, and
opened again by an index run); the next index run (``maintain``) packs its vectors.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from semsearch.errors import (
    DiskFullError,
    IndexMissingError,
    ModelMismatchError,
    ReadOnlyError,
    StoreError,
)
from semsearch.store.base import (
    COMMIT_KEY,
    ChooseCopy,
    ChunkPlace,
    ChunkRecord,
    ChunkRow,
    FileRef,
    FileState,
    FileWrite,
    FloatArray,
    Folder,
    IdArray,
    damaged_error,
    listed_rel,
    model_mismatch_message,
    reports_damage,
    stored_rel,
    text_hash,
)
from semsearch.store.lock import is_writable, read_only_message
from semsearch.store.sqlite.blocks import (
    PACK_ROWS,
    drop_blocks,
    needs_repack,
    next_block,
    trim_block,
    whole_blocks_with_copies,
    write_block,
)
from semsearch.store.sqlite.lexical import LexicalReader
from semsearch.store.sqlite.rows import (
    VectorReader,
    delete_files_where,
    move_files,
    path_blob,
    read_pending_paths,
    read_stored_vectors,
    read_vector_ids,
    read_vectors,
    vector_blobs,
    vectors_from_blobs,
)
from semsearch.store.sqlite.schema import (
    AUTO_VACUUM_INCREMENTAL,
    FIRSTS_VERSION,
    FTS_REBUILD_SQL,
    MIGRATIONS,
    NO_PATH_VECTORS_VERSION,
    PAGE_SIZE,
    SCHEMA_VERSION,
    adds_existing_column,
    connect,
    damage_problem,
    file_bytes,
    give_back_log,
    is_index_file,
    is_write_failure,
    read_int_meta,
    reclaim_space,
    split_sql,
    write_error,
)
from semsearch.text.lexical import COLUMN_WEIGHTS, TERMS_VERSION, LexicalQuery

logger = logging.getLogger("semsearch.store")
# A rebuild of the FTS columns (new rules, ``TERMS_VERSION``) over this many chunks or more is
# announced: it takes seconds.
REBUILD_NOTICE_CHUNKS = 20_000

# bm25() takes the weights of chunks_fts's columns in their order: text, terms, defines.
BM25_WEIGHTS = ", ".join(str(COLUMN_WEIGHTS[c]) for c in ("text", "terms", "defines"))


@reports_damage(damage_problem)
class SqliteStore:
    """The single-file SQLite index (see the module docstring for the format).

    Every public method raises ``IndexDamagedError`` when it meets a damaged page or row.
    """

    def __init__(
        self,
        path: Path,
        *,
        create: bool = False,
        pack_rows: int = PACK_ROWS,
        page_size: int = PAGE_SIZE,
    ) -> None:
        self.path = path
        self._page_size = page_size  # of a new file (an index of another one's size is copied in)
        self.pack_rows = pack_rows  # chunks a vector block (sqlite.blocks)
        self._unpacked = 0  # vectors written by this store since it last packed
        # Why an index that needs an upgrade was opened as it is (a full disk), else None.
        self._upgrade_failure: str | None = None
        if not create and not is_index_file(path):
            raise IndexMissingError(f"No index at {path}. Run `semsearch index` first.")
        self.read_only = path.exists() and not is_writable(path)
        if create and self.read_only:
            raise ReadOnlyError(read_only_message(path))
        try:
            if create:
                path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = connect(path, self.read_only)
            self._migrate(create)
        except sqlite3.DatabaseError as exc:
            if is_write_failure(exc, path):
                raise write_error(path, exc) from exc
            problem = damage_problem(exc)
            if problem is not None:
                raise damaged_error(path, problem) from exc
            raise StoreError(f"Cannot open index {path}: {exc}. Is it a semsearch index?") from exc
        self._refs: tuple[int, dict[int, FileRef]] = (-1, {})
        self._reader: VectorReader | None = None  # opened by the first vector search
        self._reader_lock = threading.Lock()
        self._lexical = LexicalReader(self._conn, self)

    def _migrate(self, create: bool) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"Index {self.path} has schema version {version}; this semsearch knows "
                f"{SCHEMA_VERSION}. Upgrade semsearch."
            )
        if version == SCHEMA_VERSION and self.meta("terms_version") == TERMS_VERSION:
            return
        if self.read_only:
            # A stale terms_version only dulls BM25 a little; version 3 lacks path vectors only.
            if version < NO_PATH_VECTORS_VERSION:
                raise ReadOnlyError(
                    f"Index {self.path} is read-only and has schema version {version}, which "
                    "this semsearch upgrades on open. Open it once with write access."
                )
            return
        if version == 0:
            # Before the first table: free pages go back to the file system (see maintain).
            self._conn.execute(f"PRAGMA page_size={self._page_size}")
            self._conn.execute(f"PRAGMA auto_vacuum={AUTO_VACUUM_INCREMENTAL}")
            self._conn.execute("PRAGMA journal_mode=WAL")
        try:
            self._upgrade()
        except DiskFullError as exc:
            # The upgrade rolled back. A search need not wait for space: a file this semsearch
            # can read as it is (as it reads one on read-only media) is searched so.
            if create or version < NO_PATH_VECTORS_VERSION:
                raise
            self._search_as_is(exc)

    @property
    def upgrade_pending(self) -> bool:
        return self._upgrade_failure is not None

    def _search_as_is(self, failure: DiskFullError) -> None:
        """Go on with the file as it is, read-only, after its upgrade failed for want of space;
        writes raise its disk-full error again, and an index run opens the file anew
        (``upgrade_pending``)."""
        self._conn.close()
        self._conn = connect(self.path, read_only=True)
        self.read_only = True
        self._upgrade_failure = str(failure)
        logger.warning(
            "semsearch: no room on the disk to upgrade %s for this version of semsearch; "
            "searching it as it is. Free some space: the next search or index run upgrades it.",
            self.path,
        )

    def _upgrade(self) -> None:
        """Bring the file to SCHEMA_VERSION and the FTS columns to TERMS_VERSION, in one
        transaction."""
        with self._write():
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            steps = [MIGRATIONS[number] for number in range(version, SCHEMA_VERSION)]
            # Stale FTS columns are rebuilt whether or not the schema moves too (meta exists
            # from version 1 on); so are those of a file before version 9, whose copies have rows.
            stale = version >= 1 and (
                self.meta("terms_version") != TERMS_VERSION or version < FIRSTS_VERSION
            )
            if stale:
                steps.append(FTS_REBUILD_SQL)
            if stale:
                self._announce_rebuild()
            for statement in (sql for step in steps for sql in split_sql(step)):
                if not adds_existing_column(self._conn, statement):
                    self._conn.execute(statement)
            self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('generation', '0')")
            self._set_meta("schema_version", str(SCHEMA_VERSION))
            self._set_meta("terms_version", TERMS_VERSION)

    def _announce_rebuild(self) -> None:
        """Say on stderr (``logging``'s last resort when nobody set up logging, as in the CLI)
        that the FTS columns are being rebuilt, when that takes long enough to look like a hang:
        ~4.5 s for 25,000 chunks, minutes for a million. It happens once per new set of rules."""
        (count,) = self._conn.execute("SELECT count(*) FROM chunks").fetchone()
        if count >= REBUILD_NOTICE_CHUNKS:
            logger.warning(
                "semsearch: rebuilding the full-text columns of %s for this version of "
                "semsearch (%s chunks; once, searches wait for it)",
                self.path,
                f"{count:,}",
            )

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction that bumps the generation counter."""
        if self._upgrade_failure is not None:
            raise DiskFullError(self._upgrade_failure)
        if self.read_only:
            raise ReadOnlyError(read_only_message(self.path))
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise write_error(self.path, exc) from exc
        try:
            yield self._conn
            self._conn.execute(
                "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'"
            )
            self._conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            self._rollback()
            if is_write_failure(exc, self.path):  # e.g. disk full: SQLite has rolled back
                raise write_error(self.path, exc) from exc
            raise
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def _set_meta(self, key: str, value: str) -> None:
        self._conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def meta(self, key: str) -> str | None:
        """One meta value, or None."""
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def sync(self) -> None:
        """Nothing to do: every read sees the latest commit."""

    def generation(self) -> int:
        """Counter bumped by every committed write; readers compare it to refresh caches."""
        return read_int_meta(self._conn, "generation")

    def model(self) -> tuple[str, int] | None:
        """The (model id, dimension) the stored vectors were made with, if any."""
        model_id, dim = self.meta("model_id"), self.meta("dim")
        return None if model_id is None or dim is None else (model_id, int(dim))

    def set_model(self, model_id: str, dim: int) -> None:
        """Record the model; refuses to switch while chunks exist."""
        current = self.model()
        if current == (model_id, dim):
            return
        if current is not None and self.chunk_count() > 0:
            raise ModelMismatchError(model_mismatch_message(self.path, current[0], model_id))
        with self._write() as conn:
            self._set_meta("model_id", model_id)
            self._set_meta("dim", str(dim))
            conn.execute("UPDATE files SET path_vector = NULL")  # another model's, if any

    def chunk_count(self) -> int:
        """Number of stored chunks."""
        return int(self._conn.execute("SELECT count(*) FROM chunks").fetchone()[0])

    def ensure_folder(self, path: str, name: str) -> int:
        """The folder's id, creating its row if needed."""
        row = self._conn.execute("SELECT id FROM folders WHERE path = ?", (path,)).fetchone()
        if row is not None:
            return int(row[0])
        with self._write() as conn:
            cursor = conn.execute("INSERT INTO folders(path, name) VALUES (?, ?)", (path, name))
            folder_id = int(cursor.lastrowid or 0)
            # ids of removed folders come back: forget the commit one of them was built from
            conn.execute("DELETE FROM meta WHERE key = ?", (COMMIT_KEY.format(folder_id),))
            return folder_id

    def folders(self) -> list[Folder]:
        """Every folder in the index with file, chunk and pending-chunk counts."""
        rows = self._conn.execute(
            "SELECT f.id, f.path, f.name, f.last_indexed,"
            " (SELECT count(*) FROM files WHERE folder_id = f.id AND status = 'ok'),"
            " (SELECT count(*) FROM chunks c JOIN files x ON x.id = c.file_id"
            "   WHERE x.folder_id = f.id),"
            # the pending chunks by the partial index chunks_pending (see _in_folders)
            " (SELECT count(*) FROM chunks c JOIN files x ON x.id = c.file_id"
            "   WHERE c.vector IS NULL AND +x.folder_id = f.id)"
            " FROM folders f ORDER BY f.path"
        ).fetchall()
        commits = dict(
            self._conn.execute("SELECT key, value FROM meta WHERE key LIKE 'folder_commit.%'")
        )
        return [
            replace(Folder(*row), commit=commits.get(COMMIT_KEY.format(row[0]))) for row in rows
        ]

    def file_states(self, folder_id: int) -> dict[str, FileState]:
        """rel → state for every file remembered under a folder."""
        rows = self._conn.execute(
            "SELECT id, rel, mtime_ns, size, sha256, status FROM files WHERE folder_id = ?",
            (folder_id,),
        )
        states = (FileState(i, listed_rel(rel), *rest) for i, rel, *rest in rows)
        return {state.rel: state for state in states}

    def file_refs(self) -> dict[int, FileRef]:
        """File id → reference for every file that has chunks; read again after a write."""
        generation = self.generation()
        if self._refs[0] != generation:
            rows = self._conn.execute(
                "SELECT x.id, x.folder_id, f.name, f.path, x.rel FROM files x"
                " JOIN folders f ON f.id = x.folder_id WHERE x.status = 'ok'"
            )
            refs = {
                i: FileRef(i, folder, name, path, listed_rel(rel))
                for i, folder, name, path, rel in rows
            }
            self._refs = (generation, refs)
        return self._refs[1]

    def write_files(self, writes: Sequence[FileWrite], *, reuse: bool = True) -> None:
        """Replace the rows and chunks of several files in one transaction.

        Chunks written without vectors take stored vectors of the same text when ``reuse``, and
        a file keeps its path vector; without ``reuse`` both are pending.
        """
        if not writes:
            return
        with self._write() as conn:
            for write in writes:
                self._write_file(conn, write, reuse)

    def _write_file(self, conn: sqlite3.Connection, write: FileWrite, reuse: bool) -> None:
        hashes = [text_hash(c.text) for c in write.chunks]
        if write.vectors is not None:
            assert len(write.vectors) == len(write.chunks)
            blobs: list[bytes | None] = list(vector_blobs(write.vectors))
        else:
            known = read_stored_vectors(conn, hashes) if reuse else {}
            blobs = [known.get(h) for h in hashes]
        rel = stored_rel(write.rel)
        path_vector = None  # without reuse (index --force) it is made again
        if reuse:  # the rel stays, and so does its path vector
            path_vector = conn.execute(
                "SELECT path_vector FROM files WHERE folder_id = ? AND rel = ?",
                (write.folder_id, rel),
            ).fetchone()
        delete_files_where(conn, "folder_id = ? AND rel = ?", (write.folder_id, rel))
        cursor = conn.execute(
            "INSERT INTO files(folder_id, rel, mtime_ns, size, sha256, status, kind, path_vector)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                write.folder_id,
                rel,
                write.mtime_ns,
                write.size,
                write.sha256,
                write.status,
                write.kind,
                None if path_vector is None else path_vector[0],
            ),
        )
        file_id = cursor.lastrowid
        conn.executemany(
            "INSERT INTO chunks(file_id, ord, start_line, end_line, start_offset, end_offset,"
            " page, text, vector, text_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    file_id,
                    ordinal,
                    c.start_line,
                    c.end_line,
                    c.start_offset,
                    c.end_offset,
                    c.page,
                    c.text,
                    blobs[ordinal],
                    hashes[ordinal],
                )
                for ordinal, c in enumerate(write.chunks)
            ],
        )

    def chunk_texts(self, file_id: int) -> list[str]:
        """The texts of one file's stored chunks, in order."""
        rows = self._conn.execute(
            "SELECT text FROM chunks WHERE file_id = ? ORDER BY ord", (file_id,)
        )
        return [text for (text,) in rows]

    def copied_chunks(self, sha256: str, name: str) -> tuple[ChunkRecord, ...]:
        """The chunks of a stored ok file with these bytes and this file name, in order."""
        rows = self._conn.execute(
            "SELECT id, rel FROM files WHERE sha256 = ? AND status = 'ok'", (sha256,)
        )
        source = next((i for i, rel in rows if listed_rel(rel).rsplit("/", 1)[-1] == name), None)
        if source is None:
            return ()
        chunks = self._conn.execute(
            "SELECT start_line, end_line, start_offset, end_offset, page, text FROM chunks"
            " WHERE file_id = ? ORDER BY ord",
            (source,),
        )
        return tuple(ChunkRecord(*row) for row in chunks)

    def pending_texts(
        self, limit: int, folder_ids: Sequence[int] | None = None
    ) -> list[tuple[str, str]]:
        """(text hash, text) of up to ``limit`` distinct texts still without a vector (of
        chunks of ``folder_ids`` when given)."""
        within, params = _in_folders(folder_ids)
        rows = self._conn.execute(
            "SELECT c.text_hash, c.text FROM chunks c JOIN files x ON x.id = c.file_id"
            f" WHERE c.vector IS NULL{within} ORDER BY c.id LIMIT ?",
            (*params, limit),
        )
        return list(dict(rows.fetchall()).items())

    def set_vectors(self, hashes: Sequence[str], vectors: FloatArray) -> int:
        """Give the chunks without a vector of each text hash their vector; returns how many."""
        assert len(hashes) == len(vectors)
        with self._write() as conn:
            before = conn.total_changes
            conn.executemany(
                "UPDATE chunks SET vector = ? WHERE text_hash = ? AND vector IS NULL",
                list(zip(vector_blobs(vectors), hashes, strict=True)),
            )
            written = conn.total_changes - before
        self._unpacked += written
        if self._unpacked >= self.pack_rows:  # a long embedding pass packs as it goes
            self.pack()
        return written

    def pack(self) -> int:
        """Pack chunks whose vectors are all written into blocks of ``pack_rows`` (see
        ``sqlite.blocks``), first writing the blocks anew when a quarter of their chunks are
        gone; returns the blocks written. Each block is one commit."""
        self._unpacked = 0
        if self.read_only:
            return 0
        dim = self.model()
        if dim is None:
            return 0

        def decode(blobs: Sequence[bytes]) -> FloatArray:
            return vectors_from_blobs(blobs, dim[1], self.path)

        if needs_repack(self._conn):
            with self._write() as conn:
                drop_blocks(conn)
        for number in whole_blocks_with_copies(self._conn, dim[1]):
            with self._write() as conn:
                trim_block(conn, number, dim[1])
        written = 0
        while (block := next_block(self._conn, self.pack_rows, decode)) is not None:
            with self._write() as conn:
                write_block(conn, block)
            written += 1
        return written

    def pending_count(self, folder_ids: Sequence[int] | None = None) -> int:
        """Chunks still waiting for their vector (of ``folder_ids`` when given)."""
        within, params = _in_folders(folder_ids)
        row = self._conn.execute(
            "SELECT count(*) FROM chunks c JOIN files x ON x.id = c.file_id"
            f" WHERE c.vector IS NULL{within}",
            params,
        ).fetchone()
        return int(row[0])

    def pending_paths(
        self, limit: int, folder_ids: Sequence[int] | None = None
    ) -> list[tuple[int, str]]:
        """(file id, rel) of ok files without a path vector (of ``folder_ids`` when given;
        [] in a read-only version 3)."""
        return read_pending_paths(self._conn, limit, folder_ids)

    def set_path_vectors(self, file_ids: Sequence[int], vectors: FloatArray) -> None:
        """Store files' path vectors (int8; a zero row as an empty blob) in one commit."""
        assert len(file_ids) == len(vectors)
        blobs = [path_blob(row) for row in np.asarray(vectors, dtype=np.float32)]
        with self._write() as conn:
            conn.executemany(
                "UPDATE files SET path_vector = ? WHERE id = ?",
                [(blob, int(i)) for blob, i in zip(blobs, file_ids, strict=True)],
            )

    def path_vectors(self, file_ids: Sequence[int]) -> dict[int, FloatArray]:
        """File id → path vector, through the vector arm's connection (not the lexical's)."""
        return self._vector_reader().path_vectors(file_ids)

    def touch_files(self, touches: Sequence[tuple[int, int]]) -> None:
        """Record new mtimes, (file id, mtime_ns), of files whose content did not change."""
        with self._write() as conn:
            conn.executemany(
                "UPDATE files SET mtime_ns = ? WHERE id = ?", [(m, i) for i, m in touches]
            )

    def delete_files(self, folder_id: int, rels: Iterable[str]) -> int:
        """Forget files (and their chunks) under a folder; returns how many were indexed."""
        rels = list(rels)
        if not rels:
            return 0
        with self._write() as conn:
            for rel in rels:
                delete_files_where(conn, "folder_id = ? AND rel = ?", (folder_id, stored_rel(rel)))
        return len(rels)

    def remove_folder(self, path: str) -> int:
        """Purge a folder and everything under it; returns the number of files purged."""
        row = self._conn.execute(
            "SELECT id, (SELECT count(*) FROM files WHERE folder_id = folders.id AND status='ok')"
            " FROM folders WHERE path = ?",
            (path,),
        ).fetchone()
        if row is None:
            return 0
        with self._write() as conn:
            delete_files_where(conn, "folder_id = ?", (row[0],))
            conn.execute("DELETE FROM folders WHERE id = ?", (row[0],))
        return int(row[1])

    def move_folder(self, old_path: str, new_path: str, prefix: str = "") -> int:
        """Give a folder's files to ``new_path`` under ``prefix`` (see ``Store.move_folder``)."""
        old, new = self._folder_id(old_path), self._folder_id(new_path)
        if old is None or old_path == new_path:
            return 0
        with self._write() as conn:
            return move_files(conn, old, new, new_path, stored_rel(prefix))

    def _folder_id(self, path: str) -> int | None:
        row = self._conn.execute("SELECT id FROM folders WHERE path = ?", (path,)).fetchone()
        return None if row is None else int(row[0])

    def mark_indexed(self, folder_id: int, commit: str | None = None) -> None:
        """Stamp the folder with the time of its last complete index run and the git commit it
        read (meta ``folder_commit.ID``; none when it is no git checkout)."""
        with self._write() as conn:
            conn.execute(
                "UPDATE folders SET last_indexed = ? WHERE id = ?", (time.time(), folder_id)
            )
            key = COMMIT_KEY.format(folder_id)
            if commit is None:
                conn.execute("DELETE FROM meta WHERE key = ?", (key,))
            else:
                self._set_meta(key, commit)

    def clear_chunks(self) -> None:
        """Drop every file and chunk (a rebuild with another model), keeping folders."""
        with self._write() as conn:
            delete_files_where(conn, "1", ())
            drop_blocks(conn)
            conn.execute("DELETE FROM meta WHERE key IN ('model_id', 'dim')")

    def page_size(self) -> int:
        """Bytes a page of the file (an index is copied only into a file of its page size)."""
        return int(self._conn.execute("PRAGMA page_size").fetchone()[0])

    def last_chunk_id(self) -> int:
        """The highest chunk id this file ever gave (ids are never reused), 0 before any."""
        row = self._conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'chunks'").fetchone()
        return 0 if row is None else int(row[0])

    def start_ids_after(self, last: int) -> bool:
        """Give new chunks ids above ``last`` (another index's :meth:`last_chunk_id`), so that
        this index copied into that one (:meth:`prepare_copy`) shows its readers no id they knew
        with other content; False when a chunk here already has an id up to ``last``."""
        (lowest,) = self._conn.execute("SELECT min(id) FROM chunks").fetchone()
        if lowest is not None and lowest <= last:
            return False
        if self.last_chunk_id() < last:
            with self._write() as conn:
                conn.execute("DELETE FROM sqlite_sequence WHERE name = 'chunks'")
                conn.execute("INSERT INTO sqlite_sequence(name, seq) VALUES ('chunks', ?)", (last,))
        return True

    def prepare_copy(self, into: SqliteStore) -> None:
        """Ready this index to be copied over ``into`` (``into.replace_with(self)``): its chunk
        ids above every id ``into`` gave (:meth:`start_ids_after`), its generation and pack
        epoch past both files' (a reader of ``into`` then drops what it read of it: vectors,
        blocks, file rows, instead of adding to them), its write-ahead log in its file (the
        copy then needs room for one more copy of it only)."""
        ids_above = self.start_ids_after(into.last_chunk_id())
        assert ids_above, "switch.open_next keeps no next index whose ids the index reached"
        numbers = {
            key: max(read_int_meta(self._conn, key), read_int_meta(into._conn, key)) + 1
            for key in ("generation", "pack_epoch")
        }
        with self._write():  # which bumps the generation once more
            for key, value in numbers.items():
                self._set_meta(key, str(value))
        try:
            give_back_log(self._conn)
        except sqlite3.OperationalError as exc:
            raise write_error(self.path, exc) from exc

    def replace_with(self, source: SqliteStore) -> None:
        """Make this index a copy of ``source`` in one write transaction (SQLite's online
        backup): a reader sees the index before or after, never part of either. The caller
        holds the write lock; ``source`` has the same page size, was readied by
        :meth:`prepare_copy` and is not written meanwhile. What this store read of the index
        before (file rows, vectors) goes as any reader's does: by the new generation."""
        try:
            source._conn.backup(self._conn)
            give_back_log(self._conn)  # it holds the whole copy
        except sqlite3.OperationalError as exc:
            if is_write_failure(exc, self.path):  # the copy rolled back: the index is as it was
                raise write_error(self.path, exc) from exc
            raise

    def chunk_ids(self) -> IdArray:
        """All chunk ids, ascending."""
        rows = self._conn.execute("SELECT id FROM chunks ORDER BY id").fetchall()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def vector_ids(self) -> IdArray:
        """The ids of all chunks that have a vector, ascending."""
        return read_vector_ids(self._conn)

    def vectors(self, min_id: int = 0) -> tuple[IdArray, IdArray, FloatArray]:
        """(chunk ids, file ids, float32 matrix) for chunks with id > min_id, in id order."""
        return read_vectors(self._conn, min_id, self.path)

    def preload(self) -> None:
        """Read the vectors into memory unless they are there (``nearest`` reads any change)."""
        exact = self._vector_reader().exact
        if not exact.is_loaded:
            exact.refresh()

    def nearest(
        self, query: np.ndarray[Any, Any], pool: int, file_ids: Sequence[int] | None = None
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine) of the ``pool`` nearest chunks, best first: exact, in memory."""
        return self._vector_reader().exact.nearest(query, pool, file_ids)

    def chunk_files(self, ids: Sequence[int]) -> dict[int, int]:
        """Chunk id → file id, from the vectors in memory."""
        return self._vector_reader().exact.files_of(ids)

    def _vector_reader(self) -> VectorReader:
        with self._reader_lock:  # a search's two threads may be the first to ask
            if self._reader is None:
                self._reader = VectorReader(self.path, self.read_only)
            return self._reader

    def lexical(
        self, query: LexicalQuery, limit: int, file_ids: Sequence[int] | None = None
    ) -> list[int]:
        """Chunk ids matching the query, best BM25 first, optionally within files."""
        return self._lexical.read(query, BM25_WEIGHTS, limit, file_ids)

    def chunks(self, ids: Sequence[int]) -> list[ChunkRow]:
        """Stored chunks by id, in the order asked, through the vector arm's connection (safe
        beside the lexical arm's thread)."""
        return self._vector_reader().chunks(ids)

    def chunk_places(self, ids: Sequence[int]) -> list[ChunkPlace]:
        """The places of chunks by id, in the order asked, through the vector arm's connection
        (safe beside the lexical arm's thread)."""
        return self._vector_reader().chunk_places(ids)

    def text_keys(
        self, ids: Sequence[int], from_vectors: bool = True
    ) -> dict[int, tuple[int, int | str]]:
        """Chunk id → (file id, text key), copies sharing a key: from the vectors in memory
        where they are packed (no row read), through the vector arm's connection."""
        return self._vector_reader().text_keys(ids, from_vectors)

    def text_places(self, hashes: Sequence[str]) -> list[ChunkPlace]:
        """The places of every chunk of these text hashes (the ``chunks_text_hash`` index finds
        them), by chunk id."""
        return self._vector_reader().text_places(hashes)

    def reading(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to hold: each read is its own transaction, or a snapshot's."""
        return contextlib.nullcontext()

    def choose_copies(self, hashes: Iterable[str], choose: ChooseCopy) -> dict[str, ChunkPlace]:
        """None held: every copy an arm met is in its ranking."""
        return {}

    def has_copies(self) -> bool:
        """Always maybe: the look-ups are local here (~5 ms at 25k chunks), and knowing would
        cost a pass over every chunk per index run."""
        return True

    def maintain(self) -> None:
        """Give the file's free pages back to the file system (after a removal or re-index),
        and the write-ahead log's space (``schema.give_back_log``).

        SQLite keeps its FTS index current in every transaction; what is left is space. An index
        made with ``auto_vacuum=INCREMENTAL`` frees it in place; an older one is switched to it
        by one full VACUUM, the first time it has free pages.
        """
        if self.read_only:
            return
        try:
            self.pack()
            reclaim_space(self._conn)
            give_back_log(self._conn)
        except sqlite3.OperationalError as exc:
            raise write_error(self.path, exc) from exc

    def size_bytes(self) -> int:
        """Bytes on disk: the file and its companions (the log; not a next index beside it)."""
        return file_bytes(self.path)

    def close(self) -> None:
        """Close the connections."""
        self._conn.close()
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def _in_folders(folder_ids: Sequence[int] | None) -> tuple[str, tuple[int, ...]]:
    """The condition `x.folder_id IN (...)` on the files joined as `x`, and its parameters
    ("" for every folder). The unary `+` keeps the folder_id index out of the plan: the partial
    index `chunks_pending` finds the few pending chunks, where the folder's index would read
    every chunk of the folder."""
    if folder_ids is None:
        return "", ()
    ids = tuple(int(i) for i in folder_ids)
    return f" AND +x.folder_id IN ({', '.join('?' * len(ids))})", ids
