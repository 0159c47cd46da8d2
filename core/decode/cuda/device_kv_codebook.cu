// The device KV cache's codebooks; contract in device_kv_codebook.h. The kernels are thin: the
// element bodies live in core/decode/device_kv_codebook.h and device_kv_codebook_scan.h, shared with
// DeviceKvTwin, whose three steps (device_kv_twin_codebook.cpp) these kernels reproduce bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/decode/cuda/device_kv_codebook.h"
#include "core/decode/device_kv_codebook_scan.h"
#include "core/decode/cuda/device_memory.h"
#include "core/decode/cuda/launch_status.h"

namespace kvevict::cuda {

namespace {

constexpr int kCodebookThreads = 256;
// Codes per chunk of step 2: 4 per thread, so a 64K-code book is 64 blocks per query.
constexpr int32_t kCodebookChunkCodes = 4 * kCodebookThreads;

// Arguments travel by value (parameter space, at most 4 KiB on every architecture we build for).
static_assert(sizeof(DeviceCodebookAppendArgs) <= 4096, "kernel parameters");
static_assert(sizeof(DeviceCodebookScan) <= 256, "kernel parameters");

// The three steps of device_kv_codebook_scan.h, each a kernel on the legacy default stream (so each
// sees the previous one's writes).

// Step 1: one thread per query makes its unit vector (device_codebook_row_unit: one thread's work,
// whose double sum runs in element order as on the host).
constexpr int kUnitThreads = 128;
__global__ void __launch_bounds__(kUnitThreads) codebook_units_kernel(const DeviceCodebookAppendArgs a,
                                                                      const DeviceCodebookScan s) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * kUnitThreads + threadIdx.x;
  if (q < device_codebook_queries(a)) device_codebook_query_unit(a, s, static_cast<int>(q));
}

// A block's best match: every thread's by the rule, reduced in shared memory by the same rule
// (order-independent). Every thread of the block calls it; thread 0 gets the answer.
__device__ CodebookMatch block_best(CodebookMatch mine, double theta, float* dots, int32_t* codes) {
  const int tid = static_cast<int>(threadIdx.x);
  dots[tid] = mine.dot;
  codes[tid] = mine.code;
  __syncthreads();
  for (int half = kCodebookThreads / 2; half > 0; half /= 2) {
    if (tid < half) {
      const CodebookMatch other{dots[tid + half], codes[tid + half]};
      const CodebookMatch best = codebook_better(CodebookMatch{dots[tid], codes[tid]}, other, theta);
      dots[tid] = best.dot;
      codes[tid] = best.code;
    }
    __syncthreads();
  }
  return CodebookMatch{dots[0], codes[0]};
}

// Step 2: one block per (query, chunk), flattened as q * chunks + k: its chunk of the codes its
// book held when the append began (no kernel of the append has added any yet), 256 threads
// striding over it.
__global__ void __launch_bounds__(kCodebookThreads) codebook_chunks_kernel(const DeviceCodebookAppendArgs a,
                                                                           const DeviceCodebookScan s) {
  __shared__ float dots[kCodebookThreads];
  __shared__ int32_t codes[kCodebookThreads];
  const int64_t block = blockIdx.x;
  const int q = static_cast<int>(block / s.chunks), k = static_cast<int>(block % s.chunks);
  const int h = device_codebook_query_head(a, q);
  const bool key = device_codebook_query_key(q);
  const int32_t count = *device_codebook_count(a, key, device_codebook_book_of(a, h));
  const CodebookMatch mine =
      device_codebook_chunk_match(a, s, q, k, count, static_cast<int>(threadIdx.x), kCodebookThreads);
  const CodebookMatch best = block_best(mine, device_codebook_theta(a, h, key), dots, codes);
  if (threadIdx.x == 0) s.chunk_best[static_cast<size_t>(q) * s.chunks + k] = best;
}

// Step 3: one block per book, in the twin's order (its heads, each head's rows, the key then the
// value: a code added by one row may be matched by the next, of this head or the next). Per query:
// every thread folds its share of the chunks' matches and of the codes this append added so far;
// the block's best by the same rule is the in-order scan's answer; thread 0 commits it (perhaps
// appending a code, counting it, logging the entry); then every thread stores its share of the
// reconstruction. The counts are read from global memory after each barrier: __syncthreads makes
// thread 0's writes of the previous query visible to the block; the counts when the append began
// are read before any commit.
__global__ void __launch_bounds__(kCodebookThreads) codebook_commit_kernel(const DeviceCodebookAppendArgs a,
                                                                           const DeviceCodebookScan s) {
  __shared__ float dots[kCodebookThreads];
  __shared__ int32_t codes[kCodebookThreads];
  __shared__ int32_t launch_count[2];  // key, value
  __shared__ int32_t row_code;
  const int book = static_cast<int>(blockIdx.x), tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    launch_count[0] = *device_codebook_count(a, true, book);
    launch_count[1] = *device_codebook_count(a, false, book);
  }
  __syncthreads();
  for (int h = device_codebook_first_head(a, book); h < device_codebook_end_head(a, book); ++h)
    for (int r = 0; r < a.rows; ++r)
      for (int side = 0; side < 2; ++side) {
        const bool key = side == 0;
        const int q = device_codebook_query(a, h, r, key);
        const double theta = device_codebook_theta(a, h, key);
        const int32_t count = *device_codebook_count(a, key, book);
        const CodebookMatch mine =
            codebook_better(device_codebook_chunks_best(a, s, q, tid, kCodebookThreads),
                            device_codebook_new_codes_match(a, s, q, launch_count[side], count, tid, kCodebookThreads),
                            theta);
        const CodebookMatch best = block_best(mine, theta, dots, codes);
        const float norm = s.norms[q];
        if (tid == 0)
          row_code = device_codebook_commit(a, book, h, r, key, best.code,
                                            s.units + static_cast<size_t>(q) * a.head_dim, norm);
        __syncthreads();
        const int32_t index = row_code;
        for (int i = tid; i < device_codebook_row_elements(a, key); i += kCodebookThreads)
          device_codebook_store_element(a, book, h, r, key, index, norm, i);
        __syncthreads();  // the next query reads the count thread 0 may have raised, and row_code
      }
}

