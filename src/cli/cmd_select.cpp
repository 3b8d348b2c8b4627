// src/cli/cmd_select.cpp — `mla-h2o select`: the H2O decision on scores produced by any
// implementation (a CSV column, or a safetensors tensor), with the same report and files as
// `run` (scores.csv, report.json, scores.svg, report.txt; heads_kept.csv with --per-head).
//
// Accepted inputs (chosen by the file name: *.safetensors, else CSV):
//   CSV          a header row, then one row per token; the score column (--column, default
//                attention_score). A token_idx column, when present, must count 0, 1, 2, ...
//                --per-head: columns head, token_idx and the score column, head-major
//                (all tokens of head 0, then head 1, ...), as heads_kept.csv is written.
//   safetensors  tensor --tensor: [S] (default token_scores) or, with --per-head, [n, S]
//                (default head_scores); the layer-level scores are then the sum over heads.
// Every bad value (not a number, NaN, infinite, negative) is an error naming file and line
// (CSV) or index (safetensors).
//
// Shape legend: S = tokens, n = heads.
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>

#include "args.hpp"
#include "commands.hpp"
#include "inputs.hpp"
#include "mla/error.hpp"
#include "mla/h2o_selector.hpp"
#include "mla/output_set.hpp"
#include "mla/regular_file.hpp"
#include "mla/report.hpp"
#include "mla/safetensors.hpp"

namespace mla::cli {
namespace {

CommandSpec select_spec() {
  CommandSpec spec;
  spec.name = "select";
  spec.synopsis = "mla-h2o select: H2O heavy-hitter selection on scores from any implementation (CSV or safetensors)";
  spec.usage = "mla-h2o select --scores FILE [--column NAME | --tensor NAME] [--sinks N --recent N --budget N] [--per-head] [--out DIR]";
  spec.flags = {
      {"scores", "FILE", "scores: a CSV file, or a .safetensors file (required)", ""},
      {"column", "NAME", "CSV column holding the scores", "attention_score"},
      {"tensor", "NAME", "safetensors tensor: [S], or [heads, S] with --per-head", "token_scores (head_scores with --per-head)"},
      {"sinks", "N", "first N tokens always kept", "4"},
      {"recent", "N", "last N tokens always kept", "32"},
      {"budget", "N", "heavy hitters kept among the rest", "64"},
      {"per-head", "", "one decision per head (CSV: head,token_idx,<column> rows; safetensors: [heads, S])", ""},
      {"out", "DIR", "output directory (created)", "./mla-h2o-out"},
  };
  return spec;
}

// Scores as read: [n * S] when per head (n > 0), else [S].
struct ScoreInput {
  std::vector<double> scores;  // [S]
  int64_t n_heads = 0;
  std::vector<double> head_scores;  // [n * S]
  std::string description;
};

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  std::string t = s.substr(b, e - b);
  if (t.size() >= 2 && t.front() == '"' && t.back() == '"') t = t.substr(1, t.size() - 2);
  return t;
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == ',') {
      out.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(trim(cur));
  return out;
}

// A score field: a finite, non-negative number, or an error naming the line and column.
double parse_score(const std::string& field, const std::string& where) {
  if (field.empty()) fail(ErrorKind::InvalidValue, where + " is empty");
  char* end = nullptr;
  const double v = std::strtod(field.c_str(), &end);  // underflow to 0 or a subnormal is accepted
  if (end == field.c_str() || *end != '\0')
    fail(ErrorKind::InvalidValue, where + ": '" + printable_text(field, 40) + "' is not a number");
  if (std::isnan(v)) fail(ErrorKind::InvalidValue, where + " is NaN");
  if (std::isinf(v)) fail(ErrorKind::InvalidValue, where + ": '" + printable_text(field, 40) + "' is infinite or out of range");
  if (v < 0)
    fail(ErrorKind::InvalidValue, where + ": '" + printable_text(field, 40) + "' is negative (scores are attention mass, >= 0)");
  return v;
}

int64_t parse_index(const std::string& field, const std::string& where) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(field.c_str(), &end, 10);
  if (field.empty() || end == field.c_str() || *end != '\0' || errno != 0 || v < 0)
    fail(ErrorKind::InvalidValue, where + ": '" + printable_text(field, 40) + "' is not a non-negative integer");
  return v;
}

