//===- TuningDatabase.cpp - Measured best tile plans ----------------------===//

#include "attn/runtime/TuningDatabase.h"

#include "attn/runtime/DiskCache.h"
#include "attn/runtime/Error.h"
#include "attn/runtime/Hash.h"

#include "FileUtil.h"
#include "attn_params.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace attn {

namespace {
constexpr const char *kHeader = "# attnc tuning database 1: spec_hash arch bucket config "
                                "milliseconds tflops device unix_seconds";
constexpr size_t kMaxFileBytes = size_t(64) << 20;

int64_t roundUpToPowerOfTwo(int64_t value) {
  int64_t power = 1;
  while (power < value && power < (int64_t(1) << 40))
    power *= 2;
  return power;
}

bool parsePositive(const std::string &text, int64_t &value) {
  if (text.empty() || text.size() > 15 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  value = std::stoll(text);
  return value > 0;
}

bool isPowerOfTwo(int64_t value) { return value > 0 && (value & (value - 1)) == 0; }

/// Tabs and line breaks would break the format; device names have none.
std::string sanitizeField(const std::string &text) {
  std::string out = text;
  for (char &c : out)
    if (c == '\t' || c == '\n' || c == '\r')
      c = ' ';
  return out;
}

std::vector<std::string> splitTabs(const std::string &line) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (true) {
    size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos)
      return fields;
    start = tab + 1;
  }
}

bool isHexDigest(const std::string &text) {
  return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::optional<TuningRecord> parseRecord(const std::string &line) {
  std::vector<std::string> fields = splitTabs(line);
  if (fields.size() != 8)
    return std::nullopt;
  TuningRecord record;
  record.specHash = fields[0];
  record.arch = fields[1];
  std::optional<ShapeBucket> bucket = ShapeBucket::parse(fields[2]);
  if (!isHexDigest(record.specHash) || record.arch.empty() || !bucket || fields[3].empty())
    return std::nullopt;
  record.bucket = *bucket;
  record.config = fields[3];
  char *end = nullptr;
  record.milliseconds = std::strtod(fields[4].c_str(), &end);
  if (end == fields[4].c_str() || *end || !(record.milliseconds > 0) ||
      !std::isfinite(record.milliseconds))
    return std::nullopt;
  record.tflops = std::strtod(fields[5].c_str(), &end);
  if (end == fields[5].c_str() || *end || !std::isfinite(record.tflops))
    return std::nullopt;
  record.device = fields[6];
  int64_t seconds = 0;
  if (!parsePositive(fields[7], seconds))
    return std::nullopt;
  record.unixSeconds = seconds;
  return record;
}

/// The times with 6 significant digits ({:.6g}, printf's %.6g).
std::string formatRecord(const TuningRecord &record) {
  return fmt::format("{}\t{}\t{}\t{}\t{:.6g}\t{:.6g}\t{}\t{}", record.specHash, record.arch,
                     record.bucket.str(), record.config, record.milliseconds, record.tflops,
                     sanitizeField(record.device), record.unixSeconds);
}

bool sameKey(const TuningRecord &a, const TuningRecord &b) {
  return a.specHash == b.specHash && a.arch == b.arch && a.bucket == b.bucket;
}

/// The file's text, empty when it does not exist; throws for other errors.
std::string readDatabase(const std::string &path) {
  FileHandle file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.fd < 0) {
    if (errno == ENOENT)
      return {};
    throw Error("tuning database '" + path + "': cannot open: " + describeErrno(errno));
  }
  std::string text;
  if (!readPrefix(file.fd, kMaxFileBytes, text))
    throw Error("tuning database '" + path + "': cannot read: " + describeErrno(errno));
  return text;
}

std::vector<TuningRecord> parseDatabase(const std::string &text, size_t *skipped) {
  std::vector<TuningRecord> records;
  size_t bad = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#')
      continue;
    if (std::optional<TuningRecord> record = parseRecord(line))
      records.push_back(*record);
    else
      ++bad;
  }
  if (skipped)
    *skipped = bad;
  return records;
}
} // namespace

ShapeBucket ShapeBucket::of(const TuningShape &shape, int64_t qHeads) {
  ShapeBucket bucket;
  bucket.batchHeads = roundUpToPowerOfTwo(std::max<int64_t>(1, shape.batch * qHeads));
  bucket.seqlenQ = roundUpToPowerOfTwo(std::max<int64_t>(1, shape.seqlenQ));
  bucket.seqlenK = roundUpToPowerOfTwo(std::max<int64_t>(1, shape.seqlenK));
  return bucket;
}

std::string ShapeBucket::str() const {
  return fmt::format("bh{}_q{}_k{}", batchHeads, seqlenQ, seqlenK);
}

std::optional<ShapeBucket> ShapeBucket::parse(const std::string &text) {
  size_t q = text.find("_q"), k = text.find("_k");
  if (text.rfind("bh", 0) != 0 || q == std::string::npos || k == std::string::npos || k < q)
    return std::nullopt;
  ShapeBucket bucket;
  if (!parsePositive(text.substr(2, q - 2), bucket.batchHeads) ||
      !parsePositive(text.substr(q + 2, k - q - 2), bucket.seqlenQ) ||
      !parsePositive(text.substr(k + 2), bucket.seqlenK))
    return std::nullopt;
  if (!isPowerOfTwo(bucket.batchHeads) || !isPowerOfTwo(bucket.seqlenQ) ||
      !isPowerOfTwo(bucket.seqlenK))
    return std::nullopt;
  return bucket;
}

