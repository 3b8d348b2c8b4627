// src/eval/eval_cost.cpp — the FLOP count of an eval and its time estimate (mla/eval_cost.hpp,
// docs/eval.md §9): the counts from the config, the rates from small runs of the very kernels
// eval uses (the fixed-order engine, cpu::attend_row, the step loop with the job's policies, the
// loader's conversion, INT4 dequantization and the packing) on synthetic values.
//
// Shape legend: P = prompt_len, N = steps, H = hidden_size, n heads, d_qk, d_v, r_kv, V = vocab.
#include "mla/eval_cost.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "mla/bf16.hpp"
#include "mla/int4.hpp"
#include "mla/memory_plan.hpp"
#include "mla/rope.hpp"
#include "mla/step_loop.hpp"
#include "src/cpu/cpu_kernels.hpp"
#include "src/cpu/fixed_order.hpp"
#include "src/cpu/row_attention.hpp"

namespace mla {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
size_t idx(int64_t i) { return static_cast<size_t>(i); }

// sum_{q=P-w}^{P-1} (q + 1): the keys of the last w prompt queries
double window_key_count(int64_t P, int64_t w) {
  w = std::min(w, P);
  return static_cast<double>(w) * static_cast<double>(2 * P - w + 1) / 2.0;
}

// FLOPs of the token features' products of one run at one layer (token_features.cpp): the keys
// and values expanded from the latent rows; value-aware's Gram matrices and u = G v;
// expected-attention's [k S' | mu'.k].
double feature_flops(const AttentionConfig& a, const FeatureNeeds& needs, int64_t T) {
  if (!needs.any()) return 0;
  const double n = static_cast<double>(a.num_attention_heads), t = static_cast<double>(T),
               d_v = static_cast<double>(a.v_head_dim), d_qk = static_cast<double>(a.qk_head_dim());
  double f = 2.0 * t * static_cast<double>(a.kv_lora_rank) * n * static_cast<double>(a.qk_nope_head_dim + a.v_head_dim);
  if (needs.output_norm) f += 2.0 * n * d_v * d_v * static_cast<double>(a.hidden_size) + 2.0 * t * n * d_v * d_v;
  if (needs.expected_attention) f += 2.0 * t * n * d_qk * (d_qk + 1);
  return f;
}

// The keys, prefills and features of the policy runs at one layer: run_keys (the oracle's full
// attention included), window_keys, run_layers, features; returns the keys the policies' decode
// rows attend (the attention FLOPs' share).
double count_runs(const ModelConfig& cfg, const EvalOptions& opt, EvalCost& c) {
  const int64_t P = opt.prompt_len, N = opt.steps;
  double attended_keys = 0;
  for (const PolicySettings& s : opt.policies) {
    if (policy_is_full_cache(s)) continue;
    for (const int64_t K : opt.budgets) {
      for (int64_t i = 0; i < N; ++i)
        attended_keys += opt.compress == Compression::Prefill ? static_cast<double>(std::min(P, K) + i + 1)
                                                              : static_cast<double>(std::min(P + i + 1, K + 1));
      if (policy_needs_full_attention(s))  // its own full attention at every step
        c.run_keys += static_cast<double>(N) * static_cast<double>(P) + static_cast<double>(N) * static_cast<double>(N + 1) / 2;
      c.window_keys += window_key_count(P, policy_observation_window(s));
      c.run_layers += 1;
      c.features += feature_flops(cfg.attention, feature_needs({s}), P + N);
    }
  }
  c.run_keys += attended_keys;
  return attended_keys;
}

}  // namespace

double layer_linear_flops(const ModelConfig& cfg, bool moe) {
  const double H = static_cast<double>(cfg.attention.hidden_size);
  const double attention = static_cast<double>(attention_parameter_count(cfg.attention));
  double mlp = 3.0 * H * static_cast<double>(cfg.intermediate_size);  // gate, up, down
  if (moe) {
    const double experts = static_cast<double>(cfg.num_experts_per_tok + cfg.n_shared_experts);
    mlp = H * static_cast<double>(cfg.n_routed_experts) + experts * 3.0 * H * static_cast<double>(cfg.moe_intermediate_size);
  }
  return 2.0 * (attention + mlp);
}

double attention_flops_per_key(const AttentionConfig& cfg) {
  return 2.0 * static_cast<double>(cfg.num_attention_heads) * static_cast<double>(cfg.qk_head_dim() + cfg.v_head_dim);
}

