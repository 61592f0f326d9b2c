// Linear attention with the elu+1 feature map, normalized by the running
// key sum (O[i] = φ(q_i)ᵀ S_i / φ(q_i)·z_i), causal, grouped-query: 32 query
// heads over 8 key/value heads, head dim 64, bf16.
attn.kernel @linear_elu_hd64
    problem = #attn.problem<q_heads = 32, kv_heads = 8, head_dim = 64, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.linear<feature_map = elu_plus_one, normalize = true>
