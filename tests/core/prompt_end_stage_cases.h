#pragma once
// The built-in policies whose stage at the prompt's end edits the kept rows
// (core/engine/cache_row_reads.h, prompt_end_edits_rows): SpindleKV's codebook in both scopes and
// ThinK's key channels. Shared by the CPU test on a position-only cache (rowless_engine_turn_test)
// and the GPU test on the CUDA decoder (device_kv_codebook_decoder_gpu_test).
#include <map>
#include <string>
#include <vector>

namespace kvevict::test {

struct PromptEndStageCase {
  std::string policy;
  std::map<std::string, std::string> params;
  std::string label;  // for messages
};

inline std::vector<PromptEndStageCase> prompt_end_stage_cases() {
  return {{"spindlekv", {{"codebook_scope", "per_head"}}, "spindlekv per_head"},
          {"spindlekv", {{"codebook_scope", "per_layer_across_heads"}}, "spindlekv per_layer_across_heads"},
          {"think", {}, "think"}};
}

}  // namespace kvevict::test
