// Captured buffers and user regions print stably and re-parse.
// RUN: attn-opt %s | FileCheck %s
// RUN: attn-opt %s | attn-opt | FileCheck %s
// RUN: attn-opt -mlir-print-op-generic %s | attn-opt | FileCheck %s

// CHECK-LABEL: attn.kernel @document
// CHECK-NEXT:      problem =
// CHECK-NEXT:      mask = #attn.causal<top_left>
// CHECK-NEXT:      normalizer = #attn.softmax
// CHECK-NEXT:      captures = [#attn.capture<"document", i32, [batch, seqlen_k]>, #attn.capture<"bias", f32, [q_heads, ?, 3]>]
// CHECK-NEXT:      mask_mod {
// CHECK-NEXT:      ^bb0(%{{.*}}: index, %{{.*}}: index, %[[Q:.*]]: index, %{{.*}}: index, %[[DOC:.*]]: memref<?x?xi32>, %{{.*}}: memref<?x?x?xf32>):
// CHECK:             memref.load %[[DOC]][%{{.*}}, %[[Q]]] : memref<?x?xi32>
attn.kernel @document
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.softmax
    captures = [#attn.capture<"document", i32, [batch, seqlen_k]>,
                #attn.capture<"bias", f32, [q_heads, ?, 3]>]
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index, %doc: memref<?x?xi32>, %bias: memref<?x?x?xf32>):
      %dq = memref.load %doc[%b, %q] : memref<?x?xi32>
      %dk = memref.load %doc[%b, %kv] : memref<?x?xi32>
      %same = arith.cmpi eq, %dq, %dk : i32
      attn.yield %same : i1
    }
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %doc: memref<?x?xi32>, %bias: memref<?x?x?xf32>):
      %c0 = arith.constant 0 : index
      %value = memref.load %bias[%h, %q, %c0] : memref<?x?x?xf32>
      %r = arith.addf %s, %value : f32
      attn.yield %r : f32
    }

// The formula attn-classify-blocks records, printed with zero coefficients
// omitted.
// CHECK-LABEL: attn.kernel @formula
// CHECK: mask_tile_formula = #attn.tile_formula<any_of, [#attn.affine_ge<q = 1, kv = -1>, #attn.affine_ge<kv = -1, c = 2047>]>
attn.kernel @formula
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {mask_tile_formula = #attn.tile_formula<any_of, [#attn.affine_ge<q = 1, kv = -1>, #attn.affine_ge<kv = -1, c = 2047>]>}

// Floor-quotient inequalities print with defaults omitted.
// CHECK-LABEL: attn.kernel @quotients
// CHECK: mask_tile_formula = #attn.tile_formula<all_of, [#attn.div_sum_ge<c = -1, terms = [#attn.floordiv<coef = 2, q = 1, c = 3, divisor = 64>]>]>
attn.kernel @quotients
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {mask_tile_formula = #attn.tile_formula<all_of, [#attn.div_sum_ge<c = -1, terms = [#attn.floordiv<coef = 2, q = 1, c = 3, divisor = 64>]>]>}
