// tests/unit/test_eval.cpp — suite eval: `mla-h2o eval` (mla/eval.hpp, docs/eval.md), every
// layer's latent cache evicted by a policy, whole-model next-token metrics.
//
//   * exactness: the full cache gives logits and hidden states bit-identical (memcmp) to the plain
//     forward (model_forward); every policy at a budget >= the sequence gives full's logits, and
//     ΔNLL = KL = 0 exactly (==). At a small budget some policy differs (the check can fail).
//   * order: eval computes layer by layer over all positions; a loop that takes one token at a
//     time through all layers (written here from the same layer functions, each layer's manager
//     fed as the token arrives) gives the same logits bit for bit, for every policy.
//   * metrics: NLL, KL, top-1 and the summaries by their definitions; passkey digits found.
//   * the CLI: outputs, progress, and one error line for each bad input of issue 17.
//
// Geometry: the golden whole-model fixture (3 layers, H 64, 4 heads, 8 experts in 2 groups,
// vocab 128), P = 16 prompt rows, N = 12 decoded positions: the suite runs in seconds.
#include <boost/test/unit_test.hpp>
#include <sys/stat.h>

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "mla/error.hpp"
#include "mla/eval.hpp"
#include "mla/model.hpp"
#include "mla/model_forward.hpp"
#include "mla/policy.hpp"
#include "mla/provenance.hpp"
#include "mla/safetensors.hpp"
#include "mla/stats.hpp"
#include "mla/checkpoint.hpp"
#include "src/model/decoder_layer.hpp"
#include "src/eval/eval_layer.hpp"
#include "src/report/svg_util.hpp"
#include "test_util.hpp"
#include "compare.hpp"
#include "tolerances.hpp"

namespace {

using mla::EvalOptions;
using mla::EvalResult;
using mla::Precision;
using mla::test::RunResult;
using mla::test::run_cli;
using mla::test::scratch_dir;

constexpr int64_t kP = 16, kN = 12;

std::string fixture() { return mla::test::data_dir() + "/golden/whole-model/model"; }

// P + N + 1 ids (or `count`) below the fixture's vocabulary (128), with repeats.
std::vector<int64_t> fixture_tokens(int64_t count = kP + kN + 1) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < count; ++i) ids.push_back((i * 37 + 11) % 97 + (i % 5 == 0 ? 30 : 0));
  return ids;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Rows [r0, r0 + rows) of a row-major [*, cols] tensor.
std::vector<float> rows_of(const mla::TensorF& t, int64_t r0, int64_t rows) {
  const int64_t cols = t.dim(1);
  return {t.data.begin() + r0 * cols, t.data.begin() + (r0 + rows) * cols};
}

struct Model {
  mla::Checkpoint ckpt = mla::Checkpoint::open(fixture(), "");
  mla::ModelConfig cfg = mla::load_model_config(ckpt.config_path());
};

EvalOptions options(const std::string& policies, std::vector<int64_t> budgets, Precision precision, int64_t P = kP,
                    int64_t N = kN) {
  EvalOptions o;
  o.prompt_len = P;
  o.steps = N;
  o.budgets = std::move(budgets);
  o.policies = mla::parse_policy_list(policies);
  o.precision = precision;
  o.threads = 2;
  o.keep_logits = true;
  return o;
}

// Every preset but full, with windows and sinks that fit P = 16, K >= 6.
const std::string kPolicies =
    "full,h2o:sinks=1,recent=2,h2o-normalized:sinks=1,recent=2,tova:sinks=1,recent=2,streaming:sinks=1,"
    "snapkv:window=4,snapkv-maxpool:window=4,pyramidkv:window=4,beta=2,knorm:sinks=1,recent=2,"
    "expected-attention:sinks=1,recent=2,future=8,scissorhands:window=4,recent=2,value-aware:sinks=1,recent=2,keydiff:sinks=1,recent=2,"
    "leverage:sinks=1,recent=2,cur:sinks=1,recent=2,local=4,lagkv:sinks=1,recent=2,lag=4,"
    "chunkkv:press=h2o,press.sinks=1,press.recent=2,chunk=3,criticalkv:press.window=4,adakv:press.window=4,alpha=50%,random,kvzip,oracle";

}  // namespace

BOOST_AUTO_TEST_SUITE(eval)

// ---- exactness ------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(full_and_nothing_evicted_are_the_plain_forward) {
  const Model m;
  const std::vector<int64_t> ids = fixture_tokens();
  for (Precision precision : {Precision::BF16, Precision::FP32}) {
    BOOST_TEST_CONTEXT(mla::precision_name(precision)) {
      mla::ModelForwardOptions fo;
      fo.precision = precision;
      fo.threads = 1;
      fo.keep_hidden_states = true;
      const std::vector<int64_t> input(ids.begin(), ids.begin() + kP + kN);
      const mla::ModelForwardResult plain = mla::model_forward(m.ckpt, m.cfg, input, fo);

      // budget 6 evicts; budget P + N holds the whole sequence
      EvalOptions o = options(kPolicies, {6, kP + kN}, precision);
      o.keep_full_states = true;
      const EvalResult r = mla::run_eval(m.ckpt, m.cfg, ids, o);
      BOOST_TEST(same_bits(r.full.logits.data, rows_of(plain.logits, kP, kN)));
      BOOST_TEST(same_bits(r.full_logits.data, plain.logits.data));
      BOOST_REQUIRE(r.hidden_states.size() == plain.hidden_states.size());
      for (size_t L = 0; L < plain.hidden_states.size(); ++L)
        BOOST_TEST(same_bits(r.hidden_states[L].data, plain.hidden_states[L].data), "hidden_states." << L);

      const size_t per_budget = o.policies.size() - 1;
      BOOST_REQUIRE(r.runs.size() == 2 * per_budget);
      bool some_differ = false;
      for (size_t k = 0; k < r.runs.size(); ++k) {
        const mla::EvalRun& run = r.runs[k];
        if (run.budget == 6) {
          some_differ = some_differ || !same_bits(run.logits.data, r.full.logits.data);
          continue;
        }
        BOOST_TEST_CONTEXT(run.policy.label << " at K = " << run.budget) {
          BOOST_TEST(same_bits(run.logits.data, r.full.logits.data));
          for (size_t i = 0; i < run.positions.size(); ++i) {
            BOOST_TEST(run.positions[i].kl == 0.0);
            BOOST_TEST(run.positions[i].nll == r.full.positions[i].nll);
            BOOST_TEST(run.positions[i].top1_agree);
          }
          for (const mla::EvalLayer& l : run.layers) {
            BOOST_TEST(l.mean_attn_rel_error == 0.0);
            BOOST_TEST(l.mean_mass_recall == 1.0);
          }
        }
      }
      BOOST_TEST(some_differ, "no policy changed the logits at K = 6: the comparison cannot fail");
      for (const mla::EvalSummary& s : mla::summarize(r, o.budgets)) {
        if (s.budget != kP + kN && s.policy != "full") continue;
        BOOST_TEST_CONTEXT(s.policy << " at K = " << s.budget) {
          BOOST_TEST(s.delta_nll == 0.0);
          BOOST_TEST(s.mean_kl == 0.0);
          BOOST_TEST(s.ppl_ratio == 1.0);
          BOOST_TEST(s.top1_agreement == 1.0);
        }
      }
    }
  }
}

// ---- the prefill protocol (--compress prefill, docs/eval.md §2.1) --------------------------------

// kvpress's protocol: the prompt cut to K once, then every decoded position joins and nothing is
// evicted. At K = P nothing is cut: every policy's logits are full's bit for bit. At K = 6 the
// cache grows by one per step (K + i + 1 attended at step i, none evicted) and some policy differs.
BOOST_AUTO_TEST_CASE(prefill_protocol_is_exact_at_the_prompt_and_grows) {
  const Model m;
  const std::vector<int64_t> ids = fixture_tokens();
  for (Precision precision : {Precision::BF16, Precision::FP32}) {
    BOOST_TEST_CONTEXT(mla::precision_name(precision)) {
      EvalOptions o = options(kPolicies, {6, kP}, precision);
      o.compress = mla::Compression::Prefill;
      const EvalResult r = mla::run_eval(m.ckpt, m.cfg, ids, o);
      bool some_differ = false;
      for (const mla::EvalRun& run : r.runs) {
        BOOST_TEST_CONTEXT(run.policy.label << " at K = " << run.budget) {
          if (run.budget == kP) {
            BOOST_TEST(same_bits(run.logits.data, r.full.logits.data));
            for (size_t i = 0; i < run.positions.size(); ++i) BOOST_TEST(run.positions[i].kl == 0.0);
            continue;
          }
          some_differ = some_differ || !same_bits(run.logits.data, r.full.logits.data);
          for (const mla::EvalLayer& l : run.layers) {
            // mean over steps i = 0 .. N-1 of K_layer + i + 1
            BOOST_TEST(l.mean_cache_len == static_cast<double>(l.budget) + (kN + 1) / 2.0, "layer " << l.layer);
            BOOST_TEST(l.mean_held == l.mean_cache_len, "layer " << l.layer);
          }
        }
      }
      BOOST_TEST(some_differ, "no policy changed the logits at K = 6 under prefill: the comparison cannot fail");
      for (const mla::EvalSummary& s : mla::summarize(r, o.budgets))
        if (s.budget == kP) BOOST_TEST((s.delta_nll == 0.0 && s.mean_kl == 0.0), s.policy);
    }
  }
}

// streaming under prefill is one mask, the same in every layer and head: sinks s = 2 and the
// K - s = 4 newest prompt tokens, then the decoded ones. transformers' fp32 logits under that 4D
// mask (reference/python/make_prefill_mask_fixture.py) against eval's, P = 12, N = 7, K = 6.
BOOST_AUTO_TEST_CASE(prefill_streaming_matches_transformers_masked) {
  const Model m;
  const std::string dir = mla::test::data_dir() + "/golden/whole-model";
  const mla::SafetensorsFile fx = mla::SafetensorsFile::open(dir + "/streaming-prefill.safetensors");
  std::vector<int64_t> ids;
  for (float v : fx.to_float(fx.at("input_ids"))) ids.push_back(static_cast<int64_t>(v));
  BOOST_REQUIRE(ids.size() == 20u);
  EvalOptions o;
  o.prompt_len = 12;
  o.steps = 7;
  o.budgets = {6};
  o.policies = mla::parse_policy_list("streaming:sinks=2");
  o.precision = Precision::FP32;
  o.threads = 2;
  o.keep_logits = true;
  o.compress = mla::Compression::Prefill;
  const EvalResult r = mla::run_eval(m.ckpt, m.cfg, ids, o);
  BOOST_REQUIRE(r.runs.size() == 1u);
  const std::vector<float> hf = fx.to_float(fx.at("logits"));  // [20, V]
  const int64_t V = m.cfg.attention.vocab_size;
  const std::vector<double> ref(hf.begin() + 12 * V, hf.begin() + 19 * V);
  const auto widen = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  const mla::test::Tolerance& tol = mla::test::tolerance("logits", "model-cpu-vs-hf", "fp32");
  const mla::test::CompareResult c = mla::test::compare("logits", {7, V}, ref, widen(r.runs[0].logits.data), tol);
  BOOST_TEST(c.ok, c.message);
  BOOST_TEST_MESSAGE("prefill streaming vs transformers' masked fp32 logits: norm error " << c.norm_error);
  // the check has power: the full cache's logits are far from the masked ones
  const mla::test::CompareResult f = mla::test::compare("logits", {7, V}, ref, widen(r.full.logits.data), tol);
  BOOST_TEST(!f.ok);
  BOOST_TEST(f.norm_error > mla::test::tolerance("logits", "prefill-full-vs-masked-hf", "fp32").max_norm_error);
}

// ---- the order of computation ---------------------------------------------------------------

