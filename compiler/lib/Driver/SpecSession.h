//===- SpecSession.h - Parsing specs with rendered diagnostics --*- C++ -*-===//
//
// Internal to the compile driver: what compileSpec and attn::Compiler share
// to turn a spec into a module and its failures into attn::Error messages
// that carry the diagnostics (buffer:line:col and the source line).
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_DRIVER_SPECSESSION_H
#define ATTN_DRIVER_SPECSESSION_H

#include "attn/IR/AttnOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace attn::detail {

/// Loads the dialects a spec may use; diagnostics do not dump the op (they
/// point at the spec, which says it better).
void prepareSpecContext(mlir::MLIRContext &context);

/// Renders the context's diagnostics into a string while alive: with
/// buffer:line:col and the source line for locations in its SourceMgr's
/// buffers, as "error: message" for ops built in C++ (no file location).
class DiagnosticCapture {
public:
  explicit DiagnosticCapture(mlir::MLIRContext &context);

  llvm::SourceMgr &sourceMgr() { return manager; }
  /// Throws attn::Error("<what>:\n<diagnostics>").
  [[noreturn]] void fail(const std::string &what);

private:
  llvm::SourceMgr manager;
  std::string text;
  llvm::raw_string_ostream stream{text};
  mlir::SourceMgrDiagnosticHandler handler;
  // Registered last, so consulted first.
  mlir::ScopedDiagnosticHandler locationless;
};

/// Parses `text` into a module; throws attn::Error with the diagnostics.
mlir::OwningOpRef<mlir::ModuleOp> parseSpecModule(mlir::MLIRContext &context,
                                                  DiagnosticCapture &diagnostics,
                                                  const std::string &text,
                                                  const std::string &bufferName);

/// The module's only attn.kernel; throws attn::Error when there are none or
/// several.
mlir::attn::KernelOp singleKernel(mlir::ModuleOp module);

} // namespace attn::detail

#endif // ATTN_DRIVER_SPECSESSION_H
