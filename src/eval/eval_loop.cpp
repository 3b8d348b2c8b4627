// src/eval/eval_loop.cpp — `mla-h2o eval`'s computation (mla/eval.hpp, docs/eval.md): every
// (policy, budget) run decodes N teacher-forced positions with every layer's cache managed by
// the policy, layer by layer over all positions.
//
// For each layer L (its tensors read, prepared, used, freed; the sweep rule), two passes through
// the one layer composition (decoder::layer_forward):
//   1. the prompt rows [0, P): the causal forward, shared by every run (prefill_layer); with kvzip,
//      then its repeat of the context (each chunk's own rows, reconstruction_layer): its scores
//   2. the decode rows [P, T) of every run stacked, R x N rows through the layer together (the
//      projections and o_proj by chunks of 4096 rows, the MLP/MoE as one product each, the MoE
//      grouping the rows of every run by expert), with the keys and attention plugged in:
//      a. each run's keys from its rows, chunk by chunk; once all are stored, its manager reads
//         the prompt (observation window, prefill cut)
//      b. the steps x = P .. T-1 in order, every run at step x (runs in parallel), by the one step
//         loop (mla/step_loop.hpp): the full run attends [0, x]; a policy run attends the cache
//         its manager gives, which then evicts
//      c. each run's attention output against the full run's
// then the final norm and lm_head of every run's rows, and the metrics against the full run.
// Every sum is a fixed-order fma chain (src/cpu/fixed_order.hpp): this order of computation gives
// the bits of any other, which the suite `eval` checks against a token-by-token loop.
//
// Shape legend: T tokens, P prompt rows, N steps, H hidden_size, V vocab_size, n heads, d_v,
//   L layers, R runs.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "eval_layer.hpp"
#include "mla/error.hpp"
#include "mla/eval.hpp"
#include "mla/model_forward.hpp"
#include "mla/stats.hpp"
#include "mla/step_loop.hpp"
#include "src/cpu/cpu_kernels.hpp"

