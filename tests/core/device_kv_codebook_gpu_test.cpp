// SpindleKV's codebook append on the device (core/decode/cuda/device_kv_codebook.cu) against the
// host twin (device_kv_twin_codebook.cpp), which runs the same element bodies in order: after the
// same loads, appends and keeps, every stored word and position equal, and the news (new codes,
// their first indices, every logged entry) equal bit for bit. GPU only; skipped with the reason
// when the build has no CUDA or no usable device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/decode/device_kv_codebook_books.h"
#include "core/decode/device_kv_twin.h"
#include "core/decode/rope.h"
#include "device_kv_gpu_test_util.h"
#if defined(KVEVICT_HAVE_CUDA)
#include "core/decode/cuda/device_kv_cache.h"
#include "core/decode/cuda/device_memory.h"
#endif

namespace kvevict {
namespace {

#if defined(KVEVICT_HAVE_CUDA)

uint32_t bits(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

void expect_same_contents(const cuda::DeviceKvCache& device, const DeviceKvTwin& twin, const std::string& where) {
  const DeviceKvGeometry& g = twin.layout().geometry();
  for (int l = 0; l < g.n_layers; ++l)
    for (int h = 0; h < g.n_heads; ++h) {
      ASSERT_EQ(device.layout().length(l, h), twin.layout().length(l, h)) << where;
      const DeviceKvHeadContents d = device.read_head(l, h), t = twin.read_head(l, h);
      ASSERT_EQ(d.positions, t.positions) << where << ", layer " << l << " head " << h;
      ASSERT_EQ(d.keys, t.keys) << where << ", keys of layer " << l << " head " << h;
      ASSERT_EQ(d.values, t.values) << where << ", values of layer " << l << " head " << h;
    }
}

void expect_same_codes(const std::vector<float>& d, const std::vector<float>& t, const std::string& where) {
  ASSERT_EQ(d.size(), t.size()) << where;
  for (size_t i = 0; i < d.size(); ++i) ASSERT_EQ(bits(d[i]), bits(t[i])) << where << ", element " << i;
}

void expect_same_news(const DeviceCodebookNews& d, const DeviceCodebookNews& t, const std::string& where) {
  ASSERT_EQ(d.books.size(), t.books.size()) << where;
  for (size_t b = 0; b < d.books.size(); ++b) {
    const std::string book = where + ", book " + std::to_string(b);
    EXPECT_EQ(d.books[b].first_key_code, t.books[b].first_key_code) << book;
    EXPECT_EQ(d.books[b].first_value_code, t.books[b].first_value_code) << book;
    expect_same_codes(d.books[b].key_codes, t.books[b].key_codes, book + " key codes");
    expect_same_codes(d.books[b].value_codes, t.books[b].value_codes, book + " value codes");
  }
  ASSERT_EQ(d.entries.size(), t.entries.size()) << where;
  for (size_t h = 0; h < d.entries.size(); ++h) {
    ASSERT_EQ(d.entries[h].size(), t.entries[h].size()) << where << ", head " << h;
    for (size_t e = 0; e < d.entries[h].size(); ++e) {
      const CodebookEntry &x = d.entries[h][e], &y = t.entries[h][e];
      const std::string entry = where + ", head " + std::to_string(h) + " entry " + std::to_string(e);
      ASSERT_EQ(x.key_index, y.key_index) << entry;
      ASSERT_EQ(x.value_index, y.value_index) << entry;
      ASSERT_EQ(bits(x.key_norm), bits(y.key_norm)) << entry << ": " << x.key_norm << " vs " << y.key_norm;
      ASSERT_EQ(bits(x.value_norm), bits(y.value_norm)) << entry << ": " << x.value_norm << " vs " << y.value_norm;
    }
  }
}

std::vector<float> random_unit(int d, std::mt19937& rng) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(d));
  double s = 0;
  for (float& x : v) {
    x = n(rng);
    s += double(x) * x;
  }
  for (float& x : v) x = static_cast<float>(x / std::sqrt(s));
  return v;
}

// The directions a layer's rows are drawn near, per book: its loaded codes and the fresh rows
// appended since (pre-RoPE for keys), so that rows match old codes, codes the device added, or none.
struct Directions {
  std::vector<std::vector<float>> key, value;
};

// A load of `codes` random unit codes per book (code 2 a copy of code 0: a tie, won by the lower
// index), thresholds varying by head; `dirs` restarts from them.
DeviceCodebookLoad random_load(int n_heads, int d, bool shared, int codes, std::mt19937& rng,
                               std::vector<Directions>& dirs) {
  DeviceCodebookLoad load;
  load.shared = shared;
  dirs.assign(shared ? 1 : static_cast<size_t>(n_heads), {});
  for (Directions& book_dirs : dirs) {
    DeviceCodebookLoad::Book book;
    for (auto* half : {&book_dirs.key, &book_dirs.value}) {
      for (int c = 0; c < codes; ++c) half->push_back(c == 2 ? (*half)[0] : random_unit(d, rng));
      std::vector<float>& flat = half == &book_dirs.key ? book.key_codes : book.value_codes;
      for (const auto& code : *half) flat.insert(flat.end(), code.begin(), code.end());
    }
    load.books.push_back(std::move(book));
  }
  for (int h = 0; h < n_heads; ++h) {
    load.theta_key.push_back(0.9 + 0.02 * h);
    load.theta_value.push_back(0.85 + 0.03 * h);
  }
  return load;
}

// A block of `rows` rows ([rows][stride] f32, post-RoPE keys; padding columns hold 7): per (row,
// head, key or value) a vector near one of the book's directions (scaled, with noise 1e-3 of its
// scale, or exactly twice it), a copy of head 0's vector of the row (which head 0 may just have
// made a code of the shared book), zero, or a fresh direction. `fresh_only`: fresh directions only.
struct Block {
  std::vector<float> keys, values;
};
Block random_block(int rows, int n_heads, int d, int64_t stride, int32_t first_position, const Rope& rope, bool shared,
                   std::vector<Directions>& dirs, std::mt19937& rng, bool fresh_only = false) {
  Block out;
  out.keys.assign(static_cast<size_t>(rows) * stride, 7.0f);
  out.values.assign(out.keys.size(), 7.0f);
  std::uniform_real_distribution<float> scale(0.5f, 3.0f);
  std::normal_distribution<float> noise(0.0f, 1e-3f);
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < n_heads; ++h)
      for (const bool key : {true, false}) {
        std::vector<std::vector<float>>& near = key ? dirs[shared ? 0 : h].key : dirs[shared ? 0 : h].value;
        float* row = (key ? out.keys : out.values).data() + static_cast<size_t>(r) * stride + static_cast<size_t>(h) * d;
        float* head0 = (key ? out.keys : out.values).data() + static_cast<size_t>(r) * stride;
        std::vector<float> v(static_cast<size_t>(d), 0.0f);
        const unsigned kind = fresh_only ? 9 : rng() % 12;
        if (kind < 4 && !near.empty()) {
          const std::vector<float>& dir = near[rng() % near.size()];
          const float s = scale(rng);
          for (int i = 0; i < d; ++i) v[size_t(i)] = dir[size_t(i)] * s + noise(rng) * s;
        } else if (kind == 4 && !near.empty()) {
          const std::vector<float>& dir = near[rng() % near.size()];
          for (int i = 0; i < d; ++i) v[size_t(i)] = 2.0f * dir[size_t(i)];
        } else if (kind < 7 && h > 0) {  // the stored copy of head 0's row: already post-RoPE
          std::copy(head0, head0 + d, row);
          continue;
        } else if (kind == 7) {
          // zero: no norm, a zero code
        } else {
          v = random_unit(d, rng);
          near.push_back(v);
          const float s = scale(rng);
          for (float& x : v) x *= s;
        }
        if (key) rope.forward(v.data(), first_position + r);
        std::copy(v.begin(), v.end(), row);
      }
  return out;
}

