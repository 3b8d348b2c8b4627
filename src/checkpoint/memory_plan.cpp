// src/checkpoint/memory_plan.cpp — the memory plan of a forward (see mla/memory_plan.hpp and
// docs/long-context.md "Memory plan"): the pipeline's own buffers (src/cli/run_pipeline.cpp,
// src/report/dump.cpp), each backend's as it describes them (backend_memory), and the decision.
//
// Shape legend: S = tokens, H = hidden_size, n = heads, r_q = q_lora_rank, r_kv = kv_lora_rank,
// d_n / d_r / d_v = qk_nope / qk_rope / v head dims, d_qk = d_n + d_r, P = parameters.
#include "mla/memory_plan.hpp"

#include <algorithm>
#include <cstdio>

#include "mla/decode.hpp"
#include "mla/eval.hpp"
#include "mla/model.hpp"
#include "mla/synth.hpp"
#include "mla/threads.hpp"
#include "mla/error.hpp"
#include "mla/memory_available.hpp"

namespace mla {
namespace {

// The process itself, beside every buffer a phase lists (docs/long-context.md §3):
//   - its resident size when it makes its first plan: code, the libraries' relocated data and
//     the parsed config. That is ~78 MB without CUDA and ~226 MB in a CUDA build, 148 MB of it
//     libcublasLt's, resident although a cpu run never calls it. Measured, not assumed: it
//     depends on the build and the libraries' versions (kProcessFallback where /proc is missing);
//   - kProcessGrowth for what grows during a run and is not a listed buffer: worker thread
//     stacks, oneDNN's scratchpads and projection primitives, glibc's arenas and fragmentation.
//     Measured on Kimi layer 0 (peak RSS minus the listed buffers and the baseline): 34-46 MB
//     at S = 4096-131072 (docs/long-context.md §3); 64 MiB keeps the plan above the peak.
// The attention's oneDNN primitives, which grow with S up to ~50 MB, are a listed part of the
// cpu backend (cpu_memory.cpp).
constexpr int64_t kProcessFallback = int64_t{256} << 20;
constexpr int64_t kProcessGrowth = int64_t{32} << 20;

constexpr int64_t kF32 = 4, kF64 = 8;

int64_t mul(int64_t a, int64_t b) { return memory_product({a, b}); }
int64_t mul(int64_t a, int64_t b, int64_t c) { return memory_product({a, b, c}); }
int64_t mul(int64_t a, int64_t b, int64_t c, int64_t d) { return memory_product({a, b, c, d}); }

// The ForwardResult and what the pipeline builds from it (the report's copies of the scores)
// and, with a dump, what write_tensor_dump (src/report/dump.cpp) holds when it writes the file:
// the ForwardResult's latent cache, every payload (F32: 4 bytes per value; the scores F64), the
// hidden states widened to f64, and serialize_safetensors' image of the whole file, which is
// every payload once more. (Uncounted until issue 46: the latent cache and its payload, the
// scores' payloads and the image, +33 % at S = 16384 on models/tiny-mla without attn_weights.)
// A tensor's narrowing copy is freed before the next is added, so it is below the image.
std::vector<MemoryPart> pipeline_outputs(const MemoryDims& d, const MemoryRequest& r) {
  std::vector<MemoryPart> p = forward_result_memory(d, r);
  p.push_back({"report: head_scores + token_scores f64", mul(d.n + 1, d.S, kF64)});
  if (r.dump_tensors) {
    const int64_t states = mul(d.n, d.S, 2 * d.d_qk + d.d_v), latent = mul(d.S, d.r_kv + d.d_r);
    p.push_back({"dump: latent_cache [S,r_kv+d_r] f64 (the ForwardResult's)", mul(latent, kF64)});
    const int64_t f32 = memory_product({mul(2, d.S, d.H) + states + latent, kF32});
    const int64_t scores = mul(d.n + 1, d.S, kF64);
    const int64_t weights = r.holds_attn_weights() ? mul(d.n, mul(d.S, d.S), kF32) : 0;
    p.push_back({"dump payloads f32 (hidden, output, states, latent)", f32});
    p.push_back({"dump payloads f64 (token_scores, head_scores)", scores});
    p.push_back({"dump: hidden_states widened f64", mul(d.S, d.H, kF64)});
    if (weights > 0) p.push_back({"dump payload attn_weights f32", weights});
    p.push_back({"dump: the file's image (every payload again)", std::min(kMemoryUnbounded, f32 + scores + weights)});
  }
  return p;
}

std::vector<MemoryPart> joined(std::initializer_list<const std::vector<MemoryPart>*> lists) {
  std::vector<MemoryPart> out;
  for (const auto* l : lists) out.insert(out.end(), l->begin(), l->end());
  return out;
}

}  // namespace

MemoryDims memory_dims(const AttentionConfig& c, int64_t S) {
  return {S, c.hidden_size, c.num_attention_heads, c.q_lora_rank, c.kv_lora_rank, c.qk_nope_head_dim,
          c.qk_rope_head_dim, c.v_head_dim, c.qk_nope_head_dim + c.qk_rope_head_dim, attention_parameter_count(c)};
}

int64_t process_allowance_bytes() {
  static const int64_t baseline = [] {
    const int64_t resident = process_resident_bytes();
    return resident > 0 ? resident : kProcessFallback;
  }();
  return baseline + kProcessGrowth;
}

int64_t memory_product(std::initializer_list<int64_t> factors) {
  int64_t r = 1;
  for (const int64_t f : factors)
    if (__builtin_mul_overflow(r, f, &r) || r > kMemoryUnbounded) return kMemoryUnbounded;
  return r;
}

std::vector<MemoryPart> forward_result_memory(const MemoryDims& d, const MemoryRequest& r) {
  std::vector<MemoryPart> p = {{"attn_output [S,H] f64", mul(d.S, d.H, kF64)},
                               {"head_scores + token_scores f64", mul(d.n + 1, d.S, kF64)}};
  if (r.dump_tensors) p.push_back({"query/key/value_states f64", mul(d.n, d.S, 2 * d.d_qk + d.d_v, kF64)});
  if (r.holds_attn_weights()) p.push_back({"attn_weights [n,S,S] f64", mul(d.n, d.S, d.S, kF64)});
  return p;
}

int64_t MemoryPhase::bytes() const {
  int64_t b = 0;
  for (const MemoryPart& p : parts) b = std::min(kMemoryUnbounded, b + p.bytes);
  return b;
}

int64_t attention_parameter_count(const AttentionConfig& c) {
  const int64_t H = c.hidden_size, n = c.num_attention_heads, d_qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
  int64_t p = 0;
  if (c.has_q_lora()) {
    p += c.q_lora_rank * H + c.q_lora_rank + n * d_qk * c.q_lora_rank;
  } else {
    p += n * d_qk * H;
  }
  p += (c.kv_lora_rank + c.qk_rope_head_dim) * H + c.kv_lora_rank + n * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank;
  p += H * n * c.v_head_dim;
  if (c.attention_bias) p += (c.has_q_lora() ? c.q_lora_rank : 0) + c.kv_lora_rank + c.qk_rope_head_dim + H;
  return p;
}

MemoryEstimate estimate_memory(const AttentionConfig& cfg, const MemoryRequest& req) {
  const MemoryDims d = memory_dims(cfg, req.seq_len);
  const std::vector<MemoryPart> held = pipeline_held_memory(d, req.tokens_input);  // load, run: the whole forward
  const BackendMemory backend = backend_memory(cfg, req);
  MemoryEstimate e;
  for (const MemoryPhase& p : backend.phases) e.phases.push_back({p.name, joined({&held, &backend.held, &p.parts})});
  const std::vector<MemoryPart> outputs = pipeline_outputs(d, req);
  e.phases.push_back({"outputs", joined({&held, &backend.held, &outputs})});
  return estimate_of_phases(std::move(e.phases), backend.device_bytes);
}

MemoryEstimate estimate_of_phases(std::vector<MemoryPhase> phases, int64_t device_peak_bytes) {
  return estimate_of_phases(std::move(phases), device_peak_bytes, process_allowance_bytes());
}

MemoryEstimate estimate_of_phases(std::vector<MemoryPhase> phases, int64_t device_peak_bytes, int64_t process_bytes) {
  MemoryEstimate e;
  e.phases = std::move(phases);
  e.device_peak_bytes = device_peak_bytes;
  int64_t peak = 0;
  for (const MemoryPhase& p : e.phases) {
    if (p.bytes() > peak) {
      peak = p.bytes();
      e.peak_phase = p.name;
    }
  }
  e.process_bytes = process_bytes;
  e.host_peak_bytes = std::min(kMemoryUnbounded, peak + e.process_bytes);
  return e;
}

std::vector<MemoryPart> pipeline_held_memory(const MemoryDims& d, bool input_layernorm) {
  std::vector<MemoryPart> p = {{"loaded weights (fp32)", memory_product({d.P, kF32})},
                               {"hidden_states input [S,H] f32", memory_product({d.S, d.H, kF32})}};
  if (input_layernorm) p.push_back({"input_layernorm", memory_product({d.H, kF32})});
  return p;
}

namespace {

// The budget an estimate exceeds, in words (the device's first: a GPU run is refused for it):
// what is needed ("~23.0 GiB of GPU memory") and what is available, with where that comes from.
struct Shortfall {
  std::string need, available;
};
Shortfall shortfall(const MemoryEstimate& e, const MemoryBudget& b) {
  if (b.device_bytes >= 0 && e.device_peak_bytes > b.device_bytes)
    return {"~" + format_bytes(e.device_peak_bytes) + " of GPU memory",
            format_bytes(b.device_bytes) + " is available (cudaMemGetInfo)"};
  return {"~" + format_bytes(e.host_peak_bytes), format_bytes(b.host_bytes) + " is available (" + b.host_source + ")"};
}

}  // namespace

bool memory_fits(const MemoryEstimate& e, const MemoryBudget& b) {
  if (b.host_bytes >= 0 && e.host_peak_bytes > b.host_bytes) return false;
  if (b.device_bytes >= 0 && e.device_peak_bytes > b.device_bytes) return false;
  return true;
}

std::string memory_refusal(const std::string& asked, const MemoryEstimate& e, const MemoryBudget& b,
                           const std::vector<std::string>& alternatives) {
  const Shortfall as_asked = shortfall(e, b);
  std::string line = "not enough memory for " + asked + ": needs " + as_asked.need + " at its peak (estimated, " +
                     e.peak_phase + ") but " + as_asked.available;
  if (alternatives.empty()) return line + "; nothing smaller fits either";
  line += "; would fit: ";
  for (size_t i = 0; i < alternatives.size(); ++i) line += (i ? ", or " : "") + alternatives[i];
  return line;
}

std::vector<std::pair<std::string, double>> reference_stage_flops(const AttentionConfig& cfg, int64_t seq_len) {
  const MemoryDims d = memory_dims(cfg, seq_len);
  const double S = static_cast<double>(d.S), n = static_cast<double>(d.n), H = static_cast<double>(d.H);
  const double q = cfg.has_q_lora() ? 2.0 * S * (H * d.r_q + static_cast<double>(d.r_q) * n * d.d_qk) + 4.0 * S * d.r_q
                                    : 2.0 * S * H * n * d.d_qk;
  const double kv = 2.0 * S * (H * (d.r_kv + d.d_r) + static_cast<double>(d.r_kv) * n * (d.d_n + d.d_v)) + 4.0 * S * d.r_kv;
  const double pairs = n * S * S;  // every (head, query, key)
  // attend: scores (q.k, *scale, +mask), softmax (max, exp ~6, sum, divide), P.V
  return {{"q_path", q},
          {"kv_path", kv},
          {"rope", 6.0 * S * (n + 1) * d.d_r},
          {"attend", pairs * (2.0 * d.d_qk + 2.0 + 10.0 + 2.0 * d.d_v)},
          {"o_proj", 2.0 * S * n * d.d_v * H}};
}

std::string format_bytes(int64_t bytes) {
  char buf[48];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024 * 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.3g PiB", b / (1024.0 * 1024 * 1024 * 1024 * 1024));
  } else if (b >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", b / (1024.0 * 1024 * 1024));
  } else if (b >= 1024.0 * 1024) {
    std::snprintf(buf, sizeof buf, "%.0f MiB", b / (1024.0 * 1024));
  } else if (b >= 1024.0) {
    std::snprintf(buf, sizeof buf, "%.0f KiB", b / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(bytes));
  }
  return buf;
}

