// Document masking for packed documents: causal attention within each
// document, with per-token document ids [batch, seqlen] passed at launch.
// The mask reads a buffer, so tiles are decided per element (no tile is
// proved empty at compile time).
attn.kernel @document_mask_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.softmax
    captures = [#attn.capture<"document", i32, [batch, seqlen_k]>]
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index, %document: memref<?x?xi32>):
      %dq = memref.load %document[%b, %q] : memref<?x?xi32>
      %dk = memref.load %document[%b, %kv] : memref<?x?xi32>
      %same = arith.cmpi eq, %dq, %dk : i32
      attn.yield %same : i1
    }
