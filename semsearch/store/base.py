"""What every index backend is: the :class:`Store` protocol and the records it reads and writes.

No backend is imported here; both import this module.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

import numpy as np

from semsearch.config import Location, RemoteLocation
from semsearch.errors import IndexDamagedError
from semsearch.text.lexical import LexicalQuery

IdArray = np.ndarray[Any, np.dtype[np.int64]]
FloatArray = np.ndarray[Any, np.dtype[np.float32]]
Backend = TypeVar("Backend")


@dataclass(frozen=True)
class Folder:
    """An indexed folder and its counts."""

    id: int
    path: str
    name: str
    last_indexed: float | None
    files: int
    chunks: int
    pending: int = 0  # chunks still waiting for their vector
    commit: str | None = None  # the git commit its last complete index run read, if any


@dataclass(frozen=True)
class FileState:
    """What the index remembers about one file."""

    id: int
    rel: str
    mtime_ns: int
    size: int
    sha256: str | None
    status: str


@dataclass(frozen=True)
class ChunkRecord:
    """A chunk to write (its vector travels separately, as a matrix row)."""

    start_line: int
    end_line: int
    start_offset: int
    end_offset: int
    page: int | None
    text: str


_STORED_BYTE = re.compile("\0([0-9a-f]{2})")


def stored_rel(rel: str) -> str:
    """``rel`` as the index keeps it: valid UTF-8, as SQLite and Arrow want text. A byte of the
    name that is not UTF-8 (a surrogate escape of ``os.fsdecode``, U+DC80-U+DCFF) becomes a NUL
    and the byte's two hex digits: no file name holds a NUL, so no other name reads the same.
    Character by character, so ``stored_rel(a + b) == stored_rel(a) + stored_rel(b)``."""
    if rel.isascii():
        return rel
    return "".join(f"\0{ord(c) - 0xDC00:02x}" if "\udc80" <= c <= "\udcff" else c for c in rel)


def listed_rel(stored: str) -> str:
    """The rel path :func:`stored_rel` stored, as the listing gives it."""
    if "\0" not in stored:
        return stored
    return _STORED_BYTE.sub(lambda found: chr(0xDC00 + int(found[1], 16)), stored)


def text_hash(text: str) -> str:
    """The key a chunk's vector is stored and reused under: 32 hex digits of its text's BLAKE2b."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@dataclass(frozen=True)
class FileWrite:
    """Replace one file's row and chunks. ``chunks`` is empty for non-ok statuses.

    ``vectors`` None writes the chunks without vectors (searchable by the lexical arms at once);
    the store then gives each the vector of a stored chunk with the same text, if asked to reuse
    them, and leaves the rest pending for ``set_vectors``.
    """

    folder_id: int
    rel: str
    mtime_ns: int
    size: int
    sha256: str | None
    status: str
    kind: str
    chunks: tuple[ChunkRecord, ...] = ()
    vectors: FloatArray | None = None


@dataclass(frozen=True)
class ChunkRow:
    """A stored chunk with its file and folder, as search returns it."""

    id: int
    file_id: int
    folder_path: str
    folder_name: str
    rel: str
    kind: str
    start_line: int
    end_line: int
    page: int | None
    text: str


class ChunkPlace(NamedTuple):
    """Where a stored chunk is, and the hash of its text (:func:`text_hash`): chunks of one
    text in several places are copies of each other. A named tuple, not a frozen dataclass: a
    search reads hundreds, and a frozen dataclass takes ~8 µs each to make (a tuple ~0.5)."""

    id: int
    file_id: int
    text_hash: str
    start_line: int
    end_line: int
    page: int | None


def hash_keys(places: Iterable[ChunkPlace]) -> dict[int, tuple[int, int | str]]:
    """Chunk id → (file id, text hash): ``Store.text_keys`` read from places."""
    return {place.id: (place.file_id, place.text_hash) for place in places}


# (chunk ids, their file ids) of a text's copies, by id → the index of the one to use
ChooseCopy = Callable[[Sequence[int], Sequence[int]], int]


class HeldText(Protocol):
    """The chunks of one text, as a store learnt them at once (a LanceDB texts table's row):
    their ids and file ids, by id, made into places when asked; and the text."""

    @property
    def text_hash(self) -> str: ...

    @property
    def ids(self) -> Sequence[int]: ...

    @property
    def file_ids(self) -> Sequence[int]: ...

    @property
    def text(self) -> str:
        """The text every one of them holds."""

    def place(self, at: int) -> ChunkPlace:
        """The place of its chunk at ``at`` (in id order)."""

    def places(self) -> list[ChunkPlace]:
        """The places of all its chunks, by id."""


