// tests/unit/test_cuda_host.cpp — suite cuda_host: the host-side arithmetic of the CUDA
// backend, checked on every build (with or without CUDA, with or without a GPU):
//   * launch geometry (cuda/launch_geometry.hpp): grid/block sizes and grid-stride coverage;
//   * the cuBLAS row-major -> column-major derivations (cuda/gemm_plan.hpp), executed by an
//     independent column-major GEMM interpreter written here from the BLAS definition and
//     compared with the row-major formulas of HF's attention, on small integer matrices (exact);
//   * the workspace carve-up (cuda/workspace_layout.hpp): alignment, no overlap, sizes;
//   * error mapping (cuda/error_text.hpp, cuda_available, make_cuda_backend).
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/error_text.hpp"
#include "cuda/gemm_plan.hpp"
#include "cuda/launch_geometry.hpp"
#include "cuda/workspace_layout.hpp"
#include "mla/attention.hpp"
#include "mla/error.hpp"

using namespace mla::cuda;

namespace {

// BLAS definition, column-major: C[i + j*ldc] = beta*C + sum_p opA(i, p) * opB(p, j), where
//   opA(i, p) = A[i + p*lda] for N, A[p + i*lda] for T (likewise B).
void interpret_gemm(const GemmPlan& g, const std::vector<double>& A, const std::vector<double>& B,
                    std::vector<double>& C) {
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < g.m; ++i) {
      double acc = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        const double av = g.op_a == Op::N ? A[i + p * g.lda] : A[p + i * g.lda];
        const double bv = g.op_b == Op::N ? B[p + j * g.ldb] : B[j + p * g.ldb];
        acc += av * bv;
      }
      C[i + j * g.ldc] = acc;
    }
}

// Small distinct integers, so every product sum is exact in double.
std::vector<double> ramp(int64_t count, int64_t mod, int64_t shift) {
  std::vector<double> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = static_cast<double>((i * 7 + shift) % mod) - mod / 2;
  return v;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_host)

BOOST_AUTO_TEST_CASE(elementwise_launch_covers_every_element_once) {
  BOOST_TEST(elementwise_launch(0).grid == 0);
  BOOST_TEST(elementwise_launch(1).grid == 1);
  BOOST_TEST(elementwise_launch(256).grid == 1);
  BOOST_TEST(elementwise_launch(257).grid == 2);
  BOOST_TEST(elementwise_launch(257).block == 256);
  // Kimi scores at S = 8192: 64*8192*8192 elements -> capped grid, grid-stride loop covers it.
  const int64_t big = int64_t(64) * 8192 * 8192;
  const LaunchShape ls = elementwise_launch(big);
  BOOST_TEST(ls.grid == kElementwiseMaxGrid);
  BOOST_TEST(ls.grid <= kMaxGridX);
  // Every element is visited by exactly one thread: the visit counts sum to the count.
  for (int64_t count : {int64_t(1), int64_t(255), int64_t(256), int64_t(1000), int64_t(70001)}) {
    const LaunchShape s = elementwise_launch(count);
    const int64_t stride = s.grid * s.block;
    int64_t visits = 0;
    for (int64_t t = 0; t < stride; ++t) visits += grid_stride_visits(count, t, stride);
    BOOST_TEST(visits == count);
  }
  BOOST_TEST(grid_stride_visits(10, 3, 4) == 2);  // elements 3 and 7
  BOOST_TEST(grid_stride_visits(10, 12, 4) == 0);
}

BOOST_AUTO_TEST_CASE(row_launch_block_is_power_of_two_within_limits) {
  BOOST_TEST(row_block_size(1) == 32);
  BOOST_TEST(row_block_size(32) == 32);
  BOOST_TEST(row_block_size(33) == 64);
  BOOST_TEST(row_block_size(512) == 512);     // kv_lora_rank
  BOOST_TEST(row_block_size(1536) == 1024);   // q_lora_rank
  BOOST_TEST(row_block_size(8192) == 1024);
  for (int64_t len = 1; len < 5000; len += 37) {
    const int64_t b = row_block_size(len);
    BOOST_TEST((b & (b - 1)) == 0);
    BOOST_TEST(b >= 32);
    BOOST_TEST(b <= 1024);
  }
  const LaunchShape ls = row_launch(131072, 512);
  BOOST_TEST(ls.grid == 131072);
  BOOST_TEST(row_launch_fits(131072));
  BOOST_TEST(!row_launch_fits(int64_t(1) << 31));
}

