"""The optimised model copy in the user's cache: same vectors, made once, replaced when stale,
and never needed (a cache that cannot be written falls back to the model itself)."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import semsearch.model.embedder as embedder_module
from semsearch.model.builds import (
    VARIANTS,
    known_sha256,
    model_cache_dir,
    optimised_copy,
    sha256_of,
    variant_file,
)
from semsearch.model.embedder import OnnxEmbedder

REFERENCE = json.loads((Path(__file__).parent / "data" / "reference_embeddings.json").read_text())
FP32 = variant_file(VARIANTS["fp32"])


@pytest.fixture
def fresh_sessions(monkeypatch: pytest.MonkeyPatch) -> dict[Any, Any]:
    """An empty process-wide session table, so each embedder here builds its own sessions."""
    sessions: dict[Any, Any] = {}
    monkeypatch.setattr(embedder_module, "_SESSIONS", sessions)
    return sessions


def vectors(texts: list[str]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    embedder = OnnxEmbedder(variant="fp32")
    return embedder.embed(texts), embedder.embed_query(texts[0])


def copies(cache: Path) -> list[str]:
    """The entries of the model cache but the digests folder (known_sha256's)."""
    return sorted(p.name for p in cache.iterdir() if p.name != "digests")


def test_a_model_file_is_hashed_once_per_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SS_MODEL_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "model.onnx"
    model.write_bytes(b"weights " * 1000)
    first = known_sha256(model)
    assert first == sha256_of(model)
    (stamp,) = (tmp_path / "cache" / "digests").iterdir()
    stamp.write_text(stamp.read_text().replace(first, "f" * 64))  # a kept digest is used as is
    assert known_sha256(model) == "f" * 64
    model.write_bytes(b"other weights " * 1000)  # a new state of the file: hashed again
    assert known_sha256(model) == sha256_of(model) != first
    monkeypatch.setenv("SS_MODEL_CACHE", "off")
    assert known_sha256(model) == sha256_of(model)


def test_the_copy_gives_the_vectors_of_the_model_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_sessions: dict[Any, Any]
) -> None:
    monkeypatch.setenv("SS_MODEL_CACHE", "off")
    plain, plain_query = vectors(REFERENCE["sentences"])
    fresh_sessions.clear()
    monkeypatch.setenv("SS_MODEL_CACHE", str(tmp_path / "cache"))
    cached, cached_query = vectors(REFERENCE["sentences"])
    assert copies(tmp_path / "cache") == [optimised_copy(FP32).parent.name]
    assert np.abs(cached - plain).max() < 1e-5 and np.abs(cached_query - plain_query).max() < 1e-5
    expected = np.asarray(REFERENCE["vectors"], dtype=np.float32)
    assert ((cached * expected).sum(axis=1) / np.linalg.norm(expected, axis=1)).min() >= 0.999


def test_a_copy_is_made_once_and_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SS_MODEL_CACHE", str(tmp_path / "cache"))
    assert optimised_copy(FP32, create=False) is None
    made = optimised_copy(FP32)
    assert made is not None and (made.parent / "model.data").stat().st_size > 80_000_000
    stamp = made.stat().st_mtime_ns
    assert optimised_copy(FP32) == optimised_copy(FP32, create=False) == made
    assert made.stat().st_mtime_ns == stamp


def test_a_changed_model_file_gets_a_new_copy_and_the_old_one_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SS_MODEL_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "models" / "model.onnx"
    model.parent.mkdir()
    shutil.copyfile(FP32, model)
    first = optimised_copy(model)
    os.utime(model, ns=(1_000_000_000, 1_000_000_000))
    second = optimised_copy(model)
    assert first is not None and second is not None and first != second
    assert second.is_file() and not first.parent.exists()


def test_threads_racing_to_make_the_copy_all_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SS_MODEL_CACHE", str(tmp_path / "cache"))
    results: list[Path | None] = []
    threads = [
        threading.Thread(target=lambda: results.append(optimised_copy(FP32))) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(results)) == 1 and results[0] is not None and results[0].is_file()
    assert copies(tmp_path / "cache") == [results[0].parent.name]


@pytest.mark.parametrize("setting", ["off", "0", "blocked"])
def test_without_a_usable_cache_the_model_itself_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_sessions: dict[Any, Any], setting: str
) -> None:
    if setting == "blocked":  # a file where the cache folder should be: mkdir fails, even as root
        (tmp_path / "file").write_text("x")
        setting = str(tmp_path / "file" / "cache")
    monkeypatch.setenv("SS_MODEL_CACHE", setting)
    assert optimised_copy(FP32) is None
    found, _ = vectors(REFERENCE["sentences"])
    expected = np.asarray(REFERENCE["vectors"], dtype=np.float32)
    assert ((found * expected).sum(axis=1) / np.linalg.norm(expected, axis=1)).min() >= 0.999


def test_the_cache_defaults_to_the_xdg_cache_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SS_MODEL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert model_cache_dir() == tmp_path / "xdg" / "semsearch" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert model_cache_dir() == Path.home() / ".cache" / "semsearch" / "models"


def test_a_damaged_copy_is_dropped_and_the_model_itself_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_sessions: dict[Any, Any]
) -> None:
    monkeypatch.setenv("SS_MODEL_CACHE", str(tmp_path / "cache"))
    made = optimised_copy(FP32)
    assert made is not None
    (made.parent / "model.data").write_bytes(b"")  # truncated weights
    found, _ = vectors(REFERENCE["sentences"])
    expected = np.asarray(REFERENCE["vectors"], dtype=np.float32)
    assert ((found * expected).sum(axis=1) / np.linalg.norm(expected, axis=1)).min() >= 0.999
    # The damaged copy was dropped (indexing and queries share the one session built), and the
    # next session built makes a whole one again.
    assert not made.parent.exists()
    fresh_sessions.clear()
    vectors(REFERENCE["sentences"][:1])
    assert (made.parent / "model.data").stat().st_size > 80_000_000


def test_a_model_onnxruntime_cannot_load_leaves_no_copy_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SS_MODEL_CACHE", str(tmp_path / "cache"))
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(FP32.read_bytes()[:1000])  # cut short: onnxruntime refuses it
    assert optimised_copy(broken) is None
    assert copies(tmp_path / "cache") == []  # the half-made folder went too


def test_a_copy_half_made_by_a_killed_process_is_removed_once_abandoned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("SS_MODEL_CACHE", str(cache))
    abandoned, making = cache / ".making-killed", cache / ".making-now"
    for folder in (abandoned, making):
        folder.mkdir(parents=True)
        (folder / "model.data").write_bytes(b"partial")
    old = time.time() - 3600
    os.utime(abandoned, (old, old))
    made = optimised_copy(FP32)
    assert made is not None and not abandoned.exists() and making.exists()