// ---- the decisions: every command's plan -----------------------------------------------------

namespace {

// The decision every plan makes: `req` as asked fits, or the refusal names the variants of it
// that would (`offer` adds them to the search).
template <class Request>
MemoryPlan decide(const Request& req, const std::function<MemoryEstimate(const Request&)>& estimate, const MemoryBudget& budget,
                  const std::string& asked, const std::function<void(FitAlternatives<Request>&)>& offer) {
  MemoryPlan plan;
  plan.budget = budget;
  plan.estimate = estimate(req);
  if (memory_fits(plan.estimate, budget)) return plan;
  plan.fits = false;
  FitAlternatives<Request> would_fit(estimate, budget);
  offer(would_fit);
  plan.refusal = memory_refusal(asked, plan.estimate, budget, would_fit.list());
  return plan;
}

std::string asked(const MemoryRequest& r) {
  std::string s = "S = " + std::to_string(r.seq_len) + " tokens, --backend " + backend_name(r.backend) +
                  " --precision " + precision_name(r.precision);
  if (r.dump_tensors) s += " --dump-tensors";
  return s;
}

}  // namespace

MemoryPlan plan_memory(const AttentionConfig& cfg, const MemoryRequest& req, const MemoryBudget& budget) {
  const auto estimate = [&](const MemoryRequest& r) { return estimate_memory(cfg, r); };
  // without the attn_weights dump when only that does not fit (the run goes on, with a note)
  if (const MemoryEstimate as_asked = estimate(req); req.holds_attn_weights() && !memory_fits(as_asked, budget)) {
    MemoryRequest without = req;
    without.attn_weights = false;
    if (const MemoryEstimate e = estimate(without); memory_fits(e, budget)) {
      const Shortfall with = shortfall(as_asked, budget);
      MemoryPlan plan;
      plan.request = req;
      plan.budget = budget;
      plan.note = "attn_weights [" + std::to_string(cfg.num_attention_heads) + ", " + std::to_string(req.seq_len) + ", " +
                  std::to_string(req.seq_len) + "] not dumped: with it the run needs " + with.need + " but " +
                  with.available + "; the other tensors are written";
      plan.estimate = e;
      plan.attn_weights_dropped = true;
      return plan;
    }
  }
  MemoryPlan plan = decide<MemoryRequest>(req, estimate, budget, asked(req), [&](FitAlternatives<MemoryRequest>& would_fit) {
    if (req.precision == Precision::FP32) would_fit.offer_changed(req, "--precision bf16",
        [](auto& r) { r.precision = Precision::BF16; });
    if (req.backend != BackendKind::Cpu) would_fit.offer_changed(req, "--backend cpu",
        [](auto& r) { r.backend = BackendKind::Cpu; });
    if (req.dump_tensors) would_fit.offer_changed(req, "no --dump-tensors", [](auto& r) { r.dump_tensors = false; });
    // the largest S that fits as asked (the estimate grows with S)
    const int64_t lo = would_fit.largest(req, req.seq_len, [](MemoryRequest& r, int64_t S) { r.seq_len = S; });
    if (lo >= 1) would_fit.offer_line("--seq-len " + std::to_string(lo >= 1024 ? lo / 1024 * 1024 : lo) + " or fewer tokens");
  });
  plan.request = req;
  return plan;
}

