// tests/unit/test_cpu.cpp — suite cpu: the Eigen/OpenBLAS backend (src/cpu) against the scalar
// double-precision reference (reference/mla_reference.cpp), which is the ground truth.
//
// For every small geometry of geometries.hpp, both masks, fp32 and bf16, and S = 1, 7, 113,
// 256 (113 and 256 cross the 64-row causal blocks of the cpu backend), the two backends run
// on the same seeded layer and hidden states, and these are compared with compare.hpp and
// the "cpu-vs-reference" rows of tolerances.hpp:
//   attn_output [S, H], attn_weights [n, S, S], query/key/value_states (HF layout
//   [n, S, d]), head_scores [n*S] and token_scores [S] (H2O).
// The full Kimi K2.6 geometry runs at S = 1 and 7 only (the reference costs ~0.2 GFLOP of
// scalar double loops per token). A layer other than 0 is loaded from a synthesized tiny
// checkpoint. Structural checks need no reference: masked probabilities are exactly 0,
// the rope half of key_states is one vector per token shared by all heads, the last key's
// H2O score is the last query's probabilities. Errors: bad shapes, NaN/Inf, misuse.
//
// Shape legend: S = tokens, H = hidden_size, n = num_attention_heads, d_qk = qk_head_dim,
// d_n = qk_nope_head_dim, d_r = qk_rope_head_dim, d_v = v_head_dim.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "compare.hpp"
#include "geometries.hpp"
#include "mla/attention.hpp"
#include "mla/bf16.hpp"
#include "mla/checkpoint.hpp"
#include "mla/synth.hpp"
#include "mla/error.hpp"
#include "mla/random.hpp"
#include "test_util.hpp"
#include "mla_build_config.h"
#include "src/cpu/gemm_engine.hpp"
#include "src/cpu/kernel_check.hpp"
#include "tolerances.hpp"

