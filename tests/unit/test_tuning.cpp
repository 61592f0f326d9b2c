// The tuning database and the tuner's candidate generator without a GPU or
// MLIR: shape buckets, the shape syntax, records (merge, lookup, malformed
// lines, processes writing at once, backward records apart from forward
// ones) and the legality of every candidate, forward and backward.

#include "attn/Compiler/TileConstraints.h"
#include "attn/runtime/Error.h"
#include "attn/runtime/TuningDatabase.h"

#include "TestSupport.h"

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

using namespace attn;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

using test::readFile;
using test::TempDir;
using test::writeFile;

std::string hashOf(char digit) { return std::string(64, digit); }

ShapeBucket bucket(int64_t batchHeads, int64_t seqlenQ, int64_t seqlenK) {
  ShapeBucket result;
  result.batchHeads = batchHeads;
  result.seqlenQ = seqlenQ;
  result.seqlenK = seqlenK;
  return result;
}

// Values with few significant digits: the file keeps six.
TuningRecord makeRecord(const std::string &specHash, const ShapeBucket &shapeBucket,
                        double milliseconds, const std::string &config = "block_n=64",
                        const std::string &arch = "sm_90a") {
  TuningRecord record;
  record.specHash = specHash;
  record.arch = arch;
  record.bucket = shapeBucket;
  record.config = config;
  record.milliseconds = milliseconds;
  record.tflops = 512.5;
  record.device = "NVIDIA H100 80GB HBM3";
  record.unixSeconds = 1700000000;
  return record;
}

void requireSameRecord(const TuningRecord &a, const TuningRecord &b) {
  CHECK(a.specHash == b.specHash);
  CHECK(a.arch == b.arch);
  CHECK(a.bucket == b.bucket);
  CHECK(a.config == b.config);
  CHECK(a.milliseconds == b.milliseconds);
  CHECK(a.tflops == b.tflops);
  CHECK(a.device == b.device);
  CHECK(a.unixSeconds == b.unixSeconds);
}

/// The records of `all` with key (specHash, arch, bucket).
std::vector<TuningRecord> withKey(const std::vector<TuningRecord> &all,
                                  const std::string &specHash, const std::string &arch,
                                  const ShapeBucket &shapeBucket) {
  std::vector<TuningRecord> found;
  for (const TuningRecord &r : all)
    if (r.specHash == specHash && r.arch == arch && r.bucket == shapeBucket)
      found.push_back(r);
  return found;
}


const char *kHeaderLine = "# attnc tuning database 1: spec_hash arch bucket config "
                          "milliseconds tflops device unix_seconds\n";

} // namespace

//===----------------------------------------------------------------------===//
// Shape buckets and shapes
//===----------------------------------------------------------------------===//

TEST_CASE("shape bucket: sizes round up to powers of two", "[tuning][bucket]") {
  TuningShape shape;
  shape.batch = 3;
  shape.seqlenQ = 1000;
  shape.seqlenK = 4096;
  // 3 x 5 = 15 -> 16; 1000 -> 1024; 4096 stays.
  ShapeBucket b = ShapeBucket::of(shape, 5);
  CHECK(b == bucket(16, 1024, 4096));
  CHECK(b.str() == "bh16_q1024_k4096");

  // Exact powers stay; 1 stays 1; 1025 goes to 2048.
  shape.batch = 2;
  shape.seqlenQ = 1;
  shape.seqlenK = 1025;
  CHECK(ShapeBucket::of(shape, 16).str() == "bh32_q1_k2048");
}

TEST_CASE("shape bucket: the printed form parses back", "[tuning][bucket]") {
  for (const ShapeBucket &b : {bucket(1, 1, 1), bucket(16, 1024, 4096), bucket(32, 8192, 512),
                               bucket(int64_t(1) << 20, int64_t(1) << 30, 2)}) {
    std::optional<ShapeBucket> parsed = ShapeBucket::parse(b.str());
    REQUIRE(parsed);
    CHECK(*parsed == b);
    CHECK(parsed->str() == b.str());
  }
}

TEST_CASE("shape bucket: malformed text and non powers of two are rejected",
          "[tuning][bucket]") {
  for (const char *text :
       {"", "bh", "bh16", "bh16_q1024", "bh16_k4096", "q1024_k4096_bh16", "bh16_k4096_q1024",
        "xbh16_q1024_k4096", "bh16_q1024_k4096x", "bh16_q1024_k4096 ", "bh_q1024_k4096",
        "bh16_q_k4096", "bh16_q1024_k", "bh-16_q1024_k4096", "bh+16_q1024_k4096",
        "bh0_q1024_k4096", "bh16_q0_k4096", "BH16_Q1024_K4096", "bh16_q1024_k4096_k8",
        // Not powers of two.
        "bh15_q1024_k4096", "bh16_q1000_k4096", "bh16_q1024_k4095", "bh3_q3_k3"}) {
    INFO("text: '" << text << "'");
    CHECK_FALSE(ShapeBucket::parse(text));
  }
}

TEST_CASE("shape bucket: distance sums |log2| of the size ratios", "[tuning][bucket]") {
  ShapeBucket a = bucket(16, 1024, 4096);
  CHECK(a.distance(a) == 0);
  // |log2(16/4)| + |log2(1024/2048)| + |log2(4096/4096)| = 2 + 1 + 0.
  CHECK(a.distance(bucket(4, 2048, 4096)) == 3);
  CHECK(bucket(4, 2048, 4096).distance(a) == 3);
  // 5 + 3 + 1 = 9.
  CHECK(bucket(1, 8192, 2048).distance(bucket(32, 1024, 4096)) == 9);
}

TEST_CASE("tuning shape: 'B,S' and 'B,Sq,Sk'", "[tuning][shape]") {
  TuningShape shape;
  REQUIRE_FALSE(parseTuningShape("2,8192", shape));
  CHECK(shape.batch == 2);
  CHECK(shape.seqlenQ == 8192);
  CHECK(shape.seqlenK == 8192); // Sk = Sq

  REQUIRE_FALSE(parseTuningShape("1,300,517", shape));
  CHECK(shape.batch == 1);
  CHECK(shape.seqlenQ == 300);
  CHECK(shape.seqlenK == 517);
}

