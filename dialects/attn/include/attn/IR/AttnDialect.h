//===- AttnDialect.h - attn dialect -----------------------------*- C++ -*-===//

#ifndef ATTN_IR_ATTNDIALECT_H
#define ATTN_IR_ATTNDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Dialect.h"

#include "attn/IR/AttnDialect.h.inc"

#endif // ATTN_IR_ATTNDIALECT_H
