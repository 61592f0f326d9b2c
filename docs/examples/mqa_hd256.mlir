// Multi-query attention: 8 query heads share one key/value head; head dim
// 256, bf16, causal aligned top-left (the diagonal starts at the first key).
attn.kernel @mqa_hd256
    problem = #attn.problem<q_heads = 8, kv_heads = 1, head_dim = 256, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.softmax