TEST_CASE("tuning shape: malformed text is rejected with a message", "[tuning][shape]") {
  for (const char *text : {"", "2", "0,5", "2,0", "a,b", "1,2,3,4", "-1,5", "2,,5", ",2,5",
                           "2;8192", "2, 8192", "2,8192x"}) {
    INFO("text: '" << text << "'");
    TuningShape shape;
    std::optional<std::string> error = parseTuningShape(text, shape);
    REQUIRE(error);
    CHECK_THAT(*error, Contains("expected 'B,S' or 'B,Sq,Sk'"));
    CHECK_THAT(*error, Contains("'" + std::string(text) + "'"));
  }
}

//===----------------------------------------------------------------------===//
// The database
//===----------------------------------------------------------------------===//

TEST_CASE("tuning database: a missing file has no records", "[tuning][db]") {
  TempDir dir;
  TuningDatabase db(dir.path + "/tuning.tsv");
  size_t skipped = 7;
  CHECK(db.records(&skipped).empty());
  CHECK(skipped == 0);
  std::string error;
  CHECK_FALSE(db.lookup(hashOf('a'), "sm_90a", std::nullopt, &error));
  CHECK_FALSE(db.lookup(hashOf('a'), "sm_90a", bucket(32, 8192, 8192), &error));
  CHECK(error.empty());
  CHECK_FALSE(fs::exists(dir.path + "/tuning.tsv"));
}

TEST_CASE("tuning database: a record reads back with every field", "[tuning][db]") {
  TempDir dir;
  TuningDatabase db(dir.path + "/tuning.tsv");
  CHECK(db.path() == dir.path + "/tuning.tsv");
  TuningRecord record = makeRecord(
      "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", bucket(32, 8192, 8192),
      1.25,
      "block_m=128,block_n=64,stages=2,consumer_warpgroups=2,producer_warpgroups=1,"
      "consumer_registers=240,producer_registers=24,softmax_chains=1,persistent_blocks_per_sm=0");
  record.tflops = 601.75;
  db.record(record);

  size_t skipped = 7;
  std::vector<TuningRecord> all = db.records(&skipped);
  CHECK(skipped == 0);
  REQUIRE(all.size() == 1);
  requireSameRecord(all[0], record);

  // The file starts with its header line.
  CHECK(readFile(db.path()).rfind("# attnc tuning database 1", 0) == 0);

  std::optional<TuningRecord> found = db.lookup(record.specHash, "sm_90a", std::nullopt);
  REQUIRE(found);
  requireSameRecord(*found, record);
}

TEST_CASE("tuning database: tabs and line breaks in the device name do not break the file",
          "[tuning][db]") {
  TempDir dir;
  TuningDatabase db(dir.path + "/tuning.tsv");
  TuningRecord record = makeRecord(hashOf('a'), bucket(1, 2, 4), 2);
  record.device = "odd\tname\nwith breaks";
  db.record(record);
  size_t skipped = 7;
  std::vector<TuningRecord> all = db.records(&skipped);
  CHECK(skipped == 0);
  REQUIRE(all.size() == 1);
  CHECK(all[0].device == "odd name with breaks");
}

TEST_CASE("tuning database: of two records for one key the faster stays", "[tuning][db]") {
  TempDir dir;
  TuningDatabase db(dir.path + "/tuning.tsv");
  ShapeBucket b = bucket(32, 8192, 8192);
  TuningRecord slow = makeRecord(hashOf('a'), b, 2.5, "block_n=128");
  TuningRecord fast = makeRecord(hashOf('a'), b, 1.5, "block_n=64");

  SECTION("slower first") {
    db.record(slow);
    db.record(fast);
  }
  SECTION("faster first") {
    db.record(fast);
    db.record(slow);
  }
  std::vector<TuningRecord> all = db.records();
  REQUIRE(all.size() == 1);
  requireSameRecord(all[0], fast);

  // An equal time keeps the record already there.
  TuningRecord tie = makeRecord(hashOf('a'), b, 1.5, "block_n=96");
  db.record(tie);
  all = db.records();
  REQUIRE(all.size() == 1);
  CHECK(all[0].config == "block_n=64");
}

TEST_CASE("tuning database: a replacing record replaces a faster one", "[tuning][db]") {
  TempDir dir;
  TuningDatabase db(dir.path + "/tuning.tsv");
  ShapeBucket b = bucket(32, 1, 32768);
  db.record(makeRecord(hashOf('c'), b, 0.010, "key_splits=64"));
  db.record(makeRecord(hashOf('c'), b, 0.020, "key_splits=16"), TuningDatabase::Merge::Replace);
  std::vector<TuningRecord> all = db.records();
  REQUIRE(all.size() == 1);
  CHECK(all[0].config == "key_splits=16");
  CHECK(all[0].milliseconds == 0.020);
  // The default still keeps the faster.
  db.record(makeRecord(hashOf('c'), b, 0.030, "key_splits=8"));
  CHECK(db.records()[0].config == "key_splits=16");
}

TEST_CASE("tuning database: records of other keys are kept", "[tuning][db]") {
  TempDir dir;
  TuningDatabase db(dir.path + "/tuning.tsv");
  ShapeBucket b = bucket(32, 8192, 8192);
  std::vector<TuningRecord> records = {
      makeRecord(hashOf('a'), b, 1.0, "block_n=64"),
      makeRecord(hashOf('b'), b, 2.0, "block_n=80"),                  // other spec
      makeRecord(hashOf('a'), bucket(32, 1024, 1024), 3.0, "block_n=96"), // other bucket
      makeRecord(hashOf('a'), b, 4.0, "block_n=112", "sm_100a"),      // other arch
  };
  for (const TuningRecord &r : records)
    db.record(r);
  // A slower record for the first key replaces nothing.
  db.record(makeRecord(hashOf('a'), b, 9.0, "block_n=128"));

  std::vector<TuningRecord> all = db.records();
  REQUIRE(all.size() == records.size());
  for (const TuningRecord &r : records) {
    std::vector<TuningRecord> found = withKey(all, r.specHash, r.arch, r.bucket);
    REQUIRE(found.size() == 1);
    requireSameRecord(found[0], r);
  }
}

