// tests/unit/compare.hpp — the one comparison helper of the unit tests.
//
// compare(name, ref, got, tol) checks, in order (ggml test-backend-ops, llm.c check_tensor):
//   0. equal shapes (and element counts);
//   1. NaN/Inf in either tensor (reported with the first offending index);
//   2. elementwise |got - ref| <= tol.atol + tol.rtol * |ref|;
//   3. normalized error ||got - ref||_2 / ||ref||_2 <= tol.max_norm_error
//      (||got - ref||_2 itself when ref is all zeros);
//   4. cosine(got, ref) >= tol.min_cosine (1 when both are all zeros).
// On failure, `message` names the tensor, the failed check, the worst element's multi-dim
// index, the max abs/rel errors, the norm error, the cosine and the first five mismatching
// (ref, got) pairs. Use as: auto r = compare(...); BOOST_TEST(r.ok, r.message);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mla/tensor.hpp"
#include "tolerances.hpp"

namespace mla::test {

struct CompareResult {
  bool ok = false;
  std::string message;       // "" when ok; otherwise one explanatory paragraph
  double max_abs = 0;        // max |got - ref|
  double max_rel = 0;        // max |got - ref| / |ref| over ref != 0
  double norm_error = 0;     // ||got - ref|| / ||ref||
  double cosine = 1;         // <got, ref> / (||got|| ||ref||)
  int64_t worst_index = -1;  // flat index of the largest elementwise violation (or max_abs)
  int64_t mismatches = 0;    // elements failing the elementwise bound
};

// shape: the tensor's shape, used only to print indices as [i, j, k]; data row-major.
CompareResult compare(const std::string& name, const std::vector<int64_t>& shape, const std::vector<double>& ref,
                      const std::vector<double>& got, const Tolerance& tol);

CompareResult compare(const std::string& name, const TensorD& ref, const TensorD& got, const Tolerance& tol);
CompareResult compare(const std::string& name, const TensorD& ref, const TensorF& got, const Tolerance& tol);
// 1-D vectors (token scores, inv_freq, ...).
CompareResult compare(const std::string& name, const std::vector<double>& ref, const std::vector<double>& got,
                      const Tolerance& tol);

// "[2, 0, 17]" for flat index `flat` in a row-major tensor of this shape.
std::string index_string(const std::vector<int64_t>& shape, int64_t flat);

}  // namespace mla::test
