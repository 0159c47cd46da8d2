// Task generators: deterministic per seed, lengths measured in the counter's tokens, needles
// placed at the grid depth.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/util/error.h"
#include "evals/metrics/metrics.h"
#include "evals/tasks/filler.h"
#include "evals/tasks/task.h"

using namespace kvevict::evals;

namespace {

// A stand-in for a subword tokenizer: one token per 4 bytes, at least one per word.
int subword_count(std::string_view text) {
  int tokens = 0;
  for (const auto& word : split_words(text)) tokens += static_cast<int>((word.size() + 3) / 4);
  return tokens;
}

std::vector<Sample> make_samples(const std::string& type, const std::string& yaml, uint64_t seed, int limit = 0) {
  ConfigErrors errors("t.yaml", {});
  YAML::Node node = YAML::Load(yaml);
  MapReader reader(errors, node, "tasks." + type);
  auto task = find_task_type(type)->make(reader, type);
  reader.finish();
  errors.throw_if_any();
  TaskContext context;
  context.seed = seed;
  context.limit = limit;
  context.count_tokens = subword_count;
  return task->generate(context);
}

void expect_same(const std::vector<Sample>& a, const std::vector<Sample>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].key, b[i].key);
    EXPECT_EQ(a[i].context, b[i].context);
    EXPECT_EQ(a[i].question, b[i].question);
    EXPECT_EQ(a[i].references, b[i].references);
  }
}

}  // namespace

TEST(Tasks, EveryGeneratorIsDeterministicForASeed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"passkey", "{lengths: [200, 400], samples: 3}"},
      {"needle", "{lengths: [300], depths: [0, 50, 100], needles: 3}"},
      {"kv_retrieval", "{lengths: [300], samples: 2}"},
      {"fidelity", "{lengths: [300], continuation: 40, greedy: 8, samples: 2}"},
  };
  for (const auto& [type, yaml] : cases) {
    SCOPED_TRACE(type);
    auto first = make_samples(type, yaml, 11);
    expect_same(first, make_samples(type, yaml, 11));
    auto other = make_samples(type, yaml, 12);
    ASSERT_EQ(first.size(), other.size());
    bool any_difference = false;
    for (size_t i = 0; i < first.size(); ++i) any_difference |= first[i].context != other[i].context;
    EXPECT_TRUE(any_difference) << "seed has no effect";
  }
}

TEST(Tasks, ContextsHitTheirTokenLength) {
  for (const auto& sample : make_samples("needle", "{lengths: [256, 1024], depths: [50]}", 1)) {
    int tokens = subword_count(sample.context);
    EXPECT_LE(tokens, sample.length);
    EXPECT_GE(tokens, sample.length - 20) << "a sentence is at most ~20 tokens";
    EXPECT_EQ(sample.grid["context_tokens"].get<int>(), tokens);
  }
  for (const auto& sample : make_samples("kv_retrieval", "{lengths: [512], samples: 2}", 1)) {
    EXPECT_LE(subword_count(sample.context), sample.length + 20);  // + the instruction line
  }
}

TEST(Tasks, NeedleSitsAtTheGridDepth) {
  auto samples = make_samples("needle", "{lengths: [2000], depths: [0, 10, 25, 50, 75, 90, 100]}", 5);
  ASSERT_EQ(samples.size(), 7u);
  for (const auto& sample : samples) {
    SCOPED_TRACE(sample.key);
    const std::string& answer = sample.references.at(0);
    size_t at = sample.context.find(answer);
    ASSERT_NE(at, std::string::npos);
    // Token offset of the needle sentence's start, measured on the text itself.
    size_t sentence_start = sample.context.rfind(". ", at);
    sentence_start = sentence_start == std::string::npos ? 0 : sentence_start + 2;
    int offset = subword_count(sample.context.substr(0, sentence_start));
    EXPECT_EQ(offset, sample.grid["needle_token_offsets"][0].get<int>());
    int total = subword_count(sample.context);
    double measured = 100.0 * offset / total;
    // Needles go at sentence boundaries: within one sentence (<= 20 tokens) of the target.
    EXPECT_NEAR(measured, sample.depth, 100.0 * 20 / total);
    if (sample.depth == 0) {
      EXPECT_EQ(offset, 0);
    }
    if (sample.depth == 100) {
      EXPECT_EQ(sample.context.substr(sample.context.size() - answer.size() - 1), answer + ".");
    }
  }
}

TEST(Tasks, MultiNeedleSpreadsFromTheGridDepth) {
  auto samples = make_samples("needle", "{lengths: [1500], depths: [40], needles: 3}", 2);
  ASSERT_EQ(samples.size(), 1u);
  const auto& sample = samples[0];
  ASSERT_EQ(sample.references.size(), 3u);
  auto depths = sample.grid["needle_depths"].get<std::vector<double>>();
  EXPECT_DOUBLE_EQ(depths[0], 40);
  EXPECT_DOUBLE_EQ(depths[1], 60);
  EXPECT_DOUBLE_EQ(depths[2], 80);
  size_t previous = 0;
  for (const auto& answer : sample.references) {
    size_t at = sample.context.find(answer);
    ASSERT_NE(at, std::string::npos);
    EXPECT_GT(at, previous);
    previous = at;
  }
  EXPECT_EQ(sample.metric, "contains_all");
}

