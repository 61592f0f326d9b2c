// attn-tile with backward=true also records the backward kernel's plan,
// `backward_tile`, and attn-plan-smem lays it out as `backward_smem`.
// RUN: attn-opt --attn-tile=backward=true --attn-plan-smem %s | FileCheck %s
// RUN: attn-opt --attn-tile="backward=true backward-tile-override=stages=1" %s | FileCheck %s --check-prefix=OVERRIDE
// Without the option there is no backward plan.
// RUN: attn-opt --attn-tile --attn-plan-smem %s | FileCheck %s --check-prefix=FORWARD

// head_dim 128, bf16: 64 query rows a step, 128 keys a block (two 64-key
// consumers), 2 stages. A row is 128 x 2 = 256 B.
//   k           128 x 256 = 32768               @ 0
//   v           32768                           @ 32768
//   q           2 slots x 64 x 256 = 32768      @ 65536
//   do          32768                           @ 98304
//   lse         2 x 64 x 4 = 512                @ 131072
//   delta       512                             @ 131584
//   ds          2 x 128 x 64 x 2 = 32768        @ 132096 (1024-aligned)
//   dq_staging  2 buffers x 64 x 128 x 4 = 65536, slots 2 consumers x 2 @ 164864
//   dq_turns    2 x 4 = 8                       @ 230400
//   barriers    (1 + 2 x 2 + 2 x 2 x 2) x 8 = 104 @ 230408
//   total       230512; + 1024 slack = 231536 <= 232448, so two staging buffers fit
// CHECK-LABEL: attn.kernel @hd128
// CHECK:         backward_smem = #attn.smem_plan<total = 230512, buffers = [
// CHECK-SAME:      #attn.buffer<"k", offset = 0, size = 32768, align = 1024, swizzle = 128>,
// CHECK-SAME:      #attn.buffer<"v", offset = 32768, size = 32768, align = 1024, swizzle = 128>,
// CHECK-SAME:      #attn.buffer<"q", offset = 65536, size = 32768, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:      #attn.buffer<"do", offset = 98304, size = 32768, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:      #attn.buffer<"lse", offset = 131072, size = 512, align = 16, swizzle = 0, slots = 2>,
// CHECK-SAME:      #attn.buffer<"delta", offset = 131584, size = 512, align = 16, swizzle = 0, slots = 2>,
// CHECK-SAME:      #attn.buffer<"ds", offset = 132096, size = 32768, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:      #attn.buffer<"dq_staging", offset = 164864, size = 65536, align = 16, swizzle = 0, slots = 4>,
// CHECK-SAME:      #attn.buffer<"dq_turns", offset = 230400, size = 8, align = 4, swizzle = 0, slots = 2>,
// CHECK-SAME:      #attn.buffer<"barriers", offset = 230408, size = 104, align = 8, swizzle = 0, slots = 13>]>
// CHECK-SAME:    backward_tile = #attn.tile<block_m = 64, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>
// OVERRIDE-LABEL: attn.kernel @hd128
// OVERRIDE:         backward_tile = #attn.tile<block_m = 64, block_n = 128, stages = 1,
// FORWARD-LABEL: attn.kernel @hd128
// FORWARD-NOT:   backward_tile
// FORWARD:       tile = #attn.tile<block_m = 128
attn.kernel @hd128 problem = #attn.problem<q_heads = 16, kv_heads = 4, head_dim = 128, element_type = bf16> mask = #attn.causal<bottom_right> normalizer = #attn.softmax

// head_dim 64, f16: 128 query rows a step (a consumer's dQ piece is 64
// rows). A row is 64 x 2 = 128 B.
//   k 16384 @ 0; v 16384 @ 16384; q 2 x 128 x 128 = 32768 @ 32768;
//   do 32768 @ 65536; lse 2 x 128 x 4 = 1024 @ 98304; delta 1024 @ 99328;
//   ds 2 x 128 x 128 x 2 = 65536 @ 100352;
//   two staging buffers (65536 @ 165888) would end at 231424, and with
//   turns, barriers and slack need 232560 > 232448: one buffer,
//   dq_staging 128 x 64 x 4 = 32768 @ 165888 (slots 2 consumers x 1);
//   dq_turns 4 @ 198656; barriers (1 + 4 + 4) x 8 = 72 @ 198664 (8-aligned);
//   total 198736.
// CHECK-LABEL: attn.kernel @hd64
// CHECK:         backward_smem = #attn.smem_plan<total = 198736, buffers = [
// CHECK-SAME:      #attn.buffer<"ds", offset = 100352, size = 65536, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:      #attn.buffer<"dq_staging", offset = 165888, size = 32768, align = 16, swizzle = 0, slots = 2>,
// CHECK-SAME:      #attn.buffer<"dq_turns", offset = 198656, size = 4, align = 4, swizzle = 0>,
// CHECK-SAME:      #attn.buffer<"barriers", offset = 198664, size = 72, align = 8, swizzle = 0, slots = 9>]>
// CHECK-SAME:    backward_tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2,
attn.kernel @hd64 problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 64, element_type = f16> mask = #attn.no_mask normalizer = #attn.softmax

// head_dim 128 without a mask: 80 query rows a step, dQ transposed (each
// consumer's piece is dQᵀ, 64 columns x 80 rows).
//   k 32768 @ 0; v 32768 @ 32768; q 2 x 80 x 256 = 40960 @ 65536;
//   do 40960 @ 106496; lse 2 x 80 x 4 = 640 @ 147456; delta 640 @ 148096;
//   ds 2 x 80 x 128 x 2 = 40960 @ 149504 (1024-aligned); turns and
//   barriers fill the gap before it; two staging buffers (81920) would end
//   past the limit: one, 80 x 128 x 4 = 40960 @ 190464 (slots 2 consumers
//   x 1); total 231424, + 1024 slack = 232448, the limit.
// CHECK-LABEL: attn.kernel @hd128_unmasked
// CHECK:         backward_smem = #attn.smem_plan<total = 231424, buffers = [
// CHECK-SAME:      #attn.buffer<"ds", offset = 149504, size = 40960, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:      #attn.buffer<"dq_staging", offset = 190464, size = 40960, align = 16, swizzle = 0, slots = 2>,
// CHECK-SAME:      #attn.buffer<"dq_turns", offset = 148736, size = 4, align = 4, swizzle = 0>,
// CHECK-SAME:    backward_tile = #attn.tile<block_m = 80, block_n = 128, stages = 2, consumer_warpgroups = 2,
attn.kernel @hd128_unmasked problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
