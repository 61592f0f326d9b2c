// tile-override replaces the heuristic's choices key by key.

// All of block_m, block_n, stages and the warpgroups given:
// RUN: attn-opt --attn-tile="tile-override=block_m=64,block_n=64,stages=2,consumer_warpgroups=1" %s | FileCheck %s --check-prefix=SMALL
// SMALL-LABEL: attn.kernel @hd64
// SMALL:       tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>
// The override also replaces a plan already on the op.
// SMALL-LABEL: attn.kernel @preset
// SMALL:       tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>

// Only block_m: consumer_warpgroups follows (192 / 64 = 3) and so does the
// consumer register count (160, so 128 x (24 + 3 x 160) <= 65536). block_n
// 64 keeps the accumulators within 160 registers (64/2 + 64/2 + 64/4 + 32 =
// 112 for head_dim 64); stages stays at the default, 2.
// RUN: attn-opt --attn-tile="tile-override=block_m=192,block_n=64" %s | FileCheck %s --check-prefix=WIDE
// WIDE-LABEL: attn.kernel @hd64
// WIDE:       tile = #attn.tile<block_m = 192, block_n = 64, stages = 2, consumer_warpgroups = 3, producer_warpgroups = 1, consumer_registers = 160, producer_registers = 24, persistent_blocks_per_sm = 1>

// Only consumer_warpgroups: block_m follows (64 x 1).
// RUN: attn-opt --attn-tile="tile-override=consumer_warpgroups=1" %s | FileCheck %s --check-prefix=ONEWG
// ONEWG-LABEL: attn.kernel @hd64
// ONEWG:       tile = #attn.tile<block_m = 64, block_n = 128, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>

// Stages and the warpgroup split; spaces around items are tolerated.
// RUN: attn-opt --attn-tile="tile-override='stages=4, consumer_warpgroups=2, consumer_registers=232'" %s | FileCheck %s --check-prefix=DEEP
// DEEP-LABEL: attn.kernel @hd64
// DEEP:       tile = #attn.tile<block_m = 128, block_n = 128, stages = 4, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 232, producer_registers = 24, persistent_blocks_per_sm = 1>

// The attn-plan pipeline forwards the override to attn-tile.
// RUN: attn-opt --attn-plan="tile-override=block_m=64,block_n=64,stages=2" %s | FileCheck %s --check-prefix=PIPE
// PIPE-LABEL: attn.kernel @hd64
// PIPE:       smem = #attn.smem_plan<total = 49232,
// PIPE-SAME:  tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1,

// The schedule fields: chains and the grid (0 = a block per work tile).
// RUN: attn-opt --attn-tile="tile-override=softmax_chains=2,persistent_blocks_per_sm=0" %s | FileCheck %s --check-prefix=SCHED
// SCHED-LABEL: attn.kernel @hd64
// SCHED:       tile = #attn.tile<block_m = 192, block_n = 128, stages = 2, consumer_warpgroups = 3, producer_warpgroups = 1, consumer_registers = 160, producer_registers = 24, softmax_chains = 2>}
// RUN: not attn-opt --attn-tile="tile-override=softmax_chains=3" %s 2>&1 | FileCheck %s --check-prefix=CHAINS
// CHAINS: error: 'attn.kernel' op illegal tile plan for sm_90a: schedule: softmax_chains (3) must be 1, 2 or 4
// RUN: not attn-opt --attn-tile="tile-override=persistent_blocks_per_sm=2" %s 2>&1 | FileCheck %s --check-prefix=GRID
// GRID: error: 'attn.kernel' op illegal tile plan for sm_90a: schedule: persistent_blocks_per_sm (2) must be 0 (a block per work tile) or 1
// RUN: not attn-opt --attn-tile="tile-override=stages=0" %s 2>&1 | FileCheck %s --check-prefix=ZERO
// ZERO: error: 'attn.kernel' op invalid tile-override 'stages=0': value of 'stages' must be a positive integer, got '0'

// Malformed overrides are reported on each kernel and fail the pass.
// RUN: not attn-opt --attn-tile="tile-override=block_m" %s 2>&1 | FileCheck %s --check-prefix=NOVALUE
// NOVALUE: tile-override.mlir:[[# @LINE + 11]]:1: error: 'attn.kernel' op invalid tile-override 'block_m': expected 'key=value', got 'block_m'
// RUN: not attn-opt --attn-tile="tile-override=block_m=abc" %s 2>&1 | FileCheck %s --check-prefix=NOTINT
// NOTINT: error: 'attn.kernel' op invalid tile-override 'block_m=abc': value of 'block_m' must be a positive integer, got 'abc'
// RUN: not attn-opt --attn-tile="tile-override=bm=64" %s 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// UNKNOWN: error: 'attn.kernel' op invalid tile-override 'bm=64': unknown key 'bm'; expected block_m, block_n, stages, consumer_warpgroups, producer_warpgroups, consumer_registers, producer_registers, softmax_chains or persistent_blocks_per_sm
// RUN: not attn-opt --attn-tile="tile-override=stages=2,stages=3" %s 2>&1 | FileCheck %s --check-prefix=DUP
// DUP: error: 'attn.kernel' op invalid tile-override 'stages=2,stages=3': duplicate key 'stages'
// An override that breaks a constraint is rejected like any plan.
// RUN: not attn-opt --attn-tile="tile-override=block_m=96" %s 2>&1 | FileCheck %s --check-prefix=ILLEGAL
// ILLEGAL: error: 'attn.kernel' op illegal tile plan for sm_90a: WGMMA shape: block_m (96) must equal 64 x consumer_warpgroups (192)

attn.kernel @hd64
    problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax

attn.kernel @preset
    problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 3, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