DecodeMemoryRequest decode_memory_request(const DecodeOptions& opt, int64_t input_rows) {
  DecodeMemoryRequest req;
  req.input_rows = input_rows;
  req.prompt_len = opt.prompt_len;
  req.steps = opt.steps > 0 ? opt.steps : input_rows - opt.prompt_len;
  req.query_window = prompt_query_window(opt);
  req.budgets = static_cast<int64_t>(opt.budgets.size());
  req.policies = evicting_policy_count(opt.policies);
  const FeatureNeeds needs = feature_needs(opt.policies);
  req.features = needs.arrays();
  req.query_statistics = needs.expected_attention;
  if (needs.reconstruction) req.reconstruction_rows = reconstruction_rows(reconstruction_chunks(opt.prompt_len, {}));
  return req;
}

MemoryPlan plan_decode_memory(const AttentionConfig& cfg, const DecodeMemoryRequest& req, const MemoryBudget& budget) {
  const std::string asked = "decode of P = " + std::to_string(req.prompt_len) + " prompt rows and N = " +
                            std::to_string(req.steps) + " steps, " + std::to_string(req.budgets) + " budget(s) x " +
                            std::to_string(req.policies) + " policies, --backend " + backend_name(req.backend) +
                            " --precision " + precision_name(req.precision) + (req.naive ? " --attention naive" : "") +
                            (req.dump_tensors ? " --dump-tensors" : "");
  MemoryPlan plan = decide<DecodeMemoryRequest>(
      req, [&](const DecodeMemoryRequest& r) { return estimate_decode_memory(cfg, r); }, budget, asked,
      [&](FitAlternatives<DecodeMemoryRequest>& would_fit) {
        if (req.naive) would_fit.offer_changed(req, "--attention absorbed", [](auto& r) { r.naive = false; });
        if (req.precision == Precision::FP32) would_fit.offer_changed(req, "--precision bf16",
            [](auto& r) { r.precision = Precision::BF16; });
        if (req.dump_tensors) would_fit.offer_changed(req, "no --dump-tensors", [](auto& r) { r.dump_tensors = false; });
        if (const int64_t N = would_fit.largest(req, req.steps, [](DecodeMemoryRequest& r, int64_t n) { r.steps = n; }); N >= 1) {
          would_fit.offer_line("--steps " + std::to_string(N) + " or fewer");
        } else {
          DecodeMemoryRequest one_step = req;
          one_step.steps = 1;
          if (const int64_t P = would_fit.largest(one_step, req.prompt_len, [](DecodeMemoryRequest& r, int64_t p) { r.prompt_len = p; });
              P >= 1)
            would_fit.offer_line("--prompt-len " + std::to_string(P) + " or shorter");
        }
      });
  plan.request.backend = req.backend;
  plan.request.seq_len = req.prompt_len + req.steps;
  plan.request.precision = req.precision;
  plan.request.dump_tensors = req.dump_tensors;
  return plan;
}

