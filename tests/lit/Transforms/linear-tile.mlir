// attn-tile on linear attention and retention: one plan for the whole
// family (linearTileConfig): chunks of 64 rows (block_m, the M of one
// warpgroup's WGMMA), 64 value columns per block (block_n), 2 stages, one
// consumer and one producer warpgroup at 240/24 registers, a block per
// (value slice, head, batch), never a persistent grid. A softmax kernel in
// the same module keeps its own heuristic plan. Plans already on a
// linear-family op, and overrides, are checked against the linear kernel's
// constraints (checkLinearTileLegality), not the softmax kernel's.
// RUN: attn-opt --attn-tile %s -split-input-file -verify-diagnostics | FileCheck %s
// Running it twice changes nothing.
// RUN: attn-opt --attn-tile --attn-tile %s -split-input-file -verify-diagnostics | FileCheck %s

// Overrides (tile-override) replace the linear plan key by key, and replace
// plans already on the op, as for softmax kernels. A legal one applies to
// every kernel of the file (the plans on the ops in the later sections are
// replaced too, so they pass):
// RUN: attn-opt --attn-tile="tile-override=stages=4" %s -split-input-file | FileCheck %s --check-prefix=STAGES
// RUN: attn-opt --attn-tile="tile-override=stages=1" %s -split-input-file | FileCheck %s --check-prefix=ONE
// An illegal one fails the pass with a diagnostic at each linear-family
// kernel. block_n = 128 is the softmax kernel's own choice here, and legal
// for it, but the linear kernel's value slice is 64 columns:
// RUN: not attn-opt --attn-tile="tile-override=block_n=128" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=BLOCKN
// A wider chunk, directly or through the consumer warpgroups (block_m
// follows: 64 x 2):
// RUN: not attn-opt --attn-tile="tile-override=block_m=128" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=BLOCKM
// RUN: not attn-opt --attn-tile="tile-override=consumer_warpgroups=2" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=BLOCKM
// RUN: not attn-opt --attn-tile="tile-override=stages=5" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=DEEP
// RUN: not attn-opt --attn-tile="tile-override=producer_warpgroups=2" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=PRODUCERS
// RUN: not attn-opt --attn-tile="tile-override=persistent_blocks_per_sm=1" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=PERSISTENT
// RUN: not attn-opt --attn-tile="tile-override=softmax_chains=2" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=CHAINS

// CHECK-LABEL: attn.kernel @retention_hd128
// CHECK:       normalizer = #attn.retention
// CHECK-NEXT:  attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// STAGES-LABEL: attn.kernel @retention_hd128
// STAGES:       tile = #attn.tile<block_m = 64, block_n = 64, stages = 4, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// ONE-LABEL:    attn.kernel @retention_hd128
// ONE:          tile = #attn.tile<block_m = 64, block_n = 64, stages = 1, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// BLOCKN:       linear-tile.mlir:[[# @LINE + 6]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: block_m (the chunk) and block_n (the value slice) must be 64, got 64 and 128
// BLOCKM:       linear-tile.mlir:[[# @LINE + 5]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: block_m (the chunk) and block_n (the value slice) must be 64, got 128 and 64
// DEEP:         linear-tile.mlir:[[# @LINE + 4]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: stages must be 1 to 4, got 5
// PRODUCERS:    linear-tile.mlir:[[# @LINE + 3]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: one consumer and one producer warpgroup, got 1 and 2
// PERSISTENT:   linear-tile.mlir:[[# @LINE + 2]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: no persistent grid (one block per value slice, head and batch)
// CHAINS:       linear-tile.mlir:[[# @LINE + 1]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: linear kernel: softmax_chains must be 1 (it has no softmax), got 2
attn.kernel @retention_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.retention

// The plan does not depend on the head dim, the element type, the mask or
// the feature map.
// CHECK-LABEL: attn.kernel @linear_elu_hd64
// CHECK:       normalizer = #attn.linear<feature_map = elu_plus_one, normalize = true>
// CHECK-NEXT:  attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// STAGES-LABEL: attn.kernel @linear_elu_hd64
// STAGES:       tile = #attn.tile<block_m = 64, block_n = 64, stages = 4, consumer_warpgroups = 1,
// BLOCKN:       linear-tile.mlir:[[# @LINE + 1]]:1: error: 'attn.kernel' op illegal tile plan
attn.kernel @linear_elu_hd64
    problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 64, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.linear<feature_map = elu_plus_one, normalize = true>

