"""The embedding models this install can use: the built-in one and those of model packages.

A model package is a wheel that carries an ONNX sentence-embedding model and its
``tokenizer.json`` and declares them in the entry-point group :data:`ENTRY_POINT_GROUP`. The entry
point's name is the model's name (what ``semsearch index --model NAME`` and the config key
``model`` take); it loads to a function that takes no argument and returns a mapping:

* ``onnx``, ``tokenizer``: paths of the two files (inside the installed package);
* ``sha256``: the ONNX file's checksum, checked before the model first runs (the wheel pins it);
* ``pooling``: ``"mean"`` (over the attention mask) or ``"cls"`` (the first token's state);
* ``queryPrefix``, ``documentPrefix`` (optional): text put before each query / each chunk, as
  models trained with instructions expect (bge: ``"Represent this sentence for searching relevant
  passages: "`` before queries; e5: ``"query: "`` and ``"passage: "``);
* ``description`` (optional): one line for ``semsearch config``.

The ONNX file takes ``input_ids``, ``attention_mask`` and, if it has that input,
``token_type_ids``; its first floating-point output gives the vectors: token states, pooled as
declared, or vectors it pools itself (an output before it, such as the ids given back, is
skipped). ``scripts/model_wheel.py`` builds such a wheel from a folder holding ``model.onnx`` and
``tokenizer.json``. Nothing is downloaded at run time: a model is usable once its wheel is
installed.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semsearch.errors import ModelError
from semsearch.model.builds import BUILT_IN_IDS

ENTRY_POINT_GROUP = "semsearch.models"
BUILT_IN = "all-MiniLM-L6-v2"  # the model shipped with semsearch (two builds: fp32 and int8)
BUILT_IN_DESCRIPTION = "built in; English, 384 dimensions; the default"
POOLINGS = ("mean", "cls")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ModelPackage:
    """A model an installed package offers (see the module docstring)."""

    name: str
    onnx: Path
    tokenizer: Path
    sha256: str
    pooling: str = "mean"
    query_prefix: str = ""
    document_prefix: str = ""
    description: str = ""
    distribution: str = ""  # the package that provides it, as "name version"

    @property
    def model_id(self) -> str:
        """The id an index built with this model records."""
        return f"{self.name}@{self.sha256[:16]}"


def installed_models() -> tuple[list[ModelPackage], list[str]]:
    """The installed model packages' models, by name, and a message for each entry point that
    could not be read (a broken or half-removed package)."""
    models: dict[str, ModelPackage] = {}
    problems: list[str] = []
    for point in sorted(_entry_points(), key=lambda p: p.name):
        if point.name == BUILT_IN or point.name in models:
            taken = "the built-in model's" if point.name == BUILT_IN else "another package's"
            problems.append(f"{point.name}: {point.value} is left out, the name is {taken}")
            continue
        try:
            models[point.name] = _read(point)
        except ModelError as exc:
            problems.append(str(exc))
    return list(models.values()), problems


def model_rows() -> tuple[list[tuple[str, str]], list[str]]:
    """(name, what it is) of each model this install can use, the built-in one first, and a
    warning for each model package that cannot be used (``semsearch config``)."""
    models, problems = installed_models()
    rows = [(BUILT_IN, BUILT_IN_DESCRIPTION)]
    for model in models:
        about = model.description or f"{model.pooling} pooling"
        rows.append((model.name, f"{about}; from {model.distribution}"))
    return rows, problems


def find_model(name: str) -> ModelPackage | None:
    """The model package called ``name``; None for the built-in model. Raises ModelError, with
    the installed names, when no installed package offers it or its package is broken."""
    if name == BUILT_IN:
        return None
    for point in _entry_points():
        if point.name == name:
            return _read(point)
    models, _ = installed_models()
    names = ", ".join([f"{BUILT_IN} (built in)", *(m.name for m in models)])
    raise ModelError(
        f"No embedding model {name!r} is installed (installed: {names}). A model comes as a "
        "Python package: install its wheel with pip, then `semsearch config` lists it."
    )


def model_name_of(model_id: str) -> str:
    """The model name in an index's model id (``name@checksum``)."""
    return model_id.rsplit("@", 1)[0]


