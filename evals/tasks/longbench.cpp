// longbench: LongBench (THUDM) English datasets read from `<path>/<dataset>.jsonl` (fields: input,
// context, answers, all_classes). Each dataset gets LongBench's prompt format, answer length and
// metric; contexts longer than `max_length` tokens are cut in the middle, as LongBench does.
// The Chinese datasets are refused: their metrics need a Chinese word segmenter kvevict lacks.
// Options: path (folder, required), datasets (list), max_length, samples (per dataset), question.
#include <filesystem>
#include <sstream>

#include "core/util/error.h"
#include "core/util/input_file.h"
#include "evals/tasks/task_types.h"

namespace kvevict::evals {
namespace {

struct DatasetFormat {
  const char* name;
  const char* prompt;  // "{context}" and "{input}" are replaced
  int max_new_tokens;
  const char* metric;
  bool first_line_only;
};

const DatasetFormat kFormats[] = {
    {"narrativeqa",
     "You are given a story, which can be either a novel or a movie script, and a question. Answer the question as "
     "concisely as you can, using a single phrase if possible. Do not provide any explanation.\n\nStory: "
     "{context}\n\nNow, answer the question based on the story as concisely as you can, using a single phrase if "
     "possible. Do not provide any explanation.\n\nQuestion: {input}\n\nAnswer:",
     128, "qa_f1", false},
    {"qasper",
     "You are given a scientific article and a question. Answer the question as concisely as you can, using a single "
     "phrase or sentence if possible. If the question cannot be answered based on the information in the article, "
     "write \"unanswerable\". If the question is a yes/no question, answer \"yes\", \"no\", or \"unanswerable\". Do "
     "not provide any explanation.\n\nArticle: {context}\n\n Answer the question based on the above article as "
     "concisely as you can, using a single phrase or sentence if possible. If the question cannot be answered based "
     "on the information in the article, write \"unanswerable\". If the question is a yes/no question, answer "
     "\"yes\", \"no\", or \"unanswerable\". Do not provide any explanation.\n\nQuestion: {input}\n\nAnswer:",
     128, "qa_f1", false},
    {"multifieldqa_en",
     "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following question based on the "
     "above text, only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:",
     64, "qa_f1", false},
    {"hotpotqa", nullptr, 32, "qa_f1", false},
    {"2wikimqa", nullptr, 32, "qa_f1", false},
    {"musique", nullptr, 32, "qa_f1", false},
    {"gov_report",
     "You are given a report by a government agency. Write a one-page summary of the report.\n\nReport:\n{context}\n\n"
     "Now, write a one-page summary of the report.\n\nSummary:",
     512, "rouge_l", false},
    {"qmsum",
     "You are given a meeting transcript and a query containing a question or instruction. Answer the query in one or "
     "more sentences.\n\nTranscript:\n{context}\n\nNow, answer the query based on the above meeting transcript in one "
     "or more sentences.\n\nQuery: {input}\nAnswer:",
     512, "rouge_l", false},
    {"multi_news",
     "You are given several news articles. Write a one-page summary of all news. \n\nNews:\n{context}\n\nNow, write a "
     "one-page summary of all the news.\n\nSummary:",
     512, "rouge_l", false},
    {"trec",
     "Please determine the type of the question below. Here are some examples of questions.\n\n{context}\n{input}", 64,
     "classification", true},
    {"triviaqa",
     "Answer the question based on the given passage. Only give me the answer and do not output any other words. The "
     "following are some examples.\n\n{context}\n\n{input}",
     32, "qa_f1", true},
    {"samsum", "Summarize the dialogue into a few short sentences. The following are some examples.\n\n{context}\n\n{input}",
     128, "rouge_l", true},
    {"passage_count",
     "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. Please carefully read "
     "these paragraphs and determine how many unique paragraphs there are after removing duplicates. In other words, "
     "how many non-repeating paragraphs are there in total?\n\n{context}\n\nPlease enter the final count of unique "
     "paragraphs after removing duplicates. The output format should only contain the number, such as 1, 2, 3, and so "
     "on.\n\nThe final answer is: ",
     32, "count", false},
    {"passage_retrieval_en",
     "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which paragraph the abstract is "
     "from.\n\n{context}\n\nThe following is an abstract.\n\n{input}\n\nPlease enter the number of the paragraph that "
     "the abstract is from. The answer format must be like \"Paragraph 1\", \"Paragraph 2\", etc.\n\nThe answer is: ",
     32, "retrieval", false},
    {"lcc", "Please complete the code given below. \n{context}Next line of code:\n", 64, "code_sim", false},
    {"repobench-p", "Please complete the code given below. \n{context}{input}Next line of code:\n", 64, "code_sim", false},
};

const char* kMultiHopPrompt =
    "Answer the question based on the given passages. Only give me the answer and do not output any other "
    "words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given passages. Only "
    "give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:";

const DatasetFormat* find_format(const std::string& name) {
  for (const auto& format : kFormats) {
    if (name == format.name) return &format;
  }
  return nullptr;
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

// Keeps the head and tail of `text` so that it counts at most `max_tokens` tokens.
std::string truncate_middle(const std::string& text, int max_tokens, const TokenCounter& count) {
  if (max_tokens <= 0 || count(text) <= max_tokens) return text;
  size_t low = 0, high = text.size();  // characters kept
  while (low < high) {
    size_t mid = (low + high + 1) / 2;
    std::string candidate = text.substr(0, mid / 2) + text.substr(text.size() - (mid - mid / 2));
    if (count(candidate) <= max_tokens) low = mid; else high = mid - 1;
  }
  return text.substr(0, low / 2) + text.substr(text.size() - (low - low / 2));
}

class LongBenchTask : public Task {
 public:
  LongBenchTask(std::string name, std::string path, std::vector<std::string> datasets, int max_length, CommonTaskOptions common)
      : name_(std::move(name)), path_(std::move(path)), datasets_(std::move(datasets)), max_length_(max_length),
        common_(common) {}

  std::vector<Sample> generate(const TaskContext& context) const override {
    std::vector<Sample> samples;
    const int per_point = context.limit > 0 ? std::min(context.limit, common_.samples) : common_.samples;
    for (const auto& dataset : datasets_) {
      const DatasetFormat* format = find_format(dataset);
      std::string prompt = format->prompt ? format->prompt : kMultiHopPrompt;
      size_t split = prompt.find("{context}") + std::string("{context}").size();
      std::string file = (std::filesystem::path(path_) / (dataset + ".jsonl")).string();
      std::istringstream in(read_input_file(file, InputLimits::kDatasetFile, "LongBench file"));
      std::string line;
      int line_number = 0, taken = 0;
      while (taken < per_point && std::getline(in, line)) {
        ++line_number;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        nlohmann::json record;
        try {
          record = nlohmann::json::parse(line);
          if (!record.is_object()) throw std::runtime_error("not a JSON object");
          Sample sample;
          std::string body = record.at("context").get<std::string>();
          std::string input = record.value("input", std::string());
          sample.task = name_;
          sample.key = dataset + "/" + record.value("_id", "line" + std::to_string(line_number));
          sample.index = taken;
          std::string before = prompt.substr(0, split), after = prompt.substr(split);
          replace_all(before, "{input}", input);
          replace_all(after, "{input}", input);
          std::string full_context = before;
          replace_all(full_context, "{context}", body);
          sample.context = truncate_middle(full_context, max_length_, context.count_tokens);
          sample.separator = "";
          sample.question = after;
          sample.query_aware = common_.query_aware;
          for (const auto& answer : record.at("answers")) sample.references.push_back(answer.get<std::string>());
          if (record.contains("all_classes") && record["all_classes"].is_array()) {
            for (const auto& label : record["all_classes"]) sample.all_classes.push_back(label.get<std::string>());
          }
          sample.metric = format->metric;
          sample.first_line_only = format->first_line_only;
          sample.max_new_tokens = format->max_new_tokens;
          sample.grid = {{"dataset", dataset}, {"line", line_number},
                         {"context_tokens", context.count_tokens(sample.context)},
                         {"question", common_.query_aware ? "query_aware" : "agnostic"}};
          samples.push_back(std::move(sample));
          ++taken;
        } catch (const std::exception& e) {
          throw UsageError(file + ":" + std::to_string(line_number) + ": error: bad LongBench record: " + e.what());
        }
      }
      // A dataset that yields nothing would finish "successfully" with no results for it.
      if (taken == 0) throw InputError(file, "no LongBench records (the file is empty or holds only blank lines)");
    }
    return samples;
  }

 private:
  std::string name_, path_;
  std::vector<std::string> datasets_;
  int max_length_;
  CommonTaskOptions common_;
};

}  // namespace

std::unique_ptr<Task> make_longbench_task(MapReader& reader, const std::string& instance) {
  std::string path = reader.get_string("path", "", true);
  auto datasets = reader.get_string_list("datasets", {"narrativeqa", "qasper", "multifieldqa_en", "hotpotqa"});
  int max_length = static_cast<int>(reader.get_int("max_length", 3500, 0, kMaxEvalLength));
  if (reader.errors().context_length() > 0 && max_length > reader.errors().context_length()) {
    reader.errors().error(reader.raw("max_length"), reader.path_of("max_length"),
                          "max_length " + std::to_string(max_length) + " exceeds the model's context of " +
                              std::to_string(reader.errors().context_length()) + " tokens");
  }
  CommonTaskOptions common = read_common_options(reader, 20);
  // The non-throwing overload: a name too long or a folder that cannot be searched is an error at the
  // config's line, never an exception out of the parser.
  std::error_code unreadable;
  const bool is_folder = !path.empty() && std::filesystem::is_directory(path, unreadable);
  if (!path.empty() && !is_folder) {
    reader.errors().error(reader.raw("path"), reader.path_of("path"), "LongBench folder '" + path + "' does not exist");
  }
  for (const auto& dataset : datasets) {
    if (!find_format(dataset)) {
      reader.errors().error(reader.raw("datasets"), reader.path_of("datasets"),
                            "unsupported LongBench dataset '" + dataset + "' (English datasets only)");
    } else if (is_folder) {
      // The file rule (regular file, no blocking open) now, so a FIFO, a directory or an empty file
      // is reported at the config's line before any work starts.
      const std::string file = (std::filesystem::path(path) / (dataset + ".jsonl")).string();
      try {
        InputFile input(file, "LongBench file");
        if (input.size() == 0) throw InputError(file, "the LongBench file is empty");
      } catch (const Error& e) {
        reader.errors().error(reader.raw("datasets"), reader.path_of("datasets"), e.what());
      }
    }
  }
  return std::make_unique<LongBenchTask>(instance, path, datasets, max_length, common);
}

}  // namespace kvevict::evals
