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
using svg::num;
using svg::tick_label;
using svg::xml_escape;

}  // namespace

std::string scores_svg(std::span<const double> scores, const H2ODecision& d, const std::string& title) {
  const size_t S = scores.size();
  const double max_score = S ? *std::max_element(scores.begin(), scores.end()) : 0.0;
  const double y_step = nice_step(max_score > 0 ? max_score : 1.0, 6);
  const double y_top = std::max(y_step, std::ceil((max_score > 0 ? max_score : 1.0) / y_step) * y_step);
  const double plot_w = kRight - kLeft, plot_h = kBottom - kTop;
  const auto x_of = [&](double i) { return kLeft + i * plot_w / static_cast<double>(std::max<size_t>(S, 1)); };
  const auto y_of = [&](double v) { return kBottom - v * plot_h / y_top; };

  std::string s;
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"960\" height=\"480\" viewBox=\"0 0 " + num(kWidth) +
       " " + num(kHeight) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<title>" + xml_escape(title) + "</title>\n";
  s += "<rect x=\"0\" y=\"0\" width=\"960\" height=\"480\" fill=\"#ffffff\"/>\n";
  s += "<text x=\"" + num(kWidth / 2) + "\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">" + xml_escape(title) + "</text>\n";

  // pass 1: grid and y ticks
  s += "<g stroke=\"#e8e8e8\" stroke-width=\"1\">\n";
  for (double v = y_step; v <= y_top * (1 + 1e-12); v += y_step)
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
  for (double v = 0; v <= y_top * (1 + 1e-12); v += y_step)
    s += "<line x1=\"" + num(kLeft - 5) + "\" y1=\"" + num(y_of(v)) + "\" x2=\"" + num(kLeft) + "\" y2=\"" + num(y_of(v)) +
         "\" stroke=\"#000000\"/><text x=\"" + num(kLeft - 8) + "\" y=\"" + num(y_of(v) + 4) + "\">" + tick_label(v) + "</text>\n";
  s += "</g>\n<g id=\"x-ticks\" text-anchor=\"middle\">\n";
  const double x_step = std::max(1.0, nice_step(static_cast<double>(S > 0 ? S - 1 : 0), 8));
  for (double i = 0; S > 0 && i <= static_cast<double>(S - 1); i += x_step) {
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

}  // namespace mla
