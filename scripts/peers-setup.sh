#!/usr/bin/env bash
# Creates (or reuses) the virtual environment the peer suite runs in: the pinned versions of
# adapters/python/peers-requirements.txt from PyPI (torch, numpy, h5py; transformers;
# flash-linear-attention; vllm), for adapters/python/transformers_*.py, fla_gdr.py and vllm_gdr.py.
#   scripts/peers-setup.sh [VENV_DIR]
#   PEERS_REQUIREMENTS=my-pins.txt scripts/peers-setup.sh /tmp/v   (other versions; the pinned
#                                   findings are for the committed pins only)
# prints the venv's path as the last line of stdout (everything else goes to stderr) and writes
# VENV_DIR/.deltacheck-peers-status: one line per package group, "group<TAB>ok|failed<TAB>detail".
#
# Default VENV_DIR: ${XDG_CACHE_HOME:-$HOME/.cache}/deltacheck/peers-venv, reused while the
# requirements, this script's layout version and the Python version are unchanged (a hash of them
# is the key); recreated otherwise. Without a writable cache: a folder in ${TMPDIR:-/tmp}, which
# scripts/peers-check.sh removes when done (status line "cached<TAB>no").
#
# Packages are installed in four groups (base, transformers, fla, vllm). A group that cannot be
# installed (no network, no wheel for this platform, ...) is recorded as failed with pip's
# reason, a banner says so, and the script still exits 0: the peers needing it are skipped by
# peers-check.sh, and the core gate does not depend on any of this. A failed group is retried on
# the next run.
#
# Cost (measured on the 2-core CI machine, cold cache, PyPI): 3.05 GB downloaded (torch 2.15.0
# pulls 2.5 GB of CUDA libraries as nvidia-* wheels: PyPI has no CPU-only Linux torch), 5.6 GB
# installed, 2-5 min depending on load. Warm cache: under a second. The vllm group adds one
# 336 MB wheel (0.9 GB installed) and three small packages (psutil, pyzmq, urllib3): it is installed with --no-deps, since
# vLLM's own requirements would replace the pinned torch (vllm 0.33.0 wants torch==2.14.0) and
# transformers (<5.21) and pull ~80 serving packages its gated-delta kernels do not import.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
REQ="${PEERS_REQUIREMENTS:-adapters/python/peers-requirements.txt}"  # override: try other pins
LAYOUT=3  # bump when the groups below change
log() { echo "peers-setup: $*" >&2; }
banner() {
  local bar
  bar="$(printf '#%.0s' {1..100})"
  {
    echo "$bar"
    for line in "$@"; do echo "## $line"; done
    echo "$bar"
  } >&2
}

declare -A PKG_GROUPS=(
  [base]="torch numpy h5py"
  [transformers]="transformers"
  [fla]="flash-linear-attention fla-core einops triton"
  # vLLM's vendored FLA kernels (vllm/third_party/flash_linear_attention/ops) and the modules they
  # import (vllm.platforms, vllm.triton_utils, vllm.model_executor, vllm.distributed): found by
  # importing them on a CPU-only machine until nothing was missing. The rest of vllm's
  # requirements are not needed for that, and some conflict with the pins (see --no-deps below).
  [vllm]="vllm psutil pyzmq urllib3 regex tqdm packaging einops"
)
# Extra pip options per group.
declare -A PKG_FLAGS=(
  [vllm]="--no-deps"
)
ORDER=(base transformers fla vllm)

python="${PYTHON:-python3}"
key="$( (cat "$REQ"; echo "layout $LAYOUT"; "$python" -c 'import sys; print(sys.version)') |
  sha256sum | cut -c1-16)"
cached=yes
if [ $# -ge 1 ]; then
  venv="$1"
else
  cache="${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/deltacheck"
  if mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ]; then
    venv="$cache/peers-venv"
  else
    venv="${TMPDIR:-/tmp}/deltacheck-peers-venv-$key"
    cached=no
    log "no writable cache folder ($cache): a throwaway venv in $venv"
  fi
fi
status="$venv/.deltacheck-peers-status"

state_of() { awk -F'\t' -v g="$1" '$1 == g { print $2 }' "$status" 2>/dev/null; }

if [ "$(state_of key)" != "$key" ] || [ ! -x "$venv/bin/python" ]; then
  [ -e "$venv" ] && log "pins, layout or Python changed: recreating $venv"
  rm -rf "$venv"
  if ! "$python" -m venv "$venv" >&2; then
    banner "PEERS SKIPPED: cannot create a virtual environment with $python -m venv" \
      "(Debian: apt-get install python3-venv); every peer's cases are skipped"
    mkdir -p "$venv"
    printf 'key\t%s\ncached\t%s\nbase\tfailed\tpython3 -m venv failed\n' "$key" "$cached" >"$status"
    echo "$venv"
    exit 0
  fi
  printf 'key\t%s\ncached\t%s\n' "$key" "$cached" >"$status"
fi

todo=()
for g in "${ORDER[@]}"; do [ "$(state_of "$g")" = ok ] || todo+=("$g"); done
if [ ${#todo[@]} -eq 0 ]; then
  log "reusing $venv ($(grep -v '^#' "$REQ" | grep . | tr '\n' ' '))"
  echo "$venv"
  exit 0
fi

start=$(date +%s)
for g in "${todo[@]}"; do
  if [ "$g" != base ] && [ "$(state_of base)" != ok ]; then
    detail="not attempted: the base group (torch numpy h5py) is not installed"
  else
    log "installing $g: ${PKG_GROUPS[$g]} (pinned by $REQ)"
    out="$(mktemp)"
    t0=$(date +%s)
    # shellcheck disable=SC2086
    if "$venv/bin/pip" install --no-cache-dir --disable-pip-version-check --progress-bar off \
      -c "$REQ" ${PKG_FLAGS[$g]:-} ${PKG_GROUPS[$g]} >"$out" 2>&1; then
      versions="$("$venv/bin/pip" list --disable-pip-version-check 2>/dev/null |
        awk -v want=" ${PKG_GROUPS[$g]} " 'index(want, " " $1 " ") { printf "%s %s, ", $1, $2 }')"
      detail="${versions%, } ($(($(date +%s) - t0)) s)"
      rm -f "$out"
      sed -i "/^$g\t/d" "$status"
      printf '%s\tok\t%s\n' "$g" "$detail" >>"$status"
      log "$g: $detail"
      continue
    fi
    detail="pip install failed: $(grep -E '^(ERROR|error):' "$out" | head -n 1 | cut -c1-240)"
    [ "$detail" = "pip install failed: " ] && detail="pip install failed: $(tail -n 1 "$out")"
    rm -f "$out"
  fi
  sed -i "/^$g\t/d" "$status"
  printf '%s\tfailed\t%s\n' "$g" "$detail" >>"$status"
  banner "PEERS SKIPPED: the '$g' packages (${PKG_GROUPS[$g]}) could not be installed" \
    "  $detail" \
    "  the peers that need them are skipped; the core gate does not depend on them"
done
log "venv $venv ready in $(($(date +%s) - start)) s, $(du -sh "$venv" 2>/dev/null | cut -f1)"
echo "$venv"