namespace {

using mla::decoder::MatrixRM;

// One policy's run computed one token at a time through all layers: every layer prepared at
// once, its prompt prefilled and its manager fed the prompt; then for x = P .. P+N-1 the row of
// token x goes through layer 0, 1, ..., its key joining each layer's cache as it arrives (its
// token features written before the manager sees it), then the head. Returns the logits [N, V].
std::vector<float> token_by_token(const Model& m, const std::vector<int64_t>& ids, const mla::PolicySettings& policy,
                                  int64_t budget, Precision precision) {
  const mla::ModelConfig& cfg = m.cfg;
  const mla::AttentionConfig& a = cfg.attention;
  const int64_t L_count = a.num_hidden_layers, n = a.num_attention_heads, d_v = a.v_head_dim;
  mla::decoder::LayerSettings settings;
  settings.precision = precision;
  settings.threads = 1;
  const mla::FeatureNeeds needs = mla::feature_needs({policy});
  const bool full = mla::policy_is_full_cache(policy);

  struct Layer {
    std::unique_ptr<mla::decoder::PreparedLayer> prepared;
    mla::LayerWeights attention;
    mla::eval::PromptLayer prompt;
    mla::cpu::RowKeys keys;      // positions [P, P + N)
    MatrixRM latent;             // [N, r_kv + d_r] the decode rows seen so far (zeros after)
    mla::TokenFeatures features; // the manager reads it through a pointer: updated in place
    std::unique_ptr<mla::CacheManager> manager;
  };
  std::vector<Layer> layers(static_cast<size_t>(L_count));
  MatrixRM h_prompt = mla::decoder::embed(m.ckpt, std::vector<int64_t>(ids.begin(), ids.begin() + kP), precision);
  // kvzip: the context's repeat (no text: run_eval's default), its own stream through the layers
  const std::vector<mla::ReconstructionChunk> chunks = mla::reconstruction_chunks(kP, {});
  std::vector<MatrixRM> h_repeat;
  for (const mla::ReconstructionChunk& c : chunks) {
    std::vector<int64_t> rep;
    for (int64_t r : c.rows) rep.push_back(ids[static_cast<size_t>(r)]);
    h_repeat.push_back(mla::decoder::embed(m.ckpt, rep, precision));
  }
  for (int64_t L = 0; L < L_count; ++L) {
    Layer& l = layers[static_cast<size_t>(L)];
    mla::DecoderLayerWeights w = mla::load_decoder_layer(m.ckpt, cfg, L, true);
    l.prepared = std::make_unique<mla::decoder::PreparedLayer>(cfg, w, settings);
    l.attention = std::move(w.self_attn);
    l.keys.reset(n, a.qk_nope_head_dim, a.qk_rope_head_dim, d_v, kP, kN, precision);
    l.latent = MatrixRM::Zero(kN, a.kv_lora_rank + a.qk_rope_head_dim);
    if (full) {
      l.prompt = mla::eval::prefill_layer(*l.prepared, h_prompt, 0, needs);
      continue;
    }
    const int64_t K = mla::layer_budget(policy, budget, L, L_count, kP);
    mla::PolicyContext ctx;
    ctx.heads = n;
    ctx.prompt_len = kP;
    ctx.positions = kP + kN;
    // the observation window first, then the prompt with the window's queries kept, then the
    // features: the prompt's, and zeros for the decode rows until each token arrives
    const int64_t window = mla::policy_observation_window(policy);
    l.prompt = mla::eval::prefill_layer(*l.prepared, h_prompt, window, needs);
    if (needs.reconstruction) {
      l.prompt.reconstruction.heads = n;
      l.prompt.reconstruction.tokens = kP + kN;
      l.prompt.reconstruction.reconstruction.assign(static_cast<size_t>(n * (kP + kN)), 0.0);
      for (size_t c = 0; c < chunks.size(); ++c) mla::eval::reconstruction_layer(*l.prepared, l.prompt, chunks[c], h_repeat[c]);
    }
    l.features = mla::eval::run_features(a, l.attention, l.prompt, l.latent, needs, 1);
    ctx.features = &l.features;
    l.manager = mla::make_cache_manager(policy, K, ctx);
    mla::eval::prefill_manager(*l.manager, *l.prepared, l.prompt);
  }
  const mla::decoder::PreparedHead head(cfg, mla::load_model_head(m.ckpt, cfg), precision, 1);

  std::vector<float> logits;
  mla::cpu::RowScratch scratch;
  for (int64_t x = kP; x < kP + kN; ++x) {
    const int64_t i = x - kP;
    MatrixRM h = mla::decoder::embed(m.ckpt, {ids[static_cast<size_t>(x)]}, precision);  // [1, H]
    for (int64_t L = 0; L < L_count; ++L) {
      Layer& l = layers[static_cast<size_t>(L)];
      // token x through the layer: its key joins the layer's cache, its row attends over the cache
      const mla::cpu::KeyView keys{&l.prompt.keys, &l.keys, kP};
      std::vector<int64_t> all(static_cast<size_t>(x + 1));
      std::iota(all.begin(), all.end(), 0);
      MatrixRM latent(1, a.kv_lora_rank + a.qk_rope_head_dim);  // token x's latent cache row
      mla::decoder::LayerPlugs plugs;
      plugs.attention.keys = [&](int64_t, int64_t, const mla::cpu::KvPath& kvp, const MatrixRM& k_pe_roped) {
        l.keys.set_rows(x, 1, kvp.kv.data(), kvp.kv.cols(), k_pe_roped.data(), k_pe_roped.cols());
      };
      plugs.attention.latent = mla::cpu::latent_cache_into(latent);
      plugs.attention.attend = [&](const MatrixRM& q, int64_t, MatrixRM& ctx) {
        if (full) {
          std::vector<float> probs(static_cast<size_t>(n * (x + 1)));
          mla::cpu::attend_row(l.prepared->attention_spec(), q.data(), keys, all, probs.data(), ctx.data(), scratch);
        } else {
          if (needs.any()) {  // token x's features, written where the manager reads them
            l.latent.row(i) = latent.row(0);
            const mla::TokenFeatures f = mla::eval::run_features(a, l.attention, l.prompt, l.latent, needs, 1);
            for (auto [dst, src] : {std::pair{&l.features.key_norm, &f.key_norm}, std::pair{&l.features.value_norm, &f.value_norm},
                                    std::pair{&l.features.output_norm, &f.output_norm},
                                    std::pair{&l.features.expected_attention, &f.expected_attention},
                                    std::pair{&l.features.key_diff, &f.key_diff}})
              for (int64_t hd = 0; hd < n && !src->empty(); ++hd)
                (*dst)[static_cast<size_t>(hd * (kP + kN) + x)] = (*src)[static_cast<size_t>(hd * (kP + kN) + x)];
            if (!f.leverage.empty()) l.features.leverage[static_cast<size_t>(x)] = f.leverage[static_cast<size_t>(x)];
            // lagkv's rank of t is read once t's next partition has arrived: what the rows so far give
            for (int64_t hd = 0; hd < n && !f.lagkv.empty(); ++hd)
              for (int64_t t = 0; t <= x; ++t)
                l.features.lagkv[static_cast<size_t>(hd * (kP + kN) + t)] = f.lagkv[static_cast<size_t>(hd * (kP + kN) + t)];
          }
          std::span<const int64_t> cache;
          std::vector<double> oracle;
          if (l.manager->needs_full_attention()) {
            std::vector<float> pf(static_cast<size_t>(n * (x + 1)));
            std::vector<float> unused(static_cast<size_t>(n * d_v));
            mla::cpu::attend_row(l.prepared->attention_spec(), q.data(), keys, all, pf.data(), unused.data(), scratch);
            oracle.assign(pf.begin(), pf.end());
            cache = l.manager->begin_step(x, oracle);
          } else {
            cache = l.manager->begin_step(x);
          }
          std::vector<float> probs(cache.size() * static_cast<size_t>(n));
          mla::cpu::attend_row(l.prepared->attention_spec(), q.data(), keys, cache, probs.data(), ctx.data(), scratch);
          const std::vector<double> probs_d(probs.begin(), probs.end());
          l.manager->end_step(probs_d);
        }
      };
      mla::decoder::layer_forward(*l.prepared, h, {x}, plugs);
    }
    const MatrixRM row = head.logits(h);
    logits.insert(logits.end(), row.data(), row.data() + row.size());
  }
  return logits;
}

}  // namespace

BOOST_AUTO_TEST_CASE(layer_by_layer_equals_token_by_token) {
  const Model m;
  const std::vector<int64_t> ids = fixture_tokens();
  const int64_t K = 7;
  for (Precision precision : {Precision::BF16, Precision::FP32}) {
    const EvalOptions o = options(kPolicies, {K}, precision);
    const EvalResult r = mla::run_eval(m.ckpt, m.cfg, ids, o);
    BOOST_TEST_CONTEXT(mla::precision_name(precision) << " full")
    BOOST_TEST(same_bits(r.full.logits.data, token_by_token(m, ids, mla::policy_preset("full"), K, precision)));
    for (const mla::EvalRun& run : r.runs)
      BOOST_TEST_CONTEXT(mla::precision_name(precision) << " " << run.policy.label) {
        BOOST_TEST(same_bits(run.logits.data, token_by_token(m, ids, run.policy, K, precision)));
      }
  }
}

// kvzip's repeat at every layer (eval_layer.hpp reconstruction_layer: its own stream over the
// prompt's keys, layer after layer) is the causal forward of [context; repeat] as one sequence:
// the same bits for the repeat's rows at every layer, and its scores are, bit for bit, the max
// over the repeat's rows of that forward's attention (prompt_query_probs) on each context token,
// per head. Text ids 3 4 5 | 6 stand for the prompt and suffix; one chunk (P = 16 < 2048).
BOOST_AUTO_TEST_CASE(kvzip_repeat_is_the_causal_forward_of_context_and_repeat) {
  const Model m;
  const mla::AttentionConfig& a = m.cfg.attention;
  const int64_t P = kP, n = a.num_attention_heads;
  const std::vector<int64_t> ids = fixture_tokens();
  const std::vector<mla::ReconstructionChunk> chunks = mla::reconstruction_chunks(P, mla::ReconstructionText{{3, 4, 5}, {}, {6}});
  BOOST_REQUIRE(chunks.size() == 1u);
  const mla::ReconstructionChunk& c = chunks[0];
  const int64_t R = static_cast<int64_t>(c.rows.size());
  BOOST_REQUIRE(R == P + 4);
  std::vector<int64_t> context(ids.begin(), ids.begin() + P), repeat, sequence = context;
  for (int64_t r : c.rows) repeat.push_back(r >= 0 ? ids[static_cast<size_t>(r)] : -(r + 1));
  sequence.insert(sequence.end(), repeat.begin(), repeat.end());
  for (Precision precision : {Precision::BF16, Precision::FP32}) {
    mla::decoder::LayerSettings settings;
    settings.precision = precision;
    settings.threads = 2;
    MatrixRM h_prompt = mla::decoder::embed(m.ckpt, context, precision), h_repeat = mla::decoder::embed(m.ckpt, repeat, precision),
             h_sequence = mla::decoder::embed(m.ckpt, sequence, precision);
    for (int64_t L = 0; L < a.num_hidden_layers; ++L) {
      BOOST_TEST_CONTEXT(mla::precision_name(precision) << " layer " << L) {
        const mla::DecoderLayerWeights w = mla::load_decoder_layer(m.ckpt, m.cfg, L, true);
        mla::decoder::PreparedLayer layer(m.cfg, w, settings);
        mla::eval::PromptLayer prompt = mla::eval::prefill_layer(layer, h_prompt, 0, {});
        prompt.reconstruction.heads = n;
        prompt.reconstruction.tokens = P;
        mla::eval::reconstruction_layer(layer, prompt, c, h_repeat);
        // the one sequence: its last R rows' causal attention over [0, q]
        const mla::eval::PromptLayer whole = mla::eval::prefill_layer(layer, h_sequence, R, {});
        std::vector<double> expected(static_cast<size_t>(n * P), 0.0);
        for (int64_t q = P; q < P + R; ++q) {
          const std::vector<double> p = mla::eval::prompt_query_probs(layer, whole, q);  // [n, q+1]
          for (int64_t h = 0; h < n; ++h)
            for (int64_t t = 0; t < P; ++t) {
              double& e = expected[static_cast<size_t>(h * P + t)];
              e = std::max(e, p[static_cast<size_t>(h * (q + 1) + t)]);
            }
        }
        BOOST_TEST(prompt.reconstruction.reconstruction == expected, boost::test_tools::per_element());
        BOOST_TEST(std::memcmp(h_repeat.data(), h_sequence.data() + P * h_sequence.cols(), sizeof(float) * h_repeat.size()) == 0);
        BOOST_TEST(std::memcmp(h_prompt.data(), h_sequence.data(), sizeof(float) * h_prompt.size()) == 0);
        // the scores can fail: they are probabilities that differ between tokens
        const auto [lo, hi] = std::minmax_element(expected.begin(), expected.end());
        BOOST_TEST((*lo > 0 && *hi < 1 && *lo < *hi));
      }
    }
  }
}