ModelMemoryRequest eval_memory_request(const EvalOptions& opt, bool dump_tensors) {
  ModelMemoryRequest req;
  req.tokens = opt.prompt_len + opt.steps;
  req.precision = opt.precision;
  req.streams = 1 + static_cast<int64_t>(policy_runs(opt.budgets, opt.policies).size());  // full + every run
  req.stream_rows = opt.steps;
  if (feature_needs(opt.policies).reconstruction) {  // kvzip's repeat (its text's bound when not tokenized yet)
    const ReconstructionText& t = opt.reconstruction_text;
    const bool none = t.first.empty() && t.later.empty() && t.suffix.empty();
    req.extra_rows = reconstruction_total_rows(reconstruction_chunks(opt.prompt_len, none ? reconstruction_text_bound() : t));
  }
  req.keep_hidden_states = dump_tensors;
  req.threads = resolve_threads(opt.threads);
  return req;
}

MemoryPlan plan_model_memory(const ModelConfig& cfg, const ModelMemoryRequest& req, const MemoryBudget& budget) {
  const int64_t runs = req.streams, N = req.stream_rows, P = req.tokens - N;
  const std::string asked = "eval of " + std::to_string(runs) + " runs x " + std::to_string(N) + " decoded positions after P = " +
                            std::to_string(P) + " prompt tokens, --precision " + precision_name(req.precision) +
                            (req.keep_hidden_states ? " --dump-tensors" : "");
  return decide<ModelMemoryRequest>(
      req, [&](const ModelMemoryRequest& r) { return estimate_model_memory(cfg, r); }, budget, asked,
      [&](FitAlternatives<ModelMemoryRequest>& would_fit) {
        if (req.precision == Precision::FP32) would_fit.offer_changed(req, "--precision bf16",
            [](auto& r) { r.precision = Precision::BF16; });
        if (req.keep_hidden_states) would_fit.offer_changed(req, "no --dump-tensors", [](auto& r) { r.keep_hidden_states = false; });
        if (const int64_t n = would_fit.largest(req, N, [P](ModelMemoryRequest& r, int64_t v) { r.stream_rows = v; r.tokens = P + v; });
            n >= 1)
          would_fit.offer_line("--steps " + std::to_string(n) + " or fewer");
        if (const int64_t k = would_fit.largest(req, runs, [](ModelMemoryRequest& r, int64_t v) { r.streams = v; }); k >= 2)
          would_fit.offer_line("at most " + std::to_string(k) + " runs (fewer --policy or --cache-budget: each policy x budget is a "
                               "run, full one more)");
      });
}

