//===- EmitCuda.cpp - attn-emit-cuda: template instantiation -------------===//
//
// Instantiates the sm_90a forward kernel template for every planned
// attn.kernel and attaches the resulting translation unit to the op.
//
//===----------------------------------------------------------------------===//

#include "attn/Compiler/KernelConfig.h"
#include "attn/IR/AttnOps.h"
#include "attn/Transforms/Passes.h"
#include "attn/Transforms/SmemAllocator.h"
#include "attn_params.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Target/Cpp/CppEmitter.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNEMITCUDA
#include "attn/Transforms/Passes.h.inc"

namespace {
::attn::codegen::MaskPolicy maskPolicyFor(Attribute mask) {
  ::attn::codegen::MaskPolicy policy;
  if (auto causal = dyn_cast<CausalAttr>(mask)) {
    policy.kind = ::attn::codegen::MaskPolicyKind::Causal;
    policy.bottomRight = causal.getAlignment() == MaskAlignment::bottom_right;
  } else if (auto window = dyn_cast<SlidingWindowAttr>(mask)) {
    policy.kind = ::attn::codegen::MaskPolicyKind::SlidingWindow;
    policy.bottomRight = window.getAlign() == MaskAlignment::bottom_right;
    policy.windowLeft = window.getLeft();
    policy.windowRight = window.getRight();
  }
  return policy;
}

::attn::codegen::TileFormula tileFormulaFor(Attribute attr) {
  ::attn::codegen::TileFormula formula;
  if (auto atom = dyn_cast<AffineGeAttr>(attr)) {
    formula.kind = ::attn::codegen::TileFormula::Kind::AffineGe;
    formula.batch = atom.getBatch();
    formula.head = atom.getHead();
    formula.q = atom.getQ();
    formula.kv = atom.getKv();
    formula.c = atom.getC();
    return formula;
  }
  if (auto sum = dyn_cast<DivSumGeAttr>(attr)) {
    formula.kind = ::attn::codegen::TileFormula::Kind::DivSumGe;
    formula.batch = sum.getBatch();
    formula.head = sum.getHead();
    formula.q = sum.getQ();
    formula.kv = sum.getKv();
    formula.c = sum.getC();
    for (Attribute termAttr : sum.getTerms()) {
      auto term = cast<FloorDivTermAttr>(termAttr);
      formula.divTerms.push_back({term.getCoef(), term.getBatch(), term.getHead(), term.getQ(),
                                  term.getKv(), term.getC(), term.getDivisor()});
    }
    return formula;
  }
  auto tree = cast<TileFormulaAttr>(attr);
  switch (tree.getKind()) {
  case TileFormulaKind::all_of:
    formula.kind = ::attn::codegen::TileFormula::Kind::AllOf;
    break;
  case TileFormulaKind::any_of:
    formula.kind = ::attn::codegen::TileFormula::Kind::AnyOf;
    break;
  case TileFormulaKind::none_of:
    formula.kind = ::attn::codegen::TileFormula::Kind::NoneOf;
    break;
  }
  for (Attribute term : tree.getTerms())
    formula.terms.push_back(tileFormulaFor(term));
  return formula;
}

/// Checks that a mod function holds only what attn-lower-mods produces:
/// arithmetic EmitC ops on scalar types, the allowed callees, and capture
/// types. Spec text therefore never reaches the emitted source verbatim.
LogicalResult checkModFunction(emitc::FuncOp func, ArrayRef<std::string> captureTypes,
                               bool doubleInside = false) {
  auto isAllowedType = [&](Type type) {
    if (isa<IntegerType, Float32Type, emitc::SizeTType, emitc::PtrDiffTType,
            emitc::SignedSizeTType>(type))
      return true;
    if (auto opaque = dyn_cast<emitc::OpaqueType>(type))
      return llvm::is_contained(captureTypes, opaque.getValue().str());
    return false;
  };
  // A row offset computes in f64 inside (attn-lower-mods' widenToDouble);
  // its arguments and result stay as the kernel passes and adds them.
  auto isAllowedInside = [&](Type type) {
    return isAllowedType(type) || (doubleInside && isa<Float64Type>(type));
  };
  static const llvm::StringSet<> allowedOps = {
      "emitc.return", "emitc.constant", "emitc.add", "emitc.sub", "emitc.mul", "emitc.div",
      "emitc.rem", "emitc.cmp", "emitc.cast", "emitc.bitwise_and", "emitc.bitwise_or",
      "emitc.bitwise_xor", "emitc.bitwise_not", "emitc.bitwise_left_shift",
      "emitc.bitwise_right_shift", "emitc.logical_and", "emitc.logical_or", "emitc.logical_not",
      "emitc.conditional", "emitc.unary_minus", "emitc.unary_plus", "emitc.call_opaque"};
  if (!func.getBody().hasOneBlock())
    return func.emitOpError("mod function must have a single block");
  for (Type type : func.getArgumentTypes())
    if (!isAllowedType(type))
      return func.emitOpError("mod function argument type ") << type << " is not allowed";
  for (Type type : func.getResultTypes())
    if (!isAllowedType(type))
      return func.emitOpError("mod function result type ") << type << " is not allowed";
  for (Operation &op : func.getBody().front()) {
    if (!allowedOps.contains(op.getName().getStringRef()))
      return op.emitOpError("is not allowed in a mod function (run attn-lower-mods on the "
                            "kernel's regions instead of writing EmitC)");
    for (Type type : op.getResultTypes())
      if (!isAllowedInside(type))
        return op.emitOpError("result type ") << type << " is not allowed in a mod function";
    if (auto call = dyn_cast<emitc::CallOpaqueOp>(op))
      if (!isModFunctionCallee(call.getCallee()) || call.getArgs() || call.getTemplateArgs())
        return op.emitOpError("calls '") << call.getCallee()
                                         << "', which a mod function may not call";
    if (auto constant = dyn_cast<emitc::ConstantOp>(op))
      if (!isa<IntegerAttr, FloatAttr>(constant.getValue()))
        return op.emitOpError("constant ") << constant.getValue()
                                           << " is not allowed in a mod function";
  }
  return success();
}

/// The C++ spelling of a scalar type checkModFunction allows; empty for an
/// integer width C has no type for.
std::string cppScalarType(Type type) {
  if (type.isF32())
    return "float";
  if (isa<emitc::SizeTType>(type))
    return "size_t";
  if (isa<emitc::PtrDiffTType>(type))
    return "ptrdiff_t";
  if (isa<emitc::SignedSizeTType>(type))
    return "ssize_t";
  auto integer = dyn_cast<IntegerType>(type);
  if (!integer)
    return "";
  if (integer.getWidth() == 1)
    return "bool";
  if (!llvm::is_contained({8u, 16u, 32u, 64u}, integer.getWidth()))
    return "";
  return (integer.isUnsigned() ? "uint" : "int") + std::to_string(integer.getWidth()) + "_t";
}

/// The kernel's captures as the emitted code sees them: their shapes in
/// `shapes`, their C++ types returned.
SmallVector<std::string> captureTypesOf(KernelOp op,
                                        std::vector<::attn::codegen::CaptureShape> &shapes) {
  SmallVector<std::string> captureTypes;
  for (CaptureAttr capture : op.getCaptureList()) {
    ::attn::codegen::CaptureShape shape;
    shape.isFloat = capture.getElementType().isF32();
    shape.rank = static_cast<int>(capture.getRank());
    shapes.push_back(shape);
    captureTypes.push_back(getCaptureCppType(capture.getElementType(), capture.getRank()));
  }
  return captureTypes;
}

/// Looks up a function attn-lower-mods generated for `op`, checks it and
/// prints it to `source`.
FailureOr<emitc::FuncOp> printModFunction(KernelOp op, FlatSymbolRefAttr ref,
                                          ArrayRef<std::string> captureTypes,
                                          llvm::raw_ostream &source, bool doubleInside = false) {
  auto func = SymbolTable::lookupNearestSymbolFrom<emitc::FuncOp>(op, ref);
  if (!func)
    return op.emitOpError("refers to ") << ref << ", which is not an emitc.func";
  StringRef name = func.getSymName();
  bool generatedName = (name.starts_with("attn_mask_mod_") || name.starts_with("attn_score_mod_")) &&
                       llvm::all_of(name, [](char c) { return llvm::isAlnum(c) || c == '_'; });
  if (!generatedName)
    return func.emitOpError("name '") << name << "' is not one attn-lower-mods generates";
  if (failed(checkModFunction(func, captureTypes, doubleInside)) ||
      failed(emitc::translateToCpp(func, source)))
    return failure();
  return func;
}

/// Prints the functions `refs` names and notes their names and C++ types:
/// row functions take (b, h, q, captures...), and `diagonal` ones (at most
/// kMaxScoreDiagonals) (b, h, d, captures...) and return f32 or i32; both
/// return one scalar. With `readsQuery`, it is set when a row function
/// reads q.
LogicalResult printValueFunctions(KernelOp op, ArrayAttr refs, bool diagonal,
                                  ArrayRef<std::string> captureTypes, llvm::raw_ostream &source,
                                  std::vector<std::string> &names,
                                  std::vector<std::string> &types,
                                  bool *readsQuery = nullptr) {
  if (!refs)
    return success();
  const char *kind = diagonal ? "diagonal" : "row";
  for (Attribute ref : refs) {
    FailureOr<emitc::FuncOp> helper =
        printModFunction(op, cast<FlatSymbolRefAttr>(ref), captureTypes, source);
    if (failed(helper))
      return failure();
    if (helper->getNumArguments() != 3 + captureTypes.size() || helper->getNumResults() != 1)
      return helper->emitOpError(kind) << " function must take (b, h, " << (diagonal ? "d" : "q")
                                       << ", captures...) and return one value";
    Type result = helper->getResultTypes()[0];
    std::string type = cppScalarType(result);
    if (type.empty() || (diagonal && !result.isF32() && !result.isSignlessInteger(32)))
      return helper->emitOpError(kind)
             << " value type " << result
             << (diagonal ? " is not f32 or i32" : " has no C++ scalar type");
    names.push_back(helper->getSymName().str());
    types.push_back(type);
    if (readsQuery)
      *readsQuery |= !helper->getArgument(2).use_empty();
  }
  if (diagonal && names.size() > size_t(::attn::kMaxScoreDiagonals))
    return op.emitOpError("has ") << names.size() << " score_mod diagonal functions, at most "
                                  << ::attn::kMaxScoreDiagonals;
  return success();
}

/// Fills `mods` from the kernel's lowered user regions.
LogicalResult collectUserMods(KernelOp op, ::attn::codegen::UserMods &mods) {
  if (!op.getMaskMod().empty() || !op.getScoreMod().empty())
    return op.emitOpError("has user regions that are not lowered: run attn-lower-mods first");
  SmallVector<std::string> captureTypes = captureTypesOf(op, mods.captures);
  llvm::raw_string_ostream source(mods.source);
  auto emitFunction = [&](FlatSymbolRefAttr ref,
                          bool doubleInside = false) -> FailureOr<emitc::FuncOp> {
    return printModFunction(op, ref, captureTypes, source, doubleInside);
  };
  if (op.getScoreModDiagonalFnsAttr() && !op.getScoreModFnAttr())
    return op.emitOpError("has score_mod diagonal functions but no score_mod function");
  struct {
    FlatSymbolRefAttr function;
    ArrayAttr rows, diagonals;
    unsigned leadingArgs; // the score before b, h, q, kv
    ::attn::codegen::ModFunctions &out;
  } regions[] = {{op.getMaskModFnAttr(), op.getMaskModRowFnsAttr(), ArrayAttr(), 0, mods.mask},
                 {op.getScoreModFnAttr(), op.getScoreModRowFnsAttr(),
                  op.getScoreModDiagonalFnsAttr(), 1, mods.score}};
  for (auto &region : regions) {
    if (!region.function)
      continue;
    if (failed(printValueFunctions(op, region.rows, /*diagonal=*/false, captureTypes, source,
                                   region.out.rowFunctions, region.out.rowTypes,
                                   &region.out.rowsUseQuery)) ||
        failed(printValueFunctions(op, region.diagonals, /*diagonal=*/true, captureTypes, source,
                                   region.out.diagonalFunctions, region.out.diagonalTypes)))
      return failure();
    FailureOr<emitc::FuncOp> func = emitFunction(region.function);
    if (failed(func))
      return failure();
    const unsigned keyFloatIndex = region.leadingArgs + 4;
    unsigned expected = keyFloatIndex + 1 + captureTypes.size() +
                        region.out.diagonalFunctions.size() + region.out.rowFunctions.size();
    if (func->getNumArguments() != expected ||
        !func->getArgumentTypes()[keyFloatIndex].isF32())
      return func->emitOpError("mod function must take ")
             << expected
             << " arguments, kv as f32 after kv, then captures, diagonal and row values";
    region.out.function = func->getSymName().str();
    region.out.usesKeyFloat = !func->getArgument(keyFloatIndex).use_empty();
  }
  if (op.getScoreModKeyRelative() && !op.getScoreModRowOffsetFnAttr())
    return op.emitOpError("has score_mod_key_relative but no score_mod row offset function");
  if (FlatSymbolRefAttr ref = op.getScoreModRowOffsetFnAttr()) {
    if (mods.score.empty())
      return op.emitOpError("has a score_mod row offset function but no score_mod function");
    FailureOr<emitc::FuncOp> offset = emitFunction(ref, /*doubleInside=*/true);
    if (failed(offset))
      return failure();
    const bool keyRelative = op.getScoreModKeyRelative();
    const size_t arguments = 3 + captureTypes.size() + (keyRelative ? 1 : 0);
    if (offset->getNumArguments() != arguments || offset->getNumResults() != 1 ||
        !offset->getResultTypes()[0].isF32() ||
        (keyRelative && !offset->getArgumentTypes().back().isSignlessInteger(32)))
      return offset->emitOpError("row offset function must take (b, h, q, captures...")
             << (keyRelative ? ", the key origin as i32" : "") << ") and return one f32";
    mods.score.rowOffsetFunction = offset->getSymName().str();
    mods.score.keyRelative = keyRelative;
  }
  // The kernel applies the constants attn-lower-mods derived from score_mod:
  // its factors and the bound of its result. A non-positive result factor
  // would move the softmax's row maximum; a bound is a positive magnitude.
  struct ScoreConstant {
    FloatAttr attr;
    const char *name;
    bool positive;
    float &into;
  } scoreConstants[] = {{op.getScoreInputScaleAttr(), "score_input_scale", false,
                         mods.scoreInputScale},
                        {op.getScoreOutputScaleAttr(), "score_output_scale", true,
                         mods.scoreOutputScale},
                        {op.getScoreBoundAttr(), "score_bound", true, mods.scoreBound}};
  for (ScoreConstant &constant : scoreConstants) {
    if (!constant.attr)
      continue;
    float value = constant.attr.getValue().convertToFloat();
    if (mods.score.empty() || !constant.attr.getValue().isFinite() ||
        (constant.positive && !(value > 0.f)))
      return op.emitOpError(constant.name)
             << " needs a score_mod function and a " << (constant.positive ? "positive " : "")
             << "finite value";
    constant.into = value;
  }
  if (TileFormulaAttr formula = op.getMaskTileFormulaAttr()) {
    if (!mods.mask.empty()) {
      mods.hasMaskFormula = true;
      mods.maskFormula = tileFormulaFor(formula);
    }
  }
  return success();
}
} // namespace

