// src/report/dump.cpp — --dump-tensors: one safetensors file with the layer's tensors in
// HF's layout (batch dimension dropped), so any other implementation can be compared
// tensor by tensor with `mla-h2o compare`. See write_tensor_dump in mla/report.hpp.
//
// Shape legend: S = tokens, H = hidden_size, n = heads, d_n + d_r = qk_head_dim, d_v = v_head_dim.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "mla/error.hpp"
#include "mla/report.hpp"
#include "mla/safetensors.hpp"

namespace mla {
namespace {

std::vector<uint64_t> to_u64(const std::vector<int64_t>& shape) {
  return std::vector<uint64_t>(shape.begin(), shape.end());
}

}  // namespace

std::vector<std::string> write_tensor_dump(const std::string& path, const TensorF& hidden,
                                           const ForwardResult& result, int64_t n_heads,
                                           const std::map<std::string, std::string>& metadata) {
  // Payloads live here until the file is written (TensorToWrite holds spans).
  std::vector<std::vector<std::byte>> payloads;
  std::vector<TensorToWrite> tensors;
  payloads.reserve(8);
  // F32 only when every value is exactly a float (never a silent rounding), else F64.
  auto add = [&](const std::string& name, const std::vector<int64_t>& shape, std::span<const double> values,
                 bool want_f64) {
    if (static_cast<int64_t>(values.size()) != Tensor<double>::count(shape))
      fail(ErrorKind::Shape, "tensor dump: " + name + " has " + std::to_string(values.size()) +
                                 " values for shape " + shape_string(shape));
    std::vector<float> narrow(values.begin(), values.end());  // [numel]
    bool exact = !want_f64;
    for (size_t i = 0; exact && i < values.size(); ++i)
      exact = static_cast<double>(narrow[i]) == values[i] || (std::isnan(values[i]) && std::isnan(narrow[i]));
    payloads.push_back(exact ? encode_f32(narrow) : encode_f64(values));
    tensors.push_back(TensorToWrite{name, exact ? DType::F32 : DType::F64, to_u64(shape), payloads.back()});
  };
  const bool f64 = result.computed_in_double;

  const std::vector<double> hidden_d(hidden.data.begin(), hidden.data.end());  // [S, H] exact widening
  add("hidden_states", hidden.shape, hidden_d, f64);
  add("attn_output", result.attn_output.shape, result.attn_output.data, f64);
  if (!result.attn_weights.empty()) add("attn_weights", result.attn_weights.shape, result.attn_weights.data, f64);
  if (!result.query_states.empty()) add("query_states", result.query_states.shape, result.query_states.data, f64);
  if (!result.key_states.empty()) add("key_states", result.key_states.shape, result.key_states.data, f64);
  if (!result.value_states.empty()) add("value_states", result.value_states.shape, result.value_states.data, f64);
  if (!result.latent_cache.empty()) add("latent_cache", result.latent_cache.shape, result.latent_cache.data, f64);
  // The scores are sums accumulated in double by every backend: always F64, so `select` on
  // the dump reproduces run's decision bit for bit.
  const int64_t seq_len = static_cast<int64_t>(result.token_scores.size());  // S
  add("token_scores", {seq_len}, result.token_scores, true);
  if (!result.head_scores.empty() && n_heads > 0) add("head_scores", {n_heads, seq_len}, result.head_scores, true);

  std::map<std::string, std::string> meta = metadata;
  meta["dtype"] = f64 ? "F64 (reference backend: exact double results)"
                      : "F32 for fp32/bf16 results (exact), F64 for the double-accumulated scores";
  meta["layout"] = "HF DeepseekV3Attention with the batch dimension dropped";
  write_safetensors(path, tensors, meta);
  std::vector<std::string> names;
  for (const auto& t : tensors) names.push_back(t.name);
  return names;
}

}  // namespace mla
