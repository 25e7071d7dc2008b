#!/usr/bin/env bash
# Validates the CUDA backend on a machine with an NVIDIA GPU, in one command: builds deltacheck
# (Release, sm_90) there, checks that the device is usable, runs the CUDA kernel and backend tests,
# the gate and full suites on `--backend cuda` (the gate's gdr_grad cases, the CUDA backward, on
# a line of their own too), FLA's Triton kernels through the peer adapter (when
# python3 has flash-linear-attention), compute-sanitizer (memcheck, racecheck) on the smoke
# suite and on the kernel tests, and the GPU benchmarks, and writes every report and log into one
# folder with a SUMMARY.md. Meant for a machine with CUDA, CMake, ninja and PyTorch but no package
# registry: the C++ dependencies come from third_party/gpu-prefix/ (made by scripts/gpu-bundle.sh
# where apt works), LibTorch from python3's torch. Target: under 8 minutes on an H200.
#
#   scripts/gpu-check.sh                      everything; exit 0 only if every step passed
#   scripts/gpu-check.sh --dry-run            print the steps and commands, run nothing
#   scripts/gpu-check.sh --build-only         configure and build only (no GPU needed)
#   options: --build-dir DIR (build-gpu)  --report-dir DIR (reports/gpu-YYYY-MM-DD)
#            --jobs N (all cores)  --no-torch (build without LibTorch)
#            --archive FILE.tar.gz: also pack the report folder, failure dumps left out, into one
#            file (to fetch from a machine that hands back only a few files)
#            --time-limit S (570): no step runs past it (steps left are "not run"), so the
#            summary is written inside a 10-minute command limit
#
# Exit codes: 0 every step passed, 1 a step failed, timed out or was not run, 2 usage error or no
# usable GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

BUILD_DIR=build-gpu
REPORT_DIR=""
JOBS=$(nproc 2>/dev/null || echo 4)
DRY_RUN=0
BUILD_ONLY=0
TORCH=1
TIME_LIMIT=570
ARCHIVE=""
PREFIX="$PWD/third_party/gpu-prefix/usr"
ARCH_LIBS="$PREFIX/lib/x86_64-linux-gnu"
SMOKE_CASE='gdr(layout=packed[63,0,65],dtype=bf16,gate=strong,seed=7)'

die() { echo "deltacheck: error: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --build-only) BUILD_ONLY=1 ;;
    --no-torch) TORCH=0 ;;
    --build-dir) [ $# -ge 2 ] || die "--build-dir needs a folder"; BUILD_DIR=$2; shift ;;
    --report-dir) [ $# -ge 2 ] || die "--report-dir needs a folder"; REPORT_DIR=$2; shift ;;
    --archive) [ $# -ge 2 ] || die "--archive needs a file name"; ARCHIVE=$2; shift ;;
    --jobs) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || die "--jobs needs a positive number"; JOBS=$2; shift ;;
    --time-limit)
      [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || die "--time-limit needs seconds"; TIME_LIMIT=$2; shift ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done

# One folder per run: reports/gpu-<date>, then -2, -3, ... on the same day.
if [ -z "$REPORT_DIR" ]; then
  REPORT_DIR="reports/gpu-$(date -u +%Y-%m-%d)"
  n=2
  while [ -e "$REPORT_DIR" ] && [ "$DRY_RUN" = 0 ]; do
    REPORT_DIR="reports/gpu-$(date -u +%Y-%m-%d)-$n"
    n=$((n + 1))
  done
fi
R=$REPORT_DIR
[ "$DRY_RUN" = 1 ] || mkdir -p "$R" || die "cannot create $R"

START=$(date +%s)
declare -a RESULTS=()  # "step|result|seconds|detail"
FAILED=0

note() { echo "gpu-check [$(( $(date +%s) - START ))s] $*"; }
record() {
  RESULTS+=("$1|$2|$3|$4")
  case "$2" in ok|skipped) ;; *) FAILED=1 ;; esac
}
quote() { printf '%q ' "$@"; }

