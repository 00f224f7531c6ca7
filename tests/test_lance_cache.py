"""The copies readers of an index on object storage keep on local disk (store.lance.cache)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lancedb", reason='needs the lancedb extra: pip install "semsearch[lancedb]"')

import pyarrow as pa

from semsearch.config import RemoteLocation, remote_cache_dir
from semsearch.store.lance.cache import ReadCache, uri_key

OPTIONS = (("aws_endpoint", "http://127.0.0.1:9000"), ("aws_secret_access_key", "s3cr3t"))


def location(root: Path | None, uri: str = "s3://team/index") -> RemoteLocation:
    return RemoteLocation(uri, OPTIONS, root)


class Loads:
    """A table read from the store, counted."""

    def __init__(self, values: list[int]) -> None:
        self.table = pa.table({"id": values})
        self.count = 0

    def __call__(self) -> pa.Table:
        self.count += 1
        return self.table


def test_a_version_read_once_is_read_from_disk_after(tmp_path: Path) -> None:
    load = Loads([1, 2, 3])
    for _ in range(3):
        cache = ReadCache(location(tmp_path))  # a new process each time
        cache.use_index("abc123")
        assert cache.read("files", "7", load) == load.table
    assert load.count == 1
    (copy,) = (tmp_path / uri_key(location(tmp_path)) / "abc123").iterdir()
    assert copy.name == "files@7.arrow"
    assert b"s3cr3t" not in copy.read_bytes()


def test_a_new_version_supersedes_the_copy_of_the_old(tmp_path: Path) -> None:
    cache = ReadCache(location(tmp_path))
    cache.use_index("abc123")
    cache.read("files", "7", Loads([1]))
    cache.read("folders", "2", Loads([1]))
    newer = Loads([1, 2])
    assert cache.read("files", "8", newer) == newer.table
    folder = tmp_path / uri_key(location(tmp_path)) / "abc123"
    assert sorted(p.name for p in folder.iterdir()) == ["files@8.arrow", "folders@2.arrow"]


def test_an_index_made_again_under_the_prefix_never_meets_the_old_copies(tmp_path: Path) -> None:
    old, new = ReadCache(location(tmp_path)), ReadCache(location(tmp_path))
    old.use_index("first")
    old.read("files", "1", Loads([1]))
    new.use_index("second")  # the same prefix deleted and indexed again: versions from 1
    fresh = Loads([5, 6])
    assert new.read("files", "1", fresh) == fresh.table and fresh.count == 1
    assert [p.name for p in (tmp_path / uri_key(location(tmp_path))).iterdir()] == ["second"]


@pytest.mark.parametrize("index_id", [None, ""])
def test_an_index_without_an_id_keeps_no_copy(tmp_path: Path, index_id: str | None) -> None:
    cache = ReadCache(location(tmp_path / "cache"))
    cache.use_index(index_id)
    load = Loads([1])
    cache.read("files", "1", load)
    cache.read("files", "1", load)
    assert load.count == 2 and not (tmp_path / "cache").exists()


def test_a_damaged_copy_is_read_from_the_store_again(tmp_path: Path) -> None:
    cache = ReadCache(location(tmp_path))
    cache.use_index("abc123")
    cache.read("files", "7", Loads([1]))
    (copy,) = (tmp_path / uri_key(location(tmp_path)) / "abc123").iterdir()
    copy.write_bytes(b"not arrow")
    load = Loads([1])
    assert cache.read("files", "7", load) == load.table and load.count == 1
    assert ReadCache(location(tmp_path)).read("files", "7", Loads([9])).num_rows == 1


def test_a_folder_that_cannot_be_written_leaves_the_reads_as_they_were(tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file\n")
    cache = ReadCache(location(blocked / "remote"))
    cache.use_index("abc123")
    load = Loads([1, 2])
    assert cache.read("files", "7", load) == load.table
    assert cache.read("files", "7", load) == load.table
    assert load.count == 2 and blocked.read_text() == "a file\n"


def test_no_cache_folder_means_none(tmp_path: Path) -> None:
    cache = ReadCache(location(None))
    cache.use_index("abc123")
    load = Loads([1])
    cache.read("files", "7", load)
    cache.read("files", "7", load)
    assert load.count == 2


def test_the_key_is_the_uri_and_endpoint_never_a_credential() -> None:
    one = uri_key(location(None))
    assert one == uri_key(RemoteLocation("s3://team/index", (OPTIONS[0],)))
    assert one != uri_key(location(None, "s3://team/other"))
    assert "s3cr3t" not in one


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"HOME": "/h"}, Path("/h/.cache/semsearch/remote")),
        ({"HOME": "/h", "XDG_CACHE_HOME": "/x"}, Path("/x/semsearch/remote")),
        ({"HOME": "/h", "SS_REMOTE_CACHE": "/c"}, Path("/c")),
        ({"HOME": "/h", "SS_REMOTE_CACHE": "off"}, None),
        ({"HOME": "/h", "SS_REMOTE_CACHE": "0"}, None),
    ],
)
def test_the_cache_folder_comes_from_the_environment(
    env: dict[str, str], expected: Path | None
) -> None:
    assert remote_cache_dir(env) == expected
