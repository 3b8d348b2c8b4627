// tests/unit/test_tiled_attention.cpp — suite tiled: the cpu backend's tiled attention
// (src/cpu/tiled_attention.hpp: no [n, S, S] tensor, keys/values in the run's precision)
// against the materialized computation (each head's whole [S, S] probability matrix, then
// P.V and its column sums over the whole matrix, as the backend computed it before).
//
// For every small geometry of geometries.hpp, both masks, fp32 and bf16, and S = 1, 64, 65 and
// 333 (below, at and across the 64-row query blocks; 333 is no multiple of 64), plus S = 2048
// on the tiny geometry and S = 70, causal, on the Kimi geometry (two blocks, the second of 6 rows):
//   1. the cpu backend runs the layer with keep_states, without and with keep_attn_weights
//      (the probabilities copied out for a dump): attn_output and the scores must be equal;
//      the states are the real operands (query/key/value_states after rope, HF layout
//      [n, S, d]; bf16 values in bf16 mode);
//   2. the materialized path and tiled_attention run on those operands;
//   3. attn_context [S, n*d_v], head_scores [n*S] and token_scores [S] are compared with the
//      "streaming-vs-materialized" rows of tolerances.hpp (exact: same operations, same order),
//      and the H2O decisions (overall and per head) must be identical;
//   4. the materialized head_scores equal the backend's own (this test rebuilds its operands
//      the way the backend holds them).
// Steps 1-4 run for every GEMM engine of the build (test_util.hpp gemm_engines). With oneDNN
// the backend's per-head products run on oneDNN matmul primitives (src/cpu/onednn_attention.hpp):
// step 2 streams the rebuilt operands through the same oneDNN products, whose head_scores must
// equal the backend's bit for bit (so the backend ran them), and steps 3-4 use the
// "onednn-streaming-vs-materialized" rows (only the summation order of the two products differs;
// the H2O decisions are not compared, a near-tie may flip).
// Also: the keys/values of a bf16 run take half the bytes of an fp32 run's; progress is
// reported once per (head, block) in query·key pairs, increasing, ending at the total.
//
// Shape legend: S = tokens, n = heads, d_n / d_r / d_v / d_qk = nope / rope / value / qk head dims.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <map>
#include <tuple>
#include <string>
#include <vector>

#include "attention_paths.hpp"
#include "compare.hpp"
#include "geometries.hpp"
#include "mla/attention.hpp"
#include "mla/h2o_selector.hpp"
#include "mla/rope.hpp"
#include "src/cpu/onednn_attention.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

