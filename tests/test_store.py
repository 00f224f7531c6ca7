"""The stores: format, transactions, FTS consistency, model guard, writer lock, vector arm.

Tests taking the ``store`` fixture run against both backends; the rest are about one of them.
"""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from semsearch.config import load_settings
from semsearch.errors import (
    ConfigError,
    IndexDamagedError,
    IndexMissingError,
    LockedError,
    ModelMismatchError,
    StoreError,
)
from semsearch.store import (
    ChunkPlace,
    ChunkRecord,
    FileWrite,
    Store,
    open_store,
    text_hash,
    write_lock,
)
from semsearch.store.base import PlaceCache
from semsearch.store.exact import ExactVectors
from semsearch.store.sqlite.schema import SCHEMA_VERSION, TABLES_SQL
from semsearch.store.sqlite.store import SqliteStore
from semsearch.text.lexical import COLUMNS, TERMS_VERSION, LexicalQuery, lexical_query
from tests.conftest import BACKENDS, location


def record(text: str, line: int = 1) -> ChunkRecord:
    return ChunkRecord(line, line, 0, len(text), None, text)


def file_write(folder_id: int, rel: str, texts: list[str], dim: int = 4) -> FileWrite:
    vectors = np.eye(dim, dtype=np.float32)[: len(texts)]
    chunks = tuple(record(text, n + 1) for n, text in enumerate(texts))
    return FileWrite(folder_id, rel, 1, 10, "sha", "ok", "text", chunks, vectors)


def words(*alternatives: str, columns: tuple[str, ...] = COLUMNS) -> LexicalQuery:
    return LexicalQuery(alternatives, columns)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> SqliteStore:
    return SqliteStore(tmp_path / "index.db", create=True)


def fts_count(store: Store, word: str) -> int:
    return len(store.lexical(words(word), 100, None))


@pytest.mark.parametrize("backend", BACKENDS)
def test_missing_index_is_a_clear_error(tmp_path: Path, backend: str) -> None:
    with pytest.raises(IndexMissingError, match="Run `semsearch index` first"):
        open_store(backend, location(tmp_path, backend))


def test_not_an_index_is_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.db"
    bogus.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(IndexDamagedError, match="is damaged: it is not a SQLite database"):
        SqliteStore(bogus)


def test_schema_version_and_wal(sqlite_store: SqliteStore, tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "index.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert sqlite_store.meta("schema_version") == str(SCHEMA_VERSION)


def test_vectors_are_little_endian_float16_blobs(sqlite_store: SqliteStore, tmp_path: Path) -> None:
    folder = sqlite_store.ensure_folder("/srv/a", "a")
    sqlite_store.write_files([file_write(folder, "x.md", ["alpha beta"])])
    blob = sqlite3.connect(tmp_path / "index.db").execute("SELECT vector FROM chunks").fetchone()[0]
    assert struct.unpack("<4e", blob) == (1.0, 0.0, 0.0, 0.0)


def small_index(path: Path, rel: str, texts: list[str]) -> int:
    """A closed SQLite index of one file of ``texts`` (model ``m``, 4 dimensions); its folder id."""
    store = SqliteStore(path, create=True)
    store.set_model("m", 4)
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, rel, texts)])
    store.close()
    return folder


