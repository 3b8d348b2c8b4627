// tests/unit/test_decode.cpp — suite decode: decode-time eviction on the MLA latent cache
// (include/mla/decode.hpp, docs/decode.md).
//
//   1. The policies on a 6-token example (P = 4 prompt tokens, N = 2 steps, K = 3, 1 sink,
//      recent 1) driven by a hand-made kernel whose attention weights are a table: every
//      expected prefill cut, eviction, attended cache, mass_recall and rel_error below is
//      worked out by hand in the comments, not taken from the code under test.
//   2. Invariants of every policy at every step on a real (tiny) layer: cache sizes, sinks and
//      recent window never evicted, an evicted token never comes back, mass_recall = 1 and
//      rel_error = 0 when nothing is evicted.
//   3. Numerics: the latent cache export; full-cache decode rows = the causal prefill rows;
//      absorbed = naive; the cpu decode kernel = the reference decode kernel (fp32, bf16).
//   4. The CLI: outputs exist and parse, every bad input is one error line.
//
// Shape legend: T = P + N rows, n heads, H hidden, r_kv kv_lora_rank, d_r qk_rope_head_dim.
#include <simdjson.h>

#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "compare.hpp"
#include "geometries.hpp"
#include "mla/attention.hpp"
#include "mla/decode.hpp"
#include "mla/random.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

namespace {

using namespace mla;
using mla::test::compare;
using mla::test::run_cli;
using mla::test::RunResult;
using mla::test::scratch_dir;
using mla::test::tiny_checkpoint;
using mla::test::tolerance;
using Positions = std::vector<int64_t>;

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// ---- 1. the hand-made kernel -----------------------------------------------------------

// One head. Query row x gives token t the weight W[x][t] > 0; attention over a cache S is
// p_t = W[x][t] / sum_{s in S} W[x][s] (the softmax of logits log W). The value of token t
// is the one-hot vector e_t in R^6, so a step's output row is p itself, spread by position.
const std::vector<std::vector<double>> kW = {
    {1},                 // query 0 (unused)
    {1, 1},              // query 1 (unused)
    {1, 1, 2},           // query 2
    {4, 1, 2, 1},        // query 3 (the last prompt query)
    {2, 3, 1, 1, 1},     // query 4 = decode step 0
    {1, 2, 1, 3, 1, 2},  // query 5 = decode step 1
};

class TableKernel final : public DecodeKernel {
 public:
  explicit TableKernel(int64_t slots) : rows_(slots, std::vector<double>(2 * 6, 0.0)) {}
  int64_t heads() const override { return 1; }
  void begin_query(int64_t x) override { x_ = x; }
  void attend(std::span<const int64_t> cache, std::vector<double>& probs, int64_t slot, int64_t row) override {
    std::vector<double> logits;
    for (int64_t t : cache) logits.push_back(std::log(kW[static_cast<size_t>(x_)][static_cast<size_t>(t)]));
    const double max = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (double l : logits) sum += std::exp(l - max);
    probs.clear();
    for (double l : logits) probs.push_back(std::exp(l - max) / sum);
    if (slot < 0) return;
    for (size_t j = 0; j < cache.size(); ++j)
      rows_[static_cast<size_t>(slot)][static_cast<size_t>(row * 6 + cache[j])] = probs[j];
  }
  TensorD outputs(int64_t slot) override {
    TensorD t("attn_output", {2, 6});
    t.data = rows_[static_cast<size_t>(slot)];
    return t;
  }

