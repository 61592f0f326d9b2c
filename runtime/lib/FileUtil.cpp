//===- FileUtil.cpp - Files shared safely between processes ---------------===//

#include "FileUtil.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <system_error>
#include <thread>

namespace attn {

std::string describeErrno(int error) {
  return std::generic_category().message(error);
}

FileHandle::~FileHandle() {
  if (fd >= 0)
    ::close(fd);
}

std::string makeDirectories(const std::string &path) {
  std::string partial;
  size_t position = 0;
  while (position <= path.size()) {
    size_t slash = path.find('/', position);
    if (slash == std::string::npos)
      slash = path.size();
    partial = path.substr(0, slash);
    position = slash + 1;
    if (partial.empty())
      continue;
    if (::mkdir(partial.c_str(), 0755) == 0 || errno == EEXIST) {
      struct stat status;
      if (::stat(partial.c_str(), &status) != 0)
        return "cannot stat '" + partial + "': " + describeErrno(errno);
      if (!S_ISDIR(status.st_mode))
        return "'" + partial + "' is not a directory";
      continue;
    }
    return "cannot create '" + partial + "': " + describeErrno(errno);
  }
  return {};
}

bool writeAll(int fd, const char *data, size_t size) {
  while (size > 0) {
    ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
  return true;
}

bool readPrefix(int fd, size_t limit, std::string &out) {
  out.clear();
  char chunk[65536];
  while (out.size() < limit) {
    ssize_t got = ::read(fd, chunk, std::min(sizeof(chunk), limit - out.size()));
    if (got < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    if (got == 0)
      break;
    out.append(chunk, static_cast<size_t>(got));
  }
  return true;
}

std::string writeFileAtomically(const std::string &path, const std::string &tempPath,
                                std::string_view bytes,
                                const std::function<void(int fd)> &beforeSync) {
  int fd = ::open(tempPath.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return "cannot create '" + tempPath + "': " + describeErrno(errno);
  bool ok = writeAll(fd, bytes.data(), bytes.size());
  int error = errno;
  if (ok) {
    if (beforeSync)
      beforeSync(fd);
    ok = ::fsync(fd) == 0;
    error = errno;
  }
  ::close(fd);
  if (ok) {
    ok = ::rename(tempPath.c_str(), path.c_str()) == 0;
    error = errno;
  }
  if (!ok) {
    ::unlink(tempPath.c_str());
    return "cannot write '" + path + "': " + describeErrno(error);
  }
  return {};
}

FileLock::FileLock(const std::string &path, double timeoutSeconds) {
  fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return;
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutSeconds);
  auto pause = std::chrono::milliseconds(1);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if ((errno != EWOULDBLOCK && errno != EINTR) ||
        std::chrono::steady_clock::now() >= deadline) {
      ::close(fd);
      fd = -1;
      return;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

FileLock::~FileLock() {
  if (fd >= 0)
    ::close(fd); // Releases the lock.
}

} // namespace attn