namespace {

using mla::ForwardOptions;
using mla::ForwardResult;
using mla::Mask;
using mla::Precision;

// One comparison case (ggml-style printable parameters).
struct Case {
  std::string geometry;
  int64_t seq_len;
  Mask mask;
  Precision precision;
  std::string vars() const {
    return geometry + " S=" + std::to_string(seq_len) + " mask=" + mla::mask_name(mask) +
           " precision=" + mla::precision_name(precision);
  }
};

ForwardOptions options_for(const Case& c) {
  ForwardOptions opt;
  opt.mask = c.mask;
  opt.precision = c.precision;
  opt.keep_attn_weights = true;
  opt.keep_states = true;
  opt.position_offset = 3;  // positions 3..S+2: rope is not the identity at the first token
  return opt;
}

// Compares one tensor with its tolerance row; the case's vars() prefix every message.
void check_tensor(const Case& c, const std::string& what, const mla::TensorD& ref, const mla::TensorD& got) {
  const auto& tol = mla::test::tolerance(what, "cpu-vs-reference", mla::precision_name(c.precision));
  const auto r = mla::test::compare(what, ref, got, tol);
  BOOST_TEST(r.ok, c.vars() << ": " << r.message);
}
void check_vector(const Case& c, const std::string& what, const std::vector<double>& ref,
                  const std::vector<double>& got) {
  const auto& tol = mla::test::tolerance(what, "cpu-vs-reference", mla::precision_name(c.precision));
  const auto r = mla::test::compare(what, ref, got, tol);
  BOOST_TEST(r.ok, c.vars() << ": " << r.message);
}

// The reference and the cpu backend with every GEMM engine of the build, prepared once for
// (cfg, w, precision); forward options (mask, S) vary per comparison.
struct PreparedBackends {
  std::unique_ptr<mla::Backend> reference;
  std::vector<std::pair<mla::Gemm, std::unique_ptr<mla::Backend>>> cpu;
};

PreparedBackends prepare_backends(const mla::AttentionConfig& cfg, const mla::LayerWeights& w, Precision precision,
                                  int threads) {
  ForwardOptions opt;
  opt.precision = precision;
  opt.threads = threads;
  PreparedBackends b;
  b.reference = mla::make_reference_backend();
  b.reference->prepare(cfg, w, opt);
  for (const mla::Gemm gemm : mla::test::gemm_engines()) {
    opt.gemm = gemm;
    b.cpu.emplace_back(gemm, mla::make_cpu_backend());
    b.cpu.back().second->prepare(cfg, w, opt);
  }
  return b;
}

// Runs the reference and every cpu engine on `hidden` and compares every output.
void compare_prepared(const Case& c, PreparedBackends& b, const mla::TensorF& hidden, int threads = 0) {
  ForwardOptions opt = options_for(c);
  opt.threads = threads;
  const ForwardResult ref = b.reference->forward(hidden, opt);
  for (auto& [gemm, cpu] : b.cpu) {
    BOOST_TEST_CONTEXT("gemm=" << mla::gemm_name(gemm)) {
      const ForwardResult got = cpu->forward(hidden, opt);

      BOOST_TEST(!got.computed_in_double);
      check_tensor(c, "attn_output", ref.attn_output, got.attn_output);
      check_tensor(c, "attn_weights", ref.attn_weights, got.attn_weights);
      check_tensor(c, "query_states", ref.query_states, got.query_states);
      check_tensor(c, "key_states", ref.key_states, got.key_states);
      check_tensor(c, "value_states", ref.value_states, got.value_states);
      check_vector(c, "head_scores", ref.head_scores, got.head_scores);
      check_vector(c, "token_scores", ref.token_scores, got.token_scores);

      const std::vector<std::string> stages(std::begin(mla::kForwardStages), std::end(mla::kForwardStages));
      BOOST_TEST_REQUIRE(got.stage_seconds.size() == stages.size(), c.vars());
      for (size_t i = 0; i < stages.size(); ++i) {
        BOOST_TEST(got.stage_seconds[i].first == stages[i], c.vars());
        BOOST_TEST(got.stage_seconds[i].second >= 0.0, c.vars());
      }
    }
  }
}

void compare_backends(const Case& c, const mla::AttentionConfig& cfg, const mla::LayerWeights& w,
                      const mla::TensorF& hidden, int threads = 0) {
  PreparedBackends b = prepare_backends(cfg, w, c.precision, threads);
  compare_prepared(c, b, hidden, threads);
}

mla::ErrorKind error_kind_of(const std::function<void()>& f, std::string* message) {
  try {
    f();
  } catch (const mla::Error& e) {
    if (message) *message = e.what();
    return e.kind();
  }
  BOOST_FAIL("expected an mla::Error");
  return mla::ErrorKind::Io;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cpu)

BOOST_AUTO_TEST_CASE(name_and_description) {
  auto cpu = mla::make_cpu_backend();
  BOOST_TEST(cpu->name() == "cpu");
  const std::string d = cpu->description();
  BOOST_TEST(d.find("Eigen 3.") != std::string::npos, d);
  BOOST_TEST(d.find("thread") != std::string::npos, d);
  auto by_kind = mla::make_backend(mla::BackendKind::Cpu);
  BOOST_TEST(by_kind->name() == "cpu");
  BOOST_TEST(cpu->gemm_info().engine.empty());  // known after prepare()
}

// Each engine names itself and its kernel after prepare(); oneDNN either runs (its version
// and a kernel name such as "brg:avx512_core_bf16") or says why the Eigen engine runs.
BOOST_AUTO_TEST_CASE(gemm_engine_is_named) {
  const mla::AttentionConfig cfg = mla::test::geometry("tiny");
  const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 3);
  for (const mla::Gemm gemm : mla::test::gemm_engines()) {
    for (Precision precision : {Precision::FP32, Precision::BF16}) {
      ForwardOptions opt;
      opt.gemm = gemm;
      opt.precision = precision;
      auto cpu = mla::make_cpu_backend();
      cpu->prepare(cfg, w, opt);
      const mla::GemmInfo g = cpu->gemm_info();
      const std::string vars = std::string("gemm=") + mla::gemm_name(gemm) + " " + mla::precision_name(precision);
      BOOST_TEST(g.requested == mla::gemm_name(gemm), vars);
      BOOST_TEST(!g.kernel.empty(), vars);
      BOOST_TEST(!g.reason.empty(), vars);
      if (g.engine.rfind("oneDNN ", 0) == 0) {
        BOOST_TEST((gemm == mla::Gemm::OneDnn), vars);
        BOOST_TEST(cpu->description().find(g.kernel) != std::string::npos, cpu->description());
        // the per-head products run on oneDNN too (src/cpu/onednn_attention.hpp), unless oneDNN has
        // no bf16 matmul here and the projections take bf16 values on its fp32 kernel
        const bool on_f32 = g.reason.find("bf16 values on its fp32 kernel") != std::string::npos;
        BOOST_TEST((on_f32 == (g.attention_products == mla::Gemm::Eigen)), vars << ": " << g.reason);
        BOOST_TEST((!on_f32 || precision == Precision::BF16), vars);
        BOOST_TEST(cpu->description().find(on_f32 ? "per-head products: Eigen" : "per-head products: oneDNN") !=
                       std::string::npos,
                   cpu->description());
      } else {
        BOOST_TEST(g.engine.rfind("Eigen 3.", 0) == 0, vars << ": " << g.engine);
        if (gemm == mla::Gemm::OneDnn) BOOST_TEST(g.reason.find("has no") != std::string::npos, vars << ": " << g.reason);
      }
    }
  }
  if (!MLA_HAVE_ONEDNN) {  // --gemm onednn without oneDNN is one clear error
    ForwardOptions opt;
    opt.gemm = mla::Gemm::OneDnn;
    std::string msg;
    auto cpu = mla::make_cpu_backend();
    BOOST_TEST((error_kind_of([&] { cpu->prepare(cfg, w, opt); }, &msg) == mla::ErrorKind::Unsupported));
    BOOST_TEST(msg.find("oneDNN") != std::string::npos, msg);
  }
}

