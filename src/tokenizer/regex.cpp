// src/tokenizer/regex.cpp — PCRE2 (8-bit, UTF + UCP, JIT) behind mla::tok::Regex, and the
// translation of Rust / Oniguruma pattern syntax to PCRE2's (regex.hpp).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <string>
#include <thread>

#include "mla/error.hpp"
#include "regex.hpp"

namespace mla::tok {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

const char* const kKimiPattern =
    R"([\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

// Unicode White_Space (PropList.txt), the set of Rust's and Oniguruma's \s, as class items.
constexpr const char* kWhiteSpaceItems =
    R"(\x{9}-\x{d}\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000})";

[[noreturn]] void bad_pattern(const std::string& what, const std::string& why, size_t at) {
  fail(ErrorKind::Unsupported, what + ": pattern " + why + " at character offset " + std::to_string(at));
}

// \p{Name} with Name a script -> \p{sc:Name}: PCRE2 (10.40 on) reads a bare script name as its
// Script_Extensions (U+3002 "。" is then Han), Rust's regex and Oniguruma as its Script.
std::string property(const std::string& esc, const std::string& what) {
  const std::string name = esc.substr(3, esc.size() - 4);
  static const char* const kCategories[] = {"C", "Cc", "Cf", "Cn", "Co", "Cs", "L", "L&", "Ll", "Lm", "Lo", "Lt", "Lu",
                                            "M", "Mc", "Me", "Mn", "N", "Nd", "Nl", "No", "P", "Pc", "Pd", "Pe", "Pf",
                                            "Pi", "Po", "Ps", "S", "Sc", "Sk", "Sm", "So", "Z", "Zl", "Zp", "Zs", "Any"};
  for (const char* c : kCategories)
    if (name == c) return esc;
  if (name.find(':') != std::string::npos || name.find('=') != std::string::npos || name[0] == '^')
    bad_pattern(what, "has a property form this reader does not translate: " + esc, 0);
  return esc.substr(0, 3) + "sc:" + name + "}";
}

// An escape starting at p[i] == '\\': its text (through a closing brace for \p{..} \x{..}).
std::string escape_at(std::string_view p, size_t& i, const std::string& what) {
  if (i + 1 >= p.size()) bad_pattern(what, "ends in a lone backslash", i);
  size_t end = i + 2;
  if ((p[i + 1] == 'p' || p[i + 1] == 'P' || p[i + 1] == 'x') && end < p.size() && p[end] == '{') {
    end = p.find('}', end);
    if (end == std::string_view::npos) bad_pattern(what, "has an unclosed \\" + std::string(1, p[i + 1]) + "{", i);
    ++end;
  }
  std::string out(p.substr(i, end - i));
  i = end;
  if ((out[1] == 'p' || out[1] == 'P') && out.size() > 4 && out[2] == '{') return property(out, what);
  return out;
}

// Parses the class opening at p[i] == '['; returns it in PCRE2 syntax (a class, or a group of
// lookaheads for an intersection) and moves i past its closing ']'.
std::string parse_class(std::string_view p, size_t& i, const std::string& what) {
  const size_t open = i++;
  bool negated = false;
  if (i < p.size() && p[i] == '^') { negated = true; ++i; }
  std::vector<std::string> operands(1);  // operands of &&, each a PCRE2 class or group
  std::string items;                     // the plain items of the current operand
  bool first = true;
  auto close_operand = [&] {
    if (!items.empty()) {
      if (!operands.back().empty()) bad_pattern(what, "mixes a nested class with other items", i);
      operands.back() = "[" + items + "]";
    }
    if (operands.back().empty()) bad_pattern(what, "has an empty operand of &&", i);
    items.clear();
  };
  while (true) {
    if (i >= p.size()) bad_pattern(what, "has an unclosed '['", open);
    const char c = p[i];
    if (c == ']' && !first) { ++i; break; }
    first = false;
    if (c == '\\') {
      if (p.substr(i, 2) == "\\s") { items += kWhiteSpaceItems; i += 2; continue; }
      if (p.substr(i, 2) == "\\S") bad_pattern(what, "has \\S inside a class", i);
      items += escape_at(p, i, what);
    } else if (c == '&' && p.substr(i, 2) == "&&") {
      close_operand();
      operands.emplace_back();
      i += 2;
    } else if (c == '[' && p.substr(i, 2) == "[:") {
      const size_t end = p.find(":]", i + 2);
      if (end == std::string_view::npos) bad_pattern(what, "has an unclosed [:", i);
      items += std::string(p.substr(i, end + 2 - i));
      i = end + 2;
    } else if (c == '[') {
      if (!items.empty() || !operands.back().empty()) bad_pattern(what, "mixes a nested class with other items", i);
      operands.back() = parse_class(p, i, what);
    } else {
      items += c;
      ++i;
    }
  }
  close_operand();
  if (operands.size() == 1) {
    if (!negated) return operands[0];
    if (operands[0].front() != '[' || operands[0][1] == '^') bad_pattern(what, "negates a nested class", open);
    return "[^" + operands[0].substr(1);
  }
  if (negated) bad_pattern(what, "negates an intersection", open);
  std::string out = "(?:";
  for (size_t k = 1; k < operands.size(); ++k) out += "(?=" + operands[k] + ")";
  return out + operands[0] + ")";
}

// True when the pattern has nothing that looks before a search's start: no lookbehind, \b, \B,
// \G, \A, ^ (outside a class's negation), backreference; then a scan may start anywhere.
bool looks_only_ahead(std::string_view p) {
  for (size_t i = 0; i < p.size(); ++i) {
    if (p.substr(i, 3) == "(?<") return false;  // a lookbehind (or a named group: kept simple)
    if (p[i] == '^' && (i == 0 || p[i - 1] != '[')) return false;
    if (p[i] == '\\' && i + 1 < p.size()) {
      const char c = p[i + 1];
      if (c == 'b' || c == 'B' || c == 'G' || c == 'A' || c == 'k' || c == 'g' || (c >= '1' && c <= '9')) return false;
      ++i;
    }
  }
  return true;
}

}  // namespace

