// The window attention a decoder hands the engine (ObservationRequest::window_attention,
// LayerSignals::window_attention, core/engine/precomputed_window.h), proven on the CPU:
//   * the layout conversion (window_attention_rows) and the signal's description of a plan;
//   * the engine on stories260K with WindowAttentionInjector (window_attention_injection.h): the
//     twin of the CUDA kernel over a DeviceKvTwin mirrored from the CPU decoder's cache, injected as
//     host memory, must leave every (layer, head) with the same positions in the same order, and
//     the same logits, as the engine computing its own, after the prefill and every decode step;
//     the report proves the engine took it (window_attention_reused), and a control plants a
//     wrong buffer (rows reversed), which must change the kept sets;
//   * what must not use it: NACL (a non-causal proxy, or its same_index_head map) ignores even a
//     wrong buffer handed to it unasked; H2O (no window) asks for none.
// The CUDA decoder filling the buffer on the device: window_attention_signal_gpu_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/decode/window_attention_signal.h"
#include "core/engine/precomputed_window.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "in_place_scoring.h"
#include "stories_prompt_test.h"
#include "window_attention_injection.h"

namespace kvevict {
namespace {

WindowAttentionSignal counting_signal(std::vector<float>& data) {
  WindowAttentionSignal a;  // 2 KV heads x group 2 x W 3, rows of 5 entries, padded strides
  a.n_kv = 2, a.group = 2, a.W = 3, a.max_len = 5;
  a.row_stride = 6, a.group_stride = 20, a.kv_stride = 41;
  data.resize(a.floats());
  std::iota(data.begin(), data.end(), 0.0f);
  a.data = data.data();
  return a;
}

TEST(WindowAttentionSignal, RowsComeOutInTheEnginesLayout) {
  std::vector<float> data;
  const WindowAttentionSignal a = counting_signal(data);
  EXPECT_EQ(a.floats(), size_t(41 + 20 + 2 * 6 + 5));
  const int T = 4;
  std::vector<float> out(2 * 3 * T);
  window_attention_rows(a, data.data(), 2, 2, T, out.data());  // query heads 2, 3: KV head 1
  for (int g = 0; g < 2; ++g)
    for (int w = 0; w < 3; ++w)
      for (int t = 0; t < T; ++t)
        EXPECT_EQ(out[(g * 3 + w) * T + t], data[41 + g * 20 + w * 6 + t]) << g << " " << w << " " << t;
  window_attention_rows(a, data.data(), 1, 1, T, out.data());  // one query head (unfolded GQA's)
  EXPECT_EQ(out[T + 2], data[20 + 6 + 2]);
  EXPECT_THROW(window_attention_rows(a, data.data(), 1, 2, T, out.data()), std::invalid_argument);  // two KV heads
  EXPECT_THROW(window_attention_rows(a, data.data(), 3, 2, T, out.data()), std::invalid_argument);  // past the heads
  EXPECT_THROW(window_attention_rows(a, data.data(), 0, 2, 6, out.data()), std::invalid_argument);  // past max_len
}

TEST(WindowAttentionSignal, DescribesThePlansOutput) {
  DeviceKvLayerView view;
  view.n_heads = 3;
  view.head_dim = 16;
  view.length[0] = 7, view.length[1] = 0, view.length[2] = 9;
  WindowPlanOptions o;
  o.query_position0 = 40;
  const WindowAttentionPlan plan = plan_window_attention(view, 4, 2, o);
  float base = 0;
  const WindowAttentionSignal a = describe_window_attention(plan, &base, true);
  EXPECT_TRUE(a.on_device);
  EXPECT_EQ(a.W, 4);
  EXPECT_EQ(a.query_position0, 40);
  EXPECT_EQ(a.n_kv, 3);
  EXPECT_EQ(a.group, 2);
  EXPECT_EQ(a.max_len, 9);
  EXPECT_EQ(a.floats(), plan.out_floats);
  for (int kv = 0; kv < 3; ++kv)
    for (int g = 0; g < 2; ++g)
      for (int w = 0; w < 4; ++w)
        EXPECT_EQ(size_t(kv * a.kv_stride + g * a.group_stride + w * a.row_stride), window_out_row(plan, kv, g * 4 + w));
  EXPECT_TRUE(a.causal);
  o.causal = false;  // NACL's official proxy: described as such
  EXPECT_FALSE(describe_window_attention(plan_window_attention(view, 4, 2, o), &base, true).causal);
  o.causal = true;
  o.scaled = false;
  EXPECT_THROW(describe_window_attention(plan_window_attention(view, 4, 2, o), &base, true), std::invalid_argument);
}

ModelConfig two_layer_gqa() {
  ModelConfig c;
  c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 4, c.dim = 16, c.hidden_dim = 16;
  c.vocab_size = 16, c.context_length = 64;
  return c;
}

// The engine's holder takes a signal only for its own window and cache, and drops it on request.
TEST(PrecomputedWindow, CopiesOnlyTheRowsItWasComputedFor) {
  KVCache cache(two_layer_gqa(), KvType::F32);
  const float k[4] = {1, 2, 3, 4};
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < 5; ++t) cache.append(1, h, t, k, k);
  std::vector<float> data;
  LayerSignals s;
  s.layer = 1;
  s.window_attention = counting_signal(data);  // 2 KV heads x group 2 x W 3, rows of 5
  s.window_attention.query_position0 = 2;
  PrecomputedWindow held;
  std::vector<float> out(2 * 3 * 5);
  held.offer(s, 3, 2, 2, true, cache);
  EXPECT_FALSE(held.copy(1, 1, 2, 2, 2, 2, 5, out.data())) << "another W";
  EXPECT_FALSE(held.copy(1, 1, 2, 2, 3, 1, 5, out.data())) << "another first position";
  EXPECT_FALSE(held.copy(0, 1, 2, 2, 3, 2, 5, out.data())) << "another layer";
  EXPECT_FALSE(held.copy(1, 1, 2, 2, 3, 2, 4, out.data())) << "another length";
  EXPECT_FALSE(held.copy(1, 0, 2, 2, 3, 2, 5, out.data())) << "query heads of another KV head";
  ASSERT_TRUE(held.copy(1, 1, 2, 2, 3, 2, 5, out.data()));
  EXPECT_EQ(out[5 * 3 + 2 * 5 + 4], data[41 + 20 + 2 * 6 + 4]);  // query head 3, row 2, entry 4
  EXPECT_EQ(held.heads_copied(), 1);
  held.drop_layer(0);
  EXPECT_TRUE(held.copy(1, 1, 2, 2, 3, 2, 5, out.data()));
  held.drop_layer(1);
  EXPECT_FALSE(held.copy(1, 1, 2, 2, 3, 2, 5, out.data())) << "dropped";
  held.offer(s, 3, 2, 1, true, cache);
  EXPECT_FALSE(held.copy(1, 1, 1, 1, 3, 2, 5, out.data())) << "offered for another group";
  held.offer(s, 2, 2, 2, true, cache);
  EXPECT_FALSE(held.copy(1, 1, 2, 2, 2, 2, 5, out.data())) << "offered for another W";
  held.offer(s, 3, 2, 2, false, cache);
  EXPECT_FALSE(held.copy(1, 1, 2, 2, 3, 2, 5, out.data())) << "a causal signal offered for a non-causal A";
  cache.append(1, 0, 5, k, k);  // 6 entries: more than the rows hold
  held.offer(s, 3, 2, 2, true, cache);
  EXPECT_FALSE(held.copy(1, 1, 2, 2, 3, 2, 5, out.data())) << "a cache the signal cannot be for";
  EXPECT_EQ(held.heads_copied(), 2);
  EXPECT_EQ(held.downloads(), 0);
}

// In place (device scoring): only a device signal, only for its own layer, window and head
// lengths, and only rows exactly T apart (the kernels' [G][W][T]); the pointer is the head's first
// row. Nothing is read or downloaded.
TEST(PrecomputedWindow, HandsRowsInPlaceOnlyInTheKernelsLayout) {
  KVCache cache(two_layer_gqa(), KvType::F32);
  const float k[4] = {1, 2, 3, 4};
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < 5; ++t) cache.append(1, h, t, k, k);
  std::vector<float> data(2 * 36);
  LayerSignals s;
  s.layer = 1;
  auto describe = [&](int64_t row_stride, bool on_device) {
    WindowAttentionSignal& a = s.window_attention;  // 2 KV heads x group 2 x W 3, 5 entries
    a.data = data.data(), a.on_device = on_device;
    a.n_kv = 2, a.group = 2, a.W = 3, a.query_position0 = 2, a.max_len = 5;
    a.row_stride = row_stride, a.group_stride = 3 * row_stride, a.kv_stride = 6 * row_stride;
  };
  PrecomputedWindow held;
  describe(5, true);
  held.offer(s, 3, 2, 2, true, cache);
  EXPECT_TRUE(held.in_place_for_every_head(1, 3, 2));
  EXPECT_EQ(held.in_place(1, 1, 3, 2, 5), data.data() + 30);
  EXPECT_EQ(held.in_place(1, 0, 3, 2, 5), data.data());
  EXPECT_EQ(held.in_place(0, 1, 3, 2, 5), nullptr) << "another layer";
  EXPECT_EQ(held.in_place(1, 1, 2, 2, 5), nullptr) << "another W";
  EXPECT_EQ(held.in_place(1, 1, 3, 1, 5), nullptr) << "another first position";
  EXPECT_EQ(held.in_place(1, 1, 3, 2, 4), nullptr) << "another length";
  EXPECT_EQ(held.in_place(1, 2, 3, 2, 5), nullptr) << "no such head";
  EXPECT_FALSE(held.in_place_for_every_head(0, 3, 2));
  EXPECT_EQ(held.heads_in_place(), 2);
  describe(6, true);  // rows padded past T: not the kernels' layout
  held.offer(s, 3, 2, 2, true, cache);
  EXPECT_EQ(held.in_place(1, 1, 3, 2, 5), nullptr) << "padded rows";
  EXPECT_FALSE(held.in_place_for_every_head(1, 3, 2));
  describe(5, false);  // host memory: copied out, never handed as device memory
  held.offer(s, 3, 2, 2, true, cache);
  EXPECT_EQ(held.in_place(1, 1, 3, 2, 5), nullptr) << "host memory";
  EXPECT_FALSE(held.in_place_for_every_head(1, 3, 2));
  const std::vector<int> first_four{0, 1, 2, 3};
  cache.keep(1, 0, first_four);  // head 0 now shorter than the rows: ragged
  describe(5, true);
  held.offer(s, 3, 2, 2, true, cache);
  EXPECT_EQ(held.in_place(1, 0, 3, 2, 4), nullptr) << "a head shorter than its rows";
  EXPECT_EQ(held.in_place(1, 1, 3, 2, 5), data.data() + 30) << "the full-length head still qualifies";
  EXPECT_FALSE(held.in_place_for_every_head(1, 3, 2));
  EXPECT_EQ(held.heads_in_place(), 3);
  EXPECT_EQ(held.downloads(), 0);
}

