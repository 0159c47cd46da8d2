#pragma once
// What the results store keeps so that a result can be attributed by content and replayed
// (schema version 4, evals/results_schema.h). Both records are keyed by a SHA-256 of everything
// they hold, so one content is stored once (INSERT OR IGNORE) and a changed file is a new key.
//
// A policy is its exact source text plus its resolved parameters (defaults with the config's
// overrides applied, a JSON object with sorted keys), hashed as length-prefixed parts. Two files
// of the same name with different text are two policies; the same text under two names is one
// record (the leaderboard still keys rows by name and hash).
//
// A prompt is the text the model saw (evals/prompt_text.h), stored verbatim rather than as a seed
// and generator version: exact, independent of task generators and dataset files changing, at the
// cost of the text's size (once per distinct prompt). Its hash covers the three texts and the
// sample fields that decoding and scoring read (sample_json), so a replay rebuilds the sample from
// the store alone.
#include <map>
#include <string>

#include "evals/config.h"
#include "evals/prompt_text.h"
#include "evals/tasks/sample.h"

namespace kvevict::evals {

struct PolicySource {
  std::string name;         // the policy as the config wrote it (built-in name or path)
  std::string label;        // the results' name for it
  std::string text;         // the exact source compiled; "" when the runner reads no file (the fake model)
  std::string params_json;  // resolved parameters as a JSON object, keys sorted
  std::string hash;         // policy_content_hash(text, params_json)
};

std::string policy_content_hash(const std::string& text, const std::string& params_json);
// Fills `hash`.
PolicySource make_policy_source(const PolicyChoice& choice, std::string text, std::string params_json);
// {"name": "value", ...} of the choice's overrides as written (runners that compile nothing).
std::string params_json_as_written(const PolicyChoice& choice);

struct StoredPrompt {
  std::string hash;
  PromptText text;
  std::string sample_json;  // query_aware, fidelity, first_line_only, metric, references, ...
};

StoredPrompt make_stored_prompt(const Sample& sample, const PromptText& text);
// Hash of a stored prompt's parts (equals `hash` unless the row was altered).
std::string prompt_content_hash(const PromptText& text, const std::string& sample_json);
// The sample's decoding and scoring fields from `prompt.sample_json`; task, key and text fields
// are left empty (the caller has them from the result row and `prompt.text`). Throws RuntimeError
// when the JSON does not hold them.
Sample sample_from_stored(const StoredPrompt& prompt);

}  // namespace kvevict::evals
