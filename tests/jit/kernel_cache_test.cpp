// Kernel cache: hits and misses, key sensitivity, corrupted and truncated entries, concurrent
// writers (threads and processes), list and clear.
#include "jit/kernel_cache.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "jit/jit_compiler.h"
#include "jit/reference_kernels.h"
#include "jit_test_support.h"

namespace kvevict::jit {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

KernelCacheKey sample_key() {
  KernelCacheKey key;
  key.source = "extern \"C\" __global__ void k() {}";
  key.options = {"-arch=sm_80", "-std=c++17"};
  key.arch = "sm_80";
  key.kind = BinaryKind::Cubin;
  key.nvrtc_version = "13.0";
  key.kvevict_version = "0.1.0+abc";
  key.label = "sample";
  return key;
}

KernelCacheEntry sample_entry(size_t bytes, uint8_t seed) {
  KernelCacheEntry entry;
  entry.label = "sample";
  entry.arch = "sm_80";
  entry.nvrtc_version = "13.0";
  entry.kvevict_version = "0.1.0+abc";
  for (size_t i = 0; i < bytes; ++i) entry.payload.push_back(uint8_t(seed + i * 31));
  return entry;
}

KernelCache make_cache(const std::string& dir) {
  KernelCache::Options options;
  options.dir = dir;
  return KernelCache(options);
}

TEST(KernelCache, MissThenMemoryHitThenDiskHitInANewInstance) {
  TempDir dir;
  const KernelCacheKey key = sample_key();
  {
    KernelCache cache = make_cache(dir.path());
    EXPECT_EQ(cache.find(key), nullptr);
    EXPECT_TRUE(cache.store(key, sample_entry(1000, 7)));
    auto hit = cache.find(key);
    ASSERT_NE(hit, nullptr);
    EXPECT_EQ(hit->payload, sample_entry(1000, 7).payload);
    EXPECT_EQ(cache.stats().misses, 1u);
    EXPECT_EQ(cache.stats().memory_hits, 1u);
    EXPECT_TRUE(fs::exists(cache.entry_path(key)));
  }
  KernelCache fresh = make_cache(dir.path());
  auto hit = fresh.find(key);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->payload, sample_entry(1000, 7).payload);
  EXPECT_EQ(hit->label, "sample");
  EXPECT_EQ(hit->arch, "sm_80");
  EXPECT_EQ(fresh.stats().disk_hits, 1u);
  EXPECT_EQ(fresh.stats().misses, 0u);
}

TEST(KernelCache, GetOrBuildBuildsOnlyOnAMiss) {
  TempDir dir;
  KernelCache cache = make_cache(dir.path());
  int builds = 0;
  auto build = [&]() {
    ++builds;
    return sample_entry(64, 1);
  };
  bool built = false;
  cache.get_or_build(sample_key(), build, &built);
  EXPECT_TRUE(built);
  cache.get_or_build(sample_key(), build, &built);
  EXPECT_FALSE(built);
  EXPECT_EQ(builds, 1);
}

TEST(KernelCache, KeyChangesWithEveryInputButNotWithTheLabel) {
  const KernelCacheKey base = sample_key();
  std::vector<std::pair<std::string, KernelCacheKey>> variants;
  auto variant = [&](const std::string& what, auto change) {
    KernelCacheKey key = base;
    change(key);
    variants.emplace_back(what, key);
  };
  variant("source", [](KernelCacheKey& k) { k.source += " "; });
  variant("options", [](KernelCacheKey& k) { k.options.push_back("-lineinfo"); });
  variant("option order", [](KernelCacheKey& k) { std::swap(k.options[0], k.options[1]); });
  variant("option split", [](KernelCacheKey& k) { k.options = {"-arch=sm_80-std=c++17"}; });
  variant("arch", [](KernelCacheKey& k) { k.arch = "sm_90"; });
  variant("kind", [](KernelCacheKey& k) { k.kind = BinaryKind::Ptx; });
  variant("nvrtc version", [](KernelCacheKey& k) { k.nvrtc_version = "13.1"; });
  variant("kvevict version", [](KernelCacheKey& k) { k.kvevict_version = "0.1.0+abd"; });
  for (const auto& [what, key] : variants) EXPECT_NE(key.hex(), base.hex()) << "changing the " << what;
  for (size_t i = 0; i < variants.size(); ++i)
    for (size_t j = i + 1; j < variants.size(); ++j) EXPECT_NE(variants[i].second.hex(), variants[j].second.hex());
  KernelCacheKey relabelled = base;
  relabelled.label = "other";
  EXPECT_EQ(relabelled.hex(), base.hex());
  EXPECT_EQ(base.hex().size(), 64u);
}

void flip_byte(const std::string& path, long offset_from_end) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(-offset_from_end, std::ios::end);
  char c = 0;
  file.get(c);
  file.seekp(-offset_from_end, std::ios::end);
  file.put(char(c ^ 0x5a));
}