// The default RoPE of head_dim d with its table reserved for `positions` positions.
Rope rope_table(int d, int positions) {
  ModelConfig mc;
  mc.head_dim = d;
  Rope rope(mc);
  rope.reserve(positions);
  return rope;
}

// One cache and its twin, driven alike.
struct Pair {
  cuda::DeviceKvCache device;
  DeviceKvTwin twin;
  cuda::DeviceArray<float> keys, values;  // the block on the device, as the decoder leaves it
  Pair(const DeviceKvGeometry& g, const DeviceKvGrowthPolicy& p) : device(g, p), twin(g, p) {}

  void load(int layer, const DeviceCodebookLoad& load) {
    device.load_codebooks(layer, load);
    twin.load_codebooks(layer, load);
  }
  // Appends the block to both (raw rows), then runs the codebook append over it on both.
  void append(int layer, int rows, const Block& b, int64_t stride, int32_t first_position, const RopeTableView& rope) {
    const std::vector<int32_t> first(static_cast<size_t>(twin.layout().geometry().n_heads), first_position);
    device.append_from_host(layer, rows, b.keys.data(), b.values.data(), stride, first);
    twin.append(layer, rows, b.keys.data(), b.values.data(), stride, first);
    keys.upload(b.keys);
    values.upload(b.values);
    device.codebook_append(layer, rows, keys.data(), values.data(), stride, first_position, rope);
    twin.codebook_append(layer, rows, b.keys.data(), b.values.data(), stride, first_position, rope);
  }
  // Both news, compared; returns the twin's.
  DeviceCodebookNews news(int layer, const std::string& where) {
    const DeviceCodebookNews d = device.codebook_news(layer), t = twin.codebook_news(layer);
    expect_same_news(d, t, where);
    return t;
  }
};

