// attn-differentiate-mods marks the addition into a learnable capture's
// gradient, when it is the buffer's only addition, by how its element
// varies over the pairs (q, kv) of a (batch, head): `attn.step_invariant`
// where it does not, `attn.per_diagonal` where only through q - kv;
// attn-lower-mods then calls attn_dev::accumulateStepGradient,
// attn_dev::accumulateDiagonalGradient, and attn_dev::accumulateGradient for
// the others.
// RUN: attn-opt --attn-differentiate-mods %s | FileCheck %s
// RUN: attn-opt --attn-differentiate-mods --attn-lower-mods %s | FileCheck %s --check-prefix=LOWER

// An element chosen by the head, the batch and a value read from a capture
// without `grad` (an integer table of the head's group): the same for
// every pair.
// CHECK-LABEL: func.func @attn_score_mod_vjp_0(
// CHECK:         memref.atomic_rmw addf %{{.*}}[%{{.*}}, %{{.*}}] {attn.step_invariant}
// LOWER-LABEL: emitc.func @attn_score_mod_vjp_0(
// LOWER:         call_opaque "attn_dev::accumulateStepGradient"
// LOWER-NOT:     call_opaque "attn_dev::accumulateGradient"
// LOWER:         return
attn.kernel @by_group
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"group", i32, [q_heads]>,
                #attn.capture<"bias", f32, [batch, q_heads], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %group: memref<?xi32>, %bias: memref<?x?xf32>):
      %g = memref.load %group[%h] : memref<?xi32>
      %gi = arith.index_cast %g : i32 to index
      %two = arith.constant 2 : index
      %column = arith.muli %gi, %two : index
      %v = memref.load %bias[%b, %column] : memref<?x?xf32>
      %r = arith.addf %s, %v : f32
      attn.yield %r : f32
    }

// A relative-position table, bias[h, q + 7 - kv]: its element changes
// with the diagonal only.
// CHECK-LABEL: func.func @attn_score_mod_vjp_1(
// CHECK:         memref.atomic_rmw addf %{{[^ ]*}}, %{{[^ ]*}}[%{{[^ ]*}}, %{{[^ ]*}}] {attn.per_diagonal} : (f32
// LOWER-LABEL: emitc.func @attn_score_mod_vjp_1(
// LOWER:         call_opaque "attn_dev::accumulateDiagonalGradient"
attn.kernel @relative
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %c7 = arith.constant 7 : index
      %shifted = arith.addi %q, %c7 : index
      %column = arith.subi %shifted, %kv : index
      %v = memref.load %bias[%h, %column] : memref<?x?xf32>
      %r = arith.addf %s, %v : f32
      attn.yield %r : f32
    }

// q - kv + kv reads by the query alone (the coefficients of kv cancel, q's
// do not): a per-pair element.
// CHECK-LABEL: func.func @attn_score_mod_vjp_2(
// CHECK:         memref.atomic_rmw addf %{{[^ ]*}}, %{{[^ ]*}}[%{{[^ ]*}}] : (f32
// LOWER-LABEL: emitc.func @attn_score_mod_vjp_2(
// LOWER:         call_opaque "attn_dev::accumulateGradient"
attn.kernel @by_query
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [seqlen_q], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?xf32>):
      %d = arith.subi %q, %kv : index
      %back = arith.addi %d, %kv : index
      %v = memref.load %bias[%back] : memref<?xf32>
      %r = arith.addf %s, %v : f32
      attn.yield %r : f32
    }

// (q - kv) - (q - kv) is 0 for every pair: the coefficients cancel, and the
// element is the same for the whole step.
// CHECK-LABEL: func.func @attn_score_mod_vjp_3(
// CHECK:         memref.atomic_rmw addf %{{.*}} {attn.step_invariant}
attn.kernel @cancelled
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, 4], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %d = arith.subi %q, %kv : index
      %zero = arith.subi %d, %d : index
      %v = memref.load %bias[%h, %zero] : memref<?x?xf32>
      %r = arith.addf %s, %v : f32
      attn.yield %r : f32
    }

