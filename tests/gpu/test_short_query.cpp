// The short-query (split-KV) path against the CPU reference: decode steps
// and short queries under every built-in mask, head dim and several split
// counts (rows with no key, Sq > Sk, head-major strides), the example
// variants with their captures, paged KV caches with shuffled pages and
// per-sequence lengths on the path and on the forward kernel, and
// Kernel::run choosing the path by itself.
#include <catch2/catch.hpp>

#include "AttnHarness.h"
#include "LoadedKernel.h"
#include "VariantCaptures.h"
#include "attn/Compiler/Compiler.h"
#include "attn/runtime/Kernel.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>

using namespace attn;
using attn::gputest::LoadedKernel;
using attn::gputest::checkComparison;
using attn::gputest::loadKernel;

namespace {

/// The module's split and combine kernels, looked up once per spec.
ShortQueryFunctions &shortQueryFunctions(LoadedKernel &kernel) {
  static std::map<const LoadedKernel *, ShortQueryFunctions> functions;
  auto found = functions.find(&kernel);
  if (found == functions.end())
    found = functions
                .emplace(&kernel, loadShortQueryFunctions(kernel.module, kernel.compiled.launch))
                .first;
  return found->second;
}

/// Launches `args` down the short-query path with `keySplits`, giving it the
/// workspace it asks for, NaN-filled so that a piece read before it was
/// written shows.
void launchShortQueryWithWorkspace(LoadedKernel &kernel, AttnForwardArgs &args, int keySplits) {
  const AttnLaunchConfig &launch = kernel.compiled.launch;
  args.keySplits = keySplits;
  // Where the automatic choice is the forward kernel, two splits.
  if (keySplits < 0 && shortQueryPlanFor(launch, args, 132).splits == 0)
    args.keySplits = 2;
  const uint64_t bytes = forwardWorkspaceBytes(launch, args);
  DeviceBuffer workspace(std::max<uint64_t>(bytes, 16));
  workspace.fill32(0x7fc00000u);
  args.workspace = workspace.data();
  args.workspaceBytes = workspace.size();
  REQUIRE(shortQueryPlanFor(launch, args, 132).splits > 0);
  launchShortQuery(shortQueryFunctions(kernel), launch, args, nullptr);
  ATTN_CU_CHECK(cuCtxSynchronize);
}

void runShortQuery(const std::string &spec, const harness::Shape &shape, int keySplits,
                   uint64_t seed, const gputest::CaptureMaker &captures = {}) {
  LoadedKernel &kernel = loadKernel(spec);
  const AttnLaunchConfig &launch = kernel.compiled.launch;
  harness::ForwardProblem data(launch, shape, seed);
  gputest::addCaptures(data, launch, shape, captures, seed);
  data.poisonOutputs();
  AttnForwardArgs args = data.args();
  launchShortQueryWithWorkspace(kernel, args, keySplits);
  reference::Problem problem = referenceProblemFromSpec(
      spec, shape.batch, shape.seqlenQ, shape.seqlenK, gputest::hostCaptures(data));
  std::ostringstream what;
  what << "spec: " << spec << "\nB=" << shape.batch << " Sq=" << shape.seqlenQ
       << " Sk=" << shape.seqlenK << " headMajor=" << shape.headMajor
       << " keySplits=" << keySplits;
  checkComparison(harness::compareWithReference(problem, data, launch.dtype), what.str());
}

const harness::Shape kShortShapes[] = {
    {2, 1, 1000, false}, // decode
    {1, 5, 77, false},   // a few rows over less than one stage of keys
    {1, 64, 20, false},  // Sq > Sk: bottom-right rows with no key
    {1, 3, 3001, true},  // head-major strides
};

} // namespace

