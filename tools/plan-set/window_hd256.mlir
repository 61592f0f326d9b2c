// A sliding window of 4096 keys at head dim 256, two query heads per KV head.
attn.kernel @window_hd256
    problem = #attn.problem<q_heads = 8, kv_heads = 4, head_dim = 256, element_type = bf16>
    mask = #attn.sliding_window<left = 4095, right = 0>
    normalizer = #attn.softmax