ModelWindowsPlan plan_model_windows(const MemoryEstimate& one_window, int threads, int64_t windows, const MemoryBudget& budget,
                                    const MemoryPart& kept) {
  const auto times = [&](int64_t k) {
    MemoryEstimate all = one_window;
    const int64_t each = one_window.host_peak_bytes - one_window.process_bytes;
    const int64_t layers = each > kMemoryUnbounded / k ? kMemoryUnbounded : each * k;
    all.host_peak_bytes = std::min(kMemoryUnbounded, one_window.process_bytes + layers + kept.bytes);
    if (kept.bytes > 0)
      for (MemoryPhase& p : all.phases) p.parts.push_back(kept);
    return all;
  };
  for (int64_t workers = std::min<int64_t>(threads, windows); workers > 1; --workers)
    if (const MemoryEstimate all = times(workers); memory_fits(all, budget)) return ModelWindowsPlan{workers, all};
  return ModelWindowsPlan{1, times(1)};
}

// Heap blocks are counted with glibc's header and 16-byte rounding (kBlock at least); a vector
// that grew by push_back may hold twice its size while it moves (counted twice).
namespace {
constexpr int64_t kBlock = 32;
int64_t block(int64_t bytes) { return bytes <= 0 ? 0 : std::max(kBlock, (bytes + 8 + 15) / 16 * 16); }
}  // namespace

