// attn-differentiate-mods copies a softmax kernel's user regions whole into
// functions for the backward (attn_mask_mod_full_N, attn_score_mod_full_N)
// and derives score_mod's vector-Jacobian product attn_score_mod_vjp_N(dy,
// the region's arguments, one gradient buffer per `grad` capture): the
// adjoint of the score is returned, that of a learnable capture's value is
// added into its gradient buffer at the indices of the read. N counts the
// module's kernels, whether or not they get functions.
// RUN: attn-opt --attn-differentiate-mods %s | FileCheck %s
// RUN: attn-opt --attn-differentiate-mods %s | FileCheck %s --check-prefix=NONE

// ALiBi with learnable slopes, s + slope[h] * (kv - q): ds = dy, and
// d slope[h] = dy * (kv - q) goes to the gradient at %h. The slope's read
// is not needed by the sweep and is gone; the distance is recomputed.
// CHECK-LABEL: func.func @attn_score_mod_full_0(
// CHECK-SAME:      %[[S:[^:]*]]: f32, %{{[^:]*}}: index, %[[H:[^:]*]]: index, %{{[^:]*}}: index, %{{[^:]*}}: index, %[[SLOPES:[^:]*]]: memref<?xf32>) -> f32 {
// CHECK-NEXT:    %[[SLOPE:.*]] = memref.load %[[SLOPES]][%[[H]]] : memref<?xf32>
// CHECK:         %[[BIAS:.*]] = arith.mulf %[[SLOPE]], %{{.*}} : f32
// CHECK-NEXT:    %[[R:.*]] = arith.addf %[[S]], %[[BIAS]] : f32
// CHECK-NEXT:    return %[[R]] : f32
// CHECK-LABEL: func.func @attn_score_mod_vjp_0(
// CHECK-SAME:      %[[DY:[^:]*]]: f32, %{{[^:]*}}: f32, %{{[^:]*}}: index, %[[H:[^:]*]]: index, %[[Q:[^:]*]]: index, %[[KV:[^:]*]]: index, %{{[^:]*}}: memref<?xf32>, %[[GRAD:[^:]*]]: memref<?xf32>) -> f32 {
// CHECK-NOT:     memref.load
// CHECK:         %[[QI:.*]] = arith.index_cast %[[Q]] : index to i32
// CHECK-NEXT:    %[[KI:.*]] = arith.index_cast %[[KV]] : index to i32
// CHECK-NEXT:    %[[D:.*]] = arith.subi %[[KI]], %[[QI]] : i32
// CHECK-NEXT:    %[[DF:.*]] = arith.sitofp %[[D]] : i32 to f32
// CHECK-NEXT:    %[[G_SLOPE:.*]] = arith.mulf %[[DY]], %[[DF]] : f32
// CHECK-NEXT:    memref.atomic_rmw addf %[[G_SLOPE]], %[[GRAD]][%[[H]]] {attn.step_invariant} : (f32, memref<?xf32>) -> f32
// CHECK-NEXT:    return %[[DY]] : f32
// CHECK-NEXT:  }
// CHECK-LABEL: attn.kernel @alibi
// CHECK:           captures = [#attn.capture<"slopes", f32, [q_heads], grad>]
// CHECK-NEXT:      attributes {backward_score_mod_fn = @attn_score_mod_full_0, backward_score_mod_vjp_fn = @attn_score_mod_vjp_0}
// CHECK-NEXT:      score_mod {
attn.kernel @alibi
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.causal<top_left> normalizer = #attn.softmax
    captures = [#attn.capture<"slopes", f32, [q_heads], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %slopes: memref<?xf32>):
      %slope = memref.load %slopes[%h] : memref<?xf32>
      %qi = arith.index_cast %q : index to i32
      %ki = arith.index_cast %kv : index to i32
      %d = arith.subi %ki, %qi : i32
      %df = arith.sitofp %d : i32 to f32
      %bias = arith.mulf %slope, %df : f32
      %r = arith.addf %s, %bias : f32
      attn.yield %r : f32
    }

