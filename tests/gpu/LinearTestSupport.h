// Helpers the linear family's GPU tests share (test_linear.cpp for the
// forward, test_linear_backward.cpp for the backward): host views of the
// harness's tensors for the CPU reference, seeded uniform values, fp32
// uploads and the relative L2 error every check reports.
#ifndef ATTN_TESTS_GPU_LINEARTESTSUPPORT_H
#define ATTN_TESTS_GPU_LINEARTESTSUPPORT_H

#include "AttnHarness.h"
#include "attn/Reference/LinearAttention.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace attn::gputest {

/// A contiguous BSHD host copy as the reference reads it.
inline reference::HostTensor hostTensor(const harness::HostDeviceTensor &tensor) {
  const TensorView &view = tensor.view;
  return reference::HostTensor{tensor.host.data(),
                               {view.shape[1] * view.shape[2] * view.shape[3],
                                view.shape[2] * view.shape[3], view.shape[3], 1}};
}

/// `count` values uniform in [low, high).
inline std::vector<float> randomValues(size_t count, std::mt19937_64 &random, float low, float high) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> values(count);
  for (float &value : values)
    value = uniform(random);
  return values;
}

/// An fp32 device copy (at least one element, so that the pointer is valid).
inline DeviceBuffer upload(const std::vector<float> &values) {
  DeviceBuffer buffer(std::max<size_t>(values.size(), 1) * sizeof(float));
  if (!values.empty())
    buffer.upload(values);
  return buffer;
}

/// ||actual - expected|| / ||expected|| (the absolute norm where expected is
/// zero); every actual value must be finite.
template <class A, class B> double relativeL2(const A &actual, const B &expected) {
  REQUIRE(actual.size() == expected.size());
  double error = 0, norm = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    REQUIRE(std::isfinite(double(actual[i])));
    error += (double(actual[i]) - double(expected[i])) * (double(actual[i]) - double(expected[i]));
    norm += double(expected[i]) * double(expected[i]);
  }
  return norm == 0 ? std::sqrt(error) : std::sqrt(error / norm);
}

} // namespace attn::gputest

#endif // ATTN_TESTS_GPU_LINEARTESTSUPPORT_H
