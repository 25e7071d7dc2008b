#!/usr/bin/env bash
# The Python package (python/, docs/python.md) in the project's venv .venv, without torch: built
# against an install of the build ($BUILD_DIR/install) by pip (nanobind, scikit-build-core and
# pytest from PyPI). The install is refreshed every time (it copies only what changed), the
# package reinstalled only when its sources or the library changed. Called by scripts/setup.sh and
# scripts/python-check.sh, so a rebuilt library never meets an old install.
#   scripts/python-install.sh        (BUILD_DIR=build, already built)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
[ -f "$BUILD_DIR/build.ninja" ] ||
  { echo "python-install: error: no build in $BUILD_DIR (run scripts/setup.sh)" >&2; exit 2; }
cmake --install "$BUILD_DIR" --prefix "$BUILD_DIR/install" >/dev/null
[ -x .venv/bin/python ] || python3 -m venv .venv
stamp="$(cat python/pyproject.toml python/CMakeLists.txt python/src/_deltacheck.cc \
  python/src/deltacheck/*.py "$BUILD_DIR/install/lib/libdeltacheck.a" | sha256sum | cut -c1-16)"
if [ "$(cat .venv/.deltacheck-stamp 2>/dev/null)" != "$stamp" ]; then
  CMAKE_PREFIX_PATH="$PWD/$BUILD_DIR/install" .venv/bin/pip install -q pytest pytest-xdist ./python
  echo "$stamp" > .venv/.deltacheck-stamp
fi