# run_step NAME LIMIT_S LOG -- COMMAND...: runs COMMAND with a time limit (the step's own, cut to
# what --time-limit leaves, less 20 s for the summary), its output in LOG (and the last lines on
# the console when it fails). Sets STEP_RC, STEP_RESULT (ok, failed (exit N), timeout (Ns), not
# run (time limit)) and STEP_SECONDS; the caller records them.
run_step() {
  local name=$1 limit=$2 log=$3
  shift 4
  if [ "$DRY_RUN" = 1 ]; then
    echo "[$name] (limit ${limit}s, log $log)"
    echo "    $(quote "$@")"
    STEP_RC=0
    return 0
  fi
  local left=$((TIME_LIMIT - ($(date +%s) - START) - 20))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 10 ]; then
    STEP_RC=125 STEP_RESULT="not run (time limit)" STEP_SECONDS=0
    note "$name: not run, the --time-limit of ${TIME_LIMIT}s is (nearly) used up"
    return 0
  fi
  note "$name: $(quote "$@")"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  STEP_RC=$?
  local dt=$((SECONDS - t0))
  if [ "$STEP_RC" = 0 ]; then
    STEP_RESULT=ok
  elif [ "$STEP_RC" = 124 ] || [ "$STEP_RC" = 137 ]; then
    STEP_RESULT="timeout (${limit}s)"
  else
    STEP_RESULT="failed (exit $STEP_RC)"
  fi
  STEP_SECONDS=$dt
  if [ "$STEP_RC" != 0 ]; then
    echo "---- last lines of $log ----"
    tail -n 25 "$log"
    echo "----"
  fi
  note "$name: $STEP_RESULT in ${dt}s"
  return 0
}

# ---- environment -------------------------------------------------------------------------------

NVCC=$(command -v nvcc || true)
[ -n "$NVCC" ] || { [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc; }
TORCH_PREFIX=""
if [ "$TORCH" = 1 ] && [ "$DRY_RUN" = 0 ]; then
  TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) ||
    TORCH_PREFIX=""
  [ -n "$TORCH_PREFIX" ] || note "no python3 torch: building without LibTorch"
elif [ "$TORCH" = 1 ]; then
  TORCH_PREFIX="<torch.utils.cmake_prefix_path of python3>"
fi

