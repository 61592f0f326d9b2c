// Temporary directories, whole-file reads and writes, and child processes
// for the cache tests.
#ifndef ATTN_TESTS_UNIT_TESTSUPPORT_H
#define ATTN_TESTS_UNIT_TESTSUPPORT_H

#include <catch2/catch.hpp>

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <functional>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace attn::test {

/// A fresh directory under the system's temporary directory, removed with
/// its contents at the end of the scope.
struct TempDir {
  std::string path;
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "attn-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code error;
    std::filesystem::remove_all(path, error);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
};

inline std::string readFile(const std::string &path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

inline void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Waits for every child; returns their exit codes (128 + signal when one
/// was killed).
inline std::vector<int> waitForExitCodes(const std::vector<pid_t> &children) {
  std::vector<int> codes;
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

/// Forks one child per body; the children start together once all exist,
/// run their body and exit with its result. Returns the exit codes.
inline std::vector<int> runInChildren(const std::vector<std::function<int()>> &bodies) {
  int gate[2];
  REQUIRE(::pipe(gate) == 0);
  std::vector<pid_t> children;
  for (const auto &body : bodies) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(gate[1]);
      char byte;
      // Returns 0 (EOF) when the parent closes its end: the start signal.
      while (::read(gate[0], &byte, 1) < 0 && errno == EINTR) {
      }
      int code = 1;
      try {
        code = body();
      } catch (...) {
        code = 99;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  ::close(gate[0]);
  ::close(gate[1]);
  return waitForExitCodes(children);
}

} // namespace attn::test

#endif // ATTN_TESTS_UNIT_TESTSUPPORT_H
