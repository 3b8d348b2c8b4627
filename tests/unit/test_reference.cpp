// tests/unit/test_reference.cpp — suite `reference`: the scalar double reference
// (reference/mla_reference.cpp) checked against identities that hold in exact arithmetic,
// a case small enough to write out by hand, the bf16 rounding contract and its input checks.
//
// Nothing here compares the reference with itself under the same formula: each check uses
// an independent route to the same number (the absorbed form §10, permuted weights §6, a
// closed form, representability in bf16). Tolerances: tests/unit/tolerances.hpp.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "compare.hpp"
#include "geometries.hpp"
#include "mla/attention.hpp"
#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/rope.hpp"
#include "reference/mla_reference.hpp"
#include "tolerances.hpp"

namespace {

using mla::AttentionConfig;
using mla::ForwardOptions;
using mla::LayerWeights;
using mla::Precision;
using mla::TensorD;
using mla::TensorF;

ForwardOptions options(Precision p, mla::Mask mask = mla::Mask::Causal) {
  ForwardOptions o;
  o.precision = p;
  o.mask = mask;
  return o;
}

const mla::test::Tolerance& identity_tol() {
  return mla::test::tolerance("*", "reference-identity", "double");
}

void expect_close(const std::string& name, const TensorD& ref, const TensorD& got, const mla::test::Tolerance& tol) {
  const auto r = mla::test::compare(name, ref, got, tol);
  BOOST_TEST(r.ok, r.message);
}

template <class F>
mla::Error error_of(F&& f) {
  try {
    f();
  } catch (const mla::Error& e) {
    return e;
  }
  BOOST_FAIL("expected an mla::Error");
  return mla::Error(mla::ErrorKind::Io, "unreachable");
}

bool all_bf16(const TensorD& t) {
  for (double v : t.data)
    if (static_cast<double>(mla::round_to_bf16(static_cast<float>(v))) != v) return false;
  return true;
}

// The permutation of §6: out_HF[i] = out_official[P[i]], P = [0, 2, 4, ..., 1, 3, 5, ...].
std::vector<int64_t> deinterleave_permutation(int64_t d_r) {
  std::vector<int64_t> p(static_cast<size_t>(d_r));
  for (int64_t j = 0; j < d_r / 2; ++j) {
    p[static_cast<size_t>(j)] = 2 * j;
    p[static_cast<size_t>(d_r / 2 + j)] = 2 * j + 1;
  }
  return p;
}

// Rows [first, first + d_r) of a [rows, cols] weight reordered: new row first+i = old row first+P[i].
void permute_rows(TensorF& w, int64_t first, const std::vector<int64_t>& perm) {
  const int64_t cols = w.shape.size() == 2 ? w.dim(1) : 1;
  const TensorF old = w;
  for (size_t i = 0; i < perm.size(); ++i)
    for (int64_t c = 0; c < cols; ++c)
      w.data[static_cast<size_t>((first + static_cast<int64_t>(i)) * cols + c)] =
          old.data[static_cast<size_t>((first + perm[i]) * cols + c)];
}

}  // namespace

BOOST_AUTO_TEST_SUITE(reference)

// §10: q_nope.k_nope = (W_UK^T q_nope).c, so the absorbed scores equal the naive ones.
BOOST_AUTO_TEST_CASE(absorbed_scores_equal_naive) {
  for (const auto& g : mla::test::small_geometries()) {
    BOOST_TEST_CONTEXT(g.name << ": " << mla::test::vars(g.cfg)) {
      const LayerWeights w = mla::test::random_layer_weights(g.cfg, 11);
      const TensorF x = mla::test::random_hidden(7, g.cfg.hidden_size, 12);
      const auto a = mla::ref::forward(g.cfg, w, x, options(Precision::FP32));
      const auto qh = mla::ref::split_query_heads(g.cfg, a.q);
      const TensorD absorbed =
          mla::ref::absorbed_scores(g.cfg, w, qh.q_nope, a.q_pe_roped, a.latent_normed, a.k_pe_roped, a.scaling);
      expect_close(g.name + " absorbed vs naive scores", a.scores, absorbed, identity_tol());
    }
  }
}

