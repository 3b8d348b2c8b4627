// tests/unit/test_memory_plan.cpp — suite memory_plan: the memory plan made before a forward
// (mla/memory_plan.hpp, docs/long-context.md). The plan's numbers are a model of the code's
// buffers; these checks pin what the model must get right without allocating anything:
//   - the parameter count from the geometry equals the loaded layer's (every geometry) and
//     101,124,096 for Kimi K2.6;
//   - the estimate grows with S; bf16 needs less than fp32 on the cpu backend (keys/values
//     stored as bf16 bits); the streamed cpu path is O(S) (doubling S at most ~doubles it),
//     the materialized dump and the reference are O(S^2);
//   - the goals of docs/long-context.md: Kimi layer 0, bf16, causal, cpu: S = 32768 fits in
//     8 GiB and S = 131072 in 16 GiB by the plan (the measured figures are in the docs);
//   - the decision: fits; fits without the attn_weights dump (dropped, with a note); refused
//     with one line naming what was asked, the need, the availability and what would fit;
//   - the parsers of /proc/meminfo, cgroup files and MLA_MEMORY_AVAILABLE.
// The CLI's use of the plan (refusal line, dropped attn_weights, report.json) is in suite cli.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "geometries.hpp"
#include "mla/decode.hpp"
#include "mla/eval_cost.hpp"
#include "mla/model.hpp"
#include "mla/synth.hpp"
#include "mla/memory_plan.hpp"
#include "mla/policy.hpp"
#include "test_util.hpp"

namespace {

using mla::BackendKind;
using mla::MemoryRequest;
using mla::Precision;

constexpr int64_t kGiB = int64_t{1} << 30;

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

MemoryRequest request(BackendKind b, int64_t S, Precision p, bool dump = false) {
  MemoryRequest r;
  r.backend = b;
  r.seq_len = S;
  r.precision = p;
  r.dump_tensors = dump;
  r.attn_weights = dump;
  r.threads = 2;
  return r;
}

int64_t peak(const mla::AttentionConfig& cfg, const MemoryRequest& r) { return mla::estimate_memory(cfg, r).host_peak_bytes; }

}  // namespace

BOOST_AUTO_TEST_SUITE(memory_plan)

BOOST_AUTO_TEST_CASE(parameter_count_matches_the_loaded_layer) {
  BOOST_TEST(mla::attention_parameter_count(mla::test::geometry("kimi")) == 101124096);
  for (const auto& g : mla::test::small_geometries()) {
    const mla::LayerWeights w = mla::test::random_layer_weights(g.cfg, 1);
    BOOST_TEST(mla::attention_parameter_count(g.cfg) == w.parameter_count(), g.name);
  }
}

// A layer kept by the backend (prepare_shared) is read in place by the Eigen engine: the plan
// holds no prepared copy in fp32, nor in bf16 when the weights are BF16, and exactly one fp32
// copy (4 bytes a parameter) otherwise (docs/cpu-gemm.md §3).
BOOST_AUTO_TEST_CASE(a_kept_layer_read_in_place_holds_no_copy) {
  const auto kimi = mla::test::geometry("kimi");
  const int64_t copy = mla::attention_parameter_count(kimi) * 4;
  for (const Precision p : {Precision::FP32, Precision::BF16}) {
    for (const bool bf16_weights : {false, true}) {
      MemoryRequest r = request(BackendKind::Cpu, 4096, p);
      r.gemm = mla::Gemm::Eigen;
      r.bf16_weights = bf16_weights;
      const int64_t copied = peak(kimi, r);
      r.weights_kept = true;
      const bool in_place = p == Precision::FP32 || bf16_weights;
      BOOST_TEST(copied - peak(kimi, r) == (in_place ? copy : 0),
                 mla::precision_name(p) << (bf16_weights ? ", BF16 weights" : ", other weights"));
    }
  }
}

