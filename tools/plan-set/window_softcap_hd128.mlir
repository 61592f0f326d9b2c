// A sliding window of 2048 keys with soft-capping at 30 (Gemma 2's local
// layers): a window and a score_mod together.
attn.kernel @window_softcap_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 8, head_dim = 128, element_type = bf16>
    mask = #attn.sliding_window<left = 2047, right = 0>
    normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %cap = arith.constant 30.0 : f32
      %scaled = arith.divf %s, %cap : f32
      %squashed = math.tanh %scaled : f32
      %capped = arith.mulf %squashed, %cap : f32
      attn.yield %capped : f32
    }