// Every small geometry x both masks x both precisions x S in {1, 7, 113, 256}.
BOOST_AUTO_TEST_CASE(small_geometries_match_reference) {
  for (const auto& g : mla::test::small_geometries()) {
    const mla::LayerWeights w = mla::test::random_layer_weights(g.cfg, 1234);
    for (Precision precision : {Precision::FP32, Precision::BF16}) {
      PreparedBackends b = prepare_backends(g.cfg, w, precision, 0);
      for (int64_t seq_len : {1, 7, 113, 256}) {
        const mla::TensorF hidden = mla::test::random_hidden(seq_len, g.cfg.hidden_size, 99 + static_cast<uint64_t>(seq_len));
        for (Mask mask : {Mask::Causal, Mask::None}) {
          BOOST_TEST_CONTEXT(mla::test::vars(g.cfg)) { compare_prepared({g.name, seq_len, mask, precision}, b, hidden); }
        }
      }
    }
  }
}

// The full Kimi K2.6 geometry (H 7168, 64 heads, r_q 1536, r_kv 512, 128/64/128) at small S.
BOOST_AUTO_TEST_CASE(kimi_geometry_matches_reference) {
  const mla::AttentionConfig cfg = mla::test::geometry("kimi");
  const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 7);
  for (Precision precision : {Precision::FP32, Precision::BF16}) {
    PreparedBackends b = prepare_backends(cfg, w, precision, 0);  // the weights once per precision
    for (int64_t seq_len : {1, 7}) {
      const mla::TensorF hidden = mla::test::random_hidden(seq_len, cfg.hidden_size, 11);
      for (Mask mask : {Mask::Causal, Mask::None}) {
        if (seq_len == 1 && mask == Mask::None) continue;  // one token: both masks are the same
        compare_prepared({"kimi", seq_len, mask, precision}, b, hidden);
      }
    }
  }
}

// The thread count changes only the work split, never the math.
BOOST_AUTO_TEST_CASE(thread_counts_match_reference) {
  const mla::AttentionConfig cfg = mla::test::geometry("odd");
  const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 5);
  const mla::TensorF hidden = mla::test::random_hidden(150, cfg.hidden_size, 6);
  for (int threads : {1, 3}) {
    BOOST_TEST_CONTEXT("threads=" << threads) {
      compare_backends({"odd", 150, Mask::Causal, Precision::BF16}, cfg, w, hidden, threads);
      compare_backends({"odd", 150, Mask::None, Precision::FP32}, cfg, w, hidden, threads);
    }
  }
}