EvalCost eval_cost(const ModelConfig& cfg, const EvalOptions& opt) {
  const AttentionConfig& a = cfg.attention;
  const double P = static_cast<double>(opt.prompt_len), N = static_cast<double>(opt.steps);
  const int64_t policies = evicting_policy_count(opt.policies);
  EvalCost c;
  c.runs = 1 + policies * static_cast<int64_t>(opt.budgets.size());
  c.rows_per_layer = opt.prompt_len + c.runs * opt.steps;
  double repeat_keys = 0;  // kvzip: its repeat's rows (the text's bound when not tokenized yet) and their keys
  if (feature_needs(opt.policies).reconstruction) {
    const ReconstructionText& t = opt.reconstruction_text;
    const bool none = t.first.empty() && t.later.empty() && t.suffix.empty();
    for (const ReconstructionChunk& ch : reconstruction_chunks(opt.prompt_len, none ? reconstruction_text_bound() : t)) {
      const double R = static_cast<double>(ch.rows.size());
      c.rows_per_layer += static_cast<int64_t>(ch.rows.size());
      repeat_keys += R * P + R * (R + 1) / 2;  // the model's attention over the context and itself
      if (ch.sinks > 0 || ch.begin > 0 || ch.end < opt.prompt_len)  // its scores' own softmax
        repeat_keys += R * static_cast<double>(ch.sinks + ch.end - ch.begin) + R * (R + 1) / 2;
    }
  }
  // keys attended by one layer's rows: the prompt rows, the full run, the policies
  EvalCost layer;
  layer.prompt_keys = P * (P + 1) / 2;
  layer.full_keys = N * P + N * (N + 1) / 2;
  const double policy_keys = count_runs(cfg, opt, layer);
  const double L = static_cast<double>(a.num_hidden_layers);
  for (int64_t l = 0; l < a.num_hidden_layers; ++l) {
    c.linear += static_cast<double>(c.rows_per_layer) * layer_linear_flops(cfg, cfg.is_moe_layer(l));
    c.attention += (layer.prompt_keys + layer.full_keys + policy_keys + repeat_keys) * attention_flops_per_key(a);
    if (cfg.is_moe_layer(l) && a.quantization.present)
      c.int4_weights += static_cast<double>(cfg.n_routed_experts) * 3.0 * static_cast<double>(a.hidden_size) *
                        static_cast<double>(cfg.moe_intermediate_size);
  }
  c.head = static_cast<double>(c.runs) * N * 2.0 * static_cast<double>(a.vocab_size) * static_cast<double>(a.hidden_size);
  for (double EvalCost::*f : {&EvalCost::prompt_keys, &EvalCost::full_keys, &EvalCost::run_keys, &EvalCost::window_keys,
                              &EvalCost::run_layers, &EvalCost::features})
    c.*f = layer.*f * L;
  // every weight but the embedding (read by rows, never packed); tied: lm_head is the embedding
  c.weights = static_cast<double>(model_parameter_count(cfg)) -
              (cfg.tie_word_embeddings ? 0.0 : static_cast<double>(a.vocab_size) * static_cast<double>(a.hidden_size));
  return c;
}

}  // namespace mla

// ---- the rates ---------------------------------------------------------------------------------

namespace mla {
namespace {

// Pseudo-random values in [-1, 1) as a run of `precision` holds them (the probes' operands).
std::vector<float> probe_values(int64_t count, uint64_t seed, Precision precision) {
  std::vector<float> v(idx(count));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    f = static_cast<float>(static_cast<double>(x >> 11) * 0x1p-52 - 1.0);
    f = cpu::rounded(precision, f);
  }
  return v;
}

// The middle of three values: a probe's rate on a machine shared with other work is the one it
// meets most of the time, neither the quiet moment nor the interruption.
double median3(double a, double b, double c) { return std::max(std::min(a, b), std::min(std::max(a, b), c)); }

// FLOP/s of the fixed-order engine on [rows, H] x [H, H]^T (rows: about 1 GFLOP, at least 64), the
// median of 3.
}  // namespace

double measure_gemm_rate(int64_t hidden_size, Precision precision, int threads) {
  const int64_t H = std::max<int64_t>(hidden_size, 64);
  const int64_t rows = std::clamp<int64_t>(static_cast<int64_t>(5e8 / static_cast<double>(H * H)), 64, 8192);
  const std::vector<float> w = probe_values(H * H, 1, precision), x = probe_values(rows * H, 2, precision);
  const cpu::FixedOrderLinear linear(w.data(), H, H, nullptr, precision, threads);
  std::vector<float> y(idx(rows * H));
  double s[3];
  for (double& t : s) {
    const auto t0 = Clock::now();
    linear.run_rows(x.data(), rows, H, y.data(), H, threads);
    t = seconds_since(t0);
  }
  return 2.0 * static_cast<double>(rows) * static_cast<double>(H * H) / median3(s[0], s[1], s[2]);
}

