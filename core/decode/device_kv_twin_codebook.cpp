// The device KV cache twin's codebooks: device_kv_codebook.h's element bodies run on the CPU in the
// three steps of device_kv_codebook_scan.h, as the kernels (core/decode/cuda/device_kv_codebook.cu)
// run them; each step's loops in order where the kernels spread them over threads and blocks.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/decode/device_kv_codebook_scan.h"
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
  // The split's scratch. The chunk length varies with the append (1 to 4 codes, by its first
  // position) where the kernels use kCodebookChunkCodes: the CPU tests then cover several splits, and
  // any split gives the in-order scan's codes (device_kv_codebook_scan.h).
  const int queries = device_codebook_queries(a);
  const size_t d = static_cast<size_t>(a.head_dim);
  std::vector<float> pre(static_cast<size_t>(queries) * d), units(pre.size()), norms(static_cast<size_t>(queries));
  DeviceCodebookScan s;
  s.pre = pre.data();
  s.units = units.data();
  s.norms = norms.data();
  s.chunk_codes = 1 + first_position % 4;
  s.chunks = device_codebook_chunks(a.code_capacity, s.chunk_codes);
  std::vector<CodebookMatch> chunk_best(static_cast<size_t>(queries) * s.chunks);
  s.chunk_best = chunk_best.data();
  for (int q = 0; q < queries; ++q) device_codebook_query_unit(a, s, q);  // step 1
  for (int q = 0; q < queries; ++q) {                                     // step 2
    const int book = device_codebook_book_of(a, device_codebook_query_head(a, q));
    const int32_t count = *device_codebook_count(a, device_codebook_query_key(q), book);
    for (int k = 0; k < s.chunks; ++k)
      chunk_best[static_cast<size_t>(q) * s.chunks + k] = device_codebook_chunk_match(a, s, q, k, count, 0, 1);
  }
  for (int book = 0; book < device_codebook_books(a); ++book) {  // step 3
    const int32_t launch_key = *device_codebook_count(a, true, book), launch_value = *device_codebook_count(a, false, book);
    for (int h = device_codebook_first_head(a, book); h < device_codebook_end_head(a, book); ++h)
      for (int r = 0; r < rows; ++r)
        for (const bool key : {true, false}) {
          const int q = device_codebook_query(a, h, r, key);
          const int32_t count = *device_codebook_count(a, key, book);
          const CodebookMatch best = codebook_better(
              device_codebook_chunks_best(a, s, q, 0, 1),
              device_codebook_new_codes_match(a, s, q, key ? launch_key : launch_value, count, 0, 1),
              device_codebook_theta(a, h, key));
          const float norm = norms[static_cast<size_t>(q)];
          const int32_t index = device_codebook_commit(a, book, h, r, key, best.code, units.data() + q * d, norm);
          for (int i = 0; i < device_codebook_row_elements(a, key); ++i)
            device_codebook_store_element(a, book, h, r, key, index, norm, i);
        }
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