// kvzip's chunked repeat (P = 16 in chunks of 4, later chunks' prompt 7 + the previous chunk's
// last 4 tokens; suffix 6): each chunk's stream gives the rows of the causal forward of
// [context; that chunk's repeat] bit for bit at every layer, and row i's scores, a softmax over
// [0, min(4, b)) u [b, e) u [P, P + i] only, equal that forward's causal attention renormalized
// over those keys (fp32; the row of tolerances.hpp says why they differ in rounding only).
BOOST_AUTO_TEST_CASE(kvzip_chunked_repeat_scores) {
  const Model m;
  const mla::AttentionConfig& a = m.cfg.attention;
  const int64_t P = kP, n = a.num_attention_heads;
  const std::vector<int64_t> ids = fixture_tokens();
  const std::vector<mla::ReconstructionChunk> chunks =
      mla::reconstruction_chunks(P, mla::ReconstructionText{{3, 4, 5}, {7}, {6}}, 4);
  BOOST_REQUIRE(chunks.size() == 4u);
  const Precision precision = Precision::FP32;
  mla::decoder::LayerSettings settings;
  settings.precision = precision;
  settings.threads = 2;
  const std::vector<int64_t> context(ids.begin(), ids.begin() + P);
  MatrixRM h_prompt = mla::decoder::embed(m.ckpt, context, precision);
  std::vector<MatrixRM> h_repeat, h_sequence;
  for (const mla::ReconstructionChunk& c : chunks) {
    std::vector<int64_t> repeat, sequence = context;
    for (int64_t r : c.rows) repeat.push_back(r >= 0 ? ids[static_cast<size_t>(r)] : -(r + 1));
    sequence.insert(sequence.end(), repeat.begin(), repeat.end());
    h_repeat.push_back(mla::decoder::embed(m.ckpt, repeat, precision));
    h_sequence.push_back(mla::decoder::embed(m.ckpt, sequence, precision));
  }
  const mla::test::Tolerance& tol = mla::test::tolerance("reconstruction", "subset-softmax-vs-renormalized", "fp32");
  for (int64_t L = 0; L < a.num_hidden_layers; ++L) {
    BOOST_TEST_CONTEXT("layer " << L) {
      const mla::DecoderLayerWeights w = mla::load_decoder_layer(m.ckpt, m.cfg, L, true);
      mla::decoder::PreparedLayer layer(m.cfg, w, settings);
      mla::eval::PromptLayer prompt = mla::eval::prefill_layer(layer, h_prompt, 0, {});
      prompt.reconstruction.heads = n;
      prompt.reconstruction.tokens = P;
      std::vector<double> expected(static_cast<size_t>(n * P), 0.0);
      for (size_t k = 0; k < chunks.size(); ++k) {
        const mla::ReconstructionChunk& c = chunks[k];
        const int64_t R = static_cast<int64_t>(c.rows.size());
        mla::eval::reconstruction_layer(layer, prompt, c, h_repeat[k]);
        const mla::eval::PromptLayer whole = mla::eval::prefill_layer(layer, h_sequence[k], R, {});
        for (int64_t i = 0; i < R; ++i) {
          const int64_t q = P + i;
          const std::vector<double> p = mla::eval::prompt_query_probs(layer, whole, q);  // [n, q+1]
          const std::vector<int64_t> keys = mla::reconstruction_keys(c, P, i);
          for (int64_t h = 0; h < n; ++h) {
            double z = 0;
            for (int64_t t : keys) z += p[static_cast<size_t>(h * (q + 1) + t)];
            for (int64_t t = c.begin; t < c.end; ++t) {
              double& e = expected[static_cast<size_t>(h * P + t)];
              e = std::max(e, p[static_cast<size_t>(h * (q + 1) + t)] / z);
            }
          }
        }
        BOOST_TEST(std::memcmp(h_repeat[k].data(), h_sequence[k].data() + P * h_sequence[k].cols(),
                               sizeof(float) * h_repeat[k].size()) == 0, "chunk " << k);
      }
      const auto r = mla::test::compare("reconstruction", {n, P}, expected, prompt.reconstruction.reconstruction, tol);
      BOOST_TEST(r.ok, r.message);
      // every context token is scored, by its own chunk's rows
      BOOST_TEST(*std::min_element(expected.begin(), expected.end()) > 0);
    }
  }
}

// Issue 28 item 6: every preset's logits (window settings included) are the same bits alone, in
// the batch of every preset at two or three budgets, and beside one other policy with another
// observation window, in bf16 and fp32, under both protocols (--compress decode and prefill),
// one thread and two: (a) the presets with windows and sinks shrunk to fit P = 16; (b) every
// preset at its paper's settings (snapkv's and pyramidkv's window 64, scissorhands' 32,
// expected-attention's future 512), P = 80, K > 64; (c) the same at P = 48, shorter than the
// windows (a policy reads the P prompt queries there, as in decode).
void check_alone_equals_among_others(const Model& m, int64_t P, int64_t N, const std::string& policies,
                                     const std::vector<int64_t>& budgets, int64_t K, const std::string& other) {
  const std::vector<int64_t> ids = fixture_tokens(P + N + 1);
  for (Precision precision : {Precision::BF16, Precision::FP32})
    for (mla::Compression compress : {mla::Compression::Decode, mla::Compression::Prefill}) {
      const auto with = [&](const std::string& list, std::vector<int64_t> ks, int threads) {
        EvalOptions o = options(list, std::move(ks), precision, P, N);
        o.compress = compress;
        o.threads = threads;
        return mla::run_eval(m.ckpt, m.cfg, ids, o);
      };
      const EvalResult all = with(policies, budgets, 2);
      bool some_differ = false;  // from the full cache: the comparisons can fail
      for (const mla::PolicySettings& s : mla::parse_policy_list(policies)) {
        if (mla::policy_is_full_cache(s)) continue;
        const EvalResult one = with(s.label, {K}, 1);
        const EvalResult pair = with(s.label + "," + other, {K}, 2);
        BOOST_REQUIRE(one.runs.size() == 1u);
        BOOST_TEST_CONTEXT("P = " << P << " " << mla::precision_name(precision) << " --compress "
                                  << mla::compression_name(compress) << " " << s.label << " K = " << K) {
          bool found = false;
          for (const mla::EvalRun& run : all.runs)
            if (run.budget == K && run.policy.label == s.label) {
              found = true;
              BOOST_TEST(same_bits(run.logits.data, one.runs[0].logits.data));
            }
          BOOST_TEST(found);
          BOOST_TEST(pair.runs[0].policy.label == s.label);
          BOOST_TEST(same_bits(pair.runs[0].logits.data, one.runs[0].logits.data));
          some_differ = some_differ || !same_bits(one.runs[0].logits.data, one.full.logits.data);
        }
      }
      if (compress == mla::Compression::Decode || P > K)  // (a prompt within K is cut by nothing under prefill)
        BOOST_TEST(some_differ, "P = " << P << ": no policy changed the logits at K = " << K);
    }
}

BOOST_AUTO_TEST_CASE(a_policy_alone_equals_the_policy_among_others) {
  const Model m;
  check_alone_equals_among_others(m, kP, kN, kPolicies, {6, 9, 12}, 9, "snapkv:window=3");
  check_alone_equals_among_others(m, 80, 6, "all", {66, 70}, 70, "snapkv:window=3");
  check_alone_equals_among_others(m, 48, 24, "all", {66, 68}, 66, "snapkv:window=3");
}

// A DeepseekV2 model (tests/data/golden/whole-model-v2: V2's RoPE and softmax routing): full and
// every policy at K >= T are the plain forward bit for bit, a small budget changes something, and
// a policy alone equals the policy among others.
BOOST_AUTO_TEST_CASE(deepseek_v2_model_is_exact_and_independent) {
  const mla::Checkpoint ckpt = mla::Checkpoint::open(mla::test::data_dir() + "/golden/whole-model-v2/model", "");
  const mla::ModelConfig cfg = mla::load_model_config(ckpt.config_path());
  BOOST_REQUIRE((cfg.attention.family == mla::ModelFamily::DeepseekV2));
  const std::vector<int64_t> ids = fixture_tokens();
  const std::string policies = "full,h2o:sinks=1,recent=2,snapkv:window=4,expected-attention:sinks=1,recent=2,future=8,keydiff";
  for (Precision precision : {Precision::BF16, Precision::FP32}) {
    BOOST_TEST_CONTEXT(mla::precision_name(precision)) {
      mla::ModelForwardOptions fo;
      fo.precision = precision;
      const std::vector<int64_t> input(ids.begin(), ids.begin() + kP + kN);
      const mla::ModelForwardResult plain = mla::model_forward(ckpt, cfg, input, fo);
      const EvalResult r = mla::run_eval(ckpt, cfg, ids, options(policies, {6, kP + kN}, precision));
      BOOST_TEST(same_bits(r.full.logits.data, rows_of(plain.logits, kP, kN)));
      bool some_differ = false;
      for (const mla::EvalRun& run : r.runs) {
        if (run.budget == 6) some_differ = some_differ || !same_bits(run.logits.data, r.full.logits.data);
        else BOOST_TEST(same_bits(run.logits.data, r.full.logits.data), run.policy.label << " at K = " << run.budget);
      }
      BOOST_TEST(some_differ, "no policy changed the logits at K = 6: the comparison cannot fail");
      EvalOptions one = options("expected-attention:sinks=1,recent=2,future=8", {6}, precision);
      one.threads = 1;
      const EvalResult alone = mla::run_eval(ckpt, cfg, ids, one);
      for (const mla::EvalRun& run : r.runs)
        if (run.budget == 6 && run.policy.label == alone.runs[0].policy.label)
          BOOST_TEST(same_bits(run.logits.data, alone.runs[0].logits.data));
    }
  }
}

// ---- metrics by their definitions -----------------------------------------------------------

BOOST_AUTO_TEST_CASE(metrics_by_definition) {
  const Model m;
  const std::vector<int64_t> ids = fixture_tokens();
  const EvalOptions o = options("full,h2o:sinks=1,recent=2,streaming:sinks=1", {6}, Precision::FP32);
  const EvalResult r = mla::run_eval(m.ckpt, m.cfg, ids, o);
  const int64_t V = m.cfg.attention.vocab_size;
  const double rtol = mla::test::tolerance("*", "eval-vs-long-double", "double").rtol;
  const double kl_rtol = mla::test::tolerance("kl", "eval-vs-long-double", "double").rtol;
  const double delta_rtol = mla::test::tolerance("delta_nll", "eval-vs-long-double", "double").rtol;
  const double kl_below_zero = mla::test::tolerance("kl", "rounding-past-bound", "double").atol;
  const double recall_above_one = mla::test::tolerance("mass_recall", "rounding-past-bound", "double").atol;
  const auto logp = [&](const mla::TensorF& logits, int64_t i) {  // log-softmax of row i in long double
    long double mx = -INFINITY, s = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max<long double>(mx, logits.data[static_cast<size_t>(i * V + v)]);
    for (int64_t v = 0; v < V; ++v) s += std::exp(logits.data[static_cast<size_t>(i * V + v)] - mx);
    std::vector<long double> out(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) out[static_cast<size_t>(v)] = logits.data[static_cast<size_t>(i * V + v)] - mx - std::log(s);
    return out;
  };
  for (const mla::EvalRun& run : r.runs) {
    double nll = 0, kl_sum = 0, agree = 0;
    for (int64_t i = 0; i < kN; ++i) {
      const std::vector<long double> lp = logp(run.logits, i), lf = logp(r.full.logits, i);
      const mla::EvalPosition& e = run.positions[static_cast<size_t>(i)];
      BOOST_TEST(e.position == kP + i);
      BOOST_TEST(e.token == ids[static_cast<size_t>(kP + i + 1)]);
      BOOST_TEST(e.nll == -static_cast<double>(lp[static_cast<size_t>(e.token)]), boost::test_tools::tolerance(rtol));
      long double kl = 0;
      for (int64_t v = 0; v < V; ++v) kl += std::exp(lf[static_cast<size_t>(v)]) * (lf[static_cast<size_t>(v)] - lp[static_cast<size_t>(v)]);
      BOOST_TEST(e.kl == static_cast<double>(kl), boost::test_tools::tolerance(kl_rtol));
      BOOST_TEST(e.kl >= -kl_below_zero);
      const int64_t top = std::max_element(lp.begin(), lp.end()) - lp.begin();
      const int64_t top_full = std::max_element(lf.begin(), lf.end()) - lf.begin();
      BOOST_TEST(e.top1_agree == (top == top_full));
      BOOST_TEST(e.predicted == top);  // greedy decoding's token and its probability
      BOOST_TEST(e.predicted_prob == static_cast<double>(std::exp(lp[static_cast<size_t>(top)])), boost::test_tools::tolerance(rtol));
      nll += e.nll;
      kl_sum += e.kl;
      agree += e.top1_agree;
    }
    for (const mla::EvalSummary& s : mla::summarize(r, o.budgets))
      if (s.policy == run.policy.label) {
        double full_nll = 0;
        for (const mla::EvalPosition& e : r.full.positions) full_nll += e.nll;
        BOOST_TEST(s.mean_nll == nll / kN, boost::test_tools::tolerance(rtol));
        BOOST_TEST(s.delta_nll == (nll - full_nll) / kN, boost::test_tools::tolerance(delta_rtol));
        BOOST_TEST(s.ppl_ratio == std::exp(s.delta_nll), boost::test_tools::tolerance(rtol));
        BOOST_TEST(s.mean_kl == kl_sum / kN, boost::test_tools::tolerance(rtol));
        BOOST_TEST(s.top1_agreement == agree / kN, boost::test_tools::tolerance(rtol));
      }
    // the cache never holds more than K after a step; the attended cache is K + 1 at most
    for (const mla::EvalLayer& l : run.layers) {
      BOOST_TEST(l.mean_held <= 6.0);
      BOOST_TEST(l.mean_cache_len <= 7.0);
      BOOST_TEST(l.mean_mass_recall <= 1.0 + recall_above_one);
      BOOST_TEST(l.min_mass_recall <= l.mean_mass_recall);
    }
    BOOST_TEST(run.layers.size() == 3u);
  }
}

