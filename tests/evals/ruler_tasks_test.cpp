// The RULER-style tasks (ruler_niah, ruler_vt, ruler_cwe, ruler_fwe): deterministic per seed,
// contexts within 1% of their length in the counter's tokens (never above), every answer where the
// grid says and as often as it should be, the answers of the aggregation tasks really the most
// frequent words, variable chains resolving to the asked value; bad options refused at their
// file:line:col with exit 2; and the lengths on a real tokenizer (skipped when absent).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "core/model/gguf_reader.h"
#include "core/model/gguf_tokenizer.h"
#include "core/tokenizer/spm_tokenizer.h"
#include "core/util/error.h"
#include "evals/config.h"
#include "evals/metrics/metrics.h"
#include "evals/tasks/filler.h"
#include "evals/tasks/ruler_words.h"
#include "evals/tasks/task.h"
#include "../core/test_models.h"

using namespace kvevict::evals;
using kvevict::evals::ruler::count_occurrences;

namespace {

// A stand-in for a subword tokenizer (as tests/evals/tasks_test.cpp): one token per 4 bytes, at
// least one per word.
int subword_count(std::string_view text) {
  int tokens = 0;
  for (const auto& word : split_words(text)) tokens += static_cast<int>((word.size() + 3) / 4);
  return tokens;
}

std::vector<Sample> make_samples(const std::string& type, const std::string& yaml, uint64_t seed,
                                 const TokenCounter& count = subword_count) {
  ConfigErrors errors("t.yaml", {});
  YAML::Node node = YAML::Load(yaml);
  MapReader reader(errors, node, "tasks." + type);
  auto task = find_task_type(type)->make(reader, type);
  reader.finish();
  errors.throw_if_any();
  TaskContext context;
  context.seed = seed;
  context.count_tokens = count;
  return task->generate(context);
}

// One configuration per variant the docs list.
const std::vector<std::pair<std::string, std::string>>& variants() {
  static const std::vector<std::pair<std::string, std::string>> all = {
      {"ruler_niah", "{lengths: [1000], depths: [0, 50, 100]}"},
      {"ruler_niah", "{lengths: [1000], keys: 4, value_type: word, haystack: noise}"},
      {"ruler_niah", "{lengths: [1000], values: 4, value_type: uuid}"},
      {"ruler_niah", "{lengths: [1000], keys: 4, queries: 3, samples: 2, question: query_aware}"},
      {"ruler_vt", "{lengths: [1000], chains: 2, hops: 3, samples: 2}"},
      {"ruler_cwe", "{lengths: [1000], samples: 2}"},
      {"ruler_fwe", "{lengths: [1000], alpha: 1.5, samples: 2}"},
  };
  return all;
}

std::string needle_text(const Sample& sample, const nlohmann::json& needle) {
  const std::string kind = sample.grid["value_type"];
  return (sample.grid["values"].get<int>() > 1 ? "One secret " : "The secret ") + kind + " of " +
         needle["key"].get<std::string>() + " is " + needle["value"].get<std::string>() + ".";
}

// Tokens before `at` in `text`, without the joining space (the convention of filler.h).
int offset_of(const std::string& text, size_t at) {
  return subword_count(text.substr(0, at > 0 && text[at - 1] == ' ' ? at - 1 : at));
}

// The words of a list or sequence context (after its one-line header), numbering dropped.
std::vector<std::string> listed_words(const Sample& sample) {
  std::vector<std::string> words;
  for (const auto& word : split_words(sample.context.substr(sample.context.find('\n') + 1))) {
    if (!std::isdigit(static_cast<unsigned char>(word[0]))) words.push_back(word);
  }
  return words;
}

}  // namespace

