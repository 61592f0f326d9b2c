//===- Tensor.h - Views of BSHD tensors and captured buffers ----*- C++ -*-===//
#ifndef ATTN_RUNTIME_TENSOR_H
#define ATTN_RUNTIME_TENSOR_H

#include "attn/runtime/DType.h"

#include <cstdint>
#include <vector>

namespace attn {

/// A non-owning view of a 4-D tensor in BSHD order: [batch, seq, heads,
/// head_dim]. Strides are in elements, not bytes.
struct TensorView {
  void *data = nullptr;
  DType dtype = DType::BF16;
  int64_t shape[4] = {0, 0, 0, 0};
  int64_t strides[4] = {0, 0, 0, 0};

  int64_t batch() const { return shape[0]; }
  int64_t seqlen() const { return shape[1]; }
  int64_t heads() const { return shape[2]; }
  int64_t headDim() const { return shape[3]; }

  int64_t numElements() const {
    return shape[0] * shape[1] * shape[2] * shape[3];
  }
};

/// A densely packed BSHD view (head_dim fastest).
inline TensorView contiguousBSHD(void *data, DType dtype, int64_t batch,
                                 int64_t seqlen, int64_t heads,
                                 int64_t headDim) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.shape[0] = batch;
  view.shape[1] = seqlen;
  view.shape[2] = heads;
  view.shape[3] = headDim;
  view.strides[3] = 1;
  view.strides[2] = headDim;
  view.strides[1] = heads * headDim;
  view.strides[0] = seqlen * heads * headDim;
  return view;
}

/// A captured buffer passed at launch: contiguous row-major device memory.
/// Its shape must match the kernel's declaration of it (CaptureDecl).
struct CaptureView {
  const void *data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

/// The gradient of a learnable captured buffer (one declared with `grad`),
/// written by the backward: contiguous row-major f32 device memory of the
/// capture's shape.
struct CaptureGradView {
  float *data = nullptr;
  std::vector<int64_t> shape;
};

} // namespace attn

#endif // ATTN_RUNTIME_TENSOR_H
