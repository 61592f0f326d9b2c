// The linear-family normalizers, #attn.linear and #attn.retention, print
// stably and re-parse; parameters at their defaults are elided.
// RUN: attn-opt %s | FileCheck %s
// RUN: attn-opt %s | attn-opt | FileCheck %s
// RUN: attn-opt -mlir-print-op-generic %s | attn-opt | FileCheck %s
// In the generic form the normalizer is a property of the op.
// RUN: attn-opt -mlir-print-op-generic %s | FileCheck %s --check-prefix=GENERIC

// #attn.linear: feature_map = identity and normalize = false are the
// defaults; a spec that spells both prints the bare attribute.
// CHECK-LABEL: attn.kernel @linear_default
// CHECK-NEXT:      problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 64, element_type = bf16>
// CHECK-NEXT:      mask = #attn.causal<top_left>
// CHECK-NEXT:      normalizer = #attn.linear{{$}}
// CHECK-NOT:       attributes
// GENERIC: "attn.kernel"() <{mask = #attn.causal<top_left>, normalizer = #attn.linear, problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 64, element_type = bf16>, sym_name = "linear_default"}>
attn.kernel @linear_default
    problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 64, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.linear

// CHECK-LABEL: attn.kernel @linear_defaults_spelled
// CHECK:           normalizer = #attn.linear{{$}}
attn.kernel @linear_defaults_spelled
    problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 64, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.linear<feature_map = identity, normalize = false>

// Only the non-default parameter is printed.
// CHECK-LABEL: attn.kernel @linear_relu
// CHECK-NEXT:      problem = #attn.problem<q_heads = 4, kv_heads = 2, head_dim = 128, element_type = f16>
// CHECK-NEXT:      mask = #attn.no_mask
// CHECK-NEXT:      normalizer = #attn.linear<feature_map = relu>{{$}}
// GENERIC: normalizer = #attn.linear<feature_map = relu>, {{.*}}sym_name = "linear_relu"
attn.kernel @linear_relu
    problem = #attn.problem<q_heads = 4, kv_heads = 2, head_dim = 128, element_type = f16>
    mask = #attn.no_mask
    normalizer = #attn.linear<feature_map = relu>

// CHECK-LABEL: attn.kernel @linear_normalized
// CHECK:           normalizer = #attn.linear<normalize = true>{{$}}
attn.kernel @linear_normalized
    problem = #attn.problem<q_heads = 4, kv_heads = 2, head_dim = 128, element_type = f16>
    mask = #attn.no_mask
    normalizer = #attn.linear<normalize = true>

// Keys may come in any order; they print in declaration order.
// CHECK-LABEL: attn.kernel @linear_elu
// CHECK-NEXT:      problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 64, element_type = bf16>
// CHECK-NEXT:      mask = #attn.causal<top_left>
// CHECK-NEXT:      normalizer = #attn.linear<feature_map = elu_plus_one, normalize = true>{{$}}
attn.kernel @linear_elu
    problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 64, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.linear<normalize = true, feature_map = elu_plus_one>

// The explicit default feature map next to a non-default normalize.
// CHECK-LABEL: attn.kernel @linear_identity_normalized
// CHECK:           normalizer = #attn.linear<normalize = true>{{$}}
attn.kernel @linear_identity_normalized
    problem = #attn.problem<q_heads = 2, kv_heads = 1, head_dim = 64, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.linear<feature_map = identity, normalize = true>

// #attn.retention with the multi-scale default decay prints bare.
// CHECK-LABEL: attn.kernel @retention_default
// CHECK-NEXT:      problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
// CHECK-NEXT:      mask = #attn.causal<top_left>
// CHECK-NEXT:      normalizer = #attn.retention{{$}}
// CHECK-NOT:       attributes
// GENERIC: normalizer = #attn.retention, {{.*}}sym_name = "retention_default"
attn.kernel @retention_default
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.retention

// CHECK-LABEL: attn.kernel @retention_gated
// CHECK-NEXT:      problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
// CHECK-NEXT:      mask = #attn.causal<bottom_right>
// CHECK-NEXT:      normalizer = #attn.retention<gated>{{$}}
// GENERIC: normalizer = #attn.retention<gated>, {{.*}}sym_name = "retention_gated"
attn.kernel @retention_gated
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.retention<gated>

// An explicit decay list, one gamma per query head, 1.0 (no decay)
// included. Values print with as few digits as read back as the same
// double, always as float literals (1.0, not 1).
// CHECK-LABEL: attn.kernel @retention_decay
// CHECK-NEXT:      problem = #attn.problem<q_heads = 4, kv_heads = 2, head_dim = 64, element_type = bf16>
// CHECK-NEXT:      mask = #attn.causal<top_left>
// CHECK-NEXT:      normalizer = #attn.retention<decay = [0.96875, 0.984375, 1.0, 0.99999999]>{{$}}
// GENERIC: normalizer = #attn.retention<decay = [0.96875, 0.984375, 1.0, 0.99999999]>, {{.*}}sym_name = "retention_decay"
attn.kernel @retention_decay
    problem = #attn.problem<q_heads = 4, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.retention<decay = [0.96875, 0.984375, 1.0, 0.99999999]>

// A single query head: a one-element list, here in exponent notation.
// CHECK-LABEL: attn.kernel @retention_one_head
// CHECK:           normalizer = #attn.retention<decay = [0.5]>{{$}}
attn.kernel @retention_one_head
    problem = #attn.problem<q_heads = 1, kv_heads = 1, head_dim = 128, element_type = f16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.retention<decay = [5.0e-1]>

// A plan on a linear-family kernel is kept like any other.
// CHECK-LABEL: attn.kernel @retention_planned
// CHECK:           normalizer = #attn.retention<gated>
// CHECK-NEXT:      attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 3, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
attn.kernel @retention_planned
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.retention<gated>
    attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 3, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
