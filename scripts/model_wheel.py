"""Build a model package: a wheel that carries an ONNX embedding model for semsearch.

    python scripts/model_wheel.py FOLDER --name bge-small-en-v1.5 --pooling cls \
        --query-prefix "Represent this sentence for searching relevant passages: " \
        [--document-prefix TEXT] [--description TEXT] [--license FILE] [--version 1.0.0] \
        [--out dist]
    pip install dist/semsearch_model_bge_small_en_v1_5-1.0.0-py3-none-any.whl
    semsearch config                                  # lists bge-small-en-v1.5
    semsearch index --model bge-small-en-v1.5         # embeds the index again with it

FOLDER holds the model as ``model.onnx`` (or ``onnx/model.onnx``) and its ``tokenizer.json``, as
exported for sentence-transformers or Transformers.js. The wheel holds both files and a module
whose ``model()`` declares them, with the model file's sha256 (checked before the model first
runs), its pooling and the prefixes its training used; it registers that function in the
``semsearch.models`` entry-point group under the model's name (the contract:
``semsearch/model/catalog.py``). Nothing is downloaded when the wheel is installed or used, so a
team can keep it in its own package index or beside its CI's artefacts. The wheel is written by
hand (a zip file with its ``.dist-info``, PEP 427): no build tool is needed.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import re
import sys
import zipfile
from pathlib import Path

TEMPLATE = '''"""The {name} embedding model as a semsearch model package (model_wheel.py)."""

from pathlib import Path

_HERE = Path(__file__).parent


def model() -> dict[str, str]:
    """What semsearch reads from the ``semsearch.models`` entry point (see its model.catalog)."""
    return {{
        "onnx": str(_HERE / "model.onnx"),
        "tokenizer": str(_HERE / "tokenizer.json"),
        "sha256": {sha256!r},
        "pooling": {pooling!r},
        "queryPrefix": {query_prefix!r},
        "documentPrefix": {document_prefix!r},
        "description": {description!r},
    }}
'''


def main(argv: list[str] | None = None) -> int:
    """Write the wheel; print its path."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="folder with model.onnx and tokenizer.json")
    parser.add_argument("--name", required=True, help="the model's name in semsearch")
    parser.add_argument("--pooling", choices=("mean", "cls"), required=True)
    parser.add_argument("--query-prefix", default="", help="text put before each query")
    parser.add_argument("--document-prefix", default="", help="text put before each chunk")
    parser.add_argument("--description", default="", help="one line for `semsearch config`")
    parser.add_argument("--license", type=Path, help="the model's licence file, to ship with it")
    parser.add_argument("--version", default="1.0.0")
    parser.add_argument("--out", type=Path, default=Path("dist"))
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", args.name):
        parser.error(f"--name {args.name!r}: use letters, digits, '.', '_' and '-'")
    onnx = next(
        (args.folder / p for p in ("model.onnx", "onnx/model.onnx") if (args.folder / p).is_file()),
        None,
    )
    tokenizer = args.folder / "tokenizer.json"
    if onnx is None or not tokenizer.is_file():
        parser.error(f"{args.folder} needs model.onnx (or onnx/model.onnx) and tokenizer.json")
    wheel = write_wheel(args, onnx, tokenizer)
    print(wheel)
    return 0


def write_wheel(args: argparse.Namespace, onnx: Path, tokenizer: Path) -> Path:
    """The wheel of the model in ``onnx`` and ``tokenizer``, as ``args`` describe it."""
    stem = re.sub(r"[^A-Za-z0-9]+", "_", args.name).strip("_").lower()
    package = f"semsearch_model_{stem}"
    dist_info = f"{package}-{args.version}.dist-info"
    sha256 = hashlib.sha256(onnx.read_bytes()).hexdigest()
    module = TEMPLATE.format(
        name=args.name,
        sha256=sha256,
        pooling=args.pooling,
        query_prefix=args.query_prefix,
        document_prefix=args.document_prefix,
        description=args.description,
    )
    metadata = (
        "Metadata-Version: 2.1\n"
        f"Name: semsearch-model-{stem.replace('_', '-')}\n"
        f"Version: {args.version}\n"
        f"Summary: The {args.name} embedding model as a semsearch model package\n"
    )
    files: list[tuple[str, bytes | Path]] = [
        (f"{package}/__init__.py", module.encode()),
        (f"{package}/model.onnx", onnx),
        (f"{package}/tokenizer.json", tokenizer),
    ]
    if args.license is not None:
        files.append((f"{package}/LICENSE", args.license))
    files += [
        (f"{dist_info}/METADATA", metadata.encode()),
        (
            f"{dist_info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: semsearch model_wheel.py\n"
            b"Root-Is-Purelib: true\nTag: py3-none-any\n",
        ),
        (
            f"{dist_info}/entry_points.txt",
            f"[semsearch.models]\n{args.name} = {package}:model\n".encode(),
        ),
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    wheel = args.out / f"{package}-{args.version}-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in files:
            data = content.read_bytes() if isinstance(content, Path) else content
            archive.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{name},sha256={digest.decode()},{len(data)}")
        record.append(f"{dist_info}/RECORD,,")
        archive.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return wheel


if __name__ == "__main__":
    sys.exit(main())