namespace {
/// Copies the offset of each named buffer of the shared-memory plan into
/// its slot; a missing buffer is an error on `op`.
/// The fields the forward's and the backward's emitter configurations share:
/// the kernel's name, element type, head dim and mask, and a tile plan.
template <class Config> void describeKernel(KernelOp op, TilePlanAttr tile, Config &config) {
  config.kernelName = op.getSymName().str();
  ProblemAttr problem = op.getProblem();
  config.element = problem.getElementType().isBF16() ? ::attn::codegen::ElementKind::BF16
                                                     : ::attn::codegen::ElementKind::F16;
  config.headDim = problem.getHeadDim();
  config.tile = getTileConfig(tile);
  config.mask = maskPolicyFor(op.getMask());
}

LogicalResult readBufferOffsets(KernelOp op, SmemPlanAttr smem,
                                std::initializer_list<std::pair<const char *, int64_t *>> slots) {
  for (auto [name, offset] : slots) {
    SmemBufferAttr buffer = smem.lookupBuffer(name);
    if (!buffer)
      return op.emitOpError("shared-memory plan has no '") << name << "' buffer";
    *offset = buffer.getOffset();
  }
  return success();
}
} // namespace

/// Fills `mods` from the backward's lowered functions (attn-differentiate-mods
/// then attn-lower-mods).
LogicalResult collectBackwardMods(KernelOp op, ::attn::codegen::BackwardMods &mods) {
  if (!op.getMaskMod().empty() || !op.getScoreMod().empty())
    return op.emitOpError("has user regions that are not lowered: run attn-differentiate-mods "
                          "and attn-lower-mods first");
  const bool hasMask = op.getMaskModFnAttr() || op.getBackwardMaskModFnAttr();
  const bool hasScore = op.getScoreModFnAttr() || op.getBackwardScoreModFnAttr();
  if ((hasMask && !op.getBackwardMaskModFnAttr()) ||
      (hasScore && (!op.getBackwardScoreModFnAttr() || !op.getBackwardScoreModVjpFnAttr())))
    return op.emitOpError("has user regions without the backward's functions: run "
                          "attn-differentiate-mods before attn-lower-mods");
  SmallVector<std::string> captureTypes = captureTypesOf(op, mods.captures);
  // The vector-Jacobian product also takes the gradients' accumulators.
  SmallVector<std::string> vjpTypes = captureTypes;
  for (CaptureAttr capture : op.getCaptureList())
    if (capture.getRequiresGrad()) {
      mods.gradientRanks.push_back(static_cast<int>(capture.getRank()));
      vjpTypes.push_back(getGradientCppType(capture.getRank()));
    }
  const size_t learnable = mods.gradientRanks.size();
  llvm::raw_string_ostream source(mods.source);
  if (op.getBackwardScoreModDiagonalFnsAttr() && !op.getBackwardScoreModFnAttr())
    return op.emitOpError("has backward score_mod diagonal functions but no backward score_mod "
                          "function");
  if (failed(printValueFunctions(op, op.getBackwardScoreModDiagonalFnsAttr(), /*diagonal=*/true,
                                 captureTypes, source, mods.diagonalFunctions,
                                 mods.diagonalTypes)))
    return failure();
  struct {
    FlatSymbolRefAttr ref;
    size_t arguments;
    std::string &name;
    ArrayRef<std::string> types;
  } functions[] = {
      {op.getBackwardMaskModFnAttr(), 4 + captureTypes.size(), mods.maskFunction, captureTypes},
      {op.getBackwardScoreModFnAttr(), 5 + captureTypes.size() + mods.diagonalFunctions.size(),
       mods.scoreFunction, captureTypes},
      {op.getBackwardScoreModVjpFnAttr(), 6 + captureTypes.size() + learnable,
       mods.scoreVjpFunction, vjpTypes}};
  for (auto &function : functions) {
    if (!function.ref)
      continue;
    FailureOr<emitc::FuncOp> func = printModFunction(op, function.ref, function.types, source);
    if (failed(func))
      return failure();
    if (func->getNumArguments() != function.arguments || func->getNumResults() != 1)
      return func->emitOpError("backward mod function must take ")
             << function.arguments << " arguments and return one value";
    function.name = func->getSymName().str();
    if (&function.name == &mods.scoreVjpFunction)
      func->walk([&](emitc::CallOpaqueOp call) {
        if (isDiagonalGradientCallee(call.getCallee()))
          mods.diagonalGradient = true;
      });
    // The kernel keeps one set of diagonal sums (attn-differentiate-mods
    // marks per-diagonal additions only then).
    if (mods.diagonalGradient && learnable != 1)
      return func->emitOpError("adds per diagonal into one of ")
             << learnable << " learnable captures; the backward sums one capture by diagonal";
  }
  if (TileFormulaAttr formula = op.getMaskTileFormulaAttr()) {
    if (!mods.maskFunction.empty()) {
      mods.hasMaskFormula = true;
      mods.maskFormula = tileFormulaFor(formula);
    }
  }
  return success();
}

