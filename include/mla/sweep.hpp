// mla/sweep.hpp — what `mla-h2o sweep` (one H2O decision per decoder layer) writes.
//
// A SweepReport holds, for every layer that ran, its token scores and H2O decision; each
// output is one pure function of it (as mla/report.hpp does for one layer), so tests check
// the formats on hand-made reports:
//
//   sweep_layers_csv    layer,seq_len,score_min,score_max,score_mean,score_std,mean_heavy,
//                       mean_evicted,heavy_evicted_ratio,kept,sink,recent,heavy,evicted
//   sweep_scores_csv    layer,token_idx,attention_score,kept,category  (run's scores.csv with a
//                       leading layer column; scores %.17g)
//   sweep_overlap_csv   layer_a,layer_b,kept_intersection,kept_union,kept_jaccard,
//                       heavy_intersection,heavy_union,heavy_jaccard   (every pair a < b)
//   sweep_heatmap_svg   layers x tokens: cell colour = log(1 + score) on a scale shared by all
//                       layers, kept tokens marked by a bar in their category's colour
//   sweep_report_text   settings, caveats, one line per layer, mean overlap
//   sweep_report_json   all of the above at full precision, plus config, options and timings
//
// Shape legend: S = tokens, L = layers that ran.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mla/h2o_selector.hpp"
#include "mla/report.hpp"

namespace mla {

struct SweepLayer {
  int64_t layer = 0;
  std::string input_source;    // how this layer's hidden states were made
  std::vector<double> scores;  // [S] attention mass received, summed over heads and queries
  H2ODecision decision;
  double load_seconds = 0, forward_seconds = 0;  // load + input, prepare + forward
};

struct SweepReport {
  RunInfo info;                       // shared settings (info.layer unset)
  H2OOptions h2o;
  std::vector<SweepLayer> layers;     // in the order they ran (ascending layer index)
  std::vector<std::string> caveats;   // printed first and prominently (e.g. the --tokens caveat)
};

// Jaccard similarity |A ∩ B| / |A ∪ B| of two layers' kept sets, and of their heavy-hitter
// sets alone (sinks and the recent window are the same in every layer by construction, so
// the heavy sets show how much the layers really agree). An empty union gives 1.
struct LayerOverlap {
  int64_t layer_a = 0, layer_b = 0;
  int64_t kept_intersection = 0, kept_union = 0;
  double kept_jaccard = 1;
  int64_t heavy_intersection = 0, heavy_union = 0;
  double heavy_jaccard = 1;
};
// Every pair a < b (positions in r.layers), in row-major order. All layers must have the
// same S (Error InvalidArgument otherwise).
std::vector<LayerOverlap> layer_overlaps(const SweepReport& r);

std::string sweep_layers_csv(const SweepReport& r);
std::string sweep_scores_csv(const SweepReport& r);
std::string sweep_overlap_csv(const std::vector<LayerOverlap>& overlaps);
std::string sweep_heatmap_svg(const SweepReport& r, const std::string& title);
std::string sweep_report_text(const SweepReport& r, const std::vector<LayerOverlap>& overlaps);
std::string sweep_report_json(const SweepReport& r, const std::vector<LayerOverlap>& overlaps);

}  // namespace mla