TEST(RulerTasks, EveryVariantIsDeterministicForASeed) {
  for (const auto& [type, yaml] : variants()) {
    SCOPED_TRACE(type + " " + yaml);
    auto first = make_samples(type, yaml, 7);
    auto again = make_samples(type, yaml, 7);
    auto other = make_samples(type, yaml, 8);
    ASSERT_EQ(first.size(), again.size());
    ASSERT_EQ(first.size(), other.size());
    bool any_difference = false;
    for (size_t i = 0; i < first.size(); ++i) {
      EXPECT_EQ(first[i].key, again[i].key);
      EXPECT_EQ(first[i].context, again[i].context);
      EXPECT_EQ(first[i].question, again[i].question);
      EXPECT_EQ(first[i].answer_prefix, again[i].answer_prefix);
      EXPECT_EQ(first[i].references, again[i].references);
      EXPECT_EQ(first[i].grid.dump(), again[i].grid.dump());
      any_difference |= first[i].context != other[i].context || first[i].references != other[i].references;
      EXPECT_EQ(first[i].metric, "contains_all");
      EXPECT_FALSE(first[i].references.empty());
    }
    EXPECT_TRUE(any_difference) << "the seed has no effect";
  }
}

TEST(RulerTasks, ContextsAreWithinOnePercentOfTheirLengthAndNeverAbove) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ruler_niah", ", depths: [30]"},
      {"ruler_niah", ", keys: 8, values: 2, queries: 2, value_type: uuid, haystack: noise"},
      {"ruler_vt", ", chains: 3, hops: 4"},
      {"ruler_cwe", ""},
      {"ruler_fwe", ""},
  };
  for (const auto& [type, options] : cases) {
    const std::string yaml = "{lengths: [512, 1024, 2048, 4096, 8192], samples: 2" + options + "}";
    for (const auto& sample : make_samples(type, yaml, 3)) {
      SCOPED_TRACE(type + " " + sample.key);
      const int tokens = subword_count(sample.context);
      EXPECT_LE(tokens, sample.length);
      EXPECT_GE(tokens, 0.99 * sample.length);
      EXPECT_EQ(sample.grid["context_tokens"].get<int>(), tokens);
      EXPECT_EQ(sample.grid["length"].get<int>(), sample.length);
    }
  }
}

