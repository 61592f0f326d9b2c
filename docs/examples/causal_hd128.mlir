// Causal grouped-query attention: 16 query heads sharing 4 key/value heads,
// head dim 128, bf16. The default scale 1/sqrt(128) applies.
attn.kernel @causal_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 4, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