TEST_CASE("short queries match the reference under every built-in mask and split count",
          "[gpu][short]") {
  for (const char *mask : gputest::kBuiltInMasks) {
    // GQA 4:1 (four packed rows a query position), head dim 128.
    const std::string spec = gputest::specText(128, "bf16", mask, 8, 2);
    uint64_t seed = 1;
    for (const harness::Shape &shape : kShortShapes)
      for (int keySplits : {-1, 1, 7})
        runShortQuery(spec, shape, keySplits, seed++);
  }
}

TEST_CASE("short queries match the reference at head dims 64 and 256", "[gpu][short]") {
  // f16 at 64 with MHA (one row a query position); MQA at 256 (16 packed
  // rows a position: 64 positions fill 16 blocks).
  const std::string small = gputest::specText(64, "f16", "#attn.causal<bottom_right>", 4, 4);
  const std::string wide = gputest::specText(256, "bf16", "#attn.causal<bottom_right>", 16, 1);
  uint64_t seed = 100;
  for (const std::string &spec : {small, wide})
    for (const harness::Shape &shape : kShortShapes)
      for (int keySplits : {-1, 3})
        runShortQuery(spec, shape, keySplits, seed++);
  // Many splits of few keys: most pieces are empty.
  runShortQuery(wide, {1, 2, 100}, 40, seed++);
  // More split blocks than multiprocessors and more than 32 pieces a row:
  // the combine launches the ordinary way (combineLaunchesDependent).
  const std::string gqa = gputest::specText(128, "bf16", "#attn.causal<bottom_right>", 8, 2);
  REQUIRE_FALSE(combineLaunchesDependent(70, 70 * 2 * 2, 132));
  runShortQuery(gqa, {2, 1, 5000, false}, 70, seed++);
}

TEST_CASE("the example variants match the reference on the short-query path",
          "[gpu][short][variants]") {
  using gputest::exampleWithHeads;
  const harness::Shape shapes[] = {{2, 1, 1500, false}, {1, 16, 700, false}};
  struct Variant {
    const char *example;
    gputest::CaptureMaker captures;
  };
  const Variant variants[] = {
      {"softcap_causal_hd128.mlir", {}},
      {"alibi_causal_hd128.mlir", gputest::addSlopes},
      {"alibi_learned_hd128.mlir", gputest::addSlopes},
      {"relpos_bias_causal_hd128.mlir", gputest::normalBiasTable(2 * 8192 - 1)},
      {"document_mask_hd128.mlir", gputest::addDocuments},
      {"prefix_lm_hd128.mlir", {}},
      {"sliding_window_hd128.mlir", {}},
  };
  uint64_t seed = 200;
  for (const Variant &variant : variants)
    for (const harness::Shape &shape : shapes)
      for (int keySplits : {-1, 3})
        runShortQuery(exampleWithHeads(variant.example, "q_heads = 8, kv_heads = 2"), shape,
                      keySplits, seed++, variant.captures);
}