// Soft-capping, 30 tanh(s / 30): ds = dy * 30 * (1 - t * t) / 30 with t the
// recomputed tanh. Without captures the VJP takes no gradient buffer, and
// the second kernel's functions end in _1.
// CHECK-LABEL: func.func @attn_score_mod_full_1(
// CHECK-LABEL: func.func @attn_score_mod_vjp_1(
// CHECK-SAME:      %[[DY:[^:]*]]: f32, %[[S:[^:]*]]: f32, %{{[^:]*}}: index, %{{[^:]*}}: index, %{{[^:]*}}: index, %{{[^:]*}}: index) -> f32 {
// CHECK-NEXT:    %[[CAP:.*]] = arith.constant 3.000000e+01 : f32
// CHECK-NEXT:    %[[X:.*]] = arith.divf %[[S]], %[[CAP]] : f32
// CHECK-NEXT:    %[[T:.*]] = math.tanh %[[X]] : f32
// CHECK-NEXT:    %[[G_T:.*]] = arith.mulf %[[DY]], %[[CAP]] : f32
// CHECK-NEXT:    %[[T2:.*]] = arith.mulf %[[T]], %[[T]] : f32
// CHECK-NEXT:    %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:    %[[SECH2:.*]] = arith.subf %[[ONE]], %[[T2]] : f32
// CHECK-NEXT:    %[[G_X:.*]] = arith.mulf %[[G_T]], %[[SECH2]] : f32
// CHECK-NEXT:    %[[G_S:.*]] = arith.divf %[[G_X]], %[[CAP]] : f32
// CHECK-NEXT:    return %[[G_S]] : f32
// CHECK-LABEL: attn.kernel @softcap
// CHECK:           attributes {backward_score_mod_fn = @attn_score_mod_full_1, backward_score_mod_vjp_fn = @attn_score_mod_vjp_1}
attn.kernel @softcap
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %cap = arith.constant 30.0 : f32
      %x = arith.divf %s, %cap : f32
      %t = math.tanh %x : f32
      %r = arith.mulf %t, %cap : f32
      attn.yield %r : f32
    }