BOOST_AUTO_TEST_CASE(estimate_scales_as_the_algorithms_do) {
  const auto kimi = mla::test::geometry("kimi");
  for (const BackendKind b : {BackendKind::Cpu, BackendKind::Reference, BackendKind::Cuda}) {
    int64_t previous = 0;
    for (const int64_t S : {1, 100, 1000, 4096, 32768}) {
      const int64_t e = peak(kimi, request(b, S, Precision::FP32));
      BOOST_TEST(e > previous, mla::backend_name(b) << " S=" << S);
      previous = e;
    }
  }
  // cpu streamed: O(S); keys/values in bf16 take less than in fp32
  const int64_t s16 = peak(kimi, request(BackendKind::Cpu, 16384, Precision::BF16));
  const int64_t s32 = peak(kimi, request(BackendKind::Cpu, 32768, Precision::BF16));
  BOOST_TEST(s32 < 2 * s16);
  BOOST_TEST(s32 < peak(kimi, request(BackendKind::Cpu, 32768, Precision::FP32)));
  // the materialized dump and the reference hold [n, S, S]: at least 8 bytes per entry
  const int64_t nss = int64_t{64} * 4096 * 4096;
  BOOST_TEST(peak(kimi, request(BackendKind::Cpu, 4096, Precision::BF16, true)) > 8 * nss);
  BOOST_TEST(peak(kimi, request(BackendKind::Reference, 4096, Precision::BF16)) > 3 * 8 * nss);
  // cuda: the device workspace is O(S) (tiled attention); only a dump of attn_weights adds
  // its [n, S, S] buffer in the run's precision
  auto device = [&](int64_t S, bool dump) {
    return mla::estimate_memory(kimi, request(BackendKind::Cuda, S, Precision::BF16, dump)).device_peak_bytes;
  };
  BOOST_TEST(device(4096, false) < 2 * nss);  // less than one bf16 [n, S, S] tensor
  // linear in S: f(4S) - f(2S) = 2 (f(2S) - f(S)), up to the workspace slots' 256-byte alignment
  const int64_t step_2 = device(65536, false) - device(32768, false), step_4 = device(131072, false) - device(65536, false);
  BOOST_TEST(std::abs(step_4 - 2 * step_2) < int64_t{1} << 20, step_4 << " vs 2 * " << step_2);
  BOOST_TEST(device(4096, true) > device(4096, false) + 2 * nss - 1);
}

BOOST_AUTO_TEST_CASE(long_context_goals) {
  const auto kimi = mla::test::geometry("kimi");
  const auto e32 = mla::estimate_memory(kimi, request(BackendKind::Cpu, 32768, Precision::BF16));
  BOOST_TEST(e32.host_peak_bytes <= 8 * kGiB, mla::format_bytes(e32.host_peak_bytes) << " at " << e32.peak_phase);
  // S = 131072 in bf16 within 16 GiB (docs/long-context.md §3, §5), so it runs on a 24 GB machine
  const auto e131 = mla::estimate_memory(kimi, request(BackendKind::Cpu, 131072, Precision::BF16));
  BOOST_TEST(e131.host_peak_bytes <= 16 * kGiB, mla::format_bytes(e131.host_peak_bytes) << " at " << e131.peak_phase);
  mla::MemoryBudget machine;  // the development machine: 24 GB, ~21 GiB available
  machine.host_bytes = 21 * kGiB;
  machine.host_source = "MemAvailable";
  BOOST_TEST(mla::plan_memory(kimi, request(BackendKind::Cpu, 131072, Precision::BF16), machine).fits);
  machine.host_bytes = 10 * kGiB;  // a busier moment: refused, with what would fit
  const auto p = mla::plan_memory(kimi, request(BackendKind::Cpu, 131072, Precision::BF16), machine);
  BOOST_TEST(!p.fits);
  BOOST_TEST(contains(p.refusal, "S = 131072 tokens"), p.refusal);
  BOOST_TEST(contains(p.refusal, "would fit: --seq-len "), p.refusal);
}

