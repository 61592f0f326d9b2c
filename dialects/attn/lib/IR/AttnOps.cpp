//===- AttnOps.cpp - attn operations --------------------------------------===//

#include "attn/IR/AttnOps.h"

#include "attn_params.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::attn;

#define GET_OP_CLASSES
#include "attn/IR/AttnOps.cpp.inc"

//===----------------------------------------------------------------------===//
// KernelOp
//===----------------------------------------------------------------------===//

void KernelOp::build(OpBuilder &builder, OperationState &state, StringRef name,
                     ProblemAttr problem, MaskAttrInterface mask,
                     NormalizerAttrInterface normalizer) {
  build(builder, state, builder.getStringAttr(name), problem, mask, normalizer,
        /*captures=*/ArrayAttr(), /*tile=*/TilePlanAttr(), /*smem=*/SmemPlanAttr(),
        /*backward_tile=*/TilePlanAttr(), /*backward_smem=*/SmemPlanAttr(),
        /*mask_tile_formula=*/TileFormulaAttr(), /*mask_mod_fn=*/FlatSymbolRefAttr(),
        /*score_mod_fn=*/FlatSymbolRefAttr(), /*mask_mod_row_fns=*/ArrayAttr(),
        /*score_mod_row_fns=*/ArrayAttr(), /*score_mod_diagonal_fns=*/ArrayAttr(),
        /*score_mod_row_offset_fn=*/FlatSymbolRefAttr(), /*score_mod_key_relative=*/false,
        /*score_input_scale=*/FloatAttr(),
        /*score_output_scale=*/FloatAttr(), /*score_bound=*/FloatAttr(),
        /*backward_mask_mod_fn=*/FlatSymbolRefAttr(),
        /*backward_score_mod_fn=*/FlatSymbolRefAttr(),
        /*backward_score_mod_diagonal_fns=*/ArrayAttr(),
        /*backward_score_mod_vjp_fn=*/FlatSymbolRefAttr(),
        /*tuned_key_splits=*/DenseI64ArrayAttr());
}

SmallVector<CaptureAttr> KernelOp::getCaptureList() {
  SmallVector<CaptureAttr> captures;
  if (ArrayAttr list = getCapturesAttr())
    for (Attribute capture : list)
      captures.push_back(cast<CaptureAttr>(capture));
  return captures;
}

// attn.kernel @name
//     problem = #attn.problem<...>
//     mask = <MaskAttrInterface>
//     normalizer = <NormalizerAttrInterface>
//     (captures = [#attn.capture<...>, ...])?
//     (attributes {...})?
//     (mask_mod region)?
//     (score_mod region)?
ParseResult KernelOp::parse(OpAsmParser &parser, OperationState &result) {
  StringAttr name;
  if (parser.parseSymbolName(name, getSymNameAttrName(result.name),
                             result.attributes))
    return failure();

  // `keyword = attr`, where the attribute must satisfy `isValid`.
  auto parseKeyedAttr = [&](StringRef keyword, StringAttr attrName,
                            StringRef expected,
                            function_ref<bool(Attribute)> isValid)
      -> ParseResult {
    if (parser.parseKeyword(keyword) || parser.parseEqual())
      return failure();
    SMLoc loc = parser.getCurrentLocation();
    Attribute attr;
    if (parser.parseAttribute(attr))
      return failure();
    if (!isValid(attr))
      return parser.emitError(loc)
             << "expected " << expected << " for '" << keyword << "', got "
             << attr;
    result.addAttribute(attrName, attr);
    return success();
  };
  if (parseKeyedAttr("problem", getProblemAttrName(result.name),
                     "#attn.problem",
                     [](Attribute a) { return isa<ProblemAttr>(a); }) ||
      parseKeyedAttr("mask", getMaskAttrName(result.name),
                     "a mask attribute (MaskAttrInterface)",
                     [](Attribute a) { return isa<MaskAttrInterface>(a); }) ||
      parseKeyedAttr(
          "normalizer", getNormalizerAttrName(result.name),
          "a normalizer attribute (NormalizerAttrInterface)",
          [](Attribute a) { return isa<NormalizerAttrInterface>(a); }))
    return failure();
  if (succeeded(parser.parseOptionalKeyword("captures"))) {
    SMLoc loc = parser.getCurrentLocation();
    ArrayAttr captures;
    if (parser.parseEqual() || parser.parseAttribute(captures))
      return failure();
    if (!llvm::all_of(captures, [](Attribute a) { return isa<CaptureAttr>(a); }))
      return parser.emitError(loc) << "expected a list of #attn.capture for 'captures', got "
                                   << captures;
    result.addAttribute(getCapturesAttrName(result.name), captures);
  }
  // Plans arrive through the attribute dictionary; check the inherent ones
  // here, since a mistyped one would otherwise be dropped from properties.
  SMLoc attrDictLoc = parser.getCurrentLocation();
  if (parser.parseOptionalAttrDictWithKeyword(result.attributes) ||
      failed(verifyInherentAttrs(result.name, result.attributes, [&]() {
        return parser.emitError(attrDictLoc)
               << "'" << result.name.getStringRef() << "' op ";
      })))
    return failure();

  Region *maskMod = result.addRegion();
  Region *scoreMod = result.addRegion();
  if (succeeded(parser.parseOptionalKeyword("mask_mod")) &&
      parser.parseRegion(*maskMod))
    return failure();
  if (succeeded(parser.parseOptionalKeyword("score_mod")) &&
      parser.parseRegion(*scoreMod))
    return failure();
  return success();
}

