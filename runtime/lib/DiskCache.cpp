//===- DiskCache.cpp - Content-addressed cache of compiled kernels --------===//

#include "attn/runtime/DiskCache.h"

#include "attn/runtime/Error.h"
#include "attn/runtime/Hash.h"

#include "FileUtil.h"

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <thread>

namespace attn {

namespace {
constexpr std::string_view kMagic = "attnc-cache-entry 1\n";
constexpr std::string_view kEntrySuffix = ".attnc";
constexpr std::string_view kTempPrefix = ".tmp-";
constexpr std::string_view kLockSuffix = ".lock";
constexpr const char *kLockDirectory = "locks";
// "xxh64 " + 16 hex digits + "\n".
constexpr size_t kChecksumLineBytes = 6 + 16 + 1;
// Enough for the header and a small first section; what list() reads.
constexpr size_t kHeaderProbeBytes = 64 * 1024;
// Temporary files of writers that died are removed after this long.
constexpr int64_t kStaleTempNs = int64_t(3600) * 1000000000;


int64_t nowNs() {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return int64_t(now.tv_sec) * 1000000000 + now.tv_nsec;
}

int64_t modificationNs(const struct stat &status) {
  return int64_t(status.st_mtim.tv_sec) * 1000000000 + status.st_mtim.tv_nsec;
}

bool endsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.substr(text.size() - suffix.size()) == suffix;
}

bool isKeyCharacter(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '_' ||
         c == '-';
}

bool isDigit(char c) { return c >= '0' && c <= '9'; }

bool isValidKey(std::string_view key) {
  return !key.empty() && key.size() <= 128 &&
         std::all_of(key.begin(), key.end(), isKeyCharacter);
}





void setTimes(int fd, int64_t ns) {
  timespec times[2];
  times[0].tv_sec = times[1].tv_sec = ns / 1000000000;
  times[0].tv_nsec = times[1].tv_nsec = ns % 1000000000;
  // Best effort: in a directory shared between users only the owner may set
  // explicit times, and a stale time only makes eviction less precise.
  (void)::futimens(fd, times);
}

std::string hex64(uint64_t value) { return fmt::format("{:016x}", value); }

void validateSectionName(std::string_view name) {
  if (name.empty() || !std::all_of(name.begin(), name.end(), isKeyCharacter))
    throw Error("cache entry: section name '" + std::string(name) +
                "' must be non-empty and use only [0-9a-z_-]");
}

std::string serializeEntry(std::string_view key, const CacheEntry &entry) {
  std::string bytes(kMagic);
  bytes += "key ";
  bytes += key;
  bytes += "\n";
  for (const auto &[name, payload] : entry.sections) {
    validateSectionName(name);
    bytes += fmt::format("section {} {}\n", name, payload.size());
  }
  bytes += "end\n";
  for (const auto &section : entry.sections)
    bytes += section.second;
  bytes += "xxh64 " + hex64(xxh64(bytes.data(), bytes.size())) + "\n";
  return bytes;
}

struct ParsedHeader {
  std::string key;
  std::vector<std::pair<std::string, uint64_t>> sections;
  size_t payloadOffset = 0;
};

/// Parses the header at the start of `bytes` (which may be only a prefix of
/// the file). Returns false if it is malformed or incomplete.
bool parseHeader(std::string_view bytes, ParsedHeader &header) {
  if (bytes.substr(0, kMagic.size()) != kMagic)
    return false;
  size_t position = kMagic.size();
  auto nextLine = [&](std::string_view &line) {
    size_t newline = bytes.find('\n', position);
    if (newline == std::string_view::npos)
      return false;
    line = bytes.substr(position, newline - position);
    position = newline + 1;
    return true;
  };
  std::string_view line;
  if (!nextLine(line) || line.substr(0, 4) != "key ")
    return false;
  header.key = std::string(line.substr(4));
  while (true) {
    if (!nextLine(line))
      return false;
    if (line == "end")
      break;
    if (line.substr(0, 8) != "section ")
      return false;
    std::string_view rest = line.substr(8);
    size_t space = rest.find(' ');
    if (space == std::string_view::npos)
      return false;
    std::string size(rest.substr(space + 1));
    if (size.empty() || size.size() > 19 ||
        !std::all_of(size.begin(), size.end(), isDigit))
      return false;
    header.sections.emplace_back(std::string(rest.substr(0, space)),
                                 std::strtoull(size.c_str(), nullptr, 10));
  }
  header.payloadOffset = position;
  return true;
}

/// The entry in `bytes` if it is complete, names `key` and its checksum
/// matches.
std::optional<CacheEntry> parseEntry(std::string_view bytes,
                                     std::string_view key) {
  ParsedHeader header;
  if (!parseHeader(bytes, header) || header.key != key)
    return std::nullopt;
  uint64_t expectedSize = header.payloadOffset + kChecksumLineBytes;
  for (const auto &section : header.sections) {
    if (section.second > bytes.size())
      return std::nullopt;
    expectedSize += section.second;
  }
  if (expectedSize != bytes.size())
    return std::nullopt;
  size_t checked = bytes.size() - kChecksumLineBytes;
  std::string_view checksumLine = bytes.substr(checked);
  if (checksumLine !=
      "xxh64 " + hex64(xxh64(bytes.data(), checked)) + "\n")
    return std::nullopt;

  CacheEntry entry;
  size_t offset = header.payloadOffset;
  for (const auto &[name, size] : header.sections) {
    entry.sections.emplace_back(name, std::string(bytes.substr(offset, size)));
    offset += size;
  }
  return entry;
}


struct DirectoryEntry {
  std::string name;
  struct stat status;
};

/// The regular files of `directory`.
std::vector<DirectoryEntry> listFiles(const std::string &directory) {
  std::vector<DirectoryEntry> files;
  DIR *dir = ::opendir(directory.c_str());
  if (!dir)
    return files;
  while (dirent *item = ::readdir(dir)) {
    DirectoryEntry file;
    file.name = item->d_name;
    std::string path = directory + "/" + file.name;
    if (::stat(path.c_str(), &file.status) == 0 && S_ISREG(file.status.st_mode))
      files.push_back(std::move(file));
  }
  ::closedir(dir);
  return files;
}

/// The key of an entry file name, or an empty view.
std::string_view entryKey(std::string_view name) {
  if (!endsWith(name, kEntrySuffix))
    return {};
  std::string_view key = name.substr(0, name.size() - kEntrySuffix.size());
  return isValidKey(key) ? key : std::string_view();
}
} // namespace

