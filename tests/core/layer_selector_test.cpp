// The engine's layer selectors (core/engine/layer_selector.h) on the CPU. The host selector is the
// reference (select_head / select_layer_adaptive); the twin runs the device algorithm. Two levels:
//   * the adapters: random layers (ties, random shares, Ada-KV) give the host's lists;
//   * the engine: shipped policies on stories260K (prefill, eviction, greedy decode) with
//     EngineOptions::selection = twin must leave every (layer, head) of the cache with the same
//     positions in the same order, and give bit-equal logits, as the host selection. The report
//     proves the twin ran (report.selection, layer_selections > 0), so a run that ignored the
//     option would fail; a control shows the comparison sees a selector that differs.
// The cuda selector is the same wiring with the kernels: LayerSelectorEngineGpu (GPU only).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "core/engine/layer_selector.h"
#include "dsl/policy_loader.h"
#include "gpu_test_skip.h"
#include "stories_prompt_test.h"
#if defined(KVEVICT_HAVE_CUDA)
#include "core/decode/cuda/device_memory.h"
#endif

namespace kvevict {
namespace {

struct RandomLayer {
  std::vector<std::vector<float>> scores;
  std::vector<std::vector<int32_t>> positions;
  std::vector<std::span<const float>> sc() const { return {scores.begin(), scores.end()}; }
  std::vector<std::span<const int32_t>> pos() const { return {positions.begin(), positions.end()}; }
};

// Heads of uneven length; scores drawn from few values (many ties); positions ascending with gaps.
RandomLayer random_layer(std::mt19937& rng, int heads, int max_length) {
  RandomLayer layer;
  for (int h = 0; h < heads; ++h) {
    const int T = std::uniform_int_distribution<int>(0, max_length)(rng);
    std::vector<float> s(T);
    std::vector<int32_t> p(T);
    int32_t at = 0;
    for (int t = 0; t < T; ++t) {
      s[t] = static_cast<float>(std::uniform_int_distribution<int>(0, 7)(rng)) * 0.25f;
      at += std::uniform_int_distribution<int>(1, 3)(rng);
      p[t] = at;
    }
    layer.scores.push_back(std::move(s));
    layer.positions.push_back(std::move(p));
  }
  return layer;
}

// Per-head specs for a random layer: budgets below and above the lengths, protection, a random
// share on every third trial, both kept orders.
std::vector<HeadSelectionSpec> random_specs(std::mt19937& rng, int heads, int trial, uint64_t seed) {
  std::vector<HeadSelectionSpec> specs(heads);
  for (int h = 0; h < heads; ++h) {
    specs[h].budget = std::uniform_int_distribution<int>(0, 320)(rng);
    specs[h].protect_first = std::uniform_int_distribution<int>(0, 6)(rng);
    specs[h].protect_recent = std::uniform_int_distribution<int>(0, 12)(rng);
    specs[h].random_share = trial % 3 == 0 ? 0.25 : 0.0;
    specs[h].temperature = 0.5;
    specs[h].score_order = trial % 2 == 1;
    specs[h].seed = seed + trial;
    specs[h].layer = trial % 5;
    specs[h].kv_head = h;
  }
  return specs;
}

TEST(LayerSelector, TwinGivesTheHostsListsOnRandomLayers) {
  std::mt19937 rng(7);
  const auto host = make_layer_selector(SelectionDevice::Host);
  const auto twin = make_layer_selector(SelectionDevice::Twin);
  EXPECT_EQ(host->device(), SelectionDevice::Host);
  EXPECT_EQ(twin->device(), SelectionDevice::Twin);
  for (int trial = 0; trial < 60; ++trial) {
    const int heads = std::uniform_int_distribution<int>(1, 8)(rng);
    const RandomLayer layer = random_layer(rng, heads, 300);
    const std::vector<HeadSelectionSpec> specs = random_specs(rng, heads, trial, 1234);
    EXPECT_EQ(twin->select_heads(layer.sc(), layer.pos(), specs), host->select_heads(layer.sc(), layer.pos(), specs))
        << "trial " << trial;
    std::vector<int> budget(heads, std::uniform_int_distribution<int>(0, 200)(rng));
    const double alpha = trial % 4 * 0.25;
    EXPECT_EQ(twin->select_layer_adaptive(layer.sc(), layer.pos(), budget, 2, 4, alpha, trial % 2 == 1),
              host->select_layer_adaptive(layer.sc(), layer.pos(), budget, 2, 4, alpha, trial % 2 == 1))
        << "trial " << trial << " (Ada-KV)";
  }
}

// Scores written into a selector's own buffer (layer_score_buffer, packed at layer_score_offset,
// as a device scoring program writes them) select exactly what the same scores as spans select on
// the host. `selector` is the twin here, the cuda selector in the GPU test (its buffer is device
// memory: `write` copies the head's scores there).
template <typename Write>
void expect_buffer_selects_as_spans(LayerSelector& selector, Write write, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto host = make_layer_selector(SelectionDevice::Host);
  for (int trial = 0; trial < 40; ++trial) {
    const int heads = std::uniform_int_distribution<int>(1, 8)(rng);
    const RandomLayer layer = random_layer(rng, heads, 300);
    const std::vector<HeadSelectionSpec> specs = random_specs(rng, heads, trial, 99);
    std::vector<int64_t> lengths;
    for (int h = 0; h < heads; ++h) lengths.push_back(static_cast<int64_t>(layer.scores[h].size()));
    float* buffer = selector.layer_score_buffer(trial % 3, lengths);
    ASSERT_NE(buffer, nullptr);
    for (int h = 0; h < heads; ++h) write(buffer + layer_score_offset(lengths, h), layer.scores[h]);
    EXPECT_EQ(selector.select_heads_from_buffer(trial % 3, layer.pos(), specs), host->select_heads(layer.sc(), layer.pos(), specs))
        << "trial " << trial;
    const std::vector<int> budget(heads, std::uniform_int_distribution<int>(0, 200)(rng));
    const double alpha = trial % 4 * 0.25;
    EXPECT_EQ(selector.select_layer_adaptive_from_buffer(trial % 3, layer.pos(), budget, 2, 4, alpha, trial % 2 == 1),
              host->select_layer_adaptive(layer.sc(), layer.pos(), budget, 2, 4, alpha, trial % 2 == 1))
        << "trial " << trial << " (Ada-KV)";
  }
}

// The same selections reading the positions where a device cache holds them (the selections'
// `held`: held_selection_input): each head's positions at its own start in one arena, with other
// values between the heads, as a device cache lays its rows; `hold` puts the arena in the selector's
// memory and says whether that is device memory. The host spans handed beside it have the right
// lengths and wrong values (every head's reversed), so only a selector that read the arena gives the
// host selector's lists on the true positions; TOVA's layer-shared rule reads head 0's (the arena's
// second head here, so a start of 0 would show). A description of other lengths, or of fewer
// starts, is refused by each of the three.
template <typename Write, typename Hold>
void expect_buffer_selects_with_held_positions(LayerSelector& selector, Write write, Hold hold, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto host = make_layer_selector(SelectionDevice::Host);
  for (int trial = 0; trial < 30; ++trial) {
    const int heads = std::uniform_int_distribution<int>(1, 8)(rng);
    const RandomLayer layer = random_layer(rng, heads, 300);
    std::vector<int32_t> arena;
    CachedPositionsSignal held;
    for (int h = 0; h < heads; ++h) {
      arena.insert(arena.end(), static_cast<size_t>(std::uniform_int_distribution<int>(0, 5)(rng)), -7);
      held.start.push_back(static_cast<int64_t>(arena.size()));
      held.length.push_back(static_cast<int64_t>(layer.positions[h].size()));
      arena.insert(arena.end(), layer.positions[h].begin(), layer.positions[h].end());
    }
    std::tie(held.data, held.on_device) = hold(arena);
    RandomLayer reversed = layer;  // the spans handed beside `held`: right lengths, wrong positions
    for (auto& p : reversed.positions) std::reverse(p.begin(), p.end());
    const std::vector<HeadSelectionSpec> specs = random_specs(rng, heads, trial, 99);
    float* buffer = selector.layer_score_buffer(0, held.length);
    for (int h = 0; h < heads; ++h) write(buffer + layer_score_offset(held.length, h), layer.scores[h]);
    EXPECT_EQ(selector.select_heads_from_buffer(0, reversed.pos(), specs, &held),
              host->select_heads(layer.sc(), layer.pos(), specs))
        << "trial " << trial;
    const std::vector<int> budget(heads, std::uniform_int_distribution<int>(0, 200)(rng));
    EXPECT_EQ(selector.select_layer_adaptive_from_buffer(0, reversed.pos(), budget, 2, 4, 0.5, trial % 2 == 1, &held),
              host->select_layer_adaptive(layer.sc(), layer.pos(), budget, 2, 4, 0.5, trial % 2 == 1))
        << "trial " << trial << " (Ada-KV)";
    CachedPositionsSignal shorter = held, fewer = held;
    shorter.length.back() += 1;
    fewer.start.pop_back();
    for (const CachedPositionsSignal* bad : {&shorter, &fewer}) {
      EXPECT_THROW(selector.select_heads_from_buffer(0, layer.pos(), specs, bad), std::logic_error);
      EXPECT_THROW(selector.select_layer_adaptive_from_buffer(0, layer.pos(), budget, 2, 4, 0.5, false, bad),
                   std::logic_error);
    }
  }
  // TOVA: two heads of one length; the description's head 0 is the arena's second run of positions.
  const int T = 40;
  std::vector<int32_t> positions(T), arena(3 + 2 * T, -7);
  for (int t = 0; t < T; ++t) positions[t] = 3 * t + 2;
  std::copy(positions.begin(), positions.end(), arena.begin() + 3 + T);
  std::vector<std::vector<float>> scores(2, std::vector<float>(T));
  for (auto& row : scores)
    for (float& x : row) x = static_cast<float>(std::uniform_int_distribution<int>(0, 3)(rng)) * 0.5f;
  CachedPositionsSignal held;
  held.start = {3 + T, 3};
  held.length = {T, T};
  std::tie(held.data, held.on_device) = hold(arena);
  const std::vector<int64_t> lengths(2, T);
  float* buffer = selector.layer_score_buffer(1, lengths);
  for (int h = 0; h < 2; ++h) write(buffer + layer_score_offset(lengths, h), scores[h]);
  std::vector<float> mean(T);
  for (int t = 0; t < T; ++t) mean[t] = scores[0][t] / 2.0f + scores[1][t] / 2.0f;
  const HeadSelectionSpec spec = random_specs(rng, 1, 3, 7).front();
  std::vector<int32_t> reversed(positions.rbegin(), positions.rend());
  EXPECT_EQ(selector.select_layer_shared_from_buffer(1, 2, reversed, spec, &held),
            host->select_heads({std::span<const float>(mean)}, {std::span<const int32_t>(positions)}, {spec}).front());
  CachedPositionsSignal shorter = held;
  shorter.length[0] += 1;
  EXPECT_THROW(selector.select_layer_shared_from_buffer(1, 2, positions, spec, &shorter), std::logic_error);
}

// TOVA's layer-shared selection from the buffer: heads of one length, select_head on their mean
// (the host's expression, layer_shared_mean.h), the host selector's list on the same mean.
template <typename Write>
void expect_layer_shared_buffer_selects_the_mean(LayerSelector& selector, Write write, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto host = make_layer_selector(SelectionDevice::Host);
  for (int trial = 0; trial < 30; ++trial) {
    const int heads = std::uniform_int_distribution<int>(1, 8)(rng);
    const int T = std::uniform_int_distribution<int>(0, 300)(rng);
    std::vector<std::vector<float>> scores(heads, std::vector<float>(T));
    for (auto& row : scores)
      for (float& x : row) x = static_cast<float>(std::uniform_int_distribution<int>(0, 7)(rng)) * 0.3f;
    std::vector<int32_t> positions(T);
    for (int t = 0; t < T; ++t) positions[t] = 2 * t + 1;
    const HeadSelectionSpec spec = random_specs(rng, 1, trial, 7).front();
    const std::vector<int64_t> lengths(heads, T);
    float* buffer = selector.layer_score_buffer(1, lengths);
    for (int h = 0; h < heads; ++h) write(buffer + layer_score_offset(lengths, h), scores[h]);
    std::vector<float> mean(T, 0.0f);  // the host engine's loop, written out
    for (int h = 0; h < heads; ++h)
      for (int t = 0; t < T; ++t) mean[t] += scores[h][t] / static_cast<float>(heads);
    EXPECT_EQ(selector.select_layer_shared_from_buffer(1, heads, positions, spec),
              host->select_heads({std::span<const float>(mean)}, {std::span<const int32_t>(positions)}, {spec}).front())
        << "trial " << trial;
  }
}

// A prompt's scores held per layer (layer_score_buffer for several layers, then keep_in_buffer):
// every layer's buffer keeps its own scores while others are laid, and a buffer reduced by kept
// lists in any order selects what the host selects on the scores and positions reduced the same way
// (what a cascading prompt does to a layer at each later layer). Bad lists are refused before any
// read; released buffers are gone.
template <typename Write>
void expect_held_buffers_follow_keeps(LayerSelector& selector, Write write, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto host = make_layer_selector(SelectionDevice::Host);
  for (int trial = 0; trial < 12; ++trial) {
    const int heads = std::uniform_int_distribution<int>(1, 8)(rng);
    std::vector<RandomLayer> layers;
    for (int l = 0; l < 3; ++l) {
      layers.push_back(random_layer(rng, heads, 300));
      std::vector<int64_t> lengths = head_lengths_of(layers[l].pos());
      float* buffer = selector.layer_score_buffer(l, lengths);
      for (int h = 0; h < heads; ++h) write(buffer + layer_score_offset(lengths, h), layers[l].scores[h]);
    }
    for (int stage = 0; stage < 3; ++stage) {
      RandomLayer& layer = layers[1];
      std::vector<std::vector<int>> kept(heads);
      RandomLayer next;
      for (int h = 0; h < heads; ++h) {
        const int T = static_cast<int>(layer.scores[h].size());
        for (int t = 0; t < T; ++t)
          if (std::uniform_int_distribution<int>(0, 2)(rng) > 0) kept[h].push_back(t);
        std::shuffle(kept[h].begin(), kept[h].end(), rng);
        std::vector<float> sc;
        std::vector<int32_t> pos;
        for (int t : kept[h]) sc.push_back(layer.scores[h][t]), pos.push_back(layer.positions[h][t]);
        next.scores.push_back(std::move(sc));
        next.positions.push_back(std::move(pos));
      }
      selector.keep_in_buffer(1, kept);
      layer = std::move(next);
      EXPECT_EQ(selector.score_buffer_lengths(1), head_lengths_of(layer.pos())) << "trial " << trial;
      const std::vector<HeadSelectionSpec> specs = random_specs(rng, heads, trial, 5);
      EXPECT_EQ(selector.select_heads_from_buffer(1, layer.pos(), specs), host->select_heads(layer.sc(), layer.pos(), specs))
          << "trial " << trial << " stage " << stage;
    }
    for (int l : {0, 2}) {
      const std::vector<HeadSelectionSpec> specs = random_specs(rng, heads, trial, 6);
      EXPECT_EQ(selector.select_heads_from_buffer(l, layers[l].pos(), specs),
                host->select_heads(layers[l].sc(), layers[l].pos(), specs))
          << "trial " << trial << ": layer " << l << " was not left alone";
    }
    // Every head keeping nothing (nothing to gather) leaves an empty layer that selects nothing.
    selector.keep_in_buffer(2, std::vector<std::vector<int>>(heads));
    EXPECT_EQ(selector.score_buffer_lengths(2), std::vector<int64_t>(heads, 0));
    const std::vector<std::span<const int32_t>> none(heads);
    EXPECT_EQ(selector.select_heads_from_buffer(2, none, random_specs(rng, heads, trial, 8)),
              std::vector<std::vector<int>>(heads));
    selector.release_score_buffer(2);
    EXPECT_TRUE(selector.score_buffer_lengths(2).empty());
    EXPECT_FALSE(selector.score_buffer_lengths(0).empty()) << "only layer 2's buffer was given back";
    std::vector<std::vector<int>> bad(heads);
    bad[0].push_back(static_cast<int>(layers[0].scores[0].size()));  // one past the head's end
    EXPECT_THROW(selector.keep_in_buffer(0, bad), std::logic_error);
    EXPECT_THROW(selector.keep_in_buffer(0, std::vector<std::vector<int>>(heads + 1)), std::logic_error);
    std::vector<std::vector<int>> longer(heads);  // an index repeated: more entries than the head had
    longer[0].assign(layers[0].scores[0].size() + 1, 0);
    EXPECT_THROW(selector.keep_in_buffer(0, longer), std::logic_error);
    selector.release_score_buffers();
    EXPECT_TRUE(selector.score_buffer_lengths(1).empty());
    EXPECT_THROW(selector.select_heads_from_buffer(1, layers[1].pos(), random_specs(rng, heads, trial, 7)),
                 std::logic_error);
  }
}

TEST(LayerSelector, TwinHoldsEachLayersScoresThroughKeeps) {
  const auto twin = make_layer_selector(SelectionDevice::Twin);
  expect_held_buffers_follow_keeps(
      *twin, [](float* at, const std::vector<float>& s) { std::copy(s.begin(), s.end(), at); }, 23);
}

TEST(LayerSelector, TwinSelectsFromItsScoreBufferAsFromSpans) {
  const auto twin = make_layer_selector(SelectionDevice::Twin);
  expect_buffer_selects_as_spans(
      *twin, [](float* at, const std::vector<float>& s) { std::copy(s.begin(), s.end(), at); }, 11);
  // The host selector has no buffer: its scores come as spans.
  const auto host = make_layer_selector(SelectionDevice::Host);
  EXPECT_EQ(host->layer_score_buffer(0, std::vector<int64_t>{3, 4}), nullptr);
  EXPECT_THROW(host->select_heads_from_buffer(0, {}, {}), std::logic_error);
  EXPECT_THROW(host->keep_in_buffer(0, {}), std::logic_error);
  EXPECT_THROW(host->select_layer_adaptive_from_buffer(0, {}, {}, 0, 0, 0.0, false), std::logic_error);
  EXPECT_EQ(layer_score_offset(std::vector<int64_t>{3, 0, 5, 2}, 3), 8);
  EXPECT_EQ(layer_score_offset(std::vector<int64_t>{3, 0, 5, 2}, 4), 10) << "the head count: the buffer's floats";
  // Heads longer than the buffer that was asked for are refused, not read past its end; so are
  // shorter ones (they would read another head's scores) and a layer with no buffer.
  twin->layer_score_buffer(0, std::vector<int64_t>{2, 2});
  const std::vector<int32_t> five{1, 2, 3, 4, 5}, two{1, 2}, one{1};
  EXPECT_THROW(twin->select_heads_from_buffer(0, {five, two}, std::vector<HeadSelectionSpec>(2)), std::logic_error);
  EXPECT_THROW(twin->select_heads_from_buffer(0, {one, two}, std::vector<HeadSelectionSpec>(2)), std::logic_error);
  EXPECT_THROW(twin->select_heads_from_buffer(7, {two, two}, std::vector<HeadSelectionSpec>(2)), std::logic_error);
}

TEST(LayerSelector, TwinSelectsWithThePositionsHeldWhereTheCacheIs) {
  const auto twin = make_layer_selector(SelectionDevice::Twin);
  std::vector<int32_t> kept_alive;  // the twin's "device" memory is the host's
  expect_buffer_selects_with_held_positions(
      *twin, [](float* at, const std::vector<float>& s) { std::copy(s.begin(), s.end(), at); },
      [&kept_alive](const std::vector<int32_t>& arena) {
        kept_alive = arena;
        return std::pair<const int32_t*, bool>(kept_alive.data(), false);
      },
      31);
}

TEST(LayerSelector, TwinSelectsTheLayerSharedMeanFromItsScoreBuffer) {
  const auto twin = make_layer_selector(SelectionDevice::Twin);
  expect_layer_shared_buffer_selects_the_mean(
      *twin, [](float* at, const std::vector<float>& s) { std::copy(s.begin(), s.end(), at); }, 17);
  // Heads longer than the buffer holds are refused, not read past its end.
  twin->layer_score_buffer(0, std::vector<int64_t>{4, 4});
  EXPECT_THROW(twin->select_layer_shared_from_buffer(0, 3, std::vector<int32_t>{1, 2, 3, 4}, HeadSelectionSpec{}),
               std::logic_error);
}

TEST(LayerSelectorGpu, CudaSelectsFromItsScoreBufferAsFromSpans) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  const auto cuda = make_layer_selector(SelectionDevice::Cuda);
  expect_buffer_selects_as_spans(
      *cuda,
      [](float* at, const std::vector<float>& s) {
        if (!s.empty()) cuda::check(cudaMemcpy(at, s.data(), s.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
      },
      13);
  expect_layer_shared_buffer_selects_the_mean(
      *cuda,
      [](float* at, const std::vector<float>& s) {
        if (!s.empty()) cuda::check(cudaMemcpy(at, s.data(), s.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
      },
      19);
  expect_held_buffers_follow_keeps(
      *cuda,
      [](float* at, const std::vector<float>& s) {
        if (!s.empty()) cuda::check(cudaMemcpy(at, s.data(), s.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
      },
      29);
  cuda::DeviceArray<int32_t> arena_on_device;
  expect_buffer_selects_with_held_positions(
      *cuda,
      [](float* at, const std::vector<float>& s) {
        if (!s.empty()) cuda::check(cudaMemcpy(at, s.data(), s.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
      },
      [&arena_on_device](const std::vector<int32_t>& arena) {
        arena_on_device.upload(arena);
        return std::pair<const int32_t*, bool>(arena_on_device.data(), true);
      },
      37);
  // Positions described as host memory are refused: a kernel would dereference a host address.
  CachedPositionsSignal on_host;
  const std::vector<int32_t> two{1, 2};
  on_host.data = two.data();
  on_host.start = {0};
  on_host.length = {2};
  cuda->layer_score_buffer(0, std::vector<int64_t>{2});
  EXPECT_THROW(cuda->select_heads_from_buffer(0, {two}, std::vector<HeadSelectionSpec>(1), &on_host), std::logic_error);
#endif
}

// The cache as the selection left it: per (layer, head) its positions in cache order.
using CacheLayout = std::vector<std::vector<std::vector<int32_t>>>;
CacheLayout layout_of(const KVCache& cache) {
  CacheLayout out(cache.n_layers());
  for (int l = 0; l < cache.n_layers(); ++l)
    for (int h = 0; h < cache.n_stored_heads(); ++h)
      out[l].emplace_back(cache.positions(l, h), cache.positions(l, h) + cache.length(l, h));
  return out;
}

struct SelectionRun {
  std::vector<CacheLayout> layouts;  // after the prefill, then after each decode step
  std::vector<std::vector<float>> logits;
  EvictionReport report;
};

struct Case {
  std::string policy;
  std::map<std::string, std::string> params;
  std::string budget;
  int steps = 6;
};

class LayerSelectorEngineTest : public test::StoriesPromptTest {
 protected:
  static SelectionRun run(const Case& c, SelectionDevice device) {
    const auto policy = load_policy(c.policy, c.params);
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    EngineOptions options{Budget::parse(c.budget), 3};
    options.selection = device;
    EvictionEngine engine(*policy, model_->config, options);
    SelectionRun r;
    r.logits.push_back(decoder->forward(std::span<const int>(tokens_), &engine));
    r.layouts.push_back(layout_of(decoder->cache()));
    for (int step = 0; step < c.steps; ++step) {
      const auto& last = r.logits.back();
      const int next = static_cast<int>(std::max_element(last.begin(), last.end()) - last.begin());
      r.logits.push_back(decoder->forward(std::span<const int>(&next, 1), &engine));
      r.layouts.push_back(layout_of(decoder->cache()));
    }
    r.report = engine.report();
    return r;
  }

  static void expect_matches_host(const Case& c, SelectionDevice device = SelectionDevice::Twin) {
    const SelectionRun host = run(c, SelectionDevice::Host);
    const SelectionRun twin = run(c, device);
    EXPECT_EQ(host.report.selection, SelectionDevice::Host);
    EXPECT_EQ(twin.report.selection, device) << c.policy;
    EXPECT_GT(twin.report.layer_selections, 0) << c.policy << ": the selector never ran";
    EXPECT_EQ(twin.report.layer_selections, host.report.layer_selections) << c.policy;
    EXPECT_TRUE(host.report.prefill_evicted || host.report.applications > 0) << c.policy << " evicted nothing";
    ASSERT_EQ(twin.layouts.size(), host.layouts.size());
    for (size_t i = 0; i < host.layouts.size(); ++i) {
      EXPECT_EQ(twin.layouts[i], host.layouts[i]) << c.policy << ": cache layout after call " << i;
      EXPECT_EQ(twin.logits[i], host.logits[i]) << c.policy << ": logits of call " << i;
    }
  }
};

TEST_F(LayerSelectorEngineTest, PerHeadTopKPolicies) {
  expect_matches_host({"snapkv", {}, "48"});
  expect_matches_host({"pyramidkv", {}, "48"});
  expect_matches_host({"h2o", {}, "48", 8});  // a selection every decode step
}

TEST_F(LayerSelectorEngineTest, CascadingScoreOrderedCake) { expect_matches_host({"cake", {}, "48"}); }

TEST_F(LayerSelectorEngineTest, NaclRandomShare) { expect_matches_host({"nacl", {}, "48"}); }

TEST_F(LayerSelectorEngineTest, AdaKvLayerWideSelection) { expect_matches_host({"adakv", {}, "48"}); }

TEST_F(LayerSelectorEngineTest, TovaLayerSharedSelection) { expect_matches_host({"tova", {}, "48"}); }

TEST_F(LayerSelectorEngineTest, StreamingLlmWithReassignedPositions) {
  expect_matches_host({"streamingllm", {}, "32"});
}

TEST_F(LayerSelectorEngineTest, ThresholdBudgets) { expect_matches_host({"dms", {}, "48"}); }

TEST_F(LayerSelectorEngineTest, UnfoldedGqa) {
  expect_matches_host({"spindlekv", {{"gqa_mode", "unfold"}}, "40%", 3});
}

// Control: a selection that keeps a different set is seen by the comparison above. Forcing a
// different budget on one side stands in for a selector that drops or swaps entries.
TEST_F(LayerSelectorEngineTest, ControlADifferentSelectionIsSeen) {
  const SelectionRun a = run({"snapkv", {}, "48", 1}, SelectionDevice::Twin);
  const SelectionRun b = run({"snapkv", {}, "47", 1}, SelectionDevice::Twin);
  EXPECT_NE(a.layouts.front(), b.layouts.front());
  EXPECT_NE(a.logits.back(), b.logits.back());  // the prefill's own logits precede the eviction
}

// The same engine runs with the CUDA kernels doing the selection (GPU only; skipped with the
// reason otherwise). NACL is left out: its Gumbel keys use the device's log, which may differ from
// glibc's by an ulp (device_selection_twin.h), so its kept sets are not required to be identical.
class LayerSelectorEngineGpu : public LayerSelectorEngineTest {};

TEST_F(LayerSelectorEngineGpu, CudaSelectorGivesTheHostsCache) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : std::vector<Case>{{"snapkv", {}, "48"},
                                         {"h2o", {}, "48", 8},
                                         {"cake", {}, "48"},
                                         {"adakv", {}, "48"},
                                         {"tova", {}, "48"},
                                         {"streamingllm", {}, "32"},
                                         {"dms", {}, "48"}})
    expect_matches_host(c, SelectionDevice::Cuda);
}

}  // namespace
}  // namespace kvevict