void KernelOp::print(OpAsmPrinter &p) {
  p << ' ';
  p.printSymbolName(getSymName());
  // Continuation lines are indented four columns past the op.
  p.increaseIndent();
  p.increaseIndent();
  p.printNewline();
  p << "problem = ";
  p.printAttribute(getProblem());
  p.printNewline();
  p << "mask = ";
  p.printAttribute(getMask());
  p.printNewline();
  p << "normalizer = ";
  p.printAttribute(getNormalizer());
  if (ArrayAttr captures = getCapturesAttr()) {
    p.printNewline();
    p << "captures = ";
    p.printAttribute(captures);
  }

  StringRef elided[] = {getSymNameAttrName(), getProblemAttrName(),
                        getMaskAttrName(), getNormalizerAttrName(),
                        getCapturesAttrName()};
  DictionaryAttr attrs = (*this)->getAttrDictionary();
  bool hasOtherAttrs = llvm::any_of(attrs, [&](NamedAttribute attr) {
    return !llvm::is_contained(elided, attr.getName().getValue());
  });
  if (hasOtherAttrs) {
    p.printNewline();
    // printOptionalAttrDict leads with a space: "attributes {...}".
    p << "attributes";
    p.printOptionalAttrDict(attrs.getValue(), elided);
  }
  if (!getMaskMod().empty()) {
    p.printNewline();
    p << "mask_mod ";
    p.printRegion(getMaskMod(), /*printEntryBlockArgs=*/true,
                  /*printBlockTerminators=*/true);
  }
  if (!getScoreMod().empty()) {
    p.printNewline();
    p << "score_mod ";
    p.printRegion(getScoreMod(), /*printEntryBlockArgs=*/true,
                  /*printBlockTerminators=*/true);
  }
  p.decreaseIndent();
  p.decreaseIndent();
}

/// Whether `op` may appear in a user region: arith and math operations, and
/// memref.load of a captured buffer (a region argument).
static LogicalResult verifyUserRegionOp(Operation *op, Block &block,
                                        StringRef regionName) {
  if (isa<YieldOp>(op))
    return success();
  if (op->getNumRegions() != 0)
    return op->emitOpError() << "cannot appear in '" << regionName
                             << "': user regions are straight-line code";
  StringRef dialect = op->getName().getDialectNamespace();
  if (dialect == "arith" || dialect == "math")
    return success();
  if (op->getName().getStringRef() == "memref.load") {
    auto arg = dyn_cast<BlockArgument>(op->getOperand(0));
    if (!arg || arg.getOwner() != &block)
      return op->emitOpError() << "in '" << regionName
                               << "' must read a captured buffer (a region argument)";
    return success();
  }
  return op->emitOpError() << "cannot appear in '" << regionName
                           << "'; user regions use arith and math operations and "
                              "memref.load of captured buffers";
}

