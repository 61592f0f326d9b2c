// Causal sliding-window attention: each query sees itself and the 1023 keys
// before it (key rows q-1023 .. q, aligned bottom-right).
attn.kernel @sliding_window_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.sliding_window<left = 1023, right = 0>
    normalizer = #attn.softmax
