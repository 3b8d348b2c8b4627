// tests/unit/test_decode.cpp — suite decode: the decode step loop, its kernels and the CLI
// (include/mla/decode.hpp, docs/decode.md). The policies themselves are worked out by hand in
// suite policies (test_policies.cpp).
//
//   1. The step loop on a 6-token example driven by a hand-made kernel whose attention is a
//      table: mass_recall, its worst head and 5th percentile, rel_error, cosine, the residual
//      error and the flat baseline, each worked out by hand.
//   2. Invariants of every policy at every step on a real (tiny) layer: budgets held, sinks and
//      recent window never evicted, an evicted token never comes back; a policy's figures are
//      identical alone and in a batch; nothing evicted means rel_error 0 and mass_recall 1, exactly.
//   3. Numerics: the latent cache export; full-cache decode rows = the causal prefill rows;
//      absorbed = naive; the cpu decode kernel = the reference decode kernel (fp32, bf16); the
//      token features against a direct computation.
//   4. The CLI: outputs exist and parse, what ran is reported, synthetic weights are said, every
//      bad input is one error line.
//
// Shape legend: T = P + N rows, n heads, H hidden, r_kv kv_lora_rank, d_r qk_rope_head_dim.
#include <simdjson.h>

#include <Eigen/Dense>
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "compare.hpp"
#include "geometries.hpp"
#include "mla/attention.hpp"
#include "mla/decode.hpp"
#include "mla/random.hpp"
#include "mla/rope.hpp"
#include "src/cpu/cpu_kernels.hpp"
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

// Two heads. Query row x gives token t the weight W_h[x][t] > 0; attention over a cache S is
// p_t = W_h[x][t] / sum_{s in S} W_h[x][s] (the softmax of logits log W). The value of token t
// is the one-hot vector e_t in R^6, the same for both heads, and the output row is the mean
// over heads of p: a step's output is the attention itself, spread by position.
const std::vector<std::vector<double>> kW0 = {
    {1}, {1, 1}, {1, 1, 2}, {4, 1, 2, 1},
    {2, 3, 1, 1, 1},     // query 4 = decode step 0
    {1, 2, 1, 3, 1, 2},  // query 5 = decode step 1
};
const std::vector<std::vector<double>> kW1 = {
    {1}, {1, 1}, {1, 1, 2}, {4, 1, 2, 1},
    {1, 1, 1, 1, 4},     // query 4: head 1 looks at the new token
    {1, 1, 1, 1, 1, 3},
};

