// SpindleKV's "fully unfold GQA" (gqa_mode = unfold) and the codebook options (codebook_scope,
// codebook_from_layer / codebook_to_layer): an unfolded cache attends exactly like the folded one
// while nothing is evicted, decodes like a naive per-query-head restricted attention after
// eviction, a codebook spanning the layer's heads collapses the identical copies, byte counts are
// what is stored, and bad settings are usage errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "core/model/synthetic_model.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "hand_policies.h"
#include "policy_test_prompt.h"
#include "reference_forward.h"
#include "stories_prompt_test.h"
#include "test_models.h"

namespace kvevict {
namespace {

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

int argmax(const std::vector<float>& v) { return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin()); }

// Bytes of `cache` counted by hand from its shape: dense heads 8d + 4 per entry; codebook heads
// 20 per entry + their own codes; shared codes once per layer.
size_t hand_bytes(const KVCache& c) {
  const size_t d = c.head_dim();
  size_t total = 0;
  for (int l = 0; l < c.n_layers(); ++l) {
    if (const LayerCodebook* lc = c.layer_codebook(l)) total += (lc->key_codes.size() + lc->value_codes.size()) * 4;
    for (int h = 0; h < c.n_stored_heads(); ++h) {
      const size_t len = c.length(l, h);
      if (const CodebookHead* cb = c.codebook(l, h)) total += len * 20 + (cb->key_codes.size() + cb->value_codes.size()) * 4;
      else total += len * (8 * d + 4);
    }
  }
  return total;
}

class Stories : public test::StoriesPromptTest {
 protected:
  // Prefill with `policy` and return the decoder (cache as the engine left it) and the report.
  std::unique_ptr<Decoder> prefill(const std::map<std::string, std::string>& set, const std::string& budget,
                                   EvictionReport* report, std::unique_ptr<EvictionEngine>* keep_engine = nullptr) {
    // Every policy stays alive: an engine handed back through keep_engine still reads its own.
    policies_.push_back(load_policy("spindlekv", set));
    policy_ = policies_.back().get();
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    auto engine = std::make_unique<EvictionEngine>(*policy_, model_->config, EngineOptions{Budget::parse(budget), 0});
    decoder->forward(std::span<const int>(tokens_), engine.get());
    *report = engine->report();
    if (keep_engine) *keep_engine = std::move(engine);
    return decoder;
  }
  std::vector<std::unique_ptr<PolicyProgram>> policies_;
  PolicyProgram* policy_ = nullptr;  // the newest of policies_
};

// Keeps the accumulated attention (column sums) the decoder reports for each layer.
class ColumnRecorder : public ForwardObserver {
 public:
  ObservationRequest request() const override { return {0, true}; }
  void after_layer(const LayerSignals& s, KVCache&) override { columns.push_back(*s.accumulated_attention); }
  std::vector<std::vector<std::vector<float>>> columns;  // [layer][query head][entry]
};

TEST_F(Stories, UnfoldedCacheGivesTheFoldedLogitsWhenNothingIsEvicted) {
  const ModelConfig& c = model_->config;
  ASSERT_EQ(c.group_size(), 2);
  const int half = 100;
  auto folded = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  auto unfolded = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  folded->forward(std::span<const int>(tokens_.data(), half));
  unfolded->forward(std::span<const int>(tokens_.data(), half));
  unfolded->cache().unfold();
  ASSERT_TRUE(unfolded->cache().unfolded());
  ASSERT_EQ(unfolded->cache().n_stored_heads(), c.n_heads);
  // Stored bytes: G copies, nothing hidden.
  EXPECT_EQ(unfolded->cache().bytes_in_use(), 2 * folded->cache().bytes_in_use());
  // A multi-token block (prefill tiles, G = 1 per stored head) ...
  std::vector<float> a, b;
  ColumnRecorder ca, cb;
  folded->forward(std::span<const int>(tokens_.data() + half, tokens_.size() - half), &ca, &a);
  unfolded->forward(std::span<const int>(tokens_.data() + half, tokens_.size() - half), &cb, &b);
  // Within float rounding, not bit for bit: the folded layer attends both query heads of a group
  // in one product, the unfolded one each over its own copy, and a BLAS may round the rows of two
  // products of different shapes differently (OpenBLAS's Zen kernels do: 1.4e-5 on these logits).
  EXPECT_LT(max_abs_diff(a, b), 1e-4);
  // Column sums (of up to ~100 probabilities; the same rounding latitude): query head h's row is
  // over its own stored head, the same entries as KV head h / G.
  ASSERT_EQ(ca.columns.size(), cb.columns.size());
  for (size_t l = 0; l < ca.columns.size(); ++l)
    for (int h = 0; h < c.n_heads; ++h) EXPECT_LT(max_abs_diff(ca.columns[l][h], cb.columns[l][h]), 1e-4) << l << " " << h;
  EXPECT_EQ(unfolded->cache().total_entries(), 2 * folded->cache().total_entries());
  // ... then one token at a time (decode chunks); each append lands in both copies.
  int token = argmax(std::vector<float>(a.end() - c.vocab_size, a.end()));
  for (int step = 0; step < 20; ++step) {
    const std::vector<float> fa = folded->forward(std::span<const int>(&token, 1));
    const std::vector<float> fb = unfolded->forward(std::span<const int>(&token, 1));
    ASSERT_LT(max_abs_diff(fa, fb), 1e-4) << "step " << step;
    token = argmax(fa);
  }
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_heads; ++h) {
      ASSERT_EQ(unfolded->cache().length(l, h), folded->cache().length(l, h / 2));
      const float* k = unfolded->cache().keys(l, h);
      const int64_t n = int64_t(unfolded->cache().length(l, h)) * c.head_dim;
      const std::vector<float> ku(k, k + n), kf(folded->cache().keys(l, h / 2), folded->cache().keys(l, h / 2) + n);
      if (l == 0) EXPECT_EQ(ku, kf) << "layer 0 head " << h;  // computed before any attention: the same bits
      else EXPECT_LT(max_abs_diff(ku, kf), 1e-4) << "layer " << l << " head " << h;
    }
  unfolded->reset();  // back to one stored head per KV head
  EXPECT_FALSE(unfolded->cache().unfolded());
  EXPECT_EQ(unfolded->cache().n_stored_heads(), c.n_kv_heads);
}

