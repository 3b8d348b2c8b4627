// src/checkpoint/validate.cpp — the validator of mla/validate.hpp. Messages name the config key,
// tensor, row and column involved, never the backend that called.
#include "mla/validate.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <cstdio>
#include <string>

#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/layer_tensors.hpp"

namespace mla {
namespace {

std::string value_text(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The first value of v[0, count) that is not finite (or, in bf16 mode, rounds to a
// non-finite bf16), or -1; `what` is its text, `rounding` says what bf16 makes of it.
int64_t first_bad_value(const float* v, int64_t count, Precision p, std::string& what, std::string& rounding) {
  // Fast path (vectorised, no branch): |x| <= the largest value that stays finite, compared on
  // the bits of |x| (NaN's bits are above every limit).
  const uint32_t limit = p == Precision::BF16 ? uint32_t{0x7F7F7FFF}  // rounds to bf16 max
                                              : std::bit_cast<uint32_t>(std::numeric_limits<float>::max());
  // (Signed 32-bit compares of non-negative values: SSE2 has them, unsigned ones need SSE4.1.)
  uint32_t any_above = 0;
  for (int64_t i = 0; i < count; ++i)
    any_above |= static_cast<int32_t>(std::bit_cast<uint32_t>(v[i]) & 0x7FFFFFFFu) > static_cast<int32_t>(limit);
  if (any_above == 0) return -1;
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(v[i])) {
      what = value_text(v[i]);
      return i;
    }
    if (p == Precision::BF16 && !std::isfinite(round_to_bf16(v[i]))) {
      what = value_text(v[i]);
      rounding = ", which rounds to " + value_text(round_to_bf16(v[i])) + " in bf16";
      return i;
    }
  }
  return -1;
}

void expect_positive(const char* key, int64_t v) {
  if (v <= 0) fail(ErrorKind::Config, std::string("config key ") + key + " must be > 0, got " + std::to_string(v));
}

}  // namespace

void validate_config(const AttentionConfig& cfg) {
  expect_positive("hidden_size", cfg.hidden_size);
  expect_positive("num_attention_heads", cfg.num_attention_heads);
  expect_positive("kv_lora_rank", cfg.kv_lora_rank);
  expect_positive("qk_nope_head_dim", cfg.qk_nope_head_dim);
  expect_positive("qk_rope_head_dim", cfg.qk_rope_head_dim);
  expect_positive("v_head_dim", cfg.v_head_dim);
  if (cfg.qk_rope_head_dim % 2 != 0)
    fail(ErrorKind::Config, "config key qk_rope_head_dim must be even, got " + std::to_string(cfg.qk_rope_head_dim));
  if (cfg.q_lora_rank < 0)
    fail(ErrorKind::Config, "config key q_lora_rank must be >= 0 (0 = null), got " + std::to_string(cfg.q_lora_rank));
  if (cfg.num_key_value_heads != 0 && cfg.num_key_value_heads != cfg.num_attention_heads)
    fail(ErrorKind::Config, "config key num_key_value_heads = " + std::to_string(cfg.num_key_value_heads) +
                                " differs from num_attention_heads = " + std::to_string(cfg.num_attention_heads) +
                                " (MLA has one K/V head per query head)");
}

void validate_options(const ForwardOptions& opt) {
  if (!std::isfinite(opt.latent_norm_eps) || !(opt.latent_norm_eps > 0.0))
    fail(ErrorKind::InvalidArgument, "latent norm eps must be finite and > 0, got " + value_text(opt.latent_norm_eps));
  if (opt.position_offset < 0)
    fail(ErrorKind::InvalidArgument, "position offset must be >= 0, got " + std::to_string(opt.position_offset));
  if (opt.threads < 0)
    fail(ErrorKind::InvalidArgument, "threads must be >= 0 (0 = all cores), got " + std::to_string(opt.threads));
}

void validate_weights(const AttentionConfig& cfg, const LayerWeights& w, Precision p) {
  for (const LayerTensorSpec& t : layer_tensor_table()) {
    const TensorF& tensor = w.*(t.member);
    const std::string name = std::string("tensor ") + t.name;
    if (!t.present(cfg)) {
      if (tensor.empty()) continue;
      if (t.member == &LayerWeights::q_a_proj_bias && !cfg.has_q_lora())
        fail(ErrorKind::Shape, "a q bias '" + tensor.name + "' " + shape_string(tensor.shape) +
                                   " was given with q_lora_rank null, but DeepseekV3Attention's q_proj has no bias "
                                   "(only q_a_proj, kv_a_proj_with_mqa and o_proj take attention_bias)");
      const std::string why = t.presence == Presence::Bias || t.presence == Presence::QLoraBias
                                  ? "attention_bias is false"
                                  : t.presence == Presence::NoQLora ? "q_lora_rank is set" : "q_lora_rank is null";
      fail(ErrorKind::Shape, name + " " + shape_string(tensor.shape) + " was given, but DeepseekV3Attention has no such "
                                 "tensor when " + why);
    }
    const std::vector<int64_t> expected = t.shape(cfg);
    if (tensor.shape != expected || tensor.empty())
      fail(ErrorKind::Shape, name + " has shape " + shape_string(tensor.shape) + (tensor.empty() ? " (no values)" : "") +
                                 ", expected " + shape_string(expected) + " = " + t.shape_names + " from the config");
    if (static_cast<int64_t>(tensor.data.size()) != tensor.numel())
      fail(ErrorKind::Shape, name + " holds " + std::to_string(tensor.data.size()) + " values but its shape " +
                                 shape_string(tensor.shape) + " needs " + std::to_string(tensor.numel()));
    std::string what, rounding;
    const int64_t i = first_bad_value(tensor.ptr(), tensor.numel(), p, what, rounding);
    if (i < 0) continue;
    const std::string at = expected.size() == 2 ? std::to_string(i / expected[1]) + ", " + std::to_string(i % expected[1])
                                                : std::to_string(i);
    fail(ErrorKind::InvalidValue, name + " holds " + what + " at [" + at + "]" + rounding + " (weights must be finite)");
  }
}

void validate_hidden(const AttentionConfig& cfg, const TensorF& hidden, Precision p) {
  const int64_t H = cfg.hidden_size;
  const std::string expected = ", expected [S, " + std::to_string(H) + "] (hidden_size " + std::to_string(H) + ")";
  if (hidden.shape.size() != 2) fail(ErrorKind::Shape, "hidden states have shape " + shape_string(hidden.shape) + expected);
  if (hidden.shape[0] == 0) fail(ErrorKind::InvalidArgument, "hidden states have 0 tokens (S = 0); need at least one");
  if (hidden.shape[0] < 0 || hidden.shape[1] != H)
    fail(ErrorKind::Shape, "hidden states have shape " + shape_string(hidden.shape) + expected);
  if (static_cast<int64_t>(hidden.data.size()) != hidden.numel())
    fail(ErrorKind::Shape, "hidden states hold " + std::to_string(hidden.data.size()) + " values, shape " +
                               shape_string(hidden.shape) + " needs " + std::to_string(hidden.numel()));
  std::string what, rounding;
  const int64_t i = first_bad_value(hidden.ptr(), hidden.numel(), p, what, rounding);
  if (i >= 0)
    fail(ErrorKind::InvalidValue, "hidden states contain " + what + " at row " + std::to_string(i / H) + ", column " +
                                      std::to_string(i % H) + rounding);
}

void validate_layer(const AttentionConfig& cfg, const LayerWeights& w, const ForwardOptions& opt) {
  validate_config(cfg);
  validate_options(opt);
  validate_weights(cfg, w, opt.precision);
}

void validate_input(const AttentionConfig& cfg, const TensorF& hidden, const ForwardOptions& opt) {
  validate_options(opt);
  validate_hidden(cfg, hidden, opt.precision);
}

void check_prepared(bool prepared, Precision prepared_in, const ForwardOptions& opt) {
  if (!prepared) fail(ErrorKind::InvalidArgument, "forward() called before prepare()");
  if (opt.precision != prepared_in)
    fail(ErrorKind::InvalidArgument, std::string("forward precision ") + precision_name(opt.precision) +
                                         " differs from the precision the weights were prepared in (" +
                                         precision_name(prepared_in) + "); call prepare() again");
}

void check_attn_output_finite(const TensorD& attn_output, Precision p) {
  const int64_t H = attn_output.shape.size() == 2 ? attn_output.dim(1) : 1;
  for (int64_t i = 0; i < attn_output.numel(); ++i) {
    const double v = attn_output.data[static_cast<size_t>(i)];
    if (!std::isfinite(v))
      fail(ErrorKind::InvalidValue, "attn_output is " + value_text(v) + " at row " + std::to_string(i / H) +
                                        ", column " + std::to_string(i % H) + " (overflow in " + precision_name(p) +
                                        " arithmetic)");
  }
}

}  // namespace mla
