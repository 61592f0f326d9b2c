attn.kernel @k
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.causal<sideways>
    normalizer = #attn.softmax
