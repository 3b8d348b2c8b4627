// src/decode/decode_memory.cpp — the memory estimate of `mla-h2o decode` (mla/memory_plan.hpp;
// the decision is the planner's, src/checkpoint/memory_plan.cpp): the buffers of src/cpu/cpu_decode.cpp and decode_inputs.cpp (the prefill and the kernel),
// token_features.cpp, src/policies/ (each cache manager's state) and decode_loop.cpp (the
// traces), phase by phase, sized from the geometry and the flags; keep
// them in step with that code.
//
// Shape legend: T = P + N rows used, T_in = rows of the input, P = prompt rows, N = steps,
// Q = N + query window rows whose queries are held, H = hidden_size, n = heads, r_q / r_kv =
// q / kv lora ranks, d_n / d_r / d_v = head dims, d_qk = d_n + d_r, W = params of the layer,
// slots = 1 + budgets x policies (full + each policy at each budget), runs = slots - 1.
#include <algorithm>

#include "mla/memory_plan.hpp"
#include "src/cpu/cpu_kernels.hpp"
#include "src/cpu/attention_stages.hpp"

namespace mla {
namespace {

constexpr int64_t kF32 = 4, kF64 = 8;

int64_t mul(std::initializer_list<int64_t> f) { return memory_product(f); }

std::vector<MemoryPart> joined(std::vector<MemoryPart> a, const std::vector<MemoryPart>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

MemoryEstimate estimate_decode_memory(const AttentionConfig& cfg, const DecodeMemoryRequest& r) {
  const int64_t P = r.prompt_len, N = r.steps, T = P + N;
  const int64_t window = std::clamp<int64_t>(r.query_window, 1, std::max<int64_t>(P, 1)), Q = T - (P - window);
  const int64_t runs = r.budgets * r.policies, slots = 1 + runs;
  const bool f64 = r.backend == BackendKind::Reference;  // the reference holds doubles
  const int64_t e = f64 ? kF64 : kF32, states_e = r.precision == Precision::BF16 && !f64 ? 2 : e;
  MemoryDims d = memory_dims(cfg, r.input_rows);
  // the command: weights as loaded, the input rows and the T rows used (a copy)
  std::vector<MemoryPart> held = pipeline_held_memory(d, r.input_layernorm);
  held.push_back({"hidden rows used [T,H] f32", mul({T, d.H, kF32})});
  d.S = T;

  std::vector<MemoryPhase> phases;
  if (f64) {
    // the reference: two forwards (docs/decode.md §1), every intermediate kept in double
    const MemoryPart prepared{"prepared weights (fp32 storage)", mul({d.P, kF32})};
    const MemoryPart x{"x [T,H]", mul({T, d.H, e})};
    const MemoryPart q{"q [T,n*d_qk]", mul({T, d.n, d.d_qk, e})};
    const MemoryPart ckv{"compressed_kv + latent_normed [T]", mul({T, d.r_kv + d.d_r + d.r_kv, e})};
    const MemoryPart kv{"kv [T,n*(d_n+d_v)]", mul({T, d.n, d.d_n + d.d_v, e})};
    const MemoryPart k_pe{"k_pe_roped [T,d_r]", mul({T, d.d_r, e})};
    phases.push_back({"prefill projections", joined(held, {prepared, x, q, ckv, kv, {"q_a + q_a_normed [T,r_q]", mul({2, T, d.r_q, e})}})});
    phases.push_back({"prefill attention",
                      joined(held, {prepared, x, q, ckv, kv, k_pe,
                                    {"reference scores, masked scores, probabilities [n,P,P] f64", mul({3, d.n, P, P, kF64})},
                                    {"prefill head_scores [n,P] f64", mul({d.n, P, kF64})}})});
  } else {
    // the cpu backend: the forward's passes (src/cpu/cpu_decode.cpp): projections by row chunks
    // of all T rows, then the prompt's attention by query passes, then the decode rows' queries
    MemoryRequest rows_request;  // the cpu backend's parts for T rows and for the P prompt keys
    rows_request.backend = BackendKind::Cpu;
    rows_request.seq_len = T;
    rows_request.precision = r.precision;
    rows_request.threads = std::max(r.threads, 1);
    rows_request.gemm = r.gemm;
    MemoryRequest prompt_request = rows_request;
    prompt_request.seq_len = P;
    const int64_t latent = cfg.has_q_lora() ? d.r_q : d.n * d.d_qk;
    std::vector<MemoryPart> kept = cpu_held_memory(cfg, prompt_request);
    kept.push_back({"q latent [T,r_q]", mul({T, latent, states_e})});
    kept.push_back({"prompt keys/values [P,n*(d_n+d_v)+d_r]", mul({P, d.n * (d.d_n + d.d_v) + d.d_r, states_e})});
    kept.push_back({"latent_cache [T,r_kv+d_r] f64", mul({T, d.r_kv + d.d_r, kF64})});
    kept.push_back({"query_states [n,Q,d_qk] f64", mul({d.n, Q, d.d_qk, kF64})});
    if (r.query_statistics) kept.push_back({"statistics: the prompt's roped queries [P,n*d_qk]", mul({P, d.n, d.d_qk, states_e})});
    std::vector<MemoryPart> chunk = joined(kept, cpu_chunk_memory(cfg, rows_request));
    chunk.push_back({"chunk: latent cache rows f64", mul({std::min(T, cpu::kRowChunk), d.r_kv + d.d_r, kF64})});
    phases.push_back({"prefill projections (row chunk)", joined(held, chunk)});
    std::vector<MemoryPart> attend = joined(kept, cpu_attention_pass_memory(cfg, prompt_request, false));
    attend.push_back({"prefill head_scores [n,P] f64", mul({d.n, P, kF64})});
    phases.push_back({"prefill attention (last query pass)", joined(held, attend)});
  }

  // the decode inputs and the per-token features, kept through the steps
  const std::vector<MemoryPart> inputs = {{"latent_cache [T,r_kv+d_r] f64", mul({T, d.r_kv + d.d_r, kF64})},
                                          {"query_states [n,Q,d_qk] f64", mul({d.n, Q, d.d_qk, kF64})},
                                          {"token features [features,n,T] f64", mul({r.features, d.n, T, kF64})}};
  // kvzip: each repeat chunk (R rows) after the context, one at a time (cmd_decode.cpp
  // reconstruction_scores): its rows [P+R,H], the inputs of a prefill of them (latent cache, the
  // repeat's queries) and a kernel's copies, beside the main inputs
  if (const int64_t R = r.reconstruction_rows; R > 0) {
    const int64_t TR = P + R;
    std::vector<MemoryPart> rec = joined(held, inputs);
    rec.push_back({"kvzip: [context; repeat] rows [P+R,H] f32", mul({TR, d.H, kF32})});
    rec.push_back({"kvzip: latent_cache [P+R,r_kv+d_r] f64, twice (inputs, kernel)", mul({2, TR, d.r_kv + d.d_r, kF64})});
    rec.push_back({"kvzip: query_states [n,R+1,d_qk] f64, twice", mul({2, d.n, R + 1, d.d_qk, kF64})});
    rec.push_back({"kvzip: prefill of the P context rows (as the prefill's attention)", mul({d.n, P, P, f64 ? 3 * kF64 : 0})});
    rec.push_back({"kvzip: kernel weights, logits", mul({d.n * (d.d_n + d.d_v) * d.r_kv + d.H * d.n * d.d_v + d.n * TR, e})});
    if (!r.naive) rec.push_back({"kvzip: absorbed q~ | q_pe [R+1,n*(r_kv+d_r)]", mul({R + 1, d.n, d.r_kv + d.d_r, e})});
    else rec.push_back({"kvzip: naive kv [P+R,n*(d_n+d_v)]", mul({TR, d.n, d.d_n + d.d_v, e})});
    phases.push_back({"kvzip: context reconstruction", rec});
  }
  // the steps: the kernel's copies and buffers, then the traces run_decode keeps
  std::vector<MemoryPart> kernel = {
      {"kernel weights kv_b_proj + o_proj", mul({d.n * (d.d_n + d.d_v) * d.r_kv + d.H * d.n * d.d_v, e})},
      {"kernel latent cache [T,r_kv+d_r]", mul({T, d.r_kv + d.d_r, e})},
      {"kernel queries [n*Q,d_qk]", mul({d.n, Q, d.d_qk, e})},
      {"kernel logits [n,T]", mul({d.n, T, e})},
      {"kernel contexts [slots,N,n*d_v]", mul({slots, N, d.n * d.d_v, e})}};
  if (r.naive) {
    kernel.push_back({"naive: kv of every token [T,n*(d_n+d_v)]", mul({T, d.n, d.d_n + d.d_v, e})});
  } else {
    kernel.push_back({"absorbed: q~ | q_pe [Q,n*(r_kv+d_r)]", mul({Q, d.n, d.r_kv + d.d_r, e})});
    kernel.push_back({"absorbed: step contexts [slots,n*r_kv]", mul({slots, d.n, d.r_kv, e})});
  }
  // each cache manager's state (at most per-head scores of every position: [n,T] f64, and its
  // cache and one score per position), the steps' metrics, and attn_output only for the dump
  const MemoryPart state{"cache managers [runs,n+3,T] f64", mul({runs, d.n + 3, T, kF64})};
  const MemoryPart steps{"traces: step metrics [slots,N]", mul({slots, N, 96})};
  const MemoryPart outputs{"traces: attn_output [slots,N,H] f64 (--dump-tensors)", r.dump_tensors ? mul({slots, N, d.H, kF64}) : 0};
  phases.push_back({"decode steps", joined(joined(held, inputs), joined(kernel, {state, steps, outputs}))});
  // outputs: the CSV text (~100 bytes a row) and the dump's f64 payloads
  std::vector<MemoryPart> written = {steps, outputs, {"decode.csv text", mul({slots, N, 100})}};
  if (r.dump_tensors) written.push_back({"dump payloads f64", mul({T * (d.r_kv + d.d_r) + slots * N * d.H, kF64})});
  phases.push_back({"outputs", joined(joined(held, inputs), written)});
  return estimate_of_phases(std::move(phases));
}

}  // namespace mla
