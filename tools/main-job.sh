#!/usr/bin/env bash
# The main job: set up and build, compile the example spec to PTX, and where
# an sm_90 GPU is present run it against the CPU reference and time it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ATTNC_BUILD_DIR:-$root/build}"
spec="${1:-$root/docs/examples/causal_hd128.mlir}"
"$root/tools/setup.sh"
"$build/bin/attnc" "$spec" -o "$build/example.ptx"
echo "main-job: compiled $spec to $build/example.ptx ($(grep -c 'wgmma.mma_async' "$build/example.ptx") wgmma instructions)"
"$build/bin/attn-bench" "$spec" --batch=2 --seqlen=8192 --check
