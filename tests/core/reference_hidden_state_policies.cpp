#include "reference_hidden_state_policies.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace kvevict::reference {

std::vector<double> read_table_numbers(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<double> out;
  std::string line;
  while (std::getline(in, line)) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    for (char& ch : line)
      if (ch == ',') ch = ' ';
    std::istringstream row(line);
    std::string token;
    while (row >> token) {
      size_t used = 0;
      const double v = std::stod(token, &used);
      if (used != token.size()) throw std::runtime_error(path + ": '" + token + "' is not a number");
      out.push_back(v);
    }
  }
  return out;
}

double kvzap_linear_score(const std::vector<double>& weight, const std::vector<double>& bias, int n_kv_heads, int dim,
                          int layer, int kv_head, const std::vector<double>& x) {
  const size_t row = static_cast<size_t>(layer) * n_kv_heads + kv_head;
  double s = bias.at(row);
  for (int c = 0; c < dim; ++c) s += weight.at(row * dim + c) * x.at(c);
  return s;
}

}  // namespace kvevict::reference
