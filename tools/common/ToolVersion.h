//===- ToolVersion.h - What `--version` prints for attnc's tools -*- C++ -*-===//
//
// The tools parse their options with llvm::cl, whose `--version` prints
// LLVM's version unless told otherwise; each tool calls
// installToolVersionPrinter() before parsing so that it names attnc.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_TOOLS_TOOLVERSION_H
#define ATTN_TOOLS_TOOLVERSION_H

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

namespace attn {

inline void installToolVersionPrinter() {
  llvm::cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "attnc " << ATTNC_TOOL_VERSION << " (MLIR/LLVM " << LLVM_VERSION_STRING << ")\n";
  });
}

} // namespace attn

#endif // ATTN_TOOLS_TOOLVERSION_H
