// mla/memory_plan.hpp — how much memory a command will need, decided before anything large is
// allocated, and the one-line refusal when it cannot fit (docs/long-context.md, "Memory plan").
//
// The one planner (src/checkpoint/memory_plan.cpp) makes every command's decision: run, sweep and
// demo (plan_memory), decode (plan_decode_memory), eval (plan_model_memory, plan_model_windows)
// and synth (plan_synth_memory). Each builds its request from the command's options, estimates
// it, and when it does not fit names the variants that would (FitAlternatives); the estimates
// describe the buffers beside the code that holds them.
//
// The estimate adds up, phase by phase, every buffer the program holds at that point, in bytes,
// from the geometry: the pipeline's own (the loaded weights, the input, the results and the
// dump's payloads: described here) and the backend's, which each backend describes beside its
// code (reference/reference_memory.cpp, src/cpu/cpu_memory.cpp, cuda/cuda_memory.cpp). The peak
// is the largest phase, plus a fixed allowance for the process itself. What is available comes
// from mla/memory_available.hpp.
//
// Shape legend: S = tokens, H = hidden_size, n = heads, r_q = q_lora_rank, r_kv = kv_lora_rank,
// d_n / d_r / d_v = qk_nope / qk_rope / v head dims, d_qk = d_n + d_r, P = attention parameters.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mla/attention.hpp"
#include "mla/config.hpp"
#include "mla/memory_available.hpp"

