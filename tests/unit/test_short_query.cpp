// The short-query path's host side without a GPU: which calls take it, how
// many splits of the keys they get, and the paged cache's argument checks.
#include "RuntimeTestArgs.h"
#include "attn/runtime/AttentionLaunch.h"
#include "attn/runtime/Error.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <climits>
#include <functional>
#include <tuple>

using namespace attn;
using attn::test::fakePointer;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

/// Hq = 32 over Hkv kv heads, head dim `headDim`, bf16.
AttnLaunchConfig decodeConfig(int kvHeads, int headDim = 128) {
  AttnLaunchConfig config = test::makeConfig();
  config.headDim = headDim;
  config.qHeads = 32;
  config.kvHeads = kvHeads;
  return config;
}

AttnForwardArgs decodeArgs(const AttnLaunchConfig &config, int64_t batch, int64_t seqlenQ,
                           int64_t seqlenK) {
  AttnForwardArgs args;
  const int d = config.headDim;
  args.q = contiguousBSHD(fakePointer(0x10000000), DType::BF16, batch, seqlenQ, config.qHeads, d);
  args.k = contiguousBSHD(fakePointer(0x20000000), DType::BF16, batch, seqlenK, config.kvHeads, d);
  args.v = contiguousBSHD(fakePointer(0x30000000), DType::BF16, batch, seqlenK, config.kvHeads, d);
  args.o = contiguousBSHD(fakePointer(0x40000000), DType::BF16, batch, seqlenQ, config.qHeads, d);
  args.lse = static_cast<float *>(fakePointer(0x50000000));
  args.workspace = fakePointer(0x60000000);
  args.workspaceBytes = uint64_t(1) << 30;
  return args;
}

/// A paged call of `seqlenQ` query rows: pools of 1000 pages of
/// `pageSize` rows, a table of 512 pages a sequence.
AttnForwardArgs pagedArgs(const AttnLaunchConfig &config, int64_t batch, int64_t seqlenQ = 1,
                          int64_t pageSize = 64) {
  AttnForwardArgs args = decodeArgs(config, batch, seqlenQ, 1);
  args.k =
      contiguousBSHD(fakePointer(0x20000000), DType::BF16, 1000, pageSize, config.kvHeads, 128);
  args.v =
      contiguousBSHD(fakePointer(0x30000000), DType::BF16, 1000, pageSize, config.kvHeads, 128);
  args.paged.blockTable = static_cast<const int32_t *>(fakePointer(0x70000000));
  args.paged.blockTableStride = 512;
  args.paged.maxPages = 512;
  args.paged.seqlensK = static_cast<const int32_t *>(fakePointer(0x71000000));
  args.paged.maxSeqlenK = std::min<int64_t>(30000, 512 * pageSize);
  return args;
}

void expectPagedInvalid(const std::function<void(AttnForwardArgs &)> &mutate,
                        const std::string &prefix, const std::string &detail) {
  const AttnLaunchConfig config = decodeConfig(8);
  AttnForwardArgs args = pagedArgs(config, 4);
  mutate(args);
  CHECK_THROWS_WITH(validateForwardArgs(config, args), StartsWith(prefix) && Contains(detail));
}

} // namespace