def test_float32_rows_of_a_version_4_index_are_read_beside_float16_rows(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    folder = small_index(path, "a.md", ["alpha", "beta"])
    old = sqlite3.connect(path)  # as version 4 wrote them: float32, and the version number
    old.execute("UPDATE chunks SET vector = ? WHERE ord = 0", (struct.pack("<4f", 0.6, 0.8, 0, 0),))
    old.execute("UPDATE chunks SET vector = ? WHERE ord = 1", (struct.pack("<4f", 0, 1, 0, 0),))
    old.execute("PRAGMA user_version = 4")
    old.commit()
    old.close()
    store = SqliteStore(path)
    assert store.meta("schema_version") == str(SCHEMA_VERSION)
    _, _, only_float32 = store.vectors(0)
    np.testing.assert_array_equal(only_float32, np.array([[0.6, 0.8, 0, 0], [0, 1, 0, 0]], "f4"))
    store.write_files([file_write(folder, "b.md", ["gamma"])])  # written as float16
    ids, _, matrix = store.vectors(0)
    assert matrix.dtype == np.float32
    expected = np.array([[0.6, 0.8, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0]], dtype=np.float32)
    np.testing.assert_array_equal(matrix, expected)  # float32 rows exact, float16 rows too here
    found = store.nearest(np.array([0.6, 0.8, 0, 0], dtype=np.float32), 1, None)
    assert found == [(int(ids[0]), pytest.approx(1.0))]


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE chunks SET vector = x'010203'",
        # float16 rows with no recorded dimension: not guessed as float32 of half the size
        "DELETE FROM meta WHERE key = 'dim'",
    ],
)
def test_a_vector_of_another_size_is_reported_as_damage(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "bad.db"
    small_index(path, "a.md", ["alpha"])
    with sqlite3.connect(path) as bad:
        bad.execute(damage)
    bad.close()
    store = SqliteStore(path)
    with pytest.raises(IndexDamagedError, match=r"is damaged: it holds chunk vectors.*--rebuild"):
        store.vectors(0)


def test_vectors_come_back_in_id_order(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "x.md", ["alpha", "beta"])])
    store.write_files([file_write(folder, "y.md", ["gamma"])])
    ids, file_ids, matrix = store.vectors(0)
    assert matrix.dtype == np.float32 and matrix.shape == (3, 4)
    assert list(ids) == sorted(ids) and list(ids) == list(store.chunk_ids())
    np.testing.assert_array_equal(matrix, np.eye(4, dtype=np.float32)[[0, 1, 0]])
    later_ids, _, later = store.vectors(int(ids[1]))
    assert list(later_ids) == [ids[2]] and later.shape == (1, 4)
    refs = {r.id: r.rel for r in store.file_refs().values()}
    assert [refs[int(f)] for f in file_ids] == ["x.md", "x.md", "y.md"]


def test_chunk_places_by_id_and_by_text_hash(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "x.md", ["alpha", "beta"])])
    store.write_files([file_write(folder, "y.md", ["gamma", "alpha"])])
    x, y = sorted(store.file_refs(), key=lambda f: store.file_refs()[f].rel)
    ids = [int(i) for i in store.chunk_ids()]
    alpha = text_hash("alpha")
    expected = [
        ChunkPlace(ids[0], x, alpha, 1, 1, None),
        ChunkPlace(ids[1], x, text_hash("beta"), 2, 2, None),
        ChunkPlace(ids[2], y, text_hash("gamma"), 1, 1, None),
        ChunkPlace(ids[3], y, alpha, 2, 2, None),
    ]
    assert store.chunk_places([ids[3], 10**9, ids[0]]) == [expected[3], expected[0]]
    assert store.chunk_places([]) == []
    assert store.text_places([alpha, text_hash("delta")]) == [expected[0], expected[3]]
    assert store.text_places(["not a hash'; --"]) == store.text_places([]) == []
    store.delete_files(folder, ["x.md"])
    assert store.text_places([alpha]) == [expected[3]]


def test_replace_and_delete_keep_fts_in_step(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "x.md", ["alpha one", "alpha two"])])
    assert fts_count(store, "alpha") == 2
    store.write_files([file_write(folder, "x.md", ["gamma"])])
    assert (fts_count(store, "alpha"), fts_count(store, "gamma")) == (0, 1)
    assert store.delete_files(folder, ["x.md"]) == 1
    assert fts_count(store, "gamma") == 0
    assert store.chunk_count() == 0


def test_remove_folder_cascades(store: Store) -> None:
    a = store.ensure_folder("/srv/a", "a")
    b = store.ensure_folder("/srv/a-private", "a-private")
    store.write_files([file_write(a, "x.md", ["shared word"]), file_write(b, "y.md", ["shared"])])
    assert store.remove_folder("/srv/a") == 1
    assert [f.path for f in store.folders()] == ["/srv/a-private"]
    assert fts_count(store, "shared") == 1


