// Writes the seed corpus of every fuzz target into <out>/<target>/: valid files built with the
// test writers (tests/core/gguf_writer.h, tests/core/safetensors_writer.h), stories260K's files,
// the built-in policies and golden error cases, and the eval configs. Run by scripts/fuzz.sh so no
// corpus is a committed binary.   usage: fuzz_seeds OUT_DIR REPO_DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/gguf_writer.h"
#include "core/safetensors_writer.h"

namespace fs = std::filesystem;
using namespace kvevict;

namespace {

fs::path out_dir;

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(out_dir / target);
  test::write_bytes(out_dir / target / name, bytes);
}
std::string bytes_of(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }
std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void copy_yaml(const std::string& target, const fs::path& dir, const std::string& prefix) {
  if (!fs::is_directory(dir)) return;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".yaml") seed(target, prefix + e.path().filename().string(), read(e.path()));
  }
}

void gguf_seeds() {
  for (uint32_t type : {0u, 1u, 8u}) {
    for (bool spm : {false, true}) {
      test::TinyLlama m;
      m.n_layers = 1, m.dim = 32, m.n_heads = 4, m.n_kv_heads = 2, m.head_dim = 8, m.hidden_dim = 32, m.context = 16;  // Q8_0 rows: 32
      m.weight_type = type;
      m.spm_tokenizer = spm;
      m.tied = type != 1;
      seed("gguf", "tiny_t" + std::to_string(type) + (spm ? "_spm" : "_bpe") + ".gguf", bytes_of(m.writer().bytes()));
    }
  }
  test::GgufWriter w;  // metadata of every value type, no tensors
  w.add_u32("general.alignment", 64);
  w.add_i32("a.i32", -5);
  w.add_u64("a.u64", 7);
  w.add_f64("a.f64", 0.5);
  w.add_bool("a.bool", true);
  w.add_string("a.string", "text");
  w.add_array("a.f32s", test::GgufWriter::F32, std::vector<float>{1.0f, 2.0f});
  w.add_string_array("a.strings", {"x", "y"});
  seed("gguf", "metadata.gguf", bytes_of(w.bytes()));
}

