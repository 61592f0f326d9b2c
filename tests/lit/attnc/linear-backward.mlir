// attnc --backward on the linear family: the chunkwise kernel built with the
// backward's pass options, beside the helper kernels; normalized linear
// attention's passes run unnormalized, beside its key sum kernels.
// RUN: attnc %s --backward --emit=cuda | FileCheck %s --check-prefix=CUDA
// RUN: attnc %s --backward -o %t.ptx && FileCheck %s --check-prefix=PTX < %t.ptx
// RUN: attnc %s --backward --emit=metadata | FileCheck %s --check-prefix=METADATA
// RUN: attnc %s --emit=cuda | FileCheck %s --check-prefix=FORWARD
// RUN: attnc %S/Inputs/linear-normalized.mlir --backward --emit=cuda | FileCheck %s --check-prefix=NORMALIZED
// RUN: attnc %S/Inputs/linear-normalized.mlir --backward -o %t.normalized.ptx && FileCheck %s --check-prefix=NORMALIZED-PTX < %t.normalized.ptx
// RUN: attnc %S/Inputs/linear-normalized.mlir --backward --emit=metadata | FileCheck %s --check-prefix=NORMALIZED-METADATA

// CUDA: constexpr bool kGated = true;
// CUDA: constexpr bool kBackwardPasses = true;
// CUDA: namespace attn_linear_bwd_plan {
// CUDA-NEXT: constexpr attn_dev::FeatureMap kFeatureMap = attn_dev::FeatureMap::Identity;
// CUDA: attn_linear_bwd_gate_kernel

// PTX: .target sm_90a
// PTX-DAG: .entry attn_linear_kernel(
// PTX-DAG: .entry attn_linear_bwd_states_kernel(
// PTX-DAG: .entry attn_linear_bwd_query_kernel(
// PTX-DAG: .entry attn_linear_bwd_key_kernel(
// PTX-DAG: .entry attn_linear_bwd_gate_kernel(
// PTX-DAG: .entry attn_linear_bwd_initial_state_kernel(
// PTX-DAG: cp.async.bulk.tensor.4d.global.shared
// PTX-DAG: wgmma.mma_async

// METADATA: kernel attn_linear_kernel
// METADATA: linear_family 1
// METADATA: backward 1
// METADATA: gated 1

// FORWARD: constexpr bool kBackwardPasses = false;
// FORWARD-NOT: attn_linear_bwd_plan

// NORMALIZED: namespace attn_plan {
// NORMALIZED: constexpr bool kNormalize = false;
// NORMALIZED: constexpr bool kBackwardPasses = true;
// NORMALIZED: namespace attn_linear_bwd_plan {
// NORMALIZED-NEXT: constexpr attn_dev::FeatureMap kFeatureMap = attn_dev::FeatureMap::EluPlusOne;
// NORMALIZED-NEXT: constexpr bool kNormalize = true;

// NORMALIZED-PTX-DAG: .entry attn_linear_bwd_key_pieces_kernel(
// NORMALIZED-PTX-DAG: .entry attn_linear_bwd_key_scan_kernel(
// NORMALIZED-PTX-DAG: .entry attn_linear_bwd_denominator_kernel(
// NORMALIZED-PTX-DAG: .entry attn_linear_bwd_query_scan_kernel(
// NORMALIZED-PTX-DAG: .entry attn_linear_bwd_key_sum_gradient_kernel(

// NORMALIZED-METADATA: backward 1
// NORMALIZED-METADATA: normalize 1

attn.kernel @gated_gqa
    problem = #attn.problem<q_heads = 8, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.retention<gated>
