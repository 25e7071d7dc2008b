#!/usr/bin/env bash
# Sanitizer builds (docs/reliability.md), each in its own build folder, without LibTorch and
# CUDA, building only the targets its checks need:
#   asan   AddressSanitizer + UndefinedBehaviorSanitizer: the unit tests (test_cases, test_ops,
#          test_reference, test_kernels_cpu, test_harness, test_golden and the committed fixtures)
#          and the smoke suite, in-process and under --isolate, right and deliberately wrong
#   tsan   ThreadSanitizer: the threaded runner, deltacheck run --suite smoke --jobs 2, with the
#          CPU kernels' own threads and failure dumps written from worker threads, and
#          --prepare-ahead (cases and probe calls prepared on other threads)
# Any sanitizer report fails the script (exit code 86 from the sanitizer runtime).
#   scripts/sanitizers.sh              both
#   scripts/sanitizers.sh tsan         one
#   ASAN_BUILD_DIR=... TSAN_BUILD_DIR=...   the build folders (default build-asan, build-tsan)
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keys on paths relative to the checkout, so a fresh clone elsewhere (CI) still hits.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
# These builds carry debug info (-g), for which ccache also hashes the build folder's absolute
# path unless told not to: every fresh clone (CI) missed and rebuilt from scratch (about 14 min
# for ASan, 9 for TSan on 2 cores). Only the debug info's working directory can be stale on a hit.
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
ASAN_DIR="${ASAN_BUILD_DIR:-build-asan}"
TSAN_DIR="${TSAN_BUILD_DIR:-build-tsan}"
STEPS=("$@")
[ ${#STEPS[@]} -gt 0 ] || STEPS=(asan tsan)
COMMON=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDELTACHECK_TORCH=OFF -DDELTACHECK_CUDA=OFF
        -DDELTACHECK_BENCH=OFF)
# A sanitizer report exits with 86, apart from deltacheck's own 0/1/2.
export ASAN_OPTIONS="exitcode=86:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="exitcode=86:print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="exitcode=86:halt_on_error=1:second_deadlock_stack=1"

t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }

# Runs deltacheck and requires exit code $1 (a sanitizer report is 86, never the expected code).
expect() {
  local want=$1
  shift
  local rc=0
  "$@" >"$LOG" 2>&1 || rc=$?
  if [ "$rc" -ne "$want" ]; then
    tail -60 "$LOG" >&2
    echo "sanitizers: '$*' exited with $rc, expected $want" >&2
    exit 1
  fi
  echo "  ok ($rc): ${*:1:8}"
}

for step in "${STEPS[@]}"; do
  case "$step" in
    asan)
      cmake -S . -B "$ASAN_DIR" "${COMMON[@]}" -DDELTACHECK_SANITIZE=address,undefined >/dev/null
      cmake --build "$ASAN_DIR" -j "$(nproc)" --target deltacheck test_cases test_ops \
        test_reference test_kernels_cpu test_harness test_golden
      echo "=== asan+ubsan: built ($(elapsed))"
      LOG="$ASAN_DIR/sanitizer-run.log"
      # Every unit test but the cpu backend on the full suite's own cases: under ASan that one
      # alone takes over 20 minutes on 2 cores (it runs in the release tests, scripts/test.sh;
      # the same code paths run here through the smoke and gate cases of the other tests).
      # Nor the one test that forks from a multithreaded run (--jobs 2 and --backend external):
      # ASan's allocator locks are not fork-safe (docs/reliability.md, "Sanitizers and fork()").
      ctest --test-dir "$ASAN_DIR" -L '^(cases|ops|reference|kernels/cpu|harness|golden)$' \
        -E '^(CpuBackend\.PassesTheFullSuitesOwnCases|ExternalServeCli\.OneWorkerPerJob)$' \
        -j "$(nproc)" --output-on-failure --timeout 1200 >"$ASAN_DIR/ctest.log" 2>&1 ||
        { grep -E "Failed|SUMMARY|runtime error|ERROR" "$ASAN_DIR/ctest.log" | head -40 >&2;
          tail -5 "$ASAN_DIR/ctest.log" >&2; exit 1; }
      tail -3 "$ASAN_DIR/ctest.log"
      echo "=== asan+ubsan: unit tests clean ($(elapsed))"
      expect 0 "$ASAN_DIR/deltacheck" run --suite smoke --backend cpu -q
      expect 1 "$ASAN_DIR/deltacheck" run --suite smoke -q --jobs 2 \
        --backend wrong:ignore-cu-seqlens,wrong:mask-no-linear-rule --report-dir "$ASAN_DIR/smoke"
      expect 0 "$ASAN_DIR/deltacheck" run --suite smoke --backend cpu -q --isolate --no-probes
      echo "=== asan+ubsan: smoke suite clean ($(elapsed))"
      ;;
    tsan)
      cmake -S . -B "$TSAN_DIR" "${COMMON[@]}" -DDELTACHECK_SANITIZE=thread >/dev/null
      cmake --build "$TSAN_DIR" -j "$(nproc)" --target deltacheck
      echo "=== tsan: built ($(elapsed))"
      LOG="$TSAN_DIR/sanitizer-run.log"
      expect 0 "$TSAN_DIR/deltacheck" run --suite smoke --backend cpu --jobs 2 -q
      expect 1 "$TSAN_DIR/deltacheck" run --suite smoke --jobs 2 -q \
        --backend cpu,wrong:ignore-cu-seqlens --report-dir "$TSAN_DIR/smoke"
      # One job, the next case and the probe calls' variations prepared on other threads (a
      # leaky backend's probes stop early and leave a variation built for nothing).
      expect 1 "$TSAN_DIR/deltacheck" run --suite smoke --filter layout=packed --prepare-ahead -q \
        --backend cpu,wrong:ignore-cu-seqlens
      echo "=== tsan: threaded runner clean ($(elapsed))"
      ;;
    *)
      echo "deltacheck: error: unknown step '$step' (asan, tsan)" >&2
      exit 2
      ;;
  esac
done