TEST(KernelCache, CorruptedEntryIsDetectedRemovedAndRebuilt) {
  TempDir dir;
  const KernelCacheKey key = sample_key();
  make_cache(dir.path()).store(key, sample_entry(4096, 3));
  KernelCache probe = make_cache(dir.path());
  flip_byte(probe.entry_path(key), 100);  // inside the payload

  const CacheFileInfo info = KernelCache::read_file(probe.entry_path(key), nullptr, false);
  EXPECT_FALSE(info.valid);
  EXPECT_NE(info.problem.find("checksum"), std::string::npos) << info.problem;

  KernelCache cache = make_cache(dir.path());
  int builds = 0;
  auto entry = cache.get_or_build(key, [&]() {
    ++builds;
    return sample_entry(4096, 3);
  });
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(cache.stats().bad_entries_removed, 1u);
  EXPECT_EQ(entry->payload, sample_entry(4096, 3).payload);
  EXPECT_TRUE(KernelCache::read_file(cache.entry_path(key), nullptr, false).valid);
}

TEST(KernelCache, CorruptedMetadataIsDetectedToo) {
  TempDir dir;
  KernelCache cache = make_cache(dir.path());
  cache.store(sample_key(), sample_entry(256, 3));
  const std::string path = cache.entry_path(sample_key());
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(104);  // first byte of the label
    file.put('X');
  }
  EXPECT_FALSE(KernelCache::read_file(path, nullptr, false).valid);
}

TEST(KernelCache, TruncatedEntriesAreDetectedAndRebuilt) {
  for (uintmax_t keep : {uintmax_t(0), uintmax_t(10), uintmax_t(103), uintmax_t(150), uintmax_t(2000)}) {
    TempDir dir;
    const KernelCacheKey key = sample_key();
    make_cache(dir.path()).store(key, sample_entry(4096, 9));
    KernelCache cache = make_cache(dir.path());
    fs::resize_file(cache.entry_path(key), keep);
    EXPECT_FALSE(KernelCache::read_file(cache.entry_path(key), nullptr, false).valid) << "kept " << keep;
    EXPECT_EQ(cache.find(key), nullptr) << "kept " << keep;
    EXPECT_FALSE(fs::exists(cache.entry_path(key)));
    bool built = false;
    cache.get_or_build(key, [] { return sample_entry(4096, 9); }, &built);
    EXPECT_TRUE(built);
    EXPECT_TRUE(KernelCache::read_file(cache.entry_path(key), nullptr, false).valid);
  }
}

TEST(KernelCache, AnEntryRenamedToAnotherKeyIsRejected) {
  TempDir dir;
  KernelCache cache = make_cache(dir.path());
  KernelCacheKey other = sample_key();
  other.source += "// other";
  cache.store(other, sample_entry(100, 1));
  fs::rename(cache.entry_path(other), cache.entry_path(sample_key()));
  cache.clear_memory();
  EXPECT_EQ(cache.find(sample_key()), nullptr);
  EXPECT_EQ(cache.stats().bad_entries_removed, 1u);
}

TEST(KernelCache, ConcurrentThreadsWithSeparateCachesAgree) {
  TempDir dir;
  const KernelCacheKey key = sample_key();
  std::vector<std::vector<uint8_t>> seen(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      KernelCache cache = make_cache(dir.path());
      for (int round = 0; round < 20; ++round) {
        cache.clear_memory();
        seen[i] = cache.get_or_build(key, [] { return sample_entry(200000, 5); })->payload;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& payload : seen) EXPECT_EQ(payload, sample_entry(200000, 5).payload);
  size_t files = 0;
  for (const auto& item : fs::directory_iterator(dir.path())) {
    ++files;
    EXPECT_EQ(item.path().filename().string().rfind(".tmp.", 0), std::string::npos) << "leftover temporary";
  }
  EXPECT_EQ(files, 1u);
}

TEST(KernelCache, ConcurrentProcessesNeverExposeHalfAFile) {
  // Writers rewrite the same entry with large payloads while readers read it in a loop; with
  // temporary-file-and-rename every read sees a complete entry (valid checksum) or none.
  TempDir dir;
  const std::string path = make_cache(dir.path()).entry_path(sample_key());
  const Sha256Digest key = sample_key().digest();
  std::vector<pid_t> children;
  for (int writer = 0; writer < 3; ++writer) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int round = 0; round < 25; ++round)
        KernelCache::write_file(path, key, sample_entry(1 << 19, uint8_t(writer * 50 + round)));
      _exit(0);
    }
    children.push_back(pid);
  }
  for (int reader = 0; reader < 2; ++reader) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int complete = 0, half = 0;
      for (int round = 0; round < 400; ++round) {
        if (!fs::exists(path)) continue;
        const CacheFileInfo info = KernelCache::read_file(path, &key, true);
        if (info.valid) ++complete;
        else if (info.problem != "cannot open") ++half;
      }
      _exit(half > 0 ? 1 : (complete > 0 ? 0 : 2));
    }
    children.push_back(pid);
  }
  for (size_t i = 0; i < children.size(); ++i) {
    int status = 0;
    waitpid(children[i], &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    if (i < 3) EXPECT_EQ(WEXITSTATUS(status), 0) << "writer " << i << " failed";
    else EXPECT_NE(WEXITSTATUS(status), 1) << "a reader saw a partial or corrupt entry";
  }
  EXPECT_TRUE(KernelCache::read_file(path, &key, false).valid);
}

