// src/math/rope.cpp — RoPE / YaRN inverse frequencies, cos/sin tables and the softmax scale,
// evaluated the way Hugging Face transformers evaluates them (docs/math.md §4, §5).
//
// Every backend takes its `inv_freq` and cos/sin tables from here, so all of them rotate by
// the same fp32 angles HF's rotary module uses.
//
// Shape legend:
//   d_r = qk_rope_head_dim (the rotary dim, HF `config.head_dim`), i = 0 .. d_r/2 - 1
//   S   = number of positions
//
// fp32 emulation: torch evaluates these formulas on float32 tensors, one rounding per
// elementwise op. Each such op is written here as `f32(a op b)` with a and b float values
// widened to double: for +, -, *, / and sqrt on two float operands the double result
// rounded once to float is the correctly rounded float result (53 >= 2*24 + 2), so this is
// bit-exact with an fp32 op and immune to FMA contraction. Transcendentals (pow, cos, sin)
// are evaluated in double and rounded once to float (correctly rounded in practice); torch's
// own fp32 pow/cos/sin are accurate to ~1 ulp, so 1-ulp differences to a torch dump are
// possible there and nowhere else.
#include "mla/rope.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "mla/error.hpp"

namespace mla {
namespace {

// Round a double to the nearest float (what storing into a float32 tensor does).
float f32(double x) { return static_cast<float>(x); }

int64_t checked_rope_dim(const AttentionConfig& cfg) {
  const int64_t dim = cfg.qk_rope_head_dim;
  if (dim <= 0 || dim % 2 != 0)
    fail(ErrorKind::Config, "qk_rope_head_dim must be a positive even number, got " + std::to_string(dim));
  if (!(cfg.rope.rope_theta > 0.0))
    fail(ErrorKind::Config, "rope_theta must be > 0, got " + std::to_string(cfg.rope.rope_theta));
  if (cfg.rope.rope_type != "default" && cfg.rope.rope_type != "yarn")
    fail(ErrorKind::Unsupported, "rope type '" + cfg.rope.rope_type + "' is not supported (only default and yarn)");
  return dim;
}

// original_max_position_embeddings, falling back to max_position_embeddings as HF does.
double yarn_original_max_positions(const AttentionConfig& cfg) {
  double orig = cfg.rope.original_max_position_embeddings;
  if (orig <= 0) orig = static_cast<double>(cfg.max_position_embeddings);
  if (orig <= 0)
    fail(ErrorKind::Config,
         "yarn rope needs original_max_position_embeddings (or max_position_embeddings) > 0");
  return orig;
}

double yarn_factor(const AttentionConfig& cfg) {
  if (!(cfg.rope.factor > 0.0))
    fail(ErrorKind::Config, "rope_scaling.factor must be > 0, got " + std::to_string(cfg.rope.factor));
  return cfg.rope.factor;
}

// HF `find_correction_dim`:
//   (dim * math.log(max_position_embeddings / (num_rotations * 2 * math.pi))) / (2 * math.log(base))
double find_correction_dim(double num_rotations, double dim, double base, double max_positions) {
  const double pi = 3.141592653589793;  // math.pi
  return (dim * std::log(max_positions / (num_rotations * 2 * pi))) / (2 * std::log(base));
}

// HF `get_mscale(scale, mscale=1)`: 1 if scale <= 1 else 0.1 * mscale * ln(scale) + 1.
double get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// pos_freqs[i] = base ** (arange(0, dim, 2).float() / dim)   (fp32 tensors; python float base)
//   exponent: fp32(2i) / dim  -> one fp32 division;  pow evaluated in fp32 (here: double, rounded)
std::vector<float> pos_freqs_fp32(const AttentionConfig& cfg) {
  const int64_t dim = checked_rope_dim(cfg);
  const float base = f32(cfg.rope.rope_theta);
  std::vector<float> pos(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = f32(static_cast<double>(2 * i) / static_cast<double>(dim));
    pos[static_cast<size_t>(i)] = f32(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  }
  return pos;
}

}  // namespace

YarnRange yarn_correction_range(const AttentionConfig& cfg) {
  const int64_t dim = checked_rope_dim(cfg);
  const double orig = yarn_original_max_positions(cfg);
  // `beta_fast = get("beta_fast") or 32`, `beta_slow = get("beta_slow") or 1`
  const double beta_fast = cfg.rope.beta_fast != 0.0 ? cfg.rope.beta_fast : 32.0;
  const double beta_slow = cfg.rope.beta_slow != 0.0 ? cfg.rope.beta_slow : 1.0;
  YarnRange r{};
  r.low_raw = find_correction_dim(beta_fast, static_cast<double>(dim), cfg.rope.rope_theta, orig);
  r.high_raw = find_correction_dim(beta_slow, static_cast<double>(dim), cfg.rope.rope_theta, orig);
  double low = r.low_raw, high = r.high_raw;
  if (cfg.rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  // max(low, 0), min(high, dim - 1) — note dim - 1, not dim/2 - 1 (HF and official agree).
  r.low = std::max(low, 0.0);
  r.high = std::min(high, static_cast<double>(dim - 1));
  return r;
}

std::vector<float> rope_inv_freq(const AttentionConfig& cfg) {
  const int64_t dim = checked_rope_dim(cfg);
  const size_t half = static_cast<size_t>(dim / 2);
  const std::vector<float> pos_freqs = pos_freqs_fp32(cfg);  // [d_r/2]
  std::vector<float> inv_freq(half);                        // [d_r/2]

  if (!cfg.rope.is_yarn()) {
    // default: inv_freq = 1.0 / (base ** (arange(0, dim, 2).float() / dim))
    for (size_t i = 0; i < half; ++i) inv_freq[i] = f32(1.0 / static_cast<double>(pos_freqs[i]));
    return inv_freq;
  }

  // yarn (`_compute_yarn_parameters`):
  //   inv_freq_extrapolation = 1.0 / pos_freqs
  //   inv_freq_interpolation = 1.0 / (factor * pos_freqs)
  //   inv_freq_extrapolation_factor = 1 - linear_ramp_factor(low, high, dim // 2)
  //   inv_freq = inv_freq_interpolation * (1 - inv_freq_extrapolation_factor)
  //            + inv_freq_extrapolation * inv_freq_extrapolation_factor
  const float factor = f32(yarn_factor(cfg));
  const YarnRange range = yarn_correction_range(cfg);
  double low = range.low, high = range.high;
  if (low == high) high += 0.001;  // linear_ramp_factor: "Prevent singularity"
  // (arange(dim, dtype=float32) - min) / (max - min): the python scalars enter the fp32 ops
  // as floats; (max - min) is a python (double) subtraction.
  const float low_f = f32(low);
  const float span_f = f32(high - low);
  for (size_t i = 0; i < half; ++i) {
    const float extrapolation = f32(1.0 / static_cast<double>(pos_freqs[i]));
    const float interpolation =
        f32(1.0 / static_cast<double>(f32(static_cast<double>(factor) * static_cast<double>(pos_freqs[i]))));
    const float linear = f32(static_cast<double>(f32(static_cast<double>(i) - static_cast<double>(low_f))) /
                             static_cast<double>(span_f));
    const float ramp = std::clamp(linear, 0.0f, 1.0f);
    const float extrapolation_factor = f32(1.0 - static_cast<double>(ramp));
    const float one_minus = f32(1.0 - static_cast<double>(extrapolation_factor));
    const float a = f32(static_cast<double>(interpolation) * static_cast<double>(one_minus));
    const float b = f32(static_cast<double>(extrapolation) * static_cast<double>(extrapolation_factor));
    inv_freq[i] = f32(static_cast<double>(a) + static_cast<double>(b));
  }
  return inv_freq;
}

std::vector<double> rope_inv_freq_double(const AttentionConfig& cfg) {
  const int64_t dim = checked_rope_dim(cfg);
  const size_t half = static_cast<size_t>(dim / 2);
  std::vector<double> inv_freq(half);
  const double base = cfg.rope.rope_theta;
  if (!cfg.rope.is_yarn()) {
    for (size_t i = 0; i < half; ++i)
      inv_freq[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));
    return inv_freq;
  }
  const double factor = yarn_factor(cfg);
  const YarnRange range = yarn_correction_range(cfg);
  double low = range.low, high = range.high;
  if (low == high) high += 0.001;
  for (size_t i = 0; i < half; ++i) {
    const double pos_freq = std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));
    const double extrapolation = 1.0 / pos_freq;
    const double interpolation = 1.0 / (factor * pos_freq);
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double w = 1.0 - ramp;  // extrapolation factor
    inv_freq[i] = interpolation * (1.0 - w) + extrapolation * w;
  }
  return inv_freq;
}

