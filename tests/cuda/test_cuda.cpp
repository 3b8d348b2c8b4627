// tests/cuda/test_cuda.cpp — the GPU test program (meson test 'cuda', suite 'cuda').
//
// Checks the cuda backend against
//   * the double-precision reference (suite cuda_vs_reference) on every small test geometry
//     (tests/unit/geometries.hpp), both masks, fp32 and bf16, S = 1, 7, 64, position offsets
//     0 and 5000, comparing every output tensor: attn_output, attn_weights, query/key/value
//     states, head_scores, token_scores;
//   * the Eigen CPU backend (suite cuda_vs_cpu) on every small geometry, both masks, fp32 and
//     bf16, at S = 1, 17, 33, 50 (none a multiple of the tiled attention's 16-query x 32-key
//     tiles but 1, so the last tile of queries and of keys is partial), and on the full Kimi
//     geometry at S = 2048 (the double reference is too slow there), causal, fp32 and bf16;
//   * itself (suite cuda_behaviour): bit-identical repeated forwards, the ForwardResult fields,
//     and the errors of bad calls.
// Bounds come from tests/unit/tolerances.hpp (rows "cuda-vs-reference", "cuda-vs-cpu").
// Each compared case prints one line "case <label> <tensor> max_abs=.. norm_error=.." so the
// figures end up in scripts/gpu-check's report.
//
// Without a usable CUDA device (or in a build without CUDA) the program prints why and exits
// 77 before running anything, which meson reports as SKIP (docs/testing.md §1).
//
// The same file is also compiled with MLA_CUDA_EMULATED (tests/emulation, meson test
// 'cuda_emulated'): the backend then runs on the host SIMT emulator, every case above runs
// unchanged except that the Kimi case uses S = 5 instead of 2048 (the emulated GEMMs are
// plain loops), and the "device" always exists.
#define BOOST_TEST_MODULE mla_cuda
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "compare.hpp"
#include "geometries.hpp"
#include "mla/attention.hpp"
#include "mla/error.hpp"
#include "tolerances.hpp"

