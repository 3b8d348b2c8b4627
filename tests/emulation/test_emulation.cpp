// tests/emulation/test_emulation.cpp — what only the emulated device can check (meson test
// 'cuda_emulated', together with tests/cuda/test_cuda.cpp):
//   emulator            the emulator itself catches what it claims to: a racy kernel gives
//                       order-dependent results, a divergent barrier and a bad launch shape
//                       are launch errors, unwritten shared memory reads as NaN;
//   cuda_launches       one forward is a fixed sequence of launches and GEMMs with no host
//                       synchronisation before the single cudaStreamSynchronize (docs/backends.md §4);
//   cuda_races          every kernel gives bit-identical results with the threads of each block
//                       run in ascending and in descending order (no data race);
//   cuda_memory         device memory high-water mark = weights + one workspace + the cuBLAS
//                       workspace, everything freed when the backend goes away;
//   cuda_faults         injected cudaMalloc / cuBLAS failures become Error(Cuda) naming the
//                       call, leak nothing, and the backend keeps working afterwards;
//   cuda_devices        --backend auto / cuda with no device, an old device, a good device;
//   cuda_tf32           --allow-tf32 reaches cuBLAS and stays within its tolerance row;
//   cli_on_emulated_gpu the mla-h2o CLI linked with the emulator (mla-h2o-emulated): --backend
//                       auto picks cuda and says so, and its H2O decision equals the CPU's.
#include <boost/test/unit_test.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "compare.hpp"
#include "cuda/workspace_layout.hpp"
#include "emulation.hpp"
#include "geometries.hpp"
#include "invalid_inputs.hpp"
#include "mla/attention.hpp"
#include "mla/error.hpp"
#include "mla/layer_tensors.hpp"
#include "simt.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

namespace {

namespace emu = mla::emulation;
using mla::ForwardOptions;
using mla::ForwardResult;
using mla::Precision;

// Every case starts from (and leaves) the default device: 1 device, cc 9.0, no faults armed,
// threads in ascending order.
struct DefaultDevice {
  DefaultDevice() { reset(); }
  ~DefaultDevice() { reset(); }
  static void reset() {
    emu::set_devices(1, 9, 0);
    emu::fail_nth_malloc(0);
    emu::fail_nth_gemm(0);
    mla::simt::set_thread_order(mla::simt::ThreadOrder::Ascending);
  }
};

// ---- kernels for the emulator's own tests -------------------------------------------------------

// Shifts x left by one with no barrier between the read and the write: thread i reads x[i+1],
// which thread i+1 overwrites. The result depends on which thread runs first: a data race.
__global__ void racy_shift(float* x, int n) {
  const int i = static_cast<int>(threadIdx.x);
  if (i + 1 < n) x[i] = x[i + 1];
}

// The same shift done right: read, barrier, write.
__global__ void synced_shift(float* x, int n) {
  const int i = static_cast<int>(threadIdx.x);
  const float v = i + 1 < n ? x[i + 1] : x[i];
  __syncthreads();
  x[i] = v;
}

// Thread 0 leaves before the barrier the others wait at (undefined on a GPU).
__global__ void divergent_barrier(float* x) {
  if (threadIdx.x == 0) return;
  __syncthreads();
  x[threadIdx.x] = 1.0f;
}

// Reads dynamic shared memory nobody wrote.
__global__ void read_unwritten_shared(float* out) {
  MLA_DYNAMIC_SHARED(float, shared);
  out[threadIdx.x] = shared[threadIdx.x];
}

std::vector<float> shifted(bool racy, mla::simt::ThreadOrder order) {
  mla::simt::set_thread_order(order);
  std::vector<float> x = {0, 1, 2, 3, 4, 5, 6, 7};
  if (racy)
    MLA_LAUNCH(racy_shift, 1u, 8u, 0, nullptr)(x.data(), 8);
  else
    MLA_LAUNCH(synced_shift, 1u, 8u, 0, nullptr)(x.data(), 8);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);
  return x;
}

