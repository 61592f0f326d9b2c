//===- Error.h - Runtime error type -----------------------------*- C++ -*-===//
//
// Every failure in the runtime (driver calls, argument validation, resource
// exhaustion) is reported as an attn::Error whose message names what failed.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_RUNTIME_ERROR_H
#define ATTN_RUNTIME_ERROR_H

#include <stdexcept>
#include <string>

namespace attn {

class Error : public std::runtime_error {
public:
  explicit Error(const std::string &message) : std::runtime_error(message) {}
  explicit Error(const char *message) : std::runtime_error(message) {}
};

} // namespace attn

#endif // ATTN_RUNTIME_ERROR_H
