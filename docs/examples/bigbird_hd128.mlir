// BigBird: a sliding window (|q - kv| < 192), 64 global tokens, and random
// 64 x 64 blocks chosen by the caller (a seeded 0/1 table
// [seqlen_q / 64, seqlen_k / 64] passed at launch).
attn.kernel @bigbird_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    captures = [#attn.capture<"random_blocks", i32, [?, ?]>]
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index, %random_blocks: memref<?x?xi32>):
      %half_window = arith.constant 192 : index
      %global = arith.constant 64 : index
      %block = arith.constant 64 : index
      %zero = arith.constant 0 : i32
      %upper = arith.addi %q, %half_window : index
      %lower = arith.addi %kv, %half_window : index
      %below = arith.cmpi slt, %kv, %upper : index
      %above = arith.cmpi slt, %q, %lower : index
      %window = arith.andi %below, %above : i1
      %global_q = arith.cmpi slt, %q, %global : index
      %global_kv = arith.cmpi slt, %kv, %global : index
      %global_any = arith.ori %global_q, %global_kv : i1
      %q_block = arith.divui %q, %block : index
      %kv_block = arith.divui %kv, %block : index
      %chosen = memref.load %random_blocks[%q_block, %kv_block] : memref<?x?xi32>
      %random = arith.cmpi ne, %chosen, %zero : i32
      %structured = arith.ori %window, %global_any : i1
      %keep = arith.ori %structured, %random : i1
      attn.yield %keep : i1
    }
