// mla/stats.hpp — the statistics `eval` reports over windows (docs/eval.md §3.1): a mean with
// its Student-t confidence interval, the t quantile it needs, and an order-statistic quantile;
// and the deviation of one output row from the full cache's (decode and eval).
// Every function is one formula, computed in double; the tests check them against tabulated
// values and a hand computation.
#pragma once

#include <cstdint>
#include <vector>

namespace mla {

// P(|T| <= t) for Student's t with `df` >= 1 degrees of freedom: the closed form for integer df
// (a finite series in cos^2 of theta = atan(t / sqrt(df)); Abramowitz & Stegun 26.7.3-26.7.4).
double student_t_two_sided_cdf(double t, int64_t df);

// The t with P(|T| <= t) = `coverage` (0 < coverage < 1), by bisection on the closed form to
// double precision: 12.706 for df 1, 2.262 for df 9, 1.960 as df grows, at 0.95.
double student_t_quantile(double coverage, int64_t df);

// The mean of n paired differences (or any sample) with its two-sided Student-t interval:
//   mean = sum x_i / n,  s^2 = sum (x_i - mean)^2 / (n - 1),  se = s / sqrt(n),
//   [mean - t se, mean + t se] with t = student_t_quantile(coverage, n - 1).
// n = 1: se, low and high are NaN (one sample has no spread). n = 0: everything NaN.
struct MeanInterval {
  int64_t n = 0;
  double mean = 0, se = 0, low = 0, high = 0;
};
MeanInterval mean_t_interval(const std::vector<double>& x, double coverage = 0.95);

// The q-quantile (0 <= q <= 1) by linear interpolation between order statistics (Hyndman-Fan
// type 7, numpy's default): h = (n - 1) q, x_(floor h) + (h - floor h)(x_(floor h + 1) - x_(floor h)).
// NaN for an empty sample.
double quantile_linear(std::vector<double> x, double q);

// The cosine of two vectors from their sums (dot = a . b, aa = ||a||^2, bb = ||b||^2, all >= 0
// but dot): dot / (||a|| ||b||), held in its domain [-1, 1] (the rounded quotient of a vector
// with itself can be 1 + 2^-52), exactly 1 when `identical` (the same values: a comparison of
// identical inputs is 1 on every build), 1 when a = b = 0, 0 when only one of them is 0.
double cosine_from_sums(double dot, double aa, double bb, bool identical);

// How far a row is from the reference row of the full cache (n values each; every sum in double,
// in index order, the values widened first), as decode and eval report it:
//   distance  = ||a - b||
//   rel_error = distance / ||b||             (0 when both are 0, inf when only b is)
//   cosine    = a . b / (||a|| ||b||)        (cosine_from_sums: exactly 1 when a = b)
struct RowDeviation {
  double distance = 0, rel_error = 0, cosine = 0;
};
RowDeviation row_deviation(const double* a, const double* b, int64_t n);
RowDeviation row_deviation(const float* a, const float* b, int64_t n);

}  // namespace mla