BOOST_AUTO_TEST_CASE(passkey_digits_are_found) {
  mla::ModelConfig cfg;
  cfg.byte_level_vocab = true;
  cfg.bos_token_id = 256;
  const auto ids = [&](const std::string& text) {
    std::vector<int64_t> out{256};
    for (unsigned char c : text) out.push_back(c);
    return out;
  };
  const mla::Passkey p = mla::find_passkey(ids("The pass key is 123. Remember it.\nblah\nWhat is the pass key? The pass key is 70969.\n"), cfg);
  BOOST_TEST(p.key == "70969");
  BOOST_REQUIRE(p.digits.size() == 5u);
  const std::vector<int64_t> t = ids("The pass key is 123. Remember it.\nblah\nWhat is the pass key? The pass key is 70969.\n");
  for (size_t k = 0; k < 5; ++k) BOOST_TEST(t[static_cast<size_t>(p.digits[k])] == int64_t{"70969"[k]});
  BOOST_TEST(mla::find_passkey(ids("What is the pass key? The pass key is 70969. And more text."), cfg).key.empty());
  BOOST_TEST(mla::find_passkey(ids("no question here"), cfg).key.empty());
  cfg.byte_level_vocab = false;
  BOOST_TEST(mla::find_passkey(ids("What is the pass key? The pass key is 70969.\n"), cfg).key.empty());
}

// ---- the CLI --------------------------------------------------------------------------------

// ---- statistics over windows (docs/eval.md §3.1) ------------------------------------------------

BOOST_AUTO_TEST_CASE(t_quantiles_match_scipy) {
  // scipy.stats.t.ppf(0.975, df) and t.ppf(0.95, 7) (scipy 1.16, double)
  const std::vector<std::pair<int64_t, double>> table = {
      {1, 12.706204736174694}, {2, 4.302652729749462},  {3, 3.1824463052837078}, {4, 2.7764451051977934},
      {5, 2.5705818356363146}, {9, 2.262157162798205},   {10, 2.228138851986274},  {30, 2.0422724563012378},
      {100, 1.9839715185235518}, {1000, 1.9623390808264083}};
  const double rtol = mla::test::tolerance("t_quantile", "ours-vs-scipy", "double").rtol;
  const double cdf_atol = mla::test::tolerance("t_cdf", "ours-at-scipy-quantile", "double").atol;
  for (const auto& [df, t] : table) {
    BOOST_TEST_CONTEXT("df " << df) {
      BOOST_TEST(std::abs(mla::student_t_quantile(0.95, df) - t) <= rtol * t);
      BOOST_TEST(std::abs(mla::student_t_two_sided_cdf(t, df) - 0.95) <= cdf_atol);
    }
  }
  BOOST_TEST(std::abs(mla::student_t_quantile(0.90, 7) - 1.8945786050900062) <= rtol * 1.9);
  BOOST_TEST(mla::student_t_two_sided_cdf(0.0, 5) == 0.0);
}

BOOST_AUTO_TEST_CASE(mean_interval_and_quantiles_by_hand) {
  const double tol = mla::test::tolerance("*", "eval-stats-hand-worked", "double").rtol;
  // x = 0.1, 0.3, 0.2, 0.6: mean 0.3, sum of squares 0.14, s^2 = 0.14 / 3, se = s / 2, t(3) = 3.18244630528
  const mla::MeanInterval m = mla::mean_t_interval({0.1, 0.3, 0.2, 0.6});
  const double se = std::sqrt(0.14 / 3.0) / 2.0, half = 3.1824463052837078 * se;
  BOOST_TEST(m.n == 4);
  BOOST_TEST(std::abs(m.mean - 0.3) <= tol);
  BOOST_TEST(std::abs(m.se - se) <= tol);
  BOOST_TEST(std::abs(m.low - (0.3 - half)) <= tol);   // -0.0437429...
  BOOST_TEST(std::abs(m.high - (0.3 + half)) <= tol);  //  0.6437429...
  BOOST_TEST(std::abs(m.low - -0.04374348818583085) <=  // printed by Python from the same formula
             mla::test::tolerance("mean_interval", "ours-vs-python-printed", "double").atol);
  // one sample has no interval; a constant sample has a zero-width one
  const mla::MeanInterval one = mla::mean_t_interval({0.5});
  BOOST_TEST((one.mean == 0.5 && std::isnan(one.se) && std::isnan(one.low) && std::isnan(one.high)));
  const mla::MeanInterval zero = mla::mean_t_interval({0.0, 0.0, 0.0});
  BOOST_TEST((zero.mean == 0.0 && zero.se == 0.0 && zero.low == 0.0 && zero.high == 0.0));
  // type-7 quantiles of 1, 2, 3, 4 (given unsorted): h = 3 q
  BOOST_TEST(mla::quantile_linear({3, 1, 2, 4}, 0.5) == 2.5);
  BOOST_TEST(std::abs(mla::quantile_linear({3, 1, 2, 4}, 0.99) - 3.97) <= tol * 4);
  BOOST_TEST(mla::quantile_linear({3, 1, 2, 4}, 1.0) == 4.0);
  BOOST_TEST(mla::quantile_linear({3, 1, 2, 4}, 0.0) == 1.0);
  BOOST_TEST(std::isnan(mla::quantile_linear({}, 0.5)));
}

// llama-perplexity's pooled statistics (mla/stats.hpp, docs/eval.md §3.2) on values small enough
// to work by hand.
BOOST_AUTO_TEST_CASE(pooled_statistics_by_hand) {
  const double tol = mla::test::tolerance("*", "eval-stats-hand-worked", "double").rtol;
  // mean 0.3 and se sqrt(0.14 / (4 * 3)) (the t-interval's se above: the same standard error)
  const mla::MeanSe m = mla::mean_se({0.1, 0.3, 0.2, 0.6});
  BOOST_TEST((m.n == 4 && std::abs(m.mean - 0.3) <= tol && std::abs(m.se - std::sqrt(0.14 / 12.0)) <= tol));
  BOOST_TEST(std::isnan(mla::mean_se({0.5}).se));
  // nll a = 1, 2, 4 against b = 1, 1, 2: var_of_mean 7/9 and 1/9, covariance of the means 5/18,
  // se^2 = 7/9 + 1/9 - 2 (5/18) = 1/3 = var_of_mean of the differences 0, 1, 2
  const std::vector<double> a = {1, 2, 4}, b = {1, 1, 2};
  BOOST_TEST(std::abs(mla::variance_of_mean(a, 7.0 / 3.0) - 7.0 / 9.0) <= tol);
  BOOST_TEST(std::abs(mla::covariance_of_means(a, b) - 5.0 / 18.0) <= tol);
  const mla::MeanSe r = mla::ln_ppl_ratio(a, b);
  BOOST_TEST((r.n == 3 && std::abs(r.mean - 1.0) <= tol && std::abs(r.se - std::sqrt(1.0 / 3.0)) <= tol));
  const mla::MeanSe same = mla::ln_ppl_ratio(a, a);  // exactly 0 and 0, not a rounding of them
  BOOST_TEST((same.mean == 0.0 && same.se == 0.0));
  BOOST_TEST(std::abs(mla::prob_diff(std::log(2.0), std::log(4.0)) - 0.25) <= tol);
  BOOST_TEST(mla::prob_diff(0.7, 0.7) == 0.0);
  BOOST_TEST(std::abs(mla::root_mean_square({3, -4}) - std::sqrt(12.5)) <= tol);
  const mla::MeanSe share = mla::share_se(3, 4);  // 0.75, sqrt(0.75 0.25 / 3) = 0.25
  BOOST_TEST((share.mean == 0.75 && std::abs(share.se - 0.25) <= tol));
  BOOST_TEST((mla::share_se(5, 5).mean == 1.0 && mla::share_se(5, 5).se == 0.0 && std::isnan(mla::share_se(1, 1).se)));
  // type 7 on 0 .. 1000 (given reversed): the q-quantile is 1000 q
  std::vector<double> x;
  for (int i = 1000; i >= 0; --i) x.push_back(i);
  const mla::Quantiles q = mla::quantiles(x);
  const std::pair<double, double> expect[] = {{q.max, 1000}, {q.p999, 999}, {q.p99, 990}, {q.p95, 950}, {q.p90, 900},
                                              {q.p75, 750},  {q.median, 500}, {q.p25, 250}, {q.p10, 100}, {q.p05, 50},
                                              {q.p01, 10},   {q.p001, 1},   {q.min, 0}};
  for (const auto& [got, want] : expect) BOOST_TEST(std::abs(got - want) <= tol * 1000, got << " vs " << want);
  // the median of an even count is the mean of the middle two (llama-perplexity's median)
  BOOST_TEST(mla::quantiles({4, 1, 3, 2}).median == 2.5);
}

namespace {
// A hand-made run: positions with the given NLL, KL and top-1 agreement, one layer.
mla::EvalRun hand_run(const std::string& label, const std::string& preset, int64_t K, const std::vector<double>& nll,
                      const std::vector<double>& kl, const std::vector<bool>& agree) {
  mla::EvalRun run;
  run.policy.label = label;
  run.policy.preset = preset;
  run.budget = K;
  for (size_t i = 0; i < nll.size(); ++i) {
    mla::EvalPosition p;
    p.position = static_cast<int64_t>(i);
    p.nll = nll[i];
    p.kl = kl[i];
    p.top1_agree = agree[i];
    run.positions.push_back(p);
  }
  mla::EvalLayer l;
  l.mean_cache_len = 4;
  l.mean_mass_recall = 0.5;
  run.layers.push_back(l);
  return run;
}
}  // namespace

