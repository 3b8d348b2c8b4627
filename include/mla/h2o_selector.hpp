// mla/h2o_selector.hpp — the standalone H2O heavy-hitter selector.
//
// Input: one non-negative score per token (attention mass received). Output: which tokens
// an H2O cache keeps:
//   sinks   = the first `sinks` tokens                       (StreamingLLM attention sinks)
//   recent  = the last `recent` tokens that are not sinks     (a token in both windows is a sink)
//   heavy   = the `heavy` highest scores among the rest      (ties go to the lower index)
//   evicted = everything else.
// Windows longer than the sequence, a budget larger than the middle, and zero sizes all work.
// NaN, infinite or negative scores are rejected (Error InvalidValue naming the index).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mla {

enum class TokenCategory { Sink, Recent, Heavy, Evicted };
const char* category_name(TokenCategory c);  // "sink" | "recent" | "heavy" | "evicted"

struct H2OOptions {
  int64_t sinks = 4;
  int64_t recent = 32;
  int64_t heavy = 64;  // heavy hitters kept besides sinks and recent (the CLI's --budget)
};

struct H2ODecision {
  std::vector<TokenCategory> category;  // [S]
  int64_t n_sink = 0, n_recent = 0, n_heavy = 0, n_evicted = 0;
  int64_t kept() const { return n_sink + n_recent + n_heavy; }
  bool is_kept(int64_t i) const { return category[static_cast<size_t>(i)] != TokenCategory::Evicted; }
  std::vector<int64_t> kept_indices() const;  // ascending
};

H2ODecision h2o_select(std::span<const double> scores, const H2OOptions& opt);

// H2O paper style: one decision per head on head_scores [n_heads * S] (row h = head h).
std::vector<H2ODecision> h2o_select_per_head(std::span<const double> head_scores, int64_t n_heads,
                                             const H2OOptions& opt);

// token_scores[t] = sum_h head_scores[h*T + t], heads added in ascending order in double
// (every backend's one head-to-token sum). head_scores: [n_heads * T] -> [T].
std::vector<double> token_scores_from_heads(std::span<const double> head_scores, int64_t n_heads);

}  // namespace mla
