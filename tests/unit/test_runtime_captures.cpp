// Captured buffers without a GPU: validation of capture arguments against
// their declarations, the parameter block, Kernel::run taking captures, and
// launch metadata with captures (round trip, malformed lines).

#include "RuntimeTestArgs.h"
#include "attn/runtime/Runtime.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

using namespace attn;
using attn::test::expectInvalid;
using attn::test::fakePointer;
using attn::test::makeArgs;
using attn::test::makeConfig;
using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;

//===----------------------------------------------------------------------===//
// Captured buffers
//===----------------------------------------------------------------------===//

namespace {

using Kind = CaptureDim::Kind;

/// makeConfig with the ABI's limit of four captures, covering every dim kind.
AttnLaunchConfig makeCaptureConfig() {
  AttnLaunchConfig config = makeConfig();
  config.captures = {
      {"slopes", DType::F32, {{Kind::QHeads}}},
      {"doc_ids", DType::I32, {{Kind::Batch}, {Kind::SeqlenK}}},
      {"bias", DType::F32, {{Kind::KvHeads}, {Kind::Any}, {Kind::Fixed, 16}}},
      {"q_doc_ids", DType::I32, {{Kind::Batch}, {Kind::SeqlenQ}}},
  };
  return config;
}

/// makeArgs (B=2, Sq=100, Sk=300, Hq=8, Hkv=2) with captures that fit
/// makeCaptureConfig.
AttnForwardArgs makeCaptureArgs() {
  AttnForwardArgs args = makeArgs();
  args.captures = {
      {fakePointer(0x60000000), DType::F32, {8}},
      {fakePointer(0x61000000), DType::I32, {2, 300}},
      {fakePointer(0x62000000), DType::F32, {2, 5, 16}},
      {fakePointer(0x63000000), DType::I32, {2, 100}},
  };
  return args;
}

/// expectInvalid for makeCaptureConfig and makeCaptureArgs.
void expectCaptureInvalid(
    const std::function<void(AttnLaunchConfig &, AttnForwardArgs &)> &mutate,
    const std::string &prefix, const std::string &detail) {
  AttnLaunchConfig config = makeCaptureConfig();
  AttnForwardArgs args = makeCaptureArgs();
  mutate(config, args);
  CHECK_THROWS_AS(validateForwardArgs(config, args), Error);
  CHECK_THROWS_WITH(validateForwardArgs(config, args),
                    StartsWith(prefix) && Contains(detail));
}

/// Expects validateLaunchConfig to refuse makeCaptureConfig after `mutate`.
void expectCaptureConfigInvalid(
    const std::function<void(std::vector<CaptureDecl> &)> &mutate,
    const std::string &message) {
  AttnLaunchConfig config = makeCaptureConfig();
  mutate(config.captures);
  CHECK_THROWS_AS(validateLaunchConfig(config), Error);
  CHECK_THROWS_WITH(validateLaunchConfig(config), message);
}

/// Expects parseLaunchConfig to refuse `text` with a message naming `line`
/// and containing `detail`.
void expectMetadataInvalid(const std::string &text, int line,
                           const std::string &detail) {
  CHECK_THROWS_WITH(parseLaunchConfig(text),
                    StartsWith("launch metadata: line " +
                               std::to_string(line) + ": ") &&
                        Contains(detail));
}

/// The 1-based line of `text` that starts with `key ` (0 when none does).
int lineOfKey(const std::string &text, const std::string &key) {
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number)
    if (line.rfind(key + " ", 0) == 0)
      return number;
  return 0;
}

/// `text` with the value of the line starting with `key ` replaced.
std::string withValue(const std::string &text, const std::string &key,
                      const std::string &value) {
  size_t start = text.find("\n" + key + " ");
  REQUIRE(start != std::string::npos);
  start += key.size() + 2;
  return text.substr(0, start) + value + text.substr(text.find('\n', start));
}

bool sameCaptures(const std::vector<CaptureDecl> &a,
                  const std::vector<CaptureDecl> &b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].dtype != b[i].dtype ||
        a[i].dims.size() != b[i].dims.size())
      return false;
    for (size_t d = 0; d < a[i].dims.size(); ++d)
      if (a[i].dims[d].kind != b[i].dims[d].kind ||
          a[i].dims[d].size != b[i].dims[d].size)
        return false;
  }
  return true;
}

} // namespace

