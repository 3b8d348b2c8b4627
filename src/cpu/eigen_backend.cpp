// src/cpu/eigen_backend.cpp — the "cpu" backend: one MLA attention layer (HF
// DeepseekV3Attention, eager; mla-math.md §3) with Eigen + OpenBLAS sgemm, in fp32 or in
// PyTorch-bf16 emulation (mla-math.md §7), multi-threaded, plus the H2O scores.
//
// Shape legend (config names):
//   S = sequence length, H = hidden_size, n = num_attention_heads, r_q = q_lora_rank,
//   r_kv = kv_lora_rank, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim, d_v = v_head_dim,
//   d_qk = d_n + d_r.
//
// forward() runs the stages of HF's module in order, each timed:
//   q_path        q = q_b(RMSNorm_q(q_a(x)))  or  q = q_proj(x)            [S, n*d_qk]
//   kv_path       [c | k_pe] = kv_a(x); kv = kv_b(RMSNorm_kv(c))          [S, n*(d_n+d_v)]
//   rope          q_rot of every head and k_pe rotated in place (HF order)
//   attend        per head and block of 64 queries (streaming_attention.hpp):
//                 p = softmax(mask(scaling * q k^T)), o_h = p v_h, column sums of p (double)
//                 -> attn_context [S, n*d_v], head_scores [n*S]  (attn_weights [n, S, S] if asked)
//   o_proj        out = o W_o^T                                             [S, H]
//   h2o_scores    token_scores = sum over heads of head_scores (double)     [S]
// The attention runs heads in parallel (one single-threaded sgemm per worker); the
// projections use OpenBLAS's own threads. With a causal mask, query block [r0, r0+64) only
// multiplies keys [0, r0+64): the skipped probabilities are exactly 0 in HF too
// (exp(min_float - max) underflows to 0), so skipping them changes no value. Memory is O(S)
// unless attn_weights [n, S, S] is asked for (docs/long-context.md).
#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cpu_kernels.hpp"
#include "streaming_attention.hpp"
#include "mla/attention.hpp"
#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/rope.hpp"
#include "mla_build_config.h"

namespace mla {
namespace {

using cpu::MatrixRM;
using Clock = std::chrono::steady_clock;

constexpr int64_t kMaxRopeDim = 512;                       // rope_in_place's stack buffer

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The weights as the GEMMs use them: [out, in] row-major (= W^T column-major for sgemm),
// fp32 values as loaded, or rounded to bf16 values in bf16 mode.
struct PreparedWeights {
  MatrixRM q_a_proj;            // [r_q, H]           (q_lora_rank > 0)
  std::vector<float> q_a_layernorm;  // [r_q]
  MatrixRM q_b_proj;            // [n*d_qk, r_q]
  MatrixRM q_proj;              // [n*d_qk, H]        (q_lora_rank null)
  MatrixRM kv_a_proj_with_mqa;  // [r_kv + d_r, H]
  std::vector<float> kv_a_layernorm;  // [r_kv]
  MatrixRM kv_b_proj;           // [n*(d_n+d_v), r_kv]
  MatrixRM o_proj;              // [H, n*d_v]
  std::vector<float> q_bias;    // [r_q] (q_a_proj) or [n*d_qk] (q_proj); empty = none
  std::vector<float> kv_a_bias; // [r_kv + d_r]; empty = none
  std::vector<float> o_bias;    // [H]; empty = none
};

// Checks that a weight has the shape the config implies.
void check_shape(const TensorF& t, const char* name, std::vector<int64_t> expected) {
  if (t.shape != expected) {
    fail(ErrorKind::Shape, std::string("cpu backend: weight ") + name + " has shape " +
                               shape_string(t.shape) + ", expected " + shape_string(expected));
  }
  if (static_cast<int64_t>(t.data.size()) != t.numel()) {
    fail(ErrorKind::Shape, std::string("cpu backend: weight ") + name + " holds " +
                               std::to_string(t.data.size()) + " values for shape " + shape_string(t.shape));
  }
}

void check_finite(const float* v, int64_t rows, int64_t cols, const std::string& what) {
  if (Eigen::Map<const Eigen::ArrayXf>(v, rows * cols).allFinite()) return;  // vectorised fast path
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float x = v[r * cols + c];
      if (!std::isfinite(x)) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%g", static_cast<double>(x));
        fail(ErrorKind::InvalidValue, what + "[row " + std::to_string(r) + ", col " + std::to_string(c) +
                                          "] is " + buf + " (values must be finite)");
      }
    }
  }
}

