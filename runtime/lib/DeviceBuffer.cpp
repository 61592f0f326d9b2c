//===- DeviceBuffer.cpp - RAII device memory ------------------------------===//

#include "attn/runtime/DeviceBuffer.h"

#include <fmt/format.h>

#include <string>
#include <utility>

namespace attn {

DeviceBuffer::DeviceBuffer(size_t size) : bytes(size) {
  if (bytes == 0)
    return; // cuMemAlloc rejects zero sizes.
  ensureContext();
  ATTN_CU_CHECK_CTX(fmt::format("allocating {} bytes", bytes), cuMemAlloc, &pointer, bytes);
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : pointer(std::exchange(other.pointer, 0)),
      bytes(std::exchange(other.bytes, 0)) {}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    release();
    pointer = std::exchange(other.pointer, 0);
    bytes = std::exchange(other.bytes, 0);
  }
  return *this;
}

void DeviceBuffer::release() {
  // Never throws: a failed free (e.g. after a sticky kernel fault) leaks.
  if (pointer)
    Driver::get().api().cuMemFree(pointer);
  pointer = 0;
  bytes = 0;
}

void DeviceBuffer::checkRange(size_t count, size_t offset,
                              const char *what) const {
  if (offset > bytes || count > bytes - offset)
    throw Error(fmt::format("{}: range [{}, {}+{}) exceeds the buffer's {} bytes", what, offset,
                            offset, count, bytes));
}

void DeviceBuffer::copyFromHost(const void *src, size_t count, size_t offset) {
  checkRange(count, offset, "DeviceBuffer::copyFromHost");
  if (count == 0)
    return;
  ATTN_CU_CHECK(cuMemcpyHtoD, pointer + offset, src, count);
}

void DeviceBuffer::copyToHost(void *dst, size_t count, size_t offset) const {
  checkRange(count, offset, "DeviceBuffer::copyToHost");
  if (count == 0)
    return;
  ATTN_CU_CHECK(cuMemcpyDtoH, dst, pointer + offset, count);
}

void DeviceBuffer::fill(uint8_t value) {
  if (bytes == 0)
    return;
  ATTN_CU_CHECK(cuMemsetD8, pointer, value, bytes);
}

void DeviceBuffer::fill32(uint32_t value) {
  if (bytes % 4 != 0)
    throw Error(fmt::format("DeviceBuffer::fill32: size {} is not a multiple of 4", bytes));
  if (bytes == 0)
    return;
  ATTN_CU_CHECK(cuMemsetD32, pointer, value, bytes / 4);
}

} // namespace attn