namespace mla {

struct MemoryRequest {
  BackendKind backend = BackendKind::Cpu;  // Reference | Cpu | Cuda (resolved: not Auto)
  int64_t seq_len = 0;
  Precision precision = Precision::FP32;
  bool dump_tensors = false;  // --dump-tensors: states, output and (below) attn_weights
  bool attn_weights = false;  // attn_weights [n, S, S] in the dump
  bool tokens_input = false;  // --tokens or --residual: input_layernorm loaded too
  int threads = 1;            // cpu workers
  Gemm gemm = Gemm::Auto;     // cpu: --gemm (the engine decides how the weights are kept)
  // cpu: the backend keeps the loaded layer (Backend::prepare_shared, as run/sweep/demo do), and
  // whether its projection weights are stored as BF16: an engine that takes W as stored then
  // holds no copy in fp32 runs, and in bf16 runs of BF16 weights (docs/cpu-gemm.md §3)
  bool weights_kept = false;
  bool bf16_weights = false;
  bool holds_attn_weights() const { return dump_tensors && attn_weights; }
};

struct MemoryPart {
  std::string name;
  int64_t bytes = 0;
};

struct MemoryPhase {
  std::string name;                // "projections", "attention", ...
  std::vector<MemoryPart> parts;   // what is alive then
  int64_t bytes() const;
};

struct MemoryEstimate {
  int64_t host_peak_bytes = 0;     // largest phase + process allowance
  std::string peak_phase;          // its name
  std::vector<MemoryPhase> phases;
  int64_t device_peak_bytes = 0;   // cuda: weights + workspace (+ attn_weights when dumped) + cuBLAS; else 0
  int64_t process_bytes = 0;       // the process allowance in host_peak_bytes (process_allowance_bytes)
};

// The host memory of the process itself that no phase lists (memory_plan.cpp): what it had
// resident at the first plan it made (code, the libraries' relocated data) plus a fixed part for
// what grows during a run (thread stacks, scratchpads, allocator slack). Measured once per
// process, so every plan of one process adds the same number.
int64_t process_allowance_bytes();

// Attention parameters of one layer from the geometry (101,124,096 for Kimi K2.6).
int64_t attention_parameter_count(const AttentionConfig& cfg);

// The sizes a buffer description is written in (see the shape legend).
struct MemoryDims {
  int64_t S, H, n, r_q, r_kv, d_n, d_r, d_v, d_qk, P;
};
MemoryDims memory_dims(const AttentionConfig& cfg, int64_t seq_len);

// a * b * ... saturating at kMemoryUnbounded: an absurd S must give "needs 10^18 bytes", not a
// wrapped number.
inline constexpr int64_t kMemoryUnbounded = INT64_MAX / 4;
int64_t memory_product(std::initializer_list<int64_t> factors);

// What a backend holds beyond the pipeline's buffers, described by the backend itself:
// `held` from prepare() until the backend is destroyed (after the outputs are written), and
// `phases` the buffers alive at each point of one forward (its export included). A device
// backend also gives its device peak.
struct BackendMemory {
  std::vector<MemoryPart> held;
  std::vector<MemoryPhase> phases;
  int64_t device_bytes = 0;
};
BackendMemory reference_backend_memory(const AttentionConfig& cfg, const MemoryRequest& req);  // reference/
BackendMemory cpu_backend_memory(const AttentionConfig& cfg, const MemoryRequest& req);        // src/cpu/
// Its parts, which decode's prefill (decode_memory.cpp) shares: what the cpu backend holds from
// prepare() on (weights, the projection slices' rows, the attention primitives), one row
// chunk's fp32 intermediates of the projections, and one query pass of the tiled attention
// over req.seq_len keys (the pass's q and context rows, the heads in flight, the logits blocks).
std::vector<MemoryPart> cpu_held_memory(const AttentionConfig& cfg, const MemoryRequest& req);
std::vector<MemoryPart> cpu_chunk_memory(const AttentionConfig& cfg, const MemoryRequest& req);
// (with_context false: a pass that computes the mass only, without P·V and its context rows)
std::vector<MemoryPart> cpu_attention_pass_memory(const AttentionConfig& cfg, const MemoryRequest& req,
                                                  bool with_context = true);
BackendMemory cuda_backend_memory(const AttentionConfig& cfg, const MemoryRequest& req);       // cuda/
// The one above for req.backend (Reference | Cpu | Cuda), in the backend factory.
BackendMemory backend_memory(const AttentionConfig& cfg, const MemoryRequest& req);

// The ForwardResult a backend returns (attn_output and the H2O sums in double; with a dump the
// states and attn_weights in double): the backends list it in their export phase.
std::vector<MemoryPart> forward_result_memory(const MemoryDims& d, const MemoryRequest& req);

MemoryEstimate estimate_memory(const AttentionConfig& cfg, const MemoryRequest& req);

// The pieces every plan is made of (a forward's above, decode's in src/decode/decode_memory.cpp):
// the peak of `phases` plus the process allowance (process_allowance_bytes, or `process_bytes`
// where a command counts its own);
MemoryEstimate estimate_of_phases(std::vector<MemoryPhase> phases, int64_t device_peak_bytes = 0);
MemoryEstimate estimate_of_phases(std::vector<MemoryPhase> phases, int64_t device_peak_bytes, int64_t process_bytes);
// what the pipeline holds while a layer runs: its weights as loaded, the input rows [S, H],
// input_layernorm for --tokens / --residual;
std::vector<MemoryPart> pipeline_held_memory(const MemoryDims& d, bool input_layernorm);
// whether an estimate fits what is available;
bool memory_fits(const MemoryEstimate& e, const MemoryBudget& b);
// the refusal line: "not enough memory for <asked>: needs ~X at its peak (estimated, <phase>)
// but Y is available (<source>); would fit: <alternatives, each "flag (~size)">";
std::string memory_refusal(const std::string& asked, const MemoryEstimate& e, const MemoryBudget& b,
                           const std::vector<std::string>& alternatives);
// the largest value in [0, upper) for which fits() holds, fits() growing false with the value.
int64_t largest_fitting(int64_t upper, const std::function<bool(int64_t)>& fits);
// "12.3 GiB", "850 MiB", "100 KiB", "512 bytes"
std::string format_bytes(int64_t bytes);

// The one search for what would fit, behind every command's refusal (run, decode, eval): the
// variants of the asked request that fit, each named by the flags that give it, for
// memory_refusal's "would fit:" list.
template <class Request>
class FitAlternatives {
 public:
  FitAlternatives(std::function<MemoryEstimate(const Request&)> estimate, const MemoryBudget& budget)
      : estimate_(std::move(estimate)), budget_(budget) {}
  bool fits(const Request& r) const { return memory_fits(estimate_(r), budget_); }
  // Offers "flag (~peak)" when `alt` fits.
  void offer(const Request& alt, const std::string& flag) {
    const MemoryEstimate e = estimate_(alt);
    if (memory_fits(e, budget_)) list_.push_back(flag + " (~" + format_bytes(e.host_peak_bytes) + ")");
  }
  // The largest v in [0, upper) at which `base` with set(r, v) fits (0: none), the estimate
  // growing with v.
  int64_t largest(const Request& base, int64_t upper, const std::function<void(Request&, int64_t)>& set) const {
    return largest_fitting(upper, [&](int64_t v) {
      Request r = base;
      set(r, v);
      return fits(r);
    });
  }
  // offer() of `base` with change(r) applied: one alternative flag, e.g. --precision bf16.
  void offer_changed(const Request& base, const std::string& flag, const std::function<void(Request&)>& change) {
    Request alt = base;
    change(alt);
    offer(alt, flag);
  }
  void offer_line(std::string line) { list_.push_back(std::move(line)); }
  const std::vector<std::string>& list() const { return list_; }