double rope_attention_factor(const AttentionConfig& cfg) {
  if (!cfg.rope.is_yarn()) return 1.0;
  if (cfg.rope.attention_factor) return *cfg.rope.attention_factor;
  const double factor = yarn_factor(cfg);
  // `if mscale and mscale_all_dim: get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)`
  if (cfg.rope.mscale != 0.0 && cfg.rope.mscale_all_dim != 0.0)
    return get_mscale(factor, cfg.rope.mscale) / get_mscale(factor, cfg.rope.mscale_all_dim);
  return get_mscale(factor, 1.0);
}

double softmax_scale(const AttentionConfig& cfg) {
  // self.scaling = self.qk_head_dim ** (-0.5)
  double scaling = std::pow(static_cast<double>(cfg.qk_head_dim()), -0.5);
  if (cfg.rope.is_yarn() && cfg.rope.mscale_all_dim != 0.0) {
    // mscale = yarn_get_mscale(factor, mscale_all_dim); self.scaling = self.scaling * mscale * mscale
    const double m = get_mscale(yarn_factor(cfg), cfg.rope.mscale_all_dim);
    scaling = scaling * m * m;
  }
  return scaling;
}

std::vector<int64_t> position_ids(int64_t offset, int64_t count) {
  std::vector<int64_t> positions(static_cast<size_t>(count));
  for (int64_t s = 0; s < count; ++s) positions[static_cast<size_t>(s)] = offset + s;
  return positions;
}

