// bench_decoder: prefill and decode throughput of the CPU reference decoder, beside the machine's
// own SGEMM rate and memory bandwidth measured here, so the percentages are of this machine.
//   bench_decoder [-m MODEL] [--threads N] [--prefill 512,2048,8192] [--context 4096] [--decode-tokens 32]
//                 [--weights native|f32] [--no-machine] [--json]
//                 [--kv-type f16|bf16|f32]  (KV cache element type, default f16)
// MODEL defaults to the SmolLM2 GGUF when it loads, else synthetic:smollm2-135m. --no-machine skips the
// SGEMM and bandwidth probes (their 1 GiB buffer would dominate the peak RSS); --json prints one JSON
// object with the figures (bench/compare_llamacpp reads it).
#include <cblas.h>
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "core/decode/blas_kernels.h"
#include "core/decode/cpu_ops.h"
#include "core/decode/decoder.h"
#include "core/model/model.h"

using namespace kvevict;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// CPU seconds used by the whole process: wall time much above cpu / threads means the machine was busy.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Rate {
  double wall = 0;  // GFLOP per wall second
  double cpu = 0;   // GFLOP per CPU second (robust to a busy machine, for kernel efficiency)
};

// OpenBLAS's own multithreaded SGEMM on an n x n x n product, best of `reps`.
Rate machine_sgemm_gflops(int threads, int n = 2048, int reps = 3) {
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  openblas_set_num_threads(threads);
  Rate best;
  for (int r = 0; r < reps + 1; ++r) {  // the first run warms OpenBLAS's threads and buffers
    const auto t = Clock::now();
    const double c0 = process_cpu_seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best.wall = std::max(best.wall, 2.0 * n * n * n / seconds_since(t) / 1e9);
    best.cpu = std::max(best.cpu, 2.0 * n * n * n / (process_cpu_seconds() - c0) / 1e9);
  }
  openblas_set_num_threads(1);
  return best;
}

// Read bandwidth: `threads` threads summing a 1 GiB buffer (decode streams weights read-only), best of 3.
double machine_read_gbps(int threads) {
  const size_t n = (size_t(1) << 30) / sizeof(float);
  std::vector<float> buf(n);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; ++i) buf[i] = float(i & 1023);
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < 3; ++r) {
    const auto t = Clock::now();
    float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      // 16 independent accumulators per thread, so the adds never limit the read rate.
      float acc[16] = {};
#pragma omp for schedule(static)
      for (size_t block = 0; block < n / 16; ++block) {
        const float* p = buf.data() + block * 16;
        for (int j = 0; j < 16; ++j) acc[j] += p[j];
      }
      for (float a : acc) total += a;
    }
    best = std::max(best, n * sizeof(float) / seconds_since(t) / 1e9);
    sink = sink + total;
  }
  return best;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoi(item));
  return out;
}

// Bytes of the weight matrices a one-token forward reads (layers and classifier), as stored.
double matrix_bytes(const Model& m) {
  const ModelConfig& c = m.config;
  const Weights& w = m.weights;
  double bytes = static_cast<double>(w.classifier_matrix(c.vocab_size, c.dim).bytes());
  static const NativeLayer none;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    const NativeLayer& N = w.native_layers.empty() ? none : w.native_layers[l];
    for (const TypedMatrix& t : {Weights::matrix(L.wq, N.wq, c.q_dim(), c.dim), Weights::matrix(L.wk, N.wk, c.kv_dim(), c.dim),
                                 Weights::matrix(L.wv, N.wv, c.kv_dim(), c.dim), Weights::matrix(L.wo, N.wo, c.dim, c.q_dim()),
                                 Weights::matrix(L.w_gate, N.w_gate, c.hidden_dim, c.dim),
                                 Weights::matrix(L.w_up, N.w_up, c.hidden_dim, c.dim),
                                 Weights::matrix(L.w_down, N.w_down, c.dim, c.hidden_dim)}) {
      bytes += static_cast<double>(t.bytes());
    }
  }
  return bytes;
}

std::unique_ptr<Model> load_default_model(const LoadOptions& options) {
  const std::string gguf = bench::default_smollm2_path();
  try {
    return load_model(gguf, options);
  } catch (const std::exception& e) {
    std::cout << "note: " << e.what() << "; using synthetic:smollm2-135m\n";
    return load_model("synthetic:smollm2-135m");
  }
}

