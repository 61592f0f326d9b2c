//===- Compiler.h - attnc's compile driver ----------------------*- C++ -*-===//
//
// Spec -> planned IR -> CUDA C++ -> PTX (or cubin), with the launch metadata
// the runtime needs. Used by the attnc command line, the benchmarks and the
// GPU tests.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_COMPILER_COMPILER_H
#define ATTN_COMPILER_COMPILER_H

#include "attn/Compiler/ModInterpreter.h"
#include "attn/Compiler/TileConstraints.h"
#include "attn/IR/AttnOps.h"
#include "attn/Reference/LinearAttention.h"
#include "attn/Reference/ReferenceAttention.h"
#include "attn/runtime/AttentionLaunch.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassManager.h"

#include <memory>
#include <string>
#include <vector>

namespace attn {

struct CompileOptions {
  std::string arch = "sm_90a";
  /// `key=value,...` applied by attn-tile over the tuned or heuristic plan
  /// (which may depend on tuningShape).
  std::string tileOverride;
  /// The tuning database attn-tile consults (empty: none; drivers pass
  /// TuningDatabase::defaultPath()) and the shape the kernel is planned for
  /// ("B,S" or "B,Sq,Sk"): the database is asked for its bucket, and the
  /// heuristic reads its key length (empty: the largest tuned shape, and
  /// the shape-free heuristic).
  std::string tuningDatabase;
  std::string tuningShape;
  /// Softmax forward kernels that also read paged KV caches on the forward
  /// kernel (prefill chunks, verification; AttnLaunchConfig::pagedForward).
  /// Without it paged calls take the short-query path only.
  bool pagedKv = false;
  /// Stop after planning (no CUDA emission).
  bool planOnly = false;
  /// Print the IR after each pass to stderr.
  bool printIrAfterEachPass = false;
};

enum class BinaryKind { Ptx, Cubin };

struct CompiledKernel {
  std::string name;
  std::string cudaSource;
  std::vector<char> binary; // PTX text or cubin image
  BinaryKind kind = BinaryKind::Ptx;
  AttnLaunchConfig launch;
};

/// The dialects a spec may use.
void registerSpecDialects(mlir::DialectRegistry &registry);

/// Adds attn-tile, attn-plan-smem and (unless planOnly) attn-classify-blocks,
/// attn-lower-mods and attn-emit-cuda.
void buildCompilePipeline(mlir::OpPassManager &pm, const CompileOptions &options);

/// Plans and emits every kernel of `module`; errors are reported through the
/// context's diagnostic handler.
mlir::LogicalResult runCompilePipeline(mlir::ModuleOp module, const CompileOptions &options);

/// Compiles the emitted source of one planned kernel with NVRTC. An NVRTC
/// failure becomes an error diagnostic on the op carrying NVRTC's log.
mlir::FailureOr<CompiledKernel> compileEmittedKernel(mlir::attn::KernelOp op,
                                                     const CompileOptions &options,
                                                     BinaryKind kind);

/// The launch metadata of a planned kernel.
AttnLaunchConfig launchConfigFor(mlir::attn::KernelOp op);

/// The backward plan of a kernel: the tuning database's backward record
/// (options.tuningDatabase, keyed by backwardTuningHash of the spec's
/// tuning hash) nearest options.tuningShape's bucket, or without a shape
/// the largest tuned one; without a usable record backwardTileConfig (an
/// unusable record or unreadable database warns). options.tileOverride
/// applies on top (block_n and consumer_warpgroups follow each other, 64
/// keys per consumer; overridden consumers take 240 registers unless
/// given). Emits an error on the op for a malformed override or shape.
mlir::FailureOr<TileConfig> backwardTileConfigFor(mlir::attn::KernelOp op,
                                                  const CompileOptions &options);

/// A kernel's backward, planned and emitted: the CUDA unit of its three
/// kernels (templates/attn_bwd_sm90.cuh), the launch metadata and the plan.
struct PlannedBackward {
  std::string cudaSource;
  AttnLaunchConfig launch;
  TileConfig tile;
};
/// Plans the backward of a kernel (attn-tile with its `backward` option,
/// under options.tileOverride, then attn-plan-smem: the op gains
/// `backward_tile` and `backward_smem`) and emits it. The op must sit in a
/// module. Errors become diagnostics on the op.
mlir::FailureOr<PlannedBackward> planBackward(mlir::attn::KernelOp op,
                                              const CompileOptions &options);

/// planBackward, then NVRTC.
mlir::FailureOr<CompiledKernel> compileBackwardKernel(mlir::attn::KernelOp op,
                                                      const CompileOptions &options,
                                                      BinaryKind kind);

/// Host convenience: compileSpec for the backward of the spec's kernel.
CompiledKernel compileBackwardSpec(const std::string &specText, const std::string &bufferName,
                                   const CompileOptions &options = {},
                                   BinaryKind kind = BinaryKind::Ptx);

/// Host convenience: parses `specText` (a module with one attn.kernel),
/// compiles it to PTX and returns the kernel. Throws attn::Error carrying the
/// rendered diagnostics (buffer:line:col) on any failure.
CompiledKernel compileSpec(const std::string &specText, const std::string &bufferName,
                           const CompileOptions &options = {},
                           BinaryKind kind = BinaryKind::Ptx);

/// Parses a spec and runs the whole pipeline up to the emitted CUDA source
/// of each of its kernels (in order), without NVRTC. Throws attn::Error
/// carrying the rendered diagnostics on any failure. The front end's fuzz
/// target drives this.
std::vector<std::string> emitCudaSources(const std::string &specText,
                                         const std::string &bufferName,
                                         const CompileOptions &options = {});

/// What the tuner needs of a spec (one attn.kernel): its key in the tuning
/// database, the tile problem (keyLength 0) and attn-tile's heuristic plan
/// for it without a shape (the tuner asks for each shape's with
/// defaultTileConfig and the shape's key length).
struct SpecTuningKey {
  std::string specHash;
  TileProblem problem;
  TileConfig heuristic;
  int64_t qHeads = 0;
  /// Linear attention or retention: one fixed plan, nothing to tune.
  bool linearFamily = false;
};
/// Throws attn::Error with the rendered diagnostics for an invalid spec.
SpecTuningKey tuningKeyOfSpec(const std::string &specText, const std::string &bufferName);

/// The CPU reference problem of a spec, read from its IR: heads, head dim,
/// scale and mask, with the runtime sizes given here. The spec's `mask_mod`
/// and `score_mod` regions become the problem's maskMod and scoreMod,
/// evaluated by a ModInterpreter over copies of `captures` (one per declared
/// capture, in declaration order; the problem keeps what they need alive).
/// A score_mod also gives the problem's scoreModVjp: the function
/// attn-differentiate-mods derives, interpreted (none when it has no
/// derivative). Throws attn::Error, naming
/// the capture when one does not match its declaration (count, dtype, rank,
/// extents).
///
/// With `captureGradients`, it receives the gradients of the captures
/// declared with `grad` (one f32 vector each, row-major, in declaration
/// order, zero), which reference::backward() on the returned problem fills.
using CaptureGradients = std::vector<std::vector<float>>;
reference::Problem referenceProblemFromSpec(const std::string &specText, int64_t batch,
                                            int64_t seqlenQ, int64_t seqlenK,
                                            const std::vector<HostCapture> &captures = {},
                                            std::shared_ptr<CaptureGradients> *captureGradients =
                                                nullptr);
/// The CPU reference problem of a linear attention or retention spec: heads,
/// head dim, scale, causality, feature map, normalization and decay (the
/// per-head gammas of a fixed decay; `logDecay`, [batch, seqlen, q_heads],
/// for a gated one). Throws attn::Error for a softmax spec, or a gated one
/// without `logDecay`.
reference::LinearProblem linearReferenceProblemFromSpec(const std::string &specText,
                                                        int64_t batch, int64_t seqlen,
                                                        const float *logDecay = nullptr);
/// The built-in parts of a kernel's problem (heads, scale, mask attribute);
/// its user regions are left to the caller (referenceProblemFromSpec adds
/// them as interpreted maskMod / scoreMod).
reference::Problem referenceProblemFromKernel(mlir::attn::KernelOp op, int64_t batch,
                                              int64_t seqlenQ, int64_t seqlenK);

} // namespace attn

#endif // ATTN_COMPILER_COMPILER_H
