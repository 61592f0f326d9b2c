// attn-emit-cuda prints the lowered user regions with MLIR's C++ emitter
// ahead of the template and turns the tile formula into the kernel's
// coverage test.
// RUN: attn-opt --attn-tile --attn-plan-smem --attn-classify-blocks --attn-lower-mods --attn-emit-cuda %s | FileCheck %s

// CHECK-LABEL: attn.kernel @alibi_prefix
// CHECK: attn.cuda_source = "
// CHECK-SAME: __device__ __forceinline__ bool attn_mask_mod_0(size_t [[B:v[0-9]+]], size_t
// CHECK-SAME: __device__ __forceinline__ float attn_score_mod_0_row_0(size_t
// CHECK-SAME: __device__ __forceinline__ float attn_score_mod_0(float
// CHECK-SAME: struct UserMods {
// CHECK-SAME: static constexpr bool kHasMaskMod = true;
// CHECK-SAME: static constexpr bool kHasScoreMod = true;
// CHECK-SAME: static constexpr float kScoreInputScale = 0x1p+0f;
// CHECK-SAME: static constexpr float kScoreOutputScale = 0x1p+0f;
// CHECK-SAME: static constexpr float kScoreBound = 0x0p+0f;
// CHECK-SAME: return coverageOr(affineCoverage(0LL * b + 0LL * h + 2047LL, 0LL, -1LL, q0, q1, k0, k1), affineCoverage(0LL * b + 0LL * h + 0LL, 1LL, -1LL, q0, q1, k0, k1));
// Affine inequalities alone: a partial tile tests each pair's bit of the
// keys the formula keeps per row (kv <= 2047 or kv <= q), here with 32-bit
// row terms (positions stay below 2^30 + 256).
// CHECK-SAME: static constexpr bool kMaskKeyBits = true;
// CHECK-SAME: return (keys.template affine<int, -1>(static_cast<int>(0LL * b + 0LL * h + 0LL * q + 2047LL)) | keys.template affine<int, -1>(static_cast<int>(0LL * b + 0LL * h + 1LL * q + 0LL)));
// CHECK-SAME: static constexpr bool kMaskUsesKeyFloat = false;
// The mask's index arithmetic is 32-bit (attn-lower-mods narrows it): q as
// an int32_t is a row value.
// CHECK-SAME: static constexpr bool kMaskRowUsesQuery = true;
// CHECK-SAME: struct MaskRow {\0A    int32_t v0;\0A  };
// CHECK-SAME: return attn_mask_mod_0(b, h, q, k, kf, attn_dev::captureOf<float, 1>(p.captures[0]), row.v0);
// The slope is the same for every row of a head: computed once.
// CHECK-SAME: static constexpr bool kScoreRowUsesQuery = false;
// CHECK-SAME: struct ScoreRow {\0A    float v0;\0A  };
// CHECK-SAME: row.v0 = attn_score_mod_0_row_0(b, h, q, attn_dev::captureOf<float, 1>(p.captures[0]));
// CHECK-SAME: return attn_score_mod_0(s, b, h, q, k, kf, attn_dev::captureOf<float, 1>(p.captures[0]), row.v0);
attn.kernel @alibi_prefix
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"slopes", f32, [q_heads]>]
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index, %slopes: memref<?xf32>):
      %prefix = arith.constant 2048 : index
      %in_prefix = arith.cmpi slt, %kv, %prefix : index
      %causal = arith.cmpi sle, %kv, %q : index
      %keep = arith.ori %in_prefix, %causal : i1
      attn.yield %keep : i1
    }
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %slopes: memref<?xf32>):
      %slope = memref.load %slopes[%h] : memref<?xf32>
      %r = arith.mulf %s, %slope : f32
      attn.yield %r : f32
    }

// A mask_mod the classifier cannot prove is decided per element.
// CHECK-LABEL: attn.kernel @opaque_mask
// CHECK: return Coverage::Partial; // not analysable: decided per element
// CHECK-SAME: static constexpr bool kMaskKeyBits = false;
attn.kernel @opaque_mask
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %c = arith.constant 64 : index
      %qb = arith.remui %q, %c : index
      %kb = arith.remui %kv, %c : index
      %keep = arith.cmpi eq, %qb, %kb : index
      attn.yield %keep : i1
    }

