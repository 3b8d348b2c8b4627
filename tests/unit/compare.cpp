// tests/unit/compare.cpp — the comparison helper (see compare.hpp for the order of checks).
#include "compare.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace mla::test {
namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

std::string index_string(const std::vector<int64_t>& shape, int64_t flat) {
  if (shape.empty()) return "[" + std::to_string(flat) + "]";
  std::vector<int64_t> ix(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t extent = shape[d] > 0 ? shape[d] : 1;
    ix[d] = flat % extent;
    flat /= extent;
  }
  std::string s = "[";
  for (size_t d = 0; d < ix.size(); ++d) s += (d ? ", " : "") + std::to_string(ix[d]);
  return s + "]";
}

CompareResult compare(const std::string& name, const std::vector<int64_t>& shape, const std::vector<double>& ref,
                      const std::vector<double>& got, const Tolerance& tol) {
  CompareResult r;
  const std::string header = name + " (" + std::string(tol.pair) + ", " + std::string(tol.precision) + "): ";
  // 0. sizes
  if (ref.size() != got.size()) {
    r.message = header + "size mismatch: ref has " + std::to_string(ref.size()) + " values, got " +
                std::to_string(got.size());
    return r;
  }
  // 1. NaN/Inf first
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(ref[i]) || !std::isfinite(got[i])) {
      r.worst_index = static_cast<int64_t>(i);
      r.message = header + "non-finite value at " + index_string(shape, r.worst_index) + ": ref " + num(ref[i]) +
                  ", got " + num(got[i]);
      return r;
    }
  }
  // 2. elementwise bound, and the sums for the norms
  double diff_sq = 0, ref_sq = 0, got_sq = 0, dot = 0, worst_excess = 0;
  int64_t worst_violation = -1, worst_abs = 0;
  std::vector<size_t> first_bad;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double a = ref[i], b = got[i], d = std::fabs(b - a);
    diff_sq += d * d;
    ref_sq += a * a;
    got_sq += b * b;
    dot += a * b;
    if (d > r.max_abs) {
      r.max_abs = d;
      worst_abs = static_cast<int64_t>(i);
    }
    if (a != 0 && d / std::fabs(a) > r.max_rel) r.max_rel = d / std::fabs(a);
    const double excess = d - (tol.atol + tol.rtol * std::fabs(a));
    if (excess > 0) {
      ++r.mismatches;
      if (first_bad.size() < 5) first_bad.push_back(i);
      if (excess > worst_excess) {
        worst_excess = excess;
        worst_violation = static_cast<int64_t>(i);
      }
    }
  }
  // worst element: the largest violation of the elementwise bound, else the largest abs error
  r.worst_index = worst_violation >= 0 ? worst_violation : worst_abs;
  // 3. normalized error, 4. cosine
  r.norm_error = ref_sq > 0 ? std::sqrt(diff_sq / ref_sq) : std::sqrt(diff_sq);
  r.cosine = (ref_sq == 0 && got_sq == 0) ? 1.0 : (ref_sq == 0 || got_sq == 0) ? 0.0 : dot / std::sqrt(ref_sq * got_sq);

  std::string failed;
  if (r.mismatches > 0)
    failed += "elementwise |got-ref| <= " + num(tol.atol) + " + " + num(tol.rtol) + "*|ref| fails for " +
              std::to_string(r.mismatches) + " of " + std::to_string(ref.size()) + " elements; ";
  if (!(r.norm_error <= tol.max_norm_error))
    failed += "normalized error " + num(r.norm_error) + " > " + num(tol.max_norm_error) + "; ";
  if (!(r.cosine >= tol.min_cosine)) failed += "cosine " + num(r.cosine) + " < " + num(tol.min_cosine) + "; ";
  if (failed.empty()) {
    r.ok = true;
    return r;
  }
  std::ostringstream m;
  m << header << failed << "worst at " << index_string(shape, r.worst_index) << " (ref "
    << num(ref[static_cast<size_t>(r.worst_index)]) << ", got " << num(got[static_cast<size_t>(r.worst_index)])
    << "); max abs " << num(r.max_abs) << ", max rel " << num(r.max_rel) << ", norm error " << num(r.norm_error)
    << ", cosine " << num(r.cosine) << ". tolerance reason: " << tol.reason;
  if (!first_bad.empty()) {
    m << ". first mismatches:";
    for (size_t i : first_bad)
      m << " " << index_string(shape, static_cast<int64_t>(i)) << " ref=" << num(ref[i]) << " got=" << num(got[i]);
  }
  r.message = m.str();
  return r;
}

CompareResult compare(const std::string& name, const TensorD& ref, const TensorD& got, const Tolerance& tol) {
  if (ref.shape != got.shape) {
    CompareResult r;
    r.message = name + ": shape mismatch: ref " + shape_string(ref.shape) + ", got " + shape_string(got.shape);
    return r;
  }
  return compare(name, ref.shape, ref.data, got.data, tol);
}

CompareResult compare(const std::string& name, const TensorD& ref, const TensorF& got, const Tolerance& tol) {
  if (ref.shape != got.shape) {
    CompareResult r;
    r.message = name + ": shape mismatch: ref " + shape_string(ref.shape) + ", got " + shape_string(got.shape);
    return r;
  }
  return compare(name, ref.shape, ref.data, std::vector<double>(got.data.begin(), got.data.end()), tol);
}

CompareResult compare(const std::string& name, const std::vector<double>& ref, const std::vector<double>& got,
                      const Tolerance& tol) {
  return compare(name, {static_cast<int64_t>(ref.size())}, ref, got, tol);
}

}  // namespace mla::test
