// src/report/line_chart.cpp — the hand-written SVG charts of svg_util.hpp: line_chart and
// panel_chart (decode's decode.svg and budget.svg, eval's budget.svg, layers.svg and ruler.svg) and
// interval_chart (eval's leaderboard.svg).
//
// Line chart geometry: 1120 x 480 per panel; plot area x in [70, 760], y in [50, 420], legend
// on the right (x from 772, room for about 48 characters). y spans [min(0, smallest), a nice
// tick above the largest], whiskers included; x from the smallest to the largest x, with an
// integer tick step when every x is an integer. A figure of several panels stacks them under
// a 40-unit header holding its title.
#include <algorithm>
#include <cmath>
#include <string>

#include "svg_util.hpp"

namespace mla::svg {
namespace {

constexpr double kWidth = 1120, kPanelHeight = 480, kHeader = 40;

std::string svg_open(double height, const std::string& title) {
  const std::string h = num(height);
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + num(kWidth) + "\" height=\"" + h +
         "\" viewBox=\"0 0 " + num(kWidth) + " " + h + "\" font-family=\"sans-serif\" font-size=\"12\">\n<title>" +
         xml_escape(title) + "</title>\n<rect x=\"0\" y=\"0\" width=\"" + num(kWidth) + "\" height=\"" + h +
         "\" fill=\"#ffffff\"/>\n";
}

std::string dash_attr(const char* dash) {
  return *dash ? std::string(" stroke-dasharray=\"") + dash + "\"" : std::string();
}

// One line-chart panel, drawn at y offset `dy` (its title at dy + 28).
std::string line_panel(const Panel& p, double dy) {
  constexpr double left = 70, right = 760, top = 50, bottom = 420;
  double x_min = INFINITY, x_max = -INFINITY, y_min = 0, y_max = 0;
  bool integer_x = true;
  for (const Series& s : p.series) {
    for (const auto& [x, y] : s.points) {
      x_min = std::min(x_min, x);
      x_max = std::max(x_max, x);
      integer_x = integer_x && x == std::floor(x);
      if (std::isfinite(y)) {
        y_max = std::max(y_max, y);
        y_min = std::min(y_min, y);
      }
    }
    for (const auto& [lo, hi] : s.intervals) {
      if (std::isfinite(lo)) y_min = std::min(y_min, lo);
      if (std::isfinite(hi)) y_max = std::max(y_max, hi);
    }
  }
  if (!(x_max > x_min)) {  // one x: a span around it wide enough to be resolved (x - 1 == x beyond 2^53)
    const double c = std::isfinite(x_min) ? x_min : 0, pad = std::max(1.0, std::abs(c) * 1e-3);
    x_min = c - pad;
    x_max = c + pad;
  }
  const double span = y_max - y_min > 0 ? y_max - y_min : 1.0;
  const double y_step = nice_step(span, 6);
  const double y_top = std::max(y_step, std::ceil(y_max / y_step) * y_step);
  const double y_bottom = std::min(0.0, std::floor(y_min / y_step) * y_step);
  const double x_step = integer_x ? std::max(1.0, nice_step(x_max - x_min, 8)) : nice_step(x_max - x_min, 8);
  auto X = [&](double x) { return left + (x - x_min) * (right - left) / (x_max - x_min); };
  auto Y = [&](double y) {
    return dy + bottom - (std::clamp(y, y_bottom, y_top) - y_bottom) * (bottom - top) / (y_top - y_bottom);
  };
  auto hline = [&](double x1, double x2, double y) {
    return "<line x1=\"" + num(x1) + "\" y1=\"" + num(y) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y) + "\"/>\n";
  };