BOOST_AUTO_TEST_CASE(decision_fits_drops_attn_weights_or_refuses) {
  const auto kimi = mla::test::geometry("kimi");
  const MemoryRequest dump = request(BackendKind::Cpu, 4096, Precision::FP32, true);
  MemoryRequest no_weights = dump;
  no_weights.attn_weights = false;
  const int64_t with = peak(kimi, dump), without = peak(kimi, no_weights);
  BOOST_TEST_REQUIRE(without < with);

  mla::MemoryBudget b;
  b.host_source = "MLA_MEMORY_AVAILABLE";
  b.host_bytes = with;  // exactly enough
  auto p = mla::plan_memory(kimi, dump, b);
  BOOST_TEST(p.fits);
  BOOST_TEST(!p.attn_weights_dropped);
  BOOST_TEST(p.note.empty());

  b.host_bytes = (with + without) / 2;  // enough without attn_weights only
  p = mla::plan_memory(kimi, dump, b);
  BOOST_TEST(p.fits);
  BOOST_TEST(p.attn_weights_dropped);
  BOOST_TEST(p.estimate.host_peak_bytes == without);
  BOOST_TEST(contains(p.note, "attn_weights [64, 4096, 4096] not dumped"), p.note);
  BOOST_TEST(contains(p.note, "the other tensors are written"), p.note);

  // fp32 that fits only in bf16 without the dump: every alternative that fits is named
  const MemoryRequest fp32 = request(BackendKind::Cpu, 32768, Precision::FP32);
  MemoryRequest bf16 = fp32;
  bf16.precision = Precision::BF16;
  b.host_bytes = (peak(kimi, fp32) + peak(kimi, bf16)) / 2;
  p = mla::plan_memory(kimi, fp32, b);
  BOOST_TEST(!p.fits);
  BOOST_TEST(p.refusal.find('\n') == std::string::npos);
  for (const char* w : {"not enough memory for S = 32768 tokens, --backend cpu --precision fp32", "needs ~",
                        "GiB at its peak (estimated, ", "is available (MLA_MEMORY_AVAILABLE)",
                        "would fit: --precision bf16 (~", ", or --seq-len "})
    BOOST_TEST(contains(p.refusal, w), "missing '" << w << "' in: " << p.refusal);

  // the reference is refused where the cpu backend fits, and says so
  b.host_bytes = 20 * kGiB;
  p = mla::plan_memory(kimi, request(BackendKind::Reference, 8192, Precision::FP32), b);
  BOOST_TEST(!p.fits);
  BOOST_TEST(contains(p.refusal, "--backend cpu"), p.refusal);

  // cuda: the device estimate against the device's free memory (cudaMemGetInfo)
  mla::MemoryBudget gpu = b;
  gpu.device_bytes = 8 * kGiB;
  p = mla::plan_memory(kimi, request(BackendKind::Cuda, 65536, Precision::BF16), gpu);
  BOOST_TEST(!p.fits);
  for (const char* w : {"of GPU memory at its peak", "but 8.0 GiB is available (cudaMemGetInfo)", "--backend cpu (~"})
    BOOST_TEST(contains(p.refusal, w), "missing '" << w << "' in: " << p.refusal);
  // ... and when only the device lacks room for the [n, S, S] probabilities, they are dropped
  // and the note names the device's figures, not the host's
  gpu.host_bytes = 1024 * kGiB;
  gpu.device_bytes = 2 * kGiB;
  p = mla::plan_memory(kimi, request(BackendKind::Cuda, 4096, Precision::BF16, true), gpu);
  BOOST_TEST(p.fits);
  BOOST_TEST(p.attn_weights_dropped);
  for (const char* w : {"attn_weights [64, 4096, 4096] not dumped", "of GPU memory but 2.0 GiB is available (cudaMemGetInfo)"})
    BOOST_TEST(contains(p.note, w), "missing '" << w << "' in: " << p.note);

  // nothing fits: said so
  b.host_bytes = 1;
  p = mla::plan_memory(kimi, request(BackendKind::Cpu, 1, Precision::BF16), b);
  BOOST_TEST(!p.fits);
  BOOST_TEST(contains(p.refusal, "nothing smaller fits either"), p.refusal);

  // an absurd S saturates instead of wrapping around
  b.host_bytes = 20 * kGiB;
  p = mla::plan_memory(kimi, request(BackendKind::Reference, int64_t{1} << 40, Precision::FP32), b);
  BOOST_TEST(!p.fits);
  BOOST_TEST(p.estimate.host_peak_bytes > 0);
}

