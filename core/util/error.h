#pragma once
// Error types shared by every part of kvevict. Each carries the process exit code it maps to:
//   UsageError   (2) bad command line, bad config or policy file, bad parameter value
//   InputError   (2) a file a user named that cannot be used as input (missing, not a regular file,
//                    too large); the message reads "<file>: <what>"
//   ModelError   (2) a model or tokenizer file that is malformed, truncated, unsupported or holds
//                    non-finite weights: like a bad policy or config file, an input error
//   RuntimeError (1) anything else that fails at run time (I/O, device, database, out of memory)
// The rule: 2 when the user can fix it by changing the command line or a file they named, 1 when
// the same command could succeed on another run or machine.
// Messages name the file (and line:col where there is one) and say what is wrong.
#include <stdexcept>
#include <string>

namespace kvevict {

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, int exit_code) : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message) : Error(message, 2) {}
};

class ModelError : public Error {
 public:
  // `file` is the offending file; the message reads "<file>: <what>".
  ModelError(const std::string& file, const std::string& what) : Error(file + ": " + what, 2) {}
};

class InputError : public Error {
 public:
  // `file` is the offending file; the message reads "<file>: <what>".
  InputError(const std::string& file, const std::string& what) : Error(file + ": " + what, 2) {}
};

class RuntimeError : public Error {
 public:
  explicit RuntimeError(const std::string& message) : Error(message, 1) {}
};

}  // namespace kvevict
