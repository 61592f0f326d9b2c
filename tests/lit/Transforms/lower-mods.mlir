// attn-lower-mods moves the user regions into EmitC device functions with
// generated names; captures become attn_dev::Capture values read through
// attn_dev::loadCapture, math.tanh the hardware tanh. What a region computes
// without the key or the score (here the query's document and the head's
// slope) moves to row functions of (b, h, q, captures...), and the region
// function takes their values last; kv as f32 follows kv.
// RUN: attn-opt --attn-lower-mods %s | FileCheck %s

// CHECK-LABEL: emitc.func @attn_mask_mod_0_row_0(
// CHECK-SAME:      %[[B:.*]]: !emitc.size_t, %{{.*}}: !emitc.size_t, %[[Q:.*]]: !emitc.size_t, %[[DOC:.*]]: !emitc.opaque<"attn_dev::Capture<int, 2>">, %{{.*}}: !emitc.opaque<"attn_dev::Capture<float, 1>">) -> i32
// CHECK-SAME:      specifiers = ["__device__", "__forceinline__"]
// CHECK-NEXT:    %[[DQ:.*]] = call_opaque "attn_dev::loadCapture"(%[[DOC]], %[[B]], %[[Q]])
// CHECK-NEXT:    return %[[DQ]] : i32
// CHECK-LABEL: emitc.func @attn_mask_mod_0(
// CHECK-SAME:      %[[B:.*]]: !emitc.size_t, %{{.*}}: !emitc.size_t, %{{.*}}: !emitc.size_t, %[[KV:.*]]: !emitc.size_t, %{{.*}}: f32, %[[DOC:.*]]: !emitc.opaque<"attn_dev::Capture<int, 2>">, %{{.*}}: !emitc.opaque<"attn_dev::Capture<float, 1>">, %[[ROW:.*]]: i32) -> i1
// CHECK-SAME:      specifiers = ["__device__", "__forceinline__"]
// CHECK-NEXT:    %[[DK:.*]] = call_opaque "attn_dev::loadCapture"(%[[DOC]], %[[B]], %[[KV]]) : (!emitc.opaque<"attn_dev::Capture<int, 2>">, !emitc.size_t, !emitc.size_t) -> i32
// CHECK-NEXT:    %[[SAME:.*]] = cmp eq, %[[ROW]], %[[DK]]
// CHECK-NEXT:    return %[[SAME]]
// CHECK-LABEL: emitc.func @attn_score_mod_0_row_0(
// CHECK:         call_opaque "attn_dev::loadCapture"(%{{.*}}, %{{.*}}) : (!emitc.opaque<"attn_dev::Capture<float, 1>">, !emitc.size_t) -> f32
// CHECK-LABEL: emitc.func @attn_score_mod_0(
// CHECK-SAME:      %{{.*}}: f32, %{{.*}}: !emitc.size_t, %{{.*}}: !emitc.size_t, %{{.*}}: !emitc.size_t, %{{.*}}: !emitc.size_t, %{{.*}}: f32, %{{.*}}, %{{.*}}, %[[SLOPE:.*]]: f32) -> f32
// CHECK-NOT:     loadCapture
// CHECK:         call_opaque "attn_dev::fastTanh"
// CHECK:         call_opaque "expf"
// CHECK:         mul %{{.*}}, %[[SLOPE]]
// CHECK-LABEL: attn.kernel @doc_softcap
// CHECK:         attributes {mask_mod_fn = @attn_mask_mod_0, mask_mod_row_fns = [@attn_mask_mod_0_row_0], score_mod_fn = @attn_score_mod_0, score_mod_row_fns = [@attn_score_mod_0_row_0]}
// CHECK-NOT:     mask_mod {
// CHECK-NOT:     score_mod {
attn.kernel @doc_softcap
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"document", i32, [batch, seqlen_k]>, #attn.capture<"slopes", f32, [q_heads]>]
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index, %doc: memref<?x?xi32>, %slopes: memref<?xf32>):
      %dq = memref.load %doc[%b, %q] : memref<?x?xi32>
      %dk = memref.load %doc[%b, %kv] : memref<?x?xi32>
      %same = arith.cmpi eq, %dq, %dk : i32
      attn.yield %same : i1
    }
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %doc: memref<?x?xi32>, %slopes: memref<?xf32>):
      %slope = memref.load %slopes[%h] : memref<?xf32>
      %t = math.tanh %s : f32
      %e = math.exp %t : f32
      %r = arith.mulf %e, %slope : f32
      attn.yield %r : f32
    }