class PlaceCache:
    """The places of chunks read so far from one state of an index (a generation, a table
    version), by chunk id: a chunk's place never changes while it exists, and deleting it makes
    a new state. A search reads those of the chunks it scores, then asks for them again to
    collapse copies and lift files. At most about ``limit`` are kept: past that it starts again.
    It can also keep every place of a text (:meth:`keep_copies`) where a store learns them all
    at once, made into places only when asked.

    Both threads of a hybrid search use it: each call works on the maps of one state, taken
    whole (a state's two maps are replaced in one assignment), so a call that meets a new state
    in another thread reads or fills maps that are dropped, never a mix."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        # state, chunk id → place, text hash → its chunks
        self._maps: tuple[int | None, dict[int, ChunkPlace], dict[str, HeldText]] = (None, {}, {})

    def _at(self, state: int) -> tuple[dict[int, ChunkPlace], dict[str, HeldText]]:
        held, known, texts = self._maps
        if state != held or max(len(known), len(texts)) >= self._limit:
            known, texts = {}, {}
            self._maps = (state, known, texts)
        return known, texts

    def trim(self) -> None:
        """Start again if three quarters of ``limit`` are kept: called as a search begins, so
        that what it keeps (a few thousand) lasts until it ends."""
        _, known, texts = self._maps
        if max(len(known), len(texts)) * 4 >= self._limit * 3:
            self._maps = (None, {}, {})

    @property
    def holds_copies(self) -> bool:
        """True when some text's places are kept (:meth:`keep_copies`)."""
        return bool(self._maps[2])

    def keep_copies(self, state: int, texts: Iterable[HeldText]) -> None:
        """Keep the chunks of each of ``texts``, read at ``state``."""
        self._at(state)[1].update((text.text_hash, text) for text in texts)

    def copies(self, state: int, hashes: Sequence[str]) -> list[ChunkPlace] | None:
        """The places of every chunk of these texts at ``state``, by id; None unless every one
        of the texts was kept."""
        texts = self._at(state)[1]
        if not all(h in texts for h in hashes):
            return None
        return sorted((p for h in hashes for p in texts[h].places()), key=lambda p: p.id)

    def chosen(
        self, state: int, hashes: Iterable[str], choose: ChooseCopy
    ) -> dict[str, ChunkPlace]:
        """The place of the copy ``choose`` picks of each of ``hashes`` kept by
        :meth:`keep_copies` at ``state``, by text hash; each is kept by id too (a search reads
        them next)."""
        (known, texts), made = self._at(state), {}
        for text_hash in hashes:
            text = texts.get(text_hash)
            if text is not None:
                place = text.place(choose(text.ids, text.file_ids))
                made[text_hash] = known[place.id] = place
        return made

    def with_texts(self, state: int, ids: Iterable[int]) -> dict[int, tuple[ChunkPlace, str]]:
        """Chunk id → (its place, its text), for those of ``ids`` whose place is kept and whose
        text's chunks were kept by :meth:`keep_copies` at ``state``."""
        known, texts = self._at(state)
        found: dict[int, tuple[ChunkPlace, str]] = {}
        for chunk_id in ids:
            place = known.get(chunk_id)
            held = None if place is None else texts.get(place.text_hash)
            if place is not None and held is not None:
                found[chunk_id] = (place, held.text)
        return found

    def keep(self, state: int, places: Iterable[ChunkPlace]) -> None:
        """Keep places read at ``state``."""
        self._at(state)[0].update((place.id, place) for place in places)

    def places(
        self, state: int, ids: Sequence[int], read: Callable[[list[int]], Iterable[ChunkPlace]]
    ) -> list[ChunkPlace]:
        """The places of ``ids`` at ``state``, in that order (unknown ids left out): those not
        kept are ``read`` (their ids, once each) and kept."""
        known = self._at(state)[0]
        missing = [i for i in dict.fromkeys(ids) if i not in known]
        if missing:
            known.update((place.id, place) for place in read(missing))
        return [known[i] for i in ids if i in known]


@dataclass(frozen=True)
class FileRef:
    """A file's id, folder and relative path (the search filter works on these)."""

    id: int
    folder_id: int
    folder_name: str
    folder_path: str
    rel: str


