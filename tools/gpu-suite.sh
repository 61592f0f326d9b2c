#!/usr/bin/env bash
# The whole GPU check in one go, for a machine with an sm_90 GPU: the GPU
# tests, compute-sanitizer over them, the example against the reference, the
# attn-bench grid and the peer script. Every log goes to the output folder.
#
# Usage: tools/gpu-suite.sh BIN_DIR OUT_DIR [quick]
#   BIN_DIR holds attnc, attn-bench and attn_gpu_tests (built elsewhere: the
#   tools link LLVM statically and need only the CUDA toolkit's libnvrtc).
#   "quick" skips the sanitizer, the peers and the profile.
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

step gpu_tests "$bin/attn_gpu_tests"
if [ "$mode" != quick ]; then
  step memcheck compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/attn_gpu_tests"
  step synccheck compute-sanitizer --tool synccheck --error-exitcode 9 "$bin/attn_gpu_tests" \
    "an explicit softmax scale is honoured"
fi
step example "$bin/attn-bench" "$root/docs/examples/causal_hd128.mlir" --batch=2 --seqlen=8192 --check
step bench_grid "$bin/attn-bench" --grid
if [ "$mode" != quick ]; then
  step peers python3 "$root/tools/peers/attn_peers.py" --csv "$out/peers.csv"
  # Nsight Compute on the head-dim-128 non-causal kernel at S = 8192 (ncu
  # locks the SM clock to base, so its throughputs are per clock, not peak).
  step ncu_d128 ncu --kernel-name attn_fwd_kernel --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    "$bin/attn-bench" "$root/docs/examples/full_hd128.mlir" --batch=2 --seqlen=8192 \
    --warmup=0 --repeats=1
fi
