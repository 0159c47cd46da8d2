// A Hugging Face folder runs through the decoder with the half-split (rotate_half) RoPE and gives
// the logits that the same model gives in other conventions:
//   1. a GGUF (adjacent-pair RoPE, Meta row order) and the HF folder made from it by the inverse
//      of the HF conversion permutation give the same logits;
//   2. an HF folder (Qwen2 biases, GQA, odd head counts, linear rope scaling) matches a plain
//      double-precision forward pass written here directly from the HF formulation.
#include <gtest/gtest.h>

#include <cmath>

#include "core/decode/decoder.h"
#include "core/model/model.h"
#include "gguf_writer.h"
#include "safetensors_writer.h"
#include "gguf_test_util.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;

// HF keeps, per head, rotation partner i + head_dim/2 of coordinate i; Meta/GGUF keeps 2i + 1 of 2i.
// HF row (head, i) = Meta row (head, 2i); HF row (head, i + half) = Meta row (head, 2i + 1).
std::vector<float> adjacent_to_half_split(const std::vector<float>& rows, int n_heads, int head_dim, int cols) {
  std::vector<float> out(rows.size());
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    for (int i = 0; i < half; ++i) {
      for (int j = 0; j < 2; ++j) {
        const float* src = &rows[(static_cast<size_t>(h) * head_dim + 2 * i + j) * cols];
        float* dst = &out[(static_cast<size_t>(h) * head_dim + j * half + i) * cols];
        std::copy(src, src + cols, dst);
      }
    }
  }
  return out;
}

std::vector<std::vector<float>> all_logits(const Model& model, const std::vector<int>& tokens) {
  auto decoder = make_cpu_decoder(model, {.threads = 1, .kv_type = KvType::F32});
  std::vector<float> flat;
  decoder->forward(tokens, nullptr, &flat);
  const size_t V = model.config.vocab_size;
  std::vector<std::vector<float>> rows;
  for (size_t t = 0; t < tokens.size(); ++t) rows.emplace_back(flat.begin() + t * V, flat.begin() + (t + 1) * V);
  return rows;
}

float max_abs(const std::vector<std::vector<float>>& rows) {
  float m = 0;
  for (const auto& r : rows) {
    for (float x : r) m = std::max(m, std::fabs(x));
  }
  return m;
}

struct GgufCase {
  int n_heads, n_kv_heads, head_dim, dim;
  bool tied;
};

class HfEqualsGguf : public ::testing::TestWithParam<GgufCase> {};

TEST_P(HfEqualsGguf, SameLogitsThroughTheDecoder) {
  const GgufCase c = GetParam();
  test::TinyLlama spec;
  spec.n_heads = c.n_heads;
  spec.n_kv_heads = c.n_kv_heads;
  spec.head_dim = c.head_dim;
  spec.dim = c.dim;
  spec.write_key_length = c.head_dim * c.n_heads != c.dim;
  spec.tied = c.tied;
  spec.seed = 17u + c.n_heads;
  const std::string gguf_path = test::temp_file_path("hf_equiv_" + std::to_string(c.n_heads) + "_" +
                                                std::to_string(c.n_kv_heads) + "_" + std::to_string(c.head_dim) + ".gguf");
  spec.writer().write(gguf_path);
  const auto gguf = load_gguf(gguf_path);
  fs::remove(gguf_path);
  ASSERT_EQ(gguf->config.rope_style, RopeStyle::AdjacentPairs);

  // The same model as a Hugging Face folder: q/k rows in HF order, config.json with the same numbers.
  ModelConfig hf_config = gguf->config;
  hf_config.rope_style = RopeStyle::HalfSplit;
  Weights hf_weights = gguf->weights;
  for (auto& layer : hf_weights.layers) {
    layer.wq = adjacent_to_half_split(layer.wq, c.n_heads, c.head_dim, c.dim);
    layer.wk = adjacent_to_half_split(layer.wk, c.n_kv_heads, c.head_dim, c.dim);
  }
  const fs::path dir = test::fresh_dir("hf_equiv_" + std::to_string(c.n_heads) + "_" + std::to_string(c.n_kv_heads) +
                                       "_" + std::to_string(c.head_dim));
  test::write_hf_folder(dir, hf_config, hf_weights);
  const auto hf = load_hf_folder(dir.string());
  ASSERT_EQ(hf->config.rope_style, RopeStyle::HalfSplit);

  const std::vector<int> tokens = {1, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 5, 200};
  const auto want = all_logits(*gguf, tokens);
  const auto got = all_logits(*hf, tokens);
  const float tol = 1e-4f * std::max(1.0f, max_abs(want));
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (size_t v = 0; v < want[t].size(); ++v) {
      ASSERT_NEAR(got[t][v], want[t][v], tol) << "token " << t << " logit " << v;
    }
  }
  // Guard against a vacuous pass: the logits depend on position (RoPE did something).
  EXPECT_GT(std::fabs(want[3][0] - want[2][0]) + std::fabs(want[4][7] - want[3][7]), 1e-3f);
}

