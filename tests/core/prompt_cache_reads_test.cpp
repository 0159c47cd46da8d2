// The engine's declaration that its prompt calls read no cached key or value
// (ObservationRequest::cache_row_reads.prompt_start / next_block, core/engine/cache_row_reads.h),
// which lets the CUDA decoder leave a prompt's rows on the device and hand the engine a host cache
// of placeholder rows. Proof on the CPU: for every built-in policy that declares None or
// NoneGivenDecoderSignals at the prompt (but those reading key or value norms, which come with the
// positions: rowless_engine_turn_test.cpp), a run whose engine is handed the window attention as the
// CUDA decoder would (test::WindowAttentionInjector) and sees EVERY cached row poisoned (NaN keys
// and values, restored after its turn) in every declared call keeps the caches and logits of the
// run without poison, over the prompt in one call, the prompt in blocks (run.prefill_block), CAKE's
// cascading prefill, and the decode steps after them. Controls: a policy that reads the cached keys
// at the prompt declares Reads and poison changes its cache; without the injected window attention the
// engine computes A from the rows, so poison changes the cache, and marking the rows as placeholders
// then makes the engine refuse loudly (std::logic_error) instead of scoring zeros.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "core/decode/make_decoder.h"
#include "core/decode/sampler.h"
#include "core/engine/block_prefill.h"
#include "core/engine/cache_row_reads.h"
#include "core/engine/engine.h"
#include "core/engine/eviction_plan.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "cache_row_reads_harness.h"
#include "stories_prompt_test.h"
#include "window_attention_injection.h"

namespace kvevict {
namespace {

// How a run treats the calls whose rows the engine declared it does not read.
struct Harness {
  bool inject = true;   // hand the engine the window attention (as the CUDA decoder does)
  bool flag = false;    // mark the rows as placeholders (LayerSignals::cache_rows_are_placeholders)
  bool poison = false;  // NaN in every cached row during the engine's turn
  bool poison_every_call = false;  // poison calls declared Reads too (the controls)
};

// Between the decoder and the engine: computes the window attention first (over the rows as they
// are), then, in a call the engine declared it reads no row for (by the call's kind; for
// NoneGivenDecoderSignals only where the window attention was handed over, as the CUDA decoder
// decides), marks and poisons the rows for the engine's turn and puts them back afterwards (found
// by position: the engine may have moved or dropped them).
class PoisonRows : public ForwardObserver {
 public:
  PoisonRows(EvictionEngine& engine, KVCache& cache, int group, Harness h)
      : engine_(engine), injector_(engine, cache, group), h_(h) {}
  ObservationRequest request() const override {
    request_ = injector_.request();
    if (!h_.inject) request_.window_attention = 0;
    return request_;
  }
  void after_layer(const LayerSignals& signals, KVCache& cache) override {
    const LayerSignals with = h_.inject ? injector_.inject(signals) : signals;
    const CacheRowReads reads = request_.cache_row_reads.for_call(signals.first_position, signals.n_tokens);
    // Served as the CUDA decoder serves (serves_asked_signals): every signal asked for in place of
    // rows handed over, at least one asked. The CPU decoder hands the query statistics and a
    // prompt's segment attention whenever asked.
    const bool asked = request_.window_attention > 0 || request_.segment_attention.enabled() ||
                       request_.query_statistics.enabled;
    const bool served = asked && (request_.window_attention <= 0 || !with.window_attention.empty()) &&
                        (!request_.segment_attention.enabled() || with.segment_attention != nullptr);
    const bool declared = rows_may_stay_on_device(reads, served);
    call_declared_ = call_declared_ || declared;
    LayerSignals marked = with;
    marked.cache_rows_are_placeholders = declared && h_.flag;
    const bool poison = h_.poison && (declared || h_.poison_every_call);
    if (poison) save_and_poison(cache);
    prompt_declared += declared && signals.first_position < prompt_len_;
    engine_.after_layer(marked, cache);
    if (poison) restore(cache);
  }
  void after_forward(int n_tokens, KVCache& cache) override {
    const bool poison = h_.poison && (call_declared_ || h_.poison_every_call);
    call_declared_ = false;
    if (poison) save_and_poison(cache);
    engine_.after_forward(n_tokens, cache);
    if (poison) restore(cache);
  }
  void set_prompt_len(int n) { prompt_len_ = n; }
  int64_t poisoned_calls = 0;
  int64_t prompt_declared = 0;  // prompt layers whose rows the engine declared it does not read
  // Layers handed a window attention of more queries than their call had (earlier blocks' too).
  int64_t window_beyond_block() const { return injector_.injected_beyond_block(); }

 private:
  void save_and_poison(KVCache& cache) {
    ++poisoned_calls;
    poisoner_.poison(cache, 0, cache.n_layers() - 1);
  }
  void restore(KVCache& cache) { poisoner_.restore(cache); }