class TableKernel final : public DecodeKernel {
 public:
  explicit TableKernel(int64_t slots) : rows_(static_cast<size_t>(slots), std::vector<double>(2 * 6, 0.0)) {}
  int64_t heads() const override { return 2; }
  void begin_query(int64_t x) override { x_ = x; }
  void attend(std::span<const int64_t> cache, std::vector<double>& probs, int64_t slot, int64_t row) override {
    probs.clear();
    for (const auto* W : {&kW0, &kW1}) {
      double sum = 0;
      for (int64_t t : cache) sum += (*W)[static_cast<size_t>(x_)][static_cast<size_t>(t)];
      for (int64_t t : cache) probs.push_back((*W)[static_cast<size_t>(x_)][static_cast<size_t>(t)] / sum);
    }
    if (slot < 0) return;
    const size_t m = cache.size();
    for (size_t j = 0; j < m; ++j)
      rows_[static_cast<size_t>(slot)][static_cast<size_t>(row * 6 + cache[j])] = (probs[j] + probs[m + j]) / 2;
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

}  // namespace

BOOST_AUTO_TEST_SUITE(decode)

// h2o (sinks 1, recent 1) over P = 4, N = 2, K = 3 on the table kernel; the prefill mass per
// head is 2, .5, .9, .6 (head 0) and 1, 1, 1, 1 (head 1): summed 3, 1.5, 1.9, 1.6 -> 1 goes,
// the cache is {0, 2, 3} and step 0 attends over {0, 2, 3, 4}.
// Step 0, full attention: head 0 W = 2,3,1,1,1 /8, head 1 W = 1,1,1,1,4 /8.
//   mass_recall per head: head 0 (2+1+1+1)/8 = 5/8, head 1 (1+1+1+4)/8 = 7/8; mean 3/4,
//   worst head 5/8, 5th percentile (nearest rank of 2 heads: the 1st) 5/8; visible 4/5.
//   o_full = mean of the two rows: (3, 4, 2, 2, 5, 0)/16; o over {0,2,3,4}: head 0 2,1,1,1 /5
//   -> .4,.2,.2,.2; head 1 1,1,1,4 /7; o = ((.4 + 1/7), 0, (.2 + 1/7), (.2 + 1/7), (.2 + 4/7), 0)/2.
// The residual error divides ||o - o_full|| by the residual norm given (2 and 4 here).
BOOST_AUTO_TEST_CASE(step_metrics_by_hand) {
  const double kHand = tolerance("*", "hand-worked", "double").rtol;
  DecodeOptions o;
  o.prompt_len = 4;
  o.steps = 2;
  o.budgets = {3};
  o.policies = parse_policy_list("full,h2o:sinks=1,recent=1");
  TableKernel k(decode_slots(o));
  DecodeContext c;
  c.head_mass = {2, .5, .9, .6, 1, 1, 1, 1};
  c.residual_norm = {2, 4};
  const DecodeResult r = run_decode(o, c, k);
  BOOST_REQUIRE(r.traces.size() == 2u);
  const PolicyTrace& f = r.traces[0];
  BOOST_TEST(f.policy.label == "full");
  for (const DecodeStep& s : f.steps) {
    BOOST_TEST(s.rel_error == 0.0);
    BOOST_TEST(s.mass_recall == 1.0);
    BOOST_TEST(s.residual_error == 0.0);
  }
  const PolicyTrace& t = r.traces[1];
  BOOST_TEST(t.policy.label == "h2o:sinks=1,recent=1");
  BOOST_TEST(t.prefill_kept == (Positions{0, 2, 3}), boost::test_tools::per_element());
  const DecodeStep& s = t.steps[0];
  BOOST_TEST(s.cache_len == 4);
  BOOST_TEST(s.held == 3);
  BOOST_TEST(s.mass_recall == 0.75, boost::test_tools::tolerance(kHand));
  BOOST_TEST(s.mass_recall_min == 0.625, boost::test_tools::tolerance(kHand));
  BOOST_TEST(s.mass_recall_p5 == 0.625, boost::test_tools::tolerance(kHand));
  BOOST_TEST(s.visible == 0.8, boost::test_tools::tolerance(kHand));
  const std::vector<double> full = {3. / 16, 4. / 16, 2. / 16, 2. / 16, 5. / 16, 0};
  const std::vector<double> got = {(.4 + 1. / 7) / 2, 0, (.2 + 1. / 7) / 2, (.2 + 1. / 7) / 2, (.2 + 4. / 7) / 2, 0};
  double diff = 0, nf = 0, no = 0, dot = 0;
  for (size_t i = 0; i < 6; ++i) {
    diff += (got[i] - full[i]) * (got[i] - full[i]);
    nf += full[i] * full[i];
    no += got[i] * got[i];
    dot += got[i] * full[i];
  }
  BOOST_TEST(s.rel_error == std::sqrt(diff / nf), boost::test_tools::tolerance(kHand));
  BOOST_TEST(s.cosine == dot / std::sqrt(nf * no), boost::test_tools::tolerance(kHand));
  BOOST_TEST(s.residual_error == std::sqrt(diff) / 2, boost::test_tools::tolerance(kHand));
  // the summary: means over the steps, the flat baseline, the measured cache sizes
  const std::vector<DecodeSummary> sum = summarize(r);
  BOOST_TEST(sum[1].mean_held == 3.0);
  BOOST_TEST(sum[1].mean_cache_len == 4.0);
  BOOST_TEST(sum[1].mean_visible == (0.8 + 4.0 / 6.0) / 2, boost::test_tools::tolerance(kHand));
  // outputs are held only when asked for (--dump-tensors)
  BOOST_TEST(t.attn_output.empty());
  BOOST_TEST(r.full_output.empty());
}

// budget.svg plots each policy at the tokens it measured held, not at its K (issue 18: SnapKV
// held 640 tokens at K = 512 and was plotted at 512, looking best for the wrong reason). Two
// budgets, 10 and 20: policy "a" holds them; "b" holds 15 at K = 10, so b's first point lies
// halfway along the x axis (a's first point is its left end, a's last its right end).
BOOST_AUTO_TEST_CASE(budget_svg_plots_the_tokens_held) {
  std::vector<DecodeSummary> sum(4);
  const std::vector<std::tuple<std::string, int64_t, double>> rows = {{"a", 10, 10}, {"b", 10, 15}, {"a", 20, 20}, {"b", 20, 20}};
  for (size_t i = 0; i < rows.size(); ++i) {
    std::tie(sum[i].policy, sum[i].budget, sum[i].mean_held) = rows[i];
    sum[i].mean_rel_error = 0.1;
  }
  const std::string svg = budget_svg(sum, "held");
  const auto xs = [&](const std::string& id) {  // the x of each point of polyline `id`
    const size_t at = svg.find("<polyline id=\"" + id + "\"");
    BOOST_TEST_REQUIRE(at != std::string::npos, svg);
    const size_t begin = svg.find("points=\"", at) + 8, end = svg.find('"', begin);
    std::vector<double> out;
    std::istringstream in(svg.substr(begin, end - begin));
    for (std::string pt; in >> pt;) out.push_back(std::stod(pt.substr(0, pt.find(','))));
    return out;
  };
  const std::vector<double> a = xs("a"), b = xs("b");
  BOOST_TEST_REQUIRE(a.size() == 2u);
  BOOST_TEST_REQUIRE(b.size() == 2u);
  BOOST_TEST(a[0] < a[1]);
  BOOST_TEST(b[0] == (a[0] + a[1]) / 2);  // at 15 held, not at K = 10 (both exact in %.2f)
  BOOST_TEST(b[1] == a[1]);
  BOOST_TEST(contains(svg, "tokens held after each step (mean, measured)"));
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

// A mid-sized geometry whose per-head products are large enough for Eigen to hand them to
// BLAS (kv_lora_rank 256, v_head_dim 64, 8 heads), where a batched product's rows can differ
// from the same rows computed alone.
Layer medium_layer(int64_t T, uint64_t seed = 7) {
  AttentionConfig c = test::geometry("tiny");
  c.hidden_size = 128;
  c.num_attention_heads = c.num_key_value_heads = 8;
  c.q_lora_rank = 64;
  c.kv_lora_rank = 256;
  c.qk_nope_head_dim = 32;
  c.v_head_dim = 64;
  Layer l{c, {}, {}};
  l.w = test::random_layer_weights(l.cfg, seed);
  l.hidden = test::random_hidden(T, l.cfg.hidden_size, seed + 1);
  return l;
}

// DeepSeek-V2-Lite's head shape (no q LoRA, d_n 128, d_r 64, d_v 128, kv_lora_rank 512) with
// fewer heads and a narrower hidden size.
Layer lite_layer(int64_t T, uint64_t seed = 11) {
  AttentionConfig c = test::geometry("tiny");
  c.hidden_size = 256;
  c.num_attention_heads = c.num_key_value_heads = 4;
  c.q_lora_rank = 0;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  Layer l{c, {}, {}};
  l.w = test::random_layer_weights(l.cfg, seed);
  l.hidden = test::random_hidden(T, l.cfg.hidden_size, seed + 1);
  return l;
}

DecodeOptions options(int64_t P, int64_t N, std::vector<int64_t> budgets, const std::string& policies = "all") {
  DecodeOptions o;
  o.prompt_len = P;
  o.steps = N;
  o.budgets = std::move(budgets);
  o.policies = parse_policy_list(policies);
  return o;
}

// The reference backend's inputs (two forwards), or the cpu stages' one pass, for `o`.
DecodeInputs inputs_of(Backend& b, const Layer& l, const DecodeOptions& o, Precision p) {
  ForwardOptions f;
  f.precision = p;
  b.prepare(l.cfg, l.w, f);  // also for the callers' own forwards
  DecodeInputsRequest req;
  req.prompt_len = o.prompt_len;
  req.query_window = prompt_query_window(o);
  const FeatureNeeds needs = feature_needs(o.policies);
  if (needs.expected_attention) req.statistics_from = std::min(needs.expected_sinks, o.prompt_len - 1);
  if (b.name() == "cpu") return compute_cpu_decode_inputs(l.cfg, l.w, l.hidden, req, f);
  return compute_decode_inputs(b, l.cfg, l.hidden, req, f);
}

DecodeResult decode_with(const Layer& l, const DecodeInputs& in, DecodeOptions o, bool reference, DecodeAttention a,
                         Precision p, const AttendObserver& observe = {}) {
  DecodeKernelSpec ks;
  ks.attention = a;
  ks.precision = p;
  ks.slots = decode_slots(o);
  ks.rows = o.steps;
  o.keep_outputs = true;
  auto k = reference ? make_reference_decode_kernel(l.cfg, l.w, in, ks) : make_cpu_decode_kernel(l.cfg, l.w, in, ks);
  TokenFeatures f = compute_token_features(l.cfg, l.w, in.latent_cache, o.prompt_len, feature_needs(o.policies),
                                           in.query_statistics);
  if (feature_needs(o.policies).reconstruction) {  // kvzip: the context's repeat on this layer, as decode runs it
    ForwardOptions fo;
    fo.precision = p;
    std::unique_ptr<Backend> rb = reference ? make_reference_backend() : make_cpu_backend();
    rb->prepare(l.cfg, l.w, fo);
    add_decode_reconstruction(
        l.hidden, o.prompt_len, o.prompt_len + o.steps, l.cfg.num_attention_heads,
        [&](const TensorF& rows, const DecodeInputsRequest& req) {
          return reference ? compute_decode_inputs(*rb, l.cfg, rows, req, fo) : compute_cpu_decode_inputs(l.cfg, l.w, rows, req, fo);
        },
        [&](const DecodeInputs& ri, int64_t R) {
          DecodeKernelSpec rs = ks;
          rs.slots = 1;
          rs.rows = R;
          return reference ? make_reference_decode_kernel(l.cfg, l.w, ri, rs) : make_cpu_decode_kernel(l.cfg, l.w, ri, rs);
        },
        f);
  }
  DecodeContext c;
  c.head_mass = in.head_mass;
  c.features = &f;
  return run_decode(o, c, *k, {}, observe);
}

TensorD rows_of(const TensorD& t, int64_t begin, int64_t end) {
  const int64_t cols = t.dim(1);
  TensorD out(t.name, {end - begin, cols});
  std::copy(t.data.begin() + begin * cols, t.data.begin() + end * cols, out.data.begin());
  return out;
}

// Every preset with small protected sets (sinks 2, recent 4, windows 8) so budgets 10, 16 hold.
const char* kSmallPolicies =
    "full,h2o:sinks=2,recent=4,h2o-normalized:sinks=2,recent=4,tova:sinks=2,recent=4,streaming:sinks=2,"
    "snapkv:window=8,snapkv-maxpool:window=8,pyramidkv:window=8,knorm:sinks=2,recent=4,"
    "expected-attention:sinks=2,recent=4,scissorhands:sinks=2,recent=4,window=8,value-aware:sinks=2,recent=4,"
    "keydiff:sinks=2,recent=4,leverage:sinks=2,recent=4,cur:sinks=2,recent=4,lagkv:sinks=2,recent=4,lag=8,"
    "chunkkv:press=h2o,press.sinks=2,press.recent=4,chunk=3,criticalkv:press.window=8,"
    "adakv:press.window=8,alpha=50%,random:sinks=2,recent=4,kvzip:sinks=2,recent=4,oracle";

}  // namespace

BOOST_AUTO_TEST_CASE(invariants_every_policy_every_step) {
  const int64_t P = 30, N = 18;
  const double recall_above_one = tolerance("mass_recall", "rounding-past-bound", "double").atol;
  const Layer l = tiny_layer(P + N);
  auto b = make_cpu_backend();
  const DecodeOptions o = options(P, N, {10, 16}, kSmallPolicies);
  const DecodeInputs in = inputs_of(*b, l, o, Precision::FP32);
  std::vector<std::vector<Positions>> attended(o.policies.size() * 2, std::vector<Positions>(N));
  std::vector<size_t> trace_of;  // observer index -> trace index (full is not observed)
  for (size_t k = 0; k < 2; ++k)
    for (size_t p = 0; p < o.policies.size(); ++p)
      if (!policy_is_full_cache(o.policies[p])) trace_of.push_back(k * o.policies.size() + p);
  const DecodeResult r = decode_with(l, in, o, false, DecodeAttention::Absorbed, Precision::FP32,
                                     [&](size_t run, int64_t step, std::span<const int64_t> c) {
                                       attended[trace_of[run]][static_cast<size_t>(step)].assign(c.begin(), c.end());
                                     });
  BOOST_TEST(r.traces.size() == 2 * o.policies.size());
  for (size_t ti = 0; ti < r.traces.size(); ++ti) {
    const PolicyTrace& t = r.traces[ti];
    const int64_t K = t.layer_budget;
    const PolicySettings& s = t.policy;
    BOOST_TEST_CONTEXT(s.label << " K=" << K) {
      BOOST_REQUIRE(t.steps.size() == static_cast<size_t>(N));
      if (policy_is_full_cache(s)) continue;
      BOOST_TEST(static_cast<int64_t>(t.prefill_kept.size()) == K);  // P > K: cut to K
      const int64_t sinks = s.sinks, recent = recent_tokens(s, K);
      if (!policy_protects_nothing(s)) {
        for (int64_t q = 0; q < sinks; ++q) BOOST_TEST(std::count(t.prefill_kept.begin(), t.prefill_kept.end(), q) == 1);
        for (int64_t q = P - recent; q < P; ++q) BOOST_TEST(std::count(t.prefill_kept.begin(), t.prefill_kept.end(), q) == 1);
      }
      std::set<int64_t> gone;
      for (int64_t i = 0; i < N; ++i) {
        const DecodeStep& st = t.steps[static_cast<size_t>(i)];
        const Positions& c = attended[ti][static_cast<size_t>(i)];
        const int64_t x = P + i;
        BOOST_TEST(std::is_sorted(c.begin(), c.end()));
        BOOST_TEST(st.cache_len == static_cast<int64_t>(c.size()));
        BOOST_TEST(st.cache_len == K + 1);  // K held + the new token (oracle: its K + 1 best)
        BOOST_TEST(st.held == K);           // every policy holds its budget after the step
        BOOST_TEST(st.mass_recall >= 0.0);
        BOOST_TEST(st.mass_recall <= 1.0 + recall_above_one);
        BOOST_TEST(st.mass_recall_min <= st.mass_recall_p5);
        BOOST_TEST(st.mass_recall_p5 <= st.mass_recall + recall_above_one);
        BOOST_TEST(st.rel_error >= 0.0);
        if (policy_needs_full_attention(s)) continue;  // the oracle protects nothing and may re-admit any token
        // protected: sinks and the recent window (x - recent, x] are in the attended cache
        for (int64_t q = 0; q < sinks; ++q) BOOST_TEST(std::binary_search(c.begin(), c.end(), q));
        for (int64_t q = x - recent + 1; q <= x; ++q) BOOST_TEST(std::binary_search(c.begin(), c.end(), q));
        // an evicted token never comes back; the victim was evictable and held
        for (int64_t g : gone) BOOST_TEST(!std::binary_search(c.begin(), c.end(), g), "token " << g << " came back");
        BOOST_TEST(st.evicted >= 0);
        BOOST_TEST(std::binary_search(c.begin(), c.end(), st.evicted));
        BOOST_TEST(st.evicted >= sinks);
        BOOST_TEST(st.evicted <= x - recent);
        gone.insert(st.evicted);
      }
    }
  }
}

// A policy's figures are the same alone and next to every other policy and budget (issue 28
// item 6): every number, and every output row, compared with ==. Every preset alone against
// (a) the batch of all of them at several budgets and (b) a batch of two whose other member holds
// a different observation window (snapkv:window=4, which moves query_begin, the first held
// prompt query). fp32 and bf16, absorbed and naive, on a geometry whose per-head products go to
// BLAS and on DeepSeek-V2-Lite's head shape (no q LoRA): the presets with small protected sets
// (kSmallPolicies) at P = 24 with the cpu stages' inputs (the CLI's) and the reference backend's
// two forwards; every preset at its paper's settings (snapkv's and pyramidkv's window 64,
// scissorhands' 32, expected-attention's sinks 4 and future 512) at P = 80, K > 64, the cpu inputs.
void check_same_trace(const PolicyTrace& in_batch, const PolicyTrace& alone) {
  BOOST_TEST(in_batch.prefill_kept == alone.prefill_kept, boost::test_tools::per_element());
  BOOST_TEST(in_batch.attn_output.data == alone.attn_output.data, boost::test_tools::per_element());
  BOOST_REQUIRE(in_batch.steps.size() == alone.steps.size());
  for (size_t i = 0; i < alone.steps.size(); ++i) {
    BOOST_TEST(in_batch.steps[i].rel_error == alone.steps[i].rel_error);
    BOOST_TEST((in_batch.steps[i].residual_error == alone.steps[i].residual_error ||
                (std::isnan(in_batch.steps[i].residual_error) && std::isnan(alone.steps[i].residual_error))));
    BOOST_TEST(in_batch.steps[i].cosine == alone.steps[i].cosine);
    BOOST_TEST(in_batch.steps[i].mass_recall == alone.steps[i].mass_recall);
    BOOST_TEST(in_batch.steps[i].evicted == alone.steps[i].evicted);
    BOOST_TEST(in_batch.steps[i].held == alone.steps[i].held);
  }
}

const PolicyTrace& trace_of(const DecodeResult& r, const std::string& label, int64_t K) {
  const auto it = std::find_if(r.traces.begin(), r.traces.end(),
                               [&](const PolicyTrace& t) { return t.budget == K && t.policy.label == label; });
  BOOST_REQUIRE(it != r.traces.end());
  return *it;
}

void check_alone_equals_batch(const Layer& l, bool reference_inputs, int64_t P, int64_t N, const std::string& policies,
                              const std::vector<int64_t>& budgets, int64_t K) {
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    auto b = reference_inputs ? make_reference_backend() : make_cpu_backend();
    const DecodeOptions batch = options(P, N, budgets, policies);
    const DecodeInputs in = inputs_of(*b, l, batch, p);
    for (DecodeAttention a : {DecodeAttention::Absorbed, DecodeAttention::Naive}) {
      const DecodeResult all = decode_with(l, in, batch, false, a, p);
      for (const PolicySettings& one : batch.policies) {
        if (policy_is_full_cache(one)) continue;
        // its own inputs, as the CLI computes them: alone, a run holds fewer (or more) prompt
        // queries than in a batch (the batch's largest observation window sets query_begin)
        const DecodeOptions o = options(P, N, {K}, one.label);
        const DecodeResult alone = decode_with(l, inputs_of(*b, l, o, p), o, false, a, p);
        const DecodeOptions pair = options(P, N, {K}, one.label + ",snapkv:window=4");
        const DecodeResult beside = decode_with(l, inputs_of(*b, l, pair, p), pair, false, a, p);
        BOOST_TEST_CONTEXT(l.cfg.kv_lora_rank << "-rank layer, P = " << P << ", " << one.label << " K=" << K << " "
                                               << precision_name(p) << " " << decode_attention_name(a)
                                               << (reference_inputs ? ", reference inputs" : ", cpu inputs")) {
          check_same_trace(trace_of(all, one.label, K), alone.traces[0]);
          check_same_trace(trace_of(beside, one.label, K), alone.traces[0]);
          BOOST_TEST(alone.traces[0].prefill_kept.size() == static_cast<size_t>(K));  // P > K: it evicted
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(policy_alone_equals_policy_in_a_batch) {
  const int64_t P = 24, N = 6;
  for (const Layer& l : {medium_layer(P + N), lite_layer(P + N)})
    for (bool reference_inputs : {false, true})
      check_alone_equals_batch(l, reference_inputs, P, N, kSmallPolicies, {10, 12, 14, 16, 18, 40}, 12);
}

BOOST_AUTO_TEST_CASE(preset_settings_alone_equal_the_batch) {
  const int64_t P = 80, N = 6;
  for (const Layer& l : {medium_layer(P + N), lite_layer(P + N)})
    check_alone_equals_batch(l, false, P, N, "all", {66, 70, 74}, 70);
}

// The hidden case of issue 28 (a V2-Lite-shaped layer, P = 20, fp32, the h2o preset at K = 8
// beside snapkv:window=4): step by step the same alone and in the pair.
BOOST_AUTO_TEST_CASE(h2o_preset_beside_a_small_snapkv_window) {
  const int64_t P = 20, N = 24;
  const Layer l = lite_layer(P + N, 5);
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    auto b = make_cpu_backend();
    const DecodeOptions o = options(P, N, {8}, "h2o"), pair = options(P, N, {8}, "h2o,snapkv:window=4");
    for (DecodeAttention a : {DecodeAttention::Absorbed, DecodeAttention::Naive}) {
      const DecodeResult alone = decode_with(l, inputs_of(*b, l, o, p), o, false, a, p);
      const DecodeResult beside = decode_with(l, inputs_of(*b, l, pair, p), pair, false, a, p);
      BOOST_TEST_CONTEXT(precision_name(p) << " " << decode_attention_name(a))
      check_same_trace(trace_of(beside, "h2o", 8), alone.traces[0]);
    }
  }
}

// A budget larger than every cache: nothing is evicted, so every policy attends over 0..x,
// the same tokens as full, in the same order: mass_recall (mean, worst head, 5th percentile)
// is exactly 1 and rel_error exactly 0 — with six budgets in one batch, fp32 and bf16.
BOOST_AUTO_TEST_CASE(nothing_evicted_means_full) {
  const int64_t P = 12, N = 6;
  const Layer l = medium_layer(P + N, 9);
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    auto b = make_cpu_backend();
    const DecodeOptions o = options(P, N, {19, 20, 21, 22, 23, 24}, "h2o:sinks=2,recent=4,tova,snapkv:window=4,oracle");
    const DecodeInputs in = inputs_of(*b, l, o, p);
    for (DecodeAttention a : {DecodeAttention::Absorbed, DecodeAttention::Naive}) {
      const DecodeResult r = decode_with(l, in, o, false, a, p);
      for (const PolicyTrace& t : r.traces)
        for (const DecodeStep& st : t.steps) {
          BOOST_TEST_CONTEXT(t.policy.label << " K=" << t.budget << " " << precision_name(p) << " " << decode_attention_name(a)) {
            BOOST_TEST(st.mass_recall == 1.0);
            BOOST_TEST(st.mass_recall_min == 1.0);
            BOOST_TEST(st.mass_recall_p5 == 1.0);
            BOOST_TEST(st.rel_error == 0.0);
            BOOST_TEST(st.evicted == -1);
          }
        }
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
    const DecodeOptions o = options(P, T - P, {8}, "snapkv:window=5,expected-attention:sinks=2");
    const DecodeInputs a = inputs_of(*ref, l, o, p);
    auto cpu = make_cpu_backend();
    const DecodeInputs b = inputs_of(*cpu, l, o, p);
    const std::string prec = precision_name(p);
    BOOST_TEST(b.prompt_len == P);
    BOOST_TEST(b.query_begin == P - 5);
    const auto c1 = compare("latent_cache", a.latent_cache, b.latent_cache, tolerance("latent_cache", "cpu-vs-reference", prec));
    BOOST_TEST(c1.ok, c1.message);
    const auto c2 = compare("query_states", a.query_states, b.query_states, tolerance("query_states", "cpu-vs-reference", prec));
    BOOST_TEST(c2.ok, c2.message);
    const auto c3 = compare("head_scores", a.head_mass, b.head_mass, tolerance("head_scores", "cpu-vs-reference", prec));
    BOOST_TEST(c3.ok, c3.message);
    // expected-attention's query statistics: from the same queries, un-rotated the same way
    BOOST_TEST(a.query_statistics.first == 2);
    BOOST_TEST(b.query_statistics.rows == P - 2);
    const auto c4 = compare("query_states", a.query_statistics.mean, b.query_statistics.mean,
                            tolerance("query_states", "cpu-vs-reference", prec));
    BOOST_TEST(c4.ok, "statistics mean: " << c4.message);
  }
}

// kvzip on one layer (add_decode_reconstruction): the context's rows re-run at positions P .. 2P-1
// (P = 12: one chunk, its softmax the causal one); a token's score per head is the max over those
// rows of their attention on it. Against one reference forward of the 2P rows [context; context]
// (attn_weights [n, 2P, 2P], double), for the cpu stages and the absorbed kernel in fp32.
BOOST_AUTO_TEST_CASE(kvzip_scores_are_the_repeat_rows_attention) {
  const int64_t P = 12, N = 4, T = P + N;
  const Layer l = tiny_layer(T);
  const int64_t n = l.cfg.num_attention_heads, H = l.cfg.hidden_size;
  ForwardOptions fo;
  fo.precision = Precision::FP32;
  TokenFeatures f;
  add_decode_reconstruction(
      l.hidden, P, T, n,
      [&](const TensorF& rows, const DecodeInputsRequest& req) { return compute_cpu_decode_inputs(l.cfg, l.w, rows, req, fo); },
      [&](const DecodeInputs& in, int64_t R) {
        DecodeKernelSpec ks;
        ks.rows = R;
        return make_cpu_decode_kernel(l.cfg, l.w, in, ks);
      },
      f);
  BOOST_REQUIRE(f.reconstruction.size() == static_cast<size_t>(n * T));
  TensorF twice("hidden", {2 * P, H});
  for (int64_t c = 0; c < 2; ++c) std::copy(l.hidden.ptr(), l.hidden.ptr() + P * H, twice.ptr() + c * P * H);
  auto ref = make_reference_backend();
  ForwardOptions ro = fo;
  ro.mask = Mask::Causal;
  ro.keep_attn_weights = true;
  ref->prepare(l.cfg, l.w, ro);
  const ForwardResult whole = ref->forward(twice, ro);
  std::vector<double> expected(static_cast<size_t>(n * T), 0.0);
  for (int64_t h = 0; h < n; ++h)
    for (int64_t q = P; q < 2 * P; ++q)
      for (int64_t t = 0; t < P; ++t) {
        double& e = expected[static_cast<size_t>(h * T + t)];
        e = std::max(e, whole.attn_weights.data[static_cast<size_t>((h * 2 * P + q) * 2 * P + t)]);
      }
  const auto c = compare("attn_weights", expected, f.reconstruction, tolerance("attn_weights", "cpu-vs-reference", "fp32"));
  BOOST_TEST(c.ok, c.message);
  for (int64_t h = 0; h < n; ++h)  // decoded positions carry no score; the context's differ
    for (int64_t t = P; t < T; ++t) BOOST_TEST(f.reconstruction[static_cast<size_t>(h * T + t)] == 0.0);
  BOOST_TEST(*std::max_element(expected.begin(), expected.end()) > 2 * *std::min_element(expected.begin(), expected.begin() + P));
}

// The token features against their definitions: key_norm = ||key_states[h, t]||, value_norm =
// ||value_states[h, t]|| of the reference's forward, output_norm = ||W_O^h v_h,t|| in double
// loops; expected attention, on a prompt whose rows are all equal (so the queries' covariance is
// 0 and their mean is every query) with future = 1 (R = the rotation at position P), is the
// attention a query at position P gives the prompt tokens [sinks, P): the decode kernel's.
BOOST_AUTO_TEST_CASE(token_features_by_definition) {
  const int64_t P = 9, T = 12;
  Layer l = tiny_layer(T, "odd", 4);
  const AttentionConfig& cfg = l.cfg;
  const int64_t n = cfg.num_attention_heads, d_qk = cfg.qk_head_dim(), d_v = cfg.v_head_dim, H = cfg.hidden_size;
  FeatureNeeds needs;
  needs.key_norm = needs.value_norm = needs.output_norm = needs.key_diff = true;
  auto ref = make_reference_backend();
  ForwardOptions f;
  f.keep_states = true;
  f.keep_latent_cache = true;
  ref->prepare(cfg, l.w, f);
  const ForwardResult r = ref->forward(l.hidden, f);
  const TokenFeatures tf = compute_token_features(cfg, l.w, r.latent_cache, P, needs, QueryStatistics{});
  const auto& norm_tol = tolerance("token_features", "fp32-vs-double", "fp32");
  for (int64_t h = 0; h < n; ++h)
    for (int64_t t = 0; t < T; ++t) {
      double k2 = 0, v2 = 0, o2 = 0;
      for (int64_t d = 0; d < d_qk; ++d) k2 += std::pow(r.key_states.data[static_cast<size_t>((h * T + t) * d_qk + d)], 2);
      const double* v = r.value_states.ptr() + (h * T + t) * d_v;
      for (int64_t d = 0; d < d_v; ++d) v2 += v[d] * v[d];
      for (int64_t j = 0; j < H; ++j) {
        double o = 0;
        for (int64_t d = 0; d < d_v; ++d) o += static_cast<double>(l.w.o_proj.data[static_cast<size_t>(j * n * d_v + h * d_v + d)]) * v[d];
        o2 += o * o;
      }
      const size_t at = static_cast<size_t>(h * T + t);
      BOOST_TEST(std::abs(tf.key_norm[at] - std::sqrt(k2)) <= norm_tol.rtol * std::sqrt(k2));
      BOOST_TEST(std::abs(tf.value_norm[at] - std::sqrt(v2)) <= norm_tol.rtol * std::sqrt(v2));
      BOOST_TEST(std::abs(tf.output_norm[at] - std::sqrt(o2)) <= norm_tol.rtol * std::sqrt(o2));
    }
  // key_diff = -cos(k_h,t, a_h), a_h = the mean of the prompt's unit keys (double loops); a cosine
  // is at most 1, so the row's relative bound is used as an absolute one
  for (int64_t h = 0; h < n; ++h) {
    const auto key = [&](int64_t t) { return r.key_states.ptr() + (h * T + t) * d_qk; };
    const auto norm = [&](const double* k) {
      double s = 0;
      for (int64_t d = 0; d < d_qk; ++d) s += k[d] * k[d];
      return std::sqrt(s);
    };
    std::vector<double> a(static_cast<size_t>(d_qk), 0.0);
    for (int64_t t = 0; t < P; ++t)
      for (int64_t d = 0; d < d_qk; ++d) a[static_cast<size_t>(d)] += key(t)[d] / norm(key(t)) / static_cast<double>(P);
    for (int64_t t = 0; t < T; ++t) {
      double dot = 0;
      for (int64_t d = 0; d < d_qk; ++d) dot += key(t)[d] * a[static_cast<size_t>(d)];
      const double want = -dot / (norm(key(t)) * norm(a.data()));
      BOOST_TEST(std::abs(tf.key_diff[static_cast<size_t>(h * T + t)] - want) <= norm_tol.rtol, "head " << h << " token " << t);
    }
  }
  // expected attention on equal rows
  for (int64_t t = 1; t < T; ++t)
    std::copy(l.hidden.data.begin(), l.hidden.data.begin() + H, l.hidden.data.begin() + t * H);
  DecodeOptions o = options(P, T - P, {8}, "expected-attention:sinks=2,vnorm=0");
  auto cpu = make_cpu_backend();
  const DecodeInputs in = inputs_of(*cpu, l, o, Precision::FP32);
  BOOST_TEST(in.query_statistics.rows == P - 2);
  FeatureNeeds ea;
  ea.expected_attention = true;
  ea.expected_sinks = 2;
  ea.expected_future = 1;
  const TokenFeatures e = compute_token_features(cfg, l.w, in.latent_cache, P, ea, in.query_statistics);
  DecodeKernelSpec ks;
  auto k = make_cpu_decode_kernel(cfg, l.w, in, ks);
  Positions prompt(static_cast<size_t>(P - 2));
  std::iota(prompt.begin(), prompt.end(), 2);
  std::vector<double> probs;
  k->begin_query(P);
  k->attend(prompt, probs, -1, 0);
  std::vector<double> got;
  for (int64_t h = 0; h < n; ++h)
    for (int64_t j = 0; j < P - 2; ++j) got.push_back(e.expected_attention[static_cast<size_t>(h * T + 2 + j)]);
  const auto c = compare("expected_attention", {n, P - 2}, probs, got,
                         tolerance("expected_attention", "features-vs-decode-kernel", "fp32"));
  BOOST_TEST(c.ok, c.message);
}

// leverage and lagkv against their definitions (docs/decode.md §2.2), in double loops and Eigen's
// inverse: leverage = the z-scored y_t^T (Y^T Y + 0.01 I)^{-1} y_t of the centred pre-RoPE latent
// rows (k_pe un-rotated), exact (sketch=0) and sketched (Phi from Rng(seed, 7101), N(0,1)/sqrt(k),
// row by row), statistics over the prompt rows [sinks, P); lagkv = each partition's ranks of
// (softmax std of the key, normalised by the next partition's min/max per dim, + the value's) / 2,
// from the reference's key_states and value_states (ranks compared exactly), 1 elsewhere.
BOOST_AUTO_TEST_CASE(token_features_leverage_and_lagkv_by_definition) {
  const int64_t P = 9, T = 12, sinks = 2;
  Layer l = tiny_layer(T, "odd", 4);
  const AttentionConfig& cfg = l.cfg;
  const int64_t n = cfg.num_attention_heads, d_qk = cfg.qk_head_dim(), d_v = cfg.v_head_dim;
  const int64_t r_kv = cfg.kv_lora_rank, d_r = cfg.qk_rope_head_dim, d = r_kv + d_r;
  auto ref = make_reference_backend();
  ForwardOptions f;
  f.keep_states = true;
  f.keep_latent_cache = true;
  ref->prepare(cfg, l.w, f);
  const ForwardResult r = ref->forward(l.hidden, f);
  const auto& tol = tolerance("token_features", "fp32-vs-double", "fp32");
  // the pre-RoPE rows: k_pe turned back by its position's rotation (a 2 x 2 solve per pair)
  const RopeTables rt = rope_tables(cfg, position_ids(0, T));
  Eigen::MatrixXd X(T, d);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < d; ++c) X(t, c) = r.latent_cache.ptr()[t * d + c];
    for (int64_t i = 0; i < d_r / 2; ++i) {
      const auto [a, b] = cfg.rope_pair(i);
      Eigen::Matrix2d rot;
      const double cs = rt.cos[static_cast<size_t>(t * d_r + i)], sn = rt.sin[static_cast<size_t>(t * d_r + i)];
      rot << cs, -sn, sn, cs;
      const Eigen::Vector2d x = rot.inverse() * Eigen::Vector2d(X(t, r_kv + a), X(t, r_kv + b));
      X(t, r_kv + a) = x(0);
      X(t, r_kv + b) = x(1);
    }
  }
  const Eigen::RowVectorXd mu = X.middleRows(sinks, P - sinks).colwise().mean();
  for (int64_t sketch : {int64_t{0}, int64_t{5}}) {
    Eigen::MatrixXd Phi = Eigen::MatrixXd::Identity(d, d);
    if (sketch > 0) {
      Rng rng(3, 7101);
      Phi.resize(d, sketch);
      for (int64_t i = 0; i < d; ++i)
        for (int64_t j = 0; j < sketch; ++j) Phi(i, j) = rng.normal() / std::sqrt(static_cast<double>(sketch));
    }
    const Eigen::MatrixXd Y = (X.rowwise() - mu) * Phi;
    const Eigen::MatrixXd Yp = Y.middleRows(sinks, P - sinks);
    const Eigen::MatrixXd Ginv =
        (Yp.transpose() * Yp + 0.01 * Eigen::MatrixXd::Identity(Y.cols(), Y.cols())).inverse();
    std::vector<double> lev(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) lev[static_cast<size_t>(t)] = Y.row(t) * Ginv * Y.row(t).transpose();
    double mean = 0, var = 0;
    for (int64_t t = sinks; t < P; ++t) mean += lev[static_cast<size_t>(t)] / static_cast<double>(P - sinks);
    for (int64_t t = sinks; t < P; ++t) var += std::pow(lev[static_cast<size_t>(t)] - mean, 2) / static_cast<double>(P - sinks - 1);
    FeatureNeeds needs;
    needs.leverage = true;
    needs.leverage_sinks = sinks;
    needs.leverage_sketch = sketch;
    needs.leverage_seed = 3;
    const TokenFeatures tf = compute_token_features(cfg, l.w, r.latent_cache, P, needs, QueryStatistics{});
    BOOST_REQUIRE(tf.leverage.size() == static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      const double want = (lev[static_cast<size_t>(t)] - mean) / std::sqrt(var);
      BOOST_TEST(std::abs(tf.leverage[static_cast<size_t>(t)] - want) <= tol.rtol * std::max(1.0, std::abs(want)),
                 "sketch " << sketch << " token " << t << ": " << tf.leverage[static_cast<size_t>(t)] << " vs " << want);
    }
  }
  // lagkv: sinks 1, lag 3: partitions [1, 4), [4, 7), [7, 10); the first two are ranked
  FeatureNeeds lag;
  lag.lagkv = true;
  lag.lagkv_sinks = 1;
  lag.lagkv_lag = 3;
  const TokenFeatures lf = compute_token_features(cfg, l.w, r.latent_cache, P, lag, QueryStatistics{});
  BOOST_REQUIRE(lf.lagkv.size() == static_cast<size_t>(n * T));
  for (int64_t h = 0; h < n; ++h) {
    std::vector<double> want(static_cast<size_t>(T), 1.0);
    for (int64_t c = 0; c < 2; ++c) {
      const int64_t t0 = 1 + 3 * c;
      std::vector<double> s(3, 0.0);
      for (int kind = 0; kind < 2; ++kind) {
        const int64_t w = kind ? d_v : d_qk;
        const auto x = [&](int64_t t, int64_t i) {
          return kind ? r.value_states.ptr()[(h * T + t) * d_v + i] : r.key_states.ptr()[(h * T + t) * d_qk + i];
        };
        std::vector<double> sd(3);
        for (int64_t j = 0; j < 3; ++j) {
          std::vector<double> u(static_cast<size_t>(w));
          for (int64_t i = 0; i < w; ++i) {
            double lo = x(t0 + 3, i), hi = x(t0 + 3, i);
            for (int64_t k = 1; k < 3; ++k) lo = std::min(lo, x(t0 + 3 + k, i)), hi = std::max(hi, x(t0 + 3 + k, i));
            u[static_cast<size_t>(i)] = (x(t0 + j, i) - lo) / (hi - lo);
          }
          const double m = std::accumulate(u.begin(), u.end(), 0.0) / static_cast<double>(w);
          double v = 0;
          for (double e : u) v += (e - m) * (e - m);
          sd[static_cast<size_t>(j)] = std::sqrt(v / static_cast<double>(w - 1));
        }
        double z = 0;
        for (double e : sd) z += std::exp(e);
        for (int64_t j = 0; j < 3; ++j) s[static_cast<size_t>(j)] += std::exp(sd[static_cast<size_t>(j)]) / z / 2;
      }
      for (int64_t j = 0; j < 3; ++j) {
        int64_t rank = 0;
        for (int64_t k = 0; k < 3; ++k) rank += s[static_cast<size_t>(k)] < s[static_cast<size_t>(j)];
        want[static_cast<size_t>(t0 + j)] = static_cast<double>(rank) / 3.0;
      }
    }
    for (int64_t t = 0; t < T; ++t)
      BOOST_TEST(lf.lagkv[static_cast<size_t>(h * T + t)] == want[static_cast<size_t>(t)], "head " << h << " token " << t);
  }
}

// Every token feature is the same bits whatever the thread count (OpenBLAS's and the features'
// own) and whatever rows are computed beside the token: at this width (kv_b_proj [768, 256] over
// 300 rows, two blocks of the expansion) OpenBLAS threads its sgemm, and with the features on it
// 1, 2 and 3 threads gave other bits (docs/decode.md §2.2). A cache cut to fewer rows gives its
// tokens the same features (keydiff's anchor, expected-attention's statistics and normaliser are
// the prompt's). The pre-RoPE query statistics likewise for any OpenBLAS thread count.
BOOST_AUTO_TEST_CASE(token_features_do_not_depend_on_threads_or_the_batch) {
  const int64_t P = 260, T = 300, cut = 270;
  const Layer l = medium_layer(T);
  const DecodeOptions o = options(P, T - P, {64}, "expected-attention:sinks=2,future=16");
  auto cpu = make_cpu_backend();
  const DecodeInputs in = inputs_of(*cpu, l, o, Precision::FP32);
  FeatureNeeds needs;
  needs.key_norm = needs.value_norm = needs.output_norm = needs.key_diff = needs.expected_attention = true;
  needs.expected_sinks = 2;
  needs.expected_future = 16;
  const auto features = [&](const TensorD& cache, int threads) {
    const cpu::BlasThreads blas(threads);
    return compute_token_features(l.cfg, l.w, cache, P, needs, in.query_statistics, threads);
  };
  const std::vector<std::vector<double> TokenFeatures::*> kinds = {&TokenFeatures::key_norm, &TokenFeatures::value_norm,
      &TokenFeatures::output_norm, &TokenFeatures::key_diff, &TokenFeatures::expected_attention};
  const auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
  };
  const TokenFeatures one = features(in.latent_cache, 1);
  for (int threads : {2, 3}) {
    const TokenFeatures f = features(in.latent_cache, threads);
    for (size_t k = 0; k < kinds.size(); ++k)
      BOOST_TEST(same(f.*kinds[k], one.*kinds[k]), "feature " << k << " at " << threads << " threads");
  }
  TensorD fewer("latent_cache", {cut, in.latent_cache.dim(1)});
  std::copy_n(in.latent_cache.data.begin(), fewer.data.size(), fewer.data.begin());
  const TokenFeatures part = features(fewer, 2);
  // leverage ([T]: the prompt's statistics) and lagkv (a partition's ranks: its rows and the next
  // partition's) likewise; leverage also with fewer rows
  FeatureNeeds more;
  more.leverage = more.lagkv = true;
  more.leverage_sinks = 2;
  more.leverage_sketch = 48;
  more.lagkv_sinks = 4;
  more.lagkv_lag = 16;
  const auto more_features = [&](const TensorD& cache, int threads) {
    const cpu::BlasThreads blas(threads);
    return compute_token_features(l.cfg, l.w, cache, P, more, in.query_statistics, threads);
  };
  const TokenFeatures more_one = more_features(in.latent_cache, 1);
  for (int threads : {2, 3}) {
    const TokenFeatures f = more_features(in.latent_cache, threads);
    BOOST_TEST(same(f.leverage, more_one.leverage), "leverage at " << threads << " threads");
    BOOST_TEST(same(f.lagkv, more_one.lagkv), "lagkv at " << threads << " threads");
  }
  const TokenFeatures more_part = more_features(fewer, 2);
  BOOST_TEST(std::memcmp(more_part.leverage.data(), more_one.leverage.data(), static_cast<size_t>(cut) * sizeof(double)) == 0);
  const int64_t n = l.cfg.num_attention_heads;
  for (size_t k = 0; k < kinds.size(); ++k) {
    BOOST_REQUIRE((part.*kinds[k]).size() == static_cast<size_t>(n * cut));
    size_t differ = 0;
    for (int64_t h = 0; h < n; ++h)
      for (int64_t t = 0; t < cut; ++t)
        differ += std::memcmp(&(part.*kinds[k])[static_cast<size_t>(h * cut + t)],
                              &(one.*kinds[k])[static_cast<size_t>(h * T + t)], sizeof(double)) != 0;
    BOOST_TEST(differ == 0u, "feature " << k << ": " << differ << " values differ with " << cut << " rows");
  }
  // the statistics: 1024 rows of random roped queries (a dgemm OpenBLAS threads)
  const int64_t rows = 1024, d_qk = l.cfg.qk_head_dim();
  const TensorF q = test::random_hidden(rows, n * d_qk, 11);
  std::vector<int64_t> positions(static_cast<size_t>(rows));
  std::iota(positions.begin(), positions.end(), 0);
  const auto statistics = [&](int threads) {
    const cpu::BlasThreads blas(threads);
    return prerope_query_statistics(l.cfg, q.ptr(), rows, positions, 2);
  };
  const QueryStatistics s1 = statistics(1);
  for (int threads : {2, 3}) {
    const QueryStatistics s = statistics(threads);
    BOOST_TEST(same(s.mean, s1.mean), "statistics mean at " << threads << " threads");
    BOOST_TEST(same(s.cov, s1.cov), "statistics covariance at " << threads << " threads");
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
  for (const std::string geometry : {"tiny", "odd", "q_lora_null", "bias", "no_interleave", "v2"}) {
    const int64_t P = 11, N = 7, T = P + N;
    const Layer l = tiny_layer(T, geometry);
    const DecodeOptions o = options(P, N, {8}, "full");
    for (bool reference : {true, false}) {
      auto b = reference ? make_reference_backend() : make_cpu_backend();
      const DecodeInputs in = inputs_of(*b, l, o, Precision::FP32);
      ForwardOptions f;
      const TensorD prefill = rows_of(b->forward(l.hidden, f).attn_output, P, T);  // causal over all T rows
      for (DecodeAttention a : {DecodeAttention::Absorbed, DecodeAttention::Naive}) {
        const DecodeResult r = decode_with(l, in, o, reference, a, Precision::FP32);
        const auto& tol = reference ? tolerance("attn_output", "reference-identity", "double")
                                    : tolerance("attn_output", "decode-full-vs-prefill", "fp32");
        const auto c = compare("attn_output", prefill, r.full_output, tol);
        BOOST_TEST(c.ok, geometry << (reference ? " reference " : " cpu ") << decode_attention_name(a) << ": " << c.message);
        // docs/decode.md §3: the reference's naive form sums in the prefill's order: exactly its rows
        if (reference && a == DecodeAttention::Naive)
          BOOST_TEST((r.full_output.data == prefill.data), geometry << " reference naive: not the prefill's bits");
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
    const DecodeOptions o = options(P, N, {40}, "full");
    auto b = make_cpu_backend();
    const DecodeInputs in = inputs_of(*b, l, o, Precision::BF16);
    ForwardOptions f;
    f.precision = Precision::BF16;
    const TensorD prefill = rows_of(b->forward(l.hidden, f).attn_output, P, T);
    for (DecodeAttention a : {DecodeAttention::Naive, DecodeAttention::Absorbed}) {
      const DecodeResult r = decode_with(l, in, o, false, a, Precision::BF16);
      const std::string pair = a == DecodeAttention::Naive ? "decode-naive-vs-prefill" : "decode-absorbed-vs-prefill";
      const auto c = compare("attn_output", prefill, r.full_output, tolerance("attn_output", pair, "bf16"));
      BOOST_TEST(c.ok, geometry << " " << pair << ": " << c.message);
      // docs/decode.md §3: naive rounds at the prefill's points, and on the small geometries no fp32
      // sum of the two paths lands on the other side of a bf16 rounding: the same bits. (At Kimi
      // width the prefill's oneDNN bf16 kernel sums 7168 products in its own blocked order and flips
      // a few roundings; with Eigen it is the same bits too. Not asserted there.)
      if (a == DecodeAttention::Naive && !kimi && !mla::test::ran_amx(b->gemm_info()))
        BOOST_TEST((r.full_output.data == prefill.data), geometry << " naive bf16: not the prefill's bits");
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
    const DecodeOptions o = options(P, N, {10},
                                    "full,h2o:sinks=2,recent=3,h2o-normalized:sinks=2,recent=3,tova:sinks=2,recent=3,"
                                    "streaming:sinks=2,snapkv:window=5,scissorhands:sinks=2,recent=3,window=5,"
                                    "random:sinks=2,recent=3,oracle");
    const DecodeInputs in = inputs_of(*ref_backend, l, o, p);
    const DecodeResult ref_abs = decode_with(l, in, o, true, DecodeAttention::Absorbed, p);
    const DecodeResult ref_naive = decode_with(l, in, o, true, DecodeAttention::Naive, p);
    const DecodeResult cpu_abs = decode_with(l, in, o, false, DecodeAttention::Absorbed, p);
    const DecodeResult cpu_naive = decode_with(l, in, o, false, DecodeAttention::Naive, p);
    const bool bf16 = p == Precision::BF16;
    for (size_t k = 0; k < ref_abs.traces.size(); ++k) {
      const PolicyTrace& t = ref_abs.traces[k];
      BOOST_TEST_CONTEXT(t.policy.label << " " << precision_name(p)) {
        // the same decisions everywhere (the scores are well separated on these inputs)
        BOOST_TEST((ref_naive.traces[k].prefill_kept == t.prefill_kept));
        BOOST_TEST((cpu_abs.traces[k].prefill_kept == t.prefill_kept));
        BOOST_TEST((cpu_naive.traces[k].prefill_kept == t.prefill_kept));
        for (size_t i = 0; i < t.steps.size(); ++i) {
          BOOST_TEST(ref_naive.traces[k].steps[i].evicted == t.steps[i].evicted);
          BOOST_TEST(cpu_naive.traces[k].steps[i].evicted == t.steps[i].evicted);
        }
        if (!bf16) {
          const auto c = compare("attn_output", t.attn_output, ref_naive.traces[k].attn_output,
                                 tolerance("attn_output", "reference-identity", "double"));
          BOOST_TEST(c.ok, "reference absorbed vs naive: " << c.message);
          const auto d = compare("attn_output", cpu_naive.traces[k].attn_output, cpu_abs.traces[k].attn_output,
                                 tolerance("attn_output", "decode-absorbed-vs-naive", "fp32"));
          BOOST_TEST(d.ok, "cpu absorbed vs naive: " << d.message);
          BOOST_TEST_MESSAGE("absorbed vs naive fp32 cpu " << t.policy.label << ": " << d.norm_error);
        } else {
          const auto d = compare("attn_output", cpu_naive.traces[k].attn_output, cpu_abs.traces[k].attn_output,
                                 tolerance("attn_output", "decode-absorbed-vs-naive", "bf16"));
          BOOST_TEST(d.ok, "cpu absorbed vs naive bf16: " << d.message);
          BOOST_TEST_MESSAGE("absorbed vs naive bf16 cpu " << t.policy.label << ": " << d.norm_error);
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
          BOOST_TEST(cpu_abs.traces[k].steps[i].mass_recall == t.steps[i].mass_recall,
                     boost::test_tools::tolerance(tolerance("mass_recall", "decode-absorbed-cpu-vs-reference", prec).rtol));
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
  const std::string policies = "full,h2o,tova,snapkv:window=8,pool=max3,knorm,expected-attention,value-aware,oracle";
  const RunResult r = run_cli("decode --checkpoint '" + tiny_checkpoint() + "' --seq-len 40 --prompt-len 30 " +
                              "--cache-budget 12,20 --sinks 2 --recent 4 --policy " + policies + " --dump-tensors --out '" +
                              out + "'");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  BOOST_TEST(contains(r.out, "mean rel_err"));
  for (const char* p : {"h2o:sinks=2,recent=4 ", "tova:sinks=2,recent=4 ", "snapkv:window=8,pool=max3,sinks=2 ",
                        "knorm:sinks=2,recent=4 ", "oracle "})
    BOOST_TEST(contains(r.out, p), p);
  // decode.csv: 8 policies x 2 budgets x 10 steps + header
  const std::string csv = test::read_text(out + "/decode.csv");
  BOOST_TEST(csv.rfind("policy,budget,step,position,cache_len,held,evicted,rel_error,residual_error,cosine,mass_recall,"
                       "mass_recall_min,mass_recall_p5,visible\n", 0) == 0u);
  BOOST_TEST(lines(csv) == 1u + 8u * 2u * 10u);
  BOOST_TEST(contains(csv, "\n\"h2o:sinks=2,recent=4\",12,9,39,13,12,"));  // last step: position 39, K + 1 attended, K held
  const std::string summary = test::read_text(out + "/summary.csv");
  BOOST_TEST(lines(summary) == 1u + 16u);
  BOOST_TEST(contains(summary, "\nfull,20,0,0,0,"));
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
  BOOST_TEST(!std::string(j["backend"]["gemm"]["engine"].get_string().value()).empty());
  BOOST_TEST(std::string_view(j["versions"]["mla_h2o"].get_string().value()).size() > 0u);
  BOOST_TEST(int64_t(j["config"]["kv_lora_rank"].get_int64().value()) == 32);  // the tiny preset
  // synthetic weights are said in stdout, report.json and the SVG titles
  BOOST_TEST(contains(r.out, "CAVEAT: synthetic weights (mla-h2o synth"), r.out);
  BOOST_TEST(contains(std::string(j["synthetic_weights"].get_string().value()), "mla-h2o synth"));
  BOOST_TEST(j["caveats"].get_array().size() == 2u);  // synthetic weights, seeded inputs
  for (const char* svg : {"/decode.svg", "/budget.svg"})
    BOOST_TEST(contains(test::read_text(out + svg), "<title>[synthetic weights] "));
  // one budget: no budget.svg
  const std::string out1 = scratch_dir("decode-cli1");
  const RunResult one = run_cli("decode --checkpoint '" + tiny_checkpoint() + "' --seq-len 20 --prompt-len 15 " +
                                "--cache-budget 9 --sinks 1 --recent 2 --policy h2o,tova --quiet --gemm eigen --threads 1 --out '" +
                                out1 + "'");
  BOOST_REQUIRE_MESSAGE(one.exit_code == 0, one.err);
  BOOST_TEST(contains(one.out, "prefill projections: Eigen "), one.out);
  // what ran, as it ran: the engine and the thread count asked for (not an unprepared backend's defaults)
  simdjson::dom::element j1 = parser.load(out1 + "/report.json");
  const std::string backend1(j1["backend"]["description"].get_string().value());
  BOOST_TEST(contains(backend1, "1 thread"), backend1);
  BOOST_TEST(contains(backend1, "Eigen"), backend1);
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
  BOOST_TEST(contains(loud.err, "decode: prefill attention FLOP "), loud.err);
  BOOST_TEST(contains(loud.err, "decode: decode steps 5/5 (100.0%)"), loud.err);
  BOOST_TEST(silent.err.empty(), silent.err);
  BOOST_TEST(contains(run_cli("decode --help").out, "--cache-budget"));
  BOOST_TEST(contains(run_cli("demo --help").out, "--decode"));
}

BOOST_AUTO_TEST_CASE(cli_errors) {
  expect_error("--seq-len 20 --prompt-len 20 --cache-budget 40 --policy h2o", "P must be < T");
  expect_error("--seq-len 20 --prompt-len 0 --cache-budget 40", "must be >= 1");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 36 --sinks 4 --recent 32 --policy h2o", "never evicts");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --policy snapkv", "never evicts");  // window 64
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --policy h2o:window=3", "not a setting of h2o");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --policy h2o,lru", "unknown policy 'lru'");
  // the wrappers: one inner press, a scorer, named before its own settings
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --policy chunkkv:press=adakv", "press=adakv is not one of:");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --policy chunkkv:press=chunkkv", "press=chunkkv is not one of:");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --policy adakv:press=oracle", "press=oracle is not one of:");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --policy criticalkv:press=", "press= is not one of:");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --policy adakv:press=h2o,press=tova", "'press' given twice");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --policy chunkkv:press.sinks=1,press=h2o", "name the press first");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --policy chunkkv:press=h2o,press.window=3", "not a setting of h2o");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --policy chunkkv:chunk=0", "chunk=0 is not an integer in [1, ");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --policy adakv:alpha=0.2", "alpha=0.2 is not of the form N%");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --policy criticalkv", "never evicts");  // snapkv's window 64
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 50,40", "strictly increasing");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --steps 0", "nothing to measure");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --policy h2o --steps 11", "but the input has 20");
  expect_error("--seq-len 20 --cache-budget 40", "--prompt-len P is required");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --attention flash", "--attention");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --backend cuda", "--backend");
  expect_error("--seq-len 20 --prompt-len 10 --cache-budget 40 --gemm mkl", "--gemm");
  const RunResult demo = run_cli("demo --decode --mask none --cache-dir '" + scratch_dir("decode-demo") + "'");
  BOOST_TEST(demo.exit_code == 2);
  BOOST_TEST(demo.err == "mla-h2o demo: error: --mask does not apply to --decode (decode attention is causal)\n");
}

