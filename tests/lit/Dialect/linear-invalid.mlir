// What #attn.linear and #attn.retention reject: the attributes' own
// parameters (AttnAttrs.cpp) and what the linear kernel supports
// (verifyLinearFamily in AttnOps.cpp).
// RUN: attn-opt %s -split-input-file -verify-diagnostics

// Retention is causal.
// expected-error @+1 {{'attn.kernel' op retention is causal: it needs #attn.causal}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.retention

// -----

// Retention's own mask check names what it needs, whatever the mask.
// expected-error @+1 {{'attn.kernel' op retention is causal: it needs #attn.causal, got #attn.sliding_window<left = 128, right = 0>}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.sliding_window<left = 128, right = 0> normalizer = #attn.retention

// -----

// expected-error @+1 {{'attn.kernel' op retention is causal: it needs #attn.causal, got #attn.sliding_window<left = 64, right = 0, align = top_left>}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.sliding_window<left = 64, right = 0, align = top_left> normalizer = #attn.retention<gated>

// -----

// gated and decay together parse, in either order, and the verifier says
// why they do not go together.
// expected-error @+1 {{retention is either gated or has a fixed decay, not both}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<gated, decay = [0.5, 0.5]>

// -----

// expected-error @+1 {{retention is either gated or has a fixed decay, not both}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<decay = [0.5, 0.5], gated>

// -----

// expected-error @+1 {{retention: 'gated' given twice}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<gated, gated>

// -----

// expected-error @+1 {{retention: 'decay' given twice}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<decay = [0.5, 0.5], decay = [0.5, 0.5]>

// -----

// expected-error @+1 {{retention decay list is empty}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<decay = []>

// -----

// Each gamma is in (0, 1]: 0 is out.
// expected-error @+1 {{retention decay 0 must be in (0, 1]}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<decay = [0.0, 0.5]>

// -----

// expected-error @+1 {{retention decay 1.5 must be in (0, 1]}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<decay = [0.5, 1.5]>

// -----

// expected-error @+1 {{retention decay -0.5 must be in (0, 1]}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<decay = [-0.5, 0.5]>

// -----

// Just above 1 is out too, and the message spells the value so that it
// reads back exactly.
// expected-error @+1 {{retention decay 1.0000001 must be in (0, 1]}}
attn.kernel @k problem = #attn.problem<q_heads = 1, kv_heads = 1, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<decay = [1.0000001]>

// -----

// 0x7FF8000000000000 is a NaN.
// expected-error @+1 {{retention decay nan must be in (0, 1]}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<decay = [0.5, 0x7FF8000000000000]>

// -----

// One gamma per query head: too many...
// expected-error @+1 {{'attn.kernel' op retention decay lists 3 values; it needs one per query head (2)}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<decay = [0.5, 0.75, 0.875]>

// -----

// ... or too few (one per kv head is not enough under GQA).
// expected-error @+1 {{'attn.kernel' op retention decay lists 2 values; it needs one per query head (8)}}
attn.kernel @k problem = #attn.problem<q_heads = 8, kv_heads = 2, head_dim = 128, element_type = bf16> mask = #attn.causal<bottom_right> normalizer = #attn.retention<decay = [0.5, 0.75]>

// -----

// Inside the brackets, only `gated` or `decay = [...]`.
// expected-error @+1 {{retention: expected 'gated' or 'decay = [...]'}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<ungated>

// -----

// expected-error @+1 {{retention: expected 'gated' or 'decay = [...]'}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<>

// -----

// Linear attention takes no sliding window either.
// expected-error @+1 {{'attn.kernel' op normalizer 'linear' takes #attn.causal or #attn.no_mask, got #attn.sliding_window<left = 128, right = 0>}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.sliding_window<left = 128, right = 0> normalizer = #attn.linear

// -----

// No user regions or captured buffers in the family.
// expected-error @+1 {{'attn.kernel' op normalizer 'linear' takes no mask_mod, score_mod or captures}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.linear<feature_map = relu>
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %keep = arith.cmpi ule, %kv, %q : index
      attn.yield %keep : i1
    }

// -----

// expected-error @+1 {{'attn.kernel' op normalizer 'linear' takes no mask_mod, score_mod or captures}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.linear
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %t = math.tanh %s : f32
      attn.yield %t : f32
    }

// -----

// expected-error @+1 {{'attn.kernel' op normalizer 'linear' takes no mask_mod, score_mod or captures}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.no_mask normalizer = #attn.linear<normalize = true> captures = [#attn.capture<"x", f32, [4]>]

// -----

// expected-error @+1 {{'attn.kernel' op normalizer 'retention' takes no mask_mod, score_mod or captures}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %keep = arith.cmpi ule, %kv, %q : index
      attn.yield %keep : i1
    }

// -----

// expected-error @+1 {{'attn.kernel' op normalizer 'retention' takes no mask_mod, score_mod or captures}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<gated>
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      attn.yield %s : f32
    }

// -----

// expected-error @+1 {{'attn.kernel' op normalizer 'retention' takes no mask_mod, score_mod or captures}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.retention<decay = [0.5, 0.75]> captures = [#attn.capture<"g", f32, [batch, seqlen_q, q_heads]>]

// -----

// head_dim 256 is a softmax head dim only.
// expected-error @+1 {{'attn.kernel' op normalizer 'linear' supports head_dim 64 or 128, got 256}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 256, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.linear<feature_map = elu_plus_one, normalize = true>

// -----

// expected-error @+1 {{'attn.kernel' op normalizer 'retention' supports head_dim 64 or 128, got 256}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 256, element_type = f16> mask = #attn.causal<bottom_right> normalizer = #attn.retention

// -----

// The feature map is one of identity, relu, elu_plus_one.
// expected-error @+2 {{expected one of [identity, relu, elu_plus_one] for the feature map of linear attention, applied to queries and keys, got: gelu}}
// expected-error @+1 {{failed to parse Attn_LinearAttr parameter 'feature_map' which is to be a `::mlir::attn::FeatureMapKind`}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.linear<feature_map = gelu>

// -----

// normalize is true or false.
// expected-error @+2 {{expected integer value}}
// expected-error @+1 {{failed to parse Attn_LinearAttr parameter 'normalize' which is to be a `bool`}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.linear<normalize = yes>

// -----

// expected-error @+1 {{duplicate or unknown struct parameter name: feature_map}}
attn.kernel @k problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16> mask = #attn.causal<top_left> normalizer = #attn.linear<feature_map = relu, feature_map = identity>
