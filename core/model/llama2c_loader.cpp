// llama2.c legacy (version 0) checkpoints: a 7 x int32 header, then float32 tensors in a fixed
// order (see ../shared/models/README.md §1.4). A negative vocab_size means a separate classifier.
#include <cmath>
#include <filesystem>

#include "core/model/model.h"
#include "core/tokenizer/spm_tokenizer.h"
#include "core/util/byte_reader.h"

namespace kvevict {

namespace {

struct Llama2cHeader {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

// NaN or infinite weights only ever produce garbage logits (the GGUF and HF loaders refuse them
// too): the first one is reported with its tensor, layer and element.
void check_finite(const ByteReader& r, const std::vector<float>& values, const std::string& tensor) {
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]))
      r.fail("tensor " + tensor + " holds a non-finite value (" + (std::isnan(values[i]) ? "NaN" : "inf") +
             ") at element " + std::to_string(i));
}

std::vector<float> read_floats(ByteReader& r, size_t count, const std::string& tensor) {
  std::vector<float> out(count);
  const uint8_t* p = r.take(checked_mul(count, sizeof(float), r.file()), tensor.c_str());
  std::memcpy(out.data(), p, count * sizeof(float));
  check_finite(r, out, tensor);
  return out;
}

// One [L][rows] stacked tensor, split per layer into `member`.
void read_per_layer(ByteReader& r, Weights& w, std::vector<float> LayerWeights::*member, size_t per_layer, const char* what) {
  for (size_t l = 0; l < w.layers.size(); ++l)
    w.layers[l].*member = read_floats(r, per_layer, std::string(what) + " (layer " + std::to_string(l) + ")");
}

// tokenizer.bin next to the checkpoint, else llama2.c's tok<vocab>.bin naming (e.g. tok512.bin).
std::string find_tokenizer(const std::string& checkpoint, int vocab_size) {
  const std::filesystem::path dir = std::filesystem::path(checkpoint).parent_path();
  for (const std::string& name : {std::string("tokenizer.bin"), "tok" + std::to_string(vocab_size) + ".bin"}) {
    const auto candidate = dir / name;
    std::error_code ec;  // any kind of file counts: opening it then says what is wrong with it
    if (std::filesystem::exists(candidate, ec)) return candidate.string();
  }
  throw ModelError(checkpoint, "no tokenizer.bin or tok" + std::to_string(vocab_size) +
                                   ".bin next to the checkpoint; give one with --tokenizer");
}

}  // namespace

std::unique_ptr<Model> load_llama2c(const std::string& checkpoint, const std::string& tokenizer_path) {
  MappedFile file(checkpoint, "llama2.c checkpoint");
  ByteReader r(file.data(), file.size(), checkpoint);
  const auto h = r.read<Llama2cHeader>();
  if (h.vocab_size == 0 || h.vocab_size == INT32_MIN) r.fail("invalid vocab_size " + std::to_string(h.vocab_size));
  auto model = std::make_unique<Model>();
  ModelConfig& c = model->config;
  c.architecture = "llama";
  c.name = std::filesystem::path(checkpoint).stem().string();
  c.n_layers = h.n_layers;
  c.dim = h.dim;
  c.n_heads = h.n_heads;
  c.n_kv_heads = h.n_kv_heads;
  c.hidden_dim = h.hidden_dim;
  c.vocab_size = h.vocab_size < 0 ? -h.vocab_size : h.vocab_size;
  c.context_length = h.seq_len;
  c.tied_embeddings = h.vocab_size > 0;
  c.rope_theta = 10000.0f;
  c.norm_eps = 1e-5f;
  c.rope_style = RopeStyle::AdjacentPairs;
  if (h.n_heads <= 0 || h.dim <= 0 || h.dim % h.n_heads != 0) {
    r.fail("dim " + std::to_string(h.dim) + " is not a positive multiple of n_heads " + std::to_string(h.n_heads));
  }
  c.head_dim = h.dim / h.n_heads;
  c.validate(checkpoint);

  // Size check before touching the tensors: every count is bounded by validate(), so no overflow.
  const size_t D = c.dim, Hd = c.hidden_dim, L = c.n_layers, V = c.vocab_size, KV = c.kv_dim(), Q = c.q_dim();
  const size_t half = c.head_dim / 2;
  size_t floats = V * D + L * (D + Q * D + 2 * KV * D + D * Q + D + 3 * Hd * D) + D + 2 * c.context_length * half;
  if (!c.tied_embeddings) floats += V * D;
  const size_t expected = sizeof(Llama2cHeader) + floats * sizeof(float);
  if (file.size() != expected) {
    r.fail("size " + std::to_string(file.size()) + " bytes does not match the header (expected " +
           std::to_string(expected) + " bytes for a legacy llama2.c checkpoint)");
  }

  Weights& w = model->weights;
  w.token_embedding = read_floats(r, V * D, "token embedding");
  w.layers.resize(L);
  read_per_layer(r, w, &LayerWeights::attn_norm, D, "attention norm");
  read_per_layer(r, w, &LayerWeights::wq, Q * D, "wq");
  read_per_layer(r, w, &LayerWeights::wk, KV * D, "wk");
  read_per_layer(r, w, &LayerWeights::wv, KV * D, "wv");
  read_per_layer(r, w, &LayerWeights::wo, D * Q, "wo");
  read_per_layer(r, w, &LayerWeights::ffn_norm, D, "ffn norm");
  read_per_layer(r, w, &LayerWeights::w_gate, Hd * D, "w1");
  read_per_layer(r, w, &LayerWeights::w_down, D * Hd, "w2");
  read_per_layer(r, w, &LayerWeights::w_up, Hd * D, "w3");
  w.final_norm = read_floats(r, D, "final norm");
  r.take(2 * c.context_length * half * sizeof(float), "RoPE tables");  // unused: RoPE is computed
  if (!c.tied_embeddings) w.output = read_floats(r, V * D, "classifier");

  const std::string tok = tokenizer_path.empty() ? find_tokenizer(checkpoint, c.vocab_size) : tokenizer_path;
  SpmVocab vocab = read_llama2c_tokenizer(tok, c.vocab_size);
  vocab.bos_id = 1;
  vocab.eos_id = 2;
  vocab.unk_id = 0;
  model->tokenizer = make_spm_tokenizer(std::move(vocab));

  ModelInfo& info = model->info;
  info.format = "llama2c";
  info.path = checkpoint;
  const int64_t n_tensors = 1 + 9 * static_cast<int64_t>(L) + 1 + (c.tied_embeddings ? 0 : 1);
  info.tensor_types["F32"] = n_tensors;
  info.n_params = static_cast<int64_t>(floats - 2 * c.context_length * half);
  info.chat_template = "none";
  return model;
}

}  // namespace kvevict