// Entries of a news that matched a code the device held before it (old) or took a code added
// since (new), keys and values together.
void count_matches(const DeviceCodebookNews& news, bool shared, int& old_codes, int& new_codes) {
  for (size_t h = 0; h < news.entries.size(); ++h) {
    const DeviceCodebookNews::Book& b = news.books[shared ? 0 : h];
    for (const CodebookEntry& e : news.entries[h]) {
      (e.key_index < b.first_key_code ? old_codes : new_codes) += 1;
      (e.value_index < b.first_value_code ? old_codes : new_codes) += 1;
    }
  }
}

#endif

class DeviceKvCodebookGpu : public ::testing::TestWithParam<KvType> {};

// Random blocks of 1..4 rows through per-head books (layer 0) and a shared book (layer 1), then
// the layouts swapped (a fresh load), with keeps between (ragged, relocated heads), partial loads
// after some news (codes replaced from an index and added), and the RoPE table grown on the way.
TEST_P(DeviceKvCodebookGpu, AppendsMatchTheHostTwinBitForBit) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  for (int d : {8, 64}) {
    const DeviceKvGeometry g{2, 3, d, GetParam()};
    const int64_t stride = int64_t(g.n_heads) * d + (d == 8 ? 4 : 0);
    const std::string config = "head_dim " + std::to_string(d);
    ModelConfig mc;
    mc.head_dim = d;
    mc.rope_style = d == 8 ? RopeStyle::AdjacentPairs : RopeStyle::HalfSplit;
    Rope rope(mc);
    rope.reserve(16);
    Pair p(g, {.row_quantum = 4, .growth = 1.25});
    std::mt19937 rng(71u + static_cast<uint32_t>(d));
    std::vector<std::vector<Directions>> dirs(size_t(g.n_layers));
    std::vector<bool> shared{false, true};
    for (int l = 0; l < g.n_layers; ++l) p.load(l, random_load(g.n_heads, d, shared[size_t(l)], 5, rng, dirs[size_t(l)]));
    std::vector<int32_t> position(size_t(g.n_layers), 0);
    int old_codes = 0, new_codes = 0;
    for (int round = 0; round < 30; ++round) {
      const std::string where = config + ", round " + std::to_string(round);
      if (round == 15)  // another book layout: the device starts fresh
        for (int l = 0; l < g.n_layers; ++l) {
          shared[size_t(l)] = !shared[size_t(l)];
          p.load(l, random_load(g.n_heads, d, shared[size_t(l)], 4, rng, dirs[size_t(l)]));
        }
      for (int l = 0; l < g.n_layers; ++l) {
        const int rows = 1 + static_cast<int>(rng() % 4);
        const int32_t first = position[size_t(l)];
        if (first + rows > rope.table().positions) rope.reserve(2 * (first + rows));  // the device copy follows
        const Block b = random_block(rows, g.n_heads, d, stride, first, rope, shared[size_t(l)], dirs[size_t(l)], rng);
        p.append(l, rows, b, stride, first, rope.table());
        position[size_t(l)] += rows;
        if (round % 4 == 3) {  // a keep: ragged heads, the next block's rows elsewhere
          std::vector<std::vector<int>> keep(size_t(g.n_heads));
          for (int h = 0; h < g.n_heads; ++h)
            for (int t = 0; t < p.twin.layout().length(l, h); ++t)
              if (rng() % 3 != 0) keep[size_t(h)].push_back(t);
          p.device.compact(l, keep);
          p.twin.compact(l, keep);
        }
      }
      expect_same_contents(p.device, p.twin, where);
      if (HasFatalFailure()) return;
      if (round % 3 != 2) continue;
      for (int l = 0; l < g.n_layers; ++l) {
        const DeviceCodebookNews news = p.news(l, where + ", news of layer " + std::to_string(l));
        if (HasFatalFailure()) return;
        count_matches(news, shared[size_t(l)], old_codes, new_codes);
        if (round % 6 != 5) continue;
        // A partial load: each book's last code replaced and one added (the host's own codes).
        DeviceCodebookLoad load;
        load.shared = shared[size_t(l)];
        for (size_t b = 0; b < news.books.size(); ++b) {
          const DeviceCodebookNews::Book& nb = news.books[b];
          const int32_t keys = nb.first_key_code + static_cast<int32_t>(nb.key_codes.size() / size_t(d));
          const int32_t values = nb.first_value_code + static_cast<int32_t>(nb.value_codes.size() / size_t(d));
          DeviceCodebookLoad::Book book;
          book.first_key_code = keys > 0 ? keys - 1 : 0;
          book.first_value_code = values > 0 ? values - 1 : 0;
          for (int c = 0; c < 2; ++c) {
            const std::vector<float> k = random_unit(d, rng), v = random_unit(d, rng);
            book.key_codes.insert(book.key_codes.end(), k.begin(), k.end());
            book.value_codes.insert(book.value_codes.end(), v.begin(), v.end());
            dirs[size_t(l)][b].key.push_back(k);
            dirs[size_t(l)][b].value.push_back(v);
          }
          load.books.push_back(std::move(book));
        }
        for (int h = 0; h < g.n_heads; ++h) {
          load.theta_key.push_back(0.9);
          load.theta_value.push_back(0.9);
        }
        p.load(l, load);
      }
    }
    // The rows really took both paths: codes the device held, and codes it added.
    EXPECT_GT(old_codes, 0) << config;
    EXPECT_GT(new_codes, 0) << config;
  }
