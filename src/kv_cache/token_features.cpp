// src/kv_cache/token_features.cpp — the per-token quantities some policies read (knorm, keydiff,
// expected-attention, value-aware, cur, leverage, lagkv; mla/policy.hpp TokenFeatures, docs/decode.md §2), computed
// once per layer from the latent cache and the layer's kv_b_proj and o_proj, and the
// pre-RoPE query statistics expected-attention needs. The rows are processed in blocks so no
// [T, n*(d_n+d_v)] tensor is held.
//
// Every sum has one fixed order (docs/decode.md §2.2): the fp32 products run on the fixed-order
// kernel (src/cpu/fixed_order.hpp: each output one fma chain over its in-features in order) and
// the norms, dots and statistics are double sums in index order. So a token's features depend
// only on its own latent row, the prompt (keydiff's anchor, expected-attention's statistics and
// normaliser) and the weights: not on --threads, on the rows computed beside it, or on a BLAS
// library (OpenBLAS's sgemm changes bits with its thread count and its batch, docs/cpu-gemm.md §2).
//
// On MLA the key head h dots with is k_h,t = [W_UK^h c_t | k_pe_t] (d_qk values: HF's
// key_states row) and its value v_h,t = W_UV^h c_t (value_states): both are expanded from
// the one cached latent c_t, so the features are per head although the cache is per token.
//
// Shape legend: T positions, P prompt rows, n heads, r_kv kv_lora_rank, d_n, d_r, d_v,
// d_qk = d_n + d_r, w = d_n + d_v (kv_b_proj rows per head), H hidden_size, B block rows.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <string>

#include "mla/decode.hpp"
#include "mla/error.hpp"
#include "mla/random.hpp"
#include "mla/rope.hpp"
#include "src/cpu/cpu_kernels.hpp"
#include "src/cpu/fixed_order.hpp"

namespace mla {
namespace {

using cpu::MatrixRM;
using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
size_t idx(int64_t i) { return static_cast<size_t>(i); }
constexpr int64_t kBlockRows = 256;

// mean [d] = (1/rows) sum_s X[s, :]; cov [d, d] = (1/rows) sum_s (X[s] - mean)^T (X[s] - mean), each
// sum over the rows in order (no BLAS: a threaded dgemm would order them by its thread count);
// cov[j, i] is cov[i, j]'s value. X is centred in place.
void mean_and_covariance(MatrixD& X, double* mean, double* cov) {
  const int64_t rows = X.rows(), d = X.cols();
  std::fill(mean, mean + d, 0.0);
  for (int64_t s = 0; s < rows; ++s)
    for (int64_t i = 0; i < d; ++i) mean[i] += X(s, i);
  for (int64_t i = 0; i < d; ++i) mean[i] /= static_cast<double>(rows);
  for (int64_t s = 0; s < rows; ++s)
    for (int64_t i = 0; i < d; ++i) X(s, i) -= mean[i];
  std::fill(cov, cov + d * d, 0.0);
  for (int64_t s = 0; s < rows; ++s)
    for (int64_t i = 0; i < d; ++i) {
      const double xi = X(s, i);
      double* row = cov + i * d;
      for (int64_t j = i; j < d; ++j) row[j] += xi * X(s, j);
    }
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = i; j < d; ++j) cov[j * d + i] = cov[i * d + j] /= static_cast<double>(rows);
}

}  // namespace

// RoPE's rotation at one position on the roped half in HF's order (d_r values), as a matrix: pair
// i = (a, b) = cfg.rope_pair(i) ((i, i + d_r/2) for DeepseekV3, (2i, 2i+1) for V2) turns by
// y_a = c x_a - s x_b, y_b = s x_a + c x_b (rotate_half, or the complex product); averaged.
std::vector<double> mean_rope_rotation(const AttentionConfig& cfg, int64_t begin, int64_t count,
                                       const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t d_r = cfg.qk_rope_head_dim, half = d_r / 2;
  MatrixD R = MatrixD::Zero(d_r, d_r);
  // the tables by chunks of positions, so that expected-attention:future=10^8 needs no 10^8-row
  // table (it planned 347 MB and used 1.54 GB at 10^7); the sums run in the same order
  constexpr int64_t kChunk = 4096;
  for (int64_t c0 = 0; c0 < count; c0 += kChunk) {
    const int64_t rows = std::min(kChunk, count - c0);
    const RopeTables t = rope_tables(cfg, position_ids(begin + c0, rows));
    for (int64_t p = 0; p < rows; ++p)
      for (int64_t i = 0; i < half; ++i) {
        const double c = t.cos[idx(p * d_r + i)], s = t.sin[idx(p * d_r + i)];
        const auto [a, b] = cfg.rope_pair(i);
        R(a, a) += c;
        R(a, b) -= s;
        R(b, a) += s;
        R(b, b) += c;
      }
    if (progress) progress(c0 + rows, count);
  }
  R /= static_cast<double>(count);
  return std::vector<double>(R.data(), R.data() + R.size());
}

