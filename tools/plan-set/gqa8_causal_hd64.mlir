// Causal attention at head dim 64 with eight query heads per KV head.
attn.kernel @gqa8_causal_hd64
    problem = #attn.problem<q_heads = 32, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