// A second kernel gets the next number; a symbol already taken is skipped.
// CHECK-LABEL: emitc.func @attn_mask_mod_2(
// CHECK-LABEL: attn.kernel @second
// CHECK:         mask_mod_fn = @attn_mask_mod_2
func.func private @attn_mask_mod_1()
attn.kernel @second
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %c = arith.constant 64 : index
      %m = arith.divui %kv, %c : index
      %n = arith.maxsi %m, %q : index
      %keep = arith.cmpi ne, %n, %q : index
      attn.yield %keep : i1
    }

// Rounded signed quotients call the device helpers on signed operands (C's
// division truncates); remf is fmodf. q's quotient is a row value, in 32
// bits (lower-mods-narrowing.mlir has the 64-bit form).
// CHECK-LABEL: emitc.func @attn_mask_mod_3_row_0(
// CHECK:         call_opaque "attn_dev::floorDiv"(%{{.*}}, %{{.*}}) : (i32, i32) -> i32
// CHECK-LABEL: emitc.func @attn_mask_mod_3(
// CHECK:         call_opaque "attn_dev::ceilDiv"(%{{.*}}, %{{.*}}) : (i32, i32) -> i32
// CHECK-LABEL: emitc.func @attn_score_mod_{{[0-9]+}}(
// CHECK:         call_opaque "fmodf"
attn.kernel @rounded
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %c = arith.constant 64 : index
      %fq = arith.floordivsi %q, %c : index
      %q32 = arith.index_cast %kv : index to i32
      %c32 = arith.constant -3 : i32
      %cq = arith.ceildivsi %q32, %c32 : i32
      %cq_index = arith.index_cast %cq : i32 to index
      %keep = arith.cmpi sle, %fq, %cq_index : index
      attn.yield %keep : i1
    }
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %c = arith.constant 3.0 : f32
      %r = arith.remf %s, %c : f32
      attn.yield %r : f32
    }