namespace {

/// K and V of a ForwardProblem copied into page pools of `pageSize` rows,
/// the pages of every sequence shuffled among spare ones, with sequence b
/// holding lengths[b] keys; the rows of its last page past them stay NaN.
/// With `firstKeys`, the table names a spare page
/// (NaN, as every row nothing is copied to) for each page of sequence b
/// that lies wholly before key firstKeys[b]: a page a server gave back.
struct PagedCopy {
  DeviceBuffer kPool, vPool, blockTable, seqlens;
  int64_t pages = 0, maxPages = 0;
  AttnForwardArgs args;
};

PagedCopy pageProblem(const harness::ForwardProblem &data, const AttnLaunchConfig &launch,
                      int64_t pageSize, const std::vector<int64_t> &lengths, uint64_t seed,
                      const std::vector<int64_t> &firstKeys = {}) {
  const harness::Shape &shape = data.shape();
  const int64_t rowElements = int64_t(launch.kvHeads) * launch.headDim;
  PagedCopy copy;
  copy.maxPages = (shape.seqlenK + pageSize - 1) / pageSize;
  int64_t used = 0;
  for (int64_t length : lengths)
    used += (length + pageSize - 1) / pageSize;
  copy.pages = used + 3; // spare pages nobody reads
  std::vector<int32_t> order(copy.pages);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 random(seed);
  std::shuffle(order.begin(), order.end(), random);

  std::vector<uint16_t> kBits(shape.batch * shape.seqlenK * rowElements);
  std::vector<uint16_t> vBits(kBits.size());
  data.k.buffer.copyToHost(kBits.data(), kBits.size() * 2);
  data.v.buffer.copyToHost(vBits.data(), vBits.size() * 2);
  std::vector<uint16_t> kPool(copy.pages * pageSize * rowElements, 0xFFFF);
  std::vector<uint16_t> vPool(kPool.size(), 0xFFFF); // NaN where nothing is copied
  std::vector<int32_t> table(shape.batch * copy.maxPages, 0);
  int64_t next = 0;
  for (int64_t b = 0; b < shape.batch; ++b)
    for (int64_t page = 0; page * pageSize < lengths[b]; ++page) {
      const int32_t physical = order[next++];
      const bool givenBack = !firstKeys.empty() && (page + 1) * pageSize <= firstKeys[b];
      table[b * copy.maxPages + page] = givenBack ? order[copy.pages - 1] : physical;
      const int64_t rows = std::min(pageSize, lengths[b] - page * pageSize);
      const int64_t from = (b * shape.seqlenK + page * pageSize) * rowElements;
      std::memcpy(&kPool[physical * pageSize * rowElements], &kBits[from], rows * rowElements * 2);
      std::memcpy(&vPool[physical * pageSize * rowElements], &vBits[from], rows * rowElements * 2);
    }
  std::vector<int32_t> seqlens(lengths.begin(), lengths.end());
  copy.kPool = DeviceBuffer(kPool.size() * 2);
  copy.kPool.upload(kPool);
  copy.vPool = DeviceBuffer(vPool.size() * 2);
  copy.vPool.upload(vPool);
  copy.blockTable = DeviceBuffer(table.size() * 4);
  copy.blockTable.upload(table);
  copy.seqlens = DeviceBuffer(seqlens.size() * 4);
  copy.seqlens.upload(seqlens);

  copy.args = data.args();
  copy.args.k = contiguousBSHD(copy.kPool.data(), launch.dtype, copy.pages, pageSize,
                               launch.kvHeads, launch.headDim);
  copy.args.v = contiguousBSHD(copy.vPool.data(), launch.dtype, copy.pages, pageSize,
                               launch.kvHeads, launch.headDim);
  copy.args.paged.blockTable = static_cast<const int32_t *>(copy.blockTable.data());
  copy.args.paged.blockTableStride = copy.maxPages;
  copy.args.paged.maxPages = copy.maxPages;
  copy.args.paged.seqlensK = static_cast<const int32_t *>(copy.seqlens.data());
  copy.args.paged.maxSeqlenK = shape.seqlenK;
  return copy;
}

/// The reference of each sequence over its own keys, laid out as one
/// batch's outputs.
harness::ReferenceOutputs pagedReference(const std::string &spec,
                                         const harness::ForwardProblem &data,
                                         const AttnLaunchConfig &launch,
                                         const std::vector<int64_t> &lengths,
                                         const std::vector<HostCapture> &captures) {
  const harness::Shape &shape = data.shape();
  const int64_t hq = launch.qHeads, hk = launch.kvHeads, d = launch.headDim;
  const int64_t sq = shape.seqlenQ, sk = shape.seqlenK;
  harness::ReferenceOutputs outputs;
  outputs.o.assign(shape.batch * sq * hq * d, 0.f);
  outputs.lse.assign(shape.batch * hq * sq, 0.f);
  for (int64_t b = 0; b < shape.batch; ++b) {
    reference::Problem problem = referenceProblemFromSpec(spec, 1, sq, lengths[b], captures);
    reference::HostTensor q{data.q.host.data() + b * sq * hq * d, {sq * hq * d, hq * d, d, 1}};
    reference::HostTensor k{data.k.host.data() + b * sk * hk * d, {sk * hk * d, hk * d, d, 1}};
    reference::HostTensor v{data.v.host.data() + b * sk * hk * d, {sk * hk * d, hk * d, d, 1}};
    reference::forward(problem, q, k, v, outputs.o.data() + b * sq * hq * d,
                       outputs.lse.data() + b * hq * sq);
  }
  return outputs;
}

/// Which kernel a paged check launches: the short-query path (with
/// keySplits), or the forward kernel compiled for paged caches (keySplits
/// 0) under the plan `tile` (empty: the heuristic's).
struct PagedLaunch {
  bool forward = false;
  int keySplits = -1;
  std::string tile;
};

/// Sequences of `lengths` keys over pages of `pageSize` rows, checked
/// against the reference of each sequence. With `windowLeft` >= 0 (a
/// sliding window of that many keys left of the diagonal, aligned
/// bottom-right), the pages before every row's window are given back
/// (pageProblem's firstKeys).
void runPagedOn(const PagedLaunch &how, const std::string &spec, int64_t seqlenQ, int64_t pageSize,
                const std::vector<int64_t> &lengths, uint64_t seed,
                const gputest::CaptureMaker &captures, int64_t windowLeft) {
  CompileOptions options;
  options.tileOverride = how.tile;
  options.pagedKv = how.forward;
  LoadedKernel &kernel = loadKernel(spec, options);
  const AttnLaunchConfig &launch = kernel.compiled.launch;
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  const harness::Shape shape{int64_t(lengths.size()), seqlenQ, longest, false};
  harness::ForwardProblem data(launch, shape, seed);
  gputest::addCaptures(data, launch, shape, captures, seed);
  data.poisonOutputs();
  std::vector<int64_t> firstKeys;
  if (windowLeft >= 0)
    for (int64_t length : lengths)
      firstKeys.push_back(std::max<int64_t>(0, length - seqlenQ - windowLeft));
  PagedCopy paged = pageProblem(data, launch, pageSize, lengths, seed + 1, firstKeys);
  std::ostringstream what;
  what << "spec: " << spec << "\nSq=" << seqlenQ << " page size " << pageSize;
  if (how.forward)
    what << " forward kernel (boxes of " << forwardPageBoxRows(launch, pageSize) << " rows) plan "
         << launch.blockM << "x" << launch.blockN;
  else
    what << " keySplits=" << how.keySplits;
  what << " window left " << windowLeft << " lengths:";
  for (int64_t length : lengths)
    what << " " << length;
  INFO(what.str());
  if (how.forward) {
    paged.args.keySplits = 0;
    REQUIRE(forwardPageBoxRows(launch, pageSize) > 0);
    launchForward(kernel.function, launch, paged.args, nullptr);
    ATTN_CU_CHECK(cuCtxSynchronize);
  } else {
    launchShortQueryWithWorkspace(kernel, paged.args, how.keySplits);
  }
  reference::Problem whole =
      referenceProblemFromSpec(spec, shape.batch, seqlenQ, longest, gputest::hostCaptures(data));
  checkComparison(harness::compareOutputs(whole,
                                          pagedReference(spec, data, launch, lengths,
                                                         gputest::hostCaptures(data)),
                                          data, launch.dtype),
                  what.str());
}

/// The short-query path over pages.
void runPaged(const std::string &spec, int64_t seqlenQ, int64_t pageSize,
              const std::vector<int64_t> &lengths, int keySplits, uint64_t seed,
              const gputest::CaptureMaker &captures = {}, int64_t windowLeft = -1) {
  runPagedOn({false, keySplits, ""}, spec, seqlenQ, pageSize, lengths, seed, captures, windowLeft);
}

} // namespace