TEST_CASE("captures that match their declarations pass validation",
          "[runtime][validate][captures]") {
  CHECK_NOTHROW(validateLaunchConfig(makeCaptureConfig()));
  CHECK_NOTHROW(validateForwardArgs(makeCaptureConfig(), makeCaptureArgs()));

  SECTION("an empty capture may have a null pointer") {
    AttnForwardArgs args = makeCaptureArgs();
    args.captures[2] = {nullptr, DType::F32, {2, 0, 16}};
    CHECK_NOTHROW(validateForwardArgs(makeCaptureConfig(), args));
  }
  SECTION("an empty batch empties the batch-sized captures") {
    AttnForwardArgs args = makeCaptureArgs();
    for (TensorView *view : {&args.q, &args.k, &args.v, &args.o})
      view->shape[0] = 0;
    args.captures[1] = {nullptr, DType::I32, {0, 300}};
    args.captures[3] = {nullptr, DType::I32, {0, 100}};
    CHECK_NOTHROW(validateForwardArgs(makeCaptureConfig(), args));
  }
  SECTION("no captures declared, none passed") {
    CHECK(makeConfig().captures.empty());
    CHECK(makeArgs().captures.empty());
    CHECK_NOTHROW(validateForwardArgs(makeConfig(), makeArgs()));
  }
}

TEST_CASE("the number of captures must match the declarations",
          "[runtime][validate][captures]") {
  expectCaptureInvalid([](auto &, auto &a) { a.captures.pop_back(); },
                       "captures: ",
                       "the kernel declares 4 captured buffers (slopes, "
                       "doc_ids, bias, q_doc_ids), got 3");
  expectCaptureInvalid(
      [](auto &c, auto &a) {
        c.captures.resize(1);
        a.captures.clear();
      },
      "captures: ", "the kernel declares 1 captured buffer (slopes), got 0");
  expectInvalid(
      [](auto &, auto &a) { a.captures = {{fakePointer(0x60000000), DType::F32, {8}}}; },
      "captures: ", "the kernel declares no captured buffers, got 1");
}

TEST_CASE("capture errors name the capture, the dim and both values",
          "[runtime][validate][captures]") {
  expectCaptureInvalid(
      [](auto &, auto &a) { a.captures[1].dtype = DType::F32; },
      "capture 'doc_ids': ", "dtype f32 does not match the declared i32");
  expectCaptureInvalid(
      [](auto &, auto &a) { a.captures[0].dtype = DType::I32; },
      "capture 'slopes': ", "dtype i32 does not match the declared f32");
  expectCaptureInvalid(
      [](auto &, auto &a) { a.captures[2].shape = {2, 5}; }, "capture 'bias': ",
      "shape [2, 5] has rank 2, but the kernel declares rank 3: [kv_heads, ?, 16]");
  expectCaptureInvalid(
      [](auto &, auto &a) { a.captures[0].shape = {8, 1}; }, "capture 'slopes': ",
      "shape [8, 1] has rank 2, but the kernel declares rank 1: [q_heads]");

  expectCaptureInvalid([](auto &, auto &a) { a.captures[0].shape = {4}; },
                       "capture 'slopes': ", "dim 0 is 4, expected 8 (q_heads)");
  expectCaptureInvalid([](auto &, auto &a) { a.captures[1].shape = {3, 300}; },
                       "capture 'doc_ids': ", "dim 0 is 3, expected 2 (batch)");
  expectCaptureInvalid([](auto &, auto &a) { a.captures[1].shape = {2, 100}; },
                       "capture 'doc_ids': ",
                       "dim 1 is 100, expected 300 (seqlen_k)");
  expectCaptureInvalid([](auto &, auto &a) { a.captures[2].shape = {8, 5, 16}; },
                       "capture 'bias': ", "dim 0 is 8, expected 2 (kv_heads)");
  expectCaptureInvalid([](auto &, auto &a) { a.captures[2].shape = {2, 5, 15}; },
                       "capture 'bias': ", "dim 2 is 15, expected 16");
  expectCaptureInvalid([](auto &, auto &a) { a.captures[2].shape = {2, -1, 16}; },
                       "capture 'bias': ", "dim 1 must be non-negative, got -1");
  expectCaptureInvalid([](auto &, auto &a) { a.captures[3].shape = {2, 300}; },
                       "capture 'q_doc_ids': ",
                       "dim 1 is 300, expected 100 (seqlen_q)");
  // The expected extents follow the launch, not only the config.
  expectCaptureInvalid(
      [](auto &, auto &a) {
        a.k.shape[1] = 64;
        a.v.shape[1] = 64;
      },
      "capture 'doc_ids': ", "dim 1 is 300, expected 64 (seqlen_k)");

  expectCaptureInvalid([](auto &, auto &a) { a.captures[0].data = nullptr; },
                       "capture 'slopes': ", "data pointer is null");
  expectCaptureInvalid(
      [](auto &, auto &a) { a.captures[3].data = fakePointer(0x63000002); },
      "capture 'q_doc_ids': ", "data pointer must be 4-byte aligned");
  expectCaptureInvalid(
      [](auto &, auto &a) { a.captures[2].shape = {2, int64_t(1) << 60, 16}; },
      "capture 'bias': ", "shape [2, 1152921504606846976, 16] does not fit in 2^63 bytes");

  // Checked before anything needs the driver.
  KernelFunction kernel;
  AttnForwardArgs args = makeCaptureArgs();
  args.captures[0].shape = {4};
  CHECK_THROWS_WITH(launchForward(kernel, makeCaptureConfig(), args, nullptr),
                    StartsWith("capture 'slopes': dim 0 is 4"));
  CHECK_THROWS_WITH(makeForwardParams(makeCaptureConfig(), args),
                    StartsWith("capture 'slopes': dim 0 is 4"));
}

