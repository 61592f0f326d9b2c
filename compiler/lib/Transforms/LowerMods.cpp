//===- LowerMods.cpp - attn-lower-mods: user regions to EmitC -------------===//
//
// Moves the mask_mod and score_mod regions of each attn.kernel into EmitC
// functions that MLIR's C++ emitter prints as CUDA device functions.
//
//===----------------------------------------------------------------------===//

#include "ModRewrites.h"
#include "attn/Compiler/TileConstraints.h"
#include "attn/IR/AttnOps.h"
#include "attn/Transforms/Passes.h"
#include "attn_params.h"

#include "mlir/Conversion/ArithToEmitC/ArithToEmitC.h"
#include "mlir/Conversion/FuncToEmitC/FuncToEmitC.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/EmitC/Transforms/TypeConversions.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/DialectConversion.h"

#include <limits>


namespace mlir::attn {
#define GEN_PASS_DEF_ATTNLOWERMODS
#include "attn/Transforms/Passes.h.inc"

namespace {

/// An op lowered to a call of a CUDA or device-helper function.
struct OpCall {
  StringLiteral op, callee;
};

/// CUDA single-precision function called for each supported math op (and
/// the arith float min/max, which have no EmitC lowering).
constexpr OpCall kFloatCalls[] = {
    {"math.absf", "fabsf"},
    {"math.exp", "expf"},
    {"math.exp2", "exp2f"},
    {"math.expm1", "expm1f"},
    {"math.log", "logf"},
    {"math.log2", "log2f"},
    {"math.log1p", "log1pf"},
    {"math.sqrt", "sqrtf"},
    {"math.rsqrt", "rsqrtf"},
    {"math.tanh", "attn_dev::fastTanh"},
    {"math.sin", "sinf"},
    {"math.cos", "cosf"},
    {"math.erf", "erff"},
    {"math.floor", "floorf"},
    {"math.ceil", "ceilf"},
    {"math.round", "roundf"},
    {"math.powf", "powf"},
    {"math.copysign", "copysignf"},
    {"math.fma", "fmaf"},
    {"arith.maximumf", "attn_dev::maximumf"},
    {"arith.minimumf", "attn_dev::minimumf"},
    {"arith.maxnumf", "fmaxf"},
    {"arith.minnumf", "fminf"},
    {"arith.remf", "fmodf"},
};
constexpr StringLiteral kCaptureLoadCallee = "attn_dev::loadCapture";
constexpr StringLiteral kIntToFloatCallee = "attn_dev::exactIntToFloat";
constexpr StringLiteral kGradientAddCallee = "attn_dev::accumulateGradient";
constexpr StringLiteral kStepGradientAddCallee = "attn_dev::accumulateStepGradient";
constexpr StringLiteral kDiagonalGradientAddCallee = "attn_dev::accumulateDiagonalGradient";
/// Device helpers for the integer ops C has no operator for, or whose C
/// operator leaves cases undefined that the reference's interpreter defines
/// (a zero divisor, the minimum by -1), called on the operands viewed as
/// signed: index values are size_t, whose / and % would divide unsigned.
constexpr OpCall kIntegerCalls[] = {
    {"arith.floordivsi", "attn_dev::floorDiv"},
    {"arith.ceildivsi", "attn_dev::ceilDiv"},
    {"arith.divsi", "attn_dev::truncDiv"},
    {"arith.remsi", "attn_dev::truncRem"},
    {"math.absi", "attn_dev::absInt"},
};
/// The same for the unsigned divisions, on the operands viewed as unsigned.
constexpr OpCall kUnsignedCalls[] = {
    {"arith.divui", "attn_dev::divideUnsigned"},
    {"arith.remui", "attn_dev::remainderUnsigned"},
};

/// The callee `calls` lists for `op`, or empty.
StringRef calleeIn(ArrayRef<OpCall> calls, Operation *op) {
  for (const OpCall &call : calls)
    if (op->getName().getStringRef() == call.op)
      return call.callee;
  return StringRef();
}

/// Whether `calls` lists `callee`.
bool listsCallee(ArrayRef<OpCall> calls, StringRef callee) {
  return llvm::any_of(calls, [&](const OpCall &call) { return call.callee == callee; });
}

StringRef integerCallee(Operation *op) { return calleeIn(kIntegerCalls, op); }
StringRef mathCallee(Operation *op) { return calleeIn(kFloatCalls, op); }

/// f32 math (and float min/max) -> a call of the CUDA function.
struct FloatCallLowering : ConversionPattern {
  FloatCallLowering(const TypeConverter &converter, MLIRContext *context)
      : ConversionPattern(converter, MatchAnyOpTypeTag(), /*benefit=*/1, context) {}