TEST(KernelCache, ListShowsEntriesAndClearRemovesOnlyKvevictFiles) {
  TempDir dir;
  KernelCache cache = make_cache(dir.path());
  KernelCacheKey a = sample_key(), b = sample_key();
  b.source += "//b";
  cache.store(a, sample_entry(10, 1));
  cache.store(b, sample_entry(20, 2));
  { std::ofstream(dir.path() + "/keep-me.txt") << "not ours"; }
  { std::ofstream(dir.path() + "/" + std::string(64, 'f') + ".kvk") << "garbage"; }
  const auto files = cache.list();
  ASSERT_EQ(files.size(), 3u);
  int valid = 0;
  for (const auto& f : files) {
    if (f.valid) {
      ++valid;
      EXPECT_EQ(f.entry.label, "sample");
    } else {
      EXPECT_FALSE(f.problem.empty());
    }
  }
  EXPECT_EQ(valid, 2);
  EXPECT_EQ(cache.clear(), 3u);
  EXPECT_TRUE(cache.list().empty());
  EXPECT_TRUE(fs::exists(dir.path() + "/keep-me.txt"));
  EXPECT_EQ(cache.find(a), nullptr) << "clear must empty the memory cache too";
}

TEST(KernelCache, DisabledDiskKeepsEntriesInMemoryOnly) {
  TempDir dir;
  testing::ScopedEnv disable("KVEVICT_CACHE_DISABLE", "1");
  KernelCache cache = make_cache(dir.path());
  EXPECT_TRUE(cache.store(sample_key(), sample_entry(10, 1)));
  EXPECT_NE(cache.find(sample_key()), nullptr);
  EXPECT_FALSE(fs::exists(cache.entry_path(sample_key())));
}

TEST(KernelCache, DefaultDirectoryFollowsTheEnvironment) {
  {
    testing::ScopedEnv moved("KVEVICT_CACHE_DIR", "/some/where");
    EXPECT_EQ(KernelCache::default_dir(), "/some/where");
  }
  testing::ScopedEnv unset_dir("KVEVICT_CACHE_DIR", "");
  testing::ScopedEnv home("HOME", "/home/tester");
  EXPECT_EQ(KernelCache::default_dir(), "/home/tester/.cache/kvevict/kernels");
}

TEST(KernelCache, CompileCachedRunsNvrtcOnceThenLoadsFromDisk) {
  KVEVICT_REQUIRE_NVRTC();
  TempDir dir;
  NvrtcRequest request;
  request.name = "cake.cu";
  request.source = cake_indicator_source(200.0f, 5);
  request.arch = "sm_80";
  KernelCache first = make_cache(dir.path());
  const JitKernel compiled = compile_cached(request, first, "cake");
  EXPECT_FALSE(compiled.from_cache);
  EXPECT_TRUE(compile_cached(request, first, "cake").from_cache);
  KernelCache second = make_cache(dir.path());
  const JitKernel loaded = compile_cached(request, second, "cake");
  EXPECT_TRUE(loaded.from_cache);
  EXPECT_EQ(second.stats().disk_hits, 1u);
  EXPECT_EQ(loaded.entry->payload, compiled.entry->payload);
  request.options.push_back("-lineinfo");
  EXPECT_FALSE(compile_cached(request, second, "cake").from_cache) << "new options, new key";
}

TEST(KernelCache, CompileErrorsAreNotCached) {
  KVEVICT_REQUIRE_NVRTC();
  TempDir dir;
  KernelCache cache = make_cache(dir.path());
  NvrtcRequest request;
  request.name = "bad.cu";
  request.source = "__global__ void k() { nope(); }";
  EXPECT_THROW(compile_cached(request, cache, "bad"), CompileError);
  EXPECT_TRUE(cache.list().empty());
}

}  // namespace
}  // namespace kvevict::jit

namespace kvevict::jit {
namespace {

TEST(KernelCache, EverySingleByteCorruptionIsDetected) {
  // Flip each byte of a small entry in turn (and a random bit pattern): read_file must reject the
  // file every time, and never crash.
  testing::TempDir dir;
  KernelCache cache = make_cache(dir.path());
  cache.store(sample_key(), sample_entry(300, 4));
  const std::string path = cache.entry_path(sample_key());
  std::ifstream in(path, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  ASSERT_TRUE(KernelCache::read_file(path, nullptr, false).valid);
  for (size_t at = 0; at < good.size(); ++at) {
    std::string bad = good;
    bad[at] = char(bad[at] ^ (1 + at % 255));
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
    EXPECT_FALSE(KernelCache::read_file(path, nullptr, false).valid) << "byte " << at << " flipped";
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << good;
  EXPECT_TRUE(KernelCache::read_file(path, nullptr, false).valid);
}

}  // namespace
}  // namespace kvevict::jit
