//===- Tile.cpp - choose the sm_90a tile plan -----------------------------===//
//
// attn-tile: records `tile = #attn.tile<...>` on each attn.kernel, from the
// heuristic (head dimension, mask and score_mod, and the key length of
// tuning-shape), a tuning database record, an existing plan, or a tile
// override over one of these, after checking it against the sm_90a
// constraints.
//
//===----------------------------------------------------------------------===//

#include "attn/CodeGen/CudaEmitter.h"
#include "attn/Compiler/KernelConfig.h"
#include "attn/Compiler/TileConstraints.h"
#include "attn/Transforms/Passes.h"
#include "attn/runtime/Hash.h"
#include "attn/runtime/TuningDatabase.h"

#include "mlir/IR/OperationSupport.h"
#include "llvm/Support/raw_ostream.h"

#include "attn_params.h"

#include <algorithm>
#include <tuple>

namespace mlir {
namespace attn {
#define GEN_PASS_DEF_ATTNTILE
#include "attn/Transforms/Passes.h.inc"
} // namespace attn
} // namespace mlir

using namespace mlir;
using namespace mlir::attn;

std::string mlir::attn::tuningSpecHash(KernelOp kernel) {
  auto copy = cast<KernelOp>(kernel->clone());
  copy.setSymName("kernel");
  copy.removeTileAttr();
  copy.removeSmemAttr();
  copy.removeBackwardTileAttr();
  copy.removeBackwardSmemAttr();
  copy.removeMaskTileFormulaAttr();
  copy.removeMaskModFnAttr();
  copy.removeScoreModFnAttr();
  copy.removeMaskModRowFnsAttr();
  copy.removeScoreModRowFnsAttr();
  copy.removeScoreModDiagonalFnsAttr();
  copy.removeScoreModRowOffsetFnAttr();
  copy.removeScoreModKeyRelativeAttr();
  copy.removeTunedKeySplitsAttr();
  copy->removeAttr(kCudaSourceAttrName);
  std::string text;
  llvm::raw_string_ostream os(text);
  copy->print(os, OpPrintingFlags().printGenericOpForm());
  copy->erase();
  ::attn::Sha256 hash;
  hash.updateField("attnc-tuning-key 1");
  hash.updateField(text);
  hash.updateField(std::to_string(::attn::codegen::templatesFingerprint()));
  return ::attn::Sha256::toHex(hash.finish());
}

namespace {
/// Why a kernel has no backward kernel template, or null.
const char *whyNoBackward(KernelOp kernel) {
  if (!isa<SoftmaxAttr>(kernel.getNormalizer()))
    return "only the softmax normalizer has one (the linear family's is a later step)";
  if (!isa<NoMaskAttr, CausalAttr, SlidingWindowAttr>(kernel.getMask()))
    return "its mask has no backward kernel template";
  return nullptr;
}

/// The backward plan the tuning database holds for the kernel (the record
/// under backwardTuningHash nearest `bucket`, or the largest without one),
/// else backwardTileConfig. An unreadable database or an unusable record
/// warns and gives backwardTileConfig.
::attn::TileConfig tunedOrDefaultBackwardConfig(KernelOp op, const ::attn::TileProblem &problem,
                                                StringRef tuningDatabase, StringRef arch,
                                                const std::optional<::attn::ShapeBucket> &bucket) {
  const ::attn::TileConfig heuristic = ::attn::backwardTileConfig(problem);
  if (tuningDatabase.empty())
    return heuristic;
  std::string error;
  std::optional<::attn::TuningRecord> record =
      ::attn::TuningDatabase(tuningDatabase.str())
          .lookup(::attn::backwardTuningHash(tuningSpecHash(op)), arch.str(), bucket, &error);
  if (!error.empty())
    op.emitWarning() << error << "; using the backward's heuristic plan";
  if (!record)
    return heuristic;
  ::attn::TileOverride tuned;
  std::optional<std::string> problemText = ::attn::parseTileOverride(record->config, tuned);
  const ::attn::TileConfig config = ::attn::applyLinearTileOverride(heuristic, tuned);
  if (!problemText)
    problemText = ::attn::checkBackwardTileLegality(problem, config);
  if (problemText) {
    op.emitWarning() << "tuning database '" << tuningDatabase << "': backward record '"
                     << record->config << "' for " << record->bucket.str() << " is unusable ("
                     << *problemText << "); using the backward's heuristic plan";
    return heuristic;
  }
  return config;
}
} // namespace