BOOST_AUTO_TEST_CASE(attention_tiles_fit_shared_memory) {
  // Kimi: d_qk 192, d_v 128 -> Bq 16, Bk 32, kv rows of 193 floats (odd: no bank conflicts).
  const AttentionTiles kimi = attention_tiles(192, 128);
  BOOST_TEST(kimi.fits);
  BOOST_TEST(kimi.query_rows == 16);
  BOOST_TEST(kimi.keys == 32);
  BOOST_TEST(kimi.kv_stride == 193);
  BOOST_TEST(kimi.shared_bytes == 8 * 16 + 4 * (16 + 16 * 192 + 32 * 193 + 16 * 32 + 16 * 128));
  BOOST_TEST(kimi.shared_bytes <= kMaxDynamicShared);
  // Larger heads shrink the tiles until they fit; absurd ones do not fit at all.
  for (const int64_t d : {int64_t(8), int64_t(192), int64_t(256), int64_t(512), int64_t(1024), int64_t(4000)}) {
    const AttentionTiles t = attention_tiles(d, d);
    BOOST_TEST(t.fits, d);
    BOOST_TEST(t.shared_bytes <= kMaxDynamicShared, d);
    BOOST_TEST(t.shared_bytes == attention_shared_bytes(t.query_rows, t.keys, d, d));
    BOOST_TEST(t.query_rows <= kAttentionThreads);  // one thread per row of the row passes at least
  }
  BOOST_TEST(attention_tiles(192, 128).query_rows > attention_tiles(1024, 1024).query_rows);
  BOOST_TEST(!attention_tiles(8000, 8000).fits);
  // Chunks: n * C ~ 1024 blocks, never more chunks than query tiles.
  BOOST_TEST(attention_query_tiles(131072, kimi) == 8192);
  BOOST_TEST(attention_query_tiles(17, kimi) == 2);
  BOOST_TEST(attention_mass_chunks(64, 8192) == 16);
  BOOST_TEST(attention_mass_chunks(3, 8192) == 342);
  BOOST_TEST(attention_mass_chunks(64, 5) == 5);
  BOOST_TEST(attention_mass_chunks(2048, 100) == 1);
  BOOST_TEST(attention_mass_chunks(1, 1) == 1);
}

BOOST_AUTO_TEST_CASE(linear_plan_computes_x_times_w_transposed) {
  const int64_t rows = 3, in = 5, out = 4;
  const GemmPlan g = linear_plan("test_proj", rows, in, out);
  BOOST_TEST((g.op_a == Op::T && g.op_b == Op::N));
  BOOST_TEST(g.m == out);
  BOOST_TEST(g.n == rows);
  BOOST_TEST(g.k == in);
  const std::vector<double> W = ramp(out * in, 11, 1);  // [out, in] row-major
  const std::vector<double> x = ramp(rows * in, 9, 4);  // [rows, in] row-major
  std::vector<double> y(static_cast<size_t>(rows * out), -999);
  interpret_gemm(g, W, x, y);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double e = 0;
      for (int64_t i = 0; i < in; ++i) e += x[r * in + i] * W[o * in + i];
      BOOST_TEST(y[r * out + o] == e);  // y row-major [rows, out]
    }
  // The Kimi q_a_proj at S = 7: cuBLAS sees m = 1536, n = 7, k = 7168.
  const GemmPlan qa = linear_plan("q_a_proj", 7, 7168, 1536);
  BOOST_TEST(qa.m == 1536);
  BOOST_TEST(qa.lda == 7168);
  BOOST_TEST(qa.ldb == 7168);
  BOOST_TEST(qa.ldc == 1536);
}

