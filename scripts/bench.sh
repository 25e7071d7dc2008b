#!/usr/bin/env bash
# Runs deltacheck_bench: the kernels' and the harness's speed next to this machine's ceilings (an
# fp32 matrix product through LibTorch/OpenBLAS, a large memory copy) measured in the same run,
# then a summary line per figure as a fraction of its ceiling. Writes, all or nothing:
#   reports/latest/bench.json   Google Benchmark JSON (input of `deltacheck bench compare`)
#   reports/latest/bench.txt    the table and the summary as printed
#   scripts/bench.sh                          every figure (several minutes on 2 cores)
#   scripts/bench.sh --short                  CI: small shapes, one short measurement each
#   scripts/bench.sh --benchmark_filter=T:4096 --benchmark_repetitions=3   any Google Benchmark flag
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
OUT_DIR="${BENCH_OUT_DIR:-reports/latest}"
BIN="$BUILD_DIR/deltacheck_bench"
if [ ! -x "$BIN" ]; then
  echo "deltacheck: error: $BIN not built (scripts/setup.sh builds it; needs -DDELTACHECK_BENCH=ON)" >&2
  exit 2
fi
args=()
if [ "${1:-}" = "--short" ]; then
  shift
  args+=("--benchmark_filter=ceiling|/T:512/|gdr_short/cpu|gdr_decode/cpu|mask/cpu/shape:0/n:2048|harness_prefill/(kernel|run_case)/T:512|harness_sequences/run_case_with_probes/seqs:1000/"
         "--benchmark_min_time=0.01")
fi
mkdir -p "$OUT_DIR"
tmp_json="$OUT_DIR/.bench.json.$$" tmp_txt="$OUT_DIR/.bench.txt.$$"
trap 'rm -f "$tmp_json" "$tmp_txt"' EXIT
status=0
"$BIN" --benchmark_out="$tmp_json" --benchmark_out_format=json "${args[@]}" "$@" | tee "$tmp_txt" ||
  status=$?
[ "$status" -eq 0 ] || exit "$status"
mv "$tmp_json" "$OUT_DIR/bench.json"
mv "$tmp_txt" "$OUT_DIR/bench.txt"
echo "bench: $OUT_DIR/bench.json (compare two runs: deltacheck bench compare OLD.json NEW.json --vs-ceiling)"
