// score_at insertion with a decode indicator that scores each entry alone (dsl/entry_locality.h):
// each decode step scores its new entries alone (EvictionEngine::State::score_new_entries), and the
// hidden-state records hold one call's block of one layer (core/engine/model_signals.h). On
// stories260K, kvzap and dms while decoding keep exactly the caches, and give exactly the logits,
// of the same policy whose description says its indicator must see whole heads (the engine's
// other path: every head scored in full at every step, every hidden state recorded). Scored on a
// device (the stand-in), kvzap reads each call's block where the decoder made it and records none.
// A decode eviction that keeps every entry in place edits nothing (no device compaction).
// kvzap's kept sets against an independent reference are hidden_state_policies_test.cpp's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <span>

#include "core/decode/decoder.h"
#include "core/decode/device_kv_mirror.h"
#include "core/decode/device_kv_twin.h"
#include "core/decode/hidden_states_signal.h"
#include "core/engine/engine.h"
#include "core/engine/model_signals.h"
#include "core/engine/policy_with_description.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "cache_row_reads_harness.h"
#include "decode_spy.h"
#include "in_place_scoring.h"
#include "stories_prompt_test.h"
#include "window_attention_injection.h"

namespace kvevict {
namespace {

struct DecodeRun {
  std::vector<std::vector<float>> logits;             // per step, the prompt's first
  std::vector<std::vector<std::vector<int32_t>>> kept;  // per step: [layer * n_kv_heads + head]
  EvictionReport report;
  int64_t hidden_handed_over = 0;  // layers whose attention inputs came as the device's block
};

// How the decoder hands over the attention inputs: as host rows (the CPU decoder's), or as the
// CUDA decoder's block on its device (test::WindowAttentionInjector's stand-in, optionally planted
// wrong) to an engine that asked for them there.
enum class Handover { HostRows, OnDevice, OnDevicePlanted };

DecodeRun decode(const Model& model, const std::vector<int>& prompt, const PolicyProgram& policy, int steps,
                 Handover handover = Handover::HostRows) {
  const ModelConfig& c = model.config;
  auto decoder = make_cpu_decoder(model, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(policy, c, {Budget::parse("60%"), 0});
  test::WindowAttentionInjector injector(engine, decoder->cache(), c.group_size());
  if (handover == Handover::OnDevicePlanted) injector.plant_wrong_hidden_states();
  ForwardObserver* observer = handover == Handover::HostRows ? static_cast<ForwardObserver*>(&engine) : &injector;
  DecodeRun run;
  const std::vector<float>* logits = &decoder->forward(std::span<const int>(prompt), observer);
  for (int step = 0; step <= steps; ++step) {
    if (step > 0) {
      const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
      logits = &decoder->forward(std::span<const int>(&next, 1), observer);
    }
    run.logits.push_back(*logits);
    run.kept.emplace_back();
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) run.kept.back().push_back(test::held_positions(decoder->cache(), l, h));
  }
  run.report = engine.report();
  run.hidden_handed_over = injector.hidden_states_injected();
  return run;
}

class InsertionScoring : public test::StoriesPromptTest {};

TEST_F(InsertionScoring, DecodeStepsScoreTheirNewEntriesAloneWithTheWholeHeadsResults) {
  const ModelConfig& c = model_->config;
  const int steps = 20;
  for (const char* name : {"kvzap", "dms"}) {
    const auto policy = load_policy(name, {{"sliding_window_size", "16"}, {"decoding", "true"}});
    ASSERT_TRUE(policy->description().decode_scores_each_entry_alone) << name;
    PolicyWithDescription whole_heads(*policy);
    whole_heads.edit().decode_scores_each_entry_alone = false;
    const DecodeRun alone = decode(*model_, tokens_, *policy, steps);
    const DecodeRun whole = decode(*model_, tokens_, whole_heads, steps);
    for (int step = 0; step <= steps; ++step) {
      ASSERT_EQ(alone.kept[step], whole.kept[step]) << name << " step " << step;
      ASSERT_EQ(alone.logits[step].size(), whole.logits[step].size());
      EXPECT_EQ(std::memcmp(alone.logits[step].data(), whole.logits[step].data(), sizeof(float) * alone.logits[step].size()), 0)
          << name << " step " << step;
    }
    bool evicted_while_decoding = false;
    for (int step = 1; step <= steps; ++step) evicted_while_decoding |= alone.kept[step] != alone.kept[step - 1];
    EXPECT_TRUE(evicted_while_decoding) << name << ": no decode step evicted, so the frozen scores were never used";
    EXPECT_EQ(alone.report.new_entries_scored_alone, int64_t{steps} * c.n_layers * c.n_kv_heads) << name;
    EXPECT_EQ(whole.report.new_entries_scored_alone, 0) << name;
  }
}

TEST_F(InsertionScoring, KvzapsHiddenStateRecordsHoldOneCallsBlockOfOneLayer) {
  const ModelConfig& c = model_->config;
  const int steps = 6;
  const auto policy = load_policy("kvzap", {{"sliding_window_size", "16"}, {"decoding", "true"}});
  PolicyWithDescription whole_heads(*policy);
  whole_heads.edit().decode_scores_each_entry_alone = false;
  EXPECT_EQ(decode(*model_, tokens_, *policy, steps).report.hidden_state_floats_peak, int64_t{S()} * c.dim)
      << "the prompt's block of one layer";
  EXPECT_EQ(decode(*model_, tokens_, whole_heads, steps).report.hidden_state_floats_peak,
            int64_t{S() + steps} * c.dim * c.n_layers)
      << "every token of every layer";
  EXPECT_EQ(decode(*model_, tokens_, *load_policy("dms", {{"decoding", "true"}}), 1).report.hidden_state_floats_peak, 0)
      << "dms reads no hidden state";
}

// KVzap scored by the stand-in device backend (in_place_scoring.h) reads each call's hidden[c, t]
// where the decoder made it (LayerSignals::hidden_states_on_device: the stand-in's transposed
// block, the host rows withheld): every prompt head and every decode step's new entry is handed
// it in place, nothing is recorded on the host, and the caches and logits are the interpreter's on
// the host rows, step for step. A planted block (each token's channels reversed) changes the
// caches: the kernels read what was handed over.
TEST_F(InsertionScoring, KvzapReadsEachCallsHiddenStatesWhereTheDecoderMadeThem) {
  const ModelConfig& c = model_->config;
  const int steps = 12;
  const auto policy = load_policy("kvzap", {{"sliding_window_size", "16"}, {"decoding", "true"}});
  const test::InPlaceScoring device(*policy, /*layers_on_device=*/true);
  const DecodeRun host = decode(*model_, tokens_, *policy, steps);
  const DecodeRun in_place = decode(*model_, tokens_, device, steps, Handover::OnDevice);
  EXPECT_EQ(host.report.hidden_states_in_place, 0);
  const int64_t heads = int64_t{c.n_layers} * c.n_kv_heads;
  EXPECT_EQ(in_place.hidden_handed_over, int64_t{steps + 1} * c.n_layers) << "every call's layers";
  EXPECT_EQ(in_place.report.hidden_states_in_place, (steps + 1) * heads) << "every prompt head and new entry";
  EXPECT_EQ(device.scored_hidden_in_place, (steps + 1) * heads);
  EXPECT_EQ(in_place.report.hidden_state_floats_peak, 0) << "nothing recorded on the host";
  EXPECT_EQ(in_place.report.hidden_state_layer_gathers, 0) << "no host gather to share";
  EXPECT_GT(host.report.hidden_state_floats_peak, 0);
  for (int step = 0; step <= steps; ++step) {
    ASSERT_EQ(in_place.kept[step], host.kept[step]) << "step " << step;
    EXPECT_EQ(in_place.logits[step], host.logits[step]) << "step " << step;
  }
  bool evicted_while_decoding = false;
  for (int step = 1; step <= steps; ++step) evicted_while_decoding |= host.kept[step] != host.kept[step - 1];
  EXPECT_TRUE(evicted_while_decoding) << "no decode step evicted, so no decode score was used";
  const DecodeRun planted = decode(*model_, tokens_, device, steps, Handover::OnDevicePlanted);
  EXPECT_NE(planted.kept, in_place.kept) << "the scores did not read the block handed over";
}

// Decode steps whose threshold every new candidate passes (the score is the entry's position, the
// threshold half the prompt: the prompt's first half goes, every token generated stays, under the
// prompt's cap): each decode eviction keeps every entry in place, and the engine edits nothing
// (EvictionReport::unchanged_keeps): a device mirror on the cache (DeviceKvTwin) sends no
// compaction while decoding, and the logits are bit for bit those of the same policy evicting at
// the prompt only. The control, KVzap's shipped threshold, evicts some tokens leaving its window:
// there decode keeps are real, and compactions are sent.
TEST_F(InsertionScoring, DecodeStepsThatKeepEveryEntryEditNothing) {
  const ModelConfig& c = model_->config;
  const int steps = 10;
  const int64_t heads = int64_t{c.n_layers} * c.n_kv_heads;
  struct Run {
    std::vector<std::vector<float>> logits;
    EvictionReport report;
    int64_t decode_compactions = 0;
  };
  auto run = [&](const PolicyProgram& policy) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    DeviceKvTwin twin(test::twin_geometry_of(decoder->cache()));
    DeviceKvBackendFor<DeviceKvTwin> backend(twin);
    DeviceKvMirror mirror(decoder->cache(), backend, MirrorAppends::Host);
    EvictionEngine engine(policy, c, {Budget::parse("100%"), 0});
    Run r;
    r.logits.push_back(decoder->forward(std::span<const int>(tokens_), &engine));
    mirror.flush_all();
    const int64_t prompt_compactions = mirror.counts().compactions;
    for (int step = 1; step <= steps; ++step) {
      const std::vector<float>& last = r.logits.back();
      const int next = static_cast<int>(std::max_element(last.begin(), last.end()) - last.begin());
      r.logits.push_back(decoder->forward(std::span<const int>(&next, 1), &engine));
      mirror.flush_all();
    }
    r.report = engine.report();
    r.decode_compactions = mirror.counts().compactions - prompt_compactions;
    return r;
  };
  auto late_tokens = [&](int decode_every) {
    return test::policy_from_text(
        "late_tokens_" + std::to_string(decode_every),
        "name: late_tokens\nabout: the prompt's second half and every generated token\n"
        "protect: {recent: 8}\nrun: {prefill: true, decode_every: " +
            std::to_string(decode_every) + "}\nselect: {threshold: " + std::to_string(S() / 2) +
            ", score_at: insertion}\nscore: |\n  score[t] = pos[t]\n");
  };
  const Run every_step = run(*late_tokens(1));
  const Run prompt_only = run(*late_tokens(0));
  ASSERT_LT(every_step.report.layers[0][0].kept, S()) << "the prompt evicted";
  EXPECT_EQ(every_step.report.unchanged_keeps, steps * heads) << "every decode step's keeps";
  EXPECT_EQ(every_step.decode_compactions, 0) << "no compaction sent while decoding";
  EXPECT_EQ(every_step.logits, prompt_only.logits);

