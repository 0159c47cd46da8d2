#include "evals/config_reader.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/util/error.h"

namespace kvevict::evals {

std::string ConfigErrors::where(const YAML::Node& node, const std::string& path) const {
  for (const auto& overridden : override_paths_) {
    if (path == overridden || path.rfind(overridden + ".", 0) == 0 || path.rfind(overridden + "[", 0) == 0) {
      return "--set " + overridden;
    }
  }
  // Keys above an override path were created by it when they did not exist in the file.
  for (const auto& overridden : override_paths_) {
    if (overridden.rfind(path + ".", 0) == 0 && (!node.IsDefined() || node.Mark().is_null())) return "--set " + overridden;
  }
  std::ostringstream out;
  out << source_;
  if (node.IsDefined() && !node.Mark().is_null()) out << ":" << node.Mark().line + 1 << ":" << node.Mark().column + 1;
  return out.str();
}

void ConfigErrors::error(const YAML::Node& node, const std::string& path, const std::string& message) {
  messages_.push_back(where(node, path) + ": error: " + (path.empty() ? "" : path + ": ") + message);
}

void ConfigErrors::throw_if_any() const {
  if (messages_.empty()) return;
  std::string all;
  for (size_t i = 0; i < messages_.size(); ++i) all += (i ? "\n" : "") + messages_[i];
  throw UsageError(all);
}

MapReader::MapReader(ConfigErrors& errors, const YAML::Node& node, std::string path)
    : errors_(errors), node_(node), path_(std::move(path)), resolved_(YAML::NodeType::Map) {
  if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap()) {
    errors_.error(node_, path_, "expected a mapping of keys to values");
    node_ = YAML::Node(YAML::NodeType::Map);
  }
}

bool MapReader::has(const std::string& key) const { return node_.IsMap() && node_[key].IsDefined() && !node_[key].IsNull(); }

YAML::Node MapReader::raw(const std::string& key) const {
  const_cast<MapReader*>(this)->known_.insert(key);
  if (!node_.IsMap()) return YAML::Node();
  return node_[key];
}

std::optional<YAML::Node> MapReader::scalar(const std::string& key, const char* expected) {
  known_.insert(key);
  if (!has(key)) return std::nullopt;
  YAML::Node value = node_[key];
  if (!value.IsScalar()) {
    errors_.error(value, path_of(key), std::string("expected ") + expected);
    return YAML::Node();
  }
  return value;
}

int64_t MapReader::get_int(const std::string& key, int64_t fallback, int64_t min, int64_t max, bool required) {
  auto value = scalar(key, "an integer");
  int64_t result = fallback;
  if (!value) {
    if (required) errors_.error(node_, path_of(key), "missing required key");
  } else if (value->IsScalar()) {
    try {
      result = value->as<int64_t>();
      if (result < min || result > max) {
        errors_.error(*value, path_of(key),
                      "value " + std::to_string(result) + " out of range [" + std::to_string(min) + ", " +
                          std::to_string(max) + "]");
        result = fallback;
      }
    } catch (const YAML::Exception&) {
      errors_.error(*value, path_of(key), "expected an integer, got '" + value->Scalar() + "'");
    }
  }
  resolved_[key] = result;
  return result;
}

double MapReader::get_double(const std::string& key, double fallback, double min, double max) {
  auto value = scalar(key, "a number");
  double result = fallback;
  if (value && value->IsScalar()) {
    try {
      result = value->as<double>();
      if (!std::isfinite(result) || result < min || result > max) {
        std::ostringstream range;
        range << "value " << value->Scalar() << " out of range [" << min << ", " << max << "]";
        errors_.error(*value, path_of(key), range.str());
        result = fallback;
      }
    } catch (const YAML::Exception&) {
      errors_.error(*value, path_of(key), "expected a number, got '" + value->Scalar() + "'");
    }
  }
  resolved_[key] = result;
  return result;
}

bool MapReader::get_bool(const std::string& key, bool fallback) {
  auto value = scalar(key, "true or false");
  bool result = fallback;
  if (value && value->IsScalar()) {
    try {
      result = value->as<bool>();
    } catch (const YAML::Exception&) {
      errors_.error(*value, path_of(key), "expected true or false, got '" + value->Scalar() + "'");
    }
  }
  resolved_[key] = result;
  return result;
}

std::string MapReader::get_string(const std::string& key, const std::string& fallback, bool required) {
  auto value = scalar(key, "a string");
  std::string result = fallback;
  if (!value) {
    if (required) errors_.error(node_, path_of(key), "missing required key");
  } else if (value->IsScalar()) {
    result = value->Scalar();
  }
  resolved_[key] = result;
  return result;
}

std::string MapReader::get_choice(const std::string& key, const std::string& fallback,
                                  const std::vector<std::string>& allowed) {
  auto value = scalar(key, "a string");
  std::string result = fallback;
  if (value && value->IsScalar()) {
    bool ok = false;
    for (const auto& option : allowed) ok = ok || option == value->Scalar();
    if (ok) {
      result = value->Scalar();
    } else {
      std::string list;
      for (const auto& option : allowed) list += (list.empty() ? "" : "|") + option;
      errors_.error(*value, path_of(key), "'" + value->Scalar() + "' is not one of " + list);
    }
  }
  resolved_[key] = result;
  return result;
}

namespace {

// A list value may be written as a sequence or as a single scalar.
std::vector<YAML::Node> list_items(const YAML::Node& value) {
  std::vector<YAML::Node> items;
  if (value.IsSequence()) {
    for (const auto& item : value) items.push_back(item);
  } else {
    items.push_back(value);
  }
  return items;
}

}  // namespace

