#pragma once
// Strict reading of YAML mappings for configs: every key must be known, every value of the right
// type and range. Problems are collected (not thrown one by one) so a user sees all of them, each
// at its location: "file:line:col: error: ..." or "--set key: error: ..." for overridden values.
// Values read are also written, defaults included, into a `resolved` node in reading order, which
// is what the results store keeps and hashes.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace kvevict::evals {

// The longest context a task may ask for, whatever the model: a documented cap so that a typo such
// as `lengths: [1048576]` is refused up front instead of running for minutes with growing memory.
constexpr int64_t kMaxEvalLength = 131072;
// The longest fidelity continuation or greedy check (tokens).
constexpr int64_t kMaxEvalContinuation = 4096;

class ConfigErrors {
 public:
  ConfigErrors(std::string source, std::set<std::string> override_paths)
      : source_(std::move(source)), override_paths_(std::move(override_paths)) {}

  // `path` is the dotted key path of the value ("tasks.needle.depths").
  void error(const YAML::Node& node, const std::string& path, const std::string& message);
  std::string where(const YAML::Node& node, const std::string& path) const;
  bool empty() const { return messages_.empty(); }
  const std::vector<std::string>& messages() const { return messages_; }
  const std::string& source() const { return source_; }
  // The model's context in tokens once it is known (0: not yet known, or unbounded). Task lengths
  // are checked against it (MapReader::get_length_list).
  void set_context_length(int64_t tokens) { context_length_ = tokens; }
  int64_t context_length() const { return context_length_; }
  // Throws UsageError with every message, one per line.
  void throw_if_any() const;

 private:
  std::string source_;
  std::set<std::string> override_paths_;
  std::vector<std::string> messages_;
  int64_t context_length_ = 0;
};

class MapReader {
 public:
  // `node` must be a mapping (or null, read as empty); otherwise an error is recorded.
  MapReader(ConfigErrors& errors, const YAML::Node& node, std::string path);

  bool has(const std::string& key) const;
  YAML::Node raw(const std::string& key) const;  // marks the key as known
  std::string path_of(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  ConfigErrors& errors() { return errors_; }

  // Each getter records an error and returns the default when the value is missing (and
  // `required`), of the wrong type or out of range.
  int64_t get_int(const std::string& key, int64_t fallback, int64_t min, int64_t max, bool required = false);
  double get_double(const std::string& key, double fallback, double min, double max);
  bool get_bool(const std::string& key, bool fallback);
  std::string get_string(const std::string& key, const std::string& fallback, bool required = false);
  // One of `allowed`.
  std::string get_choice(const std::string& key, const std::string& fallback, const std::vector<std::string>& allowed);
  // Numeric lists are grid axes: a value given twice is an error (it would produce two samples
  // with one key).
  std::vector<int64_t> get_int_list(const std::string& key, const std::vector<int64_t>& fallback, int64_t min,
                                    int64_t max);
  std::vector<double> get_double_list(const std::string& key, const std::vector<double>& fallback, double min,
                                      double max);
  // Context lengths in tokens: an int list in [min, kMaxEvalLength], each also at most the model's
  // context when ConfigErrors knows it.
  std::vector<int64_t> get_length_list(const std::string& key, const std::vector<int64_t>& fallback, int64_t min);
  // A token count that is added to each of `lengths` (fidelity's continuation): in [min,
  // kMaxEvalContinuation], and length + value within the model's context when it is known.
  int64_t get_extra_tokens(const std::string& key, int64_t fallback, int64_t min, const std::vector<int64_t>& lengths);
  std::vector<std::string> get_string_list(const std::string& key, const std::vector<std::string>& fallback);

  // Records an error for every key that no getter or raw() asked for.
  void finish();
  YAML::Node resolved() const { return resolved_; }
  void set_resolved(const std::string& key, const YAML::Node& value) { resolved_[key] = value; }

 private:
  std::optional<YAML::Node> scalar(const std::string& key, const char* expected);
  ConfigErrors& errors_;
  YAML::Node node_;
  std::string path_;
  std::set<std::string> known_;
  YAML::Node resolved_;
};

}  // namespace kvevict::evals