//===----------------------------------------------------------------------===//
// CacheEntry
//===----------------------------------------------------------------------===//

const std::string *CacheEntry::find(std::string_view name) const {
  for (const auto &section : sections)
    if (section.first == name)
      return &section.second;
  return nullptr;
}

void CacheEntry::set(std::string_view name, std::string value) {
  for (auto &section : sections)
    if (section.first == name) {
      section.second = std::move(value);
      return;
    }
  sections.emplace_back(std::string(name), std::move(value));
}

uint64_t CacheEntry::payloadBytes() const {
  uint64_t bytes = 0;
  for (const auto &section : sections)
    bytes += section.second.size();
  return bytes;
}

//===----------------------------------------------------------------------===//
// Options
//===----------------------------------------------------------------------===//

uint64_t parseByteSize(std::string_view text, std::string_view what) {
  auto fail = [&]() -> uint64_t {
    throw Error(std::string(what) + ": expected a byte count such as "
                "1073741824, 512M or 2G, got '" + std::string(text) + "'");
  };
  std::string digits(text);
  uint64_t multiplier = 1;
  if (!digits.empty()) {
    switch (digits.back()) {
    case 'K':
    case 'k':
      multiplier = uint64_t(1) << 10;
      break;
    case 'M':
    case 'm':
      multiplier = uint64_t(1) << 20;
      break;
    case 'G':
    case 'g':
      multiplier = uint64_t(1) << 30;
      break;
    }
    if (multiplier != 1)
      digits.pop_back();
  }
  if (digits.empty() || digits.size() > 19 ||
      !std::all_of(digits.begin(), digits.end(), isDigit))
    return fail();
  uint64_t value = std::strtoull(digits.c_str(), nullptr, 10);
  if (value > UINT64_MAX / multiplier)
    return fail();
  return value * multiplier;
}

DiskCacheOptions DiskCacheOptions::fromEnvironment() {
  DiskCacheOptions options;
  auto variable = [](const char *name) -> std::string {
    const char *value = std::getenv(name);
    return value ? value : "";
  };
  std::string explicitDir = variable("ATTNC_CACHE_DIR");
  std::string xdg = variable("XDG_CACHE_HOME");
  std::string home = variable("HOME");
  if (!explicitDir.empty())
    options.directory = explicitDir;
  else if (!xdg.empty() && xdg.front() == '/') // The XDG spec ignores
    options.directory = xdg + "/attnc";          // relative paths.
  else if (!home.empty())
    options.directory = home + "/.cache/attnc";
  std::string limit = variable("ATTNC_CACHE_MAX_BYTES");
  if (!limit.empty())
    options.maxBytes = parseByteSize(limit, "ATTNC_CACHE_MAX_BYTES");
  return options;
}

