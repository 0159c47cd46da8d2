// The device-resident KV cache; contract in device_kv_cache.h. The kernels are thin: their
// per-element bodies live in core/decode/device_kv_elements.h, shared with the host twin.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/decode/cuda/launch_status.h"
#include "core/decode/cuda/device_kv_cache.h"
#include "core/decode/cuda/device_kv_codebook.h"
#include "core/decode/cuda/device_memory.h"
#include "core/decode/device_kv_elements.h"
#include "core/decode/device_kv_merges.h"
#include "core/decode/device_kv_reassign.h"
#include "core/decode/device_kv_row_norms.h"
#include "core/decode/device_kv_row_range.h"

namespace kvevict::cuda {

namespace {

constexpr int kAppendThreads = 256;

// Arguments travel by value (parameter space, at most 4 KiB on every architecture we build for).
static_assert(sizeof(DeviceKvAppendArgs) <= 4096 && sizeof(DeviceKvCompactArgs) <= 4096, "kernel parameters");

__global__ void append_kernel(const DeviceKvAppendArgs args, size_t count) {
  const size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (e < count) device_kv_append_element(args, e);
}

// One block per listed head; its chunks in ascending order, each loaded whole before it is stored.
__global__ void __launch_bounds__(kDeviceKvCompactThreads) compact_kernel(const DeviceKvCompactArgs args) {
  const int block = blockIdx.x;
  const int chunks = device_kv_compact_chunks(args, block);
  DeviceKvCompactRegs regs;
  for (int chunk = 0; chunk < chunks; ++chunk) {
    device_kv_compact_load(args, block, chunk, threadIdx.x, regs);
    __syncthreads();
    device_kv_compact_store(args, block, chunk, threadIdx.x, regs);
    __syncthreads();
  }
}

__global__ void write_kernel(const DeviceKvWriteArgs args, size_t count) {
  const size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (e < count) device_kv_write_element(args, e);
}

__global__ void gather_kernel(const DeviceKvGatherArgs args, size_t count) {
  const size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (e < count) device_kv_gather_element(args, e);
}

static_assert(sizeof(DeviceKvRowNormArgs) <= 4096, "kernel parameters");

// One thread per requested row, summing its elements in order (row_norms.h: the host's bits).
__global__ void row_norm_kernel(const DeviceKvRowNormArgs args, size_t count) {
  const size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (e < count) device_kv_row_norm_element(args, e);
}

static_assert(sizeof(DeviceKvReassignArgs) <= 4096, "kernel parameters");

// One thread per entry of the listed heads (its pairs in order, as the host rotates them).
__global__ void reassign_kernel(const DeviceKvReassignArgs args, size_t count) {
  const size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (e < count) (void)device_kv_reassign_element(args, e);
}

static_assert(sizeof(DeviceKvNearestArgs) <= 4096 && sizeof(DeviceKvFoldArgs) <= 4096 &&
                  sizeof(DeviceKvValueNormArgs) <= 4096,
              "kernel parameters");

__global__ void kept_norm_kernel(const DeviceKvNearestArgs args) {
  const int32_t j = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (j < args.n_kept) device_kv_kept_norm_element(args, j);
}

constexpr int kNearestThreads = 256;

// One block per evicted entry: each thread the best of its head's kept keys tid, tid + 256, ... (in order),
// then a tree reduction by better_key_match, which keeps the first kept position among equal
// cosines: the in-order search's answer (device_kv_merges.h).
__global__ void __launch_bounds__(kNearestThreads) nearest_kept_kernel(const DeviceKvNearestArgs args) {
  __shared__ double best[kNearestThreads];
  __shared__ int32_t best_kept[kNearestThreads];
  const int32_t e = static_cast<int32_t>(blockIdx.x);
  const int tid = threadIdx.x;
  const double norm_e = device_kv_evicted_norm(args, e);
  double b = -INFINITY;
  int32_t bj = INT32_MAX;  // none yet
  const int32_t begin = args.kept_begin[e], end = args.kept_end[e];
  for (int32_t j = begin + tid; j < end; j += kNearestThreads) {
    const double s = device_kv_key_cosine(args, e, norm_e, j);
    if (better_key_match(s, j - begin, b, bj)) {
      b = s;
      bj = j - begin;
    }
  }
  best[tid] = b;
  best_kept[tid] = bj;
  __syncthreads();
  for (int half = kNearestThreads / 2; half > 0; half /= 2) {
    if (tid < half && better_key_match(best[tid + half], best_kept[tid + half], best[tid], best_kept[tid])) {
      best[tid] = best[tid + half];
      best_kept[tid] = best_kept[tid + half];
    }
    __syncthreads();
  }
  if (tid == 0) args.matches[e] = best_kept[0] == INT32_MAX ? KeptKeyMatch{-INFINITY, 0} : KeptKeyMatch{best[0], best_kept[0]};
}

__global__ void value_norm_kernel(const DeviceKvValueNormArgs args) {
  const int32_t i = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < args.n) device_kv_value_norm_element(args, i);
}

__global__ void fold_kernel(const DeviceKvFoldArgs args, size_t count) {
  const size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (e < count) device_kv_fold_element(args, e);
}

void check_launch(const char* what) { check(launch_status(), what); }

// One layer's device arenas: keys and values as 16-bit words, positions.
struct LayerArenas {
  DeviceArray<uint16_t> keys, values;
  DeviceArray<int32_t> positions;
  LayerArenas(const DeviceKvLayerLayout& layout, int row_words)
      : LayerArenas(static_cast<size_t>(layout.capacity_rows()), row_words) {}
  LayerArenas(size_t rows, int row_words) { resize(rows, row_words); }
  void resize(size_t rows, int row_words) {  // grows only; contents not kept
    keys.resize(rows * row_words);
    values.resize(rows * row_words);
    positions.resize(rows);
  }
};

// Device-to-device copies of whole rows, asynchronous on the default stream.
void copy_rows(const LayerArenas& from, LayerArenas& to, const std::vector<DeviceKvCopy>& copies, int row_words) {
  const size_t rw = static_cast<size_t>(row_words);
  for (const DeviceKvCopy& c : copies) {
    const size_t s = size_t(c.src_row), d = size_t(c.dst_row), n = size_t(c.rows);
    check(cudaMemcpyAsync(to.keys.data() + d * rw, from.keys.data() + s * rw, n * rw * sizeof(uint16_t),
                          cudaMemcpyDeviceToDevice, nullptr),
          "device KV copy (keys)");
    check(cudaMemcpyAsync(to.values.data() + d * rw, from.values.data() + s * rw, n * rw * sizeof(uint16_t),
                          cudaMemcpyDeviceToDevice, nullptr),
          "device KV copy (values)");
    check(cudaMemcpyAsync(to.positions.data() + d, from.positions.data() + s, n * sizeof(int32_t),
                          cudaMemcpyDeviceToDevice, nullptr),
          "device KV copy (positions)");
  }
}

}  // namespace

