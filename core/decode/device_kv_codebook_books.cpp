// A device cache's codebook bookkeeping; contract in device_kv_codebook_books.h.
#include "core/decode/device_kv_codebook_books.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kvevict {

namespace {

std::string book_where(int book) { return "device codebook: book " + std::to_string(book); }

int32_t codes_in(const std::vector<float>& codes, int head_dim, int book) {
  if (codes.size() % static_cast<size_t>(head_dim) != 0)
    throw std::invalid_argument(book_where(book) + ": codes are not whole head_dim vectors");
  return static_cast<int32_t>(codes.size() / static_cast<size_t>(head_dim));
}

}  // namespace

std::vector<int64_t> device_codebook_block_rows(const DeviceKvLayerLayout& layer_layout, int layer, int rows) {
  std::vector<int64_t> dst_row(layer_layout.heads.size());
  for (size_t h = 0; h < layer_layout.heads.size(); ++h) {
    const DeviceKvRegion& head = layer_layout.heads[h];
    if (head.length < rows)
      throw std::logic_error("device codebook: head " + std::to_string(h) + " of layer " + std::to_string(layer) +
                             " holds " + std::to_string(head.length) + " rows, fewer than the block's " +
                             std::to_string(rows));
    dst_row[h] = head.base_row + head.length - rows;
  }
  return dst_row;
}

int64_t DeviceCodebookBooks::load(const DeviceCodebookLoad& load) {
  const size_t books = load.books.size();
  if (books != 0 && !(load.shared ? books == 1 : books == static_cast<size_t>(n_heads_)))
    throw std::invalid_argument("device codebook: " + std::to_string(books) + " books for " +
                                std::to_string(n_heads_) + " heads (" + (load.shared ? "shared" : "one per head") + ")");
  if (books != 0 && (load.theta_key.size() != static_cast<size_t>(n_heads_) ||
                     load.theta_value.size() != static_cast<size_t>(n_heads_)))
    throw std::invalid_argument("device codebook: thresholds for " + std::to_string(load.theta_key.size()) + " and " +
                                std::to_string(load.theta_value.size()) + " heads, not " + std::to_string(n_heads_));
  const bool same_books = books == known_key_.size() && load.shared == shared_;
  std::vector<int32_t> key(books), value(books);
  for (size_t b = 0; b < books; ++b) {
    const DeviceCodebookLoad::Book& book = load.books[b];
    const int32_t known_k = same_books ? known_key_[b] : 0, known_v = same_books ? known_value_[b] : 0;
    if (book.first_key_code < 0 || book.first_value_code < 0 || book.first_key_code > known_k ||
        book.first_value_code > known_v)
      throw std::invalid_argument(book_where(static_cast<int>(b)) + ": codes from " +
                                  std::to_string(book.first_key_code) + " / " + std::to_string(book.first_value_code) +
                                  ", the device holds " + std::to_string(known_k) + " / " + std::to_string(known_v));
    key[b] = book.first_key_code + codes_in(book.key_codes, head_dim_, static_cast<int>(b));
    value[b] = book.first_value_code + codes_in(book.value_codes, head_dim_, static_cast<int>(b));
  }
  shared_ = load.shared;
  known_key_ = std::move(key);
  known_value_ = std::move(value);
  bound_.assign(books, 0);
  for (size_t b = 0; b < books; ++b) bound_[b] = std::max(known_key_[b], known_value_[b]);
  theta_key_ = load.theta_key;
  theta_value_ = load.theta_value;
  logged_ = 0;
  return largest_bound();
}

int64_t DeviceCodebookBooks::codes_needed_for(int rows) const {
  if (bound_.empty()) throw std::logic_error("device codebook: an append to a layer that holds no book");
  return largest_bound() + static_cast<int64_t>(rows) * (shared_ ? n_heads_ : 1);
}

int64_t DeviceCodebookBooks::largest_bound() const {
  int64_t most = 0;
  for (int64_t n : bound_) most = std::max(most, n);
  return most;
}

void DeviceCodebookBooks::grown(int64_t code_capacity, int64_t log_capacity) {
  const int64_t most = largest_bound();
  if (code_capacity < most || log_capacity < logged_)
    throw std::logic_error("device codebook: storage laid for " + std::to_string(code_capacity) + " codes and " +
                           std::to_string(log_capacity) + " log rows holds " + std::to_string(most) + " and " +
                           std::to_string(logged_));
  code_capacity_ = code_capacity;
  log_capacity_ = log_capacity;
}

int64_t DeviceCodebookBooks::planned_capacity(int64_t current, int64_t needed) {
  if (needed < 0 || current < 0) throw std::logic_error("device codebook: a negative capacity");
  const int64_t room = needed + needed / 8 + kCapacitySlack;
  return needed <= current && current <= 2 * room ? current : room;
}