double ShapeBucket::distance(const ShapeBucket &other) const {
  auto logRatio = [](int64_t a, int64_t b) { return std::fabs(std::log2(double(a) / double(b))); };
  return logRatio(batchHeads, other.batchHeads) + logRatio(seqlenQ, other.seqlenQ) +
         logRatio(seqlenK, other.seqlenK);
}

std::optional<std::string> parseTuningShape(const std::string &text, TuningShape &shape) {
  std::vector<int64_t> values;
  if (!text.empty() && text.back() == ',') // getline drops an empty last item
    return "expected 'B,S' or 'B,Sq,Sk' with positive integers, got '" + text + "'";
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    int64_t value = 0;
    if (!parsePositive(item, value))
      return "expected 'B,S' or 'B,Sq,Sk' with positive integers, got '" + text + "'";
    values.push_back(value);
  }
  if (values.size() != 2 && values.size() != 3)
    return "expected 'B,S' or 'B,Sq,Sk' with positive integers, got '" + text + "'";
  shape.batch = values[0];
  shape.seqlenQ = values[1];
  shape.seqlenK = values.size() == 3 ? values[2] : values[1];
  return std::nullopt;
}

std::string formatTuningShape(const TuningShape &shape) {
  return fmt::format("{},{},{}", shape.batch, shape.seqlenQ, shape.seqlenK);
}

std::string backwardTuningHash(const std::string &specHash) {
  Sha256 hash;
  hash.updateField("attnc-tuning-key backward 1");
  hash.updateField(specHash);
  return Sha256::toHex(hash.finish());
}

std::string shortQueryTuningHash(const std::string &specHash) {
  Sha256 hash;
  hash.updateField("attnc-tuning-key short-query 1");
  hash.updateField(specHash);
  return Sha256::toHex(hash.finish());
}

std::string formatKeySplitsConfig(int keySplits) {
  return fmt::format("key_splits={}", keySplits);
}

std::optional<int> parseKeySplitsConfig(const std::string &config) {
  constexpr std::string_view kPrefix = "key_splits=";
  int64_t splits = 0;
  if (config.rfind(kPrefix, 0) != 0)
    return std::nullopt;
  const std::string digits = config.substr(kPrefix.size());
  if (digits == "0")
    return 0;
  if (!parsePositive(digits, splits) || splits > attn_abi::kMaxKeySplits)
    return std::nullopt;
  return static_cast<int>(splits);
}

TuningDatabase::TuningDatabase(std::string path) : filePath(std::move(path)) {}

std::string TuningDatabase::defaultPath() {
  const char *explicitPath = std::getenv("ATTNC_TUNING_DB");
  if (explicitPath && *explicitPath)
    return explicitPath;
  std::string directory = DiskCacheOptions::fromEnvironment().directory;
  return directory.empty() ? std::string() : directory + "/tuning.tsv";
}

std::vector<TuningRecord> TuningDatabase::records(size_t *skipped) const {
  return parseDatabase(readDatabase(filePath), skipped);
}

void TuningDatabase::record(const TuningRecord &record, Merge merge) {
  if (!parseRecord(formatRecord(record)))
    throw Error("tuning database '" + filePath + "': malformed record for spec '" +
                record.specHash + "' (" + record.arch + ", " + record.bucket.str() + ")");
  size_t slash = filePath.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    std::string error = makeDirectories(filePath.substr(0, slash));
    if (!error.empty())
      throw Error("tuning database '" + filePath + "': " + error);
  }
  FileLock lock(filePath + ".lock", /*timeoutSeconds=*/60);
  if (!lock.held())
    throw Error("tuning database '" + filePath + "': cannot lock '" + filePath + ".lock'");

  std::vector<TuningRecord> merged = parseDatabase(readDatabase(filePath), nullptr);
  auto same = std::find_if(merged.begin(), merged.end(),
                           [&](const TuningRecord &r) { return sameKey(r, record); });
  if (same == merged.end())
    merged.push_back(record);
  else if (merge == Merge::Replace || record.milliseconds < same->milliseconds)
    *same = record;

  std::string text = std::string(kHeader) + "\n";
  for (const TuningRecord &r : merged)
    text += formatRecord(r) + "\n";
  static std::atomic<uint64_t> counter{0};
  std::string temp = fmt::format("{}.tmp-{}-{}", filePath, ::getpid(), counter++);
  std::string error = writeFileAtomically(filePath, temp, text);
  if (!error.empty())
    throw Error("tuning database '" + filePath + "': " + error);
}

std::vector<TuningRecord> TuningDatabase::recordsOf(const std::string &specHash,
                                                   const std::string &arch,
                                                   std::string *error) const {
  std::vector<TuningRecord> all;
  try {
    all = records();
  } catch (const Error &failure) {
    if (error)
      *error = failure.what();
    return {};
  }
  all.erase(std::remove_if(all.begin(), all.end(),
                           [&](const TuningRecord &record) {
                             return record.specHash != specHash || record.arch != arch;
                           }),
            all.end());
  return all;
}

std::optional<TuningRecord> TuningDatabase::lookup(const std::string &specHash,
                                                   const std::string &arch,
                                                   const std::optional<ShapeBucket> &bucket,
                                                   std::string *error) const {
  std::optional<TuningRecord> best;
  double bestScore = std::numeric_limits<double>::infinity();
  for (const TuningRecord &record : recordsOf(specHash, arch, error)) {
    // Nearest bucket; without one, the largest (most work) wins.
    double score = bucket ? record.bucket.distance(*bucket)
                          : -std::log2(double(record.bucket.batchHeads)) -
                                std::log2(double(record.bucket.seqlenQ)) -
                                std::log2(double(record.bucket.seqlenK));
    if (score < bestScore) {
      bestScore = score;
      best = record;
    }
  }
  return best;
}

} // namespace attn
