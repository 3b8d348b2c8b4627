// src/layer_eviction/token_features.cpp — the per-token quantities some policies read (knorm, keydiff,
// expected-attention, value-aware; mla/policy.hpp TokenFeatures, docs/decode.md §2), computed
// once per layer from the latent cache and the layer's kv_b_proj and o_proj, and the
// pre-RoPE query statistics expected-attention needs. fp32 GEMMs (Eigen + OpenBLAS), results
// widened to double; the rows are processed in blocks so no [T, n*(d_n+d_v)] tensor is held.
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
#include <string>

#include "mla/decode.hpp"
#include "mla/error.hpp"
#include "mla/rope.hpp"
#include "src/cpu/cpu_kernels.hpp"

namespace mla {
namespace {

using cpu::MatrixRM;
using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
size_t idx(int64_t i) { return static_cast<size_t>(i); }
constexpr int64_t kBlockRows = 256;

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
    const Eigen::RowVectorXd mu = X.colwise().mean();
    X.rowwise() -= mu;
    const MatrixD cov = (X.transpose() * X) / static_cast<double>(st.rows);
    std::copy(mu.data(), mu.data() + d_qk, st.mean.begin() + h * d_qk);
    std::copy(cov.data(), cov.data() + d_qk * d_qk, st.cov.begin() + h * d_qk * d_qk);
  }
  return st;
}