// CHECK-LABEL: attn.kernel @linear_relu_f16
// CHECK:       normalizer = #attn.linear<feature_map = relu>
// CHECK-NEXT:  attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// BLOCKN:       linear-tile.mlir:[[# @LINE + 1]]:1: error: 'attn.kernel' op illegal tile plan
attn.kernel @linear_relu_f16
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 128, element_type = f16>
    mask = #attn.no_mask
    normalizer = #attn.linear<feature_map = relu>

// A legal linear plan already on the op is kept (here 3 stages); an
// override replaces it.
// CHECK-LABEL: attn.kernel @gated_preset
// CHECK:       normalizer = #attn.retention<gated>
// CHECK-NEXT:  attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 3, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
// STAGES-LABEL: attn.kernel @gated_preset
// STAGES:       tile = #attn.tile<block_m = 64, block_n = 64, stages = 4, consumer_warpgroups = 1,
// ONE-LABEL:    attn.kernel @gated_preset
// ONE:          tile = #attn.tile<block_m = 64, block_n = 64, stages = 1, consumer_warpgroups = 1,
// BLOCKN:       linear-tile.mlir:[[# @LINE + 1]]:1: error: 'attn.kernel' op illegal tile plan
attn.kernel @gated_preset
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.retention<gated>
    attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 3, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// The softmax kernel beside them: 192 x 128, three consumers, persistent.
// The overrides above are legal for it, so it reports nothing, except two
// producer warpgroups, which it rejects in its own terms.
// CHECK-LABEL: attn.kernel @softmax_hd64
// CHECK:       tile = #attn.tile<block_m = 192, block_n = 128, stages = 2, consumer_warpgroups = 3, producer_warpgroups = 1, consumer_registers = 160, producer_registers = 24, persistent_blocks_per_sm = 1>
// STAGES-LABEL: attn.kernel @softmax_hd64
// STAGES:       tile = #attn.tile<block_m = 192, block_n = 128, stages = 4, consumer_warpgroups = 3, producer_warpgroups = 1, consumer_registers = 160, producer_registers = 24, persistent_blocks_per_sm = 1>
// BLOCKN-NOT:   linear-tile.mlir:[[# @LINE + 5]]:{{[0-9]+}}: error
// BLOCKM-NOT:   linear-tile.mlir:[[# @LINE + 4]]:{{[0-9]+}}: error
// DEEP-NOT:     linear-tile.mlir:[[# @LINE + 3]]:{{[0-9]+}}: error
// PRODUCERS:    linear-tile.mlir:[[# @LINE + 2]]:1: error: 'attn.kernel' op illegal tile plan for sm_90a: warpgroups: producer_warpgroups (2) must be 1{{$}}
// PERSISTENT-NOT: linear-tile.mlir:[[# @LINE + 1]]:{{[0-9]+}}: error
attn.kernel @softmax_hd64
    problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax

// -----

// The softmax kernel's default plan for head_dim 128 is legal for softmax
// but not for the linear kernel.
// expected-error @+1 {{'attn.kernel' op illegal tile plan for sm_90a: linear kernel: block_m (the chunk) and block_n (the value slice) must be 64, got 128 and 128}}
attn.kernel @k problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// expected-error @+1 {{'attn.kernel' op illegal tile plan for sm_90a: linear kernel: block_m (the chunk) and block_n (the value slice) must be 64, got 64 and 32}}
attn.kernel @k problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.linear
    attributes {tile = #attn.tile<block_m = 64, block_n = 32, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// expected-error @+1 {{'attn.kernel' op illegal tile plan for sm_90a: linear kernel: one consumer and one producer warpgroup, got 1 and 2}}
attn.kernel @k problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.linear<normalize = true>
    attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 2, consumer_registers = 240, producer_registers = 24>}

// -----

// expected-error @+1 {{'attn.kernel' op illegal tile plan for sm_90a: linear kernel: stages must be 1 to 4, got 5}}
attn.kernel @k problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 128, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<decay = [0.5, 0.75, 0.875, 0.9375]>
    attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 5, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// -----

// expected-error @+1 {{'attn.kernel' op illegal tile plan for sm_90a: linear kernel: no persistent grid (one block per value slice, head and batch)}}
attn.kernel @k problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 128, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<gated>
    attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>}
