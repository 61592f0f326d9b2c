// Located diagnostics for captures and the user regions' signatures and ops.
// RUN: attn-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{capture name 'not an identifier' must be an identifier}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax captures = [#attn.capture<"not an identifier", f32, [4]>]

// -----

// expected-error @+1 {{capture 'x': unsupported element type 'f16'; supported: f32, i32}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax captures = [#attn.capture<"x", f16, [4]>]

// -----

// expected-error @+1 {{capture 'x': rank must be 1 to 3, got 4}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax captures = [#attn.capture<"x", f32, [1, 2, 3, 4]>]

// -----

// expected-error @+1 {{unknown extent 'heads'; expected an integer, '?', batch, q_heads, kv_heads, seqlen_q or seqlen_k}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax captures = [#attn.capture<"x", f32, [heads]>]

// -----

// expected-error @+1 {{capture 'x': extent #0 must be positive, got 0}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax captures = [#attn.capture<"x", f32, [0]>]

// -----

// expected-error @+1 {{captures the name 'x' twice}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax captures = [#attn.capture<"x", f32, [4]>, #attn.capture<"x", i32, [4]>]

// -----

// expected-error @+1 {{'mask_mod' region expects 5 arguments (batch, head, q_idx, kv_idx, capture 'x'), got 4}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax captures = [#attn.capture<"x", f32, [4]>]
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %keep = arith.cmpi ule, %kv, %q : index
      attn.yield %keep : i1
    }

// -----

attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax captures = [#attn.capture<"x", f32, [4, 4]>]
    score_mod {
    // expected-error @+1 {{'score_mod' argument #5 (capture 'x') must have type 'memref<?x?xf32>', got 'memref<?xf32>'}}
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %x: memref<?xf32>):
      attn.yield %s : f32
    }

// -----

attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      // expected-error @+1 {{'memref.alloc' op cannot appear in 'score_mod'}}
      %buffer = memref.alloc() : memref<4xf32>
      %v = memref.load %buffer[%h] : memref<4xf32>
      attn.yield %v : f32
    }

// -----

attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax captures = [#attn.capture<"x", f32, [4]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %x: memref<?xf32>):
      // expected-error @+1 {{'memref.store' op cannot appear in 'score_mod'; user regions use arith and math operations and memref.load of captured buffers}}
      memref.store %s, %x[%h] : memref<?xf32>
      attn.yield %s : f32
    }

// -----

// expected-error @+3 {{floordiv divisor must be positive, got 0}}
// expected-error @+2 {{failed to parse Attn_DivSumGeAttr parameter 'terms'}}
// expected-error @+1 {{failed to parse Attn_TileFormulaAttr parameter 'terms'}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax attributes {mask_tile_formula = #attn.tile_formula<all_of, [#attn.div_sum_ge<terms = [#attn.floordiv<q = 1, divisor = 0>]>]>}

// -----

// A region that reads a buffer the spec does not declare gets a hint at the
// extra argument.
// expected-error @+1 {{'attn.kernel' op 'score_mod' region expects 5 arguments (score, batch, head, q_idx, kv_idx), got 6}}
attn.kernel @undeclared problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    // expected-note @+1 {{argument #5 ('memref<?xf32>') reads a buffer the spec does not declare: add it to the kernel's captures, e.g. captures = [#attn.capture<"name", f32, [?]>]}}
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?xf32>):
      %v = memref.load %bias[%h] : memref<?xf32>
      %r = arith.addf %s, %v : f32
      attn.yield %r : f32
    }
