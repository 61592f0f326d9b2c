#!/usr/bin/env bash
# The whole GPU check in one go, for a machine with an sm_90 GPU: the GPU
# tests, compute-sanitizer over them, the example against the reference, the
# attn-bench grid and the peer script. Every log goes to the output folder.
#
# Usage: tools/gpu-suite.sh BIN_DIR OUT_DIR [full|quick|checks|bench|variants]
#   BIN_DIR holds attnc, attn-bench, attn-compile-bench, jit_host and
#   attn_gpu_tests (built elsewhere: the tools link LLVM statically and need
#   only the CUDA toolkit's libnvrtc).
#   full (default): everything. quick: tests, examples and the grids, without
#   the sanitizer, the peers and the profile. checks: tests, sanitizer,
#   examples, compile latency. bench: the softmax and linear grids, the
#   peers (fla-core's linear kernels when its wheels are in .whl/) and the
#   profile.
#   variants: the variant specs of docs/examples at head dim 128, B = 2,
#   S = 8192, H = 16, and FlexAttention on the same variants.
#   (checks, bench and variants split a full run into shorter ones.)
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
    variants:variants) return 0 ;;
    *) return 1 ;;
  esac
}

if want checks; then
  # The runtime's unit tests include driver tests that run only with a GPU.
  [ -x "$bin/attn_unit_runtime" ] && step unit_runtime "$bin/attn_unit_runtime"
  step gpu_tests "$bin/attn_gpu_tests"
  if want sanitizer; then
    step memcheck compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/attn_gpu_tests"
    # The shared-memory and barrier checkers over every kernel test ("[gpu]":
    # the tuner's tests launch hundreds of candidates, which memcheck covers).
    # racecheck leaves out the test of four host threads compiling and
    # launching one kernel at once: under it that test once stalled past two
    # minutes (it passes in 0.1 s and under the other tools), and its kernel
    # is the plain causal one the other tests check.
    step racecheck compute-sanitizer --tool racecheck --error-exitcode 9 "$bin/attn_gpu_tests" \
      '[gpu]~"threads compiling and running one kernel at once"'
    for tool in synccheck initcheck; do
      step "$tool" compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin/attn_gpu_tests" "[gpu]"
    done
  fi
  step example "$bin/attn-bench" "$root/docs/examples/causal_hd128.mlir" --batch=2 --seqlen=8192 --check
  step jit_host env ATTNC_CACHE_DIR="$out/jit-cache" "$bin/jit_host"
  step compile_latency "$bin/attn-compile-bench"
fi
if want bench; then
  step bench_grid "$bin/attn-bench" --grid
  # Linear attention and retention beside our causal softmax.
  step linear_grid "$bin/attn-bench" --linear-grid