namespace {

// Where a probe row's keys lie, like eval's: a layer's store holds the prompt's P positions,
// shared by every run, then each of R runs' N decode positions (at most 128 MiB of them kept); a
// row attends m keys, the prompt's share P / (P + N) spread over the prompt, the rest over its
// run's decode positions, and the rows go through the runs in turn.
struct ProbeStore {
  int64_t P, N, R, m;
  int64_t positions() const { return P + R * N; }
  void row_positions(int64_t row, std::vector<int64_t>& out) const {
    const int64_t from_prompt = std::clamp<int64_t>(m * P / (P + N), 1, std::min(m, P)), from_run = m - from_prompt;
    out.clear();
    for (int64_t j = 0; j < from_prompt; ++j) out.push_back(j * P / from_prompt);
    const int64_t run0 = P + (row % R) * N;
    for (int64_t j = 0; j < from_run; ++j) out.push_back(run0 + j * N / std::max<int64_t>(from_run, 1));
  }
};

ProbeStore probe_store(const AttentionConfig& a, const EvalOptions& opt, int64_t runs, int64_t m) {
  const int64_t bytes = a.num_attention_heads * (a.qk_head_dim() + a.v_head_dim) * 4;
  const int64_t P = opt.prompt_len, N = std::min(opt.steps, std::max<int64_t>(m, 1));
  const int64_t R = std::clamp<int64_t>(((int64_t{128} << 20) / bytes - P) / std::max<int64_t>(N, 1), 1, std::max<int64_t>(runs, 1));
  return {P, N, R, std::min(m, P + N)};
}

// Seconds per (row, key) of cpu::attend_row at the model's widths over a ProbeStore's keys,
// `workers` rows at once, the median of 3.
double key_seconds(const AttentionConfig& a, Precision precision, const ProbeStore& store, int workers) {
  const int64_t n = a.num_attention_heads, d_qk = a.qk_head_dim(), d_v = a.v_head_dim, S = store.positions();
  cpu::RowKeys keys;
  keys.reset(n, a.qk_nope_head_dim, a.qk_rope_head_dim, d_v, 0, S, precision);
  keys.key.set_rows(0, S, probe_values(S * d_qk * n, 3, precision).data(), d_qk * n);
  keys.value.set_rows(0, S, probe_values(S * n * d_v, 4, precision).data(), n * d_v);
  const std::vector<float> query = probe_values(n * d_qk, 5, precision);
  const int64_t m = store.m;
  const int64_t rows = std::clamp<int64_t>(static_cast<int64_t>(2e7 / static_cast<double>(m * n * (d_qk + d_v))), 2, 64);
  const cpu::RowAttentionSpec spec{static_cast<float>(softmax_scale(a)), precision};
  std::vector<std::vector<float>> probs(idx(workers), std::vector<float>(idx(n * m))),
      ctx(idx(workers), std::vector<float>(idx(n * d_v)));
  std::vector<cpu::RowScratch> scratch(idx(workers));
  double s[3];
  for (int r = 0; r < 3; ++r) {
    const auto t0 = Clock::now();
    cpu::parallel_for(workers, workers, [&](int64_t w, int) {
      std::vector<int64_t> positions;
      for (int64_t row = 0; row < rows; ++row) {
        store.row_positions(row * workers + w, positions);
        cpu::attend_row(spec, query.data(), cpu::KeyView{&keys, nullptr, S}, positions, probs[idx(w)].data(),
                        ctx[idx(w)].data(), scratch[idx(w)]);
      }
    });
    s[r] = seconds_since(t0) / static_cast<double>(rows * workers * m);
  }
  return median3(s[0], s[1], s[2]);
}

// The step loop's attention replaced by uniform probabilities: what is left is the policies' work.
class UniformAttention final : public StepAttention {
 public:
  explicit UniformAttention(int64_t heads) : n_(heads) {}
  void full(int64_t x, std::vector<double>& probs) override { probs.assign(idx(n_ * (x + 1)), 1.0 / static_cast<double>(x + 1)); }
  void attend(size_t, int64_t, std::span<const int64_t> cache, std::vector<double>& probs, int) override {
    probs.assign(idx(n_) * cache.size(), 1.0 / static_cast<double>(cache.size()));
  }