TEST_CASE("a paged KV cache matches the reference with shuffled pages and per-sequence lengths",
          "[gpu][short][paged]") {
  const std::string causal = gputest::specText(128, "bf16", "#attn.causal<bottom_right>", 8, 2);
  const std::vector<int64_t> lengths = {1000, 1, 333, 64};
  uint64_t seed = 300;
  for (int64_t pageSize : {16, 64, 256})
    for (int64_t seqlenQ : {1, 4})
      for (int keySplits : {-1, 1, 5})
        runPaged(causal, seqlenQ, pageSize, lengths, keySplits, seed++);
  // A window, no mask and soft-capping over pages; then a prefill of 100
  // query rows over a paged cache (beyond the automatic short-query rows).
  runPaged(gputest::specText(128, "bf16", "#attn.sliding_window<left = 100, right = 0>", 8, 2), 1,
           16, lengths, -1, seed++);
  runPaged(gputest::specText(128, "bf16", "#attn.no_mask", 8, 2), 3, 64, lengths, 2, seed++);
  runPaged(gputest::exampleWithHeads("softcap_causal_hd128.mlir", "q_heads = 8, kv_heads = 2"), 2,
           32, lengths, -1, seed++);
  runPaged(causal, 100, 64, {700, 1200}, -1, seed++);
  // Pages of other sizes, whose page numbers take the multiply's
  // correction (3, 5 and 24 rows), none (1 row) or only the shift (2, 4 and
  // 128 rows), at head dims 128 (stages of 64 keys) and 64 (128 keys).
  for (int64_t pageSize : {1, 2, 3, 24})
    runPaged(causal, 1, pageSize, lengths, -1, seed++);
  const std::string causal64 = gputest::specText(64, "bf16", "#attn.causal<bottom_right>", 8, 2);
  for (int64_t pageSize : {4, 5, 128})
    runPaged(causal64, 4, pageSize, lengths, 3, seed++);
  // Pages holding whole stages (multiples of a stage's 64 keys at head dim
  // 128, 32 at 256) take one table lookup a stage; a window's first stage
  // then starts on a stage boundary before its first key. Pages of 48 rows
  // at head dim 256 hold one and a half stages: a lookup a row.
  // The pages wholly before each row's window are given back (NaN): no
  // layout reads them, pages of 16 rows included (a stage there starts at
  // the window's first key, 333 - 1 - 100 = 232, not at 192).
  const std::string window =
      gputest::specText(128, "bf16", "#attn.sliding_window<left = 100, right = 0>", 8, 2);
  runPaged(window, 1, 64, lengths, -1, seed++, {}, 100);
  runPaged(window, 16, 128, lengths, 3, seed++, {}, 100);
  runPaged(window, 1, 16, lengths, -1, seed++, {}, 100);
  runPaged(window, 4, 48, lengths, 2, seed++, {}, 100);
  // A key-relative score_mod (ALiBi, measured from each row's diagonal)
  // over a window on pages of whole stages, where the stages start before
  // the window.
  const std::string alibiWindow =
      gputest::replaceAll(gputest::exampleWithHeads("alibi_causal_hd128.mlir", "q_heads = 8, kv_heads = 2"),
                 "#attn.causal<bottom_right>", "#attn.sliding_window<left = 100, right = 0>");
  runPaged(alibiWindow, 3, 64, lengths, -1, seed++, gputest::addSlopes, 100);
  const std::string causal256 = gputest::specText(256, "bf16", "#attn.causal<bottom_right>", 8, 1);
  for (int64_t pageSize : {32, 48, 64})
    for (int64_t seqlenQ : {1, 5})
      runPaged(causal256, seqlenQ, pageSize, lengths, -1, seed++);
}

