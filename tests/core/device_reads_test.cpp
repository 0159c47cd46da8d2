// decide_device_reads (core/engine/device_reads.h): which signals the engine hands its score
// program on the program's device, and where the selection reads the scores. The expectations are
// stated from what each policy reads and what the program's backend takes, not from the code's
// conditions: a plain interpreter reads nothing on a device; a stand-in device program
// (in_place_scoring.h) reads in place exactly the signals its policy declares, unless something on
// the host reads them too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "core/engine/device_reads.h"
#include "core/engine/eviction_plan.h"
#include "core/model/synthetic_model.h"
#include "dsl/policy_loader.h"
#include "in_place_scoring.h"

namespace kvevict {
namespace {

constexpr SelectionDevice kSelectors[] = {SelectionDevice::Host, SelectionDevice::Twin, SelectionDevice::Cuda};

// stories260K's geometry (5 layers, 8 query and 4 KV heads), which the field's example tables
// (DuoAttention's, RLKV's) are shaped for.
ModelConfig stories_geometry() {
  ModelConfig c = synthetic_config("tiny");
  c.n_layers = 5, c.dim = 64, c.n_heads = 8, c.n_kv_heads = 4, c.head_dim = 8, c.hidden_dim = 172;
  return c;
}

EvictionPlan plan_for(const PolicyProgram& p) {
  const ModelConfig config = stories_geometry();
  const Budget budget = Budget::parse("64");
  return plan_before_prompt(p, plan_geometry(p, config, budget), budget);
}

bool any(const DeviceReads& r) {
  return r.window_in_place || r.accumulated_in_place || r.scores_to_selector || r.current_in_place || r.rows_in_place ||
         r.norms_in_place || r.positions_in_place || r.positions_to_selector || r.hidden_states_in_place;
}

TEST(DeviceReads, TheInterpreterReadsNothingOnTheDevice) {
  int checked = 0;
  for (const std::string& file : builtin_policy_files()) {
    const auto policy = load_policy(file, {});
    const EvictionPlan plan = plan_for(*policy);
    for (SelectionDevice selector : kSelectors) {
      const DeviceReads r = decide_device_reads(*policy, selector, plan);
      EXPECT_FALSE(any(r)) << file;
      EXPECT_EQ(r.cached_row_signals(), CachedRowSignals::ReadOnHost) << file;
    }
    ++checked;
  }
  EXPECT_GE(checked, 50) << "every built-in policy file";
}

// What a stand-in device program over `name` (with `params`) reads in place, selecting with `selector`.
DeviceReads stand_in_reads(const std::string& name, SelectionDevice selector,
                           const std::map<std::string, std::string>& params = {}) {
  const auto policy = load_policy(name, params);
  const test::InPlaceScoring device(*policy, /*layers_on_device=*/true);
  return decide_device_reads(device, selector, plan_for(device));
}

TEST(DeviceReads, AStandInDeviceProgramReadsInPlaceWhatItsPolicyReads) {
  // SnapKV reads the window attention alone: that is in place, and its scores go to the selector's
  // buffer with the positions read there (a selector sharing the program's memory: the twin here).
  const DeviceReads snapkv = stand_in_reads("snapkv", SelectionDevice::Twin);
  EXPECT_TRUE(snapkv.window_in_place);
  EXPECT_TRUE(snapkv.scores_to_selector);
  EXPECT_TRUE(snapkv.positions_to_selector);
  EXPECT_FALSE(snapkv.rows_in_place);
  EXPECT_FALSE(snapkv.norms_in_place);
  EXPECT_FALSE(snapkv.positions_in_place) << "its program reads no position";
  EXPECT_FALSE(snapkv.accumulated_in_place);
  EXPECT_EQ(snapkv.cached_row_signals(), CachedRowSignals::ReadOnHost);

  // H2O's accumulated attention is kept on the selector's device.
  EXPECT_TRUE(stand_in_reads("h2o", SelectionDevice::Twin).accumulated_in_place);
  // K-norm reads the keys' norms, KeyDiff the keys themselves: both from the decoder's device.
  const DeviceReads knorm = stand_in_reads("knorm", SelectionDevice::Twin);
  EXPECT_TRUE(knorm.norms_in_place);
  EXPECT_FALSE(knorm.rows_in_place);
  EXPECT_EQ(knorm.cached_row_signals(), CachedRowSignals::GivenOnDevice);
  const DeviceReads keydiff = stand_in_reads("keydiff", SelectionDevice::Twin);
  EXPECT_TRUE(keydiff.rows_in_place);
  EXPECT_EQ(keydiff.cached_row_signals(), CachedRowSignals::GivenOnDevice);
  // DefensiveKV's projected value norms (out_norm_l1) are made from the values and W_o on the
  // decoder's device, with the window attention.
  const DeviceReads defensive = stand_in_reads("defensive_kv", SelectionDevice::Twin);
  EXPECT_TRUE(defensive.rows_in_place);
  EXPECT_TRUE(defensive.window_in_place);
  EXPECT_FALSE(defensive.norms_in_place);
  EXPECT_EQ(defensive.cached_row_signals(), CachedRowSignals::GivenOnDevice);
  // Random's key is the position: read from the device cache.
  EXPECT_TRUE(stand_in_reads("random", SelectionDevice::Twin).positions_in_place);
}

TEST(DeviceReads, AHostSelectorTakesTheScoresAndTheAccumulationToTheHost) {
  for (const char* name : {"snapkv", "h2o", "tova", "adakv"}) {
    const DeviceReads host = stand_in_reads(name, SelectionDevice::Host);
    EXPECT_FALSE(host.scores_to_selector) << name;
    EXPECT_FALSE(host.positions_to_selector) << name;
    EXPECT_FALSE(host.accumulated_in_place) << name;
    EXPECT_TRUE(host.window_in_place) << name << ": the signals' reads do not depend on the selector";
  }
  // The CUDA selector holds device memory, which only the CUDA backend's kernels write: the
  // stand-in (not the CUDA backend) must not be handed it.
  const DeviceReads cuda = stand_in_reads("h2o", SelectionDevice::Cuda);
  EXPECT_FALSE(cuda.scores_to_selector);
  EXPECT_FALSE(cuda.accumulated_in_place);
}

TEST(DeviceReads, WhatTheHostAlsoReadsStaysOnTheHost) {
  // ThinK's channel program and composed's stages score on the host from host copies; NACL's
  // same-index map (the official code's, gqa_head_map code_compat) is the engine's own.
  for (const auto& [name, params] : std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"think", {}}, {"composed", {}}, {"nacl", {{"gqa_head_map", "code_compat"}}}}) {
    const DeviceReads r = stand_in_reads(name, SelectionDevice::Twin, params);
    EXPECT_FALSE(r.window_in_place) << name;
    EXPECT_FALSE(r.rows_in_place) << name;
    EXPECT_FALSE(r.norms_in_place) << name;
    EXPECT_FALSE(r.positions_in_place) << name;
    EXPECT_FALSE(r.current_in_place) << name;
    EXPECT_FALSE(r.accumulated_in_place) << name;
  }
  EXPECT_TRUE(stand_in_reads("nacl", SelectionDevice::Twin).window_in_place) << "NACL's group map is the ordinary one";
  // A layer weight the program computes on the host reads A there: CAKE's preference with a
  // program whose layer weight takes no device signal.
  const auto cake = load_policy("cake", {});
  const test::InPlaceScoring host_layers(*cake, /*layers_on_device=*/false);
  EXPECT_FALSE(decide_device_reads(host_layers, SelectionDevice::Twin, plan_for(host_layers)).window_in_place);
  EXPECT_TRUE(stand_in_reads("cake", SelectionDevice::Twin).window_in_place);
}