// Three windows, full and two policies at one budget. Per-window ΔNLL: a = 0.1, 0.3, 0.2 and
// b = a + (0.30, 0.32, 0.31). Their own intervals overlap, but the paired difference b - a is
// consistent (0.31 ± 0.025), so the leaderboard says b is distinct from a: pairing by window is
// the point of the method.
BOOST_AUTO_TEST_CASE(window_summaries_by_hand) {
  const double tol = mla::test::tolerance("*", "eval-stats-hand-worked", "double").rtol;
  const std::vector<double> da = {0.1, 0.3, 0.2}, db = {0.40, 0.62, 0.51};
  const std::vector<std::vector<double>> kl_a = {{0.1, 0.2}, {0.0, 0.4}, {0.3, 0.5}};
  const std::vector<std::vector<bool>> agree_a = {{true, true}, {true, false}, {false, false}};
  std::vector<mla::EvalWindow> windows(3);
  for (size_t w = 0; w < 3; ++w) {
    windows[w].source = "t.txt";
    windows[w].offset = static_cast<int64_t>(w) * 7;
    mla::EvalResult& r = windows[w].result;
    r.full = hand_run("full", "full", 0, {1.0, 2.0}, {0, 0}, {true, true});
    r.runs.push_back(hand_run("a", "h2o", 4, {1.0 + da[w], 2.0 + da[w]}, kl_a[w], agree_a[w]));
    r.runs.push_back(hand_run("b", "tova", 4, {1.0 + db[w], 2.0 + db[w]}, {0.1, 0.1}, {true, true}));
  }
  const std::vector<mla::EvalSummary> sum = mla::summarize(windows, {4});
  BOOST_TEST_REQUIRE(sum.size() == 3u);
  // full: ΔNLL exactly 0 with a zero-width interval
  BOOST_TEST((sum[0].policy == "full" && sum[0].delta_nll == 0.0 && sum[0].delta_nll_low == 0.0 &&
              sum[0].delta_nll_high == 0.0 && sum[0].windows == 3));
  const double t2 = 4.302652729749462;  // scipy t.ppf(0.975, 2)
  const auto check = [&](const mla::EvalSummary& s, const std::vector<double>& d) {
    const double mean = (d[0] + d[1] + d[2]) / 3.0;
    const double var = ((d[0] - mean) * (d[0] - mean) + (d[1] - mean) * (d[1] - mean) + (d[2] - mean) * (d[2] - mean)) / 2.0;
    const double se = std::sqrt(var / 3.0);
    BOOST_TEST_CONTEXT(s.policy) {
      BOOST_TEST(std::abs(s.mean_nll - (1.5 + mean)) <= tol * 2);
      BOOST_TEST(std::abs(s.delta_nll - mean) <= tol);
      BOOST_TEST(std::abs(s.delta_nll_se - se) <= tol);
      BOOST_TEST(std::abs(s.delta_nll_low - (mean - t2 * se)) <= tol);
      BOOST_TEST(std::abs(s.delta_nll_high - (mean + t2 * se)) <= tol);
      BOOST_TEST(std::abs(s.ppl_ratio - std::exp(mean)) <= tol * 2);
    }
  };
  check(sum[1], da);
  check(sum[2], db);
  BOOST_TEST(std::abs(sum[1].delta_nll_low - (0.2 - t2 * 0.1 / std::sqrt(3.0))) <= tol);  // [-0.0484, 0.4484]
  // KL over the 6 positions 0, .1, .2, .3, .4, .5: mean .25, median (type 7) .25, p99 .4 + .95 * .1, max .5
  BOOST_TEST(std::abs(sum[1].mean_kl - 0.25) <= tol);
  BOOST_TEST(std::abs(sum[1].kl_median - 0.25) <= tol);
  BOOST_TEST(std::abs(sum[1].kl_p99 - 0.495) <= tol);
  BOOST_TEST(sum[1].kl_max == 0.5);
  // top-1 agreement per window 1, 0.5, 0: mean 0.5, sd 0.5, se 0.5 / sqrt(3)
  BOOST_TEST(std::abs(sum[1].top1_agreement - 0.5) <= tol);
  BOOST_TEST(std::abs(sum[1].top1_agreement_se - 0.5 / std::sqrt(3.0)) <= tol);
  BOOST_TEST(sum[1].passkey_accuracy == -1.0);
  // the leaderboard: a then b; their intervals overlap; the paired difference excludes 0
  const std::string board = mla::eval_leaderboard_csv(windows, {4});
  std::vector<std::string> rows;
  for (size_t at = 0, nl; (nl = board.find('\n', at)) != std::string::npos; at = nl + 1) rows.push_back(board.substr(at, nl - at));
  BOOST_TEST_REQUIRE(rows.size() == 3u, board);
  BOOST_TEST(rows[1].rfind("4,1,a,", 0) == 0u, rows[1]);
  BOOST_TEST(rows[2].rfind("4,2,b,", 0) == 0u, rows[2]);
  BOOST_TEST(contains(rows[1], ",b,b,0.3"), rows[1]);   // overlaps b; next b; diff 0.31
  BOOST_TEST(rows[1].substr(rows[1].size() - 2) == ",1", rows[1]);  // distinct from next
  BOOST_TEST(contains(rows[2], ",a,,,,,"), rows[2]);    // overlaps a; no next
  // windows.csv: 3 windows x 3 runs
  const std::string wcsv = mla::eval_windows_csv(windows, {4});
  BOOST_TEST(std::count(wcsv.begin(), wcsv.end(), '\n') == 10);
  BOOST_TEST(contains(wcsv, "\n2,t.txt,14,b,4,"), wcsv);
  // one window: no intervals (NaN, empty fields)
  const std::vector<mla::EvalSummary> one = mla::summarize(windows[0].result, {4});
  BOOST_TEST((one[1].windows == 1 && std::isnan(one[1].delta_nll_low) && std::isnan(one[1].top1_agreement_se)));
  BOOST_TEST(contains(mla::eval_summary_csv(one), "\na,4,1,"));
  // the pooled statistics (docs/eval.md §3.2): finite or refused naming the figure and the cell;
  // the standard errors of a single position are NaN by design (empty fields) and pass
  BOOST_TEST((sum[1].positions == 6 && std::abs(sum[1].same_top.mean - 0.5) <= tol));
  mla::check_summaries_finite(sum);
  std::vector<mla::EvalSummary> bad = sum;
  bad[2].dp_q.p001 = INFINITY;
  BOOST_CHECK_EXCEPTION(mla::check_summaries_finite(bad), mla::Error, [](const mla::Error& e) {
    return contains(e.what(), "the dp_p001 of b at budget 4 is infinite");
  });
  bad = sum;
  bad[1].ln_ppl_ratio_se = NAN;  // six positions: a NaN se is not by design
  BOOST_CHECK_THROW(mla::check_summaries_finite(bad), mla::Error);
  bad[1].positions = 1;
  mla::check_summaries_finite(bad);
  BOOST_TEST(contains(mla::eval_summary_csv(bad), ",\nb,4,"));  // the empty ln_ppl_ratio_se ends a's row
}