// Bit for bit the same result for any thread count, with every engine, on the Kimi geometry at
// S = 7 (every projection is large enough to be split over the workers: the oneDNN engine runs
// one primitive per column slice, docs/cpu-gemm.md §4). A split that changed any output's
// summation would show here as a difference in the last bit.
BOOST_AUTO_TEST_CASE(kimi_results_do_not_depend_on_threads) {
  const mla::AttentionConfig cfg = mla::test::geometry("kimi");
  const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 7);
  const mla::TensorF hidden = mla::test::random_hidden(7, cfg.hidden_size, 12);
  for (const mla::Gemm gemm : mla::test::gemm_engines()) {
    for (Precision precision : {Precision::FP32, Precision::BF16}) {
      std::vector<ForwardResult> results;
      for (int threads : {1, 2, 3}) {
        ForwardOptions opt;
        opt.gemm = gemm;
        opt.precision = precision;
        opt.threads = threads;
        auto cpu = mla::make_cpu_backend();
        cpu->prepare(cfg, w, opt);
        results.push_back(cpu->forward(hidden, opt));
      }
      const std::string vars = std::string("gemm=") + mla::gemm_name(gemm) + " " + mla::precision_name(precision);
      for (size_t i = 1; i < results.size(); ++i) {
        BOOST_TEST((results[i].attn_output.data == results[0].attn_output.data), vars << " threads " << i + 1);
        BOOST_TEST((results[i].head_scores == results[0].head_scores), vars << " threads " << i + 1);
      }
    }
  }
}

// Thread independence of one projection by construction, on every engine and precision
// (docs/cpu-gemm.md §4): the column slices are fixed by the weight's shape, so the outputs must be
// the same bits for any --threads at prepare and at run time. Shapes: the Kimi projections
// q_a (7168 -> 1536) and kv_a (7168 -> 576) cut down to in = 512, and an out that is no multiple
// of 64; S = 1100 crosses the 512-row chunks. On AMX this broke while the slices followed the
// thread count. (Batch independence does not hold for these engines: OpenBLAS sgemm and oneDNN's
// gemm:jit sum a row differently at 1 or 7 rows than in a larger batch; §4 says so. The fixed-order
// kernels of src/cpu/fixed_order.hpp are the batch-independent ones.)
BOOST_AUTO_TEST_CASE(projection_results_do_not_depend_on_threads) {
  mla::Rng rng(31, 1);
  const int64_t in = 512, S = 1100;
  mla::cpu::MatrixRM x(S, in);
  for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = mla::round_to_bf16(static_cast<float>(rng.normal()));
  for (const int64_t out : {int64_t{1536}, int64_t{576}, int64_t{200}}) {
    std::vector<float> w(static_cast<size_t>(out * in)), bias(static_cast<size_t>(out));
    for (float& v : w) v = mla::round_to_bf16(static_cast<float>(0.05 * rng.normal()));
    for (float& v : bias) v = mla::round_to_bf16(static_cast<float>(0.1 * rng.normal()));
    for (const mla::Gemm gemm : mla::test::gemm_engines()) {
      for (const bool bf16 : {false, true}) {
        std::string why;
        auto engine = mla::cpu::make_gemm_engine(gemm, bf16, why);
        const std::string vars = std::string("gemm=") + mla::gemm_name(gemm) + " (" + engine->kernel() + ") " +
                                 (bf16 ? "bf16" : "fp32") + " out=" + std::to_string(out);
        mla::cpu::MatrixRM all;
        std::vector<int64_t> bounds;
        for (const int prep_threads : {1, 2, 3}) {
          auto linear = engine->prepare({"test", w.data(), out, in, bias.data()}, bf16, prep_threads);
          // The slicing itself, which a kernel's summation may follow (AMX's does): never the threads'.
          if (bounds.empty()) bounds = linear->slice_bounds();
          BOOST_TEST((linear->slice_bounds() == bounds), vars << " slices prepared with " << prep_threads << " threads");
          BOOST_TEST(bounds.front() == 0);
          BOOST_TEST(bounds.back() == out);
          for (const int threads : {1, 2, 3}) {
            mla::cpu::MatrixRM y;
            linear->run(x, threads, y);
            if (all.size() == 0) {
              all = y;
              continue;
            }
            BOOST_TEST((y == all), vars << " prepared with " << prep_threads << " threads, run on " << threads);
          }
        }
      }
    }
  }
}