ModelConfig gqa3_config() {
  ModelConfig c;
  c.name = "unfold-test";
  c.n_layers = 3;
  c.dim = 48;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 10;
  c.hidden_dim = 64;
  c.vocab_size = 300;
  c.context_length = 256;
  return c;
}

TEST(GqaUnfold, PerQueryHeadKeptSetsDecodeLikeRestrictedAttention) {
  const ModelConfig c = gqa3_config();
  const auto model = make_random_model(c, 21);
  constexpr int kPrompt = 40, kDecode = 3;
  std::mt19937 rng(5);
  std::vector<int> tokens(kPrompt + kDecode);
  for (int& t : tokens) t = static_cast<int>(rng() % 300);
  // A different random kept set per (layer, query head), in shuffled order.
  std::vector<std::vector<std::vector<int>>> kept(c.n_layers, std::vector<std::vector<int>>(c.n_heads));
  std::vector<std::vector<std::set<int>>> kept_set(c.n_layers, std::vector<std::set<int>>(c.n_heads));
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_heads; ++h) {
      std::vector<int> all(kPrompt);
      for (int i = 0; i < kPrompt; ++i) all[i] = i;
      std::shuffle(all.begin(), all.end(), rng);
      all.resize(5 + rng() % 20);
      kept[l][h] = all;
      kept_set[l][h] = std::set<int>(all.begin(), all.end());
    }
  auto decoder = make_cpu_decoder(*model, {.threads = 2, .kv_type = KvType::F32});
  auto block_decoder = make_cpu_decoder(*model, {.threads = 2, .kv_type = KvType::F32});
  for (auto* d : {decoder.get(), block_decoder.get()}) {
    d->forward(std::span<const int>(tokens.data(), kPrompt));
    d->cache().unfold_keep(kept);
  }
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_heads; ++h) ASSERT_EQ(decoder->cache().length(l, h), static_cast<int>(kept[l][h].size()));
  auto visible = [&](int l, int h, int q, int k) { return q < kPrompt || k >= kPrompt || kept_set[l][h].count(k) > 0; };
  const auto ref = test::reference_forward(*model, tokens, nullptr, visible);
  // The union over each group, stored per KV head, is what a folded cache could do: it must differ.
  const auto folded_ref = test::reference_forward(*model, tokens, [&](int l, int kv, int q, int k) {
    bool any = false;
    for (int g = 0; g < 3; ++g) any |= kept_set[l][kv * 3 + g].count(k) > 0;
    return q < kPrompt || k >= kPrompt || any;
  });
  for (int t = kPrompt; t < kPrompt + kDecode; ++t) {
    const auto& logits = decoder->forward(std::span<const int>(&tokens[t], 1));
    double worst = 0, effect = 0;
    for (int v = 0; v < c.vocab_size; ++v) {
      worst = std::max(worst, std::abs(logits[v] - ref.logits[t][v]));
      effect = std::max(effect, std::abs(ref.logits[t][v] - folded_ref.logits[t][v]));
    }
    EXPECT_LT(worst, 1e-4) << "decoded token " << t;
    EXPECT_GT(effect, 1e-2) << "per-query-head sets should matter, or this test proves nothing";
  }
  std::vector<float> all;
  block_decoder->forward(std::span<const int>(tokens.data() + kPrompt, kDecode), nullptr, &all);
  for (int t = kPrompt; t < kPrompt + kDecode; ++t)
    for (int v = 0; v < c.vocab_size; ++v)
      ASSERT_NEAR(all[size_t(t - kPrompt) * c.vocab_size + v], ref.logits[t][v], 1e-4) << "block token " << t;
}

