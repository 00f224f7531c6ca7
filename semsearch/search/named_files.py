"""The files a query names: where the named-files arm of a hybrid search looks.

A file is named when every word of its name is a word of the query (``ranking.names_file``:
"how pandoc options control output format" names `Options.hs` and `Format.hs`). The priors
already raise such a file's chunks, but only among the fused candidates; a named file that
neither arm ranked high enough never gets there. The arm brings each named file's best chunk
(by cosine) in, at a small RRF weight (``ranking.NAMED_WEIGHT``).

Checking every file's name for every query costs a millisecond at 10k files, so the names are
indexed once per ``Store.file_refs()`` dict (:func:`~semsearch.search.derived.per_refs`): a file is
filed under one word of its name, and a query looks up only its own words.
"""

from __future__ import annotations

from collections.abc import Collection

from semsearch.search.derived import per_refs
from semsearch.search.ranking import QueryInfo, file_name_words
from semsearch.store import FileRef

_NameIndex = dict[str, list[tuple[int, frozenset[str]]]]


def named_files(
    refs: dict[int, FileRef], info: QueryInfo, allowed: Collection[int] | None = None
) -> list[int]:
    """The ids of the files of ``refs`` (within ``allowed`` when given) that the query names,
    ascending."""
    index = per_refs(refs, name_index)
    found = {
        file_id
        for term in info.terms
        for file_id, words in index.get(term, ())
        if words <= info.terms
    }
    if allowed is not None:
        found &= set(allowed)
    return sorted(found)


def name_index(refs: dict[int, FileRef]) -> _NameIndex:
    """Word → (file id, the words of its name) for the files filed under that word."""
    index: _NameIndex = {}
    for file_id, ref in refs.items():
        words = file_name_words(ref.rel)
        if words:
            index.setdefault(min(words), []).append((file_id, words))
    return index
