"""Path vectors (the embedding of each file's rel path): which files are pending, storing and
reading them, and how long a file keeps its own (while its rel stays).

Tests taking the ``store`` fixture run against both backends.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from semsearch.store import FileWrite, Store, open_store
from tests.conftest import BACKENDS, location
from tests.test_store import file_write


def path_vector(seed: int, dim: int = 4) -> np.ndarray:
    """A unit float32 vector, different for each seed."""
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


def give_vectors(store: Store, ids: list[int], seed: int = 0) -> dict[int, np.ndarray]:
    """Store a distinct path vector for each of ``ids``; returns them by id."""
    vectors = {file_id: path_vector(seed + n) for n, file_id in enumerate(ids)}
    store.set_path_vectors(ids, np.stack(list(vectors.values())))
    return vectors


def assert_vectors(found: dict[int, np.ndarray], expected: dict[int, np.ndarray]) -> None:
    assert sorted(found) == sorted(expected)
    for file_id, vector in expected.items():
        assert found[file_id].dtype == np.float32 and found[file_id].shape == vector.shape
        # within a byte's precision (SQLite keeps a path vector as bytes scaled to its largest
        # component: at most half a step, max/254, off); other files' differ by ~0.5 somewhere
        step = float(np.abs(vector).max()) / 254
        np.testing.assert_allclose(found[file_id], vector, rtol=0, atol=step * 1.01)


def ids_of(store: Store, folder: int) -> dict[str, int]:
    return {rel: state.id for rel, state in store.file_states(folder).items()}


def not_ok(folder: int, rel: str, status: str) -> FileWrite:
    return FileWrite(folder, rel, 1, 0, "sha", status, "")


def test_pending_paths_are_the_ok_files_without_one_by_id(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "src/b.py", ["beta"]), not_ok(folder, "e.md", "empty")])
    store.write_files([file_write(folder, "a.md", ["alpha"]), not_ok(folder, "x.bin", "binary")])
    store.write_files([file_write(folder, "docs/c.txt", ["gamma"])])
    ids = ids_of(store, folder)
    expected = sorted((ids[rel], rel) for rel in ("src/b.py", "a.md", "docs/c.txt"))
    assert store.pending_paths(10) == expected
    assert store.pending_paths(2) == expected[:2]
    assert store.pending_paths(0) == []
    give_vectors(store, [expected[1][0]])
    assert store.pending_paths(10) == [expected[0], expected[2]]
    assert store.pending_paths(1) == [expected[0]]
    give_vectors(store, [expected[0][0], expected[2][0]], seed=5)
    assert store.pending_paths(10) == []  # the empty and binary files never are


def test_a_file_rewritten_as_not_ok_is_no_longer_pending(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "a.md", ["alpha"]), file_write(folder, "b.md", ["b"])])
    store.write_files([not_ok(folder, "a.md", "empty")])
    assert store.pending_paths(10) == [(ids_of(store, folder)["b.md"], "b.md")]


def test_set_path_vectors_then_read_them_back(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, f"f{n}.py", [f"text {n}"]) for n in range(3)])
    ids = sorted(ids_of(store, folder).values())
    assert store.path_vectors(ids) == {}
    given = give_vectors(store, ids[:2])
    assert_vectors(store.path_vectors([*ids, ids[-1] + 1000]), given)
    assert_vectors(store.path_vectors([ids[1]]), {ids[1]: given[ids[1]]})
    assert store.path_vectors([]) == {}
    again = give_vectors(store, [ids[0]], seed=9)  # read above: what was cached is replaced
    assert_vectors(store.path_vectors(ids), {**given, **again})
    assert not np.array_equal(again[ids[0]], given[ids[0]])


def test_vectors_of_files_not_stored_are_ignored(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "a.py", ["alpha"]), file_write(folder, "b.py", ["b"])])
    ids = ids_of(store, folder)
    store.delete_files(folder, ["b.py"])
    unknown = [ids["b.py"], max(ids.values()) + 1000]
    store.set_path_vectors(unknown, np.stack([path_vector(1), path_vector(2)]))
    assert store.path_vectors(unknown) == {}
    assert store.pending_paths(10) == [(ids["a.py"], "a.py")]
    given = give_vectors(store, [unknown[1], ids["a.py"]])  # mixed with a stored one
    assert_vectors(store.path_vectors([*unknown, ids["a.py"]]), {ids["a.py"]: given[ids["a.py"]]})
    assert store.pending_paths(10) == []


def test_set_path_vectors_changes_the_generation(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "a.py", ["alpha"]), file_write(folder, "b.py", ["b"])])
    ids = ids_of(store, folder)
    seen = [store.generation()]
    give_vectors(store, [ids["a.py"]])
    seen.append(store.generation())
    give_vectors(store, [ids["b.py"]])
    seen.append(store.generation())
    give_vectors(store, [ids["a.py"]], seed=3)  # a new vector for one that had one
    seen.append(store.generation())
    assert seen == sorted(set(seen)), seen


def test_a_rewrite_at_the_same_rel_keeps_the_path_vector(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "a.py", ["alpha"]), file_write(folder, "b.py", ["b"])])
    before = ids_of(store, folder)
    given = give_vectors(store, list(before.values()))
    store.write_files([file_write(folder, "a.py", ["alpha, edited", "and grown"])])
    store.write_files([file_write(folder, "b.py", ["b, edited"])])
    after = ids_of(store, folder)  # SQLite gives a rewritten file a new id
    assert store.pending_paths(10) == []
    expected = {after[rel]: given[before[rel]] for rel in ("a.py", "b.py")}
    assert_vectors(store.path_vectors(list(after.values())), expected)


def test_a_rewrite_without_reuse_makes_the_path_vector_pending_again(store: Store) -> None:
    """``index --force`` writes without reuse: every vector of the file is made again."""
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "a.py", ["alpha"]), file_write(folder, "b.py", ["b"])])
    before = ids_of(store, folder)
    given = give_vectors(store, list(before.values()))
    store.write_files([file_write(folder, "b.py", ["b"])], reuse=False)
    after = ids_of(store, folder)
    assert store.pending_paths(10) == [(after["b.py"], "b.py")]
    expected = {after["a.py"]: given[before["a.py"]]}
    assert_vectors(store.path_vectors(list(after.values())), expected)


def test_deleted_files_lose_their_path_vectors(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "a.py", ["alpha"]), file_write(folder, "b.py", ["b"])])
    ids = ids_of(store, folder)
    given = give_vectors(store, [ids["a.py"], ids["b.py"]])
    assert store.delete_files(folder, ["a.py"]) == 1
    assert_vectors(store.path_vectors(list(ids.values())), {ids["b.py"]: given[ids["b.py"]]})
    store.write_files([file_write(folder, "a.py", ["alpha"])])  # back: a new file, pending
    again = ids_of(store, folder)["a.py"]
    assert store.pending_paths(10) == [(again, "a.py")]
    assert store.path_vectors([again]) == {}


def test_a_removed_folder_takes_its_path_vectors(store: Store) -> None:
    a = store.ensure_folder("/srv/a", "a")
    b = store.ensure_folder("/srv/b", "b")
    store.write_files([file_write(a, "x.py", ["alpha"]), file_write(b, "x.py", ["beta"])])
    gone, kept = ids_of(store, a)["x.py"], ids_of(store, b)["x.py"]
    given = give_vectors(store, [gone, kept])
    assert store.remove_folder("/srv/a") == 1
    assert_vectors(store.path_vectors([gone, kept]), {kept: given[kept]})
    store.set_path_vectors([gone], path_vector(7)[None, :])  # its id is not stored any more
    assert store.path_vectors([gone]) == {}
    a = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(a, "x.py", ["alpha"])])
    assert store.pending_paths(10) == [(ids_of(store, a)["x.py"], "x.py")]


def test_a_rebuild_drops_every_path_vector(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "a.py", ["alpha"]), file_write(folder, "b.py", ["b"])])
    old = list(ids_of(store, folder).values())
    give_vectors(store, old)
    store.clear_chunks()
    assert store.path_vectors(old) == {} and store.pending_paths(10) == []
    store.set_model("model-b", 4)
    store.write_files([file_write(folder, "a.py", ["alpha"]), file_write(folder, "b.py", ["b"])])
    new = ids_of(store, folder)
    assert store.pending_paths(10) == sorted((i, rel) for rel, i in new.items())
    assert store.path_vectors([*new.values(), *old]) == {}


def test_a_move_under_a_prefix_makes_the_moved_paths_pending_again(store: Store) -> None:
    inner = store.ensure_folder("/srv/p/docs", "docs")
    outer = store.ensure_folder("/srv/p", "p")
    store.write_files(
        [
            file_write(inner, "net/retry.py", ["zebra"]),
            file_write(inner, "old.md", ["inner copy"]),
            file_write(outer, "docs/old.md", ["outer copy"]),
            file_write(outer, "main.py", ["lion"]),
        ]
    )
    mine, theirs = ids_of(store, inner), ids_of(store, outer)
    given = give_vectors(store, [*mine.values(), *theirs.values()])
    assert store.pending_paths(10) == []
    assert store.move_folder("/srv/p/docs", "/srv/p", "docs/") == 1
    moved = mine["net/retry.py"]
    assert ids_of(store, outer)["docs/net/retry.py"] == moved  # the same file, a new rel
    assert store.pending_paths(10) == [(moved, "docs/net/retry.py")]
    kept = {i: given[i] for i in theirs.values()}  # outer's own, docs/old.md included
    assert_vectors(store.path_vectors([*mine.values(), *theirs.values()]), kept)
    again = give_vectors(store, [moved], seed=20)
    assert_vectors(store.path_vectors([moved]), again)
    assert store.pending_paths(10) == []


def test_a_move_that_keeps_the_rels_keeps_the_path_vectors(store: Store) -> None:
    folder = store.ensure_folder("/ci/checkout", "checkout")
    store.write_files(
        [file_write(folder, "src/x.py", ["alpha"]), file_write(folder, "y.md", ["b"])]
    )
    ids = ids_of(store, folder)
    given = give_vectors(store, list(ids.values()))
    assert store.move_folder("/ci/checkout", "/home/me/proj") == 2
    assert store.pending_paths(10) == []
    assert_vectors(store.path_vectors(list(ids.values())), given)
    store.maintain()  # compacts (LanceDB): the vectors stay
    assert_vectors(store.path_vectors(list(ids.values())), given)
    assert store.pending_paths(10) == []


def test_a_move_onto_a_known_rel_keeps_the_winner_s_path_vector(store: Store) -> None:
    old = store.ensure_folder("/srv/old", "old")
    new = store.ensure_folder("/srv/new", "new")
    store.write_files(
        [
            file_write(old, "same.py", ["old copy"]),
            file_write(old, "only.py", ["only in old"]),
            file_write(new, "same.py", ["new copy"]),
        ]
    )
    dropped, only = ids_of(store, old)["same.py"], ids_of(store, old)["only.py"]
    winner = ids_of(store, new)["same.py"]
    given = give_vectors(store, [dropped, only, winner])
    assert store.move_folder("/srv/old", "/srv/new") == 1
    assert ids_of(store, new) == {"same.py": winner, "only.py": only}
    assert store.pending_paths(10) == []
    expected = {only: given[only], winner: given[winner]}
    assert_vectors(store.path_vectors([dropped, only, winner]), expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_long_running_reader_sees_path_vectors_another_store_wrote(
    tmp_path: Path, backend: str
) -> None:
    writer = open_store(backend, location(tmp_path, backend), create=True)
    writer.set_model("model-a", 4)
    folder = writer.ensure_folder("/srv/a", "a")
    writer.write_files([file_write(folder, "a.py", ["alpha"]), file_write(folder, "b.py", ["b"])])
    ids = ids_of(writer, folder)
    reader = open_store(backend, location(tmp_path, backend))
    assert reader.path_vectors(list(ids.values())) == {}
    given = give_vectors(writer, [ids["a.py"]])
    assert_vectors(reader.path_vectors(list(ids.values())), given)
    again = give_vectors(writer, [ids["a.py"]], seed=4)
    writer.delete_files(folder, ["b.py"])
    assert_vectors(reader.path_vectors(list(ids.values())), again)
    assert reader.pending_paths(10) == []
    writer.move_folder("/srv/a", "/srv/z", "sub/")
    assert reader.path_vectors(list(ids.values())) == {}
    assert reader.pending_paths(10) == [(ids["a.py"], "sub/a.py")]


@pytest.mark.lancedb
def test_a_lancedb_index_of_schema_2_gets_path_vectors(tmp_path: Path) -> None:
    path = location(tmp_path, "lancedb")
    store = open_store("lancedb", path, create=True)
    store.set_model("model-a", 4)
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "a.py", ["alpha"])])
    file_id = ids_of(store, folder)["a.py"]
    store._put_meta({"schema_version": "2"})  # type: ignore[attr-defined]
    assert not (path / "paths.lance").exists()
    old = open_store("lancedb", path)  # read-only use: searched without path vectors
    assert old.path_vectors([file_id]) == {} and old.pending_paths(10) == [(file_id, "a.py")]
    upgraded = open_store("lancedb", path, create=True)
    assert upgraded.meta("schema_version") == "3"  # type: ignore[attr-defined]
    given = give_vectors(upgraded, [file_id])
    assert_vectors(old.path_vectors([file_id]), given)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_switch_of_model_drops_the_old_model_s_path_vectors(tmp_path: Path, backend: str) -> None:
    store = open_store(backend, location(tmp_path, backend), create=True)
    store.set_model("model-a", 4)
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "a.py", ["alpha"])])
    file_id = ids_of(store, folder)["a.py"]
    give_vectors(store, [file_id])
    store.write_files([not_ok(folder, "a.py", "empty")])  # the same rel: the vector stays
    store.set_model("model-b", 8)  # allowed: no chunks are left
    store.write_files([file_write(folder, "a.py", ["alpha"], dim=8)])
    assert store.path_vectors([file_id]) == {}
    assert store.pending_paths(10) == [(file_id, "a.py")]


def test_a_zero_row_records_a_file_without_a_path_vector(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "a.py", ["alpha"]), file_write(folder, "b.md", ["b"])])
    ids = ids_of(store, folder)
    vectors = np.stack([path_vector(1), np.zeros(4, dtype=np.float32)])
    store.set_path_vectors([ids["a.py"], ids["b.md"]], vectors)
    assert store.pending_paths(10) == []  # the document is done: it has none
    assert_vectors(store.path_vectors(list(ids.values())), {ids["a.py"]: vectors[0]})
