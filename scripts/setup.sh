#!/usr/bin/env bash
# Sets up everything deltacheck needs on a fresh Debian 12 machine, then builds it into build/.
#   scripts/setup.sh              install dependencies (apt) and build
#   BUILD_DIR=out scripts/setup.sh
# Dependencies come from Debian's packages only. apt runs only when something is missing, so a
# repeat run costs seconds; ccache (when present) speeds repeat builds but nothing depends on it.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev libopenblas0-pthread     # LibTorch 1.13 (CPU); OpenBLAS, or torch uses a 25x slower BLAS
  libhdf5-dev libfmt-dev nlohmann-json3-dev libcli11-dev
  libre2-dev                            # --filter: linear-time regexes (cases/id_filter.h)
  libsodium-dev                         # --cache-dir: entries encrypted and authenticated (harness/expectation_cache.h)
  libgtest-dev libgmock-dev libbenchmark-dev
  python3
  python3-venv                          # adapters/python/check.sh: the example adapter's venv
  libxml2-utils                         # tests/reports: xmllint validates junit.xml against its schema
  chromium                              # tests/reports: report.html rendered headless
  clang libclang-rt-dev                 # scripts/fuzz.sh: libFuzzer targets (fuzz/)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deltacheck setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

BUILD_DIR="${BUILD_DIR:-build}"
# ccache keys on paths relative to the checkout, so a fresh clone elsewhere (CI) still hits.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${DELTACHECK_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
echo "deltacheck setup: built $BUILD_DIR/deltacheck"

# The Python package in .venv (scripts/python-install.sh).
BUILD_DIR="$BUILD_DIR" scripts/python-install.sh
echo "deltacheck setup: the Python package in .venv (.venv/bin/python -c 'import deltacheck')"