// The plan of `mla-h2o decode` (src/decode/decode_memory.cpp): it grows with what decode holds
// (prompt, steps, budgets x policies, naive's per-head k/v, the reference's doubles) and refuses
// Kimi at P = 99000 on a 21 GiB machine (issue 20: it ran 24.5 s, then died "out of memory"),
// naming what would fit.
BOOST_AUTO_TEST_CASE(decode_plan) {
  const auto kimi = mla::test::geometry("kimi");
  mla::DecodeMemoryRequest r;
  r.input_rows = 4352;
  r.prompt_len = 4096;
  r.steps = 256;
  r.budgets = 3;
  r.features = 3;
  r.policies = 7;
  r.threads = 2;
  const auto peak_of = [&](const mla::DecodeMemoryRequest& q) { return mla::estimate_decode_memory(kimi, q).host_peak_bytes; };
  const auto steps_of = [&](const mla::DecodeMemoryRequest& q) {  // the "decode steps" phase
    for (const auto& phase : mla::estimate_decode_memory(kimi, q).phases)
      if (phase.name == "decode steps") return phase.bytes();
    return int64_t{-1};
  };
  const int64_t base = peak_of(r), base_steps = steps_of(r);
  BOOST_TEST_REQUIRE(base_steps > 0);
  auto more = r;
  more.prompt_len = 8192;
  more.input_rows = 8448;
  BOOST_TEST(peak_of(more) > base);
  more = r;
  more.steps = 512;
  more.input_rows = 4608;
  BOOST_TEST(peak_of(more) > base);
  BOOST_TEST(steps_of(more) > base_steps);
  more = r;
  more.budgets = 6;  // more traces and contexts during the steps (the prefill is the same)
  BOOST_TEST(steps_of(more) > base_steps);
  more = r;
  more.features = 4;  // one more per-token feature array
  BOOST_TEST(steps_of(more) > base_steps);
  more = r;
  more.dump_tensors = true;  // attn_output of every run kept for the dump
  BOOST_TEST(steps_of(more) > base_steps);
  more = r;
  more.naive = true;  // the per-head k/v of every token
  BOOST_TEST(steps_of(more) > base_steps);
  more = r;
  more.backend = BackendKind::Reference;  // doubles, and [n, P, P] three times
  BOOST_TEST(peak_of(more) > base);
  // every phase holds at least the weights as loaded and the input rows
  for (const auto& phase : mla::estimate_decode_memory(kimi, r).phases)
    BOOST_TEST(phase.bytes() > 4 * mla::attention_parameter_count(kimi) + 4 * r.input_rows * kimi.hidden_size, phase.name);

  mla::MemoryBudget machine;
  machine.host_bytes = 21 * kGiB;
  machine.host_source = "MemAvailable";
  BOOST_TEST(mla::plan_decode_memory(kimi, r, machine).fits);
  // the cpu prefill runs the forward's passes (src/cpu/cpu_decode.cpp): a 131072-token prompt in
  // bf16, every policy's statistics included, fits this machine as `run` does
  auto long_prompt = r;
  long_prompt.prompt_len = 131072;
  long_prompt.input_rows = 131072 + 256;
  long_prompt.precision = Precision::BF16;
  long_prompt.query_statistics = true;
  const auto lp = mla::plan_decode_memory(kimi, long_prompt, machine);
  BOOST_TEST(lp.fits, mla::format_bytes(lp.estimate.host_peak_bytes) << " at " << lp.estimate.peak_phase);
  auto huge = r;
  huge.input_rows = 401000;
  huge.prompt_len = 400000;
  huge.steps = 1000;
  const auto p = mla::plan_decode_memory(kimi, huge, machine);
  BOOST_TEST(!p.fits);
  BOOST_TEST(p.refusal.find('\n') == std::string::npos);
  for (const char* w : {"not enough memory for decode of P = 400000 prompt rows and N = 1000 steps", "at its peak (estimated, ",
                        "is available (MemAvailable)", "would fit: "})
    BOOST_TEST(contains(p.refusal, w), "missing '" << w << "' in: " << p.refusal);
}

// Decode's request from its options holds one [n, T] f64 array for every per-token feature the
// policies read (mla/policy.hpp TokenFeatures), counted by hand per preset: keydiff's key_diff was
// left out, so its plan was n * T * 8 bytes short (issue 28).
BOOST_AUTO_TEST_CASE(decode_plan_counts_every_feature_array) {
  const auto kimi = mla::test::geometry("kimi");
  const auto request_of = [](const std::string& policies) {
    mla::DecodeOptions o;
    o.prompt_len = 4096;
    o.budgets = {256, 512};
    o.policies = mla::parse_policy_list(policies);
    return mla::decode_memory_request(o, 4096 + 128);
  };
  const std::vector<std::pair<std::string, int64_t>> by_hand = {
      {"full", 0}, {"h2o", 0}, {"streaming", 0}, {"snapkv", 0}, {"oracle", 0},
      {"knorm", 1},               // key_norm
      {"keydiff", 1},             // key_diff
      {"value-aware", 1},         // output_norm
      {"expected-attention", 2},  // value_norm (vnorm) + expected_attention
      {"expected-attention:vnorm=0", 1},
      {"leverage", 1},            // leverage ([T], counted as one array)
      {"cur", 2},                 // key_norm + value_norm
      {"cur:cur=key", 1},         // key_norm
      {"lagkv", 1},               // lagkv
      {"knorm,cur", 2},           // key_norm shared
      {"knorm,keydiff", 2},
      {"knorm,keydiff,value-aware,expected-attention", 5},
      {"chunkkv", 0}, {"adakv", 0},     // their inner press's: snapkv reads none
      {"chunkkv:press=knorm", 1},       // knorm's key_norm
      {"criticalkv", 1},                // output_norm
      {"criticalkv:press=knorm", 2},    // output_norm + key_norm
      {"criticalkv,value-aware", 1},    // one output_norm for both
      {"adakv:press=expected-attention", 2},
      {"kvzip", 1}};                    // reconstruction
  for (const auto& [policies, arrays] : by_hand) BOOST_TEST(request_of(policies).features == arrays, policies);
  const mla::DecodeMemoryRequest keydiff = request_of("keydiff");
  BOOST_TEST(keydiff.steps == 128);
  BOOST_TEST(keydiff.budgets == 2);
  BOOST_TEST(keydiff.policies == 1);
  BOOST_TEST(request_of("full,keydiff,h2o").policies == 2);  // full is the reference, not a run
  // the decode steps hold the array: keydiff's phase is knorm's (one array each), streaming's + n T 8
  const auto steps_of = [&](const mla::DecodeMemoryRequest& q) {
    for (const auto& phase : mla::estimate_decode_memory(kimi, q).phases)
      if (phase.name == "decode steps") return phase.bytes();
    return int64_t{-1};
  };
  BOOST_TEST(steps_of(keydiff) == steps_of(request_of("knorm")));
  BOOST_TEST(steps_of(keydiff) - steps_of(request_of("streaming")) == kimi.num_attention_heads * (4096 + 128) * 8);
  // kvzip's repeat on one layer: P = 4096 in two chunks of 2048, the second with the first's last
  // 8 tokens (no text rows in decode): its largest chunk 2056 rows, and a phase that holds the
  // [P + 2056, H] rows beside what the steps hold
  const mla::DecodeMemoryRequest kvzip = request_of("kvzip");
  BOOST_TEST(kvzip.reconstruction_rows == 2056);
  BOOST_TEST(request_of("knorm").reconstruction_rows == 0);
  int64_t repeat = -1;
  for (const auto& phase : mla::estimate_decode_memory(kimi, kvzip).phases)
    if (phase.name == "kvzip: context reconstruction") repeat = phase.bytes();
  BOOST_TEST(repeat > int64_t{4096 + 2056} * kimi.hidden_size * 4);
  for (const auto& phase : mla::estimate_decode_memory(kimi, request_of("knorm")).phases)
    BOOST_TEST(phase.name != "kvzip: context reconstruction");
}

