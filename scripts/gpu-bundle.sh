#!/usr/bin/env bash
# Prepares what scripts/gpu-check.sh cannot assume on a GPU machine without a package registry:
# the Debian packages of deltacheck's C++ dependencies (fmt, nlohmann-json, CLI11, GoogleTest,
# Google Benchmark, HDF5), fetched with `apt-get download` and unpacked with `dpkg -x` into
# third_party/gpu-prefix/ (ignored by git; copy or carry it to the GPU machine with the tree).
# Also the shared libraries those need beyond the C and C++ runtimes (HDF5 pulls in libcurl and
# its TLS and Kerberos libraries), found with ldd on this machine: gpu-check.sh puts on the
# library path only those its machine lacks. Run it where apt works (Debian 12, as
# scripts/setup.sh sets up), then scripts/gpu-check.sh there.
#
#   scripts/gpu-bundle.sh             download, unpack, prune; prints the prefix's size
#   scripts/gpu-bundle.sh --dry-run   print the steps, change nothing
#
# The prefix is replaced only when complete (built in a temporary folder, then renamed); its
# MANIFEST lists the packages and versions.
set -euo pipefail
cd "$(dirname "$0")/.."

PREFIX=third_party/gpu-prefix
ARCH_DIR=usr/lib/x86_64-linux-gnu
# Direct dependencies: headers, CMake configs and the libraries the build links.
PACKAGES=(libfmt-dev libfmt9 nlohmann-json3-dev libcli11-dev libgtest-dev libbenchmark-dev
          libbenchmark1debian libhdf5-dev libhdf5-103-1 libhdf5-hl-100)
# Libraries every Linux machine with a C++ compiler has; never bundled.
BASE_LIBS='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux-x86-64|libstdc\+\+|libgcc_s|linux-vdso)\.so'

dry_run=0
case "${1:-}" in
  --dry-run) dry_run=1 ;;
  "") ;;
  -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "deltacheck: error: unknown argument '$1' (--dry-run, --help)" >&2; exit 2 ;;
esac

die() { echo "deltacheck: error: $*" >&2; exit 2; }
step() { echo "gpu-bundle: $*"; }

for tool in apt-get dpkg dpkg-deb ldd readelf; do
  command -v "$tool" >/dev/null || die "gpu-bundle.sh needs '$tool' (run it on Debian 12, where apt works)"
done

if [ "$dry_run" = 1 ]; then
  cat <<EOF
gpu-bundle: steps (dry run; nothing is changed)
  1. apt-get download ${PACKAGES[*]}    (into a temporary folder)
  2. dpkg -x each .deb into the temporary prefix
  3. prune: usr/share/{doc,man,lintian}, HDF5's Fortran and C++ libraries, static HDF5 archives
  4. ldd every shared library of the prefix; for each library it needs outside the prefix and
     outside the C/C++ runtimes: dpkg -S <library> -> package; apt-get download; dpkg -x; keep
     only the needed .so files in $ARCH_DIR
  5. write MANIFEST (packages, versions), replace $PREFIX with the new prefix
EOF
  exit 0
fi

