// attn-differentiate-mods: an operation of several results varies over the
// pairs as its most varying operand (attn-lower-mods refuses
// arith.addui_extended later; the marks come first).
// RUN: attn-opt --attn-differentiate-mods %s | FileCheck %s

// The sum of addui_extended over the query is a per-pair element.
// CHECK-LABEL: func.func @attn_score_mod_vjp_0(
// CHECK:         memref.atomic_rmw addf %{{[^ ]*}}, %{{[^ ]*}}[%{{[^ ]*}}, %{{[^ ]*}}] : (f32
attn.kernel @extended
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, 32], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %qi = arith.index_cast %q : index to i32
      %one = arith.constant 1 : i32
      %sum, %overflow = arith.addui_extended %qi, %one : i32, i1
      %column = arith.index_cast %sum : i32 to index
      %v = memref.load %bias[%h, %column] : memref<?x?xf32>
      %r = arith.addf %s, %v : f32
      attn.yield %r : f32
    }

