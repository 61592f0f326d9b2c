// Temporary directories, whole-file reads and writes, and child processes
// for the cache tests.
#ifndef ATTN_TESTS_UNIT_TESTSUPPORT_H
#define ATTN_TESTS_UNIT_TESTSUPPORT_H

#include <catch2/catch.hpp>

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
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

/// What `ptxas -arch=sm_90a -v` made of a PTX text: its exit status and
/// report (registers, spills, stack frame per entry).
struct PtxasReport {
  int status = -1;
  std::string text;

  /// Whether every function has no stack frame and no spills (ptxas
  /// reports "N bytes stack frame, N bytes spill stores, N bytes spill
  /// loads" once per function).
  bool spillFree() const {
    size_t functions = 0;
    for (size_t at = text.find("bytes stack frame"); at != std::string::npos;
         at = text.find("bytes stack frame", at + 1)) {
      ++functions;
      size_t line = text.rfind('\n', at);
      size_t start = line == std::string::npos ? 0 : line + 1;
      std::string properties = text.substr(start, text.find('\n', at) - start);
      if (properties.find_first_of("123456789") != std::string::npos)
        return false;
    }
    return functions > 0;
  }
  /// Whether ptxas serialized WGMMA instructions for lack of registers
  /// (its performance advisory C7512): each product then waits for the one
  /// before.
  bool serializesWgmma() const { return text.find("(C7512)") != std::string::npos; }
  /// The spill stores ptxas reports for entry function `entry` in bytes,
  /// or -1 when the report has none.
  int spillStoreBytes(const std::string &entry) const {
    size_t at = text.find("Compiling entry function '" + entry + "'");
    if (at == std::string::npos)
      return -1;
    size_t spill = text.find("bytes spill stores", at);
    if (spill == std::string::npos)
      return -1;
    size_t comma = text.rfind(',', spill);
    return std::atoi(text.c_str() + comma + 1);
  }
  /// The "Used N registers" count of entry function `entry`, or -1 when
  /// the report has none.
  int registers(const std::string &entry) const {
    size_t at = text.find("Compiling entry function '" + entry + "'");
    if (at == std::string::npos)
      return -1;
    at = text.find("Used ", at);
    return at == std::string::npos ? -1 : std::atoi(text.c_str() + at + 5);
  }
};

/// Assembles PTX with the toolkit's ptxas. Uses no Catch macros, so worker
/// threads may call it.
inline PtxasReport assembleWithPtxas(const std::vector<char> &ptx) {
  PtxasReport report;
  std::string pattern =
      (std::filesystem::temp_directory_path() / "attn-ptxas-XXXXXX.ptx").string();
  int fd = ::mkstemps(pattern.data(), 4);
  if (fd < 0) {
    report.text = "cannot create a temporary PTX file";
    return report;
  }
  bool written = ::write(fd, ptx.data(), ptx.size()) == ssize_t(ptx.size());
  ::close(fd);
  if (written) {
    std::string command =
        "/usr/local/cuda/bin/ptxas -arch=sm_90a -v -o /dev/null " + pattern + " 2>&1";
    if (FILE *pipe = ::popen(command.c_str(), "r")) {
      char buffer[512];
      while (::fgets(buffer, sizeof(buffer), pipe))
        report.text += buffer;
      int status = ::pclose(pipe);
      report.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    }
  }
  ::unlink(pattern.c_str());
  return report;
}

} // namespace attn::test

#endif // ATTN_TESTS_UNIT_TESTSUPPORT_H
