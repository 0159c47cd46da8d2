// dsl/entry_locality.h: which score programs give each entry a value made from that entry alone.
// The verdict is a syntactic rule over the lowered program; these tests hold it to its meaning:
// every program (hand-written and built-in) judged per entry, scored by the interpreter over the
// newest k entries alone, gives those entries exactly (bit for bit) the values it gives them over the
// whole head, on random signals; and the same comparison catches a program that reads other
// entries, so it could fail.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dsl/compiled_program.h"
#include "dsl/entry_locality.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"

namespace kvevict {
namespace {

// stories260K's geometry, so that the built-in files' example tables (kvzap's) fit.
constexpr int kLayers = 5, kKvHeads = 4, kGroup = 2, kHeadDim = 8, kEmbd = 64, kWindow = 3;
constexpr int kT = 37, kNewest = 5;

dsl::CompiledPolicy compile_score(const std::string& body) {
  return dsl::compile_policy_text("p.yaml", "name: p\nabout: entry locality\nobserve: {window: 3}\nscore: |\n  " +
                                                body + "\n");
}

bool judged_per_entry(const std::string& body) {
  return dsl::scores_each_entry_alone(compile_score(body).score);
}

// Random signals for every tensor signal of one head of T entries (positions a permutation of
// 2T.., tokens small integers), in the signal table's layouts.
struct RandomHead {
  std::vector<std::vector<float>> signal = std::vector<std::vector<float>>(kNumTensorSignals);
  std::vector<int32_t> position;
  explicit RandomHead(int T, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(0.01f, 2.0f);
    for (const TensorSignalInfo& info : kTensorSignalTable) {
      const int64_t n = signal_elements(info.id, kGroup, kWindow, kHeadDim, T, kEmbd);
      std::vector<float>& v = signal[signal_index(info.id)];
      v.resize(static_cast<size_t>(n));
      for (float& x : v) x = info.id == TensorSignal::Token ? static_cast<float>(rng() % 50) : u(rng);
    }
    for (int t = 0; t < T; ++t) position.push_back(2 * T + (t * 7) % T);
  }
  // The same entries from slot `first` on: every signal with axis t cut along it.
  RandomHead tail(int first) const {
    RandomHead out(*this);
    const int T = static_cast<int>(position.size()), k = T - first;
    for (const TensorSignalInfo& info : kTensorSignalTable) {
      if (!(info.axes & kAxisT)) continue;
      const std::vector<float>& whole = signal[signal_index(info.id)];
      std::vector<float>& cut = out.signal[signal_index(info.id)];
      const size_t rows = whole.size() / T;
      cut.assign(rows * k, 0.0f);
      for (size_t r = 0; r < rows; ++r)
        std::copy_n(whole.begin() + static_cast<std::ptrdiff_t>(r * T + first), k, cut.begin() + static_cast<std::ptrdiff_t>(r * k));
    }
    out.position.assign(position.begin() + first, position.end());
    return out;
  }
  ScoreInputs inputs() const {
    ScoreInputs in;
    in.layer = 3;
    in.kv_head = 1;
    in.n_layers = kLayers;
    in.n_kv_heads = kKvHeads;
    in.group = kGroup;
    in.head_dim = kHeadDim;
    in.n_embd = kEmbd;
    in.T = static_cast<int>(position.size());
    in.prompt_len = 30;
    in.decode_step = 7;
    in.W = kWindow;
    in.seed = 11;
    for (const TensorSignalInfo& info : kTensorSignalTable)
      if (info.id != TensorSignal::Position) in.set_signal(info.id, signal[signal_index(info.id)].data());
    in.position = position.data();
    return in;
  }
};

// Whether the decode indicator's values of the newest kNewest entries, scored alone, are exactly
// their values over the whole head.
bool newest_scored_alone_match(const PolicyProgram& p) {
  const RandomHead head(kT, 2026);
  const RandomHead newest = head.tail(kT - kNewest);
  std::vector<float> whole(kT), alone(kNewest);
  p.score(head.inputs(), true, whole.data());
  p.score(newest.inputs(), true, alone.data());
  return std::memcmp(whole.data() + (kT - kNewest), alone.data(), sizeof(float) * kNewest) == 0;
}

const char* const kPerEntry[] = {
    "score[t] = -key_norm[t]",
    "score[t] = sum(c: hidden[c, t]) + layer",
    "score[t] = random[t] * value_norm[t]",
    "score[t] = if(token[t] == 3, pos[t], hidden_norm[t] / n_embd)",
    "score[t] = sum(h, d: Q_mean[h, d]) * key_norm[t] + decode_step + prompt_len",
    "c1[d] = sum(e: R_future[d, e])\n  score[t] = max(d: c1[d]) + exp(-key_norm[t])",
};
const char* const kOtherEntries[] = {
    "total = sum(t: key_norm[t])\n  score[t] = key_norm[t] / total",
    "n[t] = normalise(key_norm[t])\n  score[t] = n[t]",
    "score[t] = key_norm[t] + T",
    "score[t] = key_norm[t] + W",
    "score[t] = key_norm[t] * t",
    "score[t] = rank(t: key_norm[t])",
    "score[t] = mean(k in -1 .. 1: key_norm[t + k])",
    "score[t] = max(h: mean(q: A[h, q, t]))",
    "score[t] = sum(d: K[d, t])",
    "pair[t] = sum(s: key_norm[s] * value_norm[t])\n  score[t] = pair[t]",
};

TEST(EntryLocality, ProgramsThatReadTheirEntryAloneAreJudgedSo) {
  for (const char* body : kPerEntry) EXPECT_TRUE(judged_per_entry(body)) << body;
}

TEST(EntryLocality, ProgramsThatReadOtherEntriesOrTheirCountAreNot) {
  for (const char* body : kOtherEntries) EXPECT_FALSE(judged_per_entry(body)) << body;
  EXPECT_FALSE(dsl::scores_each_entry_alone(dsl::LoweredProgram{})) << "an empty program";
}

TEST(EntryLocality, APerEntryProgramGivesItsNewestEntriesTheirWholeHeadValues) {
  for (const char* body : kPerEntry) {
    const dsl::InterpretedPolicy p(compile_score(body));
    EXPECT_TRUE(newest_scored_alone_match(p)) << body;
  }
}

TEST(EntryLocality, TheComparisonCatchesAProgramThatReadsOtherEntries) {
  // Controls: the same comparison fails where the verdict says no (so the test above could fail).
  for (const char* body : {"total = sum(t: key_norm[t])\n  score[t] = key_norm[t] / total", "score[t] = mean(k in -1 .. 1: key_norm[t + k])",
                           "score[t] = key_norm[t] + T"}) {
    const dsl::InterpretedPolicy p(compile_score(body));
    EXPECT_FALSE(newest_scored_alone_match(p)) << body;
  }
}

TEST(EntryLocality, EveryBuiltInJudgedPerEntryGivesItsNewestEntriesTheirWholeHeadValues) {
  std::set<std::string> per_entry;
  for (const std::string& path : builtin_policy_files()) {
    const auto p = load_policy(path);
    if (!p->description().decode_scores_each_entry_alone) continue;
    per_entry.insert(p->description().name);
    EXPECT_TRUE(newest_scored_alone_match(*p)) << path;
  }
  // The two score_at: insertion policies, whose decode steps score their new entries alone.
  EXPECT_TRUE(per_entry.count("dms")) << "dms scores -key_norm[t]";
  EXPECT_TRUE(per_entry.count("kvzap")) << "kvzap scores a linear map of hidden[c, t]";
  EXPECT_FALSE(per_entry.count("snapkv")) << "snapkv pools the window attention along t";
}

}  // namespace
}  // namespace kvevict
