#pragma once
// A ForwardObserver between the decoder and an EvictionEngine that records, before the engine acts
// on a layer, what that layer's heads hold (keys, original positions) and keeps its own copy of the
// newest query rows: what an independent reference needs to recompute every prefill and decode
// decision (tests/core/field_policies_test.cpp). At prefill the engine decides after the last
// layer (one-shot), at decode inside after_layer; either way the snapshot of after_layer is the
// state the decision saw.
#include <algorithm>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "core/model/model.h"
#include "reference_field_policies.h"

namespace kvevict::test {

class DecodeSpy : public ForwardObserver {
 public:
  DecodeSpy(EvictionEngine& engine, const ModelConfig& c, int keep_rows)
      : engine_(engine), c_(c), keep_rows_(keep_rows), rows_(c.n_layers), before_(c.n_layers) {}

  ObservationRequest request() const override { return engine_.request(); }

  void after_layer(const LayerSignals& s, KVCache& cache) override {
    auto& rows = rows_[s.layer];
    const size_t row = static_cast<size_t>(c_.n_heads) * c_.head_dim;
    for (int i = 0; i < s.window; ++i) {
      reference::QueryRow r;
      r.pos = s.first_position + s.n_tokens - s.window + i;
      r.q.assign(s.window_queries.begin() + i * row, s.window_queries.begin() + (i + 1) * row);
      rows.push_back(std::move(r));
    }
    if (static_cast<int>(rows.size()) > keep_rows_) rows.erase(rows.begin(), rows.end() - keep_rows_);
    before_[s.layer].assign(c_.n_kv_heads, {});
    for (int h = 0; h < c_.n_kv_heads; ++h) {
      reference::CachedHead& sn = before_[s.layer][h];
      sn.T = cache.length(s.layer, h);
      sn.keys.assign(cache.keys(s.layer, h), cache.keys(s.layer, h) + static_cast<size_t>(sn.T) * c_.head_dim);
      sn.pos.assign(cache.positions(s.layer, h), cache.positions(s.layer, h) + sn.T);
    }
    engine_.after_layer(s, cache);
  }
  void after_forward(int n, KVCache& cache) override { engine_.after_forward(n, cache); }

  const std::vector<reference::QueryRow>& rows(int layer) const { return rows_[layer]; }
  const reference::CachedHead& before(int layer, int kv_head) const { return before_[layer][kv_head]; }

 private:
  EvictionEngine& engine_;
  const ModelConfig& c_;
  int keep_rows_;
  std::vector<std::vector<reference::QueryRow>> rows_;
  std::vector<std::vector<reference::CachedHead>> before_;  // [layer][kv head], this forward
};

// What a head holds now, ascending positions.
inline std::vector<int32_t> held_positions(const KVCache& cache, int layer, int kv_head) {
  std::vector<int32_t> p(cache.positions(layer, kv_head), cache.positions(layer, kv_head) + cache.length(layer, kv_head));
  std::sort(p.begin(), p.end());
  return p;
}

// Runs the prompt and `steps` greedy decode steps under `policy`, and after every forward compares
// each head's held positions with `decide(before, rows, layer, kv_head, budget, step)` (step 0 =
// prefill). Returns how many decisions evicted something.
using Decide = std::function<std::vector<int32_t>(const reference::CachedHead&, const std::vector<reference::QueryRow>&,
                                                  int layer, int kv_head, int budget, int step)>;
inline int check_decisions(const Model& model, const std::vector<int>& prompt, const PolicyProgram& policy,
                           const std::string& budget, int steps, int keep_rows, const Decide& decide, const std::string& what) {
  const ModelConfig& c = model.config;
  auto decoder = make_cpu_decoder(model, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(policy, c, {Budget::parse(budget), 0});
  DecodeSpy spy(engine, c, keep_rows);
  const std::vector<float>* logits = &decoder->forward(std::span<const int>(prompt), &spy);
  int evicting = 0;
  for (int step = 0; step <= steps; ++step) {
    if (step > 0) {
      const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
      logits = &decoder->forward(std::span<const int>(&next, 1), &spy);
    }
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) {
        const reference::CachedHead& before = spy.before(l, h);
        const auto want = decide(before, spy.rows(l), l, h, engine.report().layers[l][h].budget, step);
        EXPECT_EQ(held_positions(decoder->cache(), l, h), want) << what << " step " << step << " layer " << l << " head " << h;
        evicting += static_cast<int>(want.size()) < before.T;
      }
  }
  return evicting;
}

}  // namespace kvevict::test