struct Case {
  std::string policy;
  std::map<std::string, std::string> params = {};
  std::string budget = "48";
  int steps = 4;
  int decode_block = 0;  // > 0: then one forward call of this many tokens (a question block)
};

// InPlace: device scoring whose layer weights stay on the host; InPlaceLayers: its layer weights
// take device signals too (the generated layer kernel).
enum class Mode {
  Plain,
  Injected,
  Planted,
  ForcedPlanted,
  InPlace,
  InPlacePlanted,
  InPlaceLayers,
  InPlaceLayersPlanted,
  InPlaceDecodePlanted  // InPlace with a wrong buffer planted in the decode steps only (the rolling window)
};

struct EngineRun {
  std::vector<test::CacheLayout> layouts;  // after the prefill, each decode step, the block
  std::vector<std::vector<float>> logits;
  EvictionReport report;
  int requested = 0;     // the engine's request before the prompt
  int64_t injected = 0;  // layers handed a buffer
  int64_t scored_in_place = 0;  // InPlaceScoring's calls that got A as device memory
  int64_t layer_heads_in_place = 0;
};

class WindowAttentionEngineTest : public test::StoriesPromptTest {
 protected:
  // scoring_device: the CUDA device the stand-in device scoring says it runs on (the injector's
  // signals are device 0's).
  static EngineRun run(const Case& c, Mode mode, int scoring_device = 0) {
    const auto policy = load_policy(c.policy, c.params);
    const bool layers = mode == Mode::InPlaceLayers || mode == Mode::InPlaceLayersPlanted;
    const bool in_place = mode == Mode::InPlace || mode == Mode::InPlacePlanted || mode == Mode::InPlaceDecodePlanted || layers;
    test::InPlaceScoring device_scoring(*policy, layers);
    device_scoring.device = scoring_device;
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    EvictionEngine engine(in_place ? static_cast<const PolicyProgram&>(device_scoring) : *policy, model_->config,
                          {Budget::parse(c.budget), 3});
    std::unique_ptr<test::WindowAttentionInjector> injector;
    ForwardObserver* observer = &engine;
    if (mode != Mode::Plain) {
      const bool plant = mode == Mode::Planted || mode == Mode::ForcedPlanted || mode == Mode::InPlacePlanted ||
                         mode == Mode::InPlaceLayersPlanted || mode == Mode::InPlaceDecodePlanted;
      injector = std::make_unique<test::WindowAttentionInjector>(engine, decoder->cache(), model_->config.group_size(),
                                                                 plant, mode == Mode::ForcedPlanted);
      if (in_place) injector->mark_on_device();
      if (mode == Mode::InPlaceDecodePlanted) injector->plant_beyond_block_only();
      observer = injector.get();
    }
    EngineRun r;
    r.requested = engine.request().window_attention;
    auto step = [&](std::span<const int> block) {
      r.logits.push_back(decoder->forward(block, observer));
      r.layouts.push_back(test::cache_layout_of(decoder->cache()));
    };
    step(tokens_);
    for (int s = 0; s < c.steps; ++s) {
      const auto& last = r.logits.back();
      const int next = static_cast<int>(std::max_element(last.begin(), last.end()) - last.begin());
      step(std::span<const int>(&next, 1));
    }
    if (c.decode_block > 0) step(std::span<const int>(tokens_).subspan(1, c.decode_block));
    r.report = engine.report();
    r.injected = injector ? injector->injected() : 0;
    r.scored_in_place = device_scoring.scored_in_place;
    r.layer_heads_in_place = device_scoring.layer_heads_in_place;
    return r;
  }