  EvictionEngine& engine_;
  test::WindowAttentionInjector injector_;
  const Harness h_;
  mutable ObservationRequest request_;
  bool call_declared_ = false;
  int prompt_len_ = 0;
  test::CacheRowPoison poisoner_;
};

struct PromptRun : test::CallTrace {
  int64_t poisoned_calls = 0, prompt_declared = 0, window_beyond_block = 0;
};

class PromptCacheReadsTest : public test::StoriesPromptTest {
 protected:
  static PromptRun run_policy(const PolicyProgram& policy, Harness h, int steps = 12) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    EvictionEngine engine(policy, model_->config, {Budget::parse("40"), 3});
    PoisonRows observer(engine, decoder->cache(), model_->config.group_size(), h);
    observer.set_prompt_len(S());
    PromptRun r;
    r.record(prefill_prompt(*decoder, tokens_, &engine, &observer), decoder->cache());
    r.decode_greedily(*decoder, &observer, steps);
    r.poisoned_calls = observer.poisoned_calls;
    r.prompt_declared = observer.prompt_declared;
    r.window_beyond_block = observer.window_beyond_block();
    return r;
  }
  // Flagged and poisoned against flagged: every call identical. Against the plain run (no flag,
  // no poison): the cache and logits after the prompt identical too (the decode steps may take A_now
  // from the decoder's column sums instead, decode_cache_reads_test.cpp).
  static void check_policy(const PolicyProgram& policy, const std::string& what) {
    const PromptRun plain = run_policy(policy, {});
    const PromptRun flagged = run_policy(policy, {.flag = true});
    const PromptRun poisoned = run_policy(policy, {.flag = true, .poison = true});
    EXPECT_GT(poisoned.prompt_declared, 0) << what << ": no prompt call declared";
    EXPECT_GT(poisoned.poisoned_calls, 0) << what;
    test::expect_same_calls(flagged, poisoned, what);
    EXPECT_EQ(plain.layouts.front(), poisoned.layouts.front()) << what << ": the cache after the prompt";
    EXPECT_EQ(plain.logits.front(), poisoned.logits.front()) << what << ": the prompt's logits";
    bool evicted = false;  // somewhere: otherwise the comparison proves little
    for (const auto& layer : poisoned.layouts.front())
      for (const auto& head : layer) evicted = evicted || head.size() < static_cast<size_t>(S());
    // full never evicts; SimLayerKV finds no lazy layer on this prompt and keeps every layer whole.
    const std::string name = policy.description().name;
    if (name != "full" && name != "simlayerkv") {
      EXPECT_TRUE(evicted) << what << ": the prompt evicted nothing";
    }
  }
};

// The policy file `file` with run.prefill_block = block (a temporary copy; flow or block `run:`).
std::string with_prefill_block(const std::string& file, int block) {
  std::stringstream text;
  text << std::ifstream(file).rdbuf();
  std::string s = text.str();
  const std::string flow = "\nrun: {", block_style = "\nrun:\n";
  const std::string setting = "prefill_block: " + std::to_string(block);
  if (size_t at = s.find(flow); at != std::string::npos) {
    s.insert(at + flow.size(), setting + ", ");
  } else if (size_t at2 = s.find(block_style); at2 != std::string::npos) {
    s.insert(at2 + block_style.size(), "  " + setting + "\n");
  } else {
    s += "run: {" + setting + "}\n";
  }
  const std::string out = (std::filesystem::temp_directory_path() /
                           ("kvevict_prompt_reads_" + std::filesystem::path(file).stem().string() + "_blocks.yaml")).string();
  std::ofstream(out) << s;
  return out;
}

// The built-ins whose prompt reads no cached row: pinned, so that a change that flips one (either
// way) is seen and its proof below runs for it.
TEST_F(PromptCacheReadsTest, TheBuiltinsThatDeclareNoPromptRowReads) {
  std::vector<std::string> none, given_window;
  for (const std::string& file : builtin_policy_files()) {
    const auto policy = test::load_or_null(file);
    if (!policy) continue;
    const CacheRowReads r = prompt_cache_row_reads(policy->description());
    const std::string name = std::filesystem::path(file).stem().string();
    if (r == CacheRowReads::None) none.push_back(name);
    if (r == CacheRowReads::NoneGivenDecoderSignals) given_window.push_back(name);
  }
  std::sort(none.begin(), none.end());
  std::sort(given_window.begin(), given_window.end());
  // Column sums, hidden states (KVzap's linear scorer), positions, random draws, key and value norms
  // (held with the positions): None. StreamingLLM too, re-assigning positions or not (the holder of
  // the rows re-rotates the keys). DuoAttention's and RLKV's head plans read per-head tables only.
  // KVzip's prompt reads nothing: its A_replay is handed over by the decoder in the replay's own
  // calls after the prompt (ObservationRequest::replay_attention).
  const std::vector<std::string> expect_none = {"compression_ratio_decoding", "cur", "decoding", "dms",
                                                "duo_attention", "entropy_adaptive", "full", "h2o", "knorm", "kvzap",
                                                "kvzip", "observed_attention", "per_layer_compression", "random",
                                                "rlkv", "streamingllm"};
  // The window attention A only (scores, CAKE's layer weight, pooling, chunks, thresholds, HeadKV's
  // head plan over A), the segment-local attention A_seg the decoder makes in the prompt's call
  // (chunkpress; noncausal_attn with the held value norms), or merges the decoder runs where the
  // rows are (cam, d2o, kvmerger, look_m, merging_press); composed's stages (its first, SnapKV's
  // score over A, made at each layer's turn; its second over the held key norms).
  const std::vector<std::string> expect_given_window = {
      "adakv",   "cake",    "cam",    "chunkkv",   "chunkpress",   "composed", "d2o",         "entropy_gated_chunkkv",
      "headkv",  "kvmerger", "look_m", "merging_press", "morphkv",  "noncausal_attn", "prefill_decoding",
      "pyramidkv", "scissorhands", "simlayerkv", "snapkv", "tova"};
  EXPECT_EQ(none, expect_none);
  EXPECT_EQ(given_window, expect_given_window);
  EXPECT_EQ(prompt_cache_row_reads(load_policy("streamingllm", {})->description()), CacheRowReads::None);
  EXPECT_EQ(prompt_cache_row_reads(load_policy("streamingllm", {{"position_mode", "true_positions"}})->description()),
            CacheRowReads::None);
  // A window found from the prompt's length (NACL's proxy share) or its tokens (FINCH's delimiter)
  // is unknown before the call unless the prompt is announced (prefill_prompt does): then the
  // decoder computes its A too. So is the end of the prompt, where SpindleKV's codebook and ThinK's
  // key-channel stages need the kept rows brought back (ObservationRequest::host_rows_at_prompt_end).
  // Nothing else changes with the announcement.
  EXPECT_EQ(prompt_cache_row_reads(load_policy("nacl", {})->description()), CacheRowReads::Reads);
  std::vector<std::string> announced_changes;
  for (const std::string& file : builtin_policy_files()) {
    const auto policy = test::load_or_null(file);
    if (!policy) continue;
    const PolicyDescription& d = policy->description();
    const CacheRowReads announced =
        prompt_cache_row_reads(d, CachedRowSignals::ReadOnHost, PromptAnnouncement::BeforeTheCall);
    if (announced == prompt_cache_row_reads(d)) continue;
    EXPECT_EQ(announced, CacheRowReads::NoneGivenDecoderSignals) << file;
    EXPECT_TRUE(!window_known_before_prompt(d) || prompt_end_edits_rows(d)) << file;
    announced_changes.push_back(std::filesystem::path(file).stem().string());
  }
  std::sort(announced_changes.begin(), announced_changes.end());
  EXPECT_EQ(announced_changes, (std::vector<std::string>{"finch", "nacl", "spindlekv", "think"}));
}

// A staged selection's prompt reads no row when its first stage is the file's `score` (the engine
// takes the scores made at each layer's turn, where the decoder's window attention is) and its later
// stages read nothing made from rows or from the window (they score heads the earlier stages cut):
// composed's KnormPress stage reads the held key norms. A later stage over A, O or K, a first stage
// with another program, or shares of one budget (every stage scored at the selection) read rows.
TEST(PromptCacheReadsStaged, StagedPromptsReadRowsOnlyWhereALaterStageDoes) {
  const std::string head =
      "observe: {window: 8}\nprotect: {recent: 8}\nrun: {prefill: true, decode_every: 0}\n"
      "score: |\n  score[t] = mean(h: mean(q: A[h, q, t]))\n";
  const auto staged = [&](const std::string& name, const std::string& stages, const std::string& second) {
    return test::policy_from_text(name, "name: " + name + "\nabout: staged\n" + head + "select:\n  stages:\n" + stages +
                                            "scores:\n  second: |\n    score[t] = " + second + "\n");
  };
  const std::string two = "    - {score: score, keep: 0.5}\n    - {score: second, keep: 0.5}\n";
  const auto reads = [](const std::unique_ptr<PolicyProgram>& p) { return prompt_cache_row_reads(p->description()); };
  EXPECT_EQ(reads(staged("norms", two, "-key_norm[t]")), CacheRowReads::NoneGivenDecoderSignals);
  EXPECT_EQ(reads(staged("window", two, "mean(h: mean(q: A[h, q, t]))")), CacheRowReads::Reads);
  EXPECT_EQ(reads(staged("keys", two, "sum(d: K[d, t])")), CacheRowReads::Reads);
  EXPECT_EQ(reads(staged("second_first", "    - {score: second, keep: 0.5}\n    - {score: score, keep: 0.5}\n",
                         "-key_norm[t]")),
            CacheRowReads::Reads);
  EXPECT_EQ(reads(staged("shares", "    - {score: score, share: 0.5}\n    - {score: second}\n", "-key_norm[t]")),
            CacheRowReads::Reads);
  EXPECT_EQ(reads(load_policy("composed", {})), CacheRowReads::NoneGivenDecoderSignals);
}

// Scored on the decoder's device, K, V and their norms count as handed over (CachedRowSignals::
// GivenOnDevice): the built-ins whose prompt then reads no row on the host (their only row reads are
// K and V, with the window attention and row-free signals), pinned, and those whose prompt read no
// row already and now takes its norms from the device (NoneGivenDecoderSignals instead of None);
// nothing else changes.
TEST_F(PromptCacheReadsTest, TheBuiltinsWhosePromptReadsOnlyKAndVFromTheDevice) {
  std::vector<std::string> given_rows, given_norms;
  for (const std::string& file : builtin_policy_files()) {
    const auto policy = test::load_or_null(file);
    if (!policy) continue;
    const PolicyDescription& d = policy->description();
    const CacheRowReads host = prompt_cache_row_reads(d);
    const CacheRowReads device = prompt_cache_row_reads(d, CachedRowSignals::GivenOnDevice);
    const std::string name = std::filesystem::path(file).stem().string();
    if (host == device) continue;
    EXPECT_EQ(device, CacheRowReads::NoneGivenDecoderSignals) << name;
    if (host == CacheRowReads::Reads) {  // K, V, K_pre or the values' projected L1 norms handed over
      EXPECT_TRUE(d.needs(TensorSignal::Keys) || d.needs(TensorSignal::Values) || d.needs(TensorSignal::KeysPreRope) ||
                  d.needs(TensorSignal::OutputNormL1))
          << name;
      given_rows.push_back(name);
    } else {  // a prompt that read no row, its norms handed over instead of held on the host
      EXPECT_EQ(host, CacheRowReads::None) << name;
      EXPECT_TRUE(d.needs_row_norms()) << name;
      given_norms.push_back(name);
    }
  }
  std::sort(given_rows.begin(), given_rows.end());
  std::sort(given_norms.begin(), given_norms.end());
  // ExpectedAttentionStats: K and the value norms, with the mean RoPE rotation R_future (the model's
  // alone); ExpectedAttention, LU-KV and CAP: K (CAP also V) with the prompt query statistics, which
  // the decoder makes (ObservationRequest::query_statistics); Leverage: K_pre, which the decoder
  // rotates back on the device; Compactor: K_pre with the segment attention A_seg, which the decoder
  // makes too (ObservationRequest::segment_attention), and the value norms; DefensiveKV: the
  // window attention and the values' projected L1 norms, which the decoder makes from its values and
  // W_o (ObservationRequest::out_norms_l1_on_device).
  const std::vector<std::string> expect = {"blockpress", "cap",      "compactor", "defensive_kv", "expected_attention",
                                           "expected_attention_stats", "keydiff", "leverage", "lukv",
                                           "qfilter",    "rkv"};
  EXPECT_EQ(given_rows, expect);
  std::string norms;
  for (const std::string& n : given_norms) norms += n + " ";
  std::printf("built-ins whose prompt takes its norms from the device: %s\n", norms.c_str());
  for (const char* n : {"knorm", "cur", "compression_ratio_decoding"})
    EXPECT_NE(std::find(given_norms.begin(), given_norms.end(), n), given_norms.end()) << n;
}

TEST_F(PromptCacheReadsTest, PoliciesThatDeclareNoPromptRowReadsIgnorePoisonedRows) {
  std::string checked;
  for (const std::string& file : builtin_policy_files()) {
    const auto policy = test::load_or_null(file, test::short_prompt_settings(file));
    // run_policy prefills through prefill_prompt, which announces the prompt.
    if (!policy || prompt_cache_row_reads(policy->description(), CachedRowSignals::ReadOnHost,
                                          PromptAnnouncement::BeforeTheCall) == CacheRowReads::Reads)
      continue;
    // Norms come with the positions where the rows are on a device, and poisoned rows would poison
    // them: those, and re-assigned positions, run on a position-only cache instead
    // (rowless_engine_turn_test.cpp).
    const PolicyDescription& d = policy->description();
    if (d.needs_row_norms()) continue;
    if (d.run.reassign_positions) continue;  // re-numbers the rows under the poisoner (it finds them by position)
    // Merges run on the decoder's rows, which the poisoner has poisoned in place: they run on a
    // position-only cache instead (RowlessEngineTurnTest.MergesRunWhereTheRowsAreOnAPositionOnlyCache).
    if (merge_given_by_decoder(d.merge)) continue;
    // A codebook or key-channel stage reads the kept rows the decoder brings back at the prompt's
    // end, which the poisoner does not: it runs on a position-only cache instead
    // (RowlessEngineTurnTest.StagesAtThePromptsEndReadTheKeptRowsBroughtBack).
    if (prompt_end_edits_rows(d)) continue;
    try {
      (void)run_policy(*policy, {}, 0);
    } catch (const UsageError&) {
      continue;  // refused on this model and budget
    }
    check_policy(*policy, file);
    checked += std::filesystem::path(file).stem().string() + " ";
  }
  std::printf("policies checked with poisoned prompt rows: %s\n", checked.c_str());
  EXPECT_NE(checked.find("snapkv"), std::string::npos);
  EXPECT_NE(checked.find("cake"), std::string::npos);
  EXPECT_NE(checked.find("h2o"), std::string::npos);
  EXPECT_NE(checked.find("nacl"), std::string::npos) << "its window, from the prompt's length, was announced";
}

// CAKE's cascading prefill (every layer re-splits the budget and evicts the layers before it) and
// prefills in blocks (each block attends over what the earlier blocks left). Blocks shorter than
// the window are declared too: their window rows reach into the blocks before, whose queries the
// decoder holds (core/decode/query_window_ring.h; the injector holds them as the CUDA decoder does).
TEST_F(PromptCacheReadsTest, CascadingAndBlockPrefillsIgnorePoisonedRows) {
  const auto cascading = load_policy("cake", {{"cascading", "true"}});
  ASSERT_EQ(prompt_cache_row_reads(cascading->description()), CacheRowReads::NoneGivenDecoderSignals);
  check_policy(*cascading, "cake cascading");
  // (A prefill in blocks does not cascade: the policy file refuses both.)
  for (const char* name : {"cake", "snapkv", "tova", "h2o", "streamingllm"}) {
    const std::string file = with_prefill_block(resolve_policy_path(name), 40);
    const auto policy = load_policy(file, name == std::string("streamingllm")
                                              ? std::map<std::string, std::string>{{"position_mode", "true_positions"}}
                                              : std::map<std::string, std::string>{});
    std::filesystem::remove(file);
    ASSERT_EQ(policy->description().run.prefill_block, 40) << name;
    ASSERT_NE(prompt_cache_row_reads(policy->description()), CacheRowReads::Reads) << name;
    check_policy(*policy, std::string(name) + " in blocks of 40");
  }
  for (const char* name : {"snapkv", "cake"}) {
    const std::string file = with_prefill_block(resolve_policy_path(name), 12);
    const auto policy = load_policy(file, {});
    std::filesystem::remove(file);
    ASSERT_GT(policy->description().window, 12) << name;
    check_policy(*policy, std::string(name) + " in blocks of 12");
    const PromptRun r = run_policy(*policy, {.flag = true, .poison = true}, 0);
    EXPECT_EQ(r.prompt_declared, static_cast<int64_t>((S() + 11) / 12) * model_->config.n_layers)
        << name << ": every layer of every block declared";
    EXPECT_GT(r.window_beyond_block, 0) << name << ": no block's window reached into the block before";
  }
}

// Controls: the poison is seen where rows are read.
TEST_F(PromptCacheReadsTest, ControlsPoisonChangesARowReaderAndTheHostsWindowAttention) {
  // The cached keys at the prompt: declared Reads, and poisoned rows change what it keeps.
  const auto keys = test::key_reading_policy();
  EXPECT_EQ(prompt_cache_row_reads(keys->description()), CacheRowReads::Reads);
  const PromptRun keys_plain = run_policy(*keys, {}, 0);
  const PromptRun keys_poisoned = run_policy(*keys, {.poison = true, .poison_every_call = true}, 0);
  EXPECT_GT(keys_poisoned.poisoned_calls, 0);
  EXPECT_NE(keys_plain.layouts.front(), keys_poisoned.layouts.front()) << "the policy did not read the poisoned keys";
  // SnapKV without the decoder's window attention: the engine attends the window queries over the
  // cached keys, so the poison changes the cache (and the harness, as the CUDA decoder, would not
  // leave the rows on the device: it does not hand the window attention over).
  const auto snapkv = load_policy("snapkv", {});
  const PromptRun snap_plain = run_policy(*snapkv, {.inject = false}, 0);
  const PromptRun snap_poisoned = run_policy(*snapkv, {.inject = false, .poison = true, .poison_every_call = true}, 0);
  EXPECT_EQ(snap_poisoned.prompt_declared, 0) << "NoneGivenDecoderSignals without the window attention is Reads";
  EXPECT_GT(snap_poisoned.poisoned_calls, 0);
  EXPECT_NE(snap_plain.layouts.front(), snap_poisoned.layouts.front()) << "the host's A did not read the poisoned keys";
}

// The loud guard: rows marked as placeholders in a call where the engine must read them (its window
// attention not handed over) are refused, naming the layer, instead of read as zeros.
TEST_F(PromptCacheReadsTest, TheEngineRefusesToReadPlaceholderRows) {
  struct MarksEveryCall : ForwardObserver {
    EvictionEngine& engine;
    explicit MarksEveryCall(EvictionEngine& e) : engine(e) {}
    ObservationRequest request() const override { return engine.request(); }
    void after_layer(const LayerSignals& s, KVCache& c) override {
      LayerSignals marked = s;
      marked.cache_rows_are_placeholders = true;
      engine.after_layer(marked, c);
    }
    void after_forward(int n, KVCache& c) override { engine.after_forward(n, c); }
  };
  for (const char* name : {"snapkv", "knorm"}) {
    const auto policy = load_policy(name, {});
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    EvictionEngine engine(*policy, model_->config, {Budget::parse("40"), 3});
    MarksEveryCall marks(engine);
    try {
      prefill_prompt(*decoder, tokens_, &engine, &marks);
      ADD_FAILURE() << name << ": no refusal";
    } catch (const std::logic_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("layer 0"), std::string::npos) << what;
      EXPECT_NE(what.find("placeholder rows"), std::string::npos) << what;
    }
  }
  // A policy that reads nothing of the rows runs with every call marked (its declaration holds).
  const auto h2o = load_policy("h2o", {});
  auto decoder = make_cpu_decoder(*model_, {.threads = 1});
  EvictionEngine engine(*h2o, model_->config, {Budget::parse("40"), 3});
  MarksEveryCall marks(engine);
  EXPECT_NO_THROW(prefill_prompt(*decoder, tokens_, &engine, &marks));
}