QueryStatistics prerope_query_statistics(const AttentionConfig& cfg, const float* q, int64_t rows,
                                         const std::vector<int64_t>& positions, int64_t first) {
  const int64_t n = cfg.num_attention_heads, d_qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim;
  return prerope_query_statistics(
      cfg, [&](int64_t s, int64_t h, float* out) { std::copy_n(q + s * n * d_qk + h * d_qk, d_qk, out); }, rows,
      positions, first);
}

QueryStatistics prerope_query_statistics(const AttentionConfig& cfg, const QueryRowReader& query, int64_t rows,
                                         const std::vector<int64_t>& positions, int64_t first) {
  const int64_t n = cfg.num_attention_heads, d_n = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim,
                d_qk = d_n + d_r, half = d_r / 2;
  if (first < 0 || first >= rows || static_cast<int64_t>(positions.size()) != rows)
    fail(ErrorKind::InvalidArgument, "query statistics: rows [" + std::to_string(first) + ", " + std::to_string(rows) +
                                         ") of " + std::to_string(positions.size()) + " positions");
  QueryStatistics st;
  st.first = first;
  st.rows = rows - first;
  const std::vector<int64_t> pos(positions.begin() + first, positions.end());
  const RopeTables t = rope_tables(cfg, pos);  // cos/sin [rows, d_r]
  st.mean.assign(idx(n * d_qk), 0.0);
  st.cov.assign(idx(n * d_qk * d_qk), 0.0);
  MatrixD X(st.rows, d_qk);  // one head's pre-RoPE queries
  std::vector<float> head_row(static_cast<size_t>(d_qk));
  for (int64_t h = 0; h < n; ++h) {
    for (int64_t s = 0; s < st.rows; ++s) {
      query(first + s, h, head_row.data());
      const float* row = head_row.data();
      for (int64_t d = 0; d < d_n; ++d) X(s, d) = row[d];
      // undo pair i's turn (y_a = c x_a - s x_b, y_b = s x_a + c x_b):
      //   x_a = (c y_a + s y_b) / (c^2 + s^2), x_b = (c y_b - s y_a) / (c^2 + s^2)
      for (int64_t i = 0; i < half; ++i) {
        const double c = t.cos[idx(s * d_r + i)], sn = t.sin[idx(s * d_r + i)], r = c * c + sn * sn;
        const auto [a, b] = cfg.rope_pair(i);
        const double y0 = row[d_n + a], y1 = row[d_n + b];
        X(s, d_n + a) = (c * y0 + sn * y1) / r;
        X(s, d_n + b) = (c * y1 - sn * y0) / r;
      }
    }
    mean_and_covariance(X, st.mean.data() + h * d_qk, st.cov.data() + h * d_qk * d_qk);
  }
  return st;
}