void hf_seeds() {
  const std::vector<ModelConfig> configs = {test::tiny_config(4, 2, 6), test::tiny_config(2, 1, 4, "mistral"),
                                            test::tiny_config(4, 4, 4, "qwen2")};
  for (size_t i = 0; i < configs.size(); ++i) {
    ModelConfig c = configs[i];
    seed("hf_config", "config" + std::to_string(i) + ".json", test::hf_config_json(c).dump(2));
    c.n_layers = 1;
    const Weights w = test::random_weights(c, 1 + i);
    for (auto dtype : {test::StDtype::F32, test::StDtype::F16, test::StDtype::BF16}) {
      seed("safetensors", "model" + std::to_string(i) + "_" + test::st_dtype_name(dtype) + ".safetensors",
           test::st_bytes(test::hf_tensors(c, w, dtype)));
    }
  }
  nlohmann::json scaled = test::hf_config_json(configs[0]);
  scaled["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  seed("hf_config", "config_llama3_scaling.json", scaled.dump());
  seed("hf_tokenizer", "tokenizer.json", test::tiny_tokenizer_json().dump());
  seed("hf_tokenizer", "tokenizer_merge_arrays.json", test::tiny_tokenizer_json(true).dump());
  seed("hf_tokenizer", "tokenizer_gpt2.json",
       test::tiny_tokenizer_json(false, {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                                         {"use_regex", true}}).dump());
  // SentencePiece-style (Llama 2): byte_fallback, Metaspace, <0xNN> pieces.
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  char hex[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    vocab[hex] = 3 + b;
  }
  const std::string sp = "\xE2\x96\x81";
  vocab[sp] = 259, vocab["h"] = 260, vocab["i"] = 261, vocab["hi"] = 262, vocab[sp + "hi"] = 263;
  nlohmann::json spm = {
      {"version", "1.0"},
      {"added_tokens", {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                        {{"id", 1}, {"content", "<s>"}, {"special", true}},
                        {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", "first"}, {"split", false}}},
      {"model", {{"type", "BPE"}, {"byte_fallback", true}, {"unk_token", "<unk>"}, {"vocab", vocab},
                 {"merges", {"h i", sp + " hi"}}}}};
  seed("hf_tokenizer", "tokenizer_spm.json", spm.dump());
}

void llama2c_seeds(const fs::path& stories) {
  const std::string tok = read(stories / "tok512.bin");
  seed("spm_tokenizer_bin", "tok512.bin", std::string("\xFF\x01", 2) + tok);  // vocab_size 512
  seed("spm_tokenizer_bin", "tok512_as_300.bin", std::string("\x2B\x01", 2) + tok);
  for (int32_t vocab : {512, -512}) {  // tied, and a separate classifier
    const int32_t dim = 8, hidden = 16, layers = 1, heads = 2, kv_heads = 1, seq = 8;
    const int32_t header[7] = {dim, hidden, layers, heads, kv_heads, vocab, seq};
    const int32_t V = 512, hd = dim / heads, kv = kv_heads * hd;
    size_t floats = V * dim + layers * (dim + dim * dim + 2 * kv * dim + dim * dim + dim + 3 * hidden * dim) + dim +
                    2 * seq * (hd / 2);
    if (vocab < 0) floats += V * dim;
    std::string bytes(reinterpret_cast<const char*>(header), sizeof header);
    for (size_t i = 0; i < floats; ++i) {
      const float v = static_cast<float>(static_cast<int>(i % 17) - 8) / 64.0f;
      bytes.append(reinterpret_cast<const char*>(&v), 4);
    }
    seed("llama2c", vocab > 0 ? "tiny_tied.bin" : "tiny_classifier.bin", bytes);
  }
}

void text_seeds() {
  const std::vector<std::string> texts = {"Once upon a time, there was a little girl named Lily.",
                                          "hello world 12345 the  \n\n  x",
                                          "caf\xC3\xA9 \xE2\x96\x81 \xF0\x9F\x98\x80 <|im_start|>user\n<s>",
                                          [] { const char t[] = "\x00\xff\xfe bad utf8 \xC3"; return std::string(t, sizeof t - 1); }()};
  for (int k = 0; k < 5; ++k) {
    for (size_t i = 0; i < texts.size(); ++i) {
      seed("tokenizer_text", "t" + std::to_string(k) + "_" + std::to_string(i), std::string(1, static_cast<char>(k)) + texts[i]);
    }
  }
}

void eval_seeds(const fs::path& repo) {
  const std::string model = (fs::path(KVEVICT_SHARED_DIR) / "models/stories260K/stories260K.bin").lexically_normal().string();
  copy_yaml("eval_config", repo / "configs", "");
  seed("eval_config", "tasks.yaml",
       "name: fuzz\nmodel: " + model + "\nseed: 3\nthreads: 1\nlimit: 2\nchat_template: none\n"
       "tasks:\n  needle: {lengths: [64, 128], depths: [0, 50]}\n  passkey: {lengths: [100], samples: 2}\n"
       "  kv_retrieval: {lengths: [90], question: agnostic}\n  fidelity: {lengths: [64], continuation: 8, greedy: 4}\n"
       "policies:\n  - h2o\n  - {policy: snapkv, label: s, params: {window: 4}}\nbudgets: [\"10%\", \"32\", full]\n");
  seed("eval_config", "longbench.yaml",
       "model: " + model + "\ntasks:\n  longbench: {path: /tmp, datasets: [narrativeqa, trec], max_length: 100}\n"
       "policies: [full]\nbudgets: [full]\n");
  seed("longbench", "records.jsonl",
       "{\"input\": \"Who?\", \"context\": \"Once there was a fox. The fox ran.\", \"answers\": [\"fox\"], "
       "\"all_classes\": null, \"_id\": \"a1\"}\n\n"
       "{\"input\": \"\", \"context\": \"" + std::string(600, 'x') + "\", \"answers\": [\"x\", \"y\"], "
       "\"all_classes\": [\"p\", \"q\"]}\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fuzz_seeds OUT_DIR REPO_DIR\n");
    return 2;
  }
  out_dir = argv[1];
  const fs::path repo = argv[2];
  gguf_seeds();
  hf_seeds();
  llama2c_seeds(fs::path(KVEVICT_SHARED_DIR) / "models/stories260K");
  text_seeds();
  copy_yaml("policy", repo / "policies", "");
  copy_yaml("policy", repo / "policies/examples", "example_");
  copy_yaml("policy", repo / "tests/dsl/golden", "golden_");
  // Once a crash: window and protect expressions undefined at prompt_len 0.
  seed("policy", "edge_prompt_len.yaml",
       "name: z\nabout: window infinite at prompt_len 0\nobserve: {window: 1 / prompt_len}\n"
       "protect: {recent: \"log(prompt_len - 5)\"}\nscore: |\n  score[t] = mean(h, q: A[h, q, t])\n");
  eval_seeds(repo);
  std::printf("fuzz_seeds: wrote the seed corpora under %s\n", out_dir.string().c_str());
  return 0;
}
