// The chunk and segment keys (select.unit / chunk / chunk_score / quota, observe.segment /
// scaled; core/engine/segment_checks.h) as they reach the policy description, and every rejected
// combination with its golden message at the key's line and column.
#include <gtest/gtest.h>

#include <string>

#include "core/util/error.h"
#include "dsl/program_check_test.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"

namespace kvevict {
namespace {

std::string usage_error(const std::string& text) {
  return dsl::test::policy_usage_error("c.yaml", text);
}

const std::string kHead = "name: c\nabout: x\nparams:\n  n: {int: 20}\n";  // lines 1-4
const std::string kScore = "score: |\n  score[t] = sum(h, q: A[h, q, t])\n";
const std::string kSegScore = "score: |\n  score[t] = sum(h: A_seg[h, t])\n";

TEST(ChunkSettings, KeysReachTheDescription) {
  const auto plain = dsl::compile_policy_text("c.yaml", kHead + "observe: {window: 4}\n" + kScore);
  EXPECT_EQ(plain.desc.select.unit, SelectUnit::Token);
  EXPECT_EQ(plain.desc.select.quota, SelectQuota::Global);
  EXPECT_EQ(plain.desc.select.chunk, 0);
  EXPECT_EQ(plain.desc.observe.segment, 0);
  EXPECT_TRUE(plain.desc.observe.scaled);
  const auto c = dsl::compile_policy_text(
      "c.yaml", kHead + "observe: {window: 4}\nselect: {unit: chunk, chunk: n, chunk_score: max, scope: layer_shared}\n" + kScore,
      {{"n", "7"}});
  EXPECT_EQ(c.desc.select.unit, SelectUnit::Chunk);
  EXPECT_EQ(c.desc.select.chunk, 7);
  EXPECT_EQ(c.desc.select.chunk_score, ChunkScore::Max);
  const auto q = dsl::compile_policy_text(
      "c.yaml", kHead + "observe: {window: 4, segment: n * 2, scaled: false}\nselect: {quota: per_chunk, chunk: n}\n" + kSegScore);
  EXPECT_EQ(q.desc.select.quota, SelectQuota::PerChunk);
  EXPECT_EQ(q.desc.select.chunk, 20);
  EXPECT_EQ(q.desc.observe.segment, 40);
  EXPECT_FALSE(q.desc.observe.scaled);
  EXPECT_TRUE(q.desc.needs(TensorSignal::SegmentAttention));
}

TEST(ChunkSettings, TheFieldFilesLoadWithTheirDefaults) {
  const auto kv = load_policy("chunkkv");
  EXPECT_EQ(kv->description().select.unit, SelectUnit::Chunk);
  EXPECT_EQ(kv->description().select.chunk, 20);
  EXPECT_EQ(kv->description().select.scope, SelectScope::LayerShared);
  EXPECT_EQ(kv->description().window, 64);
  const auto cp = load_policy("chunkpress");
  EXPECT_EQ(cp->description().select.quota, SelectQuota::PerChunk);
  EXPECT_EQ(cp->description().select.chunk, 1024);
  EXPECT_EQ(cp->description().observe.segment, 1024);
  const auto nc = load_policy("noncausal_attn");
  EXPECT_EQ(nc->description().observe.segment, 256);
  EXPECT_EQ(nc->description().window, 256);
  EXPECT_FALSE(nc->description().observe.causal);
  EXPECT_FALSE(nc->description().observe.scaled);
}

struct BadCase {
  std::string lines;  // from line 5 on
  std::string score;
  std::string golden;
};

TEST(ChunkSettings, RejectedCombinationsAreReportedAtTheirKey) {
  const std::string w = "observe: {window: 4}\n";
  const std::vector<BadCase> cases = {
      {w + "select: {unit: chunk}\n", kScore,
       "c.yaml:6:16: error: 'unit: chunk' needs 'chunk: EXPR', the chunk length (a whole number >= 1)"},
      {w + "select: {quota: per_chunk}\n", kScore,
       "c.yaml:6:17: error: 'quota: per_chunk' needs 'chunk: EXPR', the chunk length (a whole number >= 1)"},
      {w + "select: {unit: chunk, chunk: n - 20}\n", kScore,
       "c.yaml:6:30: error: 'chunk' must be a whole number between 1 and 10^7, got 0"},
      {w + "select: {unit: chunk, chunk: 2.5}\n", kScore,
       "c.yaml:6:30: error: 'chunk' must be a whole number between 1 and 10^7, got 2.5"},
      {w + "select: {chunk: 4}\n", kScore,
       "c.yaml:6:17: error: 'chunk' is read only with 'unit: chunk' or 'quota: per_chunk'"},
      {w + "select: {unit: chunks, chunk: 4}\n", kScore,
       "c.yaml:6:16: error: 'unit' must be one of token, chunk (or an enum parameter with those options)"},
      {w + "select: {unit: chunk, chunk: 4, chunk_score: median}\n", kScore,
       "c.yaml:6:46: error: 'chunk_score' must be one of mean, sum, max (or an enum parameter with those options)"},
      {w + "select: {unit: chunk, chunk: 4, quota: per_chunk}\n", kScore,
       "c.yaml:6:40: error: 'quota: per_chunk' keeps tokens inside every chunk; it cannot be combined with 'unit: chunk'"},
      {w + "select: {unit: chunk, chunk: 4, scope: layer}\n", kScore,
       "c.yaml:6:40: error: 'unit: chunk' needs scope kv_head or layer_shared"},
      {w + "select: {unit: chunk, chunk: 4, unfold_gqa: true}\n", kScore,
       "c.yaml:6:45: error: 'unit: chunk' cannot be combined with unfold_gqa"},
      {w + "select: {quota: per_chunk, chunk: 4, random_share: 0.5}\n", kScore,
       "c.yaml:6:52: error: 'quota: per_chunk' cannot be combined with a random share"},
      {w + "select: {unit: chunk, chunk: 4}\nrun: {cascading: true}\n", kScore,
       "c.yaml:7:18: error: 'unit: chunk' selects once at prefill on the prompt's chunks; it cannot be combined with cascading"},
      {w + "select: {quota: per_chunk, chunk: 4}\nrun: {decode_every: 2}\n", kScore,
       "c.yaml:7:21: error: 'quota: per_chunk' selects once at prefill on the prompt's chunks; it cannot evict while decoding"},
      {w, kSegScore,
       "c.yaml:6:8: error: the policy reads A_seg (segment-local attention), but 'observe' has no 'segment: EXPR'"},
      {"observe: {segment: 8}\n", kSegScore,
       "c.yaml:5:20: error: 'segment' needs 'window: EXPR', the observation queries of each segment (>= 1)"},
      {"observe: {window: 4, segment: 0}\n", kSegScore,
       "c.yaml:5:31: error: 'segment' must be a whole number between 1 and 10^7, got 0"},
      {"observe: {window: 4, segment: 8}\nrun: {decode_every: 1}\n", kSegScore,
       "c.yaml:6:21: error: A_seg is observed at prefill only; 'segment' cannot be combined with decode_every"},
      {"observe: {window: 4, segment: 8, same_index_head: true}\n", kSegScore,
       "c.yaml:5:51: error: 'segment' cannot be combined with same_index_head"},
      {"observe: {window: 4, segment: 8}\nselect: {unfold_gqa: true}\n", kSegScore,
       "c.yaml:6:22: error: 'segment' cannot be combined with unfold_gqa"},
      {w + "select: {chunk: 4, gate: entropy, rescue: 2}\n", kScore,
       "c.yaml:6:26: error: 'gate: entropy' needs 'unit: chunk'"},
      {w + "select: {unit: chunk, chunk: 4, gate: entropy}\n", kScore,
       "c.yaml:6:39: error: 'gate: entropy' needs 'rescue: EXPR', the entries kept of a spiky chunk (1 .. chunk - 1)"},
      {w + "select: {unit: chunk, chunk: 4, gate: entropy, rescue: 4}\n", kScore,
       "c.yaml:6:56: error: 'gate: entropy' needs 'rescue: EXPR', the entries kept of a spiky chunk (1 .. chunk - 1)"},
      {w + "select: {unit: chunk, chunk: 4, rescue: 2}\n", kScore,
       "c.yaml:6:41: error: 'rescue' is read only with 'gate: entropy'"},
      {"observe: {window: 4, scaled: false}\n", kScore,
       "c.yaml:5:30: error: 'scaled' applies to A_seg only; it needs 'segment: EXPR'"},
  };
  for (const BadCase& c : cases) {
    const std::string e = usage_error(kHead + c.lines + c.score);
    EXPECT_NE(e.find(c.golden), std::string::npos) << "want: " << c.golden << "\ngot:  " << e;
  }
}

}  // namespace
}  // namespace kvevict
