// src/decode/decode_report.cpp — the outputs of `mla-h2o decode` (docs/decode.md §4), each a
// pure function of the DecodeResult / summaries, so tests check them on small runs:
//   decode.csv   one row per (policy, budget, step)
//   summary.csv  one row per (policy, budget)
//   table        the same as summary.csv, aligned for stdout
//   decode.svg   rel_error per step, one line per policy (one budget)
//   budget.svg   mean rel_error against K, one line per policy (fidelity versus memory)
// Numbers are printed with %.17g in the CSVs (they parse back to the same double).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "mla/decode.hpp"
#include "mla/report.hpp"
#include "src/report/svg_util.hpp"

namespace mla {
namespace {

using svg::nice_step;
using svg::num;
using svg::tick_label;
using svg::xml_escape;

// One colour per policy, in all_policies() order.
const char* policy_colour(Policy p) {
  switch (p) {
    case Policy::Full: return "#000000";
    case Policy::H2O: return "#e66101";
    case Policy::H2ONormalized: return "#fdb863";
    case Policy::Tova: return "#5e3c99";
    case Policy::Streaming: return "#1f78b4";
    case Policy::SnapKV: return "#33a02c";
    case Policy::Random: return "#999999";
    case Policy::Oracle: return "#e31a1c";
  }
  return "#000000";
}

struct Series {
  Policy policy;
  std::vector<std::pair<double, double>> points;  // (x, y)
};

// A line chart: 960 x 480, plot area x in [70, 780], y in [50, 420], legend on the right.
// y from 0 to a nice tick above the largest value; x from the smallest to the largest x.
std::string line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                       const std::vector<Series>& series) {
  constexpr double left = 70, right = 780, top = 50, bottom = 420;
  double x_min = INFINITY, x_max = -INFINITY, y_max = 0;
  for (const Series& s : series)
    for (const auto& [x, y] : s.points) {
      x_min = std::min(x_min, x);
      x_max = std::max(x_max, x);
      if (std::isfinite(y)) y_max = std::max(y_max, y);
    }
  if (!(x_max > x_min)) {
    x_min = std::isfinite(x_min) ? x_min - 1 : 0;
    x_max = x_min + 2;
  }
  const double y_step = nice_step(y_max > 0 ? y_max : 1.0, 6);
  const double y_top = std::max(y_step, std::ceil((y_max > 0 ? y_max : 1.0) / y_step) * y_step);
  const double x_step = nice_step(x_max - x_min, 8);
  auto X = [&](double x) { return left + (x - x_min) * (right - left) / (x_max - x_min); };
  auto Y = [&](double y) { return bottom - std::min(y, y_top) * (bottom - top) / y_top; };

  std::string s =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"960\" height=\"480\" viewBox=\"0 0 960 480\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<title>" + xml_escape(title) + "</title>\n<rect x=\"0\" y=\"0\" width=\"960\" height=\"480\" fill=\"#ffffff\"/>\n";
  s += "<text x=\"480\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">" + xml_escape(title) + "</text>\n";
  // grid, ticks and axes
  s += "<g stroke=\"#e8e8e8\">\n";
  for (double v = y_step; v <= y_top * (1 + 1e-12); v += y_step)
    s += "<line x1=\"" + num(left) + "\" y1=\"" + num(Y(v)) + "\" x2=\"" + num(right) + "\" y2=\"" + num(Y(v)) + "\"/>\n";
  s += "</g>\n<g stroke=\"#000000\">\n";
  s += "<line x1=\"" + num(left) + "\" y1=\"" + num(bottom) + "\" x2=\"" + num(right) + "\" y2=\"" + num(bottom) + "\"/>\n";
  s += "<line x1=\"" + num(left) + "\" y1=\"" + num(top) + "\" x2=\"" + num(left) + "\" y2=\"" + num(bottom) + "\"/>\n";
  s += "</g>\n<g font-size=\"11\">\n";
  for (double v = 0; v <= y_top * (1 + 1e-12); v += y_step)
    s += "<text x=\"" + num(left - 6) + "\" y=\"" + num(Y(v) + 4) + "\" text-anchor=\"end\">" + tick_label(v) + "</text>\n";
  for (double v = std::ceil(x_min / x_step) * x_step; v <= x_max * (1 + 1e-12); v += x_step)
    s += "<text x=\"" + num(X(v)) + "\" y=\"" + num(bottom + 16) + "\" text-anchor=\"middle\">" + tick_label(v) + "</text>\n";
  s += "</g>\n";
  s += "<text x=\"" + num((left + right) / 2) + "\" y=\"460\" text-anchor=\"middle\">" + xml_escape(x_label) + "</text>\n";
  s += "<text x=\"18\" y=\"" + num((top + bottom) / 2) + "\" text-anchor=\"middle\" transform=\"rotate(-90 18 " +
       num((top + bottom) / 2) + ")\">" + xml_escape(y_label) + "</text>\n";
  // one polyline per series, and the legend
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& sr = series[k];
    std::string pts;
    for (const auto& [x, y] : sr.points)
      if (std::isfinite(y)) pts += num(X(x)) + "," + num(Y(y)) + " ";
    s += "<polyline id=\"" + std::string(policy_name(sr.policy)) + "\" fill=\"none\" stroke=\"" + policy_colour(sr.policy) +
         "\" stroke-width=\"1.5\" points=\"" + pts + "\"/>\n";
    const double ly = top + 10 + 20 * static_cast<double>(k);
    s += "<line x1=\"795\" y1=\"" + num(ly) + "\" x2=\"815\" y2=\"" + num(ly) + "\" stroke=\"" + policy_colour(sr.policy) +
         "\" stroke-width=\"3\"/><text x=\"822\" y=\"" + num(ly + 4) + "\">" + policy_name(sr.policy) + "</text>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace

std::string decode_csv(const DecodeResult& r) {
  std::string out = "policy,budget,step,position,cache_len,evicted,rel_error,cosine,mass_recall\n";
  for (const PolicyTrace& t : r.traces)
    for (const DecodeStep& s : t.steps) {
      out += std::string(policy_name(t.policy)) + "," + std::to_string(t.budget) + "," + std::to_string(s.step) + "," +
             std::to_string(s.position) + "," + std::to_string(s.cache_len) + "," + std::to_string(s.evicted) + "," +
             format_double(s.rel_error) + "," + format_double(s.cosine) + "," + format_double(s.mass_recall) + "\n";
    }
  return out;
}

std::string decode_summary_csv(const std::vector<DecodeSummary>& sum) {
  std::string out =
      "policy,budget,mean_rel_error,p95_rel_error,max_rel_error,mean_cosine,mean_mass_recall,mean_cache_len\n";
  for (const DecodeSummary& s : sum)
    out += std::string(policy_name(s.policy)) + "," + std::to_string(s.budget) + "," + format_double(s.mean_rel_error) +
           "," + format_double(s.p95_rel_error) + "," + format_double(s.max_rel_error) + "," +
           format_double(s.mean_cosine) + "," + format_double(s.mean_mass_recall) + "," + format_double(s.mean_cache_len) +
           "\n";
  return out;
}

std::string decode_summary_table(const std::vector<DecodeSummary>& sum) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-15s %7s %12s %12s %12s %12s %11s\n", "policy", "budget", "mean rel_err",
                "p95 rel_err", "max rel_err", "mass_recall", "mean cache");
  out += line;
  for (const DecodeSummary& s : sum) {
    std::snprintf(line, sizeof line, "%-15s %7lld %12.4e %12.4e %12.4e %12.6f %11.1f\n", policy_name(s.policy),
                  static_cast<long long>(s.budget), s.mean_rel_error, s.p95_rel_error, s.max_rel_error,
                  s.mean_mass_recall, s.mean_cache_len);
    out += line;
  }
  return out;
}

std::string decode_svg(const DecodeResult& r, int64_t budget, const std::string& title) {
  std::vector<Series> series;
  for (const PolicyTrace& t : r.traces) {
    if (t.budget != budget) continue;
    Series s{t.policy, {}};
    for (const DecodeStep& st : t.steps) s.points.emplace_back(static_cast<double>(st.step), st.rel_error);
    series.push_back(std::move(s));
  }
  return line_chart(title, "decode step", "rel_error of attn_output vs the full cache", series);
}

std::string budget_svg(const std::vector<DecodeSummary>& sum, const std::string& title) {
  std::vector<Series> series;
  for (const DecodeSummary& s : sum) {
    auto it = std::find_if(series.begin(), series.end(), [&](const Series& x) { return x.policy == s.policy; });
    if (it == series.end()) {
      series.push_back(Series{s.policy, {}});
      it = series.end() - 1;
    }
    it->points.emplace_back(static_cast<double>(s.budget), s.mean_rel_error);
  }
  return line_chart(title, "cache budget K (tokens)", "mean rel_error over the steps", series);
}

}  // namespace mla