TEST(DeviceReads, UnfoldedHeadsAndFrozenScoresReadTheirsOnTheHost) {
  const auto h2o = load_policy("h2o", {});
  const test::InPlaceScoring device(*h2o, true);
  EvictionPlan plan = plan_for(device);
  ASSERT_TRUE(decide_device_reads(device, SelectionDevice::Twin, plan).accumulated_in_place);
  plan.geometry.unfold_gqa = true;  // the stored heads become query heads; the device cache's are KV heads
  const DeviceReads unfolded = decide_device_reads(device, SelectionDevice::Twin, plan);
  EXPECT_FALSE(unfolded.accumulated_in_place);
  EXPECT_FALSE(unfolded.positions_to_selector);

  const auto knorm = load_policy("knorm", {});
  const test::InPlaceScoring norms(*knorm, true);
  EvictionPlan frozen = plan_for(norms);
  ASSERT_TRUE(decide_device_reads(norms, SelectionDevice::Twin, frozen).norms_in_place);
  frozen.select.frozen_scores = true;  // every appended entry scored at its own step from the host's norms
  EXPECT_FALSE(decide_device_reads(norms, SelectionDevice::Twin, frozen).norms_in_place);
}

// KVzap reads hidden[c, t] of each entry alone, scored once when the entry arrives (score_at
// insertion): every read is of the call's own block, which the decoder makes on its device. The
// same indicator rescoring whole heads reads older blocks' states, which only the host records.
TEST(DeviceReads, HiddenStatesReadInTheirCallAreReadWhereTheDecoderMadeThem) {
  for (SelectionDevice selector : kSelectors)
    EXPECT_TRUE(stand_in_reads("kvzap", selector).hidden_states_in_place) << static_cast<int>(selector);
  const auto kvzap = load_policy("kvzap", {});
  EXPECT_TRUE(hidden_states_read_in_their_call(kvzap->description()));
  EXPECT_FALSE(decide_device_reads(*kvzap, SelectionDevice::Twin, plan_for(*kvzap)).hidden_states_in_place)
      << "the interpreter reads host memory";
  const std::string rescoring =
      "name: hidden_rescoring\nabout: a hidden-state indicator that rescores whole heads\n"
      "protect: {recent: 4}\nrun: {prefill: true, decode_every: 1}\n"
      "score: |\n  score[t] = sum(c: hidden[c, t])\n";
  const std::string file = (std::filesystem::temp_directory_path() / "kvevict_hidden_rescoring.yaml").string();
  std::ofstream(file) << rescoring;
  const auto whole_heads = load_policy(file, {});
  std::filesystem::remove(file);
  ASSERT_TRUE(whole_heads->description().needs(TensorSignal::HiddenState));
  EXPECT_FALSE(hidden_states_read_in_their_call(whole_heads->description()));
  const test::InPlaceScoring device(*whole_heads, true);
  EXPECT_FALSE(decide_device_reads(device, SelectionDevice::Twin, plan_for(device)).hidden_states_in_place);
  EXPECT_FALSE(stand_in_reads("snapkv", SelectionDevice::Twin).hidden_states_in_place) << "reads no hidden state";
}

TEST(DeviceReads, ANowStaysOnTheDeviceUnlessTheHostReadsTheColumnSums) {
  // CAKE's and TOVA's decode indicators read A_now, and nothing on the host reads the column sums.
  for (const char* name : {"cake", "tova"})
    for (SelectionDevice selector : kSelectors) EXPECT_TRUE(stand_in_reads(name, selector).current_in_place) << name;
  // H2O accumulates the column sums: on the host unless the accumulation is on the device.
  const auto h2o = load_policy("h2o", {});
  EXPECT_TRUE(host_reads_column_sums(h2o->description(), /*accumulated_in_place=*/false));
  EXPECT_FALSE(host_reads_column_sums(h2o->description(), /*accumulated_in_place=*/true));
  // CaM's merge weighs the evicted entries by the decode step's attention, on the host.
  const auto cam = load_policy("cam", {});
  EXPECT_TRUE(host_reads_column_sums(cam->description(), /*accumulated_in_place=*/true));
  // SnapKV reads no column sum at all.
  EXPECT_FALSE(host_reads_column_sums(load_policy("snapkv", {})->description(), false));
}

}  // namespace
}  // namespace kvevict