void check_launch(const char* what) { check(launch_status(), what); }

// A fresh [groups][capacity][width] array holding, per group, the first keep * width elements of
// the group in `old` ([groups][old_capacity][width]); asynchronous device-to-device copies (the
// old array's cudaFree waits for them).
template <typename T>
std::unique_ptr<DeviceArray<T>> relaid(const DeviceArray<T>& old, size_t groups, size_t old_capacity, size_t keep,
                                       size_t capacity, size_t width, const char* what) {
  auto fresh = std::make_unique<DeviceArray<T>>(groups * capacity * width);
  if (keep == 0) return fresh;
  for (size_t g = 0; g < groups; ++g)
    check(cudaMemcpyAsync(fresh->data() + g * capacity * width, old.data() + g * old_capacity * width,
                          keep * width * sizeof(T), cudaMemcpyDeviceToDevice, nullptr),
          what);
  return fresh;
}

}  // namespace

struct DeviceKvCodebooks::Layer {
  Layer(int n_heads, int head_dim) : books(n_heads, head_dim) {}
  DeviceCodebookBooks books;
  size_t laid_books = 0;  // books the code arrays are laid out for
  std::unique_ptr<DeviceArray<float>> key_codes = std::make_unique<DeviceArray<float>>();  // [books][capacity][d]
  std::unique_ptr<DeviceArray<float>> value_codes = std::make_unique<DeviceArray<float>>();
  DeviceArray<int32_t> key_count, value_count;                                           // [books]
  std::unique_ptr<DeviceArray<CodebookEntry>> log = std::make_unique<DeviceArray<CodebookEntry>>();  // [heads][capacity]
};

struct DeviceKvCodebooks::ScanScratch {
  DeviceArray<float> pre, units, norms;
  DeviceArray<CodebookMatch> chunk_best;
};

DeviceKvCodebooks::DeviceKvCodebooks(int n_layers, int n_heads, int head_dim)
    : n_heads_(n_heads), head_dim_(head_dim), scan_(std::make_unique<ScanScratch>()) {
  for (int l = 0; l < n_layers; ++l) layers_.push_back(std::make_unique<Layer>(n_heads, head_dim));
}