  std::string s = "<text x=\"" + num((left + right) / 2) + "\" y=\"" + num(dy + 28) +
                  "\" text-anchor=\"middle\" font-size=\"14\">" + xml_escape(p.title) + "</text>\n";
  s += "<g stroke=\"#e8e8e8\">\n";
  for (const double v : ticks(y_bottom, y_top, y_step)) s += hline(left, right, Y(v));
  s += "</g>\n<g stroke=\"#000000\">\n" + hline(left, right, Y(0));
  s += "<line x1=\"" + num(left) + "\" y1=\"" + num(dy + top) + "\" x2=\"" + num(left) + "\" y2=\"" + num(dy + bottom) +
       "\"/>\n</g>\n<g font-size=\"11\">\n";
  for (const double v : ticks(y_bottom, y_top, y_step))
    s += "<text x=\"" + num(left - 6) + "\" y=\"" + num(Y(v) + 4) + "\" text-anchor=\"end\">" +
         tick_label(std::abs(v) < y_step * 1e-9 ? 0.0 : v) + "</text>\n";
  for (const double v : p.x_ticks.empty() ? ticks(std::ceil(x_min / x_step) * x_step, x_max, x_step) : p.x_ticks)
    s += "<text x=\"" + num(X(v)) + "\" y=\"" + num(dy + bottom + 16) + "\" text-anchor=\"middle\">" + tick_label(v) +
         "</text>\n";
  s += "</g>\n";
  s += "<text x=\"" + num((left + right) / 2) + "\" y=\"" + num(dy + 460) + "\" text-anchor=\"middle\">" +
       xml_escape(p.x_label) + "</text>\n";
  const std::string mid = num(dy + (top + bottom) / 2);
  s += "<text x=\"18\" y=\"" + mid + "\" text-anchor=\"middle\" transform=\"rotate(-90 18 " + mid + ")\">" +
       xml_escape(p.y_label) + "</text>\n";
  for (size_t k = 0; k < p.series.size(); ++k) {
    const Series& sr = p.series[k];
    const SeriesStyle st = series_style(sr.style >= 0 ? static_cast<size_t>(sr.style) : k);
    const std::string colour = sr.colour.empty() ? st.colour : sr.colour;
    std::string pts;
    for (const auto& [x, y] : sr.points)
      if (std::isfinite(y)) pts += num(X(x)) + "," + num(Y(y)) + " ";
    s += "<polyline id=\"" + xml_escape(sr.id.empty() ? sr.label : sr.id) + "\" fill=\"none\" stroke=\"" + colour +
         "\" stroke-width=\"1.5\"" + dash_attr(st.dash) + " points=\"" + pts + "\"/>\n";
    for (size_t i = 0; i < sr.points.size(); ++i) {  // points too, so a single budget still shows
      const auto& [x, y] = sr.points[i];
      if (!std::isfinite(y)) continue;
      const std::string tip = i < sr.tips.size() ? sr.tips[i] : std::string();
      s += "<circle cx=\"" + num(X(x)) + "\" cy=\"" + num(Y(y)) + "\" r=\"2.5\" fill=\"" + colour +
           (tip.empty() ? "\"/>\n" : "\"><title>" + xml_escape(tip) + "</title></circle>\n");
      if (i < sr.intervals.size() && std::isfinite(sr.intervals[i].first) && std::isfinite(sr.intervals[i].second)) {
        const double cx = X(x), lo = Y(sr.intervals[i].first), hi = Y(sr.intervals[i].second);
        s += "<path d=\"M" + num(cx) + "," + num(lo) + "V" + num(hi) + "M" + num(cx - 3) + "," + num(lo) + "H" +
             num(cx + 3) + "M" + num(cx - 3) + "," + num(hi) + "H" + num(cx + 3) + "\" stroke=\"" + colour +
             "\" stroke-width=\"1\" fill=\"none\"/>\n";
      }
    }
    const double ly = dy + top + 10 + 18 * static_cast<double>(k);
    s += "<line x1=\"772\" y1=\"" + num(ly) + "\" x2=\"796\" y2=\"" + num(ly) + "\" stroke=\"" + colour +
         "\" stroke-width=\"3\"" + dash_attr(st.dash) + "/><text x=\"802\" y=\"" + num(ly + 4) + "\">" +
         xml_escape(sr.label) + "</text>\n";
  }
  return s;
}

}  // namespace

SeriesStyle series_style(size_t k) {
  // in the order the series come (the presets' order for `--policy all`)
  static const char* colours[] = {"#000000", "#e66101", "#1f78b4", "#33a02c", "#e31a1c", "#6a3d9a", "#b15928", "#999999"};
  static const char* dashes[] = {"", "7 4", "2 3"};
  return {colours[k % 8], dashes[std::min<size_t>(k / 8, 2)]};
}

std::string line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                       const std::vector<Series>& series) {
  return svg_open(kPanelHeight, title) + line_panel(Panel{title, x_label, y_label, series}, 0) + "</svg>\n";
}

std::string panel_chart(const std::string& title, const std::vector<Panel>& panels) {
  std::string s = svg_open(kHeader + kPanelHeight * static_cast<double>(panels.size()), title);
  s += "<text x=\"" + num(kWidth / 2) + "\" y=\"26\" text-anchor=\"middle\" font-size=\"15\">" + xml_escape(title) +
       "</text>\n";
  for (size_t i = 0; i < panels.size(); ++i) s += line_panel(panels[i], kHeader + kPanelHeight * static_cast<double>(i));
  return s + "</svg>\n";
}

