// Weights to the device; contract in weight_upload.h.
#include "core/decode/cuda/weight_upload.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <system_error>
#include <thread>

#include "core/decode/quant_dot.h"
#include "core/util/thread_count.h"

namespace kvevict::cuda {

namespace {

constexpr int kUploadRows = 256;
constexpr size_t kPieceElements = size_t{1} << 20;  // scratch per piece: 4 + sizeof(T) bytes each
constexpr int kMaxUploadThreads = 32;  // bounds the batch's scratch (32 pieces: 192 MiB for fp16)

template <typename T>
T to_device_type(float v);
template <>
__half to_device_type<__half>(float v) { return __float2half(v); }
template <>
float to_device_type<float>(float v) { return v; }

// Runs work(p) for p in [0, n) on up to `workers` threads, this one included; rethrows the first
// exception a piece threw once every thread has stopped.
template <typename Work>
void run_pieces(int n, int workers, const Work& work) {
  std::atomic<int> next{0};
  std::vector<std::exception_ptr> errors(static_cast<size_t>(std::max(1, workers)));
  auto loop = [&](size_t w) {
    try {
      for (int p = next.fetch_add(1); p < n; p = next.fetch_add(1)) work(p);
    } catch (...) {
      errors[w] = std::current_exception();
      next.store(n);  // the others stop after their current piece
    }
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < std::min(workers, n); ++w) {
    try {
      threads.emplace_back(loop, static_cast<size_t>(w));
    } catch (const std::system_error&) {
      break;  // no more threads to be had: the ones running (and this one) do the rest
    }
  }
  loop(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

template <typename T>
DeviceArray<T>* upload_matrix(const TypedMatrix& m, std::vector<std::unique_ptr<DeviceArray<T>>>& owner) {
  owner.push_back(std::make_unique<DeviceArray<T>>());
  DeviceArray<T>& dev = *owner.back();
  const size_t cols = static_cast<size_t>(m.cols);
  dev.resize(static_cast<size_t>(m.rows) * cols);
  if (m.rows <= 0 || cols == 0) return &dev;
  const int piece_rows =
      static_cast<int>(std::clamp<size_t>(kPieceElements / cols, 1, static_cast<size_t>(kUploadRows)));
  const int pieces = (m.rows + piece_rows - 1) / piece_rows;
  const int workers = std::min({max_threads(), kMaxUploadThreads, pieces});
  const int batch_rows = static_cast<int>(std::min<int64_t>(m.rows, int64_t{piece_rows} * workers));
  std::vector<float> rows(static_cast<size_t>(batch_rows) * cols);
  std::vector<T> converted(rows.size());
  for (int b0 = 0; b0 < m.rows; b0 += batch_rows) {
    const int b1 = std::min(m.rows, b0 + batch_rows);
    run_pieces((b1 - b0 + piece_rows - 1) / piece_rows, workers, [&](int p) {
      const int r0 = b0 + p * piece_rows, r1 = std::min(b1, r0 + piece_rows);
      const size_t at = static_cast<size_t>(r0 - b0) * cols, count = static_cast<size_t>(r1 - r0) * cols;
      quant::dequantize_rows(m, r0, r1, rows.data() + at);
      for (size_t i = at; i < at + count; ++i) converted[i] = to_device_type<T>(rows[i]);
    });
    dev.upload(converted.data(), static_cast<size_t>(b1 - b0) * cols, static_cast<size_t>(b0) * cols);
  }
  return &dev;
}

DeviceArray<float>* upload_float(const std::vector<float>& host, std::vector<std::unique_ptr<DeviceArray<float>>>& owner) {
  owner.push_back(std::make_unique<DeviceArray<float>>());
  owner.back()->upload(host);
  return owner.back().get();
}

template DeviceArray<__half>* upload_matrix<__half>(const TypedMatrix&, std::vector<std::unique_ptr<DeviceArray<__half>>>&);
template DeviceArray<float>* upload_matrix<float>(const TypedMatrix&, std::vector<std::unique_ptr<DeviceArray<float>>>&);

}  // namespace kvevict::cuda
