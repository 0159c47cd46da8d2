#include "core/decode/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "core/decode/kept_list.h"
#include "core/decode/rope.h"

namespace kvevict {

KVCache::KVCache(const ModelConfig& config, KvType type)
    : config_(config),
      n_layers_(config.n_layers),
      n_kv_heads_(config.n_kv_heads),
      head_dim_(config.head_dim),
      group_(config.n_kv_heads > 0 ? config.n_heads / config.n_kv_heads : 1),
      n_stored_(config.n_kv_heads),
      kv_type_(type),
      layer_codes_(config.n_layers),
      rope_(config) {
  heads_.assign(static_cast<size_t>(n_layers_) * n_kv_heads_, empty_head());
}

void KVCache::check_head(const char* what, int layer, int stored) const {
  if (layer < 0 || layer >= n_layers_ || stored < 0 || stored >= n_stored_) {
    throw std::invalid_argument(std::string("KVCache::") + what + ": no (layer " + std::to_string(layer) +
                                ", stored head " + std::to_string(stored) + ")");
  }
}

int64_t KVCache::total_entries() const {
  int64_t total = 0;
  for (const Head& h : heads_) total += static_cast<int64_t>(h.positions.size());
  return total;
}

std::vector<float> KVCache::keys_pre_rope(int layer, int kv_head) const {
  check_rows_held("keys_pre_rope", layer, kv_head);
  const Head& h = head(layer, kv_head);
  if (h.codebook) return codebook_keys_pre_rope(layer, *h.codebook);
  std::vector<float> out(h.positions.size() * static_cast<size_t>(head_dim_));
  h.keys.read(0, h.positions.size(), out.data());
  // Rotating back by the entry's own position needs no table; the angles are the same doubles
  // the decoder used, so the result is the pre-RoPE key up to float rounding.
  Rope rope(config_);
  for (size_t t = 0; t < h.positions.size(); ++t) rope.inverse(out.data() + t * head_dim_, h.positions[t]);
  return out;
}

void KVCache::append(int layer, int kv_head, int32_t position, const float* key, const float* value) {
  if (!unfolded_) {
    append_one(layer, kv_head, position, key, value);
    return;
  }
  for (int g = 0; g < group_; ++g) append_one(layer, kv_head * group_ + g, position, key, value);
}

void KVCache::append_one(int layer, int kv_head, int32_t position, const float* key, const float* value) {
  Head& h = head(layer, kv_head);
  if (h.codebook) {
    append_codebook_entry(layer, kv_head, position, key, value);
    if (listener_.ptr) listener_.ptr->on_append(layer, kv_head, position, key, value);
    return;
  }
  check_rows_held("append", layer, kv_head);  // a head holds every row or none
  if (h.rows_elsewhere) {  // an emptied position-only head holds the rows appended from now on
    h.rows_elsewhere = false;
    h.norms_held = false;
    h.held_norms.clear();
  }
  h.keys.append(key);
  h.values.append(value);
  h.positions.push_back(position);
  if (listener_.ptr) listener_.ptr->on_append(layer, kv_head, position, key, value);
}

void KVCache::write_entry(int layer, int kv_head, int t, const float* key, const float* value) {
  check_head("write_entry", layer, kv_head);
  Head& h = dense(layer, kv_head);
  if (t < 0 || t >= static_cast<int>(h.positions.size()))
    throw std::invalid_argument("KVCache::write_entry: entry " + std::to_string(t) + " out of range [0, " +
                                std::to_string(h.positions.size()) + ")");
  if (key) h.keys.write(static_cast<size_t>(t), key);
  if (value) h.values.write(static_cast<size_t>(t), value);
  if (listener_.ptr) listener_.ptr->on_write_entry(layer, kv_head, t);
}

void KVCache::keep(int layer, int kv_head, std::span<const int> indices) {
  check_head("keep", layer, kv_head);
  Head& h = head(layer, kv_head);
  const int len = static_cast<int>(h.positions.size());
  const KeptListCheck checked = check_kept_list(indices, len);
  if (checked.fault == KeptListCheck::Fault::OutOfRange) {
    throw std::invalid_argument("KVCache::keep: index " + std::to_string(checked.index) + " out of range [0, " +
                                std::to_string(len) + ")");
  }
  if (checked.fault == KeptListCheck::Fault::Twice)
    throw std::invalid_argument("KVCache::keep: duplicate index " + std::to_string(checked.index));
  h.stamp.renew();  // before any branch: every kept list may drop or move entries
  if (h.codebook) {
    keep_codebook(layer, kv_head, indices);
    if (listener_.ptr) listener_.ptr->on_keep(layer, kv_head, indices);
    return;
  }
  // Entries [0, p) stay in their slots; an ascending list moves the rest front to back in place
  // (entry i comes from a slot >= i), any other through a copy of the moved part.
  const size_t n = indices.size(), p = checked.shape.in_place;
  const bool ascending = checked.shape.ascending;
  auto move_positions = [&](auto& values) {  // positions, or the held norms aligned with them
    if (ascending) {
      for (size_t i = p; i < n; ++i) values[i] = values[static_cast<size_t>(indices[i])];
    } else {
      std::vector<std::decay_t<decltype(values[0])>> moved(n - p);
      for (size_t i = p; i < n; ++i) moved[i - p] = values[static_cast<size_t>(indices[i])];
      std::copy(moved.begin(), moved.end(), values.begin() + static_cast<std::ptrdiff_t>(p));
    }
    values.resize(n);
  };
  if (h.rows_elsewhere) {  // only the positions (and perhaps the rows' norms) are here
    if (h.norms_held) move_positions(h.held_norms);
    move_positions(h.positions);
    if (listener_.ptr) listener_.ptr->on_keep(layer, kv_head, indices);
    return;
  }
  if (ascending) {
    for (size_t i = p; i < n; ++i) {
      const size_t src = static_cast<size_t>(indices[i]);
      if (src == i) continue;
      h.keys.copy_row(i, src);
      h.values.copy_row(i, src);
    }
  } else {
    KvRows keys(kv_type_, head_dim_), values(kv_type_, head_dim_);
    keys.resize(n - p);
    values.resize(n - p);
    for (size_t i = p; i < n; ++i) {
      const size_t src = static_cast<size_t>(indices[i]);
      keys.copy_row_from(i - p, h.keys, src);
      values.copy_row_from(i - p, h.values, src);
    }
    for (size_t i = p; i < n; ++i) {
      h.keys.copy_row_from(i, keys, i - p);
      h.values.copy_row_from(i, values, i - p);
    }
  }
  move_positions(h.positions);
  // Shrinking keeps the capacity: later appends reuse the freed tail (shrink_to_fit releases it).
  h.keys.resize(n);
  h.values.resize(n);
  if (listener_.ptr) listener_.ptr->on_keep(layer, kv_head, indices);
}

size_t KVCache::head_bytes_in_use(int layer, int kv_head) const {
  const Head& h = head(layer, kv_head);
  if (h.codebook) {
    const CodebookHead& cb = *h.codebook;
    return (cb.key_codes.size() + cb.value_codes.size()) * sizeof(float) +
           (cb.key_index.size() + cb.value_index.size() + h.positions.size()) * sizeof(int32_t) +
           (cb.key_norm.size() + cb.value_norm.size()) * sizeof(float);
  }
  return h.positions.size() * (2 * static_cast<size_t>(head_dim_) * kv_type_size(kv_type_) + sizeof(int32_t));
}

size_t KVCache::bytes_in_use() const {
  size_t total = 0;
  for (int l = 0; l < n_layers_; ++l) {
    for (int h = 0; h < n_stored_; ++h) total += head_bytes_in_use(l, h);
    if (layer_codebook(l)) total += (layer_codes_[l].key_codes.size() + layer_codes_[l].value_codes.size()) * sizeof(float);
  }
  return total;
}

size_t KVCache::bytes_reserved() const {
  size_t total = 0;
  for (const Head& h : heads_) {
    total += h.keys.capacity_bytes() + h.values.capacity_bytes() + h.positions.capacity() * sizeof(int32_t) +
             h.held_norms.capacity() * sizeof(RowNorms);
    if (h.codebook) {
      const CodebookHead& cb = *h.codebook;
      total += (cb.key_codes.capacity() + cb.value_codes.capacity() + cb.key_norm.capacity() + cb.value_norm.capacity()) *
                   sizeof(float) +
               (cb.key_index.capacity() + cb.value_index.capacity()) * sizeof(int32_t);
    }
  }
  for (const LayerCodebook& c : layer_codes_) total += (c.key_codes.capacity() + c.value_codes.capacity()) * sizeof(float);
  return total;
}

size_t KVCache::bytes_for_uniform_length(int64_t tokens) const {
  const size_t per_entry = 2 * static_cast<size_t>(head_dim_) * kv_type_size(kv_type_) + sizeof(int32_t);
  return static_cast<size_t>(tokens) * per_entry * static_cast<size_t>(n_layers_) * n_kv_heads_;
}

void KVCache::shrink_to_fit() {
  for (Head& h : heads_) {
    h.keys.shrink_to_fit();
    h.values.shrink_to_fit();
    h.positions.shrink_to_fit();
    h.held_norms.shrink_to_fit();
    if (h.codebook) {
      CodebookHead& cb = *h.codebook;
      for (auto* v : {&cb.key_codes, &cb.value_codes, &cb.key_norm, &cb.value_norm}) v->shrink_to_fit();
      cb.key_index.shrink_to_fit();
      cb.value_index.shrink_to_fit();
    }
  }
  for (LayerCodebook& c : layer_codes_) {
    c.key_codes.shrink_to_fit();
    c.value_codes.shrink_to_fit();
  }
}

void KVCache::clear() {
  if (unfolded_) {  // back to one stored head per KV head; the released copies free their memory
    unfolded_ = false;
    n_stored_ = n_kv_heads_;
    heads_.assign(static_cast<size_t>(n_layers_) * n_kv_heads_, empty_head());
  }
  for (Head& h : heads_) {
    h.keys.resize(0);
    h.values.resize(0);
    h.positions.clear();
    h.codebook.reset();
    h.reassigned = false;
    h.rows_elsewhere = false;
    h.norms_held = false;
    h.held_norms.clear();
    h.stamp.renew();
  }
  for (LayerCodebook& c : layer_codes_) c = LayerCodebook{};
  if (listener_.ptr) listener_.ptr->on_clear();
}

}  // namespace kvevict
