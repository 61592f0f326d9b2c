// attn-plan-smem on linear attention and retention (linearKernelSmemRequests):
// every buffer lives for the whole kernel, so they are laid out one after
// the other, in this order:
//   q, k       stages x chunk (block_m) x head_dim x 2 B, 1024-aligned slots
//   v          stages x chunk x block_n value columns x 2 B
//   state      head_dim x block_n x 2 B (the 16-bit operand of Q S)
//   o_staging  chunk x block_n x 2 B
//   decay      stages x 2 x chunk fp32 (prefix sums and token weights), 16-aligned
//   decay_ring (ATTN_LINEAR_DECAY_LOOKAHEAD + 1 = 3) x chunk fp32 (gated
//              log-decays copied ahead), 16-aligned
//   key_sum    head_dim fp32 per 64-column value slice, 16-aligned
//   barriers   full and empty per stage: 2 x stages x 8 B
// Tiles have 128-byte swizzle; the fp32 vectors and barriers none.
// RUN: attn-opt --attn-plan-smem %s -split-input-file -verify-diagnostics | FileCheck %s
// The attn-plan pipeline (attn-tile, then attn-plan-smem) lays out the
// shipped examples the same way, with the default linear tile (one value
// slice a block without a tuning shape).
// RUN: attn-opt --attn-plan %docs_examples/retention_hd128.mlir | FileCheck %s --check-prefix=PIPE128
// RUN: attn-opt --attn-plan %docs_examples/gated_retention_hd128.mlir | FileCheck %s --check-prefix=PIPE128
// RUN: attn-opt --attn-plan %docs_examples/linear_elu_hd64.mlir | FileCheck %s --check-prefix=PIPE64

// head_dim 128, bf16, the default linear tile: 64 x 64 chunks, one value
// slice a block, 2 stages.
// A row of Q or K is 128 x 2 = 256 B; a row of a value slice 64 x 2 = 128 B.
//   q          2 x 64 x 256 = 32768          @ 0
//   k          32768                         @ 32768
//   v          2 x 64 x 128 = 16384          @ 65536
//   state      128 x 128 = 16384             @ 81920
//   o_staging  64 x 128 = 8192               @ 98304
//   decay      2 x 2 x 64 x 4 = 1024         @ 106496
//   decay_ring 3 x 64 x 4 = 768              @ 107520
//   key_sum    128 x 4 = 512                 @ 108288
//   barriers   2 x 2 x 8 = 32 (4 slots)      @ 108800
//   total      108832
// CHECK-LABEL: attn.kernel @retention_hd128
// CHECK:       smem = #attn.smem_plan<total = 108832, buffers = [
// CHECK-SAME:    #attn.buffer<"q", offset = 0, size = 32768, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:    #attn.buffer<"k", offset = 32768, size = 32768, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:    #attn.buffer<"v", offset = 65536, size = 16384, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:    #attn.buffer<"state", offset = 81920, size = 16384, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"o_staging", offset = 98304, size = 8192, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"decay", offset = 106496, size = 1024, align = 16, swizzle = 0, slots = 2>,
// CHECK-SAME:    #attn.buffer<"decay_ring", offset = 107520, size = 768, align = 16, swizzle = 0, slots = 3>,
// CHECK-SAME:    #attn.buffer<"key_sum", offset = 108288, size = 512, align = 16, swizzle = 0>,
// CHECK-SAME:    #attn.buffer<"barriers", offset = 108800, size = 32, align = 8, swizzle = 0, slots = 4>]>
// PIPE128:     smem = #attn.smem_plan<total = 108832, buffers = [
// PIPE128-SAME:  #attn.buffer<"q", offset = 0, size = 32768, align = 1024, swizzle = 128, slots = 2>,
// PIPE128-SAME:  #attn.buffer<"state", offset = 81920, size = 16384, align = 1024, swizzle = 128>,
// PIPE128-SAME:  #attn.buffer<"barriers", offset = 108800, size = 32, align = 8, swizzle = 0, slots = 4>]>,
// PIPE128-SAME:  tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1,
attn.kernel @retention_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.retention
    attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// head_dim 128, bf16, both value slices in one block (attn-tile's plan for