TEST(GqaUnfold, BadUnfoldCallsThrow) {
  KVCache cache(gqa3_config(), KvType::F32);
  std::vector<float> k(10, 1.0f);
  for (int l = 0; l < 3; ++l)
    for (int kv = 0; kv < 2; ++kv) cache.append(l, kv, 0, k.data(), k.data());
  std::vector<std::vector<std::vector<int>>> bad(3, std::vector<std::vector<int>>(6, std::vector<int>{0}));
  bad[1][4] = {1};  // out of range
  EXPECT_THROW(cache.unfold_keep(bad), std::invalid_argument);
  EXPECT_FALSE(cache.unfolded());
  cache.unfold();
  EXPECT_THROW(cache.unfold(), std::logic_error);
}

TEST_F(Stories, SharedCodebookCollapsesTheUnfoldedCopiesExactly) {
  // Nothing evicted: the unfolded cache holds G identical copies. A per-layer codebook over them
  // has exactly the codes of the per-layer codebook of the folded cache (each copy has G times the
  // degree, so the greedy picks the same codes); only indices, norms and positions are per copy.
  const ModelConfig& c = model_->config;
  EvictionReport folded_shared, unfolded_shared, folded_head, unfolded_head;
  const std::map<std::string, std::string> shared = {{"codebook_scope", "per_layer_across_heads"}};
  auto d1 = prefill(shared, "full", &folded_shared);
  auto d2 = prefill({{"codebook_scope", "per_layer_across_heads"}, {"gqa_mode", "unfold"}}, "full", &unfolded_shared);
  auto d3 = prefill({}, "full", &folded_head);
  auto d4 = prefill({{"gqa_mode", "unfold"}}, "full", &unfolded_head);
  const int G = c.group_size();
  EXPECT_EQ(unfolded_shared.key_codes, folded_shared.key_codes);
  EXPECT_EQ(unfolded_shared.value_codes, folded_shared.value_codes);
  EXPECT_EQ(unfolded_head.key_codes, G * folded_head.key_codes);
  EXPECT_EQ(unfolded_head.value_codes, G * folded_head.value_codes);
  const size_t S = tokens_.size();
  EXPECT_EQ(unfolded_shared.bytes_codebook - folded_shared.bytes_codebook,
            static_cast<size_t>(c.n_layers) * (c.n_heads - c.n_kv_heads) * S * 20);
  for (auto* d : {d1.get(), d2.get(), d3.get(), d4.get()}) EXPECT_EQ(d->cache().bytes_in_use(), hand_bytes(d->cache()));
  EXPECT_NE(d2->cache().layer_codebook(0), nullptr);
  EXPECT_EQ(d4->cache().layer_codebook(0), nullptr);
  // Shared codes merge across different KV heads too, so they never exceed the per-head total.
  EXPECT_LE(folded_shared.key_codes + folded_shared.value_codes, folded_head.key_codes + folded_head.value_codes);
}