struct DeviceKvSnapshot::Data {
  DeviceKvLayout layout;
  std::vector<std::unique_ptr<LayerArenas>> layers;
};

DeviceKvSnapshot::DeviceKvSnapshot() = default;
DeviceKvSnapshot::~DeviceKvSnapshot() = default;
DeviceKvSnapshot::DeviceKvSnapshot(DeviceKvSnapshot&&) noexcept = default;
DeviceKvSnapshot& DeviceKvSnapshot::operator=(DeviceKvSnapshot&&) noexcept = default;
const DeviceKvLayout& DeviceKvSnapshot::layout() const {
  if (!data_) throw std::logic_error("device KV snapshot: empty");
  return data_->layout;
}

struct DeviceKvCache::Impl {
  DeviceKvLayout layout;
  std::vector<std::unique_ptr<LayerArenas>> arenas;  // [layer]
  DeviceArray<float> upload_keys, upload_values;     // append_from_host's and write_rows' staging
  DeviceArray<int32_t> upload_positions;             // write_rows' staging
  DeviceArray<int32_t> src_rows;                     // compaction plans' source rows
  DeviceArray<int64_t> gather_src;                   // out-of-place heads' source rows
  std::unique_ptr<LayerArenas> scratch;              // their scratch rows
  DeviceArray<float> norms;                          // row_norms' output: [key norms][value norms]
  DeviceArray<int64_t> merge_rows;                   // nearest_kept_keys' [kept][evicted] arena rows
  DeviceArray<int32_t> merge_ranges;                 // ... each evicted entry's [begin][end] kept range
  DeviceArray<int32_t> norm_rows;                    // value_norms' rows
  DeviceArray<double> merge_norms;                   // ... its kept keys' norms; value_norms' answer
  DeviceArray<KeptKeyMatch> matches;                 // nearest_kept_keys' answer
  DeviceArray<RowFold> folds;                        // fold_rows' plan
  DeviceArray<RowFoldTerm> terms;
  DeviceArray<float> rope_cos, rope_sin;             // the device copy of the host RoPE table (device_rope)
  int rope_positions = 0;                            // positions of that copy
  std::unique_ptr<DeviceKvCodebooks> codebook_state; // SpindleKV's codebooks, made at their first use