def mismatch_hints(stored_id: str, current_id: str) -> str:
    """What to add to the message of an index built with model ``stored_id`` searched with
    ``current_id``: :func:`missing_model_hint` and :func:`chosen_model_hint`, the installed
    packages read once."""
    models, _ = installed_models()
    return missing_model_hint(stored_id, models) + chosen_model_hint(stored_id, current_id, models)


def missing_model_hint(model_id: str, models: list[ModelPackage]) -> str:
    """A sentence to add to a model mismatch: the index's model is a package's that is not
    among the installed ``models`` (empty when it is installed, built in, or not a package's)."""
    if model_id in BUILT_IN_IDS:
        return ""
    name = model_name_of(model_id)
    if any(m.model_id == model_id for m in models):
        return ""
    if any(m.name == name for m in models):
        return (
            f" The installed package of {name} holds another version of it: install the one "
            "the index was built with, or embed again with `semsearch index --model "
            f"{name}`."
        )
    return (
        f" If {name} is a model package, install it to search this index "
        "(`semsearch config` lists the installed models)."
    )


def chosen_model_hint(stored_id: str, current_id: str, models: list[ModelPackage]) -> str:
    """A sentence to add to a model mismatch when another model than the index's was chosen
    (``SS_MODEL``, the config key ``model``) and the index's own is at hand: with none chosen,
    search follows it. Empty for another build of the same model and for a model not installed
    (:func:`missing_model_hint` says what to install). ``models``: the installed ones."""
    stored = model_family(stored_id)
    if stored == model_family(current_id):
        return ""
    if stored_id not in BUILT_IN_IDS and all(m.model_id != stored_id for m in models):
        return ""
    return (
        f" To search it with {stored}, the model it was built with, unset SS_MODEL and the "
        "config key `model` (and `modelDir`): with no model chosen, search follows the index's."
    )


def model_family(model_id: str) -> str:
    """The model's name in an index's model id, the built-in model's builds named as one."""
    return BUILT_IN if model_id in BUILT_IN_IDS else model_name_of(model_id)


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def _read(point: importlib.metadata.EntryPoint) -> ModelPackage:
    """Load one entry point and check what it declares."""
    where = f"{point.dist.name} {point.dist.version}" if point.dist is not None else point.value
    try:
        declared = point.load()()
    except Exception as exc:  # a package's own code: any error means it is unusable
        raise ModelError(f"{point.name}: its package ({where}) failed to load: {exc}") from exc
    if not isinstance(declared, Mapping):
        raise ModelError(f"{point.name}: its package ({where}) declares no model mapping")
    return _package(point.name, declared, where)


def _package(name: str, declared: Mapping[str, Any], where: str) -> ModelPackage:
    def text(key: str, default: str | None = None) -> str:
        value = declared.get(key, default)
        if not isinstance(value, str):
            raise ModelError(f"{name}: its package ({where}) gives no text for {key!r}")
        return value

    onnx, tokenizer = Path(text("onnx")), Path(text("tokenizer"))
    for path in (onnx, tokenizer):
        if not path.is_file():
            raise ModelError(
                f"{name}: {path} is missing; reinstall its package ({where}) with "
                "`pip install --force-reinstall`."
            )
    sha256 = text("sha256").lower()
    if not _SHA256.fullmatch(sha256):
        raise ModelError(f"{name}: its package ({where}) gives no sha256 of the model file")
    pooling = text("pooling", "mean")
    if pooling not in POOLINGS:
        raise ModelError(f"{name}: unknown pooling {pooling!r} (use one of {POOLINGS})")
    return ModelPackage(
        name=name,
        onnx=onnx,
        tokenizer=tokenizer,
        sha256=sha256,
        pooling=pooling,
        query_prefix=text("queryPrefix", ""),
        document_prefix=text("documentPrefix", ""),
        description=text("description", ""),
        distribution=where,
    )
