#!/usr/bin/env bash
# The transformers-model checks (transformers_model.py: a tiny Qwen3.5 / Qwen3-Next packed by
# DataCollatorWithFlattening, generate() with a static cache) on Transformers versions other than
# the pinned one, for docs/peers.md's version table (CI runs only the pinned version):
#   adapters/python/transformers_versions.sh 4.57.6 5.5.0       (any transformers_model.py options
#   adapters/python/transformers_versions.sh 5.5.0 -- --arch qwen3_5    after --)
# Each version goes to ~/.cache/deltacheck/transformers-VERSION (pip --target, with its own
# dependencies but not torch) and is put ahead of the peers venv on PYTHONPATH; the peers venv
# (scripts/peers-setup.sh) is not changed.
set -euo pipefail
cd "$(dirname "$0")/../.."
versions=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do versions+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#versions[@]} -gt 0 ] || { echo "transformers_versions: error: name a version, e.g. 4.57.6" >&2; exit 2; }
venv="$(scripts/peers-setup.sh | tail -n 1)"
for v in "${versions[@]}"; do
  [[ "$v" =~ ^[0-9]+(\.[0-9]+)*$ ]] || { echo "transformers_versions: error: '$v' is not a version" >&2; exit 2; }
  target="$HOME/.cache/deltacheck/transformers-$v"
  if [ ! -f "$target/.complete" ]; then
    rm -rf "$target"
    # pip's complaints about the peers venv's own pins (vllm's) are not this install's: kept in
    # the log, shown only when the install failed
    "$venv/bin/python" -m pip install -q --target "$target" "transformers==$v" \
      > "$target.pip.log" 2>&1 || { cat "$target.pip.log" >&2; exit 1; }
    rm -rf "$target"/torch "$target"/torch-* "$target"/nvidia* "$target"/triton*
    [ -d "$target/transformers" ] || { echo "transformers_versions: error: transformers==$v did not install" >&2; exit 1; }
    touch "$target/.complete"
  fi
  echo "=== transformers $v"
  OMP_NUM_THREADS=1 PYTHONPATH="$target" "$venv/bin/python" adapters/python/transformers_model.py "$@"
done
