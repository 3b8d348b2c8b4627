// tests/unit/tolerances.hpp — THE table of numerical tolerances of the test suites.
//
// Every comparison of two floating-point results in the unit tests takes its bounds from one
// row here (looked up by what is compared, which pair of implementations, which precision),
// and every row says why its numbers are what they are, derived from the unit roundoff and
// the reduction length where possible (gemma.cpp's AssertClose style). Do not widen a row to
// make a test pass: find the cause. Add rows (additive edits only), each with its reason.
//
// Checks made with a row (tests/unit/compare.hpp), in this order:
//   1. no NaN/Inf in either tensor;
//   2. elementwise |got - ref| <= atol + rtol * |ref|;
//   3. normalized error ||got - ref||_2 / ||ref||_2 <= max_norm_error;
//   4. cosine(got, ref) >= min_cosine.
// A bound of kNoBound (infinity) disables that check.
//
// Unit roundoffs used in the reasons: u64 = 2^-53 = 1.1e-16, u32 = 2^-24 = 6.0e-8,
// ubf16 = 2^-8 = 3.9e-3 (bf16 has 8 significant bits; one ulp is 2^-7 relative at most).
#pragma once

#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mla::test {

inline constexpr double kNoBound = std::numeric_limits<double>::infinity();

struct Tolerance {
  std::string_view what;       // tensor compared ("attn_output", "attn_weights", ...); "*" = any
  std::string_view pair;       // "<got>-vs-<ref>", e.g. "cpu-vs-reference"
  std::string_view precision;  // "fp32" | "bf16" | "double"
  double atol;                 // elementwise absolute bound
  double rtol;                 // elementwise bound relative to |ref|
  double max_norm_error;       // ||got - ref|| / ||ref||
  double min_cosine;           // cosine similarity lower bound
  std::string_view reason;
};