size_t DeviceKvCodebooks::bytes_reserved() const {
  size_t total = 0;
  for (const std::unique_ptr<Layer>& l : layers_)
    total += (l->key_codes->size() + l->value_codes->size()) * sizeof(float) +
             (l->key_count.size() + l->value_count.size()) * sizeof(int32_t) + l->log->size() * sizeof(CodebookEntry);
  return total;  // the appends' scratch is workspace, not what the books hold
}

DeviceKvCodebooks::~DeviceKvCodebooks() = default;

void DeviceKvCodebooks::check_layer(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(layers_.size()))
    throw std::invalid_argument("device codebook: layer " + std::to_string(layer) + " outside [0, " +
                                std::to_string(layers_.size()) + ")");
}

DeviceKvCodebooks::Layer& DeviceKvCodebooks::layer(int l) {
  check_layer(l);
  return *layers_[static_cast<size_t>(l)];
}

// Re-lays the codes and the log for capacities that hold the given ones, keeping what they hold
// (the codes only while the book layout they were laid for stands).
void DeviceKvCodebooks::grow(Layer& c, int64_t code_capacity, int64_t log_capacity) {
  const size_t d = static_cast<size_t>(head_dim_), books = static_cast<size_t>(c.books.books());
  const int64_t old_codes = c.books.code_capacity(), old_log = c.books.log_capacity();
  code_capacity = DeviceCodebookBooks::planned_capacity(old_codes, code_capacity);
  log_capacity = DeviceCodebookBooks::planned_capacity(old_log, log_capacity);
  // Every new array is made before any is swapped in, so an allocation that fails (out of device
  // memory) leaves the layer as it was: arrays and recorded capacities agree.
  std::unique_ptr<DeviceArray<float>> key_codes, value_codes;
  std::unique_ptr<DeviceArray<CodebookEntry>> log;
  if (code_capacity != old_codes || books != c.laid_books) {
    const size_t keep = books == c.laid_books ? static_cast<size_t>(std::min(old_codes, code_capacity)) : 0;
    key_codes = relaid(*c.key_codes, books, static_cast<size_t>(old_codes), keep, static_cast<size_t>(code_capacity), d,
                       "device codebook growth (key codes)");
    value_codes = relaid(*c.value_codes, books, static_cast<size_t>(old_codes), keep,
                         static_cast<size_t>(code_capacity), d, "device codebook growth (value codes)");
  }
  if (log_capacity != old_log)
    log = relaid(*c.log, static_cast<size_t>(n_heads_), static_cast<size_t>(old_log),
                 static_cast<size_t>(std::min(old_log, log_capacity)), static_cast<size_t>(log_capacity), 1,
                 "device codebook growth (log)");
  c.books.grown(code_capacity, log_capacity);  // checks only (a logic_error): before anything is swapped
  if (key_codes) {
    c.key_codes = std::move(key_codes);
    c.value_codes = std::move(value_codes);
    c.laid_books = books;
  }
  if (log) c.log = std::move(log);
}

void DeviceKvCodebooks::load(int layer, const DeviceCodebookLoad& load) {
  Layer& c = this->layer(layer);
  const bool same_books = static_cast<int>(load.books.size()) == c.books.books() && load.shared == c.books.shared();
  const DeviceCodebookBooks before = c.books;
  const size_t laid_before = c.laid_books;
  const int64_t capacity = c.books.load(load);
  if (!same_books) c.laid_books = 0;  // a fresh layout: no code held carries over
  try {
    grow(c, capacity, c.books.log_capacity());
  } catch (...) {  // out of device memory: the layer stays as it was (grow swapped nothing in)
    c.books = before;
    c.laid_books = laid_before;
    throw;
  }
  const size_t books = load.books.size(), d = static_cast<size_t>(head_dim_);
  const size_t cap = static_cast<size_t>(c.books.code_capacity());
  std::vector<int32_t> key_count(books), value_count(books);
  for (size_t b = 0; b < books; ++b) {
    const DeviceCodebookLoad::Book& book = load.books[b];
    if (!book.key_codes.empty())
      c.key_codes->upload(book.key_codes.data(), book.key_codes.size(), (b * cap + size_t(book.first_key_code)) * d);
    if (!book.value_codes.empty())
      c.value_codes->upload(book.value_codes.data(), book.value_codes.size(),
                            (b * cap + size_t(book.first_value_code)) * d);
    key_count[b] = c.books.known_key(static_cast<int>(b));
    value_count[b] = c.books.known_value(static_cast<int>(b));
  }
  c.key_count.upload(key_count);
  c.value_count.upload(value_count);
}

