// The device KV cache twin's codebooks: device_kv_codebook.h's element bodies run in order on the
// CPU (the kernel, core/decode/cuda/device_kv_codebook.cu, runs the same bodies; its code scan is
// split over threads and reduced by codebook_match_beats, which gives this in-order answer).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/decode/device_kv_twin.h"

namespace kvevict {

DeviceKvTwin::Codebooks& DeviceKvTwin::codebooks(int layer) {
  if (layer < 0 || layer >= layout_.geometry().n_layers)
    throw std::invalid_argument("device codebook: layer " + std::to_string(layer) + " outside [0, " +
                                std::to_string(layout_.geometry().n_layers) + ")");
  if (codebooks_.empty())
    for (int l = 0; l < layout_.geometry().n_layers; ++l)
      codebooks_.push_back({DeviceCodebookBooks(layout_.geometry().n_heads, layout_.geometry().head_dim), {}, {}, {}, {}, {}});
  return codebooks_[static_cast<size_t>(layer)];
}

// Re-lays the codes ([books][capacity][d]) and the log ([heads][capacity]) at the capacities
// planned for what they must hold (DeviceCodebookBooks::planned_capacity), keeping what they hold.
void DeviceKvTwin::grow_codebooks(Codebooks& c, int64_t code_capacity, int64_t log_capacity) {
  const size_t d = static_cast<size_t>(layout_.geometry().head_dim), heads = static_cast<size_t>(layout_.geometry().n_heads);
  const size_t books = static_cast<size_t>(c.books.books());
  const int64_t old_codes = c.books.code_capacity(), old_log = c.books.log_capacity();
  code_capacity = DeviceCodebookBooks::planned_capacity(old_codes, code_capacity);
  log_capacity = DeviceCodebookBooks::planned_capacity(old_log, log_capacity);
  const int64_t keep_codes = std::min(old_codes, code_capacity), keep_log = std::min(old_log, log_capacity);
  if (code_capacity != old_codes || c.key_codes.size() != books * static_cast<size_t>(code_capacity) * d) {
    for (std::vector<float>* codes : {&c.key_codes, &c.value_codes}) {
      std::vector<float> fresh(books * static_cast<size_t>(code_capacity) * d, 0.0f);
      for (size_t b = 0; b < books && !codes->empty(); ++b)
        std::copy_n(codes->begin() + static_cast<ptrdiff_t>(b * old_codes * d), static_cast<size_t>(keep_codes) * d,
                    fresh.begin() + static_cast<ptrdiff_t>(b * code_capacity * d));
      *codes = std::move(fresh);
    }
  }
  if (log_capacity != old_log || c.log.size() != heads * static_cast<size_t>(log_capacity)) {
    std::vector<CodebookEntry> fresh(heads * static_cast<size_t>(log_capacity));
    for (size_t h = 0; h < heads && !c.log.empty(); ++h)
      std::copy_n(c.log.begin() + static_cast<ptrdiff_t>(h * old_log), static_cast<size_t>(keep_log),
                  fresh.begin() + static_cast<ptrdiff_t>(h * log_capacity));
    c.log = std::move(fresh);
  }
  c.books.grown(code_capacity, log_capacity);
}

void DeviceKvTwin::load_codebooks(int layer, const DeviceCodebookLoad& load) {
  Codebooks& c = codebooks(layer);
  const bool same_books = static_cast<int>(load.books.size()) == c.books.books() && load.shared == c.books.shared();
  const int64_t capacity = c.books.load(load);
  if (!same_books) {  // a fresh layout: nothing held carries over
    c.key_codes.clear();
    c.value_codes.clear();
    c.key_count.assign(load.books.size(), 0);
    c.value_count.assign(load.books.size(), 0);
  }
  grow_codebooks(c, capacity, c.books.log_capacity());
  const size_t d = static_cast<size_t>(layout_.geometry().head_dim), cap = static_cast<size_t>(c.books.code_capacity());
  for (size_t b = 0; b < load.books.size(); ++b) {
    const DeviceCodebookLoad::Book& book = load.books[b];
    std::copy(book.key_codes.begin(), book.key_codes.end(),
              c.key_codes.begin() + static_cast<ptrdiff_t>((b * cap + book.first_key_code) * d));
    std::copy(book.value_codes.begin(), book.value_codes.end(),
              c.value_codes.begin() + static_cast<ptrdiff_t>((b * cap + book.first_value_code) * d));
    c.key_count[b] = c.books.known_key(static_cast<int>(b));
    c.value_count[b] = c.books.known_value(static_cast<int>(b));
  }
}

void DeviceKvTwin::codebook_append(int layer, int rows, const float* keys, const float* values, int64_t src_stride,
                                   int32_t first_position, const RopeTableView& rope) {
  Codebooks& c = codebooks(layer);
  layout_.check_block(rows, src_stride);
  grow_codebooks(c, c.books.codes_needed_for(rows), c.books.log_needed_for(rows));
  const std::vector<int64_t> dst_row = device_codebook_block_rows(layout_.layer(layer), layer, rows);
  Arenas& arenas = arenas_[static_cast<size_t>(layer)];
  const DeviceCodebookAppendArgs a =
      c.books.append_args(rows, keys, values, src_stride, first_position, dst_row.data(), rope, arenas.keys.data(),
                          arenas.values.data(), layout_.geometry().type, c.key_codes.data(), c.value_codes.data(),
                          c.key_count.data(), c.value_count.data(), c.log.data());
  std::vector<float> scratch(static_cast<size_t>(a.head_dim)), unit(static_cast<size_t>(a.head_dim));
  for (int book = 0; book < device_codebook_books(a); ++book)
    for (int h = device_codebook_first_head(a, book); h < device_codebook_end_head(a, book); ++h)
      for (int r = 0; r < rows; ++r)
        for (const bool key : {true, false}) {
          const float norm = device_codebook_row_unit(a, h, r, key, scratch.data(), unit.data());
          const double theta = key ? a.theta_key[h] : a.theta_value[h];
          const float* codes = device_codebook_codes(a, key, book);
          int32_t best = -1;
          float best_dot = 0.0f;
          for (int32_t code = 0; code < *device_codebook_count(a, key, book); ++code) {
            const float dot = codebook_dot(codes + static_cast<size_t>(code) * a.head_dim, unit.data(), a.head_dim);
            if (codebook_match_beats(dot, code, theta, best_dot, best)) {
              best = code;
              best_dot = dot;
            }
          }
          const int32_t index = device_codebook_commit(a, book, h, r, key, best, unit.data(), norm);
          for (int i = 0; i < device_codebook_row_elements(a, key); ++i)
            device_codebook_store_element(a, book, h, r, key, index, norm, i);
        }
}

DeviceCodebookNews DeviceKvTwin::codebook_news(int layer) {
  Codebooks& c = codebooks(layer);
  const size_t d = static_cast<size_t>(layout_.geometry().head_dim), cap = static_cast<size_t>(c.books.code_capacity());
  const size_t log_cap = static_cast<size_t>(c.books.log_capacity());
  return c.books.news(
      c.key_count, c.value_count,
      [&](bool key, int book, int32_t first, int32_t n, float* out) {
        const std::vector<float>& codes = key ? c.key_codes : c.value_codes;
        std::copy_n(codes.begin() + static_cast<ptrdiff_t>((static_cast<size_t>(book) * cap + first) * d),
                    static_cast<size_t>(n) * d, out);
      },
      [&](int head, int64_t n, CodebookEntry* out) {
        std::copy_n(c.log.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(head) * log_cap), n, out);
      });
}

}  // namespace kvevict
