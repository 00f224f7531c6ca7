"""The int8 model on an AVX2-only CPU, seen from a VNNI one: valgrind hides AVX-512 and VNNI.

    python bench/avx2.py --folder SRC --out DIR              # native, then both variants under
                                                             # callgrind; prints the comparison

valgrind's virtual CPU has AVX2 and no AVX-512 or VNNI, so onnxruntime picks its AVX2 kernels
(the u8×s8 VPMADDUBSW path for int8) under it. The script embeds the first N chunks (900
characters each) of the ``.py`` / ``.js`` / ``.go`` files directly in SRC (path order, not its
subfolders) with one thread, natively and under ``valgrind --tool=callgrind``, for both
variants, and reports (1) the cosine between the
native and the AVX2 int8 vectors: whether an int8 index searched on an AVX2 CPU sees the vectors
it was built with, and (2) the instructions each variant executes for the N chunks (a run of one
warm-up text subtracted): a proxy for the AVX2 speed ratio, not a time. Under callgrind a run of
64 chunks takes 30-80 minutes.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from semsearch.model.embedder import OnnxEmbedder

SUFFIXES = (".py", ".js", ".go")


def texts_of(folder: Path, count: int) -> list[str]:
    """The first ``count`` 900-character pieces of the source files directly in the folder, in
    path order."""
    texts: list[str] = []
    for path in sorted(p for p in folder.iterdir() if p.suffix in SUFFIXES and p.is_file()):
        source = path.read_text(encoding="utf-8", errors="replace")
        texts.extend(source[i : i + 900] for i in range(0, len(source), 900))
        if len(texts) >= count:
            break
    return texts[:count]


def embed(variant: str, folder: Path, count: int, out: Path) -> None:
    """Embed (one thread) after a warm-up text, and save the vectors."""
    embedder = OnnxEmbedder(threads=1, variant=variant)
    embedder.embed(["warm up"])
    texts = texts_of(folder, count)
    vectors = embedder.embed(texts) if texts else np.zeros((0, 384), dtype=np.float32)
    np.save(out, vectors)


def instructions(log: Path) -> int:
    """callgrind's total instruction count from its log."""
    found = re.search(r"I\s+refs:\s+([\d,]+)", log.read_text(encoding="utf-8"))
    if found is None:
        raise SystemExit(f"no instruction count in {log}")
    return int(found.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> int:
    """Run the native and the valgrind embeddings and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, required=True, help="source files to embed")
    parser.add_argument("--out", type=Path, required=True, help="work folder")
    parser.add_argument("--chunks", type=int, default=64)
    parser.add_argument("--embed", help=argparse.SUPPRESS)  # VARIANT:COUNT:FILE, one child run
    args = parser.parse_args(argv)
    if args.embed:
        variant, count, out = args.embed.split(":", 2)
        embed(variant, args.folder, int(count), Path(out))
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind).")
    if not args.folder.is_dir() or not texts_of(args.folder, 1):
        raise SystemExit(f"No .py, .js or .go file directly in {args.folder}.")
    args.out.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, __file__, "--folder", str(args.folder), "--out", str(args.out)]
    counts: dict[str, int] = {}
    for variant in ("int8", "fp32"):
        native = args.out / f"{variant}-native.npy"
        subprocess.run([*me, "--embed", f"{variant}:{args.chunks}:{native}"], check=True)
        for count in (0, args.chunks):
            log = args.out / f"cg-{variant}-{count}.log"
            vectors = args.out / f"{variant}-avx2-{count}.npy"
            callgrind = ["valgrind", "--tool=callgrind", f"--log-file={log}"]
            callgrind.append(f"--callgrind-out-file={args.out / f'cg-{variant}-{count}.out'}")
            subprocess.run([*callgrind, *me, "--embed", f"{variant}:{count}:{vectors}"], check=True)
        counts[variant] = instructions(args.out / f"cg-{variant}-{args.chunks}.log")
        counts[variant] -= instructions(args.out / f"cg-{variant}-0.log")
        a = np.load(native)
        b = np.load(args.out / f"{variant}-avx2-{args.chunks}.npy")
        cosine = (a * b).sum(axis=1)
        print(f"{variant}: native vs AVX2 cosine mean {cosine.mean():.6f} min {cosine.min():.6f}")
        print(f"{variant}: {counts[variant]:,} instructions for {args.chunks} chunks (AVX2)")
    print(f"fp32 / int8 instructions: {counts['fp32'] / counts['int8']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