ForwardResult run(mla::Backend& b, const mla::AttentionConfig& cfg, const mla::LayerWeights& w,
                  const mla::TensorF& hidden, const ForwardOptions& o) {
  b.prepare(cfg, w, o);
  return b.forward(hidden, o);
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

int64_t workspace_bytes(const mla::AttentionConfig& c, int64_t S, int64_t elem_bytes) {
  return mla::cuda::workspace_layout(mla::cuda::workspace_dims(c, S, elem_bytes)).total_bytes;
}

auto kind_is(mla::ErrorKind k) {
  return [k](const mla::Error& e) { return e.kind() == k; };
}

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const mla::Error& e) {
    BOOST_TEST((e.kind() == mla::ErrorKind::Cuda), e.what());
    return e.what();
  }
  BOOST_ERROR("no mla::Error thrown");
  return {};
}

}  // namespace

// -------------------------------------------------------------------------------------------------
BOOST_FIXTURE_TEST_SUITE(emulator, DefaultDevice)

BOOST_AUTO_TEST_CASE(a_racy_kernel_depends_on_thread_order) {
  using mla::simt::ThreadOrder;
  const std::vector<float> want = {1, 2, 3, 4, 5, 6, 7, 7};
  BOOST_TEST(shifted(true, ThreadOrder::Ascending) == want, boost::test_tools::per_element());
  BOOST_TEST((shifted(true, ThreadOrder::Descending) != want));  // 7 everywhere: the race shows
  BOOST_TEST(shifted(false, ThreadOrder::Ascending) == want, boost::test_tools::per_element());
  BOOST_TEST(shifted(false, ThreadOrder::Descending) == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(divergent_barrier_and_bad_shapes_are_launch_errors) {
  std::vector<float> x(32, 0.0f);
  cudaGetLastError();
  MLA_LAUNCH(divergent_barrier, 1u, 32u, 0, nullptr)(x.data());
  BOOST_TEST(cudaGetLastError() == cudaErrorLaunchFailure);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);  // reading the error clears it
  MLA_LAUNCH(synced_shift, 1u, 2048u, 0, nullptr)(x.data(), 32);  // > 1024 threads per block
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidConfiguration);
  MLA_LAUNCH(synced_shift, 0u, 32u, 0, nullptr)(x.data(), 32);  // empty grid
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidConfiguration);
  MLA_LAUNCH(read_unwritten_shared, 1u, 32u, size_t(64) << 10, nullptr)(x.data());  // 64 KiB > 48 KiB
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidConfiguration);
}

BOOST_AUTO_TEST_CASE(unwritten_shared_memory_reads_as_nan) {
  std::vector<float> out(16, 0.0f);
  MLA_LAUNCH(read_unwritten_shared, 2u, 16u, 16 * sizeof(float), nullptr)(out.data());
  BOOST_TEST(cudaGetLastError() == cudaSuccess);
  for (float v : out) BOOST_TEST(std::isnan(v));
}

BOOST_AUTO_TEST_SUITE_END()

// -------------------------------------------------------------------------------------------------
BOOST_FIXTURE_TEST_SUITE(cuda_launches, DefaultDevice)

