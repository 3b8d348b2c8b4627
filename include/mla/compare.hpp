// mla/compare.hpp — tensor-by-tensor comparison of two results (`mla-h2o compare`, and
// the tests that cross-check backends and golden files use the same code).
//
// A is the reference, B the candidate. Per tensor, over all elements i (values in double):
//   abs_i = |a_i - b_i|                 max_abs = max_i abs_i
//   rel_i = abs_i / |a_i|               max_rel = max over |a_i| > atol (and a_i != 0): where
//                                       |a_i| <= atol the absolute bound dominates and a relative
//                                       error of a near-zero value means nothing (1e-50 vs 1e-45)
//   norm_error = ||a - b||_2 / ||a||_2  (0 when both are 0; +inf when only a is 0)
//   cosine     = <a, b> / (||a|| ||b||) (1 when both are 0; 0 when only one is 0)
//   element i is within tolerance iff abs_i <= atol + rtol * |a_i|   (numpy.allclose rule)
//   non-finite values: NaN and ±Inf are counted per tensor and per side (nan_a, inf_a, nan_b,
//   inf_b). A tensor holding any is never within tolerance, not even against itself: its other
//   figures say nothing about those elements. Equal non-finite values (NaN with NaN, +inf with
//   +inf) are not counted in n_outside; any other pairing with a non-finite value is.
//   max_abs, max_rel, norm_error and cosine use only the elements where both values are finite,
//   and compare_table prints none of them ("n/a") for a tensor holding NaN or Inf.
//   worst_index = the multi-dimensional index of the largest abs_i (a non-finite mismatch wins),
//   lowest flat index on ties.
// Shapes must be equal (dtype may differ: both are widened to double exactly).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mla {

class SafetensorsFile;

struct CompareOptions {
  double rtol = 1e-5;                // relative tolerance (numpy.allclose's default)
  double atol = 1e-6;                // absolute tolerance
  std::vector<std::string> tensors;  // only these names (empty = every common tensor)
};

struct TensorComparison {
  std::string name;
  std::vector<uint64_t> shape_a, shape_b;
  std::string dtype_a, dtype_b;
  bool shape_match = false;
  uint64_t numel = 0;
  double max_abs = 0, max_rel = 0, norm_error = 0, cosine = 1;
  std::vector<uint64_t> worst_index;  // multi-dim index of the largest |a-b|
  double worst_a = 0, worst_b = 0;    // the values there
  uint64_t n_outside = 0;             // elements outside atol + rtol*|a|
  uint64_t n_nonfinite_mismatch = 0;  // elements where a non-finite value is not matched
  uint64_t nan_a = 0, inf_a = 0, nan_b = 0, inf_b = 0;  // NaN and ±Inf elements of A and of B
  uint64_t nonfinite() const { return nan_a + inf_a + nan_b + inf_b; }
  bool within() const { return shape_match && n_outside == 0 && nonfinite() == 0; }
};

struct CompareResult {
  std::vector<TensorComparison> tensors;  // common tensors, in A's order
  std::vector<std::string> only_in_a, only_in_b;
  double rtol = 0, atol = 0;
  bool all_within() const;  // every compared tensor within tolerance (and at least one compared)
};

// Compares flat row-major values of one tensor. a.size() and b.size() must match the shapes.
TensorComparison compare_values(const std::string& name, std::span<const double> a, std::span<const double> b,
                                const std::vector<uint64_t>& shape_a, const std::vector<uint64_t>& shape_b,
                                double rtol, double atol);

// Every common tensor (or opt.tensors) of two safetensors files. A name in opt.tensors that
// is missing from either file is an Error(TensorNotFound) naming the file.
CompareResult compare_safetensors(const SafetensorsFile& a, const SafetensorsFile& b, const CompareOptions& opt);

// The table `mla-h2o compare` prints: one row per tensor, then the one-sided names and a
// verdict line.
std::string compare_table(const CompareResult& r, const std::string& name_a, const std::string& name_b);

}  // namespace mla
