// Tanh soft-capping of the scores (cap 50), causal: 50 * tanh(s / 50).
attn.kernel @softcap_causal_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %cap = arith.constant 50.0 : f32
      %inverse = arith.constant 0.02 : f32
      %scaled = arith.mulf %s, %inverse : f32
      %squashed = math.tanh %scaled : f32
      %capped = arith.mulf %squashed, %cap : f32
      attn.yield %capped : f32
    }