  static void expect_same(const EngineRun& a, const EngineRun& b, const std::string& what) {
    ASSERT_EQ(a.layouts.size(), b.layouts.size());
    for (size_t i = 0; i < a.layouts.size(); ++i) {
      EXPECT_EQ(a.layouts[i], b.layouts[i]) << what << ": cache after call " << i;
      EXPECT_EQ(a.logits[i], b.logits[i]) << what << ": logits of call " << i;
    }
  }

  // The injected run keeps the plain run's cache, and the engine read the injected buffer for
  // (at least) every stored head of every layer at the prefill.
  static void expect_reused_and_same(const Case& c) {
    const EngineRun plain = run(c, Mode::Plain), injected = run(c, Mode::Injected);
    const int heads = model_->config.n_layers * model_->config.n_kv_heads;
    EXPECT_GT(plain.requested, 0) << c.policy;
    EXPECT_TRUE(plain.report.prefill_evicted) << c.policy << " evicted nothing at the prefill";
    EXPECT_EQ(plain.report.window_attention_reused, 0) << c.policy << ": the CPU decoder computes none";
    EXPECT_GT(injected.injected, 0) << c.policy;
    EXPECT_GE(injected.report.window_attention_reused, heads) << c.policy << ": the injected buffer was not read";
    EXPECT_EQ(injected.report.window_attention_downloads, 0) << c.policy << ": host memory needs no download";
    expect_same(plain, injected, c.policy);
  }
};

