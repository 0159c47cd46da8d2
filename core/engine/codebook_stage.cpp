#include "core/engine/codebook_stage.h"

#include <string>
#include <utility>
#include <vector>

#include "core/engine/codebook.h"
#include "core/util/error.h"

namespace kvevict {

void codebook_layer_range(const PolicyMerge& merge, int n_layers, const std::string& policy, int& first, int& last) {
  first = merge.first_layer;
  last = merge.last_layer < 0 || merge.last_layer >= n_layers ? n_layers - 1 : merge.last_layer;
  if (first < 0 || first > last)
    throw UsageError("policy " + policy + ": codebook layers " + std::to_string(merge.first_layer) + ".." +
                     std::to_string(merge.last_layer) + " select no layer of a " + std::to_string(n_layers) +
                     "-layer model (merge.first_layer / merge.last_layer)");
}

namespace {

CodebookHead head_of(Codebook&& k, Codebook&& v, const PolicyMerge& merge, bool keep_codes) {
  CodebookHead head;
  if (keep_codes) {
    head.key_codes = std::move(k.codes);
    head.value_codes = std::move(v.codes);
  }
  head.key_index = std::move(k.index);
  head.key_norm = std::move(k.norm);
  head.value_index = std::move(v.index);
  head.value_norm = std::move(v.norm);
  head.theta_key = merge.theta_key;
  head.theta_value = merge.theta_value;
  return head;
}

// Cuts a codebook built over the concatenated heads back into per-head indices and norms.
Codebook slice(const Codebook& all, size_t from, size_t n) {
  Codebook part;
  part.dim = all.dim;
  part.index.assign(all.index.begin() + from, all.index.begin() + from + n);
  part.norm.assign(all.norm.begin() + from, all.norm.begin() + from + n);
  return part;
}

}  // namespace

CodebookStageResult apply_codebook_stage(const PolicyMerge& merge, KVCache& cache, const SimilarityGraphBuilder* graph) {
  const int L = cache.n_layers(), H = cache.n_stored_heads(), d = cache.head_dim();
  int first = 0, last = L - 1;
  codebook_layer_range(merge, L, "(merge)", first, last);
  CodebookStageResult r;
  r.bytes_before = cache.bytes_in_use();
  for (int l = first; l <= last; ++l) {
    if (merge.scope == MergeScope::PerHead) {
      for (int h = 0; h < H; ++h) {
        const int T = cache.length(l, h);
        const std::vector<float> pre = cache.keys_pre_rope(l, h);
        std::vector<float> scratch;
        const float* values = cache.values_or_reconstruct(l, h, scratch);
        Codebook ck = build_codebook(pre.data(), T, d, merge.theta_key, graph);
        Codebook cv = build_codebook(values, T, d, merge.theta_value, graph);
        if (graph) r.graphs_by_builder += 2;
        r.key_codes += ck.n_codes();
        r.value_codes += cv.n_codes();
        r.tokens += T;
        cache.set_codebook(l, h, head_of(std::move(ck), std::move(cv), merge, true));
      }
      continue;
    }
    std::vector<float> keys, values, scratch;
    std::vector<size_t> offset(H + 1, 0);
    for (int h = 0; h < H; ++h) {
      const std::vector<float> pre = cache.keys_pre_rope(l, h);
      keys.insert(keys.end(), pre.begin(), pre.end());
      const float* v = cache.values_or_reconstruct(l, h, scratch);
      values.insert(values.end(), v, v + static_cast<size_t>(cache.length(l, h)) * d);
      offset[h + 1] = offset[h] + cache.length(l, h);
    }
    const int N = static_cast<int>(offset[H]);
    const Codebook ck = build_codebook(keys.data(), N, d, merge.theta_key, graph);
    const Codebook cv = build_codebook(values.data(), N, d, merge.theta_value, graph);
    if (graph) r.graphs_by_builder += 2;
    r.key_codes += ck.n_codes();
    r.value_codes += cv.n_codes();
    r.tokens += N;
    std::vector<CodebookHead> heads;
    for (int h = 0; h < H; ++h) {
      const size_t n = offset[h + 1] - offset[h];
      heads.push_back(head_of(slice(ck, offset[h], n), slice(cv, offset[h], n), merge, false));
    }
    LayerCodebook codes;
    codes.key_codes = ck.codes;
    codes.value_codes = cv.codes;
    cache.set_layer_codebook(l, std::move(codes), std::move(heads));
  }
  r.bytes_after = cache.bytes_in_use();
  return r;
}

}  // namespace kvevict
