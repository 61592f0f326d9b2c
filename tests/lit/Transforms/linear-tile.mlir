// attn-tile on linear attention and retention: one plan for the whole
// family (linearTileConfig): chunks of 64 rows (block_m, the M of one
// warpgroup's WGMMA), 64 value columns a block (block_n, one consumer
// warpgroup), 2 stages, one producer warpgroup, 240/24 registers, a block
// per (value columns, head, batch), never a persistent grid. A softmax
// kernel in the same module keeps its own heuristic plan. Plans already on
// a linear-family op, and overrides, are checked against the linear
// kernel's constraints (checkLinearTileLegality), not the softmax kernel's.
// RUN: attn-opt --attn-tile %s -split-input-file -verify-diagnostics | FileCheck %s
// Running it twice changes nothing.
// RUN: attn-opt --attn-tile --attn-tile %s -split-input-file -verify-diagnostics | FileCheck %s

// With a tuning shape whose 64-column blocks leave SMs idle (batch x heads
// x head_dim / 64 below 0.9 x 132), so that the runtime splits the
// sequence, a block takes every value column of its head (block_n =
// head_dim, one consumer warpgroup per 64), gated decay or not.
// One batch splits every kernel here. At 4 batches, 4 x 16 heads x 2
// slices = 128 blocks fill the GPU; 4 x 4 heads x 2 = 32 do not.
// (The plans on the ops in the later sections stay, and fail there.)
// RUN: not attn-opt --attn-tile="tuning-shape=1,8192" %s -split-input-file | FileCheck %s --check-prefix=SPLIT
// RUN: not attn-opt --attn-tile="tuning-shape=4,4096" %s -split-input-file | FileCheck %s --check-prefix=FULL

// Overrides (tile-override) replace the linear plan key by key, and replace
// plans already on the op, as for softmax kernels. A legal one applies to
// every kernel of the file (the plans on the ops in the later sections are
// replaced too, so they pass):
// RUN: attn-opt --attn-tile="tile-override=stages=4" %s -split-input-file | FileCheck %s --check-prefix=STAGES
// RUN: attn-opt --attn-tile="tile-override=stages=1" %s -split-input-file | FileCheck %s --check-prefix=ONE
// block_n and consumer_warpgroups determine each other (one consumer per 64
// value columns), so either widens a head_dim 128 block to both slices:
// RUN: not attn-opt --attn-tile="tile-override=block_n=128" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=WIDE
// RUN: not attn-opt --attn-tile="tile-override=consumer_warpgroups=2" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=WIDE
// An illegal one fails the pass with a diagnostic at each linear-family
// kernel it breaks: two slices where head_dim 64 has one (above), a block
// of 32 value columns, a wider chunk, five stages, four stages of two
// slices (Q, K and two V tiles of 16 KB each exceed shared memory):
// RUN: not attn-opt --attn-tile="tile-override=block_n=32" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=BLOCKN
// RUN: not attn-opt --attn-tile="tile-override=block_m=128" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=BLOCKM
// RUN: not attn-opt --attn-tile="tile-override=stages=5" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=DEEP
// RUN: not attn-opt --attn-tile="tile-override=block_n=128,stages=4" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=SMEM
// RUN: not attn-opt --attn-tile="tile-override=producer_warpgroups=2" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=PRODUCERS
// RUN: not attn-opt --attn-tile="tile-override=persistent_blocks_per_sm=1" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=PERSISTENT
// RUN: not attn-opt --attn-tile="tile-override=softmax_chains=2" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=CHAINS

// CHECK-LABEL: attn.kernel @retention_hd128
// CHECK:       normalizer = #attn.retention
// CHECK-NEXT:  attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// SPLIT-LABEL: attn.kernel @retention_hd128
// SPLIT:       tile = #attn.tile<block_m = 64, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// FULL-LABEL:  attn.kernel @retention_hd128
// FULL:        tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// STAGES-LABEL: attn.kernel @retention_hd128
// STAGES:       tile = #attn.tile<block_m = 64, block_n = 64, stages = 4, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// ONE-LABEL:    attn.kernel @retention_hd128
// ONE:          tile = #attn.tile<block_m = 64, block_n = 64, stages = 1, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// WIDE-NOT:      linear-tile.mlir:[[# @LINE + 8]]:{{[0-9]+}}: error
// BLOCKN:        linear-tile.mlir:[[# @LINE + 7]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: block_n (the value columns of a block) must be 64 or 128, got 32
// BLOCKM:        linear-tile.mlir:[[# @LINE + 6]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: block_m (the chunk) must be 64, got 128
// DEEP:          linear-tile.mlir:[[# @LINE + 5]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: stages must be 1 to 4, got 5
// SMEM:          linear-tile.mlir:[[# @LINE + 4]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: shared-memory capacity: block_n 128, stages 4, head_dim 128 needs {{[0-9]+}} bytes, limit 232448
// PRODUCERS:     linear-tile.mlir:[[# @LINE + 3]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: one producer warpgroup, got 2
// PERSISTENT:    linear-tile.mlir:[[# @LINE + 2]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: no persistent grid (one block per value columns, head and batch)
// CHAINS:        linear-tile.mlir:[[# @LINE + 1]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: softmax_chains must be 1 (it has no softmax), got 2
attn.kernel @retention_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.retention

