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
//   scores+softmax  per head: p = softmax(mask(scaling * q k^T))           [n, S, S]
//   pv            per head: o_h = p v_h                                      [S, n*d_v]
//   h2o_scores    per head: column sums of p (double)                       [n*S], [S]
//   o_proj        out = o W_o^T                                             [S, H]
// The three per-head stages run heads in parallel (one single-threaded sgemm per worker);
// the projections use OpenBLAS's own threads. With a causal mask, query block
// [r0, r0+64) only multiplies keys [0, r0+64): the skipped probabilities are exactly 0 in
// HF too (exp(min_float - max) underflows to 0), so skipping them changes no value.
// Heads are processed in chunks whose probability buffers fit in kProbsBudgetBytes, so a
// long sequence never needs [n, S, S] floats at once (unless keep_attn_weights asks).
#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cpu_kernels.hpp"
#include "gemm_engine.hpp"
#include "mla/attention.hpp"
#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/rope.hpp"
#include "mla_build_config.h"

namespace mla {
namespace {

using cpu::MatrixRM;
using Clock = std::chrono::steady_clock;

constexpr int64_t kProbsBudgetBytes = int64_t{256} << 20;  // probability buffers per chunk
constexpr int64_t kMaxRopeDim = 512;                       // rope_in_place's stack buffer

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The weights as the GEMMs use them: each projection prepared once for the GEMM engine
// (gemm_engine.hpp: Eigen keeps [out, in] fp32 values, oneDNN its own layout; bf16 values in
// bf16 mode; the engine holds the projection's bias), the norm weights as fp32 vectors.
struct PreparedWeights {
  std::unique_ptr<cpu::PreparedLinear> q_a_proj;            // [r_q, H]  (+ bias [r_q])  (q_lora_rank > 0)
  std::vector<float> q_a_layernorm;                         // [r_q]
  std::unique_ptr<cpu::PreparedLinear> q_b_proj;            // [n*d_qk, r_q]
  std::unique_ptr<cpu::PreparedLinear> q_proj;              // [n*d_qk, H]         (q_lora_rank null)
  std::unique_ptr<cpu::PreparedLinear> kv_a_proj_with_mqa;  // [r_kv + d_r, H] (+ bias [r_kv + d_r])
  std::vector<float> kv_a_layernorm;                        // [r_kv]
  std::unique_ptr<cpu::PreparedLinear> kv_b_proj;           // [n*(d_n+d_v), r_kv]
  std::unique_ptr<cpu::PreparedLinear> o_proj;              // [H, n*d_v]  (+ bias [H])
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

// A checked projection weight [rows, cols] (+ bias [rows] when attention_bias), prepared once
// for the GEMM engine (bf16 rounding in bf16 mode, finite check after it).
std::unique_ptr<cpu::PreparedLinear> prepare_linear(cpu::GemmEngine& engine, const TensorF& t, const char* name,
                                                    int64_t rows, int64_t cols, const TensorF* bias,
                                                    const char* bias_name, bool bf16, int threads) {
  check_shape(t, name, {rows, cols});
  if (bias != nullptr) check_shape(*bias, bias_name, {rows});
  return engine.prepare({name, t.ptr(), rows, cols, bias != nullptr ? bias->ptr() : nullptr}, bf16, threads,
                        "cpu backend");
}

std::vector<float> prepare_vector(const TensorF& t, const char* name, int64_t size, bool bf16) {
  check_shape(t, name, {size});
  std::vector<float> v = t.data;
  if (bf16) cpu::round_to_bf16_inplace(v.data(), size);
  cpu::check_finite(v.data(), 1, size, std::string("cpu backend: weight ") + name + (bf16 ? " (as bf16)" : ""));
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
    std::string d;
    if (prepared_ && gemm_->kind() == Gemm::OneDnn) {
      d = "projections: " + gemm_->name() + ", " + weights_.kv_b_proj->kernel() + "; per-head products: ";
    }
    d += "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
         std::to_string(EIGEN_MINOR_VERSION);
#if MLA_HAVE_BLAS
    d += " + OpenBLAS sgemm (" + std::string(cpu::blas_description()) + ")";
#else
    d += ", its own GEMM kernel (built without OpenBLAS)";
#endif
    d += ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
    return d;
  }