namespace {

/// The compiled spec as a KernelImage, for the tests that go through
/// Kernel::run.
KernelImage kernelImage(const std::string &spec, const std::string &name,
                        const CompileOptions &options = {}) {
  LoadedKernel &loaded = loadKernel(spec, options);
  KernelImage image;
  image.name = name;
  image.ptx.assign(loaded.compiled.binary.begin(), loaded.compiled.binary.end());
  image.launch = loaded.compiled.launch;
  return image;
}

/// The forward kernel compiled for paged caches over pages.
void runPagedForward(const std::string &spec, int64_t seqlenQ, int64_t pageSize,
                     const std::vector<int64_t> &lengths, uint64_t seed,
                     const gputest::CaptureMaker &captures = {}, int64_t windowLeft = -1,
                     const std::string &tile = "") {
  runPagedOn({true, 0, tile}, spec, seqlenQ, pageSize, lengths, seed, captures, windowLeft);
}

} // namespace

TEST_CASE("the forward kernel reads a paged KV cache with shuffled pages and per-sequence "
          "lengths",
          "[gpu][paged][paged_forward]") {
  // Every built-in mask at head dims 64, 128 and 256 (their 80- to
  // 192-key tiles take boxes of 16 to 128 rows), the rows of each last
  // page past its sequence NaN: a verification step (heads packed two a
  // tile), a prefill chunk of 100 rows and one longer than two sequences
  // (rows with no key).
  const std::vector<int64_t> lengths = {1000, 1, 333, 64};
  struct Kind {
    int headDim;
    const char *element;
    int qHeads, kvHeads;
  };
  uint64_t seed = 700;
  for (const Kind kind : {Kind{64, "f16", 8, 2}, Kind{128, "bf16", 8, 2}, Kind{256, "bf16", 4, 1}})
    for (const char *mask : gputest::kBuiltInMasks) {
      const std::string spec =
          gputest::specText(kind.headDim, kind.element, mask, kind.qHeads, kind.kvHeads);
      for (int64_t pageSize : {16, 48, 64, 256})
        runPagedForward(spec, 64, pageSize, lengths, seed++);
      runPagedForward(spec, 100, 128, lengths, seed++);
      runPagedForward(spec, 300, 32, lengths, seed++);
    }
  // 128-row tiles of 128 keys: pages of 64 rows are two boxes a tile, pages
  // of 256 a box of 128 rows.
  const std::string causal = gputest::specText(128, "bf16", "#attn.causal<bottom_right>", 8, 2);
  for (int64_t pageSize : {64, 256})
    runPagedForward(causal, 200, pageSize, {2000, 130, 1}, seed++, {}, -1,
                    "block_m=128,block_n=128");
  // A window whose pages wholly before every row's window were given back
  // (NaN): the boxes before a work tile's first key read zeros instead.
  const std::string window =
      gputest::specText(128, "bf16", "#attn.sliding_window<left = 100, right = 0>", 8, 2);
  for (int64_t pageSize : {16, 64})
    for (int64_t seqlenQ : {64, 150})
      runPagedForward(window, seqlenQ, pageSize, lengths, seed++, {}, 100);
  // score_mods (ALiBi's per-head slopes, soft-capping) and a mask_mod.
  using gputest::exampleWithHeads;
  const char *heads = "q_heads = 8, kv_heads = 2";
  runPagedForward(exampleWithHeads("alibi_causal_hd128.mlir", heads), 64, 64, lengths, seed++,
                  gputest::addSlopes);
  runPagedForward(exampleWithHeads("softcap_causal_hd128.mlir", heads), 130, 32, lengths, seed++);
  runPagedForward(exampleWithHeads("prefix_lm_hd128.mlir", heads), 100, 64, lengths, seed++);
  // A mask_mod tile empty for one consumer's rows that holds a sequence's
  // end: prefix-LM with a prefix of 16 on 64-key tiles, 100 keys on 128-row
  // pages. Key tile 1 (keys 64-127) is empty for rows 0-63 but not for
  // rows 64-127, and its keys 100-127 are NaN: the mask must still run.
  runPagedForward(gputest::replaceAll(exampleWithHeads("prefix_lm_hd128.mlir", heads),
                                      "arith.constant 2048", "arith.constant 16"),
                  128, 128, {100, 300}, seed++, {}, -1, "block_m=128,block_n=64");
}

