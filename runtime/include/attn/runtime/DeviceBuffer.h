//===- DeviceBuffer.h - RAII device memory ----------------------*- C++ -*-===//
#ifndef ATTN_RUNTIME_DEVICEBUFFER_H
#define ATTN_RUNTIME_DEVICEBUFFER_H

#include "attn/runtime/Driver.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace attn {

/// A device allocation in the current (or device 0's primary) context.
/// A zero-byte buffer holds no allocation and a null data().
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  void *data() const { return reinterpret_cast<void *>(pointer); }
  CUdeviceptr devicePointer() const { return pointer; }
  size_t size() const { return bytes; }

  /// Copies `count` bytes from host memory to offset `offset` (synchronous).
  void copyFromHost(const void *src, size_t count, size_t offset = 0);
  /// Copies `count` bytes at offset `offset` to host memory (synchronous).
  void copyToHost(void *dst, size_t count, size_t offset = 0) const;
  /// Sets every byte to `value`.
  void fill(uint8_t value);
  /// Sets every 32-bit word to `value` (e.g. a NaN pattern); the size must
  /// be a multiple of 4.
  void fill32(uint32_t value);

  template <typename T> void upload(const std::vector<T> &host) {
    copyFromHost(host.data(), host.size() * sizeof(T));
  }
  template <typename T> std::vector<T> download() const {
    std::vector<T> host(bytes / sizeof(T));
    copyToHost(host.data(), host.size() * sizeof(T));
    return host;
  }

private:
  void checkRange(size_t count, size_t offset, const char *what) const;
  void release();

  CUdeviceptr pointer = 0;
  size_t bytes = 0;
};

} // namespace attn

#endif // ATTN_RUNTIME_DEVICEBUFFER_H