#endif
}

// From one code per book, rows that all become new codes (theta 0.99, fresh directions), with no
// news for 20 rounds: the codes and the log grow several times while held, past one block's 256
// threads for the shared book; then rows repeating earlier ones match codes across the whole range.
TEST_P(DeviceKvCodebookGpu, GrowsItsCodesAndLogKeepingThem) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  for (const bool shared : {false, true}) {
    const int d = 64;
    const DeviceKvGeometry g{1, 3, d, GetParam()};
    const int64_t stride = int64_t(g.n_heads) * d;
    const std::string config = shared ? "shared book" : "per-head books";
    const Rope rope = rope_table(d, 512);
    Pair p(g, {.row_quantum = 4, .growth = 1.25});
    std::mt19937 rng(shared ? 5u : 6u);
    std::vector<Directions> dirs;
    DeviceCodebookLoad load = random_load(g.n_heads, d, shared, 1, rng, dirs);
    for (double& t : load.theta_key) t = 0.99;
    for (double& t : load.theta_value) t = 0.99;
    p.load(0, load);
    int32_t position = 0;
    std::vector<int32_t> expected_codes(dirs.size(), 1);
    std::vector<Block> earlier;
    for (int round = 0; round < 40; ++round) {
      const std::string where = config + ", round " + std::to_string(round);
      const int rows = 4;
      Block b;
      if (round < 30) {
        b = random_block(rows, g.n_heads, d, stride, position, rope, shared, dirs, rng, /*fresh_only=*/true);
        for (int32_t& n : expected_codes) n += rows * (shared ? g.n_heads : 1);
        earlier.push_back(b);
      } else {  // an earlier block again, at a new position: every row matches the code it made
        const Block& e = earlier[rng() % earlier.size()];
        b = e;
        const int32_t then = static_cast<int32_t>(&e - earlier.data()) * rows;
        for (int r = 0; r < rows; ++r)
          for (int h = 0; h < g.n_heads; ++h) {  // moved from its old positions to the new ones
            float* k = b.keys.data() + size_t(r) * stride + size_t(h) * d;
            rope.inverse(k, then + r);
            rope.forward(k, position + r);
          }
      }
      p.append(0, rows, b, stride, position, rope.table());
      position += rows;
      expect_same_contents(p.device, p.twin, where);
      if (HasFatalFailure()) return;
      if (round == 19 || round == 39) {
        const DeviceCodebookNews news = p.news(0, where);
        if (HasFatalFailure()) return;
        for (size_t book = 0; book < news.books.size(); ++book) {
          const DeviceCodebookNews::Book& nb = news.books[book];
          EXPECT_EQ(nb.first_key_code + static_cast<int32_t>(nb.key_codes.size() / d), expected_codes[book]) << where;
          EXPECT_EQ(nb.first_value_code + static_cast<int32_t>(nb.value_codes.size() / d), expected_codes[book])
              << where;
        }
        EXPECT_EQ(news.entries[0].size(), 80u) << where;  // 20 rounds of 4 rows since the load or news
      }
    }
  }
