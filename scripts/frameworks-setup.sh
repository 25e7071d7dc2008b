#!/usr/bin/env bash
# Creates (or reuses) the virtual environment the JAX and MLX routes of the Python package are
# tested in (python/tests/frameworks, docs/python.md "JAX and MLX"): the pinned versions of
# python/tests/frameworks/requirements.txt from PyPI, CPU builds. Separate from the peers venv
# (scripts/peers-setup.sh), which it never touches.
#   scripts/frameworks-setup.sh [VENV_DIR]
# prints the venv's path as the last line of stdout (everything else goes to stderr) and writes
# VENV_DIR/.deltacheck-frameworks-status: one line per group, "group<TAB>ok|failed<TAB>detail".
#
# Default VENV_DIR: ${XDG_CACHE_HOME:-$HOME/.cache}/deltacheck/frameworks-venv, reused while the
# pins, this script's layout version and the Python version are unchanged (a hash of them is the
# key); recreated otherwise. Without a writable cache: a folder in ${TMPDIR:-/tmp}.
#
# Two groups, jax (jax[cpu]) and mlx (mlx[cpu]), each with numpy and pytest. A group that cannot
# be installed (no network, no wheel for this platform) is recorded as failed with pip's reason, a
# banner says so, and the script still exits 0: scripts/python-check.sh then skips that
# framework's tests with a banner. A failed group is retried on the next run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
REQ=python/tests/frameworks/requirements.txt
LAYOUT=1  # bump when the groups below change
log() { echo "frameworks-setup: $*" >&2; }
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
  [jax]="jax[cpu] numpy pytest"
  [mlx]="mlx[cpu] numpy pytest"
)
ORDER=(jax mlx)

python="${PYTHON:-python3}"
key="$( (cat "$REQ"; echo "layout $LAYOUT"; "$python" -c 'import sys; print(sys.version)') |
  sha256sum | cut -c1-16)"
cached=yes
if [ $# -ge 1 ]; then
  venv="$1"
else
  cache="${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/deltacheck"
  if mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ]; then
    venv="$cache/frameworks-venv"
  else
    venv="${TMPDIR:-/tmp}/deltacheck-frameworks-venv-$key"
    cached=no
    log "no writable cache folder ($cache): a throwaway venv in $venv"
  fi
fi
status="$venv/.deltacheck-frameworks-status"

state_of() { awk -F'\t' -v g="$1" '$1 == g { print $2 }' "$status" 2>/dev/null; }

if [ "$(state_of key)" != "$key" ] || [ ! -x "$venv/bin/python" ]; then
  [ -e "$venv" ] && log "pins, layout or Python changed: recreating $venv"
  rm -rf "$venv"
  if ! "$python" -m venv "$venv" >&2; then
    banner "JAX AND MLX SKIPPED: cannot create a virtual environment with $python -m venv" \
      "(Debian: apt-get install python3-venv)"
    mkdir -p "$venv"
    printf 'key\t%s\ncached\t%s\n' "$key" "$cached" >"$status"
    for g in "${ORDER[@]}"; do printf '%s\tfailed\tpython3 -m venv failed\n' "$g" >>"$status"; done
    echo "$venv"
    exit 0
  fi
  printf 'key\t%s\ncached\t%s\n' "$key" "$cached" >"$status"
fi

todo=()
for g in "${ORDER[@]}"; do [ "$(state_of "$g")" = ok ] || todo+=("$g"); done
if [ ${#todo[@]} -eq 0 ]; then
  log "reusing $venv"
  echo "$venv"
  exit 0
fi

start=$(date +%s)
for g in "${todo[@]}"; do
  log "installing $g: ${PKG_GROUPS[$g]} (pinned by $REQ)"
  out="$(mktemp)"
  t0=$(date +%s)
  # shellcheck disable=SC2086
  if "$venv/bin/pip" install --no-cache-dir --disable-pip-version-check --progress-bar off \
    -c "$REQ" ${PKG_GROUPS[$g]} >"$out" 2>&1; then
    want=" ${PKG_GROUPS[$g]//\[cpu\]/} "
    versions="$("$venv/bin/pip" list --disable-pip-version-check 2>/dev/null |
      awk -v want="$want" 'index(want, " " $1 " ") { printf "%s %s, ", $1, $2 }')"
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
  sed -i "/^$g\t/d" "$status"
  printf '%s\tfailed\t%s\n' "$g" "$detail" >>"$status"
  banner "${g^^} SKIPPED: the '$g' packages (${PKG_GROUPS[$g]}) could not be installed" \
    "  $detail" \
    "  the $g route's tests are skipped; nothing else depends on them"
done
log "venv $venv ready in $(($(date +%s) - start)) s, $(du -sh "$venv" 2>/dev/null | cut -f1)"
echo "$venv"