// clang-format off
inline constexpr Tolerance kTolerances[] = {
  // ---- exact identities inside the reference (double arithmetic, reordered sums) -------
  {"*", "reference-identity", "double", 1e-12, 1e-12, 1e-13, 1.0 - 1e-12,
   "two double evaluations of the same real number that differ only in summation order "
   "(absorbed vs naive scores, permuted rope rows, S=1 masks): error <= K*u64*sum|terms| "
   "with K <= 1024 terms of O(1) values in the test geometries -> ~1e-13; 10x margin"},

  // ---- rope tables against the printed spec tables (docs/math.md §4) -----------------------
  {"inv_freq", "rope-vs-spec-table", "fp32", 0.0, 6e-7, kNoBound, -1.0,
   "the spec prints 7 significant digits (half a unit of the 7th digit is <= 5e-7 relative) "
   "and our value is an fp32 rounding of it (u32 = 6e-8): rtol 5e-7 + 6e-8 ~ 6e-7"},
  {"inv_freq", "fp32-vs-double", "fp32", 0.0, 4.8e-7, kNoBound, -1.0,
   "fp32 evaluation of pow, 1/x, factor*x, the ramp and the blend: at most ~6 chained fp32 "
   "roundings of u32 each plus 1 ulp of pow -> <= 8*u32 = 4.8e-7 relative"},

  // ---- reference bf16 emulation vs the exact reference ---------------------------------
  {"attn_output", "reference-bf16-vs-fp32", "bf16", kNoBound, kNoBound, 3e-2, 0.9995,
   "bf16 mode rounds ~12 times along each path (§7); each rounding has rms relative error "
   "ubf16/sqrt(12)/2 ~ 1.1e-3, so sqrt(12)*1.1e-3 ~ 4e-3 accumulates, amplified through the "
   "softmax (exp turns absolute score error into relative weight error) by the score scale "
   "~2-3: ~1e-2; bound 3e-2. Elementwise bounds off: single elements near zero have "
   "unbounded relative error. cosine >= 1 - (3e-2)^2/2"},
  {"attn_weights", "reference-bf16-vs-fp32", "bf16", 2e-2, 0.0, 3e-2, 0.9995,
   "probabilities in [0, 1]: the score error (bf16 score ~2-4 rounded with ubf16 relative: "
   "<= ~1.6e-2 absolute, plus upstream q/k error) moves p by <= p*|ds| <= ~2e-2; normalized "
   "error as for attn_output"},

  // ---- cpu (Eigen) vs reference ---------------------------------------------------------
  {"*", "cpu-vs-reference", "fp32", 1e-4, 1e-3, 1e-5, 1.0 - 1e-9,
   "fp32 accumulation over K <= 8192 terms (o_proj): typical dot error sqrt(K)*u32*|x||w| "
   "~ 5.4e-6 relative, worst K*u32 ~ 4.9e-4; five chained GEMMs plus RMSNorm/softmax on "
   "O(1) values -> atol 1e-4, rtol 1e-3 for single elements, norm error 1e-5 (~2x the "
   "typical sqrt(K)*u32 of the longest reduction)"},
  {"*", "cpu-vs-reference", "bf16", 3e-2, 3e-2, 1e-2, 0.9999,
   "both round to bf16 at the same points (§7); they differ only where fp32 vs double "
   "accumulation decides a rounding differently (a 1-ulp flip = 2^-7 relative), and a flip "
   "propagates through later roundings. Elementwise: ~4 bf16 ulps (4*2^-7 = 3.1e-2) of O(1) "
   "values; normalized error 1e-2 (a few percent of elements flipped by one ulp); H2O "
   "decisions compared exactly only where the scores are well separated"},
  // (rows added by "cpu": the wildcard row above bounds a 1-ulp flip; these two bound how
  //  many flips there are, so that a missing or extra bf16 rounding point, which moves every
  //  element by up to half an ulp and gives a normalized error ~1e-2, is caught.)
  {"attn_output", "cpu-vs-reference", "bf16", 3e-2, 3e-2, 3e-3, 1.0 - 4.5e-6,
   "a rounding flips only where the exact value lies within the fp32-vs-double accumulation "
   "difference (typical sqrt(K)*u32, K <= 8192: ~5.4e-6 relative) of a bf16 rounding "
   "boundary, i.e. for a fraction f ~ 2*5.4e-6/2^-8 ~ 2.8e-3 of the elements of a stage; one "
   "ulp (<= 2^-8 rms relative) on sqrt(f) ~ 5.3e-2 of the norm gives ~2e-4 per stage, over "
   "~12 stages sqrt(12)*2e-4 ~ 7e-4, times ~3 through the softmax: ~2e-3; bound 3e-3 "
   "(measured 6.4e-4 on Kimi at S=7, 1.2e-4 on the small geometries); cosine 1 - (3e-3)^2/2"},
  {"attn_weights", "cpu-vs-reference", "bf16", 3e-2, 3e-2, 3e-3, 1.0 - 4.5e-6,
   "as attn_output (the probabilities are the softmax of scores that went through the same "
   "flipped roundings; measured 2.5e-4 on Kimi at S=7, 5.7e-5 on the small geometries)"},

  // ---- cuda vs reference ----------------------------------------------------------------
  {"*", "cuda-vs-reference", "fp32", 1e-4, 1e-3, 1e-5, 1.0 - 1e-9,
   "as cpu-vs-reference fp32 (cuBLAS fp32 GEMM without TF32, fp32 kernels)"},
  {"*", "cuda-vs-reference", "bf16", 3e-2, 3e-2, 1e-2, 0.9999,
   "as cpu-vs-reference bf16 (same rounding points, different accumulation order)"},
  {"*", "cuda-tf32-vs-reference", "fp32", 3e-2, 3e-2, 1e-2, 0.9999,
   "--allow-tf32: cuBLAS rounds every fp32 GEMM input to TF32 (11 significant bits, unit "
   "roundoff 2^-11 = 4.9e-4) and accumulates in fp32, so each product carries ~2*4.9e-4 "
   "relative error; random-signed over K terms the GEMM output's rms relative error is "
   "~4e-4, over the five chained GEMMs sqrt(5)*4e-4 ~ 9e-4, times ~3 through the softmax "
   "~3e-3: the bf16 rows' bounds (bf16 keeps 3 bits fewer) hold with margin"},
  {"*", "cuda-vs-cpu", "fp32", 2e-4, 2e-3, 2e-5, 1.0 - 2e-9,
   "Kimi geometry at S = 2048, where the double reference is too slow: both backends are "
   "within the cpu/cuda-vs-reference fp32 bounds of the true value (cuBLAS and OpenBLAS sum "
   "in different orders; cuBLAS math mode without TF32), so by the triangle inequality their "
   "difference is within twice those bounds"},
  {"*", "cuda-vs-cpu", "bf16", 6e-2, 6e-2, 2e-2, 0.9998,
   "as cuda-vs-cpu fp32: twice the bf16 rows against the reference (each backend may flip "
   "a bf16 rounding the other does not; cuBLAS runs with reduced-precision reductions "
   "disallowed, so each GEMM output is still rounded once)"},

  // ---- cpu backend: tiled attention vs the materialized [S, S] computation (suite tiled) --
  {"*", "streaming-vs-materialized", "fp32", 0.0, 0.0, 0.0, 1.0,
   "probabilities and H2O mass are identical by construction: both compute each 64-row block's "
   "logits and softmax with the same function (cpu_kernels.hpp block_scores_softmax), the same "
   "GEMM shapes and aligned buffers, and add the column sums in the same order (rows ascending); "
   "keys/values stored as bf16 bits in a bf16 run are bf16 values, so the storage is exact. Any "
   "difference in head_scores / token_scores is a bug (docs/long-context.md)"},
  {"*", "streaming-vs-materialized", "bf16", 0.0, 0.0, 0.0, 1.0,
   "as the fp32 row: the same operations in the same order, and bf16 storage of bf16 values is "
   "exact"},
  {"attn_context", "streaming-vs-materialized", "fp32", 1e-5, 0.0, 1e-5, 1.0 - 1e-10,
   "P.V: the materialized computation is one GEMM over all S keys, the streamed one a GEMM per "
   "64-row block over its keys, so OpenBLAS adds the same K <= 2048 terms p_t*v_t (sum p = 1, "
   "|v| = O(1)) in another order: typical difference sqrt(K)*u32*|v| ~ 2.7e-6, worst "
   "2*K*u32*max|v|; atol and norm error 1e-5 (measured: max 1.7e-6, norm 2.8e-7)"},
  {"attn_context", "streaming-vs-materialized", "bf16", 1e-6, 7.9e-3, 1e-4, 1.0 - 5e-9,
   "the fp32 P.V sums above differ by ~1e-6 relative, so a bf16 rounding of the output flips "
   "by one ulp (<= 2^-7 = 7.8e-3 relative) where that difference straddles a rounding "
   "boundary: for a fraction ~1e-6/2^-8 ~ 3e-4 of the elements, giving a normalized error "
   "~sqrt(3e-4)*2^-8 ~ 7e-5; bound 1e-4 (measured: max rel 6.0e-3, norm 3.2e-6)"},

  // (rows added by "attn": the per-head products on oneDNN matmul primitives, src/cpu/onednn_attention.hpp)
  {"*", "backend-vs-rebuilt-streamed", "fp32", 0.0, 0.0, 0.0, 1.0,
   "the backend's head scores against tiled_attention run by the test on the backend's own "
   "operands (rebuilt exactly from its states) with the same products engine: the same code on "
   "the same values, single-threaded products per head, so any difference means the backend ran "
   "other products than the test (e.g. Eigen instead of oneDNN)"},
  {"*", "backend-vs-rebuilt-streamed", "bf16", 0.0, 0.0, 0.0, 1.0, "as the fp32 row"},
  {"*", "onednn-streaming-vs-materialized", "fp32", 1e-5, 5e-5, 1e-5, 1.0 - 1e-10,
   "probabilities / H2O mass with the score product on oneDNN (brgemm) instead of sgemm: the same "
   "d_qk <= 192 terms summed in another order, so a logit differs by ~sqrt(d_qk)*u32*sum|terms| "
   "(typical ~1e-6 relative; worst d_qk*u32 ~ 1.1e-5 of sum|terms|) and p = softmax moves by p "
   "times that; a mass sums positive p, so its relative error is at most twice the worst logit "
   "error: rtol 5e-5, atol 1e-5 for masses near 0, norm error 1e-5 (measured on the streaming "
   "suite: max abs 2.4e-6, max rel 2.2e-6, norm 5.6e-8)"},
  {"attn_context", "onednn-streaming-vs-materialized", "fp32", 1e-5, 0.0, 1e-5, 1.0 - 1e-10,
   "as attn_context streaming-vs-materialized fp32 (P.V over the same K <= 2048 terms in another "
   "order), plus p's relative error above (~1e-6) times |v| = O(1) (measured: max abs 2.9e-6, norm "
   "3.9e-7)"},
  {"*", "onednn-streaming-vs-materialized", "bf16", 1e-2, 3e-2, 3e-4, 1.0 - 4.5e-8,
   "the fp32 score sums differ as in the fp32 row, so the bf16 rounding of a score (docs/math.md "
   "§7 row 10) flips by one ulp where the difference straddles a boundary: a fraction "
   "~sqrt(192)*u32/2^-8 ~ 2e-4 of the scores. A flip moves the logit by <= 2^-8*|logit| and p by "
   "<= p(1-p)*2^-8*|logit| <= 1e-2 for |logit| <= 10 (atol), ~2^-8*|logit| ~ 1e-2 relative on that "
   "p, and bf16(p) may flip too (2^-7): rtol 3e-2 (~4 bf16 ulps); normalized error "
   "sqrt(2e-4)*2e-2 ~ 3e-4 (measured: max abs 7.3e-4, max rel 6.9e-3, norm 7.8e-6). A missing "
   "rounding point moves every value by up to half an ulp (norm ~1e-3) and fails"},
  {"attn_context", "onednn-streaming-vs-materialized", "bf16", 1.6e-2, 3e-2, 3e-4, 1.0 - 4.5e-8,
   "P.V: the flipped probabilities of the bf16 row above (a fraction ~2e-4, each by ~1e-2 "
   "relative) plus the P.V sums in another order flipping the output's bf16 rounding for a "
   "fraction ~3e-4 (as attn_context streaming-vs-materialized bf16, ~7e-5 normalized): norm 3e-4; "
   "elementwise ~4 bf16 ulps of O(1) values (4*2^-8 = 1.6e-2 absolute; outputs near 0 have "
   "unbounded relative error: measured max abs 3.9e-3 = one ulp, max rel 1.3 on such an element, "
   "norm 6.2e-5)"},

  // ---- golden fixtures: our backends vs HF transformers' DeepseekV3Attention (suite golden) --
  // HF ran on CPU (PyTorch 2.15, oneDNN/MKL GEMMs with fp32 accumulation); see
  // tests/data/golden/README.md. Measured errors are logged by the suite (--log_level=message).
  {"*", "reference-vs-hf", "fp32", 1e-4, 1e-3, 1e-5, 1.0 - 1e-9,
   "HF's fp32 run vs the exact (double) reference: the error is HF's own fp32 accumulation, "
   "the same analysis as cpu-vs-reference fp32 (K <= 8192 terms: typical sqrt(K)*u32 ~ 5.4e-6 "
   "relative, worst K*u32 ~ 4.9e-4; five chained GEMMs plus RMSNorm/softmax on O(1) values)"},
  {"*", "cpu-vs-hf", "fp32", 2e-4, 2e-3, 2e-5, 1.0 - 2e-9,
   "two fp32 evaluations (Eigen/OpenBLAS and PyTorch/oneDNN) summing in different orders: each "
   "is within the reference-vs-hf fp32 bounds of the exact value, so their difference is "
   "within twice those bounds (triangle inequality)"},
  {"*", "reference-vs-hf", "bf16", 3e-2, 3e-2, 1e-2, 0.9999,
   "the reference rounds to bf16 at exactly HF's points (docs/math.md §7), so values differ only "
   "where HF's fp32 accumulation and our double accumulation land on different sides of a bf16 "
   "rounding boundary: a 1-ulp flip (<= 2^-7 relative), which later roundings can propagate. A "
   "flip needs the accumulation error (~sqrt(K)*u32 ~ 5e-6 relative for K <= 8192) to reach a "
   "boundary, which happens for a fraction ~5e-6/2^-8 ~ 1e-3 of the values. Elementwise: "
   "~4 bf16 ulps (4*2^-7 = 3.1e-2) of O(1) values; normalized error 1e-2; same as "
   "cpu-vs-reference bf16"},
  {"*", "cpu-vs-hf", "bf16", 3e-2, 3e-2, 1e-2, 0.9999,
   "as reference-vs-hf bf16: the CPU backend also rounds at HF's points and differs only where "
   "its fp32 accumulation order decides a bf16 rounding differently from HF's"},
  // (rows added by "sweep": the wildcard bf16 rows above bound a 1-ulp flip; these bound how many
  //  flips there are in the attention probabilities and in input_layernorm's output, so that a
  //  missing or extra bf16 rounding point is caught — tried: dropping the first bf16 rounding of
  //  input_layernorm gives 2.7e-3 on its output and 1.0e-2 on the whole-model attn_weights,
  //  which the wildcard row's 1e-2 would miss on some layers.)
  {"attn_weights", "reference-vs-hf", "bf16", 3e-2, 3e-2, 3e-3, 1.0 - 4.5e-6,
   "as attn_weights cpu-vs-reference bf16: the same rounding points, so values differ only where "
   "the two accumulation orders straddle a bf16 boundary (a fraction ~2.8e-3 of each stage's "
   "values at K <= 8192), ~2e-3 after ~12 stages and the softmax; bound 3e-3 (measured 5.9e-4 on "
   "the Kimi golden fixture, 0 on the small ones and on every layer of the whole-model fixture)"},
  {"attn_weights", "cpu-vs-hf", "bf16", 3e-2, 3e-2, 3e-3, 1.0 - 4.5e-6,
   "as attn_weights reference-vs-hf bf16 (measured 5.7e-4 on the Kimi golden fixture, 0 on the "
   "whole-model fixture)"},
  {"hidden_states", "reference-vs-hf", "bf16", 0.0, 7.9e-3, 1e-3, 1.0 - 5e-7,
   "input_layernorm's output (run --tokens / --residual) against the model's: x*r rounded to bf16, "
   "then w*that rounded; r = rsqrt(fp32(mean(x^2)) + eps) may differ by 1 fp32 ulp (HF sums the H "
   "squares in fp32, we in double), which flips a bf16 rounding only for a fraction ~2^-24/2^-8 "
   "~ 1.5e-5 of the values, each by one ulp (<= 2^-7 = 7.8e-3 relative): normalized error ~ "
   "sqrt(1.5e-5)*2^-8 ~ 1.5e-5; bound 1e-3, below the ~2.7e-3 of a missing rounding point"},
  {"hidden_states", "cpu-vs-hf", "bf16", 0.0, 7.9e-3, 1e-3, 1.0 - 5e-7,
   "as hidden_states reference-vs-hf bf16 (the same host code normalizes the input for every backend)"},
  {"inv_freq", "ours-vs-hf", "fp32", 0.0, 4.8e-7, kNoBound, -1.0,
   "both evaluate the same fp32 expression (pow, 1/x, factor*x, ramp blend); only the last bit "
   "of pow may differ between libm and PyTorch's vectorized pow (<= 1 ulp), propagated through "
   "<= 6 further fp32 roundings -> <= 8*u32 = 4.8e-7 relative (as the fp32-vs-double row)"},
  {"*", "ours-vs-hf", "fp32", 3e-6, 0.0, kNoBound, -1.0,
   "cos/sin tables in fp32: the angle fp32(inv_freq*pos) differs by at most 2 ulps of the angle "
   "when inv_freq does (|angle| <= S-1 = 23 in the fixtures: 2*23*u32 = 2.8e-6), plus <= 1 ulp "
   "(6e-8) of PyTorch's vectorized cos/sin vs our correctly rounded value; |cos|,|sin| <= 1"},
  {"*", "ours-vs-hf", "bf16", 3.9e-3, 0.0, kNoBound, -1.0,
   "cos/sin cast to bf16: the fp32 values (row above) can straddle a bf16 rounding boundary, "
   "giving one bf16 ulp, which is <= 2^-8 = 3.9e-3 for |value| < 1"},

  // ---- decode (suite decode): decode rows against the causal prefill, absorbed vs naive ----
  {"attn_output", "decode-full-vs-prefill", "fp32", 1e-4, 1e-3, 1e-5, 1.0 - 1e-9,
   "cpu decode with the whole cache vs the cpu causal prefill's row of the same token: two fp32 "
   "evaluations of the same real number (the absorbed form reassociates q_nope . W_UK c as "
   "(W_UK^T q_nope) . c and sum p W_UV c as W_UV sum p c; the naive form sums in another order); "
   "each is within the cpu-vs-reference fp32 analysis (typical sqrt(K)*u32 per GEMM, K <= 8192), "
   "so 1e-5 normalized as that row (measured 1.5e-7 .. 2.6e-7 on the small geometries)"},
  {"attn_output", "decode-absorbed-vs-naive", "fp32", 1e-4, 1e-3, 1e-5, 1.0 - 1e-9,
   "the same real number in two summation orders, both fp32 (as decode-full-vs-prefill fp32; "
   "measured 2.2e-7 .. 3.3e-7 on the odd geometry, every policy)"},
  {"attn_output", "decode-naive-vs-prefill", "bf16", 3e-2, 3e-2, 3e-3, 1.0 - 4.5e-6,
   "naive bf16 decode rounds at exactly HF's points (kv, q.k, *scale, softmax, p.v, o_proj: "
   "docs/math.md §7), as the prefill does, so the two differ only where their fp32 accumulation "
   "orders put a value on different sides of a bf16 rounding boundary: the analysis of "
   "cpu-vs-reference bf16 attn_output (measured 0 on tiny, odd and Kimi at T <= 18)"},
  {"attn_output", "decode-absorbed-vs-prefill", "bf16", kNoBound, kNoBound, 2e-2, 1.0 - 2e-4,
   "absorbed bf16 decode rounds other intermediates than HF's eager prefill (docs/decode.md §3): "
   "it rounds q~ and the latent context and never k_nope, v or p. About 5 roundings differ on "
   "each side, each of rms relative error ubf16/sqrt(12)/2 ~ 1.1e-3: sqrt(10)*1.1e-3 ~ 3.5e-3, "
   "times ~2 through the softmax: ~7e-3 (measured 5.5e-3 .. 7.1e-3, cosine >= 0.99997, on tiny, "
   "odd and Kimi); bound 2e-2, cosine 1 - (2e-2)^2/2. Elementwise bounds off: elements near zero "
   "have unbounded relative error"},
  {"attn_output", "decode-absorbed-vs-naive", "bf16", kNoBound, kNoBound, 2e-2, 1.0 - 2e-4,
   "the same two rounding schedules as decode-absorbed-vs-prefill bf16, on an evicted cache "
   "(measured 5.1e-3 .. 7.3e-3 on the odd geometry, every policy)"},

  // ---- decode kernels against the reference (suite backend_ops): whole cache, rows [P, T) ------
  {"attn_output", "decode-naive-vs-reference", "fp32", 1e-4, 1e-3, 1e-5, 1.0 - 1e-9,
   "the cpu decode kernel's naive form (k = W_UK c, v = W_UV c per head, then q.k and p.v) in fp32 "
   "against the exact reference forward's row of the same token: one side exact, the other fp32 "
   "accumulations of the cpu-vs-reference fp32 analysis (typical sqrt(K)*u32 per product, K <= 8192)"},
  {"attn_output", "decode-absorbed-vs-reference", "fp32", 1e-4, 1e-3, 1e-5, 1.0 - 1e-9,
   "the absorbed form ((W_UK^T q_nope).c, W_UV sum p c) is the same real number reassociated; in fp32 "
   "against the exact reference, the analysis of decode-naive-vs-reference fp32"},
  {"attn_output", "decode-naive-vs-reference", "bf16", 3e-2, 3e-2, 3e-3, 1.0 - 4.5e-6,
   "naive bf16 decode rounds at exactly HF's points (docs/math.md §7), which the reference's bf16 "
   "mode emulates: the two differ only by the one-ulp flips of the cpu-vs-reference bf16 analysis"},
  {"attn_output", "decode-absorbed-vs-reference", "bf16", kNoBound, kNoBound, 2e-2, 1.0 - 2e-4,
   "absorbed bf16 decode rounds other intermediates than HF's (docs/decode.md §3), which the "
   "reference's bf16 mode follows: the analysis of decode-absorbed-vs-prefill bf16 (~7e-3 from the "
   "different schedules), the prefill side's flips against the reference (<= 3e-3) adding in "
   "quadrature; bound 2e-2 as there. Elementwise bounds off (elements near zero)"},

  // ---- the whole-model forward (suite model): DeepseekV3ForCausalLM against transformers --------
  // (rows added by "model"; docs/math.md §15, measured figures in docs/testing.md §4)
  {"*", "model-cpu-vs-hf", "fp32", 1e-4, 1e-3, 1e-5, 1.0 - 1e-9,
   "every layer's hidden states and the logits of the fixed-order CPU forward (fp32 fma chains) "
   "against transformers' fp32 run (oneDNN/MKL sums in other orders): each layer's GEMMs differ by "
   "~sqrt(K)*u32 ~ 1e-6 relative (K <= 96 here), RMSNorm and softmax add little, and the residual "
   "stream carries each layer's difference into the next, so L layers give ~sqrt(L) times that: "
   "norm error 1e-5 is the issue's goal and ~10x the measured 9.1e-7 (3 layers); elementwise as "
   "cpu-vs-hf fp32"},
  {"*", "model-cpu-vs-reference", "fp32", 1e-4, 1e-3, 1e-5, 1.0 - 1e-9,
   "the fixed-order CPU forward against the exact (double) reference on the same weights (suite "
   "int4: synth's Kimi-layout model with INT4 experts): the analysis of model-cpu-vs-hf fp32 with "
   "one side exact, so at most the same bounds"},
  {"*", "model-reference-vs-hf", "fp32", 1e-4, 1e-3, 1e-5, 1.0 - 1e-9,
   "the exact (double) reference against transformers' fp32 run: the error is transformers' own fp32 "
   "accumulation, the analysis of model-cpu-vs-hf fp32 (measured <= 9.0e-7 normalized)"},
  {"*", "model-cpu-vs-hf", "bf16", kNoBound, kNoBound, 1e-2, 1.0 - 5e-5,
   "both round to bf16 at transformers' points (docs/math.md §7, §15.3), so values differ only where "
   "two fp32 summation orders straddle a bf16 boundary: a one-ulp flip. A flip then travels: the "
   "residual add keeps it, the next RMSNorm's variance moves every normalized value by ~1e-7 "
   "relative and the attention and MoE mix it into other rows and features, so later layers flip "
   "more elements. Measured: the CPU forward is bit-identical on every hidden state of the three "
   "fixtures and on two fixtures' logits, one logit of 2560 differs by one ulp (whole-model-groups); "
   "the reference has one flip in layer 2 of whole-model, which grows to 2.1e-3 normalized on the "
   "logits. Bound 1e-2 (cosine 1 - (1e-2)^2/2); elementwise bounds off (an element near 0 has "
   "unbounded relative error, a large one a large absolute ulp). A missing bf16 rounding point (tried: "
   "silu's) moves ~20 % of the first affected layer's values at once (1.7e-3 there, up to 3.2e-2 on "
   "the logits): the suite catches it by the share of values that differ in the first layer that "
   "differs at all (test_model.cpp kFirstDifferenceShare), not by this row"},
  {"*", "model-reference-vs-hf", "bf16", kNoBound, kNoBound, 1e-2, 1.0 - 5e-5,
   "as model-cpu-vs-hf bf16 (the reference's double sums straddle other boundaries than the CPU's "
   "fp32 chains: measured one flip in whole-model layer 2, 2.1e-3 normalized on the logits; the other "
   "two fixtures bit-identical)"},
  // (rows added by "model": the trained models/tiny-mla at S = 1024 against transformers' logits,
  //  tests/data/golden/whole-model-shipped-tiny-mla/; mla-h2o's fixed-order result is the same on
  //  every ISA and thread count, so the measured figures below are those of any machine)
  {"logits", "shipped-model-cpu-vs-hf", "fp32", 1e-4, 0.0, 2e-6, 1.0 - 2e-12,
   "fp32 summation order: mla-h2o's in-order fp32 fma chains against torch's blocked fp32 sums "
   "(AVX2 CPU); each GEMM differs by ~sqrt(K)*u32 relative at most (K <= 768: 1.7e-6), typically "
   "less (random-signed rounding errors partly cancel), over 5 layers at S = 1024; measured 3.8e-7 "
   "normalized, max abs 2.1e-5 on the AMD EPYC fixture: norm bound 2e-6 (~5x), atol 1e-4 (~5x), "
   "cosine 1 - (2e-6)^2/2"},
  {"logits", "shipped-model-cpu-vs-hf", "bf16", kNoBound, kNoBound, 5.5e-3, 1.0 - 1.5e-5,
   "torch's ISA-specific bf16 dot-product order vs mla-h2o's fixed-order bf16 pair chains "
   "(docs/cpu-gemm.md §11); measured 3.95e-3 normalized (cosine 1 - 8e-6, 7 of 1024 rows "
   "bit-identical, max abs 1.94) on the Zen 4 AMD EPYC, 2026-12-08 (3.64e-3 with the in-order fp32 "
   "chains before), see docs/math.md §15.4: the one-ulp flips of model-cpu-vs-hf bf16 spread over "
   "5 layers and 1024 positions to most rows. Bound set at 1.5x the first measurement (1.39x the "
   "current), cosine 1 - (5.5e-3)^2/2; elementwise off (a large logit's ulp is large)"},
  {"mean_nll", "shipped-model-cpu-vs-hf", "fp32", 5e-7, 0.0, kNoBound, -1.0,
   "mean NLL (nats/token, 1023 targets) from the fp32 logits above: per-token differences up to "
   "~1e-5 (measured max 9.9e-6) of either sign average out over 1023 targets; measured -2.2e-8 "
   "(0.730355 both): bound 5e-7"},
  {"mean_nll", "shipped-model-cpu-vs-hf", "bf16", 3.3e-4, 0.0, kNoBound, -1.0,
   "mean NLL from the bf16 logits above (the same cause: torch's ISA-specific bf16 dot-product "
   "order vs mla-h2o's fixed-order bf16 pair chains): measured +2.94e-4 (mla-h2o 0.727905, "
   "transformers 0.727611; max per-token |dNLL| 0.052) on the Zen 4 AMD EPYC, 2026-12-08 "
   "(+2.16e-4 with the in-order fp32 chains before), see docs/math.md §15.4; bound set at 1.5x "
   "the first measurement, 1.12x the current: not widened when the chain changed"},
  {"*", "hand-worked", "double", 0.0, 1e-14, kNoBound, -1.0,
   "a decode metric (mass recall, rel_error, cosine) of a hand-made table vs the same few "
   "operations written out in the test: at most ~20 double operations on O(1) values, each "
   "u64 = 1.1e-16 relative: < 3e-15; 3x margin"},
  {"t_quantile", "ours-vs-scipy", "double", 0.0, 1e-12, kNoBound, -1.0,
   "Student-t quantiles (mla/stats.hpp: the closed-form integer-df CDF, bisected to 1e-15 relative) "
   "vs scipy.stats.t.ppf's (incomplete-beta inversion, ~1e-14 relative); the series has <= df/2 "
   "terms, each u64 = 1.1e-16 relative, and the CDF's slope near 0.975 turns a CDF error e into a "
   "quantile error of ~e / pdf(t) < 20 e for df >= 1: < 1e-13; bound 10x that"},
  {"*", "eval-stats-hand-worked", "double", 0.0, 1e-13, kNoBound, -1.0,
   "eval's window statistics (means, t-interval, quantiles) vs the same few operations written "
   "out in the test: ~30 double operations on O(1) values, u64 each, plus the t quantile's "
   "1e-13 (row above): < 2e-13 absolute on O(1) values; relative 1e-13 on values ~1"},
  {"*", "eval-pooled-stats-vs-csv", "double", 1e-13, 1e-11, kNoBound, -1.0,
   "summary.csv's pooled statistics vs the test's own code over eval.csv's %.17g figures (the same "
   "doubles): means and centred sums of n = 120 terms of O(1e-6 .. 10), in the same order but "
   "written differently (the quantile as (1-f)x_i + f x_i+1, the ln-ratio se as the se of the "
   "paired differences instead of se_a^2 + se_b^2 - 2 cov, which cancels: with the two NLL series "
   "correlated, se^2 ~ 1e-4 from terms ~1e-2, ~100x amplification of n u64 ~ 1.3e-14 -> 1.3e-12); "
   "relative 1e-11 and an absolute floor 1e-13 for values near 0 (dp quantiles ~1e-5)"},
  {"token_features", "fp32-vs-double", "fp32", 0.0, 2e-5, kNoBound, -1.0,
   "key / value / output norms from fp32 GEMMs (kv_b_proj, the Gram matrix of o_proj's head block) "
   "vs double loops on the same weights: sums of K <= 128 squared fp32 products, each term "
   "rounded (u32) and the sum accumulated in fp32: <= K*u32 = 7.7e-6 relative in the worst case "
   "on the odd geometry (r_kv 40, H 72, d_v 20); 2.5x margin"},
  {"expected_attention", "features-vs-decode-kernel", "fp32", 1e-7, 1e-4, kNoBound, -1.0,
   "the same softmax probabilities in fp32 from two associations of the logit (expanded key "
   "[W_UK c | k_pe] . mu' vs the absorbed q~ . c + q_pe . k_pe): logit error ~ sqrt(K)*u32*"
   "sum|terms| ~ 1e-6 absolute for the odd geometry's O(1) logits, which moves a probability by "
   "that much relative; 1e-4 relative bounds it 100x, atol covers probabilities near zero"},
  {"expert_weight", "int4-vs-drawn", "bf16", kNoBound, kNoBound, 0.12, 0.99,
   "synth's routed experts after INT4 pack-quantization against the bf16 weights drawn (not an "
   "implementation pair: the quantization error itself). Per group of 32 normal values the step "
   "is s = max|w| / 7.5, about 2.5 sigma / 7.5 = 0.33 sigma, and rounding to the nearest step "
   "leaves a uniform error of rms s / sqrt(12) = 0.096 sigma: norm error ~0.096, cosine "
   "~1 - 0.096^2 / 2 = 0.995; a wrong scale or code layout gives >= 0.3. Elementwise off (the "
   "bound is per group's scale, not per value)"},
  // ---- scalar checks (rows added by "tol-table": bounds that were literals in the tests) --------
  // A scalar check uses one field of its row: atol (|got - ref| <= atol) or rtol (|got - ref| <=
  // rtol * |ref|, or Boost's tolerance(rtol), which is relative to both sides). Where a check
  // scales a field or uses it for a bound of another kind, the reason says so first: ulps (the two
  // exp rows of suite vector_kernels), a share of values (model-first-differing-tensor-vs-hf), a
  // lower bound (prefill-full-vs-masked-hf), a one-sided bound (rounding-past-bound), atol times S
  // (cuda-sum-vs-exact), rtol times a sum (score_mean), atol in units of a block scale (fp8). The
  // values are those the literals had; "not measured" means that neither the test nor the git log
  // records a figure.
  // -- probability sums (each query row's softmax sums to 1)
  {"attn_weights_row_sum", "reference-vs-one", "double", 1e-15, 0.0, kNoBound, -1.0,
   "suite reference (softmax_rows_sum_to_one): each row of the reference's double softmax (T <= 9 "
   "terms in [0, 1], each p = e / s rounded once) summed in double against 1: typical error ~ "
   "sqrt(T)*u64 ~ 3e-16; the worst case (T roundings of p plus T - 1 additions, ~2T*u64 ~ 2e-15 "
   "for T = 9) is above the bound, which the test has held on every small geometry and mask"},
  {"attn_weights_row_sum", "fixed-order-vs-one", "fp32", 1e-5, 0.0, kNoBound, -1.0,
   "suite model (fixed_order_attention_row_is_the_same_from_any_store): one head's T = 40 fp32 "
   "probabilities of the fixed-order row attention (exp_fixed within 1 ulp, 16-lane fp32 sum, "
   "p = e / sum in fp32) summed in double against 1: the lane sum's error <= T*u32 ~ 2.4e-6 plus "
   "~2*u32 per p: ~2.5e-6 worst; 4x margin (not measured)"},
  {"attn_weights_row_sum", "fixed-order-vs-one", "bf16", 2e-2, 0.0, kNoBound, -1.0,
   "as the fp32 row, with each p rounded to bf16 (HF's rounding of the softmax output): each p moves "
   "by <= 2^-8 of itself (half an ulp of an 8-bit significand), so |sum - 1| <= 2^-8 = 3.9e-3 in "
   "the worst case (all roundings one way), typically ~sqrt(T)*2^-8*max p; ~5x the worst case "
   "(not measured). A sanity check only: the bits themselves are compared exactly above it"},
  {"head_scores", "sum-vs-exact", "double", 1e-13, 0.0, kNoBound, -1.0,
   "suite reference (backend_result_fields): one head's H2O mass over S = 7 keys on the odd "
   "geometry, reference backend in double, against S (every causal query row sums to 1): S rows "
   "each within ~2S*u64 ~ 1.6e-15 of 1 plus the mass sums' own roundings (<= S*u64*S ~ 5e-15): "
   "~1e-14 worst; 10x margin"},
  {"token_scores", "sum-vs-exact", "double", 1e-13, 0.0, kNoBound, -1.0,
   "as head_scores sum-vs-exact double: all n*S = 21 masses (n = 3 heads) against n*S, ~2e-14 "
   "worst; ~5x margin"},
  {"token_scores", "reference-vs-attn-weights-column", "double", 1e-15, 0.0, kNoBound, -1.0,
   "suite reference (backend_result_fields): causal, so the last key's mass is the sum over the "
   "n = 3 heads of p[h, S-1, S-1] alone; the backend's mass against the test's sum of those 3 "
   "doubles <= 1: at most 2 additions apart, <= 2*u64*3 ~ 6.7e-16"},
  {"token_scores", "run-sum-vs-exact", "fp32", 1e-3, 0.0, kNoBound, -1.0,
   "suite cli (run_seeded_outputs): `run` (fp32, backend auto) on the tiny checkpoint, 4 heads x "
   "24 queries: report.json's scores.sum against 96. Each fp32 softmax row sums to 1 within ~S*u32 "
   "~ 1.4e-6 (S = 24) in the worst case, 96 rows: <= 1.4e-4; ~7x margin (not measured)"},
  {"token_scores", "cuda-sum-vs-exact", "fp32", 1e-4, 0.0, kNoBound, -1.0,
   "tests/cuda (result_fields_and_stage_times; also run on the host emulator, suite cuda_emulated): "
   "the CUDA backend's masses summed over keys against n*S on tiny (n = 2, S = 9), bound atol * S "
   "= 9e-4: each fp32 softmax row sums to 1 within ~S*u32 ~ 5.4e-7, n*S = 18 rows: ~1e-5 worst; "
   "the bound is ~90x that (not measured; it leaves room for a device exp less exact than 1 ulp)"},
  {"token_scores", "sweep-reference-sum-vs-exact", "double", 1e-9, 0.0, kNoBound, -1.0,
   "suite sweep (sweep_outputs_match_per_layer_runs): one layer's masses read back from scores.csv "
   "(%.17g, round trip) and summed, against n*S = 4*24; reference backend, double sums: 96 rows "
   "each within ~2S*u64 ~ 5e-15 of 1, ~5e-13 in all at worst. The bound is ~2000x that (not "
   "measured): looser than the analysis needs (compare token_scores sum-vs-exact double, 1e-13)"},
  {"score_mean", "sweep-csv-vs-recomputed", "double", 0.0, 1e-12, kNoBound, -1.0,
   "suite sweep: layers.csv's score_mean against the mean of the same layer's scores.csv values "
   "(both printed %.17g, round trip), |got - ref| <= rtol * (the sum of the S = 24 scores), as the "
   "test writes it: two double sums of 24 positive values in possibly different orders, <= 24*u64 "
   "~ 2.7e-15 of the sum apart; bound ~400x that (not measured)"},
  // -- kernels' exp
  {"exp", "fixed-order-vs-double", "fp32", 0.0, 2.4e-7, kNoBound, -1.0,
   "suite model (fixed_order_exp_and_sum_are_one_function_per_value): exp_fixed / exp_lanes on "
   "softmax arguments in [-50, 0] against double exp, for results above FLT_MIN (1.2e-38, below "
   "which fp32 is subnormal and a relative bound is meaningless): docs/math.md §15.4 measured <= 1 "
   "ulp, and one fp32 ulp is <= 2^-23 = 1.2e-7 relative: bound 2 ulps = 4*u32 = 2.4e-7"},
  {"exp", "vector-kernels-vs-correctly-rounded", "fp32", 1.0, 0.0, kNoBound, -1.0,
   "atol counts ulps here (the distance of the fp32 bit patterns), not an absolute difference. "
   "Suite vector_kernels: every instruction set's exp against the correctly rounded value "
   "(tests/data/exp/exp_f32_reference.txt, mpmath at 200 bits) on 1,286 points: at most 1 ulp "
   "(docs/long-context.md §2: 90 % of the points exact)"},
  {"exp", "vector-kernels-vs-std-exp", "fp32", 1.0, 0.0, kNoBound, -1.0,
   "atol counts ulps, as the row above. Every instruction set's exp against std::exp (glibc expf, "
   "itself within 1 ulp of the table) on every 509th float of [-104, 0] (2.2 million): at most "
   "1 ulp (docs/long-context.md §2: 99.1 % identical)"},
  // -- whole model
  {"*", "model-first-differing-tensor-vs-hf", "bf16", 0.02, 0.0, kNoBound, -1.0,
   "atol is a share of values here, not a difference: test_model.cpp kFirstDifferenceShare. The "
   "first tensor of a bf16 forward (hidden_states.0, .1, ..., logits) that is not bit-identical to "
   "transformers' may differ in at most this share of its values: a one-ulp flip where two fp32 "
   "summation orders straddle a rounding boundary touches a handful of values of its layer "
   "(measured: 6 of 1280, 0.5 %), while a missing or extra rounding point moves ~20 % of the first "
   "layer it affects (tried: silu's)"},
  {"mean_nll", "ours-vs-fixture-meta", "double", 1e-12, 0.0, kNoBound, -1.0,
   "suite model (shipped tiny-mla): the test's double log-softmax mean NLL of the stored transformers "
   "logits against the fixture's own figure (metadata mean_nll_fp32 / _bf16, float64 log-softmax in "
   "the script): the same 1023 per-token values, each within a few u64 relative (libm vs numpy "
   "log/exp), summed in other orders: <= ~1023*u64*0.73 ~ 8e-14 worst; ~10x margin (not measured)"},
  // -- rope and softmax scale (docs/math.md §4, §5)
  {"yarn_correction_dim", "ours-vs-spec-table", "double", 5e-5, 0.0, kNoBound, -1.0,
   "suite rope: YaRN's raw correction dims (8.9145, 19.1646) as docs/math.md §4 step 3 prints them, "
   "with 4 decimals: half a unit of the 4th decimal is 5e-5; our double value is exact to ~1e-15"},
  {"yarn_correction_dim", "ours-vs-closed-form", "double", 1e-13, 0.0, kNoBound, -1.0,
   "suite rope: the raw correction dim against the test's closed form dim * ln(4096 / (beta * 2 pi)) "
   "/ (2 ln base) in double: the same ~6 roundings (u64 each, of values ~9) in another association: "
   "<= ~6*u64*9 ~ 6e-15; ~15x margin"},
  {"softmax_scale", "ours-vs-spec-table", "double", 1e-15, 0.0, kNoBound, -1.0,
   "suite rope (softmax_scale_table): 192^-0.5 * m^2, m = 0.1 * mscale_all_dim * ln(factor) + 1, "
   "against docs/math.md §5's 17-digit values of the same double formula: ~6 roundings of u64 on "
   "values ~0.14 (~1.5e-17 each) plus the printed digits' last unit: ~1e-16; ~10x margin"},
  {"attention_factor", "ours-vs-closed-form", "double", 1e-15, 0.0, kNoBound, -1.0,
   "suite rope: the cos/sin multiplier get_mscale(64) = 0.1 ln 64 + 1 ~ 1.416 against the test's "
   "expression of it: <= 3 roundings of u64 * 1.4 ~ 4.7e-16 apart; ~2x margin"},
  // -- eval metrics (suite eval, metrics_by_definition: eval's double against the test's long double)
  {"logits", "prefill-full-vs-masked-hf", "fp32", kNoBound, kNoBound, 1e-2, -1.0,
   "max_norm_error is a LOWER bound here: the check has power. Suite eval (prefill compression): "
   "the full cache's logits must be farther than 1e-2 normalized from transformers' logits under "
   "the streaming policy's mask, 1000x the model-cpu-vs-hf fp32 bound (1e-5) that the streaming "
   "run itself meets, so a comparison that cannot tell the two caches apart fails (not measured)"},
  {"*", "eval-vs-long-double", "double", 0.0, 1e-12, kNoBound, -1.0,
   "eval's per-position NLL and predicted probability and its summaries (mean NLL, perplexity "
   "ratio, mean KL, top-1 agreement) against the same definitions in long double on the same fp32 "
   "logits: eval's double log-softmax over V logits (max, sum of V exps, log) is within ~V*u64 of "
   "its value relative to the log-sum-exp, then at most a division by N or an exp: ~1e-14 for the "
   "test model's vocabulary; ~100x margin"},
  {"kl", "eval-vs-long-double", "double", 0.0, 1e-9, kNoBound, -1.0,
   "per-position KL(full || policy) = sum_v p_full (log p_full - log p_policy): V terms of either "
   "sign that cancel to a small KL, so the double sum's rounding (~V*u64*sum|terms|) and the log-"
   "probabilities' own errors (~u64*|log p| each) are large relative to the KL itself; 1e-9 "
   "relative (not measured)"},
  {"delta_nll", "eval-vs-long-double", "double", 0.0, 1e-9, kNoBound, -1.0,
   "mean NLL of the policy minus that of the full cache: two means of O(1) values ~1e-12 relative "
   "each (the wildcard row), whose difference cancels to a small delta, amplifying the relative "
   "error by mean/delta; 1e-9 relative (not measured)"},
  {"kl", "rounding-past-bound", "double", 1e-15, 0.0, kNoBound, -1.0,
   "a one-sided bound: KL >= -atol. KL is >= 0 exactly; eval's double sum of V terms of either "
   "sign may fall just below 0 where the policy's distribution equals the full cache's to rounding"},
  {"mass_recall", "rounding-past-bound", "double", 1e-12, 0.0, kNoBound, -1.0,
   "a one-sided bound: a mass recall (kept attention mass / total mass, a mean over heads) <= "
   "1 + atol (suite eval: each layer's mean; suite decode: every step), and the step's 5th "
   "percentile over heads (the minimum for fewer than 20 heads) <= its mean + atol: sums of O(1) "
   "double values divided by their count, a few u64 past the exact bound at most; ~1000x margin"},
  {"mass_recall", "decode-absorbed-cpu-vs-reference", "fp32", 0.0, 1e-4, kNoBound, -1.0,
   "suite decode (absorbed_equals_naive_and_cpu_equals_reference): every step's mass recall of "
   "the cpu absorbed decode kernel against the reference's, on the odd geometry, every policy: a "
   "ratio of sums of positive probabilities, so its relative error is about that of the "
   "probabilities (cpu-vs-reference fp32: ~sqrt(K)*u32 ~ 1e-6 typical, rtol 1e-3 elementwise); "
   "1e-4 (not measured)"},
  {"mass_recall", "decode-absorbed-cpu-vs-reference", "bf16", 0.0, 1e-4, kNoBound, -1.0,
   "as the fp32 row, in bf16: the same rounding points on both sides, so the probabilities differ "
   "by the one-ulp flips of cpu-vs-reference bf16 (a fraction ~3e-3 of them, 2^-8 relative each), "
   "which a recall summed over many positions and heads dilutes; the test uses the same 1e-4 "
   "(not measured)"},
  {"t_cdf", "ours-at-scipy-quantile", "double", 1e-13, 0.0, kNoBound, -1.0,
   "suite eval (t_quantiles_match_scipy): our two-sided Student-t CDF at scipy's 0.975 quantile "
   "against 0.95, df 1 .. 1000: the closed-form series has <= df/2 terms of u64 each (<= 5.5e-14 "
   "at df = 1000), plus scipy's quantile error (~1e-14 relative) times the density (< 0.4): "
   "< 1e-13"},
  {"mean_interval", "ours-vs-python-printed", "double", 1e-15, 0.0, kNoBound, -1.0,
   "suite eval (mean_interval_and_quantiles_by_hand): the t-interval's low end -0.0437... against "
   "the value Python printed (17 digits) from the same formula: mean 0.3 minus t*se ~ 0.344, each "
   "within a few u64 of 0.34 (~1e-16), so the difference is ~1e-16; ~10x margin"},
  // -- hand-worked comparisons and formats
  {"cosine", "compare-values-hand-worked", "double", 0.0, 1e-15, kNoBound, -1.0,
   "suite report (compare_values_by_hand): mla::compare_values' cosine of [1, 2, 3, 4] and "
   "[1, 2.5, 3, 4] against 31 / (sqrt(30) sqrt(32.25)): the dot product and squared norms are exact "
   "in double (small integers and quarters), leaving 2 square roots, a product and a division: "
   "<= 4*u64 = 4.4e-16 relative; ~2x margin"},
  {"kv_b_proj", "fp8-e4m3-vs-f32", "fp8", 9.765625e-4, 0.0625, kNoBound, -1.0,
   "suite checkpoint (the f8_e4m3 checkpoint's dequantized kv_b_proj against the f32 weights it was "
   "made from), the format's own rounding error: atol is in units of the block's scale (scale_inv = "
   "amax / 448). E4M3 keeps 3 fraction bits, so a normal value rounds to within half an ulp, 2^-4 "
   "= 0.0625 of itself (rtol); subnormals (below 2^-6 scale units) step by 2^-9, half a step 2^-10 "
   "= 9.765625e-4 scale units (atol)"},
  {"reconstruction", "subset-softmax-vs-renormalized", "fp32", 1e-9, 2e-5, 2e-5, 1.0 - 1e-9,
   "suite eval (kvzip_chunked_repeat_scores): kvzip's chunked softmax, attend_row over a subset S of "
   "m <= 40 keys, against attend_row's causal probabilities over every key renormalized over S in "
   "double. Both exponentiate the same fp32 logits, shifted by different maxima (the shifted "
   "argument rounds within u32 of |l - max| <= ~30: ~1.8e-6 relative), normalise by fp32 sums of m "
   "terms (<= m*u32 ~ 2.4e-6 each) and round each probability to fp32 (u32): ~6e-6 relative; ~3x "
   "margin. atol for probabilities below 1e-9, where fp32 exp's own rounding dominates"},
  {"ruler.svg dot y", "svg-printed-vs-tick-mapping", "double", 0.011, 0.0, kNoBound, -1.0,
   "suite tasks (cli_ruler_svg): a dot's printed cy against the y its value has on the axis drawn from "
   "the lowest and highest y tick labels' printed positions. Every coordinate is printed with %.2f, "
   "so each is within 0.005 px of the chart's double; the interpolation between the two ticks is "
   "within 0.005 px of the exact map (a convex mix of two such errors), the dot itself 0.005 px: "
   "<= 0.01 px plus double rounding (~1e-13 px); 10 % margin"},
};
// clang-format on

// The row for (what, pair, precision); a row with what == "*" matches any tensor when no
// specific row exists. Throws std::logic_error when the table has no such row.
inline const Tolerance& tolerance(std::string_view what, std::string_view pair, std::string_view precision) {
  const Tolerance* wildcard = nullptr;
  for (const Tolerance& t : kTolerances) {
    if (t.pair != pair || t.precision != precision) continue;
    if (t.what == what) return t;
    if (t.what == "*" && wildcard == nullptr) wildcard = &t;
  }
  if (wildcard != nullptr) return *wildcard;
  throw std::logic_error("tolerances.hpp has no row for what=" + std::string(what) + " pair=" + std::string(pair) +
                         " precision=" + std::string(precision));
}

}  // namespace mla::test
