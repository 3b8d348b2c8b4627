// src/report/svg_util.hpp — small helpers shared by the hand-written SVG charts
// (scores.svg in svg.cpp, decode.svg / budget.svg in src/decode/decode_report.cpp).
#pragma once

#include <cmath>
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

// One line of a line chart: its legend label, its colour ("" = series_colour of its index) and
// its (x, y) points (a non-finite y is skipped).
struct Series {
  std::string label;
  std::string colour;
  std::vector<std::pair<double, double>> points;
};
const char* series_colour(size_t k);
// 960 x 480 SVG, one polyline (with dots) per series, legend on the right (line_chart.cpp).
std::string line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                       const std::vector<Series>& series);

}  // namespace mla::svg