/// Checks a user region's block signature and its `attn.yield`. Argument
/// errors are reported at the argument, yield errors at the yield.
static LogicalResult verifyUserRegion(KernelOp op, Region &region,
                                      StringRef regionName,
                                      ArrayRef<StringRef> argNames,
                                      ArrayRef<Type> argTypes,
                                      Type yieldType) {
  if (region.empty())
    return success();
  Block &block = region.front();
  if (block.getNumArguments() != argTypes.size()) {
    InFlightDiagnostic diag = op.emitOpError()
                              << "'" << regionName << "' region expects "
                              << argTypes.size() << " arguments (";
    llvm::interleaveComma(argNames, diag);
    diag << "), got " << block.getNumArguments();
    // A memref past the declared arguments is a buffer the spec reads
    // without declaring it.
    if (block.getNumArguments() > argTypes.size()) {
      BlockArgument extra = block.getArgument(argTypes.size());
      if (auto memref = dyn_cast<MemRefType>(extra.getType())) {
        std::string example;
        llvm::raw_string_ostream os(example);
        os << "#attn.capture<\"name\", " << memref.getElementType() << ", [";
        for (int64_t dim = 0; dim < memref.getRank(); ++dim)
          os << (dim ? ", ?" : "?");
        os << "]>";
        diag.attachNote(extra.getLoc())
            << "argument #" << argTypes.size() << " (" << memref
            << ") reads a buffer the spec does not declare: add it to the kernel's "
               "captures, e.g. captures = ["
            << example << "]";
      }
    }
    return diag;
  }
  for (auto [index, arg] : llvm::enumerate(block.getArguments())) {
    if (arg.getType() != argTypes[index])
      return emitError(arg.getLoc())
             << "'" << regionName << "' argument #" << index << " ("
             << argNames[index] << ") must have type " << argTypes[index]
             << ", got " << arg.getType();
  }
  for (Operation &inner : block)
    if (failed(verifyUserRegionOp(&inner, block, regionName)))
      return failure();
  Operation *terminator = block.empty() ? nullptr : &block.back();
  auto yield = dyn_cast_or_null<YieldOp>(terminator);
  if (!yield)
    return op.emitOpError() << "'" << regionName
                            << "' region must end with 'attn.yield'";
  if (yield.getValues().size() != 1 ||
      yield.getValues().front().getType() != yieldType) {
    InFlightDiagnostic diag = yield.emitOpError()
                              << "in '" << regionName
                              << "' must yield a single " << yieldType
                              << ", got (";
    llvm::interleaveComma(yield.getValues().getTypes(), diag);
    return diag << ")";
  }
  return success();
}

/// Linear attention and retention: what their kernel supports.
static LogicalResult verifyLinearFamily(KernelOp op) {
  NormalizerAttrInterface normalizer = op.getNormalizer();
  StringRef kind = normalizer.getKindName();
  Attribute mask = op.getMask();
  if (isa<RetentionAttr>(normalizer) && !isa<CausalAttr>(mask))
    return op.emitOpError() << "retention is causal: it needs #attn.causal, got " << mask;
  if (!isa<NoMaskAttr, CausalAttr>(mask))
    return op.emitOpError() << "normalizer '" << kind
                            << "' takes #attn.causal or #attn.no_mask, got " << mask;
  if (!op.getMaskMod().empty() || !op.getScoreMod().empty() || !op.getCaptureList().empty())
    return op.emitOpError() << "normalizer '" << kind
                            << "' takes no mask_mod, score_mod or captures";
  ProblemAttr problem = op.getProblem();
  if (problem.getHeadDim() != 64 && problem.getHeadDim() != 128)
    return op.emitOpError() << "normalizer '" << kind << "' supports head_dim 64 or 128, got "
                            << problem.getHeadDim();
  if (auto retention = dyn_cast<RetentionAttr>(normalizer))
    if (!retention.getDecayList().empty() &&
        static_cast<int64_t>(retention.getDecayList().size()) != problem.getQHeads())
      return op.emitOpError() << "retention decay lists " << retention.getDecayList().size()
                              << " values; it needs one per query head ("
                              << problem.getQHeads() << ")";
  return success();
}