TEST_CASE("tuning database: lookup picks the nearest bucket, or the largest without one",
          "[tuning][db]") {
  TempDir dir;
  TuningDatabase db(dir.path + "/tuning.tsv");
  std::string spec = hashOf('a');
  db.record(makeRecord(spec, bucket(32, 1024, 1024), 1.0, "block_n=64"));
  db.record(makeRecord(spec, bucket(32, 8192, 8192), 1.0, "block_n=80"));
  db.record(makeRecord(spec, bucket(1, 512, 512), 1.0, "block_n=96"));
  // Closer buckets of another spec and another arch never count.
  db.record(makeRecord(hashOf('b'), bucket(32, 4096, 4096), 1.0, "block_n=112"));
  db.record(makeRecord(spec, bucket(32, 4096, 4096), 1.0, "block_n=128", "sm_100a"));

  auto configFor = [&](const std::optional<ShapeBucket> &b) -> std::string {
    std::string error;
    std::optional<TuningRecord> found = db.lookup(spec, "sm_90a", b, &error);
    CHECK(error.empty());
    return found ? found->config : "none";
  };
  // Exact buckets.
  CHECK(configFor(bucket(32, 1024, 1024)) == "block_n=64");
  CHECK(configFor(bucket(32, 8192, 8192)) == "block_n=80");
  CHECK(configFor(bucket(1, 512, 512)) == "block_n=96");
  // 32/4096/4096: 8192 is 0+1+1 = 2 away, 1024 is 0+2+2 = 4, 512 is 5+3+3 = 11.
  CHECK(configFor(bucket(32, 4096, 4096)) == "block_n=80");
  // 16/2048/2048: 1024 is 1+1+1 = 3 away, 8192 is 1+2+2 = 5, 512 is 4+2+2 = 8.
  CHECK(configFor(bucket(16, 2048, 2048)) == "block_n=64");
  // 1/256/256: 512 is 0+1+1 = 2 away, 1024 is 5+2+2 = 9.
  CHECK(configFor(bucket(1, 256, 256)) == "block_n=96");
  // No bucket: the largest (32 x 8192 x 8192).
  CHECK(configFor(std::nullopt) == "block_n=80");

  // The other spec and the other arch have their own records.
  std::optional<TuningRecord> other = db.lookup(hashOf('b'), "sm_90a", bucket(1, 512, 512));
  REQUIRE(other);
  CHECK(other->config == "block_n=112");
  std::optional<TuningRecord> otherArch = db.lookup(spec, "sm_100a", bucket(1, 512, 512));
  REQUIRE(otherArch);
  CHECK(otherArch->config == "block_n=128");

  // Never tuned for this arch or spec.
  CHECK_FALSE(db.lookup(spec, "sm_80", std::nullopt));
  CHECK_FALSE(db.lookup(hashOf('c'), "sm_90a", bucket(32, 8192, 8192)));
}