// A select between max(s, floor[h]) (where s > 0) and s: each operand gets
// dy where it is chosen (the condition's comparison carries nothing), the
// maximum passes its adjoint to s where s >= floor (the first on a tie),
// else to the floor's gradient. The mask_mod is copied as it is.
// CHECK-LABEL: func.func @attn_mask_mod_full_2(
// CHECK-SAME:      %{{[^:]*}}: index, %{{[^:]*}}: index, %[[Q:[^:]*]]: index, %[[KV:[^:]*]]: index, %{{[^:]*}}: memref<?xf32>) -> i1 {
// CHECK-NEXT:    %[[KEEP:.*]] = arith.cmpi uge, %[[Q]], %[[KV]] : index
// CHECK-NEXT:    return %[[KEEP]] : i1
// CHECK-LABEL: func.func @attn_score_mod_full_2(
// CHECK-LABEL: func.func @attn_score_mod_vjp_2(
// CHECK-SAME:      %[[DY:[^:]*]]: f32, %[[S:[^:]*]]: f32, %{{[^:]*}}: index, %[[H:[^:]*]]: index, %{{[^:]*}}: index, %{{[^:]*}}: index, %[[FLOOR:[^:]*]]: memref<?xf32>, %[[GRAD:[^:]*]]: memref<?xf32>) -> f32 {
// CHECK-NEXT:    %[[F:.*]] = memref.load %[[FLOOR]][%[[H]]] : memref<?xf32>
// CHECK:         %[[POS:.*]] = arith.cmpf ogt, %[[S]], %{{.*}} : f32
// CHECK:         %[[G_MAX:.*]] = arith.select %[[POS]], %[[DY]], %{{.*}} : f32
// CHECK:         %[[G_S_ELSE:.*]] = arith.select %[[POS]], %{{.*}}, %[[DY]] : f32
// CHECK-NEXT:    %[[FIRST:.*]] = arith.cmpf oge, %[[S]], %[[F]] : f32
// CHECK:         %[[G_S_MAX:.*]] = arith.select %[[FIRST]], %[[G_MAX]], %{{.*}} : f32
// CHECK-NEXT:    %[[G_S:.*]] = arith.addf %[[G_S_ELSE]], %[[G_S_MAX]] : f32
// CHECK:         %[[G_F:.*]] = arith.select %[[FIRST]], %{{.*}}, %[[G_MAX]] : f32
// CHECK-NEXT:    memref.atomic_rmw addf %[[G_F]], %[[GRAD]][%[[H]]] {attn.step_invariant} : (f32, memref<?xf32>) -> f32
// CHECK-NEXT:    return %[[G_S]] : f32
// CHECK-LABEL: attn.kernel @select_max
// CHECK:           attributes {backward_mask_mod_fn = @attn_mask_mod_full_2, backward_score_mod_fn = @attn_score_mod_full_2, backward_score_mod_vjp_fn = @attn_score_mod_vjp_2}
// CHECK-NEXT:      mask_mod {
// CHECK:           score_mod {
attn.kernel @select_max
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"floor", f32, [q_heads], grad>]
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index, %floor: memref<?xf32>):
      %keep = arith.cmpi uge, %q, %kv : index
      attn.yield %keep : i1
    }
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %floor: memref<?xf32>):
      %f = memref.load %floor[%h] : memref<?xf32>
      %m = arith.maximumf %s, %f : f32
      %zero = arith.constant 0.0 : f32
      %pos = arith.cmpf ogt, %s, %zero : f32
      %r = arith.select %pos, %m, %s : f32
      attn.yield %r : f32
    }

// Kernels without user regions, and those whose normalizer is not the
// softmax, are left alone (they still take numbers 3 and 4).
// CHECK-LABEL: attn.kernel @plain
// CHECK-NOT:     backward_
// CHECK-LABEL: attn.kernel @linear
// CHECK-NOT:     backward_
// NONE-NOT:      {{@attn_[a-z_]+_[34][^0-9]}}
attn.kernel @plain
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.causal<top_left> normalizer = #attn.softmax

attn.kernel @linear
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.causal<top_left> normalizer = #attn.linear<feature_map = relu>

// A mask_mod alone gives a mask function only; it reads a capture (whose
// `grad` matters only to score_mod) as the region does.
// CHECK-LABEL: func.func @attn_mask_mod_full_5(
// CHECK-SAME:      %[[B:[^:]*]]: index, %{{[^:]*}}: index, %[[Q:[^:]*]]: index, %[[KV:[^:]*]]: index, %[[DOC:[^:]*]]: memref<?x?xi32>, %{{[^:]*}}: memref<?xf32>) -> i1 {
// CHECK-NEXT:    %[[DQ:.*]] = memref.load %[[DOC]][%[[B]], %[[Q]]] : memref<?x?xi32>
// CHECK-NEXT:    %[[DK:.*]] = memref.load %[[DOC]][%[[B]], %[[KV]]] : memref<?x?xi32>
// CHECK-NEXT:    %[[SAME:.*]] = arith.cmpi eq, %[[DQ]], %[[DK]] : i32
// CHECK-NEXT:    return %[[SAME]] : i1
// CHECK-NEXT:  }
// CHECK-NEXT:  attn.kernel @mask_only
// CHECK:           attributes {backward_mask_mod_fn = @attn_mask_mod_full_5}
// CHECK-NEXT:      mask_mod {
// NONE-NOT:      {{@attn_score_mod_[a-z]+_5[^0-9]}}
attn.kernel @mask_only
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"document", i32, [batch, seqlen_k]>, #attn.capture<"unused", f32, [q_heads], grad>]
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index, %doc: memref<?x?xi32>, %unused: memref<?xf32>):
      %dq = memref.load %doc[%b, %q] : memref<?x?xi32>
      %dk = memref.load %doc[%b, %kv] : memref<?x?xi32>
      %same = arith.cmpi eq, %dq, %dk : i32
      attn.yield %same : i1
    }