// The same at the real Kimi sizes (r_kv 512, d_r 64, 64 heads), 3 tokens.
BOOST_AUTO_TEST_CASE(absorbed_scores_equal_naive_kimi_geometry) {
  const AttentionConfig cfg = mla::test::geometry("kimi");
  const LayerWeights w = mla::test::random_layer_weights(cfg, 21);
  const TensorF x = mla::test::random_hidden(3, cfg.hidden_size, 22);
  ForwardOptions o = options(Precision::FP32);
  o.position_offset = 4093;  // positions straddle original_max_position_embeddings
  const auto a = mla::ref::forward(cfg, w, x, o);
  const auto qh = mla::ref::split_query_heads(cfg, a.q);
  const TensorD absorbed =
      mla::ref::absorbed_scores(cfg, w, qh.q_nope, a.q_pe_roped, a.latent_normed, a.k_pe_roped, a.scaling);
  expect_close("kimi absorbed vs naive scores", a.scores, absorbed, identity_tol());
  BOOST_TEST(a.scaling == 0.14467962580268923);
  for (const auto& [stage, seconds] : a.stage_seconds) BOOST_TEST_MESSAGE("kimi S=3 fp32 " << stage << ": " << seconds << " s");
}

// §6: rope_interleave=true on weights W == rope_interleave=false on weights whose rope rows
// (q_b_proj rows h*d_qk + d_n + i, kv_a_proj_with_mqa rows r_kv + i) are permuted by P.
BOOST_AUTO_TEST_CASE(rope_interleave_identity) {
  for (const char* name : {"tiny", "odd", "q_lora_null", "bias"}) {
    BOOST_TEST_CONTEXT(name) {
      const AttentionConfig interleaved = mla::test::geometry(name);
      AttentionConfig plain = interleaved;
      plain.rope_interleave = false;
      const LayerWeights w = mla::test::random_layer_weights(interleaved, 31);
      LayerWeights w_perm = w;
      const auto perm = deinterleave_permutation(interleaved.qk_rope_head_dim);
      const int64_t d_qk = interleaved.qk_head_dim(), d_n = interleaved.qk_nope_head_dim;
      TensorF& q_weight = interleaved.has_q_lora() ? w_perm.q_b_proj : w_perm.q_proj;
      for (int64_t h = 0; h < interleaved.num_attention_heads; ++h) {
        permute_rows(q_weight, h * d_qk + d_n, perm);
        if (!interleaved.has_q_lora() && !w_perm.q_a_proj_bias.empty())
          permute_rows(w_perm.q_a_proj_bias, h * d_qk + d_n, perm);
      }
      permute_rows(w_perm.kv_a_proj_with_mqa, interleaved.kv_lora_rank, perm);
      if (!w_perm.kv_a_proj_with_mqa_bias.empty())
        permute_rows(w_perm.kv_a_proj_with_mqa_bias, interleaved.kv_lora_rank, perm);

      const TensorF x = mla::test::random_hidden(5, interleaved.hidden_size, 32);
      const auto a = mla::ref::forward(interleaved, w, x, options(Precision::FP32));
      const auto b = mla::ref::forward(plain, w_perm, x, options(Precision::FP32));
      expect_close(std::string(name) + " query_states", a.query_states, b.query_states, identity_tol());
      expect_close(std::string(name) + " key_states", a.key_states, b.key_states, identity_tol());
      expect_close(std::string(name) + " scores", a.scores, b.scores, identity_tol());
      expect_close(std::string(name) + " attn_output", a.attn_output, b.attn_output, identity_tol());

      // The check can fail: plain rotate_half on the raw (unpermuted) weights is wrong (§6 (a)).
      const auto wrong = mla::ref::forward(plain, w, x, options(Precision::FP32));
      BOOST_TEST(!mla::test::compare("wrong layout", a.scores, wrong.scores, identity_tol()).ok);
    }
  }
}

