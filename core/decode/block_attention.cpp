// Block attention on the CPU, in two shapes:
//  - a block of queries (prefill): per (KV head, query tile) the G query heads that share the KV head
//    are stacked into one matrix, and keys are visited in blocks with an online softmax, so a tile
//    only ever holds [G * tile][key block] scores (FlashAttention's recurrence, with BLAS products);
//  - one query (decode): per (KV head, key chunk), keys and values are read once for all G heads and
//    the chunks' partial softmaxes are merged, so both threads stream the cache.
// Accumulated attention (column sums) needs the final normaliser, so it costs a second pass over the
// scores; it is only done when an observer asks.
// Heads are the cache's stored heads: one per KV head (G query heads each), or one per query head
// when the cache is unfolded (G = 1 then; args.group must say so).
// A codebook-backed head (SpindleKV), and a dense head of an F16/BF16 cache, is converted one key
// block / decode chunk at a time into per-thread f32 scratch (the conversion is a few vector
// instructions per row, cheaper than the bytes it saves reading), so the cache itself stays
// compressed and every product accumulates in f32.
#include "core/decode/block_attention.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "core/decode/simd_math.h"

namespace kvevict {

namespace {

constexpr int kQueryTile = 128;
constexpr int kKeyBlock = 256;
constexpr int kDecodeChunk = 512;  // keys per work item when decoding
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

using simd::exp_nonpositive;

struct Shape {
  int d;        // head dim
  int stride;   // floats per token row of queries/outputs
  int old;      // cache entries before the block (same for every KV head: the block appends to all)
  float scale;  // 1 / sqrt(d)
};

struct Scratch {
  std::vector<float> q, o, s, m, l;
  std::vector<float> k, v;  // reconstructed key / value block of a codebook head
};

// Rows [t0, t1) of the head's keys (values) as f32: a pointer into the dense arrays of an F32
// cache, or the rows converted / reconstructed into `tile`.
bool stored_as_f32(const KVCache& cache, int layer, int kv) {
  return cache.kv_type() == KvType::F32 && !cache.is_codebook(layer, kv);
}

const float* key_rows(const KVCache& cache, int layer, int kv, int t0, int t1, std::vector<float>& tile) {
  if (stored_as_f32(cache, layer, kv)) return cache.keys(layer, kv) + static_cast<size_t>(t0) * cache.head_dim();
  tile.resize(static_cast<size_t>(t1 - t0) * cache.head_dim());
  cache.reconstruct_keys(layer, kv, t0, t1, tile.data());
  return tile.data();
}

const float* value_rows(const KVCache& cache, int layer, int kv, int t0, int t1, std::vector<float>& tile) {
  if (stored_as_f32(cache, layer, kv)) return cache.values(layer, kv) + static_cast<size_t>(t0) * cache.head_dim();
  tile.resize(static_cast<size_t>(t1 - t0) * cache.head_dim());
  cache.reconstruct_values(layer, kv, t0, t1, tile.data());
  return tile.data();
}

// Per-thread column sums, [n_heads][len of the head's KV head].
using ColumnSums = std::vector<std::vector<float>>;

// Prefill: query tile [i0, i1) of the G heads of KV head `kv`.
void prefill_tile(const KVCache& cache, const BlockAttentionArgs& a, const Shape& sh, int kv, int i0, int i1, Scratch& w,
                  ColumnSums* sums) {
  const int d = sh.d, G = a.group, T = i1 - i0, M = G * T;
  const int n_keys = sh.old + i1;  // keys visible to the tile's last query
  w.q.resize(static_cast<size_t>(M) * d);
  w.o.assign(static_cast<size_t>(M) * d, 0.0f);
  w.s.resize(static_cast<size_t>(M) * kKeyBlock);
  w.m.assign(M, kNegInf);
  w.l.assign(M, 0.0f);
  for (int g = 0; g < G; ++g) {
    const int h = kv * G + g;
    for (int r = 0; r < T; ++r) {
      std::memcpy(w.q.data() + static_cast<size_t>(g * T + r) * d,
                  a.queries + static_cast<size_t>(i0 + r) * sh.stride + static_cast<size_t>(h) * d, d * sizeof(float));
    }
  }
  // Row R = g * T + r is query i0 + r of head kv * G + g; it sees keys [0, old + i0 + r].
  auto visible_in_block = [&](int R, int k0, int kb) { return std::clamp(sh.old + i0 + R % T + 1 - k0, 0, kb); };

  for (int k0 = 0; k0 < n_keys; k0 += kKeyBlock) {
    const int kb = std::min(kKeyBlock, n_keys - k0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, kb, d, sh.scale, w.q.data(), d,
                key_rows(cache, a.layer, kv, k0, k0 + kb, w.k), d, 0.0f, w.s.data(), kb);
    for (int R = 0; R < M; ++R) {
      float* s = w.s.data() + static_cast<size_t>(R) * kb;
      const int valid = visible_in_block(R, k0, kb);
      if (valid == 0) {
        std::fill(s, s + kb, 0.0f);
        continue;
      }
      const float new_max = std::max(w.m[R], simd::max(s, valid));
      const float correction = w.m[R] == kNegInf ? 0.0f : exp_nonpositive(w.m[R] - new_max);
      const float sum = simd::exp_shift_sum(s, valid, new_max);
      std::fill(s + valid, s + kb, 0.0f);
      w.m[R] = new_max;
      w.l[R] = w.l[R] * correction + sum;
      if (correction != 1.0f) simd::scale(w.o.data() + static_cast<size_t>(R) * d, d, correction);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, d, kb, 1.0f, w.s.data(), kb,
                value_rows(cache, a.layer, kv, k0, k0 + kb, w.v), d, 1.0f, w.o.data(), d);
  }

  for (int g = 0; g < G; ++g) {
    const int h = kv * G + g;
    for (int r = 0; r < T; ++r) {
      const int R = g * T + r;
      const float inv = 1.0f / w.l[R];
      const float* o = w.o.data() + static_cast<size_t>(R) * d;
      float* out = a.out + static_cast<size_t>(i0 + r) * sh.stride + static_cast<size_t>(h) * d;
      for (int j = 0; j < d; ++j) out[j] = o[j] * inv;
    }
  }

  if (!sums) return;
  // Second pass: the final (max, normaliser) of every row turn scores into probabilities.
  for (int k0 = 0; k0 < n_keys; k0 += kKeyBlock) {
    const int kb = std::min(kKeyBlock, n_keys - k0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, kb, d, sh.scale, w.q.data(), d,
                key_rows(cache, a.layer, kv, k0, k0 + kb, w.k), d, 0.0f, w.s.data(), kb);
    for (int R = 0; R < M; ++R) {
      const int valid = visible_in_block(R, k0, kb);
      const float* s = w.s.data() + static_cast<size_t>(R) * kb;
      float* column = (*sums)[kv * G + R / T].data() + k0;
      simd::exp_shift_scale_add(s, valid, w.m[R], 1.0f / w.l[R], column);
    }
  }
}

// Decode: keys [t0, t1) of KV head `kv` for its G heads' single queries. Leaves, per head g,
// exp(score - chunk max) in probs[g][t], and the chunk's max, sum and unnormalised output.
struct DecodePartial {
  std::vector<float> max, sum, out;  // [G], [G], [G][d]
};

void decode_chunk(const KVCache& cache, const BlockAttentionArgs& a, const Shape& sh, int kv, int t0, int t1,
                  std::vector<std::vector<float>>& probs, DecodePartial& part) {
  const int d = sh.d, G = a.group;
  // A dense F16/BF16 head is converted one row at a time into an L1-sized buffer (the row is then
  // used by all G heads); a codebook head's chunk is reconstructed into this thread's tiles.
  const bool per_row = cache.kv_type() != KvType::F32 && !cache.is_codebook(a.layer, kv);
  static thread_local std::vector<float> key_tile, value_tile, row;
  const float* keys = nullptr;
  const float* values = nullptr;
  const KvRows* stored_keys = per_row ? &cache.stored_keys(a.layer, kv) : nullptr;
  const KvRows* stored_values = per_row ? &cache.stored_values(a.layer, kv) : nullptr;
  if (per_row) {
    row.resize(d);
  } else {
    keys = key_rows(cache, a.layer, kv, t0, t1, key_tile);
    values = value_rows(cache, a.layer, kv, t0, t1, value_tile);
  }
  auto row_of = [&](const KvRows* stored, const float* rows, int t) -> const float* {
    if (!stored) return rows + static_cast<size_t>(t - t0) * d;
    kv_to_f32(stored->type(), stored->bits16() + static_cast<size_t>(t) * d, row.data(), d);
    return row.data();
  };
  part.max.assign(G, kNegInf);
  part.sum.assign(G, 0.0f);
  part.out.assign(static_cast<size_t>(G) * d, 0.0f);
  for (int t = t0; t < t1; ++t) {  // each key row is read once for all G queries
    const float* k = row_of(stored_keys, keys, t);
    for (int g = 0; g < G; ++g) {
      const float s = sh.scale * simd::dot(a.queries + static_cast<size_t>(kv * G + g) * d, k, d);
      probs[kv * G + g][t] = s;
      part.max[g] = std::max(part.max[g], s);
    }
  }
  for (int g = 0; g < G; ++g) {
    float* p = probs[kv * G + g].data();
    part.sum[g] = simd::exp_shift_sum(p + t0, t1 - t0, part.max[g]);
  }
  for (int t = t0; t < t1; ++t) {
    const float* v = row_of(stored_values, values, t);
    for (int g = 0; g < G; ++g) {
      simd::axpy(probs[kv * G + g][t], v, part.out.data() + static_cast<size_t>(g) * d, d);
    }
  }
}

struct DecodeItem {
  int kv, t0, t1;
};

// Heads may be ragged after eviction: each KV head's length gives its own chunks.
void decode_attention(const KVCache& cache, const BlockAttentionArgs& a, float scale) {
  const int n_kv = cache.n_stored_heads(), G = a.group, d = cache.head_dim();
  std::vector<DecodeItem> items;
  std::vector<int> first_item(n_kv + 1);
  double macs = 0;
  for (int kv = 0; kv < n_kv; ++kv) {
    first_item[kv] = static_cast<int>(items.size());
    const int len = cache.length(a.layer, kv);
    for (int t0 = 0; t0 < len; t0 += kDecodeChunk) items.push_back({kv, t0, std::min(len, t0 + kDecodeChunk)});
    macs += 2.0 * G * len * d;
  }
  first_item[n_kv] = static_cast<int>(items.size());
  const int n_items = static_cast<int>(items.size());
  const int threads = macs < (1 << 18) ? 1 : std::max(1, std::min(omp_get_max_threads(), n_items));
  // Scores, then exp(score - chunk max), per query head over its KV head's cache.
  // Kept between calls to avoid reallocating; named through a plain reference because inside the
  // parallel region a thread_local name would mean each worker's own (empty) copy.
  static thread_local std::vector<std::vector<float>> probs_storage;
  std::vector<std::vector<float>>& probs = probs_storage;
  probs.resize(a.n_heads);
  for (int h = 0; h < a.n_heads; ++h) probs[h].resize(cache.length(a.layer, h / G));
  std::vector<DecodePartial> parts(n_items);
  const Shape sh{d, a.n_heads * d, 0, scale};
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int i = 0; i < n_items; ++i) decode_chunk(cache, a, sh, items[i].kv, items[i].t0, items[i].t1, probs, parts[i]);