TEST_CASE("short queries take the split-KV path, longer ones the forward kernel",
          "[runtime][short]") {
  const AttnLaunchConfig config = decodeConfig(8);
  // One query token over 32768 keys, batch 1: 8 (batch, kv head) blocks
  // split until they fill 132 multiprocessors twice (64 keys a stage).
  ShortQueryPlan plan = shortQueryPlanFor(config, decodeArgs(config, 1, 1, 32768), 132);
  CHECK(plan.rowBlocks == 1);
  CHECK(plan.splits == 32);
  // Batch 64 already fills the GPU: no split.
  CHECK(shortQueryPlanFor(config, decodeArgs(config, 64, 1, 4096), 132).splits == 1);
  // 16 rows of 4 heads: 64 packed rows, one block a kv head.
  CHECK(shortQueryPlanFor(config, decodeArgs(config, 8, 16, 8192), 132).rowBlocks == 1);
  // 64 rows of 4 heads: four blocks a kv head would read K and V as often
  // as the forward kernel's 32 work tiles: the forward kernel. MQA packs 32
  // heads: two blocks read them instead of 32 work tiles.
  CHECK(shortQueryPlanFor(config, decodeArgs(config, 8, 64, 8192), 132).splits == 0);
  const AttnLaunchConfig mqa128 = decodeConfig(1);
  ShortQueryPlan packed = shortQueryPlanFor(mqa128, decodeArgs(mqa128, 8, 4, 8192), 132);
  CHECK(packed.rowBlocks == 2);
  CHECK(packed.splits >= 1);
  // 65 rows take the forward kernel, as does keySplits 0.
  CHECK(shortQueryPlanFor(config, decodeArgs(config, 1, 65, 8192), 132).splits == 0);
  AttnForwardArgs forward = decodeArgs(config, 1, 1, 8192);
  forward.keySplits = 0;
  CHECK(shortQueryPlanFor(config, forward, 132).splits == 0);
  // Without a workspace the pieces have nowhere to meet: one split.
  AttnForwardArgs bare = decodeArgs(config, 1, 1, 32768);
  bare.workspace = nullptr;
  bare.workspaceBytes = 0;
  CHECK(shortQueryPlanFor(config, bare, 132).splits == 1);
  // A requested count is kept, at any query length.
  AttnForwardArgs requested = decodeArgs(config, 1, 300, 1000);
  requested.keySplits = 5;
  CHECK(shortQueryPlanFor(config, requested, 132).splits == 5);
  // Few keys: every split keeps at least two stages (here 3 stages: 1 split).
  CHECK(shortQueryPlanFor(config, decodeArgs(config, 1, 1, 150), 132).splits == 1);
  // Head dim 256: 32-key stages, blocks of 32 rows (the 32 heads), two a
  // multiprocessor: 256 splits of 4 stages (264 would take 4 each too).
  const AttnLaunchConfig mqa = decodeConfig(1, 256);
  ShortQueryPlan wide = shortQueryPlanFor(mqa, decodeArgs(mqa, 1, 1, 32768), 132);
  CHECK(wide.rowBlocks == 1);
  CHECK(wide.splits == 256);
}

TEST_CASE("a paged cache takes the short-query path unless the forward kernel was compiled for "
          "pages",
          "[runtime][short][paged]") {
  const AttnLaunchConfig contiguousOnly = decodeConfig(8);
  CHECK(shortQueryPlanFor(contiguousOnly, pagedArgs(contiguousOnly, 4, 500), 132).rowBlocks == 32);
  AttnForwardArgs refused = pagedArgs(contiguousOnly, 4, 1);
  refused.keySplits = 0;
  CHECK_THROWS_WITH(validateForwardArgs(contiguousOnly, refused),
                    StartsWith("keySplits: ") && Contains("compiled without paged KV caches"));
}

TEST_CASE("a paged cache takes the forward kernel where a contiguous call would, if it reads "
          "the pages",
          "[runtime][short][paged]") {
  AttnLaunchConfig config = decodeConfig(8);
  config.pagedForward = 1;
  AttnForwardArgs args = pagedArgs(config, 4);
  CHECK_NOTHROW(validateForwardArgs(config, args));
  CHECK(shortQueryPlanFor(config, args, 132).splits >= 1);
  // 500 rows over pages of 64: the forward kernel, in boxes of 64 rows.
  CHECK(shortQueryPlanFor(config, pagedArgs(config, 4, 500), 132).splits == 0);
  // 64 rows of 4 query heads a kv head, as contiguous: the forward kernel,
  // two heads a work tile.
  CHECK(shortQueryPlanFor(config, pagedArgs(config, 8, 64), 132).splits == 0);
  CHECK(forwardHeadsPerTile(config, pagedArgs(config, 8, 64)) == 2);
  // Pages of 24 rows share only 8 with 128-key tiles: the short-query path
  // at any query length, and keySplits 0 is refused.
  AttnForwardArgs odd = pagedArgs(config, 4, 500, 24);
  CHECK(shortQueryPlanFor(config, odd, 132).rowBlocks == 32);
  CHECK(shortQueryPlanFor(config, odd, 132).splits >= 1);
  odd.keySplits = 0;
  CHECK_THROWS_WITH(validateForwardArgs(config, odd),
                    StartsWith("keySplits: ") && Contains("not pages of 24 rows"));
  AttnForwardArgs forward = pagedArgs(config, 4, 1);
  forward.keySplits = 0;
  CHECK_NOTHROW(validateForwardArgs(config, forward));
}

