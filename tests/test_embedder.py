"""The real ONNX embedder: reference vectors, semantics, truncation, model errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from semsearch.embedder import HashEmbedder, OnnxEmbedder, _packaged_tokenizer
from semsearch.errors import ModelError

REFERENCE = json.loads((Path(__file__).parent / "data" / "reference_embeddings.json").read_text())


@pytest.fixture(scope="module")
def embedder() -> OnnxEmbedder:
    return OnnxEmbedder()


def test_matches_recorded_reference_vectors(embedder: OnnxEmbedder) -> None:
    vectors = embedder.embed(REFERENCE["sentences"])
    expected = np.asarray(REFERENCE["vectors"], dtype=np.float32)
    cosines = (vectors * expected).sum(axis=1) / np.linalg.norm(expected, axis=1)
    assert vectors.shape == (3, 384)
    assert cosines.min() >= 0.999
    assert embedder.model_id == REFERENCE["model_id"]


def test_vectors_are_unit_length(embedder: OnnxEmbedder) -> None:
    norms = np.linalg.norm(embedder.embed(["one", "two words", "x" * 50]), axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5)


@pytest.mark.parametrize(
    ("anchor", "paraphrase", "unrelated"),
    [
        ("How do I reset my password?", "I forgot my login password", "The cat sat on the mat."),
        ("retry a failed payment", "charge the card again after an error", "tomato soup recipe"),
        ("the weather is cold today", "it is freezing outside", "compile the kernel module"),
    ],
)
def test_paraphrases_score_higher_than_unrelated(
    embedder: OnnxEmbedder, anchor: str, paraphrase: str, unrelated: str
) -> None:
    a, p, u = embedder.embed([anchor, paraphrase, unrelated])
    assert float(a @ p) > float(a @ u) + 0.2


def test_batching_does_not_change_vectors(embedder: OnnxEmbedder) -> None:
    texts = ["short", "a somewhat longer sentence about databases " * 3, "mid length text here"]
    together = embedder.embed(texts)
    alone = np.vstack([embedder.embed([t]) for t in texts])
    assert ((together * alone).sum(axis=1) >= 0.999).all()


def test_long_text_is_truncated_to_the_window(embedder: OnnxEmbedder) -> None:
    long_text = "word " * 2000
    head = " ".join(["word"] * 254)
    a, b = embedder.embed([long_text, head])
    assert float(a @ b) >= 0.999


def test_token_spans_have_no_special_tokens(embedder: OnnxEmbedder) -> None:
    text = "Hello, wörld 中文"
    spans = embedder.token_spans(text)
    assert [text[s:e] for s, e in spans] == ["Hello", ",", "wörld", "中", "文"]


def test_model_dir_without_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="No ONNX model in"):
        OnnxEmbedder(tmp_path)
    with pytest.raises(ModelError, match="does not exist"):
        OnnxEmbedder(tmp_path / "missing")


def test_corrupt_model_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"not an onnx model")
    shutil.copy(_packaged_tokenizer(), tmp_path / "tokenizer.json")
    broken = OnnxEmbedder(tmp_path)
    assert broken.model_id.startswith(f"{tmp_path.name}@")
    with pytest.raises(ModelError, match="Cannot load model"):
        broken.embed(["hello"])


def test_hash_embedder_is_deterministic() -> None:
    first, second = HashEmbedder().embed(["same words"]), HashEmbedder().embed(["same words"])
    assert np.array_equal(first, second)
    assert HashEmbedder().model_id != OnnxEmbedder().model_id


def test_query_embedding_matches_batch_embedding(embedder: OnnxEmbedder) -> None:
    query = "where are failed payments retried"
    single = embedder.embed_query(query)
    batched = embedder.embed([query, "another text in the same batch"])[0]
    assert single.shape == (384,)
    assert float(single @ batched) >= 0.999


def test_one_shot_session_gives_the_same_vectors(embedder: OnnxEmbedder) -> None:
    one_shot = OnnxEmbedder(one_shot=True)
    for text in ("retry with exponential backoff", "def parse_header(line):", "café"):
        fast, optimised = one_shot.embed_query(text), embedder.embed_query(text)
        assert float(fast @ optimised) > 0.9999, text
    assert one_shot.model_id == embedder.model_id
