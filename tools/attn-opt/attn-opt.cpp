//===- attn-opt.cpp - attn optimizer driver -------------------------------===//
//
// mlir-opt for the attn dialect: parses, verifies, runs the attn passes (and
// MLIR's generic ones such as -canonicalize), prints.
//
//===----------------------------------------------------------------------===//

#include "ToolVersion.h"
#include "attn/IR/AttnOps.h"
#include "attn/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  attn::installToolVersionPrinter();
  mlir::registerTransformsPasses();
  mlir::attn::registerAttnPasses();

  mlir::DialectRegistry registry;
  // EmitC and MemRef too, so that attn-lower-mods' and
  // attn-differentiate-mods' output parses back.
  registry.insert<mlir::attn::AttnDialect, mlir::arith::ArithDialect,
                  mlir::emitc::EmitCDialect, mlir::func::FuncDialect,
                  mlir::math::MathDialect, mlir::memref::MemRefDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "attn optimizer driver\n", registry));
}