RopeTables rope_tables(const AttentionConfig& cfg, const std::vector<int64_t>& positions) {
  const std::vector<float> inv_freq = rope_inv_freq(cfg);  // [d_r/2]
  const int64_t dim = cfg.qk_rope_head_dim;
  const int64_t half = dim / 2;
  // cos = emb.cos() * attention_scaling: a python float entering an fp32 op.
  const float attention_factor = f32(rope_attention_factor(cfg));
  RopeTables t;
  t.seq_len = static_cast<int64_t>(positions.size());
  t.rope_dim = dim;
  t.cos.assign(static_cast<size_t>(t.seq_len * dim), 0.0f);
  t.sin.assign(static_cast<size_t>(t.seq_len * dim), 0.0f);
  for (int64_t s = 0; s < t.seq_len; ++s) {
    if (positions[static_cast<size_t>(s)] < 0)
      fail(ErrorKind::InvalidArgument, "rope position " + std::to_string(positions[static_cast<size_t>(s)]) +
                                           " at index " + std::to_string(s) + " is negative");
    const float position = f32(static_cast<double>(positions[static_cast<size_t>(s)]));  // position_ids.float()
    for (int64_t i = 0; i < half; ++i) {
      // freqs = inv_freq_expanded.float() @ position_ids_expanded.float(): a 1-term product, fp32.
      const float angle = f32(static_cast<double>(inv_freq[static_cast<size_t>(i)]) * static_cast<double>(position));
      const float c = f32(static_cast<double>(f32(std::cos(static_cast<double>(angle)))) *
                          static_cast<double>(attention_factor));
      const float sn = f32(static_cast<double>(f32(std::sin(static_cast<double>(angle)))) *
                           static_cast<double>(attention_factor));
      // emb = cat((freqs, freqs), dim=-1): entries i and i + d_r/2 share frequency i.
      const size_t row = static_cast<size_t>(s * dim);
      t.cos[row + static_cast<size_t>(i)] = c;
      t.cos[row + static_cast<size_t>(i + half)] = c;
      t.sin[row + static_cast<size_t>(i)] = sn;
      t.sin[row + static_cast<size_t>(i + half)] = sn;
    }
  }
  return t;
}

}  // namespace mla
