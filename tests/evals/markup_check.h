#pragma once
// A strict little well-formedness checker for the SVG (XML) and HTML kvevict writes: tags balance,
// attribute values are quoted, entities are known. Returns "" when well formed, else the reason.
#include <set>
#include <string>
#include <vector>

namespace kvevict::test {

inline std::string check_markup(const std::string& text, bool html) {
  static const std::set<std::string> void_elements = {"meta", "img", "br", "hr", "link", "input"};
  std::vector<std::string> open;
  size_t i = 0;
  bool saw_element = false;
  while (i < text.size()) {
    char c = text[i];
    if (c == '&') {
      size_t end = text.find(';', i);
      if (end == std::string::npos || end - i > 8) return "bare & at " + std::to_string(i);
      std::string entity = text.substr(i + 1, end - i - 1);
      if (entity != "amp" && entity != "lt" && entity != "gt" && entity != "quot" && entity != "#39" && entity[0] != '#')
        return "unknown entity &" + entity + ";";
      i = end + 1;
      continue;
    }
    if (c == '>') return "stray > at " + std::to_string(i);
    if (c != '<') {
      ++i;
      continue;
    }
    if (text.compare(i, 9, "<!DOCTYPE") == 0) {
      i = text.find('>', i) + 1;
      continue;
    }
    size_t end = text.find('>', i);
    if (end == std::string::npos) return "unterminated tag";
    std::string tag = text.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty()) return "empty tag";
    if (tag[0] == '/') {
      std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) return "closing </" + name + "> does not match";
      open.pop_back();
      continue;
    }
    bool self_closing = tag.back() == '/';
    if (self_closing) tag.pop_back();
    size_t name_end = tag.find_first_of(" \t\n");
    std::string name = tag.substr(0, name_end);
    // Attributes: name="value" pairs.
    size_t a = name_end == std::string::npos ? tag.size() : name_end;
    while (a < tag.size()) {
      while (a < tag.size() && std::isspace(static_cast<unsigned char>(tag[a]))) ++a;
      if (a >= tag.size()) break;
      size_t eq = tag.find('=', a);
      if (eq == std::string::npos || eq + 1 >= tag.size() || tag[eq + 1] != '"') return "unquoted attribute in <" + name + ">";
      size_t close = tag.find('"', eq + 2);
      if (close == std::string::npos) return "unterminated attribute in <" + name + ">";
      if (tag.substr(eq + 2, close - eq - 2).find('<') != std::string::npos) return "< in attribute";
      a = close + 1;
    }
    saw_element = true;
    if (self_closing || (html && void_elements.count(name))) continue;
    open.push_back(name);
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  if (!saw_element) return "no elements";
  return "";
}

}  // namespace kvevict::test