TEST_CASE("tuning database: backward records live apart from the forward's", "[tuning][db]") {
  // attn-tune --backward records under the backward key of the spec's
  // hash; nothing else tells the two kinds of record apart.
  const std::string spec = hashOf('a');
  const std::string backward = backwardTuningHash(spec);
  CHECK(backward.size() == 64);
  CHECK(backward.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(backward == backwardTuningHash(spec));
  CHECK(backward != spec);
  CHECK(backwardTuningHash(hashOf('b')) != backward);
  // Not an involution: a backward key is no spec hash of another record.
  CHECK(backwardTuningHash(backward) != spec);

  TempDir dir;
  TuningDatabase db(dir.path + "/tuning.tsv");
  // The same bucket and arch; the backward record is the faster.
  db.record(makeRecord(spec, bucket(32, 8192, 8192), 2.0, "block_n=160"));
  db.record(makeRecord(backward, bucket(32, 8192, 8192), 1.0, "block_n=64"));
  REQUIRE(db.records().size() == 2);

  for (const std::optional<ShapeBucket> &b :
       {std::optional<ShapeBucket>(bucket(32, 8192, 8192)),
        std::optional<ShapeBucket>(bucket(1, 512, 512)), std::optional<ShapeBucket>()}) {
    std::optional<TuningRecord> forwardPlan = db.lookup(spec, "sm_90a", b);
    std::optional<TuningRecord> backwardPlan = db.lookup(backward, "sm_90a", b);
    REQUIRE(forwardPlan);
    REQUIRE(backwardPlan);
    CHECK(forwardPlan->config == "block_n=160");
    CHECK(backwardPlan->config == "block_n=64");
  }

  // A spec tuned in one direction only has no record in the other.
  TuningDatabase onlyBackward(dir.path + "/backward.tsv");
  onlyBackward.record(makeRecord(backward, bucket(32, 8192, 8192), 1.0, "block_n=64"));
  CHECK_FALSE(onlyBackward.lookup(spec, "sm_90a", bucket(32, 8192, 8192)));
  CHECK_FALSE(onlyBackward.lookup(spec, "sm_90a", std::nullopt));
  TuningDatabase onlyForward(dir.path + "/forward.tsv");
  onlyForward.record(makeRecord(spec, bucket(32, 8192, 8192), 1.0, "block_n=160"));
  CHECK_FALSE(onlyForward.lookup(backward, "sm_90a", bucket(32, 8192, 8192)));
  CHECK_FALSE(onlyForward.lookup(backward, "sm_90a", std::nullopt));

  // A file written before backward records existed reads as before, and a
  // backward record merges into it with no change to the format.
  const std::string old = dir.path + "/old.tsv";
  writeFile(old, std::string(kHeaderLine) + spec +
                     "\tsm_90a\tbh32_q8192_k8192\tblock_n=160\t2\t500\tNVIDIA H100 80GB "
                     "HBM3\t1700000000\n");
  TuningDatabase oldDb(old);
  size_t skipped = 1;
  REQUIRE(oldDb.records(&skipped).size() == 1);
  CHECK(skipped == 0);
  CHECK_FALSE(oldDb.lookup(backward, "sm_90a", std::nullopt));
  oldDb.record(makeRecord(backward, bucket(32, 8192, 8192), 1.0, "block_n=64"));
  CHECK(oldDb.records(&skipped).size() == 2);
  CHECK(skipped == 0);
  CHECK(readFile(old).rfind(kHeaderLine, 0) == 0);
  CHECK(oldDb.lookup(spec, "sm_90a", std::nullopt)->config == "block_n=160");
}

TEST_CASE("tuning database: malformed lines are skipped, counted and dropped by the next writer",
          "[tuning][db]") {
  TempDir dir;
  std::string path = dir.path + "/tuning.tsv";
  std::string good = hashOf('a') +
                     "\tsm_90a\tbh32_q8192_k8192\tblock_n=64\t1.5\t600\tNVIDIA H100\t1700000000";
  auto line = [](std::vector<std::string> fields) {
    std::string text;
    for (size_t i = 0; i < fields.size(); ++i)
      text += (i ? "\t" : "") + fields[i];
    return text + "\n";
  };
  std::string h = hashOf('b');
  std::vector<std::string> bad = {
      "garbage without tabs\n",
      line({h, "sm_90a", "bh32_q8192_k8192", "block_n=64", "1.5", "600", "H100"}), // 7 fields
      line({h, "sm_90a", "bh32_q8192_k8192", "block_n=64", "1.5", "600", "H100", "1", "x"}),
      line({std::string(64, 'A'), "sm_90a", "bh32_q8192_k8192", "c", "1.5", "600", "H", "1"}),
      line({std::string(63, 'b'), "sm_90a", "bh32_q8192_k8192", "c", "1.5", "600", "H", "1"}),
      line({std::string(64, 'g'), "sm_90a", "bh32_q8192_k8192", "c", "1.5", "600", "H", "1"}),
      line({h, "", "bh32_q8192_k8192", "c", "1.5", "600", "H", "1"}),         // no arch
      line({h, "sm_90a", "bh30_q8192_k8192", "c", "1.5", "600", "H", "1"}),   // bucket
      line({h, "sm_90a", "bh32_q8192_k8192", "", "1.5", "600", "H", "1"}),    // no config
      line({h, "sm_90a", "bh32_q8192_k8192", "c", "0", "600", "H", "1"}),     // 0 ms
      line({h, "sm_90a", "bh32_q8192_k8192", "c", "-1", "600", "H", "1"}),    // < 0 ms
      line({h, "sm_90a", "bh32_q8192_k8192", "c", "fast", "600", "H", "1"}),  // ms
      line({h, "sm_90a", "bh32_q8192_k8192", "c", "1.5x", "600", "H", "1"}),  // ms
      line({h, "sm_90a", "bh32_q8192_k8192", "c", "inf", "600", "H", "1"}),   // ms
      line({h, "sm_90a", "bh32_q8192_k8192", "c", "1.5", "", "H", "1"}),      // tflops
      line({h, "sm_90a", "bh32_q8192_k8192", "c", "1.5", "nan", "H", "1"}),   // tflops
      line({h, "sm_90a", "bh32_q8192_k8192", "c", "1.5", "600", "H", "0"}),   // seconds
      line({h, "sm_90a", "bh32_q8192_k8192", "c", "1.5", "600", "H", "-5"}),  // seconds
      line({h, "sm_90a", "bh32_q8192_k8192", "c", "1.5", "600", "H", "1e9"}), // seconds
  };
  std::string text = kHeaderLine + good + "\n\n";
  for (const std::string &b : bad)
    text += b;
  // A truncated last line (no newline) is malformed too.
  text += hashOf('c') + "\tsm_90a\tbh32_q8";
  writeFile(path, text);

  TuningDatabase db(path);
  size_t skipped = 0;
  std::vector<TuningRecord> all = db.records(&skipped);
  CHECK(skipped == bad.size() + 1);
  REQUIRE(all.size() == 1);
  CHECK(all[0].specHash == hashOf('a'));
  CHECK(all[0].config == "block_n=64");
  CHECK(all[0].milliseconds == 1.5);
  CHECK(all[0].tflops == 600);
  CHECK(all[0].device == "NVIDIA H100");
  CHECK(all[0].unixSeconds == 1700000000);
  std::optional<TuningRecord> found = db.lookup(hashOf('a'), "sm_90a", std::nullopt);
  REQUIRE(found);
  CHECK(found->config == "block_n=64");
  CHECK_FALSE(db.lookup(hashOf('b'), "sm_90a", std::nullopt));

  // The next writer keeps the good line, adds its own and drops the rest.
  TuningRecord added = makeRecord(hashOf('d'), bucket(1, 1, 1), 3.0);
  db.record(added);
  all = db.records(&skipped);
  CHECK(skipped == 0);
  REQUIRE(all.size() == 2);
  CHECK(all[0].specHash == hashOf('a'));
  requireSameRecord(all[1], added);
  std::string rewritten = readFile(path);
  CHECK(rewritten.find("garbage") == std::string::npos);
  CHECK(rewritten.find(std::string(64, 'A')) == std::string::npos);
}

TEST_CASE("tuning database: malformed records are refused and write nothing", "[tuning][db]") {
  TempDir dir;
  std::string path = dir.path + "/tuning.tsv";
  TuningDatabase db(path);
  ShapeBucket b = bucket(32, 8192, 8192);

  TuningRecord record = makeRecord(hashOf('a'), b, 1.0);
  SECTION("spec hash too short") { record.specHash = std::string(63, 'a'); }
  SECTION("spec hash in upper case") { record.specHash = std::string(64, 'A'); }
  SECTION("spec hash not hex") { record.specHash = std::string(64, 'z'); }
  SECTION("no arch") { record.arch = ""; }
  SECTION("a tab in the arch") { record.arch = "sm_90a\tx"; }
  SECTION("no config") { record.config = ""; }
  SECTION("a tab in the config") { record.config = "block_n=64\tstages=2"; }
  SECTION("bucket not of powers of two") { record.bucket = bucket(3, 8192, 8192); }
  SECTION("no time") { record.milliseconds = 0; }
  SECTION("no timestamp") { record.unixSeconds = 0; }

  REQUIRE_THROWS_AS(db.record(record), Error);
  REQUIRE_THROWS_WITH(db.record(record), Contains(path) && Contains("malformed record"));
  CHECK_FALSE(fs::exists(path));
  CHECK(db.records().empty());
}

TEST_CASE("tuning database: recording creates the missing directories", "[tuning][db]") {
  TempDir dir;
  std::string path = dir.path + "/a/b/c/tuning.tsv";
  TuningDatabase db(path);
  CHECK(db.records().empty());
  TuningRecord record = makeRecord(hashOf('a'), bucket(32, 8192, 8192), 1.0);
  db.record(record);
  REQUIRE(fs::is_regular_file(path));
  std::vector<TuningRecord> all = TuningDatabase(path).records();
  REQUIRE(all.size() == 1);
  requireSameRecord(all[0], record);
}

TEST_CASE("tuning database: an unreadable file reads as an error, lookup says why",
          "[tuning][db]") {
  TempDir dir;
  // A directory where the file should be.
  std::string path = dir.path + "/tuning.tsv";
  fs::create_directories(path);
  TuningDatabase db(path);
  CHECK_THROWS_WITH(db.records(), Contains(path));
  std::string error;
  CHECK_FALSE(db.lookup(hashOf('a'), "sm_90a", std::nullopt, &error));
  CHECK_THAT(error, Contains(path));
  // Without `error` lookup does not throw either.
  CHECK_NOTHROW(db.lookup(hashOf('a'), "sm_90a", std::nullopt));
  CHECK_THROWS_AS(db.record(makeRecord(hashOf('a'), bucket(1, 1, 1), 1.0)), Error);
}

TEST_CASE("tuning database: two tuners writing at once lose nothing", "[tuning][db][process]") {
  TempDir dir;
  std::string path = dir.path + "/tuning.tsv";
  constexpr int kChildren = 8, kRecordsEach = 20;
  // Child c, record j: spec hash by child, bucket by record.
  auto specOf = [](int child) { return std::string(63, 'e') + char('0' + child); };
  auto bucketOf = [](int j) { return bucket(int64_t(1) << j, 1024, 2048); };

  std::vector<std::function<int()>> bodies;
  for (int c = 0; c < kChildren; ++c)
    bodies.push_back([&, c] {
      TuningDatabase db(path);
      for (int j = 0; j < kRecordsEach; ++j) {
        TuningRecord r = makeRecord(specOf(c), bucketOf(j), 1.0 + j, "block_n=64");
        r.device = "child " + std::to_string(c);
        db.record(r);
      }
      return 0;
    });
  std::vector<int> codes = test::runInChildren(bodies);
  CHECK(codes == std::vector<int>(kChildren, 0));

  size_t skipped = 7;
  std::vector<TuningRecord> all = TuningDatabase(path).records(&skipped);
  CHECK(skipped == 0);
  REQUIRE(all.size() == size_t(kChildren * kRecordsEach));
  std::set<std::pair<std::string, std::string>> keys;
  for (const TuningRecord &r : all)
    keys.insert({r.specHash, r.bucket.str()});
  CHECK(keys.size() == all.size());
  for (int c = 0; c < kChildren; ++c)
    for (int j = 0; j < kRecordsEach; ++j) {
      std::vector<TuningRecord> found = withKey(all, specOf(c), "sm_90a", bucketOf(j));
      REQUIRE(found.size() == 1);
      CHECK(found[0].milliseconds == 1.0 + j);
      CHECK(found[0].device == "child " + std::to_string(c));
    }
  // No temporary files are left behind.
  for (const auto &item : fs::directory_iterator(dir.path)) {
    std::string name = item.path().filename().string();
    INFO(name);
    CHECK((name == "tuning.tsv" || name == "tuning.tsv.lock"));
  }
}

//===----------------------------------------------------------------------===//
// The candidate generator
//===----------------------------------------------------------------------===//

TEST_CASE("tile candidates: legal, distinct, round-trip as overrides, include the heuristic",
          "[tuning][candidates]") {
  int headDim = GENERATE(64, 128, 256);
  INFO("head_dim " << headDim);
  TileProblem problem{headDim, /*elementBytes=*/2, /*evenTiles=*/true};
  std::vector<TileConfig> candidates = enumerateTileCandidates(problem);
  REQUIRE_FALSE(candidates.empty());

  TileConfig heuristic = defaultTileConfig(problem);
  bool hasHeuristic = false;
  std::set<std::string> seen;
  for (const TileConfig &config : candidates) {
    std::string text = formatTileOverride(config);
    INFO("candidate " << text);
    CHECK_FALSE(checkTileLegality(problem, config));
    CHECK(estimateSharedMemoryBytes(problem, config) <= kMaxSharedMemoryPerBlock);
    CHECK(estimateConsumerRegisters(problem, config) <= config.consumerRegisters);
    CHECK(seen.insert(text).second);
    hasHeuristic = hasHeuristic || config == heuristic;

    // What the tuner records is what attn-tile rebuilds.
    TileOverride parsed;
    REQUIRE_FALSE(parseTileOverride(text, parsed));
    CHECK(applyTileOverride(problem, heuristic, parsed) == config);
    CHECK(applyTileOverride(problem, TileConfig{}, parsed) == config);
  }
  CHECK(hasHeuristic);
  // The heuristic for a long key length (128 x 160 at head dim 128) is a
  // candidate of the default space too.
  TileProblem longKeys = problem;
  longKeys.keyLength = 8192;
  TileConfig longKeysHeuristic = defaultTileConfig(longKeys);
  CHECK(std::find(candidates.begin(), candidates.end(), longKeysHeuristic) != candidates.end());
  if (headDim == 128)
    CHECK(longKeysHeuristic.blockN == 160);
  // So is the one for short causal keys (persistent, 128 x 128 with three
  // stages and two chains at head dim 64).
  TileProblem shortCausal = problem;
  shortCausal.evenTiles = false;
  shortCausal.causalOnly = true;
  shortCausal.keyLength = 512;
  TileConfig shortCausalHeuristic = defaultTileConfig(shortCausal);
  CHECK(std::find(candidates.begin(), candidates.end(), shortCausalHeuristic) != candidates.end());
  if (headDim == 64)
    CHECK((shortCausalHeuristic.persistentBlocksPerSm == 1 && shortCausalHeuristic.blockM == 128 &&
           shortCausalHeuristic.stages == 3 && shortCausalHeuristic.softmaxChains == 2));
  // And those for causal kernels at 1024 keys (128 x 128, three stages at
  // head dim 64) and at 8192 (128 x 160, one chain at head dim 128).
  auto causalHeuristic = [&](int64_t keyLength) {
    TileProblem causal = shortCausal;
    causal.keyLength = keyLength;
    TileConfig config = defaultTileConfig(causal);
    CHECK(std::find(candidates.begin(), candidates.end(), config) != candidates.end());
    return config;
  };
  TileConfig mediumCausal = causalHeuristic(1024);
  if (headDim == 64)
    CHECK((mediumCausal.blockM == 128 && mediumCausal.consumerWarpgroups == 2 &&
           mediumCausal.stages == 3 && mediumCausal.persistentBlocksPerSm == 1));
  TileConfig longCausal = causalHeuristic(8192);
  if (headDim == 128)
    CHECK((longCausal.blockN == 160 && longCausal.softmaxChains == 1 &&
           longCausal.persistentBlocksPerSm == 1));
  // Staged score_mod diagonals: the same tiles with two softmax chains.
  TileProblem relativePosition = shortCausal;
  relativePosition.keyLength = 8192;
  relativePosition.hasScoreMod = true;
  relativePosition.scoreDiagonals = 1;
  TileConfig relativeConfig = defaultTileConfig(relativePosition);
  const std::vector<TileConfig> relativeCandidates = enumerateTileCandidates(relativePosition);
  CHECK(std::find(relativeCandidates.begin(), relativeCandidates.end(), relativeConfig) !=
        relativeCandidates.end());
  if (headDim == 128)
    CHECK((relativeConfig.blockN == 160 && relativeConfig.softmaxChains == 2));
  // Diagonals that compute a transcendental (T5's buckets): 144-key tiles
  // with four chains, among the candidates.
  TileProblem buckets = relativePosition;
  buckets.transcendentalScoreDiagonals = true;
  const TileConfig bucketConfig = defaultTileConfig(buckets);
  CHECK(std::find(relativeCandidates.begin(), relativeCandidates.end(), bucketConfig) !=
        relativeCandidates.end());
  if (headDim == 128)
    CHECK((bucketConfig.blockN == 144 && bucketConfig.softmaxChains == 4));
  // Their producer warps take 40 registers beside two consumers that fit in
  // 232 (head dim 128), 32 beside three (head dim 64); head dim 256's
  // consumers need their 240. The plain causal kernel keeps 24.
  const std::pair<int, int> relativeRegisters{relativeConfig.consumerRegisters,
                                              relativeConfig.producerRegisters};
  CHECK(relativeRegisters == (headDim == 64    ? std::pair{160, 32}
                              : headDim == 128 ? std::pair{232, 40}
                                               : std::pair{240, 24}));
  CHECK(longCausal.producerRegisters == 24);
  // From kMaskedPersistentMaxKeys a block per work tile; a sliding window
  // is planned like the causal mask there and below, except at head dim
  // 256, where it keeps the hardware's dispatch.
  CHECK(causalHeuristic(kMaskedPersistentMaxKeys).persistentBlocksPerSm == 0);
  TileProblem window = problem;
  window.evenTiles = false;
  window.slidingWindowOnly = true;
  window.keyLength = 8192;
  CHECK(defaultTileConfig(window).persistentBlocksPerSm == (headDim == 256 ? 0 : 1));
  window.keyLength = kMaskedPersistentMaxKeys;
  CHECK(defaultTileConfig(window).persistentBlocksPerSm == 0);
  // A mask_mod: persistent when classified under the causal mask, or up to
  // kShortMaskModMaxKeys keys; else the hardware's dispatch.
  TileProblem maskMod = problem;
  maskMod.evenTiles = false;
  maskMod.hasMaskMod = true;
  maskMod.keyLength = 8192;
  CHECK(defaultTileConfig(maskMod).persistentBlocksPerSm == 0);
  maskMod.causalMask = true;
  CHECK(defaultTileConfig(maskMod).persistentBlocksPerSm == 1);
  maskMod.keyLength = kMaskedPersistentMaxKeys;
  CHECK(defaultTileConfig(maskMod).persistentBlocksPerSm == 0);
  maskMod.keyLength = 8192;
  maskMod.storedKeyBits = true;
  CHECK(defaultTileConfig(maskMod).persistentBlocksPerSm == 0);
  maskMod.keyLength = kShortMaskModMaxKeys;
  CHECK(defaultTileConfig(maskMod).persistentBlocksPerSm == 1);
  CHECK_FALSE(checkTileLegality(maskMod, defaultTileConfig(maskMod)));
  // A score_mod takes four chains at head dims 128 and 256, one at 64.
  TileProblem scored = problem;
  scored.hasScoreMod = true;
  CHECK(defaultTileConfig(scored).softmaxChains == (headDim == 64 ? 1 : 4));

  // And that of a softmax on a fixed base (soft-capping in bf16: 192 x 64,
  // three consumers, four stages, two chains at head dim 128), among the
  // candidates of its own problem.
  TileProblem fixedBase = problem;
  fixedBase.hasScoreMod = true;
  fixedBase.fixedSoftmaxBase = true;
  std::vector<TileConfig> fixedBaseCandidates = enumerateTileCandidates(fixedBase);
  TileConfig fixedBaseHeuristic = defaultTileConfig(fixedBase);
  CHECK(std::find(fixedBaseCandidates.begin(), fixedBaseCandidates.end(), fixedBaseHeuristic) !=
        fixedBaseCandidates.end());
  if (headDim == 128)
    CHECK((fixedBaseHeuristic.blockM == 192 && fixedBaseHeuristic.blockN == 64 &&
           fixedBaseHeuristic.consumerWarpgroups == 3 && fixedBaseHeuristic.stages == 4 &&
           fixedBaseHeuristic.softmaxChains == 2));
  // With a sliding window the same tiles on the hardware's dispatch and one
  // chain (the plan set's window_softcap_d128_8k), where a plain window at
  // that length takes the persistent grid.
  TileProblem windowedFixedBase = fixedBase;
  windowedFixedBase.slidingWindowOnly = true;
  windowedFixedBase.keyLength = 8192;
  const TileConfig windowedHeuristic = defaultTileConfig(windowedFixedBase);
  CHECK_FALSE(checkTileLegality(windowedFixedBase, windowedHeuristic));
  if (headDim == 128)
    CHECK((windowedHeuristic.blockM == 192 && windowedHeuristic.blockN == 64 &&
           windowedHeuristic.stages == 4 && windowedHeuristic.softmaxChains == 1 &&
           windowedHeuristic.persistentBlocksPerSm == 0));

  // The grid policy does not change legality: every plan comes in both.
  for (const TileConfig &config : candidates) {
    TileConfig twin = config;
    twin.persistentBlocksPerSm = 1 - config.persistentBlocksPerSm;
    CHECK(seen.count(formatTileOverride(twin)) == 1);
  }
}

TEST_CASE("tile heuristic: plans with stored key bits stay legal", "[tuning][candidates]") {
  // A mask_mod the compiler cannot classify stages a tile's key words per
  // stage; the heuristic's plans leave room for them at every head dim, key
  // length and score range, and at head dim 256 take 64-key tiles (80-key
  // ones pass the limit by 2 KB).
  int headDim = GENERATE(64, 128, 256);
  INFO("head_dim " << headDim);
  for (int64_t keyLength : {int64_t(0), int64_t(1024), int64_t(8192), int64_t(32768)})
    for (bool fixedBase : {false, true}) {
      TileProblem problem{headDim, /*elementBytes=*/2};
      problem.storedKeyBits = true;
      problem.keyLength = keyLength;
      problem.fixedSoftmaxBase = fixedBase;
      problem.hasScoreMod = fixedBase;
      const TileConfig config = defaultTileConfig(problem);
      INFO("key length " << keyLength << ", fixed base " << fixedBase << ": "
                         << formatTileOverride(config));
      CHECK_FALSE(checkTileLegality(problem, config));
      CHECK(keyBitsStageBytes(problem, config) == config.blockM * 4 * (config.blockN <= 128 ? 4 : 8));
      if (headDim == 256)
        CHECK(config.blockN == 64);
    }
  TileProblem without{256, 2};
  TileConfig wide = defaultTileConfig(without);
  REQUIRE(wide.blockN == 80);
  without.storedKeyBits = true;
  CHECK(checkTileLegality(without, wide));
}

TEST_CASE("tile candidates: every legal point of the space and nothing else",
          "[tuning][candidates]") {
  int headDim = GENERATE(64, 128, 256);
  TileProblem problem{headDim, 2, true};
  TileSearchSpace space;
  size_t legal = 0, total = 0;
  for (int consumers : space.consumerWarpgroups)
    for (int blockN : space.blockN)
      for (int stages : space.stages)
        for (int chains : space.softmaxChains)
          for (int grid : space.persistentBlocksPerSm) {
            TileConfig config;
            config.consumerWarpgroups = consumers;
            config.blockM = kWgmmaM * consumers;
            config.blockN = blockN;
            config.stages = stages;
            config.consumerRegisters = defaultConsumerRegisters(consumers);
            config.softmaxChains = chains;
            config.persistentBlocksPerSm = grid;
            ++total;
            legal += !checkTileLegality(problem, config);
          }
  INFO("head_dim " << headDim << ": " << legal << " of " << total);
  CHECK(enumerateTileCandidates(problem, space).size() == legal);
  // The limits cut the space: some points are illegal.
  CHECK(legal < total);
}

TEST_CASE("tile candidates: a space of illegal values has none", "[tuning][candidates]") {
  TileProblem problem{128, 2, true};
  TileSearchSpace space;
  space.blockN = {8};
  CHECK(enumerateTileCandidates(problem, space).empty());

  space = TileSearchSpace();
  space.stages = {0, 9};
  CHECK(enumerateTileCandidates(problem, space).empty());

  space = TileSearchSpace();
  space.softmaxChains = {3};
  CHECK(enumerateTileCandidates(problem, space).empty());

  space = TileSearchSpace();
  space.consumerWarpgroups = {4};
  CHECK(enumerateTileCandidates(problem, space).empty());

  // Head dim 256, 3 consumers at 160 registers: 256/2 + 32 already needs 160
  // before any key tile, so no block_n fits.
  space = TileSearchSpace();
  space.consumerWarpgroups = {3};
  CHECK(enumerateTileCandidates(TileProblem{256, 2, true}, space).empty());
}

TEST_CASE("backward tile candidates: every legal point of the backward's space, the default "
          "plan among them",
          "[tuning][candidates][backward]") {
  const int headDim = GENERATE(64, 128, 256);
  INFO("head_dim " << headDim);
  const TileProblem problem{headDim, 2};
  const std::vector<TileConfig> candidates = enumerateBackwardTileCandidates(problem);
  const TileConfig heuristic = backwardTileConfig(problem);
  std::set<std::string> seen;
  for (const TileConfig &config : candidates) {
    const std::string text = formatTileOverride(config);
    INFO("candidate " << text);
    CHECK_FALSE(checkBackwardTileLegality(problem, config));
    CHECK(estimateBackwardConsumerRegisters(problem, config) <= config.consumerRegisters);
    // Past head dim 128 two consumers share a tile of 64 keys.
    CHECK(config.blockN == (headDim > 128 ? kWgmmaM : kWgmmaM * config.consumerWarpgroups));
    CHECK(config.softmaxChains == 1);
    CHECK(config.persistentBlocksPerSm == 0);
    CHECK(seen.insert(text).second);
    // What attn-tune --backward records is what backwardTileConfigFor
    // rebuilds (the override over the default plan).
    TileOverride parsed;
    REQUIRE_FALSE(parseTileOverride(text, parsed));
    CHECK(applyLinearTileOverride(heuristic, parsed) == config);
  }
  CHECK(std::find(candidates.begin(), candidates.end(), heuristic) != candidates.end());

  // The space by brute force: consumers 1 or 2, block_n 64 per consumer
  // (64 in all past head dim 128), block_m 64 or 64 per consumer (or 80
  // with two, dQ transposed), 1 to 4 stages, 240 registers (and 256 with
  // one consumer; the producer then takes 40 past head dim 128); the
  // candidates are its legal points.
  size_t legal = 0, total = 0;
  for (int consumers : {1, 2})
    for (int blockM : {64, 80, 128})
      for (int stages : {1, 2, 3, 4})
        for (int registers : {240, 256}) {
          if ((consumers == 1 && blockM != 64) || (consumers == 2 && registers != 240))
            continue;
          TileConfig config = heuristic;
          config.consumerWarpgroups = consumers;
          config.blockN = headDim > 128 ? 64 : 64 * consumers;
          config.blockM = blockM;
          config.stages = stages;
          config.consumerRegisters = registers;
          config.producerRegisters = consumers == 1 && headDim > 128 ? 40 : 24;
          ++total;
          legal += !checkBackwardTileLegality(problem, config);
        }
  CHECK(total == 20);
  CHECK(candidates.size() == legal);
  // Pinned. Head dim 64: 10 (two consumers split its 64 dQ columns into
  // 32-column pieces, too narrow, and with 128-row tiles fit 2 stages);
  // head dim 128: 9 (one consumer needs 248 registers, two with 128-row
  // tiles 280, 64-row tiles fit 3 stages and 80-row tiles 2); head dim
  // 256: 2, one stage
  // each (K, V, Q and dO tiles of 256 columns leave a second stage no
  // shared memory): two consumers splitting the columns at 64 rows, and
  // one walking two passes of 128 columns at 256 registers.
  CHECK(candidates.size() == (headDim == 64 ? 10u : headDim == 128 ? 9u : 2u));
}

TEST_CASE("backward tile: 80 query rows a step, dQ transposed, without a mask at head dim 128",
          "[tuning][backward]") {
  TileProblem unmasked{128, 2};
  unmasked.evenTiles = true;
  CHECK(backwardTileConfig(unmasked).blockM == 80);
  CHECK_FALSE(checkBackwardTileLegality(unmasked, backwardTileConfig(unmasked)));
  // A mask, or a score_mod: 64 rows (their per-pair code was planned for
  // whole 64-column groups).
  CHECK(backwardTileConfig(TileProblem{128, 2}).blockM == 64);
  TileProblem modified = unmasked;
  modified.hasScoreMod = true;
  CHECK(backwardTileConfig(modified).blockM == 64);
  TileConfig transposed = backwardTileConfig(unmasked);
  CHECK_FALSE(checkBackwardTileLegality(TileProblem{128, 2}, transposed)); // causal may take it
  for (bool maskMod : {false, true}) {
    TileProblem regions{128, 2};
    regions.hasMaskMod = maskMod;
    regions.hasScoreMod = !maskMod;
    const std::optional<std::string> why = checkBackwardTileLegality(regions, transposed);
    REQUIRE(why);
    CHECK_THAT(*why, Catch::Matchers::Contains("without mask_mod or score_mod"));
  }
  // Other head dims, one consumer, rows not a multiple of 16, or 96 rows
  // (past the consumers' registers) cannot.
  TileProblem d64{64, 2};
  transposed.blockN = 128;
  CHECK_THAT(checkBackwardTileLegality(d64, transposed).value_or(""),
             Catch::Matchers::Contains("two consumer warpgroups at head dim 128"));
  TileConfig one = transposed;
  one.consumerWarpgroups = 1;
  one.blockN = 64;
  CHECK(checkBackwardTileLegality(unmasked, one));
  TileConfig odd = transposed;
  odd.blockM = 72;
  CHECK_THAT(checkBackwardTileLegality(unmasked, odd).value_or(""),
             Catch::Matchers::Contains("a multiple of 16"));
  TileConfig wide = transposed;
  wide.blockM = 96;
  CHECK_THAT(checkBackwardTileLegality(unmasked, wide).value_or(""),
             Catch::Matchers::Contains("register budget"));
}

TEST_CASE("backward tile candidates: none without a backward kernel", "[tuning][candidates][backward]") {
  const TileProblem problem{96, 2};
  CHECK(checkBackwardTileLegality(problem, backwardTileConfig(problem)));
  CHECK(enumerateBackwardTileCandidates(problem).empty());
}

TEST_CASE("an override of one register count leaves the other what the launch holds",
          "[tuning][candidates]") {
  // A kernel with staged score_mod diagonals at head dim 128: 232 / 40.
  TileProblem problem{128, /*elementBytes=*/2};
  problem.hasScoreMod = true;
  problem.scoreDiagonals = 1;
  const TileConfig heuristic = defaultTileConfig(problem);
  REQUIRE((heuristic.consumerRegisters == 232 && heuristic.producerRegisters == 40));
  auto withOverride = [&](const std::string &text) {
    TileOverride override;
    REQUIRE_FALSE(parseTileOverride(text, override));
    return applyTileOverride(problem, heuristic, override);
  };
  // 240 for the consumers leaves the producers 24 of the 168 x 384.
  TileConfig consumers = withOverride("consumer_registers=240");
  CHECK((consumers.consumerRegisters == 240 && consumers.producerRegisters == 24));
  CHECK_FALSE(checkTileLegality(problem, consumers));
  // 56 for the producers leaves the consumers 224.
  TileConfig producers = withOverride("producer_registers=56");
  CHECK((producers.consumerRegisters == 224 && producers.producerRegisters == 56));
  CHECK_FALSE(checkTileLegality(problem, producers));
  // Three consumers from two: 160 each, and the producers the 32 left.
  TileConfig three = withOverride("consumer_warpgroups=3,block_n=64");
  CHECK((three.consumerRegisters == 160 && three.producerRegisters == 32));
  // Both given: as given.
  TileConfig both = withOverride("consumer_registers=224,producer_registers=24");
  CHECK((both.consumerRegisters == 224 && both.producerRegisters == 24));
}