 private:
  int64_t x_ = 0;
  std::vector<std::vector<double>> rows_;
};

DecodeOptions six_token_options(Policy p) {
  DecodeOptions o;
  o.prompt_len = 4;
  o.steps = 2;
  o.budgets = {3};
  o.policies = {Policy::Full, p};
  o.sinks = 1;
  o.recent = 1;
  o.snapkv_window = 2;
  o.snapkv_pool = 3;
  o.seed = 11;
  return o;
}

// H2O prefill scores (mass each prompt token received in the causal prefill), given by hand.
const PrefillView kPrefill{4, {2.0, 0.5, 0.9, 0.6}};

struct Expected {
  Positions prefill_kept;
  Positions attended0, attended1;
  int64_t evicted0, evicted1;
};

const PolicyTrace& run_six(Policy p, DecodeResult& keep) {
  TableKernel k(decode_slots(six_token_options(p)));
  keep = run_decode(six_token_options(p), kPrefill, k);
  BOOST_REQUIRE(keep.traces.size() == 2u);
  return keep.traces[1];
}

void check_six(Policy p, const Expected& e) {
  DecodeResult r;
  const PolicyTrace& t = run_six(p, r);
  BOOST_TEST_CONTEXT(policy_name(p)) {
    BOOST_TEST((t.policy == p));
    BOOST_TEST(t.prefill_kept == e.prefill_kept, boost::test_tools::per_element());
    BOOST_REQUIRE(t.attended.size() == 2u);
    BOOST_TEST(t.attended[0] == e.attended0, boost::test_tools::per_element());
    BOOST_TEST(t.attended[1] == e.attended1, boost::test_tools::per_element());
    BOOST_TEST(t.steps[0].evicted == e.evicted0);
    BOOST_TEST(t.steps[1].evicted == e.evicted1);
    BOOST_TEST(t.steps[0].position == 4);
    BOOST_TEST(t.steps[1].position == 5);
    BOOST_TEST(t.steps[0].cache_len == static_cast<int64_t>(e.attended0.size()));
    BOOST_TEST(t.steps[1].cache_len == static_cast<int64_t>(e.attended1.size()));
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(decode)

// full: nothing evicted; every query attends over 0..x.
BOOST_AUTO_TEST_CASE(six_tokens_full) {
  DecodeResult r;
  run_six(Policy::H2O, r);
  const PolicyTrace& f = r.traces[0];
  BOOST_TEST((f.policy == Policy::Full));
  BOOST_TEST(f.attended[0] == (Positions{0, 1, 2, 3, 4}), boost::test_tools::per_element());
  BOOST_TEST(f.attended[1] == (Positions{0, 1, 2, 3, 4, 5}), boost::test_tools::per_element());
  for (const DecodeStep& s : f.steps) {
    BOOST_TEST(s.evicted == -1);
    BOOST_TEST(s.rel_error == 0.0);
    BOOST_TEST(s.mass_recall == 1.0);
  }
}

// h2o. Prefill: sink 0, recent 3, middle {1, 2} keeps the larger score: 0.9 (token 2) > 0.5.
// Step 0 (x = 4): cache {0,2,3,4}, W[4] = 2,1,1,1 -> p = .4,.2,.2,.2; mass 0: 2.4, 2: 1.1,
// 3: 0.8, 4: 0.2. Evictable = positions in [1, x - 1] = {2, 3}: evict 3 (0.8 < 1.1).
// Step 1 (x = 5): cache {0,2,4,5}, W[5] = 1,1,1,2 -> p = .2,.2,.2,.4; mass 2: 1.3, 4: 0.4.
// Evictable {2, 4}: evict 4.
BOOST_AUTO_TEST_CASE(six_tokens_h2o) {
  check_six(Policy::H2O, {{0, 2, 3}, {0, 2, 3, 4}, {0, 2, 4, 5}, 3, 4});
  DecodeResult r;
  const PolicyTrace& t = run_six(Policy::H2O, r);
  // mass_recall at step 0: full p = W[4] / 8 = 2,3,1,1,1 /8; kept {0,2,3,4}: 5/8.
  BOOST_TEST(t.steps[0].mass_recall == 5.0 / 8.0, boost::test_tools::tolerance(1e-14));
  // rel_error at step 0: o_full = (2,3,1,1,1,0)/8, o = (.4,0,.2,.2,.2,0); ||o - o_full||^2 =
  // .15^2 + .375^2 + 3 * .075^2 = .18, ||o_full||^2 = 16/64 = .25 -> sqrt(.72).
  BOOST_TEST(t.steps[0].rel_error == std::sqrt(0.72), boost::test_tools::tolerance(1e-14));
  // cosine: <o, o_full> = (.8 + .2 + .2 + .2)/8 = .175; ||o|| = sqrt(.28) -> .175 / (sqrt(.28) * .5)
  BOOST_TEST(t.steps[0].cosine == 0.175 / (std::sqrt(0.28) * 0.5), boost::test_tools::tolerance(1e-14));
}

// h2o-normalized. Prefill scores / (P - t): 0.5, 0.5/3 = .167, 0.9/2 = .45, 0.6 -> keep 2.
// Step 0: the masses of h2o (2: 1.1, 3: 0.8) divided by the queries that saw them
// (x - t + 1): 1.1/3 = .367 < 0.8/2 = .4 -> evict 2 (h2o evicts 3 here).
// Step 1: cache {0,3,4,5}, W[5] = 1,3,1,2 -> p = 1/7, 3/7, 1/7, 2/7; 3: (0.8 + 3/7)/3 = .41,
// 4: (0.2 + 1/7)/2 = .17 -> evict 4.
BOOST_AUTO_TEST_CASE(six_tokens_h2o_normalized) {
  check_six(Policy::H2ONormalized, {{0, 2, 3}, {0, 2, 3, 4}, {0, 3, 4, 5}, 2, 4});
}

// tova. Prefill: the last prompt query's attention W[3] = 4,1,2,1 -> middle keeps 2.
// Step 0: p over {0,2,3,4} = .4,.2,.2,.2: tokens 2 and 3 tie at .2 -> the older, 2, goes.
// Step 1: {0,3,4,5}: p = 1/7, 3/7, 1/7, 2/7 over {0,3,4,5}: evictable {3, 4} -> 4.
BOOST_AUTO_TEST_CASE(six_tokens_tova) { check_six(Policy::Tova, {{0, 2, 3}, {0, 2, 3, 4}, {0, 3, 4, 5}, 2, 4}); }

// streaming: the newest prompt token of the middle stays (2); then the oldest evictable goes.
BOOST_AUTO_TEST_CASE(six_tokens_streaming) {
  check_six(Policy::Streaming, {{0, 2, 3}, {0, 2, 3, 4}, {0, 3, 4, 5}, 2, 3});
}

// snapkv (window 2, pool 3). Query 2: W = 1,1,2 -> .25,.25,.5; query 3: 4,1,2,1 -> .5,.125,
// .25,.125. Sum: .75, .375, .75, .125. Max-pooled over 3: every token gets .75, so the tie
// goes to the lower index (the selector's rule): 1 kept, 2 cut (without pooling 2 would stay).
// No eviction during decode: the cache grows.
BOOST_AUTO_TEST_CASE(six_tokens_snapkv) {
  check_six(Policy::SnapKV, {{0, 1, 3}, {0, 1, 3, 4}, {0, 1, 3, 4, 5}, -1, -1});
}

// oracle: no prefill cut; each step the K + 1 = 4 tokens with the most full attention.
// Step 0: W[4] = 2,3,1,1,1 -> 1, 0, then ties at 1 among {2,3,4}: newer kept -> {0,1,3,4}.
// Step 1: W[5] = 1,2,1,3,1,2 -> 3, then 2s {1,5}, then the newest 1: 4 -> {1,3,4,5}.
BOOST_AUTO_TEST_CASE(six_tokens_oracle) {
  check_six(Policy::Oracle, {{0, 1, 2, 3}, {0, 1, 3, 4}, {1, 3, 4, 5}, -1, -1});
  DecodeResult r;
  const PolicyTrace& t = run_six(Policy::Oracle, r);
  BOOST_TEST(t.steps[0].mass_recall == 7.0 / 8.0, boost::test_tools::tolerance(1e-14));   // (2+3+1+1)/8
  BOOST_TEST(t.steps[1].mass_recall == 8.0 / 10.0, boost::test_tools::tolerance(1e-14));  // (2+3+1+2)/10
}

// random (seed 11): prefill scores u_t = Rng(11, 7001).uniform() in token order; the middle
// {1, 2} keeps the larger. Decode: Rng(11, 7002 + 16 K) picks floor(u * count) among the
// evictable tokens in position order. The generator is the documented one (mla/random.hpp).
BOOST_AUTO_TEST_CASE(six_tokens_random) {
  Rng prefill(11, 7001);
  std::vector<double> u(4);
  for (double& v : u) v = prefill.uniform();
  const int64_t kept = u[2] > u[1] ? 2 : 1;
  Rng pick(11, 7002 + 16 * 3);
  // step 0: evictable = {kept, 3} (positions in [1, 3])
  const Positions ev0 = {kept, 3};
  const int64_t e0 = ev0[static_cast<size_t>(pick.uniform() * 2.0)];
  Positions c1 = {0, kept, 3, 4};
  c1.erase(std::find(c1.begin(), c1.end(), e0));
  Positions ev1;  // positions in [1, 4] of the cache after step 0
  for (int64_t t : c1)
    if (t >= 1 && t <= 4) ev1.push_back(t);
  const int64_t e1 = ev1[static_cast<size_t>(pick.uniform() * static_cast<double>(ev1.size()))];
  c1.push_back(5);
  check_six(Policy::Random, {{0, kept, 3}, {0, kept, 3, 4}, c1, e0, e1});
}

// ---- 2. invariants on a real layer ------------------------------------------------------

namespace {

struct Layer {
  AttentionConfig cfg;
  LayerWeights w;
  TensorF hidden;  // [T, H]
};

Layer tiny_layer(int64_t T, const std::string& geometry = "tiny", uint64_t seed = 5) {
  Layer l{test::geometry(geometry), {}, {}};
  l.w = test::random_layer_weights(l.cfg, seed);
  l.hidden = test::random_hidden(T, l.cfg.hidden_size, seed + 1);
  return l;
}

// The reference backend's inputs (two forwards), or the cpu stages' one pass.
DecodeInputs inputs_of(Backend& b, const Layer& l, int64_t P, Precision p, int64_t window = 32) {
  ForwardOptions f;
  f.precision = p;
  b.prepare(l.cfg, l.w, f);  // also for the callers' own forwards
  if (b.name() == "cpu") return compute_cpu_decode_inputs(l.cfg, l.w, l.hidden, P, window, f);
  return compute_decode_inputs(b, l.hidden, P, window, f);
}

DecodeResult decode_with(const Layer& l, const DecodeInputs& in, DecodeOptions o, bool reference,
                         DecodeAttention a, Precision p) {
  DecodeKernelSpec ks;
  ks.attention = a;
  ks.precision = p;
  ks.slots = decode_slots(o);
  ks.rows = o.steps;
  auto k = reference ? make_reference_decode_kernel(l.cfg, l.w, in, ks) : make_cpu_decode_kernel(l.cfg, l.w, in, ks);
  return run_decode(o, PrefillView{o.prompt_len, in.prefill_scores}, *k);
}

DecodeOptions all_policies_options(int64_t P, int64_t N, std::vector<int64_t> budgets, int64_t sinks, int64_t recent) {
  DecodeOptions o;
  o.prompt_len = P;
  o.steps = N;
  o.budgets = std::move(budgets);
  o.policies = all_policies();
  o.sinks = sinks;
  o.recent = recent;
  o.snapkv_window = 8;
  return o;
}

TensorD rows_of(const TensorD& t, int64_t begin, int64_t end) {
  const int64_t cols = t.dim(1);
  TensorD out(t.name, {end - begin, cols});
  std::copy(t.data.begin() + begin * cols, t.data.begin() + end * cols, out.data.begin());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(invariants_every_policy_every_step) {
  const int64_t P = 30, N = 18, sinks = 2, recent = 4;
  const Layer l = tiny_layer(P + N);
  auto b = make_cpu_backend();
  const DecodeInputs in = inputs_of(*b, l, P, Precision::FP32, 8);
  const DecodeOptions o = all_policies_options(P, N, {10, 16}, sinks, recent);
  const DecodeResult r = decode_with(l, in, o, false, DecodeAttention::Absorbed, Precision::FP32);
  BOOST_TEST(r.traces.size() == 16u);
  for (const PolicyTrace& t : r.traces) {
    const int64_t K = t.budget;
    BOOST_TEST_CONTEXT(policy_name(t.policy) << " K=" << K) {
      BOOST_REQUIRE(t.steps.size() == static_cast<size_t>(N));
      if (t.policy != Policy::Full && t.policy != Policy::Oracle) {
        BOOST_TEST(static_cast<int64_t>(t.prefill_kept.size()) == K);  // P > K: cut to K
        for (int64_t s = 0; s < sinks; ++s) BOOST_TEST(std::count(t.prefill_kept.begin(), t.prefill_kept.end(), s) == 1);
        for (int64_t s = P - recent; s < P; ++s) BOOST_TEST(std::count(t.prefill_kept.begin(), t.prefill_kept.end(), s) == 1);
      }
      std::set<int64_t> gone;
      for (int64_t i = 0; i < N; ++i) {
        const DecodeStep& st = t.steps[static_cast<size_t>(i)];
        const Positions& c = t.attended[static_cast<size_t>(i)];
        const int64_t x = P + i;
        BOOST_TEST(std::is_sorted(c.begin(), c.end()));
        BOOST_TEST(st.cache_len == static_cast<int64_t>(c.size()));
        BOOST_TEST(st.mass_recall >= 0.0);
        BOOST_TEST(st.mass_recall <= 1.0 + 1e-12);
        BOOST_TEST(st.rel_error >= 0.0);
        switch (t.policy) {
          case Policy::Full: BOOST_TEST(st.cache_len == x + 1); break;
          case Policy::SnapKV: BOOST_TEST(st.cache_len == K + i + 1); break;
          default: BOOST_TEST(st.cache_len == K + 1); break;  // K held + the new token (oracle: K + 1 best)
        }
        if (t.policy == Policy::Full || t.policy == Policy::Oracle) continue;
        // protected: sinks and the recent window (x - recent, x] are in the attended cache
        for (int64_t s = 0; s < sinks; ++s) BOOST_TEST(std::binary_search(c.begin(), c.end(), s));
        for (int64_t s = x - recent + 1; s <= x; ++s) BOOST_TEST(std::binary_search(c.begin(), c.end(), s));
        // an evicted token never comes back; the victim was evictable and held
        for (int64_t g : gone) BOOST_TEST(!std::binary_search(c.begin(), c.end(), g), "token " << g << " came back");
        if (t.policy == Policy::SnapKV) {
          BOOST_TEST(st.evicted == -1);
        } else {
          BOOST_TEST(std::binary_search(c.begin(), c.end(), st.evicted));
          BOOST_TEST(st.evicted >= sinks);
          BOOST_TEST(st.evicted <= x - recent);
          gone.insert(st.evicted);
        }
      }
    }
  }
}

// A budget larger than every cache: nothing is evicted, so every policy attends over 0..x,
// the same tokens as full, in the same order: mass_recall is exactly 1 and rel_error exactly 0.
BOOST_AUTO_TEST_CASE(nothing_evicted_means_full) {
  const int64_t P = 12, N = 6;
  const Layer l = tiny_layer(P + N);
  auto b = make_cpu_backend();
  const DecodeInputs in = inputs_of(*b, l, P, Precision::FP32, 8);
  for (DecodeAttention a : {DecodeAttention::Absorbed, DecodeAttention::Naive}) {
    const DecodeResult r = decode_with(l, in, all_policies_options(P, N, {P + N + 1}, 2, 4), false, a, Precision::FP32);
    for (const PolicyTrace& t : r.traces)
      for (const DecodeStep& st : t.steps) {
        BOOST_TEST(st.mass_recall == 1.0, policy_name(t.policy));
        BOOST_TEST(st.rel_error == 0.0, policy_name(t.policy));
        BOOST_TEST(st.evicted == -1);
      }
  }
}

// ---- 3. numerics ------------------------------------------------------------------------

// The cpu stages' one-pass inputs (what the CLI uses) = the two reference forwards' inputs.
BOOST_AUTO_TEST_CASE(cpu_stage_inputs_equal_backend_forwards) {
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    const int64_t P = 13, T = 21;
    const Layer l = tiny_layer(T, "odd", 3);
    auto ref = make_reference_backend();
    const DecodeInputs a = inputs_of(*ref, l, P, p, 5);
    ForwardOptions f;
    f.precision = p;
    const DecodeInputs b = compute_cpu_decode_inputs(l.cfg, l.w, l.hidden, P, 5, f);
    const std::string prec = precision_name(p);
    BOOST_TEST(b.prompt_len == P);
    BOOST_TEST(b.query_begin == P - 5);
    const auto c1 = compare("latent_cache", a.latent_cache, b.latent_cache, tolerance("latent_cache", "cpu-vs-reference", prec));
    BOOST_TEST(c1.ok, c1.message);
    const auto c2 = compare("query_states", a.query_states, b.query_states, tolerance("query_states", "cpu-vs-reference", prec));
    BOOST_TEST(c2.ok, c2.message);
    const auto c3 = compare("token_scores", a.prefill_scores, b.prefill_scores, tolerance("token_scores", "cpu-vs-reference", prec));
    BOOST_TEST(c3.ok, c3.message);
  }
}

// latent_cache = kv_a_layernorm(c) | roped k_pe: its rope half is key_states' rope half of
// every head (HF's de-interleaved order), for the reference and the cpu backend.
BOOST_AUTO_TEST_CASE(latent_cache_export) {
  const Layer l = tiny_layer(9, "odd");
  const int64_t n = l.cfg.num_attention_heads, r_kv = l.cfg.kv_lora_rank, d_r = l.cfg.qk_rope_head_dim,
                d_n = l.cfg.qk_nope_head_dim, d_qk = l.cfg.qk_head_dim(), S = 9;
  for (auto make : {make_reference_backend, make_cpu_backend}) {
    auto b = make();
    ForwardOptions f;
    f.keep_states = true;
    f.keep_latent_cache = true;
    b->prepare(l.cfg, l.w, f);
    const ForwardResult r = b->forward(l.hidden, f);
    BOOST_TEST_CONTEXT(b->name()) {
      BOOST_REQUIRE((r.latent_cache.shape == std::vector<int64_t>{S, r_kv + d_r}));
      for (int64_t h = 0; h < n; ++h)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t d = 0; d < d_r; ++d)
            BOOST_TEST(r.latent_cache.data[static_cast<size_t>(s * (r_kv + d_r) + r_kv + d)] ==
                       r.key_states.data[static_cast<size_t>((h * S + s) * d_qk + d_n + d)]);
      f.keep_latent_cache = false;
      BOOST_TEST(b->forward(l.hidden, f).latent_cache.empty());
    }
  }
}

// With the full cache, decode row x is the causal prefill's row x: the reference in exact
// arithmetic (absorbed and naive), the cpu kernel within fp32 accumulation.
BOOST_AUTO_TEST_CASE(full_equals_prefill_rows_fp32) {
  for (const std::string geometry : {"tiny", "odd", "q_lora_null", "bias", "no_interleave"}) {
    const int64_t P = 11, N = 7, T = P + N;
    const Layer l = tiny_layer(T, geometry);
    DecodeOptions o = all_policies_options(P, N, {8}, 1, 2);
    o.policies = {Policy::Full};
    for (bool reference : {true, false}) {
      auto b = reference ? make_reference_backend() : make_cpu_backend();
      const DecodeInputs in = inputs_of(*b, l, P, Precision::FP32);
      ForwardOptions f;
      const TensorD prefill = rows_of(b->forward(l.hidden, f).attn_output, P, T);  // causal over all T rows
      for (DecodeAttention a : {DecodeAttention::Absorbed, DecodeAttention::Naive}) {
        const DecodeResult r = decode_with(l, in, o, reference, a, Precision::FP32);
        const auto& tol = reference ? tolerance("attn_output", "reference-identity", "double")
                                    : tolerance("attn_output", "decode-full-vs-prefill", "fp32");
        const auto c = compare("attn_output", prefill, r.full_output, tol);
        BOOST_TEST(c.ok, geometry << (reference ? " reference " : " cpu ") << decode_attention_name(a) << ": " << c.message);
        BOOST_TEST_MESSAGE("decode full vs prefill fp32 " << geometry << (reference ? " reference " : " cpu ")
                                                          << decode_attention_name(a) << ": " << c.norm_error);
      }
    }
  }
}

// bf16: naive decode rounds where HF's eager prefill rounds; absorbed decode rounds elsewhere
// (docs/decode.md §3). Both are measured against the cpu backend's bf16 prefill rows.
BOOST_AUTO_TEST_CASE(full_vs_prefill_rows_bf16) {
  for (const std::string geometry : {"tiny", "odd", "kimi"}) {
    const bool kimi = geometry == "kimi";
    const int64_t P = kimi ? 6 : 11, N = kimi ? 3 : 7, T = P + N;
    const Layer l = tiny_layer(T, geometry);
    DecodeOptions o = all_policies_options(P, N, {40}, 1, 2);
    o.policies = {Policy::Full};
    auto b = make_cpu_backend();
    const DecodeInputs in = inputs_of(*b, l, P, Precision::BF16);
    ForwardOptions f;
    f.precision = Precision::BF16;
    const TensorD prefill = rows_of(b->forward(l.hidden, f).attn_output, P, T);
    for (DecodeAttention a : {DecodeAttention::Naive, DecodeAttention::Absorbed}) {
      const DecodeResult r = decode_with(l, in, o, false, a, Precision::BF16);
      const std::string pair = a == DecodeAttention::Naive ? "decode-naive-vs-prefill" : "decode-absorbed-vs-prefill";
      const auto c = compare("attn_output", prefill, r.full_output, tolerance("attn_output", pair, "bf16"));
      BOOST_TEST(c.ok, geometry << " " << pair << ": " << c.message);
      BOOST_TEST_MESSAGE("decode full vs prefill bf16 " << geometry << " " << decode_attention_name(a) << ": "
                                                        << c.norm_error << " cosine " << c.cosine);
    }
  }
}

// absorbed = naive for every policy whose decisions coincide (they do on these inputs), and
// the cpu decode kernel = the reference decode kernel on the same inputs.
BOOST_AUTO_TEST_CASE(absorbed_equals_naive_and_cpu_equals_reference) {
  const int64_t P = 20, N = 8;
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    const Layer l = tiny_layer(P + N, "odd", 9);
    auto ref_backend = make_reference_backend();
    const DecodeInputs in = inputs_of(*ref_backend, l, P, p, 8);
    const DecodeOptions o = all_policies_options(P, N, {10}, 2, 3);
    const DecodeResult ref_abs = decode_with(l, in, o, true, DecodeAttention::Absorbed, p);
    const DecodeResult ref_naive = decode_with(l, in, o, true, DecodeAttention::Naive, p);
    const DecodeResult cpu_abs = decode_with(l, in, o, false, DecodeAttention::Absorbed, p);
    const DecodeResult cpu_naive = decode_with(l, in, o, false, DecodeAttention::Naive, p);
    const bool bf16 = p == Precision::BF16;
    for (size_t k = 0; k < ref_abs.traces.size(); ++k) {
      const PolicyTrace& t = ref_abs.traces[k];
      BOOST_TEST_CONTEXT(policy_name(t.policy) << " " << precision_name(p)) {
        // the same decisions everywhere (the scores are well separated on these inputs)
        BOOST_TEST((ref_naive.traces[k].attended == t.attended));
        BOOST_TEST((cpu_abs.traces[k].attended == t.attended));
        BOOST_TEST((cpu_naive.traces[k].attended == t.attended));
        if (!bf16) {
          const auto c = compare("attn_output", t.attn_output, ref_naive.traces[k].attn_output,
                                 tolerance("attn_output", "reference-identity", "double"));
          BOOST_TEST(c.ok, "reference absorbed vs naive: " << c.message);
          const auto d = compare("attn_output", cpu_naive.traces[k].attn_output, cpu_abs.traces[k].attn_output,
                                 tolerance("attn_output", "decode-absorbed-vs-naive", "fp32"));
          BOOST_TEST(d.ok, "cpu absorbed vs naive: " << d.message);
          BOOST_TEST_MESSAGE("absorbed vs naive fp32 cpu " << policy_name(t.policy) << ": " << d.norm_error);
        } else {
          const auto d = compare("attn_output", cpu_naive.traces[k].attn_output, cpu_abs.traces[k].attn_output,
                                 tolerance("attn_output", "decode-absorbed-vs-naive", "bf16"));
          BOOST_TEST(d.ok, "cpu absorbed vs naive bf16: " << d.message);
          BOOST_TEST_MESSAGE("absorbed vs naive bf16 cpu " << policy_name(t.policy) << ": " << d.norm_error);
        }
        const std::string prec = precision_name(p);
        const auto e = compare("attn_output", t.attn_output, cpu_abs.traces[k].attn_output,
                               tolerance("attn_output", "cpu-vs-reference", prec));
        BOOST_TEST(e.ok, "absorbed cpu vs reference: " << e.message);
        const auto g = compare("attn_output", ref_naive.traces[k].attn_output, cpu_naive.traces[k].attn_output,
                               tolerance("attn_output", "cpu-vs-reference", prec));
        BOOST_TEST(g.ok, "naive cpu vs reference: " << g.message);
        for (size_t i = 0; i < t.steps.size(); ++i) {
          BOOST_TEST(cpu_abs.traces[k].steps[i].evicted == t.steps[i].evicted);
          BOOST_TEST(cpu_abs.traces[k].steps[i].mass_recall == t.steps[i].mass_recall, boost::test_tools::tolerance(1e-4));
        }
      }
    }
  }
}

// ---- 4. the CLI -----------------------------------------------------------------------------

namespace {

void expect_error(const std::string& args, const std::string& word) {
  const RunResult r = run_cli("decode --checkpoint '" + tiny_checkpoint() + "' --out '" + scratch_dir("decode-err") +
                              "' " + args);
  BOOST_TEST_CONTEXT("decode " << args << "\nstderr: " << r.err) {
    BOOST_TEST(r.exit_code == 2);
    BOOST_TEST(r.err.rfind("mla-h2o decode: error: ", 0) == 0u);
    BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    BOOST_TEST(contains(r.err, word));
  }
}

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

BOOST_AUTO_TEST_CASE(cli_outputs) {
  const std::string out = scratch_dir("decode-cli");
  const RunResult r = run_cli("decode --checkpoint '" + tiny_checkpoint() + "' --seq-len 40 --prompt-len 30 " +
                              "--cache-budget 12,20 --sinks 2 --recent 4 --dump-tensors --out '" + out + "'");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  BOOST_TEST(contains(r.out, "mean rel_err"));
  for (Policy p : all_policies()) BOOST_TEST(contains(r.out, std::string(policy_name(p)) + " "));
  // decode.csv: 8 policies x 2 budgets x 10 steps + header
  const std::string csv = test::read_text(out + "/decode.csv");
  BOOST_TEST(csv.rfind("policy,budget,step,position,cache_len,evicted,rel_error,cosine,mass_recall\n", 0) == 0u);
  BOOST_TEST(lines(csv) == 1u + 8u * 2u * 10u);
  BOOST_TEST(contains(csv, "\nh2o,12,9,39,13,"));  // last step: position 39, K + 1 attended
  const std::string summary = test::read_text(out + "/summary.csv");
  BOOST_TEST(lines(summary) == 1u + 16u);
  BOOST_TEST(contains(summary, "\nfull,20,0,0,0,1,1,"));
  for (const char* svg : {"/decode.svg", "/budget.svg"}) {
    const std::string s = test::read_text(out + svg);
    BOOST_TEST(s.rfind("<svg", 0) == 0u);
    BOOST_TEST(contains(s, "<polyline id=\"oracle\""));
    BOOST_TEST(contains(s, "</svg>"));
  }
  simdjson::dom::parser parser;
  simdjson::dom::element j = parser.load(out + "/report.json");
  BOOST_TEST(std::string_view(j["command"].get_string().value()) == "decode");
  BOOST_TEST(int64_t(j["prompt_len"].get_int64().value()) == 30);
  BOOST_TEST(j["summary"].get_array().size() == 16u);
  BOOST_TEST(std::filesystem::exists(out + "/decode_tensors.safetensors"));
  // the prefill's projection engine is reported (--gemm, docs/cpu-gemm.md)
  BOOST_TEST(contains(r.out, "prefill projections: "), r.out);
  BOOST_TEST(!std::string(j["gemm"].get_string().value()).empty());
  // one budget: no budget.svg
  const std::string out1 = scratch_dir("decode-cli1");
  const RunResult one = run_cli("decode --checkpoint '" + tiny_checkpoint() + "' --seq-len 20 --prompt-len 15 " +
                                "--cache-budget 9 --sinks 1 --recent 2 --policy h2o,tova --quiet --gemm eigen --out '" + out1 + "'");
  BOOST_REQUIRE_MESSAGE(one.exit_code == 0, one.err);
  BOOST_TEST(contains(one.out, "prefill projections: Eigen "), one.out);
  BOOST_TEST(one.err.empty());
  BOOST_TEST(!std::filesystem::exists(out1 + "/budget.svg"));
  BOOST_TEST(lines(test::read_text(out1 + "/decode.csv")) == 1u + 2u * 5u);
  // progress on stderr once a run takes MLA_PROGRESS_AFTER seconds (0 = at once); not with --quiet
  ::setenv("MLA_PROGRESS_AFTER", "0", 1);
  const std::string out2 = scratch_dir("decode-cli2");
  const std::string base = "decode --checkpoint '" + tiny_checkpoint() + "' --seq-len 20 --prompt-len 15 " +
                           "--cache-budget 9 --sinks 1 --recent 2 --policy h2o --out '" + out2 + "'";
  const RunResult loud = run_cli(base);
  const RunResult silent = run_cli(base + " --quiet");
  ::unsetenv("MLA_PROGRESS_AFTER");
  BOOST_TEST(contains(loud.err, "mla-h2o decode: prefill of 15 rows"), loud.err);
  BOOST_TEST(contains(loud.err, "mla-h2o decode: step 5 of 5"), loud.err);
  BOOST_TEST(silent.err.empty(), silent.err);
  BOOST_TEST(contains(run_cli("decode --help").out, "--cache-budget"));
  BOOST_TEST(contains(run_cli("demo --help").out, "--decode"));
}

BOOST_AUTO_TEST_CASE(cli_errors) {
  expect_error("--seq-len 20 --prompt-len 20 --cache-budget 40", "P must be < T");
  expect_error("--seq-len 20 --prompt-len 0 --cache-budget 40", "must be >= 1");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 36", "must be > sinks + recent");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --policy h2o,lru", "unknown policy 'lru'");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 50,40", "strictly increasing");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --steps 0", "nothing to measure");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --steps 11", "but the input has 20");
  expect_error("--seq-len 20 --cache-budget 40", "--prompt-len P is required");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --attention flash", "--attention");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --backend cuda", "--backend");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --gemm mkl", "--gemm");
  const RunResult demo = run_cli("demo --decode --mask none --cache-dir '" + scratch_dir("decode-demo") + "'");
  BOOST_TEST(demo.exit_code == 2);
  BOOST_TEST(demo.err == "mla-h2o demo: error: --mask does not apply to --decode (decode attention is causal)\n");
}

BOOST_AUTO_TEST_SUITE_END()
