#pragma once
// A run record and a result row for the results store's tests: every field the store requires,
// fixed values a test changes where it matters.
#include <string>

#include "evals/results_store.h"

namespace kvevict::evals::test {

// Run "t" of `config_hash` on model `model` (hash "mh") and `device`.
inline RunRecord run_record(const std::string& config_hash, const std::string& model = "m.gguf",
                            const std::string& device = "cpu") {
  RunRecord r;
  r.name = "t";
  r.config_hash = config_hash;
  r.config_yaml = "x: 1\n";
  r.kvevict_version = "0";
  r.git_commit = "c";
  r.model = model;
  r.model_hash = "mh";
  r.device = device;
  return r;
}

// Sample `key` of task needle (length 100, depth 50) for (policy, budget): `score`, 1000 KV bytes.
inline SampleResult sample_result(const std::string& key, const std::string& policy, const std::string& budget,
                                  double score) {
  SampleResult r;
  r.task = "needle";
  r.sample_key = key;
  r.policy = policy;
  r.budget = budget;
  r.score = score;
  r.length = 100;
  r.depth = 50;
  r.kv_bytes = 1000;
  return r;
}

}  // namespace kvevict::evals::test