TEST(Tasks, PasskeyAndKvRetrievalAnswersAreInTheContext) {
  for (const auto& sample : make_samples("passkey", "{lengths: [300], depths: [30], samples: 4}", 9)) {
    EXPECT_EQ(sample.references[0].size(), 5u);
    EXPECT_NE(sample.context.find("The pass key is " + sample.references[0]), std::string::npos);
    EXPECT_DOUBLE_EQ(sample.depth, 30);
  }
  for (const auto& sample : make_samples("kv_retrieval", "{lengths: [300], samples: 3, question: query_aware}", 9)) {
    EXPECT_TRUE(sample.query_aware);
    std::string asked = sample.question.substr(sample.question.find('"') + 1, 8);
    EXPECT_NE(sample.context.find("\"" + asked + "\": \"" + sample.references[0] + "\""), std::string::npos);
    EXPECT_EQ(sample.grid["question"], "query_aware");
  }
}

TEST(Tasks, LimitCapsSamplesPerGridPoint) {
  EXPECT_EQ(make_samples("passkey", "{lengths: [100, 200], samples: 5}", 1).size(), 10u);
  EXPECT_EQ(make_samples("passkey", "{lengths: [100, 200], samples: 5}", 1, 2).size(), 4u);
}

TEST(Tasks, FidelityHasAContinuation) {
  auto samples = make_samples("fidelity", "{lengths: [200], continuation: 30, greedy: 5, samples: 1}", 3);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_TRUE(samples[0].fidelity);
  EXPECT_GE(subword_count(samples[0].continuation), 10);
  EXPECT_LE(subword_count(samples[0].continuation), 30);
  EXPECT_EQ(samples[0].greedy_tokens, 5);
}

TEST(Tasks, LongBenchReadsJsonlWithPromptFormatAndMetric) {
  auto dir = std::filesystem::temp_directory_path() / ("kvevict_lb_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream qa(dir / "hotpotqa.jsonl");
    qa << R"({"input": "Who wrote it?", "context": "Passage 1: Ann wrote it.", "answers": ["Ann"], "_id": "q1"})" << "\n";
    qa << R"({"input": "Where?", "context": "Passage 1: in Oslo.", "answers": ["Oslo"], "_id": "q2"})" << "\n";
    std::ofstream trec(dir / "trec.jsonl");
    trec << R"({"input": "What is X?", "context": "Q: a\nType: LOC", "answers": ["DESC"], "all_classes": ["LOC", "DESC"]})"
         << "\n";
  }
  std::string yaml = "{path: " + dir.string() + ", datasets: [hotpotqa, trec], samples: 5}";
  auto samples = make_samples("longbench", yaml, 0);
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].key, "hotpotqa/q1");
  EXPECT_EQ(samples[0].metric, "qa_f1");
  EXPECT_EQ(samples[0].max_new_tokens, 32);
  EXPECT_NE(samples[0].context.find("The following are given passages.\nPassage 1: Ann wrote it."), std::string::npos);
  EXPECT_NE(samples[0].question.find("Question: Who wrote it?\nAnswer:"), std::string::npos);
  EXPECT_EQ(samples[2].metric, "classification");
  EXPECT_TRUE(samples[2].first_line_only);
  EXPECT_EQ(samples[2].all_classes.size(), 2u);

  // A broken record is a usage error naming file and line.
  { std::ofstream qa(dir / "hotpotqa.jsonl", std::ios::app); qa << "{not json\n"; }
  try {
    make_samples("longbench", "{path: " + dir.string() + ", datasets: [hotpotqa], samples: 5}", 0);
    ADD_FAILURE() << "no error";
  } catch (const kvevict::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("hotpotqa.jsonl:3: error: bad LongBench record"), std::string::npos) << e.what();
  }
  // Unknown datasets and missing files are config errors.
  EXPECT_THROW(make_samples("longbench", "{path: " + dir.string() + ", datasets: [dureader]}", 0), kvevict::UsageError);
  EXPECT_THROW(make_samples("longbench", "{path: " + dir.string() + ", datasets: [qasper]}", 0), kvevict::UsageError);
  // A file of blank lines passes the size check but yields no sample: an input error naming it
  // (it used to finish with 0 results and exit 0).
  { std::ofstream blank(dir / "qasper.jsonl"); blank << "\n  \n\n"; }
  try {
    make_samples("longbench", "{path: " + dir.string() + ", datasets: [qasper]}", 0);
    ADD_FAILURE() << "a dataset without records gave no error";
  } catch (const kvevict::Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("qasper.jsonl: no LongBench records"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(Tasks, LongBenchTruncatesInTheMiddle) {
  auto dir = std::filesystem::temp_directory_path() / ("kvevict_lb2_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string body = "HEAD ";
  for (int i = 0; i < 500; ++i) body += "word ";
  body += "TAIL";
  { std::ofstream f(dir / "lcc.jsonl"); f << nlohmann::json{{"input", ""}, {"context", body}, {"answers", {"x"}}}.dump() << "\n"; }
  auto samples = make_samples("longbench", "{path: " + dir.string() + ", datasets: [lcc], max_length: 100}", 0);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_LE(subword_count(samples[0].context), 100);
  EXPECT_GE(subword_count(samples[0].context), 95);
  EXPECT_NE(samples[0].context.find("HEAD"), std::string::npos);
  EXPECT_NE(samples[0].context.find("TAIL"), std::string::npos);
  std::filesystem::remove_all(dir);
}