def test_generation_bumps_on_every_write(store: Store) -> None:
    seen = [store.generation()]
    folder = store.ensure_folder("/srv/a", "a")
    seen.append(store.generation())
    store.write_files([file_write(folder, "x.md", ["alpha"])])
    seen.append(store.generation())
    store.touch_files([(next(iter(store.file_refs().values())).id, 5)])
    seen.append(store.generation())
    store.delete_files(folder, ["x.md"])
    seen.append(store.generation())
    assert seen == sorted(set(seen)), seen


def test_sqlite_generation_counts_transactions(sqlite_store: SqliteStore) -> None:
    before = sqlite_store.generation()
    folder = sqlite_store.ensure_folder("/srv/a", "a")
    sqlite_store.write_files([file_write(folder, "x.md", ["alpha"])])
    assert sqlite_store.generation() == before + 2


def test_failed_transaction_leaves_no_trace(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    broken = FileWrite(
        folder,
        "bad.md",
        1,
        1,
        "s",
        "ok",
        "text",
        (record("x"), record("y")),
        np.zeros((1, 4), np.float32),
    )
    with pytest.raises(AssertionError):
        store.write_files([file_write(folder, "good.md", ["fine"]), broken])
    assert store.file_states(folder) == {}


def test_model_guard(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "x.md", ["alpha"])])
    with pytest.raises(ModelMismatchError, match="semsearch index --force"):
        store.set_model("model-b", 4)
    store.clear_chunks()
    store.set_model("model-b", 8)
    assert store.model() == ("model-b", 8)


@pytest.mark.parametrize("alternatives", [("foo AND (bar",), ('"',), ("x", "NEAR("), ("*:-",)])
def test_any_query_text_is_safe(store: Store, alternatives: tuple[str, ...]) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "x.md", ["foo bar near"])])
    found = store.lexical(words(*alternatives), 10, None)
    assert found == ([store.chunk_ids()[0]] if alternatives[0] == "x" else [])


def test_a_name_typed_alone_finds_a_row_of_all_its_parts(store: Store) -> None:
    """``VitestProject`` where no row spells it: the row holding both of its words anywhere
    (one in the path, one in the text) is found, a row of one word is not, and the row that
    spells the name comes first."""
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files(
        [
            file_write(folder, "node/project.ts", ["export class TestProject { vitest: Vitest }"]),
            file_write(folder, "node/state.ts", ["export class StateManager { vitest: Vitest }"]),
            file_write(folder, "node/workspace.ts", ["resolveProjects(config)"]),
        ]
    )
    rels = {row.id: row.rel for row in store.chunks([int(i) for i in store.chunk_ids()])}
    query = lexical_query("VitestProject")
    assert query is not None and query.together == ("vitest", "project")
    assert [rels[i] for i in store.lexical(query, 10, None)] == ["node/project.ts"]
    assert store.lexical(LexicalQuery(query.alternatives), 10, None) == []
    store.write_files([file_write(folder, "node/plugin.ts", ["import { VitestProject } from"])])
    rels = {row.id: row.rel for row in store.chunks([int(i) for i in store.chunk_ids()])}
    found = [rels[i] for i in store.lexical(query, 10, None)]
    assert found == ["node/plugin.ts", "node/project.ts"]


def test_lexical_filter_by_files(store: Store) -> None:
    a = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(a, "x.md", ["needle"]), file_write(a, "y.md", ["needle"])])
    ref = {r.rel: r.id for r in store.file_refs().values()}
    hits = store.lexical(words("needle"), 10, [ref["y.md"]])
    assert [row.rel for row in store.chunks(hits)] == ["y.md"]


def test_writer_lock_excludes_a_second_writer(tmp_path: Path) -> None:
    db = tmp_path / "index.db"
    with (
        write_lock(db, 0),
        pytest.raises(LockedError, match="Another `semsearch index`"),
        write_lock(db, 0.3),
    ):
        pass
    with write_lock(db, 0):
        pass


def test_terms_column_matches_path_and_split_identifiers(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "net/retryPolicy.ts", ["const parseHeaderLine = 1"])])
    for word in ("retry", "policy", "net", "header line", "parseHeaderLine"):
        assert len(store.lexical(words(word), 10, None)) == 1, word
    assert len(store.lexical(words("parseHeaderLine", columns=("defines",)), 10, None)) == 1
    assert store.lexical(words("retry", columns=("defines",)), 10, None) == []
    store.delete_files(folder, ["net/retryPolicy.ts"])
    assert store.lexical(words("retry"), 10, None) == []