  LogicalResult matchAndRewrite(Operation *op, ArrayRef<Value> operands,
                                ConversionPatternRewriter &rewriter) const override {
    StringRef callee = mathCallee(op);
    if (callee.empty() || op->getNumResults() != 1 || !op->getResult(0).getType().isF32())
      return failure();
    rewriter.replaceOpWithNewOp<emitc::CallOpaqueOp>(op, op->getResultTypes(), callee, operands);
    return success();
  }
};

/// memref.load of a capture -> attn_dev::loadCapture(capture, i...).
struct CaptureLoadLowering : OpConversionPattern<memref::LoadOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(memref::LoadOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    SmallVector<Value> operands{adaptor.getMemref()};
    llvm::append_range(operands, adaptor.getIndices());
    rewriter.replaceOpWithNewOp<emitc::CallOpaqueOp>(op, op.getType(), kCaptureLoadCallee,
                                                     operands);
    return success();
  }
};

/// memref.atomic_rmw addf into a capture's gradient (the backward's
/// vector-Jacobian product, attn-differentiate-mods) ->
/// attn_dev::accumulateGradient(gradient, value, i...), which the backward
/// kernel defines. The old value it would return is never used.
struct GradientAddLowering : OpConversionPattern<memref::AtomicRMWOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(memref::AtomicRMWOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    if (op.getKind() != arith::AtomicRMWKind::addf || !op.getResult().use_empty())
      return rewriter.notifyMatchFailure(op, "only an addf whose result is unused");
    SmallVector<Value> operands{adaptor.getMemref(), adaptor.getValue()};
    llvm::append_range(operands, adaptor.getIndices());
    const StringLiteral callee = op->hasAttr(kStepInvariantAttr) ? kStepGradientAddCallee
                                 : op->hasAttr(kPerDiagonalAttr) ? kDiagonalGradientAddCallee
                                                                 : kGradientAddCallee;
    emitc::CallOpaqueOp::create(rewriter, op.getLoc(), TypeRange(), callee, operands);
    rewriter.eraseOp(op);
    return success();
  }
};

/// The operand's C type viewed as unsigned (size_t stays size_t) or signed
/// (size_t becomes ptrdiff_t), for operations whose signedness the C types
/// do not carry.
Type withSignedness(Type type, bool isSigned) {
  if (isa<emitc::SizeTType, emitc::PtrDiffTType, emitc::SignedSizeTType>(type))
    return isSigned ? Type(emitc::PtrDiffTType::get(type.getContext()))
                    : Type(emitc::SizeTType::get(type.getContext()));
  auto integer = cast<IntegerType>(type);
  return IntegerType::get(type.getContext(), integer.getWidth(),
                          isSigned ? IntegerType::Signless : IntegerType::Unsigned);
}

Value castTo(ConversionPatternRewriter &rewriter, Location loc, Type type, Value value) {
  if (value.getType() == type)
    return value;
  return emitc::CastOp::create(rewriter, loc, type, value);
}

/// The integer ops of kIntegerCalls (floordivsi, ceildivsi, divsi, remsi,
/// absi) and kUnsignedCalls (divui, remui) -> a call of their device helper
/// on the operands viewed as signed or unsigned, ahead of arith-to-emitc's
/// plain division, which would divide index values (size_t) unsigned.
struct IntegerCallLowering : ConversionPattern {
  IntegerCallLowering(const TypeConverter &converter, MLIRContext *context)
      : ConversionPattern(converter, MatchAnyOpTypeTag(), /*benefit=*/2, context) {}

  LogicalResult matchAndRewrite(Operation *op, ArrayRef<Value> operands,
                                ConversionPatternRewriter &rewriter) const override {
    StringRef callee = integerCallee(op);
    const bool isSigned = !callee.empty();
    if (!isSigned)
      callee = calleeIn(kUnsignedCalls, op);
    if (callee.empty() || op->getNumResults() != 1)
      return failure();
    Type type = getTypeConverter()->convertType(op->getResult(0).getType());
    if (!type || type.isInteger(1))
      return failure();
    Type viewType = withSignedness(type, isSigned);
    Location loc = op->getLoc();
    SmallVector<Value> viewed;
    for (Value operand : operands)
      viewed.push_back(castTo(rewriter, loc, viewType, operand));
    Value result = emitc::CallOpaqueOp::create(rewriter, loc, viewType, callee, viewed).getResult(0);
    rewriter.replaceOp(op, castTo(rewriter, loc, type, result));
    return success();
  }
};

