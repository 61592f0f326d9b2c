// ALiBi with captured slopes at head dim 64, causal, no GQA.
attn.kernel @alibi_hd64
    problem = #attn.problem<q_heads = 32, kv_heads = 32, head_dim = 64, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
    captures = [#attn.capture<"slopes", f32, [q_heads]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %slopes: memref<?xf32>):
      %slope = memref.load %slopes[%h] : memref<?xf32>
      %qi = arith.index_cast %q : index to i32
      %kvi = arith.index_cast %kv : index to i32
      %qf = arith.sitofp %qi : i32 to f32
      %kvf = arith.sitofp %kvi : i32 to f32
      %distance_f = arith.subf %qf, %kvf : f32
      %bias = arith.mulf %slope, %distance_f : f32
      %biased = arith.subf %s, %bias : f32
      attn.yield %biased : f32
    }