// head_dim 64 holds one value slice: one consumer warpgroup, whatever
// the shape, the feature map or the element type.
// CHECK-LABEL: attn.kernel @linear_elu_hd64
// CHECK:       normalizer = #attn.linear<feature_map = elu_plus_one, normalize = true>
// CHECK-NEXT:  attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// SPLIT-LABEL: attn.kernel @linear_elu_hd64
// SPLIT:       tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// STAGES-LABEL: attn.kernel @linear_elu_hd64
// STAGES:       tile = #attn.tile<block_m = 64, block_n = 64, stages = 4, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// WIDE:          linear-tile.mlir:[[# @LINE + 8]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: block_n (128) exceeds head_dim (64)
// BLOCKN:        linear-tile.mlir:[[# @LINE + 7]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: block_n (the value columns of a block) must be 64 or 128, got 32
// BLOCKM:        linear-tile.mlir:[[# @LINE + 6]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: block_m (the chunk) must be 64, got 128
// DEEP:          linear-tile.mlir:[[# @LINE + 5]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: stages must be 1 to 4, got 5
// SMEM:          linear-tile.mlir:[[# @LINE + 4]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: block_n (128) exceeds head_dim (64)
// PRODUCERS:     linear-tile.mlir:[[# @LINE + 3]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: one producer warpgroup, got 2
// PERSISTENT:    linear-tile.mlir:[[# @LINE + 2]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: no persistent grid (one block per value columns, head and batch)
// CHAINS:        linear-tile.mlir:[[# @LINE + 1]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: softmax_chains must be 1 (it has no softmax), got 2
attn.kernel @linear_elu_hd64
    problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 64, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.linear<feature_map = elu_plus_one, normalize = true>

// CHECK-LABEL: attn.kernel @linear_relu_f16
// CHECK:       normalizer = #attn.linear<feature_map = relu>
// CHECK-NEXT:  attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// SPLIT-LABEL: attn.kernel @linear_relu_f16
// SPLIT:       tile = #attn.tile<block_m = 64, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// FULL-LABEL:  attn.kernel @linear_relu_f16
// FULL:        tile = #attn.tile<block_m = 64, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// BLOCKN:        linear-tile.mlir:[[# @LINE + 2]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: block_n (the value columns of a block) must be 64 or 128, got 32
// SMEM:          linear-tile.mlir:[[# @LINE + 1]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: shared-memory capacity: block_n 128, stages 4, head_dim 128 needs {{[0-9]+}} bytes, limit 232448
attn.kernel @linear_relu_f16
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 128, element_type = f16>
    mask = #attn.no_mask
    normalizer = #attn.linear<feature_map = relu>

// A legal linear plan already on the op is kept (here 3 stages), split or
// not; an override replaces it.
// CHECK-LABEL: attn.kernel @gated_preset
// CHECK:       normalizer = #attn.retention<gated>
// CHECK-NEXT:  attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 3, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// SPLIT-LABEL: attn.kernel @gated_preset
// SPLIT:       tile = #attn.tile<block_m = 64, block_n = 64, stages = 3, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// STAGES-LABEL: attn.kernel @gated_preset
// STAGES:       tile = #attn.tile<block_m = 64, block_n = 64, stages = 4, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// ONE-LABEL:    attn.kernel @gated_preset
// ONE:          tile = #attn.tile<block_m = 64, block_n = 64, stages = 1, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// WIDE-NOT:      linear-tile.mlir:[[# @LINE + 3]]:{{[0-9]+}}: error
// BLOCKN:        linear-tile.mlir:[[# @LINE + 2]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: block_n (the value columns of a block) must be 64 or 128, got 32
// SMEM:          linear-tile.mlir:[[# @LINE + 1]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: shared-memory capacity: block_n 128, stages 4, head_dim 128 needs {{[0-9]+}} bytes, limit 232448
attn.kernel @gated_preset
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.retention<gated>
    attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 3, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// Gated retention takes the same plan as fixed decays: both value slices a
