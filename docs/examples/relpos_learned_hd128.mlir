// A learned relative-position bias, causal: score + bias[h, q - kv + 8191].
// The table [q_heads, ?] is a learnable capture (`grad`): the backward adds
// each kept pair's dS to the table entry it read.
attn.kernel @relpos_learned_hd128
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