 private:
  int64_t n_;
};

// The job's policies (each once, at the smallest budget, layer 0) on synthetic prompt attention:
// run_prefill = seconds per manager reading the prompt; step_key = seconds per (run, key) of up
// to 16 steps of the step loop on `threads`. One trial.
void policy_trial(const ModelConfig& cfg, const EvalOptions& opt, int threads, EvalRates& r) {
  const int64_t P = opt.prompt_len, N = opt.steps, n = cfg.attention.num_attention_heads;
  const int64_t K = *std::min_element(opt.budgets.begin(), opt.budgets.end());
  TokenFeatures features;  // zeros: the features' values do not change the policies' work
  features.heads = n;
  features.tokens = P + N;
  for (std::vector<double>* v : {&features.key_norm, &features.value_norm, &features.output_norm,
                                 &features.expected_attention, &features.key_diff, &features.lagkv, &features.reconstruction})
    v->assign(idx(n * (P + N)), 1.0);
  features.leverage.assign(idx(P + N), 1.0);  // one per latent row
  PolicyContext ctx{n, P, P + N, &features, opt.compress == Compression::Decode};
  std::vector<std::unique_ptr<CacheManager>> managers;
  std::vector<double> head_mass(idx(n * P));
  for (int64_t i = 0; i < n * P; ++i) head_mass[idx(i)] = static_cast<double>((i * 7919) % 1009);
  const auto t0 = Clock::now();
  for (const PolicySettings& s : opt.policies) {
    if (policy_is_full_cache(s)) continue;
    managers.push_back(make_cache_manager(s, layer_budget(s, K, 0, cfg.attention.num_hidden_layers, P), ctx));
    std::vector<std::vector<double>> window;  // alive until prefill() returns
    for (int64_t q = P - std::min(managers.back()->observation_window(), P); q < P; ++q) {
      window.emplace_back(idx(n * (q + 1)), 1.0 / static_cast<double>(q + 1));
      managers.back()->observe_prompt_query(q, window.back());
    }
    managers.back()->prefill(head_mass);
  }
  if (managers.empty()) return;
  r.run_prefill = seconds_since(t0) / static_cast<double>(managers.size());
  std::vector<CacheManager*> loop;
  for (const auto& m : managers) loop.push_back(m.get());
  UniformAttention attention(n);
  StepLoopOptions so;
  so.prompt_len = P;
  so.steps = std::min<int64_t>(N, 16);
  so.heads = n;
  so.threads = threads;
  const auto t1 = Clock::now();
  const std::vector<std::vector<StepFigures>> figures = run_steps(loop, attention, so);
  const double s = seconds_since(t1);
  double keys = 0;
  for (const auto& run : figures)
    for (const StepFigures& f : run) keys += static_cast<double>(f.cache_len);
  r.step_key = keys > 0 ? s / keys : 0;
}

// policy_trial's rates, the median of 3 trials.
void policy_seconds(const ModelConfig& cfg, const EvalOptions& opt, int threads, EvalRates& r) {
  EvalRates t[3];
  for (EvalRates& one : t) policy_trial(cfg, opt, threads, one);
  r.run_prefill = median3(t[0].run_prefill, t[1].run_prefill, t[2].run_prefill);
  r.step_key = median3(t[0].step_key, t[1].step_key, t[2].step_key);
}

// Seconds per weight element of the loader's pass (bf16 bits to fp32 in fresh memory, finite
// check) and the fixed-order packing, on `threads`; and per INT4 element of the dequantization.
// One trial.
void weight_trial(Precision precision, int threads, EvalRates& r) {
  constexpr int64_t kOut = 1024, kIn = 2048, kCount = kOut * kIn;
  const std::vector<float> source = probe_values(kCount, 6, Precision::BF16);
  std::vector<uint16_t> bits(idx(kCount));
  for (int64_t i = 0; i < kCount; ++i) bits[idx(i)] = bf16::round_bits(source[idx(i)]);
  const auto t0 = Clock::now();
  const auto w = std::make_unique_for_overwrite<float[]>(idx(kCount));
  constexpr int64_t kChunk = 1 << 16;
  cpu::parallel_for(kCount / kChunk, threads, [&](int64_t c, int) {
    for (int64_t i = c * kChunk; i < (c + 1) * kChunk; ++i) {
      w[idx(i)] = bf16::from_bits(bits[idx(i)]).to_float();
      if (!std::isfinite(w[idx(i)])) w[idx(i)] = 0;
    }
  });
  const cpu::FixedOrderLinear packed(w.get(), kOut, kIn, nullptr, precision, threads);
  r.weight = seconds_since(t0) / static_cast<double>(kCount);
  // INT4: [kOut, kIn] in groups of 32 (compressed-tensors' layout, mla/int4.hpp)
  const int int4_group = 32;
  const std::vector<std::byte> packed_codes(idx(kCount / 2), std::byte{0x5A});
  const std::vector<float> scale(idx(kCount / int4_group), 0.01f);
  std::vector<float> out(idx(kCount));
  const auto t1 = Clock::now();
  int4::dequantize(packed_codes, scale, DType::BF16, kOut, kIn, int4_group, out);
  for (const float v : out)
    if (!std::isfinite(v)) return;
  r.int4_weight = seconds_since(t1) / static_cast<double>(kCount);
}

// weight_trial's rates, the median of 3 trials.
void weight_seconds(Precision precision, int threads, EvalRates& r) {
  EvalRates t[3];
  for (EvalRates& one : t) weight_trial(precision, threads, one);
  r.weight = median3(t[0].weight, t[1].weight, t[2].weight);
  r.int4_weight = median3(t[0].int4_weight, t[1].int4_weight, t[2].int4_weight);
}

}  // namespace