/// `tuned_key_splits`: (batch x query heads, query length, key length,
/// splits) quadruples, each bucket a power of two and listed once, the
/// query length within the short-query path's, the splits within its limit.
static LogicalResult verifyTunedKeySplits(KernelOp op, ArrayRef<int64_t> table) {
  if (op.getNormalizer().isLinearFamily())
    return op.emitOpError("has tuned_key_splits, but only softmax kernels have the "
                          "short-query path");
  if (table.size() % 4 != 0)
    return op.emitOpError() << "tuned_key_splits must hold quadruples (batch x q_heads, "
                               "seqlen_q, seqlen_k, splits); got "
                            << table.size() << " integers";
  auto powerOfTwo = [](int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
  for (size_t i = 0; i < table.size(); i += 4) {
    ArrayRef<int64_t> entry = table.slice(i, 4);
    if (!powerOfTwo(entry[0]) || !powerOfTwo(entry[1]) || !powerOfTwo(entry[2]))
      return op.emitOpError() << "tuned_key_splits entry " << i / 4
                              << ": the bucket's sizes must be powers of two, got " << entry[0]
                              << ", " << entry[1] << ", " << entry[2];
    if (entry[1] > attn_abi::kShortQueryMaxRows)
      return op.emitOpError() << "tuned_key_splits entry " << i / 4 << ": query length "
                              << entry[1] << " is beyond the short-query path's "
                              << attn_abi::kShortQueryMaxRows;
    if (entry[3] < 0 || entry[3] > attn_abi::kMaxKeySplits)
      return op.emitOpError() << "tuned_key_splits entry " << i / 4 << ": " << entry[3]
                              << " splits; expected 0 (the forward kernel) to "
                              << attn_abi::kMaxKeySplits;
    for (size_t j = 0; j < i; j += 4)
      if (table.slice(j, 3) == entry.take_front(3))
        return op.emitOpError() << "tuned_key_splits lists the bucket of entry " << i / 4
                                << " twice";
  }
  return success();
}

LogicalResult KernelOp::verifyRegions() {
  MLIRContext *ctx = getContext();
  if (getNormalizer().isLinearFamily() && failed(verifyLinearFamily(*this)))
    return failure();
  if (std::optional<ArrayRef<int64_t>> table = getTunedKeySplits())
    if (failed(verifyTunedKeySplits(*this, *table)))
      return failure();
  Type index = IndexType::get(ctx);
  Type f32 = Float32Type::get(ctx);
  Type i1 = IntegerType::get(ctx, 1);

  SmallVector<CaptureAttr> captures = getCaptureList();
  if (static_cast<int64_t>(captures.size()) > CaptureAttr::kMaxCaptures)
    return emitOpError() << "declares " << captures.size()
                         << " captured buffers; at most " << CaptureAttr::kMaxCaptures
                         << " are supported";
  for (auto [index, capture] : llvm::enumerate(captures))
    for (CaptureAttr earlier : ArrayRef(captures).take_front(index))
      if (earlier.getName() == capture.getName())
        return emitOpError() << "captures the name '" << capture.getName() << "' twice";

  // Region names and types: the fixed arguments, then one memref per capture.
  SmallVector<std::string> captureArgNames;
  for (CaptureAttr capture : captures)
    captureArgNames.push_back(("capture '" + capture.getName() + "'").str());
  auto withCaptures = [&](ArrayRef<StringRef> names, ArrayRef<Type> types,
                          SmallVectorImpl<StringRef> &allNames,
                          SmallVectorImpl<Type> &allTypes) {
    allNames.assign(names.begin(), names.end());
    allTypes.assign(types.begin(), types.end());
    for (auto [name, capture] : llvm::zip(captureArgNames, captures)) {
      allNames.push_back(name);
      allTypes.push_back(capture.getRegionArgType());
    }
  };
  SmallVector<StringRef> names;
  SmallVector<Type> types;
  withCaptures({"batch", "head", "q_idx", "kv_idx"}, {index, index, index, index},
               names, types);
  if (failed(verifyUserRegion(*this, getMaskMod(), "mask_mod", names, types, i1)))
    return failure();
  withCaptures({"score", "batch", "head", "q_idx", "kv_idx"},
               {f32, index, index, index, index}, names, types);
  return verifyUserRegion(*this, getScoreMod(), "score_mod", names, types, f32);
}
