// T5's bucketed relative-position bias, causal: score + bias[h, bucket(q - kv)]
// over 32 buckets, exact below 16 positions, then logarithmic up to 128 (and
// the last bucket beyond). The table [q_heads, 32] is learnable (`grad`).
attn.kernel @t5_bias_hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, 32], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %exact = arith.constant 16 : i32
      %last = arith.constant 31 : i32
      %exact_f = arith.constant 16.0 : f32
      // 16 buckets over log(128 / 16): 16 / log(8).
      %per_log = arith.constant 7.69442439 : f32
      %distance = arith.subi %q, %kv : index
      %distance_i = arith.index_cast %distance : index to i32
      %is_exact = arith.cmpi slt, %distance_i, %exact : i32
      %distance_f = arith.sitofp %distance_i : i32 to f32
      %ratio = arith.divf %distance_f, %exact_f : f32
      %log_ratio = math.log %ratio : f32
      %offset_f = arith.mulf %log_ratio, %per_log : f32
      %offset = arith.fptosi %offset_f : f32 to i32
      %far = arith.addi %offset, %exact : i32
      %far_capped = arith.minsi %far, %last : i32
      %bucket_i = arith.select %is_exact, %distance_i, %far_capped : i32
      %bucket = arith.index_cast %bucket_i : i32 to index
      %value = memref.load %bias[%h, %bucket] : memref<?x?xf32>
      %biased = arith.addf %s, %value : f32
      attn.yield %biased : f32
    }