// ALiBi's bias, s - slope * (q - kv), is s + slope * kv - slope * q: the
// last term moves every score of a row alike, so it leaves the region for
// a row offset function that the kernel adds to the log-sum-exp. What
// stays is kv times a row value, so the kernel may pass kv relative to an
// origin near the diagonal (score_mod_key_relative), and the offset adds
// slope * origin: -slope * q + slope * origin, in f64 (the two cancel).
// The slope is a row value; the conversion of kv becomes the f32 argument
// after kv, so a key costs one multiply-add.
// CHECK-LABEL: emitc.func @attn_score_mod_3_offset_0(
// CHECK-SAME:      %{{.*}}: !emitc.size_t, %[[H:[^:]*]]: !emitc.size_t, %[[Q:[^:]*]]: !emitc.size_t, %[[SLOPES:[^:]*]]: !emitc.opaque<"attn_dev::Capture<float, 1>">, %[[ORIGIN:[^:]*]]: i32) -> f32
// CHECK-NEXT:    %[[SLOPE:.*]] = call_opaque "attn_dev::loadCapture"(%[[SLOPES]], %[[H]])
// CHECK-NEXT:    %[[SLOPE64:.*]] = cast %[[SLOPE]] : f32 to f64
// CHECK:         %[[QF:.*]] = cast %{{.*}} : i32 to f64
// CHECK-NEXT:    %[[ORIGIN64:.*]] = cast %[[ORIGIN]] : i32 to f64
// CHECK-NEXT:    %[[BIAS:.*]] = mul %[[SLOPE64]], %[[QF]] : (f64, f64) -> f64
// CHECK-NEXT:    %[[NEG:.*]] = unary_minus %[[BIAS]]
// CHECK-NEXT:    %[[AT_ORIGIN:.*]] = mul %[[SLOPE64]], %[[ORIGIN64]] : (f64, f64) -> f64
// CHECK-NEXT:    %[[SUM:.*]] = add %[[NEG]], %[[AT_ORIGIN]]
// CHECK-NEXT:    %[[NARROW:.*]] = cast %[[SUM]] : f64 to f32
// CHECK-NEXT:    return %[[NARROW]]
// CHECK-LABEL: emitc.func @attn_score_mod_3_row_0(
// CHECK:         call_opaque "attn_dev::loadCapture"
// CHECK-LABEL: emitc.func @attn_score_mod_3(
// CHECK-SAME:      %[[S:[^:]*]]: f32, %{{.*}}: !emitc.size_t, %{{.*}}: !emitc.size_t, %{{.*}}: !emitc.size_t, %{{.*}}: !emitc.size_t, %[[KVF:[^:]*]]: f32, %{{.*}}: !emitc.opaque<"attn_dev::Capture<float, 1>">, %[[SLOPE:[^:]*]]: f32) -> f32
// CHECK-NEXT:    %[[BIAS:.*]] = mul %[[SLOPE]], %[[KVF]]
// CHECK-NEXT:    %[[R:.*]] = add %[[S]], %[[BIAS]]
// CHECK-NEXT:    return %[[R]]
// CHECK-LABEL: attn.kernel @alibi
// CHECK:         score_mod_fn = @attn_score_mod_3, score_mod_key_relative, score_mod_row_fns = [@attn_score_mod_3_row_0], score_mod_row_offset_fn = @attn_score_mod_3_offset_0
attn.kernel @alibi
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    captures = [#attn.capture<"slopes", f32, [q_heads]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %slopes: memref<?xf32>):
      %slope = memref.load %slopes[%h] : memref<?xf32>
      %qi = arith.index_cast %q : index to i32
      %kvi = arith.index_cast %kv : index to i32
      %qf = arith.sitofp %qi : i32 to f32
      %kvf = arith.sitofp %kvi : i32 to f32
      %d = arith.subf %qf, %kvf : f32
      %bias = arith.mulf %slope, %d : f32
      %r = arith.subf %s, %bias : f32
      attn.yield %r : f32
    }

// Nothing depends on the row alone: no row functions; kv narrowed to i16
// before the conversion is not kv as f32, so it stays a conversion.
// CHECK-LABEL: emitc.func @attn_score_mod_4(
// CHECK:         cast %{{.*}} : !emitc.ptrdiff_t to i16
// CHECK-LABEL: attn.kernel @narrow
// CHECK-NOT:     score_mod_row_fns
attn.kernel @narrow
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %kvi = arith.index_cast %kv : index to i16
      %kvf = arith.sitofp %kvi : i16 to f32
      %r = arith.addf %s, %kvf : f32
      attn.yield %r : f32
    }

// Soft-capping, cap * tanh(s / cap): the kernel multiplies the raw score by
// the inner constant with the softmax scale, and the softmax folds the cap
// into its exponent; the region function keeps only the tanh.
// CHECK-LABEL: emitc.func @attn_score_mod_5(
// CHECK-SAME:      %[[S:[^:]*]]: f32,
// CHECK-NEXT:    %[[T:.*]] = call_opaque "attn_dev::fastTanh"(%[[S]])
// CHECK-NEXT:    return %[[T]]
// CHECK-LABEL: attn.kernel @softcap
// CHECK:         score_bound = 1.000000e+00 : f32, score_input_scale = 2.000000e-02 : f32, score_mod_fn = @attn_score_mod_5, score_output_scale = 5.000000e+01 : f32
attn.kernel @softcap
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %cap = arith.constant 50.0 : f32
      %inverse = arith.constant 0.02 : f32
      %scaled = arith.mulf %inverse, %s : f32
      %squashed = math.tanh %scaled : f32
      %capped = arith.mulf %squashed, %cap : f32
      attn.yield %capped : f32
    }

