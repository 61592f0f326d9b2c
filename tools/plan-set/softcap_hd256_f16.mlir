// Soft-capping at 50 without a mask, head dim 256 in f16 (f16 keeps the
// softmax's running maximum).
attn.kernel @softcap_hd256_f16
    problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 256, element_type = f16>
    mask = #attn.no_mask
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