ScoreInput read_csv(const std::string& path, const std::string& column, bool per_head) {
  std::istringstream in(read_regular_file(path, int64_t{1} << 32));  // a FIFO or device is refused
  std::string line;
  if (!std::getline(in, line)) fail(ErrorKind::InvalidValue, path + ": empty file (expected a header row)");
  if (line.size() >= 3 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line = line.substr(3);  // UTF-8 BOM
  const std::vector<std::string> header = split_csv_line(line);
  auto find = [&](const std::string& name) -> int64_t {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return static_cast<int64_t>(i);
    return -1;
  };
  const int64_t col = find(column), tok_col = find("token_idx"), head_col = find("head");
  if (col < 0) {
    std::string cols;
    for (const auto& h : header) cols += (cols.empty() ? "" : ", ") + h;
    fail(ErrorKind::InvalidValue, path + " line 1: no column '" + printable_text(column) + "' in the header (columns: " +
                                      printable_text(cols, 200) + "); choose one with --column");
  }
  if (per_head && (head_col < 0 || tok_col < 0))
    fail(ErrorKind::InvalidValue, path + " line 1: --per-head needs columns 'head' and 'token_idx' (as heads_kept.csv has)");

  ScoreInput out;
  std::vector<std::vector<double>> heads;  // [n][S]
  int64_t line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (trim(line).empty()) continue;
    const std::vector<std::string> f = split_csv_line(line);
    const std::string at = path + " line " + std::to_string(line_no);
    if (f.size() != header.size())
      fail(ErrorKind::InvalidValue, at + ": " + std::to_string(f.size()) + " fields, the header has " +
                                        std::to_string(header.size()));
    const double v = parse_score(f[static_cast<size_t>(col)], at + ", column '" + column + "'");
    if (!per_head) {
      if (tok_col >= 0) {
        const int64_t t = parse_index(f[static_cast<size_t>(tok_col)], at + ", column 'token_idx'");
        if (t != static_cast<int64_t>(out.scores.size()))
          fail(ErrorKind::InvalidValue, at + ": token_idx " + std::to_string(t) + " where " +
                                            std::to_string(out.scores.size()) + " was expected (rows must be tokens 0, 1, 2, ...)");
      }
      out.scores.push_back(v);
      continue;
    }
    const int64_t h = parse_index(f[static_cast<size_t>(head_col)], at + ", column 'head'");
    const int64_t t = parse_index(f[static_cast<size_t>(tok_col)], at + ", column 'token_idx'");
    if (h == static_cast<int64_t>(heads.size()) && (heads.empty() || !heads.back().empty())) heads.emplace_back();
    if (h != static_cast<int64_t>(heads.size()) - 1)
      fail(ErrorKind::InvalidValue, at + ": head " + std::to_string(h) + " out of order (rows must be head-major: head 0, then 1, ...)");
    if (t != static_cast<int64_t>(heads.back().size()))
      fail(ErrorKind::InvalidValue, at + ": token_idx " + std::to_string(t) + " where " +
                                        std::to_string(heads.back().size()) + " was expected for head " + std::to_string(h));
    heads.back().push_back(v);
  }
  if (!per_head) {
    if (out.scores.empty()) fail(ErrorKind::InvalidValue, path + ": no data rows after the header");
    out.description = path + " (CSV column '" + column + "')";
    return out;
  }
  if (heads.empty()) fail(ErrorKind::InvalidValue, path + ": no data rows after the header");
  for (size_t h = 1; h < heads.size(); ++h)
    if (heads[h].size() != heads[0].size())
      fail(ErrorKind::InvalidValue, path + ": head " + std::to_string(h) + " has " + std::to_string(heads[h].size()) +
                                        " tokens but head 0 has " + std::to_string(heads[0].size()));
  out.n_heads = static_cast<int64_t>(heads.size());
  out.scores.assign(heads[0].size(), 0.0);
  for (const auto& row : heads) {
    out.head_scores.insert(out.head_scores.end(), row.begin(), row.end());
    for (size_t i = 0; i < row.size(); ++i) out.scores[i] += row[i];  // sum over heads, head 0 first
  }
  out.description = path + " (CSV column '" + column + "', " + std::to_string(out.n_heads) + " heads)";
  return out;
}