// prepare_shared lets the engines read the loaded weights in place (docs/cpu-gemm.md §5): the
// forward must be the same bits as after prepare(), which copies, for every engine and precision.
// The layer with bf16 values marked BF16 is read in place in both precisions; the same layer
// nudged off the bf16 grid and marked F32 must still be rounded in a bf16 run (read in place
// unrounded, its bf16 outputs differ).
BOOST_AUTO_TEST_CASE(weights_read_in_place_give_the_same_bits) {
  const mla::AttentionConfig cfg = mla::test::geometry("odd");
  const mla::LayerWeights bf16_layer = mla::test::random_layer_weights(cfg, 17);
  mla::LayerWeights f32_layer = bf16_layer;
  for (mla::TensorF* t : {&f32_layer.q_a_proj, &f32_layer.q_b_proj, &f32_layer.q_proj, &f32_layer.kv_a_proj_with_mqa,
                          &f32_layer.kv_b_proj, &f32_layer.o_proj})
    for (float& v : t->data) v *= 1.0f + 0x1p-12f;  // no longer a bf16 value (unless 0)
  for (auto& [name, dtype] : f32_layer.source_dtype) dtype = "F32";
  const mla::TensorF hidden = mla::test::random_hidden(77, cfg.hidden_size, 3);
  for (const mla::LayerWeights* layer : {&bf16_layer, static_cast<const mla::LayerWeights*>(&f32_layer)}) {
    const auto shared = std::make_shared<const mla::LayerWeights>(*layer);
    for (const mla::Gemm gemm : mla::test::gemm_engines()) {
      for (const Precision precision : {Precision::FP32, Precision::BF16}) {
        ForwardOptions opt;
        opt.gemm = gemm;
        opt.precision = precision;
        opt.mask = Mask::Causal;
        auto copied = mla::make_cpu_backend(), in_place = mla::make_cpu_backend();
        copied->prepare(cfg, *layer, opt);
        in_place->prepare_shared(cfg, shared, opt);
        const ForwardResult a = copied->forward(hidden, opt), b = in_place->forward(hidden, opt);
        const std::string vars = std::string(layer == &bf16_layer ? "BF16 layer" : "F32 layer") + " gemm=" +
                                 mla::gemm_name(gemm) + " " + mla::precision_name(precision);
        BOOST_TEST((a.attn_output.data == b.attn_output.data), vars);
        BOOST_TEST((a.token_scores == b.token_scores), vars);
      }
    }
  }
}

// A layer other than 0, loaded from a synthesized tiny checkpoint (bf16 tensors on disk).
BOOST_AUTO_TEST_CASE(layer_from_synthesized_checkpoint) {
  mla::SynthOptions so;
  so.preset = "tiny";
  so.out_dir = mla::test::scratch_dir("cpu_synth");
  so.layers = {0, 1};  // the tiny preset has 2 layers
  so.seed = 21;
  const mla::AttentionConfig cfg = mla::synthesize_checkpoint(so).attention;
  const mla::Checkpoint ckpt = mla::Checkpoint::open(so.out_dir);
  const mla::LayerWeights w0 = ckpt.load_layer(0);
  const mla::LayerWeights w1 = ckpt.load_layer(1);
  BOOST_TEST(w1.layer == 1);
  const mla::TensorF hidden = mla::test::random_hidden(40, cfg.hidden_size, 8);
  for (Precision precision : {Precision::FP32, Precision::BF16}) {
    compare_backends({"synth-tiny-layer1", 40, Mask::Causal, precision}, cfg, w1, hidden);
  }
  // The layers hold different weights, so the outputs differ (the right layer was used).
  ForwardOptions opt;
  auto cpu = mla::make_cpu_backend();
  cpu->prepare(cfg, w0, opt);
  const auto out0 = cpu->forward(hidden, opt).attn_output;
  cpu->prepare(cfg, w1, opt);
  const auto out1 = cpu->forward(hidden, opt).attn_output;
  BOOST_TEST(out0.data != out1.data);
}

