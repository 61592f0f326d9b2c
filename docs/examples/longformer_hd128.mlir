// Longformer: a band of 511 keys centred on the query (|q - kv| < 256) plus
// 64 global tokens that see and are seen by every position.
attn.kernel @longformer_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %half_window = arith.constant 256 : index
      %global = arith.constant 64 : index
      %upper = arith.addi %q, %half_window : index
      %lower = arith.addi %kv, %half_window : index
      %below = arith.cmpi slt, %kv, %upper : index
      %above = arith.cmpi slt, %q, %lower : index
      %band = arith.andi %below, %above : i1
      %global_q = arith.cmpi slt, %q, %global : index
      %global_kv = arith.cmpi slt, %kv, %global : index
      %global_any = arith.ori %global_q, %global_kv : i1
      %keep = arith.ori %band, %global_any : i1
      attn.yield %keep : i1
    }