namespace {

using cpu::FixedOrderLinear;

// The widths of one layer's attention (legend above).
struct Widths {
  int64_t n, r_kv, d_n, d_r, d_v, d_qk, wh, H;
  explicit Widths(const AttentionConfig& c)
      : n(c.num_attention_heads), r_kv(c.kv_lora_rank), d_n(c.qk_nope_head_dim), d_r(c.qk_rope_head_dim),
        d_v(c.v_head_dim), d_qk(d_n + d_r), wh(d_n + d_v), H(c.hidden_size) {}
};

// sum_i a[i] b[i] in double, i in order
template <class A, class B>
double dot_in_order(const A* a, const B* b, int64_t count) {
  double s = 0.0;
  for (int64_t i = 0; i < count; ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

void check_feature_inputs(const Widths& d, const LayerWeights& w, const TensorD& latent_cache, int64_t T, int64_t P,
                          const FeatureNeeds& needs, const QueryStatistics& stats) {
  if (latent_cache.shape != std::vector<int64_t>{T, d.r_kv + d.d_r} || P < 1 || P > T)
    fail(ErrorKind::Shape, "token features: latent cache " + shape_string(latent_cache.shape) + " with a prompt of " +
                               std::to_string(P));
  if (w.kv_b_proj.shape != std::vector<int64_t>{d.n * d.wh, d.r_kv} || w.o_proj.shape != std::vector<int64_t>{d.H, d.n * d.d_v})
    fail(ErrorKind::Shape, "token features: kv_b_proj " + shape_string(w.kv_b_proj.shape) + ", o_proj " +
                               shape_string(w.o_proj.shape) + " do not match the config");
  if (needs.expected_attention && (stats.empty() || stats.mean.size() != idx(d.n * d.d_qk)))
    fail(ErrorKind::InvalidArgument, "token features: expected-attention needs the prompt queries' statistics");
}

using Linears = std::vector<std::unique_ptr<FixedOrderLinear>>;  // [n] one per head

// value-aware: ||W_O^h v||^2 = v^T G_h v with G_h = W_O^hT W_O^h [d_v, d_v] (a fixed chain over the
// H rows of o_proj). G_h[i, j] and G_h[j, i] are the same chain (the products commute exactly), so G_h
// is symmetric to the bit and, packed as a weight [out = j, in = i], gives u = G_h v.
Linears output_grams(const Widths& d, const LayerWeights& w, int threads) {
  Linears gram(idx(d.n));
  cpu::parallel_for(d.n, threads, [&](int64_t h, int) {
    std::vector<float> o_t(idx(d.d_v * d.H));  // [d_v, H] = W_O^hT
    for (int64_t k = 0; k < d.H; ++k)
      for (int64_t i = 0; i < d.d_v; ++i) o_t[idx(i * d.H + k)] = w.o_proj.data[idx(k * d.n * d.d_v + h * d.d_v + i)];
    const FixedOrderLinear o_h(o_t.data(), d.d_v, d.H, nullptr, Precision::FP32);
    std::vector<float> g(idx(d.d_v * d.d_v));  // [d_v, d_v]
    o_h.run_rows(o_t.data(), d.d_v, d.H, g.data(), d.d_v, 1);
    gram[idx(h)] = std::make_unique<FixedOrderLinear>(g.data(), d.d_v, d.d_v, nullptr, Precision::FP32);
  });
  return gram;
}

// expected-attention's statistics in the key space (docs/decode.md §2.2), B = diag(I_{d_n}, R):
//   mu' = B mu = [mu_nope | R mu_pe],  S' = B S B^T (the rows, then the columns of the rope block turned)
// per head, in double, each sum in index order; then packed as one linear [d_qk + 1 outputs, d_qk]:
// out j < d_qk is (k S')_j (weight row j = column j of S'), out d_qk is mu'.k.
Linears expected_attention_forms(const Widths& d, const QueryStatistics& stats, const std::vector<double>& R) {
  const int64_t d_qk = d.d_qk, d_n = d.d_n, d_r = d.d_r;
  Linears forms(idx(d.n));
  std::vector<double> mu(idx(d_qk)), BS(idx(d_qk * d_qk)), S2(idx(d_qk * d_qk));
  std::vector<float> weight(idx((d_qk + 1) * d_qk));
  for (int64_t h = 0; h < d.n; ++h) {
    const double* m = stats.mean.data() + h * d_qk;
    const double* S = stats.cov.data() + h * d_qk * d_qk;
    for (int64_t i = 0; i < d_qk; ++i)
      mu[idx(i)] = i < d_n ? m[i] : dot_in_order(R.data() + (i - d_n) * d_r, m + d_n, d_r);
    for (int64_t i = 0; i < d_qk; ++i)  // BS = B S
      for (int64_t j = 0; j < d_qk; ++j) {
        double v = S[i * d_qk + j];
        if (i >= d_n) {
          v = 0.0;
          for (int64_t b = 0; b < d_r; ++b) v += R[idx((i - d_n) * d_r + b)] * S[(d_n + b) * d_qk + j];
        }
        BS[idx(i * d_qk + j)] = v;
      }
    for (int64_t i = 0; i < d_qk; ++i)  // S' = (B S) B^T
      for (int64_t j = 0; j < d_qk; ++j)
        S2[idx(i * d_qk + j)] =
            j < d_n ? BS[idx(i * d_qk + j)] : dot_in_order(BS.data() + i * d_qk + d_n, R.data() + (j - d_n) * d_r, d_r);
    for (int64_t j = 0; j < d_qk; ++j)
      for (int64_t i = 0; i < d_qk; ++i) weight[idx(j * d_qk + i)] = static_cast<float>(S2[idx(i * d_qk + j)]);
    for (int64_t i = 0; i < d_qk; ++i) weight[idx(d_qk * d_qk + i)] = static_cast<float>(mu[idx(i)]);
    forms[idx(h)] = std::make_unique<FixedOrderLinear>(weight.data(), d_qk + 1, d_qk, nullptr, Precision::FP32);
  }
  return forms;
}

// Rows [b0, b0 + rows) of the cache expanded: kv [rows, n*w] = per head k_nope | v (latent kv_b^T),
// k_pe [rows, d_r].
struct ExpandedRows {
  int64_t rows = 0;
  std::vector<float> latent, kv, k_pe;
  void expand(const Widths& d, const FixedOrderLinear& kv_b, const TensorD& cache, int64_t b0, int64_t count,
              int threads) {
    rows = count;
    latent.resize(idx(rows * d.r_kv));
    k_pe.resize(idx(rows * d.d_r));
    kv.resize(idx(rows * d.n * d.wh));
    for (int64_t s = 0; s < rows; ++s) {
      const double* row = cache.ptr() + (b0 + s) * (d.r_kv + d.d_r);
      for (int64_t c = 0; c < d.r_kv; ++c) latent[idx(s * d.r_kv + c)] = static_cast<float>(row[c]);
      for (int64_t c = 0; c < d.d_r; ++c) k_pe[idx(s * d.d_r + c)] = static_cast<float>(row[d.r_kv + c]);
    }
    kv_b.run_rows(latent.data(), rows, d.r_kv, kv.data(), d.n * d.wh, threads);
  }
  // keys [rows, d_qk] = head h's k_h,t = [k_nope | k_pe]
  void head_keys(const Widths& d, int64_t h, std::vector<float>& keys) const {
    keys.resize(idx(rows * d.d_qk));
    for (int64_t s = 0; s < rows; ++s) {
      std::copy_n(kv.data() + s * d.n * d.wh + h * d.wh, d.d_n, keys.data() + s * d.d_qk);
      std::copy_n(k_pe.data() + s * d.d_r, d.d_r, keys.data() + s * d.d_qk + d.d_n);
    }
  }
  // values [rows, d_v] = head h's v_h,t
  void head_values(const Widths& d, int64_t h, std::vector<float>& values) const {
    values.resize(idx(rows * d.d_v));
    for (int64_t s = 0; s < rows; ++s)
      std::copy_n(kv.data() + s * d.n * d.wh + h * d.wh + d.d_n, d.d_v, values.data() + s * d.d_v);
  }
};

// keydiff's anchor a_h = mean over the prompt tokens of k_h,t / ||k_h,t|| ([n, d_qk], double sums,
// rows in order; a zero key adds nothing) and its norms [n]
void keydiff_anchor(const Widths& d, const FixedOrderLinear& kv_b, const TensorD& cache, int64_t P, int threads,
                    std::vector<double>& anchor, std::vector<double>& anchor_norm) {
  anchor.assign(idx(d.n * d.d_qk), 0.0);
  ExpandedRows block;
  for (int64_t b0 = 0; b0 < P; b0 += kBlockRows) {
    block.expand(d, kv_b, cache, b0, std::min(kBlockRows, P - b0), threads);
    cpu::parallel_for(d.n, threads, [&](int64_t h, int) {
      std::vector<float> keys;
      block.head_keys(d, h, keys);
      double* a = anchor.data() + h * d.d_qk;
      for (int64_t s = 0; s < block.rows; ++s) {
        const float* k = keys.data() + s * d.d_qk;
        const double norm = std::sqrt(dot_in_order(k, k, d.d_qk));
        if (norm > 0)
          for (int64_t i = 0; i < d.d_qk; ++i) a[i] += static_cast<double>(k[i]) / norm;
      }
    });
  }
  anchor_norm.assign(idx(d.n), 0.0);
  for (int64_t h = 0; h < d.n; ++h) {
    double* a = anchor.data() + h * d.d_qk;
    for (int64_t i = 0; i < d.d_qk; ++i) a[i] /= static_cast<double>(P);
    anchor_norm[idx(h)] = std::sqrt(dot_in_order(a, a, d.d_qk));
  }
}

// ---- leverage (kvpress LeverageScorePress) on the latent rows ------------------------------------
// x_t [d = r_kv + d_r] = [c_t | k_pe_t un-rotated] (the pre-RoPE latent row); mu = mean over the rows
// [first, P); Phi [d, k] = N(0, 1) / sqrt(k) from Rng(seed, kLeverageStream), filled row by row (k = 0:
// Phi = I, k = d); y_t = (x_t - mu) Phi; G = sum_{s in [first, P)} y_s^T y_s [k, k];
// L L^T = G + j I (j = 1e-2, then 1e-1, 1, 10, 100 while the factorisation fails, kvpress's jitter);
// l_t = y_t^T (G + j I)^{-1} y_t = ||L^{-1} y_t||^2 >= 0; leverage[t] = (l_t - mean) / max(std, 1e-6),
// mean and the unbiased std over [first, P). Every sum in index order; rows are independent.
constexpr uint64_t kLeverageStream = 7101;

// x [T, d]: every row's pre-RoPE latent row in double
MatrixD prerope_latent_rows(const AttentionConfig& cfg, const TensorD& cache, int64_t T) {
  const int64_t r_kv = cfg.kv_lora_rank, d_r = cfg.qk_rope_head_dim, d = r_kv + d_r, half = d_r / 2;
  const RopeTables t = rope_tables(cfg, position_ids(0, T));
  MatrixD X(T, d);
  for (int64_t s = 0; s < T; ++s) {
    const double* row = cache.ptr() + s * d;
    for (int64_t c = 0; c < r_kv; ++c) X(s, c) = row[c];
    for (int64_t i = 0; i < half; ++i) {  // undo y_a = c x_a - s x_b, y_b = s x_a + c x_b
      const double c = t.cos[idx(s * d_r + i)], sn = t.sin[idx(s * d_r + i)], r = c * c + sn * sn;
      const auto [a, b] = cfg.rope_pair(i);
      const double y0 = row[r_kv + a], y1 = row[r_kv + b];
      X(s, r_kv + a) = (c * y0 + sn * y1) / r;
      X(s, r_kv + b) = (c * y1 - sn * y0) / r;
    }
  }
  return X;
}

// Lower Cholesky factor of A [k, k] (row-major, symmetric) in place; false when not positive definite.
bool cholesky_in_place(std::vector<double>& A, int64_t k) {
  for (int64_t j = 0; j < k; ++j) {
    double diag = A[idx(j * k + j)];
    for (int64_t p = 0; p < j; ++p) diag -= A[idx(j * k + p)] * A[idx(j * k + p)];
    if (!(diag > 0)) return false;
    const double l = std::sqrt(diag);
    A[idx(j * k + j)] = l;
    for (int64_t i = j + 1; i < k; ++i) {
      double v = A[idx(i * k + j)];
      for (int64_t p = 0; p < j; ++p) v -= A[idx(i * k + p)] * A[idx(j * k + p)];
      A[idx(i * k + j)] = v / l;
    }
  }
  return true;
}

std::vector<double> leverage_scores(const AttentionConfig& cfg, const TensorD& cache, int64_t T, int64_t P,
                                    const FeatureNeeds& needs, int threads) {
  const int64_t first = std::min(needs.leverage_sinks, P - 1), rows = P - first;
  MatrixD X = prerope_latent_rows(cfg, cache, T);
  const int64_t d = X.cols(), k = needs.leverage_sketch > 0 ? needs.leverage_sketch : d;
  std::vector<double> mu(idx(d), 0.0);
  for (int64_t s = first; s < P; ++s)
    for (int64_t i = 0; i < d; ++i) mu[idx(i)] += X(s, i);
  for (int64_t i = 0; i < d; ++i) mu[idx(i)] /= static_cast<double>(rows);
  std::vector<double> phi;  // [d, k]
  if (needs.leverage_sketch > 0) {
    Rng rng(needs.leverage_seed, kLeverageStream);
    phi.resize(idx(d * k));
    const double scale = 1.0 / std::sqrt(static_cast<double>(k));
    for (double& v : phi) v = rng.normal() * scale;
  }
  MatrixD Y(T, k);  // y_t = (x_t - mu) Phi
  cpu::parallel_for(T, threads, [&](int64_t t, int) {
    if (phi.empty()) {
      for (int64_t i = 0; i < d; ++i) Y(t, i) = X(t, i) - mu[idx(i)];
      return;
    }
    for (int64_t j = 0; j < k; ++j) Y(t, j) = 0.0;
    for (int64_t i = 0; i < d; ++i) {
      const double x = X(t, i) - mu[idx(i)];
      const double* row = phi.data() + i * k;
      for (int64_t j = 0; j < k; ++j) Y(t, j) += x * row[j];
    }
  });
  std::vector<double> G(idx(k * k), 0.0);  // the upper triangle, rows in order, then mirrored
  for (int64_t s = first; s < P; ++s)
    for (int64_t i = 0; i < k; ++i) {
      const double yi = Y(s, i);
      for (int64_t j = i; j < k; ++j) G[idx(i * k + j)] += yi * Y(s, j);
    }
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < i; ++j) G[idx(i * k + j)] = G[idx(j * k + i)];
  std::vector<double> L;
  bool ok = false;
  for (double jitter = 1e-2; !ok && jitter <= 1e2 * 1.0001; jitter *= 10) {
    L = G;
    for (int64_t i = 0; i < k; ++i) L[idx(i * k + i)] += jitter;
    ok = cholesky_in_place(L, k);
  }
  if (!ok) fail(ErrorKind::InvalidArgument, "token features: leverage's Gram matrix is not positive definite with jitter 100");
  std::vector<double> l(idx(T));
  cpu::parallel_for(T, threads, [&](int64_t t, int) {  // z = L^{-1} y_t (forward substitution), l = z.z
    std::vector<double> z(idx(k));
    double sum = 0.0;
    for (int64_t i = 0; i < k; ++i) {
      double v = Y(t, i);
      for (int64_t p = 0; p < i; ++p) v -= L[idx(i * k + p)] * z[idx(p)];
      z[idx(i)] = v / L[idx(i * k + i)];
      sum += z[idx(i)] * z[idx(i)];
    }
    l[idx(t)] = std::max(0.0, sum);
  });
  double mean = 0.0, var = 0.0;
  for (int64_t s = first; s < P; ++s) mean += l[idx(s)];
  mean /= static_cast<double>(rows);
  for (int64_t s = first; s < P; ++s) var += (l[idx(s)] - mean) * (l[idx(s)] - mean);
  const double sd = std::max(rows > 1 ? std::sqrt(var / static_cast<double>(rows - 1)) : 0.0, 1e-6);
  for (double& v : l) v = (v - mean) / sd;
  return l;
}

// ---- lagkv (kvpress LagKVPress) ---------------------------------------------------------------
// Partitions of `lag` rows from the sinks on: partition c = [sinks + c lag, sinks + (c+1) lag). A
// partition c whose next one lies within T is scored against it, per head h and token t in c:
//   u_i = (x_i - min_i) / (max_i - min_i) over dims i (min, max over the next partition's tokens; a dim
//         with max = min gives u_i = 0), s_x(t) = the unbiased std of u over the dims, for the key
//         k_h,t = [k_nope | k_pe roped] (the cache's key, as kvpress) and the value v_h,t;
//   p_x(t) = softmax over the partition's tokens of s_x;  s(t) = (p_k(t) + p_v(t)) / 2;
//   lagkv[h, t] = (the rank of s(t) among its partition's tokens, ascending, ties by position) / lag.
// Other tokens get 1. lagkv[h, t] depends only on the rows of t's partition and the next one.
std::vector<double> lagkv_scores(const Widths& d, const FixedOrderLinear& kv_b, const TensorD& cache, int64_t T,
                                 const FeatureNeeds& needs, int threads) {
  const int64_t lag = needs.lagkv_lag, sinks = std::min(needs.lagkv_sinks, T);
  const int64_t parts = (T - sinks) / lag;  // complete partitions
  std::vector<double> out(idx(d.n * T), 1.0);
  if (parts < 2) return out;
  const int64_t width = d.d_qk + d.d_v;  // key dims, then value dims
  std::vector<double> lo(idx(parts * d.n * width), std::numeric_limits<double>::infinity()),
      hi(idx(parts * d.n * width), -std::numeric_limits<double>::infinity());
  std::vector<double> sd(idx(d.n * T * 2), 0.0);  // [n, T, key|value] the stds
  const int64_t end = sinks + parts * lag;
  ExpandedRows block;
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t b0 = sinks; b0 < end; b0 += kBlockRows) {
      block.expand(d, kv_b, cache, b0, std::min(kBlockRows, end - b0), threads);
      cpu::parallel_for(d.n, threads, [&](int64_t h, int) {
        std::vector<float> keys, values;
        block.head_keys(d, h, keys);
        block.head_values(d, h, values);
        std::vector<double> x(idx(width));
        for (int64_t s = 0; s < block.rows; ++s) {
          const int64_t t = b0 + s, c = (t - sinks) / lag;
          for (int64_t i = 0; i < d.d_qk; ++i) x[idx(i)] = keys[idx(s * d.d_qk + i)];
          for (int64_t i = 0; i < d.d_v; ++i) x[idx(d.d_qk + i)] = values[idx(s * d.d_v + i)];
          if (pass == 0) {
            double* l = lo.data() + (c * d.n + h) * width;
            double* u = hi.data() + (c * d.n + h) * width;
            for (int64_t i = 0; i < width; ++i) l[i] = std::min(l[i], x[idx(i)]), u[i] = std::max(u[i], x[idx(i)]);
            continue;
          }
          if (c + 1 >= parts) continue;
          const double* l = lo.data() + ((c + 1) * d.n + h) * width;
          const double* u = hi.data() + ((c + 1) * d.n + h) * width;
          for (int64_t i = 0; i < width; ++i) x[idx(i)] = u[i] > l[i] ? (x[idx(i)] - l[i]) / (u[i] - l[i]) : 0.0;
          for (int part = 0; part < 2; ++part) {  // key dims [0, d_qk), value dims [d_qk, width)
            const int64_t i0 = part ? d.d_qk : 0, count = part ? d.d_v : d.d_qk;
            double mean = 0.0, var = 0.0;
            for (int64_t i = 0; i < count; ++i) mean += x[idx(i0 + i)];
            mean /= static_cast<double>(count);
            for (int64_t i = 0; i < count; ++i) var += (x[idx(i0 + i)] - mean) * (x[idx(i0 + i)] - mean);
            sd[idx((h * T + t) * 2 + part)] = count > 1 ? std::sqrt(var / static_cast<double>(count - 1)) : 0.0;
          }
        }
      });
    }
  for (int64_t h = 0; h < d.n; ++h)
    for (int64_t c = 0; c + 1 < parts; ++c) {
      const int64_t t0 = sinks + c * lag;
      std::vector<double> score(idx(lag), 0.0);
      for (int part = 0; part < 2; ++part) {  // softmax over the partition, half of it into score
        double top = -std::numeric_limits<double>::infinity(), sum = 0.0;
        for (int64_t j = 0; j < lag; ++j) top = std::max(top, sd[idx((h * T + t0 + j) * 2 + part)]);
        for (int64_t j = 0; j < lag; ++j) sum += std::exp(sd[idx((h * T + t0 + j) * 2 + part)] - top);
        for (int64_t j = 0; j < lag; ++j) score[idx(j)] += std::exp(sd[idx((h * T + t0 + j) * 2 + part)] - top) / sum / 2;
      }
      std::vector<int64_t> order(idx(lag));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return score[idx(a)] < score[idx(b)]; });
      for (int64_t r = 0; r < lag; ++r)
        out[idx(h * T + t0 + order[idx(r)])] = static_cast<double>(r) / static_cast<double>(lag);
    }
  return out;
}