// eval's plan (mla/memory_plan.hpp): its request from the options, and how many windows run at
// once. Each worker holds one window's buffers; the process allowance is counted once (it was
// counted once per worker: estimate_model_memory left process_bytes at 0).
BOOST_AUTO_TEST_CASE(eval_plan_and_windows) {
  const mla::ModelConfig m = mla::tiny_model();
  mla::EvalOptions o;
  o.prompt_len = 64;
  o.steps = 32;
  o.budgets = {8, 16};
  o.policies = mla::parse_policy_list("full,h2o,tova");
  const mla::ModelMemoryRequest req = mla::eval_memory_request(o, true);
  BOOST_TEST(req.tokens == 96);
  BOOST_TEST(req.streams == 5);  // full + 2 policies x 2 budgets
  BOOST_TEST(req.stream_rows == 32);
  BOOST_TEST(req.keep_hidden_states);
  BOOST_TEST(req.extra_rows == 0);
  {  // kvzip: its repeat's rows, one more stream (the text's bound: one id per byte; two chunks at P = 4096)
    mla::EvalOptions k = o;
    k.policies = mla::parse_policy_list("full,kvzip");
    k.prompt_len = 4096;
    const auto bytes = [](const char* t) { return static_cast<int64_t>(std::string(t).size()); };
    const int64_t rows = bytes(mla::kReconstructionFirst) + 1 + 2048 + bytes(mla::kReconstructionLater) + 8 + 1 + 2048;
    BOOST_TEST(mla::eval_memory_request(k, false).extra_rows == rows);
    k.reconstruction_text = mla::ReconstructionText{{1, 2}, {3}, {4}};  // tokenized: its ids
    BOOST_TEST(mla::eval_memory_request(k, false).extra_rows == 2 + 1 + 2048 + 1 + 8 + 1 + 2048);
    mla::ModelMemoryRequest with = mla::eval_memory_request(k, false), without = with;
    without.extra_rows = 0;
    BOOST_TEST(mla::estimate_model_memory(m, with).host_peak_bytes > mla::estimate_model_memory(m, without).host_peak_bytes);
  }
  const mla::MemoryEstimate one = mla::estimate_model_memory(m, req);
  BOOST_TEST(one.process_bytes == mla::kModelProcessBytes);
  BOOST_TEST(one.host_peak_bytes > one.process_bytes);
  const int64_t each = one.host_peak_bytes - one.process_bytes;
  mla::MemoryBudget b;
  b.host_bytes = one.process_bytes + 3 * each;
  b.host_source = "MemAvailable";
  mla::ModelWindowsPlan w = mla::plan_model_windows(one, 8, 5, b);
  BOOST_TEST(w.workers == 3);
  BOOST_TEST(w.memory.host_peak_bytes == one.process_bytes + 3 * each);
  b.host_bytes -= 1;
  BOOST_TEST(mla::plan_model_windows(one, 8, 5, b).workers == 2);
  BOOST_TEST(mla::plan_model_windows(one, 8, 1, b).workers == 1);  // one window
  BOOST_TEST(mla::plan_model_windows(one, 1, 5, b).workers == 1);  // one thread
  // refused just under one window's need, naming what would fit
  b.host_bytes = one.host_peak_bytes - 1;
  const mla::MemoryPlan p = mla::plan_model_memory(m, req, b);
  BOOST_TEST(!p.fits);
  BOOST_TEST(p.refusal.find('\n') == std::string::npos);
  for (const char* w : {"not enough memory for eval of 5 runs x 32 decoded positions after P = 64 prompt tokens, --precision bf16 "
                        "--dump-tensors: needs ~", "would fit: no --dump-tensors (~", ", or --steps ", " or fewer"})
    BOOST_TEST(contains(p.refusal, w), "missing '" << w << "' in: " << p.refusal);
  b.host_bytes = int64_t{1} << 20;
  BOOST_TEST(contains(mla::plan_model_memory(m, req, b).refusal, "; nothing smaller fits either"));
}