class Store(Protocol):
    """What the indexer, search and :class:`semsearch.index.Index` need from an index backend.

    Two backends implement it: ``SqliteStore`` (one SQLite file, :mod:`.sqlite.store`)
    and ``LanceStore`` (a LanceDB folder, :mod:`semsearch.store.lance.store`); ``open_store`` picks
    one. Reads may run while another process writes; writers serialise on ``write_lock``, which
    the caller holds. Folder, file and chunk ids are the store's integers; chunk ids are never
    reused. Every write may raise ``StoreError`` when the index cannot be written.
    """

    @property
    def upgrade_pending(self) -> bool:
        """Opened as it is, read-only, because upgrading it to this version failed for want of
        disk space: an index run opens it again (and upgrades it, or says the disk is full)."""

    @property
    def path(self) -> Location:
        """Where the index lives, for messages."""

    def sync(self) -> None:
        """See every write committed so far by any process; a writer calls it once it holds the
        lock. Nothing to do where every read sees the latest commit (SQLite, a local LanceDB
        folder); an index on object storage otherwise looks at most once a query."""

    def generation(self) -> int:
        """A number that changes with every committed write, by any process, and never repeats.

        Callers keep what they read from the store with it and read again when it changed.
        """

    def model(self) -> tuple[str, int] | None:
        """The (model id, dimension) the stored vectors were made with; None before any."""

    def set_model(self, model_id: str, dim: int) -> None:
        """Record the model of the vectors about to be written; nothing to do if it is stored.

        Raises ``ModelMismatchError`` while chunks of another model exist (``clear_chunks``
        first).
        """

    def ensure_folder(self, path: str, name: str) -> int:
        """The id of the folder at the absolute ``path``, adding it (called ``name``) if new."""

    def folders(self) -> list[Folder]:
        """Every folder in the index with its ok-file, chunk and pending-chunk counts, sorted
        by path."""

    def file_states(self, folder_id: int) -> dict[str, FileState]:
        """rel → state of every file remembered under a folder, whatever its status."""

    def file_refs(self) -> dict[int, FileRef]:
        """File id → reference, for every file that has chunks (status ``ok``).

        The same dict comes back until the index changes: read it, never modify it.
        """

    def write_files(self, writes: Sequence[FileWrite], *, reuse: bool = True) -> None:
        """Replace the rows and chunks of files, new ones or known by (folder id, rel), in one
        commit (SQLite; LanceDB: two).

        A chunk written without a vector takes the vector of any stored chunk with the same
        text (by ``text_hash``, across the whole index, read before the file's old chunks go)
        when ``reuse``; otherwise it is pending, and so is the file's path vector (``index
        --force`` makes every vector of what it writes again). Raises ``AssertionError`` when a
        write's vectors do not match its chunks, and ``StoreError`` (LanceDB) when chunks come
        before ``set_model``.
        """

    def chunk_texts(self, file_id: int) -> list[str]:
        """The texts of one file's stored chunks, in order ([] for an unknown file)."""

    def copied_chunks(self, sha256: str, name: str) -> tuple[ChunkRecord, ...]:
        """The chunks of a stored ``ok`` file with these bytes (``sha256``) and this file name
        (the last part of its rel), in order; () when there is none, or where the backend
        cannot find files by content (LanceDB)."""

    def pending_texts(
        self, limit: int, folder_ids: Sequence[int] | None = None
    ) -> list[tuple[str, str]]:
        """(text hash, text) of up to ``limit`` distinct texts of chunks without a vector,
        the oldest chunks first; only chunks of files in ``folder_ids`` when it is given."""

    def set_vectors(self, hashes: Sequence[str], vectors: FloatArray) -> int:
        """Give every chunk without a vector whose text hash is ``hashes[i]`` row ``i`` of
        ``vectors`` (one commit); returns how many chunks got one."""

    def pending_count(self, folder_ids: Sequence[int] | None = None) -> int:
        """Chunks still waiting for their vector (of files in ``folder_ids`` when given)."""

    def pending_paths(
        self, limit: int, folder_ids: Sequence[int] | None = None
    ) -> list[tuple[int, str]]:
        """(file id, rel) of up to ``limit`` ok files whose rel path has no vector yet, by id
        (only files in ``folder_ids`` when it is given).

        The path vector (the embedding of the rel path's text, e.g. ``client/session.py``) is
        the ranking's path term (``ranking.PATH_WEIGHT``). A file keeps it while its rel stays:
        re-writing the file at the same rel keeps it (unless written without ``reuse``), a move
        that changes the rel drops it.
        """

    def set_path_vectors(self, file_ids: Sequence[int], vectors: FloatArray) -> None:
        """Store row ``i`` of ``vectors`` as the path vector of file ``file_ids[i]`` (one
        commit); ids of files no longer stored are ignored. A zero row records that the file
        has none (a document): it is no longer pending, and ``path_vectors`` leaves it out. A
        backend may store the vectors with less precision (SQLite: a byte a component)."""

    def path_vectors(self, file_ids: Sequence[int]) -> dict[int, FloatArray]:
        """File id → its path vector, for those of ``file_ids`` that have one. Safe to call
        while the lexical arm runs in another thread (like :meth:`nearest`)."""

    def touch_files(self, touches: Sequence[tuple[int, int]]) -> None:
        """Record new mtimes, (file id, mtime_ns), of files whose content did not change."""

    def delete_files(self, folder_id: int, rels: Iterable[str]) -> int:
        """Forget files (and their chunks) under a folder; returns how many rels were given."""

    def remove_folder(self, path: str) -> int:
        """Purge a folder and everything under it; returns its ok files (0 if unknown)."""

    def move_folder(self, old_path: str, new_path: str, prefix: str = "") -> int:
        """Give the folder at ``old_path`` to ``new_path``, keeping its chunks and vectors.

        Its files move to the folder at ``new_path`` (the old row itself is renamed, keeping its
        id and last-indexed time, when ``new_path`` is not in the index yet; its name becomes
        the last component of ``new_path``) and their rel paths become ``prefix + rel``:
        ``prefix`` is ``""`` for a moved folder, ``"docs/"`` when an outer folder takes over
        its subfolder ``docs``. File and chunk ids stay; the ``terms`` the lexical arm derives
        from rel paths are rewritten. A file already known under ``new_path`` at the new rel
        wins: the old one is dropped with its chunks. Returns the ok files moved (0 when
        ``old_path`` is unknown or the same as ``new_path``).
        """

    def mark_indexed(self, folder_id: int, commit: str | None = None) -> None:
        """Stamp the folder with the time of its last complete index run and the git commit
        it read (None: not a git checkout)."""

    def clear_chunks(self) -> None:
        """Drop every file and chunk and forget the model (a rebuild), keeping the folders."""

    def preload(self) -> None:
        """Read what ``nearest`` needs into memory if it is not there yet (a hint).

        Search calls it while the embedding model loads in the background, so a cold search
        reads the vectors and builds the model at the same time. ``nearest`` reads whatever
        changed since (and everything, without a preload) itself.
        """

    def nearest(
        self, query: np.ndarray[Any, Any], pool: int, file_ids: Sequence[int] | None
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine) of the ``pool`` chunks nearest to a unit query vector, best first.

        Only chunks of ``file_ids`` count when it is given, and only chunks that have a vector
        (pending ones join as they get theirs). Exact (a float32 matrix kept in
        memory between calls, refreshed with what changed) unless the backend has an ANN index;
        the scores are exact cosines either way. A store that ranks distinct texts over every
        file (``choose_copies``) names each text by its first chunk, so ``pool`` texts. Raises
        ``ValueError`` when the query's length is not the stored dimension: check ``model()``
        first.
        """

    def chunk_files(self, ids: Sequence[int]) -> dict[int, int]:
        """Chunk id → file id for chunks just returned by :meth:`nearest` (from memory where the
        vectors are held there; chunks not found are left out)."""

    def lexical(self, query: LexicalQuery, limit: int, file_ids: Sequence[int] | None) -> list[int]:
        """Ids of the chunks matching a full-text query, best BM25 first, at most ``limit``.

        Only chunks of ``file_ids`` count when it is given; over every file, a store that ranks
        distinct texts names each by its first chunk (as :meth:`nearest`). Any query text is
        safe: words are quoted, never parsed as query syntax.
        """

    def chunks(self, ids: Sequence[int]) -> list[ChunkRow]:
        """Stored chunks by id, in the order asked; unknown ids are left out. Safe to call
        while the lexical arm runs in another thread (like :meth:`nearest`)."""

    def chunk_places(self, ids: Sequence[int]) -> list[ChunkPlace]:
        """The places of stored chunks by id, in the order asked; unknown ids are left out.
        Safe to call while the lexical arm runs in another thread (like :meth:`nearest`)."""

    def text_keys(
        self, ids: Sequence[int], from_vectors: bool = True
    ) -> dict[int, tuple[int, int | str]]:
        """Chunk id → (file id, text key) of those of ``ids`` that exist: copies of one text
        share the key, other chunks' keys differ (a text hash, or a store's own id of the
        text, which ``from_vectors=False`` never uses: a search that reads no vectors). The
        search groups copies by it; safe beside the lexical arm like :meth:`chunk_places`."""

    def text_places(self, hashes: Sequence[str]) -> list[ChunkPlace]:
        """The places of every stored chunk whose text hash is one of ``hashes``, by chunk id
        (copies of one text: search lists them under the hit they collapse into)."""

    def choose_copies(self, hashes: Iterable[str], choose: ChooseCopy) -> dict[str, ChunkPlace]:
        """The place of the copy ``choose`` picks (from their ids and file ids, by id) of each
        of ``hashes`` whose copies the store holds in memory already, by text hash: a LanceDB
        texts table's answer names one chunk per text, and the search picks its representative
        among them. Never reads; texts not held are left out (always, for SQLite)."""

    def has_copies(self) -> bool:
        """False only when the store knows that no two chunks hold one text: search then skips
        looking up copies."""

    def reading(self) -> contextlib.AbstractContextManager[None]:
        """The reads of one search, which may run in two threads: a store may read each
        table's version once for all of them (LanceDB; SQLite's reads need nothing)."""

    def maintain(self) -> None:
        """Bring derived indexes up to date; run after every index run and folder removal."""

    def size_bytes(self) -> int:
        """Bytes the index takes on disk."""

    def close(self) -> None:
        """Release the store's connections; the object is not used afterwards."""