std::string translate_pattern(std::string_view p, const std::string& what) {
  std::string out;
  out.reserve(p.size() * 2);
  for (size_t i = 0; i < p.size();) {
    if (p[i] == '\\') {
      if (p.substr(i, 2) == "\\s") { out += std::string("[") + kWhiteSpaceItems + "]"; i += 2; continue; }
      if (p.substr(i, 2) == "\\S") { out += std::string("[^") + kWhiteSpaceItems + "]"; i += 2; continue; }
      out += escape_at(p, i, what);
    } else if (p[i] == '[') {
      out += parse_class(p, i, what);
    } else {
      out += p[i++];
    }
  }
  return out;
}

std::string escape_literal(std::string_view s) {
  std::string out = "\\Q";
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.substr(i, 2) == "\\E") { out += "\\E\\\\E\\Q"; ++i; continue; }
    out += s[i];
  }
  return out + "\\E";
}

Regex::Regex(const std::string& pattern, const std::string& what) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail(ErrorKind::Unsupported, what + ": PCRE2 cannot compile the pattern: " +
                                     std::string(reinterpret_cast<const char*>(msg)) + " at offset " +
                                     std::to_string(offset));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is absent
  code_ = code;
  resync_safe_ = looks_only_ahead(pattern);
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

namespace {

// One thread's match data, match context and JIT stack (up to 16 MiB).
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

size_t utf8_char_length(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

}  // namespace

// The first match at or after `start`; false when there is none.
bool Regex::match_from(std::string_view subject, size_t start, Span& m) const {
  thread_local MatchState state;
  const auto* code = static_cast<const pcre2_code*>(code_);
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc = pcre2_match(code, s, subject.size(), start, PCRE2_NO_UTF_CHECK, state.data, state.context);
  // A very long run (10^6 letters through Kimi's lookahead groups) can outgrow the JIT stack;
  // the interpreter gives the same match with its frames on the heap.
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
    rc = pcre2_match(code, s, subject.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, state.data, state.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    fail(ErrorKind::Unsupported, "pre-token pattern: PCRE2 match failed: " + std::string(reinterpret_cast<const char*>(msg)));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
  m = {ov[0], ov[1]};
  return true;
}

namespace {

// Where the search after match m starts (an empty match advances one character); npos: the end.
size_t next_start(std::string_view subject, const Span& m) {
  if (m.end > m.begin) return m.end;
  if (m.end >= subject.size()) return std::string_view::npos;
  return m.end + utf8_char_length(static_cast<unsigned char>(subject[m.end]));
}

}  // namespace

void Regex::scan(std::string_view subject, size_t start, size_t until, std::vector<Span>& out) const {
  Span m;
  while (start != std::string_view::npos && start <= subject.size() && match_from(subject, start, m) && m.begin < until) {
    out.push_back(m);
    start = next_start(subject, m);
  }
}

void Regex::find_all(std::string_view subject, std::vector<Span>& out) const {
  scan(subject, 0, std::string_view::npos, out);
}

// Parallel find_all. Thread k scans from p_k (a character boundary) as if a search started there.
// The scan's only state is where the next search starts, and no supported pattern looks behind it,
// so once the true scan (continued from chunk k - 1) finds a match that starts where one of chunk
// k's does, the two agree from there on. Stitching redoes the true scan from the end of chunk k - 1
// until it meets a match of chunk k (usually the first), then takes chunk k's matches.
void Regex::find_all(std::string_view subject, std::vector<Span>& out, int threads) const {
  const size_t n = subject.size();
  if (threads <= 1 || !resync_safe_ || n < (size_t{1} << 16)) return find_all(subject, out);
  const size_t K = static_cast<size_t>(threads);
  std::vector<size_t> p(K + 1);
  for (size_t k = 0; k <= K; ++k) {
    p[k] = k == K ? n : n * k / K;
    while (p[k] < n && (static_cast<unsigned char>(subject[p[k]]) & 0xC0) == 0x80) ++p[k];
  }
  const auto limit = [&](size_t k) { return k + 1 == K ? std::string_view::npos : p[k + 1]; };  // chunk k's end
  std::vector<std::vector<Span>> lists(K);
  std::vector<std::thread> pool;
  for (size_t k = 1; k < K; ++k) pool.emplace_back([&, k] { scan(subject, p[k], limit(k), lists[k]); });
  scan(subject, 0, p[1], lists[0]);
  for (std::thread& t : pool) t.join();
  out.insert(out.end(), lists[0].begin(), lists[0].end());
  size_t start = lists[0].empty() ? 0 : next_start(subject, lists[0].back());
  for (size_t k = 1; k < K && start != std::string_view::npos; ++k) {
    const std::vector<Span>& l = lists[k];
    Span m;
    while (start != std::string_view::npos && start < limit(k)) {
      if (!match_from(subject, start, m)) return;  // no match anywhere after start
      const auto it = std::lower_bound(l.begin(), l.end(), m.begin, [](const Span& a, size_t b) { return a.begin < b; });
      if (it != l.end() && it->begin == m.begin) {  // met chunk k's scan: the rest of it is true
        out.insert(out.end(), it, l.end());
        start = next_start(subject, l.back());
        break;
      }
      out.push_back(m);
      start = next_start(subject, m);
    }
  }
}

}  // namespace mla::tok
