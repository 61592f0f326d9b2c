// Gated retention (the scalar gate of GLA and Griffin's recurrence): the
// decay between tokens j and i is exp(g[j+1] + ... + g[i]), with g a
// per-token, per-head log-decay (<= 0) passed at launch as a
// [batch, seqlen, q_heads] fp32 tensor.
attn.kernel @gated_retention_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.retention<gated>
