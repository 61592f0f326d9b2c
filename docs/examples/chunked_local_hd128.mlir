// Chunked local attention: the sequence is cut into chunks of 1024 positions
// and each query sees the keys of its own chunk up to itself.
attn.kernel @chunked_local_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %chunk = arith.constant 1024 : index
      %q_chunk = arith.divui %q, %chunk : index
      %kv_chunk = arith.divui %kv, %chunk : index
      %same = arith.cmpi eq, %q_chunk, %kv_chunk : index
      attn.yield %same : i1
    }