 private:
  std::function<MemoryEstimate(const Request&)> estimate_;
  MemoryBudget budget_;
  std::vector<std::string> list_;
};

struct MemoryPlan {
  MemoryRequest request;          // as asked
  MemoryEstimate estimate;        // of what will run (attn_weights dropped if it cannot fit)
  MemoryBudget budget;
  bool fits = true;
  bool attn_weights_dropped = false;
  std::string note;               // one line for the report (dropped attn_weights), or ""
  std::string refusal;            // when !fits: what was asked, needed, available, would fit
};

// Decides: fits as asked; fits without the attn_weights dump (dropped, with a note); or does
// not fit (refusal names the alternatives that would: --precision bf16, --backend cpu, no
// --dump-tensors, the largest --seq-len).
MemoryPlan plan_memory(const AttentionConfig& cfg, const MemoryRequest& req, const MemoryBudget& budget);

// ---- decode (src/decode/decode_memory.cpp: the buffers of `mla-h2o decode`) ---------------

struct DecodeMemoryRequest {
  BackendKind backend = BackendKind::Cpu;  // Cpu | Reference
  int64_t input_rows = 0;     // rows the input holds (>= prompt_len + steps)
  int64_t prompt_len = 0;     // P
  int64_t steps = 0;          // N
  int64_t query_window = 32;  // prompt rows whose queries are held besides the N steps (prompt_query_window)
  int64_t budgets = 1;        // how many cache budgets
  int64_t policies = 1;       // policies other than full
  int64_t features = 0;       // per-token feature arrays the policies read (FeatureNeeds::arrays: 0..6)
  bool naive = false;         // --attention naive: per-head k/v of every token
  Precision precision = Precision::FP32;
  bool dump_tensors = false;
  bool input_layernorm = false;  // --tokens / --residual
  int threads = 1;
  Gemm gemm = Gemm::Auto;        // cpu: --gemm (how the prefill's weights are kept)
  bool query_statistics = false; // expected-attention: the prompt's roped queries are kept
  int64_t reconstruction_rows = 0;  // kvzip: the rows of its largest repeat chunk (0: no kvzip)
};
MemoryEstimate estimate_decode_memory(const AttentionConfig& cfg, const DecodeMemoryRequest& req);
// What decode's options ask (memory_plan.cpp): P, N (opt.steps, or input_rows - P when 0), the
// prompt queries held, the budgets, the policies run at each, the feature arrays they read and
// expected-attention's statistics; the caller adds backend, precision, dump and threads.
struct DecodeOptions;
DecodeMemoryRequest decode_memory_request(const DecodeOptions& opt, int64_t input_rows);
// As plan_memory: fits, or a refusal naming what would (--attention absorbed, --precision bf16,
// no --dump-tensors, fewer --steps, a shorter --prompt-len).
MemoryPlan plan_decode_memory(const AttentionConfig& cfg, const DecodeMemoryRequest& req, const MemoryBudget& budget);

// ---- eval (src/model/model_forward.cpp: the buffers of a streamed whole-model forward) ----

struct ModelConfig;
struct EvalOptions;
struct ModelMemoryRequest {
  int64_t tokens = 0;             // T
  Precision precision = Precision::BF16;
  bool resident_experts = true;
  bool keep_hidden_states = false;
  int64_t streams = 1;            // eval: residual streams carried layer to layer (1 + runs)
  int64_t stream_rows = 0;        // eval: rows of each extra stream (N decode steps)
  int64_t extra_rows = 0;         // eval: kvzip's repeat of the context, a stream carried layer to layer
  int threads = 1;
};
// The phases of a streamed forward: the largest layer's weights (as read and as prepared), the
// activations of all tokens, the keys of one layer, the logits; the peak is the largest phase plus
// a fixed allowance for the process (kModelProcessBytes).
MemoryEstimate estimate_model_memory(const ModelConfig& cfg, const ModelMemoryRequest& req);
inline constexpr int64_t kModelProcessBytes = int64_t{320} << 20;
// What eval's options ask (memory_plan.cpp): T = P + N tokens, the full run and every (policy,
// budget) run as streams of N rows, the hidden states kept for --dump-tensors.
ModelMemoryRequest eval_memory_request(const EvalOptions& opt, bool dump_tensors);
// eval of one window (the one with the most decoded positions): fits, or a refusal naming what
// would (--precision bf16, no --dump-tensors, fewer --steps, fewer runs).
MemoryPlan plan_model_memory(const ModelConfig& cfg, const ModelMemoryRequest& req, const MemoryBudget& budget);
// How many of `windows` windows run at once (docs/eval.md §9): with --threads T and W windows,
// min(T, W) workers of T / workers threads each, as many as fit when each holds one window's runs
// and its own copy of the layer being computed (the process counted once). A window's figures do
// not depend on its threads (the fixed-order sums), so this changes the time, never the bits.
struct ModelWindowsPlan {
  int64_t workers = 1;
  MemoryEstimate memory;  // one window's plan, its phases times `workers`
};
// `kept` is what the command keeps for all its windows at once (eval_kept_memory), counted once
// beside the workers' windows.
ModelWindowsPlan plan_model_windows(const MemoryEstimate& one_window, int threads, int64_t windows, const MemoryBudget& budget,
                                    const MemoryPart& kept = {});

// What eval keeps of every window from the start of the run to its outputs, beside the layer being
// computed: each window's input (its ids, its options with the budgets, the policies and
// expected-attention's future rotation; a --task sample's text too) and its results (every run's
// positions and layers, the stage times), then the largest CSV built from them all. It grows with
// --windows, and with --task's contexts x depths x samples (each sample is one window).
struct EvalKeptRequest {
  int64_t windows = 1;     // W
  int64_t tokens = 0;      // ids of the largest window (P + N + 1)
  int64_t text_bytes = 0;  // --task: the bytes of a sample (its --context); 0 for --text / --tokens windows
  int64_t steps = 0;       // N of the largest window
  int64_t layers = 1;
  int64_t budgets = 1;
  int64_t policies = 1;    // besides full
  int64_t rotation = 0;    // doubles of expected-attention's future rotation each window's options hold (0: none)
};
MemoryPart eval_kept_memory(const EvalKeptRequest& r);

// ---- synth (src/checkpoint/synth.cpp: each shard is encoded whole in memory before it is written) ----

struct SynthOptions;
// One phase per shard: its tensors as stored; the process counted as kSynthProcessBytes.
MemoryEstimate estimate_synth_memory(const SynthOptions& opts, const ModelConfig& model);
inline constexpr int64_t kSynthProcessBytes = int64_t{256} << 20;
// Fits, or a refusal naming what would (more --shards, a smaller --vocab).
MemoryPlan plan_synth_memory(const SynthOptions& opts, const ModelConfig& model, const MemoryBudget& budget);

// ---- the cost of the reference backend (its announced estimate and its progress) ----------

// Floating-point operations of each stage of ref::forward (multiply-add = 2), in its order:
// q_path, kv_path, rope, attend, o_proj. The reference computes every (query, key) pair
// whatever the mask, so the mask does not change the count.
std::vector<std::pair<std::string, double>> reference_stage_flops(const AttentionConfig& cfg, int64_t seq_len);
// Its rate measured on the development machine (AMD EPYC, 2 cores, g++ 12.2 -O3; Kimi
// layer 0, S = 8: 1.6 GFLOP in ~1.0 s of CPU; docs/long-context.md): scalar double loops
// on one core.
inline constexpr double kReferenceFlopsPerSecond = 1.5e9;

}  // namespace mla