// a shape that splits): block_n = 128, two consumer warpgroups, 2 stages. The V slot
// holds a 64 x 64 tile per slice, so do the state and the staging; each
// slice keeps its own key sum.
//   q          2 x 64 x 256 = 32768          @ 0
//   k          32768                         @ 32768
//   v          2 x 64 x 256 = 32768          @ 65536
//   state      128 x 256 = 32768             @ 98304
//   o_staging  64 x 256 = 16384              @ 131072
//   decay      2 x 2 x 64 x 4 = 1024         @ 147456
//   decay_ring 3 x 64 x 4 = 768              @ 148480
//   key_sum    2 x 128 x 4 = 1024            @ 149248
//   barriers   2 x 2 x 8 = 32 (4 slots)      @ 150272
//   total      150304
// CHECK-LABEL: attn.kernel @retention_two_slices
// CHECK:       smem = #attn.smem_plan<total = 150304, buffers = [
// CHECK-SAME:    #attn.buffer<"q", offset = 0, size = 32768, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:    #attn.buffer<"k", offset = 32768, size = 32768, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:    #attn.buffer<"v", offset = 65536, size = 32768, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:    #attn.buffer<"state", offset = 98304, size = 32768, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"o_staging", offset = 131072, size = 16384, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"decay", offset = 147456, size = 1024, align = 16, swizzle = 0, slots = 2>,
// CHECK-SAME:    #attn.buffer<"decay_ring", offset = 148480, size = 768, align = 16, swizzle = 0, slots = 3>,
// CHECK-SAME:    #attn.buffer<"key_sum", offset = 149248, size = 1024, align = 16, swizzle = 0>,
// CHECK-SAME:    #attn.buffer<"barriers", offset = 150272, size = 32, align = 8, swizzle = 0, slots = 4>]>
attn.kernel @retention_two_slices
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.retention
    attributes {tile = #attn.tile<block_m = 64, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// head_dim 64, bf16, the default tile. Q and K rows are 128 B now.
//   q          2 x 64 x 128 = 16384          @ 0
//   k          16384                         @ 16384
//   v          2 x 64 x 128 = 16384          @ 32768
//   state      64 x 128 = 8192               @ 49152
//   o_staging  8192                          @ 57344
//   decay      1024                          @ 65536
//   decay_ring 3 x 64 x 4 = 768              @ 66560
//   key_sum    64 x 4 = 256                  @ 67328
//   barriers   32                            @ 67584
//   total      67616
// CHECK-LABEL: attn.kernel @linear_elu_hd64
// CHECK:       smem = #attn.smem_plan<total = 67616, buffers = [
// CHECK-SAME:    #attn.buffer<"q", offset = 0, size = 16384, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:    #attn.buffer<"k", offset = 16384, size = 16384, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:    #attn.buffer<"v", offset = 32768, size = 16384, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:    #attn.buffer<"state", offset = 49152, size = 8192, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"o_staging", offset = 57344, size = 8192, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"decay", offset = 65536, size = 1024, align = 16, swizzle = 0, slots = 2>,
// CHECK-SAME:    #attn.buffer<"decay_ring", offset = 66560, size = 768, align = 16, swizzle = 0, slots = 3>,
// CHECK-SAME:    #attn.buffer<"key_sum", offset = 67328, size = 256, align = 16, swizzle = 0>,
// CHECK-SAME:    #attn.buffer<"barriers", offset = 67584, size = 32, align = 8, swizzle = 0, slots = 4>]>
// PIPE64:      smem = #attn.smem_plan<total = 67616, buffers = [
// PIPE64-SAME:   #attn.buffer<"key_sum", offset = 67328, size = 256, align = 16, swizzle = 0>,
// PIPE64-SAME:   #attn.buffer<"barriers", offset = 67584, size = 32, align = 8, swizzle = 0, slots = 4>]>,
// PIPE64-SAME:   tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1,
attn.kernel @linear_elu_hd64
    problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 64, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.linear<feature_map = elu_plus_one, normalize = true>
    attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// head_dim 128, f16 (also 2 B), 4 stages, the deepest linear plan.
//   q          4 x 16384 = 65536             @ 0
//   k          65536                         @ 65536
//   v          4 x 8192 = 32768              @ 131072
//   state      16384                         @ 163840
//   o_staging  8192                          @ 180224
//   decay      4 x 512 = 2048                @ 188416
//   decay_ring 3 x 64 x 4 = 768              @ 190464
//   key_sum    512                           @ 191232
//   barriers   2 x 4 x 8 = 64 (8 slots)      @ 191744
//   total      191808
// CHECK-LABEL: attn.kernel @gated_f16_deep
// CHECK:       smem = #attn.smem_plan<total = 191808, buffers = [
// CHECK-SAME:    #attn.buffer<"q", offset = 0, size = 65536, align = 1024, swizzle = 128, slots = 4>,
// CHECK-SAME:    #attn.buffer<"k", offset = 65536, size = 65536, align = 1024, swizzle = 128, slots = 4>,
// CHECK-SAME:    #attn.buffer<"v", offset = 131072, size = 32768, align = 1024, swizzle = 128, slots = 4>,
// CHECK-SAME:    #attn.buffer<"state", offset = 163840, size = 16384, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"o_staging", offset = 180224, size = 8192, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"decay", offset = 188416, size = 2048, align = 16, swizzle = 0, slots = 4>,
// CHECK-SAME:    #attn.buffer<"decay_ring", offset = 190464, size = 768, align = 16, swizzle = 0, slots = 3>,
// CHECK-SAME:    #attn.buffer<"key_sum", offset = 191232, size = 512, align = 16, swizzle = 0>,
// CHECK-SAME:    #attn.buffer<"barriers", offset = 191744, size = 64, align = 8, swizzle = 0, slots = 8>]>
attn.kernel @gated_f16_deep
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 128, element_type = f16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.retention<gated>
    attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 4, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// head_dim 64, one stage: single slots (slots = 1 is elided).
//   q, k, v, state, o_staging  8192 each   @ 0, 8192, 16384, 24576, 32768
//   decay      512                         @ 40960
//   decay_ring 3 x 64 x 4 = 768            @ 41472
//   key_sum    256                         @ 42240
//   barriers   2 x 8 = 16 (2 slots)        @ 42496
//   total      42512
// CHECK-LABEL: attn.kernel @linear_one_stage
// CHECK:       smem = #attn.smem_plan<total = 42512, buffers = [
// CHECK-SAME:    #attn.buffer<"q", offset = 0, size = 8192, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"k", offset = 8192, size = 8192, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"v", offset = 16384, size = 8192, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"state", offset = 24576, size = 8192, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"o_staging", offset = 32768, size = 8192, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"decay", offset = 40960, size = 512, align = 16, swizzle = 0>,
// CHECK-SAME:    #attn.buffer<"decay_ring", offset = 41472, size = 768, align = 16, swizzle = 0, slots = 3>,
// CHECK-SAME:    #attn.buffer<"key_sum", offset = 42240, size = 256, align = 16, swizzle = 0>,
// CHECK-SAME:    #attn.buffer<"barriers", offset = 42496, size = 16, align = 8, swizzle = 0, slots = 2>]>
attn.kernel @linear_one_stage
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.linear
    attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 1, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// A stale plan (here the softmax kernel's layout) is recomputed from the
// tile with the linear kernel's buffers.
// CHECK-LABEL: attn.kernel @stale
// CHECK:       smem = #attn.smem_plan<total = 108832, buffers = [
// CHECK-SAME:    #attn.buffer<"state", offset = 81920, size = 16384, align = 1024, swizzle = 128>,
attn.kernel @stale
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.retention<decay = [0.5, 0.75, 0.875, 0.9375]>
    attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 2, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>,
                smem = #attn.smem_plan<total = 196688, buffers = [#attn.buffer<"q", offset = 0, size = 32768, align = 1024, swizzle = 128>, #attn.buffer<"barriers", offset = 196608, size = 80, align = 8, swizzle = 0, slots = 10>]>}

// -----

// A tile given by hand (attn-plan-smem does not re-check it) with 6 stages
// overflows: q and k 6 x 16384 = 98304 each, v 6 x 8192 = 49152, state
// 16384, o_staging 8192, decay 6 x 512 = 3072, decay_ring 768, key_sum
// 512, barriers 96: layout 274784, plus 1024 of base-alignment slack =
// 275808.
// expected-error @+1 {{'attn.kernel' op shared-memory capacity: the plan needs 275808 bytes (layout 274784 + 1024 base-alignment slack), limit 232448}}
attn.kernel @k problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 128, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention
    attributes {tile = #attn.tile<block_m = 64, block_n = 64, stages = 6, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