TEST_CASE("Kernel::run reads a paged prefill on the forward kernel",
          "[gpu][paged][paged_forward]") {
  // Past the short-query rows a paged call whose pages the forward kernel
  // (compiled for paged caches) reads takes it, as a contiguous call would;
  // pages of 24 rows (boxes of 8) stay on the short-query path. Both match
  // the reference.
  const std::string spec = gputest::specText(128, "bf16", "#attn.causal<bottom_right>", 8, 2);
  CompileOptions paged;
  paged.pagedKv = true;
  const KernelImage image = kernelImage(spec, "paged_prefill", paged);
  const Kernel kernel(image);
  const std::vector<int64_t> lengths = {900, 77};
  uint64_t seed = 800;
  for (const auto [pageSize, forward] : {std::pair<int64_t, bool>{64, true}, {24, false}}) {
    const harness::Shape shape{2, 120, 900, false};
    harness::ForwardProblem data(image.launch, shape, seed);
    data.poisonOutputs();
    PagedCopy paged = pageProblem(data, image.launch, pageSize, lengths, seed + 1);
    DeviceBuffer workspace(std::max<uint64_t>(forwardWorkspaceBytes(image.launch, paged.args), 16));
    paged.args.workspace = workspace.data();
    paged.args.workspaceBytes = workspace.size();
    INFO("page size " << pageSize);
    CHECK((shortQueryPlanFor(image.launch, paged.args, 132).splits == 0) == forward);
    kernel.run(paged.args);
    ATTN_CU_CHECK(cuCtxSynchronize);
    checkComparison(harness::compareOutputs(referenceProblemFromSpec(spec, 2, 120, 900),
                                            pagedReference(spec, data, image.launch, lengths, {}),
                                            data, image.launch.dtype),
                    "Kernel::run over pages");
    seed += 2;
  }
}