TEST_CASE("capture declarations are checked with the config",
          "[runtime][validate][captures]") {
  expectCaptureConfigInvalid(
      [](auto &c) { c.push_back({"extra", DType::F32, {{Kind::Any}}}); },
      "config: 5 captured buffers exceed the kernel ABI's limit of 4");
  expectCaptureConfigInvalid([](auto &c) { c[1].name = ""; },
                             "config: capture 1: name '' is not an identifier");
  expectCaptureConfigInvalid([](auto &c) { c[2].name = "2d_bias"; },
                             "config: capture 2: name '2d_bias' is not an identifier");
  expectCaptureConfigInvalid([](auto &c) { c[0].name = "head slopes"; },
                             "config: capture 0: name 'head slopes' is not an identifier");
  expectCaptureConfigInvalid(
      [](auto &c) { c[3].name = "slopes"; },
      "config: capture 'slopes': declared twice (captures 0 and 3)");
  expectCaptureConfigInvalid(
      [](auto &c) { c[0].dtype = DType::BF16; },
      "config: capture 'slopes': dtype must be f32 or i32, got bf16");
  expectCaptureConfigInvalid([](auto &c) { c[1].dims.clear(); },
                             "config: capture 'doc_ids': rank must be 1 to 3, got 0");
  expectCaptureConfigInvalid(
      [](auto &c) { c[2].dims.push_back({Kind::Any}); },
      "config: capture 'bias': rank must be 1 to 3, got 4");
  expectCaptureConfigInvalid(
      [](auto &c) { c[2].dims[2].size = 0; },
      "config: capture 'bias': dim 2 has fixed size 0; fixed sizes must be positive");
  expectCaptureConfigInvalid(
      [](auto &c) { c[0].dims[0] = {Kind::Fixed, -3}; },
      "config: capture 'slopes': dim 0 has fixed size -3; fixed sizes must be positive");
  expectCaptureConfigInvalid(
      [](auto &c) { c[0].dims[0].kind = static_cast<Kind>(42); },
      "config: capture 'slopes': dim 0 has an invalid kind 42");

  // The forward checks and a Kernel's construction run the same checks.
  AttnLaunchConfig config = makeCaptureConfig();
  config.captures[0].dtype = DType::F16;
  CHECK_THROWS_WITH(validateForwardArgs(config, makeCaptureArgs()),
                    StartsWith("config: capture 'slopes': dtype"));
  KernelImage image;
  image.name = "k";
  image.ptx = ".version 8.0\n.target sm_90a\n";
  image.launch = config;
  CHECK_THROWS_WITH(Kernel(image), StartsWith("image: kernel 'k': config: capture 'slopes'"));

  CHECK(isCaptureName("_x9"));
  CHECK(isCaptureName("Slopes"));
  CHECK_FALSE(isCaptureName(""));
  CHECK_FALSE(isCaptureName("9x"));
  CHECK_FALSE(isCaptureName("a.b"));
  CHECK(captureDimSpelling({Kind::Fixed, 16}) == "16");
  CHECK(captureDimSpelling({Kind::Any}) == "?");
  CHECK(captureDimSpelling({Kind::Batch}) == "batch");
  CHECK(captureDimSpelling({Kind::QHeads}) == "q_heads");
  CHECK(captureDimSpelling({Kind::KvHeads}) == "kv_heads");
  CHECK(captureDimSpelling({Kind::SeqlenQ}) == "seqlen_q");
  CHECK(captureDimSpelling({Kind::SeqlenK}) == "seqlen_k");
}