TEST_F(Stories, UnfoldWithSharedCodebookAfterEvictionThenDecode) {
  const ModelConfig& c = model_->config;
  EvictionReport per_head, per_layer, folded;
  std::unique_ptr<EvictionEngine> engine;
  auto dh = prefill({{"gqa_mode", "unfold"}, {"codebook_scope", "per_head"}}, "40%", &per_head);
  auto dl = prefill({{"gqa_mode", "unfold"}, {"codebook_scope", "per_layer_across_heads"}}, "40%", &per_layer, &engine);
  auto df = prefill({}, "40%", &folded);
  // Same eviction, different storage of the codes.
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_heads; ++h)
      ASSERT_EQ(per_head.layers[l][h].kept_positions, per_layer.layers[l][h].kept_positions);
  EXPECT_EQ(per_head.bytes_before_codebook, per_layer.bytes_before_codebook);
  EXPECT_LT(per_layer.bytes_codebook, per_head.bytes_codebook);
  std::printf("stories260K, %zu tokens, 40%%: bytes dense unfolded %zu, per_head %zu, per_layer_across_heads %zu "
              "(ratio %.3f); folded group_mean per_head %zu\n",
              tokens_.size(), per_head.bytes_before_codebook, per_head.bytes_codebook, per_layer.bytes_codebook,
              double(per_layer.bytes_codebook) / per_head.bytes_codebook, folded.bytes_codebook);
  EXPECT_EQ(per_layer.bytes_kept, hand_bytes(dl->cache()));
  // Decoding appends to every copy; the shared codes absorb the copies' identical vectors.
  KVCache& cache = dl->cache();
  const int64_t entries = cache.total_entries();
  std::vector<float> logits(c.vocab_size);
  int token = tokens_.back();
  for (int step = 0; step < 20; ++step) {
    logits = dl->forward(std::span<const int>(&token, 1), engine.get());
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
    token = argmax(logits);
  }
  EXPECT_EQ(cache.total_entries(), entries + 20 * c.n_layers * c.n_heads);
  EXPECT_EQ(cache.bytes_in_use(), hand_bytes(cache));
  EXPECT_EQ(engine->report().bytes_kept, cache.bytes_in_use());
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_heads; h += 2) {
      // Both copies of a KV head got the same decoded entry, coded by the same shared code.
      const CodebookHead* a = cache.codebook(l, h);
      const CodebookHead* b = cache.codebook(l, h + 1);
      ASSERT_TRUE(a && b && a->shared_codes);
      EXPECT_EQ(a->key_index.back(), b->key_index.back());
      EXPECT_EQ(a->value_index.back(), b->value_index.back());
    }
}

TEST_F(Stories, UnfoldReplayedFromARecorderEqualsTheLiveRun) {
  // The eval sweep path: record one full-cache prefill, restore a copy, apply the policy.
  EvictionReport live;
  const std::map<std::string, std::string> set = {{"gqa_mode", "unfold"}, {"codebook_scope", "per_layer_across_heads"}};
  auto d_live = prefill(set, "40%", &live);
  auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  PrefillRecorder rec(32, false);
  decoder->forward(std::span<const int>(tokens_), &rec);
  KVCache copy = decoder->cache();
  EvictionEngine engine(*policy_, model_->config, {Budget::parse("40%"), 0});
  engine.apply_after_prefill(rec, copy);
  const EvictionReport& replay = engine.report();
  ASSERT_TRUE(copy.unfolded());
  ASSERT_EQ(replay.layers.size(), live.layers.size());
  for (size_t l = 0; l < live.layers.size(); ++l) {
    ASSERT_EQ(replay.layers[l].size(), static_cast<size_t>(model_->config.n_heads));
    for (size_t h = 0; h < live.layers[l].size(); ++h)
      EXPECT_EQ(replay.layers[l][h].kept_positions, live.layers[l][h].kept_positions) << l << " " << h;
  }
  EXPECT_EQ(replay.bytes_kept, live.bytes_kept);
  EXPECT_EQ(copy.bytes_in_use(), d_live->cache().bytes_in_use());
  // The sweep then restores the folded snapshot for the next policy.
  copy = decoder->cache();
  EXPECT_FALSE(copy.unfolded());
}