TEST(RulerTasks, NiahNeedlesSitWhereTheGridSaysAndEachAnswerOccursOnce) {
  for (const auto& [type, yaml] : variants()) {
    if (type != "ruler_niah") continue;
    for (const auto& sample : make_samples(type, yaml, 5)) {
      SCOPED_TRACE(yaml + " " + sample.key);
      const auto& needles = sample.grid["needles"];
      ASSERT_EQ(needles.size(), sample.grid["keys"].get<size_t>() * sample.grid["values"].get<size_t>());
      std::vector<std::string> asked_values;
      std::set<std::string> keys;
      for (const auto& needle : needles) {
        const std::string text = needle_text(sample, needle);
        const size_t at = sample.context.find(text);
        ASSERT_NE(at, std::string::npos) << text;
        EXPECT_EQ(offset_of(sample.context, at), needle["token_offset"].get<int>());
        EXPECT_EQ(count_occurrences(sample.context, needle["value"].get<std::string>()), 1);
        keys.insert(needle["key"].get<std::string>());
        if (needle["asked"].get<bool>()) asked_values.push_back(needle["value"]);
      }
      EXPECT_EQ(keys.size(), sample.grid["keys"].get<size_t>());
      EXPECT_EQ(std::set<std::string>(asked_values.begin(), asked_values.end()),
                std::set<std::string>(sample.references.begin(), sample.references.end()));
      EXPECT_EQ(sample.references.size(), sample.grid["queries"].get<size_t>() * sample.grid["values"].get<size_t>());
      // The first asked needle is at the grid depth: within a sentence (<= 20 tokens) and the
      // header of the measured position.
      const int total = subword_count(sample.context);
      for (const auto& needle : needles) {
        if (!needle["asked"].get<bool>() || needle["value"] != sample.references[0]) continue;
        EXPECT_DOUBLE_EQ(needle["depth"].get<double>(), sample.grid["depth"].get<double>());
        if (sample.depth >= 0) {
          EXPECT_DOUBLE_EQ(needle["depth"].get<double>(), sample.depth);
          EXPECT_NEAR(100.0 * needle["token_offset"].get<int>() / total, sample.depth, 100.0 * 45 / total);
        }
      }
      for (const auto& reference : sample.references) {
        const std::string type_name = sample.grid["value_type"];
        if (type_name == "number") {
          EXPECT_TRUE(std::regex_match(reference, std::regex("[1-9][0-9]{6}")));
        }
        if (type_name == "UUID") {
          EXPECT_TRUE(std::regex_match(reference, std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")));
        }
      }
      EXPECT_GE(sample.max_new_tokens, subword_count(sample.references[0]) * static_cast<int>(sample.references.size()));
    }
  }
}

TEST(RulerTasks, NiahHaystacksAreTheEssayOrTheNoise) {
  auto noise = make_samples("ruler_niah", "{lengths: [600], haystack: noise, samples: 1}", 1)[0];
  auto essay = make_samples("ruler_niah", "{lengths: [600], samples: 1}", 1)[0];
  EXPECT_GT(count_occurrences(noise.context, "The grass is green."), 10);
  EXPECT_EQ(count_occurrences(essay.context, "The grass is green."), 0);
  EXPECT_EQ(noise.grid["haystack"], "noise");
  EXPECT_EQ(essay.grid["haystack"], "essay");
}

TEST(RulerTasks, VariableChainsResolveToTheAskedValue) {
  for (const auto& sample : make_samples("ruler_vt", "{lengths: [1500, 3000], chains: 3, hops: 5, samples: 3}", 2)) {
    SCOPED_TRACE(sample.key);
    // Read the statements back from the text, in order, and resolve every variable.
    std::map<std::string, std::string> value_of;
    const std::regex statement("VAR ([A-Z]{5}) = (VAR ([A-Z]{5})|([0-9]{5}))\\.");
    int statements = 0;
    for (std::sregex_iterator it(sample.context.begin(), sample.context.end(), statement), end; it != end; ++it, ++statements) {
      const auto& m = *it;
      if (m[4].matched) {
        value_of[m[1]] = m[4];
      } else {
        ASSERT_TRUE(value_of.count(m[3])) << m[3] << " is copied before it is assigned";
        value_of[m[1]] = value_of[m[3]];
      }
    }
    EXPECT_EQ(statements, 3 * 6);
    const std::string asked = std::regex_replace(sample.question, std::regex(".*value ([0-9]{5}).*"), "$1");
    std::set<std::string> holders;
    for (const auto& [name, value] : value_of) {
      if (value == asked) holders.insert(name);
    }
    EXPECT_EQ(holders, std::set<std::string>(sample.references.begin(), sample.references.end()));
    ASSERT_EQ(sample.references.size(), 6u);
    // A name occurs where it is assigned and where the next one copies it; nowhere else.
    for (size_t h = 0; h < sample.references.size(); ++h) {
      EXPECT_EQ(count_occurrences(sample.context, sample.references[h]), h + 1 < sample.references.size() ? 2 : 1);
      EXPECT_EQ(count_occurrences(sample.question + sample.answer_prefix, sample.references[h]), 0);
    }
    const auto& chain = sample.grid["chain_facts"][0];
    EXPECT_EQ(chain["value"], asked);
    EXPECT_EQ(chain["names"].get<std::vector<std::string>>(), sample.references);
    for (size_t h = 0; h < 6; ++h) {
      const std::string text = "VAR " + sample.references[h] + " = ";
      EXPECT_EQ(offset_of(sample.context, sample.context.find(text)), chain["token_offsets"][h].get<int>());
    }
  }
}

TEST(RulerTasks, CommonWordsAreTheMostCommonOfTheList) {
  for (const auto& yaml : {"{lengths: [300, 1000, 4000], samples: 2}", "{lengths: [2000], common: 25}",
                           "{lengths: [800], common: 1}"}) {
    for (const auto& sample : make_samples("ruler_cwe", yaml, 4)) {
      SCOPED_TRACE(std::string(yaml) + " " + sample.key);
      // The list is numbered 1..n.
      const auto tokens = split_words(sample.context.substr(sample.context.find('\n') + 1));
      const int n = sample.grid["items"].get<int>();
      ASSERT_EQ(static_cast<int>(tokens.size()), 2 * n);
      for (int i = 0; i < n; ++i) EXPECT_EQ(tokens[2 * i], std::to_string(i + 1) + ".");
      std::map<std::string, int> counts;
      for (const auto& word : listed_words(sample)) ++counts[word];
      const size_t common = sample.grid["common"].get<size_t>();
      ASSERT_EQ(sample.references.size(), common);
      int least_common = n, most_rare = 0;
      for (const auto& [word, count] : counts) {
        if (std::find(sample.references.begin(), sample.references.end(), word) != sample.references.end()) {
          least_common = std::min(least_common, count);
        } else {
          most_rare = std::max(most_rare, count);
        }
        EXPECT_EQ(count_occurrences(sample.context, word), count) << word;
      }
      for (const auto& reference : sample.references) EXPECT_EQ(counts[reference], sample.grid["common_repeats"].get<int>());
      EXPECT_GT(least_common, most_rare);
      EXPECT_EQ(most_rare, sample.grid["rare_max_repeats"].get<int>());
    }
  }
}

TEST(RulerTasks, FrequentWordsAreTheThreeMostFrequentOfTheSequence) {
  for (const auto& yaml : {"{lengths: [200, 1000, 4000], samples: 3}", "{lengths: [300, 3000], alpha: 1.05, samples: 3}",
                           "{lengths: [200], alpha: 5, samples: 3}"}) {
    for (const auto& sample : make_samples("ruler_fwe", yaml, 6)) {
      SCOPED_TRACE(std::string(yaml) + " " + sample.key);
      std::map<std::string, int> counts;
      for (const auto& word : listed_words(sample)) ++counts[word];
      ASSERT_EQ(sample.references.size(), 3u);
      EXPECT_EQ(static_cast<int>(listed_words(sample).size()), sample.grid["words"].get<int>());
      int least_top = 1 << 30, most_other = 0;
      for (const auto& [word, count] : counts) {
        const bool top = std::find(sample.references.begin(), sample.references.end(), word) != sample.references.end();
        if (top) least_top = std::min(least_top, count);
        else most_other = std::max(most_other, count);
        EXPECT_EQ(count_occurrences(sample.context, word), count) << word;
      }
      EXPECT_GT(least_top, most_other);
      EXPECT_EQ(most_other, sample.grid["fourth_count"].get<int>());
      for (const auto& reference : sample.references) EXPECT_GT(counts[reference], 0);
    }
  }
  // A Zipf law: with alpha 2 the most frequent word takes far more than the third.
  auto sample = make_samples("ruler_fwe", "{lengths: [8000], samples: 1}", 1)[0];
  auto counts = sample.grid["top_counts"].get<std::vector<int>>();
  std::sort(counts.rbegin(), counts.rend());
  EXPECT_GT(counts[0], 4 * counts[2]);
}

TEST(RulerTasks, VocabularyWordsNeverOccurByAccident) {
  const auto& words = ruler::vocabulary();
  EXPECT_GE(words.size(), 400u);
  EXPECT_EQ(std::set<std::string>(words.begin(), words.end()).size(), words.size());
  for (const auto& a : words) {
    EXPECT_TRUE(std::regex_match(a, std::regex("[a-z]{4,}"))) << a;
    for (const auto& b : words) {
      if (&a != &b) {
        EXPECT_EQ(b.find(a), std::string::npos) << a << " is inside " << b;
      }
    }
  }
  // Not in the filler nor in any task's fixed wording (headers, questions, answer prefixes).
  Rng rng(1);
  std::string fixed;
  for (auto style : {FillerStyle::Essay, FillerStyle::Repetitive}) {
    for (const auto& sentence : build_haystack(style, rng, subword_count, 20000).sentences) fixed += sentence;
  }
  std::set<std::string> placed;
  for (const auto& [type, yaml] : variants()) {
    for (const auto& sample : make_samples(type, yaml, 1)) {
      fixed += sample.question + " " + sample.answer_prefix + " " + sample.context.substr(0, sample.context.find('\n'));
      for (const auto& needle : sample.grid.value("needles", nlohmann::json::array())) {
        for (const auto& part : split_words(std::regex_replace(needle["key"].get<std::string>(), std::regex("-"), " "))) {
          placed.insert(part);
        }
      }
    }
  }
  for (const auto& word : words) {
    if (!placed.count(word)) {
      EXPECT_EQ(count_occurrences(fixed, word), 0) << word;
    }
  }
}

namespace {

std::string config_with(const std::string& tasks) {
  return "model: \"fake:\"\ntasks:\n" + tasks + "policies: [a]\nbudgets: [full]\n";
}

std::string error_of(const std::string& yaml) {
  try {
    parse_eval_config(yaml, "cfg.yaml");
  } catch (const kvevict::Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << yaml;
  return "";
}

}  // namespace

TEST(RulerTasks, BadOptionsAreErrorsAtTheirLocation) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"  ruler_niah:\n    keys: 0\n", "cfg.yaml:4:11: error: tasks.ruler_niah.keys: value 0 out of range [1, 32]"},
      {"  ruler_niah:\n    keys: 2\n    queries: 3\n",
       "cfg.yaml:5:14: error: tasks.ruler_niah.queries: 3 queries ask for more keys than the 2 given by `keys`"},
      {"  ruler_niah:\n    keys: 32\n    values: 3\n",
       "cfg.yaml:5:13: error: tasks.ruler_niah.values: keys x values = 96 needles; at most 64"},
      {"  ruler_niah:\n    values: 17\n", "cfg.yaml:4:13: error: tasks.ruler_niah.values: value 17 out of range"},
      {"  ruler_niah:\n    value_type: date\n", "cfg.yaml:4:17: error: tasks.ruler_niah.value_type: 'date' is not one of"},
      {"  ruler_niah:\n    haystack: paper\n", "cfg.yaml:4:15: error: tasks.ruler_niah.haystack: 'paper' is not one of"},
      {"  ruler_niah:\n    needles: 2\n", "cfg.yaml:4:5: error: tasks.ruler_niah.needles: unknown key 'needles'"},
      {"  ruler_niah:\n    lengths: [64]\n", "cfg.yaml:4:15: error: tasks.ruler_niah.lengths: value 64 out of range"},
      {"  ruler_vt:\n    hops: 0\n", "cfg.yaml:4:11: error: tasks.ruler_vt.hops: value 0 out of range [1, 32]"},
      {"  ruler_vt:\n    chains: 16\n    hops: 32\n",
       "cfg.yaml:5:11: error: tasks.ruler_vt.hops: chains x (hops + 1) = 528 statements; at most 256"},
      {"  ruler_vt:\n    depths: [10]\n", "cfg.yaml:4:5: error: tasks.ruler_vt.depths: unknown key 'depths'"},
      {"  ruler_cwe:\n    common: 0\n", "cfg.yaml:4:13: error: tasks.ruler_cwe.common: value 0 out of range [1, 50]"},
      {"  ruler_cwe:\n    common: many\n", "cfg.yaml:4:13: error: tasks.ruler_cwe.common: expected an integer"},
      {"  ruler_fwe:\n    alpha: 1\n", "cfg.yaml:4:12: error: tasks.ruler_fwe.alpha: alpha must be above 1"},
      {"  ruler_fwe:\n    alpha: 0.5\n", "cfg.yaml:4:12: error: tasks.ruler_fwe.alpha: value 0.5 out of range [1, 5]"},
      {"  ruler_fwe:\n    alpha: .nan\n", "cfg.yaml:4:12: error: tasks.ruler_fwe.alpha:"},
      {"  ruler_fwe:\n    question: both\n", "cfg.yaml:4:15: error: tasks.ruler_fwe.question: 'both' is not one of"},
  };
  for (const auto& [tasks, expected] : cases) {
    const std::string message = error_of(config_with(tasks));
    EXPECT_NE(message.find(expected), std::string::npos) << "expected: " << expected << "\ngot: " << message;
  }
}