  int row_words() const { return layout.geometry().row_words(); }
  LayerArenas& layer(int l) { return *arenas[size_t(l)]; }
  DeviceKvCodebooks& codebooks() {
    if (!codebook_state)
      codebook_state = std::make_unique<DeviceKvCodebooks>(layout.geometry().n_layers, layout.geometry().n_heads,
                                                           layout.geometry().head_dim);
    return *codebook_state;
  }
  // The host RoPE table on the device (reassign_positions, codebook_append): the host table only
  // grows, so it is copied whole, rarely, when it has more positions than the copy. The view's
  // positions are the copy's.
  RopeTableView device_rope(const RopeTableView& rope) {
    if (rope.positions > rope_positions) {
      const size_t n = size_t(rope.positions) * size_t(rope.half);
      rope_cos.resize(n);
      rope_sin.resize(n);
      rope_cos.upload(rope.cos, n);
      rope_sin.upload(rope.sin, n);
      rope_positions = rope.positions;
    }
    RopeTableView on_device = rope;
    on_device.cos = rope_cos.data();
    on_device.sin = rope_sin.data();
    on_device.positions = rope_positions;
    return on_device;
  }
  void relocate(int l, DeviceKvLayerLayout to) {
    auto fresh = std::make_unique<LayerArenas>(to, row_words());
    copy_rows(layer(l), *fresh, plan_copy(layout.layer(l), to), row_words());
    arenas[size_t(l)] = std::move(fresh);  // cudaFree of the old arenas waits for the copies
    layout.set_layer(l, std::move(to));
  }
  // The gather's scratch rows and source list, in place before any row of the layer moves: an
  // allocation that fails then leaves the cache as it was.
  void prepare_gather(const DeviceKvCompactionPlan& plan) {
    const size_t rows = plan.gather_src.size();
    if (!scratch) scratch = std::make_unique<LayerArenas>(rows, row_words());
    scratch->resize(rows, row_words());
    gather_src.resize(rows);
    gather_src.upload(plan.gather_src.data(), rows);
  }
  // Heads gathered out of place (prepare_gather first): into scratch rows, copied back.
  void gather(int l, const DeviceKvCompactionPlan& plan) {
    DeviceKvGatherArgs g = layout.gather_args(plan, gather_src.data());
    LayerArenas& a = layer(l);
    g.key_arena = a.keys.data();
    g.value_arena = a.values.data();
    g.positions = a.positions.data();
    g.key_scratch = scratch->keys.data();
    g.value_scratch = scratch->values.data();
    g.position_scratch = scratch->positions.data();
    const size_t count = device_kv_gather_elements(g);
    gather_kernel<<<static_cast<unsigned>((count + kAppendThreads - 1) / kAppendThreads), kAppendThreads>>>(g, count);
    check_launch("device KV gather kernel");
    copy_rows(*scratch, a, plan.gather_back, row_words());
  }
};

