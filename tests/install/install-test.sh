#!/usr/bin/env bash
# install.find_package: installs a build into a fresh prefix, builds the
# out-of-tree project in consumer/ against it with find_package(attnc) (MLIR's
# and LLVM's CMake packages hidden from it) and runs its two programs.
# Usage: install-test.sh BUILD_DIR WORK_DIR CMAKE CXX
set -euo pipefail
build=$1 work=$2 cmake=$3 cxx=$4
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
spec="$here/../../docs/examples/causal_hd128.mlir"
prefix="$work/prefix"

fail() { echo "install-test: $*" >&2; exit 1; }
# Runs a step quietly, showing its log when it fails.
quiet() {
  local log="$work/$1.log"; shift
  "$@" > "$log" 2>&1 || { cat "$log"; fail "failed: $*"; }
}

rm -rf "$work"
mkdir -p "$work/home"
# No user kernel cache or tuning database is read or written.
export HOME="$work/home"
unset ATTNC_CACHE_DIR ATTNC_CACHE_MAX_BYTES ATTNC_TUNING_DB XDG_CACHE_HOME

echo "== cmake --install into $prefix"
quiet install "$cmake" --install "$build" --prefix "$prefix"
for file in bin/attnc bin/attn-opt bin/attn-tune bin/attn-bench \
            include/attnc/attn/Compiler/Jit.h include/attnc/attn/runtime/Kernel.h \
            include/attnc/attn_params.h share/attnc/templates/attn_fwd_sm90.cuh; do
  [ -e "$prefix/$file" ] || fail "not installed: $file"
done
for file in libattn_runtime.a libattnc_compiler.a cmake/attnc/attnc-config.cmake \
            cmake/attnc/attnc-config-version.cmake; do
  compgen -G "$prefix/lib*/$file" > /dev/null || fail "not installed: lib*/$file"
done
# The consumer has no MLIR or LLVM headers: no installed header may need them.
if grep -rlE '#include *[<"](mlir|llvm)/' "$prefix/include"; then
  fail "the installed headers above include MLIR or LLVM headers"
fi

echo "== the installed attnc: PTX and launch metadata of $(basename "$spec")"
"$prefix/bin/attnc" "$spec" -o "$work/kernel.ptx"
"$prefix/bin/attnc" "$spec" --emit=metadata -o "$work/kernel.meta"

echo "== configure and build consumer/"
quiet configure "$cmake" -G Ninja -S "$here/consumer" -B "$work/consumer" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  -DCMAKE_DISABLE_FIND_PACKAGE_MLIR=ON -DCMAKE_DISABLE_FIND_PACKAGE_LLVM=ON
found=$(sed -n 's/^attnc_DIR:PATH=//p' "$work/consumer/CMakeCache.txt")
case "$found" in
  "$prefix"/*) ;;
  *) fail "find_package(attnc) found '$found', not the package in $prefix" ;;
esac
quiet build "$cmake" --build "$work/consumer"
# attnc::runtime alone must not drag the compiler in.
if nm -C "$work/consumer/run_precompiled" | grep -E ' mlir::|attn::Compiler::' > /dev/null; then
  fail "run_precompiled (attnc::runtime only) contains MLIR or compiler code"
fi

echo "== run_precompiled (attnc::runtime)"
output=$("$work/consumer/run_precompiled" "$work/kernel.ptx" "$work/kernel.meta")
echo "$output"
grep -q '^kernel: head_dim 128, q_heads 16, kv_heads 4, ' <<< "$output" || fail "wrong launch config"
grep -q '^arguments: accepted$' <<< "$output" || fail "valid arguments rejected"
grep -q '^arguments with a wrong k: rejected (k: ' <<< "$output" || fail "wrong k not rejected"

echo "== jit_compile (attnc::compiler)"
output=$("$work/consumer/jit_compile" "$spec")
echo "$output"
grep -q '^causal_hd128: [0-9]* bytes of PTX with wgmma.mma_async, 1 NVRTC compile' \
  <<< "$output" || fail "the JIT's PTX lacks wgmma.mma_async"
echo "install-test: ok"
