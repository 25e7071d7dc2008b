#!/usr/bin/env bash
# The JAX and MLX routes of the Python package (docs/python.md, "JAX and MLX"): python/tests/frameworks
# in the frameworks venv (scripts/frameworks-setup.sh: jax[cpu], mlx[cpu], cached). A GDN forward
# written for the tests in each framework passes the smoke suite forward and, through jax.vjp /
# mx.vjp in-process, backward; its state-not-reset twin is flagged leak. The package is the one
# scripts/python-install.sh installed in .venv (the same python3), linked into
# $BUILD_DIR/python-site-frameworks and put on PYTHONPATH; the cached venv is left as pinned.
# A framework that cannot be installed (no PyPI, no wheel) is skipped with a banner.
#   scripts/frameworks-check.sh          (BUILD_DIR=build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
start=$(date +%s)
[ -x .venv/bin/python ] || { echo "frameworks-check: error: no .venv (run scripts/setup.sh)" >&2; exit 2; }
BUILD_DIR="$BUILD_DIR" scripts/python-install.sh
venv="$(scripts/frameworks-setup.sh | tail -n 1)"
status="$venv/.deltacheck-frameworks-status"
found=0
for g in jax mlx; do
  if [ "$(awk -F'\t' -v g="$g" '$1 == g { print $2 }' "$status" 2>/dev/null)" = ok ]; then
    found=$((found + 1))
  else  # its tests skip themselves (pytest.importorskip)
    echo "frameworks-check: SKIPPED the $g tests: $g is not installable here (see the banner)"
  fi
done
if [ "$found" -eq 0 ]; then
  echo "frameworks-check: SKIPPED: neither jax nor mlx is installable here"
  exit 0
fi
site="$PWD/$BUILD_DIR/python-site-frameworks"
package="$(.venv/bin/python -c 'import deltacheck, os; print(os.path.dirname(deltacheck.__file__))')"
mkdir -p "$site" && ln -sfn "$package" "$site/deltacheck"
PYTHONPATH="$site" "$venv/bin/python" -c "import deltacheck" ||
  { echo "frameworks-check: error: .venv's deltacheck does not import in $venv (another Python?)" >&2; exit 1; }
OMP_NUM_THREADS=1 PYTHONPATH="$site" "$venv/bin/python" -m pytest python/tests/frameworks \
  -q -p no:cacheprovider
echo "frameworks-check: OK in $(($(date +%s) - start)) s"