// Two reads of one learnable capture, both at elements the same for every
// pair: the buffer has two additions, and neither is marked (the step's sum
// in a register holds one element).
// CHECK-LABEL: func.func @attn_score_mod_vjp_4(
// CHECK-NOT:     attn.step_invariant
// CHECK:         memref.atomic_rmw addf
// CHECK-NOT:     attn.step_invariant
// CHECK:         memref.atomic_rmw addf
// CHECK-NOT:     attn.step_invariant
// CHECK:         return
// LOWER-LABEL: emitc.func @attn_score_mod_vjp_4(
// LOWER-NOT:     accumulateStepGradient
// LOWER:         return
attn.kernel @two_reads
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"slopes", f32, [q_heads], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %slopes: memref<?xf32>):
      %c0 = arith.constant 0 : index
      %own = memref.load %slopes[%h] : memref<?xf32>
      %first = memref.load %slopes[%c0] : memref<?xf32>
      %scale = arith.addf %own, %first : f32
      %r = arith.mulf %s, %scale : f32
      attn.yield %r : f32
    }

// A bucket of the distance as T5 computes it: 2 (q - kv) through an i32
// cast, a float logarithm and a clamp is still a function of q - kv alone;
// a bucket of q - 2 kv is not (the coefficients do not cancel).
// CHECK-LABEL: func.func @attn_score_mod_vjp_5(
// CHECK:         memref.atomic_rmw addf %{{.*}} {attn.per_diagonal}
// CHECK-LABEL: func.func @attn_score_mod_vjp_6(
// CHECK:         memref.atomic_rmw addf %{{[^ ]*}}, %{{[^ ]*}}[%{{[^ ]*}}, %{{[^ ]*}}] : (f32
attn.kernel @bucketed
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, 32], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %two = arith.constant 2 : index
      %d = arith.subi %q, %kv : index
      %dd = arith.muli %two, %d : index
      %di = arith.index_cast %dd : index to i32
      %df = arith.sitofp %di : i32 to f32
      %l = math.log %df : f32
      %li = arith.fptosi %l : f32 to i32
      %last = arith.constant 31 : i32
      %bucket_i = arith.minsi %li, %last : i32
      %bucket = arith.index_cast %bucket_i : i32 to index
      %v = memref.load %bias[%h, %bucket] : memref<?x?xf32>
      %r = arith.addf %s, %v : f32
      attn.yield %r : f32
    }

attn.kernel @skewed
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, 32], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %two = arith.constant 2 : index
      %kk = arith.muli %kv, %two : index
      %d = arith.subi %q, %kk : index
      %di = arith.index_cast %d : index to i32
      %c31 = arith.constant 31 : i32
      %bucket_i = arith.andi %di, %c31 : i32
      %bucket = arith.index_cast %bucket_i : i32 to index
      %v = memref.load %bias[%h, %bucket] : memref<?x?xf32>
      %r = arith.addf %s, %v : f32
      attn.yield %r : f32
    }

// Two learnable captures: the table's addition keeps the per-pair element
// test (the backward sums one capture by diagonal), the slope's is still
// the same for every pair.
// CHECK-LABEL: func.func @attn_score_mod_vjp_7(
// CHECK-NOT:     attn.per_diagonal
// CHECK:         memref.atomic_rmw addf %{{.*}} {attn.step_invariant}
// CHECK-NEXT:    memref.atomic_rmw addf %{{[^ ]*}}, %{{[^ ]*}}[%{{[^ ]*}}, %{{[^ ]*}}] : (f32
// LOWER-LABEL: emitc.func @attn_score_mod_vjp_7(
// LOWER:         call_opaque "attn_dev::accumulateStepGradient"
// LOWER-NEXT:    call_opaque "attn_dev::accumulateGradient"
attn.kernel @two_learned
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?], grad>, #attn.capture<"slope", f32, [q_heads], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>, %slope: memref<?xf32>):
      %column = arith.subi %q, %kv : index
      %v = memref.load %bias[%h, %column] : memref<?x?xf32>
      %w = memref.load %slope[%h] : memref<?xf32>
      %r = arith.addf %s, %v : f32
      %t = arith.addf %r, %w : f32
      attn.yield %t : f32
    }

// (q - kv) 2^62 4 is 0 modulo 2^64 for every pair: the coefficients'
// arithmetic wraps as the index's.
// CHECK-LABEL: func.func @attn_score_mod_vjp_8(
// CHECK:         memref.atomic_rmw addf %{{.*}} {attn.step_invariant}
attn.kernel @wrapped
    problem = #attn.problem<q_heads = 4, kv_heads = 4, head_dim = 64, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, 32], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %d = arith.subi %q, %kv : index
      %big = arith.constant 4611686018427387904 : index
      %four = arith.constant 4 : index
      %scaled = arith.muli %d, %big : index
      %zero = arith.muli %scaled, %four : index
      %v = memref.load %bias[%h, %zero] : memref<?x?xf32>
      %r = arith.addf %s, %v : f32
      attn.yield %r : f32
    }