FailureOr<::attn::TileConfig> mlir::attn::backwardTilePlan(KernelOp kernel, StringRef tileOverride,
                                                           StringRef tuningDatabase,
                                                           StringRef tuningShape, StringRef arch) {
  if (const char *why = whyNoBackward(kernel))
    return kernel.emitOpError("has no backward: ") << why;
  const ::attn::TileProblem problem = getTileProblem(kernel);
  ::attn::TileOverride override;
  if (std::optional<std::string> error = ::attn::parseTileOverride(tileOverride.str(), override))
    return kernel.emitOpError("invalid backward tile override '")
           << tileOverride << "': " << *error;
  std::optional<::attn::ShapeBucket> bucket;
  if (!tuningShape.empty()) {
    ::attn::TuningShape shape;
    if (std::optional<std::string> error = ::attn::parseTuningShape(tuningShape.str(), shape))
      return kernel.emitOpError("invalid tuning-shape: ") << *error;
    bucket = ::attn::ShapeBucket::of(shape, kernel.getProblem().getQHeads());
  }
  ::attn::TileConfig tile = ::attn::applyLinearTileOverride(
      tunedOrDefaultBackwardConfig(kernel, problem, tuningDatabase, arch, bucket), override);
  // A tuned plan of one consumer may take 256 registers, which two cannot:
  // as in the forward's overrides, the split follows overridden consumers
  // unless given.
  if (override.consumerWarpgroups && !override.consumerRegisters) {
    ::attn::TileConfig fitted = tile;
    ::attn::fitBackwardRegisters(problem, fitted);
    tile.consumerRegisters = fitted.consumerRegisters;
    if (!override.producerRegisters)
      tile.producerRegisters = fitted.producerRegisters;
  }
  if (std::optional<std::string> violation = ::attn::checkBackwardTileLegality(problem, tile))
    return kernel.emitOpError("backward plan is illegal: ") << *violation;
  return tile;
}

namespace {
struct AttnTilePass : public mlir::attn::impl::AttnTileBase<AttnTilePass> {
  using Base::Base;

  void runOnOperation() override {
    ::attn::TileOverride override;
    std::optional<std::string> overrideError =
        ::attn::parseTileOverride(tileOverride, override);
    bool hasOverride = !override.empty();

    ::attn::TuningShape shape;
    std::optional<std::string> shapeError;
    if (!tuningShape.empty())
      shapeError = ::attn::parseTuningShape(tuningShape, shape);

    bool failed = false;
    getOperation()->walk([&](KernelOp kernel) {
      if (overrideError || shapeError) {
        if (overrideError)
          kernel.emitOpError() << "invalid tile-override '" << tileOverride
                               << "': " << *overrideError;
        else
          kernel.emitOpError() << "invalid tuning-shape: " << *shapeError;
        failed = true;
        return;
      }
      ::attn::TileProblem problem = getTileProblem(kernel);
      if (!tuningShape.empty())
        problem.keyLength = shape.seqlenK;
      const bool linear = kernel.getNormalizer().isLinearFamily();
      ::attn::TileConfig config;
      TilePlanAttr existing = kernel.getTileAttr();
      if (existing && !hasOverride) {
        config = getTileConfig(existing);
      } else if (linear) {
        const int64_t batchHeads =
            tuningShape.empty() ? 0 : shape.batch * kernel.getProblem().getQHeads();
        config = ::attn::applyLinearTileOverride(
            ::attn::linearTileConfig(problem.headDim, batchHeads),
            override);
      } else {
        config = ::attn::applyTileOverride(
            problem, tunedOrDefaultConfig(kernel, problem, shape), override);
      }

      if (std::optional<std::string> violation =
              linear ? ::attn::checkLinearTileLegality(problem, config)
                     : ::attn::checkTileLegality(problem, config)) {
        kernel.emitOpError() << "illegal tile plan for sm_90a: "
                             << *violation;
        failed = true;
        return;
      }
      kernel.setTileAttr(getTilePlanAttr(kernel.getContext(), config));
      if (!linear && !tuningDatabase.empty())
        setTunedKeySplits(kernel);
      if (backward) {
        FailureOr<::attn::TileConfig> backwardPlan =
            backwardTilePlan(kernel, backwardTileOverride, tuningDatabase, tuningShape, arch);
        if (::mlir::failed(backwardPlan)) {
          failed = true;
          return;
        }
        kernel.setBackwardTileAttr(getTilePlanAttr(kernel.getContext(), *backwardPlan));
      }
    });
    if (failed)
      signalPassFailure();
  }

