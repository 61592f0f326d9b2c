//===- AttnOps.h - attn operations ------------------------------*- C++ -*-===//
//
// The one header users of the dialect include: it brings in the dialect, its
// attributes and interfaces, and the ops.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_IR_ATTNOPS_H
#define ATTN_IR_ATTNOPS_H

#include "attn/IR/AttnAttrs.h"
#include "attn/IR/AttnDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "attn/IR/AttnOps.h.inc"

#endif // ATTN_IR_ATTNOPS_H