// The declaration per call: a later block, even one shorter than the window (the decoder holds the
// previous block's queries, or does not serve the window attention and reads rows), keeps the
// prompt's; after the prompt a call of a policy that does not score while decoding reads nothing
// (None), one token or several (a question block).
TEST_F(PromptCacheReadsTest, TheRequestNarrowsThePromptDeclarationPerCall) {
  const std::string file = with_prefill_block(resolve_policy_path("snapkv"), 40);
  const auto policy = load_policy(file, {{"window", "16"}});
  std::filesystem::remove(file);
  auto decoder = make_cpu_decoder(*model_, {.threads = 1});
  EvictionEngine engine(*policy, model_->config, {Budget::parse("40"), 3});
  const ObservationRequest first = engine.request();
  EXPECT_EQ(first.cache_row_reads.prompt_start, CacheRowReads::NoneGivenDecoderSignals);
  EXPECT_EQ(first.window_attention, 16);
  const int n = 40 + 40 + 10;  // a last block of 10 < the window
  ASSERT_GE(S(), n);
  const std::span<const int> prompt(tokens_.data(), static_cast<size_t>(n));
  engine.begin_block_prefill(n);
  decoder->forward(prompt.subspan(0, 40), &engine);
  EXPECT_EQ(engine.request().cache_row_reads.next_block, CacheRowReads::NoneGivenDecoderSignals);
  decoder->forward(prompt.subspan(40, 40), &engine);
  EXPECT_EQ(engine.request().cache_row_reads.next_block, CacheRowReads::NoneGivenDecoderSignals);
  decoder->forward(prompt.subspan(80, 10), &engine);
  const ObservationRequest decoding = engine.request();
  EXPECT_EQ(decode_cache_row_reads(policy->description()), CacheRowReads::NoneGivenDecoderSignals);
  EXPECT_EQ(decoding.window_attention, 0) << "snapkv does not score while decoding";
  EXPECT_EQ(decoding.cache_row_reads.next_token, CacheRowReads::None) << "so its decode steps read no row";
  EXPECT_EQ(decoding.cache_row_reads.next_block, CacheRowReads::None) << "nor its question blocks";
}