TEST_F(WindowAttentionEngineTest, PerHeadTopKPolicies) {
  expect_reused_and_same({"snapkv"});
  expect_reused_and_same({"pyramidkv"});
}

TEST_F(WindowAttentionEngineTest, AdaKvLayerWideSelection) { expect_reused_and_same({"adakv"}); }

TEST_F(WindowAttentionEngineTest, CascadingScoreOrderedCake) { expect_reused_and_same({"cake"}); }

TEST_F(WindowAttentionEngineTest, TovaWindowOfOne) { expect_reused_and_same({"tova"}); }

// CAKE's paper indicator reads A at decode over the rolling window: one-token steps fall back to
// the host (the decoder's one row is not the engine's W rows), a decode block of more than W
// tokens is served from the buffer again.
TEST_F(WindowAttentionEngineTest, DecodeBlockOfAWindowIsServedToo) {
  const Case c{"cake", {{"decode_indicator", "mean_plus_gamma_var"}}, "48", 3, 40};
  Case prefill_only = c;
  prefill_only.decode_block = 0;
  const EngineRun plain = run(c, Mode::Plain), injected = run(c, Mode::Injected);
  const EngineRun without_block = run(prefill_only, Mode::Injected);
  expect_same(plain, injected, "cake mean_plus_gamma_var");
  EXPECT_GT(injected.report.window_attention_reused, without_block.report.window_attention_reused)
      << "the decode block's eviction did not read the injected buffer";
}

