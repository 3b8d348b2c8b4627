// src/tokenizer/regex.hpp — the pre-token patterns through PCRE2 (UTF + UCP, JIT).
//
// The patterns are written for Rust's regex / fancy-regex (tiktoken) and Oniguruma (HF
// tokenizers). translate_pattern rewrites the two constructs whose PCRE2 meaning differs:
//   * class intersection [A&&[^B]] (Rust only) -> (?:(?![B])[A]);
//   * \s and \S -> an explicit list of Unicode White_Space (PCRE2's \s under UCP is Z + the ASCII
//     controls, without U+0085, which Rust's and Oniguruma's \s include).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mla::tok {

struct Span {
  size_t begin = 0, end = 0;  // byte offsets into the subject
};

class Regex {
 public:
  // Compiles `pattern` (already translated); errors name `what` and PCRE2's message + offset.
  Regex(const std::string& pattern, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Every non-overlapping match of the subject, left to right (an empty match advances one
  // character, as Oniguruma's find_iter does). `subject` is valid UTF-8. Thread-safe.
  void find_all(std::string_view subject, std::vector<Span>& out) const;
  // The same matches, found by `threads` threads on a long subject (regex.cpp says why it is exact).
  void find_all(std::string_view subject, std::vector<Span>& out, int threads) const;
  const std::string& pattern() const { return pattern_; }

 private:
  bool match_from(std::string_view subject, size_t start, Span& m) const;
  // The matches of the scan whose first search starts at `start`, while they start before `until`.
  void scan(std::string_view subject, size_t start, size_t until, std::vector<Span>& out) const;

  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool resync_safe_ = false;  // no look-behind of any kind: a scan may start mid-subject
};

// The pattern in PCRE2 syntax (see above); `what` names it in errors.
std::string translate_pattern(std::string_view pattern, const std::string& what);
// A literal string as a PCRE2 pattern (Split's {"String": ...}).
std::string escape_literal(std::string_view s);

// GPT-2's pattern (ByteLevel's use_regex) and Kimi's (tokenization_kimi.py), as written upstream.
extern const char* const kGpt2Pattern;
extern const char* const kKimiPattern;

}  // namespace mla::tok