// A prompt announced before its first call (EvictionEngine::announce_prompt; prefill_prompt does
// it): NACL's window, found from the prompt's length, is then asked of the decoder and the prompt
// declared NoneGivenDecoderSignals, with only the window's query rows asked for (not the whole
// block); unannounced, it reads rows. A prompt that follows decode steps without a new engine is a
// prompt again once announced (SnapKV's window, while its decode steps ask for none). The call
// that starts the prompt must be the announced one.
TEST_F(PromptCacheReadsTest, AnnouncedPromptsAreKnownBeforeTheirFirstCall) {
  const auto nacl = load_policy("nacl", {{"budget_split", "explicit"}, {"explicit_sinks", "4"},
                                         {"explicit_proxy", "0.1"}});
  const int n = 90;
  ASSERT_GE(S(), n);
  const std::span<const int> prompt(tokens_.data(), static_cast<size_t>(n));
  {
    EvictionEngine engine(*nacl, model_->config, {Budget::parse("40"), 3});
    const ObservationRequest before = engine.request();
    EXPECT_EQ(before.window_attention, 0) << "the window depends on a prompt not yet known";
    EXPECT_EQ(before.cache_row_reads.prompt_start, CacheRowReads::Reads);
    EXPECT_EQ(before.window, model_->config.context_length) << "every query of the block, the window unknown";
    engine.announce_prompt(prompt);
    const int W = make_eviction_plan(*nacl, model_->config, Budget::parse("40"), n).window;
    ASSERT_EQ(W, 9);  // floor(0.1 * 90)
    const ObservationRequest announced = engine.request();
    EXPECT_EQ(announced.window_attention, W);
    EXPECT_FALSE(announced.window_attention_causal) << "NACL's official proxy";
    EXPECT_EQ(announced.cache_row_reads.prompt_start, CacheRowReads::NoneGivenDecoderSignals);
    EXPECT_EQ(announced.window, W);
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    decoder->forward(prompt, &engine);
    EXPECT_EQ(engine.plan().window, W);
    EXPECT_EQ(engine.plan().prompt_len, n);
  }
  {
    const auto snapkv = load_policy("snapkv", {{"window", "16"}});
    EvictionEngine engine(*snapkv, model_->config, {Budget::parse("40"), 3});
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    const std::vector<float> logits = prefill_prompt(*decoder, prompt, &engine, &engine);
    decoder->forward(std::vector<int>{argmax(logits)}, &engine);
    const ObservationRequest decoding = engine.request();
    EXPECT_EQ(decoding.window_attention, 0) << "snapkv scores no decode step";
    EXPECT_EQ(decoding.cache_row_reads.prompt_start, CacheRowReads::Reads) << "a prompt nobody announced";
    engine.announce_prompt(prompt.subspan(0, 60));
    const ObservationRequest next = engine.request();
    EXPECT_EQ(next.window_attention, 16);
    EXPECT_EQ(next.cache_row_reads.prompt_start, CacheRowReads::NoneGivenDecoderSignals);
    decoder->reset();
    prefill_prompt(*decoder, prompt.subspan(0, 60), &engine, &engine);
    EXPECT_EQ(engine.plan().prompt_len, 60);
    EXPECT_EQ(decoder->cache().length(0, 0), 40);
    // Controls: the call that starts the prompt is not the announced one (another length, other
    // tokens), or it continues the cache instead of starting a prompt; each refusal withdraws the
    // announcement (the request no longer carries it).
    engine.announce_prompt(prompt.subspan(0, 60));
    decoder->reset();
    EXPECT_THROW(decoder->forward(prompt.subspan(0, 50), &engine), std::logic_error);
    engine.announce_prompt(prompt.subspan(0, 60));
    decoder->reset();
    EXPECT_THROW(decoder->forward(prompt.subspan(1, 60), &engine), std::logic_error);
    decoder->reset();
    prefill_prompt(*decoder, prompt.subspan(0, 60), &engine, &engine);
    engine.announce_prompt(prompt.subspan(0, 60));
    EXPECT_THROW(decoder->forward(std::vector<int>{1}, &engine), std::logic_error);
    EXPECT_EQ(engine.request().cache_row_reads.prompt_start, CacheRowReads::Reads) << "the announcement stayed";
  }
  {
    // A decoder that throws before the prompt reached the engine (a token outside the vocabulary):
    // prefill_prompt withdraws the announcement, so NACL's next request is an unannounced one's.
    EvictionEngine engine(*nacl, model_->config, {Budget::parse("40"), 3});
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    std::vector<int> bad(prompt.begin(), prompt.end());
    bad[5] = model_->config.vocab_size + 7;
    EXPECT_ANY_THROW(prefill_prompt(*decoder, bad, &engine, &engine));
    EXPECT_EQ(engine.request().window_attention, 0);
    EXPECT_EQ(engine.request().cache_row_reads.prompt_start, CacheRowReads::Reads);
  }
  {
    // FINCH's window, found after its delimiter token: announced, only its rows are asked for.
    const auto finch = load_policy("finch", {{"delimiter", std::to_string(prompt[70])}});
    EvictionEngine engine(*finch, model_->config, {Budget::parse("40"), 3});
    EXPECT_EQ(engine.request().window, model_->config.context_length) << "unannounced: every query of the block";
    engine.announce_prompt(prompt);
    const ObservationRequest announced = engine.request();
    const int W = make_eviction_plan(*finch, model_->config, Budget::parse("40"), n, prompt).window;
    ASSERT_GT(W, 0);
    EXPECT_EQ(announced.window, W);
    EXPECT_EQ(announced.window_attention, W);
    EXPECT_EQ(announced.cache_row_reads.prompt_start, CacheRowReads::NoneGivenDecoderSignals);
  }
}

