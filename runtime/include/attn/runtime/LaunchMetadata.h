//===- LaunchMetadata.h - Text form of a kernel's launch config -*- C++ -*-===//
//
// What a program that ships precompiled kernels needs beside the PTX or cubin
// (`attnc --emit=metadata`), and what the disk cache stores with each entry.
// One `key value` pair per line after a versioned header:
//
//   attn-launch-metadata 3
//   kernel attn_fwd_kernel
//   head_dim 128
//   q_heads 16
//   kv_heads 4
//   block_m 128
//   block_n 128
//   threads 384
//   shared_memory_bytes 164920
//   persistent_blocks_per_sm 0
//   dtype bf16
//   scale 0x1.6a09e6p-4
//   tuned_key_splits 2
//   tuned_key_splits.0 bh256_q1_k32768 4
//   tuned_key_splits.1 bh2048_q1_k131072 1
//   captures 2
//   capture.0 slopes f32 q_heads
//   capture.1 bias f32 q_heads,?,16 grad
//
// The scale is a C99 hex float so it survives the round trip bit-exactly.
// `captures N` is followed by capture.0 to capture.N-1, each `NAME DTYPE
// DIMS` with DIMS comma-separated: a size, `?` (any), `batch`, `q_heads`,
// `kv_heads`, `seqlen_q` or `seqlen_k` (captureDimSpelling), then `grad`
// for a capture whose gradient the backward computes. `tuned_key_splits N`
// is followed by N `BUCKET SPLITS` lines (AttnLaunchConfig::tunedKeySplits).
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_RUNTIME_LAUNCHMETADATA_H
#define ATTN_RUNTIME_LAUNCHMETADATA_H

#include "attn/runtime/AttentionLaunch.h"

#include <string>
#include <string_view>

namespace attn {

/// The version written by serializeLaunchConfig; parseLaunchConfig accepts
/// only this one.
/// Version 3 added the captured buffers, 5 even_work_tiles, 6
/// automatic_work_order, 7 the captures' `grad`, 8 step_list, 9
/// tuned_key_splits, 10 `causal` for softmax kernels too (before, 1 there
/// whatever the mask), 11 paged_forward.
inline constexpr int kLaunchMetadataVersion = 11;

std::string serializeLaunchConfig(const AttnLaunchConfig &config);

/// Parses serializeLaunchConfig's output. Every key must appear exactly once;
/// throws attn::Error("launch metadata: line N: ...") naming what is wrong.
AttnLaunchConfig parseLaunchConfig(std::string_view text);

} // namespace attn

#endif // ATTN_RUNTIME_LAUNCHMETADATA_H