// n random token ids below vocab.
std::vector<int> random_tokens(std::mt19937& rng, int n, int vocab) {
  std::vector<int> t(n);
  for (int& v : t) v = static_cast<int>(rng() % vocab);
  return t;
}

// The command line's settings.
struct Args {
  std::string model_path;
  int threads = 2, context = 4096, decode_tokens = 32, repeat = 2;
  bool probe_machine = true, json = false;
  LoadOptions load;
  std::vector<int> prefill = {512, 2048, 8192};
  std::string kv_type = "f16";
};

// Fills `a` from the command line; the exit code of a usage error, or -1.
int parse_args(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << arg << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "-m") a.model_path = value();
    else if (arg == "--threads") a.threads = std::stoi(value());
    else if (arg == "--prefill") a.prefill = parse_list(value());
    else if (arg == "--context") a.context = std::stoi(value());
    else if (arg == "--decode-tokens") a.decode_tokens = std::stoi(value());
    else if (arg == "--repeat") a.repeat = std::max(1, std::stoi(value()));
    else if (arg == "--kv-type") a.kv_type = value();
    else if (arg == "--no-machine") a.probe_machine = false;
    else if (arg == "--json") a.json = true;
    else if (arg == "--weights") {
      const auto w = parse_weight_storage(value());
      if (!w) {
        std::cerr << "--weights: native or f32\n";
        return 2;
      }
      a.load.weights = *w;
    } else {
      std::cerr << "usage: bench_decoder [-m MODEL] [--threads N] [--prefill 512,2048,8192] [--context 4096] "
                   "[--decode-tokens 32] [--repeat 2] [--weights native|f32] [--kv-type f16|bf16|f32] [--no-machine] [--json]\n"
                   "Each figure is the best of --repeat runs (the machine may be shared).\n";
      return 2;
    }
  }
  return -1;
}

// Where the figures go: the human lines (discarded with --json) and the JSON object.
struct Report {
  std::ostream& out;
  std::ostringstream& js;
};

// One line per prefill length: the best of `repeat` runs, against the machine's SGEMM rate.
void prefill_lines(Decoder& decoder, const ModelConfig& c, const Args& a, const Rate& sgemm_rate, double layer_weights,
                   double classifier, std::mt19937& rng, Report r) {
  for (int n : a.prefill) {
    if (n > c.context_length) r.out << "note: " << n << " tokens exceed the model's context " << c.context_length << "\n";
    const auto tokens = random_tokens(rng, n, c.vocab_size);
    double s = 1e30, cpu = 0;
    for (int rep = 0; rep < a.repeat; ++rep) {
      decoder.reset();
      const auto t = Clock::now();
      const double c0 = process_cpu_seconds();
      decoder.forward(tokens);
      const double wall = seconds_since(t);
      if (wall < s) s = wall, cpu = process_cpu_seconds() - c0;
    }
    // Causal attention: query i sees i + 1 keys; QK^T and PV are 2 flops per multiply-add each.
    const double attention = 2.0 * 2.0 * c.head_dim * c.n_heads * c.n_layers * (double(n) * (n + 1) / 2);
    const double flops = 2.0 * n * layer_weights + attention + 2.0 * classifier;
    const double gflops = flops / s / 1e9;
    r.js << ",\"prefill_" << n << "_tok_s\":" << n / s;
    r.out << "prefill " << n << " tokens: " << s << " s, " << n / s << " tokens/s, " << gflops << " GFLOP/s = "
          << 100.0 * gflops / sgemm_rate.wall << "% of SGEMM; per CPU-second " << flops / cpu / 1e9 << " = "
          << 100.0 * (flops / cpu / 1e9) / sgemm_rate.cpu << "% of SGEMM's (cpu " << cpu << " s)\n";
  }
}