// What the per-head pass reads besides the block.
struct FeatureTools {
  const FeatureNeeds& needs;
  Linears gram, forms;                          // value-aware, expected-attention ([n] each, or empty)
  std::vector<double> anchor, anchor_norm;      // keydiff
  double scale = 0;                             // softmax_scale
};

// Head h's features of the block's rows (tokens b0 + s): key_norm ||k||, key_diff -cos(k, a_h) (0 for
// a zero key or anchor), value_norm ||v||, output_norm sqrt(v^T G_h v), and expected-attention's logit
// z = scale mu'.k + scale^2/2 k^T S' k into z [n, T].
void head_block_features(const Widths& d, const ExpandedRows& block, int64_t b0, int64_t h, int64_t T,
                         const FeatureTools& tools, TokenFeatures& f, std::vector<double>& z) {
  const FeatureNeeds& needs = tools.needs;
  std::vector<float> keys, values, out;
  if (needs.key_norm || needs.key_diff || needs.expected_attention) block.head_keys(d, h, keys);
  if (needs.value_norm || needs.output_norm) block.head_values(d, h, values);
  if (needs.expected_attention) {  // out [rows, d_qk + 1] = k S' | mu'.k
    out.resize(idx(block.rows * (d.d_qk + 1)));
    tools.forms[idx(h)]->run_rows(keys.data(), block.rows, d.d_qk, out.data(), d.d_qk + 1, 1);
  }
  std::vector<float> u(idx(block.rows * d.d_v));  // value-aware: u = G_h v
  if (needs.output_norm) tools.gram[idx(h)]->run_rows(values.data(), block.rows, d.d_v, u.data(), d.d_v, 1);
  for (int64_t s = 0; s < block.rows; ++s) {
    const size_t at = idx(h * T + b0 + s);
    const float* k = keys.data() + s * d.d_qk;
    const float* v = values.data() + s * d.d_v;
    if (needs.key_norm || needs.key_diff) {
      const double norm = std::sqrt(dot_in_order(k, k, d.d_qk));
      if (needs.key_norm) f.key_norm[at] = norm;
      if (needs.key_diff) {
        const double den = norm * tools.anchor_norm[idx(h)];
        f.key_diff[at] = den > 0 ? -dot_in_order(k, tools.anchor.data() + h * d.d_qk, d.d_qk) / den : 0.0;
      }
    }
    if (needs.value_norm) f.value_norm[at] = std::sqrt(dot_in_order(v, v, d.d_v));
    if (needs.output_norm) f.output_norm[at] = std::sqrt(std::max(0.0, dot_in_order(u.data() + s * d.d_v, v, d.d_v)));
    if (needs.expected_attention) {
      const float* o = out.data() + s * (d.d_qk + 1);
      z[at] = tools.scale * static_cast<double>(o[d.d_qk]) + 0.5 * tools.scale * tools.scale * dot_in_order(o, k, d.d_qk);
    }
  }
}

