#pragma once
// A device cache's SpindleKV codebooks, host side: what the host sends (DeviceCodebookLoad), what
// it reads back (DeviceCodebookNews), and the bookkeeping the device cache and its CPU twin share
// (DeviceCodebookBooks: room, counts known to the host, the log of appended rows). The element
// bodies that run on the device are device_kv_codebook.h's.
//
// Per layer the device holds either no book, one book per stored head, or one book shared by every
// head (DeviceCodebookLoad::shared). A book holds its key codes and value codes; the host knows
// how many of each (`known`) since the last load or news. An append may add at most one key code
// and one value code per (row, head of the book), so the room is planned on the host before the
// launch from that bound, and the device counts are read back only with the news.
#include <cstdint>
#include <functional>
#include <vector>

#include "core/decode/device_kv_codebook.h"
#include "core/decode/device_kv_layout.h"

namespace kvevict {

// Codes from the host: book b's codes [first_*_code, first_*_code + size / head_dim) replace the
// device's from that index on (a full load: 0); the book then holds exactly those. No books: the
// layer holds none.
struct DeviceCodebookLoad {
  struct Book {
    int32_t first_key_code = 0, first_value_code = 0;
    std::vector<float> key_codes, value_codes;  // [n][head_dim]
  };
  bool shared = false;
  std::vector<Book> books;                     // 1 (shared) or one per head
  std::vector<double> theta_key, theta_value;  // [heads]
};

// What the device added since the last load or news: per book the codes appended (from index
// first_*_code, the count the host knew), per head the entries of the rows appended, in order.
struct DeviceCodebookNews {
  struct Book {
    int32_t first_key_code = 0, first_value_code = 0;
    std::vector<float> key_codes, value_codes;
  };
  std::vector<Book> books;
  std::vector<std::vector<CodebookEntry>> entries;  // [head]
};

// The arena row of the block's row 0 in each head of `layer` (its last `rows` rows: the block was
// appended just before). std::logic_error when a head holds fewer rows.
std::vector<int64_t> device_codebook_block_rows(const DeviceKvLayerLayout& layer_layout, int layer, int rows);

// The bookkeeping of one layer's books (no storage: the twin keeps host arrays, the device cache
// device arrays, both laid out as DeviceCodebookAppendArgs says).
class DeviceCodebookBooks {
 public:
  DeviceCodebookBooks(int n_heads, int head_dim) : n_heads_(n_heads), head_dim_(head_dim) {}

  int books() const { return static_cast<int>(known_key_.size()); }
  bool shared() const { return shared_; }
  int64_t code_capacity() const { return code_capacity_; }
  int64_t log_capacity() const { return log_capacity_; }
  int64_t logged() const { return logged_; }
  int32_t known_key(int book) const { return known_key_[static_cast<size_t>(book)]; }
  int32_t known_value(int book) const { return known_value_[static_cast<size_t>(book)]; }

  // Checks a load against this layer (std::invalid_argument: a book count other than 0, 1 shared
  // or one per head; partial codes; thetas not one per head; a first index past the known count)
  // and takes it: the known counts become the load's. Returns the codes the storage must hold per
  // book (its capacity then follows planned_capacity).
  int64_t load(const DeviceCodebookLoad& load);
  // Room an append of `rows` rows needs: codes (the bound, see above) and log rows. std::logic_error
  // when the layer holds no book.
  int64_t codes_needed_for(int rows) const;
  int64_t log_needed_for(int rows) const { return logged_ + rows; }
  // The storage is now laid at these capacities (planned_capacity of what it must hold).
  void grown(int64_t code_capacity, int64_t log_capacity);
  // The capacity to lay for `needed` codes per book (or log rows per head) where `current` are laid,
  // one policy for the device and its twin: `current` while it holds them and is at most twice the
  // room below, else that room, needed + needed / 8 + kCapacitySlack. The slack lets a load's first
  // decode steps append without a re-lay; growth stays geometric (a stream of appends re-lays
  // O(log n) times); and a reload or a layout that needs far less gives the memory back. Doubling
  // (the first policy) laid up to twice the books' need and never shrank: at 128K on an 8B
  // geometry, where SpindleKV's thetas make nearly every kept row a code, that was tens of GiB of
  // f32 codes. The storage is [books][capacity]: every book is laid as long as the longest.
  static constexpr int64_t kCapacitySlack = 64;
  static int64_t planned_capacity(int64_t current, int64_t needed);
  // The arguments for an append of `rows` rows whose heads' block row 0 lies at dst_row[h], over
  // the given storage; then the append is counted (logged rows, bounds).
  DeviceCodebookAppendArgs append_args(int rows, const float* keys, const float* values, int64_t src_stride,
                                       int32_t first_position, const int64_t* dst_row, const RopeTableView& rope,
                                       void* key_arena, void* value_arena, KvType type, float* key_codes,
                                       float* value_codes, int32_t* key_count, int32_t* value_count,
                                       CodebookEntry* log);
  // The news from the device's counts ([books]): read_codes(key, book, first, n, out) copies codes
  // [first, first + n) of a book's half to out ([n][head_dim]), read_log(head, n, out) the head's
  // first n logged entries. The known counts become the device's and the log is emptied.
  // std::logic_error when a count is below the known one or past the room planned, or an entry
  // names no code (the device lacked room: a planning bug).
  using ReadCodes = std::function<void(bool key, int book, int32_t first, int32_t n, float* out)>;
  using ReadLog = std::function<void(int head, int64_t n, CodebookEntry* out)>;
  DeviceCodebookNews news(const std::vector<int32_t>& key_count, const std::vector<int32_t>& value_count,
                          const ReadCodes& read_codes, const ReadLog& read_log);

 private:
  int64_t largest_bound() const;  // the most codes any book may hold now (0 without books)
  int n_heads_ = 0, head_dim_ = 0;
  bool shared_ = false;
  std::vector<int32_t> known_key_, known_value_;  // [books]
  std::vector<int64_t> bound_;                    // [books]: the most codes either half may hold now
  std::vector<double> theta_key_, theta_value_;   // [heads]
  int64_t code_capacity_ = 0, log_capacity_ = 0, logged_ = 0;
};

}  // namespace kvevict
