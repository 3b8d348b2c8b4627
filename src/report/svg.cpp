// src/report/svg.cpp — scores.svg: the score of every token against its index, one bar per
// token coloured by its H2O category, with axes, ticks, a legend and a title. Hand-written
// SVG 1.1 (no scripts, no external resources), so it opens in any browser.
//
// Geometry (user units = px): 960 x 480 canvas; plot area x in [70, 800], y in [50, 420];
// legend to the right of the plot. Token i occupies [x(i), x(i+1)) with
//   x(i) = 70 + i * 730 / S,     y(v) = 420 - v * 370 / y_top
// where y_top is the first "nice" tick (1, 2 or 5 x 10^k) at or above the largest score.
// A dashed line marks the lowest score that was kept as heavy (the eviction threshold).
//
// Shape legend: S = tokens.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "mla/report.hpp"
#include "svg_util.hpp"
#include "mla/sweep.hpp"

namespace mla {
namespace {

constexpr double kWidth = 960, kHeight = 480;
constexpr double kLeft = 70, kRight = 800, kTop = 50, kBottom = 420;

const char* category_colour(TokenCategory c) {
  switch (c) {
    case TokenCategory::Sink: return "#7b3294";
    case TokenCategory::Recent: return "#1f78b4";
    case TokenCategory::Heavy: return "#e66101";
    case TokenCategory::Evicted: return "#b0b0b0";
  }
  return "#000000";
}

using svg::nice_step;
using svg::ticks;
using svg::num;
using svg::tick_label;
using svg::xml_escape;

}  // namespace

std::string scores_svg(std::span<const double> scores, const H2ODecision& d, const std::string& title) {
  const size_t S = scores.size();
  const double max_score = S ? *std::max_element(scores.begin(), scores.end()) : 0.0;
  const double y_step = nice_step(max_score > 0 ? max_score : 1.0, 6);
  double y_top = std::max(y_step, std::ceil((max_score > 0 ? max_score : 1.0) / y_step) * y_step);
  if (!std::isfinite(y_top)) y_top = max_score;  // a nice tick above a score near the largest double overflows
  const double plot_w = kRight - kLeft, plot_h = kBottom - kTop;
  const auto x_of = [&](double i) { return kLeft + i * plot_w / static_cast<double>(std::max<size_t>(S, 1)); };
  const auto y_of = [&](double v) {  // v * plot_h overflows for scores near 1e308: then divide first
    const double h = v * plot_h / y_top;
    return kBottom - (std::isfinite(h) ? h : v / y_top * plot_h);
  };

  std::string s;
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"960\" height=\"480\" viewBox=\"0 0 " + num(kWidth) +
       " " + num(kHeight) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<title>" + xml_escape(title) + "</title>\n";
  s += "<rect x=\"0\" y=\"0\" width=\"960\" height=\"480\" fill=\"#ffffff\"/>\n";
  s += "<text x=\"" + num(kWidth / 2) + "\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">" + xml_escape(title) + "</text>\n";

  // pass 1: grid and y ticks
  s += "<g stroke=\"#e8e8e8\" stroke-width=\"1\">\n";
  for (const double v : ticks(y_step, y_top, y_step))
    s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(y_of(v)) + "\" x2=\"" + num(kRight) + "\" y2=\"" + num(y_of(v)) + "\"/>\n";
  s += "</g>\n";

  // pass 2: one bar per token
  s += "<g id=\"bars\" stroke=\"none\">\n";
  const double bar_w = plot_w / static_cast<double>(std::max<size_t>(S, 1));
  const double gap = bar_w > 3 ? 0.15 * bar_w : 0.0;
  for (size_t i = 0; i < S; ++i) {
    const double top = y_of(scores[i]);
    s += "<rect x=\"" + num(x_of(static_cast<double>(i)) + gap / 2) + "\" y=\"" + num(top) + "\" width=\"" +
         num(std::max(bar_w - gap, 0.5)) + "\" height=\"" + num(kBottom - top) + "\" fill=\"" +
         category_colour(d.category[i]) + "\"><title>token " + std::to_string(i) + ": " + format_double(scores[i]) +
         " (" + category_name(d.category[i]) + ")</title></rect>\n";
  }
  s += "</g>\n";

  // pass 3: eviction threshold (lowest heavy score)
  double threshold = -1;
  for (size_t i = 0; i < S; ++i)
    if (d.category[i] == TokenCategory::Heavy && (threshold < 0 || scores[i] < threshold)) threshold = scores[i];
  if (threshold >= 0)
    s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(y_of(threshold)) + "\" x2=\"" + num(kRight) + "\" y2=\"" +
         num(y_of(threshold)) + "\" stroke=\"#e66101\" stroke-width=\"1\" stroke-dasharray=\"4 3\"/>\n";

  // pass 4: axes, ticks, labels
  s += "<g stroke=\"#000000\" stroke-width=\"1\">\n";
  s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(kBottom) + "\" x2=\"" + num(kRight) + "\" y2=\"" + num(kBottom) + "\"/>\n";
  s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(kTop) + "\" x2=\"" + num(kLeft) + "\" y2=\"" + num(kBottom) + "\"/>\n";
  s += "</g>\n<g id=\"y-ticks\" text-anchor=\"end\">\n";
  for (const double v : ticks(0, y_top, y_step))
    s += "<line x1=\"" + num(kLeft - 5) + "\" y1=\"" + num(y_of(v)) + "\" x2=\"" + num(kLeft) + "\" y2=\"" + num(y_of(v)) +
         "\" stroke=\"#000000\"/><text x=\"" + num(kLeft - 8) + "\" y=\"" + num(y_of(v) + 4) + "\">" + tick_label(v) + "</text>\n";
  s += "</g>\n<g id=\"x-ticks\" text-anchor=\"middle\">\n";
  const double x_step = std::max(1.0, nice_step(static_cast<double>(S > 0 ? S - 1 : 0), 8));
  for (const double i : ticks(0, S > 0 ? static_cast<double>(S - 1) : -1, x_step)) {
    const double x = x_of(i + 0.5);
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(kBottom) + "\" x2=\"" + num(x) + "\" y2=\"" + num(kBottom + 5) +
         "\" stroke=\"#000000\"/><text x=\"" + num(x) + "\" y=\"" + num(kBottom + 19) + "\">" + tick_label(i) + "</text>\n";
  }
  s += "</g>\n";
  s += "<text x=\"" + num((kLeft + kRight) / 2) + "\" y=\"" + num(kHeight - 18) + "\" text-anchor=\"middle\">token index</text>\n";
  s += "<text x=\"18\" y=\"" + num((kTop + kBottom) / 2) + "\" text-anchor=\"middle\" transform=\"rotate(-90 18 " +
       num((kTop + kBottom) / 2) + ")\">attention score (mass received, summed over heads and queries)</text>\n";

  // pass 5: legend with counts
  s += "<g id=\"legend\">\n";
  const int64_t counts[4] = {d.n_sink, d.n_heavy, d.n_recent, d.n_evicted};
  const TokenCategory cats[4] = {TokenCategory::Sink, TokenCategory::Heavy, TokenCategory::Recent, TokenCategory::Evicted};
  for (int k = 0; k < 4; ++k) {
    const double y = kTop + 10 + 22 * k;
    s += "<rect x=\"815\" y=\"" + num(y) + "\" width=\"14\" height=\"14\" fill=\"" + category_colour(cats[k]) +
         "\"/><text x=\"836\" y=\"" + num(y + 11) + "\">" + category_name(cats[k]) + " (" + std::to_string(counts[k]) +
         ")</text>\n";
  }
  if (threshold >= 0)
    s += "<line x1=\"815\" y1=\"" + num(kTop + 105) + "\" x2=\"829\" y2=\"" + num(kTop + 105) +
         "\" stroke=\"#e66101\" stroke-dasharray=\"4 3\"/><text x=\"836\" y=\"" + num(kTop + 109) + "\">lowest heavy</text>\n";
  s += "</g>\n</svg>\n";
  return s;
}

// ---- heatmap.svg of `mla-h2o sweep` --------------------------------------------------------
//
// Rows = layers (in the order they ran), columns = tokens; at most kMaxColumns columns, each
// covering a contiguous run of tokens when S is larger (its colour is the run's largest score,
// its mark the run's highest-priority kept category: sink, heavy, recent). Cell colour:
// log(1 + score) / log(1 + largest score of all layers) on a white-to-blue ramp; a kept token's
// cell carries a strip along its top edge in its category's colour.
//   plot: x in [70, 800], y from 50, row height clamp(400 / L, 6, 24)
namespace {

constexpr size_t kMaxColumns = 512;

const char* heatmap_mark(TokenCategory c) {
  switch (c) {
    case TokenCategory::Sink: return "#7b3294";
    case TokenCategory::Heavy: return "#e66101";
    case TokenCategory::Recent: return "#1b9e77";
    case TokenCategory::Evicted: return nullptr;
  }
  return nullptr;
}

// t in [0, 1] -> #f7fbff .. #08306b (linear in RGB)
std::string ramp(double t) {
  t = std::clamp(t, 0.0, 1.0);
  const auto mix = [&](int a, int b) { return static_cast<int>(std::lround(a + (b - a) * t)); };
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", mix(0xf7, 0x08), mix(0xfb, 0x30), mix(0xff, 0x6b));
  return buf;
}

int mark_priority(TokenCategory c) {
  return c == TokenCategory::Sink ? 3 : c == TokenCategory::Heavy ? 2 : c == TokenCategory::Recent ? 1 : 0;
}

}  // namespace

std::string sweep_heatmap_svg(const SweepReport& r, const std::string& title) {
  const size_t L = r.layers.size(), S = L ? r.layers[0].scores.size() : 0;
  const size_t C = std::min(S, kMaxColumns);  // columns
  double top_score = 0;
  for (const SweepLayer& l : r.layers)
    for (double v : l.scores) top_score = std::max(top_score, v);
  const double row_h = std::clamp(400.0 / static_cast<double>(std::max<size_t>(L, 1)), 6.0, 24.0);
  const double plot_w = kRight - kLeft, plot_bottom = kTop + row_h * static_cast<double>(L);
  const double height = std::max(plot_bottom + 70, kTop + 180), col_w = plot_w / static_cast<double>(std::max<size_t>(C, 1));
  const auto first_token = [&](size_t c) { return c * S / std::max<size_t>(C, 1); };  // column c: [first(c), first(c+1))

  std::string s;
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"960\" height=\"" + num(height) +
       "\" viewBox=\"0 0 " + num(kWidth) + " " + num(height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<title>" + xml_escape(title) + "</title>\n";
  s += "<rect x=\"0\" y=\"0\" width=\"960\" height=\"" + num(height) + "\" fill=\"#ffffff\"/>\n";
  s += "<text x=\"" + num(kWidth / 2) + "\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">" + xml_escape(title) + "</text>\n";

  s += "<g id=\"cells\" stroke=\"none\">\n";
  for (size_t li = 0; li < L; ++li) {
    const SweepLayer& l = r.layers[li];
    const double y = kTop + row_h * static_cast<double>(li);
    for (size_t c = 0; c < C; ++c) {
      double v = 0;
      TokenCategory mark = TokenCategory::Evicted;
      for (size_t t = first_token(c); t < first_token(c + 1); ++t) {
        v = std::max(v, l.scores[t]);
        if (mark_priority(l.decision.category[t]) > mark_priority(mark)) mark = l.decision.category[t];
      }
      const double x = kLeft + col_w * static_cast<double>(c);
      const double shade = top_score > 0 ? std::log1p(v) / std::log1p(top_score) : 0.0;
      s += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(col_w) + "\" height=\"" + num(row_h) +
           "\" fill=\"" + ramp(shade) + "\">";
      s += "<title>layer " + std::to_string(l.layer) + ", token" +
           (first_token(c + 1) - first_token(c) > 1
                ? "s " + std::to_string(first_token(c)) + ".." + std::to_string(first_token(c + 1) - 1) + ": max "
                : " " + std::to_string(first_token(c)) + ": ") +
           format_double(v) + " (" + category_name(mark) + ")</title></rect>\n";
      if (const char* colour = heatmap_mark(mark))
        s += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(col_w) + "\" height=\"" +
             num(std::max(1.5, row_h * 0.25)) + "\" fill=\"" + colour + "\"/>\n";
    }
  }
  s += "</g>\n";

  // axes: layer labels (every k-th row so that labels are >= 12 px apart), token ticks
  s += "<g id=\"layer-labels\" text-anchor=\"end\">\n";
  const size_t every = static_cast<size_t>(std::ceil(12.0 / row_h));
  for (size_t li = 0; li < L; li += every)
    s += "<text x=\"" + num(kLeft - 6) + "\" y=\"" + num(kTop + row_h * (static_cast<double>(li) + 0.5) + 4) + "\">" +
         std::to_string(r.layers[li].layer) + "</text>\n";
  s += "</g>\n<g id=\"x-ticks\" text-anchor=\"middle\">\n";
  const double x_step = std::max(1.0, nice_step(static_cast<double>(S > 0 ? S - 1 : 0), 8));
  for (const double i : ticks(0, S > 0 ? static_cast<double>(S - 1) : -1, x_step)) {
    const double x = kLeft + (i + 0.5) * plot_w / static_cast<double>(S);
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(plot_bottom) + "\" x2=\"" + num(x) + "\" y2=\"" + num(plot_bottom + 5) +
         "\" stroke=\"#000000\"/><text x=\"" + num(x) + "\" y=\"" + num(plot_bottom + 19) + "\">" + tick_label(i) +
         "</text>\n";
  }
  s += "</g>\n";
  s += "<text x=\"" + num((kLeft + kRight) / 2) + "\" y=\"" + num(plot_bottom + 40) +
       "\" text-anchor=\"middle\">token index" +
       (C < S ? " (" + std::to_string(C) + " columns, largest score of each)" : std::string()) + "</text>\n";
  s += "<text x=\"18\" y=\"" + num((kTop + plot_bottom) / 2) + "\" text-anchor=\"middle\" transform=\"rotate(-90 18 " +
       num((kTop + plot_bottom) / 2) + ")\">layer</text>\n";

  // legend: colour scale and kept marks
  s += "<g id=\"legend\">\n<text x=\"815\" y=\"" + num(kTop + 8) + "\">score (log scale)</text>\n";
  for (int k = 0; k <= 4; ++k) {
    const double t = k / 4.0, v = std::expm1(t * std::log1p(top_score));
    char label[32];
    std::snprintf(label, sizeof label, "%.3g", v);
    s += "<rect x=\"815\" y=\"" + num(kTop + 16 + 18 * k) + "\" width=\"14\" height=\"14\" fill=\"" + ramp(t) +
         "\" stroke=\"#999999\"/><text x=\"836\" y=\"" + num(kTop + 27 + 18 * k) + "\">" + label + "</text>\n";
  }
  const TokenCategory cats[3] = {TokenCategory::Sink, TokenCategory::Heavy, TokenCategory::Recent};
  for (int k = 0; k < 3; ++k)
    s += "<rect x=\"815\" y=\"" + num(kTop + 114 + 18 * k) + "\" width=\"14\" height=\"5\" fill=\"" +
         heatmap_mark(cats[k]) + "\"/><text x=\"836\" y=\"" + num(kTop + 121 + 18 * k) + "\">kept: " +
         category_name(cats[k]) + "</text>\n";
  s += "</g>\n</svg>\n";
  return s;
}

}  // namespace mla
