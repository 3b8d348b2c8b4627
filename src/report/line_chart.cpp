// src/report/line_chart.cpp — svg::line_chart (svg_util.hpp): a hand-written SVG line chart,
// one polyline per series with a legend: decode's decode.svg and budget.svg, eval's budget.svg
// and layers.svg.
//
// Geometry: 960 x 480; plot area x in [70, 760], y in [50, 420], legend on the right. y spans
// [min(0, smallest), a nice tick above the largest]; x from the smallest to the largest x.
#include <algorithm>
#include <cmath>
#include <string>

#include "svg_util.hpp"

namespace mla::svg {

const char* series_colour(size_t k) {
  // in the order the series come (the presets' order for `--policy all`)
  static const char* palette[] = {"#000000", "#e66101", "#fdb863", "#5e3c99", "#1f78b4", "#33a02c", "#b2df8a",
                                  "#a6cee3", "#b15928", "#6a3d9a", "#ff7f00", "#cab2d6", "#999999", "#e31a1c"};
  return palette[k % (sizeof palette / sizeof palette[0])];
}

std::string line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                       const std::vector<Series>& series) {
  constexpr double left = 70, right = 760, top = 50, bottom = 420;
  double x_min = INFINITY, x_max = -INFINITY, y_min = 0, y_max = 0;
  for (const Series& s : series)
    for (const auto& [x, y] : s.points) {
      x_min = std::min(x_min, x);
      x_max = std::max(x_max, x);
      if (std::isfinite(y)) {
        y_max = std::max(y_max, y);
        y_min = std::min(y_min, y);
      }
    }
  if (!(x_max > x_min)) {
    x_min = std::isfinite(x_min) ? x_min - 1 : 0;
    x_max = x_min + 2;
  }
  const double span = y_max - y_min > 0 ? y_max - y_min : 1.0;
  const double y_step = nice_step(span, 6);
  const double y_top = std::max(y_step, std::ceil(y_max / y_step) * y_step);
  const double y_bottom = std::min(0.0, std::floor(y_min / y_step) * y_step);
  const double x_step = nice_step(x_max - x_min, 8);
  auto X = [&](double x) { return left + (x - x_min) * (right - left) / (x_max - x_min); };
  auto Y = [&](double y) { return bottom - (std::clamp(y, y_bottom, y_top) - y_bottom) * (bottom - top) / (y_top - y_bottom); };

  std::string s =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"960\" height=\"480\" viewBox=\"0 0 960 480\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<title>" + xml_escape(title) + "</title>\n<rect x=\"0\" y=\"0\" width=\"960\" height=\"480\" fill=\"#ffffff\"/>\n";
  s += "<text x=\"480\" y=\"28\" text-anchor=\"middle\" font-size=\"14\">" + xml_escape(title) + "</text>\n";
  s += "<g stroke=\"#e8e8e8\">\n";
  for (const double v : ticks(y_bottom, y_top, y_step))
    s += "<line x1=\"" + num(left) + "\" y1=\"" + num(Y(v)) + "\" x2=\"" + num(right) + "\" y2=\"" + num(Y(v)) + "\"/>\n";
  s += "</g>\n<g stroke=\"#000000\">\n";
  s += "<line x1=\"" + num(left) + "\" y1=\"" + num(Y(0)) + "\" x2=\"" + num(right) + "\" y2=\"" + num(Y(0)) + "\"/>\n";
  s += "<line x1=\"" + num(left) + "\" y1=\"" + num(top) + "\" x2=\"" + num(left) + "\" y2=\"" + num(bottom) + "\"/>\n";
  s += "</g>\n<g font-size=\"11\">\n";
  for (const double v : ticks(y_bottom, y_top, y_step))
    s += "<text x=\"" + num(left - 6) + "\" y=\"" + num(Y(v) + 4) + "\" text-anchor=\"end\">" +
         tick_label(std::abs(v) < y_step * 1e-9 ? 0.0 : v) + "</text>\n";
  for (const double v : ticks(std::ceil(x_min / x_step) * x_step, x_max, x_step))
    s += "<text x=\"" + num(X(v)) + "\" y=\"" + num(bottom + 16) + "\" text-anchor=\"middle\">" + tick_label(v) + "</text>\n";
  s += "</g>\n";
  s += "<text x=\"" + num((left + right) / 2) + "\" y=\"460\" text-anchor=\"middle\">" + xml_escape(x_label) + "</text>\n";
  s += "<text x=\"18\" y=\"" + num((top + bottom) / 2) + "\" text-anchor=\"middle\" transform=\"rotate(-90 18 " +
       num((top + bottom) / 2) + ")\">" + xml_escape(y_label) + "</text>\n";
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& sr = series[k];
    const std::string colour = sr.colour.empty() ? series_colour(k) : sr.colour;
    std::string pts;
    for (const auto& [x, y] : sr.points)
      if (std::isfinite(y)) pts += num(X(x)) + "," + num(Y(y)) + " ";
    s += "<polyline id=\"" + xml_escape(sr.label) + "\" fill=\"none\" stroke=\"" + colour +
         "\" stroke-width=\"1.5\" points=\"" + pts + "\"/>\n";
    for (const auto& [x, y] : sr.points)  // points too, so a single budget still shows
      if (std::isfinite(y))
        s += "<circle cx=\"" + num(X(x)) + "\" cy=\"" + num(Y(y)) + "\" r=\"2.5\" fill=\"" + colour + "\"/>\n";
    const double ly = top + 10 + 18 * static_cast<double>(k);
    s += "<line x1=\"772\" y1=\"" + num(ly) + "\" x2=\"790\" y2=\"" + num(ly) + "\" stroke=\"" + colour +
         "\" stroke-width=\"3\"/><text x=\"796\" y=\"" + num(ly + 4) + "\">" + xml_escape(sr.label) + "</text>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace mla::svg
