#!/usr/bin/env bash
# Checks deltacheck as another project consumes it: installs the build into a temporary prefix,
# checks the CMake package (version rules, components), then configures, builds and runs the
# out-of-tree example (examples/out_of_tree/) against the install. Its ctest must pass: the
# correct toy kernel passes every case, the leaky one gets verdict leak where it must.
#   scripts/example-check.sh            against build/ (BUILD_DIR=... for another build)
#   scripts/example-check.sh --subdir   also build the example with add_subdirectory(deltacheck)
#                                       (a second, torch-free build of deltacheck: minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
BUILD_DIR="${BUILD_DIR:-build}"
subdir=0
[[ "${1:-}" == "--subdir" ]] && subdir=1
start=$(date +%s%N)
elapsed() {
  local tenths=$((($(date +%s%N) - start) / 100000000))
  echo "$((tenths / 10)).$((tenths % 10))"
}
die() { echo "example-check: error: $*" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

echo "--- install $BUILD_DIR into a temporary prefix"
cmake --build "$BUILD_DIR" --target deltacheck_package
cmake --install "$BUILD_DIR" --prefix "$prefix" > "$tmp/install.log"
version=$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")$/\1/p' \
  "$prefix/lib/cmake/deltacheck/deltacheckConfigVersion.cmake")
[[ -n "$version" ]] || die "no version in the package config"
tool_version=$("$prefix/bin/deltacheck" --version)
[[ "$tool_version" == "deltacheck $version" ]] ||
  die "the tool says '$tool_version', the package config says $version"
echo "installed deltacheck $version: $(grep -c Installing "$tmp/install.log") files in $(elapsed) s"

echo "--- the CMake package: version rules and components"
IFS=. read -r major minor _ <<< "$version"
# Components of this install (deltacheck<Name>Targets.cmake): each must be found, link, and
# register its backend, named like the component ("torch", "cuda").
components=()
for f in "$prefix"/lib/cmake/deltacheck/deltacheck*Targets.cmake; do
  name=$(basename "$f" Targets.cmake)
  name=${name#deltacheck}
  [[ -n "$name" ]] && components+=("${name,}")
done
mkdir -p "$tmp/pkg"
cat > "$tmp/pkg/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.22)
project(package_check LANGUAGES CXX)
function(expect what found)
  if(found)
    set(found 1)
  else()
    set(found 0)
  endif()
  if(NOT "\${found}" STREQUAL "\${ARGN}")
    message(FATAL_ERROR "find_package(deltacheck \${what}): found '\${found}', expected '\${ARGN}'")
  endif()
  message(STATUS "find_package(deltacheck \${what}): \${found}")
endfunction()
find_package(deltacheck $major.$((minor + 1)) QUIET)
expect("$major.$((minor + 1))" "\${deltacheck_FOUND}" 0)
find_package(deltacheck $((major + 1)).0 QUIET)
expect("$((major + 1)).0" "\${deltacheck_FOUND}" 0)
find_package(deltacheck $major.$minor QUIET COMPONENTS no-such-part)
expect("COMPONENTS no-such-part" "\${deltacheck_FOUND}" 0)
find_package(deltacheck $major.$minor REQUIRED)
expect("$major.$minor" "\${deltacheck_FOUND}" 1)
if(NOT TARGET deltacheck::deltacheck OR NOT TARGET deltacheck::tool)
  message(FATAL_ERROR "deltacheck::deltacheck or deltacheck::tool missing")
endif()
foreach(component torch cuda)
  find_package(deltacheck $major.$minor QUIET OPTIONAL_COMPONENTS \${component})
  if(component IN_LIST installed)
    expect("OPTIONAL_COMPONENTS \${component}" "\${deltacheck_\${component}_FOUND}" 1)
    add_executable(\${component}_component component.cc)
    target_compile_definitions(\${component}_component PRIVATE COMPONENT="\${component}"
      COMPONENT_HEADER=<deltacheck/\${component}.h>
      REGISTER_BACKENDS=deltacheck::register_\${component}_backends)
    target_link_libraries(\${component}_component PRIVATE deltacheck::\${component})
  else()
    expect("OPTIONAL_COMPONENTS \${component}" "\${deltacheck_\${component}_FOUND}" 0)
  endif()
endforeach()
EOF
cat > "$tmp/pkg/component.cc" <<'EOF'
// A component links, and its registration makes the backend of its name known.
#include <deltacheck/deltacheck.h>
#include COMPONENT_HEADER

int main() {
  REGISTER_BACKENDS();
  for (const auto& b : deltacheck::list_backends())
    if (b.name == COMPONENT) return 0;
  return 1;
}
EOF
cmake -S "$tmp/pkg" -B "$tmp/pkg/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -Dinstalled="$(IFS=';'; echo "${components[*]:-}")" > "$tmp/pkg.log" || { cat "$tmp/pkg.log"; die "package checks failed"; }
grep 'find_package(deltacheck' "$tmp/pkg.log"
if [[ ${#components[@]} -gt 0 ]]; then
  cmake --build "$tmp/pkg/build" > "$tmp/pkg-build.log" ||
    { cat "$tmp/pkg-build.log"; die "a program linking a component does not build"; }
  for c in "${components[@]}"; do
    "$tmp/pkg/build/${c}_component" || die "component $c did not register backend '$c'"
    echo "deltacheck::$c links and registers the $c backend"
  done
fi

# Builds the example in $1 (extra cmake arguments follow), runs its tests, checks the verdicts.
check_example() {
  local dir=$1
  shift
  cmake -S examples/out_of_tree -B "$dir" -G Ninja "$@" > "$dir.configure.log" ||
    { cat "$dir.configure.log"; die "the example does not configure"; }
  cmake --build "$dir" > "$dir.build.log" ||
    { cat "$dir.build.log"; die "the example does not build"; }
  ctest --test-dir "$dir" -j "$(nproc)" --output-on-failure > "$dir.ctest.log" ||
    { cat "$dir.ctest.log"; die "the example's tests failed"; }
  tail -n 3 "$dir.ctest.log" | sed '/^$/d'
  # Each test's XML records its verdict: the correct kernel passes, the leaky one leaks.
  local xml=$dir/gtest-xml
  local good leaky_leak leaky_pass
  good=$(cat "$xml"/ToyGdr.*.xml | grep -c 'name="verdict" value="pass"' || true)
  leaky_leak=$(cat "$xml"/LeakyToyGdr.*.xml | grep -c 'name="verdict" value="leak"' || true)
  leaky_pass=$(cat "$xml"/LeakyToyGdr.*.xml | grep -c 'name="verdict" value="pass"' || true)
  [[ $good -gt 0 && $leaky_leak -gt 0 ]] || die "expected passes for toy and leaks for toy-leaky"
  echo "toy: $good pass; toy-leaky: $leaky_leak leak, $leaky_pass pass (each as expected)"
}

echo "--- the out-of-tree example against the install (examples/out_of_tree)"
check_example "$tmp/example" -DCMAKE_PREFIX_PATH="$prefix"

if [[ $subdir == 1 ]]; then
  echo "--- the example with add_subdirectory(deltacheck)"
  check_example "$tmp/example-subdir" -DDELTACHECK_SOURCE_DIR="$repo" -DDELTACHECK_TORCH=OFF \
    -DDELTACHECK_CUDA=OFF
fi
echo "example-check: OK in $(elapsed) s"