// Decode throughput at `context`: the best of `repeat` runs of decode_tokens greedy steps, each
// from the same context length, against the bandwidth bound of reading the weights (and the cache).
void decode_line(Decoder& decoder, const Model& model, const Args& a, double bandwidth, std::mt19937& rng, Report r) {
  const ModelConfig& c = model.config;
  const int context = a.context;
  decoder.reset();
  const auto prompt = random_tokens(rng, context, c.vocab_size);
  decoder.forward(prompt);
  const size_t kv_bytes = decoder.cache().bytes_in_use();
  int token = prompt.back();
  double s = 1e30, cpu = 0;
  for (int rep = 0; rep < a.repeat; ++rep) {
    const auto t = Clock::now();
    const double c0 = process_cpu_seconds();
    for (int i = 0; i < a.decode_tokens; ++i) {
      const auto& logits = decoder.forward(std::span<const int>(&token, 1));
      token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    const double wall = seconds_since(t);
    if (wall < s) s = wall, cpu = process_cpu_seconds() - c0;
    // Back to the same context length so every repetition decodes at `context`.
    for (int l = 0; l < c.n_layers; ++l) {
      for (int h = 0; h < c.n_kv_heads; ++h) {
        std::vector<int> first(context);
        for (int i = 0; i < context; ++i) first[i] = i;
        decoder.cache().keep(l, h, first);
      }
    }
    decoder.set_position(context);
  }
  const double tps = a.decode_tokens / s;
  const double weight_bytes = matrix_bytes(model);
  const double limit = bandwidth * 1e9 / weight_bytes;
  const double limit_with_kv = bandwidth * 1e9 / (weight_bytes + kv_bytes);
  r.out << "decode at " << context << " context: " << tps << " tokens/s (" << a.decode_tokens << " tokens, cpu " << cpu
        << " s)\n";
  r.out << "  weights read per token: " << weight_bytes / 1e6 << " MB; bandwidth limit " << limit
        << " tokens/s; achieved " << 100.0 * tps / limit << "%\n";
  r.out << "  with the KV cache (" << kv_bytes / 1e6 << " MB): limit " << limit_with_kv << " tokens/s; achieved "
        << 100.0 * tps / limit_with_kv << "%\n";
  r.out << "peak RSS: " << bench::peak_rss_mib() << " MiB\n";
  r.js << ",\"decode_context\":" << context << ",\"decode_tok_s\":" << tps << ",\"weight_mb_per_token\":"
       << weight_bytes / 1e6 << ",\"kv_mb\":" << kv_bytes / 1e6 << ",\"peak_rss_mib\":" << bench::peak_rss_mib() << "}";
}

}  // namespace

int main(int argc, char** argv) {
  kvevict::use_matching_blas_kernels();  // the figures need the CPU's SGEMM kernels
  Args a;
  if (const int rc = parse_args(argc, argv, a); rc >= 0) return rc;
  KvType kv;
  try {
    kv = parse_kv_type(a.kv_type, "--kv-type");
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  const auto model = a.model_path.empty() ? load_default_model(a.load) : load_model(a.model_path, a.load);
  const ModelConfig& c = model->config;
  auto decoder = make_cpu_decoder(*model, {.threads = a.threads, .kv_type = kv});

  const Rate sgemm_rate = a.probe_machine ? machine_sgemm_gflops(a.threads) : Rate{1, 1};
  const double bandwidth = a.probe_machine ? machine_read_gbps(a.threads) : 0;
  std::ostringstream js;  // --json: the figures as one object
  js << "{\"model\":\"" << model->info.path << "\",\"weights\":\"" << weight_storage_name(a.load.weights)
     << "\",\"threads\":" << a.threads;
  std::ostringstream human_discarded;  // --json prints only the object
  std::ostream& out = a.json ? static_cast<std::ostream&>(human_discarded) : std::cout;
  out << "model: " << model->info.path << " (" << model->info.format << "), " << c.n_layers << " layers, dim "
      << c.dim << ", heads " << c.n_heads << "/" << c.n_kv_heads << ", head dim " << c.head_dim << "\n";
  out << "threads: " << a.threads << "\n";
  out << "machine: SGEMM (OpenBLAS, 2048^3) " << sgemm_rate.wall << " GFLOP/s (" << sgemm_rate.cpu
      << " per CPU-second); read bandwidth (1 GiB sum) " << bandwidth << " GB/s\n";

  // Multiply-adds per token through the layer weights; attention adds 2 * head_dim per (query, key) pair per head.
  const double layer_weights = double(c.n_layers) *
                               (double(c.dim) * c.q_dim() * 2 + 2.0 * c.dim * c.kv_dim() + 3.0 * c.dim * c.hidden_dim);
  const double classifier = double(c.vocab_size) * c.dim;
  std::mt19937 rng(1);
  prefill_lines(*decoder, c, a, sgemm_rate, layer_weights, classifier, rng, {out, js});
  decode_line(*decoder, *model, a, bandwidth, rng, {out, js});
  if (a.json) std::cout << js.str() << "\n";
  return 0;
}