namespace mla {
namespace {

size_t idx(int64_t i) { return static_cast<size_t>(i); }

using eval::MatrixRM;

// One (policy, budget) run, or the full cache. Its decode rows are rows [row0, row0 + N) of
// DecodeRows.
struct RunState {
  PolicySettings policy;
  int64_t budget = 0;
  bool full = false;
  int64_t row0 = 0;
  std::vector<EvalLayer> layers;               // [L]
  // this layer:
  std::unique_ptr<CacheManager> manager;
  TokenFeatures features;                      // what the policy reads besides the attention
  cpu::RowKeys keys;                           // positions [P, T)
  std::vector<double> recall;                  // [N] mass recall per step
  std::vector<int64_t> cache_len, held;        // [N]
};

// The decode rows of every run, stacked in run order (R runs x N rows).
struct DecodeRows {
  MatrixRM h;    // [R*N, H] residual stream
  // this layer:
  MatrixRM q;       // [R*N, n*d_qk] query_states (rope applied)
  MatrixRM ctx;     // [R*N, n*d_v]  attention context
  MatrixRM latent;  // [R*N, r_kv + d_r] latent cache rows
};

// A non-finite value is never a result (issue 29: a layer whose kv_b_proj overflowed gave mean NLL
// nan and top-1 1.0 with exit status 0): one line naming the first layer, tensor and run where it
// appeared.
void check_finite(const Eigen::Ref<const MatrixRM>& m, const std::string& what, int64_t first_position) {
  for (int64_t r = 0; r < m.rows(); ++r)
    for (int64_t c = 0; c < m.cols(); ++c) {
      const float v = m(r, c);
      if (std::isfinite(v)) continue;
      fail(ErrorKind::InvalidValue, what + " is " + (std::isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf") + " at position " +
                                        std::to_string(first_position + r) + ", column " + std::to_string(c) +
                                        " (overflow in fp32 arithmetic: weights or activations out of range)");
    }
}

std::string run_name(const PolicySettings& policy, int64_t budget, bool full) {
  return full ? std::string("the full cache") : policy.label + " at K = " + std::to_string(budget);
}

// ||a_row - b_row|| / ||b_row|| (0 when both are 0): mla/stats.hpp's row_deviation
double rel_error(const float* a, const float* b, int64_t n) { return row_deviation(a, b, n).rel_error; }

// log-softmax of one row of logits, in double: out[v] = l[v] - logsumexp(l)
void log_softmax(const float* l, int64_t V, std::vector<double>& out) {
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < V; ++v) max = std::max(max, static_cast<double>(l[v]));
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(l[v]) - max);
  const double lse = max + std::log(sum);
  out.resize(idx(V));
  for (int64_t v = 0; v < V; ++v) out[idx(v)] = static_cast<double>(l[v]) - lse;
}

int64_t argmax(const float* l, int64_t V) {
  int64_t best = 0;
  for (int64_t v = 1; v < V; ++v)
    if (l[v] > l[best]) best = v;
  return best;
}

// Zero features of the right size: what a manager's constructor checks (its budget, the features it
// needs) before the real ones exist.
TokenFeatures placeholder_features(int64_t heads, int64_t positions) {
  TokenFeatures f;
  f.heads = heads;
  f.tokens = positions;
  for (std::vector<double>* v : {&f.key_norm, &f.value_norm, &f.output_norm, &f.expected_attention, &f.key_diff, &f.lagkv,
                                 &f.reconstruction})
    v->assign(idx(heads * positions), 0.0);
  f.leverage.assign(idx(positions), 0.0);  // one per latent row
  return f;
}

TensorF to_tensor(const std::string& name, const MatrixRM& m) {
  TensorF t(name, {m.rows(), m.cols()});
  std::copy(m.data(), m.data() + m.size(), t.data.begin());
  return t;
}

// eval's attention for the step loop: every run's own query row against the prompt's keys and
// its own decode keys (cpu::attend_row, fixed-order sums); the full run is runs[0], run k of the
// loop is runs[k + 1]. Each worker has its own scratch.
class RowSteps final : public StepAttention {
 public:
  RowSteps(const decoder::PreparedLayer& layer, const eval::PromptLayer& prompt, std::vector<RunState>& runs,
           DecodeRows& rows, int threads)
      : layer_(layer), prompt_(prompt), runs_(runs), rows_(rows), scratch_(idx(threads)), rowp_(idx(threads)) {}
  void begin_position(int64_t x) override {  // every token [0, x], shared by the full run and the oracle
    all_.resize(idx(x + 1));
    std::iota(all_.begin(), all_.end(), 0);
  }
  // the full run's row, alone at this point of the step, with its heads split over the workers
  void full(int64_t x, std::vector<double>& probs) override {
    const int64_t P = prompt_.keys.rows, n = layer_.config().attention.num_attention_heads;
    std::vector<float>& p = rowp_[0];
    p.resize(idx(n) * all_.size());
    cpu::attend_row_split(layer_.attention_spec(), static_cast<int>(scratch_.size()),
                          rows_.q.data() + row_of(runs_[0], x) * rows_.q.cols(),
                          cpu::KeyView{&prompt_.keys, &runs_[0].keys, P}, all_, p.data(), ctx_row(runs_[0], x), scratch_);
    probs.assign(p.begin(), p.end());
  }
  std::span<const double> own_full(size_t run, int64_t x, std::span<const double>, int worker,
                                   std::vector<double>& out) override {
    RunState& r = runs_[run + 1];
    std::vector<float> unused(idx(rows_.ctx.cols()));
    row(r, x, all_, unused.data(), worker, out);
    return out;
  }
  void attend(size_t run, int64_t x, std::span<const int64_t> cache, std::vector<double>& probs, int worker) override {
    RunState& r = runs_[run + 1];
    row(r, x, cache, ctx_row(r, x), worker, probs);
  }

