// The device KV cache's codebooks; contract in device_kv_codebook.h. The kernel is thin: the
// element bodies live in core/decode/device_kv_codebook.h, shared with DeviceKvTwin, whose in-order
// loop (device_kv_twin_codebook.cpp) this kernel reproduces bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/decode/cuda/device_kv_codebook.h"
#include "core/decode/cuda/device_memory.h"
#include "core/decode/cuda/launch_status.h"

namespace kvevict::cuda {

namespace {

constexpr int kCodebookThreads = 256;

// Arguments travel by value (parameter space, at most 4 KiB on every architecture we build for).
static_assert(sizeof(DeviceCodebookAppendArgs) <= 4096, "kernel parameters");
// A row's scratch and unit vector (2 * head_dim f32) fit the dynamic shared memory a launch gets
// without opting in (48 KiB), for every head_dim a geometry accepts (kDeviceKvMaxRowWords).
static_assert(2 * kDeviceKvMaxRowWords * sizeof(float) <= 48 * 1024, "codebook shared memory");

// One block per book. Its heads in order, each head's rows in order, the key then the value (the
// twin's order: a code added by one row may be matched by the next, of this head or the next). Per
// row: thread 0 makes the unit vector; every thread scans codes tid, tid + 256, ... below the count
// and keeps its best by codebook_match_beats; a tree reduction by the same rule (order-independent:
// the highest cosine above theta, then the lowest index) gives the in-order scan's answer; thread 0
// commits it (perhaps appending a code, counting it, logging the entry); then every thread stores
// its share of the reconstruction. The count and the codes are read from global memory after each
// barrier: __syncthreads makes thread 0's writes of the previous row visible to the block.
__global__ void __launch_bounds__(kCodebookThreads) codebook_append_kernel(const DeviceCodebookAppendArgs a) {
  extern __shared__ float row_floats[];  // [scratch: head_dim][unit: head_dim]
  __shared__ float best_dot[kCodebookThreads];
  __shared__ int32_t best_code[kCodebookThreads];
  __shared__ float row_norm;
  __shared__ int32_t row_code;
  float* const scratch = row_floats;
  float* const unit = row_floats + a.head_dim;
  const int book = static_cast<int>(blockIdx.x), tid = static_cast<int>(threadIdx.x);
  for (int h = device_codebook_first_head(a, book); h < device_codebook_end_head(a, book); ++h)
    for (int r = 0; r < a.rows; ++r)
      for (int side = 0; side < 2; ++side) {
        const bool key = side == 0;
        if (tid == 0) row_norm = device_codebook_row_unit(a, h, r, key, scratch, unit);
        __syncthreads();
        const double theta = key ? a.theta_key[h] : a.theta_value[h];
        const float* codes = device_codebook_codes(a, key, book);
        const int32_t count = *device_codebook_count(a, key, book);
        int32_t best = -1;  // none yet
        float dot_best = 0.0f;
        for (int32_t c = tid; c < count; c += kCodebookThreads) {
          const float dot = codebook_dot(codes + static_cast<size_t>(c) * a.head_dim, unit, a.head_dim);
          if (codebook_match_beats(dot, c, theta, dot_best, best)) {
            best = c;
            dot_best = dot;
          }
        }
        best_dot[tid] = dot_best;
        best_code[tid] = best;
        __syncthreads();
        for (int half = kCodebookThreads / 2; half > 0; half /= 2) {
          if (tid < half) {
            const int32_t other = best_code[tid + half];
            if (other >= 0 && codebook_match_beats(best_dot[tid + half], other, theta, best_dot[tid], best_code[tid])) {
              best_dot[tid] = best_dot[tid + half];
              best_code[tid] = other;
            }
          }
          __syncthreads();
        }
        if (tid == 0) row_code = device_codebook_commit(a, book, h, r, key, best_code[0], unit, row_norm);
        __syncthreads();
        const int32_t index = row_code;
        const float norm = row_norm;
        for (int i = tid; i < device_codebook_row_elements(a, key); i += kCodebookThreads)
          device_codebook_store_element(a, book, h, r, key, index, norm, i);
        __syncthreads();  // the next row overwrites the shared row and may match the code just added
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

DeviceKvCodebooks::DeviceKvCodebooks(int n_layers, int n_heads, int head_dim) : n_heads_(n_heads), head_dim_(head_dim) {
  for (int l = 0; l < n_layers; ++l) layers_.push_back(std::make_unique<Layer>(n_heads, head_dim));
}

size_t DeviceKvCodebooks::bytes_reserved() const {
  size_t total = 0;
  for (const std::unique_ptr<Layer>& l : layers_)
    total += (l->key_codes->size() + l->value_codes->size()) * sizeof(float) +
             (l->key_count.size() + l->value_count.size()) * sizeof(int32_t) + l->log->size() * sizeof(CodebookEntry);
  return total;
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
  if (code_capacity != old_codes || books != c.laid_books) {
    const size_t keep = books == c.laid_books ? static_cast<size_t>(std::min(old_codes, code_capacity)) : 0;
    c.key_codes = relaid(*c.key_codes, books, static_cast<size_t>(old_codes), keep, static_cast<size_t>(code_capacity),
                         d, "device codebook growth (key codes)");
    c.value_codes = relaid(*c.value_codes, books, static_cast<size_t>(old_codes), keep,
                           static_cast<size_t>(code_capacity), d, "device codebook growth (value codes)");
    c.laid_books = books;
  }
  if (log_capacity != old_log)
    c.log = relaid(*c.log, static_cast<size_t>(n_heads_), static_cast<size_t>(old_log),
                   static_cast<size_t>(std::min(old_log, log_capacity)), static_cast<size_t>(log_capacity), 1,
                   "device codebook growth (log)");
  c.books.grown(code_capacity, log_capacity);
}

void DeviceKvCodebooks::load(int layer, const DeviceCodebookLoad& load) {
  Layer& c = this->layer(layer);
  const bool same_books = static_cast<int>(load.books.size()) == c.books.books() && load.shared == c.books.shared();
  const int64_t capacity = c.books.load(load);
  if (!same_books) c.laid_books = 0;  // a fresh layout: no code held carries over
  grow(c, capacity, c.books.log_capacity());
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
  const DeviceCodebookAppendArgs args =
      c.books.append_args(rows, keys, values, src_stride, first_position, dst_row, rope, key_arena, value_arena, type,
                          c.key_codes->data(), c.value_codes->data(), c.key_count.data(), c.value_count.data(),
                          c.log->data());
  const size_t shared_bytes = 2 * static_cast<size_t>(head_dim_) * sizeof(float);
  codebook_append_kernel<<<static_cast<unsigned>(device_codebook_books(args)), kCodebookThreads, shared_bytes>>>(args);
  check_launch("device codebook append kernel");
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
