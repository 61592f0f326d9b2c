// Cache semantics without a GPU or MLIR: the hashes against published
// vectors, the launch metadata format, the disk cache (hit, miss, corruption,
// eviction, unusable directory, processes racing on one key) and the
// in-process single-flight cache.

#include "attn/runtime/DiskCache.h"
#include "attn/runtime/Error.h"
#include "attn/runtime/Hash.h"
#include "attn/runtime/LaunchMetadata.h"
#include "attn/runtime/SingleFlightCache.h"

#include "TestSupport.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <vector>

using namespace attn;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
namespace fs = std::filesystem;

namespace {

using test::readFile;
using test::TempDir;
using test::writeFile;

/// Options whose warnings fail the test (a usable directory must not warn).
DiskCacheOptions optionsFor(const std::string &directory,
                            uint64_t maxBytes = DiskCacheOptions::kDefaultMaxBytes) {
  DiskCacheOptions options;
  options.directory = directory;
  options.maxBytes = maxBytes;
  options.warn = [](const std::string &message) { FAIL("unexpected warning: " << message); };
  return options;
}

/// An entry like the compiler's, with binary payloads (NULs, newlines).
CacheEntry makeEntry(const std::string &tag, size_t payloadBytes = 1000) {
  CacheEntry entry;
  entry.set("info", "name " + tag + "\n");
  entry.set("launch", "attn-launch-metadata 1\nkernel " + tag + "\n");
  std::string binary(payloadBytes, '\0');
  for (size_t i = 0; i < binary.size(); ++i)
    binary[i] = static_cast<char>((i * 131 + tag.size()) & 0xff);
  entry.set("cubin", binary);
  entry.set("empty", "");
  return entry;
}

std::string key(char digit) { return std::string(64, digit); }

std::vector<std::string> filesIn(const std::string &directory) {
  std::vector<std::string> names;
  for (const auto &item : fs::directory_iterator(directory))
    if (item.is_regular_file())
      names.push_back(item.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void waitATick() { std::this_thread::sleep_for(std::chrono::milliseconds(3)); }


/// Sets (or unsets, for null) environment variables for one scope.
class ScopedEnvironment {
public:
  void set(const char *name, const char *value) {
    if (!saved.count(name)) {
      const char *old = std::getenv(name);
      saved[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnvironment() {
    for (const auto &[name, value] : saved) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }

private:
  std::map<std::string, std::optional<std::string>> saved;
};

} // namespace

//===----------------------------------------------------------------------===//
// Hashes
//===----------------------------------------------------------------------===//

TEST_CASE("SHA-256 matches the FIPS 180-4 examples", "[cache][hash]") {
  CHECK(Sha256::toHex(Sha256::hash("abc")) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(Sha256::toHex(Sha256::hash("")) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Sha256::toHex(Sha256::hash("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(Sha256::toHex(Sha256::hash(std::string(1000000, 'a'))) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");

  SECTION("streaming in uneven pieces gives the one-shot digest") {
    std::string message(1000, '\0');
    for (size_t i = 0; i < message.size(); ++i)
      message[i] = static_cast<char>(i * 7 + 3);
    Sha256 streamed;
    for (size_t offset = 0, piece = 1; offset < message.size(); offset += piece, piece += 13)
      streamed.update(message.data() + offset, std::min(piece, message.size() - offset));
    CHECK(streamed.finish() == Sha256::hash(message));
  }
  SECTION("fields are length-prefixed") {
    Sha256 a, b;
    a.updateField("ab").updateField("c");
    b.updateField("a").updateField("bc");
    CHECK(a.finish() != b.finish());
  }
}

TEST_CASE("XXH64 matches the reference vectors", "[cache][hash]") {
  const char *sentence = "Nobody inspects the spammish repetition";
  unsigned char sequence[256];
  for (int i = 0; i < 256; ++i)
    sequence[i] = static_cast<unsigned char>(i);
  CHECK(xxh64("", 0) == 0xEF46DB3751D8E999ull);
  CHECK(xxh64("a", 1) == 0xD24EC4F1A98C6E5Bull);
  CHECK(xxh64("abc", 3) == 0x44BC2CF5AD770999ull);
  CHECK(xxh64(sentence, std::strlen(sentence)) == 0xFBCEA83C8A378BF1ull);
  CHECK(xxh64(sequence, sizeof(sequence)) == 0x1FACBE8406CD904Bull);
  CHECK(xxh64(sentence, std::strlen(sentence), 0x9E3779B1) == 0x56DB22DD5B051147ull);
  CHECK(xxh64(sequence, sizeof(sequence), 0x9E3779B1) == 0xD48195F45908996Cull);
}

//===----------------------------------------------------------------------===//
// Launch metadata
//===----------------------------------------------------------------------===//

TEST_CASE("launch metadata round-trips every field exactly", "[cache][metadata]") {
  AttnLaunchConfig config;
  config.headDim = 256;
  config.qHeads = 12;
  config.kvHeads = 3;
  config.dtype = DType::F16;
  config.scale = static_cast<float>(1.0 / std::sqrt(96.0));
  config.blockM = 64;
  config.blockN = 176;
  config.threadsPerBlock = 256;
  config.sharedMemoryBytes = 123457;
  config.persistentBlocksPerSm = 3;
  config.evenWorkTiles = 1;
  config.automaticWorkOrder = 1;
  config.kernelName = "my_kernel";
  config.tunedKeySplits = {{ShapeBucket{256, 1, 32768}, 4}, {ShapeBucket{32, 16, 8192}, 0}};

  std::string text = serializeLaunchConfig(config);
  CHECK_THAT(text, StartsWith("attn-launch-metadata 11\n"));
  CHECK_THAT(text, Contains("\ntuned_key_splits 2\ntuned_key_splits.0 bh256_q1_k32768 4\n"
                            "tuned_key_splits.1 bh32_q16_k8192 0\n"));
  AttnLaunchConfig back = parseLaunchConfig(text);
  CHECK(back.headDim == 256);
  CHECK(back.qHeads == 12);
  CHECK(back.kvHeads == 3);
  CHECK(back.dtype == DType::F16);
  CHECK(std::memcmp(&back.scale, &config.scale, sizeof(float)) == 0);
  CHECK(back.blockM == 64);
  CHECK(back.blockN == 176);
  CHECK(back.threadsPerBlock == 256);
  CHECK(back.sharedMemoryBytes == 123457);
  CHECK(back.persistentBlocksPerSm == 3);
  CHECK(back.evenWorkTiles == 1);
  CHECK(back.automaticWorkOrder == 1);
  CHECK(back.kernelName == "my_kernel");
  CHECK(back.tunedKeySplits == config.tunedKeySplits);
}

TEST_CASE("malformed launch metadata is reported with its line", "[cache][metadata]") {
  std::string good = serializeLaunchConfig(AttnLaunchConfig());
  auto without = [&](const std::string &key) {
    size_t start = good.find("\n" + key + " ") + 1;
    return good.substr(0, start) + good.substr(good.find('\n', start) + 1);
  };
  CHECK_THROWS_WITH(parseLaunchConfig(without("scale")),
                    StartsWith("launch metadata: ") && Contains("missing key 'scale'"));
  CHECK_THROWS_WITH(parseLaunchConfig(good + "extra 1\n"), Contains("unknown key 'extra'"));
  // The appended line is the one after the last.
  const auto lines = std::count(good.begin(), good.end(), '\n');
  CHECK_THROWS_WITH(parseLaunchConfig(good + "block_m 64\n"),
                    Contains("line " + std::to_string(lines + 1) + ":") &&
                        Contains("duplicate key 'block_m'"));
  CHECK_THROWS_WITH(parseLaunchConfig("attn-launch-metadata 2\n"),
                    Contains("line 1") && Contains("unsupported version 2"));
  CHECK_THROWS_WITH(parseLaunchConfig(""), Contains("empty"));
  std::string badInt = good;
  badInt.replace(badInt.find("head_dim 0"), 10, "head_dim x");
  CHECK_THROWS_WITH(parseLaunchConfig(badInt), Contains("head_dim: expected an integer"));
  std::string badDtype = good;
  badDtype.replace(badDtype.find("dtype bf16"), 10, "dtype fp8");
  CHECK_THROWS_WITH(parseLaunchConfig(badDtype), Contains("dtype: expected bf16, f16 or f32"));

  // The measured split counts: each line a bucket of powers of two and a
  // count within the limit, each bucket once, as many lines as announced.
  auto withSplits = [&](const std::string &lines) {
    std::string text = good;
    text.replace(text.find("tuned_key_splits 0\n"), 19, lines);
    return text;
  };
  CHECK(parseLaunchConfig(withSplits("tuned_key_splits 1\ntuned_key_splits.0 bh8_q4_k1024 3\n"))
            .tunedKeySplits == std::vector<TunedKeySplits>{{ShapeBucket{8, 4, 1024}, 3}});
  CHECK_THROWS_WITH(
      parseLaunchConfig(withSplits("tuned_key_splits 1\ntuned_key_splits.0 bh8_q3_k1024 3\n")),
      Contains("tuned_key_splits.0: expected 'bhN_qN_kN SPLITS'"));
  CHECK_THROWS_WITH(
      parseLaunchConfig(withSplits("tuned_key_splits 1\ntuned_key_splits.0 bh8_q4_k1024 1025\n")),
      Contains("tuned_key_splits.0: expected 0 to 1024 splits, got 1025"));
  CHECK_THROWS_WITH(parseLaunchConfig(withSplits("tuned_key_splits 2\ntuned_key_splits.0 bh8_q4_k1024 "
                                                 "3\ntuned_key_splits.1 bh8_q4_k1024 5\n")),
                    Contains("a second entry for bh8_q4_k1024"));
  CHECK_THROWS_WITH(parseLaunchConfig(withSplits("tuned_key_splits 1\n")),
                    Contains("missing key 'tuned_key_splits.0'"));
  CHECK_THROWS_WITH(
      parseLaunchConfig(withSplits("tuned_key_splits 0\ntuned_key_splits.0 bh8_q4_k1024 3\n")),
      Contains("unexpected key 'tuned_key_splits.0'"));
}

//===----------------------------------------------------------------------===//
// Disk cache
//===----------------------------------------------------------------------===//

TEST_CASE("disk cache: a miss, then a hit with the stored bytes", "[cache][disk]") {
  TempDir dir;
  DiskCache cache(optionsFor(dir.path + "/nested/cache"));
  CHECK_FALSE(cache.load(key('a')));
  CacheEntry entry = makeEntry("first");
  REQUIRE(cache.store(key('a'), entry));
  CHECK(cache.usable());

  std::optional<CacheEntry> hit = cache.load(key('a'));
  REQUIRE(hit);
  CHECK(hit->sections == entry.sections);
  CHECK_FALSE(cache.load(key('b')));
  // One entry file and nothing else (no temporary file left behind).
  CHECK(filesIn(cache.directory()) == std::vector<std::string>{key('a') + ".attnc"});

  // A second store replaces the entry.
  CacheEntry other = makeEntry("second", 3000);
  REQUIRE(cache.store(key('a'), other));
  CHECK(cache.load(key('a'))->sections == other.sections);
}

TEST_CASE("disk cache: damaged entries read as misses and are rebuilt", "[cache][disk]") {
  TempDir dir;
  DiskCache cache(optionsFor(dir.path));
  CacheEntry entry = makeEntry("victim", 5000);
  REQUIRE(cache.store(key('c'), entry));
  std::string path = cache.entryPath(key('c'));
  std::string bytes = readFile(path);
  REQUIRE(bytes.size() > 5000);

  std::string damagedPath = path;
  SECTION("a flipped payload byte") {
    bytes[bytes.size() / 2] ^= 0x01;
    writeFile(path, bytes);
  }
  SECTION("a flipped header byte") {
    bytes[3] ^= 0x20;
    writeFile(path, bytes);
  }
  SECTION("a flipped checksum digit") {
    bytes[bytes.size() - 2] = bytes[bytes.size() - 2] == '0' ? '1' : '0';
    writeFile(path, bytes);
  }
  SECTION("truncated by one byte") {
    writeFile(path, bytes.substr(0, bytes.size() - 1));
  }
  SECTION("truncated to half") {
    writeFile(path, bytes.substr(0, bytes.size() / 2));
  }
  SECTION("a byte appended") {
    writeFile(path, bytes + "x");
  }
  SECTION("an empty file") {
    writeFile(path, "");
  }
  SECTION("a valid entry under another key's name") {
    damagedPath = cache.entryPath(key('d'));
    writeFile(damagedPath, bytes);
    CHECK_FALSE(cache.load(key('d')));
    CHECK_FALSE(fs::exists(damagedPath));
    CHECK(cache.load(key('c'))); // The original is intact.
    return;
  }

  CHECK_FALSE(cache.load(key('c')));
  CHECK_FALSE(fs::exists(damagedPath)); // Removed, so it is rebuilt.

  int builds = 0;
  bool built = false;
  CacheEntry rebuilt = cache.loadOrBuild(
      key('c'),
      [&] {
        ++builds;
        return entry;
      },
      &built);
  CHECK(built);
  CHECK(builds == 1);
  CHECK(rebuilt.sections == entry.sections);
  CHECK(cache.load(key('c'))->sections == entry.sections);
}

TEST_CASE("disk cache: loadOrBuild builds once; a failed build stores nothing",
          "[cache][disk]") {
  TempDir dir;
  DiskCache cache(optionsFor(dir.path));
  int builds = 0;
  auto build = [&] {
    ++builds;
    return makeEntry("built");
  };
  bool built = false;
  cache.loadOrBuild(key('e'), build, &built);
  CHECK(built);
  CacheEntry again = cache.loadOrBuild(key('e'), build, &built);
  CHECK_FALSE(built);
  CHECK(builds == 1);
  CHECK(again.sections == makeEntry("built").sections);

  CHECK_THROWS_WITH(cache.loadOrBuild(key('f'), []() -> CacheEntry { throw Error("nvrtc broke"); }),
                    "nvrtc broke");
  CHECK_FALSE(cache.load(key('f')));
  cache.loadOrBuild(key('f'), build, &built);
  CHECK(built);
  CHECK(cache.load(key('f')));
}

TEST_CASE("disk cache: least recently used entries go beyond the size limit",
          "[cache][disk]") {
  TempDir dir;
  uint64_t entryBytes = 0;
  {
    DiskCache probe(optionsFor(dir.path + "/probe"));
    REQUIRE(probe.store(key('0'), makeEntry("a", 10000)));
    entryBytes = probe.stats().bytes;
  }
  // Room for two entries of this size, not three.
  DiskCache cache(optionsFor(dir.path + "/lru", entryBytes * 5 / 2));
  auto present = [&](char k) { return fs::exists(cache.entryPath(key(k))); };

  REQUIRE(cache.store(key('a'), makeEntry("a", 10000)));
  waitATick();
  REQUIRE(cache.store(key('b'), makeEntry("b", 10000)));
  waitATick();
  REQUIRE(cache.load(key('a'))); // a is now more recent than b.
  waitATick();
  REQUIRE(cache.store(key('c'), makeEntry("c", 10000)));
  CHECK(present('a'));
  CHECK_FALSE(present('b'));
  CHECK(present('c'));
  CHECK(cache.stats().entries == 2);
  CHECK(cache.stats().bytes <= cache.maxBytes());

  waitATick();
  REQUIRE(cache.store(key('d'), makeEntry("d", 10000)));
  CHECK_FALSE(present('a'));
  CHECK(present('c'));
  CHECK(present('d'));

  SECTION("an entry above the limit is kept, the others go") {
    DiskCache tiny(optionsFor(cache.directory(), 100));
    REQUIRE(tiny.store(key('e'), makeEntry("e", 10000)));
    CHECK(filesIn(cache.directory()) == std::vector<std::string>{key('e') + ".attnc"});
  }
}

TEST_CASE("disk cache: an unusable directory warns once and keeps nothing",
          "[cache][disk]") {
  TempDir dir;
  // A path below a regular file cannot be created, even by root (unlike a
  // chmod-ed directory).
  writeFile(dir.path + "/file", "not a directory");
  std::string unusable = dir.path + "/file/cache";

  SECTION("through the warning hook") {
    std::vector<std::string> warnings;
    DiskCacheOptions options;
    options.directory = unusable;
    options.warn = [&](const std::string &message) { warnings.push_back(message); };
    DiskCache cache(options);
    CHECK_FALSE(cache.usable());
    CHECK_FALSE(cache.store(key('a'), makeEntry("a")));
    CHECK_FALSE(cache.load(key('a')));
    int builds = 0;
    auto build = [&] {
      ++builds;
      return makeEntry("b");
    };
    bool built = false;
    cache.loadOrBuild(key('b'), build, &built);
    CHECK(built);
    cache.loadOrBuild(key('b'), build, &built);
    CHECK(builds == 2); // Memory only: the caller's memory cache must hold it.
    CHECK(cache.stats().usable == false);
    CHECK(cache.list().empty());
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(warnings[0], Contains(unusable) && Contains("memory only"));
  }
  SECTION("on stderr by default") {
    std::string logPath = dir.path + "/stderr.log";
    int log = ::open(logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(log >= 0);
    std::fflush(stderr);
    int saved = ::dup(2);
    ::dup2(log, 2);
    {
      DiskCacheOptions options;
      options.directory = unusable;
      DiskCache cache(options);
      cache.store(key('a'), makeEntry("a"));
      cache.load(key('a'));
      cache.store(key('b'), makeEntry("b"));
    }
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    ::close(log);
    std::string text = readFile(logPath);
    CHECK(std::count(text.begin(), text.end(), '\n') == 1);
    CHECK_THAT(text, StartsWith("attnc: warning: cache directory '" + unusable + "'"));
  }
}

TEST_CASE("disk cache: configuration from the environment", "[cache][disk]") {
  ScopedEnvironment env;
  env.set("ATTNC_CACHE_DIR", "/explicit/dir");
  env.set("XDG_CACHE_HOME", "/xdg");
  env.set("HOME", "/home/user");
  env.set("ATTNC_CACHE_MAX_BYTES", nullptr);
  CHECK(DiskCacheOptions::fromEnvironment().directory == "/explicit/dir");
  CHECK(DiskCacheOptions::fromEnvironment().maxBytes == DiskCacheOptions::kDefaultMaxBytes);
  env.set("ATTNC_CACHE_DIR", nullptr);
  CHECK(DiskCacheOptions::fromEnvironment().directory == "/xdg/attnc");
  env.set("XDG_CACHE_HOME", "relative/ignored");
  CHECK(DiskCacheOptions::fromEnvironment().directory == "/home/user/.cache/attnc");
  env.set("XDG_CACHE_HOME", nullptr);
  env.set("HOME", nullptr);
  CHECK(DiskCacheOptions::fromEnvironment().directory.empty());

  env.set("ATTNC_CACHE_MAX_BYTES", "512M");
  CHECK(DiskCacheOptions::fromEnvironment().maxBytes == (uint64_t(512) << 20));
  env.set("ATTNC_CACHE_MAX_BYTES", "12345");
  CHECK(DiskCacheOptions::fromEnvironment().maxBytes == 12345);
  env.set("ATTNC_CACHE_MAX_BYTES", "lots");
  CHECK_THROWS_WITH(DiskCacheOptions::fromEnvironment(),
                    StartsWith("ATTNC_CACHE_MAX_BYTES: ") && Contains("'lots'"));
  CHECK(parseByteSize("3k", "x") == 3072);
  CHECK(parseByteSize("2G", "x") == (uint64_t(2) << 30));
  CHECK_THROWS_WITH(parseByteSize("99999999999999999G", "limit"), StartsWith("limit: "));
  CHECK_THROWS_WITH(parseByteSize("", "limit"), StartsWith("limit: "));
  CHECK_THROWS_WITH(parseByteSize("-1", "limit"), StartsWith("limit: "));
}

TEST_CASE("disk cache: keys must name files in the directory", "[cache][disk]") {
  TempDir dir;
  DiskCache cache(optionsFor(dir.path));
  for (std::string bad : {std::string(), std::string("../escape"), std::string("UPPER"),
                          std::string(129, 'a'), std::string("a/b")}) {
    CHECK_THROWS_WITH(cache.load(bad), StartsWith("key: "));
    CHECK_THROWS_WITH(cache.store(bad, makeEntry("x")), StartsWith("key: "));
  }
  CHECK_NOTHROW(cache.store(std::string(128, 'z'), makeEntry("x")));
  CacheEntry badSection;
  badSection.set("has space", "x");
  CHECK_THROWS_WITH(cache.store(key('a'), badSection), Contains("section name"));
}

TEST_CASE("disk cache: list, stats and clear", "[cache][disk]") {
  TempDir dir;
  DiskCache cache(optionsFor(dir.path));
  for (char k : {'1', '2', '3'}) {
    REQUIRE(cache.store(key(k), makeEntry(std::string("kernel") + k, 100 * (k - '0'))));
    waitATick();
  }
  REQUIRE(cache.load(key('1'))); // Most recent now.
  writeFile(dir.path + "/notes.txt", "not ours");

  std::vector<CacheEntryInfo> entries = cache.list();
  REQUIRE(entries.size() == 3);
  CHECK(entries[0].key == key('1'));
  CHECK(entries[1].key == key('3'));
  CHECK(entries[2].key == key('2'));
  CHECK(entries[0].info == "name kernel1\n");
  uint64_t total = 0;
  for (const CacheEntryInfo &info : entries) {
    CHECK(info.bytes == fs::file_size(cache.entryPath(info.key)));
    total += info.bytes;
  }
  DiskCacheStats stats = cache.stats();
  CHECK(stats.usable);
  CHECK(stats.entries == 3);
  CHECK(stats.bytes == total);
  CHECK(stats.directory == dir.path);

  // Temporary files: one left by a writer that died long ago, one in use.
  writeFile(dir.path + "/.tmp-stale", "x");
  writeFile(dir.path + "/.tmp-fresh", "x");
  auto old = fs::file_time_type::clock::now() - std::chrono::hours(2);
  fs::last_write_time(dir.path + "/.tmp-stale", old);

  CHECK(cache.clear() == 3);
  CHECK(cache.list().empty());
  CHECK(cache.stats().entries == 0);
  CHECK(filesIn(dir.path) == std::vector<std::string>{".tmp-fresh", "notes.txt"});
  CHECK(filesIn(dir.path + "/locks").empty());
}

TEST_CASE("disk cache: two processes building one key build it once and agree",
          "[cache][disk][process]") {
  TempDir dir;
  std::string counter = dir.path + "/builds.log";
  CacheEntry expected = makeEntry("shared", 200000);
  auto child = [&]() -> int {
    DiskCacheOptions options;
    options.directory = dir.path + "/cache";
    DiskCache cache(options);
    bool built = false;
    CacheEntry entry = cache.loadOrBuild(
        key('s'),
        [&] {
          int fd = ::open(counter.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
          (void)!::write(fd, "build\n", 6);
          ::close(fd);
          // Long enough that the other process asks while this one builds.
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          return expected;
        },
        &built);
    return entry.sections == expected.sections ? 0 : 1;
  };
  std::vector<int> codes = test::runInChildren({child, child});
  CHECK(codes == std::vector<int>{0, 0});
  std::string log = readFile(counter);
  CHECK(std::count(log.begin(), log.end(), '\n') == 1);
  CHECK(filesIn(dir.path + "/cache") == std::vector<std::string>{key('s') + ".attnc"});
  DiskCache cache(optionsFor(dir.path + "/cache"));
  std::optional<CacheEntry> entry = cache.load(key('s'));
  REQUIRE(entry);
  CHECK(entry->sections == expected.sections);
}

TEST_CASE("disk cache: two processes of eight threads hammering four keys build each "
          "key once and all agree",
          "[cache][disk][process]") {
  TempDir dir;
  std::string counter = dir.path + "/builds.log";
  std::string directory = dir.path + "/cache";
  auto process = [&]() -> int {
    DiskCacheOptions options;
    options.directory = directory;
    DiskCache cache(options);
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < 24; ++i) {
          char k = char('a' + (t + i) % 4);
          std::string tag(1, k);
          CacheEntry entry = cache.loadOrBuild(key(k), [&] {
            int fd = ::open(counter.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
            std::string line = tag + "\n";
            (void)!::write(fd, line.data(), line.size());
            ::close(fd);
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            return makeEntry(tag, 50000);
          });
          if (entry.sections != makeEntry(tag, 50000).sections)
            ++wrong;
        }
      });
    for (std::thread &thread : threads)
      thread.join();
    return wrong.load();
  };
  std::vector<int> codes = test::runInChildren({process, process});
  CHECK(codes == std::vector<int>{0, 0});
  std::string log = readFile(counter);
  std::string sorted = log;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == "\n\n\n\nabcd"); // one build per key, across 16 threads
  CHECK(filesIn(directory).size() == 4);
}

TEST_CASE("disk cache: racing stores of one key leave one valid entry; readers "
          "never see a partial one",
          "[cache][disk][process]") {
  TempDir dir;
  std::string directory = dir.path + "/cache";
  std::string done = dir.path + "/writers-done";
  CacheEntry first = makeEntry("first", 300000), second = makeEntry("second", 200000);
  auto writer = [&](const CacheEntry &entry) {
    return [&, entry]() -> int {
      DiskCacheOptions options;
      options.directory = directory;
      DiskCache cache(options);
      int failed = 0;
      for (int i = 0; i < 40; ++i)
        failed += cache.store(key('r'), entry) ? 0 : 1;
      int fd = ::open(done.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      (void)!::write(fd, "x", 1);
      ::close(fd);
      return failed ? 1 : 0;
    };
  };
  // Reads for as long as the writers write.
  auto reader = [&]() -> int {
    DiskCacheOptions options;
    options.directory = directory;
    DiskCache cache(options);
    bool seen = false;
    int hits = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (readFile(done).size() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::optional<CacheEntry> entry = cache.load(key('r'));
      if (!entry) {
        // Once an entry exists, renames replace it whole: never a miss.
        if (seen)
          return 2;
        continue;
      }
      seen = true;
      ++hits;
      if (entry->sections != first.sections && entry->sections != second.sections)
        return 3;
    }
    return hits >= 5 ? 0 : 4;
  };
  std::vector<int> codes = test::runInChildren({writer(first), writer(second), reader});
  CHECK(codes == std::vector<int>{0, 0, 0});
  CHECK(filesIn(directory) == std::vector<std::string>{key('r') + ".attnc"});
  DiskCache cache(optionsFor(directory));
  std::optional<CacheEntry> entry = cache.load(key('r'));
  REQUIRE(entry);
  CHECK((entry->sections == first.sections || entry->sections == second.sections));
}

TEST_CASE("disk cache: writers killed with SIGKILL at random points never leave an "
          "entry that loads partial",
          "[cache][disk][process][faults]") {
  TempDir dir;
  std::string directory = dir.path + "/cache";
  // Every entry a writer may store: a load must return one of these whole.
  std::vector<CacheEntry> possible;
  for (int tag = 0; tag < 3; ++tag)
    for (int size = 0; size < 4; ++size)
      possible.push_back(makeEntry("w" + std::to_string(tag), 150000 + 70000 * size));
  std::mt19937 random(2026);
  const int rounds = 120;
  int roundsWithDebris = 0, hits = 0;
  for (int round = 0; round < rounds; ++round) {
    // The writer says when it starts storing, so that the random delay
    // below counts from there and not from a fork a loaded machine may
    // run late.
    int started[2];
    REQUIRE(::pipe(started) == 0);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(started[0]);
      DiskCacheOptions options;
      options.directory = directory;
      options.warn = [](const std::string &) { ::_exit(3); };
      DiskCache cache(options);
      const char ready = 1;
      if (::write(started[1], &ready, 1) != 1)
        ::_exit(4);
      for (unsigned i = round;; ++i)
        cache.store(key(char('a' + i % 4)), possible[(i * 7) % possible.size()]);
    }
    ::close(started[1]);
    char ready = 0;
    REQUIRE(::read(started[0], &ready, 1) == 1);
    ::close(started[0]);
    // Somewhere inside a store: the first ones create the directory, later
    // ones write, fsync, rename and evict.
    std::this_thread::sleep_for(std::chrono::microseconds(200 + random() % 6000));
    REQUIRE(::kill(pid, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFSIGNALED(status)); // killed, not exited on a warning
    if (!fs::exists(directory))
      continue;
    for (const std::string &name : filesIn(directory))
      if (name.rfind(".tmp-", 0) == 0) {
        ++roundsWithDebris; // a write cut short: the case under test
        break;
      }
    DiskCache cache(optionsFor(directory));
    for (char k = 'a'; k < 'e'; ++k) {
      std::optional<CacheEntry> entry = cache.load(key(k));
      if (!entry)
        continue;
      ++hits;
      bool whole = std::any_of(possible.begin(), possible.end(), [&](const CacheEntry &e) {
        return e.sections == entry->sections;
      });
      INFO("round " << round << ", key " << k);
      REQUIRE(whole);
    }
  }
  INFO(roundsWithDebris << " rounds left a cut-short temporary file, " << hits << " hits");
  CHECK(roundsWithDebris > 0);
  CHECK(hits > rounds);
}

TEST_CASE("disk cache: a full disk turns the cache off with one warning and the "
          "caller keeps working",
          "[cache][disk][process][faults]") {
  TempDir dir;
  std::string directory = dir.path + "/cache";
  // A file-size limit below one entry: writes fail with EFBIG as on a full
  // file system, in a child so the limit does not reach the test runner.
  std::vector<int> codes = test::runInChildren({[&]() -> int {
    struct rlimit limit {64 * 1024, 64 * 1024};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0)
      return 10;
    ::signal(SIGXFSZ, SIG_IGN);
    int warnings = 0;
    std::string message;
    DiskCacheOptions options;
    options.directory = directory;
    options.warn = [&](const std::string &text) {
      ++warnings;
      message = text;
    };
    DiskCache cache(options);
    if (cache.store(key('f'), makeEntry("big", 300000)))
      return 11; // the write cannot have succeeded
    if (warnings != 1 || message.find("not usable") == std::string::npos)
      return 12;
    // Off from now on: no second warning, nothing stored, builds still run.
    bool built = false;
    CacheEntry entry = cache.loadOrBuild(key('g'), [] { return makeEntry("small", 10); }, &built);
    if (!built || entry.sections != makeEntry("small", 10).sections)
      return 13;
    if (cache.store(key('h'), makeEntry("small", 10)) || warnings != 1)
      return 14;
    return 0;
  }});
  CHECK(codes == std::vector<int>{0});
  // Nothing partial was left where a reader would find it.
  if (fs::exists(directory))
    for (const std::string &name : filesIn(directory))
      CHECK(name.find(".attnc") == std::string::npos);
}

//===----------------------------------------------------------------------===//
// Single-flight memory cache
//===----------------------------------------------------------------------===//

namespace {
/// Runs `body(i)` on `count` threads released together.
void onThreads(int count, const std::function<void(int)> &body) {
  std::mutex mutex;
  std::condition_variable released;
  bool go = false;
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i)
    threads.emplace_back([&, i] {
      {
        std::unique_lock<std::mutex> lock(mutex);
        released.wait(lock, [&] { return go; });
      }
      body(i);
    });
  {
    std::lock_guard<std::mutex> lock(mutex);
    go = true;
  }
  released.notify_all();
  for (std::thread &thread : threads)
    thread.join();
}
} // namespace

TEST_CASE("single-flight cache: concurrent requests for a key compute it once",
          "[cache][memory]") {
  SingleFlightCache<std::string, std::shared_ptr<int>> cache;
  std::atomic<int> computations{0}, creators{0};
  std::vector<std::shared_ptr<int>> results(8);
  onThreads(8, [&](int i) {
    bool created = false;
    results[i] = cache.getOrCreate(
        "kernel",
        [&] {
          ++computations;
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          return std::make_shared<int>(42);
        },
        &created);
    if (created)
      ++creators;
  });
  CHECK(computations == 1);
  CHECK(creators == 1);
  for (const auto &result : results)
    CHECK(result == results[0]); // The very same object.
  CHECK(*results[0] == 42);

  // Another key is computed on its own; a present key is found.
  CHECK(*cache.getOrCreate("other", [] { return std::make_shared<int>(7); }) == 7);
  CHECK(computations == 1);
  CHECK(cache.find("kernel").value() == results[0]);
  CHECK_FALSE(cache.find("missing"));
  CHECK(cache.size() == 2);
  cache.clear();
  CHECK_FALSE(cache.find("kernel"));
}

TEST_CASE("single-flight cache: a failure reaches every waiter and is forgotten",
          "[cache][memory]") {
  SingleFlightCache<int, int> cache;
  std::atomic<int> computations{0}, failures{0};
  onThreads(4, [&](int) {
    try {
      cache.getOrCreate(1, [&]() -> int {
        ++computations;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        throw Error("compile failed");
      });
    } catch (const Error &error) {
      if (std::string(error.what()) == "compile failed")
        ++failures;
    }
  });
  CHECK(failures == 4);
  CHECK(computations >= 1);
  CHECK_FALSE(cache.find(1));
  CHECK(cache.size() == 0);
  bool created = false;
  CHECK(cache.getOrCreate(1, [] { return 5; }, &created) == 5);
  CHECK(created);
}
