#pragma once
// The keys a policy file may contain: the one list the loader (dsl/policy_file.cpp) checks files
// against and docs/DSL.md's key table documents (tests/dsl/policy_keys_doc_test.cpp keeps the
// two equal, so a key cannot be accepted without being documented, or documented without being
// accepted).
#include <map>
#include <set>
#include <string>

namespace kvevict::dsl {

// Top-level keys of a policy file.
const std::set<std::string>& policy_top_level_keys();

// The mapping sections (observe, protect, run, select, merge) and the keys each accepts.
const std::map<std::string, std::set<std::string>>& policy_section_keys();

// Keys of one parameter declaration under `params:` (its type key, default, bounds, doc).
const std::set<std::string>& policy_parameter_keys();

// Keys of one table declaration under `tables:` (dsl/policy_tables.h).
const std::set<std::string>& policy_table_keys();

// Keys of one stage of select.stages ({score: NAME, keep: EXPR} or {score: NAME, share: EXPR}; docs/DSL.md §1).
const std::set<std::string>& policy_stage_keys();

// Keys of observe.replay ({chunk: EXPR, previous_tail: EXPR, n_sink: EXPR, normalise: BOOL}; KVzip's
// context replay, docs/DSL.md §1).
const std::set<std::string>& policy_replay_keys();

}  // namespace kvevict::dsl