fi
if want peers; then
  step peers python3 "$root/tools/peers/attn_peers.py" --csv "$out/peers.csv"
  # flash-linear-attention's Triton kernels, from wheels carried in .whl/
  # (docs/benchmarks.md says how to fetch them).
  if [ -d "$root/.whl" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/attnc-site "$root"/.whl/*.whl > "$out/wheels.log" 2>&1
    export PYTHONPATH="/tmp/attnc-site:${PYTHONPATH:-}"
    step linear_peers python3 "$root/tools/peers/linear_peers.py" --csv "$out/linear_peers.csv"
  fi
  # Nsight Compute on the head-dim-128 non-causal kernel at S = 8192 (ncu
  # locks the SM clock to base, so its throughputs are per clock, not peak).
  step ncu_d128 ncu --kernel-name attn_fwd_kernel --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    "$bin/attn-bench" "$root/docs/examples/full_hd128.mlir" --batch=2 --seqlen=8192 \
    --warmup=0 --repeats=1
fi
if want variants; then
  examples="$root/docs/examples"
  variant() { local name="$1"; shift; step "variant_$name" "$bin/attn-bench" "$@" --batch=2 --seqlen=8192; }
  # The plain causal kernel at the variants' heads (16 query, 16 key/value).
  sed 's/kv_heads = 4/kv_heads = 16/' "$examples/causal_hd128.mlir" > "$out/causal_mha_hd128.mlir"
  variant causal "$out/causal_mha_hd128.mlir"
  variant sliding_window_1024 "$examples/sliding_window_hd128.mlir"
  variant alibi_causal "$examples/alibi_causal_hd128.mlir" --capture slopes=ramp:0.0625,0.0625
  variant softcap50_causal "$examples/softcap_causal_hd128.mlir"
  # Kernels with a mask_mod take the automatic (outliers-first) work order,
  # as attn::Kernel::run does; Longformer also in the default order.
  variant longformer_w512_g64 "$examples/longformer_hd128.mlir"
  variant longformer_w512_g64_default_order "$examples/longformer_hd128.mlir" \
    --automatic-work-order=false
  variant prefix_lm_2048 "$examples/prefix_lm_hd128.mlir"
  variant document_mask "$examples/document_mask_hd128.mlir" --capture document=segments:256,2048
  variant relpos_bias_causal "$examples/relpos_bias_causal_hd128.mlir" \
    --capture bias=normal:0.5@16x16383
  variant chunked_local_1024 "$examples/chunked_local_hd128.mlir"
  variant bigbird "$examples/bigbird_hd128.mlir" --capture random_blocks=bernoulli:0.05@128x128
  # The masks above that the compiler cannot classify, with the tile
  # coverage built at run time (its build time is printed apart).
  variant document_mask_coverage "$examples/document_mask_hd128.mlir" \
    --capture document=segments:256,2048 --tile-coverage
  variant bigbird_coverage "$examples/bigbird_hd128.mlir" \
    --capture random_blocks=bernoulli:0.05@128x128 --tile-coverage
  # The masks whose longest work tiles the default order starts late, with
  # the longest-first work order (built once, its time printed apart).
  variant longformer_w512_g64_work_order "$examples/longformer_hd128.mlir" --work-order
  variant document_mask_coverage_work_order "$examples/document_mask_hd128.mlir" \
    --capture document=segments:256,2048 --tile-coverage --work-order
  variant bigbird_coverage_work_order "$examples/bigbird_hd128.mlir" \
    --capture random_blocks=bernoulli:0.05@128x128 --tile-coverage --work-order
  # Our plain kernel on each formula mask's tiles: a mask_mod that keeps
  # every pair, on the run-time coverage of the mask's visited tiles, all
  # marked full, in the order the mask's kernel takes (outliers first).
  cat > "$out/plain_on_tiles_hd128.mlir" <<'SPEC'
attn.kernel @plain_on_tiles_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    captures = [#attn.capture<"zero", f32, [1]>]
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index, %zero: memref<?xf32>):
      %first = arith.constant 0 : index
      %value = memref.load %zero[%first] : memref<?xf32>
      %none = arith.constant 0.0 : f32
      %keep = arith.cmpf oge, %value, %none : f32
      attn.yield %keep : i1
    }
SPEC
  for mask in longformer prefix_lm chunked_local; do
    variant "${mask}_plain_on_its_tiles" "$out/plain_on_tiles_hd128.mlir" --capture zero=ramp:0,0 \
      --coverage-of="$examples/${mask}_hd128.mlir" --work-order --outliers-first
  done
  # The buffer masks, in the orders of their runs above (document mask with
  # its coverage: the default order; BigBird's: longest first).
  variant document_mask_plain_on_its_tiles "$out/plain_on_tiles_hd128.mlir" \
    --capture zero=ramp:0,0 --coverage-of="$examples/document_mask_hd128.mlir" \
    --coverage-capture document=segments:256,2048
  variant bigbird_plain_on_its_tiles "$out/plain_on_tiles_hd128.mlir" --capture zero=ramp:0,0 \
    --coverage-of="$examples/bigbird_hd128.mlir" \
    --coverage-capture random_blocks=bernoulli:0.05@128x128 --work-order
  for log in "$out"/variant_*.log; do
    echo "$(basename "$log" .log) $(grep -o 'time [0-9.]* ms' "$log") $(grep -o 'built in [0-9.]* ms' "$log" | tr '\n' ' ')"
  done > "$out/variants_table.txt"
  step variant_peers python3 "$root/tools/peers/attn_variant_peers.py" --csv "$out/variant_peers.csv"
fi
