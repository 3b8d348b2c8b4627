// src/report/csv.cpp — scores.csv and heads_kept.csv.
//
// scores.csv keeps the published Kimi K2.6 layer-0 H2O demo's columns exactly (docs/outputs.md §5):
//   token_idx,attention_score,kept,category
//   0,12.345678901234567,True,sink
// and, with --text, a fifth column token_text (the token as printable text, always quoted).
// kept is True/False (pandas' spelling), category sink/recent/heavy/evicted, and the score
// is printed with %.17g so that parsing it gives back the same double.
//
// Shape legend: S = tokens, n = heads.
#include "mla/error.hpp"
#include "mla/report.hpp"

namespace mla {
namespace {

void append_row(std::string& out, size_t i, double score, TokenCategory c) {
  out += std::to_string(i);
  out += ',';
  out += format_double(score);
  out += c == TokenCategory::Evicted ? ",False," : ",True,";
  out += category_name(c);
  out += '\n';
}

}  // namespace

std::string scores_csv(std::span<const double> scores, const H2ODecision& d, std::span<const std::string> token_text) {
  if (scores.size() != d.category.size())
    fail(ErrorKind::InvalidArgument, "scores_csv: " + std::to_string(scores.size()) + " scores but " +
                                         std::to_string(d.category.size()) + " decisions");
  if (!token_text.empty() && token_text.size() != scores.size())
    fail(ErrorKind::InvalidArgument, "scores_csv: " + std::to_string(token_text.size()) + " token texts for " +
                                         std::to_string(scores.size()) + " tokens");
  std::string out = token_text.empty() ? "token_idx,attention_score,kept,category\n"
                                       : "token_idx,attention_score,kept,category,token_text\n";
  for (size_t i = 0; i < scores.size(); ++i) {
    append_row(out, i, scores[i], d.category[i]);
    if (token_text.empty()) continue;
    out.back() = ',';  // the row's newline becomes the separator of the quoted text
    out += '"';
    for (char c : token_text[i]) {
      if (c == '"') out += '"';
      out += c;
    }
    out += "\"\n";
  }
  return out;
}

// head_scores [n * S], decisions [n]: one row per (head, token), head-major.
std::string heads_csv(std::span<const double> head_scores, const std::vector<H2ODecision>& decisions) {
  std::string out = "head,token_idx,attention_score,kept,category\n";
  if (decisions.empty()) return out;
  const size_t seq_len = decisions[0].category.size();  // S
  if (head_scores.size() != decisions.size() * seq_len)
    fail(ErrorKind::InvalidArgument, "heads_csv: " + std::to_string(head_scores.size()) + " scores for " +
                                         std::to_string(decisions.size()) + " heads of " + std::to_string(seq_len) + " tokens");
  for (size_t h = 0; h < decisions.size(); ++h)
    for (size_t i = 0; i < seq_len; ++i) {
      out += std::to_string(h);
      out += ',';
      append_row(out, i, head_scores[h * seq_len + i], decisions[h].category[i]);
    }
  return out;
}

}  // namespace mla