BOOST_AUTO_TEST_CASE(softmax_rows_sum_to_one) {
  for (const auto& g : mla::test::small_geometries()) {
    const LayerWeights w = mla::test::random_layer_weights(g.cfg, 41);
    const TensorF x = mla::test::random_hidden(9, g.cfg.hidden_size, 42);
    for (mla::Mask m : {mla::Mask::Causal, mla::Mask::None}) {
      const auto a = mla::ref::forward(g.cfg, w, x, options(Precision::FP32, m));
      const int64_t rows = a.attn_weights.dim(0) * a.attn_weights.dim(1), T = a.attn_weights.dim(2);
      for (int64_t r = 0; r < rows; ++r) {
        double sum = 0;
        for (int64_t t = 0; t < T; ++t) sum += a.attn_weights.data[static_cast<size_t>(r * T + t)];
        // T <= 9 terms in [0, 1], each rounded once: |sum - 1| <= 10 * u64
        BOOST_TEST(std::fabs(sum - 1.0) <= mla::test::tolerance("attn_weights_row_sum", "reference-vs-one", "double").atol,
                   g.name << " " << mla::mask_name(m) << " row " << r);
      }
    }
  }
}

// Causal: exact zeros above the diagonal; query 0 attends only to token 0 (p = 1 exactly).
BOOST_AUTO_TEST_CASE(causal_mask_exact_zeros) {
  const AttentionConfig cfg = mla::test::geometry("tiny");
  const LayerWeights w = mla::test::random_layer_weights(cfg, 51);
  const TensorF x = mla::test::random_hidden(6, cfg.hidden_size, 52);
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    const auto a = mla::ref::forward(cfg, w, x, options(p));
    const int64_t n = a.attn_weights.dim(0), S = a.attn_weights.dim(1);
    for (int64_t h = 0; h < n; ++h) {
      BOOST_TEST(a.attn_weights.data[static_cast<size_t>(h * S * S)] == 1.0);
      for (int64_t s = 0; s < S; ++s)
        for (int64_t t = s + 1; t < S; ++t)
          BOOST_TEST(a.attn_weights.data[static_cast<size_t>((h * S + s) * S + t)] == 0.0,
                     mla::precision_name(p) << " h " << h << " s " << s << " t " << t);
    }
    // query 0's output is head-wise value 0 only: attn_context row 0 == value_states[:, 0, :]
    const int64_t d_v = cfg.v_head_dim;
    for (int64_t h = 0; h < n; ++h)
      for (int64_t d = 0; d < d_v; ++d)
        BOOST_TEST(a.attn_context.data[static_cast<size_t>(h * d_v + d)] ==
                   a.value_states.data[static_cast<size_t>((h * S + 0) * d_v + d)]);
  }
}

// With one token, no mask and the causal mask are the same computation; with S > 1 only the
// last query row (which sees every key under both masks) agrees.
BOOST_AUTO_TEST_CASE(mask_none_single_token_equals_causal) {
  const AttentionConfig cfg = mla::test::geometry("odd");
  const LayerWeights w = mla::test::random_layer_weights(cfg, 61);
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    const TensorF x1 = mla::test::random_hidden(1, cfg.hidden_size, 62);
    const auto causal = mla::ref::forward(cfg, w, x1, options(p, mla::Mask::Causal));
    const auto none = mla::ref::forward(cfg, w, x1, options(p, mla::Mask::None));
    BOOST_TEST(causal.attn_output.data == none.attn_output.data);

    const TensorF x4 = mla::test::random_hidden(4, cfg.hidden_size, 63);
    const auto c4 = mla::ref::forward(cfg, w, x4, options(p, mla::Mask::Causal));
    const auto n4 = mla::ref::forward(cfg, w, x4, options(p, mla::Mask::None));
    const int64_t H = cfg.hidden_size;
    const std::vector<double> last_c(c4.attn_output.data.end() - H, c4.attn_output.data.end());
    const std::vector<double> last_n(n4.attn_output.data.end() - H, n4.attn_output.data.end());
    BOOST_TEST(last_c == last_n);
    const std::vector<double> first_c(c4.attn_output.data.begin(), c4.attn_output.data.begin() + H);
    const std::vector<double> first_n(n4.attn_output.data.begin(), n4.attn_output.data.begin() + H);
    BOOST_TEST(first_c != first_n);
  }
}

