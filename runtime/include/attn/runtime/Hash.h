//===- Hash.h - SHA-256 and XXH64 -------------------------------*- C++ -*-===//
//
// SHA-256 names cache entries: a cryptographic hash, so two different kernels
// never share a key in practice. XXH64 checksums their contents: it only has
// to catch truncation and flipped bytes, and at several GB/s it keeps a
// disk-cache hit cheap where SHA-256 would cost milliseconds.
//
// XXH64 is xxHash's (Debian's libxxhash-dev, compiled in). SHA-256 is
// written here (checked against FIPS 180-4's vectors in unit.cache): the
// runtime must start where only the GPU driver is installed, so libcrypto
// would be linked statically, and OpenSSL's EVP SHA-256 alone brings about
// 4.9 MB into each tool and into libattnc_c.so.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_RUNTIME_HASH_H
#define ATTN_RUNTIME_HASH_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace attn {

class Sha256 {
public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();

  /// Appends `size` bytes.
  Sha256 &update(const void *data, size_t size);
  Sha256 &update(std::string_view text) {
    return update(text.data(), text.size());
  }
  /// Appends the length (8 bytes) and then the bytes of `field`, so that a
  /// sequence of fields hashes differently from any other split of the same
  /// bytes ("ab","c" vs "a","bc").
  Sha256 &updateField(std::string_view field);

  /// Pads and returns the digest; the object must not be used afterwards.
  Digest finish();

  /// Digest of `text` in one call.
  static Digest hash(std::string_view text);

  /// 64 lower-case hex digits.
  static std::string toHex(const Digest &digest);

private:
  void compress(const uint8_t *block);

  uint32_t state[8];
  uint8_t buffer[64];
  size_t buffered = 0;
  uint64_t totalBytes = 0;
};

/// XXH64 of `size` bytes (the xxHash 64-bit algorithm, bit-exact).
uint64_t xxh64(const void *data, size_t size, uint64_t seed = 0);

} // namespace attn

#endif // ATTN_RUNTIME_HASH_H
