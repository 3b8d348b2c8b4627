// tests/unit/attention_paths.cpp — see attention_paths.hpp.
#include "attention_paths.hpp"

#include <algorithm>

#include "mla/bf16.hpp"
#include "mla/random.hpp"

namespace mla::test {
namespace {

// (the helpers keep their bool, which tests/bench/bench_long_context.cpp passes)
Precision precision_of(bool bf16) { return bf16 ? Precision::BF16 : Precision::FP32; }

std::vector<double> token_scores_of(const std::vector<double>& head_scores, int64_t n, int64_t S) {
  std::vector<double> t(static_cast<size_t>(S), 0.0);
  for (int64_t h = 0; h < n; ++h)
    for (int64_t s = 0; s < S; ++s) t[static_cast<size_t>(s)] += head_scores[static_cast<size_t>(h * S + s)];
  return t;
}

Operands shaped(const AttentionConfig& cfg, int64_t S) {
  Operands o;
  o.S = S;
  o.n = cfg.num_attention_heads;
  o.d_n = cfg.qk_nope_head_dim;
  o.d_r = cfg.qk_rope_head_dim;
  o.d_v = cfg.v_head_dim;
  o.query.resize(static_cast<size_t>(S * o.n * o.d_qk()));
  o.kv.resize(static_cast<size_t>(S * o.n * (o.d_n + o.d_v)));
  o.k_pe.resize(static_cast<size_t>(S * o.d_r));
  return o;
}

}  // namespace

Operands operands_from_states(const AttentionConfig& cfg, const ForwardResult& r) {
  Operands o = shaped(cfg, r.query_states.dim(1));
  const int64_t S = o.S, n = o.n, d_qk = o.d_qk(), d_kv = o.d_n + o.d_v;
  for (int64_t h = 0; h < n; ++h) {
    for (int64_t s = 0; s < S; ++s) {
      const double* q = r.query_states.ptr() + (h * S + s) * d_qk;
      const double* k = r.key_states.ptr() + (h * S + s) * d_qk;
      const double* v = r.value_states.ptr() + (h * S + s) * o.d_v;
      for (int64_t d = 0; d < d_qk; ++d) o.query[static_cast<size_t>(s * n * d_qk + h * d_qk + d)] = static_cast<float>(q[d]);
      for (int64_t d = 0; d < o.d_n; ++d) o.kv[static_cast<size_t>(s * n * d_kv + h * d_kv + d)] = static_cast<float>(k[d]);
      for (int64_t d = 0; d < o.d_v; ++d) o.kv[static_cast<size_t>(s * n * d_kv + h * d_kv + o.d_n + d)] = static_cast<float>(v[d]);
      if (h == 0) {
        for (int64_t d = 0; d < o.d_r; ++d) o.k_pe[static_cast<size_t>(s * o.d_r + d)] = static_cast<float>(k[o.d_n + d]);
      }
    }
  }
  return o;
}

Operands random_operands(const AttentionConfig& cfg, int64_t seq_len, bool bf16, uint64_t seed) {
  Operands o = shaped(cfg, seq_len);
  Rng rng(seed, 7);
  auto draw = [&](std::vector<float>& v, double scale) {
    for (float& x : v) {
      x = static_cast<float>(scale * rng.normal());
      if (bf16) x = round_to_bf16(x);
    }
  };
  draw(o.query, 3.0);
  draw(o.kv, 1.0);
  draw(o.k_pe, 1.0);
  return o;
}

AttentionResult materialized_attention(const Operands& o, bool causal, float scaling, bool bf16, int threads) {
  const int64_t S = o.S, n = o.n, d_qk = o.d_qk(), d_kv = o.d_n + o.d_v;
  std::vector<float> context(static_cast<size_t>(S * n * o.d_v));
  std::vector<double> heads(static_cast<size_t>(n * S), 0.0);
  struct Worker {
    cpu::MatrixRM key, value, probs;  // [S, d_qk], [S, d_v], [S, S]
  };
  const int workers = std::max(1, threads);
  std::vector<Worker> ws(static_cast<size_t>(workers));
  cpu::BlasThreads one_blas_thread_per_worker(1);
  cpu::parallel_for(n, workers, [&](int64_t h, int worker) {
    Worker& w = ws[static_cast<size_t>(worker)];
    w.key.resize(S, d_qk);
    w.value.resize(S, o.d_v);
    w.probs.setZero(S, S);
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t d = 0; d < o.d_n; ++d) w.key(s, d) = o.kv[static_cast<size_t>(s * n * d_kv + h * d_kv + d)];
      for (int64_t d = 0; d < o.d_r; ++d) w.key(s, o.d_n + d) = o.k_pe[static_cast<size_t>(s * o.d_r + d)];
      for (int64_t d = 0; d < o.d_v; ++d) w.value(s, d) = o.kv[static_cast<size_t>(s * n * d_kv + h * d_kv + o.d_n + d)];
    }
    const cpu::HeadViews views{o.query.data() + h * d_qk, n * d_qk, w.key.data(), d_qk, w.value.data(), o.d_v};
    for (int64_t r = 0; r < S; r += cpu::kQueryRowBlock) {
      const int64_t rows = std::min(cpu::kQueryRowBlock, S - r);
      const cpu::RowBlock b{r, rows, causal ? r + rows : S};
      cpu::block_scores_softmax(views, d_qk, b, causal, scaling, precision_of(bf16), w.probs.data() + r * S, S);
    }
    const cpu::RowBlock all{0, S, S};
    cpu::block_probs_value(views, w.probs.data(), S, all, o.d_v, precision_of(bf16), context.data() + h * o.d_v,
                           n * o.d_v);
    cpu::block_column_sums(w.probs.data(), S, all, causal, heads.data() + h * S);
  });
  return {std::vector<double>(context.begin(), context.end()), heads, token_scores_of(heads, n, S)};
}

AttentionResult tiled_attention(const Operands& o, bool causal, float scaling, bool bf16, int threads,
                                   const cpu::BlockProgress& progress, Gemm products) {
  const int64_t S = o.S, n = o.n;
  cpu::KeyValueStates states(S, n, o.d_n, o.d_r, o.d_v, precision_of(bf16));
  states.set_kv_rows(0, S, o.kv.data(), n * (o.d_n + o.d_v));
  states.set_k_pe_rows(0, S, o.k_pe.data(), o.d_r);
  std::vector<float> context(static_cast<size_t>(S * n * o.d_v), -1.0f);
  std::vector<double> heads(static_cast<size_t>(n * S), -1.0);
  cpu::tiled_attention(o.query.data(), n * o.d_qk(), states, causal, scaling, precision_of(bf16), threads, products,
                           progress,
                           {context.data(), n * o.d_v, heads.data()});
  return {std::vector<double>(context.begin(), context.end()), heads, token_scores_of(heads, n, S)};
}

}  // namespace mla::test