TokenFeatures compute_token_features(const AttentionConfig& cfg, const LayerWeights& w, const TensorD& latent_cache,
                                     int64_t P, const FeatureNeeds& needs, const QueryStatistics& stats) {
  const int64_t n = cfg.num_attention_heads, r_kv = cfg.kv_lora_rank, d_n = cfg.qk_nope_head_dim,
                d_r = cfg.qk_rope_head_dim, d_v = cfg.v_head_dim, d_qk = d_n + d_r, wh = d_n + d_v,
                H = cfg.hidden_size;
  TokenFeatures f;
  f.heads = n;
  f.tokens = latent_cache.empty() ? 0 : latent_cache.dim(0);
  if (!needs.any()) return f;
  const int64_t T = f.tokens;
  if (latent_cache.shape != std::vector<int64_t>{T, r_kv + d_r} || P < 1 || P > T)
    fail(ErrorKind::Shape, "token features: latent cache " + shape_string(latent_cache.shape) + " with a prompt of " +
                               std::to_string(P));
  if (w.kv_b_proj.shape != std::vector<int64_t>{n * wh, r_kv} || w.o_proj.shape != std::vector<int64_t>{H, n * d_v})
    fail(ErrorKind::Shape, "token features: kv_b_proj " + shape_string(w.kv_b_proj.shape) + ", o_proj " +
                               shape_string(w.o_proj.shape) + " do not match the config");
  if (needs.expected_attention && (stats.empty() || stats.mean.size() != idx(n * d_qk)))
    fail(ErrorKind::InvalidArgument, "token features: expected-attention needs the prompt queries' statistics");
  const Eigen::Map<const MatrixRM> kv_b(w.kv_b_proj.ptr(), n * wh, r_kv);
  const size_t size = idx(n * T);
  if (needs.key_norm) f.key_norm.assign(size, 0.0);
  if (needs.value_norm) f.value_norm.assign(size, 0.0);
  if (needs.output_norm) f.output_norm.assign(size, 0.0);
  if (needs.key_diff) f.key_diff.assign(size, 0.0);
  std::vector<double> z;  // [n, T] expected-attention logits
  if (needs.expected_attention) z.assign(size, 0.0);

  // Gram matrices of o_proj's head blocks: ||W_O^h v||^2 = v^T (W_O^hT W_O^h) v
  std::vector<MatrixRM> gram;
  if (needs.output_norm) {
    const Eigen::Map<const MatrixRM> o(w.o_proj.ptr(), H, n * d_v);
    for (int64_t h = 0; h < n; ++h) gram.emplace_back(o.middleCols(h * d_v, d_v).transpose() * o.middleCols(h * d_v, d_v));
  }
  // expected-attention: mu'_h, S'_h in the key space (docs/decode.md §2)
  std::vector<Eigen::VectorXf> mu;
  std::vector<MatrixRM> sigma;
  const double scale = softmax_scale(cfg);
  if (needs.expected_attention) {
    MatrixD B = MatrixD::Identity(d_qk, d_qk);
    const std::vector<double> rotation =
        stats.future_rotation.empty() ? mean_rope_rotation(cfg, P, needs.expected_future) : stats.future_rotation;
    if (rotation.size() != idx(d_r * d_r))
      fail(ErrorKind::Shape, "token features: the future rotation holds " + std::to_string(rotation.size()) + " values for d_r " +
                                 std::to_string(d_r));
    B.bottomRightCorner(d_r, d_r) = Eigen::Map<const MatrixD>(rotation.data(), d_r, d_r);
    for (int64_t h = 0; h < n; ++h) {
      const Eigen::Map<const Eigen::VectorXd> m(stats.mean.data() + h * d_qk, d_qk);
      const Eigen::Map<const MatrixD> S(stats.cov.data() + h * d_qk * d_qk, d_qk, d_qk);
      mu.emplace_back((B * m).cast<float>());
      sigma.emplace_back((B * S * B.transpose()).cast<float>());
    }
  }

  MatrixRM latent, kv, k_pe, keys(kBlockRows, d_qk), y;
  // rows [b0, b0 + rows): latent and k_pe from the cache, kv [rows, n*w] = per head k_nope | v
  const auto expand = [&](int64_t b0, int64_t rows) {
    latent.resize(rows, r_kv);
    k_pe.resize(rows, d_r);
    for (int64_t s = 0; s < rows; ++s) {
      const double* row = latent_cache.ptr() + (b0 + s) * (r_kv + d_r);
      for (int64_t c = 0; c < r_kv; ++c) latent(s, c) = static_cast<float>(row[c]);
      for (int64_t d = 0; d < d_r; ++d) k_pe(s, d) = static_cast<float>(row[r_kv + d]);
    }
    kv.noalias() = latent * kv_b.transpose();
    keys.resize(rows, d_qk);
  };
  // keys [rows, d_qk] = head h's k_h,t = [k_nope | k_pe] of the expanded rows
  const auto head_keys = [&](int64_t h) {
    keys.leftCols(d_n) = kv.middleCols(h * wh, d_n);
    keys.rightCols(d_r) = k_pe;
  };
  // keydiff's anchor a_h = mean over the prompt tokens of k_h,t / ||k_h,t|| (double sums, rows in order)
  MatrixD anchor;  // [n, d_qk]
  std::vector<double> anchor_norm;  // [n]
  if (needs.key_diff) {
    anchor = MatrixD::Zero(n, d_qk);
    for (int64_t b0 = 0; b0 < P; b0 += kBlockRows) {
      const int64_t rows = std::min(kBlockRows, P - b0);
      expand(b0, rows);
      for (int64_t h = 0; h < n; ++h) {
        head_keys(h);
        for (int64_t s = 0; s < rows; ++s) {
          const double norm = static_cast<double>(keys.row(s).norm());
          if (norm > 0)
            for (int64_t d = 0; d < d_qk; ++d) anchor(h, d) += static_cast<double>(keys(s, d)) / norm;
        }
      }
    }
    anchor /= static_cast<double>(P);
    for (int64_t h = 0; h < n; ++h) anchor_norm.push_back(anchor.row(h).norm());
  }
  for (int64_t b0 = 0; b0 < T; b0 += kBlockRows) {
    const int64_t rows = std::min(kBlockRows, T - b0);
    expand(b0, rows);
    for (int64_t h = 0; h < n; ++h) {
      head_keys(h);
      const auto v = kv.middleCols(h * wh + d_n, d_v);
      Eigen::VectorXf lin;
      if (needs.expected_attention) {
        y.noalias() = keys * sigma[idx(h)];
        lin.noalias() = keys * mu[idx(h)];
      }
      for (int64_t s = 0; s < rows; ++s) {
        const size_t at = idx(h * T + b0 + s);
        if (needs.key_norm) f.key_norm[at] = static_cast<double>(keys.row(s).norm());
        if (needs.key_diff) {  // -cos(k_h,t, a_h); 0 for a zero key or anchor
          double dot = 0;
          for (int64_t d = 0; d < d_qk; ++d) dot += static_cast<double>(keys(s, d)) * anchor(h, d);
          const double den = static_cast<double>(keys.row(s).norm()) * anchor_norm[idx(h)];
          f.key_diff[at] = den > 0 ? -dot / den : 0.0;
        }
        if (needs.value_norm) f.value_norm[at] = static_cast<double>(v.row(s).norm());
        if (needs.output_norm) {
          const double q2 = static_cast<double>((v.row(s) * gram[idx(h)]).dot(v.row(s)));
          f.output_norm[at] = std::sqrt(std::max(0.0, q2));
        }
        if (needs.expected_attention)
          z[at] = scale * static_cast<double>(lin[s]) +
                  0.5 * scale * scale * static_cast<double>(y.row(s).dot(keys.row(s)));
      }
    }
  }
  if (needs.expected_attention) {
    // per head: softmax over the prompt tokens [sinks, P); later tokens use the same normaliser
    const int64_t first = std::min(needs.expected_sinks, P - 1);
    f.expected_attention.assign(size, 0.0);
    for (int64_t h = 0; h < n; ++h) {
      const double* zh = z.data() + h * T;
      const double top = *std::max_element(zh + first, zh + P);
      double sum = 0.0;
      for (int64_t t = first; t < P; ++t) sum += std::exp(zh[t] - top);
      for (int64_t t = 0; t < T; ++t) f.expected_attention[idx(h * T + t)] = std::exp(std::min(zh[t] - top, 700.0)) / sum;
    }
  }
  return f;
}

}  // namespace mla