// Not taken out: a multiplication of a score that has a second use, and a
// negative result factor (it would move the row maximum).
// CHECK-LABEL: emitc.func @attn_score_mod_6(
// CHECK:         mul
// CHECK:         add
// CHECK:         mul
// CHECK-LABEL: attn.kernel @kept_scalings
// CHECK-NOT:     score_bound
// CHECK-NOT:     score_input_scale
// CHECK-NOT:     score_output_scale
// CHECK:         }
attn.kernel @kept_scalings
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %two = arith.constant 2.0 : f32
      %minus = arith.constant -3.0 : f32
      %doubled = arith.mulf %s, %two : f32
      %sum = arith.addf %doubled, %s : f32
      %r = arith.mulf %sum, %minus : f32
      attn.yield %r : f32
    }

// A factor that is not a constant stays in the region.
// CHECK-LABEL: attn.kernel @variable_factor
// CHECK-NOT:     score_input_scale
// CHECK-NOT:     score_output_scale
// CHECK:         }
attn.kernel @variable_factor
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %qi = arith.index_cast %q : index to i32
      %qf = arith.sitofp %qi : i32 to f32
      %r = arith.mulf %s, %qf : f32
      attn.yield %r : f32
    }

// Bounds of what score_mod yields: a negative multiple of a tanh (kept in
// the region) and -inf for masked pairs give 3; a sum is not bounded.
// CHECK-LABEL: attn.kernel @bounded_select
// CHECK:         score_bound = 3.000000e+00 : f32
attn.kernel @bounded_select
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %factor = arith.constant -3.0 : f32
      %ninf = arith.constant 0xFF800000 : f32
      %t = math.tanh %s : f32
      %r = arith.mulf %t, %factor : f32
      %even = arith.cmpi ult, %kv, %q : index
      %masked = arith.select %even, %r, %ninf : f32
      attn.yield %masked : f32
    }
// CHECK-LABEL: attn.kernel @unbounded_sum
// CHECK-NOT:     score_bound
// CHECK:         }
attn.kernel @unbounded_sum
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %t = math.tanh %s : f32
      %r = arith.addf %t, %s : f32
      attn.yield %r : f32
    }