OLD_V1_SCHEMA = (
    TABLES_SQL
    + """
CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id');
CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
END;
INSERT INTO meta VALUES ('schema_version', '1'), ('generation', '7');
INSERT INTO folders VALUES (1, '/srv/a', 'a', NULL);
INSERT INTO files VALUES (1, 1, 'net/retryPolicy.py', 1, 1, 'x', 'ok', 'text');
INSERT INTO chunks VALUES (1, 1, 0, 1, 1, 0, 20, NULL, 'def parseHeaderLine(): pass', x'0000803f');
PRAGMA user_version = 1;
"""
)


def test_version_1_index_is_migrated_and_its_fts_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.executescript(OLD_V1_SCHEMA)
    old.close()
    store = SqliteStore(path)
    assert store.meta("schema_version") == str(SCHEMA_VERSION)
    assert store.generation() == 8
    for query in (
        words("parseHeaderLine"),
        words("header line"),
        words("retry"),
        words("parseHeaderLine", columns=("defines",)),
    ):
        assert store.lexical(query, 10) == [1], query
    store.delete_files(1, ["net/retryPolicy.py"])
    assert store.lexical(words("retry"), 10) == []


def test_an_index_of_the_previous_schema_with_stale_fts_columns_gets_both_upgrades(
    tmp_path: Path,
) -> None:
    """An index last written by a semsearch with an older schema and older FTS rules (main's
    schema 5 and terms_version 6, say) is migrated and its FTS columns are rebuilt in one go."""
    path = tmp_path / "index.db"
    store = SqliteStore(path, create=True)
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "net/retryPolicy.py", ["def parseHeaderLine(): pass"])])
    store.close()
    with sqlite3.connect(path) as conn:  # FTS columns of other rules, one schema version back
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('delete-all')")
        conn.execute("INSERT INTO chunks_fts(rowid, text, terms, defines) VALUES (1, 'x', '', '')")
        conn.execute("UPDATE meta SET value = 'old' WHERE key = 'terms_version'")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    store = SqliteStore(path)
    assert store.meta("schema_version") == str(SCHEMA_VERSION)
    assert store.meta("terms_version") == TERMS_VERSION
    for query in (
        words("parseHeaderLine"),
        words("retry"),
        words("parseHeaderLine", columns=("defines",)),
    ):
        assert store.lexical(query, 10) == [1], query
    store.close()


def test_a_long_rebuild_of_the_fts_columns_is_announced_on_stderr(tmp_path: Path) -> None:
    """New FTS rules rebuild the columns inside the first command that opens the index: the
    CLI says so on stderr when the index is large enough for it to take a while, not before."""
    path = tmp_path / "index.db"
    store = SqliteStore(path, create=True)
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, f"n{i}.md", [f"otter note {i}"]) for i in range(3)])
    store.close()
    script = (
        "import sys; import semsearch.store.sqlite.store as s; "
        "s.REBUILD_NOTICE_CHUNKS = int(sys.argv[1]); "
        "from semsearch.cli.commands import main; sys.exit(main(sys.argv[2:]))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SS_")}
    env.update(HOME=str(tmp_path), SS_CONFIG_PATH=str(tmp_path / "config.json"))
    for threshold, announced in ((4, False), (3, True)):
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE meta SET value = 'old' WHERE key = 'terms_version'")
        argv = [str(threshold), "--index", str(path), "search", "otter", "--mode", "bm25"]
        done = subprocess.run(
            [sys.executable, "-c", script, *argv], capture_output=True, text=True, env=env
        )
        assert done.returncode == 0, done.stderr
        assert "n0.md" in done.stdout
        if announced:
            assert done.stderr.startswith("semsearch: rebuilding the full-text columns of ")
            assert "(3 chunks; once" in done.stderr and len(done.stderr.splitlines()) == 1
        else:
            assert done.stderr == ""


def test_new_index_uses_large_pages(sqlite_store: SqliteStore, tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "index.db")
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 16384