namespace {

std::string ids_text() {
  std::string s;
  for (int64_t t : fixture_tokens()) s += (s.empty() ? "" : ",") + std::to_string(t);
  return s;
}

// The fields of the first row of `csv` that starts with `prefix` (no quoted fields); empty when none.
std::vector<std::string> csv_row(const std::string& csv, const std::string& prefix) {
  const size_t at = csv.find("\n" + prefix);
  if (at == std::string::npos) return {};
  std::vector<std::string> fields(1);
  for (size_t i = at + 1; i < csv.size() && csv[i] != '\n'; ++i) {
    if (csv[i] == ',') fields.emplace_back();
    else fields.back() += csv[i];
  }
  return fields;
}

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

// The field named `column` (by the header, the first line) of the first row of `csv` that starts
// with `prefix` (no quoted fields); fails the test when either is missing.
std::string csv_field(const std::string& csv, const std::string& prefix, const std::string& column) {
  const std::vector<std::string> header = csv_row("\n" + csv, "");
  const std::vector<std::string> row = csv_row(csv, prefix);
  const auto at = std::find(header.begin(), header.end(), column);
  BOOST_TEST_REQUIRE((at != header.end() && row.size() == header.size()), column << " of " << prefix << " in\n" << csv);
  return row[static_cast<size_t>(at - header.begin())];
}

void expect_error(const std::string& args, const std::string& word, const std::string& checkpoint = fixture()) {
  const std::string out = scratch_dir("eval-err");
  const RunResult r = run_cli("eval --checkpoint '" + checkpoint + "' --out '" + out + "/o' " + args);
  BOOST_TEST_CONTEXT("eval " << args << "\nstderr: " << r.err) {
    BOOST_TEST(r.exit_code != 0);
    BOOST_TEST(r.err.rfind("mla-h2o eval: error: ", 0) == 0u);
    BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    BOOST_TEST(contains(r.err, word));
    BOOST_TEST(!std::filesystem::exists(out + "/o/eval.csv"));
    BOOST_TEST(!std::filesystem::exists(out + "/o/report.json"));
  }
}

// A copy of the fixture model with config.json changed by `edit` (key, new value text) or a
// tensor left out.
std::string edited_fixture(const std::string& tag, const std::string& key, const std::string& value) {
  const std::string dir = scratch_dir(tag);
  std::filesystem::copy(fixture(), dir, std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  std::string cfg = mla::test::read_text(dir + "/config.json");
  const size_t at = cfg.find("\"" + key + "\"");
  if (at == std::string::npos) {
    cfg.insert(cfg.find('{') + 1, "\n  \"" + key + "\": " + value + ",");
  } else {
    const size_t colon = cfg.find(':', at), end = cfg.find_first_of(",\n}", colon);
    cfg.replace(colon + 1, end - colon - 1, " " + value);
  }
  mla::test::write_text(dir + "/config.json", cfg);
  return dir;
}

// A copy of the fixture model whose model.safetensors leaves out tensor `drop` (if not empty)
// and carries `metadata` in its header.
std::string rewritten_fixture(const std::string& tag, const std::string& drop,
                              const std::map<std::string, std::string>& metadata) {
  const std::string dir = scratch_dir(tag);
  for (const char* f : {"config.json", "generation_config.json"})
    std::filesystem::copy_file(fixture() + "/" + f, dir + "/" + f, std::filesystem::copy_options::overwrite_existing);
  const mla::SafetensorsFile in = mla::SafetensorsFile::open(fixture() + "/model.safetensors");
  std::vector<mla::TensorToWrite> tensors;
  for (const mla::TensorInfo& t : in.tensors())
    if (t.name != drop) tensors.push_back({t.name, t.dtype, t.shape, in.bytes(t)});
  BOOST_REQUIRE(drop.empty() || tensors.size() + 1 == in.tensors().size());
  mla::write_safetensors(dir + "/model.safetensors", tensors, metadata);
  return dir;
}

}  // namespace

BOOST_AUTO_TEST_CASE(cli_outputs) {
  const std::string out = scratch_dir("eval-cli");
  ::setenv("MLA_PROGRESS_AFTER", "0", 1);
  const RunResult r = run_cli("eval --checkpoint '" + fixture() + "' --tokens " + ids_text() +
                              " --prompt-len 16 --steps 12 --cache-budget 6,9 --sinks 1 --recent 2 "
                              "--policy full,h2o,snapkv:window=4,tova --dump-tensors --threads 2 --out '" + out + "'");
  ::unsetenv("MLA_PROGRESS_AFTER");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  // one progress line for the whole run: every layer's decode steps (3 layers x 12 steps)
  BOOST_TEST(contains(r.err, "eval: decode steps (all layers) 36/36 (100.0%)"), r.err);
  BOOST_TEST(contains(r.out, "ppl ratio"), r.out);
  BOOST_TEST(contains(r.out, "h2o:sinks=1,recent=2"), r.out);
  // eval.csv: (full + 3 policies) x 2 budgets x 12 positions + header
  const std::string csv = mla::test::read_text(out + "/eval.csv");
  BOOST_TEST(csv.rfind("window,policy,budget,position,token,nll,kl,top1_agree,predicted,predicted_prob\n", 0) == 0u);
  BOOST_TEST(lines(csv) == 1u + 4u * 2u * 12u);
  BOOST_TEST(contains(csv, "\n0,full,6,16," + std::to_string(fixture_tokens()[17]) + ","));
  BOOST_TEST(contains(csv, "\n0,\"h2o:sinks=1,recent=2\",9,27,"));
  const std::string layers = mla::test::read_text(out + "/layers.csv");
  BOOST_TEST(lines(layers) == 1u + 4u * 2u * 3u);
  const std::string summary = mla::test::read_text(out + "/summary.csv");
  BOOST_TEST(lines(summary) == 1u + 8u);
  BOOST_TEST(contains(summary, "\nfull,6,1,"));
  for (const char* svg : {"/budget.svg", "/layers.svg", "/leaderboard.svg"}) {
    const std::string s = mla::test::read_text(out + svg);
    BOOST_TEST(s.rfind("<svg", 0) == 0u);
    BOOST_TEST(contains(s, "</svg>"));
  }
  BOOST_TEST(contains(mla::test::read_text(out + "/budget.svg"), "<polyline id=\"tova:sinks=1,recent=2\""));
  const std::string layers_svg = mla::test::read_text(out + "/layers.svg");  // one panel per budget
  BOOST_TEST(contains(layers_svg, "<polyline id=\"tova:sinks=1,recent=2@K=6\""));
  BOOST_TEST(contains(layers_svg, "<polyline id=\"tova:sinks=1,recent=2@K=9\""));
  BOOST_TEST(contains(mla::test::read_text(out + "/leaderboard.svg"), ">K = 9 (best first)</text>"));
  simdjson::dom::parser parser;
  simdjson::dom::element j = parser.load(out + "/report.json");
  BOOST_TEST(std::string_view(j["command"].get_string().value()) == "eval");
  BOOST_TEST(int64_t(j["prompt_len"].get_int64().value()) == 16);
  BOOST_TEST(j["summary"].get_array().size() == 8u);
  BOOST_TEST(j["synthetic_weights"].get_bool().value() == false);  // save_pretrained's weights
  // the profile: every part of the layers, summed over them, inside the layers' own times
  double layers_s = 0, profile_s = 0;
  const simdjson::dom::object timing = j["timing_s"].get_object().value(), profile = j["profile_s"].get_object().value();
  for (auto [key, value] : timing)
    if (std::string_view(key).rfind("eval: layer ", 0) == 0) layers_s += value.get_double().value();
  std::set<std::string> parts;
  for (auto [key, value] : profile) {
    parts.insert(std::string(key));
    profile_s += value.get_double().value();
  }
  for (const char* part : {"load + prepare", "prompt: projections", "prompt: attention", "prompt: o_proj", "prompt: mlp",
                           "decode rows: projections", "decode rows: attention", "decode rows: o_proj", "decode rows: mlp"})
    BOOST_TEST(parts.count(part) == 1u, part);
  BOOST_TEST(profile_s > 0);
  BOOST_TEST(profile_s <= layers_s);
  // the dump: the full cache's logits [P+N, V] and hidden_states.0..3 [P+N, H], as model_forward's
  const mla::SafetensorsFile dump = mla::SafetensorsFile::open(out + "/tensors.safetensors");
  BOOST_TEST((dump.at("logits").shape == std::vector<uint64_t>{28, 128}));
  BOOST_TEST((dump.at("hidden_states.3").shape == std::vector<uint64_t>{28, 64}));
  // --quiet: nothing on stderr
  const RunResult q = run_cli("eval --checkpoint '" + fixture() + "' --tokens " + ids_text() +
                              " --prompt-len 16 --steps 4 --cache-budget 8 --policy h2o --quiet --out '" + scratch_dir("eval-q") + "'");
  BOOST_TEST(q.exit_code == 0);
  BOOST_TEST(q.err.empty(), q.err);
  BOOST_TEST(contains(run_cli("eval --help").out, "--cache-budget"));
}

// --windows W: W windows cut evenly without overlap; each window's figures are those of the same
// ids run alone (string-equal %.17g fields), the summary carries intervals, and the leaderboard
// ranks every policy at every budget. Too many windows is one error line.
BOOST_AUTO_TEST_CASE(cli_windows) {
  const std::string dir = scratch_dir("eval-windows");
  std::vector<int64_t> ids;  // 3 windows of P + N + 1 = 29 ids, then 5 spare: 3 slots
  for (int64_t v = 0; v < 3; ++v)
    for (int64_t t : fixture_tokens()) ids.push_back((t + 13 * v) % 120);
  for (int64_t i = 0; i < 5; ++i) ids.push_back(i + 1);
  std::string all, middle;
  for (size_t i = 0; i < ids.size(); ++i) {
    all += (i ? "," : "") + std::to_string(ids[i]);
    if (i >= 29 && i < 58) middle += (i > 29 ? "," : "") + std::to_string(ids[i]);
  }
  mla::test::write_text(dir + "/ids.txt", all);
  const std::string common = " --prompt-len 16 --steps 12 --cache-budget 6,9 --sinks 1 --recent 2 --policy h2o,tova,random --quiet";
  const RunResult r = run_cli("eval --checkpoint '" + fixture() + "' --tokens '" + dir + "/ids.txt' --windows 3" + common +
                              " --out '" + dir + "/w'");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  BOOST_TEST(contains(r.out, "95% CI"), r.out);
  BOOST_TEST(contains(r.out, "3 windows of 29 ids"), r.out);
  const std::string wcsv = mla::test::read_text(dir + "/w/windows.csv");
  BOOST_TEST(lines(wcsv) == 1u + 3u * 2u * 4u);  // windows x budgets x (full + 3 policies)
  for (const char* offset : {"\n0,--tokens,0,full,6,", "\n1,--tokens,29,full,6,", "\n2,--tokens,58,full,6,"})
    BOOST_TEST(contains(wcsv, offset), offset);
  // the middle window alone
  const RunResult alone = run_cli("eval --checkpoint '" + fixture() + "' --tokens " + middle + common + " --out '" + dir + "/one'");
  BOOST_REQUIRE_MESSAGE(alone.exit_code == 0, alone.err);
  const std::string one = mla::test::read_text(dir + "/one/windows.csv");
  const auto rows_of_window = [](const std::string& csv, const std::string& w) {
    std::vector<std::string> rows;
    for (size_t at = csv.find('\n') + 1, nl; (nl = csv.find('\n', at)) != std::string::npos; at = nl + 1) {
      const std::string row = csv.substr(at, nl - at);
      if (row.rfind(w + ",", 0) == 0) rows.push_back(row.substr(row.find(',', row.find(',', w.size() + 1) + 1) + 1));
    }
    return rows;  // without window, source, offset
  };
  const std::vector<std::string> a = rows_of_window(wcsv, "1"), b = rows_of_window(one, "0");
  BOOST_TEST_REQUIRE(a.size() == 8u);
  BOOST_TEST(a == b, boost::test_tools::per_element());
  // summary: windows 3, an interval for the policies, exactly 0 for full
  const std::string summary = mla::test::read_text(dir + "/w/summary.csv");
  BOOST_TEST(contains(summary, "\nfull,6,3,"), summary);
  BOOST_TEST(contains(summary, ",0,0,0,1,"), summary);  // full: delta 0, [0, 0], ppl ratio 1
  const std::string board = mla::test::read_text(dir + "/w/leaderboard.csv");
  BOOST_TEST(lines(board) == 1u + 2u * 3u, board);
  BOOST_TEST(contains(board, "\n9,3,"), board);
  simdjson::dom::parser parser;
  simdjson::dom::element j = parser.load(dir + "/w/report.json");
  BOOST_TEST(j["windows"].get_array().size() == 3u);
  BOOST_TEST(int64_t(j["windows"].at(2)["offset"].get_int64()) == 58);
  BOOST_TEST(int64_t(j["summary"].at(1)["windows"].get_int64()) == 3);
  BOOST_TEST(!j["summary"].at(1)["delta_nll_ci_low"].is_null());
  // a fourth window does not fit
  expect_error("--tokens '" + dir + "/ids.txt' --windows 4" + common, "holds 3 (92 ids)");
  expect_error("--tokens '" + dir + "/ids.txt' --windows 0" + common, "--windows");
}

// Windows run several at a time when --threads allows (docs/eval.md §9): --threads 2 runs windows
// 0 and 2 on one worker and 1 on the other, --threads 3 all three at once, each worker on its own
// checkpoint; every figure is the same bytes as one window after another on one thread.
BOOST_AUTO_TEST_CASE(cli_windows_in_parallel_give_the_same_bytes) {
  const std::string dir = scratch_dir("eval-windows-parallel");
  std::string all;
  for (int64_t v = 0; v < 3; ++v)
    for (int64_t t : fixture_tokens()) all += (all.empty() ? "" : ",") + std::to_string((t + 7 * v) % 120);
  mla::test::write_text(dir + "/ids.txt", all);
  const std::string common = " --prompt-len 16 --steps 12 --cache-budget 6,9 --policy h2o,snapkv:window=4,knorm,random";
  std::map<int, std::string> out;
  for (int threads : {1, 2, 3}) {
    const std::string o = dir + "/t" + std::to_string(threads);
    const RunResult r = run_cli("eval --checkpoint '" + fixture() + "' --tokens '" + dir + "/ids.txt' --windows 3" + common +
                                " --threads " + std::to_string(threads) + " --out '" + o + "'");
    BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    BOOST_TEST(contains(r.out, threads == 1 ? "3 windows\n" : "3 windows, " + std::to_string(threads) + " at a time"), r.out);
    for (const char* f : {"eval.csv", "windows.csv", "summary.csv", "layers.csv", "leaderboard.csv"})
      out[threads] += std::string(f) + "\n" + mla::test::read_text(o + "/" + f);
    simdjson::dom::parser parser;
    BOOST_TEST(int64_t(parser.load(o + "/report.json")["windows_at_once"].get_int64()) == threads);
  }
  BOOST_TEST(out[1].size() > 1000u);
  BOOST_TEST(out[2] == out[1]);
  BOOST_TEST(out[3] == out[1]);
}

// summary.csv's llama-perplexity statistics (docs/eval.md §3.2) against eval.csv's per-position
// figures, recomputed here from the CSV with code of the test's own: every decoded position of
// every window pooled, each paired with full's NLL at the same (window, position). The full cache
// is exact: KL 0, Δp 0, same_top_p 1, ln ratio 0 and their standard errors 0.
BOOST_AUTO_TEST_CASE(llama_perplexity_statistics_agree_with_eval_csv) {
  const std::string model = mla::test::data_dir() + "/../../models/tiny-mla", dir = scratch_dir("eval-pooled");
  const RunResult r = run_cli("eval --checkpoint '" + model + "' --text '" + model + "/eval/heldout-corpus' --windows 3 "
                              "--prompt-len 48 --steps 40 --cache-budget 16,32 --policy h2o,knorm --threads 1 --out '" + dir + "/o'");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  BOOST_TEST(contains(r.out, "KLD mean ± se"), r.out);
  BOOST_TEST(contains(r.out, "pooled over the 120 decoded positions"), r.out);
  // eval.csv: window,policy,budget,position,token,nll,kl,top1_agree,...
  struct Row {
    double nll, kl;
    bool agree;
  };
  std::map<std::string, std::vector<Row>> runs;      // "policy,budget" -> rows in file order
  std::map<std::string, double> full_nll;            // "window,position" -> full's NLL
  std::map<std::string, std::vector<std::string>> keys;  // "policy,budget" -> "window,position" per row
  const std::string csv = mla::test::read_text(dir + "/o/eval.csv");
  for (size_t at = csv.find('\n') + 1, nl; (nl = csv.find('\n', at)) != std::string::npos; at = nl + 1) {
    std::vector<std::string> f(1);
    for (size_t i = at; i < nl; ++i) {
      if (csv[i] == ',') f.emplace_back();
      else f.back() += csv[i];
    }
    BOOST_TEST_REQUIRE(f.size() == 10u);
    const std::string run = f[1] + "," + f[2], where = f[0] + "," + f[3];
    runs[run].push_back(Row{std::stod(f[5]), std::stod(f[6]), f[7] == "1"});
    keys[run].push_back(where);
    if (f[1] == "full") full_nll[where] = std::stod(f[5]);
  }
  BOOST_TEST_REQUIRE(runs.size() == 6u);  // full, h2o, knorm at 2 budgets
  const mla::test::Tolerance& t = mla::test::tolerance("*", "eval-pooled-stats-vs-csv", "double");
  const std::string summary = mla::test::read_text(dir + "/o/summary.csv");
  for (const auto& [run, rows] : runs) {
    BOOST_TEST_CONTEXT(run) {
      const double n = static_cast<double>(rows.size());
      BOOST_TEST_REQUIRE(rows.size() == 120u);  // 3 windows x 40 positions
      std::vector<double> kl, dp, d;
      double nll_sum = 0, full_sum = 0, same = 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        const double f = full_nll.at(keys.at(run)[i]);
        kl.push_back(rows[i].kl);
        dp.push_back(std::exp(-rows[i].nll) - std::exp(-f));
        d.push_back(rows[i].nll - f);
        nll_sum += rows[i].nll;
        full_sum += f;
        same += rows[i].agree;
      }
      // mean and standard error as sqrt(sum (x - mean)^2 / (n (n - 1)))
      const auto mean_and_se = [&](const std::vector<double>& x) {
        const double mean = std::accumulate(x.begin(), x.end(), 0.0) / n;
        double ss = 0;
        for (double v : x) ss += (v - mean) * (v - mean);
        return std::make_pair(mean, std::sqrt(ss / (n * (n - 1))));
      };
      // llama-perplexity's percentile: p = q (n - 1), (1 - frac) x_ip + frac x_(ip+1)
      const auto percentile = [&](std::vector<double> x, double q) {
        std::sort(x.begin(), x.end());
        const double p = q * (n - 1);
        const size_t ip = static_cast<size_t>(p);
        const double frac = p - static_cast<double>(ip);
        return (1 - frac) * x[ip] + frac * x[std::min(ip + 1, x.size() - 1)];
      };
      const std::string prefix = run + ",3,";
      const auto expect = [&](const char* column, double want) {
        const double got = std::stod(csv_field(summary, prefix, column));
        BOOST_TEST(std::abs(got - want) <= t.atol + t.rtol * std::abs(want), column << ": " << got << " vs " << want);
      };
      const auto [kl_mean, kl_se] = mean_and_se(kl);
      const auto [dp_mean, dp_se] = mean_and_se(dp);
      // the covariance term is what pairs the runs: se(ln ratio) = the se of the mean paired difference
      const auto [d_mean, d_se] = mean_and_se(d);
      BOOST_TEST(std::abs(d_mean - (nll_sum / n - full_sum / n)) <= t.atol + t.rtol * std::abs(d_mean));
      double dp2 = 0;
      for (double v : dp) dp2 += v * v;
      expect("positions", n);
      expect("mean_kl", kl_mean);
      expect("kl_se", kl_se);
      expect("kl_max", *std::max_element(kl.begin(), kl.end()));
      expect("kl_min", *std::min_element(kl.begin(), kl.end()));
      const std::pair<const char*, double> kl_q[] = {{"kl_p999", 0.999}, {"kl_p99", 0.99}, {"kl_p95", 0.95}, {"kl_p90", 0.90},
                                                     {"kl_median", 0.5}, {"kl_p10", 0.10}, {"kl_p05", 0.05}, {"kl_p01", 0.01},
                                                     {"kl_p001", 0.001}};
      for (const auto& [column, q] : kl_q) expect(column, percentile(kl, q));
      expect("dp_mean", dp_mean);
      expect("dp_se", dp_se);
      expect("dp_rms", std::sqrt(dp2 / n));
      expect("dp_max", *std::max_element(dp.begin(), dp.end()));
      expect("dp_min", *std::min_element(dp.begin(), dp.end()));
      const std::pair<const char*, double> dp_q[] = {{"dp_p999", 0.999}, {"dp_p99", 0.99}, {"dp_p95", 0.95}, {"dp_p90", 0.90},
                                                     {"dp_p75", 0.75},   {"dp_median", 0.5}, {"dp_p25", 0.25}, {"dp_p10", 0.10},
                                                     {"dp_p05", 0.05},   {"dp_p01", 0.01},  {"dp_p001", 0.001}};
      for (const auto& [column, q] : dp_q) expect(column, percentile(dp, q));
      expect("same_top_p", same / n);
      expect("same_top_p_se", std::sqrt(same / n * (1 - same / n) / (n - 1)));
      expect("ln_ppl_ratio", d_mean);
      expect("ln_ppl_ratio_se", d_se);
      if (run.rfind("full,", 0) == 0) {  // exact: the same numbers, not roundings of them
        for (const char* column : {"mean_kl", "kl_se", "kl_max", "kl_min", "dp_mean", "dp_se", "dp_rms", "dp_max", "dp_min",
                                   "same_top_p_se", "ln_ppl_ratio", "ln_ppl_ratio_se"})
          BOOST_TEST(csv_field(summary, prefix, column) == "0", column);
        BOOST_TEST(csv_field(summary, prefix, "same_top_p") == "1");
      } else {
        BOOST_TEST(kl_mean > 0);  // the policies differ from full: the comparison can fail
      }
    }
  }
  simdjson::dom::parser parser;  // report.json carries the same keys
  const simdjson::dom::element j = parser.load(dir + "/o/report.json");
  BOOST_TEST(double(j["summary"].at(0)["same_top_p"]) == 1.0);
  BOOST_TEST(int64_t(j["summary"].at(1)["positions"]) == 120);
}