void validateCacheKey(std::string_view key) {
  if (!isValidKey(key))
    throw Error("key: '" + std::string(key.substr(0, 200)) +
                "' must be 1 to 128 characters from [0-9a-z_-]");
}

//===----------------------------------------------------------------------===//
// DiskCache
//===----------------------------------------------------------------------===//

DiskCache::DiskCache(DiskCacheOptions options) : opts(std::move(options)) {
  while (opts.directory.size() > 1 && opts.directory.back() == '/')
    opts.directory.pop_back();
  if (!opts.warn)
    opts.warn = [](const std::string &message) {
      std::fprintf(stderr, "%s\n", message.c_str());
    };
}

std::string DiskCache::entryPath(std::string_view key) const {
  return opts.directory + "/" + std::string(key) + std::string(kEntrySuffix);
}

void DiskCache::disable(const std::string &why) {
  enabled = false;
  if (!warned.exchange(true))
    opts.warn("attnc: warning: cache directory '" + opts.directory +
              "' is not usable (" + why +
              "); compiled kernels are cached in memory only");
}

void DiskCache::initialize() {
  if (opts.directory.empty())
    return; // No disk cache configured: not worth a warning.
  std::string error = makeDirectories(opts.directory);
  if (error.empty())
    error = makeDirectories(opts.directory + "/" + kLockDirectory);
  if (!error.empty())
    return disable(error);
  // Creating the directory can succeed where writing into it fails (a
  // read-only bind mount, another user's directory), so probe once.
  std::string probe = fmt::format("{}/{}probe-{}", opts.directory, kTempPrefix, ::getpid());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                  0644);
  if (fd < 0)
    return disable("cannot create a file in it: " + describeErrno(errno));
  bool wrote = writeAll(fd, "x", 1);
  int writeError = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!wrote)
    return disable("cannot write a file in it: " + describeErrno(writeError));
  enabled = true;
}

bool DiskCache::usable() {
  std::call_once(initialized, [this] { initialize(); });
  return enabled;
}

std::optional<CacheEntry> DiskCache::load(std::string_view key) {
  validateCacheKey(key);
  if (!usable())
    return std::nullopt;
  std::string path = entryPath(key);
  FileHandle file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.fd < 0)
    return std::nullopt;
  struct stat status;
  if (::fstat(file.fd, &status) != 0)
    return std::nullopt;
  std::string bytes;
  // One byte past the size tells a file that grew from one that was read
  // whole (entries are never written in place, but be strict).
  if (!readPrefix(file.fd, static_cast<size_t>(status.st_size) + 1, bytes))
    return std::nullopt;
  std::optional<CacheEntry> entry = parseEntry(bytes, key);
  if (!entry) {
    // Remove it only if the path still names the file that was read: a
    // writer may have renamed a good entry over it meanwhile.
    struct stat current;
    if (::stat(path.c_str(), &current) == 0 &&
        current.st_ino == status.st_ino && current.st_dev == status.st_dev)
      ::unlink(path.c_str());
    return std::nullopt;
  }
  setTimes(file.fd, nowNs());
  return entry;
}

bool DiskCache::store(std::string_view key, const CacheEntry &entry) {
  validateCacheKey(key);
  std::string bytes = serializeEntry(key, entry);
  if (!usable())
    return false;

  static std::atomic<uint64_t> counter{0};
  std::string temp = fmt::format("{}/{}{}-{}-{}-{}", opts.directory, kTempPrefix, key,
                                 ::getpid(), counter++, nowNs());
  std::string path = entryPath(key);
  std::string error = writeFileAtomically(path, temp, bytes, [](int fd) { setTimes(fd, nowNs()); });
  if (!error.empty()) {
    disable(error);
    return false;
  }
  evict(key);
  return true;
}

CacheEntry DiskCache::loadOrBuild(std::string_view key,
                                  const std::function<CacheEntry()> &build,
                                  bool *built) {
  if (built)
    *built = false;
  if (std::optional<CacheEntry> hit = load(key))
    return std::move(*hit);
  if (!usable()) {
    if (built)
      *built = true;
    return build();
  }
  FileLock lock(opts.directory + "/" + kLockDirectory + "/" + std::string(key) +
                   std::string(kLockSuffix),
               opts.lockTimeoutSeconds);
  // Whoever held the lock before may have just stored it.
  if (std::optional<CacheEntry> hit = load(key))
    return std::move(*hit);
  if (built)
    *built = true;
  CacheEntry entry = build();
  store(key, entry);
  return entry;
}