TEST_CASE("Kernel::run takes the short-query path for decode and matches the reference",
          "[gpu][short]") {
  const std::string spec = gputest::specText(128, "bf16", "#attn.causal<bottom_right>", 8, 2);
  const KernelImage image = kernelImage(spec, "short");
  const Kernel kernel(image);
  const harness::Shape shape{3, 1, 5000, false};
  harness::ForwardProblem data(image.launch, shape, 400);
  data.poisonOutputs();
  AttnForwardArgs args = data.args();
  DeviceBuffer workspace(std::max<uint64_t>(forwardWorkspaceBytes(image.launch, args), 16));
  args.workspace = workspace.data();
  args.workspaceBytes = workspace.size();
  REQUIRE(shortQueryPlanFor(image.launch, args, 132).splits > 1);
  kernel.run(args);
  ATTN_CU_CHECK(cuCtxSynchronize);
  checkComparison(harness::compareWithReference(
                      referenceProblemFromSpec(spec, shape.batch, shape.seqlenQ, shape.seqlenK),
                      data, image.launch.dtype),
                  "Kernel::run, decode");
}

namespace {

/// Launches `shape` on the forward kernel, whose work tiles must pack two
/// query heads (forwardHeadsPerTile), and compares with the reference. The
/// plan is the heuristic's with 128-row tiles (two consumer warpgroups).
void runPackedHeads(const std::string &spec, const harness::Shape &shape, uint64_t seed,
                    const gputest::CaptureMaker &captures = {}) {
  CompileOptions options;
  options.tileOverride = "block_m=128";
  LoadedKernel &kernel = loadKernel(spec, options);
  const AttnLaunchConfig &launch = kernel.compiled.launch;
  harness::ForwardProblem data(launch, shape, seed);
  gputest::addCaptures(data, launch, shape, captures, seed);
  data.poisonOutputs();
  AttnForwardArgs args = data.args();
  args.keySplits = 0;
  std::ostringstream what;
  what << "spec: " << spec << "\nB=" << shape.batch << " Sq=" << shape.seqlenQ
       << " Sk=" << shape.seqlenK << " headMajor=" << shape.headMajor
       << " blockM=" << launch.blockM;
  INFO(what.str());
  REQUIRE(forwardHeadsPerTile(launch, args) == 2);
  launchForward(kernel.function, launch, args, nullptr);
  ATTN_CU_CHECK(cuCtxSynchronize);
  reference::Problem problem = referenceProblemFromSpec(spec, shape.batch, shape.seqlenQ,
                                                        shape.seqlenK, gputest::hostCaptures(data));
  checkComparison(harness::compareWithReference(problem, data, launch.dtype), what.str());
}

} // namespace