/// arith.maxsi / minsi / maxui / minui: a conditional on the comparison of
/// the operands with the op's signedness.
template <typename ArithOp, bool IsSigned, bool IsMax>
struct IntegerMinMaxLowering : OpConversionPattern<ArithOp> {
  using OpConversionPattern<ArithOp>::OpConversionPattern;
  LogicalResult matchAndRewrite(ArithOp op, typename ArithOp::Adaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Type type = this->getTypeConverter()->convertType(op.getType());
    if (!type || type.isInteger(1))
      return failure();
    Type compareType = withSignedness(type, IsSigned);
    Location loc = op.getLoc();
    Value lhs = castTo(rewriter, loc, compareType, adaptor.getLhs());
    Value rhs = castTo(rewriter, loc, compareType, adaptor.getRhs());
    Value lhsWins = emitc::CmpOp::create(
        rewriter, loc, rewriter.getI1Type(),
        IsMax ? emitc::CmpPredicate::gt : emitc::CmpPredicate::lt, lhs, rhs);
    rewriter.replaceOpWithNewOp<emitc::ConditionalOp>(op, type, lhsWins, adaptor.getLhs(),
                                                      adaptor.getRhs());
    return success();
  }
};

/// arith.sitofp i32 -> f32 as attn_dev::exactIntToFloat: the same value
/// without the conversion instruction's narrow pipe, which the softmax's
/// exponentials already keep busy.
struct IntToFloatLowering : OpConversionPattern<arith::SIToFPOp> {
  IntToFloatLowering(const TypeConverter &converter, MLIRContext *context)
      : OpConversionPattern(converter, context, /*benefit=*/2) {}
  LogicalResult matchAndRewrite(arith::SIToFPOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    if (!op.getIn().getType().isSignlessInteger(32) || !op.getType().isF32())
      return failure();
    rewriter.replaceOpWithNewOp<emitc::CallOpaqueOp>(op, op.getType(), kIntToFloatCallee,
                                                     adaptor.getIn());
    return success();
  }
};

/// Reports ops the conversion has no pattern for, at their location, before
/// the conversion's generic "failed to legalize".
LogicalResult checkLowerable(Region &region, StringRef regionName) {
  for (Operation &op : region.front()) {
    StringRef dialect = op.getName().getDialectNamespace();
    if (dialect == "math" && mathCallee(&op).empty() && integerCallee(&op).empty())
      return op.emitOpError() << "in '" << regionName << "' has no lowering to CUDA";
    if (!mathCallee(&op).empty() && !op.getResult(0).getType().isF32())
      return op.emitOpError() << "in '" << regionName << "' is lowered for f32 only, got "
                              << op.getResult(0).getType();
  }
  return success();
}

/// Moves `region` into a func.func named `name` inserted before `kernel`;
/// attn.yield becomes func.return.
func::FuncOp outlineRegion(KernelOp kernel, Region &region, StringRef name) {
  OpBuilder builder(kernel);
  Block &block = region.front();
  auto yield = cast<YieldOp>(block.getTerminator());
  auto type = builder.getFunctionType(block.getArgumentTypes(), yield.getValues().getTypes());
  auto func = func::FuncOp::create(builder, kernel.getLoc(), name, type);
  func.getBody().takeBody(region);
  builder.setInsertionPoint(yield);
  func::ReturnOp::create(builder, yield.getLoc(), yield.getValues());
  yield.erase();
  return func;
}
} // namespace

using namespace mods;

