#!/usr/bin/env bash
# Runs the example Python adapters through the external backend, as CI does after the tests, in
# serve mode (--serve: one adapter process per --jobs thread answers every call; docs/external.md):
#   1. a virtual environment with the pinned requirements (numpy, h5py from PyPI), cached in
#      ${XDG_CACHE_HOME:-$HOME/.cache}/deltacheck/venv and reused while requirements.txt and the
#      Python version are unchanged (recreated otherwise; a throwaway one where no cache is
#      writable);
#   2. the smoke suite's gdr cases on numpy_gdr.py: every case must pass (exit code 0);
#   3. numpy_gdr.py --leaky (ignores cu_seqlens) on packed cases: deltacheck must exit 1 with
#      leak rows, or the harness has stopped catching the bug;
#   4. numpy_chunked_gdr.py, the false-positive panel's member behind the external protocol (a
#      correct fp32 chunked form, docs/panel.md): every smoke gdr case must pass, probes included;
#   5. numpy_gdr.py once per call (--cmd '... {in} {out}') on a few cases: the adapters answer in
#      both modes.
#   adapters/python/check.sh            (BUILD_DIR=build by default)
set -euo pipefail
# deltacheck and the adapter open each fixture one after the other; HDF5's advisory file
# locks only add spurious "unable to lock file" failures on busy machines.
export HDF5_USE_FILE_LOCKING=FALSE
cd "$(dirname "$0")/../.."
BUILD_DIR="${BUILD_DIR:-build}"
DELTACHECK="$BUILD_DIR/deltacheck"
REQ=adapters/python/requirements.txt

# --- the virtual environment ----------------------------------------------------------------
key="$( (cat "$REQ"; python3 -c 'import sys; print(sys.version)') | sha256sum | cut -c1-16)"
cache="${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/deltacheck"
if mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ]; then
  venv="$cache/venv"
else
  venv="$(mktemp -d)/venv"
  trap 'rm -rf "$(dirname "$venv")"' EXIT
fi
if [ "$(cat "$venv/.deltacheck-key" 2>/dev/null)" != "$key" ] ||
   ! "$venv/bin/python" -c 'import numpy, h5py' 2>/dev/null; then
  echo "adapter venv: creating $venv ($(python3 --version), $(grep -v '^#' "$REQ" | tr '\n' ' '))"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$REQ"
  echo "$key" >"$venv/.deltacheck-key"
else
  echo "adapter venv: reusing $venv"
fi
python="$venv/bin/python"

# --- the adapter must pass ------------------------------------------------------------------
echo "adapter: smoke suite (gdr) through the external backend"
"$DELTACHECK" run --suite smoke --filter '^gdr' --jobs 2 --quiet --backend external \
  --serve "'$python' adapters/python/numpy_gdr.py"

# --- the deliberately leaky variant must be caught ------------------------------------------
echo "adapter: numpy_gdr.py --leaky must be reported as a leak"
out="$(mktemp)"
set +e
"$DELTACHECK" run --suite smoke --filter '^gdr\(layout=packed\[(63,0,65|1\*24,2\*12)\].*cache=prefill' \
  --jobs 2 --quiet --no-probes --backend external \
  --serve "'$python' adapters/python/numpy_gdr.py --leaky" >"$out" 2>&1
code=$?
set -e
leaks="$(grep -c '^LEAK ' "$out" || true)"
tail -n 3 "$out"
rm -f "$out"
if [ "$code" -ne 1 ] || [ "$leaks" -eq 0 ]; then
  echo "adapter: FAILED: --leaky gave exit code $code and $leaks leak rows (want 1 and > 0)" >&2
  exit 1
fi
echo "adapter: --leaky caught: exit code 1, $leaks leak rows"

# --- the panel's chunked implementation must pass (a non-pass is a harness false positive) --
echo "adapter: numpy_chunked_gdr.py, smoke suite (gdr) with probes (docs/panel.md)"
"$DELTACHECK" run --suite smoke --filter '^gdr' --jobs 2 --quiet --backend external \
  --serve "'$python' adapters/python/numpy_chunked_gdr.py"

# --- and once per call, the other way of running the same adapter ---------------------------
echo "adapter: numpy_gdr.py once per call (--cmd), packed prefill cases"
"$DELTACHECK" run --suite smoke --filter '^gdr\(layout=packed\[(63,0,65|1\*24,2\*12)\].*cache=prefill' \
  --jobs 2 --quiet --no-probes --backend external \
  --cmd "'$python' adapters/python/numpy_gdr.py {in} {out}"
