#!/usr/bin/env bash
# Sets up and builds attnc, then runs the whole test suite (lit, unit, and the
# GPU tests, which skip with a message where no sm_90 GPU is present), then a
# short fuzzing run of the spec front end (ATTNC_FUZZ_SECONDS, default 120;
# 0 skips it; it builds with clang in build-fuzz).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ATTNC_BUILD_DIR:-$root/build}"
"$root/tools/setup.sh"
(cd "$build" && ctest --output-on-failure -j "$(nproc)")
fuzz_seconds="${ATTNC_FUZZ_SECONDS:-120}"
if [ "$fuzz_seconds" -gt 0 ]; then
  "$root/tools/fuzz.sh" "$fuzz_seconds"
fi
