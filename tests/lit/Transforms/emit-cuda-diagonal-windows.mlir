// The staged score_mod diagonals take two windows per consumer warpgroup
// where they fit and one where they do not: attn-plan-smem sizes the buffer
// at consumers x windows x staged values x (block_n + 64) words of 4 bytes
// (2 x 2 x 1 x 192 x 4 = 3072 with 128-key tiles, 2 x 1 x 1 x 224 x 4 =
// 1792 with 160-key tiles, whose plan has no room for a second window,
// 1 x 2 x 1 x 192 x 4 = 1536 with one consumer), and attn-emit-cuda passes
// the count to the kernel (kScoreDiagonalWindows). Each window has a full
// and an empty mbarrier besides the ring's 2 + 4 x stages.
// RUN: attn-opt --attn-tile="tile-override=block_m=128,block_n=128,stages=2,consumer_warpgroups=2" --attn-plan-smem --attn-classify-blocks --attn-lower-mods --attn-emit-cuda %s | FileCheck %s --check-prefix=TWO
// RUN: attn-opt --attn-tile="tile-override=block_m=128,block_n=160,stages=2,consumer_warpgroups=2" --attn-plan-smem --attn-classify-blocks --attn-lower-mods --attn-emit-cuda %s | FileCheck %s --check-prefix=ONE
// RUN: attn-opt --attn-tile="tile-override=block_m=64,block_n=128,stages=2,consumer_warpgroups=1" --attn-plan-smem --attn-classify-blocks --attn-lower-mods --attn-emit-cuda %s | FileCheck %s --check-prefix=SINGLE

// TWO-LABEL: attn.kernel @table_bias
// TWO: attn.cuda_source = "
// TWO-SAME: static constexpr int kScoreDiagonals = 1;
// TWO-SAME: constexpr unsigned kSmemBarriers = [[#TWO_BARRIERS:]];\0A
// TWO-SAME: constexpr unsigned kSmemScoreDiagonalBytes = 3072;\0A
// TWO-SAME: constexpr int kScoreDiagonalWindows = 2;\0A
// TWO-SAME: constexpr unsigned kSmemTotal = [[#TWO_BARRIERS+144]];\0A

// ONE-LABEL: attn.kernel @table_bias
// ONE: attn.cuda_source = "
// ONE-SAME: static constexpr int kScoreDiagonals = 1;
// ONE-SAME: constexpr unsigned kSmemBarriers = [[#ONE_BARRIERS:]];\0A
// ONE-SAME: constexpr unsigned kSmemScoreDiagonalBytes = 1792;\0A
// ONE-SAME: constexpr int kScoreDiagonalWindows = 1;\0A
// ONE-SAME: constexpr unsigned kSmemTotal = [[#ONE_BARRIERS+112]];\0A

// SINGLE-LABEL: attn.kernel @table_bias
// SINGLE: attn.cuda_source = "
// SINGLE-SAME: static constexpr int kScoreDiagonals = 1;
// SINGLE-SAME: constexpr unsigned kSmemBarriers = [[#SINGLE_BARRIERS:]];\0A
// SINGLE-SAME: constexpr unsigned kSmemScoreDiagonalBytes = 1536;\0A
// SINGLE-SAME: constexpr int kScoreDiagonalWindows = 2;\0A
// SINGLE-SAME: constexpr unsigned kSmemTotal = [[#SINGLE_BARRIERS+112]];\0A
attn.kernel @table_bias
    problem = #attn.problem<q_heads = 2, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right> normalizer = #attn.softmax
    captures = [#attn.capture<"bias", f32, [q_heads, ?]>]
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %q: index, %kv: index, %bias: memref<?x?xf32>):
      %offset = arith.constant 1000 : index
      %shifted = arith.addi %q, %offset : index
      %column = arith.subi %shifted, %kv : index
      %value = memref.load %bias[%h, %column] : memref<?x?xf32>
      %biased = arith.addf %s, %value : f32
      attn.yield %biased : f32
    }