TEST_CASE("capture arguments fill the parameter block", "[runtime][captures]") {
  STATIC_REQUIRE(attn_abi::kMaxCaptures == 4);
  STATIC_REQUIRE(attn_abi::kMaxCaptureRank == 3);
  attn_abi::AttnFwdParams params;
  // Stale bytes everywhere: unused entries must be reset, not assumed zero.
  std::memset(&params, 0xab, sizeof(params));

  SECTION("every entry used, extents padded with 1") {
    AttnForwardArgs args = makeCaptureArgs();
    fillCaptureArgs(args, params);
    const long long expected[4][3] = {{8, 1, 1}, {2, 300, 1}, {2, 5, 16}, {2, 100, 1}};
    for (int index = 0; index < attn_abi::kMaxCaptures; ++index) {
      INFO("capture " << index);
      CHECK(params.captures[index].data == args.captures[index].data);
      for (int dim = 0; dim < attn_abi::kMaxCaptureRank; ++dim)
        CHECK(params.captures[index].extents[dim] == expected[index][dim]);
    }
  }
  SECTION("unused entries are null with extents 1") {
    AttnForwardArgs args = makeArgs();
    args.captures = {{fakePointer(0x61000000), DType::I32, {2, 300}}};
    fillCaptureArgs(args, params);
    CHECK(params.captures[0].data == fakePointer(0x61000000));
    CHECK(params.captures[0].extents[0] == 2);
    CHECK(params.captures[0].extents[1] == 300);
    CHECK(params.captures[0].extents[2] == 1);
    for (int index = 1; index < attn_abi::kMaxCaptures; ++index) {
      INFO("capture " << index);
      CHECK(params.captures[index].data == nullptr);
      for (long long extent : params.captures[index].extents)
        CHECK(extent == 1);
    }
  }
  SECTION("no captures") {
    fillCaptureArgs(makeArgs(), params);
    for (const attn_abi::CaptureArg &entry : params.captures) {
      CHECK(entry.data == nullptr);
      for (long long extent : entry.extents)
        CHECK(extent == 1);
    }
  }
  SECTION("more than the ABI holds") {
    AttnForwardArgs args = makeCaptureArgs();
    args.captures.push_back(args.captures[0]);
    CHECK_THROWS_WITH(fillCaptureArgs(args, params),
                      "captures: 5 captured buffers exceed the kernel ABI's limit of 4");
    args = makeCaptureArgs();
    args.captures[1].shape = {1, 2, 3, 4};
    CHECK_THROWS_WITH(fillCaptureArgs(args, params),
                      "capture 1: rank 4 exceeds the kernel ABI's limit of 3");
  }
}

TEST_CASE("Kernel::run takes captures", "[runtime][captures]") {
  // An empty handle fails before the driver is needed, whichever overload.
  Kernel empty;
  AttnForwardArgs args = makeCaptureArgs();
  CHECK_THROWS_WITH(empty.run(args.q, args.k, args.v, args.o, args.lse, args.captures),
                    StartsWith("kernel: empty handle"));
  CHECK_THROWS_WITH(empty.run(args.q, args.k, args.v, args.o, args.lse, args.captures, nullptr),
                    StartsWith("kernel: empty handle"));
  CHECK_THROWS_WITH(empty.run(args.q, args.k, args.v, args.o, args.lse, nullptr),
                    StartsWith("kernel: empty handle"));
  CHECK_THROWS_WITH(empty.run(args.q, args.k, args.v, args.o, args.lse),
                    StartsWith("kernel: empty handle"));

  // A kernel that declares captures refuses a launch without them, before
  // loading anything.
  KernelImage image;
  image.name = "captures";
  image.ptx = ".version 8.0\n.target sm_90a\n";
  image.launch = makeCaptureConfig();
  Kernel kernel(image);
  CHECK_THROWS_WITH(kernel.run(args.q, args.k, args.v, args.o, args.lse),
                    StartsWith("captures: the kernel declares 4 captured buffers"));
  std::vector<CaptureView> captures = args.captures;
  captures[3].shape = {2, 99};
  CHECK_THROWS_WITH(kernel.run(args.q, args.k, args.v, args.o, args.lse, captures),
                    StartsWith("capture 'q_doc_ids': dim 1 is 99, expected 100 (seqlen_q)"));
  // An empty problem is validated, then launches nothing.
  for (TensorView *view : {&args.q, &args.k, &args.v, &args.o})
    view->shape[0] = 0;
  args.captures[1].shape = {0, 300};
  args.captures[3].shape = {0, 100};
  CHECK_NOTHROW(kernel.run(args));
}

