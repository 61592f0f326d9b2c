#!/usr/bin/env bash
# Installs what the build needs (Debian 12 packages; the CUDA toolkit is
# expected at /usr/local/cuda) and configures and builds attnc in ./build.
# Usage: tools/setup.sh [--deps-only | extra cmake args]
#   --deps-only installs the packages and stops; ATTNC_EXTRA_PACKAGES names
#   more packages to install (tools/fuzz.sh adds clang's).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
packages=(llvm-22-dev libmlir-22-dev mlir-22-tools libfmt-dev catch2 cmake ninja-build
          libzstd-dev libxml2-dev libxxhash-dev g++ python3 ${ATTNC_EXTRA_PACKAGES:-})
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${missing[@]}"
fi
if [ ! -x /usr/local/cuda/bin/ptxas ] || [ ! -f /usr/local/cuda/include/nvrtc.h ]; then
  echo "setup: the CUDA toolkit (13.x) must be installed at /usr/local/cuda" >&2
  exit 1
fi
[ "${1:-}" = "--deps-only" ] && exit 0
build="${ATTNC_BUILD_DIR:-$root/build}"
cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
