//===- AttnAttrs.h - attn attributes ----------------------------*- C++ -*-===//

#ifndef ATTN_IR_ATTNATTRS_H
#define ATTN_IR_ATTNATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectImplementation.h"

#include <cstdint>
#include <utility>

#include "attn/IR/AttnEnums.h.inc"

#include "attn/IR/AttnAttrInterfaces.h.inc"

#define GET_ATTRDEF_CLASSES
#include "attn/IR/AttnAttrs.h.inc"

#endif // ATTN_IR_ATTNATTRS_H