// expected-attention per head: softmax of z over the prompt tokens [first, P); later tokens use the
// same normaliser
std::vector<double> expected_attention_softmax(const std::vector<double>& z, int64_t n, int64_t T, int64_t P,
                                               int64_t first) {
  std::vector<double> p(z.size(), 0.0);
  for (int64_t h = 0; h < n; ++h) {
    const double* zh = z.data() + h * T;
    const double top = *std::max_element(zh + first, zh + P);
    double sum = 0.0;
    for (int64_t t = first; t < P; ++t) sum += std::exp(zh[t] - top);
    for (int64_t t = 0; t < T; ++t) p[idx(h * T + t)] = std::exp(std::min(zh[t] - top, 700.0)) / sum;
  }
  return p;
}

}  // namespace

TokenFeatures compute_token_features(const AttentionConfig& cfg, const LayerWeights& w, const TensorD& latent_cache,
                                     int64_t P, const FeatureNeeds& needs, const QueryStatistics& stats, int threads) {
  const Widths d(cfg);
  TokenFeatures f;
  f.heads = d.n;
  f.tokens = latent_cache.empty() ? 0 : latent_cache.dim(0);
  FeatureNeeds own = needs;
  own.reconstruction = false;  // kvzip's: its caller runs the context's repeat (mla/policy.hpp)
  if (!own.any()) return f;
  const int64_t T = f.tokens;
  check_feature_inputs(d, w, latent_cache, T, P, needs, stats);
  threads = cpu::resolve_threads(threads);
  const FixedOrderLinear kv_b(w.kv_b_proj.ptr(), d.n * d.wh, d.r_kv, nullptr, Precision::FP32);
  for (std::vector<double>* v : {needs.key_norm ? &f.key_norm : nullptr, needs.value_norm ? &f.value_norm : nullptr,
                                 needs.output_norm ? &f.output_norm : nullptr, needs.key_diff ? &f.key_diff : nullptr})
    if (v) v->assign(idx(d.n * T), 0.0);
  std::vector<double> z;  // [n, T] expected-attention logits
  FeatureTools tools{needs, {}, {}, {}, {}, softmax_scale(cfg)};
  if (needs.output_norm) tools.gram = output_grams(d, w, threads);
  if (needs.expected_attention) {
    const std::vector<double> rotation =
        stats.future_rotation.empty() ? mean_rope_rotation(cfg, P, needs.expected_future) : stats.future_rotation;
    if (rotation.size() != idx(d.d_r * d.d_r))
      fail(ErrorKind::Shape, "token features: the future rotation holds " + std::to_string(rotation.size()) +
                                 " values for d_r " + std::to_string(d.d_r));
    tools.forms = expected_attention_forms(d, stats, rotation);
    z.assign(idx(d.n * T), 0.0);
  }
  if (needs.key_diff) keydiff_anchor(d, kv_b, latent_cache, P, threads, tools.anchor, tools.anchor_norm);
  ExpandedRows block;
  const bool per_head_pass = needs.key_norm || needs.value_norm || needs.output_norm || needs.expected_attention || needs.key_diff;
  for (int64_t b0 = 0; per_head_pass && b0 < T; b0 += kBlockRows) {
    block.expand(d, kv_b, latent_cache, b0, std::min(kBlockRows, T - b0), threads);
    cpu::parallel_for(d.n, threads, [&](int64_t h, int) { head_block_features(d, block, b0, h, T, tools, f, z); });
  }
  if (needs.expected_attention)
    f.expected_attention = expected_attention_softmax(z, d.n, T, P, std::min(needs.expected_sinks, P - 1));
  if (needs.leverage) f.leverage = leverage_scores(cfg, latent_cache, T, P, needs, threads);
  if (needs.lagkv) f.lagkv = lagkv_scores(d, kv_b, latent_cache, T, needs, threads);
  return f;
}

}  // namespace mla