// A name already taken is skipped, each kind on its own. Only `grad`
// captures get gradient buffers, in declaration order, and a value read from
// a capture without `grad` carries no gradient: the bias adds nothing to
// the gradients, and the second learnable capture, which the result does
// not depend on, gets nothing either.
// CHECK-LABEL: func.func @attn_score_mod_full_7(
// CHECK-LABEL: func.func @attn_score_mod_vjp_6(
// CHECK-SAME:      %[[DY:[^:]*]]: f32, %[[S:[^:]*]]: f32, %{{[^:]*}}: index, %[[H:[^:]*]]: index, %{{[^:]*}}: index, %{{[^:]*}}: index, %{{[^:]*}}: memref<?xf32>, %[[SCALE:[^:]*]]: memref<?xf32>, %{{[^:]*}}: memref<?xf32>, %[[G_SCALE:[^:]*]]: memref<?xf32>, %{{[^:]*}}: memref<?xf32>) -> f32 {
// CHECK-NEXT:    %[[V:.*]] = memref.load %[[SCALE]][%[[H]]] : memref<?xf32>
// CHECK-NEXT:    %[[G_S:.*]] = arith.mulf %[[DY]], %[[V]] : f32
// CHECK-NEXT:    %[[G_V:.*]] = arith.mulf %[[DY]], %[[S]] : f32
// CHECK-NEXT:    memref.atomic_rmw addf %[[G_V]], %[[G_SCALE]][%[[H]]] {attn.step_invariant} : (f32, memref<?xf32>) -> f32
// CHECK-NEXT:    return %[[G_S]] : f32
// CHECK-LABEL: attn.kernel @taken
// CHECK:           attributes {backward_score_mod_fn = @attn_score_mod_full_7, backward_score_mod_vjp_fn = @attn_score_mod_vjp_6}
func.func private @attn_score_mod_full_6()
attn.kernel @taken
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads]>, #attn.capture<"scale", f32, [q_heads], grad>,
                #attn.capture<"other", f32, [q_heads], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?xf32>, %scale: memref<?xf32>, %other: memref<?xf32>):
      %v = memref.load %scale[%h] : memref<?xf32>
      %u = memref.load %bias[%h] : memref<?xf32>
      %o = memref.load %other[%h] : memref<?xf32>
      %p = arith.mulf %s, %v : f32
      %r = arith.addf %p, %u : f32
      attn.yield %r : f32
    }

// What carries no gradient needs no derivative: an integer conversion of a
// value read from a capture without `grad`, and math.atan of the score
// whose result is unused. The VJP is dy.
// CHECK-LABEL: func.func @attn_score_mod_vjp_7(
// CHECK-SAME:      %[[DY:[^:]*]]: f32, %{{[^:]*}}: f32, %{{[^:]*}}: index, %{{[^:]*}}: index, %{{[^:]*}}: index, %{{[^:]*}}: index, %{{[^:]*}}: memref<?xf32>) -> f32 {
// CHECK-NEXT:    return %[[DY]] : f32
attn.kernel @inactive
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"table", f32, [16]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %table: memref<?xf32>):
      %t = memref.load %table[%h] : memref<?xf32>
      %i = arith.fptosi %t : f32 to i32
      %index = arith.index_cast %i : i32 to index
      %v = memref.load %table[%index] : memref<?xf32>
      %unused = math.atan %s : f32
      %r = arith.addf %s, %v : f32
      attn.yield %r : f32
    }
