//===- DecodeBench.cpp - attn-bench's serving measurements ----------------===//
//
// `attn-bench --decode-grid`: the short-query (split-KV) path at decode and
// speculative-verification shapes, contiguous and paged, beside the forward
// kernel. Effective bandwidth = bytes of K and V read once / time, the time
// a call takes queued back to back with others (the device's time per call,
// as a serving loop or a CUDA graph sees it). Calls rotate over copies of K
// and V that together exceed the L2 several times, so that every call reads
// them from memory.
//
//===----------------------------------------------------------------------===//

#include "DecodeBench.h"

#include "AttnHarness.h"
#include "attn/Compiler/Compiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <cstdio>
#include <numeric>
#include <random>

namespace attn::bench {

namespace {

/// Random 16-bit values of a normal bf16 range, uploaded in 64 MiB pieces
/// (a host copy of the largest caches would not fit in memory).
DeviceBuffer randomDeviceBuffer(uint64_t bytes, std::mt19937_64 &random) {
  DeviceBuffer buffer(std::max<uint64_t>(bytes, 16));
  std::vector<uint16_t> piece(std::min<uint64_t>(bytes, uint64_t(64) << 20) / 2);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (uint16_t &value : piece) {
    const float x = normal(random);
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    value = static_cast<uint16_t>(bits >> 16);
  }
  for (uint64_t offset = 0; offset < bytes; offset += piece.size() * 2)
    buffer.copyFromHost(piece.data(), std::min<uint64_t>(piece.size() * 2, bytes - offset),
                        offset);
  return buffer;
}

/// One copy of the cache's K and V (the paged calls view it as pages).
struct CacheCopy {
  DeviceBuffer k, v;
};

struct LoadedModule {
  CompiledKernel compiled;
  Module module;
  KernelFunction function;
};

LoadedModule loadModule(const std::string &spec, const std::string &tuningDatabase) {
  LoadedModule loaded;
  CompileOptions options;
  options.tuningDatabase = tuningDatabase;
  // A serving kernel: its forward kernel also reads pages.
  options.pagedKv = true;
  loaded.compiled = compileSpec(spec, "decode.mlir", options);
  loaded.module = Module::loadPtx(
      std::string_view(loaded.compiled.binary.data(), loaded.compiled.binary.size()));
  loaded.function = loaded.module.function(loaded.compiled.launch.kernelName);
  return loaded;
}

} // namespace

std::vector<DecodePoint> parseDecodePoints(const std::vector<std::string> &entries) {
  std::vector<DecodePoint> points;
  for (const std::string &entry : entries) {
    char extra = 0;
    long long v[5];
    if (std::sscanf(entry.c_str(), "%lldx%lldx%lldx%lldx%lld%c", &v[0], &v[1], &v[2], &v[3],
                    &v[4], &extra) != 5 ||
        std::any_of(v, v + 5, [](long long x) { return x <= 0 || x > INT32_MAX; }) ||
        32 % v[2] != 0 ||
        (v[3] != 64 && v[3] != 128 && v[3] != 256))
      throw Error(fmt::format("--decode-grid-points: '{}' is not SqxBATCHxHKVxDxSK with values in "
                              "[1, 2^31), HKV dividing 32 and D 64, 128 or 256",
                              entry));
    points.push_back({v[0], v[1], v[2], v[3], v[4]});
  }
  return points;
}

int runDecodeGrid(int warmup, int repeats, bool quick, const std::string &tuningDatabase,
                  const std::vector<DecodePoint> &chosen) {
  std::vector<DecodePoint> points = chosen;
  if (points.empty()) {
    const std::vector<int64_t> batches = quick ? std::vector<int64_t>{1, 8}
                                               : std::vector<int64_t>{1, 8, 64};
    const std::vector<int64_t> keys = quick ? std::vector<int64_t>{4096, 32768}
                                            : std::vector<int64_t>{4096, 32768, 131072};
    for (auto [kvHeads, headDim] : {std::pair<int64_t, int64_t>{8, 128}, {1, 128}, {1, 256}})
      for (int64_t batch : batches)
        for (int64_t seqlenK : keys)
          points.push_back({1, batch, kvHeads, headDim, seqlenK});
    for (int64_t seqlenQ : {4, 16, 64})
      for (int64_t seqlenK : {8192, 32768})
        points.push_back({seqlenQ, 8, 8, 128, seqlenK});
  }

  // K and V (one copy, or the copies to rotate over) at most this large
  // fit an 80 GB card beside the rest.
  constexpr uint64_t kMaxCopiesBytes = uint64_t(60) << 30;
  constexpr uint64_t kRotationBytes = uint64_t(256) << 20;
  std::printf("## Short-query path (attn-bench --decode-grid)\n\n"
              "Hq = 32, bf16, causal aligned bottom-right; TB/s = bytes of K and V read once / "
              "time. `splits`: the automatic split count (`forward (1)`: the automatic choice is "
              "the forward kernel; the path ran with one split); paged: pages of 64 and 16 rows "
              "in a shuffled order, and pages of 64 rows in order (each sequence's pages one after "
              "another in the pool), on the kernel the runtime chooses for them (modules compiled "
              "with --paged-kv: the forward kernel where it takes the contiguous call); forward: "
              "the forward kernel (keySplits "
              "= 0; at up to 64 query "
              "rows a 128-row tile holds two query heads, forwardHeadsPerTile).\n\n");
  if (!tuningDatabase.empty())
    std::printf("Split counts: the tuning database %s where it has the point's bucket "
                "(attn-tune), else the runtime's model.\n\n",
                tuningDatabase.c_str());
  std::printf("| Sq | batch | Hkv | D | Sk | splits | ms | TB/s | paged 64 ms | TB/s | "
              "paged 64 in order ms | TB/s | paged 16 ms | TB/s | forward ms | TB/s |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937_64 random(1);
  std::map<std::pair<int64_t, int64_t>, LoadedModule> modules;
  for (const DecodePoint &point : points) {
    const uint64_t cacheBytes =
        uint64_t(point.batch) * point.seqlenK * point.kvHeads * point.headDim * 2;
    // Copies enough to exceed 256 MiB together, so that every call reads K
    // and V from memory, not from the L2: one where K and V alone do.
    const int copies =
        int(std::clamp<uint64_t>(kRotationBytes / (2 * cacheBytes) + 1,
                                 2 * cacheBytes >= kRotationBytes ? 1 : 2, 16));
    if (2 * cacheBytes * copies > kMaxCopiesBytes) {
      std::printf("| %lld | %lld | %lld | %lld | %lld | skipped: K and V need %.1f GB |\n",
                  (long long)point.seqlenQ, (long long)point.batch, (long long)point.kvHeads,
                  (long long)point.headDim, (long long)point.seqlenK, 2.0 * cacheBytes / 1e9);
      continue;
    }
    auto key = std::make_pair(point.kvHeads, point.headDim);
    if (!modules.count(key))
      modules.emplace(key, loadModule(harness::softmaxSpecText(
                               fmt::format("decode_kv{}_d{}", point.kvHeads, point.headDim),
                               int(point.headDim), "bf16", "#attn.causal<bottom_right>", 32,
                               point.kvHeads),
                                          tuningDatabase));
    LoadedModule &loaded = modules.at(key);
    const AttnLaunchConfig &launch = loaded.compiled.launch;
    ShortQueryFunctions functions = loadShortQueryFunctions(loaded.module, launch);

    std::vector<CacheCopy> caches;
    for (int copy = 0; copy < copies; ++copy)
      caches.push_back({randomDeviceBuffer(cacheBytes, random), randomDeviceBuffer(cacheBytes, random)});
    DeviceBuffer q = randomDeviceBuffer(uint64_t(point.batch) * point.seqlenQ * 32 * point.headDim * 2,
                                        random);
    DeviceBuffer o(uint64_t(point.batch) * point.seqlenQ * 32 * point.headDim * 2);
    DeviceBuffer lse(uint64_t(point.batch) * 32 * point.seqlenQ * 4);
    auto argsFor = [&](const CacheCopy &cache) {
      AttnForwardArgs args;
      args.q = contiguousBSHD(q.data(), DType::BF16, point.batch, point.seqlenQ, 32, point.headDim);
      args.o = contiguousBSHD(o.data(), DType::BF16, point.batch, point.seqlenQ, 32, point.headDim);
      args.k = contiguousBSHD(cache.k.data(), DType::BF16, point.batch, point.seqlenK,
                              point.kvHeads, point.headDim);
      args.v = contiguousBSHD(cache.v.data(), DType::BF16, point.batch, point.seqlenK,
                              point.kvHeads, point.headDim);
      args.lse = static_cast<float *>(lse.data());
      return args;
    };
    AttnForwardArgs base = argsFor(caches[0]);
    DeviceBuffer workspace(std::max<uint64_t>(forwardWorkspaceBytes(launch, base), 16));
    // Where the automatic choice is the forward kernel, the path still runs
    // with one split, for the comparison.
    int keySplits = -1;
    auto withWorkspace = [&](AttnForwardArgs args) {
      args.workspace = workspace.data();
      args.workspaceBytes = workspace.size();
      args.keySplits = keySplits;
      return args;
    };
    const int multiprocessors = queryDevice(currentDevice()).multiprocessorCount;
    const int splits = shortQueryPlanFor(launch, withWorkspace(base), multiprocessors).splits;
    if (splits == 0)
      keySplits = 1;

    int next = 0;
    auto timeShortQuery = [&](auto &&argsOf) {
      return harness::backToBackMs(
                 [&] {
                   launchShortQuery(functions, launch, argsOf(caches[next]), nullptr);
                   next = (next + 1) % copies;
                 },
                 warmup, repeats)
          .deviceMs;
    };
    const double contiguousMs = timeShortQuery([&](const CacheCopy &cache) {
      return withWorkspace(argsFor(cache));
    });

    // Paged: the same bytes as pools of pages, the table naming the pool's
    // pages in a shuffled order, or in order (what separates the kernel's
    // page lookups from the memory system's cost of scattered pages).
    struct PagedCase {
      int64_t pageSize;
      bool shuffled;
    };
    const PagedCase pagedCases[3] = {{64, true}, {64, false}, {16, true}};
    double pagedMs[3] = {0, 0, 0};
    for (int index = 0; index < 3; ++index) {
      const int64_t pageSize = pagedCases[index].pageSize;
      const int64_t pagesPerSequence = (point.seqlenK + pageSize - 1) / pageSize;
      if (point.seqlenK % pageSize != 0)
        continue;
      std::vector<int32_t> table(point.batch * pagesPerSequence);
      std::iota(table.begin(), table.end(), 0);
      if (pagedCases[index].shuffled)
        std::shuffle(table.begin(), table.end(), random);
      DeviceBuffer blockTable(table.size() * 4), seqlens(point.batch * 4);
      blockTable.upload(table);
      seqlens.upload(std::vector<int32_t>(point.batch, int32_t(point.seqlenK)));
      auto pagedArgsFor = [&](const CacheCopy &cache) {
        // The runtime's choice, whatever the contiguous column forced.
        AttnForwardArgs args = withWorkspace(argsFor(cache));
        args.keySplits = -1;
        const int64_t pages = point.batch * pagesPerSequence;
        args.k = contiguousBSHD(cache.k.data(), DType::BF16, pages, pageSize, point.kvHeads,
                                point.headDim);
        args.v = contiguousBSHD(cache.v.data(), DType::BF16, pages, pageSize, point.kvHeads,
                                point.headDim);
        args.paged.blockTable = static_cast<const int32_t *>(blockTable.data());
        args.paged.blockTableStride = pagesPerSequence;
        args.paged.maxPages = pagesPerSequence;
        args.paged.seqlensK = static_cast<const int32_t *>(seqlens.data());
        args.paged.maxSeqlenK = point.seqlenK;
        return args;
      };
      // A paged call's split count can differ from a contiguous one's (the
      // tuned counts are for contiguous caches): its own workspace size.
      const uint64_t pagedBytes = forwardWorkspaceBytes(launch, pagedArgsFor(caches[0]));
      if (pagedBytes > workspace.size())
        workspace = DeviceBuffer(pagedBytes);
      // The runtime's choice of kernel too: the forward kernel reads pages
      // where it takes the contiguous call.
      if (shortQueryPlanFor(launch, pagedArgsFor(caches[0]), multiprocessors).splits > 0) {
        pagedMs[index] = timeShortQuery(pagedArgsFor);
        continue;
      }
      pagedMs[index] =
          harness::backToBackMs(
              [&] {
                launchForward(loaded.function, launch, pagedArgsFor(caches[next]), nullptr);
                next = (next + 1) % copies;
              },
              warmup, repeats)
              .deviceMs;
    }

    const double forwardMs = harness::backToBackMs(
                                 [&] {
                                   AttnForwardArgs args = argsFor(caches[next]);
                                   args.keySplits = 0;
                                   launchForward(loaded.function, launch, args, nullptr);
                                   next = (next + 1) % copies;
                                 },
                                 warmup, repeats)
                                 .deviceMs;

    const double kvBytes = 2.0 * cacheBytes;
    auto rate = [&](double ms) { return ms > 0 ? fmt::format("{:.2f}", kvBytes / ms / 1e9) : std::string(); };
    auto time = [](double ms) { return ms > 0 ? fmt::format("{:.4f}", ms) : std::string("-"); };
    const std::string splitsCell = splits > 0 ? std::to_string(splits) : "forward (1)";
    std::printf("| %lld | %lld | %lld | %lld | %lld | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                (long long)point.seqlenQ, (long long)point.batch, (long long)point.kvHeads,
                (long long)point.headDim, (long long)point.seqlenK, splitsCell.c_str(),
                time(contiguousMs).c_str(), rate(contiguousMs).c_str(), time(pagedMs[0]).c_str(),
                rate(pagedMs[0]).c_str(), time(pagedMs[1]).c_str(), rate(pagedMs[1]).c_str(),
                time(pagedMs[2]).c_str(), rate(pagedMs[2]).c_str(), time(forwardMs).c_str(),
                rate(forwardMs).c_str());
    std::fflush(stdout);
  }
  return 0;
}

} // namespace attn::bench
