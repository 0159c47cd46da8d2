#pragma once
// Constructors of the built-in task types (one file each) and helpers they share.
#include <memory>
#include <string>

#include "evals/tasks/task.h"

namespace kvevict::evals {

std::unique_ptr<Task> make_passkey_task(MapReader& reader, const std::string& instance);
std::unique_ptr<Task> make_needle_task(MapReader& reader, const std::string& instance);
std::unique_ptr<Task> make_kv_retrieval_task(MapReader& reader, const std::string& instance);
std::unique_ptr<Task> make_fidelity_task(MapReader& reader, const std::string& instance);
std::unique_ptr<Task> make_longbench_task(MapReader& reader, const std::string& instance);
std::unique_ptr<Task> make_ruler_niah_task(MapReader& reader, const std::string& instance);
std::unique_ptr<Task> make_ruler_vt_task(MapReader& reader, const std::string& instance);
std::unique_ptr<Task> make_ruler_cwe_task(MapReader& reader, const std::string& instance);
std::unique_ptr<Task> make_ruler_fwe_task(MapReader& reader, const std::string& instance);

// "50" for 50.0, "12.5" for 12.5, "random" for a negative depth.
std::string format_depth(double depth);

}  // namespace kvevict::evals