#endif
}

// Books longer than the device's scan chunk (1024 codes, device_kv_codebook_scan.h): about 2600
// codes per book, both scopes, with exact ties across chunks (codes 1100, 2100 and 2590 copies of
// codes 7, 5 and 1500: the lower index wins); rows near codes anywhere in the book and fresh ones;
// then a reload of the same layout with 1400 codes, which keeps the laid capacity (about 2990, the
// need being over half of it: DeviceCodebookBooks::planned_capacity), so a whole chunk lies past
// the count; further appends. The twin splits its scan into
// chunks of 1 to 4 codes; every word, position, code and entry must still agree.
TEST_P(DeviceKvCodebookGpu, BooksLongerThanAScanChunkMatchTheTwin) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  for (const bool shared : {false, true}) {
    const int d = 64;
    const DeviceKvGeometry g{1, 3, d, GetParam()};
    const int64_t stride = int64_t(g.n_heads) * d;
    const std::string config = shared ? "shared book" : "per-head books";
    const Rope rope = rope_table(d, 256);
    Pair p(g, {.row_quantum = 4, .growth = 1.25});
    std::mt19937 rng(shared ? 17u : 18u);
    std::vector<Directions> dirs;
    const auto long_load = [&](int codes) {
      DeviceCodebookLoad load = random_load(g.n_heads, d, shared, codes, rng, dirs);
      for (size_t b = 0; b < load.books.size(); ++b)
        for (auto [to, from] : {std::pair{1100, 7}, std::pair{2100, 5}, std::pair{2590, 1500}}) {
          if (to >= codes) continue;
          for (std::vector<float>* flat : {&load.books[b].key_codes, &load.books[b].value_codes})
            std::copy_n(flat->begin() + size_t(from) * d, d, flat->begin() + size_t(to) * d);
          dirs[b].key[size_t(to)] = dirs[b].key[size_t(from)];
          dirs[b].value[size_t(to)] = dirs[b].value[size_t(from)];
        }
      return load;
    };
    p.load(0, long_load(2600));
    int32_t position = 0;
    int old_codes = 0, new_codes = 0;
    for (int round = 0; round < 24; ++round) {
      const std::string where = config + ", round " + std::to_string(round);
      if (round == 12) p.load(0, long_load(1400));  // the same layout, fewer codes
      const int rows = 1 + static_cast<int>(rng() % 4);
      const Block b = random_block(rows, g.n_heads, d, stride, position, rope, shared, dirs, rng);
      p.append(0, rows, b, stride, position, rope.table());
      position += rows;
      expect_same_contents(p.device, p.twin, where);
      if (HasFatalFailure()) return;
      if (round % 4 == 3) {
        count_matches(p.news(0, where), shared, old_codes, new_codes);
        if (HasFatalFailure()) return;
      }
    }
    EXPECT_GT(old_codes, 0) << config;
    EXPECT_GT(new_codes, 0) << config;
  }