DeviceKvCache::DeviceKvCache(const DeviceKvGeometry& geometry, const DeviceKvGrowthPolicy& policy)
    : impl_(std::make_unique<Impl>()) {
  impl_->layout = DeviceKvLayout(geometry, policy);
  for (int l = 0; l < geometry.n_layers; ++l) {
    impl_->arenas.push_back(std::make_unique<LayerArenas>(impl_->layout.layer(l), impl_->row_words()));
  }
}

DeviceKvCache::~DeviceKvCache() = default;

const DeviceKvLayout& DeviceKvCache::layout() const { return impl_->layout; }

void DeviceKvCache::append(int layer, int n, const float* keys, const float* values, int64_t src_stride,
                           std::span<const int32_t> first_positions) {
  impl_->layout.check_block(n, src_stride);
  if (auto grown = impl_->layout.layout_for_append(layer, n)) impl_->relocate(layer, std::move(*grown));
  DeviceKvAppendArgs args = impl_->layout.append_args(layer, n, keys, values, src_stride, first_positions);
  LayerArenas& a = impl_->layer(layer);
  args.key_arena = a.keys.data();
  args.value_arena = a.values.data();
  args.positions = a.positions.data();
  const size_t count = device_kv_append_elements(args);
  const unsigned blocks = static_cast<unsigned>((count + kAppendThreads - 1) / kAppendThreads);
  append_kernel<<<blocks, kAppendThreads>>>(args, count);
  check_launch("device KV append kernel");
  impl_->layout.commit_append(layer, n);
}

void DeviceKvCache::append_from_host(int layer, int n, const float* keys, const float* values, int64_t src_stride,
                                     std::span<const int32_t> first_positions) {
  impl_->layout.check_block(n, src_stride);
  const size_t count = static_cast<size_t>(n - 1) * size_t(src_stride) +
                       size_t(impl_->layout.geometry().n_heads) * impl_->layout.geometry().head_dim;
  impl_->upload_keys.resize(count);
  impl_->upload_values.resize(count);
  impl_->upload_keys.upload(keys, count);
  impl_->upload_values.upload(values, count);
  append(layer, n, impl_->upload_keys.data(), impl_->upload_values.data(), src_stride, first_positions);
}

void DeviceKvCache::write_rows(int layer, int head, int64_t first_row, int64_t rows, const float* keys,
                               const float* values, const int32_t* positions) {
  if (auto grown = impl_->layout.layout_for_write(layer, head, first_row, rows)) impl_->relocate(layer, std::move(*grown));
  const size_t count = size_t(rows) * impl_->layout.geometry().head_dim;
  if (count > 0) {
    // Synchronous uploads on the legacy stream: they wait for kernels still reading the staging.
    impl_->upload_keys.resize(count);
    impl_->upload_values.resize(count);
    impl_->upload_positions.resize(size_t(rows));
    impl_->upload_keys.upload(keys, count);
    impl_->upload_values.upload(values, count);
    impl_->upload_positions.upload(positions, size_t(rows));
    DeviceKvWriteArgs args = impl_->layout.write_args(layer, head, first_row, rows, impl_->upload_keys.data(),
                                                      impl_->upload_values.data(), impl_->upload_positions.data());
    LayerArenas& a = impl_->layer(layer);
    args.key_arena = a.keys.data();
    args.value_arena = a.values.data();
    args.positions = a.positions.data();
    const unsigned blocks = static_cast<unsigned>((count + kAppendThreads - 1) / kAppendThreads);
    write_kernel<<<blocks, kAppendThreads>>>(args, count);
    check_launch("device KV write kernel");
  }
  impl_->layout.commit_write(layer, head, first_row, rows);
}