namespace {

using mla::ForwardOptions;
using mla::ForwardResult;
using mla::Precision;

std::string label_of(const std::string& geometry, int64_t S, const ForwardOptions& o) {
  return geometry + " S=" + std::to_string(S) + " " + mla::mask_name(o.mask) + " " + mla::precision_name(o.precision) +
         " offset=" + std::to_string(o.position_offset);
}

void report(const std::string& label, const std::string& tensor, const mla::test::CompareResult& r) {
  std::printf("case %s %s max_abs=%.3e max_rel=%.3e norm_error=%.3e cosine=%.12f mismatches=%lld\n", label.c_str(),
              tensor.c_str(), r.max_abs, r.max_rel, r.norm_error, r.cosine, static_cast<long long>(r.mismatches));
  BOOST_TEST(r.ok, label + " " + tensor + ": " + r.message);
}

// Compares every tensor two ForwardResults share; `pair` selects the tolerance rows.
void compare_results(const std::string& label, const ForwardResult& ref, const ForwardResult& got,
                     const std::string& pair, Precision p) {
  const std::string prec = mla::precision_name(p);
  auto tensor = [&](const char* name, const mla::TensorD& a, const mla::TensorD& b) {
    if (a.empty() && b.empty()) return;
    BOOST_TEST_REQUIRE(a.shape == b.shape, label + " " + name + ": shapes " + mla::shape_string(a.shape) + " vs " +
                                               mla::shape_string(b.shape));
    report(label, name, mla::test::compare(name, a, b, mla::test::tolerance(name, pair, prec)));
  };
  tensor("attn_output", ref.attn_output, got.attn_output);
  tensor("attn_weights", ref.attn_weights, got.attn_weights);
  tensor("query_states", ref.query_states, got.query_states);
  tensor("key_states", ref.key_states, got.key_states);
  tensor("value_states", ref.value_states, got.value_states);
  tensor("latent_cache", ref.latent_cache, got.latent_cache);
  BOOST_TEST_REQUIRE(ref.head_scores.size() == got.head_scores.size());
  BOOST_TEST_REQUIRE(ref.token_scores.size() == got.token_scores.size());
  report(label, "head_scores",
         mla::test::compare("head_scores", ref.head_scores, got.head_scores, mla::test::tolerance("head_scores", pair, prec)));
  report(label, "token_scores",
         mla::test::compare("token_scores", ref.token_scores, got.token_scores,
                            mla::test::tolerance("token_scores", pair, prec)));
}

ForwardResult run(mla::Backend& b, const mla::AttentionConfig& cfg, const mla::LayerWeights& w,
                  const mla::TensorF& hidden, const ForwardOptions& o) {
  b.prepare(cfg, w, o);
  return b.forward(hidden, o);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
BOOST_AUTO_TEST_SUITE(cuda_vs_reference)

BOOST_AUTO_TEST_CASE(small_geometries_all_masks_and_precisions) {
  auto ref = mla::make_reference_backend();
  auto gpu = mla::make_cuda_backend();
  BOOST_TEST(gpu->name() == "cuda");
  uint64_t seed = 100;
  for (const mla::test::Geometry& g : mla::test::small_geometries()) {
    const mla::LayerWeights w = mla::test::random_layer_weights(g.cfg, seed++);
    for (const int64_t S : {int64_t(1), int64_t(7), int64_t(64)}) {
      const mla::TensorF hidden = mla::test::random_hidden(S, g.cfg.hidden_size, seed++);
      for (const Precision p : {Precision::FP32, Precision::BF16})
        for (const mla::Mask m : {mla::Mask::Causal, mla::Mask::None})
          for (const int64_t offset : {int64_t(0), int64_t(5000)}) {
            if (offset != 0 && S != 7) continue;  // offsets: one length is enough
            ForwardOptions o;
            o.precision = p;
            o.mask = m;
            o.position_offset = offset;
            o.keep_attn_weights = true;
            o.keep_states = offset == 0;  // latent_cache with and without the states' download
            o.keep_latent_cache = true;
            const std::string label = label_of(g.name, S, o);
            BOOST_TEST_CONTEXT(label + " | " + mla::test::vars(g.cfg)) {
              const ForwardResult want = run(*ref, g.cfg, w, hidden, o);
              const ForwardResult got = run(*gpu, g.cfg, w, hidden, o);
              BOOST_TEST(!got.computed_in_double);
              compare_results(label, want, got, "cuda-vs-reference", p);
            }
          }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------------
BOOST_AUTO_TEST_SUITE(cuda_vs_cpu)

#ifdef MLA_CUDA_EMULATED
constexpr int64_t kKimiSeqLen = 5;
#else
constexpr int64_t kKimiSeqLen = 2048;
#endif

BOOST_AUTO_TEST_CASE(small_geometries_partial_tiles) {
  auto cpu = mla::make_cpu_backend();
  auto gpu = mla::make_cuda_backend();
  uint64_t seed = 200;
  for (const mla::test::Geometry& g : mla::test::small_geometries()) {
    const mla::LayerWeights w = mla::test::random_layer_weights(g.cfg, seed++);
    for (const int64_t S : {int64_t(1), int64_t(17), int64_t(33), int64_t(50)}) {
      const mla::TensorF hidden = mla::test::random_hidden(S, g.cfg.hidden_size, seed++);
      for (const Precision p : {Precision::FP32, Precision::BF16})
        for (const mla::Mask m : {mla::Mask::Causal, mla::Mask::None}) {
          ForwardOptions o;
          o.precision = p;
          o.mask = m;
          o.keep_attn_weights = true;
          o.keep_states = true;
          const std::string label = label_of(g.name, S, o);
          BOOST_TEST_CONTEXT(label + " | " + mla::test::vars(g.cfg)) {
            const ForwardResult want = run(*cpu, g.cfg, w, hidden, o);
            const ForwardResult got = run(*gpu, g.cfg, w, hidden, o);
            compare_results(label, want, got, "cuda-vs-cpu", p);
          }
        }
    }
  }
}

BOOST_AUTO_TEST_CASE(kimi_geometry_long_sequence) {
  const mla::AttentionConfig cfg = mla::test::geometry("kimi");
  const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 7);
  const int64_t S = kKimiSeqLen;
  const mla::TensorF hidden = mla::test::random_hidden(S, cfg.hidden_size, 8);
  auto cpu = mla::make_cpu_backend();
  auto gpu = mla::make_cuda_backend();
  for (const Precision p : {Precision::FP32, Precision::BF16}) {
    ForwardOptions o;
    o.precision = p;
    o.mask = mla::Mask::Causal;
    const std::string label = label_of("kimi", S, o);
    BOOST_TEST_CONTEXT(label) {
      const ForwardResult want = run(*cpu, cfg, w, hidden, o);
      const ForwardResult got = run(*gpu, cfg, w, hidden, o);
      compare_results(label, want, got, "cuda-vs-cpu", p);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------------
BOOST_AUTO_TEST_SUITE(cuda_behaviour)

BOOST_AUTO_TEST_CASE(repeated_forwards_are_bit_identical) {
  const mla::AttentionConfig cfg = mla::test::geometry("odd");
  const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 3);
  const mla::TensorF hidden = mla::test::random_hidden(33, cfg.hidden_size, 4);
  auto gpu = mla::make_cuda_backend();
  for (const Precision p : {Precision::FP32, Precision::BF16}) {
    ForwardOptions o;
    o.precision = p;
    o.keep_attn_weights = true;
    const ForwardResult a = run(*gpu, cfg, w, hidden, o);
    const ForwardResult b = gpu->forward(hidden, o);
    BOOST_TEST(a.attn_output.data == b.attn_output.data);
    BOOST_TEST(a.attn_weights.data == b.attn_weights.data);
    BOOST_TEST(a.head_scores == b.head_scores);
    BOOST_TEST(a.token_scores == b.token_scores);
  }
}

BOOST_AUTO_TEST_CASE(result_fields_and_stage_times) {
  const mla::AttentionConfig cfg = mla::test::geometry("tiny");
  const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 5);
  const int64_t S = 9;
  const mla::TensorF hidden = mla::test::random_hidden(S, cfg.hidden_size, 6);
  auto gpu = mla::make_cuda_backend();
  ForwardOptions o;  // no attn_weights, no states
  const ForwardResult r = run(*gpu, cfg, w, hidden, o);
  BOOST_TEST(r.attn_output.shape == (std::vector<int64_t>{S, cfg.hidden_size}));
  BOOST_TEST(r.attn_weights.empty());
  BOOST_TEST(r.query_states.empty());
  BOOST_TEST(r.latent_cache.empty());
  BOOST_TEST(r.head_scores.size() == static_cast<size_t>(cfg.num_attention_heads * S));
  BOOST_TEST(r.token_scores.size() == static_cast<size_t>(S));
  // Causal probabilities: every query's row sums to 1 (up to fp32 rounding), so the total mass
  // received over all keys and heads is n*S.
  double total = 0;
  for (double v : r.token_scores) total += v;
  BOOST_TEST(std::abs(total - double(cfg.num_attention_heads * S)) <
             mla::test::tolerance("token_scores", "cuda-sum-vs-exact", "fp32").atol * double(S));
  BOOST_TEST(!r.stage_seconds.empty());
  for (const auto& [name, sec] : r.stage_seconds) BOOST_TEST(sec >= 0.0, name);
  BOOST_TEST(!gpu->description().empty());
}

BOOST_AUTO_TEST_CASE(bad_calls_are_clear_errors) {
  const mla::AttentionConfig cfg = mla::test::geometry("tiny");
  const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 5);
  auto gpu = mla::make_cuda_backend();
  ForwardOptions o;
  auto kind_is = [](mla::ErrorKind k) {
    return [k](const mla::Error& e) { return e.kind() == k; };
  };
  BOOST_CHECK_EXCEPTION(gpu->forward(mla::test::random_hidden(3, cfg.hidden_size, 1), o), mla::Error,
                        kind_is(mla::ErrorKind::InvalidArgument));  // before prepare()
  gpu->prepare(cfg, w, o);
  BOOST_CHECK_EXCEPTION(gpu->forward(mla::test::random_hidden(3, cfg.hidden_size + 1, 1), o), mla::Error,
                        kind_is(mla::ErrorKind::Shape));
  ForwardOptions bf = o;
  bf.precision = Precision::BF16;
  BOOST_CHECK_EXCEPTION(gpu->forward(mla::test::random_hidden(3, cfg.hidden_size, 1), bf), mla::Error,
                        kind_is(mla::ErrorKind::InvalidArgument));  // prepared in fp32
  mla::TensorF nan_hidden = mla::test::random_hidden(3, cfg.hidden_size, 1);
  nan_hidden.data[5] = std::numeric_limits<float>::quiet_NaN();
  BOOST_CHECK_EXCEPTION(gpu->forward(nan_hidden, o), mla::Error, kind_is(mla::ErrorKind::InvalidValue));
  mla::LayerWeights bad = w;
  bad.o_proj.data.pop_back();
  bad.o_proj.shape = {cfg.hidden_size, cfg.num_attention_heads * cfg.v_head_dim - 1};
  BOOST_CHECK_EXCEPTION(gpu->prepare(cfg, bad, o), mla::Error, kind_is(mla::ErrorKind::Shape));
}

BOOST_AUTO_TEST_SUITE_END()

// ---------------------------------------------------------------------------------------------
int main(int argc, char* argv[]) {
  std::string why;
#ifdef MLA_CUDA_EMULATED
  std::printf("test_cuda: running on the host SIMT emulator (tests/emulation), not on a GPU\n");
#endif
  if (!mla::cuda_available(&why)) {
    std::printf("test_cuda: SKIP: %s\n", why.c_str());
    return 77;  // meson: SKIP
  }
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
