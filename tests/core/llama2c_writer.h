#pragma once
// Writes llama2.c legacy checkpoints (and a matching tokenizer.bin) of a model built in a test, so
// loader tests never depend on a downloaded file.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/model/model.h"

namespace kvevict::test {

// Writes a llama2.c legacy checkpoint of `model` (RoPE tables as zeros) and a matching tokenizer.bin.
inline std::string write_llama2c(const Model& m, const std::string& name, bool untied) {
  const ModelConfig& c = m.config;
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/model.bin";
  std::ofstream out(path, std::ios::binary);
  const int32_t header[7] = {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                             untied ? -c.vocab_size : c.vocab_size, c.context_length};
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  auto put = [&](const std::vector<float>& v) { out.write(reinterpret_cast<const char*>(v.data()), v.size() * 4); };
  const Weights& w = m.weights;
  put(w.token_embedding);
  for (auto member : {&LayerWeights::attn_norm, &LayerWeights::wq, &LayerWeights::wk, &LayerWeights::wv, &LayerWeights::wo,
                      &LayerWeights::ffn_norm, &LayerWeights::w_gate, &LayerWeights::w_down, &LayerWeights::w_up}) {
    for (const auto& layer : w.layers) put(layer.*member);
  }
  put(w.final_norm);
  put(std::vector<float>(static_cast<size_t>(c.context_length) * c.head_dim, 0.0f));
  if (untied) put(w.output);
  out.close();
  std::ofstream tok(dir + "/tokenizer.bin", std::ios::binary);
  const int32_t max_len = 6;
  tok.write(reinterpret_cast<const char*>(&max_len), 4);
  for (int i = 0; i < c.vocab_size; ++i) {
    const std::string piece = i < 3 ? std::string(i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>")
                              : i < 259 ? [&] { char b[8]; std::snprintf(b, sizeof b, "<0x%02X>", i - 3); return std::string(b); }()
                                        : "t" + std::to_string(i);
    const float score = 0;
    const int32_t len = static_cast<int32_t>(std::min<size_t>(piece.size(), 6));
    tok.write(reinterpret_cast<const char*>(&score), 4);
    tok.write(reinterpret_cast<const char*>(&len), 4);
    tok.write(piece.data(), len);
  }
  return path;
}

inline ModelConfig llama2c_config() {
  ModelConfig c;
  c.name = "llama2c-test";
  c.n_layers = 2, c.dim = 24, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 6, c.hidden_dim = 40;
  c.vocab_size = 300, c.context_length = 64;
  return c;
}

}  // namespace kvevict::test