// Row offsets: a per-head bias and a constant move out with -0.5 * f32(q);
// the key's term stays, and the offset adds it at the origin. A constant
// factor of the score leaves first (score_input_scale), so 2 s + q loses q
// too. Not when the score is negated (-s + q) or read through another op
// (tanh(s) + q). A table read by kv stays per pair, and kv is then not
// relative to an origin.
// CHECK-LABEL: emitc.func @attn_score_mod_10_offset_0(
// CHECK-SAME:      %[[ORIGIN:[^:]*]]: i32) -> f32
// CHECK-NEXT:    %[[BIAS:.*]] = call_opaque "attn_dev::loadCapture"
// CHECK-NEXT:    %[[BIAS64:.*]] = cast %[[BIAS]] : f32 to f64
// CHECK-NEXT:    %[[ONE:.*]] = "emitc.constant"() <{value = 1.000000e+00 : f64}>
// CHECK-NEXT:    %[[HALF:.*]] = "emitc.constant"() <{value = -5.000000e-01 : f64}>
// CHECK:         %[[QF:.*]] = cast %{{.*}} : i32 to f64
// CHECK-NEXT:    %[[ORIGIN64:.*]] = cast %[[ORIGIN]] : i32 to f64
// CHECK-NEXT:    %[[A:.*]] = add %[[BIAS64]], %[[ONE]]
// CHECK-NEXT:    %[[QTERM:.*]] = mul %[[QF]], %[[HALF]]
// CHECK-NEXT:    %[[B:.*]] = add %[[A]], %[[QTERM]]
// CHECK-NEXT:    %[[KTERM:.*]] = mul %[[ORIGIN64]], %[[HALF]]
// CHECK-NEXT:    %[[C:.*]] = sub %[[B]], %[[KTERM]]
// CHECK-NEXT:    %[[R:.*]] = cast %[[C]] : f64 to f32
// CHECK-NEXT:    return %[[R]]
// CHECK-LABEL: emitc.func @attn_score_mod_10(
// CHECK-SAME:      %[[S:[^:]*]]: f32, %{{.*}}: !emitc.size_t, %{{.*}}: !emitc.size_t, %{{.*}}: !emitc.size_t, %{{.*}}: !emitc.size_t, %[[KVF:[^:]*]]: f32
// CHECK-NEXT:    %[[HALF:.*]] = "emitc.constant"() <{value = -5.000000e-01 : f32}>
// CHECK-NEXT:    %[[KTERM:.*]] = mul %[[KVF]], %[[HALF]]
// CHECK-NEXT:    %[[R:.*]] = sub %[[S]], %[[KTERM]]
// CHECK-NEXT:    return %[[R]]
// CHECK-LABEL: attn.kernel @row_terms
// CHECK:         score_mod_key_relative, score_mod_row_offset_fn = @attn_score_mod_10_offset_0
attn.kernel @row_terms
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"head_bias", f32, [q_heads]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?xf32>):
      %hb = memref.load %bias[%h] : memref<?xf32>
      %one = arith.constant 1.0 : f32
      %half = arith.constant -0.5 : f32
      %qi = arith.index_cast %q : index to i32
      %qf = arith.sitofp %qi : i32 to f32
      %kvi = arith.index_cast %kv : index to i32
      %kvf = arith.sitofp %kvi : i32 to f32
      %pos = arith.subf %qf, %kvf : f32
      %lin = arith.mulf %half, %pos : f32
      %a = arith.addf %s, %hb : f32
      %b2 = arith.addf %a, %one : f32
      %r = arith.addf %b2, %lin : f32
      attn.yield %r : f32
    }

// CHECK-LABEL: attn.kernel @scaled_score
// CHECK:         score_input_scale = 2.000000e+00 : f32, score_mod_fn = @attn_score_mod_11, score_mod_row_offset_fn = @attn_score_mod_11_offset_0
attn.kernel @scaled_score
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %two = arith.constant 2.0 : f32
      %qi = arith.index_cast %q : index to i32
      %qf = arith.sitofp %qi : i32 to f32
      %s2 = arith.mulf %s, %two : f32
      %r = arith.addf %s2, %qf : f32
      attn.yield %r : f32
    }

// CHECK-LABEL: attn.kernel @negated_score
// CHECK-NOT:     score_mod_row_offset_fn
attn.kernel @negated_score
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %qi = arith.index_cast %q : index to i32
      %qf = arith.sitofp %qi : i32 to f32
      %n = arith.negf %s : f32
      %r = arith.addf %n, %qf : f32
      attn.yield %r : f32
    }

// CHECK-LABEL: attn.kernel @tanh_score
// CHECK-NOT:     score_mod_row_offset_fn
attn.kernel @tanh_score
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %qi = arith.index_cast %q : index to i32
      %qf = arith.sitofp %qi : i32 to f32
      %t = math.tanh %s : f32
      %r = arith.addf %t, %qf : f32
      attn.yield %r : f32
    }

// CHECK-LABEL: emitc.func @attn_score_mod_14_offset_0(
// CHECK-SAME:      !emitc.opaque<"attn_dev::Capture<float, 1>">) -> f32
// CHECK-LABEL: attn.kernel @key_table
// CHECK-NOT:     score_mod_key_relative
// CHECK:         score_mod_row_offset_fn = @attn_score_mod_14_offset_0
attn.kernel @key_table
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"table", f32, [?]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %table: memref<?xf32>):
      %tk = memref.load %table[%kv] : memref<?xf32>
      %tq = memref.load %table[%q] : memref<?xf32>
      %a = arith.addf %s, %tk : f32
      %r = arith.addf %a, %tq : f32
      attn.yield %r : f32
    }