// Copies a checked weight, rounded to bf16 values in bf16 mode, and checks it is finite.
MatrixRM prepare_matrix(const TensorF& t, const char* name, int64_t rows, int64_t cols, bool bf16, int threads) {
  check_shape(t, name, {rows, cols});
  MatrixRM m(rows, cols);
  cpu::parallel_for(threads, threads, [&](int64_t slice, int) {  // copy (+ round) row slices
    const int64_t begin = rows * slice / threads, end = rows * (slice + 1) / threads;
    std::copy(t.ptr() + begin * cols, t.ptr() + end * cols, m.data() + begin * cols);
    if (bf16) cpu::round_to_bf16_inplace(m.data() + begin * cols, (end - begin) * cols);
  });
  check_finite(m.data(), rows, cols, std::string("cpu backend: weight ") + name + (bf16 ? " (as bf16)" : ""));
  return m;
}

std::vector<float> prepare_vector(const TensorF& t, const char* name, int64_t size, bool bf16) {
  check_shape(t, name, {size});
  std::vector<float> v = t.data;
  if (bf16) cpu::round_to_bf16_inplace(v.data(), size);
  check_finite(v.data(), 1, size, std::string("cpu backend: weight ") + name + (bf16 ? " (as bf16)" : ""));
  return v;
}

void check_config(const AttentionConfig& cfg) {
  auto positive = [](int64_t v, const char* key) {
    if (v <= 0) fail(ErrorKind::Config, std::string("cpu backend: config ") + key + " = " + std::to_string(v) + " must be > 0");
  };
  positive(cfg.hidden_size, "hidden_size");
  positive(cfg.num_attention_heads, "num_attention_heads");
  positive(cfg.kv_lora_rank, "kv_lora_rank");
  positive(cfg.qk_nope_head_dim, "qk_nope_head_dim");
  positive(cfg.qk_rope_head_dim, "qk_rope_head_dim");
  positive(cfg.v_head_dim, "v_head_dim");
  if (cfg.q_lora_rank < 0) fail(ErrorKind::Config, "cpu backend: config q_lora_rank must be >= 0 (0 = null)");
  if (cfg.qk_rope_head_dim % 2 != 0 || cfg.qk_rope_head_dim > kMaxRopeDim) {
    fail(ErrorKind::Unsupported, "cpu backend: qk_rope_head_dim = " + std::to_string(cfg.qk_rope_head_dim) +
                                     " (must be even and at most " + std::to_string(kMaxRopeDim) + ")");
  }
  if (cfg.num_key_value_heads != 0 && cfg.num_key_value_heads != cfg.num_attention_heads) {
    fail(ErrorKind::Unsupported, "cpu backend: num_key_value_heads = " + std::to_string(cfg.num_key_value_heads) +
                                     " differs from num_attention_heads = " + std::to_string(cfg.num_attention_heads) +
                                     " (MLA has one K/V head per query head)");
  }
}

