// attn-plan-smem lays out Q, the K/V rings, the O staging tile and the
// mbarriers (2 for Q: q_full, q_empty; 4 per stage: k_full, v_full, k_empty,
// v_empty; 8 bytes each). O staging gets bytes of its own when Q + rings +
// staging + barriers + 1024 B of alignment slack fit in 232448 B (the
// persistent kernel stores one tile's O while the next Q arrives) and the
// plan is persistent; otherwise it lives in the epilogue only and reuses Q's
// bytes. A mask_mod the compiler cannot classify adds a key_bits buffer: per
// stage the stored key bits of a partial tile (block_m x 4 words).
// RUN: attn-opt --attn-plan-smem %s | FileCheck %s
// The attn-plan pipeline gives the same layouts for the default tiles.
// RUN: attn-opt --attn-plan %s | FileCheck %s --check-prefix=PIPE

// head_dim 128, bf16, 128 x 128 tiles, 2 stages. A row is 128 x 2 = 256 B.
//   q          128 x 256 = 32768            @ 0
//   k          2 slots x 128 x 256 = 65536  @ 32768
//   v          65536                        @ 32768 + 65536 = 98304
//   fits?      32768 + 131072 + 80 + 1024 + 32768 = 197712 <= 232448: own bytes
//   o_staging  32768, live with q, after v  @ 98304 + 65536 = 163840
//   barriers   10 x 8 = 80                  @ 163840 + 32768 = 196608
//   total      196608 + 80 = 196688
// CHECK-LABEL: attn.kernel @hd128
// CHECK:       smem = #attn.smem_plan<total = 196688, buffers = [
// CHECK-SAME:    #attn.buffer<"q", offset = 0, size = 32768, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"k", offset = 32768, size = 65536, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:    #attn.buffer<"v", offset = 98304, size = 65536, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:    #attn.buffer<"o_staging", offset = 163840, size = 32768, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"barriers", offset = 196608, size = 80, align = 8, swizzle = 0, slots = 10>]>
// PIPE-LABEL:  attn.kernel @hd128
// PIPE:        smem = #attn.smem_plan<total = 196688,
attn.kernel @hd128
    problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.causal<bottom_right>
    normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>}

// head_dim 64, f16, 128 x 128 tiles, 3 stages. A row is 64 x 2 = 128 B.
//   q          128 x 128 = 16384            @ 0
//   k          3 x 128 x 128 = 49152        @ 16384
//   v          49152                        @ 65536
//   o_staging  16384, own bytes              @ 114688
//   barriers   (2 + 4 x 3) x 8 = 112        @ 131072
//   total      131184
// CHECK-LABEL: attn.kernel @hd64
// CHECK:       smem = #attn.smem_plan<total = 131184, buffers = [
// CHECK-SAME:    #attn.buffer<"q", offset = 0, size = 16384, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"k", offset = 16384, size = 49152, align = 1024, swizzle = 128, slots = 3>,
// CHECK-SAME:    #attn.buffer<"v", offset = 65536, size = 49152, align = 1024, swizzle = 128, slots = 3>,
// CHECK-SAME:    #attn.buffer<"o_staging", offset = 114688, size = 16384, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"barriers", offset = 131072, size = 112, align = 8, swizzle = 0, slots = 14>]>
// PIPE-LABEL:  attn.kernel @hd64
// PIPE:        smem = #attn.smem_plan<total = 131184,
attn.kernel @hd64
    problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 64, element_type = f16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 3, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>}

// head_dim 256, bf16, 128 x 64 tiles, 2 stages. A row is 512 B.
//   q          128 x 512 = 65536            @ 0
//   k          2 x 64 x 512 = 65536         @ 65536
//   v          65536                        @ 131072
//   fits?      65536 + 131072 + 80 + 1024 + 65536 = 263248 > 232448
//   o_staging  65536, epilogue only         @ 0 (aliases q)
//   barriers   80                           @ 196608
//   total      196688
// CHECK-LABEL: attn.kernel @hd256
// CHECK:       smem = #attn.smem_plan<total = 196688, buffers = [
// CHECK-SAME:    #attn.buffer<"q", offset = 0, size = 65536, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"k", offset = 65536, size = 65536, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:    #attn.buffer<"v", offset = 131072, size = 65536, align = 1024, swizzle = 128, slots = 2>,
// CHECK-SAME:    #attn.buffer<"o_staging", offset = 0, size = 65536, align = 1024, swizzle = 128, aliases = "q">,
// CHECK-SAME:    #attn.buffer<"barriers", offset = 196608, size = 80, align = 8, swizzle = 0, slots = 10>]>
// PIPE-LABEL:  attn.kernel @hd256
// PIPE:        smem = #attn.smem_plan<total = 196688,
attn.kernel @hd256
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 256, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 64, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>}

