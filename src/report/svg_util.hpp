// src/report/svg_util.hpp — small helpers shared by the hand-written SVG charts
// (scores.svg in svg.cpp, decode.svg / budget.svg in src/decode/decode_report.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace mla::svg {

inline std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') out += ' ';  // not allowed in XML 1.0
        else out += c;
    }
  }
  return out;
}

inline std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

inline std::string tick_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Step of about `target` ticks over [0, span]: 1, 2 or 5 x 10^k.
inline double nice_step(double span, double target) {
  if (!(span > 0)) return 1.0;
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm < 1.5 ? 1.0 : norm < 3.0 ? 2.0 : norm < 7.0 ? 5.0 : 10.0) * mag;
}

// The tick values from, from + step, ... up to `to` (inclusive, with a relative slack of 1e-12),
// at most kMaxTicks of them: computed as from + i * step, so a step far below the values' ulp
// (a budget of 2^51 on the x axis) can neither loop forever nor grow the chart without bound.
inline constexpr int kMaxTicks = 64;
inline std::vector<double> ticks(double from, double to, double step) {
  std::vector<double> out;
  if (!std::isfinite(from) || !std::isfinite(to) || !(step > 0)) return out;
  for (int i = 0; i < kMaxTicks; ++i) {
    const double v = from + i * step;
    if (v > to + std::abs(to) * 1e-12 + 1e-300 || (i > 0 && v == out.back())) break;
    out.push_back(v);
  }
  return out;
}

// One line of a line chart: its legend label, its colour ("" = its style's), its (x, y) points
// (a non-finite y is skipped), optionally one (low, high) interval per point drawn as a whisker
// (a non-finite bound: no whisker), the id of its polyline ("" = the label; ids are unique in a
// file) and its style index (-1 = its index in the chart: panels of one figure pass the index
// the series has in the whole figure, so a policy keeps its colour and dash in every panel) and
// optionally one tooltip per point (the <title> of its dot; "" or none: no tooltip).
struct Series {
  std::string label;
  std::string colour;
  std::vector<std::pair<double, double>> points;
  std::vector<std::pair<double, double>> intervals = {};
  std::string id = {};
  int64_t style = -1;
  std::vector<std::string> tips = {};
};
// Style k: 8 colours, solid for k < 8, dashed for 8 <= k < 16, dotted after: 24 series are told
// apart by colour and dash together.
struct SeriesStyle {
  const char* colour;
  const char* dash;  // SVG stroke-dasharray, "" = solid
};
SeriesStyle series_style(size_t k);
// One panel of a figure (line_chart.cpp); x_ticks, when given, are the x axis's labelled values
// (the compression ratios of ruler.svg) instead of evenly stepped ones.
struct Panel {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  std::vector<double> x_ticks = {};
};
// 1120 x 480 SVG, one polyline (with dots and whiskers) per series, legend on the right. x ticks
// are integers when every x is (layers, budgets, steps).
std::string line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                       const std::vector<Series>& series);
// The panels stacked top to bottom in one 1120 x (480 x panels) SVG under one title.
std::string panel_chart(const std::string& title, const std::vector<Panel>& panels);

// One row of an interval chart (a forest plot): a label, a point and its (low, high) interval
// (non-finite: none), and the colour of its dot.
struct IntervalRow {
  std::string label;
  double value = 0, low = NAN, high = NAN;
  std::string colour = "#000000";
};
struct IntervalPanel {
  std::string title, x_label;
  std::vector<IntervalRow> rows;  // drawn top to bottom in this order
};
// Each panel: one row per entry, labels on the left, a dot and a horizontal whisker on a shared
// x axis with a line at 0; panels stacked (line_chart.cpp).
std::string interval_chart(const std::string& title, const std::vector<IntervalPanel>& panels);

}  // namespace mla::svg
