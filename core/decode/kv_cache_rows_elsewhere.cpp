// KVCache heads whose rows are held elsewhere (contract in kv_cache.h): the host side of a cache
// that lives on a device keeps only what the eviction engine numbers entries by (lengths and
// positions), so a 128K-token prompt costs the host 4 bytes per entry instead of its rows.
#include <stdexcept>
#include <string>

#include "core/decode/kv_cache.h"
#include "core/decode/kv_cache_where.h"

namespace kvevict {

void KVCache::check_rows_held(const char* what, int layer, int kv_head) const {
  if (rows_held_elsewhere(layer, kv_head))
    throw std::logic_error(std::string("KVCache::") + what + ": the rows of " + kv_cache_head_where(layer, kv_head) +
                           " are held elsewhere (a device cache); bring them to the host first");
}

void KVCache::append_position(int layer, int kv_head, int32_t position, const RowNorms* norms) {
  check_head("append_position", layer, kv_head);
  if (unfolded_) throw std::logic_error("KVCache::append_position: the cache is unfolded");
  Head& h = head(layer, kv_head);
  if (h.codebook)
    throw std::logic_error("KVCache::append_position: " + kv_cache_head_where(layer, kv_head) + " is codebook-backed");
  if (!h.positions.empty() && !h.rows_elsewhere)
    throw std::logic_error("KVCache::append_position: " + kv_cache_head_where(layer, kv_head) +
                           " holds its rows; a head holds every row or none");
  if (h.positions.empty()) {  // a fresh start: the norms are held while every entry brings them
    h.norms_held = norms != nullptr;
    h.held_norms.clear();
  } else if (h.norms_held && !norms) {
    h.norms_held = false;
    h.held_norms.clear();
  }
  h.rows_elsewhere = true;
  h.positions.push_back(position);
  if (h.norms_held) h.held_norms.push_back(*norms);
  if (listener_.ptr) listener_.ptr->on_append(layer, kv_head, position, nullptr, nullptr);
}

void KVCache::take_rows(int layer, int kv_head, const float* keys, const float* values) {
  check_head("take_rows", layer, kv_head);
  Head& h = head(layer, kv_head);
  if (!rows_held_elsewhere(layer, kv_head))
    throw std::logic_error("KVCache::take_rows: " + kv_cache_head_where(layer, kv_head) + " holds its rows already");
  const size_t len = h.positions.size(), d = static_cast<size_t>(head_dim_);
  h.keys.resize(len);
  h.values.resize(len);
  for (size_t t = 0; t < len; ++t) {
    h.keys.write(t, keys + t * d);
    h.values.write(t, values + t * d);
  }
  h.rows_elsewhere = false;
  h.norms_held = false;  // readers compute them from the rows now
  h.held_norms.clear();
  h.held_norms.shrink_to_fit();
  if (listener_.ptr)
    for (size_t t = 0; t < len; ++t) listener_.ptr->on_write_entry(layer, kv_head, static_cast<int>(t));
}

void KVCache::release_rows(int layer, int kv_head) {
  check_head("release_rows", layer, kv_head);
  if (unfolded_) throw std::logic_error("KVCache::release_rows: the cache is unfolded");
  Head& h = head(layer, kv_head);
  if (h.codebook) throw std::logic_error("KVCache::release_rows: " + kv_cache_head_where(layer, kv_head) + " is a codebook head");
  if (h.positions.empty() || h.rows_elsewhere)
    throw std::logic_error("KVCache::release_rows: " + kv_cache_head_where(layer, kv_head) + " holds no row");
  h.keys.release();
  h.values.release();
  h.rows_elsewhere = true;
  h.norms_held = false;  // none handed over yet (the holder hands them when asked)
  h.held_norms.clear();
}

void KVCache::set_held_row_norms(int layer, int kv_head, std::span<const RowNorms> norms) {
  check_head("set_held_row_norms", layer, kv_head);
  if (!rows_held_elsewhere(layer, kv_head))
    throw std::logic_error("KVCache::set_held_row_norms: " + kv_cache_head_where(layer, kv_head) +
                           " does not hold its rows elsewhere");
  Head& h = head(layer, kv_head);
  if (norms.size() != h.positions.size())
    throw std::invalid_argument("KVCache::set_held_row_norms: " + std::to_string(norms.size()) + " norms for the " +
                                std::to_string(h.positions.size()) + " entries of " +
                                kv_cache_head_where(layer, kv_head));
  h.held_norms.assign(norms.begin(), norms.end());
  h.norms_held = true;
}

std::span<const RowNorms> KVCache::held_row_norms(int layer, int kv_head) const {
  check_head("held_row_norms", layer, kv_head);
  if (!rows_held_elsewhere(layer, kv_head))
    throw std::logic_error("KVCache::held_row_norms: " + kv_cache_head_where(layer, kv_head) +
                           " holds its rows (or none): compute the norms from them");
  const Head& h = head(layer, kv_head);
  if (!h.norms_held)
    throw std::logic_error("KVCache::held_row_norms: the rows of " + kv_cache_head_where(layer, kv_head) +
                           " are held elsewhere and their norms were not handed over with their positions");
  return h.held_norms;
}

}  // namespace kvevict
