#pragma once
// How `kvevict inspect` and `kvevict replay` show what a policy kept: per layer and stored head the
// budget and the original positions of the kept tokens (ascending), then the cache bytes.
// JSON: {"policy","budget","prompt_tokens","gqa_mode","layers":[{"layer","heads":[{"kv_head","budget","kept"}]}],
//        "bytes_full","bytes_kept"} (and, for a codebook policy, "bytes_codebook").
// "kv_head" is the index of the stored head: the KV head ("gqa_mode": "kv_head"), or, for a policy
// that unfolds GQA ("gqa_mode": "unfold"), the query head, which then also has "query_head" (the
// same index) and "source_kv_head" (query_head / group, the KV head its entries were copied from).
#include <ostream>

#include <nlohmann/json.hpp>

#include "core/engine/engine.h"

namespace kvevict::cli {

// `group`: query heads per KV head.
nlohmann::json eviction_report_json(const EvictionReport& report, int group);
void print_eviction_report(std::ostream& out, const EvictionReport& report, int group);

}  // namespace kvevict::cli
