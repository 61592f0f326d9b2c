//===- TensorMap.h - TMA descriptors for BSHD tensors -----------*- C++ -*-===//
#ifndef ATTN_RUNTIME_TENSORMAP_H
#define ATTN_RUNTIME_TENSORMAP_H

#include "attn/runtime/Tensor.h"

#include "attn_params.h"

#include <string_view>

namespace attn {

/// Checks, without the driver, that `view` can be read through a TMA tensor
/// map: 16-bit dtype, contiguous head_dim, 16-byte aligned base and outer
/// byte strides, sizes and strides within TMA limits, non-null data unless
/// empty. Throws attn::Error whose message starts with "<name>: ".
void validateTmaOperand(const TensorView &view, std::string_view name);
/// The same for the four operands of an attention call, named q, k, v, o.
void validateTmaOperands(const TensorView &q, const TensorView &k, const TensorView &v,
                         const TensorView &o);

/// Encodes a 4-D tiled tensor map over a BSHD view with dims ordered
/// innermost first {head_dim, seq, heads, batch} and box
/// {boxCols, boxRows, boxHeads, 1} (a box of several heads lands as their
/// boxRows-row blocks one after the other), 128-byte swizzle, 256-byte L2
/// promotion, and
/// zero fill for out-of-bounds elements. boxCols is 64 for 128-byte rows of
/// a 16-bit type. Empty dimensions are encoded as 1 (TMA rejects 0); a kernel
/// must not read a tensor whose true extent is zero. `name` prefixes error
/// messages.
attn_abi::TensorMapBlob encodeBSHDTensorMap(const TensorView &view, unsigned boxRows,
                                            unsigned boxCols, std::string_view name = "tensor",
                                            unsigned boxHeads = 1);

} // namespace attn

#endif // ATTN_RUNTIME_TENSORMAP_H