TEST_CASE("the forward kernel's boxes over pages divide the page and the key tile",
          "[runtime][paged]") {
  AttnLaunchConfig config = decodeConfig(8);
  for (auto [blockN, pageSize, rows] : {std::tuple{128, 16, 16},
                                        {128, 48, 16},
                                        {128, 64, 64},
                                        {128, 256, 128},
                                        {128, 128, 128},
                                        {128, 24, 0},
                                        {128, 8, 0},
                                        {128, 1, 0},
                                        {80, 64, 16},
                                        {80, 32, 16},
                                        {160, 64, 32},
                                        {160, 256, 32},
                                        {144, 48, 48},
                                        {192, 96, 96}}) {
    config.blockN = blockN;
    INFO("blockN " << blockN << ", pages of " << pageSize);
    CHECK(forwardPageBoxRows(config, pageSize) == rows);
  }
}

TEST_CASE("paged cache errors name the argument", "[runtime][validate][paged]") {
  expectPagedInvalid([](auto &a) { a.paged.blockTable = nullptr; }, "paged.blockTable: ",
                     "pointer is null");
  expectPagedInvalid([](auto &a) { a.paged.seqlensK = nullptr; }, "paged.seqlensK: ",
                     "pointer is null");
  expectPagedInvalid(
      [](auto &a) { a.paged.seqlensK = static_cast<const int32_t *>(fakePointer(0x71000002)); },
      "paged.seqlensK: ", "4-byte aligned");
  expectPagedInvalid([](auto &a) { a.paged.maxPages = 0; }, "paged.maxPages: ",
                     "must be positive, got 0");
  expectPagedInvalid([](auto &a) { a.paged.blockTableStride = 100; }, "paged.blockTableStride: ",
                     "100 is shorter than a row of paged.maxPages = 512 pages");
  expectPagedInvalid([](auto &a) { a.paged.maxSeqlenK = 512 * 64 + 1; }, "paged.maxSeqlenK: ",
                     "32769 is outside [0, paged.maxPages x page size = 32768]");
  expectPagedInvalid([](auto &a) { a.keySplits = -2; }, "keySplits: ", "must be -1");
  expectPagedInvalid([](auto &a) { a.keySplits = 5000; }, "keySplits: ",
                     "5000 splits exceed the limit of 1024");
  expectPagedInvalid(
      [](auto &a) {
        a.v = contiguousBSHD(a.v.data, DType::BF16, 1000, 32, 8, 128);
      },
      "v: ", "does not match k's");
  expectPagedInvalid([](auto &a) { a.tileCoverage = static_cast<const unsigned char *>(
                                       fakePointer(0x72000000)); },
                     "paged: ", "no tile coverage");
  // Setting only the lengths makes the call a paged one: the table is missing.
  expectPagedInvalid(
      [](auto &a) {
        a.paged = PagedKvCache{};
        a.paged.seqlensK = static_cast<const int32_t *>(fakePointer(0x71000000));
      },
      "paged.blockTable: ", "pointer is null");
}