// synth's plan: every shard is built in memory before it is written; refused, it names the
// shard count and the vocabulary that would fit, each checked against the estimate.
BOOST_AUTO_TEST_CASE(synth_plan_names_what_would_fit) {
  const mla::ModelConfig m = mla::tiny_model();
  mla::SynthOptions o;
  o.layers = {0, 1};
  o.vocab = 97;
  const auto peak = [&](const mla::SynthOptions& x) { return mla::estimate_synth_memory(x, m).host_peak_bytes; };
  const mla::MemoryEstimate two = mla::estimate_synth_memory(o, m);
  BOOST_TEST(two.phases.size() == 2u);
  BOOST_TEST(two.process_bytes == mla::kSynthProcessBytes);
  BOOST_TEST(contains(two.peak_phase, "shard model-00001-of-000002.safetensors"), two.peak_phase);  // both layers
  mla::MemoryBudget b;
  b.host_bytes = two.host_peak_bytes - 1;
  b.host_source = "MemAvailable";
  mla::MemoryPlan p = mla::plan_synth_memory(o, m, b);
  BOOST_TEST(!p.fits);
  auto three = o;
  three.shards = 3;  // one layer per shard
  BOOST_TEST(peak(three) < two.host_peak_bytes);
  BOOST_TEST(contains(p.refusal, "not enough memory for synth of 2 layer(s) and a vocabulary of 97 in 2 shards, --dtype bf16: needs ~"),
             p.refusal);
  BOOST_TEST(contains(p.refusal, "would fit: --shards 3 (~"), p.refusal);
  // a vocabulary whose embed_tokens is the largest shard: the largest --vocab that fits
  o.vocab = 20000;
  const int64_t need = peak(o);
  b.host_bytes = need - 64 * 2 * 100;  // 100 rows of bf16 embed_tokens [V, 64] too many
  p = mla::plan_synth_memory(o, m, b);
  BOOST_TEST(!p.fits);
  const size_t at = p.refusal.find("--vocab ");
  BOOST_TEST_REQUIRE(at != std::string::npos, p.refusal);
  const int64_t v = std::stoll(p.refusal.substr(at + 8));
  auto fits = o, over = o;
  fits.vocab = v;
  over.vocab = v + 1;
  BOOST_TEST(peak(fits) <= b.host_bytes);
  BOOST_TEST(peak(over) > b.host_bytes);
  BOOST_TEST(v == 19900);
}

BOOST_AUTO_TEST_CASE(parsers) {
  const std::string meminfo = "MemTotal:       24588000 kB\nMemFree:         1000000 kB\nMemAvailable:   21000000 kB\n";
  BOOST_TEST(mla::parse_meminfo_available(meminfo) == int64_t{21000000} * 1024);
  BOOST_TEST(mla::parse_meminfo_available("MemTotal: 5 kB\n") == -1);
  BOOST_TEST(mla::parse_cgroup_limit("max\n") == -1);
  BOOST_TEST(mla::parse_cgroup_limit("8589934592\n") == int64_t{8589934592});
  BOOST_TEST(mla::parse_cgroup_limit("9223372036854771712\n") == -1);  // cgroup v1 "no limit"
  BOOST_TEST(mla::parse_byte_count("8G") == 8 * kGiB);
  BOOST_TEST(mla::parse_byte_count("512M") == int64_t{512} << 20);
  BOOST_TEST(mla::parse_byte_count("1073741824") == kGiB);
  for (const char* bad : {"", "G", "-1", "1.5G", "8X", "99999999999999999999"}) BOOST_TEST(mla::parse_byte_count(bad) == -1, bad);
  BOOST_TEST(mla::format_bytes(3 * kGiB / 2) == "1.5 GiB");
  BOOST_TEST(mla::format_bytes(int64_t{850} << 20) == "850 MiB");
  BOOST_TEST(mla::format_bytes(int64_t{100} << 10) == "100 KiB");  // it printed "0 MiB"
  BOOST_TEST(mla::format_bytes(512) == "512 bytes");
}

