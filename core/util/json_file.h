#pragma once
// Reading untrusted JSON (config.json, tokenizer.json, safetensors headers) with errors that name
// the file and the line:col of the problem. Parse errors become ModelError, never a crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/util/input_file.h"

namespace kvevict {

// Parses `text` as JSON. On a syntax error throws ModelError(file, "line L:C: <reason>"), with the
// position counted from `text`'s start. `max_depth` bounds nesting (hostile inputs nest deeply).
nlohmann::json parse_json_text(std::string_view text, const std::string& file, int max_depth = 64);

// Reads (by the rule of core/util/input_file.h) and parses a whole file: InputError when it is
// missing, not a regular file or larger than `max_bytes`; ModelError when it is malformed.
nlohmann::json read_json_file(const std::string& path, size_t max_bytes = InputLimits::kJsonFile, int max_depth = 64);

// Typed access to a key of a JSON object, with errors naming the file and the key.
// `where` prefixes the key in messages (e.g. "rope_scaling.").
class JsonFields {
 public:
  JsonFields(const nlohmann::json& object, std::string file, std::string where = "");

  bool has(const std::string& key) const;  // present and not null
  const nlohmann::json* find(const std::string& key) const;  // nullptr when absent or null

  int64_t integer(const std::string& key, int64_t min, int64_t max) const;  // required
  int64_t integer_or(const std::string& key, int64_t fallback, int64_t min, int64_t max) const;
  double number(const std::string& key) const;  // required
  double number_or(const std::string& key, double fallback) const;
  std::string string(const std::string& key) const;  // required
  std::string string_or(const std::string& key, const std::string& fallback) const;
  bool boolean_or(const std::string& key, bool fallback) const;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  const std::string& file() const { return file_; }

 private:
  const nlohmann::json& object_;
  std::string file_;
  std::string where_;
};

// A short description of a JSON value's type for error messages ("a string", "null", ...).
std::string json_type_name(const nlohmann::json& value);

}  // namespace kvevict
