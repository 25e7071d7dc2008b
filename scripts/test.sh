#!/usr/bin/env bash
# Runs deltacheck's tests: the GoogleTest suites through ctest (which include the gate suite on the
# CPU backend and the verdicts of every deliberately wrong backend).
#   scripts/test.sh            all tests
#   scripts/test.sh -L harness         only a ctest label (ctest --test-dir build --print-labels)
#   scripts/test.sh -LE panel          all but the false-positive panel (the slowest label)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