TEST_CASE("launch metadata round-trips captures", "[runtime][metadata][captures]") {
  SECTION("none") {
    AttnLaunchConfig config = makeConfig();
    std::string text = serializeLaunchConfig(config);
    CHECK_THAT(text, StartsWith("attn-launch-metadata 11\n"));
    CHECK_THAT(text, Contains("\ncaptures 0\n"));
    CHECK_THAT(text, !Contains("capture."));
    AttnLaunchConfig back = parseLaunchConfig(text);
    CHECK(back.captures.empty());
    CHECK(serializeLaunchConfig(back) == text);
  }
  SECTION("two") {
    AttnLaunchConfig config = makeConfig();
    config.captures = {
        {"slopes", DType::F32, {{Kind::QHeads}}},
        {"doc_ids", DType::I32, {{Kind::Batch}, {Kind::SeqlenK}}},
    };
    std::string text = serializeLaunchConfig(config);
    CHECK_THAT(text, EndsWith("\ncaptures 2\n"
                              "capture.0 slopes f32 q_heads\n"
                              "capture.1 doc_ids i32 batch,seqlen_k\n"));
    AttnLaunchConfig back = parseLaunchConfig(text);
    CHECK(sameCaptures(back.captures, config.captures));
    CHECK(back.headDim == config.headDim);
    CHECK(serializeLaunchConfig(back) == text);
  }
  SECTION("learnable") {
    AttnLaunchConfig config = makeCaptureConfig();
    config.captures[0].requiresGrad = true;
    config.captures[2].requiresGrad = true;
    std::string text = serializeLaunchConfig(config);
    CHECK_THAT(text, EndsWith("\ncaptures 4\n"
                              "capture.0 slopes f32 q_heads grad\n"
                              "capture.1 doc_ids i32 batch,seqlen_k\n"
                              "capture.2 bias f32 kv_heads,?,16 grad\n"
                              "capture.3 q_doc_ids i32 batch,seqlen_q\n"));
    AttnLaunchConfig back = parseLaunchConfig(text);
    REQUIRE(sameCaptures(back.captures, config.captures));
    for (size_t i = 0; i < back.captures.size(); ++i) {
      INFO("capture " << i);
      CHECK(back.captures[i].requiresGrad == config.captures[i].requiresGrad);
    }
    CHECK(serializeLaunchConfig(back) == text);
    CHECK_NOTHROW(validateLaunchConfig(back));
  }
  SECTION("every dim kind") {
    AttnLaunchConfig config = makeCaptureConfig();
    config.captures[0].dims = {{Kind::Fixed, 5000000000}, {Kind::SeqlenQ}, {Kind::Any}};
    std::string text = serializeLaunchConfig(config);
    CHECK_THAT(text, Contains("\ncapture.0 slopes f32 5000000000,seqlen_q,?\n"));
    CHECK_THAT(text, Contains("\ncapture.2 bias f32 kv_heads,?,16\n"));
    AttnLaunchConfig back = parseLaunchConfig(text);
    CHECK(sameCaptures(back.captures, config.captures));
    CHECK_NOTHROW(validateLaunchConfig(back));
  }
}

