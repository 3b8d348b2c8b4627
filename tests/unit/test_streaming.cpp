// tests/unit/test_streaming.cpp — suite streaming: the cpu backend's streamed attention
// (src/cpu/streaming_attention.hpp: no [n, S, S] tensor, keys/values in the run's precision)
// against the materialized computation (each head's whole [S, S] probability matrix, then
// P.V and its column sums over the whole matrix, as the backend computed it before).
//
// For every small geometry of geometries.hpp, both masks, fp32 and bf16, and S = 1, 64, 65 and
// 333 (below, at and across the 64-row query blocks; 333 is no multiple of 64), plus S = 2048
// on the tiny geometry and S = 70 on the Kimi geometry (two blocks, the second of 6 rows):
//   1. the cpu backend runs the layer with keep_states, without and with keep_attn_weights
//      (the probabilities copied out for a dump): attn_output and the scores must be equal;
//      the states are the real operands (query/key/value_states after rope, HF layout
//      [n, S, d]; bf16 values in bf16 mode);
//   2. the materialized path and streaming_attention run on those operands;
//   3. attn_context [S, n*d_v], head_scores [n*S] and token_scores [S] are compared with the
//      "streaming-vs-materialized" rows of tolerances.hpp (exact: same operations, same order),
//      and the H2O decisions (overall and per head) must be identical;
//   4. the materialized head_scores equal the backend's own (this test rebuilds its operands
//      the way the backend holds them).
// Also: the keys/values of a bf16 run take half the bytes of an fp32 run's; progress is
// reported once per (head, block), in order, ending at the total.
//
// Shape legend: S = tokens, n = heads, d_n / d_r / d_v / d_qk = nope / rope / value / qk head dims.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <map>
#include <tuple>
#include <string>
#include <vector>

#include "compare.hpp"
#include "geometries.hpp"
#include "mla/attention.hpp"
#include "mla/h2o.hpp"
#include "mla/rope.hpp"
#include "src/cpu/streaming_attention.hpp"
#include "tolerances.hpp"

namespace {

using mla::Mask;
using mla::Precision;

// The attention operands in the cpu backend's layouts, rebuilt from HF-layout states.
struct Operands {
  int64_t S = 0, n = 0, d_n = 0, d_r = 0, d_v = 0;
  std::vector<float> query;  // [S, n*d_qk]      head h at column h*d_qk (q_nope | q_rot roped)
  std::vector<float> kv;     // [S, n*(d_n+d_v)] head h at column h*(d_n+d_v) (k_nope | value)
  std::vector<float> k_pe;   // [S, d_r]         roped, shared by every head
  int64_t d_qk() const { return d_n + d_r; }
};

Operands operands_from_states(const mla::AttentionConfig& cfg, const mla::ForwardResult& r) {
  Operands o;
  o.S = r.query_states.dim(1);
  o.n = cfg.num_attention_heads;
  o.d_n = cfg.qk_nope_head_dim;
  o.d_r = cfg.qk_rope_head_dim;
  o.d_v = cfg.v_head_dim;
  const int64_t S = o.S, n = o.n, d_qk = o.d_qk(), d_kv = o.d_n + o.d_v;
  o.query.resize(static_cast<size_t>(S * n * d_qk));
  o.kv.resize(static_cast<size_t>(S * n * d_kv));
  o.k_pe.resize(static_cast<size_t>(S * o.d_r));
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

struct AttentionResult {
  std::vector<double> attn_context;  // [S, n*d_v]
  std::vector<double> head_scores;   // [n*S]
  std::vector<double> token_scores;  // [S]
};

std::vector<double> token_scores_of(const std::vector<double>& head_scores, int64_t n, int64_t S) {
  std::vector<double> t(static_cast<size_t>(S), 0.0);
  for (int64_t h = 0; h < n; ++h)
    for (int64_t s = 0; s < S; ++s) t[static_cast<size_t>(s)] += head_scores[static_cast<size_t>(h * S + s)];
  return t;
}

// The materialized computation (the cpu backend's path before streaming): per head the whole
// [S, S] probability matrix, filled block by block (masked and skipped entries 0), then P.V
// and the column sums over all of it. Keys/values widened to contiguous fp32 as the streamed
// path does, so both hand the GEMMs the same operands.
AttentionResult materialized(const Operands& o, bool causal, float scaling, bool bf16) {
  const int64_t S = o.S, n = o.n, d_qk = o.d_qk(), d_kv = o.d_n + o.d_v;
  std::vector<float> context(static_cast<size_t>(S * n * o.d_v));
  std::vector<double> heads(static_cast<size_t>(n * S), 0.0);
  mla::cpu::MatrixRM key(S, d_qk), value(S, o.d_v), probs(S, S);
  for (int64_t h = 0; h < n; ++h) {
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t d = 0; d < o.d_n; ++d) key(s, d) = o.kv[static_cast<size_t>(s * n * d_kv + h * d_kv + d)];
      for (int64_t d = 0; d < o.d_r; ++d) key(s, o.d_n + d) = o.k_pe[static_cast<size_t>(s * o.d_r + d)];
      for (int64_t d = 0; d < o.d_v; ++d) value(s, d) = o.kv[static_cast<size_t>(s * n * d_kv + h * d_kv + o.d_n + d)];
    }
    const mla::cpu::HeadViews views{o.query.data() + h * d_qk, n * d_qk, key.data(), d_qk, value.data(), o.d_v};
    probs.setZero();
    for (int64_t r = 0; r < S; r += mla::cpu::kQueryRowBlock) {
      const int64_t rows = std::min(mla::cpu::kQueryRowBlock, S - r);
      const mla::cpu::RowBlock b{r, rows, causal ? r + rows : S};
      mla::cpu::block_scores_softmax(views, d_qk, b, causal, scaling, bf16, probs.data() + r * S, S);
    }
    const mla::cpu::RowBlock all{0, S, S};
    mla::cpu::block_probs_value(views, probs.data(), S, all, o.d_v, bf16, context.data() + h * o.d_v, n * o.d_v);
    mla::cpu::block_column_sums(probs.data(), S, all, causal, heads.data() + h * S);
  }
  return {std::vector<double>(context.begin(), context.end()), heads, token_scores_of(heads, n, S)};
}