  /// Lists the database's split counts of the kernel's short-query path in
  /// `tuned_key_splits`, sorted by bucket (none: the attribute is removed).
  /// An unusable record is reported and left out; an unreadable database
  /// has no records (the plan's lookup reports it).
  void setTunedKeySplits(KernelOp kernel) {
    std::vector<::attn::TuningRecord> records =
        ::attn::TuningDatabase(tuningDatabase)
            .recordsOf(::attn::shortQueryTuningHash(tuningSpecHash(kernel)), arch);
    // By bucket, the fastest first: of two records of one bucket
    // (databases concatenated) the faster stays, as a writer would keep it.
    auto bucketOf = [](const ::attn::TuningRecord &r) {
      return std::make_tuple(r.bucket.batchHeads, r.bucket.seqlenQ, r.bucket.seqlenK);
    };
    std::sort(records.begin(), records.end(),
              [&](const ::attn::TuningRecord &a, const ::attn::TuningRecord &b) {
                return std::make_pair(bucketOf(a), a.milliseconds) <
                       std::make_pair(bucketOf(b), b.milliseconds);
              });
    SmallVector<int64_t> table;
    const ::attn::TuningRecord *listed = nullptr;
    for (const ::attn::TuningRecord &record : records) {
      std::optional<int> splits = ::attn::parseKeySplitsConfig(record.config);
      if (!splits || record.bucket.seqlenQ > attn_abi::kShortQueryMaxRows) {
        kernel.emitWarning() << "tuning database '" << tuningDatabase
                             << "': short-query record '" << record.config << "' for "
                             << record.bucket.str() << " is unusable; left out";
        continue;
      }
      if (listed && bucketOf(*listed) == bucketOf(record))
        continue;
      table.append({record.bucket.batchHeads, record.bucket.seqlenQ, record.bucket.seqlenK,
                    int64_t(*splits)});
      listed = &record;
    }
    if (table.empty())
      kernel.removeTunedKeySplitsAttr();
    else
      kernel.setTunedKeySplits(table);
  }

  /// The tuning database's plan for the kernel, else the heuristic's.
  ::attn::TileConfig tunedOrDefaultConfig(KernelOp kernel,
                                          const ::attn::TileProblem &problem,
                                          const ::attn::TuningShape &shape) {
    ::attn::TileConfig heuristic = ::attn::defaultTileConfig(problem);
    if (tuningDatabase.empty())
      return heuristic;
    std::optional<::attn::ShapeBucket> bucket;
    if (!tuningShape.empty())
      bucket = ::attn::ShapeBucket::of(shape, kernel.getProblem().getQHeads());
    std::string error;
    std::optional<::attn::TuningRecord> record =
        ::attn::TuningDatabase(tuningDatabase)
            .lookup(tuningSpecHash(kernel), arch, bucket, &error);
    if (!error.empty())
      kernel.emitWarning() << error << "; using the heuristic plan";
    if (!record)
      return heuristic;
    ::attn::TileOverride tuned;
    std::optional<std::string> problemText =
        ::attn::parseTileOverride(record->config, tuned);
    ::attn::TileConfig config = ::attn::applyTileOverride(problem, heuristic, tuned);
    if (!problemText)
      problemText = ::attn::checkTileLegality(problem, config);
    if (problemText) {
      kernel.emitWarning() << "tuning database '" << tuningDatabase
                           << "': record '" << record->config << "' for "
                           << record->bucket.str() << " is unusable ("
                           << *problemText << "); using the heuristic plan";
      return heuristic;
    }
    return config;
  }
};
} // namespace
