// Retention (RetNet): causal linear attention whose weights decay by
// gamma_h per token of distance, with the multi-scale default
// gamma_h = 1 - 2^(-5-h) over 16 heads, head dim 128, bf16. The chunkwise
// kernel carries a 128 x 128 fp32 state per head; the module also holds
// the one-token recurrent step.
attn.kernel @retention_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.retention