// ObservationRequest::host_rows_not_read_later: set for a policy none of whose decode steps reads a
// row on the host (no decode eviction, or one over row-free signals), so a device cache may drop
// the host's copy after the prompt; not while a prefill in blocks has more than one block to come,
// nor for a replay, a codebook, or a decode eviction that reads rows.
TEST_F(PromptCacheReadsTest, TheRequestSaysWhenNoLaterCallReadsRows) {
  const auto says = [](const char* name, std::map<std::string, std::string> params = {}) {
    const auto policy = load_policy(name, params);
    EvictionEngine engine(*policy, model_->config, {Budget::parse("40"), 3});
    return engine.request().host_rows_not_read_later;
  };
  for (const char* name : {"keydiff", "snapkv", "cake", "h2o", "nacl", "knorm"}) EXPECT_TRUE(says(name)) << name;
  for (const char* name : {"rkv", "d2o", "spindlekv", "kvzip", "think"}) EXPECT_FALSE(says(name)) << name;
  EXPECT_FALSE(says("nacl", {{"decode_interval", "4"}})) << "its first decode steps read rows";
  const std::string file = with_prefill_block(resolve_policy_path("snapkv"), 40);
  const auto policy = load_policy(file, {});
  std::filesystem::remove(file);
  auto decoder = make_cpu_decoder(*model_, {.threads = 1});
  EvictionEngine engine(*policy, model_->config, {Budget::parse("40"), 3});
  const std::span<const int> prompt(tokens_.data(), 90);
  engine.begin_block_prefill(90);
  EXPECT_FALSE(engine.request().host_rows_not_read_later) << "blocks of 40, 50 and 10 to come";
  decoder->forward(prompt.subspan(0, 40), &engine);
  EXPECT_FALSE(engine.request().host_rows_not_read_later) << "blocks of 40 and 10 to come";
  decoder->forward(prompt.subspan(40, 40), &engine);
  EXPECT_TRUE(engine.request().host_rows_not_read_later) << "the last block comes next";
  decoder->forward(prompt.subspan(80, 10), &engine);
  EXPECT_TRUE(engine.request().host_rows_not_read_later);
}