void DeviceKvCache::compact(int layer, const std::vector<std::vector<int>>& keep) {
  const DeviceKvCompactionPlan plan = plan_compaction(impl_->layout.layer(layer), keep);
  if (!plan.gather_src.empty()) impl_->prepare_gather(plan);  // every allocation before the first move
  if (!plan.heads.empty()) {
    impl_->src_rows.resize(plan.src_rows.size());
    impl_->src_rows.upload(plan.src_rows.data(), plan.src_rows.size());
    DeviceKvCompactArgs args = impl_->layout.compact_args(plan, impl_->src_rows.data());
    LayerArenas& a = impl_->layer(layer);
    args.key_arena = a.keys.data();
    args.value_arena = a.values.data();
    args.positions = a.positions.data();
    compact_kernel<<<args.n_heads, kDeviceKvCompactThreads>>>(args);
    check_launch("device KV compaction kernel");
  }
  if (!plan.gather_src.empty()) impl_->gather(layer, plan);
  impl_->layout.commit_compaction(layer, plan);
}

void DeviceKvCache::release_room(int layer) {
  auto smaller = impl_->layout.layout_to_release(layer);
  if (!smaller) return;
  try {
    impl_->relocate(layer, std::move(*smaller));
  } catch (const DeviceOutOfMemory&) {
    // The smaller arenas could not be allocated (relocate allocates before it changes anything):
    // the layer keeps its arenas; giving room back is optional work. Any other failure (an earlier
    // kernel's fault the runtime reports here) goes on to the caller.
  }
}

DeviceKvHeadContents DeviceKvCache::read_head(int layer, int head) const {
  return read_rows(layer, head, 0, impl_->layout.layer(layer).heads.at(size_t(head)).length);
}

DeviceKvHeadContents DeviceKvCache::read_rows(int layer, int head, int64_t first_row, int64_t rows) const {
  const DeviceKvRegion& r = device_kv_row_range(impl_->layout, layer, head, first_row, rows, "read_rows");
  const size_t rw = size_t(impl_->row_words()), b = size_t(r.base_row + first_row), n = size_t(rows);
  const LayerArenas& a = *impl_->arenas[size_t(layer)];
  DeviceKvHeadContents out;
  out.keys.resize(n * rw);
  out.values.resize(n * rw);
  out.positions.resize(n);
  if (n > 0) {
    a.keys.download(out.keys.data(), n * rw, b * rw);
    a.values.download(out.values.data(), n * rw, b * rw);
    a.positions.download(out.positions.data(), n, b);
  }
  return out;
}

std::vector<int32_t> DeviceKvCache::read_positions(int layer, int head, int64_t first_row, int64_t rows) const {
  const DeviceKvRegion& r = device_kv_row_range(impl_->layout, layer, head, first_row, rows, "read_positions");
  std::vector<int32_t> out(static_cast<size_t>(rows));
  if (rows > 0) impl_->arenas[size_t(layer)]->positions.download(out.data(), size_t(rows), size_t(r.base_row + first_row));
  return out;
}

std::vector<RowNorms> DeviceKvCache::row_norms(int layer, std::span<const int64_t> first_row,
                                               std::span<const int64_t> rows) const {
  const LayerArenas& a = *impl_->arenas.at(size_t(layer));
  DeviceKvRowNormArgs args =
      plan_row_norms(impl_->layout, layer, first_row, rows, a.keys.data(), a.values.data(), nullptr, nullptr);
  const size_t n = device_kv_row_norm_elements(args);
  std::vector<RowNorms> out(n);
  if (n == 0) return out;
  impl_->norms.resize(2 * n);
  args.key_norms = impl_->norms.data();
  args.value_norms = impl_->norms.data() + n;
  row_norm_kernel<<<static_cast<unsigned>((n + kAppendThreads - 1) / kAppendThreads), kAppendThreads>>>(args, n);
  check_launch("device KV row norm kernel");
  std::vector<float> host(2 * n);
  impl_->norms.download(host.data(), 2 * n);  // synchronises with the kernel (legacy stream)
  for (size_t e = 0; e < n; ++e) out[e] = {host[e], host[n + e]};
  return out;
}

RopeTableView DeviceKvCache::device_rope(const RopeTableView& rope) { return impl_->device_rope(rope); }

