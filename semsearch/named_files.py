"""The files a query names: where the named-files arm of a hybrid search looks.

A file is named when every word of its name is a word of the query (``ranking.names_file``:
"how pandoc options control output format" names `Options.hs` and `Format.hs`). The priors
already raise such a file's chunks, but only among the fused candidates; a named file that
neither arm ranked high enough never gets there. The arm brings each named file's best chunk
(by cosine) in, at a small RRF weight (``ranking.NAMED_WEIGHT``).

Checking every file's name for every query costs a millisecond at 10k files, so the names are
indexed once per ``Store.file_refs()`` dict, which stays the same object until the index
changes: a file is filed under one word of its name, and a query looks up only its own words.
"""

from __future__ import annotations

import threading
from collections.abc import Collection

from semsearch.ranking import QueryInfo, file_name_words
from semsearch.store import FileRef

_NameIndex = dict[str, list[tuple[int, frozenset[str]]]]
_KEEP = 4  # name indexes kept: a process searches one index, tests and servers a few
_cache: dict[int, tuple[dict[int, FileRef], _NameIndex]] = {}  # id(refs) → (refs, index)
_lock = threading.Lock()


def named_files(
    refs: dict[int, FileRef], info: QueryInfo, allowed: Collection[int] | None = None
) -> list[int]:
    """The ids of the files of ``refs`` (within ``allowed`` when given) that the query names,
    ascending."""
    index = _name_index(refs)
    found = {
        file_id
        for term in info.terms
        for file_id, words in index.get(term, ())
        if words <= info.terms
    }
    if allowed is not None:
        found &= set(allowed)
    return sorted(found)


def _name_index(refs: dict[int, FileRef]) -> _NameIndex:
    """Word → (file id, the words of its name) for the files filed under that word."""
    with _lock:
        cached = _cache.get(id(refs))
        if cached is not None and cached[0] is refs:
            return cached[1]
    index: _NameIndex = {}
    for file_id, ref in refs.items():
        words = file_name_words(ref.rel)
        if words:
            index.setdefault(min(words), []).append((file_id, words))
    with _lock:
        while len(_cache) >= _KEEP:
            del _cache[next(iter(_cache))]
        _cache[id(refs)] = (refs, index)  # holding refs keeps its id from being reused
    return index