  if (a.column_sums) a.column_sums->assign(a.n_heads, {});
  std::vector<float> weight;
  for (int kv = 0; kv < n_kv; ++kv) {
    const int c0 = first_item[kv], c1 = first_item[kv + 1];
    for (int g = 0; g < G; ++g) {
      const int h = kv * G + g;
      float max = kNegInf;
      for (int c = c0; c < c1; ++c) max = std::max(max, parts[c].max[g]);
      float total = 0.0f;
      weight.assign(c1 - c0, 0.0f);
      for (int c = c0; c < c1; ++c) {
        weight[c - c0] = exp_nonpositive(parts[c].max[g] - max);
        total += parts[c].sum[g] * weight[c - c0];
      }
      float* out = a.out + static_cast<size_t>(h) * d;
      std::fill(out, out + d, 0.0f);
      for (int c = c0; c < c1; ++c) {
        const float f = weight[c - c0] / total;
        const float* o = parts[c].out.data() + static_cast<size_t>(g) * d;
        for (int j = 0; j < d; ++j) out[j] += f * o[j];
      }
      if (a.column_sums) {
        std::vector<float>& column = (*a.column_sums)[h];
        column.resize(probs[h].size());
        for (int c = c0; c < c1; ++c) {
          const float f = weight[c - c0] / total;
          for (int t = items[c].t0; t < items[c].t1; ++t) column[t] = probs[h][t] * f;
        }
      }
    }
  }
}

void prefill_attention(const KVCache& cache, const BlockAttentionArgs& a, float scale) {
  const int n_kv = cache.n_stored_heads(), d = cache.head_dim();
  const int tiles = (a.n + kQueryTile - 1) / kQueryTile;
  const int n_items = n_kv * tiles;
  double macs = 0;
  for (int kv = 0; kv < n_kv; ++kv) macs += 2.0 * a.group * a.n * cache.length(a.layer, kv) * d;
  const int threads = macs < (1 << 18) ? 1 : std::max(1, std::min(omp_get_max_threads(), n_items));

  // Per-thread column sums, reduced at the end, so tiles of one head can run on different threads.
  std::vector<ColumnSums> partial;
  if (a.column_sums) {
    partial.assign(threads, ColumnSums(a.n_heads));
    for (ColumnSums& per_thread : partial) {
      for (int h = 0; h < a.n_heads; ++h) per_thread[h].assign(cache.length(a.layer, h / a.group), 0.0f);
    }
  }
#pragma omp parallel num_threads(threads)
  {
    Scratch scratch;
    const int me = omp_get_thread_num();
    // Late tiles see the most keys: hand them out first so the last items are the short ones.
#pragma omp for schedule(dynamic, 1)
    for (int item = 0; item < n_items; ++item) {
      const int tile = tiles - 1 - item / n_kv;
      const int kv = item % n_kv;
      const Shape sh{d, a.n_heads * d, cache.length(a.layer, kv) - a.n, scale};
      const int i0 = tile * kQueryTile, i1 = std::min(a.n, i0 + kQueryTile);
      prefill_tile(cache, a, sh, kv, i0, i1, scratch, a.column_sums ? &partial[me] : nullptr);
    }
  }
  if (a.column_sums) {
    a.column_sums->assign(a.n_heads, {});
    for (int h = 0; h < a.n_heads; ++h) {
      std::vector<float>& sums = (*a.column_sums)[h];
      sums = std::move(partial[0][h]);
      for (int t = 1; t < threads; ++t) {
        for (size_t c = 0; c < sums.size(); ++c) sums[c] += partial[t][h][c];
      }
    }
  }
}

}  // namespace

void block_attention(const KVCache& cache, const BlockAttentionArgs& a) {
  if (a.n_heads != cache.n_stored_heads() * a.group)
    throw std::logic_error("block_attention: n_heads != stored heads * group");
  for (int kv = 0; kv < cache.n_stored_heads(); ++kv) {
    if (cache.length(a.layer, kv) < a.n) throw std::logic_error("block_attention: block K/V not in the cache");
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(cache.head_dim()));
  if (a.n == 1) {
    decode_attention(cache, a, scale);
  } else {
    prefill_attention(cache, a, scale);
  }
}

}  // namespace kvevict