// --compression-ratio r: K = round((1 - r) P), budgets ascending whatever the order given; the
// report records the protocol and each ratio with its K.
BOOST_AUTO_TEST_CASE(cli_compression_ratio_and_protocol) {
  const std::string out = scratch_dir("eval-ratio");
  const RunResult r = run_cli("eval --checkpoint '" + fixture() + "' --tokens " + ids_text() +
                              " --prompt-len 16 --steps 12 --compression-ratio 0.25,0.5 --compress prefill "
                              "--policy h2o:sinks=1,recent=2 --quiet --out '" + out + "'");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  BOOST_TEST(contains(r.out, "--compress prefill"), r.out);
  BOOST_TEST(contains(r.out, "compression ratio 0.5: K = round((1 - 0.5) x 16) = 8"), r.out);
  simdjson::dom::parser parser;
  simdjson::dom::element j = parser.load(out + "/report.json");
  BOOST_TEST(std::string_view(j["compress"].get_string().value()) == "prefill");
  BOOST_TEST(int64_t(j["budgets"].at(0).get_int64()) == 8);
  BOOST_TEST(int64_t(j["budgets"].at(1).get_int64()) == 12);
  BOOST_TEST(double(j["compression_ratios"].at(0)["ratio"].get_double()) == 0.5);
  BOOST_TEST(int64_t(j["compression_ratios"].at(1)["budget"].get_int64()) == 12);
  // decode is the default protocol, and a run with --cache-budget records no ratios
  const std::string out_d = scratch_dir("eval-ratio-d");
  const RunResult d = run_cli("eval --checkpoint '" + fixture() + "' --tokens " + ids_text() +
                              " --prompt-len 16 --steps 12 --cache-budget 8 --policy h2o:sinks=1,recent=2 --quiet --out '" +
                              out_d + "'");
  BOOST_REQUIRE_MESSAGE(d.exit_code == 0, d.err);
  simdjson::dom::element jd = parser.load(out_d + "/report.json");
  BOOST_TEST(std::string_view(jd["compress"].get_string().value()) == "decode");
  BOOST_TEST(jd["compression_ratios"].is_null());
}

// --text DIR: its regular files sorted by name (a subdirectory is not read), windows never
// straddling two files: a.txt holds 1 slot of 6 bytes (BOS + 6 = P + N + 1 = 7), b.txt 3; W = 2
// takes slots 0 and 2: a.txt at 0 and b.txt at 6.
BOOST_AUTO_TEST_CASE(cli_text_directory) {
  const std::string model = mla::test::data_dir() + "/../../models/tiny-mla";
  const std::string dir = scratch_dir("eval-textdir");
  std::filesystem::create_directories(dir + "/in/sub");
  mla::test::write_text(dir + "/in/b.txt", "The sky is blue today.");  // 22 bytes: 3 slots
  mla::test::write_text(dir + "/in/a.txt", "Hello, you");              // 10 bytes: 1 slot
  mla::test::write_text(dir + "/in/sub/c.txt", "not read at all, it is in a subdirectory");
  const std::string common = " --prompt-len 4 --steps 2 --cache-budget 3 --policy h2o:sinks=1,recent=1 --quiet";
  const RunResult r = run_cli("eval --checkpoint '" + model + "' --text '" + dir + "/in' --windows 2" + common + " --out '" +
                              dir + "/o'");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string wcsv = mla::test::read_text(dir + "/o/windows.csv");
  BOOST_TEST(contains(wcsv, "\n0," + dir + "/in/a.txt,0,full,3,"), wcsv);
  BOOST_TEST(contains(wcsv, "\n1," + dir + "/in/b.txt,6,full,3,"), wcsv);
  expect_error("--text '" + dir + "/in' --windows 5" + common, "holds 4 (32 bytes in 2 files)", model);
}

// report.json records what ran: each policy's settings as executed (three spellings of h2o that
// run differently are told apart, a percentage resolved per budget), the whole command line, the
// git revision, and the sha256 of every model file read (checked against the file's bytes).
BOOST_AUTO_TEST_CASE(report_records_what_ran) {
  const std::string out = scratch_dir("eval-provenance");
  const std::string args = "eval --checkpoint '" + fixture() + "' --tokens " + ids_text() +
                           " --prompt-len 16 --steps 4 --cache-budget 6,10 --policy h2o,h2o:recent=50%,h2o:recent=1,"
                           "snapkv:window=3,pool=max3 --quiet --out '" + out + "'";
  const RunResult r = run_cli(args);
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  simdjson::dom::parser parser;
  simdjson::dom::element j = parser.load(out + "/report.json");
  simdjson::dom::array policies = j["policies"].get_array();
  BOOST_REQUIRE(policies.size() == 4u);
  std::vector<std::string> recent, recent_at_10;
  for (size_t i = 0; i < 3; ++i) {  // the three h2o
    const simdjson::dom::element p = policies.at(i), v = p["recent"];
    recent.push_back(v.is_string() ? std::string(v.get_string().value()) : std::to_string(int64_t(v.get_int64().value())));
    recent_at_10.push_back(std::to_string(int64_t(p["recent_tokens"]["10"].get_int64().value())));
  }
  BOOST_TEST(recent[0] == "50% of the budget");  // the preset (docs/decode.md §2)
  BOOST_TEST(recent[1] == "50% of the budget");
  BOOST_TEST(recent[2] == "1");
  BOOST_TEST(recent_at_10[0] == "5");
  BOOST_TEST(recent_at_10[2] == "1");
  BOOST_TEST(int64_t(policies.at(0)["recent_tokens"]["6"].get_int64().value()) == 3);
  BOOST_TEST(int64_t(policies.at(3)["window"].get_int64().value()) == 3);
  BOOST_TEST(std::string_view(policies.at(3)["pool"].get_string().value()) == "max3");
  BOOST_TEST(std::string_view(j["format"].get_string().value()) == "mla-h2o eval report v1");
  // argv: the binary, then every argument as the shell passed it
  simdjson::dom::array argv = j["argv"].get_array();
  BOOST_REQUIRE(argv.size() >= 10u);
  BOOST_TEST(std::string_view(argv.at(1).get_string().value()) == "eval");
  BOOST_TEST(std::string_view(argv.at(argv.size() - 1).get_string().value()) == out);
  BOOST_TEST(!std::string_view(j["versions"]["git_revision"].get_string().value()).empty());
  // model_files: config.json and the weights, each sha256 = that of the bytes on disk
  simdjson::dom::array files = j["model_files"].get_array();
  BOOST_REQUIRE(files.size() >= 2u);
  for (simdjson::dom::element f : files) {
    const std::string path(f["path"].get_string().value());
    const std::string bytes = mla::test::read_text(path);
    BOOST_TEST(int64_t(f["bytes"].get_int64().value()) == static_cast<int64_t>(bytes.size()), path);
    BOOST_TEST(std::string_view(f["sha256"].get_string().value()) == mla::sha256_hex(bytes), path);
  }
  // MLA_MODEL_SHA256: 0 skips the hashes (sizes kept); a malformed value fails before any work
  const std::string skipped = scratch_dir("eval-provenance-0");
  ::setenv("MLA_MODEL_SHA256", "0", 1);
  const RunResult z = run_cli("eval --checkpoint '" + fixture() + "' --tokens " + ids_text() +
                              " --prompt-len 16 --steps 4 --cache-budget 6 --policy h2o --quiet --out '" + skipped + "'");
  ::setenv("MLA_MODEL_SHA256", "yes", 1);
  const RunResult bad = run_cli("eval --checkpoint '" + fixture() + "' --tokens " + ids_text() +
                                " --prompt-len 16 --steps 4 --cache-budget 6 --policy h2o --quiet --out '" + skipped + "-bad'");
  ::unsetenv("MLA_MODEL_SHA256");
  BOOST_REQUIRE_MESSAGE(z.exit_code == 0, z.err);
  simdjson::dom::element jz = parser.load(skipped + "/report.json");
  BOOST_TEST(std::string_view(jz["model_files"].at(0)["sha256"].get_string().value()) == "not computed (MLA_MODEL_SHA256=0)");
  BOOST_TEST(int64_t(jz["model_files"].at(0)["bytes"].get_int64().value()) > 0);
  BOOST_TEST(bad.exit_code == 2);
  BOOST_TEST(contains(bad.err, "MLA_MODEL_SHA256='yes' is not 0 (skip) or 1 (hash)"), bad.err);
  BOOST_TEST(!std::filesystem::exists(skipped + "-bad"));
}

BOOST_AUTO_TEST_CASE(cli_synthetic_weights_are_said) {
  // weights whose shards carry synth's mark: said on stdout, in report.json and in the plot titles
  const std::string ckpt = rewritten_fixture("eval-synth-ckpt", "", {{mla::kSynthMetadataKey, "mla-h2o synth: test"}});
  const std::string out = scratch_dir("eval-synth");
  const RunResult r = run_cli("eval --checkpoint '" + ckpt + "' --tokens " + ids_text() +
                              " --prompt-len 16 --steps 4 --cache-budget 6,8 --policy h2o --quiet --out '" + out + "'");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  BOOST_TEST(contains(r.out, "CAVEAT: synthetic weights (mla-h2o synth: test)"), r.out);
  simdjson::dom::parser parser;
  simdjson::dom::element j = parser.load(out + "/report.json");
  BOOST_TEST(std::string(j["synthetic_weights"].get_string().value()) == "mla-h2o synth: test");
  BOOST_TEST(j["caveats"].get_array().size() == 1u);
  for (const char* svg : {"/budget.svg", "/layers.svg"})
    BOOST_TEST(contains(mla::test::read_text(out + svg), "<title>[synthetic weights] "), svg);
}