// Structure that holds whatever the reference says: exact zeros above the diagonal, one
// shared rope key per token, and the last key's mass = the last query's probabilities.
BOOST_AUTO_TEST_CASE(causal_structure_and_state_layout) {
  const mla::AttentionConfig cfg = mla::test::geometry("tiny");
  const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 3);
  const int64_t S = 130, n = cfg.num_attention_heads, d_n = cfg.qk_nope_head_dim, d_qk = cfg.qk_head_dim();
  const mla::TensorF hidden = mla::test::random_hidden(S, cfg.hidden_size, 4);
  for (Precision precision : {Precision::FP32, Precision::BF16}) {
    ForwardOptions opt;
    opt.precision = precision;
    opt.keep_attn_weights = true;
    opt.keep_states = true;
    auto cpu = mla::make_cpu_backend();
    cpu->prepare(cfg, w, opt);
    const ForwardResult r = cpu->forward(hidden, opt);
    BOOST_TEST_REQUIRE((r.attn_weights.shape == std::vector<int64_t>{n, S, S}));
    BOOST_TEST_REQUIRE((r.query_states.shape == std::vector<int64_t>{n, S, d_qk}));
    BOOST_TEST_REQUIRE((r.key_states.shape == std::vector<int64_t>{n, S, d_qk}));
    BOOST_TEST_REQUIRE((r.value_states.shape == std::vector<int64_t>{n, S, cfg.v_head_dim}));
    BOOST_TEST_REQUIRE(r.head_scores.size() == static_cast<size_t>(n * S));
    BOOST_TEST_REQUIRE(r.token_scores.size() == static_cast<size_t>(S));
    int64_t nonzero_masked = 0;
    for (int64_t h = 0; h < n; ++h)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t t = s + 1; t < S; ++t) nonzero_masked += r.attn_weights.data[static_cast<size_t>((h * S + s) * S + t)] != 0.0;
    BOOST_TEST(nonzero_masked == 0);
    for (int64_t h = 0; h < n; ++h) {
      BOOST_TEST(r.head_scores[static_cast<size_t>(h * S + S - 1)] ==
                 r.attn_weights.data[static_cast<size_t>((h * S + S - 1) * S + S - 1)]);
      for (int64_t s = 0; s < S; ++s)
        for (int64_t d = d_n; d < d_qk; ++d)
          BOOST_TEST_REQUIRE(r.key_states.data[static_cast<size_t>((h * S + s) * d_qk + d)] ==
                             r.key_states.data[static_cast<size_t>(s * d_qk + d)]);  // head 0
    }
    // attn_weights / states are filled only on request.
    ForwardOptions lean;
    lean.precision = precision;
    const ForwardResult l = cpu->forward(hidden, lean);
    BOOST_TEST(l.attn_weights.empty());
    BOOST_TEST(l.query_states.empty());
    BOOST_TEST(l.attn_output.data == r.attn_output.data);
    BOOST_TEST(l.token_scores == r.token_scores);
  }
}

// HF's q_proj (q_lora_rank null) has no bias even with attention_bias: a q bias there is a
// weight set DeepseekV3Attention cannot load, so every backend refuses it with one line.
BOOST_AUTO_TEST_CASE(q_proj_bias_is_refused_by_cpu_and_reference) {
  const mla::AttentionConfig cfg = mla::test::geometry("bias_q_lora_null");
  mla::LayerWeights w = mla::test::random_layer_weights(cfg, 4);
  BOOST_TEST(w.q_a_proj_bias.empty());
  ForwardOptions opt;
  auto cpu = mla::make_cpu_backend();
  auto ref = mla::make_reference_backend();
  cpu->prepare(cfg, w, opt);  // kv_a and o biases only: fine
  ref->prepare(cfg, w, opt);
  w.q_a_proj_bias = mla::TensorF("q_proj.bias", {cfg.num_attention_heads * cfg.qk_head_dim()});
  std::string msg;
  for (mla::Backend* b : {cpu.get(), ref.get()}) {
    BOOST_TEST((error_kind_of([&] { b->prepare(cfg, w, opt); b->forward(mla::test::random_hidden(2, cfg.hidden_size, 1), opt); }, &msg) ==
                mla::ErrorKind::Shape));
    BOOST_TEST(msg.find("q_proj has no bias") != std::string::npos, msg);
  }
}