// Figures that cannot leave their domain do not: every policy's per-step cosine in [-1, 1], its
// mass recalls in [0, 1], and exactly 1 where the cache holds every token (budget 1000 > T).
// On the shipped model, every preset, three budgets (one that keeps everything).
BOOST_AUTO_TEST_CASE(cosines_and_recalls_stay_in_their_domain) {
  const std::string out = scratch_dir("decode-domain") + "/o";
  const RunResult r = run_cli("decode --checkpoint '" + mla::test::data_dir() + "/../../models/tiny-mla' --seq-len 160 "
                              "--prompt-len 128 --cache-budget 70,129,1000 --policy all --quiet --out '" + out + "'");
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.err);
  std::istringstream rows(mla::test::read_text(out + "/decode.csv"));
  std::string line;
  std::getline(rows, line);
  BOOST_TEST_REQUIRE(line.find("cosine,mass_recall,mass_recall_min,mass_recall_p5,") != std::string::npos, line);
  int64_t checked = 0;
  while (std::getline(rows, line)) {
    std::vector<std::string> cell;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cell.push_back(c);
    BOOST_TEST_REQUIRE(cell.size() >= 13u, line);
    const double cosine = std::stod(cell[9]);
    BOOST_TEST((cosine >= -1.0 && cosine <= 1.0), line);
    for (size_t k = 10; k <= 12; ++k) BOOST_TEST((std::stod(cell[k]) >= 0.0 && std::stod(cell[k]) <= 1.0), line);
    if (cell[1] == "1000") {  // the cache holds every token: exactly the full cache's figures
      BOOST_TEST(cosine == 1.0, line);
      for (size_t k = 10; k <= 12; ++k) BOOST_TEST(std::stod(cell[k]) == 1.0, line);
    }
    ++checked;
  }
  BOOST_TEST(checked > 100);
}

BOOST_AUTO_TEST_SUITE_END()
