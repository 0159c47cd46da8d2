// The kernel cache; file format and guarantees in kernel_cache.h.
#include "jit/kernel_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "core/util/error.h"
#include "jit/dynamic_library.h"

namespace kvevict::jit {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'K', 'V', 'K', 'C', 'A', 'C', 'H', 'E'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kFixedHeader = 104;
constexpr uint64_t kMaxMetadata = 1 << 16;
constexpr const char* kEntrySuffix = ".kvk";
constexpr const char* kTempPrefix = ".tmp.";

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char(v >> (8 * i)));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(char(v >> (8 * i)));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

// Length-prefixed so that ("ab","c") and ("a","bc") hash differently.
void hash_field(Sha256& hasher, std::string_view field) {
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = uint8_t(uint64_t(field.size()) >> (8 * i));
  hasher.update(length, 8);
  hasher.update(field);
}

std::string metadata_text(const KernelCacheEntry& e) {
  return e.label + "\n" + e.arch + "\n" + e.nvrtc_version + "\n" + e.kvevict_version + "\n";
}

// Covers every byte of the file except the checksum itself: the first 72 header bytes, the
// metadata and the payload, so any corruption, even of the creation time, is detected.
Sha256Digest content_checksum(const uint8_t* header72, std::string_view metadata, const uint8_t* payload, size_t size) {
  Sha256 hasher;
  hasher.update(header72, 72);
  hasher.update(metadata);
  hasher.update(payload, size);
  return hasher.finish();
}

bool write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= size_t(n);
  }
  return true;
}

std::string unique_temp_name(const std::string& final_name) {
  static std::atomic<uint64_t> counter{0};
  std::ostringstream name;
  name << kTempPrefix << final_name << "." << ::getpid() << "."
       << std::hash<std::thread::id>{}(std::this_thread::get_id()) % 1000000007ULL << "." << counter++;
  return name.str();
}

}  // namespace

Sha256Digest KernelCacheKey::digest() const {
  Sha256 hasher;
  hash_field(hasher, "kvevict-kernel-cache-key-v1");
  hash_field(hasher, source);
  hash_field(hasher, std::to_string(options.size()));
  for (const auto& option : options) hash_field(hasher, option);
  hash_field(hasher, arch);
  hash_field(hasher, binary_kind_name(kind));
  hash_field(hasher, nvrtc_version);
  hash_field(hasher, kvevict_version);
  return hasher.finish();
}

std::string KernelCache::default_dir() {
  std::string dir = environment("KVEVICT_CACHE_DIR");
  if (!dir.empty()) return dir;
  std::string home = environment("HOME");
  if (home.empty()) return ".kvevict-cache";
  return home + "/.cache/kvevict/kernels";
}

KernelCache::KernelCache() : KernelCache(Options{}) {}

KernelCache::KernelCache(Options options) : options_(std::move(options)) {
  if (options_.dir.empty()) options_.dir = default_dir();
  const std::string disable = environment("KVEVICT_CACHE_DISABLE");
  if (!disable.empty() && disable != "0") options_.use_disk = false;
  if (options_.memory_capacity == 0) options_.memory_capacity = 1;
}

std::string KernelCache::entry_path(const KernelCacheKey& key) const {
  return options_.dir + "/" + key.hex() + kEntrySuffix;
}

void KernelCache::remember(const std::string& hex, std::shared_ptr<const KernelCacheEntry> entry) {
  auto found = memory_.find(hex);
  if (found != memory_.end()) {
    recency_.erase(found->second.second);
    memory_.erase(found);
  }
  recency_.push_front(hex);
  memory_[hex] = {std::move(entry), recency_.begin()};
  while (memory_.size() > options_.memory_capacity) {
    memory_.erase(recency_.back());
    recency_.pop_back();
  }
}