 private:
  // the stacked row of run r at position x
  int64_t row_of(const RunState& r, int64_t x) const { return r.row0 + x - prompt_.keys.rows; }
  float* ctx_row(const RunState& r, int64_t x) { return rows_.ctx.data() + row_of(r, x) * rows_.ctx.cols(); }
  // query row x of run r over `cache` -> probs [n, |cache|] (fp32 values widened), context row -> ctx
  void row(RunState& r, int64_t x, std::span<const int64_t> cache, float* ctx, int worker, std::vector<double>& probs) {
    const int64_t P = prompt_.keys.rows, n = layer_.config().attention.num_attention_heads;
    std::vector<float>& p = rowp_[idx(worker)];
    p.resize(idx(n) * cache.size());
    cpu::attend_row(layer_.attention_spec(), rows_.q.data() + row_of(r, x) * rows_.q.cols(),
                    cpu::KeyView{&prompt_.keys, &r.keys, P}, cache, p.data(), ctx, scratch_[idx(worker)]);
    probs.assign(p.begin(), p.end());
  }
  const decoder::PreparedLayer& layer_;
  const eval::PromptLayer& prompt_;
  std::vector<RunState>& runs_;
  DecodeRows& rows_;
  std::vector<cpu::RowScratch> scratch_;
  std::vector<std::vector<float>> rowp_;  // [worker] fp32 probabilities
  std::vector<int64_t> all_;              // [x+1] positions 0 .. x of this step
};

}  // namespace

const char* compression_name(Compression c) { return c == Compression::Prefill ? "prefill" : "decode"; }

void check_eval_options(const EvalOptions& opt, int64_t tokens, int64_t num_layers) {
  const auto bad = [](const std::string& what) { fail(ErrorKind::InvalidArgument, what); };
  if (opt.prompt_len < 1) bad("--prompt-len " + std::to_string(opt.prompt_len) + " must be >= 1");
  if (opt.steps < 1) bad("--steps " + std::to_string(opt.steps) + " must be >= 1");
  if (opt.prompt_len > tokens || opt.steps > tokens - opt.prompt_len - 1)
    bad("--prompt-len " + std::to_string(opt.prompt_len) + " + --steps " + std::to_string(opt.steps) + " needs " +
        std::to_string(opt.prompt_len) + " + " + std::to_string(opt.steps) +
        " + 1 tokens (each decoded position predicts the next one), but the input has " + std::to_string(tokens));
  check_budgets_and_policies(opt.budgets, opt.policies);
  // every (policy, budget, layer) must leave room after what the policy protects: the managers say
  PolicyContext ctx;
  ctx.heads = 1;
  ctx.prompt_len = opt.prompt_len;
  ctx.positions = opt.prompt_len + opt.steps;
  const TokenFeatures none = placeholder_features(ctx.heads, ctx.positions);
  ctx.features = &none;
  for (const PolicySettings& s : opt.policies)
    for (int64_t K : opt.budgets)
      for (int64_t L = 0; L < num_layers; ++L)
        (void)make_cache_manager(s, layer_budget(s, K, L, num_layers, opt.prompt_len), ctx);
}

// The runs: full first, then per budget, per policy other than full.
std::vector<RunState> make_runs(const EvalOptions& opt) {
  std::vector<RunState> runs;
  RunState full;
  full.policy = policy_preset("full");
  full.full = true;
  runs.push_back(std::move(full));
  for (const PolicyRun& pr : policy_runs(opt.budgets, opt.policies)) {
    RunState r;
    r.policy = opt.policies[pr.policy];
    r.budget = pr.budget;
    r.row0 = static_cast<int64_t>(runs.size()) * opt.steps;
    runs.push_back(std::move(r));
  }
  return runs;
}

// What every phase of one layer reads.
struct LayerPass {
  decoder::PreparedLayer& layer;
  const eval::PromptLayer& prompt;
  const LayerWeights& attention;  // fp32 attention weights for the token features
  const EvalOptions& opt;
  int64_t L, L_count, threads;
  StageSeconds& stages;  // summed over the layers (add_seconds)
};

// 2a. every run's keys from the stacked rows [r0, r0 + rows) of a projected chunk (kv, k_pe_roped)
void store_run_keys(const LayerPass& lp, std::vector<RunState>& runs, int64_t r0, int64_t rows, const MatrixRM& kv,
                    const MatrixRM& k_pe_roped) {
  const AttentionConfig& a = lp.layer.config().attention;
  const int64_t P = lp.opt.prompt_len, N = lp.opt.steps;
  for (RunState& r : runs) {
    const int64_t s0 = std::max(r0, r.row0), s1 = std::min(r0 + rows, r.row0 + N);  // its rows in the chunk
    if (s1 <= s0) continue;
    if (s0 == r.row0) r.keys.reset(a.num_attention_heads, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim, P, N,
                                    lp.layer.precision());
    r.keys.set_rows(P + s0 - r.row0, s1 - s0, kv.data() + (s0 - r0) * kv.cols(), kv.cols(),
                    k_pe_roped.data() + (s0 - r0) * k_pe_roped.cols(), k_pe_roped.cols());
  }
}