TEST(PromptCacheReads, SignalsAndFeaturesThatReadRowsAtThePrompt) {
  EXPECT_FALSE(prompt_signal_reads_cache_rows(TensorSignal::WindowAttention));
  EXPECT_FALSE(prompt_signal_reads_cache_rows(TensorSignal::AccumulatedAttention));
  EXPECT_FALSE(prompt_signal_reads_cache_rows(TensorSignal::Position));
  EXPECT_TRUE(prompt_signal_reads_cache_rows(TensorSignal::CurrentAttention)) << "computed from the keys at the prompt";
  EXPECT_FALSE(prompt_signal_reads_cache_rows(TensorSignal::KeyNorm)) << "held with the positions";
  EXPECT_FALSE(prompt_signal_reads_cache_rows(TensorSignal::ValueNorm));
  EXPECT_TRUE(prompt_signal_reads_cache_rows(TensorSignal::Keys));
  EXPECT_TRUE(prompt_signal_reads_cache_rows(TensorSignal::KeysPreRope));
  EXPECT_FALSE(prompt_signal_reads_cache_rows(TensorSignal::SegmentAttention)) << "the decoder makes it";
  EXPECT_TRUE(prompt_signal_reads_cache_rows(TensorSignal::WindowOutputs)) << "A times the cached values";
  EXPECT_FALSE(prompt_signal_reads_cache_rows(TensorSignal::WindowQueryRows)) << "the queries alone";
  EXPECT_FALSE(prompt_signal_reads_cache_rows(TensorSignal::WindowQueryRowsPreRope));
  EXPECT_FALSE(prompt_signal_reads_cache_rows(TensorSignal::RopeFuture)) << "the model's RoPE alone";
  // The query statistics read no row: the decoder makes them from its queries.
  EXPECT_FALSE(prompt_signal_reads_cache_rows(TensorSignal::QueryMean));
  PolicyDescription stats;
  stats.reads[signal_index(TensorSignal::QueryMean)] = true;
  EXPECT_EQ(prompt_cache_row_reads(stats), CacheRowReads::NoneGivenDecoderSignals);
  PolicyDescription d;  // hand-made: prompt reads unknown, so `reads` stands for them
  d.reads[signal_index(TensorSignal::AccumulatedAttention)] = true;
  EXPECT_EQ(prompt_cache_row_reads(d), CacheRowReads::None);
  d.window = 8;
  EXPECT_EQ(prompt_cache_row_reads(d), CacheRowReads::NoneGivenDecoderSignals);
  PolicyDescription proxy = d;
  proxy.observe.causal = false;  // NACL's proxy: the decoder computes it too (window_attention_causal)
  EXPECT_EQ(prompt_cache_row_reads(proxy), CacheRowReads::NoneGivenDecoderSignals);
  PolicyDescription by_length = d;
  by_length.depends_on_prompt_len = true;  // hand-made: the window may depend on it
  EXPECT_EQ(prompt_cache_row_reads(by_length), CacheRowReads::Reads);
  for (auto edit : {+[](PolicyDescription& x) { x.merge.enabled = true; },
                    +[](PolicyDescription& x) { x.channels.enabled = true; }, +[](PolicyDescription& x) { x.select.unfold_gqa = true; },
                    +[](PolicyDescription& x) { x.observe.window_after_token = 2; },
                    +[](PolicyDescription& x) { x.observe.same_index_head = true; },
                    +[](PolicyDescription& x) { x.reads[signal_index(TensorSignal::CurrentAttention)] = true; }}) {
    PolicyDescription e = d;
    edit(e);
    EXPECT_EQ(prompt_cache_row_reads(e), CacheRowReads::Reads);
  }
  // A_replay: made by the decoder in the replay's own calls; the policy is scored after the prompt,
  // where nothing handed over during its calls is held: any other row-made signal (A here) is Reads.
  EXPECT_FALSE(prompt_signal_reads_cache_rows(TensorSignal::ReplayAttention));
  PolicyDescription replay;
  replay.reads[signal_index(TensorSignal::ReplayAttention)] = true;
  replay.reads[signal_index(TensorSignal::Position)] = true;
  EXPECT_EQ(prompt_cache_row_reads(replay), CacheRowReads::None);
  for (TensorSignal also : {TensorSignal::WindowAttention, TensorSignal::SegmentAttention, TensorSignal::OutputNorm,
                            TensorSignal::Keys}) {
    PolicyDescription e = replay;
    e.reads[signal_index(also)] = true;
    e.window = 8;
    EXPECT_EQ(prompt_cache_row_reads(e), CacheRowReads::Reads) << signal_info(also).dsl_name;
    EXPECT_EQ(prompt_cache_row_reads(e, CachedRowSignals::GivenOnDevice, PromptAnnouncement::BeforeTheCall),
              CacheRowReads::Reads)
        << signal_info(also).dsl_name;
  }
  PolicyDescription segments = d;  // A_seg: the decoder makes it in the prompt's call (segment_attention)
  segments.observe.segment = 4;
  segments.reads[signal_index(TensorSignal::SegmentAttention)] = true;
  EXPECT_EQ(prompt_cache_row_reads(segments), CacheRowReads::NoneGivenDecoderSignals);
  PolicyDescription reassigned = d;
  reassigned.run.reassign_positions = true;  // the holder of the rows re-rotates them
  EXPECT_EQ(prompt_cache_row_reads(reassigned), CacheRowReads::NoneGivenDecoderSignals);
  PolicyDescription head_plan = d;
  head_plan.has_head_plan = true;  // its programs read what the prompt's reads name, nothing else
  EXPECT_EQ(prompt_cache_row_reads(head_plan), CacheRowReads::NoneGivenDecoderSignals);
  // The DSL knows the prompt's programs: a decode-only A_now does not count at the prompt.
  PolicyDescription known = d;
  known.reads[signal_index(TensorSignal::CurrentAttention)] = true;
  known.prompt_reads_known = true;
  known.prompt_reads[signal_index(TensorSignal::WindowAttention)] = true;
  EXPECT_EQ(prompt_cache_row_reads(known), CacheRowReads::NoneGivenDecoderSignals);
}

TEST(PromptCacheReads, TheDecoderTakesTheAnswerForTheCallsKind) {
  CacheRowReadsByCall by;
  by.prompt_start = CacheRowReads::NoneGivenDecoderSignals;
  by.next_token = CacheRowReads::None;
  EXPECT_EQ(by.for_call(0, 100), CacheRowReads::NoneGivenDecoderSignals);
  EXPECT_EQ(by.for_call(0, 1), CacheRowReads::NoneGivenDecoderSignals);
  EXPECT_EQ(by.for_call(100, 1), CacheRowReads::None);
  EXPECT_EQ(by.for_call(100, 2), CacheRowReads::Reads);
  EXPECT_TRUE(rows_may_stay_on_device(CacheRowReads::None, false));
  EXPECT_TRUE(rows_may_stay_on_device(CacheRowReads::NoneGivenDecoderSignals, true));
  EXPECT_FALSE(rows_may_stay_on_device(CacheRowReads::NoneGivenDecoderSignals, false));
  EXPECT_FALSE(rows_may_stay_on_device(CacheRowReads::Reads, true));
}

}  // namespace
}  // namespace kvevict
