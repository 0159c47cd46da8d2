#pragma once
// The language's built-in names (signals, functions, reducers, axes), shared by the checker and the
// policy-file reader (a parameter may not hide one of them).
#include <map>
#include <set>
#include <string>

#include "dsl/lowered.h"

namespace kvevict::dsl {

extern const std::map<std::string, ScalarSignal> kScalarSignals;
extern const std::map<std::string, TensorSignal> kTensorSignals;
extern const std::map<std::string, UnaryFn> kUnaryFns;
extern const std::map<std::string, Reducer> kReducers;
extern const std::set<std::string> kOtherFunctions;

// The axis bit of an axis name of the axis table (g, h, q, d, e, s, t); 0 for any other name.
unsigned axis_bit(const std::string& name);

// True for every built-in name and keyword (cannot be a parameter or a definition). The second
// axes of a kind, e and s, are not: a parameter or definition of that name hides the axis.
bool is_builtin_name(const std::string& name);

}  // namespace kvevict::dsl
