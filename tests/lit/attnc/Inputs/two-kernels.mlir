attn.kernel @first
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
attn.kernel @second
    problem = #attn.problem<q_heads = 4, kv_heads = 2, head_dim = 128, element_type = f16>
    mask = #attn.causal<top_left>
    normalizer = #attn.softmax