TEST(RulerTasks, ALengthTooShortForTheStatementsIsAUsageError) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ruler_niah", "{lengths: [128], keys: 16, values: 4, value_type: uuid}"},
      {"ruler_vt", "{lengths: [128], chains: 8, hops: 20}"},
      {"ruler_cwe", "{lengths: [128], common: 50}"},
  };
  for (const auto& [type, yaml] : cases) {
    try {
      make_samples(type, yaml, 1);
      ADD_FAILURE() << type << ": no error";
    } catch (const kvevict::Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(std::string(e.what()).find(type + " len=128/depth=random/i=0: a context of 128 tokens cannot hold"),
                std::string::npos)
          << e.what();
    }
  }
}

// The real tokenizers: stories260K's 512-piece SentencePiece vocabulary (many tokens per word) and
// SmolLM2's byte-level BPE (digits one token each). Each context within 1% of its length.
TEST(RulerTasks, LengthsHoldOnRealTokenizers) {
  std::vector<std::pair<std::string, std::unique_ptr<kvevict::Tokenizer>>> tokenizers;
  if (kvevict::test::stories_missing_reason().empty()) {
    tokenizers.emplace_back("stories260K",
                            kvevict::make_spm_tokenizer(kvevict::read_llama2c_tokenizer(kvevict::test::stories_tokenizer(), 512)));
  }
  if (std::filesystem::is_regular_file(kvevict::test::smollm2_path())) {
    tokenizers.emplace_back("SmolLM2", kvevict::tokenizer_from_gguf(kvevict::GgufFile(kvevict::test::smollm2_path())));
  }
  if (tokenizers.empty()) GTEST_SKIP() << "neither stories260K (" << kvevict::test::stories_tokenizer()
                                       << ") nor SmolLM2 (" << kvevict::test::smollm2_path() << ") is present";
  for (const auto& [model, tokenizer] : tokenizers) {
    const kvevict::Tokenizer& t = *tokenizer;
    TokenCounter count = [&t](std::string_view text) { return static_cast<int>(t.encode(text, false).size()); };
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"ruler_niah", "{lengths: [1024, 4096], samples: 1}"},
        {"ruler_niah", "{lengths: [2048], keys: 4, values: 2, queries: 2, value_type: uuid, haystack: noise, samples: 1}"},
        {"ruler_vt", "{lengths: [1024, 4096], samples: 1}"},
        {"ruler_cwe", "{lengths: [1024, 4096], samples: 1}"},
        {"ruler_fwe", "{lengths: [1024, 4096], samples: 1}"},
    };
    for (const auto& [type, yaml] : cases) {
      auto samples = make_samples(type, yaml, 9, count);
      auto again = make_samples(type, yaml, 9, count);
      for (size_t i = 0; i < samples.size(); ++i) {
        SCOPED_TRACE(model + " " + type + " " + samples[i].key);
        const int tokens = count(samples[i].context);
        EXPECT_LE(tokens, samples[i].length);
        EXPECT_GE(tokens, 0.99 * samples[i].length);
        EXPECT_EQ(samples[i].grid["context_tokens"].get<int>(), tokens);
        EXPECT_EQ(samples[i].context, again[i].context);
        for (const auto& reference : samples[i].references) EXPECT_GE(count_occurrences(samples[i].context, reference), 1);
        EXPECT_GE(samples[i].max_new_tokens, count(samples[i].references[0]) * static_cast<int>(samples[i].references.size()));
      }
    }
  }
}
