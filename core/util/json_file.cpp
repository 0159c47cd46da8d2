#include "core/util/json_file.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "core/util/error.h"
#include "core/util/input_file.h"
#include "core/util/quote.h"

namespace kvevict {
namespace {

struct LineCol {
  size_t line = 1;
  size_t col = 1;
};

LineCol line_col_at(std::string_view text, size_t byte_index) {
  LineCol lc;
  size_t end = std::min(byte_index, text.size());
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++lc.line;
      lc.col = 1;
    } else {
      ++lc.col;
    }
  }
  return lc;
}

std::string at(std::string_view text, size_t byte_index) {
  LineCol lc = line_col_at(text, byte_index);
  return "line " + std::to_string(lc.line) + ":" + std::to_string(lc.col);
}

// nlohmann's parser keeps its own stack, but a bounded depth keeps hostile files from costing
// memory and keeps every later recursive walk shallow. Strings are skipped so brackets in them don't count.
void check_depth(std::string_view text, const std::string& file, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        throw ModelError(file, at(text, i) + ": JSON nested deeper than " + std::to_string(max_depth) + " levels");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace

nlohmann::json parse_json_text(std::string_view text, const std::string& file, int max_depth) {
  check_depth(text, file, max_depth);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based: the byte at which the parser gave up.
    std::string reason = e.what();
    auto pos = reason.find("parse error");
    if (pos != std::string::npos) reason = reason.substr(pos);
    // nlohmann's "last read: '...'" holds the whole token read so far (a 1 MB string gives a 1 MB
    // message): quote at most a line's worth of it.
    reason = quote_input(reason, 200);
    throw ModelError(file, at(text, e.byte > 0 ? e.byte - 1 : 0) + ": invalid JSON (" + reason + ")");
  } catch (const nlohmann::json::exception& e) {
    throw ModelError(file, std::string("invalid JSON (") + e.what() + ")");
  }
}

nlohmann::json read_json_file(const std::string& path, size_t max_bytes, int max_depth) {
  return parse_json_text(read_input_file(path, max_bytes, "JSON file"), path, max_depth);
}

std::string json_type_name(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "a binary value";
}

JsonFields::JsonFields(const nlohmann::json& object, std::string file, std::string where)
    : object_(object), file_(std::move(file)), where_(std::move(where)) {
  if (!object_.is_object()) {
    throw ModelError(file_, (where_.empty() ? std::string("top level") : where_) + " must be a JSON object, not " +
                                json_type_name(object_));
  }
}

void JsonFields::fail(const std::string& key, const std::string& what) const {
  throw ModelError(file_, "key '" + where_ + key + "' " + what);
}

const nlohmann::json* JsonFields::find(const std::string& key) const {
  auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonFields::has(const std::string& key) const { return find(key) != nullptr; }

int64_t JsonFields::integer(const std::string& key, int64_t min, int64_t max) const {
  const nlohmann::json* v = find(key);
  if (!v) fail(key, "is missing");
  int64_t value = 0;
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(key, "= " + std::to_string(u) + " is out of range (expected " + std::to_string(min) + ".." +
                    std::to_string(max) + ")");
    }
    value = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    value = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) && v->get<double>() == std::floor(v->get<double>()) &&
             std::fabs(v->get<double>()) < 9.0e15) {
    value = static_cast<int64_t>(v->get<double>());  // e.g. 4096.0 written by some exporters
  } else {
    fail(key, "must be an integer, not " + json_type_name(*v));
  }
  if (value < min || value > max) {
    fail(key, "= " + std::to_string(value) + " is out of range (expected " + std::to_string(min) + ".." +
                  std::to_string(max) + ")");
  }
  return value;
}

int64_t JsonFields::integer_or(const std::string& key, int64_t fallback, int64_t min, int64_t max) const {
  return has(key) ? integer(key, min, max) : fallback;
}

double JsonFields::number(const std::string& key) const {
  const nlohmann::json* v = find(key);
  if (!v) fail(key, "is missing");
  if (!v->is_number()) fail(key, "must be a number, not " + json_type_name(*v));
  double d = v->get<double>();
  if (!std::isfinite(d)) fail(key, "must be finite");
  return d;
}

double JsonFields::number_or(const std::string& key, double fallback) const { return has(key) ? number(key) : fallback; }

std::string JsonFields::string(const std::string& key) const {
  const nlohmann::json* v = find(key);
  if (!v) fail(key, "is missing");
  if (!v->is_string()) fail(key, "must be a string, not " + json_type_name(*v));
  return v->get<std::string>();
}

std::string JsonFields::string_or(const std::string& key, const std::string& fallback) const {
  return has(key) ? string(key) : fallback;
}

bool JsonFields::boolean_or(const std::string& key, bool fallback) const {
  const nlohmann::json* v = find(key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(key, "must be true or false, not " + json_type_name(*v));
  return v->get<bool>();
}

}  // namespace kvevict