// A 1-head layer small enough to do by hand (H 4, d_n 2, d_r 2, d_v 2, r_kv 2, q_proj, plain
// RoPE), checked against a closed form written out below, independently of the reference code.
//   W_q = I4:   q_nope_s = x_s[0:2], q_pe_s = x_s[2:4]
//   W_kva = I4: c_s = x_s[0:2], k_pe_s = x_s[2:4]
//   kv_a_layernorm = [1, 2]:  cn_s = [c0, 2 c1] / sqrt((c0^2 + c1^2)/2 + eps)
//   W_kvb = [I2; [[0,1],[1,0]]]: k_nope_s = cn_s, v_s = [cn_s1, cn_s0]
//   RoPE (d_r 2, inv_freq [1]): rotation by angle = position (fp32 cos/sin table values)
//   scale = 4^-0.5 = 0.5
//   W_o = [[1,0],[0,1],[1,1],[1,-1]]: out = [o0, o1, o0 + o1, o0 - o1]
BOOST_AUTO_TEST_CASE(hand_computed_one_head) {
  AttentionConfig cfg;
  cfg.hidden_size = 4;
  cfg.num_attention_heads = cfg.num_key_value_heads = 1;
  cfg.q_lora_rank = 0;
  cfg.kv_lora_rank = 2;
  cfg.qk_nope_head_dim = 2;
  cfg.qk_rope_head_dim = 2;
  cfg.v_head_dim = 2;
  cfg.max_position_embeddings = 16;
  cfg.rope.rope_type = "default";
  cfg.rope.rope_theta = 10000.0;
  LayerWeights w;
  w.q_proj = TensorF("q_proj.weight", {4, 4});
  w.kv_a_proj_with_mqa = TensorF("kv_a_proj_with_mqa.weight", {4, 4});
  for (int i = 0; i < 4; ++i) w.q_proj.data[static_cast<size_t>(i * 5)] = w.kv_a_proj_with_mqa.data[static_cast<size_t>(i * 5)] = 1;
  w.kv_a_layernorm = TensorF("kv_a_layernorm.weight", {2});
  w.kv_a_layernorm.data = {1, 2};
  w.kv_b_proj = TensorF("kv_b_proj.weight", {4, 2});
  w.kv_b_proj.data = {1, 0, 0, 1, 0, 1, 1, 0};
  w.o_proj = TensorF("o_proj.weight", {4, 2});
  w.o_proj.data = {1, 0, 0, 1, 1, 1, 1, -1};
  TensorF x("hidden", {2, 4});
  x.data = {1, 2, 0.5f, -1, -1, 0.5f, 2, 1};

  ForwardOptions o = options(Precision::FP32);
  o.keep_attn_weights = true;
  const auto a = mla::ref::forward(cfg, w, x, o);

  // ---- by hand ----
  const double eps = 1e-6;
  auto norm = [&](double c0, double c1, double out[2]) {
    const double r = 1.0 / std::sqrt((c0 * c0 + c1 * c1) / 2.0 + eps);
    out[0] = c0 * r;
    out[1] = 2.0 * c1 * r;
  };
  double cn0[2], cn1[2];
  norm(1, 2, cn0);
  norm(-1, 0.5, cn1);
  // token 0: c = [1, 2], r = 1/sqrt(2.5 + eps), v_0 = [4r, r], out_0 = [4r, r, 5r, 3r]
  const double r0 = 1.0 / std::sqrt(2.5 + eps);
  const std::vector<double> out0 = {4 * r0, r0, 5 * r0, 3 * r0};
  // token 1 (position 1): rotate q_pe and k_pe by 1 rad (HF's fp32 table values)
  const double c = static_cast<float>(std::cos(1.0)), s = static_cast<float>(std::sin(1.0));
  auto rot = [&](double v0, double v1, bool at_one, double out[2]) {
    out[0] = at_one ? v0 * c - v1 * s : v0;
    out[1] = at_one ? v1 * c + v0 * s : v1;
  };
  double q1_pe[2], k0_pe[2], k1_pe[2];
  rot(2, 1, true, q1_pe);     // x_1[2:4] at position 1
  rot(0.5, -1, false, k0_pe); // x_0[2:4] at position 0
  rot(2, 1, true, k1_pe);
  const double z10 = 0.5 * (-1 * cn0[0] + 0.5 * cn0[1] + q1_pe[0] * k0_pe[0] + q1_pe[1] * k0_pe[1]);
  const double z11 = 0.5 * (-1 * cn1[0] + 0.5 * cn1[1] + q1_pe[0] * k1_pe[0] + q1_pe[1] * k1_pe[1]);
  const double p10 = 1.0 / (1.0 + std::exp(z11 - z10)), p11 = 1.0 / (1.0 + std::exp(z10 - z11));
  const double o0 = p10 * cn0[1] + p11 * cn1[1], o1 = p10 * cn0[0] + p11 * cn1[0];
  const std::vector<double> out1 = {o0, o1, o0 + o1, o0 - o1};

  TensorD expected("attn_output", {2, 4});
  expected.data = out0;
  expected.data.insert(expected.data.end(), out1.begin(), out1.end());
  expect_close("hand-computed attn_output", expected, a.attn_output, identity_tol());
  TensorD expected_p("attn_weights", {1, 2, 2});
  expected_p.data = {1.0, 0.0, p10, p11};
  expect_close("hand-computed attn_weights", expected_p, a.attn_weights, identity_tol());
}

