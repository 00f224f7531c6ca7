"""Running the model on batches: budgets, order, and batches run on several threads at once."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from semsearch.errors import ModelError
from semsearch.model.embedder import OnnxEmbedder
from semsearch.model.run import (
    BATCH_TOKENS,
    MAX_WORKERS,
    batches,
    embed_ids,
    indexing_workers,
)


class _Input:
    def __init__(self, name: str, type: str = "tensor(int64)") -> None:
        self.name = name
        self.type = type


class CountingSession:
    """A stand-in for an onnxruntime session: a token's state is (its id, 1), padding's (0, 1),
    so a text's pooled vector is known and differs from text to text; counts the runs and how
    many overlapped."""

    def __init__(self, fail_on_width: int | None = None, delay: float = 0.0) -> None:
        self.fail_on_width = fail_on_width
        self.delay = delay
        self.runs = 0
        self.running = 0
        self.most_at_once = 0
        self.lock = threading.Lock()

    def get_inputs(self) -> list[_Input]:
        return [_Input("input_ids"), _Input("attention_mask")]

    def get_outputs(self) -> list[_Input]:
        return [_Input("last_hidden_state", "tensor(float)")]

    def run(self, outputs: Any, feed: dict[str, np.ndarray[Any, Any]]) -> list[Any]:
        with self.lock:
            self.runs += 1
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            time.sleep(self.delay)
            ids = feed["input_ids"]
            if ids.shape[1] == self.fail_on_width:
                raise RuntimeError("bad batch")
            return [np.stack([ids, np.ones_like(ids)], axis=2).astype(np.float32)]
        finally:
            with self.lock:
                self.running -= 1


def _texts(count: int) -> list[list[int]]:
    """Token id lists of assorted lengths (3 to 120), each text's ids all one value."""
    return [[i + 1] * (3 + (i * 37) % 118) for i in range(count)]


def _batch_count(texts: list[list[int]]) -> int:
    lengths = [len(ids) for ids in texts]
    return len(batches(sorted(range(len(texts)), key=lambda i: lengths[i]), lengths))


@pytest.mark.parametrize("budget", [BATCH_TOKENS, 512, 100])
def test_batches_stay_within_the_token_budget(budget: int) -> None:
    lengths = [len(ids) for ids in _texts(200)]
    order = sorted(range(200), key=lambda i: lengths[i])
    grouped = batches(order, lengths, budget)
    assert sorted(i for group in grouped for i in group) == list(range(200))
    for group in grouped:
        assert len(group) == 1 or max(lengths[i] for i in group) * len(group) <= budget
    assert any(len(group) > 1 for group in grouped)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_every_text_gets_its_own_vector_in_input_order(workers: int) -> None:
    session = CountingSession()
    texts = _texts(150)
    vectors = embed_ids(session, texts, workers)
    # Text k is id k + 1 throughout: (k + 1, 1) normalised. Pooling over padding would pull a
    # short text's vector towards (0, 1).
    ks = np.arange(1, 151, dtype=np.float32)
    expected = np.stack([ks, np.ones_like(ks)], axis=1) / np.sqrt(ks**2 + 1)[:, None]
    assert np.allclose(vectors, expected)
    assert session.runs == _batch_count(texts)


def test_no_texts_means_no_model_call() -> None:
    session = CountingSession()
    assert embed_ids(session, [], workers=2).shape == (0, 0)
    assert session.runs == 0


def test_batches_run_on_several_threads_at_once() -> None:
    session = CountingSession(delay=0.01)
    embed_ids(session, _texts(150), workers=2)
    assert session.most_at_once == 2
    serial = CountingSession(delay=0.001)
    embed_ids(serial, _texts(150), workers=1)
    assert serial.most_at_once == 1


def test_a_failing_batch_is_a_model_error_and_stops_the_rest() -> None:
    texts = _texts(400)
    widths = [len(t) for t in texts]
    session = CountingSession(fail_on_width=max(widths), delay=0.01)
    with pytest.raises(ModelError, match="bad batch"):
        embed_ids(session, texts, workers=2)  # the longest batch runs first, and fails
    assert session.runs < _batch_count(texts) // 2


def test_workers_follow_the_cores() -> None:
    assert [indexing_workers(n) for n in (0, 1, 2, 4)] == [1, 1, 2, 4]
    assert indexing_workers(256) == MAX_WORKERS


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_parallel_runs_give_the_vectors_of_serial_runs(variant: str) -> None:
    embedder = OnnxEmbedder(variant=variant)
    tokenizer_ids = [
        embedder._tokenizer.encode(f"text number {i} " + "about caching " * (i % 40)).ids
        for i in range(60)
    ]
    session = embedder._load(indexing=True)
    serial = embed_ids(session, tokenizer_ids, workers=1)
    parallel = embed_ids(session, tokenizer_ids, workers=2)
    assert np.array_equal(serial, parallel)
    # Indexing and warm queries share the session: a text's vector does not depend on the path.
    assert embedder._load(indexing=False) is session


def test_fp32_vectors_do_not_depend_on_the_token_budget() -> None:
    """Why fp32 could move to a smaller budget without new benchmarks, and keeps batching (int8
    embeds each text alone: one activation scale per call makes its vectors depend on a call's
    companions)."""
    embedder = OnnxEmbedder(variant="fp32")
    assert embedder.batch_tokens == BATCH_TOKENS
    ids = [embedder._tokenizer.encode("caching layer " * (i % 50) + str(i)).ids for i in range(40)]
    session = embedder._load(indexing=True)
    small, large = embed_ids(session, ids, 2, 128), embed_ids(session, ids, 2, 2048)
    assert (small * large).sum(axis=1).min() > 0.9999


def test_queries_during_indexing_get_the_vectors_they_get_alone() -> None:
    """The MCP server searches while it indexes: both use one session at once."""
    embedder = OnnxEmbedder(variant="int8")
    texts = [f"chunk {i} " + "retry the connection pool " * (i % 30) for i in range(120)]
    query = "where is the connection retried"
    alone, indexed_alone = embedder.embed_query(query), embedder.embed(texts)
    result: list[np.ndarray[Any, Any]] = []
    indexing = threading.Thread(target=lambda: result.append(embedder.embed(texts)))
    indexing.start()
    during = []
    while indexing.is_alive() or not during:
        during.append(embedder.embed_query(query))
    indexing.join()
    assert len(during) > 1 and all(np.array_equal(v, alone) for v in during)
    assert np.array_equal(result[0], indexed_alone)


def test_an_int8_vector_does_not_depend_on_the_texts_embedded_with_it() -> None:
    """int8 quantises a call's activations with one scale: in a call with others, a text's
    vector moved with them (an index with the order its texts came in). Each text has a call of
    its own, so embedding it alone, among short texts or among long ones gives one vector."""
    embedder = OnnxEmbedder(variant="int8")
    short = [f"retry {i}" for i in range(12)]
    long = [f"chunk {i} " + "the connection pool retries a request " * 30 for i in range(6)]
    text = "def retry_with_backoff(call, attempts=5): sleep between attempts"
    alone = embedder.embed([text])[0]
    assert np.array_equal(embedder.embed([*short, text])[-1], alone)
    assert np.array_equal(embedder.embed([*long, text, *long])[len(long)], alone)
    assert np.array_equal(embedder.embed_query(text), alone)  # a query is embedded alone too