std::shared_ptr<const KernelCacheEntry> KernelCache::find(const KernelCacheKey& key) {
  const Sha256Digest digest = key.digest();
  const std::string hex = to_hex(digest);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = memory_.find(hex);
    if (found != memory_.end()) {
      recency_.splice(recency_.begin(), recency_, found->second.second);
      ++stats_.memory_hits;
      return found->second.first;
    }
  }
  if (options_.use_disk) {
    const std::string path = options_.dir + "/" + hex + kEntrySuffix;
    std::error_code ec;
    if (fs::exists(path, ec)) {
      CacheFileInfo info = read_file(path, &digest, true);
      if (info.valid) {
        auto entry = std::make_shared<const KernelCacheEntry>(std::move(info.entry));
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.disk_hits;
        remember(hex, entry);
        return entry;
      }
      // A bad entry: remove it so the rebuild replaces it. If another process renamed a good
      // entry in meanwhile, we only cost it one rebuild.
      fs::remove(path, ec);
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.bad_entries_removed;
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.misses;
  return nullptr;
}

bool KernelCache::store(const KernelCacheKey& key, KernelCacheEntry entry) {
  const Sha256Digest digest = key.digest();
  const std::string hex = to_hex(digest);
  if (entry.created_unix == 0) entry.created_unix = int64_t(std::time(nullptr));
  auto shared = std::make_shared<const KernelCacheEntry>(std::move(entry));
  bool written = true;
  if (options_.use_disk) {
    try {
      write_file(options_.dir + "/" + hex + kEntrySuffix, digest, *shared);
    } catch (const Error&) {
      written = false;
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  remember(hex, shared);
  ++stats_.stores;
  if (!written) ++stats_.store_failures;
  return written;
}

std::shared_ptr<const KernelCacheEntry> KernelCache::get_or_build(const KernelCacheKey& key,
                                                                  const std::function<KernelCacheEntry()>& build,
                                                                  bool* built) {
  if (built) *built = false;
  if (auto hit = find(key)) return hit;
  KernelCacheEntry entry = build();
  if (built) *built = true;
  if (entry.created_unix == 0) entry.created_unix = int64_t(std::time(nullptr));
  auto shared = std::make_shared<const KernelCacheEntry>(entry);
  store(key, std::move(entry));
  return shared;
}

void KernelCache::write_file(const std::string& path, const Sha256Digest& key, const KernelCacheEntry& entry) {
  const fs::path final_path(path);
  const fs::path dir = final_path.parent_path().empty() ? fs::path(".") : final_path.parent_path();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw RuntimeError(dir.string() + ": cannot create the kernel cache directory: " + ec.message());

  const std::string metadata = metadata_text(entry);
  std::string header(kMagic, 8);
  put_u32(header, kFormatVersion);
  put_u32(header, entry.kind == BinaryKind::Cubin ? 0 : 1);
  put_u64(header, metadata.size());
  put_u64(header, entry.payload.size());
  put_u64(header, uint64_t(entry.created_unix));
  header.append(reinterpret_cast<const char*>(key.data()), key.size());
  const Sha256Digest checksum = content_checksum(reinterpret_cast<const uint8_t*>(header.data()), metadata,
                                                 entry.payload.data(), entry.payload.size());
  header.append(reinterpret_cast<const char*>(checksum.data()), checksum.size());
  header += metadata;

  const fs::path temp = dir / unique_temp_name(final_path.filename().string());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw RuntimeError(temp.string() + ": cannot create: " + std::strerror(errno));
  bool ok = write_all(fd, header.data(), header.size()) && write_all(fd, entry.payload.data(), entry.payload.size());
  ok = ok && ::fsync(fd) == 0;
  const int saved_errno = errno;
  ok = (::close(fd) == 0) && ok;
  if (!ok || ::rename(temp.c_str(), final_path.c_str()) != 0) {
    const int error = ok ? errno : saved_errno;
    ::unlink(temp.c_str());
    throw RuntimeError(final_path.string() + ": cannot write the cache entry: " + std::strerror(error));
  }
  // Make the rename itself durable; failure here only risks losing the entry after a crash.
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

CacheFileInfo KernelCache::read_file(const std::string& path, const Sha256Digest* expected_key, bool keep_payload) {
  CacheFileInfo info;
  info.path = path;
  std::string name = fs::path(path).filename().string();
  if (name.size() > 4 && name.compare(name.size() - 4, 4, kEntrySuffix) == 0) info.key_hex = name.substr(0, name.size() - 4);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    info.problem = "cannot open";
    return info;
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  info.file_bytes = bytes.size();
  if (bytes.size() < kFixedHeader) {
    info.problem = "truncated header (" + std::to_string(bytes.size()) + " bytes)";
    return info;
  }
  if (std::memcmp(bytes.data(), kMagic, 8) != 0) {
    info.problem = "not a kvevict cache entry (bad magic)";
    return info;
  }
  if (get_u32(bytes.data() + 8) != kFormatVersion) {
    info.problem = "unknown format version " + std::to_string(get_u32(bytes.data() + 8));
    return info;
  }
  const uint32_t kind = get_u32(bytes.data() + 12);
  const uint64_t metadata_bytes = get_u64(bytes.data() + 16);
  const uint64_t payload_bytes = get_u64(bytes.data() + 24);
  if (kind > 1) {
    info.problem = "unknown payload kind " + std::to_string(kind);
    return info;
  }
  if (metadata_bytes > kMaxMetadata || payload_bytes > bytes.size() ||
      kFixedHeader + metadata_bytes + payload_bytes != bytes.size()) {
    info.problem = "size mismatch (truncated or padded): header says " + std::to_string(kFixedHeader + metadata_bytes + payload_bytes) +
                   " bytes, file has " + std::to_string(bytes.size());
    return info;
  }
  if (expected_key && std::memcmp(bytes.data() + 40, expected_key->data(), 32) != 0) {
    info.problem = "entry belongs to another key";
    return info;
  }
  const uint8_t* metadata = bytes.data() + kFixedHeader;
  const uint8_t* payload = metadata + metadata_bytes;
  const Sha256Digest checksum =
      content_checksum(bytes.data(), std::string_view(reinterpret_cast<const char*>(metadata), metadata_bytes), payload,
                       payload_bytes);
  if (std::memcmp(bytes.data() + 72, checksum.data(), 32) != 0) {
    info.problem = "checksum mismatch (corrupted)";
    return info;
  }
  std::vector<std::string> fields;
  std::string field;
  for (uint64_t i = 0; i < metadata_bytes; ++i) {
    if (metadata[i] == '\n') {
      fields.push_back(field);
      field.clear();
    } else {
      field.push_back(char(metadata[i]));
    }
  }
  if (fields.size() != 4 || !field.empty()) {
    info.problem = "malformed metadata";
    return info;
  }
  info.key_hex = to_hex(bytes.data() + 40, 32);
  info.entry.kind = kind == 0 ? BinaryKind::Cubin : BinaryKind::Ptx;
  info.entry.label = fields[0];
  info.entry.arch = fields[1];
  info.entry.nvrtc_version = fields[2];
  info.entry.kvevict_version = fields[3];
  info.entry.created_unix = int64_t(get_u64(bytes.data() + 32));
  if (keep_payload) info.entry.payload.assign(payload, payload + payload_bytes);
  info.valid = true;
  return info;
}

std::vector<CacheFileInfo> KernelCache::list() const {
  std::vector<CacheFileInfo> files;
  std::error_code ec;
  if (!fs::is_directory(options_.dir, ec)) return files;
  for (const auto& item : fs::directory_iterator(options_.dir, ec)) {
    const std::string name = item.path().filename().string();
    if (name.size() <= 4 || name.compare(name.size() - 4, 4, kEntrySuffix) != 0 || name.rfind(kTempPrefix, 0) == 0) continue;
    files.push_back(read_file(item.path().string(), nullptr, false));
  }
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  return files;
}

size_t KernelCache::clear() {
  clear_memory();
  size_t removed = 0;
  std::error_code ec;
  if (!fs::is_directory(options_.dir, ec)) return 0;
  std::vector<fs::path> doomed;
  for (const auto& item : fs::directory_iterator(options_.dir, ec)) {
    const std::string name = item.path().filename().string();
    const bool entry = name.size() > 4 && name.compare(name.size() - 4, 4, kEntrySuffix) == 0;
    const bool temp = name.rfind(kTempPrefix, 0) == 0;
    if ((entry || temp) && item.is_regular_file(ec)) doomed.push_back(item.path());
  }
  for (const auto& path : doomed)
    if (fs::remove(path, ec)) ++removed;
  return removed;
}

void KernelCache::clear_memory() {
  std::lock_guard<std::mutex> lock(mutex_);
  memory_.clear();
  recency_.clear();
}

KernelCacheStats KernelCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

KernelCache& process_kernel_cache() {
  static KernelCache cache;
  return cache;
}

}  // namespace kvevict::jit