// One stage, one consumer warpgroup, the smallest block_n: head_dim 128
// (256 B rows), 64 x 16 tiles.
//   q          64 x 256 = 16384             @ 0
//   k          1 x 16 x 256 = 4096          @ 16384
//   v          4096                         @ 20480
//   o_staging  16384, own bytes              @ 24576
//   barriers   (2 + 4) x 8 = 48             @ 40960
//   total      41008
// CHECK-LABEL: attn.kernel @tiny
// CHECK:       smem = #attn.smem_plan<total = 41008, buffers = [
// CHECK-SAME:    #attn.buffer<"q", offset = 0, size = 16384, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"k", offset = 16384, size = 4096, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"v", offset = 20480, size = 4096, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"o_staging", offset = 24576, size = 16384, align = 1024, swizzle = 128>,
// CHECK-SAME:    #attn.buffer<"barriers", offset = 40960, size = 48, align = 8, swizzle = 0, slots = 6>]>
// The pipeline keeps a legal preset tile, so the layout is the same.
// PIPE-LABEL:  attn.kernel @tiny
// PIPE:        smem = #attn.smem_plan<total = 41008,
attn.kernel @tiny
    problem = #attn.problem<q_heads = 2, kv_heads = 1, head_dim = 128, element_type = bf16>
    mask = #attn.causal<top_left>
    normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 64, block_n = 16, stages = 1, consumer_warpgroups = 1, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>}

// An existing smem plan is recomputed from the tile.
// CHECK-LABEL: attn.kernel @stale
// CHECK:       smem = #attn.smem_plan<total = 196688,
attn.kernel @stale
    problem = #attn.problem<q_heads = 16, kv_heads = 2, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24, persistent_blocks_per_sm = 1>,
                smem = #attn.smem_plan<total = 8, buffers = [#attn.buffer<"old", offset = 0, size = 8, align = 8, swizzle = 0>]>}

// A block that runs one work tile (no persistent_blocks_per_sm): staging
// reuses Q's bytes even where it would fit beside them.
//   q          32768 @ 0, k 65536 @ 32768, v 65536 @ 98304
//   o_staging  32768, epilogue only         @ 0 (aliases q)
//   barriers   80                           @ 163840
//   total      163920
// CHECK-LABEL: attn.kernel @one_tile_per_block
// CHECK:       smem = #attn.smem_plan<total = 163920, buffers = [
// CHECK-SAME:    #attn.buffer<"o_staging", offset = 0, size = 32768, align = 1024, swizzle = 128, aliases = "q">,
// CHECK-SAME:    #attn.buffer<"barriers", offset = 163840, size = 80, align = 8, swizzle = 0, slots = 10>]>
attn.kernel @one_tile_per_block
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}

// A mask_mod that reads a buffer (document ids): the tiles come from a
// run-time coverage, and each stage holds a partial tile's stored key bits,
// 128 rows x 4 words x 4 B = 2048 B (32-bit words up to 128 keys a tile),
// live with the K/V rings.
//   q, k, v    as above; o_staging aliases q
//   key_bits   2 x 2048 = 4096              @ 163840
//   barriers   80                           @ 167936
//   total      168016
// CHECK-LABEL: attn.kernel @document
// CHECK:       smem = #attn.smem_plan<total = 168016, buffers = [
// CHECK-SAME:    #attn.buffer<"key_bits", offset = 163840, size = 4096, align = 16, swizzle = 0, slots = 2>,
// CHECK-SAME:    #attn.buffer<"barriers", offset = 167936, size = 80, align = 8, swizzle = 0, slots = 10>]>
attn.kernel @document
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    captures = [#attn.capture<"document", i32, [seqlen_q]>]
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index, %document: memref<?xi32>):
      %dq = memref.load %document[%q] : memref<?xi32>
      %dk = memref.load %document[%kv] : memref<?xi32>
      %same = arith.cmpi eq, %dq, %dk : i32
      attn.yield %same : i1
    }

// 192-key tiles take 64-bit words: 2 x 128 x 4 x 8 = 8192 B.
// CHECK-LABEL: attn.kernel @document_wide
// CHECK:       #attn.buffer<"key_bits", offset = {{[0-9]+}}, size = 8192, align = 16, swizzle = 0, slots = 2>
attn.kernel @document_wide
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 64, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    captures = [#attn.capture<"document", i32, [seqlen_q]>]
    attributes {tile = #attn.tile<block_m = 128, block_n = 192, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index, %document: memref<?xi32>):
      %dq = memref.load %document[%q] : memref<?xi32>
      %dk = memref.load %document[%kv] : memref<?xi32>
      %same = arith.cmpi eq, %dq, %dk : i32
      attn.yield %same : i1
    }

// A mask_mod of affine inequalities (a prefix-LM) is classified at compile
// time: no run-time coverage, no key_bits buffer.
// CHECK-LABEL: attn.kernel @prefix_lm
// CHECK-NOT:   key_bits
// CHECK:       attn.kernel
attn.kernel @prefix_lm
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
    mask_mod {
    ^bb0(%b: index, %h: index, %q: index, %kv: index):
      %prefix = arith.constant 2048 : index
      %in_prefix = arith.cmpi slt, %kv, %prefix : index
      %causal = arith.cmpi ule, %kv, %q : index
      %keep = arith.ori %in_prefix, %causal : i1
      attn.yield %keep : i1
    }

attn.kernel @last
    problem = #attn.problem<q_heads = 16, kv_heads = 16, head_dim = 128, element_type = bf16>
    mask = #attn.no_mask
    normalizer = #attn.softmax
    attributes {tile = #attn.tile<block_m = 128, block_n = 128, stages = 2, consumer_warpgroups = 2, producer_warpgroups = 1, consumer_registers = 240, producer_registers = 24>}