def test_index_from_a_newer_semsearch_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match="Upgrade semsearch"):
        SqliteStore(path)


def test_selecting_lancedb_without_the_extra_says_what_to_install(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "lancedb" else real(name, *a)
    )
    monkeypatch.setenv("SS_STORE_BACKEND", "lancedb")
    with pytest.raises(ConfigError, match=r'pip install "semsearch\[lancedb\]"'):
        load_settings(os.environ)


def test_a_broken_lancedb_install_is_the_same_clear_error() -> None:
    code = (
        "import sys; sys.modules['lancedb'] = None\n"
        "try:\n    import semsearch.store.lance.store\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("ConfigError")
    assert 'pip install "semsearch[lancedb]"' in out.stdout


def test_the_store_package_loads_no_lancedb_until_it_is_chosen() -> None:
    code = (
        "import sys, semsearch.store, semsearch.index\n"
        "print([name for name in ('lancedb', 'pyarrow') if sys.modules.get(name)])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def random_write(folder_id: int, rel: str, count: int, seed: int) -> FileWrite:
    vectors = np.random.default_rng(seed).standard_normal((count, 4)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    chunks = tuple(record(f"chunk {n} of {rel}", n + 1) for n in range(count))
    return FileWrite(folder_id, rel, 1, 10, "sha", "ok", "text", chunks, vectors)


def brute_force(
    store: Any, written: dict[str, FileWrite], query: np.ndarray[Any, Any], pool: int, rels: Any
) -> list[tuple[int, float]]:
    """The exact top ``pool`` by numpy over the vectors the test wrote (rels: None for all), as
    the store keeps them (SQLite: float16)."""
    scored = []
    for row in store.chunks([int(i) for i in store.chunk_ids()]):
        vectors = written[row.rel].vectors
        if vectors is not None and isinstance(store, SqliteStore):
            vectors = vectors.astype(np.float16).astype(np.float32)
        if vectors is not None and (rels is None or row.rel in rels):
            scored.append((float(vectors[row.start_line - 1] @ query), row.id))
    return [(cid, score) for score, cid in sorted(scored, reverse=True)[:pool]]


def assert_same_ranking(found: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    assert [cid for cid, _ in found] == [cid for cid, _ in expected]
    assert [s for _, s in found] == pytest.approx([s for _, s in expected], abs=1e-5)


def test_nearest_is_the_exact_top_k_within_the_files_asked(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    written = {f"f{n}.md": random_write(folder, f"f{n}.md", 5, seed=n) for n in range(6)}
    store.write_files(list(written.values()))
    ids = {ref.rel: ref.id for ref in store.file_refs().values()}
    rng = np.random.default_rng(42)
    for pool in (1, 3, 10, 100):
        query = rng.standard_normal(4).astype(np.float32)
        query /= np.linalg.norm(query)
        found = store.nearest(query, pool, None)
        assert_same_ranking(found, brute_force(store, written, query, pool, None))
        assert len(found) == min(pool, 30)
        within = store.nearest(query, pool, [ids["f1.md"], ids["f4.md"]])
        expected = brute_force(store, written, query, pool, {"f1.md", "f4.md"})
        assert_same_ranking(within, expected)
        assert len(within) == min(pool, 10)
    assert store.nearest(query, 5, []) == []


def test_chunk_files_name_the_file_of_each_nearest_chunk(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([random_write(folder, f"f{n}.md", 4, seed=n) for n in range(3)])
    query = np.ones(4, dtype=np.float32) / 2
    found = [chunk for chunk, _ in store.nearest(query, 12, None)]
    expected = {row.id: row.file_id for row in store.chunks(found)}
    assert store.chunk_files(found) == expected and len(set(expected.values())) == 3
    assert store.chunk_files([*found[:2], 10**9]) == {i: expected[i] for i in found[:2]}
    assert store.chunk_files([]) == {}


def test_nearest_follows_writes_replacements_and_deletes(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    written = {f"f{n}.md": random_write(folder, f"f{n}.md", 4, seed=n) for n in range(3)}
    store.write_files(list(written.values()))
    query = np.full(4, 0.5, dtype=np.float32)
    store.preload()
    assert_same_ranking(
        store.nearest(query, 50, None), brute_force(store, written, query, 50, None)
    )
    steps: list[tuple[list[FileWrite], list[str]]] = [
        ([random_write(folder, "new.md", 3, seed=10)], []),  # added
        ([random_write(folder, "f0.md", 2, seed=11)], []),  # replaced: new ids, old ones gone
        ([], ["f1.md"]),  # deleted
        ([], ["f0.md", "f2.md", "new.md"]),  # nothing left
        ([random_write(folder, "again.md", 2, seed=12)], []),  # and a fresh start
    ]
    for writes, deletes in steps:
        store.write_files(writes)
        written.update({w.rel: w for w in writes})
        store.delete_files(folder, deletes)
        for rel in deletes:
            del written[rel]
        found = store.nearest(query, 50, None)
        assert_same_ranking(found, brute_force(store, written, query, 50, None))
        assert len(found) == sum(len(w.chunks) for w in written.values())


def test_file_refs_are_read_again_only_after_a_write(store: Store) -> None:
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, "x.md", ["alpha"])])
    refs = store.file_refs()
    assert store.file_refs() is refs
    store.write_files([file_write(folder, "y.md", ["beta"])])
    assert sorted(ref.rel for ref in store.file_refs().values()) == ["x.md", "y.md"]
    assert sorted(ref.rel for ref in refs.values()) == ["x.md"]


class CountingSource:
    """A VectorSource over a dict of rows that records what ExactVectors asks for."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple[int, np.ndarray[Any, Any]]] = {}
        self.written = 0
        self.reads: list[int] = []

    def put(self, chunk_id: int, file_id: int, vector: list[float]) -> None:
        self.rows[chunk_id] = (file_id, np.array(vector, dtype=np.float32))
        self.written += 1

    def drop(self, chunk_id: int) -> None:
        del self.rows[chunk_id]
        self.written += 1

    def generation(self) -> int:
        return self.written

    def vector_ids(self) -> np.ndarray[Any, Any]:
        return np.array(sorted(self.rows), dtype=np.int64)

    def vectors(self, min_id: int) -> tuple[Any, Any, Any]:
        self.reads.append(min_id)
        ids = [i for i in sorted(self.rows) if i > min_id]
        matrix = np.array([self.rows[i][1] for i in ids], dtype=np.float32).reshape(-1, 2)
        files = np.array([self.rows[i][0] for i in ids], dtype=np.int64)
        return np.array(ids, dtype=np.int64), files, matrix


def test_exact_vectors_read_only_what_changed() -> None:
    source = CountingSource()
    source.put(1, 10, [1.0, 0.0])
    source.put(2, 10, [0.0, 1.0])
    exact = ExactVectors(source)
    assert not exact.is_loaded and source.reads == []
    query = np.array([0.8, 0.6], dtype=np.float32)
    assert_same_ranking(exact.nearest(query, 5, None), [(1, 0.8), (2, 0.6)])
    assert exact.nearest(query, 5, [20]) == []
    assert exact.is_loaded and source.reads == [0]  # the second search read nothing
    source.put(3, 20, [0.6, 0.8])
    source.drop(1)
    assert_same_ranking(exact.nearest(query, 5, None), [(3, 0.96), (2, 0.6)])
    assert_same_ranking(exact.nearest(query, 1, [20]), [(3, 0.96)])
    assert source.reads == [0, 2]  # only the chunk past the last one read
    source.drop(2)
    source.drop(3)
    source.put(4, 30, [1.0, 0.0])
    assert_same_ranking(exact.nearest(query, 5, None), [(4, 0.8)])
    assert source.reads == [0, 2, 0]  # nothing left to keep: everything read again
    exact.clear()
    assert not len(exact.ids)
    exact.refresh()
    assert list(exact.ids) == [4] and source.reads == [0, 2, 0, 0]


def test_move_folder_renames_it_keeping_files_chunks_and_ids(store: Store) -> None:
    folder = store.ensure_folder("/ci/checkout", "checkout")
    store.write_files([file_write(folder, "src/x.md", ["alpha", "beta"])])
    store.mark_indexed(folder)
    before = store.folders()[0]
    chunk_ids, file_ids = [int(i) for i in store.chunk_ids()], set(store.file_refs())
    assert store.move_folder("/ci/checkout", "/home/me/proj") == 1
    after = store.folders()
    assert [(f.path, f.name, f.files, f.chunks) for f in after] == [("/home/me/proj", "proj", 1, 2)]
    assert (after[0].id, after[0].last_indexed) == (before.id, before.last_indexed)
    assert list(store.chunk_ids()) == chunk_ids and set(store.file_refs()) == file_ids
    assert {r.folder_path for r in store.file_refs().values()} == {"/home/me/proj"}
    assert [c.folder_path for c in store.chunks(chunk_ids)] == ["/home/me/proj"] * 2
    assert fts_count(store, "alpha") == 1
    assert store.move_folder("/ci/checkout", "/elsewhere") == 0  # gone: nothing to move


def test_move_folder_under_a_prefix_rekeys_rows_and_their_terms(store: Store) -> None:
    inner = store.ensure_folder("/srv/p/docs", "docs")
    outer = store.ensure_folder("/srv/p", "p")
    store.write_files(
        [
            file_write(inner, "net/retryPolicy.ts", ["zebra stripes"]),
            file_write(inner, "old.md", ["inner copy"]),
            file_write(outer, "docs/old.md", ["outer copy"]),
            file_write(outer, "main.py", ["lion mane"]),
        ]
    )
    moved_id = store.file_states(inner)["net/retryPolicy.ts"].id
    assert store.move_folder("/srv/p/docs", "/srv/p", "docs/") == 1
    assert [(f.path, f.files, f.chunks) for f in store.folders()] == [("/srv/p", 3, 3)]
    states = store.file_states(outer)
    assert sorted(states) == ["docs/net/retryPolicy.ts", "docs/old.md", "main.py"]
    assert states["docs/net/retryPolicy.ts"].id == moved_id  # re-keyed, not rewritten
    assert fts_count(store, "inner") == 0 and fts_count(store, "outer") == 1  # outer's row won
    only_terms = ("terms",)
    assert len(store.lexical(words("docs", columns=only_terms), 10, None)) == 2
    assert len(store.lexical(words("retry policy", columns=only_terms), 10, None)) == 1
    store.delete_files(outer, ["docs/net/retryPolicy.ts"])
    for word in ("zebra", "retry", "policy", "net"):  # FTS rows left in step with the new rel
        assert fts_count(store, word) == 0, word
    assert store.chunk_count() == 2


ODD_NAMES = ("caf\udce9.md", "new\nline.md", "tab\t.md", "caf\u00e9.md", "x\udcff\udc80y.md")


def test_any_file_name_is_stored_and_given_back(store: Store) -> None:
    """Names whose bytes are not UTF-8 (os.fsdecode's surrogate escapes) round-trip, distinct
    from every other name, the accented one included."""
    folder = store.ensure_folder("/srv/a", "a")
    store.write_files([file_write(folder, name, [f"word{n}"]) for n, name in enumerate(ODD_NAMES)])
    assert sorted(store.file_states(folder)) == sorted(ODD_NAMES)
    assert sorted(r.rel for r in store.file_refs().values()) == sorted(ODD_NAMES)
    ids = [int(i) for i in store.chunk_ids()]
    assert sorted(c.rel for c in store.chunks(ids)) == sorted(ODD_NAMES)
    assert sorted(rel for _, rel in store.pending_paths(10)) == sorted(ODD_NAMES)
    assert fts_count(store, "caf") == 1  # a path term: the byte that is not UTF-8 ends the word
    store.write_files([file_write(folder, "caf\udce9.md", ["rewritten"])])  # the same row
    assert len(store.file_states(folder)) == len(ODD_NAMES)
    assert (fts_count(store, "word0"), fts_count(store, "rewritten")) == (0, 1)
    assert store.delete_files(folder, ["caf\udce9.md", "new\nline.md"]) == 2
    assert sorted(store.file_states(folder)) == sorted(ODD_NAMES[2:])
    outer = store.ensure_folder("/srv", "srv")
    assert store.move_folder("/srv/a", "/srv", "\udce9/") == 3
    assert sorted(store.file_states(outer)) == sorted("\udce9/" + name for name in ODD_NAMES[2:])


@dataclass(frozen=True)
class Held:
    """A text's chunks as a store learnt them at once (a ``HeldText``)."""

    text_hash: str
    ids: list[int]
    file_ids: list[int]
    text: str = "the text"

    def place(self, at: int) -> ChunkPlace:
        return ChunkPlace(self.ids[at], self.file_ids[at], self.text_hash, 1, 5, None)

    def places(self) -> list[ChunkPlace]:
        return [self.place(at) for at in range(len(self.ids))]


def test_the_place_cache_keeps_every_copy_of_a_text_for_its_state_only() -> None:
    cache = PlaceCache(limit=100)
    held = Held("a" * 32, [4, 9], [2, 3])
    cache.keep_copies(7, [held])
    assert cache.holds_copies
    assert cache.copies(7, ["a" * 32]) == held.places()
    assert cache.copies(7, ["a" * 32, "b" * 32]) is None  # one of them not kept
    assert cache.copies(8, ["a" * 32]) is None and not cache.holds_copies  # another state


def test_the_place_cache_gives_the_copy_chosen_of_each_text_it_holds() -> None:
    cache = PlaceCache(limit=100)
    cache.keep_copies(7, [Held("a" * 32, [4, 9, 12], [2, 3, 5]), Held("b" * 32, [6], [1])])
    asked = []

    def last_file(ids: Sequence[int], file_ids: Sequence[int]) -> int:
        asked.append((list(ids), list(file_ids)))
        return len(ids) - 1

    chosen = cache.chosen(7, ["a" * 32, "c" * 32, "b" * 32], last_file)  # c: not held
    assert asked == [([4, 9, 12], [2, 3, 5]), ([6], [1])]
    assert chosen == {
        "a" * 32: Held("a" * 32, [12], [5]).place(0),
        "b" * 32: Held("b" * 32, [6], [1]).place(0),
    }
    assert cache.places(7, [12, 6], lambda missing: pytest.fail(f"read {missing}")) == [
        chosen["a" * 32],
        chosen["b" * 32],
    ]
    assert cache.chosen(8, ["a" * 32], last_file) == {}  # another state holds nothing


def test_the_place_cache_starts_again_before_a_search_not_during_it() -> None:
    cache = PlaceCache(limit=8)
    cache.keep_copies(7, [Held(h * 32, [n], [1]) for n, h in enumerate("abcde")])
    cache.trim()  # 5 of 8: kept
    assert cache.copies(7, ["a" * 32]) is not None
    cache.keep_copies(7, [Held("f" * 32, [9], [1])])
    cache.trim()  # 6 of 8: three quarters, so a search begun now starts afresh
    assert not cache.holds_copies


def test_an_index_run_gives_the_log_back_while_another_process_reads(tmp_path: Path) -> None:
    """SQLite keeps its write-ahead log at its largest while another connection has the file
    open (an MCP server): the end of an index run writes it into the file and truncates it; a
    read under way leaves it for the next run (after a short wait), not an error."""
    db = tmp_path / "index.db"
    store = SqliteStore(db, create=True)
    folder = store.ensure_folder("/srv/a", "a")
    reader = sqlite3.connect(db)  # another process's connection: the log is not removed
    try:
        reader.execute("SELECT count(*) FROM chunks").fetchone()
        for n in range(250):
            texts = [f"note {n} part {i} " + "harbour pilots at dawn " * 20 for i in range(4)]
            store.write_files([file_write(folder, f"n{n}.md", texts)])
        log = db.with_name(db.name + "-wal")
        assert log.stat().st_size > db.stat().st_size // 4  # what a run leaves without it
        reader.execute("BEGIN")  # a read under way: the run ends without waiting for it
        assert reader.execute("SELECT count(*) FROM chunks").fetchone()[0] == 1000
        store.maintain()
        assert log.stat().st_size > 0
        reader.execute("COMMIT")
        store.maintain()
        assert log.stat().st_size == 0
        assert reader.execute("SELECT count(*) FROM chunks").fetchone()[0] == 1000
    finally:
        reader.close()
        store.close()
