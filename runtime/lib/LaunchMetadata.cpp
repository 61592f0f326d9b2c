//===- LaunchMetadata.cpp - Text form of a kernel's launch config ---------===//

#include "attn/runtime/LaunchMetadata.h"

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <vector>

namespace attn {

namespace {
constexpr std::string_view kHeader = "attn-launch-metadata";

// The integer fields, in the order they are written.
struct IntField {
  const char *key;
  int AttnLaunchConfig::*member;
};
constexpr IntField kIntFields[] = {
    {"head_dim", &AttnLaunchConfig::headDim},
    {"q_heads", &AttnLaunchConfig::qHeads},
    {"kv_heads", &AttnLaunchConfig::kvHeads},
    {"block_m", &AttnLaunchConfig::blockM},
    {"block_n", &AttnLaunchConfig::blockN},
    {"threads", &AttnLaunchConfig::threadsPerBlock},
    {"shared_memory_bytes", &AttnLaunchConfig::sharedMemoryBytes},
    {"persistent_blocks_per_sm", &AttnLaunchConfig::persistentBlocksPerSm},
    {"even_work_tiles", &AttnLaunchConfig::evenWorkTiles},
    {"automatic_work_order", &AttnLaunchConfig::automaticWorkOrder},
    {"paged_forward", &AttnLaunchConfig::pagedForward},
    {"linear_family", &AttnLaunchConfig::linearFamily},
    {"backward", &AttnLaunchConfig::backward},
    {"step_list", &AttnLaunchConfig::stepList},
    {"causal", &AttnLaunchConfig::causal},
    {"normalize", &AttnLaunchConfig::normalize},
    {"gated", &AttnLaunchConfig::gated},
};

[[noreturn]] void fail(int line, const std::string &what) {
  throw Error(fmt::format("launch metadata: line {}: {}", line, what));
}

int parseInt(const std::string &value, int line, const std::string &key) {
  errno = 0;
  char *end = nullptr;
  long parsed = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || parsed < INT_MIN ||
      parsed > INT_MAX)
    fail(line, key + ": expected an integer, got '" + value + "'");
  return static_cast<int>(parsed);
}

std::string captureKey(size_t index) {
  return fmt::format("capture.{}", index);
}

std::string tunedKeySplitsKey(size_t index) {
  return fmt::format("tuned_key_splits.{}", index);
}

/// `BUCKET SPLITS`, as serializeLaunchConfig writes a TunedKeySplits.
TunedKeySplits parseTunedKeySplits(const std::string &value, int line, const std::string &key) {
  size_t space = value.find(' ');
  std::optional<ShapeBucket> bucket =
      space == std::string::npos ? std::nullopt : ShapeBucket::parse(value.substr(0, space));
  if (!bucket)
    fail(line, key + ": expected 'bhN_qN_kN SPLITS' (powers of two), got '" + value + "'");
  TunedKeySplits tuned;
  tuned.bucket = *bucket;
  tuned.keySplits = parseInt(value.substr(space + 1), line, key);
  if (tuned.keySplits < 0 || tuned.keySplits > attn_abi::kMaxKeySplits)
    fail(line, fmt::format("{}: expected 0 to {} splits, got {}", key, attn_abi::kMaxKeySplits,
                           tuned.keySplits));
  return tuned;
}

/// `NAME DTYPE DIM,DIM,...`, as serializeLaunchConfig writes a CaptureDecl.
std::string serializeCapture(const CaptureDecl &decl) {
  std::string dims;
  for (const CaptureDim &dim : decl.dims)
    dims += (dims.empty() ? "" : ",") + captureDimSpelling(dim);
  return decl.name + " " + dtypeName(decl.dtype) + " " + dims + (decl.requiresGrad ? " grad" : "");
}

CaptureDim parseCaptureDim(const std::string &token, int line,
                           const std::string &context) {
  static constexpr CaptureDim::Kind kSymbolic[] = {
      CaptureDim::Kind::Any,     CaptureDim::Kind::Batch,
      CaptureDim::Kind::QHeads,  CaptureDim::Kind::KvHeads,
      CaptureDim::Kind::SeqlenQ, CaptureDim::Kind::SeqlenK};
  CaptureDim dim;
  for (CaptureDim::Kind kind : kSymbolic) {
    dim.kind = kind;
    if (token == captureDimSpelling(dim))
      return dim;
  }
  // Digits only: strtoll alone would also take signs and leading blanks.
  bool digits = !token.empty() && token.find_first_not_of("0123456789") ==
                                      std::string::npos;
  errno = 0;
  long long size = digits ? std::strtoll(token.c_str(), nullptr, 10) : 0;
  if (!digits || errno != 0 || size <= 0)
    fail(line, context + ": expected a positive integer, '?', batch, "
                         "q_heads, kv_heads, seqlen_q or seqlen_k, got '" +
                   token + "'");
  dim.kind = CaptureDim::Kind::Fixed;
  dim.size = size;
  return dim;
}

CaptureDecl parseCapture(const std::string &value, int line,
                         const std::string &key) {
  std::vector<std::string> fields;
  for (size_t start = 0;;) {
    size_t space = value.find(' ', start);
    fields.push_back(value.substr(start, space - start));
    if (space == std::string::npos)
      break;
    start = space + 1;
  }
  if (fields.size() != 3 && !(fields.size() == 4 && fields[3] == "grad"))
    fail(line, key + ": expected 'NAME DTYPE DIM,DIM,...' and optionally 'grad', got '" +
                   value + "'");
  CaptureDecl decl;
  decl.name = fields[0];
  decl.requiresGrad = fields.size() == 4;
  if (!isCaptureName(decl.name))
    fail(line, key + ": name '" + decl.name + "' is not an identifier");
  if (fields[1] == dtypeName(DType::F32))
    decl.dtype = DType::F32;
  else if (fields[1] == dtypeName(DType::I32))
    decl.dtype = DType::I32;
  else
    fail(line, key + ": dtype: expected f32 or i32, got '" + fields[1] + "'");
  // As the capture attribute's verifier: gradients are f32.
  if (decl.requiresGrad && decl.dtype != DType::F32)
    fail(line, key + ": only an f32 capture has a gradient, got " + dtypeName(decl.dtype));
  const std::string &dims = fields[2];
  for (size_t start = 0;;) {
    size_t comma = dims.find(',', start);
    if (decl.dims.size() == size_t(attn_abi::kMaxCaptureRank))
      fail(line, fmt::format("{}: more than {} dims in '{}'", key, attn_abi::kMaxCaptureRank,
                             dims));
    decl.dims.push_back(parseCaptureDim(dims.substr(start, comma - start), line,
                                        fmt::format("{}: dim {}", key, decl.dims.size())));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return decl;
}
} // namespace

std::string serializeLaunchConfig(const AttnLaunchConfig &config) {
  std::string text = fmt::format("{} {}\n", kHeader, kLaunchMetadataVersion);
  text += "kernel " + config.kernelName + "\n";
  for (const IntField &field : kIntFields)
    text += fmt::format("{} {}\n", field.key, config.*field.member);
  text += std::string("dtype ") + dtypeName(config.dtype) + "\n";
  // Hexadecimal, so the float reads back exactly ({:a} is printf's %a).
  text += fmt::format("scale {:a}\n", double(config.scale));
  text += fmt::format("tuned_key_splits {}\n", config.tunedKeySplits.size());
  for (size_t index = 0; index < config.tunedKeySplits.size(); ++index)
    text += fmt::format("{} {} {}\n", tunedKeySplitsKey(index),
                        config.tunedKeySplits[index].bucket.str(),
                        config.tunedKeySplits[index].keySplits);
  text += fmt::format("captures {}\n", config.captures.size());
  for (size_t index = 0; index < config.captures.size(); ++index)
    text += captureKey(index) + " " + serializeCapture(config.captures[index]) +
            "\n";
  return text;
}

AttnLaunchConfig parseLaunchConfig(std::string_view text) {
  std::map<std::string, std::pair<std::string, int>> values;
  int lineNumber = 0;
  bool sawHeader = false;
  while (!text.empty()) {
    size_t newline = text.find('\n');
    std::string line(text.substr(0, newline));
    text = newline == std::string_view::npos ? std::string_view()
                                             : text.substr(newline + 1);
    ++lineNumber;
    if (line.empty())
      continue;
    size_t space = line.find(' ');
    if (space == std::string::npos)
      fail(lineNumber, "expected 'key value', got '" + line + "'");
    std::string key = line.substr(0, space), value = line.substr(space + 1);
    if (!sawHeader) {
      if (key != kHeader)
        fail(lineNumber, fmt::format("expected the header '{} {}', got '{}'", kHeader,
                                     kLaunchMetadataVersion, line));
      if (value != std::to_string(kLaunchMetadataVersion))
        fail(lineNumber, fmt::format("unsupported version {} (this runtime reads version {})",
                                     value, kLaunchMetadataVersion));
      sawHeader = true;
      continue;
    }
    if (!values.emplace(key, std::make_pair(value, lineNumber)).second)
      fail(lineNumber, "duplicate key '" + key + "'");
  }
  if (!sawHeader)
    fail(lineNumber, "empty; expected the header '" + std::string(kHeader) +
                         "'");

  auto take = [&](const std::string &key) {
    auto it = values.find(key);
    if (it == values.end())
      fail(lineNumber, "missing key '" + key + "'");
    std::pair<std::string, int> found = it->second;
    values.erase(it);
    return found;
  };

  AttnLaunchConfig config;
  config.kernelName = take("kernel").first;
  for (const IntField &field : kIntFields) {
    auto [value, line] = take(field.key);
    config.*field.member = parseInt(value, line, field.key);
  }
  auto [dtype, dtypeLine] = take("dtype");
  if (dtype == "bf16")
    config.dtype = DType::BF16;
  else if (dtype == "f16")
    config.dtype = DType::F16;
  else if (dtype == "f32")
    config.dtype = DType::F32;
  else
    fail(dtypeLine, "dtype: expected bf16, f16 or f32, got '" + dtype + "'");
  auto [scale, scaleLine] = take("scale");
  char *end = nullptr;
  double parsedScale = std::strtod(scale.c_str(), &end);
  if (scale.empty() || *end != '\0' || !std::isfinite(parsedScale))
    fail(scaleLine, "scale: expected a finite number, got '" + scale + "'");
  config.scale = static_cast<float>(parsedScale);

  auto [captureCount, captureCountLine] = take("captures");
  int declaredCaptures = parseInt(captureCount, captureCountLine, "captures");
  if (declaredCaptures < 0 || declaredCaptures > attn_abi::kMaxCaptures)
    fail(captureCountLine,
         fmt::format("captures: expected 0 to {}, got {}", attn_abi::kMaxCaptures, captureCount));
  for (int index = 0; index < declaredCaptures; ++index) {
    std::string key = captureKey(index);
    auto [value, line] = take(key);
    config.captures.push_back(parseCapture(value, line, key));
  }
  for (const auto &[key, valueAndLine] : values)
    if (key.rfind("capture.", 0) == 0)
      fail(valueAndLine.second, fmt::format("unexpected key '{}' (line {} says 'captures {}')",
                                            key, captureCountLine, captureCount));

  auto [tunedCount, tunedCountLine] = take("tuned_key_splits");
  int declaredTuned = parseInt(tunedCount, tunedCountLine, "tuned_key_splits");
  if (declaredTuned < 0)
    fail(tunedCountLine, "tuned_key_splits: expected a count, got " + tunedCount);
  for (int index = 0; index < declaredTuned; ++index) {
    std::string key = tunedKeySplitsKey(index);
    auto [value, line] = take(key);
    TunedKeySplits tuned = parseTunedKeySplits(value, line, key);
    for (const TunedKeySplits &earlier : config.tunedKeySplits)
      if (earlier.bucket == tuned.bucket)
        fail(line, key + ": a second entry for " + tuned.bucket.str());
    config.tunedKeySplits.push_back(tuned);
  }
  for (const auto &[key, valueAndLine] : values)
    if (key.rfind("tuned_key_splits.", 0) == 0)
      fail(valueAndLine.second,
           fmt::format("unexpected key '{}' (line {} says 'tuned_key_splits {}')", key,
                       tunedCountLine, tunedCount));

  if (!values.empty())
    fail(values.begin()->second.second,
         "unknown key '" + values.begin()->first + "'");
  return config;
}

} // namespace attn