TEST_F(Stories, CodebookLayerRange) {
  const ModelConfig& c = model_->config;
  ASSERT_GE(c.n_layers, 4);
  EvictionReport r;
  auto d = prefill({{"codebook_from_layer", "1"}, {"codebook_to_layer", "2"}}, "40%", &r);
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h) EXPECT_EQ(d->cache().is_codebook(l, h), l == 1 || l == 2) << l;
  EXPECT_EQ(r.bytes_codebook, hand_bytes(d->cache()));
  EvictionReport all;
  auto d_all = prefill({}, "40%", &all);
  EXPECT_GT(all.codebook_tokens, r.codebook_tokens);
  // A range past the last layer means "to the last layer"; an empty range is a usage error.
  EvictionReport tail;
  auto d_tail = prefill({{"codebook_from_layer", std::to_string(c.n_layers - 1)}, {"codebook_to_layer", "99"}}, "40%", &tail);
  EXPECT_TRUE(d_tail->cache().is_codebook(c.n_layers - 1, 0));
  EXPECT_FALSE(d_tail->cache().is_codebook(c.n_layers - 2, 0));
  const auto empty = load_policy("spindlekv", {{"codebook_from_layer", "3"}, {"codebook_to_layer", "2"}});
  EXPECT_THROW(EvictionEngine(*empty, c, {Budget::parse("40%"), 0}), UsageError);
  const auto beyond = load_policy("spindlekv", {{"codebook_from_layer", "50"}});
  EXPECT_THROW(EvictionEngine(*beyond, c, {Budget::parse("40%"), 0}), UsageError);
}

TEST(GqaUnfold, UnfoldNeedsPerHeadScopeAndNoCascading) {
  const ModelConfig c = gqa3_config();
  test::HandPolicy p;
  p.desc.name = "unfold-bad";
  p.desc.select.unfold_gqa = true;
  p.desc.run.cascading = true;
  p.score_fn = [](const ScoreInputs&, bool, float*) {};
  EXPECT_THROW(EvictionEngine(p, c, {Budget::parse("10"), 0}), UsageError);
  p.desc.run.cascading = false;
  p.desc.select.scope = SelectScope::Layer;
  EXPECT_THROW(EvictionEngine(p, c, {Budget::parse("10"), 0}), UsageError);
  p.desc.select.scope = SelectScope::KvHead;
  EXPECT_NO_THROW(EvictionEngine(p, c, {Budget::parse("10"), 0}));
  // Policy file values outside the options are reported with the file's position.
  EXPECT_THROW(load_policy("spindlekv", {{"gqa_mode", "per_query"}}), UsageError);
  EXPECT_THROW(load_policy("spindlekv", {{"codebook_scope", "global"}}), UsageError);
  EXPECT_THROW(load_policy("spindlekv", {{"codebook_to_layer", "-1"}}), UsageError);
}

// Combinations the engine cannot honour together are usage errors naming both settings; each
// setting alone is accepted.
TEST(GqaUnfold, CombinationsTheEngineRefuses) {
  const ModelConfig c = gqa3_config();
  test::HandPolicy base;
  base.desc.name = "combo";
  base.desc.window = 2;
  base.score_fn = [](const ScoreInputs&, bool, float*) {};
  auto expect_refused = [&](const test::HandPolicy& p, const std::string& a, const std::string& b) {
    try {
      EvictionEngine engine(p, c, {Budget::parse("10"), 0});
      ADD_FAILURE() << a << " with " << b << " accepted";
    } catch (const UsageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(a), std::string::npos) << what;
      EXPECT_NE(what.find(b), std::string::npos) << what;
    }
  };
  test::HandPolicy unfold = base, reassign = base, same_index = base;
  unfold.desc.select.unfold_gqa = true;
  reassign.desc.run.reassign_positions = true;
  same_index.desc.observe.same_index_head = true;
  for (const test::HandPolicy* alone : {&unfold, &reassign, &same_index})
    EXPECT_NO_THROW(EvictionEngine(*alone, c, {Budget::parse("10"), 0}));
  test::HandPolicy p = unfold;
  p.desc.run.reassign_positions = true;
  expect_refused(p, "reassign_positions", "unfold_gqa");
  p = unfold;
  p.desc.observe.same_index_head = true;
  expect_refused(p, "same_index_head", "unfold_gqa");
  p = same_index;
  p.desc.run.reassign_positions = true;
  expect_refused(p, "same_index_head", "reassign_positions");
}

}  // namespace
}  // namespace kvevict
