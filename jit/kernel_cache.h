#pragma once
// The kernel cache: compiled kernels (cubin or PTX) kept in memory and on disk, so a policy is
// compiled by NVRTC once per (source, options, architecture, NVRTC, kvevict) and loaded in
// milliseconds afterwards.
//
// Key: SHA-256 over the length-prefixed fields of KernelCacheKey (source, every compile option in
// order, architecture, binary kind, NVRTC version, kvevict version). Changing any one of them
// changes the key; the label is for `kvevict cache list` only and is not part of it.
//
// Disk: $KVEVICT_CACHE_DIR, else $HOME/.cache/kvevict/kernels; one file "<key hex>.kvk" per entry.
// KVEVICT_CACHE_DISABLE=1 keeps the cache in memory only. File layout (little-endian):
//   0   8  magic "KVKCACHE"          8  u32 format version (1)    12 u32 kind (0 cubin, 1 ptx)
//   16  u64 metadata bytes M         24 u64 payload bytes P       32 u64 creation time (unix s)
//   40  32  key digest               72 32  SHA-256 of bytes 0..71 || metadata || payload
//   104 M   metadata: label, arch, NVRTC version, kvevict version, each ending in '\n'
//   104+M P payload
// Writes go to a temporary file in the same directory, are fsync'ed, then renamed over the entry
// (rename is atomic within a file system), so a concurrent reader sees the old entry, the new one
// or none, never half of one. A reader that finds a bad entry (wrong magic or key, size mismatch,
// checksum mismatch: truncation or corruption) deletes it and reports a miss, and the caller
// rebuilds it. Failing to write the disk cache never fails a compile; it is counted in stats().
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "jit/nvrtc_library.h"
#include "jit/sha256.h"

namespace kvevict::jit {

struct KernelCacheKey {
  std::string source;
  std::vector<std::string> options;
  std::string arch;
  BinaryKind kind = BinaryKind::Cubin;
  std::string nvrtc_version;
  std::string kvevict_version;
  std::string label;  // e.g. the policy name; not part of the key

  Sha256Digest digest() const;
  std::string hex() const { return to_hex(digest()); }
};

struct KernelCacheEntry {
  BinaryKind kind = BinaryKind::Cubin;
  std::vector<uint8_t> payload;
  std::string label, arch, nvrtc_version, kvevict_version;
  int64_t created_unix = 0;
};

struct CacheFileInfo {
  std::string path;
  std::string key_hex;
  uint64_t file_bytes = 0;
  bool valid = false;
  std::string problem;     // why the entry is invalid
  KernelCacheEntry entry;  // metadata (payload left empty) when valid
};

struct KernelCacheStats {
  uint64_t memory_hits = 0, disk_hits = 0, misses = 0;
  uint64_t bad_entries_removed = 0;  // corrupt or truncated files found and deleted
  uint64_t stores = 0, store_failures = 0;
};

class KernelCache {
 public:
  struct Options {
    std::string dir;            // empty: default_dir()
    bool use_disk = true;       // false also when KVEVICT_CACHE_DISABLE=1
    size_t memory_capacity = 64;  // entries kept in memory, least recently used dropped first
  };

  // $KVEVICT_CACHE_DIR, else $HOME/.cache/kvevict/kernels (./.kvevict-cache without HOME).
  static std::string default_dir();

  KernelCache();
  explicit KernelCache(Options options);

  // Memory first, then disk. nullptr on a miss (including a bad entry, which is deleted).
  std::shared_ptr<const KernelCacheEntry> find(const KernelCacheKey& key);
  // Puts the entry in memory and (atomically) on disk; false if the disk write failed.
  bool store(const KernelCacheKey& key, KernelCacheEntry entry);
  // find(), else build() then store(). `built` (optional) says whether build() ran.
  std::shared_ptr<const KernelCacheEntry> get_or_build(const KernelCacheKey& key,
                                                       const std::function<KernelCacheEntry()>& build,
                                                       bool* built = nullptr);

  // Every entry file on disk (valid or not), sorted by path.
  std::vector<CacheFileInfo> list() const;
  // Deletes entry files and leftover temporaries (only kvevict's own file names) and empties the
  // memory cache. Returns the number of files deleted.
  size_t clear();
  void clear_memory();

  KernelCacheStats stats() const;
  const std::string& dir() const { return options_.dir; }
  bool uses_disk() const { return options_.use_disk; }
  std::string entry_path(const KernelCacheKey& key) const;

  // Reads and validates one entry file; `expected_key` may be null (no key check).
  static CacheFileInfo read_file(const std::string& path, const Sha256Digest* expected_key, bool keep_payload);
  // Writes one entry file atomically (temporary + fsync + rename); throws RuntimeError on failure.
  static void write_file(const std::string& path, const Sha256Digest& key, const KernelCacheEntry& entry);

 private:
  void remember(const std::string& hex, std::shared_ptr<const KernelCacheEntry> entry);

  Options options_;
  mutable std::mutex mutex_;
  std::list<std::string> recency_;  // most recent first
  std::unordered_map<std::string, std::pair<std::shared_ptr<const KernelCacheEntry>, std::list<std::string>::iterator>> memory_;
  KernelCacheStats stats_;
};

// The process-wide cache with default options (what the CLI and engine use).
KernelCache& process_kernel_cache();

}  // namespace kvevict::jit