DeviceCodebookAppendArgs DeviceCodebookBooks::append_args(int rows, const float* keys, const float* values,
                                                          int64_t src_stride, int32_t first_position,
                                                          const int64_t* dst_row, const RopeTableView& rope,
                                                          void* key_arena, void* value_arena, KvType type,
                                                          float* key_codes, float* value_codes, int32_t* key_count,
                                                          int32_t* value_count, CodebookEntry* log) {
  if (n_heads_ > kDeviceKvMaxHeads)
    throw std::invalid_argument("device codebook: " + std::to_string(n_heads_) + " heads, at most " +
                                std::to_string(kDeviceKvMaxHeads));
  if (codes_needed_for(rows) > code_capacity_ || log_needed_for(rows) > log_capacity_)
    throw std::logic_error("device codebook: an append of " + std::to_string(rows) + " rows without the room for it");
  if (rope.half * 2 != head_dim_ || first_position < 0 || static_cast<int64_t>(first_position) + rows > rope.positions)
    throw std::invalid_argument("device codebook: the RoPE table (" + std::to_string(rope.positions) +
                                " positions, head_dim " + std::to_string(rope.half * 2) + ") does not cover positions " +
                                std::to_string(first_position) + " + " + std::to_string(rows));
  DeviceCodebookAppendArgs a;
  a.src_keys = keys;
  a.src_values = values;
  a.src_stride = src_stride;
  a.key_arena = key_arena;
  a.value_arena = value_arena;
  a.type = type;
  a.head_dim = head_dim_;
  a.n_heads = n_heads_;
  a.rows = rows;
  a.first_position = first_position;
  for (int h = 0; h < n_heads_; ++h) {
    a.dst_row[h] = dst_row[h];
    a.theta_key[h] = theta_key_[static_cast<size_t>(h)];
    a.theta_value[h] = theta_value_[static_cast<size_t>(h)];
  }
  a.shared = shared_;
  a.key_codes = key_codes;
  a.value_codes = value_codes;
  a.code_capacity = code_capacity_;
  a.key_count = key_count;
  a.value_count = value_count;
  a.log = log;
  a.log_capacity = log_capacity_;
  a.log_first = logged_;
  a.rope = rope;
  const int64_t per_book = static_cast<int64_t>(rows) * (shared_ ? n_heads_ : 1);
  for (int64_t& n : bound_) n += per_book;
  logged_ += rows;
  return a;
}

DeviceCodebookNews DeviceCodebookBooks::news(const std::vector<int32_t>& key_count,
                                             const std::vector<int32_t>& value_count, const ReadCodes& read_codes,
                                             const ReadLog& read_log) {
  const size_t books = known_key_.size();
  if (key_count.size() != books || value_count.size() != books)
    throw std::logic_error("device codebook: counts for " + std::to_string(key_count.size()) + " books, not " +
                           std::to_string(books));
  DeviceCodebookNews out;
  out.books.resize(books);
  for (size_t b = 0; b < books; ++b) {
    if (key_count[b] < known_key_[b] || value_count[b] < known_value_[b] || key_count[b] > bound_[b] ||
        value_count[b] > bound_[b])
      throw std::logic_error(book_where(static_cast<int>(b)) + " holds " + std::to_string(key_count[b]) + " / " +
                             std::to_string(value_count[b]) + " codes, the host knew " +
                             std::to_string(known_key_[b]) + " / " + std::to_string(known_value_[b]) +
                             " and planned room for " + std::to_string(bound_[b]));
    DeviceCodebookNews::Book& book = out.books[b];
    book.first_key_code = known_key_[b];
    book.first_value_code = known_value_[b];
    book.key_codes.resize(static_cast<size_t>(key_count[b] - known_key_[b]) * head_dim_);
    book.value_codes.resize(static_cast<size_t>(value_count[b] - known_value_[b]) * head_dim_);
    if (!book.key_codes.empty())
      read_codes(true, static_cast<int>(b), known_key_[b], key_count[b] - known_key_[b], book.key_codes.data());
    if (!book.value_codes.empty())
      read_codes(false, static_cast<int>(b), known_value_[b], value_count[b] - known_value_[b],
                 book.value_codes.data());
  }
  out.entries.resize(books == 0 ? 0 : static_cast<size_t>(n_heads_));
  for (size_t h = 0; h < out.entries.size(); ++h) {
    out.entries[h].resize(static_cast<size_t>(logged_));
    if (logged_ > 0) read_log(static_cast<int>(h), logged_, out.entries[h].data());
    const size_t b = shared_ ? 0 : h;
    for (const CodebookEntry& e : out.entries[h])
      if (e.key_index < 0 || e.key_index >= key_count[b] || e.value_index < 0 || e.value_index >= value_count[b])
        throw std::logic_error(book_where(static_cast<int>(b)) + ": a logged entry names key code " +
                               std::to_string(e.key_index) + " and value code " + std::to_string(e.value_index) +
                               " of " + std::to_string(key_count[b]) + " / " + std::to_string(value_count[b]));
  }
  known_key_ = key_count;
  known_value_ = value_count;
  for (size_t b = 0; b < books; ++b) bound_[b] = std::max(known_key_[b], known_value_[b]);
  logged_ = 0;
  return out;
}

}  // namespace kvevict