TEST_CASE("requested splits need a softmax forward module", "[runtime][short]") {
  AttnForwardArgs args = decodeArgs(decodeConfig(8), 1, 1, 100);
  args.keySplits = 2;
  AttnLaunchConfig backward = decodeConfig(8);
  backward.backward = 1;
  CHECK_THROWS_WITH(validateForwardArgs(backward, args),
                    StartsWith("keySplits: ") && Contains("softmax forward modules"));
}

TEST_CASE("a paged cache's page numbers by multiply and shift equal the division",
          "[runtime][paged]") {
  // The kernel's pageOf, on the host: (umulhi(magic, key) + key) >> shift.
  auto pageOf = [](const attn_abi::PageDivider &divider, uint32_t key) {
    const uint32_t high = uint32_t((uint64_t(divider.magic) * key) >> 32);
    return (high + key) >> divider.shift;
  };
  std::vector<uint32_t> keys = {0, 1, 2, 3, 15, 16, 17, 63, 64, 65, 1000, 4095, 65535, 131071};
  for (uint32_t key = INT_MAX; key > INT_MAX - 2000u; --key)
    keys.push_back(key);
  for (uint64_t key = 7; key < INT_MAX; key = key * 3 + 1)
    keys.push_back(uint32_t(key));
  std::vector<int> pageSizes = {1, 2, 3, 5, 7, 16, 24, 64, 96, 100, 128, 255, 256, 1000,
                                4097, 65536, 1 << 30, INT_MAX};
  for (int size = 1; size < 600; size += 13)
    pageSizes.push_back(size);
  for (int pageSize : pageSizes) {
    const attn_abi::PageDivider divider = attn_abi::pageDividerOf(pageSize);
    CHECK((int64_t(1) << divider.shift) >= pageSize);
    // Beside the keys above, each side of the last few page boundaries
    // below 2^31, where a magic number too small or too large shows first.
    std::vector<uint32_t> boundaries;
    const uint32_t lastPage = uint32_t(INT_MAX) / uint32_t(pageSize);
    for (uint32_t page = lastPage > 3 ? lastPage - 3 : 1; page <= lastPage; ++page)
      for (int64_t key : {int64_t(page) * pageSize - 1, int64_t(page) * pageSize})
        if (key >= 0 && key <= INT_MAX)
          boundaries.push_back(uint32_t(key));
    for (const std::vector<uint32_t> *list : {&keys, &boundaries})
      for (uint32_t key : *list) {
        INFO("page size " << pageSize << ", key " << key);
        REQUIRE(pageOf(divider, key) == key / uint32_t(pageSize));
      }
  }
}

TEST_CASE("a measured split count replaces the model's in its shape bucket",
          "[runtime][short][tuning]") {
  AttnLaunchConfig config = decodeConfig(8);
  // Batch 1 x 32 heads, one query, 32768 keys: bucket bh32_q1_k32768,
  // where the model chooses 32 splits (the first test case).
  config.tunedKeySplits = {{ShapeBucket{32, 1, 32768}, 12},
                           {ShapeBucket{256, 1, 4096}, 0},
                           {ShapeBucket{32, 1, 256}, 64}};
  CHECK(shortQueryPlanFor(config, decodeArgs(config, 1, 1, 32768), 132).splits == 12);
  // Any key length of the bucket (16385 to 32768) takes it.
  CHECK(shortQueryPlanFor(config, decodeArgs(config, 1, 1, 20000), 132).splits == 12);
  // Another bucket keeps the model's count.
  CHECK(shortQueryPlanFor(config, decodeArgs(config, 1, 1, 65536), 132).splits ==
        shortQueryPlanFor(decodeConfig(8), decodeArgs(config, 1, 1, 65536), 132).splits);
  // 0: the forward kernel (batch 8 x 32 heads, 4096 keys), where the model
  // took the path.
  CHECK(shortQueryPlanFor(decodeConfig(8), decodeArgs(config, 8, 1, 4096), 132).splits > 0);
  CHECK(shortQueryPlanFor(config, decodeArgs(config, 8, 1, 4096), 132).splits == 0);
  // A count beyond the key tiles (200 keys: 4 tiles of 64) is capped.
  CHECK(shortQueryPlanFor(config, decodeArgs(config, 1, 1, 200), 132).splits == 4);
  // An explicit keySplits still wins; without a workspace, one split.
  AttnForwardArgs requested = decodeArgs(config, 1, 1, 32768);
  requested.keySplits = 3;
  CHECK(shortQueryPlanFor(config, requested, 132).splits == 3);
  AttnForwardArgs bare = decodeArgs(config, 1, 1, 32768);
  bare.workspace = nullptr;
  bare.workspaceBytes = 0;
  CHECK(shortQueryPlanFor(config, bare, 132).splits == 1);
  // Counts measured on contiguous caches leave paged calls the model's
  // (neither the forward kernel nor the measured count).
  AttnLaunchConfig pagedConfig = decodeConfig(8);
  AttnForwardArgs paged = pagedArgs(pagedConfig, 8);
  const int model = shortQueryPlanFor(pagedConfig, paged, 132).splits;
  pagedConfig.tunedKeySplits = {{ShapeBucket{256, 1, 32768}, 0}};
  CHECK(shortQueryPlanFor(pagedConfig, paged, 132).splits == model);
  pagedConfig.tunedKeySplits = {{ShapeBucket{256, 1, 32768}, 7}};
  CHECK(shortQueryPlanFor(pagedConfig, paged, 132).splits == model);
}

