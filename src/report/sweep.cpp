// src/report/sweep.cpp — the CSV outputs of `mla-h2o sweep` and the kept-set overlaps
// between layers (mla/sweep.hpp). The text, JSON and SVG outputs live beside run's own
// (text.cpp, json.cpp, svg.cpp) and share their helpers.
//
// Shape legend: S = tokens, L = layers that ran.
#include <algorithm>

#include "mla/error.hpp"
#include "mla/sweep.hpp"

namespace mla {
namespace {

// Number of layer positions i, j whose category sets (as selected by `member`) meet / join.
template <typename Member>
void set_overlap(const H2ODecision& a, const H2ODecision& b, Member member, int64_t& inter, int64_t& uni) {
  inter = uni = 0;
  for (size_t t = 0; t < a.category.size(); ++t) {
    const bool in_a = member(a.category[t]), in_b = member(b.category[t]);
    inter += in_a && in_b;
    uni += in_a || in_b;
  }
}

double jaccard(int64_t inter, int64_t uni) {
  return uni > 0 ? static_cast<double>(inter) / static_cast<double>(uni) : 1.0;
}

std::string optional_number(bool present, double v) { return present ? format_double(v) : std::string(); }

}  // namespace

std::vector<LayerOverlap> layer_overlaps(const SweepReport& r) {
  std::vector<LayerOverlap> out;
  for (size_t i = 0; i < r.layers.size(); ++i)
    for (size_t j = i + 1; j < r.layers.size(); ++j) {
      const SweepLayer &a = r.layers[i], &b = r.layers[j];
      if (a.decision.category.size() != b.decision.category.size())
        fail(ErrorKind::InvalidArgument, "layer_overlaps: layer " + std::to_string(a.layer) + " has " +
                                             std::to_string(a.decision.category.size()) + " tokens but layer " +
                                             std::to_string(b.layer) + " has " +
                                             std::to_string(b.decision.category.size()));
      LayerOverlap o;
      o.layer_a = a.layer;
      o.layer_b = b.layer;
      set_overlap(a.decision, b.decision, [](TokenCategory c) { return c != TokenCategory::Evicted; },
                  o.kept_intersection, o.kept_union);
      set_overlap(a.decision, b.decision, [](TokenCategory c) { return c == TokenCategory::Heavy; },
                  o.heavy_intersection, o.heavy_union);
      o.kept_jaccard = jaccard(o.kept_intersection, o.kept_union);
      o.heavy_jaccard = jaccard(o.heavy_intersection, o.heavy_union);
      out.push_back(o);
    }
  return out;
}

std::string sweep_layers_csv(const SweepReport& r) {
  std::string out =
      "layer,seq_len,score_min,score_max,score_mean,score_std,mean_heavy,mean_evicted,heavy_evicted_ratio,"
      "kept,sink,recent,heavy,evicted\n";
  for (const SweepLayer& l : r.layers) {
    const ScoreStats st = score_stats(l.scores);
    const DecisionSummary sum = summarize_decision(l.scores, l.decision);
    const H2ODecision& d = l.decision;
    out += std::to_string(l.layer) + ',' + std::to_string(st.count) + ',' + format_double(st.min) + ',' +
           format_double(st.max) + ',' + format_double(st.mean) + ',' + format_double(st.std) + ',' +
           optional_number(d.n_heavy > 0, sum.mean_heavy) + ',' + optional_number(d.n_evicted > 0, sum.mean_evicted) +
           ',' + optional_number(sum.heavy_evicted_ratio.has_value(), sum.heavy_evicted_ratio.value_or(0)) + ',' +
           std::to_string(d.kept()) + ',' + std::to_string(d.n_sink) + ',' + std::to_string(d.n_recent) + ',' +
           std::to_string(d.n_heavy) + ',' + std::to_string(d.n_evicted) + '\n';
  }
  return out;
}

std::string sweep_scores_csv(const SweepReport& r) {
  std::string out = "layer,token_idx,attention_score,kept,category\n";
  for (const SweepLayer& l : r.layers) {
    // run's scores.csv rows, each prefixed with the layer
    const std::string rows = scores_csv(l.scores, l.decision);
    const std::string prefix = std::to_string(l.layer) + ',';
    size_t pos = rows.find('\n') + 1;  // skip run's header
    while (pos < rows.size()) {
      const size_t end = rows.find('\n', pos);
      out += prefix;
      out.append(rows, pos, end - pos + 1);
      pos = end + 1;
    }
  }
  return out;
}

std::string sweep_overlap_csv(const std::vector<LayerOverlap>& overlaps) {
  std::string out =
      "layer_a,layer_b,kept_intersection,kept_union,kept_jaccard,heavy_intersection,heavy_union,heavy_jaccard\n";
  for (const LayerOverlap& o : overlaps)
    out += std::to_string(o.layer_a) + ',' + std::to_string(o.layer_b) + ',' + std::to_string(o.kept_intersection) +
           ',' + std::to_string(o.kept_union) + ',' + format_double(o.kept_jaccard) + ',' +
           std::to_string(o.heavy_intersection) + ',' + std::to_string(o.heavy_union) + ',' +
           format_double(o.heavy_jaccard) + '\n';
  return out;
}

}  // namespace mla