void DeviceKvCache::reassign_positions(int layer, std::span<const char> heads, const RopeTableView& rope) {
  impl_->layout.layer(layer);  // std::invalid_argument for a layer outside the cache, before any indexing
  const RopeTableView on_device = impl_->device_rope(rope);
  LayerArenas& a = impl_->layer(layer);
  const DeviceKvReassignArgs args = plan_reassign(impl_->layout, layer, heads, a.keys.data(), a.positions.data(), on_device);
  const size_t n = device_kv_reassign_elements(args);
  if (n == 0) return;
  reassign_kernel<<<static_cast<unsigned>((n + kAppendThreads - 1) / kAppendThreads), kAppendThreads>>>(args, n);
  check_launch("device KV reassign kernel");
}

std::vector<std::vector<KeptKeyMatch>> DeviceKvCache::nearest_kept_keys(int layer,
                                                                        std::span<const KeptKeySearch> searches) const {
  DeviceKvNearestPlan p =
      plan_nearest_kept_keys(impl_->layout, layer, impl_->arenas.at(size_t(layer))->keys.data(), searches);
  DeviceKvNearestArgs& args = p.args;
  std::vector<KeptKeyMatch> out(p.evicted_rows.size());
  if (out.empty()) return p.split(out);
  // One upload of the index lists: kept rows, evicted rows, then each evicted entry's kept range.
  std::vector<int64_t> rows(p.kept_rows);
  rows.insert(rows.end(), p.evicted_rows.begin(), p.evicted_rows.end());
  impl_->merge_rows.upload(rows);
  std::vector<int32_t> ranges(p.kept_begin);
  ranges.insert(ranges.end(), p.kept_end.begin(), p.kept_end.end());
  impl_->merge_ranges.upload(ranges);
  impl_->merge_norms.resize(p.kept_rows.size());
  impl_->matches.resize(out.size());
  args.kept_rows = impl_->merge_rows.data();
  args.evicted_rows = impl_->merge_rows.data() + p.kept_rows.size();
  args.kept_begin = impl_->merge_ranges.data();
  args.kept_end = impl_->merge_ranges.data() + out.size();
  args.kept_norms = impl_->merge_norms.data();
  args.matches = impl_->matches.data();
  kept_norm_kernel<<<static_cast<unsigned>((p.kept_rows.size() + kAppendThreads - 1) / kAppendThreads),
                     kAppendThreads>>>(args);
  check_launch("device KV kept key norm kernel");
  nearest_kept_kernel<<<static_cast<unsigned>(out.size()), kNearestThreads>>>(args);
  check_launch("device KV nearest kept key kernel");
  impl_->matches.download(out.data(), out.size());  // synchronises with the kernels (legacy stream)
  return p.split(out);
}

std::vector<double> DeviceKvCache::value_norms(int layer, int head, std::span<const int> rows) const {
  DeviceKvValueNormArgs args =
      plan_value_norms(impl_->layout, layer, head, impl_->arenas.at(size_t(layer))->values.data(), rows);
  std::vector<double> out(rows.size());
  if (rows.empty()) return out;
  impl_->norm_rows.upload(std::vector<int32_t>(rows.begin(), rows.end()));
  impl_->merge_norms.resize(rows.size());
  args.rows = impl_->norm_rows.data();
  args.norms = impl_->merge_norms.data();
  value_norm_kernel<<<static_cast<unsigned>((rows.size() + kAppendThreads - 1) / kAppendThreads), kAppendThreads>>>(args);
  check_launch("device KV value norm kernel");
  impl_->merge_norms.download(out.data(), out.size());  // synchronises with the kernel (legacy stream)
  return out;
}

void DeviceKvCache::fold_rows(int layer, int head, const RowFolds& folds) {
  LayerArenas& a = *impl_->arenas.at(size_t(layer));
  DeviceKvFoldArgs args = plan_fold_rows(impl_->layout, layer, head, a.keys.data(), a.values.data(), folds);
  const size_t n = device_kv_fold_elements(args);
  if (n == 0 || (!folds.keys && !folds.values)) return;
  impl_->folds.upload(folds.folds);
  impl_->terms.upload(folds.terms);
  args.folds = impl_->folds.data();
  args.terms = impl_->terms.data();
  fold_kernel<<<static_cast<unsigned>((n + kAppendThreads - 1) / kAppendThreads), kAppendThreads>>>(args, n);
  check_launch("device KV fold kernel");
}

