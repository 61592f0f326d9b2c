//===- Nvrtc.cpp - CUDA C++ to PTX / cubin through NVRTC ------------------===//

#include "attn/Backend/Nvrtc.h"

#include <fmt/format.h>

#include <nvrtc.h>

namespace attn::backend {

namespace {

// Releases the program on every path.
struct ProgramHandle {
  nvrtcProgram program = nullptr;
  ~ProgramHandle() {
    if (program)
      nvrtcDestroyProgram(&program);
  }
};

NvrtcResult failure(const std::string &what, nvrtcResult code, std::string log = {}) {
  NvrtcResult result;
  result.log = std::move(log);
  if (!result.log.empty() && result.log.back() != '\n')
    result.log += '\n';
  result.log += what + ": " + nvrtcGetErrorString(code);
  return result;
}

} // namespace

bool isSupportedArch(const std::string &arch) { return arch == "sm_90a"; }

NvrtcResult compileCuda(const std::string &source, const std::string &programName,
                        const std::string &arch, NvrtcOutput output) {
  ProgramHandle handle;
  nvrtcResult status = nvrtcCreateProgram(&handle.program, source.c_str(), programName.c_str(), 0,
                                          nullptr, nullptr);
  if (status != NVRTC_SUCCESS)
    return failure("nvrtcCreateProgram", status);

  std::string archOption =
      "--gpu-architecture=" +
      (output == NvrtcOutput::Ptx ? "compute_" + arch.substr(3) : arch);
  const char *options[] = {archOption.c_str(), "-std=c++17", "--device-as-default-execution-space",
                           "-diag-suppress=177"};
  status = nvrtcCompileProgram(handle.program, sizeof(options) / sizeof(options[0]), options);

  size_t logSize = 0;
  nvrtcGetProgramLogSize(handle.program, &logSize);
  std::string log(logSize, '\0');
  if (logSize > 1)
    nvrtcGetProgramLog(handle.program, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n'))
    log.pop_back();
  if (status != NVRTC_SUCCESS)
    return failure("nvrtcCompileProgram", status, log);

  NvrtcResult result;
  result.log = log;
  size_t size = 0;
  if (output != NvrtcOutput::Cubin) {
    nvrtcGetPTXSize(handle.program, &size);
    result.binary.resize(size);
    status = nvrtcGetPTX(handle.program, result.binary.data());
    while (!result.binary.empty() && result.binary.back() == '\0')
      result.binary.pop_back();
  }
  if (output != NvrtcOutput::Ptx && status == NVRTC_SUCCESS) {
    std::vector<char> &cubin =
        output == NvrtcOutput::Cubin ? result.binary : result.cubin;
    nvrtcGetCUBINSize(handle.program, &size);
    cubin.resize(size);
    status = nvrtcGetCUBIN(handle.program, cubin.data());
  }
  if (status != NVRTC_SUCCESS)
    return failure("retrieving NVRTC output", status, log);
  result.succeeded = true;
  return result;
}

std::string nvrtcVersionString() {
  int major = 0, minor = 0;
  if (::nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    return "unknown";
  return fmt::format("{}.{}", major, minor);
}

} // namespace attn::backend
