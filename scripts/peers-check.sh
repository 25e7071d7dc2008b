#!/usr/bin/env bash
# The peer suite: implementations nobody here wrote (Transformers' Qwen3-Next gated delta rule,
# GatedDeltaNet modules and masking utilities, flash-linear-attention's reference functions,
# kernels and GatedDeltaNet layer (adapters/python/fla_layer.py), vLLM's copies of those kernels called as its GDN layers call them) checked through
# `deltacheck run --backend external`, against the findings pinned in
# adapters/python/expected-findings.json; and adapters/python/transformers_model.py (a tiny model
# under DataCollatorWithFlattening, generate() with a static cache), which judges its own checks.
# CI runs it after the core tests.
#   scripts/peers-check.sh                 (BUILD_DIR=build; reports in reports/peers/<peer>/)
#   scripts/peers-check.sh --peer transformers-chunk      (any peers_check.py run option)
#   scripts/peers-check.sh --long          (also the long families: FLA's and vLLM's Triton
#                                           kernels, FLA's layer padded and bf16, minutes)
# 1. scripts/peers-setup.sh: the pinned venv (cached; a group that cannot be installed is
#    skipped with a banner, never a failure); with FLA installed, adapters/python/test_triton_cpu.py
#    (FLA's Triton kernels on CPU under Triton's interpreter, docs/peers.md);
# 2. adapters/python/peers_check.py run: each peer's cases, one report directory per peer, the
#    verdict per (peer, case family) against the pinned one;
# 3. the findings table of docs/peers.md against the pinned file.
# Exit 1 when a finding changed (either direction), a peer errored, or the table in
# docs/peers.md is stale.
# deltacheck and the adapter open each fixture one after the other; HDF5's advisory file
# locks only add spurious "unable to lock file" failures on busy machines.
export HDF5_USE_FILE_LOCKING=FALSE
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BUILD_DIR="${BUILD_DIR:-build}"
OUT="${PEERS_REPORT_DIR:-reports/peers}"
start=$(date +%s)

venv="$(scripts/peers-setup.sh | tail -n 1)"
if [ -z "$venv" ]; then
  echo "peers: scripts/peers-setup.sh gave no venv" >&2
  exit 1
fi
echo "peers: setup done in $(($(date +%s) - start)) s"
if grep -q $'^cached\tno' "$venv/.deltacheck-peers-status" 2>/dev/null; then
  trap 'rm -rf "$venv"' EXIT
fi

# FLA's Triton kernels run on CPU tensors under Triton's interpreter, helped by triton_cpu.py:
# its tests first (each patch against NumPy and against the bare interpreter; docs/peers.md).
tests=0
if grep -q $'^fla\tok' "$venv/.deltacheck-peers-status" 2>/dev/null; then
  echo "peers: adapters/python/test_triton_cpu.py"
  "$venv/bin/python" adapters/python/test_triton_cpu.py 2>&1 | tail -n 4 || tests=1
fi

rm -rf "$OUT"
python3 adapters/python/peers_check.py run --deltacheck "$BUILD_DIR/deltacheck" --venv "$venv" \
  --out "$OUT" "$@"
code=$?
[ "$tests" = 0 ] || code=1
python3 adapters/python/peers_check.py check-doc docs/peers.md || code=1
echo "peers: done in $(($(date +%s) - start)) s" \
  "(reports: $OUT/<peer>/report.html, $OUT/findings.md)"
exit $code
