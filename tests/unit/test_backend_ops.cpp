// tests/unit/test_backend_ops.cpp — suite backend_ops: one table of every kernel against the
// reference on the same cases (ggml's test-backend-ops), each comparison bounded by its row of
// tolerances.hpp and printed as one line:
//
//   <case>  <kernel>  <tensor>  max_abs  norm_error  [<pair> <precision>]  OK|FAIL
//
// Attention layer cases: every small geometry of geometries.hpp × fp32, bf16 × S = 7 and 70 (70
// crosses the 64-row query blocks), causal, positions 0 .. S-1. The reference backend
// (reference/mla_reference.cpp, double loops with bf16 roundings in bf16 mode) is the ground truth
// of each precision. Kernels:
//   cpu:<engine>          the cpu backend with each GEMM engine of the build (run, sweep, decode's
//                         prefill): attn_output and attn_weights                 cpu-vs-reference
//   cuda                  the CUDA backend, where one is usable (a GPU, or the host emulator of
//                         tests/emulation, which compiles this file too)         cuda-vs-reference
//   decode:cpu:<form>     the decode step kernel (decode and eval's attention over a cache), naive
//                         and absorbed, over the whole cache: rows [S/2, S) of attn_output
//   decode:reference:<form>  the reference's decode kernel, fp32 (exact: reference-identity)
// Whole-model cases (the five transformers save_pretrained fixtures of suite model: DeepSeek-V3
// with q_lora or q_proj, group-limited routing, V2 greedy and group-limited), fp32, logits:
//   model:cpu             the whole-model forward (fixed-order kernels)   model-cpu-vs-reference
//   eval:h2o:K>=T         eval's step loop with a budget that holds every token: its decoded rows
//                         against the reference's (the eviction path with nothing to evict)
// The table is printed with --log_level=message; a failing line is also a test failure.
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "compare.hpp"
#include "geometries.hpp"
#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/decode.hpp"
#include "mla/eval.hpp"
#include "mla/model.hpp"
#include "mla/model_forward.hpp"
#include "mla/policy.hpp"
#include "mla/safetensors.hpp"
#include "reference/model_reference.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