  GemmInfo gemm_info() const override {
    if (!prepared_) return {};
    return {gemm_name(gemm_requested_), gemm_->name(), weights_.kv_b_proj->kernel(), gemm_reason_};
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
    std::string reason;
    std::unique_ptr<cpu::GemmEngine> engine = cpu::make_gemm_engine(opt.gemm, bf16, reason);
    const bool bias = cfg.attention_bias;
    PreparedWeights p;
    if (cfg.has_q_lora()) {
      p.q_a_proj = prepare_linear(*engine, w.q_a_proj, "q_a_proj", r_q, H, bias ? &w.q_a_proj_bias : nullptr,
                                  "q_a_proj_bias", bf16, threads);
      p.q_a_layernorm = prepare_vector(w.q_a_layernorm, "q_a_layernorm", r_q, bf16);
      p.q_b_proj = prepare_linear(*engine, w.q_b_proj, "q_b_proj", n * d_qk, r_q, nullptr, "", bf16, threads);
    } else {
      p.q_proj = prepare_linear(*engine, w.q_proj, "q_proj", n * d_qk, H, nullptr, "", bf16, threads);
    }
    p.kv_a_proj_with_mqa = prepare_linear(*engine, w.kv_a_proj_with_mqa, "kv_a_proj_with_mqa", r_kv + d_r, H,
                                          bias ? &w.kv_a_proj_with_mqa_bias : nullptr, "kv_a_proj_with_mqa_bias",
                                          bf16, threads);
    p.kv_a_layernorm = prepare_vector(w.kv_a_layernorm, "kv_a_layernorm", r_kv, bf16);
    p.kv_b_proj = prepare_linear(*engine, w.kv_b_proj, "kv_b_proj", n * (d_n + d_v), r_kv, nullptr, "", bf16, threads);
    p.o_proj = prepare_linear(*engine, w.o_proj, "o_proj", H, n * d_v, bias ? &w.o_proj_bias : nullptr, "o_proj_bias",
                              bf16, threads);
    gemm_ = std::move(engine);
    gemm_requested_ = opt.gemm;
    gemm_reason_ = reason;
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
    cpu::check_finite(hidden.ptr(), S, H, "hidden states");
    MatrixRM x = Eigen::Map<const MatrixRM>(hidden.ptr(), S, H);  // [S, H]
    if (bf16) {
      cpu::round_to_bf16_inplace(x.data(), x.size());
      cpu::check_finite(x.data(), S, H, "hidden states rounded to bf16");
    }

    ForwardResult result;
    result.computed_in_double = false;
    const float eps = static_cast<float>(opt.latent_norm_eps);

    // ---- q path (§3.1 / §3.2) ----
    auto t0 = Clock::now();
    MatrixRM q;  // [S, n*d_qk]  head-major: feature h*d_qk + (nope d_n | rope d_r)
    if (cfg.has_q_lora()) {
      MatrixRM q_a;  // [S, r_q]
      w.q_a_proj->run(x, threads, q_a);
      MatrixRM q_normed(S, r_q);  // [S, r_q]
      cpu::rms_norm(q_a.data(), r_q, S, r_q, w.q_a_layernorm.data(), eps, bf16, q_normed.data(), r_q);
      w.q_b_proj->run(q_normed, threads, q);
    } else {
      w.q_proj->run(x, threads, q);
    }
    result.stage_seconds.emplace_back("q_path", seconds_since(t0));

    // ---- kv path (§3.3) ----
    t0 = Clock::now();
    MatrixRM compressed_kv;  // [S, r_kv + d_r]  latent c (r_kv) | k_pe (d_r)
    w.kv_a_proj_with_mqa->run(x, threads, compressed_kv);
    MatrixRM kv_normed(S, r_kv);  // [S, r_kv]
    cpu::rms_norm(compressed_kv.data(), r_kv + d_r, S, r_kv, w.kv_a_layernorm.data(), eps, bf16, kv_normed.data(), r_kv);
    MatrixRM kv;  // [S, n*(d_n+d_v)]  head-major: feature h*(d_n+d_v) + (k_nope d_n | value d_v)
    w.kv_b_proj->run(kv_normed, threads, kv);
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

    // ---- per-head attention (§3.6), in chunks of heads ----
    MatrixRM attn(S, n * d_v);  // [S, n*d_v]  feature h*d_v + d (HF's transpose + reshape)
    result.head_scores.assign(static_cast<size_t>(n * S), 0.0);
    if (opt.keep_attn_weights) result.attn_weights = TensorD("attn_weights", {n, S, S});
    const int64_t probs_bytes = S * S * static_cast<int64_t>(sizeof(float));
    const int64_t chunk_heads = std::clamp<int64_t>(kProbsBudgetBytes / probs_bytes, 1, n);
    std::vector<float> probs(static_cast<size_t>(chunk_heads * S * S));  // [chunk, S, S]
    // key of head h = [k_nope_h | k_rot], built per worker: [S, d_qk] each
    std::vector<MatrixRM> key_buffers(static_cast<size_t>(threads), MatrixRM(S, d_qk));
    auto head_views = [&](int64_t h, int worker) {
      MatrixRM& key = key_buffers[static_cast<size_t>(worker)];
      for (int64_t s = 0; s < S; ++s) {
        std::copy_n(kv.data() + s * n * (d_n + d_v) + h * (d_n + d_v), d_n, key.data() + s * d_qk);
        std::copy_n(k_rot.data() + s * d_r, d_r, key.data() + s * d_qk + d_n);
      }
      return cpu::HeadViews{q.data() + h * d_qk, n * d_qk, key.data(), d_qk,
                            kv.data() + h * (d_n + d_v) + d_n, n * (d_n + d_v)};
    };
    double seconds_scores = 0.0, seconds_pv = 0.0, seconds_h2o = 0.0;
    {
      cpu::BlasThreads one_blas_thread_per_worker(1);
      for (int64_t first = 0; first < n; first += chunk_heads) {
        const int64_t heads = std::min(chunk_heads, n - first);
        t0 = Clock::now();
        cpu::parallel_for(heads, threads, [&](int64_t i, int worker) {
          const cpu::HeadViews views = head_views(first + i, worker);
          cpu::head_scores_softmax(views, S, d_qk, causal, scaling_, bf16, probs.data() + i * S * S);
        });
        seconds_scores += seconds_since(t0);
        t0 = Clock::now();
        cpu::parallel_for(heads, threads, [&](int64_t i, int) {
          const int64_t h = first + i;
          const cpu::HeadViews views{nullptr, 0, nullptr, 0, kv.data() + h * (d_n + d_v) + d_n, n * (d_n + d_v)};
          cpu::head_probs_value(views, probs.data() + i * S * S, S, d_v, causal, bf16, attn.data() + h * d_v, n * d_v);
        });
        seconds_pv += seconds_since(t0);
        t0 = Clock::now();
        cpu::parallel_for(heads, threads, [&](int64_t i, int) {
          const int64_t h = first + i;
          cpu::head_column_sums(probs.data() + i * S * S, S, causal, result.head_scores.data() + h * S);
        });
        seconds_h2o += seconds_since(t0);
        if (opt.keep_attn_weights) {
          const float* src = probs.data();
          double* dst = result.attn_weights.ptr() + first * S * S;
          for (int64_t i = 0; i < heads * S * S; ++i) dst[i] = static_cast<double>(src[i]);
        }
      }
    }
    result.stage_seconds.emplace_back("scores+softmax", seconds_scores);
    result.stage_seconds.emplace_back("pv", seconds_pv);

    // ---- o_proj (§3.6 step 7) ----
    t0 = Clock::now();
    MatrixRM out;  // [S, H]
    w.o_proj->run(attn, threads, out);
    result.stage_seconds.emplace_back("o_proj", seconds_since(t0));

    // ---- H2O token scores: sum over heads of the per-head column sums (double) ----
    t0 = Clock::now();
    result.token_scores.assign(static_cast<size_t>(S), 0.0);
    for (int64_t h = 0; h < n; ++h) {
      for (int64_t t = 0; t < S; ++t) result.token_scores[static_cast<size_t>(t)] += result.head_scores[static_cast<size_t>(h * S + t)];
    }
    result.stage_seconds.emplace_back("h2o_scores", seconds_h2o + seconds_since(t0));

    cpu::check_finite(out.data(), S, H, std::string("cpu backend: attn_output (overflow in ") + precision_name(precision_) + " arithmetic)");
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
  std::unique_ptr<cpu::GemmEngine> gemm_;
  Gemm gemm_requested_ = Gemm::Auto;
  std::string gemm_reason_;
  Precision precision_ = Precision::FP32;
  int threads_ = 0;
  float scaling_ = 1.0f;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace mla