TEST_CASE("the forward kernel packs query heads per work tile for short queries",
          "[gpu][short][packed_heads]") {
  // Twelve query heads over two kv heads: groups of six, three tiles of
  // two heads each. Shapes: a verification step, rows that end mid-slice
  // with head-major strides, Sq > Sk (bottom-right rows with no key), one
  // row.
  const harness::Shape shapes[] = {
      {2, 64, 1000, false}, {1, 33, 517, true}, {3, 5, 3, false}, {1, 1, 129, false}};
  struct Kind {
    int headDim;
    const char *element;
  };
  uint64_t seed = 500;
  for (const Kind kind : {Kind{64, "f16"}, Kind{128, "bf16"}, Kind{256, "bf16"}})
    for (const char *mask : gputest::kBuiltInMasks)
      for (const harness::Shape &shape : shapes)
        runPackedHeads(gputest::specText(kind.headDim, kind.element, mask, 12, 2), shape, seed++);
  // score_mods that read the head (ALiBi's slope) or stage diagonals
  // (relative positions), and a sliding window.
  using gputest::exampleWithHeads;
  const char *heads = "q_heads = 12, kv_heads = 2";
  const harness::Shape verify{2, 48, 1500, false};
  runPackedHeads(exampleWithHeads("alibi_causal_hd128.mlir", heads), verify, seed++,
                 gputest::addSlopes);
  runPackedHeads(exampleWithHeads("relpos_bias_causal_hd128.mlir", heads), verify, seed++,
                 gputest::normalBiasTable(2 * 8192 - 1));
  runPackedHeads(exampleWithHeads("softcap_causal_hd128.mlir", heads), verify, seed++);
  runPackedHeads(exampleWithHeads("sliding_window_hd128.mlir", heads), verify, seed++);
}

TEST_CASE("a work order for a short query is built for one head a tile",
          "[gpu][short][packed_heads]") {
  // A launch with a work order takes one head a tile, so the order must
  // list those tiles. Without a mask every tile costs the same, and the
  // order is the default one.
  const std::string spec = gputest::specText(128, "bf16", gputest::kBuiltInMasks[0], 8, 2);
  LoadedKernel &kernel = loadKernel(spec);
  const AttnLaunchConfig &launch = kernel.compiled.launch;
  const harness::Shape shape{2, 64, 700, false};
  harness::ForwardProblem data(launch, shape, 600);
  data.poisonOutputs();
  AttnForwardArgs args = data.args();
  args.keySplits = 0;
  REQUIRE(forwardHeadsPerTile(launch, args) == 2);
  DeviceBuffer order =
      buildWorkOrder(kernel.module, launch, args, nullptr, WorkOrderPolicy::LongestFirst);
  args.workOrder = static_cast<const int32_t *>(order.data());
  CHECK(forwardHeadsPerTile(launch, args) == 1);
  std::vector<int32_t> identity(forwardWorkTiles(launch, 2, 64));
  std::iota(identity.begin(), identity.end(), 0);
  CHECK(gputest::downloadWorkOrder(order, launch, args) == identity);
  launchForward(kernel.function, launch, args, nullptr);
  ATTN_CU_CHECK(cuCtxSynchronize);
  checkComparison(harness::compareWithReference(
                      referenceProblemFromSpec(spec, shape.batch, shape.seqlenQ, shape.seqlenK),
                      data, launch.dtype),
                  "forward kernel with a work order, 64 rows");
}