TEST_CASE("the split ladder stops at one split per key tile, then the forward kernel",
          "[runtime][short][tuning]") {
  // Head dim 128: 64 keys a tile.
  const AttnLaunchConfig config = decodeConfig(8);
  CHECK(keySplitLadder(config, 1) == std::vector<int>{1, 0});
  CHECK(keySplitLadder(config, 150) == std::vector<int>{1, 2, 3, 0});
  CHECK(keySplitLadder(config, 3001) == std::vector<int>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 0});
  CHECK(keySplitLadder(config, 3072) ==
        std::vector<int>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 0});
  // 131072 keys: 2048 tiles, capped at the path's 1024 splits.
  const std::vector<int> longest = keySplitLadder(config, 131072);
  CHECK(longest.size() == 21);
  CHECK(longest[longest.size() - 2] == 1024);
  CHECK(std::find(longest.begin(), longest.end(), 768) != longest.end());
  // Head dim 256: 32 keys a tile.
  CHECK(keySplitLadder(decodeConfig(1, 256), 96) == std::vector<int>{1, 2, 3, 0});
}

TEST_CASE("the combine launches as a dependent where its blocks find room or its rows are light",
          "[runtime][short]") {
  // One split block a multiprocessor at most: every multiprocessor has room.
  CHECK(combineLaunchesDependent(256, 132, 132));
  // More split blocks than multiprocessors: only a light combine.
  CHECK(combineLaunchesDependent(32, 256, 132));
  CHECK(combineLaunchesDependent(4, 2048, 132));
  CHECK_FALSE(combineLaunchesDependent(33, 256, 132));
  CHECK_FALSE(combineLaunchesDependent(256, 256, 132));
}

TEST_CASE("the model's split count ignores the measured ones", "[runtime][short][tuning]") {
  AttnLaunchConfig config = decodeConfig(8);
  AttnForwardArgs args = decodeArgs(config, 1, 1, 32768);
  CHECK(modelKeySplits(config, args, 132) == 32);
  config.tunedKeySplits = {{ShapeBucket{32, 1, 32768}, 12}};
  CHECK(modelKeySplits(config, args, 132) == 32);
  CHECK(shortQueryPlanFor(config, args, 132).splits == 12);
  // Without a workspace too, and whatever keySplits asks.
  args.workspace = nullptr;
  args.workspaceBytes = 0;
  args.keySplits = 5;
  CHECK(modelKeySplits(config, args, 132) == 32);
  // The forward kernel where the model sends the call there.
  CHECK(modelKeySplits(config, decodeArgs(config, 8, 64, 8192), 132) == 0);
}
