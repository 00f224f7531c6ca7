#!/usr/bin/env bash
# Run COMMAND as on an AVX2-only x86-64 CPU: CPUID hides AVX-512, AVX-VNNI and AMX from it and
# from every program it starts (bench/avx2only.c, through LD_PRELOAD), so onnxruntime and numpy
# pick their AVX2 kernels. Needs Linux and a CPU with CPUID faulting (`cpuid_fault` in
# /proc/cpuinfo). The benches pass LD_PRELOAD on to their child processes.
#
#   bash bench/avx2only.sh python bench/throughput.py /tmp/semsearch-bench/corpora/requests
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${SS_BENCH_WORK:-/tmp/semsearch-bench}/avx2only.so"
mkdir -p "$(dirname "$out")"
if [[ ! -e "$out" || "$here/avx2only.c" -nt "$out" ]]; then
    gcc -O2 -Wall -shared -fPIC -o "$out" "$here/avx2only.c"
fi
# The check: what the process sees through CPUID under the preload (numpy's probe).
LD_PRELOAD="$out" python3 -c '
import sys
from semsearch.model.builds import cpu_features
features = cpu_features()
seen = sorted(name for name, on in features.items() if on and name.startswith("AVX512"))
avx2 = features.get("AVX2")
if seen or not avx2:
    sys.exit(f"avx2only: the preload did not take: AVX2={avx2}, seen {seen}")
'
export LD_PRELOAD="$out${LD_PRELOAD:+:$LD_PRELOAD}"
exec "$@"