INSTANTIATE_TEST_SUITE_P(Geometries, HfEqualsGguf,
                         ::testing::Values(GgufCase{4, 4, 8, 32, true},     // GQA ratio 1
                                           GgufCase{4, 2, 8, 32, false},    // ratio 2, untied output
                                           GgufCase{6, 2, 6, 32, true},     // ratio 3, head_dim 6
                                           GgufCase{8, 2, 10, 32, false},   // ratio 4, head_dim 10
                                           GgufCase{3, 1, 12, 36, true}),  // ratio 3, three query heads
                         [](const auto& info) {
                           const GgufCase& c = info.param;
                           return "q" + std::to_string(c.n_heads) + "_kv" + std::to_string(c.n_kv_heads) + "_hd" +
                                  std::to_string(c.head_dim) + (c.tied ? "_tied" : "_untied");
                         });

// ---- a direct reference in double, from the HF formulation --------------------------------------

using Vec = std::vector<double>;

Vec matvec(const std::vector<float>& W, const Vec& x, size_t rows) {
  Vec y(rows, 0.0);
  const size_t cols = x.size();
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) y[r] += static_cast<double>(W[r * cols + c]) * x[c];
  }
  return y;
}

Vec rmsnorm(const Vec& x, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / x.size() + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

// transformers' apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1].
void rotate_half_rope(double* x, int head_dim, int position, const ModelConfig& c) {
  const int half = head_dim / 2;
  std::vector<double> out(head_dim);
  for (int i = 0; i < head_dim; ++i) {
    const int k = i % half;
    double inv_freq = std::pow(static_cast<double>(c.rope_theta), -2.0 * k / head_dim);
    if (c.rope_scaling.type == "linear") inv_freq /= c.rope_scaling.factor;
    const double angle = position * inv_freq;
    const double rotated = i < half ? -x[i + half] : x[i - half];
    out[i] = x[i] * std::cos(angle) + rotated * std::sin(angle);
  }
  std::copy(out.begin(), out.end(), x);
}

std::vector<Vec> hf_reference_logits(const ModelConfig& c, const Weights& w, const std::vector<int>& tokens) {
  const size_t D = c.dim, hd = c.head_dim, G = c.group_size();
  std::vector<std::vector<Vec>> keys(c.n_layers), values(c.n_layers);  // [layer][position] -> kv_dim
  std::vector<Vec> logits;
  for (size_t p = 0; p < tokens.size(); ++p) {
    Vec x(w.token_embedding.begin() + tokens[p] * D, w.token_embedding.begin() + (tokens[p] + 1) * D);
    for (int l = 0; l < c.n_layers; ++l) {
      const LayerWeights& L = w.layers[l];
      Vec xn = rmsnorm(x, L.attn_norm, c.norm_eps);
      Vec q = matvec(L.wq, xn, c.q_dim()), k = matvec(L.wk, xn, c.kv_dim()), v = matvec(L.wv, xn, c.kv_dim());
      if (c.qkv_bias) {
        for (int i = 0; i < c.q_dim(); ++i) q[i] += L.bq[i];
        for (int i = 0; i < c.kv_dim(); ++i) k[i] += L.bk[i], v[i] += L.bv[i];
      }
      for (int h = 0; h < c.n_heads; ++h) rotate_half_rope(&q[h * hd], hd, static_cast<int>(p), c);
      for (int h = 0; h < c.n_kv_heads; ++h) rotate_half_rope(&k[h * hd], hd, static_cast<int>(p), c);
      keys[l].push_back(k);
      values[l].push_back(v);
      Vec attn(c.q_dim(), 0.0);
      for (int h = 0; h < c.n_heads; ++h) {
        const size_t kvh = h / G;
        std::vector<double> s(p + 1);
        double top = -1e300;
        for (size_t t = 0; t <= p; ++t) {
          double dot = 0;
          for (size_t i = 0; i < hd; ++i) dot += q[h * hd + i] * keys[l][t][kvh * hd + i];
          s[t] = dot / std::sqrt(static_cast<double>(hd));
          top = std::max(top, s[t]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - top));
        for (size_t t = 0; t <= p; ++t) {
          for (size_t i = 0; i < hd; ++i) attn[h * hd + i] += s[t] / sum * values[l][t][kvh * hd + i];
        }
      }
      Vec o = matvec(L.wo, attn, D);
      for (size_t i = 0; i < D; ++i) x[i] += o[i];
      xn = rmsnorm(x, L.ffn_norm, c.norm_eps);
      Vec g = matvec(L.w_gate, xn, c.hidden_dim), u = matvec(L.w_up, xn, c.hidden_dim);
      for (int i = 0; i < c.hidden_dim; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      Vec down = matvec(L.w_down, g, D);
      for (size_t i = 0; i < D; ++i) x[i] += down[i];
    }
    logits.push_back(matvec(w.output_matrix(), rmsnorm(x, w.final_norm, c.norm_eps), c.vocab_size));
  }
  return logits;
}

struct RefCase {
  const char* arch;
  int n_heads, n_kv_heads, head_dim;
  bool tied;
  const char* scaling;
};

class HfEqualsDirectReference : public ::testing::TestWithParam<RefCase> {};

TEST_P(HfEqualsDirectReference, Logits) {
  const RefCase rc = GetParam();
  ModelConfig c = test::tiny_config(rc.n_heads, rc.n_kv_heads, rc.head_dim, rc.arch);
  c.tied_embeddings = rc.tied;
  c.rope_theta = 5000.0f;
  if (std::string(rc.scaling) == "linear") {
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = 2.0f;
  }
  const Weights w = test::random_weights(c, 4242);
  const fs::path dir = test::fresh_dir(std::string("hf_ref_") + rc.arch + std::to_string(rc.n_heads) +
                                       std::to_string(rc.n_kv_heads) + std::to_string(rc.head_dim) + rc.scaling);
  test::write_hf_folder(dir, c, w, {test::StDtype::F32, 2, true});
  const auto model = load_hf_folder(dir.string());

  const std::vector<int> tokens = {260, 84, 104, 101, 32, 258, 99, 97, 116, 261, 10, 50, 51};
  const auto got = all_logits(*model, tokens);
  const auto want = hf_reference_logits(c, w, tokens);
  double scale = 1.0;
  for (const auto& r : want) {
    for (double v : r) scale = std::max(scale, std::fabs(v));
  }
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (int v = 0; v < c.vocab_size; ++v) {
      ASSERT_NEAR(got[t][v], want[t][v], 2e-4 * scale) << "token " << t << " logit " << v;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, HfEqualsDirectReference,
                         ::testing::Values(RefCase{"qwen2", 4, 2, 6, true, "none"},     // biases, ratio 2
                                           RefCase{"qwen2", 6, 2, 4, false, "none"},    // biases, ratio 3, untied
                                           RefCase{"llama", 8, 2, 6, true, "linear"},   // ratio 4, linear scaling
                                           RefCase{"mistral", 3, 1, 10, false, "none"}),  // head_dim 10
                         [](const auto& info) {
                           const RefCase& c = info.param;
                           return std::string(c.arch) + "_q" + std::to_string(c.n_heads) + "_kv" +
                                  std::to_string(c.n_kv_heads) + "_hd" + std::to_string(c.head_dim) + "_" + c.scaling;
                         });

}  // namespace
}  // namespace kvevict