namespace {

struct LowerModsPass : impl::AttnLowerModsBase<LowerModsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *context = &getContext();
    SymbolTable symbols(module);
    SmallVector<Operation *> outlined;
    SmallVector<std::string> outlinedNames;
    int kernelIndex = 0;
    for (KernelOp kernel : llvm::make_early_inc_range(module.getOps<KernelOp>())) {
      int index = kernelIndex++;
      struct {
        Region &region;
        StringRef regionName, base;
        bool isMask;
      } mods[] = {{kernel.getMaskMod(), "mask_mod", "attn_mask_mod", true},
                  {kernel.getScoreMod(), "score_mod", "attn_score_mod", false}};
      for (auto &mod : mods) {
        if (mod.region.empty())
          continue;
        if (failed(checkLowerable(mod.region, mod.regionName)))
          return signalPassFailure();
        std::string name = freeName(symbols, mod.base, index);
        func::FuncOp func = outlineRegion(kernel, mod.region, name);
        symbols.insert(func);
        divisionsByConstantsToProducts(func);
        if (mod.isMask && failed(narrowMaskArithmetic(func))) {
          func.emitError("mask_mod: integer range narrowing failed");
          return signalPassFailure();
        }
        if (!mod.isMask) {
          auto [input, output] = peelScoreScales(func);
          if (input != 1.f)
            kernel.setScoreInputScaleAttr(FloatAttr::get(Float32Type::get(context), input));
          if (output != 1.f)
            kernel.setScoreOutputScaleAttr(FloatAttr::get(Float32Type::get(context), output));
          std::optional<double> bound =
              getScoreBound(func.front().getTerminator()->getOperand(0));
          if (bound && *bound > 0.0 && *bound <= double(std::numeric_limits<float>::max()))
            kernel.setScoreBoundAttr(FloatAttr::get(Float32Type::get(context), float(*bound)));
        }
        if (!mod.isMask) {
          SmemPlanAttr smem = kernel.getSmemAttr();
          SmemBufferAttr staged = smem ? smem.lookupBuffer("score_diagonals") : SmemBufferAttr();
          SmallVector<Attribute> diagonalRefs;
          if (staged)
            for (func::FuncOp diagonal : splitScoreDiagonals(func, staged.getSlots(), symbols)) {
              outlined.push_back(diagonal);
              outlinedNames.push_back(diagonal.getSymName().str());
              diagonalRefs.push_back(FlatSymbolRefAttr::get(context, diagonal.getSymName()));
            }
          if (!diagonalRefs.empty())
            kernel.setScoreModDiagonalFnsAttr(ArrayAttr::get(context, diagonalRefs));
          // A bounded result is not a sum with the score (the bound's ops
          // are tanh, constant multiples and selections).
          if (isa<SoftmaxAttr>(kernel.getNormalizer()) && !kernel.getScoreBoundAttr())
            if (RowOffset offset = peelRowOffset(func, freeName(symbols, name + "_offset", 0));
                offset.function) {
              symbols.insert(offset.function);
              outlined.push_back(offset.function);
              outlinedNames.push_back(offset.function.getSymName().str());
              kernel.setScoreModRowOffsetFnAttr(
                  FlatSymbolRefAttr::get(context, offset.function.getSymName()));
              if (offset.keyRelative)
                kernel.setScoreModKeyRelativeAttr(UnitAttr::get(context));
            }
        }
        SmallVector<Attribute> rowRefs;
        for (func::FuncOp row : splitRowInvariants(func, mod.isMask ? 0 : 1, symbols)) {
          outlined.push_back(row);
          outlinedNames.push_back(row.getSymName().str());
          rowRefs.push_back(FlatSymbolRefAttr::get(context, row.getSymName()));
        }
        outlined.push_back(func);
        outlinedNames.push_back(name);
        auto ref = FlatSymbolRefAttr::get(context, func.getSymName());
        auto rowRefList = rowRefs.empty() ? ArrayAttr() : ArrayAttr::get(context, rowRefs);
        if (mod.isMask) {
          kernel.setMaskModFnAttr(ref);
          kernel.setMaskModRowFnsAttr(rowRefList);
        } else {
          kernel.setScoreModFnAttr(ref);
          kernel.setScoreModRowFnsAttr(rowRefList);
        }
      }
    }
    // The backward's functions (attn-differentiate-mods) lower whole, but
    // for the score_mod's staged diagonal values: each warp of the backward
    // evaluates those once per diagonal of a step.
    for (KernelOp kernel : module.getOps<KernelOp>())
      for (FlatSymbolRefAttr ref :
           {kernel.getBackwardMaskModFnAttr(), kernel.getBackwardScoreModFnAttr(),
            kernel.getBackwardScoreModVjpFnAttr()}) {
        if (!ref)
          continue;
        auto func = symbols.lookup<func::FuncOp>(ref.getValue());
        if (!func) // already lowered
          continue;
        if (failed(checkLowerable(func.getBody(), func.getSymName())))
          return signalPassFailure();
        SmallVector<func::FuncOp> lowered{func};
        if (ref == kernel.getBackwardScoreModFnAttr()) {
          SmallVector<func::FuncOp> diagonals =
              splitScoreDiagonals(func, ::attn::kMaxScoreDiagonals, symbols);
          SmallVector<Attribute> diagonalRefs;
          for (func::FuncOp diagonal : diagonals)
            diagonalRefs.push_back(FlatSymbolRefAttr::get(context, diagonal.getSymName()));
          if (!diagonalRefs.empty())
            kernel.setBackwardScoreModDiagonalFnsAttr(ArrayAttr::get(context, diagonalRefs));
          lowered.append(diagonals.begin(), diagonals.end());
        }
        for (func::FuncOp function : lowered) {
          divisionsByConstantsToProducts(function);
          outlined.push_back(function);
          outlinedNames.push_back(function.getSymName().str());
        }
      }
    if (outlined.empty())
      return;