# The prefix's shared libraries that this machine's loader does not know, linked into one folder
# on LD_LIBRARY_PATH (for the linker, which resolves HDF5's own dependencies, and at run time).
# Libraries the machine has are never shadowed (DELTACHECK_GPU_PREFIX_ALL_LIBS=1 takes every
# library from the prefix: to check a bundle on a machine that has them all, e.g. where it was made).
case "$BUILD_DIR" in
  /*) LIB_SHIM="$BUILD_DIR/gpu-prefix-libs" ;;
  *) LIB_SHIM="$PWD/$BUILD_DIR/gpu-prefix-libs" ;;
esac
if [ -d "$PREFIX" ]; then
  if [ "$DRY_RUN" = 1 ]; then
    echo "[prefix] link the libraries of $ARCH_LIBS this machine lacks into $LIB_SHIM; LD_LIBRARY_PATH=$LIB_SHIM"
  else
    known=$( { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | awk '{print $1}')
    rm -rf "$LIB_SHIM" && mkdir -p "$LIB_SHIM"
    shimmed=0
    for lib in "$ARCH_LIBS"/*.so.*; do
      [ -e "$lib" ] || continue
      name=$(basename "$lib")
      if [ "${DELTACHECK_GPU_PREFIX_ALL_LIBS:-0}" = 1 ] || ! grep -qxF "$name" <<<"$known"; then
        ln -sf "$lib" "$LIB_SHIM/$name"
        shimmed=$((shimmed + 1))
      fi
    done
    export LD_LIBRARY_PATH="$LIB_SHIM${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    note "prefix $PREFIX: $shimmed of its libraries are not on this machine and come from it"
  fi
else
  note "no $PREFIX (scripts/gpu-bundle.sh makes it): relying on the machine's own packages"
fi

write_summary() {
  [ "$DRY_RUN" = 1 ] && return 0
  local f="$R/SUMMARY.md" overall=PASSED
  [ "$FAILED" = 0 ] || overall=FAILED
  [ "$BUILD_ONLY" = 0 ] || overall="$overall (build only, nothing ran on a device)"
  {
    echo "# deltacheck GPU check: $overall"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), $(( $(date +%s) - START )) s in all"
    echo "- revision: $(git describe --always --dirty 2>/dev/null || echo unknown)"
    echo "- device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n1 || echo unknown)"
    echo "- nvcc: $("${NVCC:-nvcc}" --version 2>/dev/null | tail -n1 || echo unknown)"
    echo "- host: $(nproc) cores; build: $BUILD_DIR (Release, sm_90); LibTorch: ${TORCH_PREFIX:-none}"
    echo
    echo "| step | result | seconds | detail |"
    echo "| --- | --- | --- | --- |"
    local r
    for r in "${RESULTS[@]}"; do echo "| ${r//|/ | } |"; done
    echo
    for s in gate gate-gdr_grad full; do
      [ -f "$R/$s.log" ] || continue
      echo "$s suite:"
      echo '```'
      grep -E '^(backend |cuda )|^deltacheck: [0-9]+ cases' "$R/$s.log"
      echo '```'
    done
    if [ -f "$R/bench.json" ] && command -v python3 >/dev/null; then
      echo
      echo "GPU benchmarks (median of the timed launches; nominal 4 T HV K V):"
      echo
      python3 - "$R/bench.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("| figure | median ms | min ms | p90 ms | TFLOP/s | note |")
print("| --- | --- | --- | --- | --- | --- |")
for b in d.get("benchmarks", []):
    if b.get("error_occurred"):
        print(f"| {b['name']} | error: {b.get('error_message', '')} | | | | |")
        continue
    print(f"| {b['name']} | {b.get('median_ms', 0):.4f} | {b.get('min_ms', 0):.4f} | "
          f"{b.get('p90_ms', 0):.4f} | {b.get('TFLOP/s', 0):.1f} | {b.get('label', '')} |")
ctx = d.get("context", {})
for k in ("cuda_device", "cuda_reference_points"):
    if k in ctx:
        print(f"\n{k}: {ctx[k]}")
PY
    fi
    echo
    if [ "$BUILD_ONLY" = 1 ]; then
      echo "Built with --build-only: no device step ran."
    elif [ "$overall" = PASSED ]; then
      echo "Every step passed. Commit this folder and update docs/cuda.md:"
      echo "the GPU, the date and this report's path."
    else
      echo "Failed steps are listed above; each step's log is in this folder."
    fi
  } >"$f"
  echo
  cat "$f"
  echo
  note "report: $R (SUMMARY.md, logs, gate/ and full/ reports, bench.json)"
  if [ -n "$ARCHIVE" ]; then
    tar -czf "$ARCHIVE" --exclude=failures -C "$(dirname "$R")" "$(basename "$R")" &&
      note "archive: $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1))"
  fi
}

# ---- 1. configure, 2. build --------------------------------------------------------------------

CMAKE_ARGS=(-S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
            -DCMAKE_CUDA_ARCHITECTURES=90 -DDELTACHECK_CUDA=ON -DDELTACHECK_BENCH=ON
            -DDELTACHECK_TESTS=ON -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
[ -n "$NVCC" ] && CMAKE_ARGS+=(-DCMAKE_CUDA_COMPILER="$NVCC")
prefix_path=""
if [ -d "$PREFIX" ] || [ "$DRY_RUN" = 1 ]; then
  prefix_path="$PREFIX"
  # The prefix's HDF5 is found by path; a compiler wrapper (h5cc) of another HDF5 must not win.
  CMAKE_ARGS+=(-DHDF5_C_COMPILER_EXECUTABLE="$PREFIX/bin/no-h5cc")
fi
# configure_and_build WITH_TORCH: records the configure and build steps; BUILT=0 on success.
configure_and_build() {
  local path=$prefix_path torch_flag=-DDELTACHECK_TORCH=OFF torch=none label=""
  if [ "$1" = 1 ] && [ -n "$TORCH_PREFIX" ]; then
    path="${path:+$path;}$TORCH_PREFIX"
    torch_flag=-DDELTACHECK_TORCH=ON
    torch=$TORCH_PREFIX
    label=" with LibTorch"
  fi
  [ "$DRY_RUN" = 1 ] || rm -f "$BUILD_DIR/CMakeCache.txt"
  run_step configure 300 "$R/configure.log" -- \
    cmake "${CMAKE_ARGS[@]}" "$torch_flag" ${path:+"-DCMAKE_PREFIX_PATH=$path"}
  [ "$DRY_RUN" = 1 ] || record "configure$label" "$STEP_RESULT" "$STEP_SECONDS" \
    "LibTorch: $torch; nvcc: ${NVCC:-not found}"
  BUILT=$STEP_RC
  [ "$BUILT" = 0 ] || return 0
  run_step build 420 "$R/build.log" -- \
    cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]}"
  [ "$DRY_RUN" = 1 ] || record "build$label" "$STEP_RESULT" "$STEP_SECONDS" "${TARGETS[*]}"
  BUILT=$STEP_RC
}
TARGETS=(deltacheck deltacheck_bench test_kernels_cuda test_backends_cuda)
configure_and_build 1
if [ "$BUILT" != 0 ] && [ -n "$TORCH_PREFIX" ]; then
  # LibTorch is not what this check is about: a wheel whose CMake config or headers do not suit
  # this build must not stop it. The failed attempt stays recorded (and its logs kept).
  note "the build with LibTorch failed; again without it (logs: $R/*-torch.log)"
  for f in configure build; do [ -f "$R/$f.log" ] && mv "$R/$f.log" "$R/$f-torch.log"; done
  TORCH_PREFIX=""
  configure_and_build 0
  # The check passes on the build without LibTorch; the failed attempt is shown, not counted.
  [ "$BUILT" = 0 ] && FAILED=0
fi
if [ "$BUILT" != 0 ]; then
  write_summary
  echo "deltacheck: error: configure or build failed (logs: $R/configure.log, $R/build.log)" >&2
  exit 1
fi

DC="$BUILD_DIR/deltacheck"
TESTS="$BUILD_DIR/tests"


if [ "$BUILD_ONLY" = 1 ]; then
  note "--build-only: stopping after the build"
  write_summary
  exit "$FAILED"
fi

# ---- 3. the device must be usable: otherwise every case would be an unsupported "pass" --------

if [ "$DRY_RUN" = 1 ]; then
  echo "[device] nvidia-smi -L; $DC run --backend cuda --case '$SMOKE_CASE' must PASS"
else
  nvidia-smi -L >"$R/device.log" 2>&1 || true
  run_step device 120 "$R/device-case.log" -- "$DC" run --backend cuda --case "$SMOKE_CASE" \
    --progress lines
  if [ "$STEP_RC" != 0 ] || ! grep -q '^PASS ' "$R/device-case.log"; then
    record device "not usable" "$STEP_SECONDS" "$(grep -m1 -o 'no CUDA device.*' "$R/device-case.log")"
    write_summary
    die "the CUDA device is not usable here ($R/device-case.log); nothing else was run"
  fi
  record device ok "$STEP_SECONDS" "$(head -n1 "$R/device.log")"
fi

# ---- 4. tests, 5. suites -----------------------------------------------------------------------

run_step test_kernels_cuda 180 "$R/test_kernels_cuda.log" -- \
  "$TESTS/test_kernels_cuda" --gtest_output="xml:$R/test_kernels_cuda.xml"
if [ "$DRY_RUN" = 0 ]; then
  # With a device nothing may skip: a skip here means the device was not seen.
  skipped=$(grep -c '^\[  SKIPPED \] [A-Za-z]' "$R/test_kernels_cuda.log")
  [ "$skipped" = 0 ] || { STEP_RESULT="failed ($skipped skipped)"; }
  record test_kernels_cuda "$STEP_RESULT" "$STEP_SECONDS" \
    "$(grep -E '^\[  (PASSED|FAILED) +\]' "$R/test_kernels_cuda.log" | head -n2 | paste -sd' ')"
fi

run_step test_backends_cuda 180 "$R/test_backends_cuda.log" -- \
  "$TESTS/test_backends_cuda" --gtest_output="xml:$R/test_backends_cuda.xml"
[ "$DRY_RUN" = 1 ] || record test_backends_cuda "$STEP_RESULT" "$STEP_SECONDS" \
  "$(grep -E '^\[  (PASSED|FAILED) +\]' "$R/test_backends_cuda.log" | head -n2 | paste -sd' ')"

for suite in gate full; do
  run_step "$suite" 300 "$R/$suite.log" -- "$DC" run --suite "$suite" --backend cuda \
    --jobs "$JOBS" --progress lines -q --report-dir "$R/$suite"
  if [ "$DRY_RUN" = 0 ]; then
    totals=$(grep -E '^cuda ' "$R/$suite.log" | tr -s ' ')
    # A suite with no pass ran nothing on the device, whatever the exit code says.
    passes=$(awk '{print $2}' <<<"$totals")
    [ "${passes:-0}" -gt 0 ] || STEP_RESULT="failed (no case passed)"
    record "$suite suite" "$STEP_RESULT" "$STEP_SECONDS" \
      "pass/fail/leak/error/unsupported/skipped: ${totals#cuda }"
  fi
done

# The CUDA backward on its own line: the gate's gdr_grad cases again (they ran in the gate too),
# each one supported on the device (K <= 128) and passing, cp=S cases included.
run_step "gate gdr_grad" 120 "$R/gate-gdr_grad.log" -- "$DC" run --suite gate --backend cuda \
  --filter '^gdr_grad' --jobs "$JOBS" --progress lines -q
if [ "$DRY_RUN" = 0 ]; then
  totals=$(grep -E '^cuda ' "$R/gate-gdr_grad.log" | tr -s ' ')
  read -r _ passes _ _ _ unsupported _ <<<"$totals"
  [ "${passes:-0}" -gt 0 ] || STEP_RESULT="failed (no case passed)"
  [ "${unsupported:-1}" = 0 ] || STEP_RESULT="failed (${unsupported:-?} unsupported)"
  record "gate gdr_grad (CUDA backward)" "$STEP_RESULT" "$STEP_SECONDS" \
    "pass/fail/leak/error/unsupported/skipped: ${totals#cuda }"
fi

# ---- 5b. FLA's Triton kernels on the GPU (the peer suite's fla-chunk / fla-fused-recurrent) ----
# The same adapter as on CI's CPU (adapters/python/fla_gdr.py), here with --device cuda (no
# interpreter) and --matmul-precision tf32 (FLA's fp32 tl.dot runs on TF32 tensor cores), every
# family including the long ones, against the findings pinned for a GPU (expect_gpu; "not pinned"
# is reported, not failed). Needs flash-linear-attention, triton and torch in $PEERS_PYTHON
# (python3 by default); skipped with the reason otherwise.

PEERS_PY=${PEERS_PYTHON:-python3}
if [ "$DRY_RUN" = 1 ]; then
  echo "[fla triton] (limit 240s, log $R/fla-triton.log)"
  echo "    $PEERS_PY adapters/python/peers_check.py run --deltacheck $DC --python $PEERS_PY --out $R/peers --peer fla-chunk --peer fla-fused-recurrent --long --jobs $JOBS"
elif ! fla_why=$("$PEERS_PY" -c 'import h5py, torch, triton, fla; assert torch.cuda.is_available(), "torch sees no GPU"' 2>&1); then
  record "fla triton kernels" skipped 0 "$PEERS_PY cannot run them: $(tail -n1 <<<"$fla_why")"
else
  run_step "fla triton" 240 "$R/fla-triton.log" -- env HDF5_USE_FILE_LOCKING=FALSE \
    "$PEERS_PY" adapters/python/peers_check.py run \
    --deltacheck "$DC" --python "$PEERS_PY" --out "$R/peers" --peer fla-chunk \
    --peer fla-fused-recurrent --long --jobs "$JOBS"
  record "fla triton kernels" "$STEP_RESULT" "$STEP_SECONDS" \
    "$(grep -E '^peers: [0-9]+ passed' "$R/fla-triton.log"); $R/peers/findings.md"
fi

# ---- 6. benchmarks -----------------------------------------------------------------------------

run_step bench 240 "$R/bench.txt" -- "$BUILD_DIR/deltacheck_bench" --benchmark_filter='/cuda/' \
  --benchmark_out="$R/bench.json" --benchmark_out_format=json
if [ "$DRY_RUN" = 0 ]; then
  figures=$(grep -c '"name": "gdr_[a-z]*/cuda/' "$R/bench.json" 2>/dev/null)
  [ "${figures:-0}" -ge 4 ] || STEP_RESULT="failed (${figures:-0} of 4 CUDA figures)"
  record bench "$STEP_RESULT" "$STEP_SECONDS" "$R/bench.json"