#endif
}

// What the twin refuses, the device refuses alike, and a refused append leaves nothing behind.
TEST_P(DeviceKvCodebookGpu, RefusesWhatTheTwinRefuses) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  const int d = 8;
  const DeviceKvGeometry g{2, 3, d, GetParam()};
  const int64_t stride = int64_t(g.n_heads) * d;
  ModelConfig mc;
  mc.head_dim = d;
  Rope rope(mc);
  rope.reserve(8);
  Pair p(g, {});
  std::mt19937 rng(3);
  std::vector<Directions> dirs(size_t(g.n_heads));
  const Block b = random_block(2, g.n_heads, d, stride, 0, rope, false, dirs, rng, /*fresh_only=*/true);
  const std::vector<int32_t> first(size_t(g.n_heads), 0);
  p.device.append_from_host(0, 2, b.keys.data(), b.values.data(), stride, first);
  p.twin.append(0, 2, b.keys.data(), b.values.data(), stride, first);
  p.keys.upload(b.keys);
  p.values.upload(b.values);
  const float* dk = p.keys.data();
  const float* dv = p.values.data();
  const RopeTableView table = rope.table();

  // No book in the layer; a layer outside the cache.
  EXPECT_THROW(p.device.codebook_append(0, 2, dk, dv, stride, 0, table), std::logic_error);
  EXPECT_THROW(p.twin.codebook_append(0, 2, b.keys.data(), b.values.data(), stride, 0, table), std::logic_error);
  EXPECT_THROW(p.device.codebook_news(2), std::invalid_argument);
  EXPECT_THROW(p.twin.codebook_news(2), std::invalid_argument);
  expect_same_news(p.device.codebook_news(1), p.twin.codebook_news(1), "a layer without books");

  // Two books for three heads.
  DeviceCodebookLoad bad = random_load(g.n_heads, d, false, 2, rng, dirs);
  bad.books.pop_back();
  EXPECT_THROW(p.device.load_codebooks(0, bad), std::invalid_argument);
  EXPECT_THROW(p.twin.load_codebooks(0, bad), std::invalid_argument);

  p.load(0, random_load(g.n_heads, d, false, 2, rng, dirs));
  // More rows than the heads hold; positions past the RoPE table; a source stride too short.
  EXPECT_THROW(p.device.codebook_append(0, 3, dk, dv, stride, 0, table), std::logic_error);
  EXPECT_THROW(p.twin.codebook_append(0, 3, b.keys.data(), b.values.data(), stride, 0, table), std::logic_error);
  EXPECT_THROW(p.device.codebook_append(0, 2, dk, dv, stride, 7, table), std::invalid_argument);
  EXPECT_THROW(p.twin.codebook_append(0, 2, b.keys.data(), b.values.data(), stride, 7, table), std::invalid_argument);
  EXPECT_THROW(p.device.codebook_append(0, 2, dk, dv, stride - 1, 0, table), std::invalid_argument);
  EXPECT_THROW(p.twin.codebook_append(0, 2, b.keys.data(), b.values.data(), stride - 1, 0, table),
               std::invalid_argument);

  // Nothing was logged by the refusals; a valid append then matches.
  p.device.codebook_append(0, 2, dk, dv, stride, 0, table);
  p.twin.codebook_append(0, 2, b.keys.data(), b.values.data(), stride, 0, table);
  expect_same_contents(p.device, p.twin, "after the refusals");
  const DeviceCodebookNews news = p.news(0, "after the refusals");
  ASSERT_EQ(news.entries.size(), size_t(g.n_heads));
  EXPECT_EQ(news.entries[0].size(), 2u);
#endif
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DeviceKvCodebookGpu, ::testing::Values(KvType::F16, KvType::BF16, KvType::F32),
                         [](const auto& info) { return std::string(kv_type_name(info.param)); });

}  // namespace
}  // namespace kvevict
