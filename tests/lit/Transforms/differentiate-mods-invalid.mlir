// attn-differentiate-mods reports, at the operation, what in score_mod it
// cannot differentiate: a value that carries the gradient of the score or
// of a learnable capture must not reach an integer conversion (the
// derivative through it would be silently 0) nor an operation without a
// derivative.
// RUN: attn-opt %s -split-input-file --attn-differentiate-mods -verify-diagnostics

// The score, truncated to an integer, picks the table's entry.
attn.kernel @score_indexes
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"table", f32, [16]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %table: memref<?xf32>):
      // expected-error @+1 {{'arith.fptosi' op in 'score_mod' turns a value that carries the gradient of the score (or of a learnable capture) into an integer, through which the derivative would be silently 0: the backward cannot be derived}}
      %i = arith.fptosi %s : f32 to i32
      %index = arith.index_cast %i : i32 to index
      %v = memref.load %table[%index] : memref<?xf32>
      %r = arith.addf %s, %v : f32
      attn.yield %r : f32
    }

// -----

// A learnable capture's value carries a gradient too; its bits do not.
attn.kernel @capture_bits
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"gate", f32, [q_heads], grad>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %gate: memref<?xf32>):
      %g = memref.load %gate[%h] : memref<?xf32>
      // expected-error @+1 {{'arith.bitcast' op in 'score_mod' turns a value that carries the gradient}}
      %bits = arith.bitcast %g : f32 to i32
      %zero = arith.constant 0 : i32
      %open = arith.cmpi sgt, %bits, %zero : i32
      %ninf = arith.constant 0xFF800000 : f32
      %r = arith.select %open, %s, %ninf : f32
      attn.yield %r : f32
    }

// -----

attn.kernel @no_derivative
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %c = arith.constant 2.0 : f32
      %x = arith.mulf %s, %c : f32
      // expected-error @+1 {{'math.atan' op in 'score_mod' has no derivative for the backward}}
      %a = math.atan %x : f32
      attn.yield %a : f32
    }

// -----

// A detour through f64 has no derivative here: an error at the conversion
// back, not a gradient of 0.
attn.kernel @wide
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %w = arith.extf %s : f32 to f64
      %c = arith.constant 2.0 : f64
      %m = arith.mulf %w, %c : f64
      // expected-error @+1 {{'arith.truncf' op in 'score_mod' has no derivative for the backward}}
      %r = arith.truncf %m : f64 to f32
      attn.yield %r : f32
    }

// -----

// Nor has an operation of several results.
attn.kernel @sincos
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      // expected-error @+1 {{'math.sincos' op in 'score_mod' has no derivative for the backward}}
      %sin, %cos = math.sincos %s : f32
      %r = arith.addf %sin, %s : f32
      attn.yield %r : f32
    }
