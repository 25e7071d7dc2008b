#!/usr/bin/env bash
# The Python package's tests (python/, docs/python.md):
# 1. without torch, in the project's venv (.venv, made by scripts/setup.sh): dc.check, the
#    conventions and the pytest plugin on NumPy kernels (python/tests);
# 2. with torch, in the peers venv (scripts/peers-setup.sh, cached): a user's 10-line test file
#    checking a torch kernel written for the test against the gate suite's gdr cases under
#    pytest, correct and state-not-reset (python/tests/torch), and the gradients of a torch
#    forward on the gdr_grad cases, correct and wrong (test_torch_grad.py); dc.check_packing on tiny
#    Transformers models, its CLI, pytest option and the README's example (test_packing.py). The cached venv is left as pinned:
#    the package (built for its Python) and pytest go to build/python-site*, on PYTHONPATH.
#    Skipped with a banner when torch cannot be installed (as the peer suite is).
#   scripts/python-check.sh          (BUILD_DIR=build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
start=$(date +%s)
venv=.venv
[ -x "$venv/bin/python" ] || { echo "python-check: error: no $venv (run scripts/setup.sh)" >&2; exit 2; }
# The install the package builds against, refreshed from the build (a library rebuilt since
# scripts/setup.sh would otherwise meet the package built against the old one).
BUILD_DIR="$BUILD_DIR" scripts/python-install.sh

echo "--- the package without torch ($venv)"
"$venv/bin/python" -c "import deltacheck, sys; sys.exit('torch' in sys.modules)" ||
  { echo "python-check: error: importing deltacheck imported torch" >&2; exit 1; }
"$venv/bin/python" -m pytest python/tests --ignore=python/tests/torch -q -p no:cacheprovider -n 2

echo "--- the torch route in the peers venv"
peers="$(scripts/peers-setup.sh | tail -n 1)"
if ! "$peers/bin/python" -c "import torch" 2>/dev/null; then
  echo "python-check: SKIPPED the torch tests: torch is not installable here (see the peers banner)"
  exit 0
fi
site="$PWD/$BUILD_DIR/python-site"
tools="$PWD/$BUILD_DIR/python-site-pytest"
CMAKE_PREFIX_PATH="$PWD/$BUILD_DIR/install" "$peers/bin/python" -m pip install -q --upgrade \
  --no-deps --target "$site" ./python
[ -d "$tools/pytest" ] || "$peers/bin/python" -m pip install -q --target "$tools" pytest
OMP_NUM_THREADS=1 PYTHONPATH="$site:$tools:$PWD/python/tests/torch" \
  "$peers/bin/python" -m pytest python/tests/torch/test_torch_route.py \
  python/tests/torch/test_torch_grad.py python/tests/torch/test_torch_hostile.py \
  python/tests/torch/test_packing.py -q -p no:cacheprovider
echo "python-check: OK in $(($(date +%s) - start)) s"
