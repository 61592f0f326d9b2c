// Printing is stable: print, re-parse, print again; the generic form
// (properties) parses back to the same custom form.
// RUN: attn-opt %s | FileCheck %s
// RUN: attn-opt %s | attn-opt | FileCheck %s
// RUN: attn-opt -mlir-print-op-generic %s | attn-opt | FileCheck %s

// CHECK-LABEL: attn.kernel @causal_hd128
// CHECK-NEXT:      problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16, scale = 0.0883883461>
// CHECK-NEXT:      mask = #attn.causal<bottom_right>
// CHECK-NEXT:      normalizer = #attn.softmax
// CHECK-NOT:       attributes
// CHECK-NOT:       mask_mod
attn.kernel @causal_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16, scale = 0.0883883461>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax

// Keys of #attn.problem may come in any order; `scale` is optional (absent
// means 1/sqrt(head_dim)) and is then not printed.
// CHECK-LABEL: attn.kernel @no_mask_f16
// CHECK-NEXT:      problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 64, element_type = f16>
// CHECK-NEXT:      mask = #attn.no_mask
attn.kernel @no_mask_f16
    problem = #attn.problem<head_dim = 64, element_type = f16, q_heads = 8, kv_heads = 8>
    mask = #attn.no_mask
    normalizer = #attn.softmax

// CHECK-LABEL: attn.kernel @top_left
// CHECK-NEXT:      problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 256, element_type = bf16, scale = 1.0>
// CHECK-NEXT:      mask = #attn.causal<top_left>
attn.kernel @top_left
    problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 256, element_type = bf16, scale = 1.0>
    mask = #attn.causal<top_left>
    normalizer = #attn.softmax

// The default alignment (bottom_right) of a sliding window is elided.
// CHECK-LABEL: attn.kernel @window_default
// CHECK:           mask = #attn.sliding_window<left = 256, right = 0>
attn.kernel @window_default
    problem = #attn.problem<q_heads = 4, kv_heads = 1, head_dim = 128, element_type = bf16>
    mask = #attn.sliding_window<left = 256, right = 0, align = bottom_right>
    normalizer = #attn.softmax

// CHECK-LABEL: attn.kernel @window_top_left
// CHECK:           mask = #attn.sliding_window<left = 128, right = 64, align = top_left>
attn.kernel @window_top_left
    problem = #attn.problem<q_heads = 4, kv_heads = 1, head_dim = 128, element_type = bf16>
    mask = #attn.sliding_window<left = 128, right = 64, align = top_left>
    normalizer = #attn.softmax

// Plans live in the attribute dictionary; `slots` (1) and `aliases` ("")
// are elided at their defaults.
// CHECK-LABEL: attn.kernel @planned
// CHECK:           normalizer = #attn.softmax
// CHECK-NEXT:      attributes {smem = #attn.smem_plan<total = 163896, buffers = [
// CHECK-SAME:        #attn.buffer<"q", offset = 0, size = 32768, align = 1024, swizzle = 128>,
// CHECK-SAME:        #attn.buffer<"k", offset = 32768, size = 65536, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:        #attn.buffer<"o_staging", offset = 0, size = 32768, align = 1024, swizzle = 128, aliases = "q">,
// CHECK-SAME:        #attn.buffer<"barriers", offset = 163840, size = 56, align = 8, swizzle = 0, slots = 7>]>,
// CHECK-SAME:      tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
attn.kernel @planned
    problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
    attributes {
      tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>,
      smem = #attn.smem_plan<total = 163896, buffers = [
        #attn.buffer<"q", offset = 0, size = 32768, align = 1024, swizzle = 128, slots = 1>,
        #attn.buffer<"k", offset = 32768, size = 65536, align = 1024, swizzle = 128, slots = 2>,
        #attn.buffer<"o_staging", offset = 0, size = 32768, align = 1024, swizzle = 128, aliases = "q">,
        #attn.buffer<"barriers", offset = 163840, size = 56, align = 8, swizzle = 0, slots = 7>]>
    }

// User regions are printed only when present, with their block arguments.
// CHECK-LABEL: attn.kernel @user_regions
// CHECK:           normalizer = #attn.softmax
// CHECK-NEXT:      mask_mod {
// CHECK-NEXT:      ^bb0(%[[B:.*]]: index, %[[H:.*]]: index, %[[Q:.*]]: index, %[[KV:.*]]: index):
// CHECK-NEXT:        %[[KEEP:.*]] = arith.cmpi ule, %[[KV]], %[[Q]] : index
// CHECK-NEXT:        attn.yield %[[KEEP]] : i1
// CHECK-NEXT:      }
// CHECK-NEXT:      score_mod {
// CHECK-NEXT:      ^bb0(%[[S:.*]]: f32, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index):
// CHECK-NEXT:        %[[T:.*]] = math.tanh %[[S]] : f32
// CHECK-NEXT:        attn.yield %[[T]] : f32
// CHECK-NEXT:      }
attn.kernel @user_regions
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %keep = arith.cmpi ule, %kv, %q : index
      attn.yield %keep : i1
    }
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %t = math.tanh %s : f32
      attn.yield %t : f32
    }

// Only one region may be given.
// CHECK-LABEL: attn.kernel @score_only
// CHECK-NOT:       mask_mod
// CHECK:           score_mod {
attn.kernel @score_only
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 64, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      attn.yield %s : f32
    }
