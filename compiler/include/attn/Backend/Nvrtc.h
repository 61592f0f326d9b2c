//===- Nvrtc.h - CUDA C++ to PTX / cubin through NVRTC ----------*- C++ -*-===//
#ifndef ATTN_BACKEND_NVRTC_H
#define ATTN_BACKEND_NVRTC_H

#include <string>
#include <vector>

namespace attn::backend {

// PtxAndCubin compiles once for the real architecture and returns both
// (NVRTC keeps the PTX it assembled the cubin from).
enum class NvrtcOutput { Ptx, Cubin, PtxAndCubin };

struct NvrtcResult {
  bool succeeded = false;
  std::string log;             // NVRTC's compile log (warnings or errors)
  std::vector<char> binary;    // PTX text (without the trailing NUL) or cubin
  std::vector<char> cubin;     // PtxAndCubin only (`binary` holds the PTX)
};

// Compiles one translation unit. `arch` is an sm_XX[a] name; PTX alone is
// produced for the matching virtual architecture (compute_XX[a]), a cubin for
// the real one. Never throws: failures come back with NVRTC's log.
NvrtcResult compileCuda(const std::string &source, const std::string &programName,
                        const std::string &arch, NvrtcOutput output);

// "major.minor" of the NVRTC library in use (part of cache keys).
std::string nvrtcVersionString();

// True for the architectures the kernels are written for.
bool isSupportedArch(const std::string &arch);

} // namespace attn::backend

#endif // ATTN_BACKEND_NVRTC_H