// A formula with floor quotients becomes interval bounds of its parts.
// CHECK-LABEL: attn.kernel @chunked
// CHECK: return coverageAnd(rangeCoverage(divTermRange(1LL, 0LL * b + 0LL * h + 0LL, 0LL, 0LL, 1LL, q0, q1, k0, k1) + divTermRange(1LL, 0LL * b + 0LL * h + 0LL, 0LL, 1LL, 1024LL, q0, q1, k0, k1) + divTermRange(-1LL, 0LL * b + 0LL * h + 0LL, 1LL, 0LL, 1024LL, q0, q1, k0, k1))
// Floor quotients are no affine bounds: the region decides each pair.
// CHECK-SAME: static constexpr bool kMaskKeyBits = false;
attn.kernel @chunked
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %chunk = arith.constant 1024 : index
      %q_chunk = arith.divui %q, %chunk : index
      %kv_chunk = arith.divui %kv, %chunk : index
      %same = arith.cmpi eq, %q_chunk, %kv_chunk : index
      attn.yield %same : i1
    }

// The constant factors attn-lower-mods takes out of a score_mod reach the
// kernel as exact float literals.
// CHECK-LABEL: attn.kernel @softcap
// CHECK: static constexpr float kScoreInputScale = 0x1.47ae14p-6f;
// CHECK-SAME: static constexpr float kScoreOutputScale = 0x1.9p+5f;
// CHECK-SAME: static constexpr float kScoreBound = 0x1p+0f;
// CHECK-SAME: static constexpr bool kHasScoreRowOffset = false;
// CHECK-SAME: static constexpr bool kScoreKeyRelative = false;
attn.kernel @softcap
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index):
      %cap = arith.constant 50.0 : f32
      %inverse = arith.constant 0.02 : f32
      %scaled = arith.mulf %s, %inverse : f32
      %squashed = math.tanh %scaled : f32
      %capped = arith.mulf %squashed, %cap : f32
      attn.yield %capped : f32
    }

// ALiBi: the region keeps s + slope * kv (kv from the kernel's origin), and
// the row's term with the key's at the origin reaches the kernel as the row
// offset its log-sum-exp adds.
// CHECK-LABEL: attn.kernel @alibi
// CHECK: attn.cuda_source = "
// CHECK-SAME: __device__ __forceinline__ float attn_score_mod_4_offset_0(size_t
// CHECK-SAME: static constexpr bool kHasScoreRowOffset = true;
// CHECK-SAME: static constexpr bool kScoreKeyRelative = true;
// CHECK-SAME: return attn_score_mod_4_offset_0(b, h, q, attn_dev::captureOf<float, 1>(p.captures[0]), keyOrigin);
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

// Row values that read q: each row computes its own.
// CHECK-LABEL: attn.kernel @rows_read_q
// CHECK: attn.cuda_source = "
// CHECK-SAME: static constexpr bool kMaskRowUsesQuery = true;
// CHECK-SAME: row.v0 = attn_mask_mod_{{[0-9]+}}_row_0(b, h, q,
// CHECK-SAME: static constexpr bool kScoreRowUsesQuery = true;
// CHECK-SAME: row.v0 = attn_score_mod_{{[0-9]+}}_row_0(b, h, q,
attn.kernel @rows_read_q
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    captures = [#attn.capture<"gain", f32, [?]>]
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index, %gain: memref<?xf32>):
      %w = arith.constant 100 : index
      %lo = arith.subi %q, %w : index
      %keep = arith.cmpi sge, %kv, %lo : index
      attn.yield %keep : i1
    }
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %gain: memref<?xf32>):
      %g = memref.load %gain[%q] : memref<?xf32>
      %r = arith.mulf %s, %g : f32
      attn.yield %r : f32
    }

// A row term that may leave an int (a batch coefficient of 2^21) keeps the
// 64-bit form; the one beside it, a position plus a constant, takes 32 bits.
// CHECK-LABEL: attn.kernel @wide_row_term
// CHECK: static constexpr bool kMaskKeyBits = true;
// CHECK-SAME: return (keys.template affine<long long, -1>(static_cast<long long>(2097152LL * b + 0LL * h + 1LL * q + 0LL)) & keys.template affine<int, 1>(static_cast<int>(0LL * b + 0LL * h + -1LL * q + 64LL)));
attn.kernel @wide_row_term
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask normalizer = #attn.softmax
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %stride = arith.constant 2097152 : index
      %offset = arith.muli %b, %stride : index
      %reach = arith.addi %q, %offset : index
      %seen = arith.cmpi sle, %kv, %reach : index
      %window = arith.constant 64 : index
      %near = arith.addi %kv, %window : index
      %recent = arith.cmpi sge, %near, %q : index
      %keep = arith.andi %seen, %recent : i1
      attn.yield %keep : i1
    }