  const Run kvzap = run(*load_policy("kvzap", {{"sliding_window_size", "8"}, {"decoding", "true"}}));
  EXPECT_GT(kvzap.decode_compactions, 0);
  EXPECT_LT(kvzap.report.unchanged_keeps, steps * heads);
  EXPECT_GT(kvzap.report.unchanged_keeps, 0) << "some steps' leaving tokens pass";
}

// PositionRecords holding the current call's block alone, without a model: each record replaces
// the one before, reads of it are by original position, and a read of any other layer or
// position is a std::logic_error, not a zero.
TEST(CurrentCallHiddenStates, EachRecordReplacesTheOneBeforeAndOtherReadsAreRefused) {
  PositionRecords rec;
  rec.reset(3, false, false, 2, /*states_of_current_call=*/true);
  std::vector<float> block = {1, 2, 3, 4, 5, 6};  // [3 tokens][2 channels] at positions 10..12
  LayerSignals s;
  s.layer = 1;
  s.first_position = 10;
  s.n_tokens = 3;
  s.hidden_states = block;
  rec.record(s);
  EXPECT_EQ(rec.hidden_state_floats(), 6);
  const std::vector<int32_t> pos = {12, 10};
  std::vector<float> out(4, -1.0f);
  rec.hidden_states(1, pos.data(), 2, out.data());
  EXPECT_EQ(out, (std::vector<float>{5, 1, 6, 2}));
  const std::vector<int32_t> before = {9};
  EXPECT_THROW(rec.hidden_states(1, before.data(), 1, out.data()), std::logic_error);
  EXPECT_THROW(rec.hidden_states(0, pos.data(), 2, out.data()), std::logic_error);
  const std::vector<float> next = {7, 8};  // layer 2, position 13
  s.layer = 2;
  s.first_position = 13;
  s.n_tokens = 1;
  s.hidden_states = next;
  rec.record(s);
  EXPECT_EQ(rec.hidden_state_floats(), 2) << "the block before is gone";
  EXPECT_THROW(rec.hidden_states(1, pos.data(), 2, out.data()), std::logic_error);
  const std::vector<int32_t> p13 = {13};
  rec.hidden_states(2, p13.data(), 1, out.data());
  EXPECT_EQ(out[0], 7);
  EXPECT_EQ(out[1], 8);
}

// A block handed over on the decoder's device alone (LayerSignals::hidden_states_on_device, the
// host rows withheld) is recorded as nothing: the block before is gone, and a read of this one
// from the records is refused as an earlier call's would be (the engine reads it in place).
TEST(CurrentCallHiddenStates, ABlockHandedOverOnTheDeviceIsNotHeldOnTheHost) {
  PositionRecords rec;
  rec.reset(2, false, false, 2, /*states_of_current_call=*/true);
  const std::vector<float> block = {1, 2, 3, 4};  // [2 tokens][2 channels] at positions 0..1
  LayerSignals s;
  s.layer = 0;
  s.n_tokens = 2;
  s.hidden_states = block;
  rec.record(s);
  ASSERT_EQ(rec.hidden_state_floats(), 4);
  std::vector<float> transposed;
  s.layer = 1;
  s.first_position = 2;
  s.n_tokens = 2;
  s.hidden_states = {};
  s.hidden_states_on_device = hidden_states_twin(block.data(), 2, 2, transposed);
  s.hidden_states_on_device.on_device = true;
  rec.record(s);
  EXPECT_EQ(rec.hidden_state_floats(), 0);
  const std::vector<int32_t> pos = {2, 3}, earlier = {0};
  std::vector<float> out(4);
  EXPECT_THROW(rec.hidden_states(1, pos.data(), 2, out.data()), std::logic_error);
  EXPECT_THROW(rec.hidden_states(0, earlier.data(), 1, out.data()), std::logic_error);
  // Without the records' current-call mode a block on the device alone is the decoder's omission.
  PositionRecords every;
  every.reset(2, false, false, 2);
  EXPECT_THROW(every.record(s), UsageError);
}

// The twin's transposition of a block ([n_tokens][dim] rows into hidden[c, t]), against plain
// indexing: one token (a decode step), a block not a multiple of anything, an empty block.
TEST(HiddenStatesSignal, TheTwinTransposesTheBlocksRows) {
  for (const auto& [n, dim] : std::vector<std::pair<int, int>>{{1, 64}, {37, 64}, {70, 33}}) {
    std::vector<float> rows(static_cast<size_t>(n) * dim);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i) * 0.5f - 7.0f;
    std::vector<float> out;
    const HiddenStatesSignal h = hidden_states_twin(rows.data(), n, dim, out);
    ASSERT_EQ(h.data, out.data());
    EXPECT_EQ(h.dim, dim);
    EXPECT_EQ(h.n_tokens, n);
    EXPECT_FALSE(h.on_device);
    for (int c = 0; c < dim; ++c)
      for (int t = 0; t < n; ++t)
        ASSERT_EQ(out[static_cast<size_t>(c) * n + t], rows[static_cast<size_t>(t) * dim + c]) << n << " " << dim;
  }
  std::vector<float> out;
  EXPECT_TRUE(hidden_states_twin(nullptr, 0, 64, out).empty());
}

}  // namespace
}  // namespace kvevict
