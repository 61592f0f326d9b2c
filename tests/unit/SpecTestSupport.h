// Parsing spec text in the unit tests that link the compiler.
#ifndef ATTN_TESTS_UNIT_SPECTESTSUPPORT_H
#define ATTN_TESTS_UNIT_SPECTESTSUPPORT_H

#include "attn/Compiler/Compiler.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <catch2/catch.hpp>

#include <string>

namespace attn::test {

/// A context with the spec dialects loaded (or those of `registry`).
struct SpecContext {
  explicit SpecContext(const mlir::DialectRegistry &registry = makeRegistry())
      : context(registry) {
    context.loadAllAvailableDialects();
  }

  /// The module of `text`; fails the test when it does not parse.
  mlir::OwningOpRef<mlir::ModuleOp> parse(const std::string &text) {
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mlir::parseSourceString<mlir::ModuleOp>(text, &context);
    REQUIRE(module);
    return module;
  }

  static mlir::DialectRegistry makeRegistry() {
    mlir::DialectRegistry registry;
    registerSpecDialects(registry);
    return registry;
  }

  mlir::MLIRContext context;
};

/// The diagnostics `context` reports while the log lives, as text (for a
/// test's INFO or its checks) instead of on standard error.
struct DiagnosticLog {
  explicit DiagnosticLog(mlir::MLIRContext &context)
      : handler(&context, [this](mlir::Diagnostic &diagnostic) {
          text += diagnostic.str() + "\n";
          return mlir::success();
        }) {}

  std::string text;
  mlir::ScopedDiagnosticHandler handler;
};

} // namespace attn::test

#endif // ATTN_TESTS_UNIT_SPECTESTSUPPORT_H