AttentionResult streamed(const Operands& o, bool causal, float scaling, bool bf16, int threads,
                         const mla::cpu::BlockProgress& progress = {}) {
  const int64_t S = o.S, n = o.n;
  mla::cpu::KeyValueStates states(S, n, o.d_n, o.d_r, o.d_v, bf16);
  states.set_kv_rows(0, S, o.kv.data(), n * (o.d_n + o.d_v));
  states.set_k_pe_rows(0, S, o.k_pe.data(), o.d_r);
  std::vector<float> context(static_cast<size_t>(S * n * o.d_v), -1.0f);
  std::vector<double> heads(static_cast<size_t>(n * S), -1.0);
  mla::cpu::streaming_attention(o.query.data(), n * o.d_qk(), states, causal, scaling, bf16, threads, progress,
                                {context.data(), n * o.d_v, heads.data()});
  return {std::vector<double>(context.begin(), context.end()), heads, token_scores_of(heads, n, S)};
}

std::string letters(const mla::H2ODecision& d) {
  std::string s;
  for (const auto c : d.category) s += mla::category_name(c)[0];
  return s;
}

// The seeded layer of a geometry, drawn once per test process (Kimi's takes seconds).
const mla::LayerWeights& layer(const std::string& geometry) {
  static std::map<std::string, mla::LayerWeights> cache;
  auto it = cache.find(geometry);
  if (it == cache.end()) it = cache.emplace(geometry, mla::test::random_layer_weights(mla::test::geometry(geometry), 4321)).first;
  return it->second;
}