// 2a. every run's manager (with the run's own token features, from its rows of the stacked latent
// cache rows) reads the prompt
void start_runs(const LayerPass& lp, std::vector<RunState>& runs, const MatrixRM& latent) {
  const AttentionConfig& a = lp.layer.config().attention;
  const int64_t P = lp.opt.prompt_len, N = lp.opt.steps, n = a.num_attention_heads;
  for (RunState& r : runs) {
    r.recall.assign(idx(N), 1.0);
    r.cache_len.assign(idx(N), 0);
    r.held.assign(idx(N), 0);
    if (r.full) continue;
    // only what this run's policy reads (the union over every run would make each run compute
    // every other policy's features: 3.5x the work with the 14 presets)
    r.features = eval::run_features(a, lp.attention, lp.prompt, latent.middleRows(r.row0, N), feature_needs({r.policy}),
                                    static_cast<int>(lp.threads));
    PolicyContext pctx;
    pctx.heads = n;
    pctx.prompt_len = P;
    pctx.positions = P + N;
    pctx.features = &r.features;
    pctx.evict_while_decoding = lp.opt.compress == Compression::Decode;
    r.manager = make_cache_manager(r.policy, layer_budget(r.policy, r.budget, lp.L, lp.L_count, P), pctx);
    eval::prefill_manager(*r.manager, lp.layer, lp.prompt);
  }
}

// 2b. the steps, every run at step x (the one step loop, mla/step_loop.hpp) -> rows.ctx
void step_runs(const LayerPass& lp, std::vector<RunState>& runs, DecodeRows& rows) {
  const int64_t P = lp.opt.prompt_len, N = lp.opt.steps;
  RowSteps steps(lp.layer, lp.prompt, runs, rows, static_cast<int>(lp.threads));
  std::vector<CacheManager*> managers;
  for (size_t k = 1; k < runs.size(); ++k) managers.push_back(runs[k].manager.get());
  StepLoopOptions so;
  so.prompt_len = P;
  so.steps = N;
  so.heads = lp.layer.config().attention.num_attention_heads;
  so.threads = static_cast<int>(lp.threads);
  if (lp.opt.progress) so.progress = [&](int64_t done, int64_t total) { lp.opt.progress("decode steps", done, total); };
  const std::vector<std::vector<StepFigures>> figures = run_steps(managers, steps, so);
  for (int64_t i = 0; i < N; ++i) {
    runs[0].cache_len[idx(i)] = runs[0].held[idx(i)] = P + i + 1;
    for (size_t k = 1; k < runs.size(); ++k) {
      const StepFigures& f = figures[k - 1][idx(i)];
      runs[k].recall[idx(i)] = f.mass_recall;
      runs[k].cache_len[idx(i)] = f.cache_len;
      runs[k].held[idx(i)] = f.held;
    }
  }
}

