// src/model/memory_plan.cpp — the memory plan of a forward (see mla/memory_plan.hpp and
// docs/long-context.md "Memory plan"). Every part below is a buffer of the code it names,
// sized from the geometry; keep them in step with src/cpu/eigen_backend.cpp,
// src/cpu/streaming_attention.cpp, reference/mla_reference.cpp, cuda/workspace_layout.hpp,
// src/cli/cmd_run.cpp and src/report/dump.cpp.
//
// Shape legend: S = tokens, H = hidden_size, n = heads, r_q = q_lora_rank, r_kv = kv_lora_rank,
// d_n / d_r / d_v = qk_nope / qk_rope / v head dims, d_qk = d_n + d_r, P = parameters.
#include "mla/memory_plan.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "cuda/workspace_layout.hpp"
#include "mla/error.hpp"
#include "src/cpu/cpu_kernels.hpp"

namespace mla {
namespace {

// The process itself: code, libraries, OpenBLAS's per-thread buffers, thread stacks, allocator
// slack. Measured on Kimi layer 0 (maxrss minus the buffers below): ~200 MiB at S = 1024,
// ~260 MiB at S = 32768; 320 MiB keeps the plan above the measured peak.
constexpr int64_t kProcessBytes = int64_t{320} << 20;
// cuBLAS workspace and context allowance on the device.
constexpr int64_t kCublasBytes = int64_t{256} << 20;

constexpr int64_t kF32 = 4, kF64 = 8;

struct Dims {
  int64_t S, H, n, r_q, r_kv, d_n, d_r, d_v, d_qk, P;
};

Dims dims_of(const AttentionConfig& c, int64_t S) {
  return {S, c.hidden_size, c.num_attention_heads, c.q_lora_rank, c.kv_lora_rank, c.qk_nope_head_dim,
          c.qk_rope_head_dim, c.v_head_dim, c.qk_nope_head_dim + c.qk_rope_head_dim, attention_parameter_count(c)};
}

// Saturating arithmetic: an absurd S must give "needs 10^18 bytes", not a wrapped number.
int64_t mul(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX / 4 : r;
}
int64_t mul(int64_t a, int64_t b, int64_t c) { return mul(mul(a, b), c); }
int64_t mul(int64_t a, int64_t b, int64_t c, int64_t d) { return mul(mul(a, b, c), d); }

// What execute_run (src/cli/cmd_run.cpp) holds through the whole forward.
std::vector<MemoryPart> held_by_cli(const Dims& d, const MemoryRequest& r) {
  std::vector<MemoryPart> p = {{"loaded weights (fp32)", mul(d.P, kF32)}, {"hidden_states input [S,H] f32", mul(d.S, d.H, kF32)}};
  if (r.tokens_input) p.push_back({"input_layernorm", mul(d.H, kF32)});
  return p;
}

// The ForwardResult and what the CLI builds from it (report, CSV) and, with a dump, the
// payloads write_tensor_dump holds until the file is written (F32: 4 bytes per value).
std::vector<MemoryPart> results(const Dims& d, const MemoryRequest& r, bool attn_weights) {
  std::vector<MemoryPart> p = {{"attn_output [S,H] f64", mul(d.S, d.H, kF64)},
                               {"head_scores + token_scores f64 (x2: report)", mul(2, d.n + 1, d.S, kF64)}};
  if (r.dump_tensors) {
    const int64_t states = mul(d.n, d.S, 2 * d.d_qk + d.d_v);
    p.push_back({"query/key/value_states f64", mul(states, kF64)});
    p.push_back({"dump payloads f32 (hidden, output, states)", mul(mul(2, d.S, d.H) + states, kF32)});
    p.push_back({"dump: hidden_states widened f64", mul(d.S, d.H, kF64)});
    if (attn_weights) {
      p.push_back({"attn_weights [n,S,S] f64", mul(d.n, d.S, d.S, kF64)});
      p.push_back({"dump payload attn_weights f32 (+ its narrowing copy)", mul(2, d.n, mul(d.S, d.S), kF32)});
    }
  }
  return p;
}

MemoryPhase phase(std::string name, std::vector<MemoryPart> base, std::vector<MemoryPart> more) {
  base.insert(base.end(), more.begin(), more.end());
  return {std::move(name), std::move(base)};
}

std::vector<MemoryPhase> cpu_phases(const Dims& d, const MemoryRequest& r, bool attn_weights) {
  const bool bf16 = r.precision == Precision::BF16;
  std::vector<MemoryPart> held = held_by_cli(d, r);
  held.push_back({"prepared weights (fp32 storage)", mul(d.P, kF32)});
  const MemoryPart x{"x [S,H] f32", mul(d.S, d.H, kF32)};
  const MemoryPart q{"q [S,n*d_qk] f32", mul(d.S, d.n, d.d_qk, kF32)};
  const MemoryPart q_a{"q_a + q_a_normed [S,r_q] f32", mul(2, d.S, d.r_q, kF32)};
  const MemoryPart ckv{"compressed_kv + latent_normed f32", mul(d.S, d.r_kv + d.d_r + d.r_kv, kF32)};
  const MemoryPart kv{"kv [S,n*(d_n+d_v)] f32", mul(d.S, d.n, d.d_n + d.d_v, kF32)};
  const MemoryPart ctx{"attn_context [S,n*d_v] f32", mul(d.S, d.n, d.d_v, kF32)};
  const MemoryPart k_pe{"k_pe_roped [S,d_r] f32", mul(d.S, d.d_r, kF32)};
  const MemoryPart heads{"head_scores [n,S] f64", mul(d.n, d.S, kF64)};
  const MemoryPart out{"o_proj output [S,H] f32", mul(d.S, d.H, kF32)};
  const MemoryPart output{"attn_output [S,H] f64", mul(d.S, d.H, kF64)};
  std::vector<MemoryPhase> ph;
  ph.push_back(phase("q_path", held, {x, q_a, q}));
  ph.push_back(phase("kv_path", held, {x, q, ckv, kv}));
  const MemoryPart states{std::string("keys/values ") + (bf16 ? "bf16" : "f32"),
                          mul(d.S, d.n * (d.d_n + d.d_v) + d.d_r, bf16 ? 2 : kF32)};
  // per worker: one head's key [S, d_qk] and value [S, d_v] in fp32, one logits block [64, S]
  const MemoryPart work{"streaming workspace (per worker)",
                        mul(std::max(r.threads, 1), d.S, d.d_qk + d.d_v + cpu::kQueryRowBlock, kF32)};
  const MemoryPart weights{"attn_weights [n,S,S] f64", attn_weights ? mul(d.n, d.S, d.S, kF64) : 0};
  ph.push_back(phase("attend (storing keys/values)", held, {q, ckv, k_pe, kv, states}));
  std::vector<MemoryPart> during = {q, ckv, k_pe, ctx, heads, states, work, weights};
  if (r.dump_tensors) during.push_back(kv);
  ph.push_back(phase("attend", held, during));
  std::vector<MemoryPart> tail = {ckv, k_pe, ctx, heads, out, output};
  if (r.dump_tensors) {
    tail.push_back(q);
    tail.push_back(kv);
    tail.push_back({"query/key/value_states f64", mul(d.n, d.S, 2 * d.d_qk + d.d_v, kF64)});
    tail.push_back(weights);
  }
  ph.push_back(phase("o_proj and results", held, tail));
  ph.push_back(phase("outputs", held, results(d, r, attn_weights)));
  return ph;
}

std::vector<MemoryPhase> reference_phases(const Dims& d, const MemoryRequest& r, bool attn_weights) {
  std::vector<MemoryPart> held = held_by_cli(d, r);
  held.push_back({"reference's copy of the weights (fp32)", mul(d.P, kF32)});
  // ref::Activations: every intermediate kept, in double
  const int64_t per_token = d.H + 2 * d.r_q + d.n * d.d_qk + (d.r_kv + d.d_r) + 2 * d.r_kv + d.d_r +
                            d.n * (d.d_n + d.d_v) + 2 * d.d_r + d.n * d.d_r + d.d_r + d.n * (2 * d.d_qk + d.d_v) +
                            d.n * d.d_v + d.H;
  std::vector<MemoryPart> act = {{"activations f64 (per token)", mul(d.S, per_token, kF64)},
                                 {"scores, masked scores, probabilities [n,S,S] f64", mul(3, d.n, mul(d.S, d.S), kF64)}};
  std::vector<MemoryPhase> ph = {phase("forward (every intermediate kept)", held, act)};
  std::vector<MemoryPart> after = results(d, r, attn_weights);
  after.insert(after.end(), act.begin(), act.end());
  ph.push_back(phase("results (activations still alive)", held, after));
  return ph;
}

std::vector<MemoryPhase> cuda_host_phases(const Dims& d, const MemoryRequest& r, bool attn_weights) {
  std::vector<MemoryPart> held = held_by_cli(d, r);
  std::vector<MemoryPart> res = results(d, r, attn_weights);
  res.push_back({"downloads f32 (output, states, weights)", mul(d.S, d.H, kF32)});
  return {phase("results", held, res)};
}

}  // namespace

int64_t MemoryPhase::bytes() const {
  int64_t b = 0;
  for (const MemoryPart& p : parts) b = std::min(INT64_MAX / 4, b + p.bytes);
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
  const Dims d = dims_of(cfg, req.seq_len);
  const bool attn_weights = req.dump_tensors && req.attn_weights;
  MemoryEstimate e;
  switch (req.backend) {
    case BackendKind::Reference: e.phases = reference_phases(d, req, attn_weights); break;
    case BackendKind::Cuda: {
      e.phases = cuda_host_phases(d, req, attn_weights);
      const int64_t elem = req.precision == Precision::BF16 ? 2 : 4;
      // the workspace is O(S) (streamed attention); the [n, S, S] probabilities are a buffer of
      // their own, allocated only when they are dumped
      int64_t workspace = INT64_MAX / 4, probabilities = 0;
      try {
        const cuda::WorkspaceDims wd = cuda::workspace_dims(cfg, req.seq_len, elem);
        workspace = cuda::workspace_layout(wd).total_bytes;
        if (attn_weights) probabilities = cuda::attn_weights_bytes(wd);
      } catch (const Error&) {  // overflows 64 bits: needs "everything"
        probabilities = INT64_MAX / 4;
      }
      e.device_peak_bytes = std::min(INT64_MAX / 4, mul(d.P, elem) + std::min(INT64_MAX / 4, workspace + probabilities) +
                                                        kCublasBytes);
      break;
    }
    default: e.phases = cpu_phases(d, req, attn_weights); break;
  }
  int64_t peak = 0;
  for (const MemoryPhase& p : e.phases) {
    if (p.bytes() > peak) {
      peak = p.bytes();
      e.peak_phase = p.name;
    }
  }
  e.host_peak_bytes = std::min(INT64_MAX / 4, peak + kProcessBytes);
  return e;
}

std::vector<std::pair<std::string, double>> reference_stage_flops(const AttentionConfig& cfg, int64_t seq_len) {
  const Dims d = dims_of(cfg, seq_len);
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

// ---- what is available ---------------------------------------------------------------------

namespace {

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

int64_t parse_byte_count(std::string_view text) {
  const std::string t = trim(text);
  if (t.empty()) return -1;
  size_t digits = 0;
  while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
  if (digits == 0 || digits > 18) return -1;
  int64_t v = std::stoll(t.substr(0, digits));
  const std::string suffix = t.substr(digits);
  int shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "KiB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GiB") {
    shift = 30;
  } else if (suffix == "T" || suffix == "TiB") {
    shift = 40;
  } else {
    return -1;
  }
  if (v > (INT64_MAX >> shift)) return -1;
  return v << shift;
}

int64_t parse_meminfo_available(std::string_view meminfo) {
  const std::string_view key = "MemAvailable:";
  const size_t at = meminfo.find(key);
  if (at == std::string_view::npos) return -1;
  std::string_view rest = meminfo.substr(at + key.size());
  rest = rest.substr(0, rest.find('\n'));
  std::string t = trim(rest);
  if (t.size() > 3 && t.substr(t.size() - 3) == " kB") t = trim(t.substr(0, t.size() - 3));
  const int64_t kb = parse_byte_count(t);
  return kb < 0 || kb > (INT64_MAX >> 10) ? -1 : kb << 10;
}

int64_t parse_cgroup_limit(std::string_view text) {
  const std::string t = trim(text);
  if (t == "max") return -1;
  const int64_t v = parse_byte_count(t);
  // cgroup v1 writes "no limit" as a huge page-rounded number (~2^63)
  return v >= (int64_t{1} << 60) ? -1 : v;
}

MemoryBudget host_memory_budget() {
  MemoryBudget b;
  if (const char* fake = std::getenv("MLA_MEMORY_AVAILABLE"); fake && *fake) {
    b.host_bytes = parse_byte_count(fake);
    if (b.host_bytes < 0)
      fail(ErrorKind::InvalidArgument, std::string("environment variable MLA_MEMORY_AVAILABLE='") + fake +
                                           "' is not a byte count (e.g. 8589934592 or 8G)");
    b.host_source = "MLA_MEMORY_AVAILABLE";
    return b;
  }
  b.host_bytes = parse_meminfo_available(read_small_file("/proc/meminfo"));
  if (b.host_bytes >= 0) b.host_source = "MemAvailable";
  auto consider = [&](int64_t limit, int64_t usage, const std::string& what) {
    if (limit < 0) return;
    const int64_t room = std::max<int64_t>(0, limit - std::max<int64_t>(usage, 0));
    if (b.host_bytes < 0 || room < b.host_bytes) {
      b.host_bytes = room;
      b.host_source = what;
    }
  };
  // cgroup v2: "0::/path" in /proc/self/cgroup; the limit of the group and of each ancestor
  const std::string self = read_small_file("/proc/self/cgroup");
  if (const size_t at = self.find("0::"); at != std::string::npos) {
    std::string path = trim(std::string_view(self).substr(at + 3, self.find('\n', at) - at - 3));
    while (true) {
      const std::string dir = "/sys/fs/cgroup" + (path == "/" ? std::string() : path);
      const std::string max = read_small_file(dir + "/memory.max");
      if (!max.empty())
        consider(parse_cgroup_limit(max), parse_cgroup_limit(read_small_file(dir + "/memory.current")),
                 "cgroup v2 memory.max - memory.current");
      if (path.empty() || path == "/") break;
      path = path.substr(0, path.find_last_of('/'));
    }
  } else {
    const std::string limit = read_small_file("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    if (!limit.empty())
      consider(parse_cgroup_limit(limit), parse_cgroup_limit(read_small_file("/sys/fs/cgroup/memory/memory.usage_in_bytes")),
               "cgroup v1 memory.limit_in_bytes - usage");
  }
  return b;
}

std::string format_bytes(int64_t bytes) {
  char buf[48];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024 * 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.3g PiB", b / (1024.0 * 1024 * 1024 * 1024 * 1024));
  } else if (b >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", b / (1024.0 * 1024 * 1024));
  } else {
    std::snprintf(buf, sizeof buf, "%.0f MiB", b / (1024.0 * 1024));
  }
  return buf;
}

// ---- the decision ----------------------------------------------------------------------------

namespace {

bool fits(const MemoryEstimate& e, const MemoryBudget& b) {
  if (b.host_bytes >= 0 && e.host_peak_bytes > b.host_bytes) return false;
  if (b.device_bytes >= 0 && e.device_peak_bytes > b.device_bytes) return false;
  return true;
}

std::string asked(const MemoryRequest& r) {
  std::string s = "S = " + std::to_string(r.seq_len) + " tokens, --backend " + backend_name(r.backend) +
                  " --precision " + precision_name(r.precision);
  if (r.dump_tensors) s += " --dump-tensors";
  return s;
}

}  // namespace

MemoryPlan plan_memory(const AttentionConfig& cfg, const MemoryRequest& req, const MemoryBudget& budget) {
  MemoryPlan plan;
  plan.request = req;
  plan.budget = budget;
  plan.estimate = estimate_memory(cfg, req);
  if (fits(plan.estimate, budget)) return plan;
  if (req.dump_tensors && req.attn_weights) {
    MemoryRequest without = req;
    without.attn_weights = false;
    const MemoryEstimate e = estimate_memory(cfg, without);
    if (fits(e, budget)) {
      plan.note = "attn_weights [" + std::to_string(cfg.num_attention_heads) + ", " + std::to_string(req.seq_len) + ", " +
                  std::to_string(req.seq_len) + "] not dumped: with it the run needs ~" +
                  format_bytes(plan.estimate.host_peak_bytes) + " but " + format_bytes(budget.host_bytes) +
                  " is available (" + budget.host_source + "); the other tensors are written";
      plan.estimate = e;
      plan.attn_weights_dropped = true;
      return plan;
    }
  }
  plan.fits = false;
  const bool device = budget.device_bytes >= 0 && plan.estimate.device_peak_bytes > budget.device_bytes;
  std::string line = "not enough memory for " + asked(req) + ": needs ~" +
                     format_bytes(device ? plan.estimate.device_peak_bytes : plan.estimate.host_peak_bytes) +
                     (device ? " of GPU memory" : "") + " at its peak (estimated, " + plan.estimate.peak_phase +
                     ") but " + format_bytes(device ? budget.device_bytes : budget.host_bytes) + " is available (" +
                     (device ? std::string("cudaMemGetInfo") : budget.host_source) + ")";
  std::vector<std::string> alternatives;
  auto try_option = [&](MemoryRequest alt, const std::string& flag) {
    const MemoryEstimate e = estimate_memory(cfg, alt);
    if (fits(e, budget)) alternatives.push_back(flag + " (~" + format_bytes(e.host_peak_bytes) + ")");
  };
  if (req.precision == Precision::FP32) {
    MemoryRequest alt = req;
    alt.precision = Precision::BF16;
    try_option(alt, "--precision bf16");
  }
  if (req.backend != BackendKind::Cpu) {
    MemoryRequest alt = req;
    alt.backend = BackendKind::Cpu;
    try_option(alt, "--backend cpu");
  }
  if (req.dump_tensors) {
    MemoryRequest alt = req;
    alt.dump_tensors = false;
    try_option(alt, "no --dump-tensors");
  }
  // the largest S that fits as asked (the estimate grows with S)
  int64_t lo = 0, hi = req.seq_len;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    MemoryRequest alt = req;
    alt.seq_len = mid;
    if (fits(estimate_memory(cfg, alt), budget)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  if (lo >= 1) alternatives.push_back("--seq-len " + std::to_string(lo >= 1024 ? lo / 1024 * 1024 : lo) + " or fewer tokens");
  if (alternatives.empty()) {
    line += "; nothing smaller fits either";
  } else {
    line += "; would fit: ";
    for (size_t i = 0; i < alternatives.size(); ++i) line += (i ? ", or " : "") + alternatives[i];
  }
  plan.refusal = line;
  return plan;
}

}  // namespace mla
