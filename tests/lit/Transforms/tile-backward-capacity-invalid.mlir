// Head dim 256's tiles are twice as wide: two consumers of 64 keys do not
// fit shared memory. First fit: K 65536 @ 0, V 65536 @ 65536, Q 32768 @
// 131072, dO 32768 @ 163840, lse 256 @ 196608, delta 256 @ 196864, dSᵀ
// 2 x 16384 @ 197632 (1024-aligned), dQ's staging 64 x 128 x 4 = 32768 @
// 230400; the turns (4) and the 7 barriers (56) fill the gap at 197120:
// 263168 bytes, 264192 with the alignment slack.
// RUN: attn-opt --attn-tile="backward=true backward-tile-override=consumer_warpgroups=2,consumer_registers=240,producer_registers=24" %s -verify-diagnostics

// expected-error @+1 {{backward plan is illegal: shared-memory capacity: backward block_m 64, block_n 128, stages 1, head_dim 256 needs 264192 bytes, limit 232448}}
attn.kernel @k problem = #attn.problem<q_heads = 8, kv_heads = 8, head_dim = 256, element_type = bf16> mask = #attn.no_mask normalizer = #attn.softmax