EvalRates measure_eval_rates(const ModelConfig& cfg, const EvalOptions& opt, int threads) {
  const AttentionConfig& a = cfg.attention;
  EvalRates r;
  r.threads = cpu::resolve_threads(threads);
  r.gemm = measure_gemm_rate(a.hidden_size, opt.precision, r.threads);
  // the keys of a typical decode row
  const EvalCost c = eval_cost(cfg, opt);
  const double rows = static_cast<double>(c.runs * opt.steps * a.num_hidden_layers);
  const int64_t m = std::clamp<int64_t>(static_cast<int64_t>((c.full_keys + c.run_keys) / std::max(rows, 1.0)), 16, 8192);
  const ProbeStore store = probe_store(a, opt, c.runs, m);
  r.key_alone = key_seconds(a, opt.precision, store, 1);
  r.key_parallel = key_seconds(a, opt.precision, store, r.threads);
  policy_seconds(cfg, opt, r.threads, r);
  weight_seconds(opt.precision, r.threads, r);
  return r;
}

EvalCost& EvalCost::operator+=(const EvalCost& o) {
  for (double EvalCost::*f : {&EvalCost::linear, &EvalCost::attention, &EvalCost::head, &EvalCost::prompt_keys,
                              &EvalCost::full_keys, &EvalCost::run_keys, &EvalCost::window_keys, &EvalCost::run_layers,
                              &EvalCost::features, &EvalCost::weights, &EvalCost::int4_weights})
    this->*f += o.*f;
  runs += o.runs;
  rows_per_layer += o.rows_per_layer;
  return *this;
}

EvalTime eval_time(const EvalCost& c, const EvalRates& r, int64_t workers) {
  EvalTime t;
  t.products = r.gemm > 0 ? (c.linear + c.head + c.features) / r.gemm : 0;
  // the prompt rows and the runs side by side, the full run's row on every worker (its heads
  // split); the windowed policies' prompt queries one at a time
  t.attention = (c.prompt_keys + c.run_keys + c.full_keys) * r.key_parallel + c.window_keys * r.key_alone;
  t.policies = c.run_keys * r.step_key + c.run_layers * r.run_prefill;
  t.loading = c.weights * r.weight + c.int4_weights * r.int4_weight;
  for (double EvalTime::*f : {&EvalTime::products, &EvalTime::attention, &EvalTime::policies, &EvalTime::loading})
    t.*f /= static_cast<double>(std::max<int64_t>(workers, 1));
  return t;
}

namespace {

std::string duration_text(double seconds) {
  char text[64];
  if (seconds < 120) std::snprintf(text, sizeof text, "%.0f s", seconds);
  else if (seconds < 7200) std::snprintf(text, sizeof text, "%.1f min", seconds / 60);
  else std::snprintf(text, sizeof text, "%.1f h", seconds / 3600);
  return text;
}

}  // namespace

std::string eval_cost_line(const EvalCost& c, const EvalTime& t, const EvalRates& r) {
  char text[512];
  std::snprintf(text, sizeof text,
                "%.3g TFLOP (linear %.3g, attention %.3g, lm_head %.3g): about %s (products %s at the %.0f GFLOP/s "
                "this machine's fixed-order kernels measure, attention %s, policies %s, loading the layers %s)",
                c.total() / 1e12, c.linear / 1e12, c.attention / 1e12, c.head / 1e12, duration_text(t.total()).c_str(),
                duration_text(t.products).c_str(), r.gemm / 1e9, duration_text(t.attention).c_str(),
                duration_text(t.policies).c_str(), duration_text(t.loading).c_str());
  return text;
}

}  // namespace mla
