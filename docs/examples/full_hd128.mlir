// Bidirectional (unmasked) multi-head attention, head dim 128, bf16: the
// shape of the benchmarks' head-dim-128 non-causal row (16 heads x 128 =
// 2048) and of the Nsight Compute profile in docs/benchmarks.md.
attn.kernel @full_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
