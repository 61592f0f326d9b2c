// Prefix-LM: every query sees the first 2048 keys (the prefix, attended
// bidirectionally) and, beyond them, the keys up to itself (causal).
// attn-classify-blocks proves the mask affine, so fully kept tiles skip the
// per-element test and tiles of no kept pair are never loaded.
attn.kernel @prefix_lm_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %prefix = arith.constant 2048 : index
      %in_prefix = arith.cmpi slt, %kv, %prefix : index
      %causal = arith.cmpi sle, %kv, %q : index
      %keep = arith.ori %in_prefix, %causal : i1
      attn.yield %keep : i1
    }
