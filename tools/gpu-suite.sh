#!/usr/bin/env bash
# The whole GPU check in one go, for a machine with an sm_90 GPU: the GPU
# tests, compute-sanitizer over them, the example against the reference, the
# attn-bench grid and the peer script. Every log goes to the output folder.
#
# Usage: tools/gpu-suite.sh BIN_DIR OUT_DIR [full|quick|checks|bench]
#   BIN_DIR holds attnc, attn-bench, attn-compile-bench, jit_host and
#   attn_gpu_tests (built elsewhere: the tools link LLVM statically and need
#   only the CUDA toolkit's libnvrtc).
#   full (default): everything. quick: tests, examples and the grid, without
#   the sanitizer, the peers and the profile. checks: tests, sanitizer,
#   examples, compile latency. bench: the grid, the peers and the profile.
#   (checks and bench split a full run into two shorter ones.)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$1"
out="$2"
mode="${3:-full}"
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > "$out/gpu.txt" 2>&1

step() {
  local name="$1"; shift
  local start=$SECONDS
  "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "gpu-suite: $name rc=$rc ($((SECONDS - start)) s)" | tee -a "$out/summary.txt"
  tail -n 3 "$out/$name.log" | sed 's/^/    /' | tee -a "$out/summary.txt"
}

want() { # want PART: does this mode run PART (checks, sanitizer, bench, peers)?
  case "$mode:$1" in
    full:*|quick:checks|quick:bench|checks:checks|checks:sanitizer|bench:bench|bench:peers) return 0 ;;
    *) return 1 ;;
  esac
}

if want checks; then
  # The runtime's unit tests include driver tests that run only with a GPU.
  [ -x "$bin/attn_unit_runtime" ] && step unit_runtime "$bin/attn_unit_runtime"
  step gpu_tests "$bin/attn_gpu_tests"
  if want sanitizer; then
    step memcheck compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/attn_gpu_tests"
    step synccheck compute-sanitizer --tool synccheck --error-exitcode 9 "$bin/attn_gpu_tests" \
      "an explicit softmax scale is honoured"
    step racecheck compute-sanitizer --tool racecheck --error-exitcode 9 "$bin/attn_gpu_tests" \
      "an explicit softmax scale is honoured"
  fi
  step example "$bin/attn-bench" "$root/docs/examples/causal_hd128.mlir" --batch=2 --seqlen=8192 --check
  step jit_host env ATTNC_CACHE_DIR="$out/jit-cache" "$bin/jit_host"
  step compile_latency "$bin/attn-compile-bench"
fi
if want bench; then
  step bench_grid "$bin/attn-bench" --grid
fi
if want peers; then
  step peers python3 "$root/tools/peers/attn_peers.py" --csv "$out/peers.csv"
  # Nsight Compute on the head-dim-128 non-causal kernel at S = 8192 (ncu
  # locks the SM clock to base, so its throughputs are per clock, not peak).
  step ncu_d128 ncu --kernel-name attn_fwd_kernel --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    "$bin/attn-bench" "$root/docs/examples/full_hd128.mlir" --batch=2 --seqlen=8192 \
    --warmup=0 --repeats=1
fi
