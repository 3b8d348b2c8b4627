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

// ---- llama-perplexity --kl-divergence's statistics (docs/eval.md §3.2) ------------------------
// Pooled over n positions taken as independent draws (as llama-perplexity pools them; the
// per-window intervals above are the ones that allow for correlated positions).

// A mean with its standard error: mean = sum x_i / n, se = sqrt(var_of_mean) with
//   var_of_mean = sum (x_i - mean)^2 / (n (n - 1))          (llama.cpp: (sum x^2/n - mean^2)/(n - 1))
// n = 1: se NaN; n = 0: mean and se NaN.
struct MeanSe {
  int64_t n = 0;
  double mean = 0, se = 0;
};
MeanSe mean_se(const std::vector<double>& x);
// The squared standard error of the mean, var_of_mean above, about a given mean (NaN for n < 2).
double variance_of_mean(const std::vector<double>& x, double mean);
// The covariance of the means of n paired values (a_i, b_i), a and b of one size:
//   cov(mean a, mean b) = sum (a_i - mean a)(b_i - mean b) / (n (n - 1))   (NaN for n < 2)
double covariance_of_means(const std::vector<double>& a, const std::vector<double>& b);

// ln(PPL_a / PPL_b) = mean(nll_a) - mean(nll_b) over the same n positions, with
//   se = sqrt(var_of_mean(nll_a) + var_of_mean(nll_b) - 2 cov(mean nll_a, mean nll_b))
// (the covariance term: both runs read the same text, so their NLLs move together). The sum under
// the root is var_of_mean(nll_a - nll_b) >= 0 in exact arithmetic; a rounding below 0 is taken
// as 0. Identical inputs give exactly 0 and 0.
MeanSe ln_ppl_ratio(const std::vector<double>& nll_a, const std::vector<double>& nll_b);

// Δp at one position: the probability of the true next token under a minus under b,
//   exp(-nll_a) - exp(-nll_b)            (in [-1, 1]; exactly 0 when nll_a == nll_b)
double prob_diff(double nll_a, double nll_b);

// sqrt(sum x_i^2 / n) (NaN for an empty sample).
double root_mean_square(const std::vector<double>& x);

// A share hits / n with its binomial standard error sqrt(p (1 - p) / (n - 1)) (se NaN for n < 2).
MeanSe share_se(int64_t hits, int64_t n);

// The order statistics llama-perplexity prints, each quantile_linear's (type 7, the median of an
// even n the mean of the middle two): max, p99.9, p99, p95, p90, p75, median, p25, p10, p5, p1,
// p0.1, min. NaN everywhere for an empty sample.
struct Quantiles {
  double max = 0, p999 = 0, p99 = 0, p95 = 0, p90 = 0, p75 = 0, median = 0, p25 = 0, p10 = 0, p05 = 0, p01 = 0,
         p001 = 0, min = 0;
};
Quantiles quantiles(std::vector<double> x);
// quantile_linear on a sample already sorted ascending (one sort for many quantiles).
double quantile_sorted(const std::vector<double>& sorted, double q);

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