FailureOr<::attn::codegen::BackwardKernelConfig> buildBackwardKernelConfig(KernelOp op) {
  TilePlanAttr tile = op.getBackwardTileAttr();
  SmemPlanAttr smemPlan = op.getBackwardSmemAttr();
  if (!tile || !smemPlan)
    return op.emitOpError("needs `backward_tile` and `backward_smem` plans: run attn-tile with "
                          "backward=true and attn-plan-smem first");
  ::attn::codegen::BackwardKernelConfig config;
  describeKernel(op, tile, config);
  if (failed(collectBackwardMods(op, config.mods)))
    return failure();
  ::attn::codegen::BackwardSharedMemoryOffsets &smem = config.smem;
  if (failed(readBufferOffsets(op, smemPlan,
                               {{"k", &smem.k},
                                {"v", &smem.v},
                                {"q", &smem.q},
                                {"do", &smem.dO},
                                {"lse", &smem.lse},
                                {"delta", &smem.delta},
                                {"ds", &smem.ds},
                                {"dq_staging", &smem.dqStaging},
                                {"dq_turns", &smem.dqTurns},
                                {"barriers", &smem.barriers}})))
    return failure();
  if (SmemBufferAttr p = smemPlan.lookupBuffer("p"))
    smem.p = p.getOffset();
  if (SmemBufferAttr sums = smemPlan.lookupBuffer("diagonal_sums")) {
    if (!config.mods.diagonalGradient)
      return op.emitOpError("backward shared-memory plan has diagonal sums, but the backward "
                            "adds no capture gradient by diagonal");
    const int64_t bytes = attn_abi::bwdDiagonalSumBytes(
        config.headDim, config.tile.blockM, config.tile.blockN, config.tile.consumerWarpgroups);
    if (sums.getSize() < bytes ||
        !attn_abi::bwdBlockDiagonalSumsFit(config.headDim, config.tile.blockM, config.tile.blockN,
                                           config.tile.consumerWarpgroups))
      return op.emitOpError("backward shared-memory plan's 'diagonal_sums' buffer of ")
             << sums.getSize() << " bytes does not serve the plan, which needs " << bytes;
    smem.diagonalSums = sums.getOffset();
  }
  smem.total = smemPlan.getTotal();
  smem.dqStagingBuffers = smemPlan.lookupBuffer("dq_turns").getSlots();
  smem.barrierCount = smemPlan.lookupBuffer("barriers").getSlots();
  if (smem.barrierCount != ::attn::backwardBarrierCount(config.tile, smem.dqStagingBuffers))
    return op.emitOpError("backward shared-memory plan holds ")
           << smem.barrierCount << " barriers, the plan needs "
           << ::attn::backwardBarrierCount(config.tile, smem.dqStagingBuffers);
  return config;
}

