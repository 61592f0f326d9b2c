#!/usr/bin/env bash
# Fuzzes the spec front end or the builder API: builds the libFuzzer target
# with clang in build-fuzz (AddressSanitizer and UndefinedBehaviorSanitizer
# on the project's code) and runs it.
#   spec (default): bytes as spec text, seeded with every shipped example and
#     every lit test case (split at '// -----'), with a token dictionary.
#   builder: bytes as the choices of random well-typed specs built with
#     SpecBuilder (tools/attn-fuzz/RandomSpec.h), from an empty corpus.
#
# Usage: tools/fuzz.sh [SECONDS (default 120)] [WORKERS (default nproc)] [spec|builder]
# Findings (crash-*, timeout-*, oom-*) land in build-fuzz/findings; a fixed
# one is kept as a regression input in tests/fuzz/regressions, which the
# test suite replays (fuzz.replay), or for the builder target in
# tests/fuzz/builder-regressions (fuzz.builder_replay).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-120}"
workers="${2:-$(nproc)}"
target="${3:-spec}"
build="${ATTNC_FUZZ_BUILD_DIR:-$root/build-fuzz}"

ATTNC_EXTRA_PACKAGES="clang-22 libclang-rt-22-dev" "$root/tools/setup.sh" --deps-only
cmake -G Ninja -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang-22 \
  -DCMAKE_CXX_COMPILER=clang++-22 -DATTNC_FUZZ=ON -DATTNC_BUILD_TESTS=OFF > /dev/null
ninja -C "$build" "attn-fuzz-$target"
mkdir -p "$build/findings"
# allow_user_poisoning=0, as for build-sanitize (tools/run-tests.sh): the
# LLVM headers' allocator, instantiated in our instrumented code, poisons
# memory that the uninstrumented LLVM libraries then use (every input
# failed in MLIRContext's constructor once attn-lower-mods ran MLIR's
# data-flow solver).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allow_user_poisoning=0"

# -timeout: a spec that takes over 10 s to compile is a hang. The log of
# each worker goes to fuzz-N.log in the current directory.
if [ "$target" = builder ]; then
  mkdir -p "$build/builder-corpus"
  cd "$build"
  exec "$build/bin/attn-fuzz-builder" "$build/builder-corpus" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=512 \
    -artifact_prefix="$build/findings/builder-" -workers="$workers" -jobs="$workers" \
    -print_final_stats=1
fi

corpus="$build/corpus"
mkdir -p "$corpus"
for spec in "$root"/docs/examples/*.mlir; do
  cp "$spec" "$corpus/example-$(basename "$spec")"
done
for test in "$root"/tests/lit/*/*.mlir; do
  awk -v out="$corpus/lit-$(basename "$(dirname "$test")")-$(basename "$test" .mlir)" \
    '/^\/\/ -----/ { n++; next } { print > (out "-" n ".mlir") }' n=0 "$test"
done

cd "$build"
"$build/bin/attn-fuzz-spec" "$corpus" -dict="$root/tests/fuzz/attn.dict" \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=4096 \
  -artifact_prefix="$build/findings/" -workers="$workers" -jobs="$workers" \
  -print_final_stats=1
