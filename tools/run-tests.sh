#!/usr/bin/env bash
# Sets up and builds attnc, then runs the whole test suite (lit, unit, and the
# GPU tests, which skip with a message where no sm_90 GPU is present).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ATTNC_BUILD_DIR:-$root/build}"
"$root/tools/setup.sh"
cd "$build"
ctest --output-on-failure -j "$(nproc)"