// Control: a wrong buffer (each row reversed) changes what the engine keeps, so the equality above
// rests on the injected values.
TEST_F(WindowAttentionEngineTest, ControlAPlantedWrongBufferChangesTheKeptSets) {
  for (const char* p : {"snapkv", "cake"}) {
    const EngineRun plain = run({p}, Mode::Plain), planted = run({p}, Mode::Planted);
    EXPECT_GT(planted.report.window_attention_reused, 0) << p;
    EXPECT_NE(plain.layouts.front(), planted.layouts.front()) << p << ": the planted buffer was not read";
  }
}

// NACL's proxy attention is not the ordinary window attention: non-causal by default, or scored by
// query head j alone (code_compat). The engine neither asks for it nor reads a wrong buffer handed
// to it unasked; the same buffer handed to NACL with the ordinary map and causal rows is read
// (the refusal is the engine's check, not the injector's).
TEST_F(WindowAttentionEngineTest, NaclDoesNotUseIt) {
  // A split whose kept sets depend on the scores here (the default's 256 sinks would fill the
  // budget): 4 sinks, proxy rows 10% of the prompt, 40% kept.
  const std::map<std::string, std::string> split{
      {"budget_split", "explicit"}, {"explicit_sinks", "4"}, {"explicit_proxy", "0.1"}};
  auto with = [&](std::map<std::string, std::string> more) {
    more.insert(split.begin(), split.end());
    return Case{"nacl", more, "40%"};
  };
  for (const Case& c : {with({}), with({{"proxy_causal", "true"}, {"gqa_head_map", "code_compat"}})}) {
    const EngineRun plain = run(c, Mode::Plain), forced = run(c, Mode::ForcedPlanted);
    EXPECT_EQ(plain.requested, 0);
    EXPECT_TRUE(plain.report.prefill_evicted);
    EXPECT_GT(forced.injected, 0) << "nothing was handed to the engine";
    EXPECT_EQ(forced.report.window_attention_reused, 0);
    expect_same(plain, forced, "nacl");
  }
  const Case ordinary = with({{"proxy_causal", "true"}});
  const EngineRun plain = run(ordinary, Mode::Plain), forced = run(ordinary, Mode::ForcedPlanted);
  EXPECT_EQ(plain.requested, 0) << "a window from the prompt's length is unknown before the prompt";
  EXPECT_GT(forced.report.window_attention_reused, 0);
  EXPECT_NE(plain.layouts.front(), forced.layouts.front()) << "the planted buffer was not read";
}

