//===- TensorMap.cpp - TMA descriptors for BSHD tensors -------------------===//

#include "attn/runtime/TensorMap.h"

#include "attn/runtime/Driver.h"

#include "LaunchChecks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

namespace attn {

static_assert(sizeof(CUtensorMap) == sizeof(attn_abi::TensorMapBlob),
              "TensorMapBlob must be exactly a CUtensorMap");
static_assert(alignof(attn_abi::TensorMapBlob) >= 64,
              "TMA descriptors must be 64-byte aligned");

namespace {
constexpr int64_t kMaxTmaDim = int64_t(1) << 32;
constexpr int64_t kMaxTmaStrideBytes = int64_t(1) << 40;
constexpr unsigned kMaxTmaBox = 256;
constexpr unsigned kSwizzleBytes = 128;

using detail::fail;

CUtensorMapDataType tmaDataType(DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  case DType::F16:
    return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  case DType::F32:
  case DType::I32:
    break;
  }
  return CU_TENSOR_MAP_DATA_TYPE_FLOAT32; // Rejected by validation first.
}
} // namespace

void validateTmaOperand(const TensorView &view, std::string_view name) {
  if (view.dtype != DType::BF16 && view.dtype != DType::F16)
    fail(name, std::string("dtype must be bf16 or f16, got ") +
                   dtypeName(view.dtype));
  for (int dim = 0; dim < 4; ++dim) {
    if (view.shape[dim] < 0)
      fail(name, fmt::format("size of dim {} must be non-negative, got {}", dim, view.shape[dim]));
    if (view.shape[dim] > kMaxTmaDim)
      fail(name, fmt::format("size of dim {} exceeds the TMA limit of 2^32, got {}", dim,
                             view.shape[dim]));
  }
  if (view.strides[3] != 1)
    fail(name, fmt::format("last dim (head_dim) must be contiguous (stride 1), got {}",
                           view.strides[3]));

  const int64_t elementBytes = static_cast<int64_t>(dtypeSize(view.dtype));
  for (int dim = 0; dim < 3; ++dim) {
    int64_t stride = view.strides[dim];
    if (stride < 0)
      fail(name, fmt::format("stride of dim {} must be non-negative, got {}", dim, stride));
    if (stride >= kMaxTmaStrideBytes / elementBytes)
      fail(name, fmt::format("stride of dim {} must be below 2^40 bytes, got {} elements", dim,
                             stride));
    int64_t strideBytes = stride * elementBytes;
    if (strideBytes % 16 != 0)
      fail(name, fmt::format("stride of dim {} must be a multiple of 16 bytes, got {}", dim,
                             strideBytes));
  }

  auto address = reinterpret_cast<uintptr_t>(view.data);
  if (address % 16 != 0)
    fail(name, "data pointer must be 16-byte aligned");
  if (!view.data && view.numElements() != 0)
    fail(name, "data pointer is null");
}

void validateTmaOperands(const TensorView &q, const TensorView &k, const TensorView &v,
                         const TensorView &o) {
  validateTmaOperand(q, "q");
  validateTmaOperand(k, "k");
  validateTmaOperand(v, "v");
  validateTmaOperand(o, "o");
}

attn_abi::TensorMapBlob encodeBSHDTensorMap(const TensorView &view, unsigned boxRows,
                                            unsigned boxCols, std::string_view name,
                                            unsigned boxHeads) {
  validateTmaOperand(view, name);
  const unsigned elementBytes = static_cast<unsigned>(dtypeSize(view.dtype));
  if (boxRows == 0 || boxRows > kMaxTmaBox)
    fail(name, fmt::format("box rows must be in [1, 256], got {}", boxRows));
  if (boxHeads == 0 || boxHeads > kMaxTmaBox)
    fail(name, fmt::format("box heads must be in [1, 256], got {}", boxHeads));
  if (boxCols == 0 || boxCols > kMaxTmaBox)
    fail(name, fmt::format("box cols must be in [1, 256], got {}", boxCols));
  if ((boxCols * elementBytes) % 16 != 0 ||
      boxCols * elementBytes > kSwizzleBytes)
    fail(name, fmt::format("box cols must span a multiple of 16 bytes and at most {} (the "
                           "swizzle width), got {} bytes",
                           kSwizzleBytes, boxCols * elementBytes));

  // Innermost first: {head_dim, seq, heads, batch}.
  auto extent = [&](int dim) {
    return static_cast<cuuint64_t>(std::max<int64_t>(view.shape[dim], 1));
  };
  cuuint64_t globalDim[4] = {extent(3), extent(1), extent(2), extent(0)};
  cuuint64_t globalStrides[3] = {
      static_cast<cuuint64_t>(view.strides[1]) * elementBytes,
      static_cast<cuuint64_t>(view.strides[2]) * elementBytes,
      static_cast<cuuint64_t>(view.strides[0]) * elementBytes};
  cuuint32_t boxDim[4] = {boxCols, boxRows, boxHeads, 1};
  cuuint32_t elementStrides[4] = {1, 1, 1, 1};

  CUtensorMap map;
  std::memset(&map, 0, sizeof(map));
  ATTN_CU_CHECK_CTX(std::string(name) + " tensor map", cuTensorMapEncodeTiled,
                    &map, tmaDataType(view.dtype), 4, view.data, globalDim,
                    globalStrides, boxDim, elementStrides,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);

  attn_abi::TensorMapBlob blob;
  std::memcpy(&blob, &map, sizeof(blob));
  return blob;
}

} // namespace attn
