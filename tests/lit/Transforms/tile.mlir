// attn-tile's default sm_90a plans: one 64-row consumer warpgroup per WGMMA
// slice of Q, one TMA producer warpgroup, setmaxnreg 240/24 (160/24 with
// three consumers), 2 stages.
// RUN: attn-opt --attn-tile %s | FileCheck %s
// Running it twice changes nothing (plans are only filled in when missing).
// RUN: attn-opt --attn-tile --attn-tile %s | FileCheck %s

// head_dim 64: 192 x 128 tiles, three consumers at 160 registers
// (64/2 + 128/2 + 128/4 + 32 = 160). No mask: every work tile costs the
// same, so the grid is persistent (one block per SM).
// CHECK-LABEL: attn.kernel @hd64
// CHECK:      tile = #attn.tile<block_m = 192, block_n = 128, stages = 2, consumer_warpgroups = 3, producer_warpgroups = 1, consumer_registers = 160, producer_registers = 24, persistent_blocks_per_sm = 1>
attn.kernel @hd64
    problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax

// head_dim 128: 128 x 128 tiles, 2 stages (f16 plans like bf16), one
// softmax reduction chain (four with a score_mod, mask_mod or window).
// Causal tiles differ in cost, and the kernel's persistent schedule knows
// how: the grid is persistent too.
// CHECK-LABEL: attn.kernel @hd128
// CHECK:      tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>
attn.kernel @hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = f16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax

// head_dim 256: block_n drops to 80 so the accumulators fit 240 registers
// (256/2 + 80/2 + 80/4 + 32 = 220). A sliding window at head dim 256 keeps
// the hardware's dispatch (at head dims 64 and 128 it is persistent).
// CHECK-LABEL: attn.kernel @hd256
// CHECK:      tile = #attn.tile<block_m = 128, block_n = 80, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
attn.kernel @hd256
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 256, element_type = bf16>
    mask = #attn.sliding_window<left = 512, right = 0>
    normalizer = #attn.softmax

// A mask_mod the compiler classifies, beside the causal mask: persistent
// (each tile visits few key tiles). Without the causal mask, or reading a
// buffer, a mask_mod keeps one block per work tile (tile-shape.mlir).
// CHECK-LABEL: attn.kernel @mask_mod_hd128
// CHECK:      tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, softmax_chains = 4, persistent_blocks_per_sm = 1>}
attn.kernel @mask_mod_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %window = arith.constant 1000 : index
      %shifted = arith.addi %kv, %window : index
      %near = arith.cmpi sge, %shifted, %q : index
      attn.yield %near : i1
    }

// A legal plan already on the op is kept; its omitted schedule fields take
// their defaults (one chain, a block per work tile).
// CHECK-LABEL: attn.kernel @preset
// CHECK:      tile = #attn.tile<block_m = 64, block_n = 112, stages = 3, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 232, producer_registers = 24>}
attn.kernel @preset
    problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 64, block_n = 112, stages = 3, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 232, producer_registers = 24>}

// Kernels nested in other modules are planned too.
// CHECK-LABEL: module @nested
// CHECK:      attn.kernel @inner
// CHECK:      tile = #attn.tile<block_m = 128, block_n = 128, stages = 2,
module @nested {
  attn.kernel @inner
      problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 128, element_type = bf16>
      mask = #attn.no_mask
      normalizer = #attn.softmax
}
