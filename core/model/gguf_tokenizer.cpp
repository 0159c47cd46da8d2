#include "core/model/gguf_tokenizer.h"

#include <algorithm>
#include <limits>

#include "core/tokenizer/spm_tokenizer.h"
#include "core/util/quote.h"

namespace kvevict {
namespace {

// GGUF token types (llama.cpp's llama_token_type).
constexpr int64_t kTokenControl = 3;
constexpr int64_t kTokenUserDefined = 4;

int token_id(const GgufFile& f, const std::string& key, int vocab, int fallback) {
  auto v = f.opt_int(key);
  if (!v) return fallback;
  if (*v < 0 || *v >= vocab) {
    // Some converters write an out-of-range id for "none"; refusing would reject usable files.
    if (*v == -1 || *v == std::numeric_limits<uint32_t>::max()) return -1;
    f.fail("metadata " + quote_input(key) + " = " + std::to_string(*v) + " is outside the vocabulary of " + std::to_string(vocab));
  }
  return static_cast<int>(*v);
}

std::vector<int64_t> token_types(const GgufFile& f, size_t n_tokens) {
  std::vector<int64_t> types;
  const GgufValue* v = f.find("tokenizer.ggml.token_type");
  if (!v) return types;
  if (!v->is_array() || v->element_type == GgufValueType::STRING || v->element_type == GgufValueType::ARRAY ||
      v->element_type == GgufValueType::F32 || v->element_type == GgufValueType::F64) {
    f.fail("metadata tokenizer.ggml.token_type must be an array of integers");
  }
  if (v->count != n_tokens) {
    f.fail("tokenizer.ggml.token_type has " + std::to_string(v->count) + " entries for " + std::to_string(n_tokens) + " tokens");
  }
  types.reserve(n_tokens);
  for (uint64_t i = 0; i < v->count; ++i) types.push_back(v->int_at(i));
  return types;
}

std::unique_ptr<Tokenizer> load_bpe(const GgufFile& f, const std::vector<std::string>& tokens) {
  BpeVocab vocab;
  vocab.source = f.path();
  vocab.tokens = tokens;
  const int n = static_cast<int>(tokens.size());
  const GgufValue& merges = f.get_array("tokenizer.ggml.merges", GgufValueType::STRING);
  vocab.merges.reserve(merges.strings.size());
  for (size_t i = 0; i < merges.strings.size(); ++i) {
    const std::string& m = merges.strings[i];
    // "left right"; search from 1 so a left part that is itself " " would still split correctly.
    const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (space == std::string::npos) f.fail("tokenizer.ggml.merges[" + std::to_string(i) + "] is not a 'left right' pair");
    vocab.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }
  const std::vector<int64_t> types = token_types(f, tokens.size());
  for (int i = 0; i < static_cast<int>(types.size()); ++i) {
    if (types[i] == kTokenControl || types[i] == kTokenUserDefined) vocab.special_ids.push_back(i);
  }
  vocab.pre = bpe_pretokenizer_from_name(f.opt_string("tokenizer.ggml.pre").value_or("default"), f.path());
  vocab.bos_id = token_id(f, "tokenizer.ggml.bos_token_id", n, -1);
  vocab.eos_id = token_id(f, "tokenizer.ggml.eos_token_id", n, -1);
  vocab.add_bos = f.opt_bool("tokenizer.ggml.add_bos_token").value_or(true);
  // Chat models end a turn with a token other than EOS; generation must stop there too.
  auto add_stop = [&](int id) {
    if (id >= 0 && id != vocab.eos_id) vocab.extra_stop_ids.push_back(id);
  };
  add_stop(token_id(f, "tokenizer.ggml.eot_token_id", n, -1));
  for (const char* t : {"<|im_end|>", "<|eot_id|>", "<|endoftext|>"}) {
    for (int i = 0; i < n; ++i) {
      if (tokens[i] == t) {
        if (std::find(vocab.extra_stop_ids.begin(), vocab.extra_stop_ids.end(), i) == vocab.extra_stop_ids.end()) add_stop(i);
        break;
      }
    }
  }
  return make_bpe_tokenizer(std::move(vocab));
}

std::unique_ptr<Tokenizer> load_spm(const GgufFile& f, const std::vector<std::string>& tokens) {
  SpmVocab vocab;
  vocab.source = f.path();
  vocab.pieces.reserve(tokens.size());
  // GGUF stores SentencePiece pieces with U+2581 (LOWER ONE EIGHTH BLOCK) for spaces.
  static const std::string kSpaceMarker = "\xE2\x96\x81";
  for (const std::string& t : tokens) {
    std::string piece;
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, kSpaceMarker.size(), kSpaceMarker) == 0) {
        piece += ' ';
        i += kSpaceMarker.size();
      } else {
        piece += t[i++];
      }
    }
    vocab.pieces.push_back(std::move(piece));
  }
  const int n = static_cast<int>(tokens.size());
  if (const GgufValue* scores = f.opt_array("tokenizer.ggml.scores", GgufValueType::F32)) {
    if (scores->count != tokens.size()) {
      f.fail("tokenizer.ggml.scores has " + std::to_string(scores->count) + " entries for " + std::to_string(n) + " tokens");
    }
    for (uint64_t i = 0; i < scores->count; ++i) vocab.scores.push_back(static_cast<float>(scores->float_at(i)));
  } else {
    f.fail("missing metadata tokenizer.ggml.scores (needed by a SentencePiece vocabulary)");
  }
  for (int64_t t : token_types(f, tokens.size())) vocab.types.push_back(static_cast<int>(t));
  vocab.bos_id = token_id(f, "tokenizer.ggml.bos_token_id", n, 1);
  vocab.eos_id = token_id(f, "tokenizer.ggml.eos_token_id", n, 2);
  vocab.unk_id = token_id(f, "tokenizer.ggml.unknown_token_id", n, 0);
  vocab.add_dummy_prefix = f.opt_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  return make_spm_tokenizer(std::move(vocab));
}

}  // namespace

BpePreTokenizer bpe_pretokenizer_from_name(const std::string& name, const std::string& file) {
  if (name == "smollm") return BpePreTokenizer::SmolLM;
  if (name == "default" || name == "gpt2" || name == "gpt-2") return BpePreTokenizer::Gpt2;
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") return BpePreTokenizer::Llama3;
  if (name == "qwen2") return BpePreTokenizer::Qwen2;
  throw ModelError(file, "unsupported BPE pre-tokenizer '" + quote_input(name) +
                             "' (tokenizer.ggml.pre; supported: smollm, default, gpt2, llama-bpe, qwen2)");
}

std::unique_ptr<Tokenizer> tokenizer_from_gguf(const GgufFile& f) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  const GgufValue& tokens = f.get_array("tokenizer.ggml.tokens", GgufValueType::STRING);
  if (tokens.strings.empty()) f.fail("tokenizer.ggml.tokens is empty");
  if (tokens.strings.size() > (size_t{1} << 22)) f.fail("tokenizer.ggml.tokens has too many entries");
  if (model == "gpt2") return load_bpe(f, tokens.strings);
  if (model == "llama") return load_spm(f, tokens.strings);
  f.fail("unsupported tokenizer model '" + quote_input(model) + "' (tokenizer.ggml.model; supported: gpt2, llama)");
}

}  // namespace kvevict
