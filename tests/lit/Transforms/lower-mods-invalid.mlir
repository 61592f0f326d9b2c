// attn-lower-mods reports the operations it cannot turn into CUDA at their
// location.
// RUN: attn-opt %s -split-input-file --attn-lower-mods -verify-diagnostics

attn.kernel @no_lowering
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      // expected-error @+1 {{'math.atan2' op in 'score_mod' has no lowering to CUDA}}
      %r = math.atan2 %s, %s : f32
      attn.yield %r : f32
    }

// -----

attn.kernel @f64_math
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %wide = arith.extf %s : f32 to f64
      // expected-error @+1 {{'math.exp' op in 'score_mod' is lowered for f32 only, got 'f64'}}
      %e = math.exp %wide : f64
      %r = arith.truncf %e : f64 to f32
      attn.yield %r : f32
    }
