#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang (AddressSanitizer + UndefinedBehaviorSanitizer,
# in their own build folder, only the libraries they need) and runs each for a fixed time on its
# seed corpus (fuzz/corpus/<target>/). New inputs go to the build folder, never into the
# repository; a crash leaves its input in $BUILD_DIR/crashes/ and fails the script — turn it into
# a regression test (fuzz/corpus/<target>/ and a unit test) before fixing it.
#   scripts/fuzz.sh                 every target, 30 s each (CI)
#   FUZZ_SECONDS=600 scripts/fuzz.sh case_id
#   FUZZ_SEED=0 scripts/fuzz.sh     a random seed (default 1: CI explores the same inputs on every
#                                   run, so a red CI is a change's doing, not the draw's)
#   BUILD_DIR=build-fuzz            the build folder (default)
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keys on paths relative to the checkout, so a fresh clone elsewhere (CI) still hits.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
# These builds carry debug info (-g), for which ccache also hashes the build folder's absolute
# path unless told not to: every fresh clone (CI) missed and rebuilt from scratch (about 14 min
# for ASan, 9 for TSan on 2 cores). Only the debug info's working directory can be stale on a hit.
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
BUILD_DIR="${BUILD_DIR:-build-fuzz}"
SECONDS_EACH="${FUZZ_SECONDS:-30}"
SEED="${FUZZ_SEED:-1}"
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(case_id fixture_reader external_output report_merge cache_entry serve_answer)

if ! command -v clang++ >/dev/null; then
  echo "deltacheck: error: clang++ not found (apt-get install clang libclang-rt-dev)" >&2
  exit 2
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDELTACHECK_SANITIZE=address,undefined -DDELTACHECK_FUZZ=ON \
  -DDELTACHECK_TORCH=OFF -DDELTACHECK_CUDA=OFF -DDELTACHECK_TESTS=OFF -DDELTACHECK_BENCH=OFF \
  -DDELTACHECK_NATIVE=OFF >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${TARGETS[@]/#/fuzz_}"

status=0
mkdir -p "$BUILD_DIR/crashes"
# The targets' scratch files (in memory where /dev/shm exists), removed whatever happens.
DELTACHECK_FUZZ_SCRATCH="$(mktemp -d "$( [ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/deltacheck-fuzz-XXXXXX")"
export DELTACHECK_FUZZ_SCRATCH
trap 'rm -rf "$DELTACHECK_FUZZ_SCRATCH"' EXIT
for t in "${TARGETS[@]}"; do
  work="$BUILD_DIR/corpus/$t"
  mkdir -p "$work"
  log="$BUILD_DIR/fuzz_$t.log"
  # HDF5 keeps a few global allocations until exit: leak detection would flag the library.
  leaks=1
  [ "$t" = case_id ] || [ "$t" = report_merge ] || [ "$t" = serve_answer ] || leaks=0
  if "$BUILD_DIR/fuzz/fuzz_$t" "$work" "fuzz/corpus/$t" -max_total_time="$SECONDS_EACH" -seed="$SEED" \
    -timeout=10 -rss_limit_mb=2048 -detect_leaks="$leaks" -print_final_stats=1 \
    -artifact_prefix="$BUILD_DIR/crashes/$t-" >"$log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
    tail -40 "$log" >&2
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  echo "fuzz $t: ${execs:-?} executions in ${SECONDS_EACH} s (${rate:-?}/s), coverage ${cov:-?} edges, corpus $(ls "$work" | wc -l) new inputs: $result"
done
exit "$status"