std::vector<int64_t> MapReader::get_int_list(const std::string& key, const std::vector<int64_t>& fallback, int64_t min,
                                             int64_t max) {
  known_.insert(key);
  std::vector<int64_t> result;
  if (!has(key)) {
    result = fallback;
  } else if (node_[key].IsMap()) {
    errors_.error(node_[key], path_of(key), "expected a list of integers");
    result = fallback;
  } else {
    size_t errors_before = errors_.messages().size();
    for (const auto& item : list_items(node_[key])) {
      try {
        if (!item.IsScalar()) throw YAML::Exception(item.Mark(), "not a scalar");
        int64_t v = item.as<int64_t>();
        if (v < min || v > max) {
          errors_.error(item, path_of(key),
                        "value " + std::to_string(v) + " out of range [" + std::to_string(min) + ", " +
                            std::to_string(max) + "]");
          continue;
        }
        if (std::find(result.begin(), result.end(), v) != result.end()) {
          errors_.error(item, path_of(key), "value " + std::to_string(v) + " appears twice");
          continue;
        }
        result.push_back(v);
      } catch (const YAML::Exception&) {
        errors_.error(item, path_of(key), "expected an integer" + (item.IsScalar() ? ", got '" + item.Scalar() + "'" : ""));
      }
    }
    if (result.empty() && errors_.messages().size() == errors_before) errors_.error(node_[key], path_of(key), "the list is empty");
  }
  YAML::Node out(YAML::NodeType::Sequence);
  for (auto v : result) out.push_back(v);
  out.SetStyle(YAML::EmitterStyle::Flow);
  resolved_[key] = out;
  return result;
}

std::vector<double> MapReader::get_double_list(const std::string& key, const std::vector<double>& fallback, double min,
                                               double max) {
  known_.insert(key);
  std::vector<double> result;
  if (!has(key)) {
    result = fallback;
  } else if (node_[key].IsMap()) {
    errors_.error(node_[key], path_of(key), "expected a list of numbers");
    result = fallback;
  } else {
    for (const auto& item : list_items(node_[key])) {
      try {
        if (!item.IsScalar()) throw YAML::Exception(item.Mark(), "not a scalar");
        double v = item.as<double>();
        if (!std::isfinite(v) || v < min || v > max) {
          std::ostringstream range;
          range << "value " << item.Scalar() << " out of range [" << min << ", " << max << "]";
          errors_.error(item, path_of(key), range.str());
          continue;
        }
        if (std::find(result.begin(), result.end(), v) != result.end()) {
          errors_.error(item, path_of(key), "value " + item.Scalar() + " appears twice");
          continue;
        }
        result.push_back(v);
      } catch (const YAML::Exception&) {
        errors_.error(item, path_of(key), "expected a number" + (item.IsScalar() ? ", got '" + item.Scalar() + "'" : ""));
      }
    }
  }
  YAML::Node out(YAML::NodeType::Sequence);
  for (auto v : result) out.push_back(v);
  out.SetStyle(YAML::EmitterStyle::Flow);
  resolved_[key] = out;
  return result;
}

std::vector<int64_t> MapReader::get_length_list(const std::string& key, const std::vector<int64_t>& fallback,
                                                int64_t min) {
  std::vector<int64_t> lengths = get_int_list(key, fallback, min, kMaxEvalLength);
  const int64_t context = errors_.context_length();
  if (context <= 0) return lengths;
  std::vector<int64_t> fitting;
  std::vector<YAML::Node> items = has(key) ? list_items(node_[key]) : std::vector<YAML::Node>{};
  for (int64_t length : lengths) {
    if (length <= context) {
      fitting.push_back(length);
      continue;
    }
    YAML::Node at = node_[key];
    for (const auto& item : items) {
      if (item.IsScalar() && item.Scalar() == std::to_string(length)) at = item;
    }
    errors_.error(at, path_of(key),
                  "length " + std::to_string(length) + " exceeds the model's context of " + std::to_string(context) +
                      " tokens");
  }
  return fitting;
}

int64_t MapReader::get_extra_tokens(const std::string& key, int64_t fallback, int64_t min,
                                    const std::vector<int64_t>& lengths) {
  int64_t value = get_int(key, fallback, min, kMaxEvalContinuation);
  const int64_t context = errors_.context_length();
  if (context <= 0 || lengths.empty()) return value;
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  if (longest + value > context) {
    errors_.error(has(key) ? node_[key] : node_, path_of(key),
                  std::to_string(value) + " tokens after a context of " + std::to_string(longest) +
                      " exceed the model's context of " + std::to_string(context) + " tokens");
  }
  return value;
}

std::vector<std::string> MapReader::get_string_list(const std::string& key, const std::vector<std::string>& fallback) {
  known_.insert(key);
  std::vector<std::string> result;
  if (!has(key)) {
    result = fallback;
  } else if (node_[key].IsMap()) {
    errors_.error(node_[key], path_of(key), "expected a list of strings");
    result = fallback;
  } else {
    for (const auto& item : list_items(node_[key])) {
      if (!item.IsScalar()) {
        errors_.error(item, path_of(key), "expected a string");
        continue;
      }
      result.push_back(item.Scalar());
    }
  }
  YAML::Node out(YAML::NodeType::Sequence);
  for (const auto& v : result) out.push_back(v);
  out.SetStyle(YAML::EmitterStyle::Flow);
  resolved_[key] = out;
  return result;
}

void MapReader::finish() {
  if (!node_.IsMap()) return;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    std::string key = it->first.Scalar();
    if (known_.count(key) == 0) {
      std::string list;
      for (const auto& k : known_) list += (list.empty() ? "" : ", ") + k;
      errors_.error(it->first, path_of(key), "unknown key '" + key + "' (known keys: " + list + ")");
    }
  }
}

}  // namespace kvevict::evals
