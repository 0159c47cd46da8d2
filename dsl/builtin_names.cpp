#include "dsl/builtin_names.h"

namespace kvevict::dsl {

const std::map<std::string, ScalarSignal> kScalarSignals = [] {
  std::map<std::string, ScalarSignal> names;  // from the signal table (core/engine/signals.h)
  for (const auto& info : kvevict::kScalarSignalTable) names.emplace(std::string(info.dsl_name), info.id);
  return names;
}();

const std::map<std::string, TensorSignal> kTensorSignals = [] {
  std::map<std::string, TensorSignal> names;  // from the signal table (core/engine/signals.h)
  for (const auto& info : kvevict::kTensorSignalTable) names.emplace(std::string(info.dsl_name), info.id);
  return names;
}();

const std::map<std::string, UnaryFn> kUnaryFns = {
    {"exp", UnaryFn::Exp}, {"log", UnaryFn::Log}, {"sqrt", UnaryFn::Sqrt}, {"abs", UnaryFn::Abs},
    {"floor", UnaryFn::Floor}, {"ceil", UnaryFn::Ceil}, {"round", UnaryFn::Round},
    {"sin", UnaryFn::Sin}, {"cos", UnaryFn::Cos}, {"gelu", UnaryFn::Gelu}};

const std::map<std::string, Reducer> kReducers = {
    {"sum", Reducer::Sum}, {"mean", Reducer::Mean}, {"var", Reducer::Var},
    {"max", Reducer::Max}, {"min", Reducer::Min}, {"entropy", Reducer::Entropy}};

const std::set<std::string> kOtherFunctions = {"pow", "min", "max", "clamp", "if", "normalise", "random",
                                             "inverse", "randn",  // dsl/matrix_ops.h
                                             "rank", "sorted_cumsum", "quantile"};  // dsl/sort_ops.h

unsigned axis_bit(const std::string& name) {
  for (const auto& axis : kvevict::kAxisTable)  // the axis table (core/engine/signals.h)
    if (name == axis.dsl_name) return axis.bit;
  return 0;
}

bool is_builtin_name(const std::string& n) {
  const unsigned axis = axis_bit(n);
  return (axis && kvevict::kAxisTable[kvevict::axis_index(axis)].reserved) || kScalarSignals.count(n) || kTensorSignals.count(n) || kUnaryFns.count(n) || kReducers.count(n) ||
         kOtherFunctions.count(n) || n == "true" || n == "false" || n == "and" || n == "or" || n == "not" || n == "in";
}

}  // namespace kvevict::dsl
