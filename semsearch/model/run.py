"""Running a BERT-style ONNX session on token ids: padded batches, pooling, parallel runs.

Texts are sorted by length and cut into batches of at most :data:`BATCH_TOKENS` padded tokens.
Indexing runs those batches on :func:`indexing_workers` threads at once, each a single-threaded
run of one shared session (onnxruntime's ``InferenceSession.run`` is thread-safe and releases the
GIL): more tokens/s than one run at a time on every core, whose small per-layer products
parallelise poorly, for a little more memory. A batch's vectors do not depend on which thread ran
it.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from semsearch.config import MODEL_WINDOW
from semsearch.errors import ModelError

# Padded tokens per model call: big batches spill the caches and grow onnxruntime's arena, and
# with two calls at once 256 indexes as fast as 512 in less memory. The int8 build embeds each
# text in a call of its own (Variant.batch_tokens, builds.ALONE): one activation scale per call
# made a text's vector depend on the texts beside it.
BATCH_TOKENS = 256
MAX_BATCH = 64
# Runs at once while indexing: one per core, up to this many (each holds its own activations;
# measured on 2 cores only).
MAX_WORKERS = 8

FloatMatrix = np.ndarray[Any, np.dtype[np.float32]]


def indexing_workers(cores: int) -> int:
    """How many single-threaded model runs indexing keeps going at once on ``cores`` cores."""
    return max(1, min(cores, MAX_WORKERS))


def clip(ids: list[int]) -> list[int]:
    """Truncate to the model window, keeping the final [SEP]."""
    return ids if len(ids) <= MODEL_WINDOW else [*ids[: MODEL_WINDOW - 1], ids[-1]]


def batches(order: list[int], lengths: list[int], budget: int = BATCH_TOKENS) -> list[list[int]]:
    """Group indices (sorted by length) so each padded batch stays within ``budget`` tokens."""
    grouped: list[list[int]] = []
    current: list[int] = []
    for index in order:
        width = max(lengths[index], 1)
        if current and (width * (len(current) + 1) > budget or len(current) >= MAX_BATCH):
            grouped.append(current)
            current = []
        current.append(index)
    if current:
        grouped.append(current)
    return grouped


def embed_ids(
    session: Any,
    id_lists: Sequence[list[int]],
    workers: int = 1,
    budget: int = BATCH_TOKENS,
    pooling: str = "mean",
) -> FloatMatrix:
    """Unit vectors of texts given as token ids (already clipped), in input order, in calls of
    at most ``budget`` padded tokens run on up to ``workers`` threads at once; the longest go
    first so no thread is left with a long one at the end. ``pooling``: see
    :func:`pool_and_normalise`."""
    if not id_lists:
        return np.zeros((0, 0), dtype=np.float32)
    order = sorted(range(len(id_lists)), key=lambda i: len(id_lists[i]))
    groups = batches(order, [len(ids) for ids in id_lists], budget)
    if workers <= 1 or len(groups) == 1:
        results = [run_batch(session, [id_lists[i] for i in g], pooling) for g in groups]
    else:
        groups.reverse()
        batch_ids = [[id_lists[i] for i in g] for g in groups]
        results = _in_parallel(session, batch_ids, workers, pooling)
    out = np.empty((len(id_lists), results[0].shape[1]), dtype=np.float32)
    for group, vectors in zip(groups, results, strict=True):
        out[group] = vectors
    return out


def _in_parallel(
    session: Any, batch_ids: list[list[list[int]]], workers: int, pooling: str
) -> list[FloatMatrix]:
    """Each batch's vectors, computed by a pool of threads; on any error or interrupt the batches
    not yet started are cancelled before it propagates."""
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="semsearch-embed")
    try:
        futures: list[Future[FloatMatrix]] = [
            pool.submit(run_batch, session, ids, pooling) for ids in batch_ids
        ]
        return [future.result() for future in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def model_inputs(
    session: Any, id_lists: Sequence[Sequence[int]]
) -> tuple[dict[str, Any], np.ndarray[Any, Any]]:
    """The padded batch a BERT-style session takes (ids, attention mask, token types, as far as
    the model has those inputs), and the attention mask for pooling."""
    width = max(len(ids) for ids in id_lists)
    input_ids = np.zeros((len(id_lists), width), dtype=np.int64)
    mask = np.zeros_like(input_ids)
    for row, ids in enumerate(id_lists):
        input_ids[row, : len(ids)] = ids
        mask[row, : len(ids)] = 1
    feed = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(mask)}
    names = {inp.name for inp in session.get_inputs()}
    return {name: value for name, value in feed.items() if name in names}, mask


def run_batch(
    session: Any, id_lists: Sequence[Sequence[int]], pooling: str = "mean"
) -> FloatMatrix:
    """One padded model call: the unit vectors of its texts."""
    feed, mask = model_inputs(session, id_lists)
    output = hidden_output(session)
    try:
        hidden = session.run([output], feed)[0]
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise ModelError(f"The model failed to run: {exc}") from exc
    return pool_and_normalise(np.asarray(hidden, dtype=np.float32), mask, pooling)


def hidden_output(session: Any) -> str:
    """The name of the session's token states (or pooled vectors): its first floating-point
    output. Some exports give the token ids or the mask back first (the paraphrase-MiniLM-L3-v2
    file on PyPI does); taken as vectors, they would index nonsense."""
    for output in session.get_outputs():
        if "float" in output.type:
            return str(output.name)
    names = ", ".join(f"{o.name} ({o.type})" for o in session.get_outputs())
    raise ModelError(
        f"The model file has no floating-point output to take vectors from (it gives {names}). "
        "Use an embedding model exported with its token states or pooled vectors as an output."
    )


def pool_and_normalise(
    hidden: FloatMatrix, mask: np.ndarray[Any, Any], pooling: str = "mean"
) -> FloatMatrix:
    """Pool token states — ``mean`` over the attention mask, or ``cls``: the first token's
    state — then L2-normalise each row."""
    if hidden.ndim == 2:  # the model already pools
        pooled = hidden
    elif pooling == "cls":
        pooled = hidden[:, 0, :]
    else:
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    unit: FloatMatrix = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
    return unit