void DeviceKvCodebooks::reserve(int layer, int rows) {
  Layer& c = this->layer(layer);
  grow(c, c.books.codes_needed_for(rows), c.books.log_needed_for(rows));
}

void DeviceKvCodebooks::append(int layer, int rows, const float* keys, const float* values, int64_t src_stride,
                               int32_t first_position, const int64_t* dst_row, const RopeTableView& rope,
                               void* key_arena, void* value_arena, KvType type) {
  Layer& c = this->layer(layer);
  // The split's size is checked before append_args counts the append (its bookkeeping then stays
  // the twin's): the capacity is the one reserve() laid for it.
  DeviceCodebookScan s;
  s.chunk_codes = kCodebookChunkCodes;
  s.chunks = std::max(1, device_codebook_chunks(c.books.code_capacity(), s.chunk_codes));
  const int64_t chunk_blocks = int64_t{n_heads_} * rows * 2 * s.chunks;
  if (chunk_blocks > INT32_MAX)
    throw std::invalid_argument("device codebook: an append of " + std::to_string(rows) + " rows over " +
                                std::to_string(s.chunks) + " chunks needs more blocks than a launch holds");
  const DeviceCodebookAppendArgs args =
      c.books.append_args(rows, keys, values, src_stride, first_position, dst_row, rope, key_arena, value_arena, type,
                          c.key_codes->data(), c.value_codes->data(), c.key_count.data(), c.value_count.data(),
                          c.log->data());
  const int queries = device_codebook_queries(args);
  if (queries == 0) return;
  const size_t d = static_cast<size_t>(head_dim_);
  scan_->pre.resize(static_cast<size_t>(queries) * d);
  scan_->units.resize(static_cast<size_t>(queries) * d);
  scan_->norms.resize(static_cast<size_t>(queries));
  scan_->chunk_best.resize(static_cast<size_t>(queries) * static_cast<size_t>(s.chunks));
  s.pre = scan_->pre.data();
  s.units = scan_->units.data();
  s.norms = scan_->norms.data();
  s.chunk_best = scan_->chunk_best.data();
  const unsigned unit_blocks = static_cast<unsigned>((queries + kUnitThreads - 1) / kUnitThreads);
  codebook_units_kernel<<<unit_blocks, kUnitThreads>>>(args, s);
  check_launch("device codebook units kernel");
  codebook_chunks_kernel<<<static_cast<unsigned>(chunk_blocks), kCodebookThreads>>>(args, s);
  check_launch("device codebook chunks kernel");
  codebook_commit_kernel<<<static_cast<unsigned>(device_codebook_books(args)), kCodebookThreads>>>(args, s);
  check_launch("device codebook commit kernel");
}

DeviceCodebookNews DeviceKvCodebooks::news(int layer) {
  Layer& c = this->layer(layer);
  const size_t books = static_cast<size_t>(c.books.books()), d = static_cast<size_t>(head_dim_);
  const size_t cap = static_cast<size_t>(c.books.code_capacity()), log_cap = static_cast<size_t>(c.books.log_capacity());
  std::vector<int32_t> key_count(books), value_count(books);
  if (books > 0) {  // synchronous on the legacy stream: after every append launched before
    c.key_count.download(key_count.data(), books);
    c.value_count.download(value_count.data(), books);
  }
  return c.books.news(
      key_count, value_count,
      [&](bool key, int book, int32_t first, int32_t n, float* out) {
        (key ? *c.key_codes : *c.value_codes).download(out, size_t(n) * d, (size_t(book) * cap + size_t(first)) * d);
      },
      [&](int head, int64_t n, CodebookEntry* out) { c.log->download(out, size_t(n), size_t(head) * log_cap); });
}

}  // namespace kvevict::cuda
