//===- FileUtil.h - Files shared safely between processes -------*- C++ -*-===//
//
// The POSIX pieces the disk cache and the tuning database share: directory
// creation, advisory locks, whole reads and atomic replacement (temporary
// file, fsync, rename), so a reader sees a whole old or a whole new file.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_RUNTIME_LIB_FILEUTIL_H
#define ATTN_RUNTIME_LIB_FILEUTIL_H

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace attn {

/// strerror for an errno value.
std::string describeErrno(int error);

/// Closes a file descriptor on every path.
struct FileHandle {
  int fd = -1;
  explicit FileHandle(int descriptor) : fd(descriptor) {}
  ~FileHandle();
  FileHandle(const FileHandle &) = delete;
  FileHandle &operator=(const FileHandle &) = delete;
};

/// mkdir -p; returns an empty string or why it failed.
std::string makeDirectories(const std::string &path);

/// write(2) until done; false on an error (errno says which).
bool writeAll(int fd, const char *data, size_t size);

/// Reads up to `limit` bytes from the file's current position.
bool readPrefix(int fd, size_t limit, std::string &out);

/// Writes `bytes` to `tempPath` (created exclusively), calls `beforeSync`
/// with its descriptor, fsyncs and renames it over `path`. Returns an empty
/// string or why it failed (the temporary file is then removed).
std::string writeFileAtomically(const std::string &path, const std::string &tempPath,
                                std::string_view bytes,
                                const std::function<void(int fd)> &beforeSync = {});

/// Holds flock(LOCK_EX) on a lock file, if it could be had in time.
class FileLock {
public:
  FileLock(const std::string &path, double timeoutSeconds);
  ~FileLock();
  FileLock(const FileLock &) = delete;
  FileLock &operator=(const FileLock &) = delete;
  bool held() const { return fd >= 0; }

private:
  int fd = -1;
};

} // namespace attn

#endif // ATTN_RUNTIME_LIB_FILEUTIL_H