// 2c. every run's attention output rows (attn [R*N, H]) against the full run's at this layer
void attention_errors(const LayerPass& lp, std::vector<RunState>& runs, const MatrixRM& attn) {
  const int64_t P = lp.opt.prompt_len, N = lp.opt.steps, H = attn.cols(), L = lp.L;
  const float* full_attn = attn.data();  // the full run's rows come first
  for (RunState& r : runs) {
    const float* own = attn.data() + r.row0 * H;
    check_finite(attn.middleRows(r.row0, N), "layer " + std::to_string(L) + " self_attn output (" + run_name(r.policy, r.budget, r.full) + ")", P);
    EvalLayer st;
    st.layer = L;
    st.budget = r.full ? 0 : layer_budget(r.policy, r.budget, L, lp.L_count, P);
    double attn_err = 0, max_err = 0;
    st.mean_mass_recall = 0;
    for (int64_t i = 0; i < N; ++i) {
      const double e = r.full ? 0.0 : rel_error(own + i * H, full_attn + i * H, H);
      attn_err += e;
      max_err = std::max(max_err, e);
      st.mean_cache_len += static_cast<double>(r.cache_len[idx(i)]);
      st.mean_held += static_cast<double>(r.held[idx(i)]);
      st.mean_mass_recall += r.recall[idx(i)];
      st.min_mass_recall = std::min(st.min_mass_recall, r.recall[idx(i)]);
    }
    st.mean_attn_rel_error = attn_err / static_cast<double>(N);
    st.max_attn_rel_error = max_err;
    st.mean_cache_len /= static_cast<double>(N);
    st.mean_held /= static_cast<double>(N);
    st.mean_mass_recall /= static_cast<double>(N);
    r.layers.push_back(st);
  }
}

// 3. every run's layer output (rows.h after the layer) against the full run's; this layer's state freed
void finish_layer(const LayerPass& lp, std::vector<RunState>& runs, const MatrixRM& h) {
  const int64_t P = lp.opt.prompt_len, N = lp.opt.steps, H = h.cols(), L = lp.L;
  for (RunState& r : runs) {
    check_finite(h.middleRows(r.row0, N), "layer " + std::to_string(L) + " output (" + run_name(r.policy, r.budget, r.full) + ")", P);
    double hidden_err = 0;
    for (int64_t i = 0; i < N && !r.full; ++i) hidden_err += rel_error(h.data() + (r.row0 + i) * H, h.data() + i * H, H);
    r.layers.back().mean_hidden_rel_error = hidden_err / static_cast<double>(N);
    r.manager.reset();
    r.features = TokenFeatures();
    r.keys = cpu::RowKeys();
  }
}

// 2, 3: the decode rows of every run through the layer (decoder::layer_forward) with eval's keys
// (each run's own) and attention (the step loop) plugged in
void decode_layer(const LayerPass& lp, std::vector<RunState>& runs, DecodeRows& rows) {
  const AttentionConfig& a = lp.layer.config().attention;
  const int64_t P = lp.opt.prompt_len, N = lp.opt.steps, R = static_cast<int64_t>(runs.size());
  std::vector<int64_t> positions(idx(R * N));  // each run's rows at P .. T-1
  for (int64_t i = 0; i < R * N; ++i) positions[idx(i)] = P + i % N;
  rows.latent.resize(R * N, a.kv_lora_rank + a.qk_rope_head_dim);
  decoder::LayerPlugs plugs;
  plugs.attention.keys = [&](int64_t r0, int64_t count, const cpu::KvPath& kvp, const MatrixRM& k_pe_roped) {
    store_run_keys(lp, runs, r0, count, kvp.kv, k_pe_roped);
  };
  plugs.attention.latent = cpu::latent_cache_into(rows.latent);
  plugs.attention.keys_stored = [&] {
    StageRunner(lp.stages)("decode rows: runs' prompt caches and features", [&] { start_runs(lp, runs, rows.latent); });
  };
  plugs.attention.pass_rows = R * N;  // one pass: the steps go position by position through every run
  plugs.attention.attend = [&](const MatrixRM& q, int64_t, MatrixRM& ctx) {  // (timed as "decode rows: attention")
    rows.q = q;
    rows.ctx = std::move(ctx);
    step_runs(lp, runs, rows);
    ctx = std::move(rows.ctx);
    rows.q = MatrixRM();
  };
  plugs.attn_output = [&](const MatrixRM& attn) {
    StageRunner(lp.stages)("decode rows: attention errors", [&] { attention_errors(lp, runs, attn); });
  };
  plugs.stages = &lp.stages;
  plugs.stage_prefix = "decode rows";
  decoder::layer_forward(lp.layer, rows.h, positions, plugs);
  StageRunner(lp.stages)("decode rows: layer records", [&] { finish_layer(lp, runs, rows.h); });
}