namespace {

using mla::Precision;
using mla::TensorD;

struct Table {
  int lines = 0, failed = 0;
  // One comparison: prints its line, fails the test case when out of bounds.
  void check(const std::string& case_name, const std::string& kernel, const std::string& tensor,
             const std::vector<int64_t>& shape, const std::vector<double>& ref, const std::vector<double>& got,
             const std::string& pair, const std::string& precision, bool exact = false) {
    const mla::test::Tolerance& tol = mla::test::tolerance(tensor, pair, precision);
    mla::test::CompareResult c = mla::test::compare(tensor, shape, ref, got, tol);
    if (exact && c.ok && ref != got) {  // a claim of the same bits, not only within the row
      c.ok = false;
      c.message = tensor + ": not bit-identical to the reference (max_abs " + std::to_string(c.max_abs) +
                  "), which README and docs/testing.md §2.1 say it is";
    }
    char line[512];
    std::snprintf(line, sizeof line, "%-34s %-24s %-12s max_abs %.2e  norm %.2e  [%s %s%s]  %s", case_name.c_str(),
                  kernel.c_str(), tensor.c_str(), c.max_abs, c.norm_error, pair.c_str(), precision.c_str(),
                  exact ? ", exact" : "", c.ok ? "OK" : "FAIL");
    BOOST_TEST_MESSAGE(line);
    BOOST_TEST(c.ok, line << "\n" << c.message);
    ++lines;
    failed += c.ok ? 0 : 1;
  }
  void skip(const std::string& kernel, const std::string& why) {
    BOOST_TEST_MESSAGE(kernel << ": not run (" << why << ")");
  }
};

[[maybe_unused]] std::vector<double> widened(const mla::TensorF& t) { return {t.data.begin(), t.data.end()}; }

std::vector<double> rows(const TensorD& t, int64_t begin, int64_t end) {
  const int64_t cols = t.dim(1);
  return {t.data.begin() + begin * cols, t.data.begin() + end * cols};
}

// The decode kernel over the whole cache: query rows [P, T) each attend every token 0..x, the
// rows' attn_output [T - P, H] (what decode and eval compute at a step with nothing evicted).
TensorD decode_full_rows(const mla::AttentionConfig& cfg, const mla::LayerWeights& w, const mla::TensorF& hidden,
                         int64_t P, Precision p, mla::DecodeAttention form, bool reference) {
  mla::ForwardOptions f;
  f.precision = p;
  mla::DecodeInputsRequest req;
  req.prompt_len = P;
  mla::DecodeInputs in;
  if (reference) {
    auto b = mla::make_reference_backend();
    b->prepare(cfg, w, f);
    in = mla::compute_decode_inputs(*b, cfg, hidden, req, f);
  } else {
    in = mla::compute_cpu_decode_inputs(cfg, w, hidden, req, f);
  }
  const int64_t T = hidden.shape[0];
  mla::DecodeKernelSpec spec;
  spec.attention = form;
  spec.precision = p;
  spec.rows = T - P;
  auto k = reference ? mla::make_reference_decode_kernel(cfg, w, in, spec) : mla::make_cpu_decode_kernel(cfg, w, in, spec);
  std::vector<double> probs;
  for (int64_t x = P; x < T; ++x) {
    std::vector<int64_t> cache(static_cast<size_t>(x + 1));
    std::iota(cache.begin(), cache.end(), 0);
    k->begin_query(x);
    k->attend(cache, probs, 0, x - P);
    k->end_query();
  }
  return k->outputs(0);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(backend_ops)

BOOST_AUTO_TEST_CASE(attention_layer_kernels_against_the_reference) {
  Table table;
  std::string cuda_why;
  const bool cuda = mla::cuda_available(&cuda_why);
#if defined(MLA_CUDA_EMULATED)
  const bool host_kernels = false;  // unit_tests runs them; the emulated program adds cuda only
#else
  const bool host_kernels = true;
#endif
  if (!cuda) table.skip("cuda", cuda_why.empty() ? "not built" : cuda_why);
  for (const mla::test::Geometry& g : mla::test::small_geometries()) {
    const mla::LayerWeights w = mla::test::random_layer_weights(g.cfg, 11);
    for (const Precision p : {Precision::FP32, Precision::BF16}) {
      const std::string prec = mla::precision_name(p);
      for (const int64_t S : {int64_t{7}, int64_t{70}}) {
        const std::string case_name = g.name + " S=" + std::to_string(S) + " " + prec;
        const mla::TensorF hidden = mla::test::random_hidden(S, g.cfg.hidden_size, 12);
        mla::ForwardOptions opt;
        opt.precision = p;
        opt.mask = mla::Mask::Causal;
        opt.keep_attn_weights = true;
        auto reference = mla::make_reference_backend();
        reference->prepare(g.cfg, w, opt);
        const mla::ForwardResult ref = reference->forward(hidden, opt);
        // exact: in bf16 every kernel but the absorbed decode form rounds at the reference's points
        // and gives its bits on these geometries (asserted; not for oneDNN's AMX kernel, whose
        // blocked fp32 sums may flip a bf16 rounding, nor for cuBLAS on a real GPU).
        struct Kernel {
          std::string name, pair;
          mla::ForwardOptions opt;
          std::unique_ptr<mla::Backend> backend;
          bool exact = false;
        };
        std::vector<Kernel> kernels;
        if (host_kernels)
          for (const mla::Gemm gemm : mla::test::gemm_engines()) {
            mla::ForwardOptions o = opt;
            o.gemm = gemm;
            kernels.push_back({std::string("cpu:") + mla::gemm_name(gemm), "cpu-vs-reference", o, mla::make_cpu_backend(),
                               p == Precision::BF16});
          }
#if defined(MLA_CUDA_EMULATED)
        const bool cuda_exact = p == Precision::BF16;
#else
        const bool cuda_exact = false;
#endif
        if (cuda) kernels.push_back({"cuda", "cuda-vs-reference", opt, mla::make_cuda_backend(), cuda_exact});
        for (Kernel& k : kernels) {
          k.backend->prepare(g.cfg, w, k.opt);
          const mla::ForwardResult got = k.backend->forward(hidden, k.opt);
          const std::string& kernel = k.name;
          const std::string& pair = k.pair;
          const bool exact = k.exact && !mla::test::ran_amx(k.backend->gemm_info());
          table.check(case_name, kernel, "attn_output", ref.attn_output.shape, ref.attn_output.data,
                      got.attn_output.data, pair, prec, exact);
          table.check(case_name, kernel, "attn_weights", ref.attn_weights.shape, ref.attn_weights.data,
                      got.attn_weights.data, pair, prec, exact);
        }
        if (!host_kernels) continue;
        const int64_t P = S / 2;
        const std::vector<double> ref_rows = rows(ref.attn_output, P, S);
        const std::vector<int64_t> shape = {S - P, g.cfg.hidden_size};
        for (const mla::DecodeAttention form : {mla::DecodeAttention::Naive, mla::DecodeAttention::Absorbed}) {
          const std::string name = mla::decode_attention_name(form);
          const TensorD got = decode_full_rows(g.cfg, w, hidden, P, p, form, false);
          table.check(case_name, "decode:cpu:" + name, "attn_output", shape, ref_rows, got.data,
                      "decode-" + name + "-vs-reference", prec,
                      p == Precision::BF16 && form == mla::DecodeAttention::Naive);
          if (p == Precision::FP32) {
            const TensorD exact = decode_full_rows(g.cfg, w, hidden, P, p, form, true);
            table.check(case_name, "decode:reference:" + name, "attn_output", shape, ref_rows, exact.data,
                        "reference-identity", "double");
          }
        }
      }
    }
  }
  BOOST_TEST_MESSAGE(table.lines << " comparisons, " << table.failed << " out of bounds");
  BOOST_TEST(table.lines > 0);
}

#if !defined(MLA_CUDA_EMULATED)  // the whole-model kernels run on the CPU only
BOOST_AUTO_TEST_CASE(whole_model_kernels_against_the_reference) {
  Table table;
  for (const std::string fixture :
       {"whole-model", "whole-model-qproj", "whole-model-groups", "whole-model-v2", "whole-model-v2-groups"}) {
    const std::string dir = mla::test::data_dir() + "/golden/" + fixture;
    const mla::Checkpoint ck = mla::Checkpoint::open(dir + "/model");
    const mla::ModelConfig cfg = mla::load_model_config(ck.config_path());
    std::vector<int64_t> tokens;  // the fixture's input_ids
    const mla::SafetensorsFile ids = mla::SafetensorsFile::open(dir + "/fp32.safetensors");
    for (double v : ids.to_double(ids.at("input_ids"))) tokens.push_back(static_cast<int64_t>(v));
    const int64_t T = static_cast<int64_t>(tokens.size()), P = T / 2, N = T - P - 1;
    const std::string case_name = fixture + " T=" + std::to_string(T) + " fp32";
    const mla::ref::ModelActivations ref = mla::ref::model_forward(ck, cfg, tokens, Precision::FP32, 1e-6);
    const int64_t V = cfg.attention.vocab_size;

    mla::ModelForwardOptions mo;
    mo.precision = Precision::FP32;
    const mla::ModelForwardResult got = mla::model_forward(ck, cfg, tokens, mo);
    table.check(case_name, "model:cpu", "logits", ref.logits.shape, ref.logits.data, widened(got.logits),
                "model-cpu-vs-reference", "fp32");

    mla::EvalOptions eo;
    eo.prompt_len = P;
    eo.steps = N;
    eo.budgets = {T};
    eo.policies = mla::parse_policy_list("h2o");
    eo.precision = Precision::FP32;
    eo.keep_logits = true;
    const mla::EvalResult ev = mla::run_eval(ck, cfg, tokens, eo);
    BOOST_TEST_REQUIRE(ev.runs.size() == 1u);
    table.check(case_name, "eval:h2o:K>=T", "logits", {N, V}, rows(ref.logits, P, P + N), widened(ev.runs[0].logits),
                "model-cpu-vs-reference", "fp32");
  }
  BOOST_TEST_MESSAGE(table.lines << " comparisons, " << table.failed << " out of bounds");
}
#endif

BOOST_AUTO_TEST_SUITE_END()
