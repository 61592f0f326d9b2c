#!/usr/bin/env bash
# Sets up and builds attnc, then runs the whole test suite (lit, unit, and the
# GPU tests, which skip with a message where no sm_90 GPU is present); then
# the Python package's tests (pip-installed into build-python-venv); then
# the same suite built with AddressSanitizer and UndefinedBehaviorSanitizer in
# build-sanitize (ATTNC_SANITIZE=0 skips it; it leaves out
# unit.tune_candidates, whose time goes to NVRTC and ptxas, which are not
# instrumented); then short fuzzing runs of the spec front end and of the
# builder API (ATTNC_FUZZ_SECONDS each, default 120; 0 skips them; they build
# with clang in build-fuzz).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ATTNC_BUILD_DIR:-$root/build}"
"$root/tools/setup.sh"
(cd "$build" && ctest --output-on-failure -j "$(nproc)")

# The Python package (ATTNC_PYTHON=0 skips it): built by pip from ./python
# (its own CMake build directory, which scikit-build-core configures for the
# wheel), installed into a virtual environment with torch from PyPI, then
# its tests (the GPU ones skip without an sm_90 GPU).
if [ "${ATTNC_PYTHON:-1}" != 0 ]; then
  venv="${ATTNC_PYTHON_VENV:-$root/build-python-venv}"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    "torch==${ATTNC_TORCH_VERSION:-2.11.0}" pytest numpy scikit-build-core
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall \
    --no-deps --no-build-isolation \
    --config-settings=build-dir="${ATTNC_PYTHON_BUILD_DIR:-$root/build-python}" "$root/python"
  (cd "$build" && "$venv/bin/python" -m pytest -q -rs "$root/python/tests")
fi

if [ "${ATTNC_SANITIZE:-1}" != 0 ]; then
  sanitize_build="${ATTNC_SANITIZE_BUILD_DIR:-$root/build-sanitize}"
  # -O1: instrumented code compiles about twice as fast as at -O3.
  cmake -G Ninja -S "$root" -B "$sanitize_build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DATTNC_SANITIZE=ON > /dev/null
  cmake --build "$sanitize_build" -j "$(nproc)"
  # Any report fails the test it happens in. allow_user_poisoning=0: the
  # LLVM headers' allocator poisons memory in our instrumented code that the
  # uninstrumented LLVM libraries then use, which ASan would report.
  (cd "$sanitize_build" &&
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allow_user_poisoning=0 \
    UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --output-on-failure -j "$(nproc)" -E '^unit\.tune_candidates$')
fi

fuzz_seconds="${ATTNC_FUZZ_SECONDS:-120}"
if [ "$fuzz_seconds" -gt 0 ]; then
  "$root/tools/fuzz.sh" "$fuzz_seconds"
  "$root/tools/fuzz.sh" "$fuzz_seconds" "$(nproc)" builder
fi
