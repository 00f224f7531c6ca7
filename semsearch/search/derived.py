"""Values derived from a store's file references, made once per refs dict.

``Store.file_refs()`` hands out the same dict object until the index changes, so what is derived
from every file (the name index of the named-files arm, the folders of public Python modules, the
files of recent filters) is made once per dict and reused by every search until the next write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from semsearch.store import FileRef

T = TypeVar("T")
_KEEP = 12  # values kept: a process searches one index, tests and servers a few, three kinds each
_cache: dict[tuple[Callable[..., Any], int], tuple[dict[int, FileRef], Any]] = {}
_lock = threading.Lock()


def per_refs(refs: dict[int, FileRef], build: Callable[[dict[int, FileRef]], T]) -> T:
    """``build(refs)``, made once per refs dict and ``build``."""
    key = (build, id(refs))
    with _lock:
        cached = _cache.get(key)
        if cached is not None and cached[0] is refs:
            value: T = cached[1]
            return value
    value = build(refs)
    with _lock:
        while len(_cache) >= _KEEP:
            del _cache[next(iter(_cache))]
        _cache[key] = (refs, value)  # holding refs keeps its id from being reused
    return value