namespace {

using mla::Mask;
using mla::Precision;

using mla::test::AttentionResult;
using mla::test::Operands;

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

// One engine of the build: the cpu backend prepared for `gemm`, its attention products on the
// same engine (oneDNN when the backend's projections run on oneDNN), against the materialized
// Eigen computation on the backend's own operands.
void run_engine(const std::string& vars, const mla::AttentionConfig& cfg, const mla::LayerWeights& w,
                const mla::TensorF& hidden, mla::ForwardOptions opt, mla::Gemm gemm) {
  opt.gemm = gemm;
  opt.keep_attn_weights = false;
  auto cpu = mla::make_cpu_backend();
  cpu->prepare(cfg, w, opt);
  const mla::ForwardResult fr = cpu->forward(hidden, opt);  // no attn_weights asked
  opt.keep_attn_weights = true;
  const mla::ForwardResult fm = cpu->forward(hidden, opt);  // attn_weights kept, as for --dump-tensors
  const std::string p = mla::precision_name(opt.precision);
  const mla::Gemm products = cpu->gemm_info().attention_products;
  const bool onednn = products == mla::Gemm::OneDnn;
  // Eigen products: exact against the materialized computation; oneDNN: another summation order
  const std::string pair = onednn ? "onednn-streaming-vs-materialized" : "streaming-vs-materialized";

  // the backend's two paths: same output and scores
  for (const auto& [what, ref, got] : {std::tuple{"attn_output", &fm.attn_output.data, &fr.attn_output.data},
                                       std::tuple{"head_scores", &fm.head_scores, &fr.head_scores},
                                       std::tuple{"token_scores", &fm.token_scores, &fr.token_scores}}) {
    const auto r = mla::test::compare(what, *ref, *got, mla::test::tolerance(what, "streaming-vs-materialized", p));
    BOOST_TEST(r.ok, vars << " (cpu backend): " << r.message);
  }
  BOOST_TEST(fr.attn_weights.empty(), vars);

  const Operands o = mla::test::operands_from_states(cfg, fr);
  const bool causal = opt.mask == Mask::Causal, bf16 = opt.precision == Precision::BF16;
  const float scaling = static_cast<float>(mla::softmax_scale(cfg));
  const AttentionResult m = mla::test::materialized_attention(o, causal, scaling, bf16, 2);
  const AttentionResult s = mla::test::tiled_attention(o, causal, scaling, bf16, 2, {}, products);

  // the rebuilt operands are the backend's, and the backend ran `products`: its head scores are
  // the rebuilt streamed ones, bit for bit
  const auto& exact = mla::test::tolerance("head_scores", "backend-vs-rebuilt-streamed", p);
  const auto own = mla::test::compare("head_scores", fm.head_scores, s.head_scores, exact);
  BOOST_TEST(own.ok, vars << " (backend vs rebuilt streamed): " << own.message);
  const auto same = mla::test::compare("head_scores", fm.head_scores, m.head_scores,
                                       mla::test::tolerance("head_scores", pair, p));
  BOOST_TEST(same.ok, vars << " (backend vs rebuilt materialized): " << same.message);

  for (const auto& [what, ref, got] : {std::tuple{"attn_context", &m.attn_context, &s.attn_context},
                                       std::tuple{"head_scores", &m.head_scores, &s.head_scores},
                                       std::tuple{"token_scores", &m.token_scores, &s.token_scores}}) {
    const auto& tol = mla::test::tolerance(what, pair, p);
    const auto r = mla::test::compare(what, *ref, *got, tol);
    BOOST_TEST(r.ok, vars << ": " << r.message);
    if (onednn)
      BOOST_TEST_MESSAGE(vars << " " << what << " oneDNN vs materialized: max abs " << r.max_abs << ", max rel "
                              << r.max_rel << ", norm error " << r.norm_error << ", cosine " << r.cosine);
  }
  if (onednn) return;  // decisions are compared where the scores are identical
  const int64_t S = o.S;
  const mla::H2OOptions h2o{4, std::min<int64_t>(32, S / 4), std::max<int64_t>(1, S / 4)};
  BOOST_TEST(letters(mla::h2o_select(m.token_scores, h2o)) == letters(mla::h2o_select(s.token_scores, h2o)), vars);
  const auto mh = mla::h2o_select_per_head(m.head_scores, o.n, h2o), sh = mla::h2o_select_per_head(s.head_scores, o.n, h2o);
  for (int64_t h = 0; h < o.n; ++h)
    BOOST_TEST(letters(mh[static_cast<size_t>(h)]) == letters(sh[static_cast<size_t>(h)]), vars << " head " << h);
}

void run_case(const std::string& geometry, int64_t S, Mask mask, Precision precision) {
  const mla::AttentionConfig cfg = mla::test::geometry(geometry);
  const mla::LayerWeights& w = layer(geometry);
  const mla::TensorF hidden = mla::test::random_hidden(S, cfg.hidden_size, 7 + static_cast<uint64_t>(S));
  mla::ForwardOptions opt;
  opt.mask = mask;
  opt.precision = precision;
  opt.keep_states = true;
  opt.position_offset = 2;
  for (const mla::Gemm gemm : mla::test::gemm_engines()) {
    const std::string vars = geometry + " S=" + std::to_string(S) + " mask=" + mla::mask_name(mask) +
                             " precision=" + mla::precision_name(precision) + " gemm=" + mla::gemm_name(gemm);
    run_engine(vars, cfg, w, hidden, opt, gemm);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tiled)

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
  for (const Precision p : {Precision::FP32, Precision::BF16}) run_case("kimi", 70, Mask::Causal, p);
}

// S = 8525: the backend's forward runs its projections in three row chunks and its attention in
// three query passes (eigen_backend.cpp: 4096 rows each), adding each head's mass across the
// passes. The head scores must be those of one streamed call over all rows on the states the
// forward exports (the materialized check needs [S, S] per head: too big for a unit test).
BOOST_AUTO_TEST_CASE(query_passes_add_up_to_one_call) {
  struct Case {
    std::string geometry;
    Mask mask;
    Precision precision;
    mla::Gemm gemm;
  };
  const mla::Gemm last = mla::test::gemm_engines().back();  // oneDNN when built with it
  const std::vector<Case> cases = {{"odd", Mask::Causal, Precision::BF16, last},
                                   {"odd", Mask::Causal, Precision::FP32, last},
                                   {"odd", Mask::None, Precision::BF16, last},
                                   {"odd", Mask::Causal, Precision::BF16, mla::Gemm::Eigen},
                                   {"q_lora_null", Mask::Causal, Precision::FP32, mla::Gemm::Eigen}};
  const int64_t S = 2 * 4096 + 333;
  for (const Case& k : cases) {
    const mla::AttentionConfig cfg = mla::test::geometry(k.geometry);
    const mla::TensorF hidden = mla::test::random_hidden(S, cfg.hidden_size, 99);
    mla::ForwardOptions opt;
    opt.mask = k.mask;
    opt.precision = k.precision;
    opt.keep_states = true;
    opt.gemm = k.gemm;
    opt.threads = 2;
    auto cpu = mla::make_cpu_backend();
    cpu->prepare(cfg, layer(k.geometry), opt);
    const mla::ForwardResult r = cpu->forward(hidden, opt);
    const Operands o = mla::test::operands_from_states(cfg, r);
    const bool bf16 = k.precision == Precision::BF16;
    const AttentionResult one =
        mla::test::tiled_attention(o, k.mask == Mask::Causal, static_cast<float>(mla::softmax_scale(cfg)), bf16, 2, {},
                                      cpu->gemm_info().attention_products);
    const std::string vars = k.geometry + " mask=" + mla::mask_name(k.mask) + " precision=" +
                             mla::precision_name(k.precision) + " gemm=" + mla::gemm_name(k.gemm);
    const auto& exact = mla::test::tolerance("head_scores", "backend-vs-rebuilt-streamed", mla::precision_name(k.precision));
    const auto c = mla::test::compare("head_scores", r.head_scores, one.head_scores, exact);
    BOOST_TEST(c.ok, vars << ": " << c.message);
  }
}

// A causal run on 2 threads with --gemm onednn.
mla::ForwardOptions causal_onednn_options(Precision precision) {
  mla::ForwardOptions opt;
  opt.mask = Mask::Causal;
  opt.precision = precision;
  opt.gemm = mla::Gemm::OneDnn;
  opt.threads = 2;
  return opt;
}

// The cpu backend prepared for `opt` on the seeded layer of `geometry`, or null (with a message)
// when the attention's products do not run on oneDNN in this precision here (bf16 on an
// AVX2-only CPU: oneDNN has no bf16 matmul; bf16 values go through its fp32 kernel for the
// projections and through Eigen for the products).
std::unique_ptr<mla::Backend> onednn_backend(const std::string& geometry, const mla::ForwardOptions& opt) {
  auto cpu = mla::make_cpu_backend();
  cpu->prepare(mla::test::geometry(geometry), layer(geometry), opt);
  if (cpu->gemm_info().attention_products == mla::Gemm::OneDnn) return cpu;
  BOOST_TEST_MESSAGE(mla::precision_name(opt.precision) << ": the products do not run on oneDNN here ("
                                                        << cpu->gemm_info().reason << "): nothing to count");
  return nullptr;
}

// The memory plan counts the attention's oneDNN primitives from onednn_attention_shapes (each
// one's JIT code is resident for the process: src/cpu/cpu_memory.cpp); a causal forward across
// three query passes and a short last block must ask the primitive cache for exactly those
// shapes, and a forward without the mask for a subset of them.
BOOST_AUTO_TEST_CASE(plan_counts_the_primitives_a_forward_creates) {
  if (mla::test::gemm_engines().back() != mla::Gemm::OneDnn) {
    BOOST_TEST_MESSAGE("no oneDNN engine in this build: nothing to count");
    return;
  }
  const int64_t S = 2 * 4096 + 333;
  for (const Precision precision : {Precision::BF16, Precision::FP32}) {
    const mla::AttentionConfig cfg = mla::test::geometry("odd");
    mla::ForwardOptions opt = causal_onednn_options(precision);
    const auto cpu = onednn_backend("odd", opt);
    if (!cpu) continue;
    mla::cpu::onednn_attention_shape_log(true);
    const mla::TensorF hidden = mla::test::random_hidden(S, cfg.hidden_size, 7);
    cpu->forward(hidden, opt);
    const auto asked = mla::cpu::onednn_attention_shape_log(true);
    const int64_t d_qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim;
    const auto planned = mla::cpu::onednn_attention_shapes(S, d_qk, cfg.v_head_dim);
    BOOST_TEST(asked.size() == planned.size(), mla::precision_name(precision));
    BOOST_TEST((asked == planned), mla::precision_name(precision) << ": the forward asked for other shapes than planned");
    BOOST_TEST(mla::cpu::onednn_attention_primitives(S, d_qk, cfg.v_head_dim) - static_cast<int64_t>(planned.size()) <= 1);
    opt.mask = Mask::None;
    cpu->forward(hidden, opt);
    for (const auto& shape : mla::cpu::onednn_attention_shape_log(true))  // a subset: the plan is the worst case
      BOOST_TEST(planned.count(shape) == 1u, "unplanned shape without the mask: [" << shape.rows << ", " << shape.k
                                                                                   << "] x [" << shape.k << ", " << shape.n << "]");
  }
}

// The oneDNN products read each block's keys and values as the leading part of the head's packed
// operands (docs/cpu-gemm.md §9), so a forward never reorders per block, whatever kernel oneDNN
// runs on this CPU (scripts/test runs the suite under each ONEDNN_MAX_CPU_ISA the CPU has): the
// tiny geometry (2 heads), causal, S = 4096 + 333: 70 blocks per head in two query passes. The
// counts come through the backend's report (GemmInfo::reorders), and the packing of the heads'
// operands is counted as well, once per head, pass and operand, so the counter is live.
BOOST_AUTO_TEST_CASE(onednn_products_never_reorder_per_block) {
  if (mla::test::gemm_engines().back() != mla::Gemm::OneDnn) {
    BOOST_TEST_MESSAGE("no oneDNN engine in this build: nothing to count");
    return;
  }
  const mla::AttentionConfig cfg = mla::test::geometry("tiny");
  const int64_t S = 4096 + 333, passes = 2, value_groups = (cfg.v_head_dim + 63) / 64;
  const mla::TensorF hidden = mla::test::random_hidden(S, cfg.hidden_size, 5);
  int ran = 0;
  for (const Precision precision : {Precision::BF16, Precision::FP32}) {
    const mla::ForwardOptions opt = causal_onednn_options(precision);
    const auto cpu = onednn_backend("tiny", opt);
    if (!cpu) continue;
    ++ran;
    cpu->forward(hidden, opt);
    const mla::OnednnReorders r = cpu->gemm_info().reorders;
    const std::string what = std::string(mla::precision_name(precision)) + " (" + cpu->gemm_info().kernel + ")";
    BOOST_TEST(r.per_block == 0, what << ": " << r.per_block << " blocks reordered their part of a packed operand");
    BOOST_TEST(r.weights == 0, what << ": " << r.weights << " projection slices packed by a oneDNN reorder");
    BOOST_TEST(r.head_operands == cfg.num_attention_heads * passes * (1 + value_groups), what);
  }
  BOOST_TEST(ran >= 1, "oneDNN has neither a bf16 nor an fp32 matmul on this CPU");
}

BOOST_AUTO_TEST_CASE(bf16_states_take_half_the_bytes) {
  const mla::cpu::KeyValueStates f32(100, 3, 12, 6, 10, mla::Precision::FP32), b16(100, 3, 12, 6, 10, mla::Precision::BF16);
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
  mla::test::tiled_attention(o, true, 0.1f, false, 2, [&](int64_t done, int64_t total) {
    seen.push_back(done);
    total_seen = total;
  });
  // per head: rows 0-63 see 64 keys, rows 64-127 see 128, rows 128-149 see 150
  const int64_t pairs = 3 * (64 * 64 + 64 * 128 + 22 * 150);
  BOOST_TEST(mla::cpu::tiled_pairs(o.S, o.n, true) == pairs);
  BOOST_TEST(mla::cpu::tiled_pairs(o.S, o.n, false) == 3 * 150 * 150);
  BOOST_TEST(total_seen == pairs);
  BOOST_TEST_REQUIRE(seen.size() == 9u);  // one report per (head, block)
  for (size_t i = 1; i < seen.size(); ++i) BOOST_TEST(seen[i] > seen[i - 1]);
  BOOST_TEST(seen.back() == pairs);
}

BOOST_AUTO_TEST_SUITE_END()
