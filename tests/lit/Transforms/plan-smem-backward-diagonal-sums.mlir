// A backward that adds a learnable capture's gradient by diagonal
// (attn-differentiate-mods marks the addition attn.per_diagonal) gets a
// `diagonal_sums` buffer from attn-plan-smem where it fits, ahead of a
// second dQ staging buffer; a backward without one, or whose plan has no
// room, does not.
// RUN: attn-opt --attn-differentiate-mods --attn-tile=backward=true --attn-plan-smem %s | FileCheck %s

// head_dim 128: as tile-backward.mlir's @hd128 up to ds (ends at 164864).
//   dq_staging  one buffer: 64 x 128 x 4 = 32768, slots 2 consumers @ 164864
//   dq_turns    4                                 @ 197632
//   diagonal_sums  two steps' rows of 8 warps x (64 + 16) floats = 5120,
//               and a float per consumer thread, 256 x 4 = 1024: 6144 @ 197648
//   barriers    (1 + 2 x 2 + 2 x 2 x 1) x 8 = 72  @ 203792
//   total       203864. Two staging buffers would end at 230400: with the
//               sums they would not fit the 232448 bytes.
// CHECK-LABEL: attn.kernel @relpos_learned
// CHECK:         backward_smem = #attn.smem_plan<total = 203864, buffers = [
// CHECK-SAME:      #attn.buffer<"dq_staging", offset = 164864, size = 32768, align = 16, swizzle = 0, slots = 2>,
// CHECK-SAME:      #attn.buffer<"dq_turns", offset = 197632, size = 4, align = 4, swizzle = 0>,
// CHECK-SAME:      #attn.buffer<"diagonal_sums", offset = 197648, size = 6144, align = 16, swizzle = 0>,
// CHECK-SAME:      #attn.buffer<"barriers", offset = 203792, size = 72, align = 8, swizzle = 0, slots = 9>]>
attn.kernel @relpos_learned
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %offset = arith.constant 8191 : index
      %shifted = arith.addi %q, %offset : index
      %column = arith.subi %shifted, %kv : index
      %value = memref.load %bias[%h, %column] : memref<?x?xf32>
      %biased = arith.addf %s, %value : f32
      attn.yield %biased : f32
    }

// The same table, not learned: nothing to sum, two staging buffers.
// CHECK-LABEL: attn.kernel @relpos_fixed
// CHECK-NOT:     "diagonal_sums"
// CHECK:         #attn.buffer<"dq_staging", offset = 164864, size = 65536, align = 16, swizzle = 0, slots = 4>,
// CHECK-NOT:     "diagonal_sums"
// CHECK-SAME:    backward_tile
attn.kernel @relpos_fixed
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %offset = arith.constant 8191 : index
      %shifted = arith.addi %q, %offset : index
      %column = arith.subi %shifted, %kv : index
      %value = memref.load %bias[%h, %column] : memref<?x?xf32>
      %biased = arith.addf %s, %value : f32
      attn.yield %biased : f32
    }

// head_dim 256: two consumers split a 64-key tile's columns, and one staging
// buffer already fills shared memory: no room for the sums.
// CHECK-LABEL: attn.kernel @relpos_learned_hd256
// CHECK-NOT:     "diagonal_sums"
// CHECK:         backward_tile = #attn.tile<block_m = 64, block_n = 64,
attn.kernel @relpos_learned_hd256
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 256, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %offset = arith.constant 8191 : index
      %shifted = arith.addi %q, %offset : index
      %column = arith.subi %shifted, %kv : index
      %value = memref.load %bias[%h, %column] : memref<?x?xf32>
      %biased = arith.addf %s, %value : f32
      attn.yield %biased : f32
    }
