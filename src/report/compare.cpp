// src/report/compare.cpp — tensor-by-tensor comparison (definitions in mla/compare.hpp).
//
// One pass over the elements in double:
//   pass 1  per element: classify (both finite / equal non-finite / non-finite mismatch),
//           accumulate ||a||^2, ||b||^2, <a,b>, ||a-b||^2, track max |a-b|, max rel, count
//           elements outside atol + rtol*|a|.
//   pass 2  turn the sums into norm_error and cosine; unflatten the worst index.
#include <cmath>
#include <cstdio>
#include <string>

#include "mla/compare.hpp"
#include "mla/error.hpp"
#include "mla/safetensors.hpp"
#include "mla/stats.hpp"

namespace mla {
namespace {

std::string shape_text(const std::vector<uint64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

uint64_t product(const std::vector<uint64_t>& s) {
  uint64_t n = 1;
  for (uint64_t d : s) n *= d;
  return n;
}

}  // namespace

bool CompareResult::all_within() const {
  if (tensors.empty()) return false;
  for (const auto& t : tensors)
    if (!t.within()) return false;
  return true;
}

TensorComparison compare_values(const std::string& name, std::span<const double> a, std::span<const double> b,
                                const std::vector<uint64_t>& shape_a, const std::vector<uint64_t>& shape_b,
                                double rtol, double atol) {
  TensorComparison c;
  c.name = name;
  c.shape_a = shape_a;
  c.shape_b = shape_b;
  c.shape_match = shape_a == shape_b;
  if (!c.shape_match) return c;
  c.numel = product(shape_a);
  if (a.size() != c.numel || b.size() != c.numel)
    fail(ErrorKind::Shape, "compare " + name + ": " + std::to_string(a.size()) + " and " + std::to_string(b.size()) +
                               " values for shape " + shape_text(shape_a));

  // pass 1
  double aa = 0, bb = 0, ab = 0, dd = 0;  // ||a||^2, ||b||^2, <a,b>, ||a-b||^2
  uint64_t worst = 0;  // flat index of the largest |a-b|
  for (uint64_t i = 0; i < c.numel; ++i) {
    const double x = a[i], y = b[i];
    c.nan_a += std::isnan(x);
    c.inf_a += std::isinf(x);
    c.nan_b += std::isnan(y);
    c.inf_b += std::isinf(y);
    double abs_err = 0;
    if (std::isfinite(x) && std::isfinite(y)) {
      const double diff = x - y;
      abs_err = std::fabs(diff);
      aa += x * x;
      bb += y * y;
      ab += x * y;
      dd += diff * diff;
      if (x != 0.0 && std::fabs(x) > atol) c.max_rel = std::max(c.max_rel, abs_err / std::fabs(x));
      if (!(abs_err <= atol + rtol * std::fabs(x))) ++c.n_outside;
    } else if ((std::isnan(x) && std::isnan(y)) || x == y) {
      abs_err = 0;  // equal non-finite values
    } else {
      abs_err = INFINITY;
      ++c.n_outside;
      ++c.n_nonfinite_mismatch;
    }
    if (abs_err > c.max_abs) {  // strict: the lowest flat index wins ties
      c.max_abs = abs_err;
      worst = i;
    }
  }

  // pass 2
  const double na = std::sqrt(aa), nd = std::sqrt(dd);
  c.norm_error = na > 0 ? nd / na : (nd > 0 ? INFINITY : 0.0);
  c.cosine = cosine_from_sums(ab, aa, bb, dd == 0);
  if (c.numel > 0) {
    c.worst_a = a[worst];
    c.worst_b = b[worst];
    c.worst_index.assign(shape_a.size(), 0);
    uint64_t rest = worst;
    for (size_t k = shape_a.size(); k-- > 0;) {
      c.worst_index[k] = shape_a[k] ? rest % shape_a[k] : 0;
      rest = shape_a[k] ? rest / shape_a[k] : 0;
    }
  }
  return c;
}

CompareResult compare_safetensors(const SafetensorsFile& a, const SafetensorsFile& b, const CompareOptions& opt) {
  CompareResult r;
  r.rtol = opt.rtol;
  r.atol = opt.atol;
  for (const auto& name : opt.tensors) {
    if (!a.find(name)) fail(ErrorKind::TensorNotFound, "tensor '" + name + "' is not in " + a.path());
    if (!b.find(name)) fail(ErrorKind::TensorNotFound, "tensor '" + name + "' is not in " + b.path());
  }
  auto selected = [&](const std::string& name) {
    if (opt.tensors.empty()) return true;
    for (const auto& n : opt.tensors)
      if (n == name) return true;
    return false;
  };
  for (const TensorInfo& ta : a.tensors()) {
    if (!selected(ta.name)) continue;
    const TensorInfo* tb = b.find(ta.name);
    if (!tb) {
      r.only_in_a.push_back(ta.name);
      continue;
    }
    TensorComparison c;
    if (ta.shape == tb->shape) {
      const std::vector<double> va = a.to_double(ta), vb = b.to_double(*tb);
      c = compare_values(ta.name, va, vb, ta.shape, tb->shape, opt.rtol, opt.atol);
    } else {
      c = compare_values(ta.name, {}, {}, ta.shape, tb->shape, opt.rtol, opt.atol);
    }
    c.dtype_a = std::string(dtype_name(ta.dtype));
    c.dtype_b = std::string(dtype_name(tb->dtype));
    r.tensors.push_back(std::move(c));
  }
  for (const TensorInfo& tb : b.tensors())
    if (selected(tb.name) && !a.find(tb.name)) r.only_in_b.push_back(tb.name);
  return r;
}

std::string compare_table(const CompareResult& r, const std::string& name_a, const std::string& name_b) {
  std::string s = "A = " + name_a + "\nB = " + name_b + "\n";
  char buf[512];
  std::snprintf(buf, sizeof buf, "tolerance: |a-b| <= atol + rtol*|a| with atol=%g rtol=%g (A is the reference)\n\n",
                r.atol, r.rtol);
  s += buf;
  std::snprintf(buf, sizeof buf, "%-16s %-18s %-9s %11s %11s %11s %13s  %-34s %9s  %s\n", "tensor", "shape", "dtypes",
                "max_abs", "max_rel", "norm_err", "cosine", "worst index (a | b)", "outside", "verdict");
  s += buf;
  for (const auto& t : r.tensors) {
    const std::string dtypes = t.dtype_a + "/" + t.dtype_b;
    if (!t.shape_match) {
      std::snprintf(buf, sizeof buf, "%-16s %-18s %-9s shape mismatch: A %s vs B %s%50s\n", t.name.c_str(),
                    shape_text(t.shape_a).c_str(), dtypes.c_str(), shape_text(t.shape_a).c_str(),
                    shape_text(t.shape_b).c_str(), "MISMATCH");
      s += buf;
      continue;
    }
    std::string worst = shape_text(t.worst_index);
    char vals[96];
    std::snprintf(vals, sizeof vals, " (%.6g | %.6g)", t.worst_a, t.worst_b);
    worst += vals;
    if (t.nonfinite() > 0) {  // no figure over the finite part alone: it would vouch for what it skipped
      std::snprintf(buf, sizeof buf, "%-16s %-18s %-9s %11s %11s %11s %13s  %-34s %9llu  %s\n", t.name.c_str(),
                    shape_text(t.shape_a).c_str(), dtypes.c_str(), "n/a", "n/a", "n/a", "n/a", worst.c_str(),
                    static_cast<unsigned long long>(t.n_outside), "NON-FINITE");
      s += buf;
      auto ull = [](uint64_t v) { return static_cast<unsigned long long>(v); };
      std::snprintf(buf, sizeof buf, "  %s holds NaN or Inf: A %llu NaN, %llu Inf; B %llu NaN, %llu Inf (of %llu elements)\n",
                    t.name.c_str(), ull(t.nan_a), ull(t.inf_a), ull(t.nan_b), ull(t.inf_b), ull(t.numel));
      s += buf;
      continue;
    }
    std::snprintf(buf, sizeof buf, "%-16s %-18s %-9s %11.4g %11.4g %11.4g %13.10f  %-34s %9llu  %s\n", t.name.c_str(),
                  shape_text(t.shape_a).c_str(), dtypes.c_str(), t.max_abs, t.max_rel, t.norm_error, t.cosine,
                  worst.c_str(), static_cast<unsigned long long>(t.n_outside), t.within() ? "ok" : "OUTSIDE");
    s += buf;
  }
  for (const auto& n : r.only_in_a) s += "only in A: " + n + "\n";
  for (const auto& n : r.only_in_b) s += "only in B: " + n + "\n";
  size_t bad = 0, nonfinite = 0;
  for (const auto& t : r.tensors) {
    bad += !t.within();
    nonfinite += t.shape_match && t.nonfinite() > 0;
  }
  if (r.tensors.empty()) s += "\nno common tensors to compare\n";
  else if (bad == 0) s += "\nall " + std::to_string(r.tensors.size()) + " common tensors within tolerance\n";
  else
    s += "\n" + std::to_string(bad) + " of " + std::to_string(r.tensors.size()) + " common tensors outside tolerance" +
         (nonfinite ? " (" + std::to_string(nonfinite) + " holding NaN or Inf)" : "") + "\n";
  return s;
}

}  // namespace mla
