// Normalized linear attention (the input of linear-backward.mlir).
attn.kernel @normalized
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.linear<feature_map = elu_plus_one, normalize = true>
