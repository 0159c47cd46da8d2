#include "core/model/synthetic_folder.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/decode/kv_type_scalar.h"
#include "core/model/hf_config.h"
#include "core/model/synthetic_model.h"
#include "core/tokenizer/gpt2_byte_map.h"
#include "core/util/error.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;

constexpr int kBosId = 256, kEosId = 257;  // make_byte_tokenizer's ids after the 256 bytes

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw RuntimeError("could not write " + path.string());
}

// The byte tokenizer as tokenizer.json: GPT-2's byte stand-ins as the vocabulary (so ids are the
// bytes), a ByteLevel pre-tokenizer without a prefix space, no merges, BOS and EOS as specials.
std::string byte_tokenizer_json() {
  const Gpt2ByteMap& bytes = Gpt2ByteMap::instance();
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[bytes.encode(static_cast<uint8_t>(b))] = b;
  nlohmann::json added = nlohmann::json::array();
  for (const auto& [id, text] : {std::pair{kBosId, "<s>"}, std::pair{kEosId, "</s>"}})
    added.push_back({{"id", id}, {"content", text}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  const nlohmann::json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  return nlohmann::json({{"version", "1.0"},
                         {"truncation", nullptr},
                         {"padding", nullptr},
                         {"added_tokens", added},
                         {"normalizer", nullptr},
                         {"pre_tokenizer", byte_level},
                         {"post_processor", nullptr},
                         {"decoder", byte_level},
                         {"model",
                          {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                           {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                           {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
                           {"merges", nlohmann::json::array()}}}})
      .dump();
}

// The safetensors header (8-byte little-endian length, then JSON padded with spaces to a multiple
// of 8 so the data that follows is aligned) for `tensors` stored back to back, 2 bytes per value.
std::string shard_header(const std::vector<SyntheticTensor>& tensors, const char* dtype) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  uint64_t offset = 0;
  for (const SyntheticTensor& t : tensors) {
    const uint64_t bytes = 2 * static_cast<uint64_t>(t.count());
    header[t.hf_name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
  return out + text;
}

}  // namespace

uint64_t write_synthetic_hf_folder(const ModelConfig& config, uint64_t seed, const std::string& dir,
                                   SyntheticFolderType type) {
  config.validate(config.name.empty() ? "synthetic model" : config.name);
  // config.json says qkv biases only by the architecture (Qwen2 has them, Llama and Mistral not).
  if (config.qkv_bias != (config.architecture == "qwen2"))
    throw UsageError("a synthetic model folder of architecture " + config.architecture +
                     (config.qkv_bias ? " cannot hold q/k/v biases" : " needs q/k/v biases"));
  if (config.vocab_size <= kEosId)
    throw UsageError("a synthetic model folder needs vocab_size > " + std::to_string(kEosId) + " (its tokenizer's ids)");
  const bool bf16 = type == SyntheticFolderType::BF16;
  const fs::path folder(dir);
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw RuntimeError("could not create " + dir + ": " + ec.message());
  // An older shard goes first: a write that fails below must not leave it beside the new config.
  const fs::path shard = folder / "model.safetensors", partial = folder / "model.safetensors.partial";
  fs::remove(shard, ec);
  write_text(folder / "config.json", hf_config_text(config, kBosId, kEosId, bf16 ? "bfloat16" : "float16"));
  write_text(folder / "tokenizer.json", byte_tokenizer_json());

  const std::vector<SyntheticTensor> tensors = synthetic_tensors(config);
  std::ofstream out(partial, std::ios::binary | std::ios::trunc);
  const std::string header = shard_header(tensors, bf16 ? "BF16" : "F16");
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  uint64_t bytes = header.size();
  std::vector<uint16_t> words;
  for (const SyntheticTensor& t : tensors) {
    const std::vector<float> values = synthetic_values(t, seed);
    words.resize(values.size());
    const int64_t n = static_cast<int64_t>(values.size());
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) words[i] = bf16 ? kv_scalar::f32_to_bf16(values[i]) : kv_scalar::f32_to_f16(values[i]);
    out.write(reinterpret_cast<const char*>(words.data()), static_cast<std::streamsize>(2 * words.size()));
    if (!out) break;
    bytes += 2 * words.size();
  }
  out.close();
  if (!out) {
    fs::remove(partial, ec);
    throw RuntimeError("could not write " + partial.string() + " (disk full?)");
  }
  fs::rename(partial, shard, ec);
  if (ec) throw RuntimeError("could not rename " + partial.string() + " to " + shard.string() + ": " + ec.message());
  return bytes;
}

}  // namespace kvevict