MemoryPart eval_kept_memory(const EvalKeptRequest& r) {
  const int64_t runs = 1 + r.budgets * r.policies, N = r.steps, L = r.layers;
  constexpr int64_t kPath = 256;  // the source file's name, held by the window, its job and its sample
  // the input: the window's job (its ids and options; WindowInput is a string, an offset and a
  // vector: 64 bytes) and, for --task, the sample it came from; each array counted twice
  int64_t input = 2 * (static_cast<int64_t>(sizeof(EvalWindow) + sizeof(EvalOptions)) + 64) +
                  block(8 * r.tokens) + block(8 * r.budgets) +
                  block(r.policies * static_cast<int64_t>(sizeof(PolicySettings))) + r.policies * 2 * block(64) +
                  block(8 * r.rotation) + 2 * block(kPath);
  if (r.text_bytes > 0)
    input += 2 * static_cast<int64_t>(sizeof(TaskSample)) + block(r.text_bytes) + 3 * block(64) + block(kPath);
  // the results: every run's positions and layers, the passkey, the stage times and profile
  const int64_t run = static_cast<int64_t>(sizeof(EvalRun)) + 2 * block(64) +
                      block(N * static_cast<int64_t>(sizeof(EvalPosition))) + block(L * static_cast<int64_t>(sizeof(EvalLayer)));
  const int64_t stages = (2 * L + 40) * (static_cast<int64_t>(sizeof(std::pair<std::string, double>)) + block(48));
  const int64_t result = runs * run + stages + block(64) + block(8 * N);
  // the outputs, built from every window at the end: eval.csv's rows (one per run and position,
  // ~120 bytes at most) and layers.csv's (one per run and layer, ~300 bytes)
  const int64_t csv = runs * (N * 120 + L * 300);
  const int64_t each = input + result + csv;
  const int64_t all = memory_product({r.windows, each});
  return MemoryPart{"every window's input and results (" + std::to_string(r.windows) + (r.windows == 1 ? " window" : " windows") +
                        ", " + format_bytes(each) + " each)",
                    all};
}

MemoryPlan plan_synth_memory(const SynthOptions& opts, const ModelConfig& model, const MemoryBudget& budget) {
  const int64_t vocab = opts.vocab > 0 ? opts.vocab : model.attention.vocab_size;
  const std::string asked = "synth of " + std::to_string(opts.layers.size()) + " layer(s) and a vocabulary of " +
                            std::to_string(vocab) + " in " + std::to_string(opts.shards) + " shards, --dtype " + opts.dtype;
  return decide<SynthOptions>(
      opts, [&](const SynthOptions& o) { return estimate_synth_memory(o, model); }, budget, asked,
      [&](FitAlternatives<SynthOptions>& would_fit) {
        // the fewest shards that fit (the largest shard shrinks as the layers spread over more)
        if (opts.shards < kSynthMaxShards) {
          const int64_t fewer =
              would_fit.largest(opts, kSynthMaxShards - opts.shards, [](SynthOptions& o, int64_t v) { o.shards = kSynthMaxShards - v; });
          const int64_t shards = kSynthMaxShards - fewer;
          would_fit.offer_changed(opts, "--shards " + std::to_string(shards), [&](SynthOptions& o) { o.shards = shards; });
        }
        // the largest vocabulary that fits (embed_tokens, and lm_head for a whole model, grow with it)
        if (const int64_t v = would_fit.largest(opts, vocab, [](SynthOptions& o, int64_t n) { o.vocab = n; }); v >= 1)
          would_fit.offer_changed(opts, "--vocab " + std::to_string(v), [&](SynthOptions& o) { o.vocab = v; });
      });
}

int64_t largest_fitting(int64_t upper, const std::function<bool(int64_t)>& fits) {
  int64_t lo = 0, hi = upper;  // fits(hi) is false; fits(0) counts as true
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace mla
