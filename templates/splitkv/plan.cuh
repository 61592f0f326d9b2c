// The short-query kernels' constants, from the forward unit's plan and the
// head dim's short-query plan (attn_params.h).
#pragma once

#include "device/grid_dependency.cuh"
#include "device/warp_mma.cuh"

namespace attn_split_kv {

using namespace attn_dev;
using Element = attn_plan::Element;
using Mods = attn_plan::UserMods;
using Mask = attn_plan::Mask;
typedef long long i64;

constexpr int kHeadDim = attn_plan::kHeadDim;
constexpr int kBlockN = attn_abi::splitKvBlockN(kHeadDim);
constexpr int kStages = attn_abi::splitKvStages(kHeadDim);
constexpr int kRows = attn_abi::splitKvRows(kHeadDim);
constexpr int kThreads = attn_abi::kSplitKvThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kRowChunks = kHeadDim / 8; // 16-byte chunks of a row
constexpr int kKeySteps = kHeadDim / 16; // k-steps of S = Q Kᵀ
constexpr int kDimTiles = kHeadDim / 8;  // 8-column tiles of O
constexpr u32 kQBytes = kRows * kHeadDim * 2;
constexpr u32 kTileBytes = kBlockN * kHeadDim * 2;
static_assert(kRows % 16 == 0 && kRows <= 16 * kWarps, "a warp owns 16 rows");
static_assert(kBlockN % 16 == 0 && kHeadDim % 64 == 0, "whole mma tiles");
static_assert(kQBytes + 2 * kStages * kTileBytes == attn_abi::splitKvSharedBytes(kHeadDim),
              "the launch reserves this layout");

} // namespace attn_split_kv