// Interval chart geometry: labels right-aligned at x 330, plot x in [340, 1080]; per panel a
// 40-unit title band, 22 units a row, 46 units for the axis and its label.
std::string interval_chart(const std::string& title, const std::vector<IntervalPanel>& panels) {
  constexpr double left = 340, right = 1080, band = 40, row_h = 22, axis_h = 46;
  double lo = 0, hi = 0;
  for (const IntervalPanel& p : panels)
    for (const IntervalRow& r : p.rows)
      for (const double v : {r.value, r.low, r.high})
        if (std::isfinite(v)) {
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
  const double step = nice_step(hi - lo > 0 ? hi - lo : 1.0, 8);
  const double x_lo = std::floor(lo / step) * step, x_hi = std::max(x_lo + step, std::ceil(hi / step) * step);
  auto X = [&](double v) { return left + (std::clamp(v, x_lo, x_hi) - x_lo) * (right - left) / (x_hi - x_lo); };
  double height = kHeader;
  for (const IntervalPanel& p : panels) height += band + row_h * static_cast<double>(p.rows.size()) + axis_h;
  std::string s = svg_open(height, title);
  s += "<text x=\"" + num(kWidth / 2) + "\" y=\"26\" text-anchor=\"middle\" font-size=\"15\">" + xml_escape(title) +
       "</text>\n";
  double y0 = kHeader;
  for (const IntervalPanel& p : panels) {
    const double top = y0 + band, bottom = top + row_h * static_cast<double>(p.rows.size());
    s += "<text x=\"" + num((left + right) / 2) + "\" y=\"" + num(y0 + 26) + "\" text-anchor=\"middle\" font-size=\"13\">" +
         xml_escape(p.title) + "</text>\n<g stroke=\"#e8e8e8\">\n";
    for (const double v : ticks(x_lo, x_hi, step))
      s += "<line x1=\"" + num(X(v)) + "\" y1=\"" + num(top) + "\" x2=\"" + num(X(v)) + "\" y2=\"" + num(bottom) + "\"/>\n";
    s += "</g>\n<line x1=\"" + num(X(0)) + "\" y1=\"" + num(top) + "\" x2=\"" + num(X(0)) + "\" y2=\"" + num(bottom) +
         "\" stroke=\"#000000\"/>\n<line x1=\"" + num(left) + "\" y1=\"" + num(bottom) + "\" x2=\"" + num(right) +
         "\" y2=\"" + num(bottom) + "\" stroke=\"#000000\"/>\n<g font-size=\"11\">\n";
    for (const double v : ticks(x_lo, x_hi, step))
      s += "<text x=\"" + num(X(v)) + "\" y=\"" + num(bottom + 15) + "\" text-anchor=\"middle\">" +
           tick_label(std::abs(v) < step * 1e-9 ? 0.0 : v) + "</text>\n";
    s += "</g>\n<text x=\"" + num((left + right) / 2) + "\" y=\"" + num(bottom + 36) + "\" text-anchor=\"middle\">" +
         xml_escape(p.x_label) + "</text>\n";
    for (size_t i = 0; i < p.rows.size(); ++i) {
      const IntervalRow& r = p.rows[i];
      const double cy = top + row_h * (static_cast<double>(i) + 0.5);
      s += "<text x=\"330\" y=\"" + num(cy + 4) + "\" text-anchor=\"end\">" + xml_escape(r.label) + "</text>\n";
      if (std::isfinite(r.low) && std::isfinite(r.high))
        s += "<path d=\"M" + num(X(r.low)) + "," + num(cy) + "H" + num(X(r.high)) + "M" + num(X(r.low)) + "," +
             num(cy - 4) + "V" + num(cy + 4) + "M" + num(X(r.high)) + "," + num(cy - 4) + "V" + num(cy + 4) +
             "\" stroke=\"" + r.colour + "\" stroke-width=\"1.5\" fill=\"none\"/>\n";
      if (std::isfinite(r.value))
        s += "<circle cx=\"" + num(X(r.value)) + "\" cy=\"" + num(cy) + "\" r=\"3.5\" fill=\"" + r.colour + "\"/>\n";
    }
    y0 = bottom + axis_h;
  }
  return s + "</svg>\n";
}

}  // namespace mla::svg
