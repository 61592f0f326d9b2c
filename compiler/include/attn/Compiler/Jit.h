//===- Jit.h - Compile attention kernels from a host program ----*- C++ -*-===//
//
//   attn::Compiler compiler;                       // one per process is enough
//   attn::Kernel kernel = compiler.compile(
//       attn::SpecBuilder("causal_hd128").heads(16, 4).headDim(128).causal());
//   kernel.run(q, k, v, o, lse, stream);           // validates, then launches
//
// compile() looks in three places, fastest first:
//   1. memory: the same spec (text or Spec) compiled earlier by this Compiler;
//   2. disk: an entry whose key is the SHA-256 of the planned IR, the emitted
//      CUDA unit, the target arch, the NVRTC version, the attnc version and
//      the templates' fingerprint (DiskCache.h);
//   3. NVRTC, storing PTX, cubin and launch metadata on disk.
// Concurrent compile() calls for one kernel compile it once, in this process
// (SingleFlightCache) and across processes sharing the cache directory (a
// lock per key). Without a GPU everything up to loading works; the module is
// loaded on the first Kernel::load() or run() in each context.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_COMPILER_JIT_H
#define ATTN_COMPILER_JIT_H

#include "attn/Compiler/Spec.h"
#include "attn/runtime/DiskCache.h"
#include "attn/runtime/Kernel.h"
#include "attn/runtime/TuningDatabase.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace attn {

/// Whether printSpec verifies the op it prints.
enum class SpecPrinting {
  /// Throws with the verifier's diagnostics for an invalid op.
  Verified,
  /// Prints the op as built, valid or not (for debugging a builder).
  AsBuilt,
};

/// Times one candidate kernel of first-use tuning on a call's arguments, in
/// milliseconds (Compiler::compileFor). The default launches it on the GPU;
/// tests give their own.
using CandidateTimer =
    std::function<double(const Kernel &kernel, const AttnForwardArgs &args, CUstream stream)>;

/// The median of `repeats` launches of `kernel` with `args` on `stream`,
/// each timed with events, after `warmup` untimed ones (CandidateTimer's
/// default takes 2 and 5). The launches are queued back to back and waited
/// for once, so that Kernel::run's host work (argument checks) overlaps the
/// launch before: while the GPU is busy, each pair of events times the
/// kernel alone.
double medianRunMilliseconds(const Kernel &kernel, const AttnForwardArgs &args, CUstream stream,
                             int warmup, int repeats);

/// `args` without the buffers sized for one plan's tiles (tile coverage,
/// key bits, work order, workspace): what first-use tuning runs every
/// candidate plan with.
AttnForwardArgs withoutPlanSizedBuffers(const AttnForwardArgs &args);

/// Autotuning on first use (Compiler::compileFor): the first call of a
/// shape bucket that the tuning database lacks compiles the heuristic's
/// plan and its nearest neighbours (firstUseCandidates) on CPU threads,
/// times them on the call's arguments, records the fastest in the database
/// (later processes read it) and returns its kernel. For a short query the
/// candidates are split counts of one kernel instead (compileFor).
struct FirstUseTuning {
  /// Unset: on when the environment's ATTNC_AUTOTUNE is 1.
  std::optional<bool> enabled;
  /// Plans compiled and timed, the heuristic's first.
  size_t candidates = 8;
  /// Once this many seconds have passed since tuning began, no further
  /// candidate is timed (the heuristic and one other always are).
  double budgetSeconds = 10;
  /// Unset: 2 launches, then the median of 5 timed with events.
  CandidateTimer timer;
};

struct JitOptions {
  /// Target architecture (sm_90a is the only one the templates support).
  std::string arch = "sm_90a";
  /// `key=value,...` over attn-tile's heuristic (see attnc --tile).
  std::string tileOverride;
  /// The tuning database attn-tile consults. Unset: TuningDatabase::
  /// defaultPath() when the Compiler is constructed. Empty: none (the
  /// heuristic plans). Records written after a kernel was compiled reach it
  /// after clearMemoryCache().
  std::optional<std::string> tuningDatabase;
  /// The disk cache. Unset: DiskCacheOptions::fromEnvironment() when the
  /// Compiler is constructed. An empty directory turns the disk cache off.
  std::optional<DiskCacheOptions> diskCache;
  /// compileFor's autotuning on first use.
  FirstUseTuning firstUse;
};

/// Where compile() found its kernels since the Compiler was made.
struct JitStats {
  uint64_t memoryHits = 0;
  uint64_t diskHits = 0;
  /// Kernels compiled with NVRTC.
  uint64_t compiles = 0;
  /// Shape buckets tuned on first use, and the time that took (the extra
  /// time of their first calls).
  uint64_t firstUseTunings = 0;
  double firstUseSeconds = 0;
};