BOOST_AUTO_TEST_CASE(bad_inputs_are_clear_errors) {
  const mla::AttentionConfig cfg = mla::test::geometry("tiny");
  const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 3);
  ForwardOptions opt;
  std::string msg;

  auto fresh = mla::make_cpu_backend();
  BOOST_TEST((error_kind_of([&] { fresh->forward(mla::test::random_hidden(2, cfg.hidden_size, 1), opt); }, &msg) ==
              mla::ErrorKind::InvalidArgument));
  BOOST_TEST(msg.find("before prepare") != std::string::npos, msg);

  mla::LayerWeights bad = w;
  bad.kv_b_proj.shape = {bad.kv_b_proj.shape[0] / 2, bad.kv_b_proj.shape[1] * 2};
  BOOST_TEST((error_kind_of([&] { fresh->prepare(cfg, bad, opt); }, &msg) == mla::ErrorKind::Shape));
  BOOST_TEST(msg.find("kv_b_proj") != std::string::npos, msg);

  bad = w;
  bad.o_proj.data[5] = std::numeric_limits<float>::infinity();
  BOOST_TEST((error_kind_of([&] { fresh->prepare(cfg, bad, opt); }, &msg) == mla::ErrorKind::InvalidValue));
  BOOST_TEST(msg.find("o_proj") != std::string::npos, msg);

  auto cpu = mla::make_cpu_backend();
  cpu->prepare(cfg, w, opt);
  mla::TensorF hidden = mla::test::random_hidden(4, cfg.hidden_size, 1);
  hidden.data[static_cast<size_t>(2 * cfg.hidden_size + 5)] = std::nanf("");
  BOOST_TEST((error_kind_of([&] { cpu->forward(hidden, opt); }, &msg) == mla::ErrorKind::InvalidValue));
  BOOST_TEST(msg.find("row 2") != std::string::npos, msg);
  BOOST_TEST(msg.find("column 5") != std::string::npos, msg);

  const mla::TensorF wrong_width = mla::test::random_hidden(4, cfg.hidden_size + 1, 1);
  BOOST_TEST((error_kind_of([&] { cpu->forward(wrong_width, opt); }, &msg) == mla::ErrorKind::Shape));
  BOOST_TEST((error_kind_of([&] { cpu->forward(mla::TensorF("hidden", {0, cfg.hidden_size}), opt); }, &msg) ==
              mla::ErrorKind::InvalidArgument));

  ForwardOptions other = opt;
  other.precision = Precision::BF16;
  BOOST_TEST((error_kind_of([&] { cpu->forward(mla::test::random_hidden(2, cfg.hidden_size, 1), other); }, &msg) ==
              mla::ErrorKind::InvalidArgument));
  BOOST_TEST(msg.find("prepare") != std::string::npos, msg);

  other = opt;
  other.latent_norm_eps = 0.0;
  BOOST_TEST((error_kind_of([&] { cpu->forward(mla::test::random_hidden(2, cfg.hidden_size, 1), other); }, &msg) ==
              mla::ErrorKind::InvalidArgument));
  other = opt;
  other.position_offset = -1;
  BOOST_TEST((error_kind_of([&] { cpu->forward(mla::test::random_hidden(2, cfg.hidden_size, 1), other); }, &msg) ==
              mla::ErrorKind::InvalidArgument));
}

// No oneDNN kernel serves a run unchecked (src/cpu/kernel_check.hpp). On this CPU every kernel
// oneDNN picks passes its probe; a probe result made wrong through the test hook is refused: auto
// falls back (the Eigen engine, or the per-head products on Eigen), an explicit --gemm onednn is
// one error line, and the header and report.json name the refused kernel.
namespace {
struct FaultVariable {  // sets the kernel check's test hook for one scope
  explicit FaultVariable(const char* product) { setenv(mla::cpu::kKernelCheckFaultVariable, product, 1); }
  ~FaultVariable() { unsetenv(mla::cpu::kKernelCheckFaultVariable); }
};
}  // namespace

BOOST_AUTO_TEST_CASE(every_onednn_kernel_passes_its_check_here) {
  for (const mla::Gemm gemm : mla::test::gemm_engines())
    for (const bool bf16 : {false, true}) {
      std::string why;
      const auto engine = mla::cpu::make_gemm_engine(gemm, bf16, why);
      BOOST_TEST(engine->refused.empty(), mla::gemm_name(gemm) << (bf16 ? " bf16: " : " fp32: ") << engine->refused);
      if (engine->kind() != mla::Gemm::OneDnn) continue;
      BOOST_TEST(mla::cpu::check_projection_kernel(*engine, bf16).empty());
      if (engine->holdings().attention_products == mla::Gemm::OneDnn) BOOST_TEST(mla::cpu::check_attention_kernel(bf16).empty());
    }
}

