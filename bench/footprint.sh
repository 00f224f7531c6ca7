#!/usr/bin/env bash
# Size of a fresh virtualenv after the README's install command (`pip install .`) from a clean
# copy of the repo (tracked and untracked-but-not-ignored files; no .git, no caches), model
# package included. Usage: bench/footprint.sh [WORK_DIR]   (default /tmp/semsearch-bench/footprint)
# PYTHON picks the interpreter (default python3). Prints the total and the 12 largest packages.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-/tmp/semsearch-bench/footprint}"
python="${PYTHON:-python3}"
rm -rf "$work"
mkdir -p "$work/src"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard |
  xargs -0 -I{} cp --parents {} "$work/src/" 2>/dev/null || true)
# files deleted in the work tree but still tracked make cp fail; those are skipped above

"$python" -m venv "$work/venv"
start=$(date +%s)
"$work/venv/bin/pip" install --quiet "$work/src" 2>&1 | grep -v "is ignored: it is neither" || true
echo "pip install . took $(( $(date +%s) - start )) s with $("$work/venv/bin/python" -V)"

site="$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
total=$(du -sb "$work/venv" | cut -f1)
echo "fresh venv: $total bytes ($(( total / 1000000 )) MB; du -sh: $(du -sh "$work/venv" | cut -f1))"
# What `python -m venv` itself puts there (pip, and setuptools on Python < 3.12), for comparison
# with tools whose footprint is just what they install.
"$python" -m venv "$work/empty"
empty=$(du -sb "$work/empty" | cut -f1)
echo "an empty venv: $empty bytes ($(( empty / 1000000 )) MB); the install adds $(( (total - empty) / 1000000 )) MB"
echo "largest entries in site-packages:"
du -sb "$site"/* | sort -rn | head -12 | awk '{ printf "  %8.1f MB  %s\n", $1 / 1e6, $2 }'
"$work/venv/bin/semsearch" --version