mkdir -p "$(dirname "$PREFIX")"
# Next to the prefix, so the final rename stays on one file system (ignored by git as well).
tmp=$(mktemp -d "$PREFIX.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
root="$tmp/prefix"
mkdir -p "$tmp/debs" "$tmp/deps-debs" "$tmp/deps-root" "$root"

step "downloading ${#PACKAGES[@]} packages"
(cd "$tmp/debs" && apt-get download -q "${PACKAGES[@]}") >"$tmp/apt.log" 2>&1 ||
  { cat "$tmp/apt.log" >&2; die "apt-get download failed (try: apt-get update)"; }
for deb in "$tmp"/debs/*.deb; do dpkg -x "$deb" "$root"; done

step "pruning documentation, Fortran/C++ HDF5 and static HDF5 archives"
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/lintian"
find "$root" \( -name '*fortran*' -o -name '*hdf5*_cpp*' -o -name '*hdf5_hl_cpp*' \
  -o -path '*hdf5*.a' -o -name 'libhdf5_serial*.a' \) -prune -exec rm -rf {} +

# Shared libraries the prefix's libraries need from this machine, by soname -> path.
step "resolving the shared libraries HDF5 and the others need"
libdirs="$root/$ARCH_DIR:$root/$ARCH_DIR/hdf5/serial"
declare -A needed=()
while IFS= read -r so; do
  while IFS= read -r line; do
    case "$line" in
      *"not found"*) die "ldd $so: $line (install the package that provides it here, then rerun)" ;;
    esac
    name=$(awk '{print $1}' <<<"$line")
    path=$(awk '$2 == "=>" {print $3}' <<<"$line")
    [ -n "$path" ] || continue
    [[ "$name" =~ $BASE_LIBS ]] && continue
    case "$path" in "$root"/*) continue ;; esac
    needed[$name]=$path
  done < <(LD_LIBRARY_PATH="$libdirs" ldd "$so" 2>/dev/null || true)
done < <(find "$root" -name '*.so*' -type f -exec sh -c 'readelf -h "$1" >/dev/null 2>&1' _ {} \; -print)

# The package that installed a library: dpkg knows files by the path the package ships, which
# on a merged-/usr system may be the /lib or the /usr/lib spelling of what ldd printed.
owner_of() {
  local path=$1 real candidates c
  real=$(readlink -f "$path")
  candidates=("$path" "$real" "${real/#\/usr\/lib\//\/lib\/}" "${path/#\/lib\//\/usr\/lib\/}")
  for c in "${candidates[@]}"; do
    dpkg -S "$c" 2>/dev/null | head -n1 | cut -d: -f1 && return 0
  done
  return 1
}
declare -A dep_packages=()
for name in "${!needed[@]}"; do
  pkg=$(owner_of "${needed[$name]}") || true
  [ -n "$pkg" ] || die "no installed package provides ${needed[$name]} (needed as $name)"
  dep_packages[$pkg]=1
done
if [ "${#dep_packages[@]}" -gt 0 ]; then
  step "downloading ${#dep_packages[@]} runtime library packages: ${!dep_packages[*]}"
  (cd "$tmp/deps-debs" && apt-get download -q "${!dep_packages[@]}") >"$tmp/apt-deps.log" 2>&1 ||
    { cat "$tmp/apt-deps.log" >&2; die "apt-get download of the runtime libraries failed"; }
  for deb in "$tmp"/deps-debs/*.deb; do dpkg -x "$deb" "$tmp/deps-root"; done
  mkdir -p "$root/$ARCH_DIR"
  for name in "${!needed[@]}"; do
    # Under its soname, whatever links the package uses (/lib or /usr/lib, relative or not).
    src=$(find "$tmp/deps-root" -name "$name" \( -type f -o -type l \) | head -n1)
    [ -n "$src" ] || die "$name not found in the downloaded packages"
    cp -L "$src" "$root/$ARCH_DIR/$name"
  done
fi

{
  echo "# deltacheck GPU prefix, made by scripts/gpu-bundle.sh on $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# host: $(grep -m1 '^PRETTY_NAME=' /etc/os-release | cut -d= -f2- | tr -d '"')"
  for deb in "$tmp"/debs/*.deb "$tmp"/deps-debs/*.deb; do
    [ -e "$deb" ] && dpkg-deb -f "$deb" Package Version | paste -sd' '
  done
  echo "# runtime libraries beyond the C/C++ runtimes: ${!needed[*]}"
} >"$root/MANIFEST"

rm -rf "$PREFIX.old"
[ -e "$PREFIX" ] && mv "$PREFIX" "$PREFIX.old"
mv "$root" "$PREFIX"
rm -rf "$PREFIX.old"
size=$(du -sh "$PREFIX" | cut -f1)
step "wrote $PREFIX ($size; $(grep -vc '^#' "$PREFIX/MANIFEST") packages, MANIFEST lists them)"
step "next, on the GPU machine: scripts/gpu-check.sh"