void DeviceKvCache::load_codebooks(int layer, const DeviceCodebookLoad& load) { impl_->codebooks().load(layer, load); }

// The twin's checks in the twin's order (device_kv_twin_codebook.cpp), then the room, then the launches.
void DeviceKvCache::codebook_append(int layer, int rows, const float* keys, const float* values, int64_t src_stride,
                                    int32_t first_position, const RopeTableView& rope) {
  DeviceKvCodebooks& books = impl_->codebooks();
  books.check_layer(layer);
  impl_->layout.check_block(rows, src_stride);
  books.reserve(layer, rows);
  const std::vector<int64_t> dst_row = device_codebook_block_rows(impl_->layout.layer(layer), layer, rows);
  RopeTableView on_device = impl_->device_rope(rope);
  on_device.positions = rope.positions;  // the host table's coverage decides, as in the twin
  LayerArenas& a = impl_->layer(layer);
  books.append(layer, rows, keys, values, src_stride, first_position, dst_row.data(), on_device, a.keys.data(),
               a.values.data(), impl_->layout.geometry().type);
}

DeviceCodebookNews DeviceKvCache::codebook_news(int layer) { return impl_->codebooks().news(layer); }

size_t DeviceKvCache::codebook_bytes() const {
  return impl_->codebook_state ? impl_->codebook_state->bytes_reserved() : 0;
}

DeviceKvSnapshot DeviceKvCache::snapshot() const {
  DeviceKvSnapshot s;
  s.data_ = std::make_unique<DeviceKvSnapshot::Data>();
  s.data_->layout = impl_->layout.packed();
  for (int l = 0; l < impl_->layout.geometry().n_layers; ++l) {
    s.data_->layers.push_back(std::make_unique<LayerArenas>(s.data_->layout.layer(l), impl_->row_words()));
    copy_rows(*impl_->arenas[size_t(l)], *s.data_->layers.back(),
              plan_copy(impl_->layout.layer(l), s.data_->layout.layer(l)), impl_->row_words());
  }
  return s;
}

void DeviceKvCache::restore(const DeviceKvSnapshot& snapshot) {
  const DeviceKvGeometry& g = impl_->layout.geometry();
  const DeviceKvGeometry& sg = snapshot.layout().geometry();
  if (sg.n_layers != g.n_layers || sg.n_heads != g.n_heads || sg.head_dim != g.head_dim || sg.type != g.type) {
    throw std::invalid_argument("device KV restore: snapshot of another cache geometry");
  }
  for (int l = 0; l < g.n_layers; ++l) {
    const DeviceKvLayerLayout& from = snapshot.layout().layer(l);
    std::vector<int64_t> lengths;
    for (const DeviceKvRegion& r : from.heads) lengths.push_back(r.length);
    DeviceKvLayerLayout target = impl_->layout.layer(l);
    if (auto grown = impl_->layout.layout_for_lengths(l, lengths)) {
      target = std::move(*grown);
      impl_->arenas[size_t(l)] = std::make_unique<LayerArenas>(target, impl_->row_words());
    }
    for (size_t h = 0; h < target.heads.size(); ++h) target.heads[h].length = lengths[h];
    copy_rows(*snapshot.data_->layers[size_t(l)], impl_->layer(l), plan_copy(from, target), impl_->row_words());
    impl_->layout.set_layer(l, std::move(target));
  }
}

const void* DeviceKvCache::keys(int layer) const {
  impl_->layout.layer(layer);
  return impl_->arenas[size_t(layer)]->keys.data();
}
const void* DeviceKvCache::values(int layer) const {
  impl_->layout.layer(layer);
  return impl_->arenas[size_t(layer)]->values.data();
}
const int32_t* DeviceKvCache::positions(int layer) const {
  impl_->layout.layer(layer);
  return impl_->arenas[size_t(layer)]->positions.data();
}

}  // namespace kvevict::cuda