// The decode steps of MorphKV, Scissorhands and CAKE's paper indicator read the window attention of
// the rolling window (the last W queries, handed over as the CUDA decoder computes it from the
// queries it holds): scored on the device, it is read in place there too (a layer's heads are
// equally long, so its rows are the kernels' [G][W][T]): nothing downloaded, the caches and logits
// of the plain run; a buffer planted in the decode steps only changes them.
TEST_F(WindowAttentionEngineTest, DeviceScoringReadsTheRollingWindowInPlace) {
  const int heads = model_->config.n_layers * model_->config.n_kv_heads;
  const std::map<std::string, std::string> paper{{"decode_indicator", "mean_plus_gamma_var"}};
  for (const Case& c : {Case{"morphkv", {}, "48", 6}, Case{"scissorhands", {}, "48", 6}, Case{"cake", paper, "48", 6}}) {
    const bool layers = c.policy == "cake";  // its layer preference reads A at the prompt: on the device too
    const EngineRun plain = run(c, Mode::Plain), in_place = run(c, layers ? Mode::InPlaceLayers : Mode::InPlace);
    EXPECT_GE(in_place.report.window_attention_in_place, heads * (1 + c.steps)) << c.policy;
    EXPECT_GE(in_place.scored_in_place, heads * (1 + c.steps)) << c.policy;
    EXPECT_EQ(in_place.report.window_attention_downloads, 0) << c.policy;
    EXPECT_EQ(in_place.report.window_attention_reused, 0) << c.policy;
    expect_same(plain, in_place, c.policy);
    if (layers) continue;  // (the decode-only plant below uses the host layer weight's mode)
    const EngineRun planted = run(c, Mode::InPlaceDecodePlanted);
    EXPECT_EQ(planted.layouts.front(), plain.layouts.front()) << c.policy << ": the prompt's buffer was planted";
    EXPECT_NE(planted.layouts, plain.layouts) << c.policy << ": the decode steps' rows were not read";
  }
}

// Device scoring reads the decoder's buffer in place (PrecomputedWindow::in_place, docs/CUDA.md
// "Not done" step 2): the injected buffer is marked as device memory and InPlaceScoring stands in
// for the CUDA backend. SnapKV and Ada-KV, whose host side never reads A, get every head's rows in
// place at the prefill, nothing is downloaded or copied, and the cache is the plain run's; a
// planted wrong buffer changes it (the rows really were scored). CAKE's layer weight reads A on
// the host, so the engine must not hand it over: it downloads instead, which cannot work on this
// "device" memory (a RuntimeError) or, where it does, is counted as a download.
TEST_F(WindowAttentionEngineTest, DeviceScoringReadsTheDecodersBufferInPlace) {
  const int heads = model_->config.n_layers * model_->config.n_kv_heads;
  for (const char* p : {"snapkv", "adakv"}) {
    const EngineRun plain = run({p}, Mode::Plain), in_place = run({p}, Mode::InPlace);
    EXPECT_GE(in_place.report.window_attention_in_place, heads) << p;
    EXPECT_GE(in_place.scored_in_place, heads) << p;
    EXPECT_EQ(in_place.report.window_attention_downloads, 0) << p;
    EXPECT_EQ(in_place.report.window_attention_reused, 0) << p;
    expect_same(plain, in_place, p);
    EXPECT_NE(plain.layouts.front(), run({p}, Mode::InPlacePlanted).layouts.front()) << p << ": the rows were not read";
  }
  EngineRun cake;
  bool refused_download = false;
  try {
    cake = run({"cake"}, Mode::InPlace);
  } catch (const RuntimeError&) {
    refused_download = true;
  }
  EXPECT_EQ(cake.scored_in_place, 0);
  EXPECT_EQ(cake.report.window_attention_in_place, 0);
  if (!refused_download) {
    EXPECT_GT(cake.report.window_attention_downloads, 0);
  }
}

