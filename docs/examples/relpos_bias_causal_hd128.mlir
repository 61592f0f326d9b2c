// Relative-position bias from a learned table, causal: score + bias[h, q - kv
// + offset], with the table [q_heads, ?] passed at launch and the offset
// (the table's zero distance) fixed at 8191.
attn.kernel @relpos_bias_causal_hd128
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