FailureOr<::attn::codegen::ForwardKernelConfig> buildForwardKernelConfig(KernelOp op) {
  if (!isa<SoftmaxAttr>(op.getNormalizer()))
    return op.emitOpError("only the softmax normalizer has a kernel template");
  Attribute mask = op.getMask();
  if (!isa<NoMaskAttr, CausalAttr, SlidingWindowAttr>(mask))
    return op.emitOpError("mask ") << mask << " has no kernel template";
  ::attn::codegen::ForwardKernelConfig config;
  if (failed(collectUserMods(op, config.mods)))
    return failure();
  auto tile = op.getTileAttr();
  auto smem = op.getSmemAttr();
  if (!tile || !smem)
    return op.emitOpError("needs `tile` and `smem` plans: run attn-tile and attn-plan-smem first");

  describeKernel(op, tile, config);

  if (failed(readBufferOffsets(op, smem,
                               {{"q", &config.smem.q},
                                {"k", &config.smem.k},
                                {"v", &config.smem.v},
                                {"o_staging", &config.smem.oStaging},
                                {"barriers", &config.smem.barriers}})))
    return failure();
  if (size_t staged = config.mods.score.diagonalFunctions.size()) {
    ::attn::TileProblem problem{config.headDim, 2};
    problem.scoreDiagonals = static_cast<int>(staged);
    // The buffer holds 1 to kMaxScoreDiagonalWindows windows per consumer
    // (attn-plan-smem).
    SmemBufferAttr buffer = smem.lookupBuffer("score_diagonals");
    const int64_t perWindow =
        config.tile.consumerWarpgroups * ::attn::scoreDiagonalWindowBytes(problem, config.tile);
    if (!buffer || buffer.getSize() % perWindow != 0 || buffer.getSize() < perWindow ||
        buffer.getSize() > ::attn::kMaxScoreDiagonalWindows * perWindow)
      return op.emitOpError("shared-memory plan has no 'score_diagonals' buffer of ")
             << perWindow << " bytes times 1 to " << ::attn::kMaxScoreDiagonalWindows
             << " windows for its " << staged << " staged score_mod values";
    config.smem.scoreDiagonals = buffer.getOffset();
    config.smem.scoreDiagonalBytes = buffer.getSize();
    config.smem.scoreDiagonalWindows = buffer.getSize() / perWindow;
  }
  if (!config.mods.mask.empty() && !config.mods.hasMaskFormula) {
    // The stored key bits of a partial tile arrive beside its K tile.
    const int64_t bytes = config.tile.stages * attn_abi::tileKeyBitsPerTile(config.tile.blockM,
                                                                            config.tile.blockN);
    SmemBufferAttr buffer = smem.lookupBuffer("key_bits");
    if (!buffer || buffer.getSize() != bytes || buffer.getOffset() % 16 != 0)
      return op.emitOpError("shared-memory plan has no 'key_bits' buffer of ")
             << bytes << " bytes at a 16-byte aligned offset for the stored key bits of its mask_mod";
    config.smem.keyBits = buffer.getOffset();
  }
  config.smem.total = smem.getTotal();
  config.pagedKv = op->hasAttr(kPagedKvAttrName);
  return config;
}