TensorD widen(const std::string& name, std::vector<int64_t> shape, const float* src) {
  TensorD t(name, std::move(shape));
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<double>(src[i]);
  return t;
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  std::string description() const override {
    const int threads = cpu::resolve_threads(prepared_ ? threads_ : 0);
    std::string d = "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) +
                    "." + std::to_string(EIGEN_MINOR_VERSION);
#if MLA_HAVE_BLAS
    d += " + OpenBLAS sgemm (" + std::string(cpu::blas_description()) + ")";
#else
    d += ", its own GEMM kernel (built without OpenBLAS)";
#endif
    d += ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
    return d;
  }

  void prepare(const AttentionConfig& cfg, const LayerWeights& w, const ForwardOptions& opt) override {
    prepared_ = false;
    check_config(cfg);
    check_no_foreign_bias(cfg, w, "cpu backend");
    if (opt.threads < 0) fail(ErrorKind::InvalidArgument, "cpu backend: threads = " + std::to_string(opt.threads) + " (0 = all cores)");
    const bool bf16 = opt.precision == Precision::BF16;
    const int threads = cpu::resolve_threads(opt.threads);
    const int64_t H = cfg.hidden_size, n = cfg.num_attention_heads, r_q = cfg.q_lora_rank, r_kv = cfg.kv_lora_rank;
    const int64_t d_n = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim, d_v = cfg.v_head_dim, d_qk = d_n + d_r;
    PreparedWeights p;
    if (cfg.has_q_lora()) {
      p.q_a_proj = prepare_matrix(w.q_a_proj, "q_a_proj", r_q, H, bf16, threads);
      p.q_a_layernorm = prepare_vector(w.q_a_layernorm, "q_a_layernorm", r_q, bf16);
      p.q_b_proj = prepare_matrix(w.q_b_proj, "q_b_proj", n * d_qk, r_q, bf16, threads);
    } else {
      p.q_proj = prepare_matrix(w.q_proj, "q_proj", n * d_qk, H, bf16, threads);
    }
    p.kv_a_proj_with_mqa = prepare_matrix(w.kv_a_proj_with_mqa, "kv_a_proj_with_mqa", r_kv + d_r, H, bf16, threads);
    p.kv_a_layernorm = prepare_vector(w.kv_a_layernorm, "kv_a_layernorm", r_kv, bf16);
    p.kv_b_proj = prepare_matrix(w.kv_b_proj, "kv_b_proj", n * (d_n + d_v), r_kv, bf16, threads);
    p.o_proj = prepare_matrix(w.o_proj, "o_proj", H, n * d_v, bf16, threads);
    if (cfg.attention_bias) {
      if (cfg.has_q_lora()) p.q_bias = prepare_vector(w.q_a_proj_bias, "q_a_proj_bias", r_q, bf16);
      p.kv_a_bias = prepare_vector(w.kv_a_proj_with_mqa_bias, "kv_a_proj_with_mqa_bias", r_kv + d_r, bf16);
      p.o_bias = prepare_vector(w.o_proj_bias, "o_proj_bias", H, bf16);
    }
    cfg_ = cfg;
    weights_ = std::move(p);
    precision_ = opt.precision;
    threads_ = threads;
    scaling_ = static_cast<float>(softmax_scale(cfg));  // a Python float, used as fp32 by torch
    prepared_ = true;
  }

  ForwardResult forward(const TensorF& hidden, const ForwardOptions& opt) override {
    if (!prepared_) fail(ErrorKind::InvalidArgument, "cpu backend: forward() called before prepare()");
    if (opt.precision != precision_) {
      fail(ErrorKind::InvalidArgument, std::string("cpu backend: forward precision ") + precision_name(opt.precision) +
                                           " differs from the precision the weights were prepared in (" +
                                           precision_name(precision_) + "); call prepare() again");
    }
    if (opt.threads < 0) fail(ErrorKind::InvalidArgument, "cpu backend: threads = " + std::to_string(opt.threads) + " (0 = all cores)");
    if (opt.position_offset < 0) {
      fail(ErrorKind::InvalidArgument, "cpu backend: position_offset = " + std::to_string(opt.position_offset) + " must be >= 0");
    }
    if (!(opt.latent_norm_eps > 0.0) || !std::isfinite(opt.latent_norm_eps)) {
      fail(ErrorKind::InvalidArgument, "cpu backend: latent norm eps must be finite and > 0, got " +
                                           std::to_string(opt.latent_norm_eps));
    }
    const int threads = opt.threads > 0 ? opt.threads : threads_;
    const bool bf16 = precision_ == Precision::BF16;
    const bool causal = opt.mask == Mask::Causal;
    const AttentionConfig& cfg = cfg_;
    const PreparedWeights& w = weights_;
    const int64_t H = cfg.hidden_size, n = cfg.num_attention_heads, r_q = cfg.q_lora_rank, r_kv = cfg.kv_lora_rank;
    const int64_t d_n = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim, d_v = cfg.v_head_dim, d_qk = d_n + d_r;

    // ---- input: hidden [S, H], finite; bf16 mode rounds it first (HF's input is bf16) ----
    if (hidden.shape.size() != 2 || hidden.shape[1] != H || hidden.shape[0] < 0 ||
        static_cast<int64_t>(hidden.data.size()) != hidden.numel()) {
      fail(ErrorKind::Shape, "cpu backend: hidden states have shape " + shape_string(hidden.shape) + " (" +
                                 std::to_string(hidden.data.size()) + " values), expected [S, " + std::to_string(H) + "]");
    }
    if (hidden.shape[0] == 0) fail(ErrorKind::InvalidArgument, "cpu backend: hidden states have 0 tokens (S = 0); need at least one");
    const int64_t S = hidden.shape[0];
    check_finite(hidden.ptr(), S, H, "hidden states");
    MatrixRM x = Eigen::Map<const MatrixRM>(hidden.ptr(), S, H);  // [S, H]
    if (bf16) {
      cpu::round_to_bf16_inplace(x.data(), x.size());
      check_finite(x.data(), S, H, "hidden states rounded to bf16");
    }

    ForwardResult result;
    result.computed_in_double = false;
    const float eps = static_cast<float>(opt.latent_norm_eps);

    // ---- q path (§3.1 / §3.2) ----
    auto t0 = Clock::now();
    MatrixRM q;  // [S, n*d_qk]  head-major: feature h*d_qk + (nope d_n | rope d_r)
    if (cfg.has_q_lora()) {
      MatrixRM q_a;  // [S, r_q]
      cpu::linear(x, w.q_a_proj, w.q_bias.empty() ? nullptr : w.q_bias.data(), bf16, threads, q_a);
      MatrixRM q_normed(S, r_q);  // [S, r_q]
      cpu::rms_norm(q_a.data(), r_q, S, r_q, w.q_a_layernorm.data(), eps, bf16, q_normed.data(), r_q);
      cpu::linear(q_normed, w.q_b_proj, nullptr, bf16, threads, q);
    } else {
      cpu::linear(x, w.q_proj, w.q_bias.empty() ? nullptr : w.q_bias.data(), bf16, threads, q);
    }
    result.stage_seconds.emplace_back("q_path", seconds_since(t0));

    // ---- kv path (§3.3) ----
    t0 = Clock::now();
    MatrixRM compressed_kv;  // [S, r_kv + d_r]  latent c (r_kv) | k_pe (d_r)
    cpu::linear(x, w.kv_a_proj_with_mqa, w.kv_a_bias.empty() ? nullptr : w.kv_a_bias.data(), bf16, threads,
                compressed_kv);
    x = MatrixRM();  // [S, H] no longer needed
    MatrixRM kv_normed(S, r_kv);  // [S, r_kv]
    cpu::rms_norm(compressed_kv.data(), r_kv + d_r, S, r_kv, w.kv_a_layernorm.data(), eps, bf16, kv_normed.data(), r_kv);
    MatrixRM kv;  // [S, n*(d_n+d_v)]  head-major: feature h*(d_n+d_v) + (k_nope d_n | value d_v)
    cpu::linear(kv_normed, w.kv_b_proj, nullptr, bf16, threads, kv);
    result.stage_seconds.emplace_back("kv_path", seconds_since(t0));

    // ---- rope (§3.4, §4, §6): cos/sin [S, d_r] fp32 from the shared tables (bf16 once) ----
    t0 = Clock::now();
    std::vector<int64_t> positions(static_cast<size_t>(S));
    for (int64_t s = 0; s < S; ++s) positions[static_cast<size_t>(s)] = opt.position_offset + s;
    RopeTables tables = rope_tables(cfg, positions);
    if (bf16) {
      cpu::round_to_bf16_inplace(tables.cos.data(), static_cast<int64_t>(tables.cos.size()));
      cpu::round_to_bf16_inplace(tables.sin.data(), static_cast<int64_t>(tables.sin.size()));
    }
    MatrixRM k_rot(S, d_r);  // [S, d_r]  one roped key per token, shared by all heads
    cpu::parallel_for(S, threads, [&](int64_t s, int) {
      const float* cos = tables.cos.data() + s * d_r;
      const float* sin = tables.sin.data() + s * d_r;
      for (int64_t h = 0; h < n; ++h) {
        cpu::rope_in_place(q.data() + s * n * d_qk + h * d_qk + d_n, cos, sin, d_r, cfg.rope_interleave, bf16);
      }
      std::copy_n(compressed_kv.data() + s * (r_kv + d_r) + r_kv, d_r, k_rot.data() + s * d_r);
      cpu::rope_in_place(k_rot.data() + s * d_r, cos, sin, d_r, cfg.rope_interleave, bf16);
    });
    result.stage_seconds.emplace_back("rope", seconds_since(t0));

    // ---- per-head attention (§3.6), streamed (docs/long-context.md) ----
    // No [S, S] buffer: per head and block of 64 queries, logits -> softmax -> P.V and the H2O
    // mass; keys/values stored in the run's precision. attn_weights only when asked (dumps).
    t0 = Clock::now();
    MatrixRM attn;  // [S, n*d_v]  feature h*d_v + d (HF's transpose + reshape)
    {
      cpu::KeyValueStates states(S, n, d_n, d_r, d_v, bf16);
      states.set_kv_rows(0, S, kv.data(), n * (d_n + d_v));
      states.set_k_pe_rows(0, S, k_rot.data(), d_r);
      if (!opt.keep_states) kv = MatrixRM();  // [S, n*(d_n+d_v)] fp32 no longer needed
      attn.resize(S, n * d_v);                // allocated after kv is freed: a lower peak
      result.head_scores.assign(static_cast<size_t>(n * S), 0.0);
      if (opt.keep_attn_weights) result.attn_weights = TensorD("attn_weights", {n, S, S});
      cpu::BlockProgress progress;
      if (opt.progress) progress = [&](int64_t done, int64_t total) { opt.progress("attention blocks", done, total); };
      cpu::streaming_attention(q.data(), n * d_qk, states, causal, scaling_, bf16, threads, progress,
                               {attn.data(), n * d_v, result.head_scores.data(),
                                opt.keep_attn_weights ? result.attn_weights.ptr() : nullptr});
    }
    if (!opt.keep_states) q = MatrixRM();  // [S, n*d_qk] no longer needed
    // logits, softmax, P.V and the mass are fused per block: one stage
    result.stage_seconds.emplace_back("attend", seconds_since(t0));

    // ---- o_proj (§3.6 step 7) ----
    t0 = Clock::now();
    MatrixRM out;  // [S, H]
    cpu::linear(attn, w.o_proj, w.o_bias.empty() ? nullptr : w.o_bias.data(), bf16, threads, out);
    result.stage_seconds.emplace_back("o_proj", seconds_since(t0));

    // ---- H2O token scores: sum over heads of the per-head column sums (double) ----
    t0 = Clock::now();
    result.token_scores.assign(static_cast<size_t>(S), 0.0);
    for (int64_t h = 0; h < n; ++h) {
      for (int64_t t = 0; t < S; ++t) result.token_scores[static_cast<size_t>(t)] += result.head_scores[static_cast<size_t>(h * S + t)];
    }
    result.stage_seconds.emplace_back("h2o_scores", seconds_since(t0));

    check_finite(out.data(), S, H, std::string("cpu backend: attn_output (overflow in ") + precision_name(precision_) + " arithmetic)");
    result.attn_output = widen("attn_output", {S, H}, out.data());
    if (opt.keep_states) {
      result.query_states = TensorD("query_states", {n, S, d_qk});
      result.key_states = TensorD("key_states", {n, S, d_qk});
      result.value_states = TensorD("value_states", {n, S, d_v});
      for (int64_t h = 0; h < n; ++h) {
        for (int64_t s = 0; s < S; ++s) {
          double* qs = result.query_states.ptr() + (h * S + s) * d_qk;
          double* ks = result.key_states.ptr() + (h * S + s) * d_qk;
          double* vs = result.value_states.ptr() + (h * S + s) * d_v;
          const float* q_row = q.data() + s * n * d_qk + h * d_qk;
          const float* kv_row = kv.data() + s * n * (d_n + d_v) + h * (d_n + d_v);
          for (int64_t d = 0; d < d_qk; ++d) qs[d] = q_row[d];
          for (int64_t d = 0; d < d_n; ++d) ks[d] = kv_row[d];
          for (int64_t d = 0; d < d_r; ++d) ks[d_n + d] = k_rot(s, d);
          for (int64_t d = 0; d < d_v; ++d) vs[d] = kv_row[d_n + d];
        }
      }
    }
    return result;
  }

 private:
  bool prepared_ = false;
  AttentionConfig cfg_;
  PreparedWeights weights_;
  Precision precision_ = Precision::FP32;
  int threads_ = 0;
  float scaling_ = 1.0f;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace mla