class Compiler {
public:
  /// Throws attn::Error for an unsupported arch or a malformed
  /// ATTNC_CACHE_MAX_BYTES.
  explicit Compiler(JitOptions options = {});
  ~Compiler();
  Compiler(const Compiler &) = delete;
  Compiler &operator=(const Compiler &) = delete;

  /// Compiles (or finds) the kernel of a spec. Thread safe. Throws
  /// attn::Error with the verifier's or NVRTC's diagnostics.
  Kernel compile(const Spec &spec);
  /// The same from MLIR text holding one attn.kernel; `bufferName` names it
  /// in diagnostics (buffer:line:col).
  Kernel compile(std::string_view specText, std::string_view bufferName = "spec");
  /// The same, with the tile plan the tuning database holds for the bucket
  /// nearest `shape`, else attn-tile's heuristic plan for its key length.
  /// (Without a shape: the largest tuned bucket's plan, else the
  /// shape-free heuristic.) JitOptions::tileOverride applies over it.
  Kernel compile(const Spec &spec, const TuningShape &shape);
  Kernel compile(std::string_view specText, std::string_view bufferName,
                 const TuningShape &shape);

  /// The kernel for a call with these arguments: compile(spec, shape) at the
  /// shape of q and k. With first-use tuning on (JitOptions::firstUse), no
  /// tile override, and no record of the shape's bucket in the tuning
  /// database, it tunes the bucket first: its candidates run on these
  /// arguments (reading q, k, v and the captures, writing o and lse, which
  /// the call's own launch then overwrites) on `stream`, without their tile
  /// coverage, key bits, work order and workspace (sized for one plan's
  /// tiles). A call of at most kShortQueryMaxRows query rows on a contiguous
  /// cache that leaves keySplits at -1 tunes the short-query path's split
  /// count instead: the model's count (modelKeySplits) and keySplitLadder's,
  /// timed with this kernel on these arguments; the kernel returned carries
  /// the fastest in its tunedKeySplits (the model's within 1 %), and the
  /// database gets its short-query record. Not tuned: linear attention and
  /// retention (one plan) and paged calls. A packed call's bucket
  /// is its batch and longest sequences.
  Kernel compileFor(const Spec &spec, const AttnForwardArgs &args, CUstream stream = nullptr);
  Kernel compileFor(std::string_view specText, std::string_view bufferName,
                    const AttnForwardArgs &args, CUstream stream = nullptr);

  /// The backward module of a spec (Kernel::runBackward launches it), from
  /// the same caches as compile(): memory, disk, then NVRTC. Its plan is
  /// the backward's heuristic (backwardTileConfig) under
  /// JitOptions::tileOverride. Throws attn::Error for a spec without a
  /// backward (a normalizer other than softmax, a mask_mod or score_mod,
  /// head dim 256) with the diagnostic.
  Kernel compileBackward(const Spec &spec);
  Kernel compileBackward(std::string_view specText, std::string_view bufferName = "spec");

  /// A training step's two kernels of one spec: the forward (compile()) and
  /// its backward (compileBackward()), each cached on its own.
  struct TrainingKernels {
    Kernel forward, backward;
  };
  TrainingKernels compileForTraining(const Spec &spec);
  TrainingKernels compileForTraining(std::string_view specText,
                                     std::string_view bufferName = "spec");

  /// The `attn.kernel` op a Spec builds, printed as MLIR (what attnc would
  /// read). Throws attn::Error like compile(); with SpecPrinting::AsBuilt
  /// it prints an op that fails the verifier too (to see what a builder
  /// made), and throws only when no op could be built.
  std::string printSpec(const Spec &spec, SpecPrinting mode = SpecPrinting::Verified);

  JitStats stats() const;
  /// The disk cache, or null when it is off.
  DiskCache *diskCache();
  /// Forgets the kernels held in memory (loaded modules stay alive while a
  /// Kernel handle refers to them).
  void clearMemoryCache();

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

/// The `attn.kernel` op a Spec builds, printed as MLIR, in a context of its
/// own (Compiler::printSpec is this). Throws attn::Error with the
/// diagnostics of an invalid spec (with SpecPrinting::AsBuilt, only of one
/// that could not be built).
std::string printSpecText(const Spec &spec, SpecPrinting mode = SpecPrinting::Verified);

/// The attnc version that goes into cache keys ("0.1.0").
const char *attncVersion();

} // namespace attn

#endif // ATTN_COMPILER_JIT_H
