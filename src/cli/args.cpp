#include "args.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "mla/error.hpp"

namespace mla::cli {
namespace {

[[noreturn]] void bad(const std::string& msg) { fail(ErrorKind::InvalidArgument, msg); }

const FlagSpec* find_flag(const CommandSpec& spec, const std::string& name) {
  for (const auto& f : spec.flags)
    if (f.name == name) return &f;
  return nullptr;
}

bool parse_i64(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0') return false;
  out = v;
  return true;
}

}  // namespace

Args Args::parse(const CommandSpec& spec, const std::vector<std::string>& argv) {
  Args a;
  a.command_ = spec.name;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& tok = argv[i];
    if (tok == "--help" || tok == "-h") {
      a.help_ = true;
      continue;
    }
    if (tok.rfind("--", 0) == 0 && tok.size() > 2) {
      std::string name = tok.substr(2), value;
      bool inline_value = false;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        inline_value = true;
      }
      const FlagSpec* f = find_flag(spec, name);
      if (!f) bad("unknown flag --" + name + " for '" + spec.name + "' (see mla-h2o " + spec.name + " --help)");
      if (a.values_.count(name)) bad("flag --" + name + " given twice");
      if (f->value_name.empty()) {
        if (inline_value) bad("flag --" + name + " takes no value");
        a.values_[name] = "1";
      } else {
        if (!inline_value) {
          if (i + 1 >= argv.size()) bad("flag --" + name + " needs a value (" + f->value_name + ")");
          value = argv[++i];
        }
        a.values_[name] = value;
      }
      continue;
    }
    if (tok.size() > 1 && tok[0] == '-' && !(tok[1] >= '0' && tok[1] <= '9'))
      bad("unknown flag " + tok + " for '" + spec.name + "' (see mla-h2o " + spec.name + " --help)");
    if (static_cast<int>(a.positional_.size()) >= spec.max_positional)
      bad("unexpected argument '" + tok + "' for '" + spec.name + "'");
    a.positional_.push_back(tok);
  }
  return a;
}

std::string Args::str(const std::string& flag, const std::string& fallback) const {
  auto it = values_.find(flag);
  return it == values_.end() ? fallback : it->second;
}

int64_t Args::integer(const std::string& flag, int64_t fallback, int64_t min_value, int64_t max_value) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return fallback;
  int64_t v = 0;
  if (!parse_i64(it->second, v)) bad("--" + flag + ": '" + it->second + "' is not an integer");
  if (v < min_value || v > max_value) {
    std::ostringstream os;
    os << "--" << flag << ": " << v << " is out of range";
    if (min_value != INT64_MIN && max_value != INT64_MAX) os << " [" << min_value << ", " << max_value << "]";
    else if (min_value != INT64_MIN) os << " (must be >= " << min_value << ")";
    else os << " (must be <= " << max_value << ")";
    bad(os.str());
  }
  return v;
}

double Args::real(const std::string& flag, double fallback) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return fallback;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || errno != 0 || *end != '\0' || !std::isfinite(v))
    bad("--" + flag + ": '" + it->second + "' is not a finite number");
  return v;
}

std::string Args::choice(const std::string& flag, const std::vector<std::string>& choices,
                         const std::string& fallback) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return fallback;
  for (const auto& c : choices)
    if (c == it->second) return c;
  std::string list;
  for (size_t i = 0; i < choices.size(); ++i) list += (i ? "|" : "") + choices[i];
  bad("--" + flag + ": '" + it->second + "' is not one of " + list);
}

std::vector<int64_t> Args::int_list(const std::string& flag, const std::vector<int64_t>& fallback) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return fallback;
  return parse_int_list(it->second, "--" + flag);
}

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  std::string cur;
  bool item_since_comma = false, comma_seen = false;
  auto flush = [&] {
    if (cur.empty()) return;
    int64_t v = 0;
    if (!parse_i64(cur, v)) bad(what + ": '" + printable_text(cur) + "' is not an integer");
    out.push_back(v);
    item_since_comma = true;
    cur.clear();
  };
  auto empty_item = [&] { bad(what + ": empty item in '" + printable_text(text) + "' (expected a list like 3,17,250)"); };
  for (size_t at = 0; at < text.size(); ++at) {
    const char c = text[at];
    if (c == '\0')  // a C-string parse would end the list there and silently drop the rest
      bad(what + ": a NUL byte at offset " + std::to_string(at) + " (expected a list like 3,17,250)");
    if (c == ',') {
      flush();
      if (!item_since_comma) empty_item();  // ",5", "40,,50"
      item_since_comma = false;
      comma_seen = true;
    } else if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
      flush();
    } else {
      cur += c;
    }
  }
  flush();
  if (comma_seen && !item_since_comma) empty_item();  // "40,"
  if (out.empty()) bad(what + ": empty list");
  return out;
}

std::string help_text(const CommandSpec& spec) {
  std::ostringstream os;
  os << spec.synopsis << "\n\nusage: " << spec.usage << "\n";
  if (!spec.positional_help.empty()) os << "\n  " << spec.positional_help << "\n";
  if (!spec.flags.empty()) os << "\noptions:\n";
  for (const auto& f : spec.flags) {
    std::string lhs = "  --" + f.name + (f.value_name.empty() ? "" : " " + f.value_name);
    os << lhs;
    if (lhs.size() < 30) os << std::string(30 - lhs.size(), ' ');
    else os << "\n" << std::string(30, ' ');
    os << f.help;
    if (!f.default_value.empty()) os << " (default " << f.default_value << ")";
    os << "\n";
  }
  os << "  --help                      this text\n";
  return os.str();
}

bool print_help_if_asked(const Args& a, const CommandSpec& spec) {
  if (!a.help()) return false;
  std::fputs(help_text(spec).c_str(), stdout);
  return true;
}

}  // namespace mla::cli