// eval's FLOP count (mla/eval_cost.hpp) on tiny_model() (2 layers: 0 dense, 1 MoE), worked by
// hand: P = 4, N = 3, policies full + h2o at K = 2 and 5, so 3 runs and 4 + 3*3 = 13 rows a layer.
// Keys a layer's rows attend: the prompt 1+2+3+4 = 10, the full run 5+6+7 = 18; --compress decode:
// K = 2 holds 3, 3, 3 = 9 and K = 5 holds 5, 6, 6 = 17 (54 in all); prefill: K = 2 holds 2+1, 2+2,
// 2+3 = 12 and K = 5 holds 4+1, 4+2, 4+3 = 18 (58). Per key 2 n (d_qk + d_v) = 2*4*(24+16) = 320.
BOOST_AUTO_TEST_CASE(eval_cost_by_hand) {
  const mla::ModelConfig m = mla::tiny_model();
  const double A = static_cast<double>(mla::attention_parameter_count(m.attention));
  BOOST_TEST(mla::layer_linear_flops(m, false) == 2 * (A + 3.0 * 64 * 96));
  BOOST_TEST(mla::layer_linear_flops(m, true) == 2 * (A + 64.0 * 8 + 3 * 3.0 * 64 * 32));  // router, k 2 + 1 shared
  BOOST_TEST(mla::attention_flops_per_key(m.attention) == 320.0);
  mla::EvalOptions o;
  o.prompt_len = 4;
  o.steps = 3;
  o.budgets = {2, 5};
  o.policies = mla::parse_policy_list("full,h2o");
  const mla::EvalCost c = mla::eval_cost(m, o);
  BOOST_TEST(c.runs == 3);
  BOOST_TEST(c.rows_per_layer == 13);
  BOOST_TEST(c.linear == 13 * (mla::layer_linear_flops(m, false) + mla::layer_linear_flops(m, true)));
  BOOST_TEST(c.attention == 2 * 54 * 320.0);
  BOOST_TEST(c.head == 3 * 3 * 2.0 * 97 * 64);
  BOOST_TEST(c.total() == c.linear + c.attention + c.head);
  // the time's counts, the keys above per layer x 2 layers; h2o reads no prompt queries; 2 runs prefill
  BOOST_TEST(c.prompt_keys == 2 * 10.0);
  BOOST_TEST(c.full_keys == 2 * 18.0);
  BOOST_TEST(c.run_keys == 2 * 26.0);
  BOOST_TEST(c.window_keys == 0.0);
  BOOST_TEST(c.run_layers == 2 * 2.0);
  BOOST_TEST(c.features == 0.0);
  BOOST_TEST(c.weights == static_cast<double>(mla::model_parameter_count(m)) - 97.0 * 64);  // less the embedding
  BOOST_TEST(c.int4_weights == 0.0);
  // snapkv re-attends its 2-query window of the prompt: keys 4 + 3 at each budget and layer; the
  // oracle attends every key besides its cache: + 18 per budget and layer
  o.policies = mla::parse_policy_list("full,snapkv:window=2,oracle");
  const mla::EvalCost w = mla::eval_cost(m, o);
  BOOST_TEST(w.window_keys == 2 * 2 * 7.0);
  BOOST_TEST(w.run_keys == 2 * (2 * 26.0 + 2 * 18.0));
  BOOST_TEST(w.attention == 2 * (10 + 18 + 2 * 26) * 320.0);
  o.policies = mla::parse_policy_list("full,h2o");
  o.compress = mla::Compression::Prefill;
  BOOST_TEST(mla::eval_cost(m, o).attention == 2 * 58 * 320.0);
  // the time from the counts and rates
  mla::EvalCost big;
  big.linear = 6e12;
  big.attention = 1e12;
  big.head = 2e11;
  big.features = 1e11;
  big.prompt_keys = 1e6;
  big.full_keys = 2e6;
  big.run_keys = 3e6;
  big.window_keys = 4e6;
  big.run_layers = 100;
  big.weights = 1e9;
  big.int4_weights = 5e8;
  mla::EvalRates r;
  r.gemm = 1e10;
  r.key_parallel = 1e-6;
  r.key_alone = 2e-6;
  r.step_key = 1e-7;
  r.run_prefill = 0.01;
  r.weight = 1e-8;
  r.int4_weight = 2e-9;
  const mla::EvalTime t = mla::eval_time(big, r);
  BOOST_TEST(t.products == 630.0, boost::test_tools::tolerance(1e-12));  // (6e12 + 2e11 + 1e11) / 1e10
  BOOST_TEST(t.attention == 14.0, boost::test_tools::tolerance(1e-12));  // (1e6 + 3e6 + 2e6) 1e-6 + 4e6 2e-6
  BOOST_TEST(t.policies == 1.3, boost::test_tools::tolerance(1e-12));    // 3e6 1e-7 + 100 0.01
  BOOST_TEST(t.loading == 11.0, boost::test_tools::tolerance(1e-12));    // 1e9 1e-8 + 5e8 2e-9
  BOOST_TEST(mla::eval_time(big, r, 2).total() == t.total() / 2, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(mla::eval_cost_line(big, t, r) ==
             "7.2 TFLOP (linear 6, attention 1, lm_head 0.2): about 10.9 min (products 10.5 min at the 10 GFLOP/s this "
             "machine's fixed-order kernels measure, attention 14 s, policies 1 s, loading the layers 11 s)");
  mla::EvalOptions probe;  // rates measured on the model's widths with the job's policies
  probe.prompt_len = 16;
  probe.steps = 4;
  probe.budgets = {8};
  probe.policies = mla::parse_policy_list("full,h2o:sinks=1,recent=2,snapkv:window=4,oracle");
  const mla::EvalRates measured = mla::measure_eval_rates(m, probe, 1);
  for (double v : {measured.gemm, measured.key_alone, measured.key_parallel, measured.step_key, measured.run_prefill,
                   measured.weight, measured.int4_weight})
    BOOST_TEST(v > 0.0);
}

// Issue 46, fault 7: with --dump-tensors and the attn_weights dropped, the plan left out the
// ForwardResult's latent cache, its payload, the scores' F64 payloads and the image
// serialize_safetensors builds of the whole file: S = 16384 on models/tiny-mla planned 429 MiB
// and peaked at 572. The plan against the measured peak of the CLI, and the parts by hand.
BOOST_AUTO_TEST_CASE(a_dump_without_attn_weights_is_planned_as_measured) {
  const auto kimi = mla::test::geometry("kimi");
  const int64_t S = 4096;
  MemoryRequest plain = request(BackendKind::Cpu, S, Precision::FP32);
  MemoryRequest dump = plain;
  dump.dump_tensors = true;  // attn_weights false: dropped
  const int64_t H = kimi.hidden_size, n = kimi.num_attention_heads;
  const int64_t d_qk = kimi.qk_nope_head_dim + kimi.qk_rope_head_dim, latent = S * (kimi.kv_lora_rank + kimi.qk_rope_head_dim);
  const int64_t payloads = 4 * (2 * S * H + n * S * (2 * d_qk + kimi.v_head_dim) + latent) + 8 * (n + 1) * S;
  // at least: the payloads twice (theirs and the image's), the states and latent cache in f64, hidden widened
  const int64_t least = 2 * payloads + 8 * (n * S * (2 * d_qk + kimi.v_head_dim) + latent + S * H);
  const auto outputs = [&](const MemoryRequest& r) {
    for (const mla::MemoryPhase& p : mla::estimate_memory(kimi, r).phases)
      if (p.name == "outputs") return p.bytes();
    BOOST_FAIL("no outputs phase");
    return int64_t{0};
  };
  BOOST_TEST(outputs(dump) - outputs(plain) >= least);

#if defined(__SANITIZE_ADDRESS__)
  BOOST_TEST_MESSAGE("the measured part skipped under AddressSanitizer: its shadow memory and redzones inflate the peak");
  return;
#endif
  const std::string out = mla::test::scratch_dir("memory-plan-dump") + "/o";
  const std::string model = mla::test::data_dir() + "/../../models/tiny-mla";
  const mla::test::RunResult r = mla::test::run_cli_after(
      "MLA_MEMORY_AVAILABLE=3G", "run --checkpoint '" + model + "' --seq-len 16384 --dump-tensors --quiet --out '" + out + "'");
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.err);
  BOOST_TEST(r.err.find("attn_weights [8, 16384, 16384] not dumped") != std::string::npos, r.err);
  const std::string json = mla::test::read_text(out + "/report.json");
  const auto number = [&](const std::string& key) {
    const size_t at = json.find("\"" + key + "\": ");
    BOOST_TEST_REQUIRE(at != std::string::npos, key);
    return std::stod(json.substr(at + key.size() + 4));
  };
  const double planned = number("planned_peak_bytes"), measured = number("measured_peak_rss_bytes");
  // measured 2026-12-07: 557 MiB planned, 571-573 MiB measured (glibc's heap, not a listed buffer,
  // makes the 2.7 %); before the fix 429 MiB planned
  BOOST_TEST(measured <= planned * 1.05, planned / (1 << 20) << " MiB planned, " << measured / (1 << 20) << " MiB measured");
  BOOST_TEST(planned <= measured * 1.25, planned / (1 << 20) << " MiB planned, " << measured / (1 << 20) << " MiB measured");
}

BOOST_AUTO_TEST_SUITE_END()