BOOST_AUTO_TEST_CASE(a_kernel_that_fails_its_check_is_refused) {
  if (!MLA_HAVE_ONEDNN) return;
  for (const bool bf16 : {false, true}) {
    std::string why;
    if (mla::cpu::make_gemm_engine(mla::Gemm::OneDnn, bf16, why)->kind() != mla::Gemm::OneDnn) continue;  // no kernel
    const std::string vars = bf16 ? "bf16" : "fp32";
    {
      FaultVariable fault("projection");
      std::string msg;
      BOOST_TEST((error_kind_of([&] { mla::cpu::make_gemm_engine(mla::Gemm::OneDnn, bf16, why); }, &msg) ==
                  mla::ErrorKind::Unsupported), vars);
      BOOST_TEST(msg.find("--gemm onednn: oneDNN's " + vars + " projection kernel") == 0, msg);
      BOOST_TEST(msg.find("disagrees with the reference on its probe") != std::string::npos, msg);
      const auto fallback = mla::cpu::make_gemm_engine(mla::Gemm::Auto, bf16, why);
      BOOST_TEST((fallback->kind() == mla::Gemm::Eigen), vars);
      if (fallback->kind() == mla::Gemm::Eigen && !fallback->refused.empty()) {  // auto had picked oneDNN
        BOOST_TEST(why.find("refused, so the Eigen engine runs") != std::string::npos, why);
        BOOST_TEST(fallback->refused.find("projection kernel") != std::string::npos, fallback->refused);
      }
    }
    const auto plain = mla::cpu::make_gemm_engine(mla::Gemm::OneDnn, bf16, why);
    if (plain->holdings().attention_products != mla::Gemm::OneDnn) continue;
    FaultVariable fault("attention");
    std::string msg;
    BOOST_TEST((error_kind_of([&] { mla::cpu::make_gemm_engine(mla::Gemm::OneDnn, bf16, why); }, &msg) ==
                mla::ErrorKind::Unsupported), vars);
    BOOST_TEST(msg.find("attention kernel") != std::string::npos, msg);
    const auto fallback = mla::cpu::make_gemm_engine(mla::Gemm::Auto, bf16, why);
    if (fallback->kind() == mla::Gemm::OneDnn) {  // projections stay, the per-head products go to Eigen
      BOOST_TEST((fallback->holdings().attention_products == mla::Gemm::Eigen), vars);
      BOOST_TEST(why.find("refused, so the per-head products run on Eigen") != std::string::npos, why);
    }
  }
}

// The same through the CLI: the run's header and report.json say which kernel was refused.
BOOST_AUTO_TEST_CASE(the_refused_kernel_is_named_in_the_header_and_report) {
  if (!MLA_HAVE_ONEDNN) return;
  const std::string out = mla::test::scratch_dir("kernel-check") + "/o";
  const std::string run = "run --checkpoint '" + mla::test::tiny_checkpoint() + "' --seq-len 9 --gemm onednn --out '" + out + "'";
  const mla::test::RunResult refused = mla::test::run_cli_after(std::string(mla::cpu::kKernelCheckFaultVariable) + "=projection", run);
  BOOST_TEST(refused.exit_code != 0);
  BOOST_TEST(refused.err.find("--gemm onednn: oneDNN's fp32 projection kernel") != std::string::npos, refused.err);
  BOOST_TEST(std::count(refused.err.begin(), refused.err.end(), '\n') == 1, refused.err);
  BOOST_TEST(!std::filesystem::exists(out));
  std::string why;
  if (mla::cpu::make_gemm_engine(mla::Gemm::Auto, false, why)->kind() != mla::Gemm::OneDnn) return;  // auto: Eigen here
  std::string a = run;
  a.replace(a.find("--gemm onednn"), 13, "--gemm auto");
  const mla::test::RunResult fell_back = mla::test::run_cli_after(std::string(mla::cpu::kKernelCheckFaultVariable) + "=projection", a);
  BOOST_TEST_REQUIRE(fell_back.exit_code == 0, fell_back.err);
  BOOST_TEST(fell_back.out.find("kernel refused:     oneDNN's fp32 projection kernel") != std::string::npos, fell_back.out);
  const std::string report = mla::test::read_text(out + "/report.json");
  BOOST_TEST(report.find("\"refused\": \"oneDNN's fp32 projection kernel") != std::string::npos, report);
  BOOST_TEST(report.find("\"engine\": \"Eigen") != std::string::npos);
  // decode's report.json names it too (its prefill runs the same projections)
  const std::string dout = out + "-decode";
  const mla::test::RunResult decode = mla::test::run_cli_after(
      std::string(mla::cpu::kKernelCheckFaultVariable) + "=projection",
      "decode --checkpoint '" + mla::test::tiny_checkpoint() + "' --seq-len 48 --prompt-len 40 --cache-budget 38 --policy h2o "
      "--sinks 2 --recent 4 --quiet --out '" + dout + "'");
  BOOST_TEST_REQUIRE(decode.exit_code == 0, decode.err);
  BOOST_TEST(mla::test::read_text(dout + "/report.json").find("\"refused\": \"oneDNN's fp32 projection kernel") !=
             std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