// Truncating divisions call device helpers with the interpreter's rules (a
// zero divisor gives 0, the minimum by -1 wraps): signed ones on the
// operands as ptrdiff_t, since index is size_t, whose / and % would divide
// unsigned; unsigned ones on size_t. (kv - q) * 2^32 stays 64-bit.
// CHECK-LABEL: emitc.func @attn_mask_mod_15(
// CHECK:         call_opaque "attn_dev::truncDiv"(%{{.*}}, %{{.*}}) : (!emitc.ptrdiff_t, !emitc.ptrdiff_t) -> !emitc.ptrdiff_t
// CHECK:         call_opaque "attn_dev::truncRem"(%{{.*}}, %{{.*}}) : (!emitc.ptrdiff_t, !emitc.ptrdiff_t) -> !emitc.ptrdiff_t
// CHECK:         call_opaque "attn_dev::divideUnsigned"(%{{.*}}, %{{.*}}) : (!emitc.size_t, !emitc.size_t) -> !emitc.size_t
// CHECK:         call_opaque "attn_dev::remainderUnsigned"(%{{.*}}, %{{.*}}) : (!emitc.size_t, !emitc.size_t) -> !emitc.size_t
attn.kernel @divisions
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %d = arith.subi %kv, %q : index
      %scale = arith.constant 4294967296 : index
      %wide = arith.muli %d, %scale : index
      %c7 = arith.constant -7 : index
      %quotient = arith.divsi %wide, %c7 : index
      %remainder = arith.remsi %wide, %c7 : index
      %uquotient = arith.divui %wide, %c7 : index
      %uremainder = arith.remui %wide, %c7 : index
      %s1 = arith.addi %quotient, %remainder : index
      %s2 = arith.addi %uquotient, %uremainder : index
      %s = arith.addi %s1, %s2 : index
      %zero = arith.constant 0 : index
      %keep = arith.cmpi sgt, %s, %zero : index
      attn.yield %keep : i1
    }

// Soft-capping spelled with a division, cap * tanh(s / cap): a division by a
// constant becomes a product by its reciprocal, so the kernel is the one
// `s * 0.02` gives (score_input_scale, score_bound, score_output_scale).
// CHECK-LABEL: emitc.func @attn_score_mod_{{[0-9]+}}(
// CHECK-SAME:      %[[S:[^:]*]]: f32,
// CHECK-NEXT:    %[[T:.*]] = call_opaque "attn_dev::fastTanh"(%[[S]])
// CHECK-NEXT:    return %[[T]]
// CHECK-LABEL: attn.kernel @softcap_divided
// CHECK:         score_bound = 1.000000e+00 : f32, score_input_scale = 2.000000e-02 : f32, score_mod_fn = @attn_score_mod_{{[0-9]+}}, score_output_scale = 5.000000e+01 : f32
attn.kernel @softcap_divided
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %cap = arith.constant 50.0 : f32
      %scaled = arith.divf %s, %cap : f32
      %squashed = math.tanh %scaled : f32
      %capped = arith.mulf %squashed, %cap : f32
      attn.yield %capped : f32
    }

// A division by a value, or by zero, stays a division.
// CHECK-LABEL: emitc.func @attn_score_mod_{{[0-9]+}}(
// CHECK:         div
// CHECK:         div
// CHECK-LABEL: attn.kernel @kept_divisions
// CHECK-NOT:     score_input_scale
attn.kernel @kept_divisions
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %zero = arith.constant 0.0 : f32
      %kvi = arith.index_cast %kv : index to i64
      %kvf = arith.sitofp %kvi : i64 to f32
      %a = arith.divf %s, %kvf : f32
      %c = arith.divf %a, %zero : f32
      attn.yield %c : f32
    }