BOOST_AUTO_TEST_CASE(one_forward_is_a_fixed_sequence_with_one_sync) {
  for (const char* name : {"tiny", "q_lora_null", "bias", "bias_q_lora_null"}) {
    const mla::AttentionConfig cfg = mla::test::geometry(name);
    const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 11);
    const mla::TensorF hidden = mla::test::random_hidden(9, cfg.hidden_size, 12);
    auto gpu = mla::make_cuda_backend();
    ForwardOptions o;
    o.keep_attn_weights = true;
    gpu->prepare(cfg, w, o);
    gpu->forward(hidden, o);  // first forward allocates the workspace
    for (int repeat = 0; repeat < 2; ++repeat) {
      mla::simt::clear_call_log();
      emu::reset_counters();
      gpu->forward(hidden, o);
      const std::vector<std::string>& log = mla::simt::call_log();
      const emu::Counters c = emu::counters();
      BOOST_TEST_CONTEXT(std::string(name) + " forward #" + std::to_string(repeat + 2)) {
        // Launches: RMSNorm per latent (q only with q_lora), 2 rope/layout kernels, softmax,
        // attention mass, and one bias broadcast per biased Linear (q_a with q_lora, kv_a, o).
        const int64_t biases = cfg.attention_bias ? (cfg.has_q_lora() ? 3 : 2) : 0;
        const int64_t want_launches = (cfg.has_q_lora() ? 2 : 1) + 2 + 1 + 1 + biases;
        // GEMMs: q_a + q_b (or q_proj), kv_a, kv_b, scores, P.V, o_proj.
        const int64_t want_gemms = (cfg.has_q_lora() ? 2 : 1) + 5;
        BOOST_TEST(c.kernel_launches == want_launches);
        BOOST_TEST(c.gemm_calls == want_gemms);
        BOOST_TEST(c.mallocs == 0);  // same S: the workspace is reused
        BOOST_TEST(c.frees == 0);
        BOOST_TEST(c.async_copies == 3);  // hidden, cos, sin
        // Nothing blocks the host until every launch and GEMM has been enqueued; the first
        // blocking call is the stream synchronisation, then only downloads follow.
        const auto first_sync = std::find_if(log.begin(), log.end(), [](const std::string& e) { return starts_with(e, "sync"); });
        BOOST_REQUIRE(first_sync != log.end());
        BOOST_TEST(*first_sync == "sync cudaStreamSynchronize");
        const auto last_work = std::find_if(log.rbegin(), log.rend(), [](const std::string& e) {
          return starts_with(e, "launch") || starts_with(e, "gemm") || starts_with(e, "copy");
        });
        BOOST_TEST((last_work.base() <= first_sync));
        BOOST_TEST(std::count(log.begin(), log.end(), "sync cudaStreamSynchronize") == 1);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

// -------------------------------------------------------------------------------------------------
BOOST_FIXTURE_TEST_SUITE(cuda_stream_order, DefaultDevice)

// The emulator's ordering check itself: a synchronous host-to-device cudaMemcpy (legacy default
// stream) followed by work on a non-blocking stream is a hazard until a device-wide sync.
BOOST_AUTO_TEST_CASE(a_legacy_copy_is_not_ordered_before_a_non_blocking_stream) {
  BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  cudaStream_t stream = nullptr;
  BOOST_REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  void* dev = nullptr;
  BOOST_REQUIRE(cudaMalloc(&dev, 64) == cudaSuccess);
  std::vector<unsigned char> host(64, 1);
  emu::reset_counters();
  BOOST_TEST(cudaMemcpyAsync(dev, host.data(), 64, cudaMemcpyHostToDevice, stream) == cudaSuccess);
  BOOST_TEST(emu::counters().stream_order_hazards == 0);  // nothing in flight on the legacy stream
  BOOST_TEST(cudaMemcpy(dev, host.data(), 64, cudaMemcpyHostToDevice) == cudaSuccess);
  BOOST_TEST(cudaMemcpyAsync(host.data(), dev, 64, cudaMemcpyDeviceToHost, stream) == cudaSuccess);
  BOOST_TEST(emu::counters().stream_order_hazards == 1);
  BOOST_TEST(cudaStreamSynchronize(stream) == cudaSuccess);  // waits for `stream`, not for the copy
  BOOST_TEST(cudaMemcpyAsync(host.data(), dev, 64, cudaMemcpyDeviceToHost, stream) == cudaSuccess);
  BOOST_TEST(emu::counters().stream_order_hazards == 2);
  BOOST_TEST(cudaDeviceSynchronize() == cudaSuccess);
  BOOST_TEST(cudaMemcpyAsync(host.data(), dev, 64, cudaMemcpyDeviceToHost, stream) == cudaSuccess);
  BOOST_TEST(emu::counters().stream_order_hazards == 2);
  BOOST_TEST(cudaFree(dev) == cudaSuccess);
  BOOST_TEST(cudaStreamDestroy(stream) == cudaSuccess);
}

// prepare() uploads the weights on the compute stream, so the first forward is ordered after them.
BOOST_AUTO_TEST_CASE(the_first_forward_is_ordered_after_the_weight_upload) {
  for (const char* name : {"tiny", "bias_q_lora_null"}) {
    const mla::AttentionConfig cfg = mla::test::geometry(name);
    const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 21);
    BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    emu::reset_counters();
    auto gpu = mla::make_cuda_backend();
    ForwardOptions o;
    gpu->prepare(cfg, w, o);
    gpu->forward(mla::test::random_hidden(4, cfg.hidden_size, 22), o);
    BOOST_TEST(emu::counters().stream_order_hazards == 0, name);
    BOOST_TEST(emu::counters().async_copies == int64_t(mla::layer_tensors(cfg).size()) + 3, name);  // weights + hidden, cos, sin
  }
}

BOOST_AUTO_TEST_SUITE_END()

// -------------------------------------------------------------------------------------------------
BOOST_FIXTURE_TEST_SUITE(cuda_errors, DefaultDevice)

// Every invalid input of tests/unit/invalid_inputs.hpp: the emulated cuda backend gives the
// reference's and the cpu backend's ErrorKind and message (one validator, mla/validate.hpp).
BOOST_AUTO_TEST_CASE(cuda_refuses_each_invalid_input_as_the_other_backends) {
  mla::test::expect_same_errors({mla::make_reference_backend, mla::make_cpu_backend, mla::make_cuda_backend});
}

BOOST_AUTO_TEST_SUITE_END()

// -------------------------------------------------------------------------------------------------
BOOST_FIXTURE_TEST_SUITE(cuda_races, DefaultDevice)

BOOST_AUTO_TEST_CASE(results_do_not_depend_on_thread_order) {
  uint64_t seed = 300;
  for (const mla::test::Geometry& g : mla::test::small_geometries()) {
    const mla::LayerWeights w = mla::test::random_layer_weights(g.cfg, seed++);
    const mla::TensorF hidden = mla::test::random_hidden(33, g.cfg.hidden_size, seed++);
    auto gpu = mla::make_cuda_backend();
    for (const Precision p : {Precision::FP32, Precision::BF16}) {
      ForwardOptions o;
      o.precision = p;
      o.keep_attn_weights = true;
      o.keep_states = true;
      BOOST_TEST_CONTEXT(g.name + " " + mla::precision_name(p)) {
        mla::simt::set_thread_order(mla::simt::ThreadOrder::Ascending);
        const ForwardResult a = run(*gpu, g.cfg, w, hidden, o);
        mla::simt::set_thread_order(mla::simt::ThreadOrder::Descending);
        const ForwardResult b = gpu->forward(hidden, o);
        BOOST_TEST(a.attn_output.data == b.attn_output.data);
        BOOST_TEST(a.attn_weights.data == b.attn_weights.data);
        BOOST_TEST(a.query_states.data == b.query_states.data);
        BOOST_TEST(a.key_states.data == b.key_states.data);
        BOOST_TEST(a.value_states.data == b.value_states.data);
        BOOST_TEST(a.head_scores == b.head_scores);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

// -------------------------------------------------------------------------------------------------
BOOST_FIXTURE_TEST_SUITE(cuda_memory, DefaultDevice)

BOOST_AUTO_TEST_CASE(peak_is_weights_plus_one_workspace_and_all_is_freed) {
  const mla::AttentionConfig cfg = mla::test::geometry("odd");
  const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 21);
  const int64_t base = emu::counters().bytes_in_use;
  {
    auto gpu = mla::make_cuda_backend();
    for (const Precision p : {Precision::FP32, Precision::BF16}) {
      BOOST_TEST_CONTEXT(mla::precision_name(p)) {
        const int64_t eb = p == Precision::BF16 ? 2 : 4;
        ForwardOptions o;
        o.precision = p;
        gpu->prepare(cfg, w, o);
        const int64_t prepared = emu::counters().bytes_in_use;  // cuBLAS workspace + weights
        int64_t old_ws = 0;  // prepare() dropped the workspace
        for (const int64_t S : {int64_t(9), int64_t(17), int64_t(5)}) {
          emu::reset_counters();  // high water := what is allocated now (prepared + old_ws)
          gpu->forward(mla::test::random_hidden(S, cfg.hidden_size, 22), o);
          // The old workspace is freed before the new one is allocated: never two at once
          // (that would peak at prepared + old_ws + new_ws).
          const int64_t new_ws = workspace_bytes(cfg, S, eb);
          BOOST_TEST(emu::counters().bytes_high_water == prepared + std::max(old_ws, new_ws));
          BOOST_TEST(emu::counters().bytes_in_use == prepared + new_ws);
          old_ws = new_ws;
        }
        // Preparing again frees the old weights before uploading the new ones.
        emu::reset_counters();
        const int64_t before = emu::counters().bytes_in_use;
        gpu->prepare(cfg, w, o);
        BOOST_TEST(emu::counters().bytes_high_water <= before);
      }
    }
  }
  const emu::Counters c = emu::counters();
  BOOST_TEST(c.bytes_in_use == base);
  BOOST_TEST(c.live_streams == 0);
  BOOST_TEST(c.live_events == 0);
  BOOST_TEST(c.live_handles == 0);
}

BOOST_AUTO_TEST_SUITE_END()

// -------------------------------------------------------------------------------------------------
BOOST_FIXTURE_TEST_SUITE(cuda_faults, DefaultDevice)

BOOST_AUTO_TEST_CASE(injected_failures_are_typed_errors_naming_the_call) {
  const mla::AttentionConfig cfg = mla::test::geometry("tiny");
  const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 31);
  const mla::TensorF hidden = mla::test::random_hidden(6, cfg.hidden_size, 32);
  ForwardOptions o;
  o.keep_attn_weights = true;
  const int64_t base = emu::counters().bytes_in_use;

  // The constructor's cuBLAS workspace.
  emu::fail_nth_malloc(1);
  std::string msg = error_text([] { mla::make_cuda_backend(); });
  BOOST_TEST(msg.find("cudaMalloc(cuBLAS workspace, 33554432 bytes)") != std::string::npos, msg);
  BOOST_TEST(msg.find("cudaErrorMemoryAllocation") != std::string::npos, msg);
  BOOST_TEST(emu::counters().bytes_in_use == base);
  BOOST_TEST(emu::counters().live_handles == 0);
  BOOST_TEST(emu::counters().live_streams == 0);

  auto gpu = mla::make_cuda_backend();
  const ForwardResult clean = run(*gpu, cfg, w, hidden, o);
  const int64_t with_backend = emu::counters().bytes_in_use - workspace_bytes(cfg, 6, 4);

  // The second weight upload of prepare() (q_a_layernorm).
  emu::fail_nth_malloc(2);
  msg = error_text([&] { gpu->prepare(cfg, w, o); });
  BOOST_TEST(msg.find("cudaMalloc(weight " + w.q_a_layernorm.name) != std::string::npos, msg);
  BOOST_CHECK_EXCEPTION(gpu->forward(hidden, o), mla::Error, kind_is(mla::ErrorKind::InvalidArgument));  // no weights now
  BOOST_TEST(emu::counters().bytes_in_use <= with_backend);  // the failed upload kept nothing

  // GEMM #3 of a forward is kv_a_proj_with_mqa; #5 is the batched QK^T.
  gpu->prepare(cfg, w, o);
  emu::fail_nth_gemm(3);
  msg = error_text([&] { gpu->forward(hidden, o); });
  BOOST_TEST(msg.find("cublasGemmEx (kv_a_proj_with_mqa)") != std::string::npos, msg);
  BOOST_TEST(msg.find("CUBLAS_STATUS_EXECUTION_FAILED") != std::string::npos, msg);
  emu::fail_nth_gemm(5);
  msg = error_text([&] { gpu->forward(hidden, o); });
  BOOST_TEST(msg.find("cublasGemmStridedBatchedEx") != std::string::npos, msg);

  // The backend is still usable and gives the same result as before the faults.
  const ForwardResult again = gpu->forward(hidden, o);
  BOOST_TEST(again.attn_output.data == clean.attn_output.data);
  BOOST_TEST(again.head_scores == clean.head_scores);
}

BOOST_AUTO_TEST_CASE(q_proj_bias_is_refused) {
  const mla::AttentionConfig cfg = mla::test::geometry("bias_q_lora_null");
  mla::LayerWeights w = mla::test::random_layer_weights(cfg, 33);
  auto gpu = mla::make_cuda_backend();
  ForwardOptions o;
  gpu->prepare(cfg, w, o);
  w.q_a_proj_bias = mla::TensorF("q_proj.bias", {cfg.num_attention_heads * cfg.qk_head_dim()});
  BOOST_CHECK_EXCEPTION(gpu->prepare(cfg, w, o), mla::Error, [](const mla::Error& e) {
    return e.kind() == mla::ErrorKind::Shape && std::string(e.what()).find("q_proj has no bias") != std::string::npos;
  });
}

BOOST_AUTO_TEST_SUITE_END()

// -------------------------------------------------------------------------------------------------
BOOST_FIXTURE_TEST_SUITE(cuda_devices, DefaultDevice)

BOOST_AUTO_TEST_CASE(auto_and_cuda_follow_the_device) {
  std::string why;
  emu::set_devices(0, 0, 0);
  BOOST_TEST(!mla::cuda_available(&why));
  BOOST_TEST(!why.empty());
  BOOST_TEST(mla::make_backend(mla::BackendKind::Auto)->name() == "cpu");
  const std::string msg = error_text([] { mla::make_backend(mla::BackendKind::Cuda); });
  BOOST_TEST(msg.find("--backend cuda: ") != std::string::npos, msg);

  emu::set_devices(1, 7, 5);  // Turing: no bf16 GEMMs, not in the fatbin
  BOOST_TEST(!mla::cuda_available(&why));
  BOOST_TEST(why.find("compute capability 7.5") != std::string::npos, why);
  BOOST_TEST(mla::make_backend(mla::BackendKind::Auto)->name() == "cpu");

  emu::set_devices(1, 9, 0);
  BOOST_TEST(mla::cuda_available(&why));
  BOOST_TEST(why.empty());
  auto b = mla::make_backend(mla::BackendKind::Auto);
  BOOST_TEST(b->name() == "cuda");
  BOOST_TEST(b->description().find("SIMT emulator") != std::string::npos, b->description());
}

BOOST_AUTO_TEST_SUITE_END()

// -------------------------------------------------------------------------------------------------
BOOST_FIXTURE_TEST_SUITE(cuda_tf32, DefaultDevice)

BOOST_AUTO_TEST_CASE(allow_tf32_reaches_cublas_within_its_tolerance) {
  const mla::AttentionConfig cfg = mla::test::geometry("odd");
  const mla::LayerWeights w = mla::test::random_layer_weights(cfg, 41);
  const mla::TensorF hidden = mla::test::random_hidden(12, cfg.hidden_size, 42);
  auto ref = mla::make_reference_backend();
  auto gpu = mla::make_cuda_backend();
  ForwardOptions o;
  o.keep_attn_weights = true;
  const ForwardResult want = run(*ref, cfg, w, hidden, o);
  const ForwardResult exact = run(*gpu, cfg, w, hidden, o);
  o.allow_tf32 = true;
  const ForwardResult tf32 = gpu->forward(hidden, o);
  BOOST_TEST((tf32.attn_output.data != exact.attn_output.data));  // TF32 rounding took place
  for (const char* name : {"attn_output", "attn_weights"}) {
    const mla::TensorD& a = std::string(name) == "attn_output" ? want.attn_output : want.attn_weights;
    const mla::TensorD& b = std::string(name) == "attn_output" ? tf32.attn_output : tf32.attn_weights;
    const mla::test::CompareResult r =
        mla::test::compare(name, a, b, mla::test::tolerance(name, "cuda-tf32-vs-reference", "fp32"));
    BOOST_TEST_MESSAGE(std::string("tf32 ") + name + " norm_error=" + std::to_string(r.norm_error));
    BOOST_TEST(r.ok, r.message);
  }
}

BOOST_AUTO_TEST_SUITE_END()

// -------------------------------------------------------------------------------------------------
BOOST_FIXTURE_TEST_SUITE(cli_on_emulated_gpu, DefaultDevice)

namespace {

// scores.csv without its score column: "token_idx,kept,category" per line (the decision).
std::vector<std::string> decisions(const std::string& csv_path) {
  std::istringstream in(mla::test::read_text(csv_path));
  std::vector<std::string> rows;
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(','), b = line.find(',', a + 1);
    BOOST_REQUIRE_MESSAGE(a != std::string::npos && b != std::string::npos, csv_path << ": bad line " << line);
    rows.push_back(line.substr(0, a) + line.substr(b));
  }
  return rows;
}

}  // namespace

BOOST_AUTO_TEST_CASE(auto_picks_cuda_and_decides_as_the_cpu) {
  using mla::test::run_cli;
  const std::string dir = mla::test::scratch_dir("emulated-cli");
  const mla::test::RunResult synth = run_cli("synth --preset tiny --seed 5 --out '" + dir + "/ckpt'");
  BOOST_REQUIRE_MESSAGE(synth.exit_code == 0, synth.err);
  const std::string common = "run --checkpoint '" + dir + "/ckpt' --seq-len 40 --seed 3 --sinks 2 --recent 6 "
                             "--budget 8 --dump-tensors";
  for (const char* precision : {"fp32", "bf16"}) {
    BOOST_TEST_CONTEXT(precision) {
      const std::string gpu_out = dir + "/auto-" + precision, cpu_out = dir + "/cpu-" + precision;
      const mla::test::RunResult gpu = run_cli(common + " --precision " + precision + " --out '" + gpu_out + "'");
      BOOST_REQUIRE_MESSAGE(gpu.exit_code == 0, gpu.err);
      BOOST_TEST(gpu.out.find("backend:            cuda (auto: a CUDA device is usable)") != std::string::npos, gpu.out);
      BOOST_TEST(mla::test::read_text(gpu_out + "/report.json").find("\"name\": \"cuda\"") != std::string::npos);
      const mla::test::RunResult cpu =
          run_cli(common + " --precision " + precision + " --backend cpu --out '" + cpu_out + "'");
      BOOST_REQUIRE_MESSAGE(cpu.exit_code == 0, cpu.err);
      // The same tokens kept, for the same reasons.
      BOOST_TEST(decisions(gpu_out + "/scores.csv") == decisions(cpu_out + "/scores.csv"),
                 boost::test_tools::per_element());
      // Every dumped tensor within the cuda-vs-cpu row of the tolerance table.
      const mla::test::Tolerance tol = mla::test::tolerance("attn_output", "cuda-vs-cpu", precision);
      std::ostringstream cmd;
      cmd << "compare '" << cpu_out << "/tensors.safetensors' '" << gpu_out << "/tensors.safetensors' --rtol "
          << tol.rtol << " --atol " << tol.atol;
      const mla::test::RunResult cmp = run_cli(cmd.str());
      BOOST_TEST(cmp.exit_code == 0, cmp.out << cmp.err);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
