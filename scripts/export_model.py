"""Export a sentence-transformers model folder to ONNX, for ``scripts/model_wheel.py``.

    pip install semsearch torch transformers onnx   # torch and the rest at build time only
    python scripts/export_model.py SOURCE OUT
    python scripts/model_wheel.py OUT --name NAME --pooling mean   # the pooling it prints

SOURCE is the model's folder as sentence-transformers saves it (``config.json``, the weights as
``model.safetensors`` or ``pytorch_model.bin``, ``tokenizer.json``, ``1_Pooling/config.json``).
OUT receives ``model.onnx`` (token states, ``last_hidden_state``, from ``input_ids``,
``attention_mask`` and, when the model's tokenizer makes them, ``token_type_ids``) and a copy of
``tokenizer.json``. The file is checked against the model in torch on a padded batch of texts
of several lengths before the script says it is done; a difference on a real token above 1e-4
is an error (exit 1) and no ``model.onnx`` is written (one already in OUT stays as it was).

Nothing here runs at search time: the wheel model_wheel.py writes carries the exported file,
pinned by its sha256.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

TEXTS = [
    "x",
    "def parse_header(line):\n    name, _, value = line.partition(':')\n    return name, value",
    "how does the client decide when to retry a request, and what happens to the connection "
    "pool after the last attempt fails",
    "The patient's blood pressure fell after the second dose.",
    "short query",
]
TOLERANCE = 1e-4


def main(argv: list[str] | None = None) -> int:
    """Export and check; print what model_wheel.py needs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="the sentence-transformers model folder")
    parser.add_argument("out", type=Path, help="the folder to write model.onnx into")
    parser.add_argument("--opset", type=int, default=17)
    args = parser.parse_args(argv)
    if (
        not (args.source / "config.json").is_file()
        or not (args.source / "tokenizer.json").is_file()
    ):
        parser.error(f"{args.source} needs config.json and tokenizer.json (a model folder)")
    try:
        import numpy as np
        import onnxruntime as ort
        import torch
        from transformers import AutoModel, AutoTokenizer
    except ImportError as exc:
        parser.error(f"{exc.name} is not installed: pip install torch transformers onnx")

    model = AutoModel.from_pretrained(args.source, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(args.source)
    names = ("input_ids", "attention_mask", "token_type_ids")
    inputs = [name for name in names if name in tokenizer.model_input_names]
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    feed = {name: batch[name] for name in inputs}
    dynamic = {name: {0: "batch", 1: "tokens"} for name in [*inputs, "last_hidden_state"]}

    with torch.no_grad():  # before the export, which may leave the model changed
        expected = model(**feed).last_hidden_state.numpy()
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "model.onnx"
    with tempfile.TemporaryDirectory(dir=args.out) as scratch:
        fp32 = Path(scratch) / "model.onnx"
        torch.onnx.export(
            _by_name(model, inputs, torch),
            tuple(feed.values()),
            str(fp32),
            input_names=inputs,
            output_names=["last_hidden_state"],
            dynamic_axes=dynamic,
            opset_version=args.opset,
            dynamo=False,
        )
        mask = batch["attention_mask"].numpy()[..., None]
        arrays = {name: tensor.numpy() for name, tensor in feed.items()}
        states = _run(ort, fp32, arrays)
        worst = float(np.abs((states - expected) * mask).max())
        print(f"fp32 export: largest difference from torch on a real token {worst:.2e}")
        if worst > TOLERANCE:
            print(f"error: above {TOLERANCE:g}; {target} not written", file=sys.stderr)
            return 1
        shutil.move(str(fp32), target)
    shutil.copy(args.source / "tokenizer.json", args.out / "tokenizer.json")
    print(f"wrote {target} and {args.out / 'tokenizer.json'}; pooling: {_pooling(args.source)}")
    return 0


def _by_name(model: Any, names: list[str], torch: Any) -> Any:
    """``model`` as a module that takes ``names`` in that order and gives its token states: a
    model's own ``forward`` takes other arguments between them (BERT's third is not
    ``token_type_ids`` in every release of transformers)."""

    class ByName(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: Any) -> Any:
            return self.model(**dict(zip(names, tensors, strict=True))).last_hidden_state

    return ByName()


def _run(ort: Any, path: Path, arrays: dict[str, Any]) -> Any:
    """The first output of the ONNX file at ``path`` for ``arrays``."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, arrays)[0]


def _pooling(source: Path) -> str:
    """``mean`` or ``cls``, as the model's ``1_Pooling/config.json`` says (``mean`` without it)."""
    config = source / "1_Pooling" / "config.json"
    if config.is_file():
        settings = json.loads(config.read_text())
        if settings.get("pooling_mode_cls_token"):
            return "cls"
        if not settings.get("pooling_mode_mean_tokens", True):
            return "none of mean or cls: not a model semsearch can pool"
    return "mean"


if __name__ == "__main__":
    sys.exit(main())