// bf16 mode: values are bf16 at the rounding points of §7, and close to the exact math.
BOOST_AUTO_TEST_CASE(bf16_values_are_bf16_and_close_to_fp32) {
  for (const auto& g : mla::test::small_geometries()) {
    BOOST_TEST_CONTEXT(g.name) {
      const LayerWeights w = mla::test::random_layer_weights(g.cfg, 71);
      const TensorF x = mla::test::random_hidden(16, g.cfg.hidden_size, 72);
      const auto b = mla::ref::forward(g.cfg, w, x, options(Precision::BF16));
      for (const TensorD* t : {&b.hidden, &b.q, &b.compressed_kv, &b.latent_normed, &b.kv, &b.query_states,
                               &b.key_states, &b.value_states, &b.scores, &b.masked_scores, &b.attn_weights,
                               &b.attn_context, &b.attn_output})
        BOOST_TEST(all_bf16(*t), t->name << " holds a value that is not a bf16 value");
      // cos/sin: `.to(x.dtype)` in DeepseekV3; DeepseekV2's freqs_cis stays fp32 (not all bf16)
      const bool complex = g.cfg.rope_style() == mla::RopeStyle::Complex;
      BOOST_TEST(all_bf16(b.cos) != complex, "cos: bf16 values " << all_bf16(b.cos) << " for rope style "
                                                                 << mla::rope_style_name(g.cfg.rope_style()));
      BOOST_TEST(all_bf16(b.sin) != complex);
      if (g.cfg.has_q_lora()) {
        BOOST_TEST(all_bf16(b.q_a));
        BOOST_TEST(all_bf16(b.q_a_normed));
      }
      const auto f = mla::ref::forward(g.cfg, w, x, options(Precision::FP32));
      // The fp32 (exact) run is not bf16 everywhere: the check above could fail.
      BOOST_TEST(!all_bf16(f.attn_output));
      for (const char* what : {"attn_output", "attn_weights"}) {
        const auto& tol = mla::test::tolerance(what, "reference-bf16-vs-fp32", "bf16");
        const TensorD& ref = std::string(what) == "attn_output" ? f.attn_output : f.attn_weights;
        const TensorD& got = std::string(what) == "attn_output" ? b.attn_output : b.attn_weights;
        const auto r = mla::test::compare(g.name + " " + what, ref, got, tol);
        BOOST_TEST(r.ok, r.message);
        BOOST_TEST_MESSAGE(g.name << " bf16 vs fp32 " << what << ": norm error " << r.norm_error << ", max abs "
                                  << r.max_abs << ", cosine " << r.cosine);
      }
    }
  }
}