    TypeConverter converter;
    converter.addConversion([](Type type) { return type; });
    populateEmitCSizeTTypeConversions(converter);
    converter.addConversion([context](MemRefType type) -> Type {
      return emitc::OpaqueType::get(context,
                                    getCaptureCppType(type.getElementType(), type.getRank()));
    });

    RewritePatternSet patterns(context);
    populateArithToEmitCPatterns(converter, patterns);
    populateFuncToEmitCPatterns(converter, patterns);
    patterns.add<FloatCallLowering>(converter, context);
    patterns.add<IntToFloatLowering>(converter, context);
    patterns.add<IntegerCallLowering>(converter, context);
    patterns.add<CaptureLoadLowering, GradientAddLowering,
                 IntegerMinMaxLowering<arith::MaxSIOp, true, true>,
                 IntegerMinMaxLowering<arith::MinSIOp, true, false>,
                 IntegerMinMaxLowering<arith::MaxUIOp, false, true>,
                 IntegerMinMaxLowering<arith::MinUIOp, false, false>>(converter, context);

    ConversionTarget target(*context);
    target.addLegalDialect<emitc::EmitCDialect>();
    target.addIllegalDialect<arith::ArithDialect, math::MathDialect, memref::MemRefDialect,
                             func::FuncDialect>();
    if (failed(applyPartialConversion(outlined, target, std::move(patterns))))
      return signalPassFailure();

    Builder builder(context);
    // The conversion replaced the outlined functions: look them up afresh.
    for (const std::string &name : outlinedNames)
      if (auto func = dyn_cast_or_null<emitc::FuncOp>(SymbolTable::lookupSymbolIn(module, name)))
        func.setSpecifiersAttr(builder.getStrArrayAttr({"__device__", "__forceinline__"}));
    // The vector-Jacobian product's gradient buffers become the kernel's
    // per-thread accumulators, taken by reference (getGradientCppType).
    for (KernelOp kernel : module.getOps<KernelOp>()) {
      FlatSymbolRefAttr ref = kernel.getBackwardScoreModVjpFnAttr();
      auto vjp = ref ? dyn_cast_or_null<emitc::FuncOp>(
                           SymbolTable::lookupSymbolIn(module, ref.getValue()))
                     : emitc::FuncOp();
      if (!vjp)
        continue;
      const unsigned firstGradient = KernelOp::kScoreModNumArgs + 1 + kernel.getCaptureList().size();
      SmallVector<Type> inputs(vjp.getArgumentTypes());
      for (unsigned index = firstGradient; index < inputs.size(); ++index) {
        auto memref = cast<emitc::OpaqueType>(inputs[index]);
        int64_t rank = StringRef(memref.getValue()).rtrim(">").back() - '0';
        inputs[index] = emitc::OpaqueType::get(context, getGradientCppType(rank));
        vjp.getArgument(index).setType(inputs[index]);
      }
      vjp.setFunctionTypeAttr(TypeAttr::get(
          FunctionType::get(context, inputs, vjp.getFunctionType().getResults())));
    }
  }
};

} // namespace

std::string getCaptureCppType(Type elementType, int64_t rank) {
  return "attn_dev::Capture<" + std::string(elementType.isF32() ? "float" : "int") + ", " +
         std::to_string(rank) + ">";
}

void eraseDeadModOps(Block &block) {
  SmallVector<Operation *> ops;
  for (Operation &op : block.without_terminator())
    ops.push_back(&op);
  for (Operation *op : llvm::reverse(ops))
    if (op->use_empty() && (isMemoryEffectFree(op) || isa<memref::LoadOp>(op)))
      op->erase();
}

std::string getGradientCppType(int64_t rank) {
  return "attn_dev::CaptureGradient<" + std::to_string(rank) + "> &";
}

bool isDiagonalGradientCallee(StringRef callee) { return callee == kDiagonalGradientAddCallee; }

bool isModFunctionCallee(StringRef callee) {
  return callee == kCaptureLoadCallee || callee == kIntToFloatCallee ||
         callee == kGradientAddCallee || callee == kStepGradientAddCallee ||
         callee == kDiagonalGradientAddCallee ||
         listsCallee(kIntegerCalls, callee) || listsCallee(kUnsignedCalls, callee) ||
         listsCallee(kFloatCalls, callee);
}

} // namespace mlir::attn