bool DiskCache::remove(std::string_view key) {
  validateCacheKey(key);
  if (!usable())
    return false;
  return ::unlink(entryPath(key).c_str()) == 0;
}

void DiskCache::evict(std::string_view keep) {
  struct Candidate {
    std::string path;
    uint64_t bytes;
    int64_t lastUse;
  };
  std::vector<Candidate> candidates;
  uint64_t total = 0;
  int64_t now = nowNs();
  for (const DirectoryEntry &file : listFiles(opts.directory)) {
    std::string path = opts.directory + "/" + file.name;
    if (file.name.rfind(kTempPrefix, 0) == 0) {
      if (now - modificationNs(file.status) > kStaleTempNs)
        ::unlink(path.c_str());
      continue;
    }
    std::string_view key = entryKey(file.name);
    if (key.empty())
      continue;
    uint64_t bytes = static_cast<uint64_t>(file.status.st_size);
    total += bytes;
    if (key != keep)
      candidates.push_back({path, bytes, modificationNs(file.status)});
  }
  if (total <= opts.maxBytes)
    return;
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate &a, const Candidate &b) {
              return a.lastUse != b.lastUse ? a.lastUse < b.lastUse
                                            : a.path < b.path;
            });
  for (const Candidate &candidate : candidates) {
    if (total <= opts.maxBytes)
      break;
    // Another process evicting at the same time may have removed it first.
    ::unlink(candidate.path.c_str());
    total -= candidate.bytes;
  }
}

std::vector<CacheEntryInfo> DiskCache::list() {
  std::vector<CacheEntryInfo> entries;
  if (!usable())
    return entries;
  for (const DirectoryEntry &file : listFiles(opts.directory)) {
    std::string_view key = entryKey(file.name);
    if (key.empty())
      continue;
    CacheEntryInfo info;
    info.key = std::string(key);
    info.bytes = static_cast<uint64_t>(file.status.st_size);
    info.lastUseNs = modificationNs(file.status);
    FileHandle handle(
        ::open((opts.directory + "/" + file.name).c_str(), O_RDONLY | O_CLOEXEC));
    std::string prefix;
    ParsedHeader header;
    if (handle.fd >= 0 && readPrefix(handle.fd, kHeaderProbeBytes, prefix) &&
        parseHeader(prefix, header)) {
      size_t offset = header.payloadOffset;
      for (const auto &[name, size] : header.sections) {
        if (name == "info" && offset + size <= prefix.size())
          info.info = prefix.substr(offset, size);
        offset += size;
      }
    }
    entries.push_back(std::move(info));
  }
  std::sort(entries.begin(), entries.end(),
            [](const CacheEntryInfo &a, const CacheEntryInfo &b) {
              return a.lastUseNs != b.lastUseNs ? a.lastUseNs > b.lastUseNs
                                                : a.key < b.key;
            });
  return entries;
}

DiskCacheStats DiskCache::stats() {
  DiskCacheStats stats;
  stats.directory = opts.directory;
  stats.maxBytes = opts.maxBytes;
  stats.usable = usable();
  if (!stats.usable)
    return stats;
  for (const DirectoryEntry &file : listFiles(opts.directory)) {
    if (entryKey(file.name).empty())
      continue;
    ++stats.entries;
    stats.bytes += static_cast<uint64_t>(file.status.st_size);
  }
  return stats;
}

uint64_t DiskCache::clear() {
  if (!usable())
    return 0;
  uint64_t removed = 0;
  int64_t now = nowNs();
  for (const DirectoryEntry &file : listFiles(opts.directory)) {
    std::string path = opts.directory + "/" + file.name;
    if (!entryKey(file.name).empty()) {
      if (::unlink(path.c_str()) == 0)
        ++removed;
    } else if (file.name.rfind(kTempPrefix, 0) == 0 &&
               now - modificationNs(file.status) > kStaleTempNs) {
      // A fresh one may belong to a writer that is about to rename it.
      ::unlink(path.c_str());
    }
  }
  std::string locks = opts.directory + "/" + kLockDirectory;
  for (const DirectoryEntry &file : listFiles(locks))
    if (endsWith(file.name, kLockSuffix))
      ::unlink((locks + "/" + file.name).c_str());
  return removed;
}

} // namespace attn