// RMSNorm in bf16 mode rounds twice (§3.5): normalised x -> bf16, then w * that -> bf16.
// Checked on one row against the formula written with explicit fp32 steps.
BOOST_AUTO_TEST_CASE(bf16_rms_norm_two_roundings) {
  TensorD x("x", {1, 3});
  x.data = {1.0, -2.5, 0.375};  // bf16 values
  TensorF w("w", {3});
  w.data = {1.5f, 0.8125f, -2.0f};  // bf16 values
  const TensorD y = mla::ref::rms_norm("y", x, w, 1e-6, Precision::BF16);
  const float var = (1.0f + 6.25f + 0.140625f) / 3.0f;   // squares exact; fp32 mean
  const float inv = 1.0f / std::sqrt(var + 1e-6f);        // fp32 rsqrt(var + eps)
  for (size_t i = 0; i < 3; ++i) {
    const float normed = mla::round_to_bf16(static_cast<float>(x.data[i]) * inv);
    const float want = mla::round_to_bf16(w.data[i] * normed);
    BOOST_TEST(y.data[i] == static_cast<double>(want), "i " << i);
  }
}

// q_lora_rank null: q = x W_q^T, no q norm (§3.2); checked against a direct dot product.
BOOST_AUTO_TEST_CASE(q_lora_null_path) {
  const AttentionConfig cfg = mla::test::geometry("q_lora_null");
  const LayerWeights w = mla::test::random_layer_weights(cfg, 81);
  BOOST_TEST(w.q_a_proj.empty());
  const TensorF x = mla::test::random_hidden(3, cfg.hidden_size, 82);
  const auto a = mla::ref::forward(cfg, w, x, options(Precision::FP32));
  BOOST_TEST(a.q_a.empty());
  BOOST_TEST(a.q_a_normed.empty());
  const int64_t H = cfg.hidden_size, rows = cfg.num_attention_heads * cfg.qk_head_dim();
  TensorD q("q", {3, rows});
  for (int64_t s = 0; s < 3; ++s)
    for (int64_t o = 0; o < rows; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < H; ++i)
        acc += static_cast<double>(x.data[static_cast<size_t>(s * H + i)]) * w.q_proj.data[static_cast<size_t>(o * H + i)];
      q.data[static_cast<size_t>(s * rows + o)] = acc;
    }
  expect_close("q_proj output", q, a.q, identity_tol());
  // the q_lora weights are not needed; a q_lora config without them is a Shape error naming q_a_proj
  const AttentionConfig with_lora = mla::test::geometry("tiny");
  const auto e = error_of([&] { mla::ref::forward(with_lora, w, mla::test::random_hidden(1, 32, 1), options(Precision::FP32)); });
  BOOST_TEST((e.kind() == mla::ErrorKind::Shape));
  BOOST_TEST(std::string(e.what()).find("q_a_proj") != std::string::npos, e.what());
}

BOOST_AUTO_TEST_CASE(bad_inputs) {
  const AttentionConfig cfg = mla::test::geometry("tiny");
  const LayerWeights w = mla::test::random_layer_weights(cfg, 91);
  const ForwardOptions o = options(Precision::FP32);
  // wrong hidden size
  auto e = error_of([&] { mla::ref::forward(cfg, w, mla::test::random_hidden(2, 31, 1), o); });
  BOOST_TEST((e.kind() == mla::ErrorKind::Shape));
  BOOST_TEST(std::string(e.what()).find("[2, 31]") != std::string::npos, e.what());
  // NaN / Inf, named by row and column
  TensorF x = mla::test::random_hidden(3, 32, 2);
  x.data[1 * 32 + 5] = std::nanf("");
  e = error_of([&] { mla::ref::forward(cfg, w, x, o); });
  BOOST_TEST((e.kind() == mla::ErrorKind::InvalidValue));
  BOOST_TEST(std::string(e.what()).find("row 1, column 5") != std::string::npos, e.what());
  x.data[1 * 32 + 5] = 0;
  x.data[2 * 32 + 0] = -INFINITY;
  e = error_of([&] { mla::ref::forward(cfg, w, x, o); });
  BOOST_TEST((e.kind() == mla::ErrorKind::InvalidValue));
  BOOST_TEST(std::string(e.what()).find("Inf at row 2, column 0") != std::string::npos, e.what());
  // S = 0
  e = error_of([&] { mla::ref::forward(cfg, w, TensorF("hidden", {0, 32}), o); });
  BOOST_TEST((e.kind() == mla::ErrorKind::InvalidArgument));
  // a weight of the wrong shape is named
  LayerWeights bad = w;
  bad.kv_b_proj.shape = {bad.kv_b_proj.dim(1), bad.kv_b_proj.dim(0)};
  e = error_of([&] { mla::ref::forward(cfg, bad, mla::test::random_hidden(1, 32, 3), o); });
  BOOST_TEST((e.kind() == mla::ErrorKind::Shape));
  BOOST_TEST(std::string(e.what()).find("kv_b_proj.weight") != std::string::npos, e.what());
  // negative position offset
  ForwardOptions neg = o;
  neg.position_offset = -1;
  e = error_of([&] { mla::ref::forward(cfg, w, mla::test::random_hidden(1, 32, 3), neg); });
  BOOST_TEST((e.kind() == mla::ErrorKind::InvalidArgument));
}