COMMIT_KEY = "folder_commit.{}"  # the meta key of a folder's commit (by its id)


def model_mismatch_message(path: Location, stored: str, current: str) -> str:
    """The message for an index built with another model."""
    if isinstance(path, RemoteLocation):  # built elsewhere (CI): rebuilding here is no answer
        return (
            f"The index {path} was built with model {stored}, but this semsearch uses "
            f"{current}: its scores would be wrong. Search it with the semsearch version (and "
            "modelDir/modelVariant) that built it, or rebuild it with this one."
        )
    return (
        f"The index {path} was built with model {stored}, but the configured model is {current}. "
        "Rebuild it with `semsearch index --force`, or point --index at another file."
    )


class BlockMismatchError(ValueError):
    """A packed vector block whose codes are not those of the chunks that own a column: met by
    the vector arm, which knows no path; a backend reports it as damage."""


def damaged_error(path: Location, problem: str) -> IndexDamagedError:
    """The error for an index that SQLite or LanceDB cannot read (``problem`` says why)."""
    if isinstance(path, RemoteLocation):  # an object store renames nothing: no --rebuild
        advice = "Index into a new prefix and point readers at it (then delete this one)."
    else:
        advice = (
            "Run `semsearch index --rebuild` to set it aside (it is kept, renamed) and index "
            "the configured folders again."
        )
    message = f"The index {path} is damaged: {problem}. {advice}"
    return IndexDamagedError(message, problem)


