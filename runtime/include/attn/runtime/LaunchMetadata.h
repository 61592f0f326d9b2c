//===- LaunchMetadata.h - Text form of a kernel's launch config -*- C++ -*-===//
//
// What a program that ships precompiled kernels needs beside the PTX or cubin
// (`attnc --emit=metadata`), and what the disk cache stores with each entry.
// One `key value` pair per line after a versioned header:
//
//   attn-launch-metadata 1
//   kernel attn_fwd_kernel
//   head_dim 128
//   q_heads 16
//   kv_heads 4
//   dtype bf16
//   scale 0x1.6a09e6p-4
//   block_m 128
//   block_n 128
//   threads 384
//   shared_memory_bytes 164920
//
// The scale is a C99 hex float so it survives the round trip bit-exactly.
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
inline constexpr int kLaunchMetadataVersion = 2;

std::string serializeLaunchConfig(const AttnLaunchConfig &config);

/// Parses serializeLaunchConfig's output. Every key must appear exactly once;
/// throws attn::Error("launch metadata: line N: ...") naming what is wrong.
AttnLaunchConfig parseLaunchConfig(std::string_view text);

} // namespace attn

#endif // ATTN_RUNTIME_LAUNCHMETADATA_H
