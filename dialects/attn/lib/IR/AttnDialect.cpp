//===- AttnDialect.cpp - attn dialect -------------------------------------===//

#include "attn/IR/AttnOps.h"

using namespace mlir;
using namespace mlir::attn;

#include "attn/IR/AttnDialect.cpp.inc"

void AttnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "attn/IR/AttnOps.cpp.inc"
      >();
  registerAttributes();
}
