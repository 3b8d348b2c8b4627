// src/cpu/cpu_memory.cpp — the cpu backend's buffers, phase by phase, for the memory plan
// (mla/memory_plan.hpp, docs/long-context.md §3). Each part is a buffer of cpu_backend.cpp's
// three passes (projections by row chunks, attention by query passes, o_proj by row chunks),
// tiled_attention.cpp, onednn_attention.cpp and gemm_engine.cpp, sized from the geometry:
// keep them in step.
//
// Shape legend: S = tokens, H = hidden_size, n = heads, r_q = q_lora_rank, r_kv = kv_lora_rank,
// d_n / d_r / d_v = qk_nope / qk_rope / v head dims, d_qk = d_n + d_r, P = parameters,
// e = bytes of the run's precision (2 bf16, 4 fp32), C = rows per chunk, R = rows per query pass,
// N = keys a block's products compute (S rounded up to the key granularity).
#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "cpu_kernels.hpp"
#include "attention_stages.hpp"
#include "gemm_engine.hpp"
#include "onednn_attention.hpp"
#include "mla/error.hpp"
#include "mla/memory_plan.hpp"

namespace mla {
namespace {

// What the engine `choice` holds for a run in `precision` on this CPU (gemm_engine.hpp; the
// engine is made once per choice and precision: a probe creates a oneDNN primitive descriptor).
cpu::GemmHoldings holdings_of(Gemm choice, Precision precision) {
  static std::mutex mutex;
  static std::map<std::pair<Gemm, Precision>, cpu::GemmHoldings> known;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(choice, precision);
  if (auto it = known.find(key); it != known.end()) return it->second;
  cpu::GemmHoldings h;
  try {
    std::string why;  // (gemm_engine.hpp takes a bool for now)
    h = cpu::make_gemm_engine(choice, precision == Precision::BF16, why)->holdings();
  } catch (const Error&) {  // --gemm onednn without oneDNN: the run fails with that message
  }
  return known[key] = h;
}

}  // namespace

namespace {

constexpr int64_t kF32 = 4, kF64 = 8;

// Bytes of one value held in the run's precision (PrecisionMatrix: bf16 bits or fp32).
int64_t stored_bytes(Precision p) { return p == Precision::BF16 ? 2 : kF32; }

template <typename... F>
int64_t mul(F... f) {
  return memory_product({static_cast<int64_t>(f)...});
}

}  // namespace

std::vector<MemoryPart> cpu_held_memory(const AttentionConfig& cfg, const MemoryRequest& r) {
  const MemoryDims d = memory_dims(cfg, r.seq_len);
  const cpu::GemmHoldings h = holdings_of(r.gemm, r.precision);
  const bool onednn = h.attention_products == Gemm::OneDnn;
  // oneDNN packs each weight once (bf16 where it has a bf16 kernel); the Eigen engine keeps fp32
  // values; an engine that takes W as stored reads a kept layer in place (gemm_engine.hpp)
  const bool in_place = h.weights_as_stored && r.weights_kept && (r.precision == Precision::FP32 || r.bf16_weights);
  std::vector<MemoryPart> held = {
      in_place ? MemoryPart{"prepared weights: none (the loaded layer, read in place)", 0}
               : MemoryPart{std::string("prepared weights (") + precision_name(h.weights) + ")", mul(d.P, stored_bytes(h.weights))}};
  // the oneDNN projection engine on blocked layouts (gemm_engine.cpp DnnlLinear): a weight cut
  // into two or more slices (onednn_slice_count: by its shape alone) keeps each slice's output
  // rows [min(S, 512), n_j] f32 for the process, i.e. min(S, 512) rows of its output features
  if (h.slice_buffers) {
    int64_t features = 0;
    for (const int64_t out : {cfg.has_q_lora() ? d.r_q : int64_t{0}, d.n * d.d_qk, d.r_kv + d.d_r, d.n * (d.d_n + d.d_v), d.H})
      if (cpu::onednn_slice_count(out) > 1) features += out;
    if (features > 0)
      held.push_back({"projection slices: output rows [512,n_j] f32", mul(std::min<int64_t>(d.S, 512), features, kF32)});
  }
  // the attention's oneDNN primitives, created as the blocks need them and kept for the process:
  // JIT code and descriptors of every (product, rows, keys) shape of a causal forward
  // (onednn_attention.hpp; for Kimi 127 at S = 4096, 511-513 from S = 16384 on)
  if (onednn) {
    const int64_t primitives =
        std::min(cpu::onednn_attention_primitives(d.S, d.d_qk, d.d_v), cpu::kAttentionPrimitivesAlive);
    held.push_back({"attention primitives (oneDNN JIT code): " + std::to_string(primitives),
                    mul(primitives, cpu::kAttentionPrimitiveBytes)});
  }
  return held;
}

std::vector<MemoryPart> cpu_chunk_memory(const AttentionConfig& cfg, const MemoryRequest& r) {
  const MemoryDims d = memory_dims(cfg, r.seq_len);
  const bool onednn_bf16 = holdings_of(r.gemm, r.precision).input_copy;  // x copied as bf16 bits
  const int64_t C = std::min(d.S, cpu::kRowChunk);
  // at kv_b_proj, x, compressed_kv, latent_normed (and oneDNN's bf16 copy of it) and kv are alive
  return {{"chunk: x [C,H] f32", mul(C, d.H, kF32)},
          {"chunk: compressed_kv + latent_normed f32", mul(C, d.r_kv + d.d_r + d.r_kv, kF32)},
          {"chunk: kv [C,n*(d_n+d_v)] f32", mul(C, d.n, d.d_n + d.d_v, kF32)},
          {"chunk: the engine's copy of the GEMM input", onednn_bf16 ? mul(C, d.H, 2) : 0}};
}

std::vector<MemoryPart> cpu_attention_pass_memory(const AttentionConfig& cfg, const MemoryRequest& r, bool with_context) {
  const MemoryDims d = memory_dims(cfg, r.seq_len);
  const bool onednn = holdings_of(r.gemm, r.precision).attention_products == Gemm::OneDnn;  // per-head products
  const int64_t e = stored_bytes(r.precision);
  const int64_t R = std::min(d.S, cpu::query_pass_rows(d.S));
  const int64_t workers = std::clamp<int64_t>(r.threads, 1, std::max<int64_t>(d.n, 1) * ((R + 63) / 64));
  const int64_t N = d.S + 511;  // keys rounded up to the key granularity (at most 512 more)
  return {
      {"pass: q [R,n*d_qk] f32 (+ q_b_proj's input)", mul(R, d.n * d.d_qk + d.r_q, kF32)},
      {"pass: attn_context rows [R,n*d_v] f32", with_context ? mul(R, d.n, d.d_v, kF32) : 0},
      // per head in flight (at most one per worker): oneDNN its keys/values packed (d_qk + d_v
      // per key) and a plain copy being packed; Eigen its keys/values widened to fp32
      {"heads in flight: keys/values for the products",
       onednn ? mul(workers, N, d.d_qk + d.d_v + std::max(d.d_qk, d.d_v), e) : mul(workers, d.S, d.d_qk + d.d_v, kF32)},
      // per worker one block's logits [64, N] f32 (and oneDNN bf16: its probabilities as bf16 bits)
      {"workers: logits blocks [64,N]",
       mul(workers, cpu::kQueryRowBlock, onednn ? N : d.S, onednn && r.precision == Precision::BF16 ? kF32 + 2 : kF32)}};
}

BackendMemory cpu_backend_memory(const AttentionConfig& cfg, const MemoryRequest& r) {
  const MemoryDims d = memory_dims(cfg, r.seq_len);
  const bool onednn_bf16 = holdings_of(r.gemm, r.precision).input_copy;  // x copied as bf16 bits
  const int64_t e = stored_bytes(r.precision);
  const int64_t C = std::min(d.S, cpu::kRowChunk);
  const int64_t latent = cfg.has_q_lora() ? d.r_q : d.n * d.d_qk;
  BackendMemory m;
  m.held = cpu_held_memory(cfg, r);

  // held across the passes, in the run's precision
  const MemoryPart q_store{"q latent [S,r_q]", mul(d.S, latent, e)};
  const MemoryPart states{"keys/values [S,n*(d_n+d_v)+d_r]", mul(d.S, d.n * (d.d_n + d.d_v) + d.d_r, e)};
  const MemoryPart context{"attn_context [S,n*d_v]", mul(d.S, d.n, d.d_v, e)};
  const MemoryPart heads{"head_scores [n,S] f64", mul(d.n, d.S, kF64)};
  std::vector<MemoryPart> dump;  // dumps: the states and the latent cache, from pass 1 on
  if (r.dump_tensors) {
    dump.push_back({"key/value_states f64", mul(d.n, d.S, d.d_qk + d.d_v, kF64)});
    dump.push_back({"latent_cache [S,r_kv+d_r] f64", mul(d.S, d.r_kv + d.d_r, kF64)});
  }
  auto phase = [&](std::string name, std::vector<MemoryPart> parts, bool with_dump) {
    if (with_dump) parts.insert(parts.end(), dump.begin(), dump.end());
    m.phases.push_back({std::move(name), std::move(parts)});
  };

  // 1. projections, one chunk of C rows
  std::vector<MemoryPart> projections = {q_store, states};
  for (const MemoryPart& p : cpu_chunk_memory(cfg, r)) projections.push_back(p);
  phase("projections (row chunk)", projections, false);

  // 2. attention, the last query pass (its blocks see the most keys)
  std::vector<MemoryPart> attend = {q_store, states, context, heads};
  for (const MemoryPart& p : cpu_attention_pass_memory(cfg, r)) attend.push_back(p);
  if (r.dump_tensors) attend.push_back({"query_states f64", mul(d.n, d.S, d.d_qk, kF64)});
  if (r.holds_attn_weights()) attend.push_back({"attn_weights [n,S,S] f64", mul(d.n, d.S, d.S, kF64)});
  phase("attend (last query pass)", attend, true);

  // 3. o_proj, one chunk of C rows, widened into attn_output (the ForwardResult) as it comes
  std::vector<MemoryPart> tail = forward_result_memory(d, r);
  tail.push_back(context);
  tail.push_back({"chunk: attn_context rows f32 (+ the engine's copy)", mul(C, d.n, d.d_v, onednn_bf16 ? 6 : kF32)});
  tail.push_back({"chunk: o_proj output [C,H] f32", mul(C, d.H, kF32)});
  phase("o_proj", tail, false);
  return m;
}

}  // namespace mla