BOOST_AUTO_TEST_CASE(gemm_dimensions_beyond_int_are_refused) {
  try {
    linear_plan("o_proj", int64_t(1) << 20, 8192, 7168);  // 2^20 rows fine ...
    linear_plan("o_proj", int64_t(3) << 30, 8192, 7168);  // ... n = 3*2^30 is not
    BOOST_FAIL("expected Error(Unsupported)");
  } catch (const mla::Error& e) {
    BOOST_TEST(static_cast<int>(e.kind()) == static_cast<int>(mla::ErrorKind::Unsupported));
    BOOST_TEST(std::string(e.what()).find("o_proj") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(workspace_slots_are_aligned_disjoint_and_sized) {
  WorkspaceDims d;
  d.seq_len = 8192;
  d.hidden_size = 7168;
  d.heads = 64;
  d.q_lora_rank = 1536;
  d.kv_lora_rank = 512;
  d.qk_nope_head_dim = 128;
  d.qk_rope_head_dim = 64;
  d.v_head_dim = 128;
  d.elem_bytes = 2;
  const WorkspaceLayout L = workspace_layout(d);
  BOOST_REQUIRE(L.slots.size() == static_cast<size_t>(kSlotCount));
  int64_t end = 0;
  for (const WorkspaceSlot& s : L.slots) {
    BOOST_TEST(s.offset % kWorkspaceAlign == 0);
    BOOST_TEST(s.offset >= end);  // no overlap with the previous slot
    end = s.offset + s.bytes();
  }
  BOOST_TEST(L.total_bytes >= end);
  BOOST_TEST(L.total_bytes - end < kWorkspaceAlign);
  // O(S): no [n, S, S] slot; the H2O mass partials are n * C * S doubles (C = 16 for Kimi).
  BOOST_TEST(L.slots[kMassPartials].bytes() == int64_t(64) * 16 * 8192 * 8);
  BOOST_TEST(mass_chunks(d) == 16);
  BOOST_TEST(attn_weights_bytes(d) == int64_t(64) * 8192 * 8192 * 2);  // 8 GiB of bf16, only when kept
  for (const WorkspaceSlot& s : L.slots) BOOST_TEST(s.bytes() < int64_t(8192) * 7168 * 8, s.name);
  // The workspace grows linearly in S: twice the tokens, at most twice the bytes (+ alignment).
  WorkspaceDims twice = d;
  twice.seq_len = 2 * d.seq_len;
  BOOST_TEST(workspace_layout(twice).total_bytes <= 2 * L.total_bytes);
  BOOST_TEST(workspace_layout(twice).total_bytes >= 2 * L.total_bytes - int64_t(kSlotCount) * kWorkspaceAlign);
  BOOST_TEST(L.slots[kQ].bytes() == int64_t(8192) * 64 * 192 * 2);
  BOOST_TEST(L.slots[kCompressedKv].elements == int64_t(8192) * 576);
  BOOST_TEST(L.slots[kHeadScores].bytes() == int64_t(64) * 8192 * 8);     // doubles
  BOOST_TEST(L.slots[kHiddenStates].name == "hidden_states");
  // Without q_lora_rank the q_a slots are empty (zero bytes, still aligned).
  d.q_lora_rank = 0;
  BOOST_TEST(workspace_layout(d).slots[kQA].bytes() == 0);
  // S large enough that n*S*S overflows 64 bits -> a clear error, not a wrapped size.
  d.seq_len = int64_t(1) << 31;
  BOOST_CHECK_THROW(attn_weights_bytes(d), mla::Error);
  d.seq_len = int64_t(1) << 55;
  BOOST_CHECK_THROW(workspace_layout(d), mla::Error);
}

BOOST_AUTO_TEST_CASE(failure_message_names_call_location_and_code) {
  const std::string m = failure_message("cudaMalloc(&p, 64)", "cuda/x.cpp", 12, 2, "cudaErrorMemoryAllocation", "out of memory");
  BOOST_TEST(m == "cuda: cudaMalloc(&p, 64) failed at cuda/x.cpp:12: cudaErrorMemoryAllocation (2): out of memory");
  // A description equal to the name is not repeated.
  BOOST_TEST(failure_message("f()", "a.cpp", 1, 7, "X", "X") == "cuda: f() failed at a.cpp:1: X (7)");
  const std::string no_driver = explain_device_count_error(35, "cudaErrorInsufficientDriver");
  BOOST_TEST(no_driver.find("cudaErrorInsufficientDriver (35)") != std::string::npos);
  BOOST_TEST(no_driver.find("driver") != std::string::npos);
  BOOST_TEST(explain_device_count_error(100, "cudaErrorNoDevice").find("sees no GPU") != std::string::npos);
  BOOST_TEST(explain_device_count_error(999, "cudaErrorUnknown").find("cudaErrorUnknown (999)") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(no_gpu_means_error_cuda_with_the_reason) {
  std::string why;
  if (mla::cuda_available(&why)) {
    BOOST_TEST(why.empty());
    BOOST_TEST_MESSAGE("a CUDA device is usable here; the no-GPU path is not exercised");
    return;
  }
  BOOST_TEST(!why.empty());
  try {
    mla::make_cuda_backend();
    BOOST_FAIL("make_cuda_backend() must throw without a usable GPU");
  } catch (const mla::Error& e) {
    BOOST_TEST(static_cast<int>(e.kind()) == static_cast<int>(mla::ErrorKind::Cuda));
    BOOST_TEST(std::string(e.what()).find(why) != std::string::npos);
    BOOST_TEST(std::string(e.what()).find("--backend cuda") != std::string::npos);
  }
}

BOOST_AUTO_TEST_SUITE_END()