// block where the sequence splits, one where the blocks fill the GPU.
// CHECK-LABEL: attn.kernel @gated_hd128
// CHECK:       normalizer = #attn.retention<gated>
// CHECK-NEXT:  attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// SPLIT-LABEL: attn.kernel @gated_hd128
// SPLIT:       tile = #attn.tile<block_m = 64, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// FULL-LABEL:  attn.kernel @gated_hd128
// FULL:        tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
attn.kernel @gated_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.retention<gated>

// The softmax kernel beside them: 192 x 128, three consumers, persistent.
// The overrides above are legal for it, so it reports nothing, except two
// producer warpgroups, which it rejects in its own terms.
// CHECK-LABEL: attn.kernel @softmax_hd64
// CHECK:       tile = #attn.tile<block_m = 192, block_n = 128, stages = 2, consumer_warpgroups = 3, producer_warpgroups = 1, consumer_registers = 160, producer_registers = 24, persistent_blocks_per_sm = 1>
// STAGES-LABEL: attn.kernel @softmax_hd64
// STAGES:       tile = #attn.tile<block_m = 192, block_n = 128, stages = 4, consumer_warpgroups = 3, producer_warpgroups = 1, consumer_registers = 160, producer_registers = 24, persistent_blocks_per_sm = 1>
// BLOCKN-NOT:   linear-tile.mlir:[[# @LINE + 7]]:{{[0-9]+}}: error
// WIDE-NOT:     linear-tile.mlir:[[# @LINE + 6]]:{{[0-9]+}}: error
// BLOCKM-NOT:   linear-tile.mlir:[[# @LINE + 5]]:{{[0-9]+}}: error
// DEEP-NOT:     linear-tile.mlir:[[# @LINE + 4]]:{{[0-9]+}}: error
// SMEM-NOT:     linear-tile.mlir:[[# @LINE + 3]]:{{[0-9]+}}: error
// PRODUCERS:    linear-tile.mlir:[[# @LINE + 2]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: warpgroups: producer_warpgroups (2) must be 1{{$}}
// PERSISTENT-NOT: linear-tile.mlir:[[# @LINE + 1]]:{{[0-9]+}}: error
attn.kernel @softmax_hd64
    problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax

// -----

// The softmax kernel's default plan for head_dim 128 is legal for softmax
// but not for the linear kernel.
// expected-error @+1 {{'attn.kernel' op illegal tile plan for sm_90a: linear kernel: block_m (the chunk) must be 64, got 128}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// expected-error @+1 {{'attn.kernel' op illegal tile plan for sm_90a: linear kernel: block_n (the value columns of a block) must be 64 or 128, got 32}}
attn.kernel @k problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.linear
    attributes {tile = #attn.tile<block_m = 64, block_n = 32, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// expected-error @+1 {{'attn.kernel' op illegal tile plan for sm_90a: linear kernel: block_n (128) exceeds head_dim (64)}}
attn.kernel @k problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.linear
    attributes {tile = #attn.tile<block_m = 64, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// A plan on the op must keep a consumer warpgroup per 64 value columns.
// expected-error @+1 {{'attn.kernel' op illegal tile plan for sm_90a: linear kernel: one consumer warpgroup per 64 value columns: block_n = 128 needs 2, got 1}}
attn.kernel @k problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 128, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention
    attributes {tile = #attn.tile<block_m = 64, block_n = 128, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// expected-error @+1 {{'attn.kernel' op illegal tile plan for sm_90a: linear kernel: one producer warpgroup, got 2}}
attn.kernel @k problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.linear<normalize = true>
    attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 2, consumer_registers = 240, producer_registers = 24>}

// -----

// expected-error @+1 {{'attn.kernel' op illegal tile plan for sm_90a: linear kernel: stages must be 1 to 4, got 5}}
attn.kernel @k problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 128, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<decay = [0.5, 0.75, 0.875, 0.9375]>
    attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 5, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// expected-error @+1 {{'attn.kernel' op illegal tile plan for sm_90a: linear kernel: no persistent grid (one block per value columns, head and batch)}}
attn.kernel @k problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 128, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<gated>
    attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>}
