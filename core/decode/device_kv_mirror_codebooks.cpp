// The device KV mirror's codebooks (SpindleKV): the host's codes sent to the device, and the host's
// catch-up from what the device matched while the layer lagged. Contract in device_kv_mirror.h.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/decode/device_kv_mirror.h"

namespace kvevict {

namespace {

int32_t codes_of(const std::vector<float>& codes, int head_dim) {
  return static_cast<int32_t>(codes.size() / static_cast<size_t>(head_dim));
}

}  // namespace

bool DeviceKvMirror::all_heads_codebook(int layer) const {
  for (int h = 0; h < n_heads_; ++h)
    if (!cache_.is_codebook(layer, h)) return false;
  return n_heads_ > 0;
}

void DeviceKvMirror::mark_codebooks_for_reload() {
  for (int l = 0; l < n_layers_; ++l) {
    LayerBooks& b = books_[static_cast<size_t>(l)];
    b.reload = true;
    if (b.loaded || all_heads_codebook(l)) layer_pending_[static_cast<size_t>(l)] = 1;
  }
}

// The device holds the layer's books exactly as the host does, and nothing else is pending: a
// block may be matched there.
bool DeviceKvMirror::codebooks_current(int layer) const {
  if (layer < 0 || layer >= n_layers_) return false;
  const LayerBooks& b = books_[static_cast<size_t>(layer)];
  if (!b.loaded || b.reload || layer_pending_[static_cast<size_t>(layer)]) return false;
  for (int h = 0; h < n_heads_; ++h)
    if (cache_.positions_reassigned(layer, h)) return false;  // its next position is the host's length
  return all_heads_codebook(layer);
}

// Books are sent whole after a reload mark or a change of layout, otherwise only the codes the host
// appended since (its own matches, in calls whose rows it took). A layer that is not all codebook
// heads holds no book on the device (its blocks are not matched there).
void DeviceKvMirror::send_codebooks(int layer) {
  LayerBooks& b = books_[static_cast<size_t>(layer)];
  if (!all_heads_codebook(layer)) {
    if (b.loaded) backend_.load_codebooks(layer, DeviceCodebookLoad{});
    b = LayerBooks{};
    return;
  }
  const LayerCodebook* shared = cache_.layer_codebook(layer);
  const size_t books = shared ? 1 : static_cast<size_t>(n_heads_);
  const bool whole = !b.loaded || b.reload || b.shared != (shared != nullptr) || b.key_codes.size() != books;
  DeviceCodebookLoad load;
  load.shared = shared != nullptr;
  load.books.resize(books);
  std::vector<int32_t> key_codes(books), value_codes(books);
  bool news = whole;
  for (size_t book = 0; book < books; ++book) {
    const CodebookHead& head = *cache_.codebook(layer, static_cast<int>(book));
    const std::vector<float>& keys = shared ? shared->key_codes : head.key_codes;
    const std::vector<float>& values = shared ? shared->value_codes : head.value_codes;
    key_codes[book] = codes_of(keys, head_dim_);
    value_codes[book] = codes_of(values, head_dim_);
    DeviceCodebookLoad::Book& out = load.books[book];
    out.first_key_code = whole ? 0 : std::min(b.key_codes[book], key_codes[book]);
    out.first_value_code = whole ? 0 : std::min(b.value_codes[book], value_codes[book]);
    out.key_codes.assign(keys.begin() + static_cast<ptrdiff_t>(out.first_key_code) * head_dim_, keys.end());
    out.value_codes.assign(values.begin() + static_cast<ptrdiff_t>(out.first_value_code) * head_dim_, values.end());
    news = news || !out.key_codes.empty() || !out.value_codes.empty() || key_codes[book] < b.key_codes[book] ||
           value_codes[book] < b.value_codes[book];
    counts_.codes_uploaded += static_cast<int64_t>((out.key_codes.size() + out.value_codes.size()) / head_dim_);
  }
  if (!news) return;
  for (int h = 0; h < n_heads_; ++h) {
    load.theta_key.push_back(cache_.codebook(layer, h)->theta_key);
    load.theta_value.push_back(cache_.codebook(layer, h)->theta_value);
  }
  backend_.load_codebooks(layer, load);
  b.loaded = true;
  b.reload = false;
  b.shared = load.shared;
  b.key_codes = std::move(key_codes);
  b.value_codes = std::move(value_codes);
}

// The `lag` rows the device appended to every head of the layer through its books: positions read
// from the device (the rows' words stay there: the host rebuilds them from the codes), codes and
// entries from its news, given to the host cache as its own appends
// would have stored them.
void DeviceKvMirror::append_lagging_codebook_entries(int layer, int lag) {
  LayerBooks& b = books_[static_cast<size_t>(layer)];
  if (!b.loaded) throw std::logic_error("device KV mirror: layer " + std::to_string(layer) + " lags by " +
                                        std::to_string(lag) + " codebook rows, but the device holds no book");
  std::vector<std::vector<int32_t>> positions(static_cast<size_t>(n_heads_));
  for (int h = 0; h < n_heads_; ++h) {
    const int64_t host = cache_.length(layer, h), device = backend_.layout().length(layer, h);
    if (device != host + lag)
      throw std::logic_error("device KV mirror: layer " + std::to_string(layer) + " head " + std::to_string(h) +
                             " holds " + std::to_string(device) + " entries on the device, " + std::to_string(host) +
                             " on the host, lagging " + std::to_string(lag));
    positions[static_cast<size_t>(h)] = backend_.read_positions(layer, h, host, lag);
  }
  const DeviceCodebookNews news = backend_.codebook_news(layer);
  const size_t books = b.key_codes.size();
  if (news.books.size() != books || news.entries.size() != static_cast<size_t>(n_heads_))
    throw std::logic_error("device KV mirror: the device's codebook news of layer " + std::to_string(layer) +
                           " has " + std::to_string(news.books.size()) + " books and " +
                           std::to_string(news.entries.size()) + " heads");
  host_lag_[static_cast<size_t>(layer)] = 0;  // the appends below are the catch-up, not new work
  filling_ = true;
  struct Done {
    bool& flag;
    ~Done() { flag = false; }
  } done{filling_};
  for (size_t book = 0; book < books; ++book) {
    const DeviceCodebookNews::Book& n = news.books[book];
    if (n.first_key_code != b.key_codes[book] || n.first_value_code != b.value_codes[book])
      throw std::logic_error("device KV mirror: book " + std::to_string(book) + " of layer " + std::to_string(layer) +
                             " went on from code " + std::to_string(n.first_key_code) + " / " +
                             std::to_string(n.first_value_code) + " on the device, " +
                             std::to_string(b.key_codes[book]) + " / " + std::to_string(b.value_codes[book]) +
                             " on the host");
    cache_.extend_codebook_codes(layer, static_cast<int>(book), n.key_codes, n.value_codes);
    b.key_codes[book] += codes_of(n.key_codes, head_dim_);
    b.value_codes[book] += codes_of(n.value_codes, head_dim_);
  }
  for (int h = 0; h < n_heads_; ++h) {
    const std::vector<CodebookEntry>& entries = news.entries[static_cast<size_t>(h)];
    if (entries.size() != static_cast<size_t>(lag))
      throw std::logic_error("device KV mirror: layer " + std::to_string(layer) + " head " + std::to_string(h) +
                             " logged " + std::to_string(entries.size()) + " codebook entries, lagging " +
                             std::to_string(lag));
    cache_.append_codebook_entries(layer, h, positions[static_cast<size_t>(h)], entries);
    counts_.rows_read += lag;
  }
}

}  // namespace kvevict
