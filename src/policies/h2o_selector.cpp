// src/policies/h2o_selector.cpp — the standalone H2O heavy-hitter selector (include/mla/h2o_selector.hpp).
//
// Given one accumulated attention score per token (the mass the token received, summed
// over heads and queries — H2O, Zhang et al. 2023, §3 "heavy hitters"), split the tokens
// into four disjoint sets, in this order of precedence:
//
//   pass 1  sinks   = [0, n_sink)                n_sink   = min(sinks, S)
//   pass 2  recent  = [recent_begin, S)          recent_begin = max(n_sink, S - recent)
//                     (a token in both windows stays a sink)
//   pass 3  heavy   = the min(heavy, M) highest scores of the middle [n_sink, recent_begin),
//                     M = recent_begin - n_sink; ties go to the lower index
//   pass 4  evicted = the rest of the middle.
//
// The ordering "score descending, then index ascending" is a strict total order on the
// middle tokens, so the decision is deterministic and does not depend on the sort algorithm.
//
// Shape legend: S = sequence length (tokens), n = heads.
#include "mla/h2o_selector.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "mla/error.hpp"

namespace mla {

const char* category_name(TokenCategory c) {
  switch (c) {
    case TokenCategory::Sink: return "sink";
    case TokenCategory::Recent: return "recent";
    case TokenCategory::Heavy: return "heavy";
    case TokenCategory::Evicted: return "evicted";
  }
  return "unknown";
}

std::vector<int64_t> H2ODecision::kept_indices() const {
  std::vector<int64_t> kept;  // [kept()] ascending
  for (size_t i = 0; i < category.size(); ++i)
    if (category[i] != TokenCategory::Evicted) kept.push_back(static_cast<int64_t>(i));
  return kept;
}

namespace {

void check_options(const H2OOptions& opt) {
  if (opt.sinks < 0) fail(ErrorKind::InvalidArgument, "H2O sinks must be >= 0, got " + std::to_string(opt.sinks));
  if (opt.recent < 0) fail(ErrorKind::InvalidArgument, "H2O recent must be >= 0, got " + std::to_string(opt.recent));
  if (opt.heavy < 0) fail(ErrorKind::InvalidArgument, "H2O heavy-hitter count (--budget) must be >= 0, got " + std::to_string(opt.heavy));
}

// A score must be a finite, non-negative number (it is a sum of probabilities).
// `where` names the token for the error ("token 17" or "head 3, token 17").
void check_score(double s, const std::string& where) {
  if (std::isnan(s)) fail(ErrorKind::InvalidValue, "H2O score of " + where + " is NaN");
  if (std::isinf(s)) fail(ErrorKind::InvalidValue, "H2O score of " + where + " is infinite");
  if (s < 0.0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", s);
    fail(ErrorKind::InvalidValue, "H2O score of " + where + " is negative (" + buf + ")");
  }
}

// Passes 1-4 on scores that are already validated.
H2ODecision select_validated(std::span<const double> scores, const H2OOptions& opt) {
  const int64_t seq_len = static_cast<int64_t>(scores.size());  // S
  H2ODecision d;
  d.category.assign(scores.size(), TokenCategory::Evicted);  // [S]

  // pass 1: sinks
  const int64_t n_sink = std::min(opt.sinks, seq_len);
  for (int64_t i = 0; i < n_sink; ++i) d.category[static_cast<size_t>(i)] = TokenCategory::Sink;

  // pass 2: recent window, minus tokens already claimed as sinks
  const int64_t recent_begin = std::max(n_sink, seq_len - std::min(opt.recent, seq_len));
  for (int64_t i = recent_begin; i < seq_len; ++i) d.category[static_cast<size_t>(i)] = TokenCategory::Recent;

  // pass 3: top `heavy` of the middle by (score desc, index asc)
  std::vector<int64_t> middle;  // [M] token indices
  for (int64_t i = n_sink; i < recent_begin; ++i) middle.push_back(i);
  const int64_t n_heavy = std::min<int64_t>(opt.heavy, static_cast<int64_t>(middle.size()));
  auto before = [&](int64_t a, int64_t b) {
    const double sa = scores[static_cast<size_t>(a)], sb = scores[static_cast<size_t>(b)];
    return sa != sb ? sa > sb : a < b;
  };
  std::partial_sort(middle.begin(), middle.begin() + n_heavy, middle.end(), before);
  for (int64_t k = 0; k < n_heavy; ++k) d.category[static_cast<size_t>(middle[static_cast<size_t>(k)])] = TokenCategory::Heavy;

  // pass 4: counts (the rest of the middle stays Evicted)
  d.n_sink = n_sink;
  d.n_recent = seq_len - recent_begin;
  d.n_heavy = n_heavy;
  d.n_evicted = seq_len - d.n_sink - d.n_recent - d.n_heavy;
  return d;
}

}  // namespace

H2ODecision h2o_select(std::span<const double> scores, const H2OOptions& opt) {
  check_options(opt);
  for (size_t i = 0; i < scores.size(); ++i) check_score(scores[i], "token " + std::to_string(i));
  return select_validated(scores, opt);
}

std::vector<H2ODecision> h2o_select_per_head(std::span<const double> head_scores, int64_t n_heads,
                                             const H2OOptions& opt) {
  check_options(opt);
  if (n_heads <= 0) fail(ErrorKind::InvalidArgument, "H2O per-head selection needs n_heads >= 1, got " + std::to_string(n_heads));
  if (head_scores.size() % static_cast<size_t>(n_heads) != 0)
    fail(ErrorKind::InvalidArgument, "H2O per-head scores: " + std::to_string(head_scores.size()) +
                                         " values do not split into " + std::to_string(n_heads) + " heads");
  const size_t seq_len = head_scores.size() / static_cast<size_t>(n_heads);  // S
  std::vector<H2ODecision> out;  // [n]
  for (int64_t h = 0; h < n_heads; ++h) {
    std::span<const double> row = head_scores.subspan(static_cast<size_t>(h) * seq_len, seq_len);  // [S]
    for (size_t i = 0; i < seq_len; ++i)
      check_score(row[i], "head " + std::to_string(h) + ", token " + std::to_string(i));
    out.push_back(select_validated(row, opt));
  }
  return out;
}

std::vector<double> token_scores_from_heads(std::span<const double> head_scores, int64_t n_heads) {
  if (n_heads <= 0 || head_scores.size() % static_cast<size_t>(n_heads) != 0)
    fail(ErrorKind::Shape, "head scores: " + std::to_string(head_scores.size()) + " values do not split into " +
                               std::to_string(n_heads) + " heads");
  const size_t T = head_scores.size() / static_cast<size_t>(n_heads);
  std::vector<double> token_scores(T, 0.0);
  for (size_t h = 0; h < static_cast<size_t>(n_heads); ++h)
    for (size_t t = 0; t < T; ++t) token_scores[t] += head_scores[h * T + t];
  return token_scores;
}

}  // namespace mla
