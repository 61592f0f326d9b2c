// Arguments for the runtime's checks without a GPU: fake device addresses
// (validation only looks at their values) and one valid forward call.
#ifndef ATTN_TESTS_UNIT_RUNTIMETESTARGS_H
#define ATTN_TESTS_UNIT_RUNTIMETESTARGS_H

#include "attn/runtime/Runtime.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace attn::test {

/// Fake device addresses: validation only looks at their values.
inline void *fakePointer(uintptr_t address) { return reinterpret_cast<void *>(address); }

/// Head dim 128, 8 query heads over 2 kv heads, bf16, 128 x 128 tiles.
inline AttnLaunchConfig makeConfig() {
  AttnLaunchConfig config;
  config.headDim = 128;
  config.qHeads = 8;
  config.kvHeads = 2;
  config.dtype = DType::BF16;
  config.scale = 0.088388f;
  config.blockM = 128;
  config.blockN = 128;
  config.threadsPerBlock = 384;
  config.sharedMemoryBytes = 200 * 1024;
  return config;
}

/// B=2, Sq=100, Sk=300, Hq=8, Hkv=2, D=128, contiguous bf16.
inline AttnForwardArgs makeArgs() {
  AttnForwardArgs args;
  args.q = contiguousBSHD(fakePointer(0x10000000), DType::BF16, 2, 100, 8, 128);
  args.k = contiguousBSHD(fakePointer(0x20000000), DType::BF16, 2, 300, 2, 128);
  args.v = contiguousBSHD(fakePointer(0x30000000), DType::BF16, 2, 300, 2, 128);
  args.o = contiguousBSHD(fakePointer(0x40000000), DType::BF16, 2, 100, 8, 128);
  args.lse = static_cast<float *>(fakePointer(0x50000000));
  return args;
}

/// Applies `mutate` to a valid (config, args) pair and expects an
/// attn::Error whose message starts with `prefix` and contains `detail`.
inline void expectInvalid(
    const std::function<void(AttnLaunchConfig &, AttnForwardArgs &)> &mutate,
    const std::string &prefix, const std::string &detail) {
  AttnLaunchConfig config = makeConfig();
  AttnForwardArgs args = makeArgs();
  mutate(config, args);
  CHECK_THROWS_AS(validateForwardArgs(config, args), Error);
  CHECK_THROWS_WITH(validateForwardArgs(config, args),
                    Catch::Matchers::StartsWith(prefix) && Catch::Matchers::Contains(detail));
}

} // namespace attn::test

#endif // ATTN_TESTS_UNIT_RUNTIMETESTARGS_H