// The final norm and lm_head of every run's rows; NLL, KL and top-1 against the full run.
void head_and_metrics(const Checkpoint& ckpt, const ModelConfig& cfg, const std::vector<int64_t>& tokens,
                      const EvalOptions& opt, int threads, const MatrixRM& h_prompt, std::vector<RunState>& runs,
                      DecodeRows& rows, EvalResult& result) {
  const int64_t P = opt.prompt_len, N = opt.steps, H = cfg.attention.hidden_size, L_count = cfg.attention.num_hidden_layers;
  // ---- logits and metrics ----
  StageTimer head_timer(result.stage_seconds, "head and metrics");
  const decoder::PreparedHead head(cfg, load_model_head(ckpt, cfg), opt.precision, threads);
  ckpt.release_mappings();
  const int64_t V = cfg.attention.vocab_size;
  const MatrixRM full_logits = head.logits(rows.h.topRows(N));  // [N, V]
  check_finite(full_logits, "logits (the full cache)", P);
  if (opt.keep_full_states) {
    MatrixRM all(P + N, H);
    all.topRows(P) = h_prompt;
    all.bottomRows(N) = rows.h.topRows(N);
    result.hidden_states.push_back(to_tensor("hidden_states." + std::to_string(L_count), all));
    MatrixRM logits(P + N, V);
    logits.topRows(P) = head.logits(h_prompt);
    logits.bottomRows(N) = full_logits;
    result.full_logits = to_tensor("logits", logits);
  }
  std::vector<std::vector<double>> full_logp(idx(N));
  std::vector<int64_t> full_top(idx(N));
  for (int64_t i = 0; i < N; ++i) {
    log_softmax(full_logits.data() + i * V, V, full_logp[idx(i)]);
    full_top[idx(i)] = argmax(full_logits.data() + i * V, V);
  }
  for (RunState& r : runs) {
    const MatrixRM logits = r.full ? full_logits : head.logits(rows.h.middleRows(r.row0, N));
    if (!r.full) check_finite(logits, "logits (" + run_name(r.policy, r.budget, r.full) + ")", P);
    EvalRun out;
    out.policy = r.policy;
    out.budget = r.budget;
    out.layers = std::move(r.layers);
    std::vector<double> logp;
    for (int64_t i = 0; i < N; ++i) {
      const int64_t x = P + i, target = tokens[idx(x + 1)];
      EvalPosition e;
      e.position = x;
      e.token = target;
      const float* l = logits.data() + i * V;
      log_softmax(l, V, logp);
      e.nll = -logp[idx(target)];
      if (!r.full) {
        double kl = 0;
        const std::vector<double>& fl = full_logp[idx(i)];
        for (int64_t v = 0; v < V; ++v) kl += std::exp(fl[idx(v)]) * (fl[idx(v)] - logp[idx(v)]);
        e.kl = kl;
      }
      const int64_t top = argmax(l, V);
      e.top1_agree = top == full_top[idx(i)];
      e.top1_correct = top == target;
      e.predicted = top;
      e.predicted_prob = std::exp(logp[idx(top)]);
      out.positions.push_back(e);
    }
    if (opt.keep_logits) out.logits = to_tensor("logits", logits);
    if (r.full) result.full = std::move(out);
    else result.runs.push_back(std::move(out));
  }
}