fi

# ---- 7. compute-sanitizer ---------------------------------------------------------------------

SANITIZER=$(command -v compute-sanitizer || true)
if [ -z "$SANITIZER" ] && [ -n "$NVCC" ] && [ -x "$(dirname "$NVCC")/compute-sanitizer" ]; then
  SANITIZER="$(dirname "$NVCC")/compute-sanitizer"
fi
[ -n "$SANITIZER" ] || [ "$DRY_RUN" = 0 ] || SANITIZER=compute-sanitizer

# sanitize TOOL WHAT: memcheck (with leak checking) or racecheck on the smoke suite ("smoke") or
# on the kernel tests ("test_kernels_cuda"). The probes rerun the same kernels on other layouts
# (the suites above ran them), and the largest kernel test (131200 CTAs) would take minutes under
# racecheck: both are left out here.
sanitize() {
  local tool=$1 what=$2 log extra=(--leak-check full) filter="*"
  if [ "$tool" = racecheck ]; then
    extra=(--racecheck-report all)
    filter="-*PastTheGridLimit*"
  fi
  log="$R/$tool-$what"
  if [ "$what" = smoke ]; then
    run_step "$tool $what" 240 "$log.log" -- "$SANITIZER" --tool "$tool" "${extra[@]}" \
      --error-exitcode 86 --log-file "$log.sanitizer.txt" \
      "$DC" run --suite smoke --backend cuda --jobs 4 --no-probes --progress lines -q
  else
    run_step "$tool $what" 240 "$log.log" -- "$SANITIZER" --tool "$tool" "${extra[@]}" \
      --error-exitcode 86 --log-file "$log.sanitizer.txt" \
      "$TESTS/test_kernels_cuda" --gtest_filter="$filter"
  fi
  [ "$DRY_RUN" = 1 ] || record "$tool $what" "$STEP_RESULT" "$STEP_SECONDS" \
    "$(grep -h 'ERROR SUMMARY' "$log.sanitizer.txt" 2>/dev/null | head -n1)"
}
if [ -n "$SANITIZER" ]; then
  for what in smoke test_kernels_cuda; do
    for tool in memcheck racecheck; do sanitize "$tool" "$what"; done
  done
else
  record compute-sanitizer "not found" 0 "compute-sanitizer is neither on PATH nor next to nvcc"
fi

write_summary
[ "$DRY_RUN" = 1 ] && exit 0
exit "$FAILED"