FailureOr<::attn::codegen::LinearKernelConfig> buildLinearKernelConfig(KernelOp op) {
  namespace cg = ::attn::codegen;
  auto tile = op.getTileAttr();
  auto smem = op.getSmemAttr();
  if (!tile || !smem)
    return op.emitOpError("needs `tile` and `smem` plans: run attn-tile and attn-plan-smem first");
  cg::LinearKernelConfig config;
  config.kernelName = op.getSymName().str();
  ProblemAttr problem = op.getProblem();
  config.element = problem.getElementType().isBF16() ? cg::ElementKind::BF16 : cg::ElementKind::F16;
  config.headDim = problem.getHeadDim();
  config.chunk = tile.getBlockM();
  config.blockColumns = tile.getBlockN();
  config.stages = tile.getStages();
  config.causal = isa<CausalAttr>(op.getMask());
  if (auto linear = dyn_cast<LinearAttr>(op.getNormalizer())) {
    switch (linear.getFeatureMap()) {
    case FeatureMapKind::identity:
      config.featureMap = cg::FeatureMapKind::Identity;
      break;
    case FeatureMapKind::relu:
      config.featureMap = cg::FeatureMapKind::Relu;
      break;
    case FeatureMapKind::elu_plus_one:
      config.featureMap = cg::FeatureMapKind::EluPlusOne;
      break;
    }
    config.normalize = linear.getNormalize();
  } else if (auto retention = dyn_cast<RetentionAttr>(op.getNormalizer())) {
    config.decay = retention.getGated() ? cg::DecayKind::Gated : cg::DecayKind::Fixed;
    if (!retention.getGated())
      for (int64_t head = 0; head < problem.getQHeads(); ++head)
        config.gammas.push_back(retention.getGamma(head));
  }
  if (failed(readBufferOffsets(op, smem,
                               {{"q", &config.smem.q},
                                {"k", &config.smem.k},
                                {"v", &config.smem.v},
                                {"state", &config.smem.state},
                                {"o_staging", &config.smem.oStaging},
                                {"decay", &config.smem.decay},
                                {"decay_ring", &config.smem.decayRing},
                                {"key_sum", &config.smem.keySum},
                                {"barriers", &config.smem.barriers}})))
    return failure();
  config.smem.total = smem.getTotal();
  return config;
}

namespace {
/// The translation unit of one planned kernel.
FailureOr<std::string> emitKernelSource(KernelOp op) {
  if (op.getNormalizer().isLinearFamily()) {
    FailureOr<::attn::codegen::LinearKernelConfig> config = buildLinearKernelConfig(op);
    if (failed(config))
      return failure();
    return ::attn::codegen::emitLinearKernelSource(*config);
  }
  FailureOr<::attn::codegen::ForwardKernelConfig> config = buildForwardKernelConfig(op);
  if (failed(config))
    return failure();
  return ::attn::codegen::emitForwardKernelSource(*config);
}

struct EmitCudaPass : impl::AttnEmitCudaBase<EmitCudaPass> {
  void runOnOperation() override {
    WalkResult result = getOperation()->walk([](KernelOp op) {
      FailureOr<std::string> source = emitKernelSource(op);
      if (failed(source))
        return WalkResult::interrupt();
      op->setAttr(kCudaSourceAttrName, StringAttr::get(op.getContext(), *source));
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace

} // namespace mlir::attn
