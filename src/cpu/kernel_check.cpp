// src/cpu/kernel_check.cpp — the probes every oneDNN engine passes (kernel_check.hpp).
//
// Shape legend: S = probe rows, in/out = the probe projection's features; attention: S tokens,
// n heads, d_n + d_r = d_qk, d_v.
#include "kernel_check.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gemm_engine.hpp"
#include "mla/bf16.hpp"
#include "mla/random.hpp"
#include "mla/stats.hpp"
#include "onednn_attention.hpp"
#include "tiled_attention.hpp"

namespace mla::cpu {
namespace {

double tolerance(const char* product, bool bf16) {
  for (const KernelTolerance& t : kKernelCheckTolerances)
    if (std::strcmp(t.product, product) == 0 && t.bf16 == bf16) return t.max_norm_error;
  return 0;
}

// The test hook: the probe result of `product` is made wrong when the variable names it.
void inject_fault(const char* product, float* values, size_t count) {
  const char* fault = std::getenv(kKernelCheckFaultVariable);
  if (fault == nullptr || std::strcmp(fault, product) != 0 || count == 0) return;
  for (size_t i = 0; i < count; i += 2) values[i] = -3.0f * values[i];
}

// ||got - ref|| / ||ref|| (mla/stats.hpp row_deviation; NaN when got holds a NaN).
double norm_error(const float* got, const double* ref, size_t count) {
  const std::vector<double> wide(got, got + count);
  return row_deviation(wide.data(), ref, static_cast<int64_t>(count)).rel_error;
}

std::string verdict(const char* product, bool bf16, const std::string& kernel, double error) {
  const double bound = tolerance(product, bf16);
  if (error <= bound) return "";  // NaN fails
  char figures[96];
  std::snprintf(figures, sizeof figures, "normalized error %.3g > %.3g", error, bound);
  return std::string("oneDNN's ") + (bf16 ? "bf16 " : "fp32 ") + product + " kernel " + kernel +
         " disagrees with the reference on its probe: " + figures;
}

float probe_value(Rng& rng, double scale, bool bf16) {
  const float v = static_cast<float>(scale * rng.normal());
  return bf16 ? round_to_bf16(v) : v;
}

}  // namespace

std::string check_projection_kernel(GemmEngine& engine, bool bf16) {
  constexpr int64_t S = 9, in = 64, out = 144;  // out: two column slices (onednn_slice_count)
  Rng rng(4711, 17);
  std::vector<float> w(static_cast<size_t>(out * in)), b(static_cast<size_t>(out));
  for (float& v : w) v = probe_value(rng, 0.125, bf16);
  for (float& v : b) v = probe_value(rng, 0.5, bf16);
  MatrixRM x(S, in), y;
  for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = probe_value(rng, 1.0, bf16);
  const std::unique_ptr<PreparedLinear> p = engine.prepare({"kernel probe", w.data(), out, in, b.data()}, bf16, 1);
  p->run(x, 1, y);
  std::vector<double> ref(static_cast<size_t>(S * out));  // y = x W^T + b in double (bf16: rounded once)
  for (int64_t s = 0; s < S; ++s)
    for (int64_t o = 0; o < out; ++o) {
      double sum = b[static_cast<size_t>(o)];
      for (int64_t k = 0; k < in; ++k) sum += static_cast<double>(x(s, k)) * w[static_cast<size_t>(o * in + k)];
      ref[static_cast<size_t>(s * out + o)] = bf16 ? round_to_bf16(sum) : sum;
    }
  inject_fault("projection", y.data(), ref.size());
  return verdict("projection", bf16, p->kernel(), norm_error(y.data(), ref.data(), ref.size()));
}

std::string check_attention_kernel(bool bf16) {
  constexpr int64_t S = 80, n = 2, d_n = 8, d_r = 4, d_v = 8, d_qk = d_n + d_r;
  const Precision precision = bf16 ? Precision::BF16 : Precision::FP32;
  Rng rng(4712, 18);
  std::vector<float> kv(static_cast<size_t>(S * n * (d_n + d_v))), k_pe(static_cast<size_t>(S * d_r)),
      query(static_cast<size_t>(S * n * d_qk));
  for (float& v : kv) v = probe_value(rng, 1.0, bf16);
  for (float& v : k_pe) v = probe_value(rng, 1.0, bf16);
  for (float& v : query) v = probe_value(rng, 1.0, bf16);
  KeyValueStates states(S, n, d_n, d_r, d_v, precision);
  states.set_kv_rows(0, S, kv.data(), n * (d_n + d_v));
  states.set_k_pe_rows(0, S, k_pe.data(), d_r);
  const float scaling = 1.0f / std::sqrt(static_cast<float>(d_qk));
  auto attend = [&](Gemm products, std::vector<float>& context, std::vector<double>& mass) {
    context.assign(static_cast<size_t>(S * n * d_v), 0.0f);
    mass.assign(static_cast<size_t>(n * S), 0.0);
    tiled_attention(query.data(), n * d_qk, states, true, scaling, precision, 1, products, {},
                        {context.data(), n * d_v, mass.data()});
  };
  std::vector<float> got, ref_context;
  std::vector<double> mass, ref_mass;
  attend(Gemm::OneDnn, got, mass);
  attend(Gemm::Eigen, ref_context, ref_mass);
  const std::vector<double> ref(ref_context.begin(), ref_context.end());
  inject_fault("attention", got.data(), got.size());
  return verdict("attention", bf16, onednn_attention_kernel(bf16), norm_error(got.data(), ref.data(), ref.size()));
}

}  // namespace mla::cpu