void run_case(const std::string& geometry, int64_t S, Mask mask, Precision precision) {
  const std::string vars = geometry + " S=" + std::to_string(S) + " mask=" + mla::mask_name(mask) +
                           " precision=" + mla::precision_name(precision);
  const mla::AttentionConfig cfg = mla::test::geometry(geometry);
  const mla::LayerWeights& w = layer(geometry);
  const mla::TensorF hidden = mla::test::random_hidden(S, cfg.hidden_size, 7 + static_cast<uint64_t>(S));
  mla::ForwardOptions opt;
  opt.mask = mask;
  opt.precision = precision;
  opt.keep_states = true;
  opt.position_offset = 2;
  auto cpu = mla::make_cpu_backend();
  cpu->prepare(cfg, w, opt);
  const mla::ForwardResult fr = cpu->forward(hidden, opt);  // no attn_weights asked
  opt.keep_attn_weights = true;
  const mla::ForwardResult fm = cpu->forward(hidden, opt);  // attn_weights kept, as for --dump-tensors
  const std::string p = mla::precision_name(precision);

  // the backend's two paths: same output and scores
  for (const auto& [what, ref, got] : {std::tuple{"attn_output", &fm.attn_output.data, &fr.attn_output.data},
                                       std::tuple{"head_scores", &fm.head_scores, &fr.head_scores},
                                       std::tuple{"token_scores", &fm.token_scores, &fr.token_scores}}) {
    const auto r = mla::test::compare(what, *ref, *got, mla::test::tolerance(what, "streaming-vs-materialized", p));
    BOOST_TEST(r.ok, vars << " (cpu backend): " << r.message);
  }
  BOOST_TEST(fr.attn_weights.empty(), vars);

  const Operands o = operands_from_states(cfg, fr);
  const bool causal = mask == Mask::Causal, bf16 = precision == Precision::BF16;
  const float scaling = static_cast<float>(mla::softmax_scale(cfg));
  const AttentionResult m = materialized(o, causal, scaling, bf16);
  const AttentionResult s = streamed(o, causal, scaling, bf16, 2);

  // the rebuilt operands are the backend's: its head scores are the rebuilt ones
  const auto& exact = mla::test::tolerance("head_scores", "streaming-vs-materialized", p);
  const auto same = mla::test::compare("head_scores", fm.head_scores, m.head_scores, exact);
  BOOST_TEST(same.ok, vars << " (backend vs rebuilt materialized): " << same.message);

  for (const auto& [what, ref, got] : {std::tuple{"attn_context", &m.attn_context, &s.attn_context},
                                       std::tuple{"head_scores", &m.head_scores, &s.head_scores},
                                       std::tuple{"token_scores", &m.token_scores, &s.token_scores}}) {
    const auto& tol = mla::test::tolerance(what, "streaming-vs-materialized", p);
    const auto r = mla::test::compare(what, *ref, *got, tol);
    BOOST_TEST(r.ok, vars << ": " << r.message);
  }
  const mla::H2OOptions h2o{4, std::min<int64_t>(32, S / 4), std::max<int64_t>(1, S / 4)};
  BOOST_TEST(letters(mla::h2o_select(m.token_scores, h2o)) == letters(mla::h2o_select(s.token_scores, h2o)), vars);
  const auto mh = mla::h2o_select_per_head(m.head_scores, o.n, h2o), sh = mla::h2o_select_per_head(s.head_scores, o.n, h2o);
  for (int64_t h = 0; h < o.n; ++h)
    BOOST_TEST(letters(mh[static_cast<size_t>(h)]) == letters(sh[static_cast<size_t>(h)]), vars << " head " << h);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(streaming)

BOOST_AUTO_TEST_CASE(small_geometries_match_materialized) {
  for (const auto& g : mla::test::small_geometries())
    for (const int64_t S : {1, 64, 65, 333})
      for (const Mask mask : {Mask::Causal, Mask::None})
        for (const Precision p : {Precision::FP32, Precision::BF16}) run_case(g.name, S, mask, p);
}

BOOST_AUTO_TEST_CASE(long_sequence_matches_materialized) {
  for (const Mask mask : {Mask::Causal, Mask::None})
    for (const Precision p : {Precision::FP32, Precision::BF16}) run_case("tiny", 2048, mask, p);
}

BOOST_AUTO_TEST_CASE(kimi_geometry_matches_materialized) {
  for (const int64_t S : {70})
    for (const Mask mask : {Mask::Causal, Mask::None})
      for (const Precision p : {Precision::FP32, Precision::BF16}) run_case("kimi", S, mask, p);
}

BOOST_AUTO_TEST_CASE(bf16_states_take_half_the_bytes) {
  const mla::cpu::KeyValueStates f32(100, 3, 12, 6, 10, false), b16(100, 3, 12, 6, 10, true);
  BOOST_TEST(f32.bytes() == (3 * (12 + 10) + 6) * 100 * 4);
  BOOST_TEST(b16.bytes() * 2 == f32.bytes());
}

BOOST_AUTO_TEST_CASE(progress_counts_every_block_in_order) {
  const mla::AttentionConfig cfg = mla::test::geometry("odd");  // 3 heads
  Operands o;
  o.S = 150;  // 3 blocks of 64 rows per head
  o.n = cfg.num_attention_heads;
  o.d_n = cfg.qk_nope_head_dim;
  o.d_r = cfg.qk_rope_head_dim;
  o.d_v = cfg.v_head_dim;
  o.query.assign(static_cast<size_t>(o.S * o.n * o.d_qk()), 0.25f);
  o.kv.assign(static_cast<size_t>(o.S * o.n * (o.d_n + o.d_v)), 0.5f);
  o.k_pe.assign(static_cast<size_t>(o.S * o.d_r), 0.125f);
  std::vector<int64_t> seen;
  int64_t total_seen = 0;
  streamed(o, true, 0.1f, false, 2, [&](int64_t done, int64_t total) {
    seen.push_back(done);
    total_seen = total;
  });
  BOOST_TEST(mla::cpu::streaming_blocks(o.S, o.n) == 9);
  BOOST_TEST(total_seen == 9);
  BOOST_TEST_REQUIRE(seen.size() == 9u);
  for (size_t i = 0; i < seen.size(); ++i) BOOST_TEST(seen[i] == static_cast<int64_t>(i + 1));
}

BOOST_AUTO_TEST_SUITE_END()