// The Backend wrapper and the factory: result fields, H2O score sums, names.
BOOST_AUTO_TEST_CASE(backend_result_fields) {
  const AttentionConfig cfg = mla::test::geometry("odd");
  const LayerWeights w = mla::test::random_layer_weights(cfg, 101);
  auto backend = mla::make_backend(mla::BackendKind::Reference);
  BOOST_TEST(backend->name() == "reference");
  ForwardOptions o = options(Precision::FP32);
  o.keep_attn_weights = true;
  o.keep_states = true;
  o.position_offset = 5;
  backend->prepare(cfg, w, o);
  const int64_t S = 7, n = cfg.num_attention_heads;
  const TensorF x = mla::test::random_hidden(S, cfg.hidden_size, 102);
  const mla::ForwardResult r = backend->forward(x, o);
  BOOST_TEST(r.computed_in_double);
  BOOST_TEST((r.attn_output.shape == std::vector<int64_t>{S, cfg.hidden_size}));
  BOOST_TEST((r.attn_weights.shape == std::vector<int64_t>{n, S, S}));
  BOOST_TEST((r.query_states.shape == std::vector<int64_t>{n, S, cfg.qk_head_dim()}));
  BOOST_TEST((r.key_states.shape == std::vector<int64_t>{n, S, cfg.qk_head_dim()}));
  BOOST_TEST((r.value_states.shape == std::vector<int64_t>{n, S, cfg.v_head_dim}));
  BOOST_TEST(r.head_scores.size() == static_cast<size_t>(n * S));
  BOOST_TEST(r.token_scores.size() == static_cast<size_t>(S));
  BOOST_TEST_REQUIRE(r.stage_seconds.size() == std::size(mla::kForwardStages));
  for (size_t i = 0; i < r.stage_seconds.size(); ++i) BOOST_TEST(r.stage_seconds[i].first == mla::kForwardStages[i]);
  // every query row sums to 1: each head's scores sum to S, all tokens' to n*S
  double total = 0;
  for (int64_t h = 0; h < n; ++h) {
    double head_total = 0;
    for (int64_t t = 0; t < S; ++t) head_total += r.head_scores[static_cast<size_t>(h * S + t)];
    BOOST_TEST(std::fabs(head_total - static_cast<double>(S)) <=
               mla::test::tolerance("head_scores", "sum-vs-exact", "double").atol);
  }
  for (double v : r.token_scores) total += v;
  BOOST_TEST(std::fabs(total - static_cast<double>(n * S)) <=
             mla::test::tolerance("token_scores", "sum-vs-exact", "double").atol);
  // causal: the last token is seen only by the last query, in every head
  double last = 0;
  for (int64_t h = 0; h < n; ++h) last += r.attn_weights.data[static_cast<size_t>((h * S + S - 1) * S + S - 1)];
  BOOST_TEST(std::fabs(r.token_scores[static_cast<size_t>(S - 1)] - last) <=
             mla::test::tolerance("token_scores", "reference-vs-attn-weights-column", "double").atol);
  // position offset: the rope rows of key_states at token 0 use position 5
  const mla::RopeTables t = mla::rope_tables(cfg, {5});
  const auto a = mla::ref::forward(cfg, w, x, o);
  BOOST_TEST(a.cos.data[0] == static_cast<double>(t.cos[0]));
  // bf16 results are flagged as not exact doubles; without keep_* the optional fields stay empty
  ForwardOptions ob = options(Precision::BF16);
  backend->prepare(cfg, w, ob);
  const mla::ForwardResult rb = backend->forward(x, ob);
  BOOST_TEST(!rb.computed_in_double);
  BOOST_TEST(rb.attn_weights.empty());
  BOOST_TEST(rb.query_states.empty());
  // names
  BOOST_TEST(std::string(mla::mask_name(mla::Mask::Causal)) == "causal");
  BOOST_TEST(std::string(mla::mask_name(mla::Mask::None)) == "none");
  BOOST_TEST(std::string(mla::precision_name(Precision::FP32)) == "fp32");
  BOOST_TEST(std::string(mla::precision_name(Precision::BF16)) == "bf16");
  BOOST_TEST(std::string(mla::backend_name(mla::BackendKind::Auto)) == "auto");
  BOOST_TEST(std::string(mla::backend_name(mla::BackendKind::Cuda)) == "cuda");
  // forward before prepare is an error, not a crash
  auto fresh = mla::make_reference_backend();
  BOOST_TEST((error_of([&] { fresh->forward(x, o); }).kind() == mla::ErrorKind::InvalidArgument));
}

