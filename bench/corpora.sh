#!/usr/bin/env bash
# Assemble the throughput corpora into DEST (default /tmp/semsearch-bench/corpora):
#   DEST/requests       requests 2.32.3 sdist from PyPI, unpacked (84 files, 0.54 MB)
#   DEST/cpython-mix    CPython 3.11 Lib/asyncio + Lib/email + Lib/test/test_asyncio
#                       (99 .py files, 1.73 MB), no __pycache__
#   DEST/cpython-large  cpython-mix + the top-level Lib/*.py modules (267 files, 6.4 MB,
#                       ~12x requests: the "corpus grows 10x" memory check)
# CPython's source comes from the standard library of a local CPython 3.11 install
# ($CPYTHON, default: the pyenv 3.11.7 build, else `python3.11`); its .py files are CPython's
# Lib/ verbatim. Figures in RESULTS.md used /root/.pyenv/versions/3.11.7 (CPython 3.11.7).
set -euo pipefail

dest="${1:-/tmp/semsearch-bench/corpora}"
mkdir -p "$dest/_downloads"
dest="$(cd "$dest" && pwd)"

if [[ ! -d "$dest/requests" ]]; then
  python3 -m pip download --quiet --no-deps --no-binary :all: requests==2.32.3 \
    -d "$dest/_downloads"
  tar -xzf "$dest/_downloads/requests-2.32.3.tar.gz" -C "$dest"
  mv "$dest/requests-2.32.3" "$dest/requests"
fi

cpython="${CPYTHON:-}"
if [[ -z "$cpython" ]]; then
  if [[ -x /root/.pyenv/versions/3.11.7/bin/python3.11 ]]; then
    cpython=/root/.pyenv/versions/3.11.7/bin/python3.11
  else
    cpython="$(command -v python3.11)"
  fi
fi
lib="$("$cpython" -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')"
echo "CPython Lib/ from $lib ($("$cpython" -V 2>&1))"

copy_tree() {  # copy_tree SRC DST: .py and data files, no __pycache__
  mkdir -p "$2"
  (cd "$1" && find . -type f -not -path '*/__pycache__/*' -print0 |
    xargs -0 -I{} cp --parents {} "$2/")
}

if [[ ! -d "$dest/cpython-mix" ]]; then
  copy_tree "$lib/asyncio" "$dest/cpython-mix/asyncio"
  copy_tree "$lib/email" "$dest/cpython-mix/email"
  copy_tree "$lib/test/test_asyncio" "$dest/cpython-mix/test/test_asyncio"
fi

if [[ ! -d "$dest/cpython-large" ]]; then
  mkdir -p "$dest/cpython-large"
  cp -r "$dest/cpython-mix/." "$dest/cpython-large/"
  cp "$lib"/*.py "$dest/cpython-large/"
fi

for corpus in requests cpython-mix cpython-large; do
  files=$(find "$dest/$corpus" -type f | wc -l)
  bytes=$(find "$dest/$corpus" -type f -print0 | du -cb --files0-from=- | tail -1 | cut -f1)
  echo "$dest/$corpus: $files files, $bytes bytes"
done