EvalResult run_eval(const Checkpoint& ckpt, const ModelConfig& cfg, const std::vector<int64_t>& tokens,
                    const EvalOptions& opt) {
  const AttentionConfig& a = cfg.attention;
  const int64_t T = static_cast<int64_t>(tokens.size()), P = opt.prompt_len, N = opt.steps;
  const int64_t L_count = a.num_hidden_layers, H = a.hidden_size;
  check_model_tensors(ckpt, cfg, "eval");
  check_eval_options(opt, T, L_count);
  const int threads = cpu::resolve_threads(opt.threads);
  EvalResult result;
  result.engine = cpu::fixed_order_engine_name(opt.precision);
  result.passkey = find_passkey(tokens, cfg);

  std::vector<RunState> runs = make_runs(opt);
  DecodeRows rows;

  // ---- embeddings: prompt rows shared, decode rows per run ----
  const std::vector<int64_t> prompt_ids(tokens.begin(), tokens.begin() + P), decode_ids(tokens.begin() + P, tokens.begin() + P + N);
  MatrixRM h_prompt = timed(result.stage_seconds, "embed", [&] { return decoder::embed(ckpt, prompt_ids, opt.precision); });
  {
    const MatrixRM h_decode = decoder::embed(ckpt, decode_ids, opt.precision);
    rows.h.resize(static_cast<int64_t>(runs.size()) * N, H);
    for (const RunState& r : runs) rows.h.middleRows(r.row0, N) = h_decode;
  }
  const FeatureNeeds needs = feature_needs(opt.policies);
  // kvzip: the context's repeat, chunk by chunk, its own residual stream through every layer
  std::vector<ReconstructionChunk> chunks;
  std::vector<MatrixRM> h_repeat;  // [chunks] of [R_c, H]
  if (needs.reconstruction) {
    chunks = reconstruction_chunks(P, opt.reconstruction_text);
    for (const ReconstructionChunk& c : chunks) {
      std::vector<int64_t> ids;
      for (int64_t r : c.rows) ids.push_back(r >= 0 ? tokens[idx(r)] : -(r + 1));
      h_repeat.push_back(decoder::embed(ckpt, ids, opt.precision));
    }
  }
  // expected-attention's future rotation depends on neither the layer nor the run: once
  std::vector<double> future_rotation = opt.future_rotation;
  if (needs.expected_attention && future_rotation.empty())
    future_rotation = mean_rope_rotation(a, P, needs.expected_future);
  decoder::LayerSettings settings;
  settings.precision = opt.precision;
  settings.threads = threads;
  settings.latent_norm_eps = opt.latent_norm_eps;
  std::vector<int64_t> decode_positions(idx(N));
  std::iota(decode_positions.begin(), decode_positions.end(), P);

  for (int64_t L = 0; L < L_count; ++L) {
    StageTimer layer_timer(result.stage_seconds, "layer " + std::to_string(L));
    if (opt.keep_full_states) {
      MatrixRM all(P + N, H);
      all.topRows(P) = h_prompt;
      all.bottomRows(N) = rows.h.topRows(N);
      result.hidden_states.push_back(to_tensor("hidden_states." + std::to_string(L), all));
    }
    std::unique_ptr<decoder::PreparedLayer> layer;
    LayerWeights attention;  // the fp32 attention weights the policies' token features read
    StageRunner(result.profile)("load + prepare", [&] {
      DecoderLayerWeights w = load_decoder_layer(ckpt, cfg, L, /*experts=*/true);
      layer = std::make_unique<decoder::PreparedLayer>(cfg, w, settings);
      if (needs.any()) attention = std::move(w.self_attn);
      ckpt.release_mappings();
    });

    // the policies' observation windows decide which prompt queries are kept
    const int64_t window = held_prompt_queries(opt.policies, P);
    // 1. the prompt
    eval::PromptLayer prompt = eval::prefill_layer(*layer, h_prompt, window, needs, &result.profile);
    if (needs.expected_attention) prompt.statistics.future_rotation = future_rotation;
    check_finite(h_prompt, "layer " + std::to_string(L) + " output (the prompt's hidden states)", 0);
    if (needs.reconstruction) {  // 1b. kvzip's repeat over this layer's prompt keys -> its scores
      prompt.reconstruction.heads = a.num_attention_heads;
      prompt.reconstruction.tokens = P + N;
      prompt.reconstruction.reconstruction.assign(idx(a.num_attention_heads * (P + N)), 0.0);
      for (size_t c = 0; c < chunks.size(); ++c) {
        eval::reconstruction_layer(*layer, prompt, chunks[c], h_repeat[c], &result.profile);
        check_finite(h_repeat[c], "layer " + std::to_string(L) + " output (kvzip's repeat of the context)", P);
      }
    }
    // 2, 3: the decode rows of every run through the layer
    const LayerPass lp{*layer, prompt, attention, opt, L, L_count, threads, result.profile};
    decode_layer(lp, runs, rows);
    layer.reset();
    if (opt.progress) opt.progress("layers", L + 1, L_count);
  }

  head_and_metrics(ckpt, cfg, tokens, opt, threads, h_prompt, runs, rows, result);
  return result;
}

}  // namespace mla