ScoreInput read_safetensors(const std::string& path, const std::string& tensor, bool per_head) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  const TensorInfo* info = &find_tensor_or_fail(f, "--scores", path, tensor, "--tensor");
  const std::string where = path + ", tensor '" + tensor + "'";
  const std::vector<double> v = f.to_double(*info);
  std::vector<int64_t> shape(info->shape.begin(), info->shape.end());
  ScoreInput out;
  if (!per_head) {
    if (shape.size() != 1) fail(ErrorKind::Shape, where + " has shape " + shape_string(shape) + "; expected [S] (or --per-head for [heads, S])");
    out.scores = v;
  } else {
    if (shape.size() != 2) fail(ErrorKind::Shape, where + " has shape " + shape_string(shape) + "; --per-head expects [heads, S]");
    out.n_heads = shape[0];
    out.head_scores = v;
    const size_t S = static_cast<size_t>(shape[1]);
    out.scores.assign(S, 0.0);
    for (size_t h = 0; h < static_cast<size_t>(shape[0]); ++h)
      for (size_t i = 0; i < S; ++i) {
        const double x = v[h * S + i];
        if (!std::isfinite(x) || x < 0)
          fail(ErrorKind::InvalidValue, where + " value at [" + std::to_string(h) + ", " + std::to_string(i) + "] is " +
                                            (std::isnan(x) ? "NaN" : std::isinf(x) ? "infinite" : "negative"));
        out.scores[i] += x;
      }
  }
  for (size_t i = 0; i < out.scores.size(); ++i)
    if (!std::isfinite(out.scores[i]) || out.scores[i] < 0)
      fail(ErrorKind::InvalidValue, where + " value at index " + std::to_string(i) + " is " +
                                        (std::isnan(out.scores[i]) ? "NaN" : std::isinf(out.scores[i]) ? "infinite" : "negative"));
  if (out.scores.empty()) fail(ErrorKind::InvalidValue, where + " is empty");
  out.description = path + " (tensor '" + tensor + "', " + std::string(dtype_name(info->dtype)) + " " + shape_string(shape) + ")";
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

int cmd_select(const std::vector<std::string>& argv) {
  const CommandSpec spec = select_spec();
  const Args a = Args::parse(spec, argv);
  if (print_help_if_asked(a, spec)) return 0;
  const std::string path = a.str("scores");
  if (path.empty()) fail(ErrorKind::InvalidArgument, "--scores FILE is required (see mla-h2o select --help)");
  const bool per_head = a.has("per-head");
  const bool safetensors = ends_with(path, ".safetensors");
  if (safetensors && a.has("column")) fail(ErrorKind::InvalidArgument, "--column applies to CSV input; use --tensor for " + path);
  if (!safetensors && a.has("tensor")) fail(ErrorKind::InvalidArgument, "--tensor applies to .safetensors input; use --column for " + path);
  H2OOptions opt;
  opt.sinks = a.integer("sinks", 4, 0);
  opt.recent = a.integer("recent", 32, 0);
  opt.heavy = a.integer("budget", 64, 0);
  const std::string out_dir = a.str("out", "mla-h2o-out");
  if (!std::filesystem::exists(path)) fail(ErrorKind::Io, "--scores " + path + ": no such file");
  OutputSet out(out_dir, "select", OutputSet::Lock::FailIfHeld, {path});

  const auto t0 = std::chrono::steady_clock::now();
  const ScoreInput in = safetensors ? read_safetensors(path, a.str("tensor", per_head ? "head_scores" : "token_scores"), per_head)
                                    : read_csv(path, a.str("column", "attention_score"), per_head);
  const auto t1 = std::chrono::steady_clock::now();
  Report rep;
  rep.h2o = opt;
  rep.scores = in.scores;
  rep.decision = h2o_select(rep.scores, opt);
  if (per_head) {
    rep.n_heads = in.n_heads;
    rep.head_scores = in.head_scores;
    rep.head_decisions = h2o_select_per_head(rep.head_scores, in.n_heads, opt);
  }
  const auto t2 = std::chrono::steady_clock::now();
  RunInfo& info = rep.info;
  info.command = "select";
  info.input_source = in.description;
  info.load_seconds = std::chrono::duration<double>(t1 - t0).count();
  info.h2o_seconds = std::chrono::duration<double>(t2 - t1).count();
  info.stage_seconds = {{"read scores", info.load_seconds}, {"h2o select", info.h2o_seconds}};
  out.write("scores.csv", scores_csv(rep.scores, rep.decision));
  if (per_head) out.write("heads_kept.csv", heads_csv(rep.head_scores, rep.head_decisions));
  out.write("scores.svg", scores_svg(rep.scores, rep.decision,
                                     "H2O on " + std::filesystem::path(path).filename().string() + ": " +
                                         std::to_string(rep.decision.kept()) + " of " + std::to_string(rep.scores.size()) +
                                         " tokens kept"));
  info.files = out.paths_with({"report.txt", "report.json"});
  const std::string text = report_text(rep);
  out.write("report.txt", text);
  out.write("report.json", report_json(rep));
  out.commit();
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace mla::cli
