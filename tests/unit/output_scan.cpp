// tests/unit/output_scan.cpp — see output_scan.hpp.
#include "output_scan.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <simdjson.h>
#include <sstream>

namespace mla::test {
namespace {

namespace fs = std::filesystem;

// The outputs meant to hold NaN or Inf: a path holding `where` (a scratch tag and a file name) is
// not scanned, for `why`. One list, each entry with its reason.
struct Allowed {
  const char* where;
  const char* why;
};
// Empty today: no suite's successful command writes NaN or Inf (`compare` fed NaN exits non-zero).
constexpr Allowed kAllowed[] = {
    {"", ""},  // (an empty entry matches nothing: C++ has no zero-length array)
};

bool allowed(const std::string& path) {
  for (const Allowed& a : kAllowed)
    if (a.where[0] != '\0' && path.find(a.where) != std::string::npos) return true;
  return false;
}

bool word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

std::string finding(const fs::path& p, std::string_view text, size_t at) {
  const size_t from = at < 40 ? 0 : at - 40;
  std::string context(text.substr(from, 80));
  for (char& c : context)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return p.string() + ": '" + std::string(text.substr(at, 3)) + "' at byte " + std::to_string(at) + ": ..." + context + "...";
}

// Whether the element of `width` bytes at `at` holds NaN or Inf: F64 and F32 by value; F16 and
// BF16 by their exponent bits (all ones: Inf or NaN).
bool non_finite_element(const std::string& bytes, size_t at, std::string_view dtype) {
  if (dtype == "F64" || dtype == "F32") {
    double v = 0;
    if (dtype == "F32") {
      float f = 0;
      std::memcpy(&f, bytes.data() + at, 4);
      v = f;
    } else {
      std::memcpy(&v, bytes.data() + at, 8);
    }
    return !std::isfinite(v);
  }
  uint16_t h = 0;
  std::memcpy(&h, bytes.data() + at, 2);
  const uint16_t exponent = dtype == "F16" ? 0x7C00 : 0x7F80;
  return (h & exponent) == exponent;
}

// The floating-point values of a safetensors file (F64, F32, F16, BF16; up to 64 MiB: the dumps
// of small runs, a larger file by its header alone) that are not finite: the first per tensor.
void scan_safetensors(const fs::path& p, std::vector<std::string>& out) {
  std::error_code ec;
  const bool whole = fs::file_size(p, ec) <= (uintmax_t{64} << 20) && !ec;
  std::string bytes;
  if (whole) {
    bytes = read_all(p);
  } else {  // the 8-byte length and the header only
    std::ifstream f(p, std::ios::binary);
    char len[8] = {};
    f.read(len, 8);
    uint64_t n = 0;
    std::memcpy(&n, len, 8);
    if (!f || n > (uint64_t{100} << 20)) return;
    bytes.assign(len, 8);
    bytes.resize(8 + n);
    f.read(bytes.data() + 8, static_cast<std::streamsize>(n));
    if (!f) return;
  }
  uint64_t n = 0;
  if (bytes.size() < 8) return;
  std::memcpy(&n, bytes.data(), 8);
  if (n > bytes.size() - 8) return;
  const std::string_view header(bytes.data() + 8, n);
  for (size_t at : non_finite_tokens(header)) out.push_back(finding(p, header, 8 + at));
  if (!whole) return;
  simdjson::dom::parser parser;
  simdjson::dom::object tensors;
  if (parser.parse(header.data(), header.size()).get(tensors)) return;
  for (const auto [name, t] : tensors) {
    std::string_view dtype;
    if (name == "__metadata__" || t["dtype"].get(dtype)) continue;
    const size_t width = dtype == "F64" ? 8 : dtype == "F32" ? 4 : (dtype == "F16" || dtype == "BF16") ? 2 : 0;
    if (width == 0) continue;
    const size_t begin = 8 + n + uint64_t(t["data_offsets"].at(0)), end = 8 + n + uint64_t(t["data_offsets"].at(1));
    for (size_t i = begin; i + width <= end && end <= bytes.size(); i += width)
      if (non_finite_element(bytes, i, dtype)) {
        out.push_back(p.string() + ": tensor " + std::string(name) + " (" + std::string(dtype) +
                      ") holds NaN or Inf (element " + std::to_string((i - begin) / width) + ")");
        break;
      }
  }
}

void scan_file(const fs::path& p, std::vector<std::string>& out) {
  if (allowed(p.string())) return;
  if (p.extension() == ".safetensors") return scan_safetensors(p, out);
  const std::string text = read_all(p);
  for (size_t at : non_finite_tokens(text)) out.push_back(finding(p, text, at));
}

}  // namespace

std::vector<size_t> non_finite_tokens(std::string_view text) {
  std::vector<size_t> hits;
  const auto lower = [&](size_t i) { return static_cast<char>(std::tolower(static_cast<unsigned char>(text[i]))); };
  for (size_t i = 0; i + 3 <= text.size(); ++i) {
    const char a = lower(i), b = lower(i + 1), c = lower(i + 2);
    const bool nan = a == 'n' && b == 'a' && c == 'n', inf = a == 'i' && b == 'n' && c == 'f';
    if (!nan && !inf) continue;
    // before: the start, or a non-word byte; a sign counts as a number's only when no word precedes it
    size_t before = i;
    if (before > 0 && (text[before - 1] == '-' || text[before - 1] == '+')) --before;
    if (before > 0 && (word_char(text[before - 1]) || (before < i && text[before - 1] == '.'))) continue;
    if (i > 0 && word_char(text[i - 1])) continue;
    size_t end = i + 3;
    if (inf && text.size() >= end + 5) {
      std::string rest(text.substr(end, 5));
      for (char& ch : rest) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (rest == "inity") end += 5;
    }
    if (end < text.size() && (word_char(text[end]) || text[end] == '-')) continue;
    hits.push_back(i);
  }
  return hits;
}

std::vector<std::string> scan_outputs(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (!it->is_directory(ec)) continue;
    const fs::path dir = it->path();
    if (fs::is_regular_file(dir / ".mla-h2o-set", ec)) {
      // the files the set's manifest lists ("file SIZE FINGERPRINT NAME"): what mla-h2o wrote, not
      // what a test put beside it (a tokenizer.json copied into a synth checkpoint names "Ġnan")
      const std::string manifest = read_all(dir / ".mla-h2o-set");
      for (size_t at = 0; at < manifest.size();) {
        const size_t end = std::min(manifest.find('\n', at), manifest.size());
        const std::string line = manifest.substr(at, end - at);
        at = end + 1;
        if (line.rfind("file ", 0) != 0) continue;
        const size_t sp1 = line.find(' ', 5), sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
        if (sp2 == std::string::npos) continue;
        const fs::path f = dir / line.substr(sp2 + 1);
        if (fs::is_regular_file(f, ec) && !fs::is_symlink(f, ec)) scan_file(f, out);
      }
    } else if (fs::is_regular_file(dir / "exit", ec) && read_all(dir / "exit") == "0") {
      for (const char* f : {"stdout", "stderr"})
        if (fs::is_regular_file(dir / f, ec)) scan_file(dir / f, out);
    }
  }
  return out;
}

}  // namespace mla::test
