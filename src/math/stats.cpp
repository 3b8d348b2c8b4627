// src/math/stats.cpp — mla/stats.hpp: Student-t intervals and quantiles (docs/eval.md §3.1), and a
// row's deviation from a reference row (docs/decode.md §4).
#include "mla/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mla/error.hpp"

namespace mla {

double student_t_two_sided_cdf(double t, int64_t df) {
  if (df < 1) fail(ErrorKind::InvalidArgument, "student_t_two_sided_cdf: df must be >= 1");
  if (!(t > 0)) return 0.0;
  const double theta = std::atan(t / std::sqrt(static_cast<double>(df)));
  const double s = std::sin(theta), c = std::cos(theta), c2 = c * c;
  if (df % 2 == 1) {
    // A = (2/pi) [theta + s c (1 + (2/3) c^2 + (2 4)/(3 5) c^4 + ... + (2 4 .. (df-3))/(3 5 .. (df-2)) c^(df-3))]
    double series = 0;
    if (df > 1) {
      double term = 1;
      series = 1;
      for (int64_t k = 2; k <= df - 3; k += 2) {
        term *= static_cast<double>(k) / static_cast<double>(k + 1) * c2;
        series += term;
      }
    }
    return (2.0 / M_PI) * (theta + s * c * series);
  }
  // A = s [1 + (1/2) c^2 + (1 3)/(2 4) c^4 + ... + (1 3 .. (df-3))/(2 4 .. (df-2)) c^(df-2)]
  double term = 1, series = 1;
  for (int64_t k = 1; k <= df - 3; k += 2) {
    term *= static_cast<double>(k) / static_cast<double>(k + 1) * c2;
    series += term;
  }
  return s * series;
}

double student_t_quantile(double coverage, int64_t df) {
  if (!(coverage > 0 && coverage < 1)) fail(ErrorKind::InvalidArgument, "student_t_quantile: coverage must lie in (0, 1)");
  double lo = 0, hi = 1;
  while (student_t_two_sided_cdf(hi, df) < coverage) hi *= 2;  // the CDF rises to 1: this ends
  for (int i = 0; i < 200 && hi - lo > 1e-15 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_two_sided_cdf(mid, df) < coverage ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

MeanInterval mean_t_interval(const std::vector<double>& x, double coverage) {
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  MeanInterval m;
  m.n = static_cast<int64_t>(x.size());
  if (m.n == 0) {
    m.mean = m.se = m.low = m.high = nan;
    return m;
  }
  double sum = 0;
  for (double v : x) sum += v;
  m.mean = sum / static_cast<double>(m.n);
  if (m.n == 1) {
    m.se = m.low = m.high = nan;
    return m;
  }
  double ss = 0;
  for (double v : x) ss += (v - m.mean) * (v - m.mean);
  m.se = std::sqrt(ss / static_cast<double>(m.n - 1)) / std::sqrt(static_cast<double>(m.n));
  const double t = student_t_quantile(coverage, m.n - 1);
  m.low = m.mean - t * m.se;
  m.high = m.mean + t * m.se;
  return m;
}

double quantile_linear(std::vector<double> x, double q) {
  if (x.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(x.begin(), x.end());
  const double h = static_cast<double>(x.size() - 1) * std::clamp(q, 0.0, 1.0);
  const size_t i = static_cast<size_t>(std::floor(h));
  if (i + 1 >= x.size()) return x.back();
  return x[i] + (h - static_cast<double>(i)) * (x[i + 1] - x[i]);
}

double cosine_from_sums(double dot, double aa, double bb, bool identical) {
  if (identical) return 1.0;
  if (!(aa > 0) || !(bb > 0)) return aa == 0 && bb == 0 ? 1.0 : 0.0;
  return std::clamp(dot / (std::sqrt(aa) * std::sqrt(bb)), -1.0, 1.0);
}

namespace {

template <class T>
RowDeviation deviation(const T* a, const T* b, int64_t n) {
  double diff = 0, dot = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    diff += (x - y) * (x - y);
    dot += x * y;
    aa += x * x;
    bb += y * y;
  }
  const double nb = std::sqrt(bb);
  RowDeviation r;
  r.distance = std::sqrt(diff);
  r.rel_error = nb > 0 ? r.distance / nb : (diff == 0 ? 0.0 : std::numeric_limits<double>::infinity());
  r.cosine = cosine_from_sums(dot, aa, bb, diff == 0);
  return r;
}

}  // namespace

RowDeviation row_deviation(const double* a, const double* b, int64_t n) { return deviation(a, b, n); }
RowDeviation row_deviation(const float* a, const float* b, int64_t n) { return deviation(a, b, n); }

}  // namespace mla
