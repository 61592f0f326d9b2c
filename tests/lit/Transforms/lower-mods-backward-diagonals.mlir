// The backward's score function gives up its staged values as the
// forward's does (capture reads that depend on q and kv only through
// d = q - kv), without a shared-memory plan: functions of (b, h, d,
// captures...) named in `backward_score_mod_diagonal_fns`, whose values the
// score function takes after the captures. The vector-Jacobian product
// keeps its own reads.
// RUN: attn-opt --attn-differentiate-mods --attn-lower-mods %s | FileCheck %s

// T5's bucket: the bucket arithmetic and the read move to the diagonal
// function, with q replaced by d and kv by 0.
// CHECK-LABEL: emitc.func @attn_score_mod_full_0_diag_0(
// CHECK-SAME:      %{{[^:]*}}: !emitc.size_t, %[[H:[^:]*]]: !emitc.size_t, %[[D:[^:]*]]: !emitc.size_t, %[[BIAS:[^:]*]]: !emitc.opaque<"attn_dev::Capture<float, 2>">) -> f32
// CHECK:         call_opaque "logf"
// CHECK:         %[[VALUE:.*]] = call_opaque "attn_dev::loadCapture"(%[[BIAS]], %[[H]], %{{.*}})
// CHECK:         return %[[VALUE]] : f32
// CHECK-LABEL: emitc.func @attn_score_mod_full_0(
// CHECK-SAME:      %[[S:[^:]*]]: f32, %{{[^:]*}}: !emitc.size_t, %{{[^:]*}}: !emitc.size_t, %{{[^:]*}}: !emitc.size_t, %{{[^:]*}}: !emitc.size_t, %{{[^:]*}}: !emitc.opaque<"attn_dev::Capture<float, 2>">, %[[STAGED:[^:]*]]: f32) -> f32
// CHECK-NOT:     loadCapture
// CHECK-NOT:     logf
// CHECK:         %[[SUM:.*]] = add %[[S]], %[[STAGED]]
// CHECK-NEXT:    return %[[SUM]]
// CHECK-LABEL: emitc.func @attn_score_mod_vjp_0(
// CHECK:         call_opaque "logf"
// CHECK:         call_opaque "attn_dev::accumulateDiagonalGradient"
// CHECK-LABEL: attn.kernel @buckets
// CHECK:           backward_score_mod_diagonal_fns = [@attn_score_mod_full_0_diag_0], backward_score_mod_fn = @attn_score_mod_full_0
attn.kernel @buckets
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, 32], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %exact = arith.constant 16 : i32
      %last = arith.constant 31 : i32
      %exact_f = arith.constant 16.0 : f32
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

// Two reads of one table, at d and at -d (scaled: the scaling is a function
// of d too, and is staged with the read), are two values; a per-head read
// is not one (it does not depend on d) and stays in the score function.
// CHECK-LABEL: emitc.func @attn_score_mod_full_1_diag_0(
// CHECK:         call_opaque "attn_dev::loadCapture"
// CHECK-NOT:     mul
// CHECK:         return
// CHECK-LABEL: emitc.func @attn_score_mod_full_1_diag_1(
// CHECK:         call_opaque "attn_dev::loadCapture"
// CHECK:         mul
// CHECK:         return
// CHECK-LABEL: emitc.func @attn_score_mod_full_1(
// CHECK-SAME:      %[[FIRST:[^:]*]]: f32, %[[SECOND:[^:]*]]: f32) -> f32
// CHECK:         call_opaque "attn_dev::loadCapture"
// CHECK-DAG:     add %{{.*}}, %[[FIRST]]
// CHECK-DAG:     add %{{.*}}, %[[SECOND]]
// CHECK-LABEL: attn.kernel @mirrored
// CHECK:           backward_score_mod_diagonal_fns = [@attn_score_mod_full_1_diag_0, @attn_score_mod_full_1_diag_1]
attn.kernel @mirrored
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?]>, #attn.capture<"slopes", f32, [q_heads]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>,
         %slopes: memref<?xf32>):
      %offset = arith.constant 8191 : index
      %half = arith.constant 0.5 : f32
      %shifted = arith.addi %q, %offset : index
      %column = arith.subi %shifted, %kv : index
      %mirrored_shifted = arith.addi %kv, %offset : index
      %mirrored = arith.subi %mirrored_shifted, %q : index
      %value = memref.load %bias[%h, %column] : memref<?x?xf32>
      %other = memref.load %bias[%h, %mirrored] : memref<?x?xf32>
      %scaled = arith.mulf %other, %half : f32
      %slope = memref.load %slopes[%h] : memref<?xf32>
      %first = arith.addf %s, %value : f32
      %second = arith.addf %first, %scaled : f32
      %third = arith.addf %second, %slope : f32
      attn.yield %third : f32
    }

// Without a capture read, nothing is staged.
// CHECK-LABEL: attn.kernel @softcap
// CHECK-NOT:       backward_score_mod_diagonal_fns
// CHECK:           backward_score_mod_fn
attn.kernel @softcap
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %cap = arith.constant 20.0 : f32
      %inverse = arith.constant 0.05 : f32
      %scaled = arith.mulf %s, %inverse : f32
      %squashed = math.tanh %scaled : f32
      %capped = arith.mulf %squashed, %cap : f32
      attn.yield %capped : f32
    }