@dataclass(frozen=True)
class IndexCheck:
    """What a full check of an index found (``status --check``): the checks it ran, and the
    problems (none when the index is sound)."""

    path: Location
    checks: tuple[str, ...]
    problems: tuple[str, ...]
    # every problem is in a table an index run makes again (LanceDB's texts table)
    mended_by_index: bool = False
    read_only: bool = False  # this process cannot write the index (read-only media or access)

    @property
    def is_damaged(self) -> bool:
        """True when the check found a problem."""
        return bool(self.problems)


def reports_damage(
    problem: Callable[[Exception], str | None],
) -> Callable[[type[Backend]], type[Backend]]:
    """A class decorator for a backend: its public methods raise :class:`IndexDamagedError`,
    naming the store's ``path``, for any exception ``problem`` recognises as damage (it returns
    what it says about it, or None for any other exception, which passes unchanged).

    Damage shows wherever a read meets it, so the translation sits on every entry point rather
    than on each query.
    """

    def decorate(cls: type[Backend]) -> type[Backend]:
        for name in dir(cls):
            member = inspect.getattr_static(cls, name)
            if not name.startswith("_") and inspect.isfunction(member):
                setattr(cls, name, _translated(member, problem))
        return cls

    return decorate


def _translated(
    method: Callable[..., Any], problem: Callable[[Exception], str | None]
) -> Callable[..., Any]:
    @functools.wraps(method)
    def run(store: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(store, *args, **kwargs)
        except Exception as exc:
            found = problem(exc)
            if found is None:
                raise
            raise damaged_error(store.path, found) from exc

    return run
