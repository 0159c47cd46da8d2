// `kvevict check FILE...`: checks policy files. Prints one summary line per valid file (exit 0);
// prints every error of every invalid file and exits 2 if any file has an error.
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/command.h"
#include "core/util/error.h"
#include "dsl/policy_file.h"

namespace kvevict::cli {
namespace {

std::string summary(const dsl::CompiledPolicy& c) {
  const PolicyDescription& d = c.desc;
  std::ostringstream s;
  s << d.source << ": ok: " << d.name << " (" << c.params.size() << " params; score " << c.score.nodes.size() << " nodes";
  if (d.has_decode_score) s << "; decode_score " << c.decode_score.nodes.size() << " nodes";
  if (d.has_layer_weight) s << "; layer_weight " << c.layer_weight.nodes.size() << " nodes";
  if (c.head_mode.output >= 0) s << "; head_mode " << c.head_mode.nodes.size() << " nodes";
  if (c.head_weight.output >= 0) s << "; head_weight " << c.head_weight.nodes.size() << " nodes";
  if (c.channel_score.output >= 0) s << "; channel_score " << c.channel_score.nodes.size() << " nodes, prune " << c.desc.channels.prune;
  for (const auto& t : c.tables) s << "; table " << t->name << " " << t->shape_text();
  s << "; window " << (d.depends_on_prompt_len && c.window.output >= 0 ? std::string("f(prompt_len)") : std::to_string(d.window));
  s << "; prefill " << (d.run.at_prefill ? "yes" : "no") << ", decode every " << d.run.decode_every;
  if (d.select.random_share > 0) s << "; random share " << d.select.random_share;
  if (d.merge.enabled) s << "; merge" << (d.merge.method == MergeMethod::Codebook ? "" : " " + std::string(mode_name(d.merge.method)));
  if (d.run.reassign_positions) s << "; positions re-assigned";
  s << ")";
  return s.str();
}

std::function<int()> setup_check(CLI::App& app) {
  auto files = std::make_shared<std::vector<std::string>>();
  app.add_option("files", *files, "Policy files to check")->required();
  return [files] {
    int status = 0;
    for (const auto& f : *files) {
      try {
        // Flushed per file: the errors go to the unbuffered stderr, and a reader of both streams
        // (a terminal, `2>&1`) must see each file's line before the next file's errors.
        std::cout << summary(dsl::compile_policy_file(f)) << std::endl;
      } catch (const Error& e) {  // a bad file (exit 2) does not stop the others from being checked
        if (e.exit_code() != 2) throw;
        const std::string message = e.what();
        std::cerr << message << (message.empty() || message.back() != '\n' ? "\n" : "");
        status = 2;
      }
    }
    return status;
  };
}

KVEVICT_COMMAND("check", "Check policy files: syntax, types, shapes, parameters", setup_check, 40);

}  // namespace
}  // namespace kvevict::cli