// The shipped trained model (models/tiny-mla, byte-level) on a short passkey input: the key is
// found, and the passkey accuracy is the share of its digits whose predicting position's argmax
// (the dumped full-cache logits) is the digit; a text without the question has none.
BOOST_AUTO_TEST_CASE(cli_passkey_on_the_shipped_model) {
  const std::string model = mla::test::data_dir() + "/../../models/tiny-mla";
  BOOST_REQUIRE(std::filesystem::exists(model + "/model.safetensors"));
  std::string text = "The pass key is 41327. Remember it. 41327 is the pass key.\n";
  for (int i = 0; i < 3; ++i) text += "The grass is green. The sky is blue. The sun is yellow.\n";
  text += "What is the pass key? The pass key is 41327.\n";
  const std::string dir = scratch_dir("eval-passkey");
  mla::test::write_text(dir + "/passkey.txt", text);
  const int64_t T = 1 + static_cast<int64_t>(text.size()), P = T - 40, N = 39;
  const std::string out = dir + "/out";
  const RunResult r = run_cli("eval --checkpoint '" + model + "' --text '" + dir + "/passkey.txt' --prompt-len " +
                              std::to_string(P) + " --steps " + std::to_string(N) +
                              " --cache-budget 24 --sinks 2 --recent 8 --policy h2o,streaming --dump-tensors --quiet --out '" +
                              out + "'");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  BOOST_TEST(contains(r.out, "passkey input: key 41327"), r.out);
  BOOST_TEST(!contains(r.out, "CAVEAT"), r.out);  // trained weights
  simdjson::dom::parser parser;
  simdjson::dom::element j = parser.load(out + "/report.json");
  BOOST_TEST(std::string(j["passkey"]["key"].get_string().value()) == "41327");
  // the full cache's share from the dumped logits [P+N, V]
  const mla::SafetensorsFile dump = mla::SafetensorsFile::open(out + "/tensors.safetensors");
  const std::vector<float> logits = dump.to_float(dump.at("logits"));
  const int64_t V = 258, first = T - 7;  // the digits are tokens T-7 .. T-3 (BOS at 0; then ".\n")
  int64_t correct = 0;
  for (int64_t d = first; d < first + 5; ++d) {
    const float* row = logits.data() + (d - 1) * V;
    correct += std::max_element(row, row + V) - row == static_cast<int64_t>(text[static_cast<size_t>(d - 1)]);
  }
  const std::string summary = mla::test::read_text(out + "/summary.csv");
  BOOST_TEST(std::stod(csv_field(summary, "full,24,", "passkey_accuracy")) == static_cast<double>(correct) / 5.0);
  // a text that is not a passkey input: the column is empty, the table says n/a only when some row has one
  const std::string plain_out = scratch_dir("eval-plain");
  const RunResult plain = run_cli("eval --checkpoint '" + model + "' --text '" + model + "/eval/heldout.txt' --prompt-len 48 "
                                  "--steps 8 --cache-budget 24 --sinks 2 --recent 8 --policy h2o --quiet --out '" + plain_out + "'");
  BOOST_REQUIRE_MESSAGE(plain.exit_code == 0, plain.err);
  BOOST_TEST(!contains(plain.out, "passkey input"), plain.out);
  BOOST_TEST(contains(mla::test::read_text(plain_out + "/summary.csv"), "\nfull,24,1,"));
  BOOST_TEST(parser.load(plain_out + "/report.json")["passkey"].is_null());
}

// models/tiny-mla-recall: every file its card lists has the card's sha256, and eval with the full
// cache predicts every digit of its five 1 k-byte needles (the card: 95-100 % per depth at 1 k).
BOOST_AUTO_TEST_CASE(shipped_recall_model_matches_its_card) {
  const std::string model = mla::test::data_dir() + "/../../models/tiny-mla-recall";
  const std::string card = mla::test::read_text(model + "/README.md");
  int files = 0;
  for (size_t at = 0; (at = card.find("\n| `", at)) != std::string::npos; ++at) {
    const size_t name_end = card.find('`', at + 4);
    const size_t hash_at = card.find("| `", name_end);
    if (name_end == std::string::npos || hash_at == std::string::npos || card[hash_at + 3 + 64] != '`') continue;
    const std::string name = card.substr(at + 4, name_end - at - 4), hash = card.substr(hash_at + 3, 64);
    BOOST_TEST(mla::file_digests({model + "/" + name}).at(0).sha256 == hash, name);
    ++files;
  }
  BOOST_TEST(files == 19);  // 8 model files and 11 eval inputs
  const std::string dir = scratch_dir("eval-recall");
  std::filesystem::create_directories(dir + "/needles");
  for (const char* d : {"10", "30", "50", "70", "90"})
    std::filesystem::copy_file(model + "/eval/passkey-1024-d" + d + ".txt", dir + "/needles/passkey-1024-d" + d + ".txt");
  const RunResult r = run_cli("eval --checkpoint '" + model + "' --text '" + dir + "/needles' --windows 5 --prompt-len 984 "
                              "--steps 38 --cache-budget 128 --policy h2o --quiet --out '" + dir + "/o'");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string summary = mla::test::read_text(dir + "/o/summary.csv");
  BOOST_TEST(csv_field(summary, "full,128,5,", "passkey_accuracy") == "1");  // the full cache: 25 of 25 digits
}

BOOST_AUTO_TEST_CASE(cli_errors) {
  const std::string ids = "--tokens " + ids_text();
  // P + N beyond the input (29 tokens: P + N + 1 <= 29)
  expect_error(ids + " --prompt-len 16 --steps 13 --cache-budget 8", "but the input has 29");
  expect_error(ids + " --prompt-len 0 --steps 4 --cache-budget 8", "--prompt-len");
  expect_error(ids + " --prompt-len 16 --steps 4", "--cache-budget K is required");
  // token ids past the vocabulary
  expect_error("--tokens 1,2,3,128,4,5,6 --prompt-len 2 --steps 2 --cache-budget 4", "past the vocabulary");
  // --text with a model that is not byte-level
  const std::string text = scratch_dir("eval-text") + "/t.txt";
  mla::test::write_text(text, "hello world, some text");
  expect_error("--text '" + text + "' --prompt-len 4 --steps 2 --cache-budget 4", "byte");
  // --text that is a FIFO is refused before it could block (it blocked: std::ifstream opened it)
  const std::string fifo = scratch_dir("eval-fifo") + "/fifo";
  BOOST_TEST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const RunResult f = mla::test::run_cli_after("exec timeout 20", "eval --checkpoint '" + fixture() + "' --text '" + fifo +
                                                                      "' --prompt-len 4 --steps 2 --cache-budget 4 --out '" +
                                                                      scratch_dir("eval-fifo") + "/o'");
  BOOST_TEST((f.exit_code != 0 && f.exit_code != 124), f.err);  // 124: timeout killed it, blocked
  BOOST_TEST(f.err.rfind("mla-h2o eval: error: --text " + fifo + ": not a regular file (a FIFO); ", 0) == 0u, f.err);
  BOOST_TEST(std::count(f.err.begin(), f.err.end(), '\n') == 1);
  // two inputs, none
  expect_error(ids + " --text '" + text + "' --prompt-len 4 --steps 2 --cache-budget 4", "two input sources");
  expect_error("--prompt-len 4 --steps 2 --cache-budget 4", "no input");
  // the compression ratio: outside [0, 1), with --cache-budget, not a number, no token left, two giving one K
  expect_error(ids + " --prompt-len 16 --steps 4 --compression-ratio 1", "outside [0, 1)");
  expect_error(ids + " --prompt-len 16 --steps 4 --compression-ratio -0.1", "outside [0, 1)");
  expect_error(ids + " --prompt-len 16 --steps 4 --compression-ratio 0.5 --cache-budget 8", "two ways to give the budgets");
  expect_error(ids + " --prompt-len 16 --steps 4 --compression-ratio 0.5x", "not a number");
  expect_error(ids + " --prompt-len 16 --steps 4 --compression-ratio 0.99", "leaves K = round((1 - r) P) = 0");
  expect_error(ids + " --prompt-len 16 --steps 4 --compression-ratio 0.5,0.51", "both give K = 8");
  expect_error(ids + " --prompt-len 16 --steps 4 --cache-budget 8 --compress sometimes", "--compress");
  // budgets that leave no room after sinks and recent
  expect_error(ids + " --prompt-len 16 --steps 4 --cache-budget 6 --policy h2o --sinks 3 --recent 3", "never evicts");
  expect_error(ids + " --prompt-len 16 --steps 4 --cache-budget 8,6", "strictly increasing");
  expect_error(ids + " --prompt-len 16 --steps 4 --cache-budget 8 --policy h2o,lru", "unknown policy 'lru'");
  // a config the forward cannot honour; a layer or an expert missing from the checkpoint
  expect_error(ids + " --prompt-len 16 --steps 4 --cache-budget 8", "scoring_func",
               edited_fixture("eval-scoring", "scoring_func", "\"softmax\""));
  expect_error(ids + " --prompt-len 16 --steps 4 --cache-budget 8", "topk_method",
               edited_fixture("eval-topk", "topk_method", "\"greedy\""));
  expect_error(ids + " --prompt-len 16 --steps 4 --cache-budget 8", "layers.3",
               edited_fixture("eval-layers", "num_hidden_layers", "4"));
  expect_error(ids + " --prompt-len 16 --steps 4 --cache-budget 8", "model.layers.2.mlp.experts.5.up_proj.weight",
               rewritten_fixture("eval-experts", "model.layers.2.mlp.experts.5.up_proj.weight", {}));
  expect_error(ids + " --prompt-len 16 --steps 4 --cache-budget 8", "model.layers.1.self_attn.kv_a_proj_with_mqa.weight",
               rewritten_fixture("eval-attn", "model.layers.1.self_attn.kv_a_proj_with_mqa.weight", {}));
}

// budget.svg's rules (issue 26 item 5): whiskers at the 95 % interval when W >= 2; a policy whose
// upper bound is over 5x the median of the others' upper bounds is drawn in a second panel; ids
// stay the labels; 16 series have 16 distinct (colour, dash) styles; integer x ticks.
BOOST_AUTO_TEST_CASE(budget_svg_draws_intervals_and_sets_an_outlier_apart) {
  const auto summary = [](const std::string& policy, int64_t K, double d, double lo, double hi) {
    mla::EvalSummary s;
    s.policy = policy;
    s.budget = K;
    s.windows = 4;
    s.delta_nll = d;
    s.delta_nll_low = lo;
    s.delta_nll_high = hi;
    return s;
  };
  std::vector<mla::EvalSummary> sum = {summary("full", 2, 0, 0, 0),         summary("a", 2, 0.10, 0.05, 0.15),
                                       summary("b", 2, 0.20, 0.10, 0.30),   summary("c", 2, 0.15, 0.12, 0.18),
                                       summary("far", 2, 3.00, 2.00, 4.00), summary("full", 3, 0, 0, 0),
                                       summary("a", 3, 0.05, 0.01, 0.09),   summary("b", 3, 0.10, 0.0, 0.2),
                                       summary("c", 3, 0.08, 0.07, 0.09),   summary("far", 3, 2.0, 1.0, 3.0)};
  const std::string two = mla::eval_budget_svg(sum, "t");
  const size_t apart = two.find("off that scale");
  BOOST_REQUIRE(apart != std::string::npos);
  BOOST_TEST(two.find("<polyline id=\"far\"") > apart);  // the outlier in the second panel
  BOOST_TEST(two.find("<polyline id=\"b\"") < apart);
  BOOST_TEST(contains(two, "height=\"1000.00\""));         // 40 + 2 x 480
  // whiskers: one path per point with an interval (4 policies x 2 budgets; full has none)
  size_t paths = 0;
  for (size_t at = two.find("<path d=\"M"); at != std::string::npos; at = two.find("<path d=\"M", at + 1)) ++paths;
  BOOST_TEST(paths == 8u);
  // x ticks at the integer budgets only (a span of 1 would otherwise step by 0.1)
  BOOST_TEST(!contains(two, "text-anchor=\"middle\">2.5</text>"));  // x tick labels are centred
  BOOST_TEST(contains(two, "text-anchor=\"middle\">3</text>"));
  // without the outlier (median 0.15 x 5 = 0.75 > 0.3): one panel
  sum.erase(std::remove_if(sum.begin(), sum.end(), [](const mla::EvalSummary& s) { return s.policy == "far"; }), sum.end());
  BOOST_TEST(!contains(mla::eval_budget_svg(sum, "t"), "off that scale"));
  std::set<std::pair<std::string, std::string>> styles;
  for (size_t k = 0; k < 16; ++k) styles.insert({mla::svg::series_style(k).colour, mla::svg::series_style(k).dash});
  BOOST_TEST(styles.size() == 16u);
}

BOOST_AUTO_TEST_SUITE_END()
