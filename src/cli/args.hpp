// src/cli/args.hpp — the CLI's flag parser: every subcommand declares its flags once;
// unknown flags, missing values and malformed numbers become one clear error line.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mla::cli {

struct FlagSpec {
  std::string name;        // without the leading "--"
  std::string value_name;  // "" for a boolean switch
  std::string help;
  std::string default_value;  // shown in --help; "" = none
};

struct CommandSpec {
  std::string name;      // "run"
  std::string synopsis;  // one line
  std::string usage;     // "mla-h2o run --checkpoint PATH [options]"
  std::vector<FlagSpec> flags;
  int max_positional = 0;
  std::string positional_help;  // e.g. "PATH  checkpoint directory or .safetensors file"
};

class Args {
 public:
  // Parses argv (after the subcommand). Throws Error(InvalidArgument). Sets help() if
  // --help/-h was given.
  static Args parse(const CommandSpec& spec, const std::vector<std::string>& argv);

  bool help() const { return help_; }
  bool has(const std::string& flag) const { return values_.count(flag) != 0; }
  const std::vector<std::string>& positional() const { return positional_; }

  std::string str(const std::string& flag, const std::string& fallback = "") const;
  int64_t integer(const std::string& flag, int64_t fallback, int64_t min_value = INT64_MIN,
                  int64_t max_value = INT64_MAX) const;
  double real(const std::string& flag, double fallback) const;
  // One of `choices`, else an error listing them.
  std::string choice(const std::string& flag, const std::vector<std::string>& choices,
                     const std::string& fallback) const;
  // "0,1,5" -> {0,1,5}
  std::vector<int64_t> int_list(const std::string& flag, const std::vector<int64_t>& fallback) const;

 private:
  std::string command_;
  bool help_ = false;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

std::string help_text(const CommandSpec& spec);
// When --help/-h was given: prints help_text(spec) to stdout and returns true (the command then
// returns 0 without doing anything else).
bool print_help_if_asked(const Args& a, const CommandSpec& spec);
// Parses "3,17,250" (spaces and newlines allowed as separators too); errors name `what`.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what);

}  // namespace mla::cli
