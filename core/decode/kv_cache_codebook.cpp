// Codebook-backed (layer, KV head) storage of KVCache (SpindleKV, spec policies.md §4.2): what is
// stored, how entries are reconstructed, how a decoded entry joins the codebook, and compaction.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/decode/device_kv_codebook.h"
#include "core/decode/kv_cache.h"
#include "core/decode/kv_cache_where.h"

namespace kvevict {

namespace {

void check_codes(const std::vector<float>& codes, const std::vector<int32_t>& index, const std::vector<float>& norm,
                 size_t len, int d, const std::string& what) {
  if (codes.size() % static_cast<size_t>(d) != 0)
    throw std::invalid_argument(what + ": codes are not a whole number of head_dim vectors");
  if (index.size() != len || norm.size() != len)
    throw std::invalid_argument(what + ": " + std::to_string(index.size()) + " indices and " +
                                std::to_string(norm.size()) + " norms for " + std::to_string(len) + " entries");
  const int64_t n_codes = static_cast<int64_t>(codes.size() / d);
  for (int32_t i : index)
    if (i < 0 || i >= n_codes)
      throw std::invalid_argument(what + ": code index " + std::to_string(i) + " out of range [0, " +
                                  std::to_string(n_codes) + ")");
}

// Code of highest cosine > theta (ties: lowest index), or a new code made of `unit`
// (device_kv_codebook.h: the device's rule, element for element).
int32_t match_or_add(std::vector<float>& codes, const float* unit, int d, double theta) {
  const int n = static_cast<int>(codes.size() / d);
  int32_t best = -1;
  float best_dot = 0.0f;
  for (int c = 0; c < n; ++c) {
    const float dot = codebook_dot(codes.data() + static_cast<size_t>(c) * d, unit, d);
    if (codebook_match_beats(dot, c, theta, best_dot, best)) {
      best = c;
      best_dot = dot;
    }
  }
  if (best >= 0) return best;
  codes.insert(codes.end(), unit, unit + d);
  return n;
}

// Drops codes no entry refers to and renumbers the rest, keeping their order.
void drop_unreferenced(std::vector<float>& codes, std::vector<int32_t>& index, int d) {
  const int n = static_cast<int>(codes.size() / d);
  std::vector<int32_t> renumber(n, -1);
  for (int32_t i : index) renumber[i] = 0;
  int32_t next = 0;
  for (int c = 0; c < n; ++c) {
    if (renumber[c] < 0) continue;
    if (next != c) std::copy_n(codes.begin() + static_cast<size_t>(c) * d, d, codes.begin() + static_cast<size_t>(next) * d);
    renumber[c] = next++;
  }
  codes.resize(static_cast<size_t>(next) * d);
  for (int32_t& i : index) i = renumber[i];
}

}  // namespace

const KVCache::Head& KVCache::dense(int layer, int kv_head) const {
  check_rows_held("row access", layer, kv_head);
  const Head& h = head(layer, kv_head);
  if (h.codebook)
    throw std::logic_error("KVCache: " + kv_cache_head_where(layer, kv_head) +
                           " is codebook-backed; read it with reconstruct_keys/values or keys_or_reconstruct");
  return h;
}

const KVCache::Head& KVCache::dense_f32(int layer, int kv_head) const {
  const Head& h = dense(layer, kv_head);
  if (kv_type_ != KvType::F32)
    throw std::logic_error(std::string("KVCache: the cache stores ") + kv_type_name(kv_type_) +
                           "; read f32 rows with reconstruct_keys/values or keys_or_reconstruct");
  return h;
}

KVCache::Head& KVCache::dense(int layer, int kv_head) {
  return const_cast<Head&>(static_cast<const KVCache*>(this)->dense(layer, kv_head));
}

void KVCache::reserve_rope(int32_t position) {
  if (position < rope_positions_) return;
  // Doubling keeps decode appends from re-tabulating every step.
  rope_positions_ = std::max(position + 1, 2 * rope_positions_);
  rope_.reserve(rope_positions_);
}

std::vector<float> KVCache::codebook_keys_pre_rope(int layer, const CodebookHead& cb) const {
  const int d = head_dim_;
  const size_t len = cb.key_index.size();
  const std::vector<float>& codes = key_codes(layer, cb);
  std::vector<float> out(len * d);
  for (size_t t = 0; t < len; ++t) {
    const float* code = codes.data() + static_cast<size_t>(cb.key_index[t]) * d;
    for (int i = 0; i < d; ++i) out[t * d + i] = code[i] * cb.key_norm[t];
  }
  return out;
}

void KVCache::reconstruct_keys(int layer, int kv_head, int t0, int t1, float* out) const {
  check_rows_held("reconstruct_keys", layer, kv_head);
  const Head& h = head(layer, kv_head);
  const size_t d = static_cast<size_t>(head_dim_);
  if (!h.codebook) {
    h.keys.read(t0, t1, out);
    return;
  }
  const CodebookHead& cb = *h.codebook;
  const std::vector<float>& codes = key_codes(layer, cb);
  const RopeTableView rope = rope_.table();
  for (int t = t0; t < t1; ++t) {
    float* k = out + (t - t0) * d;
    const float* code = codes.data() + static_cast<size_t>(cb.key_index[t]) * d;
    if (h.positions[t] < 0 || h.positions[t] >= rope.positions)  // the mutators reserve every position
      throw std::logic_error("KVCache::reconstruct_keys: position " + std::to_string(h.positions[t]) + " of " +
                             kv_cache_head_where(layer, kv_head) + " is outside the RoPE table");
    for (int i = 0; i < rope.half; ++i) {
      int a = 0, b = 0;
      float x0 = 0, x1 = 0;
      codebook_key_pair(code, cb.key_norm[t], rope, h.positions[t], i, &a, &b, &x0, &x1);
      k[a] = x0;
      k[b] = x1;
    }
  }
}

void KVCache::reconstruct_values(int layer, int kv_head, int t0, int t1, float* out) const {
  check_rows_held("reconstruct_values", layer, kv_head);
  const Head& h = head(layer, kv_head);
  const size_t d = static_cast<size_t>(head_dim_);
  if (!h.codebook) {
    h.values.read(t0, t1, out);
    return;
  }
  const CodebookHead& cb = *h.codebook;
  const std::vector<float>& codes = value_codes(layer, cb);
  for (int t = t0; t < t1; ++t) {
    const float* code = codes.data() + static_cast<size_t>(cb.value_index[t]) * d;
    const float m = cb.value_norm[t];
    for (size_t i = 0; i < d; ++i) out[(t - t0) * d + i] = code[i] * m;
  }
}

const float* KVCache::keys_or_reconstruct(int layer, int kv_head, std::vector<float>& scratch) const {
  if (!is_codebook(layer, kv_head) && kv_type_ == KvType::F32) return keys(layer, kv_head);
  const int len = length(layer, kv_head);
  scratch.resize(static_cast<size_t>(len) * head_dim_);
  reconstruct_keys(layer, kv_head, 0, len, scratch.data());
  return scratch.data();
}

const float* KVCache::values_or_reconstruct(int layer, int kv_head, std::vector<float>& scratch) const {
  if (!is_codebook(layer, kv_head) && kv_type_ == KvType::F32) return values(layer, kv_head);
  const int len = length(layer, kv_head);
  scratch.resize(static_cast<size_t>(len) * head_dim_);
  reconstruct_values(layer, kv_head, 0, len, scratch.data());
  return scratch.data();
}

void KVCache::set_codebook(int layer, int kv_head, CodebookHead cb) {
  check_head("set_codebook", layer, kv_head);
  check_rows_held("set_codebook", layer, kv_head);
  if (cb.shared_codes) throw std::invalid_argument("KVCache::set_codebook: shared codes go through set_layer_codebook");
  Head& h = head(layer, kv_head);
  const std::string what = "KVCache::set_codebook " + kv_cache_head_where(layer, kv_head);
  check_codes(cb.key_codes, cb.key_index, cb.key_norm, h.positions.size(), head_dim_, what + " keys");
  check_codes(cb.value_codes, cb.value_index, cb.value_norm, h.positions.size(), head_dim_, what + " values");
  for (int32_t p : h.positions) reserve_rope(p);
  h.codebook = std::move(cb);
  // Release, not just clear: the point of the codebook is the memory.
  h.keys.release();
  h.values.release();
  if (listener_.ptr) listener_.ptr->on_codebook(layer, kv_head);
}

void KVCache::set_layer_codebook(int layer, LayerCodebook codes, std::vector<CodebookHead> heads) {
  check_head("set_layer_codebook", layer, 0);
  if (static_cast<int>(heads.size()) != n_stored_)
    throw std::invalid_argument("KVCache::set_layer_codebook: " + std::to_string(heads.size()) + " heads for " +
                                std::to_string(n_stored_) + " stored heads");
  for (int s = 0; s < n_stored_; ++s) {
    check_rows_held("set_layer_codebook", layer, s);
    const std::string what = "KVCache::set_layer_codebook " + kv_cache_head_where(layer, s);
    if (!heads[s].key_codes.empty() || !heads[s].value_codes.empty())
      throw std::invalid_argument(what + ": a head of a shared codebook has codes of its own");
    const size_t len = head(layer, s).positions.size();
    check_codes(codes.key_codes, heads[s].key_index, heads[s].key_norm, len, head_dim_, what + " keys");
    check_codes(codes.value_codes, heads[s].value_index, heads[s].value_norm, len, head_dim_, what + " values");
  }
  layer_codes_[layer] = std::move(codes);
  for (int s = 0; s < n_stored_; ++s) {
    Head& h = head(layer, s);
    for (int32_t p : h.positions) reserve_rope(p);
    h.codebook = std::move(heads[s]);
    h.codebook->shared_codes = true;
    h.keys.release();
    h.values.release();
  }
  if (listener_.ptr) listener_.ptr->on_codebook(layer, KvCacheListener::kAllHeads);
}

const LayerCodebook* KVCache::layer_codebook(int layer) const {
  if (layer < 0 || layer >= n_layers_ || n_stored_ == 0) return nullptr;
  const Head& h = head(layer, 0);
  return h.codebook && h.codebook->shared_codes ? &layer_codes_[layer] : nullptr;
}

void KVCache::append_codebook_entry(int layer, int kv_head, int32_t position, const float* key, const float* value) {
  Head& h = head(layer, kv_head);
  CodebookHead& cb = *h.codebook;
  // Shared codes: the first copy of an unfolded KV head may add a code; the other copies then
  // match it with cosine 1 (> theta), so identical copies cost no extra code.
  std::vector<float>& kc = key_codes(layer, cb);
  std::vector<float>& vc = value_codes(layer, cb);
  const int d = head_dim_;
  std::vector<float> pre(d), unit(d);
  reserve_rope(position);
  codebook_key_pre_rope(key, rope_.table(), position, pre.data());
  cb.key_norm.push_back(codebook_unit(pre.data(), d, unit.data()));
  cb.key_index.push_back(match_or_add(kc, unit.data(), d, cb.theta_key));
  cb.value_norm.push_back(codebook_unit(value, d, unit.data()));
  cb.value_index.push_back(match_or_add(vc, unit.data(), d, cb.theta_value));
  h.positions.push_back(position);
}

void KVCache::extend_codebook_codes(int layer, int kv_head, std::span<const float> key_codes,
                                    std::span<const float> value_codes) {
  check_head("extend_codebook_codes", layer, kv_head);
  Head& h = head(layer, kv_head);
  const std::string what = "KVCache::extend_codebook_codes " + kv_cache_head_where(layer, kv_head);
  if (!h.codebook) throw std::logic_error(what + ": a dense head");
  const size_t d = static_cast<size_t>(head_dim_);
  if (key_codes.size() % d != 0 || value_codes.size() % d != 0)
    throw std::invalid_argument(what + ": codes are not whole head_dim vectors");
  CodebookHead& cb = *h.codebook;
  std::vector<float>& kc = this->key_codes(layer, cb);  // the parameters shadow the accessors
  std::vector<float>& vc = this->value_codes(layer, cb);
  kc.insert(kc.end(), key_codes.begin(), key_codes.end());
  vc.insert(vc.end(), value_codes.begin(), value_codes.end());
}

void KVCache::append_codebook_entries(int layer, int kv_head, std::span<const int32_t> positions,
                                      std::span<const CodebookEntry> entries) {
  check_head("append_codebook_entries", layer, kv_head);
  Head& h = head(layer, kv_head);
  const std::string what = "KVCache::append_codebook_entries " + kv_cache_head_where(layer, kv_head);
  if (!h.codebook) throw std::logic_error(what + ": a dense head");
  if (positions.size() != entries.size())
    throw std::invalid_argument(what + ": " + std::to_string(positions.size()) + " positions for " +
                                std::to_string(entries.size()) + " entries");
  CodebookHead& cb = *h.codebook;
  const int64_t n_key = static_cast<int64_t>(key_codes(layer, cb).size() / head_dim_);
  const int64_t n_value = static_cast<int64_t>(value_codes(layer, cb).size() / head_dim_);
  for (size_t i = 0; i < entries.size(); ++i) {  // all checked before anything changes
    const CodebookEntry& e = entries[i];
    if (e.key_index < 0 || e.key_index >= n_key || e.value_index < 0 || e.value_index >= n_value)
      throw std::invalid_argument(what + ": entry " + std::to_string(i) + " names key code " +
                                  std::to_string(e.key_index) + " of " + std::to_string(n_key) + " and value code " +
                                  std::to_string(e.value_index) + " of " + std::to_string(n_value));
    if (positions[i] < 0) throw std::invalid_argument(what + ": a negative position");
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    reserve_rope(positions[i]);
    cb.key_index.push_back(entries[i].key_index);
    cb.key_norm.push_back(entries[i].key_norm);
    cb.value_index.push_back(entries[i].value_index);
    cb.value_norm.push_back(entries[i].value_norm);
    h.positions.push_back(positions[i]);
    if (listener_.ptr) listener_.ptr->on_append(layer, kv_head, positions[i], nullptr, nullptr);
  }
}

void KVCache::keep_codebook(int layer, int kv_head, std::span<const int> indices) {
  Head& h = head(layer, kv_head);
  CodebookHead& cb = *h.codebook;
  const size_t n = indices.size();
  std::vector<int32_t> key_index(n), value_index(n), positions(n);
  std::vector<float> key_norm(n), value_norm(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t src = static_cast<size_t>(indices[i]);
    key_index[i] = cb.key_index[src];
    value_index[i] = cb.value_index[src];
    key_norm[i] = cb.key_norm[src];
    value_norm[i] = cb.value_norm[src];
    positions[i] = h.positions[src];
  }
  // Assigning keeps the capacity, like the dense path: later appends reuse it.
  cb.key_index.assign(key_index.begin(), key_index.end());
  cb.value_index.assign(value_index.begin(), value_index.end());
  cb.key_norm.assign(key_norm.begin(), key_norm.end());
  cb.value_norm.assign(value_norm.begin(), value_norm.end());
  h.positions.assign(positions.begin(), positions.end());
  if (!cb.shared_codes) {
    drop_unreferenced(cb.key_codes, cb.key_index, head_dim_);
    drop_unreferenced(cb.value_codes, cb.value_index, head_dim_);
    return;
  }
  // Shared codes: a code is dropped only when no head of the layer refers to it any more.
  std::vector<int32_t> all_keys, all_values;
  for (int s = 0; s < n_stored_; ++s) {
    const CodebookHead& c = *head(layer, s).codebook;
    all_keys.insert(all_keys.end(), c.key_index.begin(), c.key_index.end());
    all_values.insert(all_values.end(), c.value_index.begin(), c.value_index.end());
  }
  drop_unreferenced(layer_codes_[layer].key_codes, all_keys, head_dim_);
  drop_unreferenced(layer_codes_[layer].value_codes, all_values, head_dim_);
  size_t at = 0;
  for (int s = 0; s < n_stored_; ++s) {
    CodebookHead& c = *head(layer, s).codebook;
    std::copy_n(all_keys.begin() + at, c.key_index.size(), c.key_index.begin());
    std::copy_n(all_values.begin() + at, c.value_index.size(), c.value_index.begin());
    at += c.key_index.size();
  }
}

}  // namespace kvevict