TEST_CASE("malformed capture metadata is reported with its line",
          "[runtime][metadata][captures]") {
  AttnLaunchConfig config = makeConfig();
  config.captures = {
      {"slopes", DType::F32, {{Kind::QHeads}}},
      {"bias", DType::F32, {{Kind::KvHeads}, {Kind::Any}, {Kind::Fixed, 16}}},
  };
  const std::string good = serializeLaunchConfig(config);
  REQUIRE_NOTHROW(parseLaunchConfig(good));
  // The 1-based lines of `captures 2` and of the two captures after it.
  const int countLine = lineOfKey(good, "captures");
  const int first = countLine + 1, second = countLine + 2;
  REQUIRE(lineOfKey(good, "capture.0") == first);
  REQUIRE(lineOfKey(good, "capture.1") == second);
  const std::string saysTwo = "(line " + std::to_string(countLine) + " says 'captures ";

  expectMetadataInvalid(withValue(good, "capture.1", "bias f32"), second,
                        "capture.1: expected 'NAME DTYPE DIM,DIM,...' and optionally 'grad', "
                        "got 'bias f32'");
  expectMetadataInvalid(withValue(good, "capture.1", "bias f32 1 2"), second,
                        "capture.1: expected 'NAME DTYPE DIM,DIM,...' and optionally 'grad', "
                        "got 'bias f32 1 2'");
  // The fourth field, if any, is `grad`, alone and spelled so.
  expectMetadataInvalid(withValue(good, "capture.1", "bias f32 kv_heads,?,16 Grad"), second,
                        "got 'bias f32 kv_heads,?,16 Grad'");
  expectMetadataInvalid(withValue(good, "capture.1", "bias f32 kv_heads,?,16 grad grad"),
                        second, "got 'bias f32 kv_heads,?,16 grad grad'");
  expectMetadataInvalid(withValue(good, "capture.1", "bias f32 kv_heads,?,16 "), second,
                        "got 'bias f32 kv_heads,?,16 '");
  expectMetadataInvalid(withValue(good, "capture.0", "slopes f32 grad"), first,
                        "capture.0: dim 0: expected a positive integer, '?', batch, "
                        "q_heads, kv_heads, seqlen_q or seqlen_k, got 'grad'");
  expectMetadataInvalid(withValue(good, "capture.0", "slopes i32 q_heads grad"), first,
                        "capture.0: only an f32 capture has a gradient, got i32");
  expectMetadataInvalid(withValue(good, "capture.0", "9lives f32 q_heads"), first,
                        "capture.0: name '9lives' is not an identifier");
  expectMetadataInvalid(withValue(good, "capture.1", "bias bf16 q_heads"), second,
                        "capture.1: dtype: expected f32 or i32, got 'bf16'");
  expectMetadataInvalid(withValue(good, "capture.1", "bias f32 kv_heads,heads"), second,
                        "capture.1: dim 1: expected a positive integer, '?', batch, "
                        "q_heads, kv_heads, seqlen_q or seqlen_k, got 'heads'");
  expectMetadataInvalid(withValue(good, "capture.1", "bias f32 kv_heads,0"), second,
                        "capture.1: dim 1: expected a positive integer");
  expectMetadataInvalid(withValue(good, "capture.1", "bias f32 -4"), second,
                        "capture.1: dim 0: expected a positive integer");
  expectMetadataInvalid(withValue(good, "capture.1", "bias f32 +4"), second,
                        "got '+4'");
  expectMetadataInvalid(withValue(good, "capture.1", "bias f32 99999999999999999999"), second,
                        "got '99999999999999999999'");
  expectMetadataInvalid(withValue(good, "capture.1", "bias f32 kv_heads,"), second,
                        "capture.1: dim 1: expected a positive integer, '?', batch, "
                        "q_heads, kv_heads, seqlen_q or seqlen_k, got ''");
  expectMetadataInvalid(withValue(good, "capture.1", "bias f32 1,2,3,4"), second,
                        "capture.1: more than 3 dims in '1,2,3,4'");
  expectMetadataInvalid(withValue(good, "captures", "5"), countLine,
                        "captures: expected 0 to 4, got 5");
  expectMetadataInvalid(withValue(good, "captures", "-1"), countLine,
                        "captures: expected 0 to 4, got -1");
  expectMetadataInvalid(withValue(good, "captures", "two"), countLine,
                        "captures: expected an integer, got 'two'");
  expectMetadataInvalid(withValue(good, "captures", "1"), second,
                        "unexpected key 'capture.1' " + saysTwo + "1')");
  expectMetadataInvalid(good + "capture.2 extra f32 ?\n", second + 1,
                        "unexpected key 'capture.2' " + saysTwo + "2')");
  expectMetadataInvalid(good + "capture.0 again f32 ?\n", second + 1,
                        "duplicate key 'capture.0'");
  CHECK_THROWS_WITH(parseLaunchConfig(withValue(good, "captures", "3")),
                    StartsWith("launch metadata: ") && Contains("missing key 'capture.2'"));
  std::string withoutCaptures = good.substr(0, good.find("captures 2\n"));
  CHECK_THROWS_WITH(parseLaunchConfig(withoutCaptures),
                    StartsWith("launch metadata: ") && Contains("missing key 'captures'"));
  // Metadata from before captures existed is refused, not misread.
  std::string version2 = "attn-launch-metadata 2" + withoutCaptures.substr(withoutCaptures.find('\n'));
  expectMetadataInvalid(version2, 1, "unsupported version 2 (this runtime reads version " + std::to_string(kLaunchMetadataVersion) + ")");
}

