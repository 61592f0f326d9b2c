// Bidirectional (unmasked) multi-head attention, head dim 64, fp16, with an
// explicit softmax scale.
attn.kernel @full_hd64_f16
    problem = #attn.problem<q_heads = 32, kv_heads = 32, head_dim = 64, element_type = f16, scale = 0.125>
    mask = #attn.no_mask
    normalizer = #attn.softmax