// The decoder's device signals are its GPU's memory: a policy whose kernels run on another GPU
// would read addresses of the wrong device. Refused at the first layer, naming both devices.
TEST_F(WindowAttentionEngineTest, DeviceSignalsFromAnotherGpuThanThePolicysAreRefused) {
  try {
    run({"snapkv"}, Mode::InPlace, /*scoring_device=*/1);
    FAIL() << "device 0's signals were scored by a program on device 1";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("scores on cuda:1"), std::string::npos) << what;
    EXPECT_NE(what.find("the decoder runs on cuda:0"), std::string::npos) << what;
  }
  EXPECT_GT(run({"snapkv"}, Mode::InPlace, /*scoring_device=*/0).scored_in_place, 0) << "the same device is taken";
}

// "Not done" step 4 (docs/CUDA.md): when the program's layer weights take device signals too (the
// CUDA backend's generated layer kernel), CAKE is scored in place as well: its indicator and its
// layer preference read the decoder's buffer, nothing is downloaded, and the caches and logits are
// the plain run's. A planted buffer changes them (the layer weights and scores read the rows).
// HeadKV too: its head plan (a table per head) reads no signal, so it is handed the scalars alone
// and does not keep its SnapKV-like scores off the device.
TEST_F(WindowAttentionEngineTest, DeviceLayerWeightsLetCakeReadTheBufferInPlace) {
  const int heads = model_->config.n_layers * model_->config.n_kv_heads;
  for (const char* p : {"cake", "pyramidkv", "headkv"}) {
    const EngineRun plain = run({p}, Mode::Plain), in_place = run({p}, Mode::InPlaceLayers);
    EXPECT_GE(in_place.report.window_attention_in_place, heads) << p;
    EXPECT_GE(in_place.scored_in_place, heads) << p;
    EXPECT_EQ(in_place.report.window_attention_downloads, 0) << p;
    expect_same(plain, in_place, p);
    EXPECT_NE(plain.layouts.front(), run({p}, Mode::InPlaceLayersPlanted).layouts.front()) << p << ": the rows were not read";
  }
  // CAKE's layer preference reads A; PyramidKV's ramp reads no signal.
  EXPECT_GE(run({"cake"}, Mode::InPlaceLayers).layer_heads_in_place, heads);
}

// Only a program that takes device signals may be handed them (or device positions): the
// interpreter refuses.
TEST(WindowAttentionInPlace, TheInterpreterRefusesDeviceSignals) {
  const auto policy = load_policy("snapkv", {});
  EXPECT_FALSE(policy->scores_device_signals());
  std::vector<float> a(2 * 4 * 3, 0.1f), out(3);
  ScoreInputs in;
  in.group = 2, in.W = 4, in.T = 3;
  in.set_device_signal(TensorSignal::WindowAttention, a.data());
  EXPECT_TRUE(in.on_device(TensorSignal::WindowAttention));
  EXPECT_THROW(policy->score(in, false, out.data()), std::logic_error);
  in.device_signals = 0;
  EXPECT_NO_THROW(policy->score(in, false, out.data()));
  const std::vector<int32_t> positions = {0, 1, 2};
  in.device_position = positions.data();  // positions in device memory, the same refusal
  EXPECT_THROW(policy->score(in, false, out.data()), std::logic_error);
}

TEST_F(WindowAttentionEngineTest, H2oAsksForNone) {
  const EngineRun plain = run({"h2o"}, Mode::Plain), injected = run({"h2o"}, Mode::Injected);
  EXPECT_EQ(plain.requested, 0);
  EXPECT_EQ(injected.injected, 0);
  EXPECT_EQ(injected.report.window_attention_reused, 0);
  expect_same(plain, injected, "h2o");
}

}  // namespace
}  // namespace kvevict