BOOST_AUTO_TEST_SUITE_END()

// The comparison helper itself (tests/unit/compare.cpp): each check can fail and says where.
BOOST_AUTO_TEST_SUITE(reference)  // reopened: the helper cases run with the suite

BOOST_AUTO_TEST_CASE(reports_nan_worst_index_and_pairs) {
  const mla::test::Tolerance tol{"t", "x-vs-y", "fp32", 1e-3, 0.0, mla::test::kNoBound, -1.0, "test row"};
  TensorD ref("t", {2, 3}), got("t", {2, 3});
  ref.data = {1, 2, 3, 4, 5, 6};
  got.data = ref.data;
  BOOST_TEST(mla::test::compare("same", ref, got, tol).ok);
  got.data[4] = 5.1;  // index [1, 1]
  got.data[2] = 3.01;  // index [0, 2], smaller violation
  auto r = mla::test::compare("t", ref, got, tol);
  BOOST_TEST(!r.ok);
  BOOST_TEST(r.mismatches == 2);
  BOOST_TEST(r.worst_index == 4);
  BOOST_TEST(r.message.find("worst at [1, 1]") != std::string::npos, r.message);
  BOOST_TEST(r.message.find("[0, 2] ref=3 got=3.01") != std::string::npos, r.message);
  got.data = ref.data;
  got.data[3] = std::nan("");
  r = mla::test::compare("t", ref, got, tol);
  BOOST_TEST(!r.ok);
  BOOST_TEST(r.message.find("non-finite value at [1, 0]") != std::string::npos, r.message);
  // normalized error and cosine bounds
  const mla::test::Tolerance norm_tol{"t", "x-vs-y", "fp32", mla::test::kNoBound, mla::test::kNoBound, 1e-3, 0.99,
                                      "test row"};
  got.data = {1, 2, 3, 4, 5, 6.1};
  r = mla::test::compare("t", ref, got, norm_tol);
  BOOST_TEST(!r.ok);
  BOOST_TEST(r.message.find("normalized error") != std::string::npos, r.message);
  got.data = {-1, -2, -3, -4, -5, -6};
  r = mla::test::compare("t", ref, got, norm_tol);
  BOOST_TEST(r.cosine == -1.0);
  BOOST_TEST(r.message.find("cosine") != std::string::npos, r.message);
  // shape mismatch
  TensorD other("t", {3, 2});
  other.data = ref.data;
  BOOST_TEST(!mla::test::compare("t", ref, other, tol).ok);
  // the table lookup: wildcard rows, and a loud failure for a missing row
  BOOST_TEST(mla::test::tolerance("attn_output", "cpu-vs-reference", "fp32").what == "*");
  BOOST_CHECK_THROW(mla::test::tolerance("attn_output", "nobody-vs-reference", "fp32"), std::logic_error);
}

BOOST_AUTO_TEST_SUITE_END()
