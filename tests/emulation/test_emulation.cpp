// tests/emulation/test_emulation.cpp — what only the emulated device can check (meson test
// 'cuda_emulated', together with tests/cuda/test_cuda.cpp):
//   emulator            the emulator itself catches what it claims to: a racy kernel gives
//                       order-dependent results, a divergent barrier and a bad launch shape
//                       are launch errors, unwritten shared memory reads as NaN;
//   cuda_launches       one forward is a fixed sequence of launches and GEMMs with no host
//                       synchronisation before the single cudaStreamSynchronize (docs/backends.md §4);
//   cuda_tiled       the tiled attention kernel gives exactly the numbers of its contract
//                       (docs/long-context.md §2), recomputed here on the host from the same
//                       inputs: probabilities, P.V and H2O mass bit for bit, at S that do not
//                       divide the tiles, both masks and precisions, Kimi's head dims included;
//   cuda_races          every kernel gives bit-identical results with the threads of each block
//                       run in ascending and in descending order (no data race);
//   cuda_memory         device memory high-water mark = weights + one workspace + the cuBLAS
//                       workspace (+ attn_weights only while a forward that keeps them runs),
//                       everything freed when the backend goes away;
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
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "compare.hpp"
#include "cuda/kernels.hpp"
#include "cuda/launch_geometry.hpp"
#include "cuda/workspace_layout.hpp"
#include "emulation.hpp"
#include "geometries.hpp"
#include "invalid_inputs.hpp"
#include "mla/attention.hpp"
#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/layer_tensors.hpp"
#include "mla/random.hpp"
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
    gpu->prepare(cfg, w, o);
    gpu->forward(hidden, o);  // first forward allocates the workspace
    for (int repeat = 0; repeat < 2; ++repeat) {
      o.keep_attn_weights = repeat == 1;
      mla::simt::clear_call_log();
      emu::reset_counters();
      gpu->forward(hidden, o);
      const std::vector<std::string>& log = mla::simt::call_log();
      const emu::Counters c = emu::counters();
      BOOST_TEST_CONTEXT(std::string(name) + " forward #" + std::to_string(repeat + 2) +
                         (o.keep_attn_weights ? " keeping attn_weights" : "")) {
        // Launches: RMSNorm per latent (q only with q_lora), 2 rope/layout kernels, the streamed
        // attention and its mass reduction, and one bias broadcast per biased Linear (q_a with
        // q_lora, kv_a, o).
        const int64_t biases = cfg.attention_bias ? (cfg.has_q_lora() ? 3 : 2) : 0;
        const int64_t want_launches = (cfg.has_q_lora() ? 2 : 1) + 2 + 2 + biases;
        // GEMMs: the projections only, q_a + q_b (or q_proj), kv_a, kv_b, o_proj.
        const int64_t want_gemms = (cfg.has_q_lora() ? 2 : 1) + 3;
        BOOST_TEST(c.kernel_launches == want_launches);
        BOOST_TEST(c.gemm_calls == want_gemms);
        // Same S: the workspace is reused; the [n, S, S] probabilities get a buffer of their
        // own only when kept, freed at the end of the forward.
        BOOST_TEST(c.mallocs == (o.keep_attn_weights ? 1 : 0));
        BOOST_TEST(c.frees == c.mallocs);
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
// The tiled attention (cuda/tiled_attention.cu) against its contract, recomputed here on
// the host from the same T-storage inputs and written from the equations, not from the kernel:
// one query row at a time over all its keys (no tiles): the fp32 dot product d ascending, the
// bf16 roundings of docs/math.md §7, m = max, e = expf(x - m), z = sum of e in double t
// ascending, p = fp32(e * (1 / z)) rounded to T; P.V in fp32 t ascending, rounded to T; the H2O
// mass in the order the kernel documents: chunk c of the query tiles (tiles c, c + C, ...) adds
// its rows' p in ascending rows from 0.0, then the C partial sums are added in c ascending.
// The emulated device's expf is the host's, so everything is compared exactly (==): a
// difference is a bug in the tiling, the passes, a rounding point or the mass order. (On a GPU
// the device expf may differ in the last bit; test_cuda.cpp's tolerance rows cover that.)
namespace {

struct TiledCase {
  int64_t heads, S, d_qk, d_v;
  int64_t chunks;  // C; 0 = the backend's (attention_mass_chunks)
  double q_scale;  // standard deviation of the queries (keys and values: 1)
};

struct TiledOut {
  std::vector<float> attn_context;  // [S, n*d_v]
  std::vector<float> attn_weights;  // [n, S, S]
  std::vector<double> head_scores;  // [n, S]
};

float round_t(float v, bool bf16) { return bf16 ? mla::round_to_bf16(v) : v; }

int64_t chunks_of(const TiledCase& k) {
  if (k.chunks > 0) return k.chunks;
  const mla::cuda::AttentionTiles tiles = mla::cuda::attention_tiles(k.d_qk, k.d_v);
  return mla::cuda::attention_mass_chunks(k.heads, mla::cuda::attention_query_tiles(k.S, tiles));
}

TiledOut contract(const TiledCase& k, bool causal, bool bf16, float scaling, const std::vector<float>& q,
                     const std::vector<float>& key, const std::vector<float>& v) {
  const int64_t n = k.heads, S = k.S;
  TiledOut out;
  out.attn_context.assign(static_cast<size_t>(S * n * k.d_v), 0.0f);
  out.attn_weights.assign(static_cast<size_t>(n * S * S), 0.0f);
  for (int64_t h = 0; h < n; ++h)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t visible = causal ? s + 1 : S;
      std::vector<float> x(static_cast<size_t>(visible)), e(x.size());
      for (int64_t t = 0; t < visible; ++t) {
        float dot = 0.0f;
        for (int64_t d = 0; d < k.d_qk; ++d)
          dot += q[static_cast<size_t>((h * S + s) * k.d_qk + d)] * key[static_cast<size_t>((h * S + t) * k.d_qk + d)];
        x[static_cast<size_t>(t)] = round_t(round_t(dot, bf16) * scaling, bf16);
      }
      const float m = *std::max_element(x.begin(), x.end());
      double z = 0.0;
      for (size_t t = 0; t < x.size(); ++t) {
        e[t] = std::exp(x[t] - m);
        z += static_cast<double>(e[t]);
      }
      const double inv = 1.0 / z;
      float* p = out.attn_weights.data() + (h * S + s) * S;
      for (size_t t = 0; t < x.size(); ++t) p[t] = round_t(static_cast<float>(static_cast<double>(e[t]) * inv), bf16);
      for (int64_t j = 0; j < k.d_v; ++j) {
        float o = 0.0f;
        for (int64_t t = 0; t < visible; ++t) o += p[t] * v[static_cast<size_t>((h * S + t) * k.d_v + j)];
        out.attn_context[static_cast<size_t>(s * n * k.d_v + h * k.d_v + j)] = round_t(o, bf16);
      }
    }
  const int64_t bq = mla::cuda::attention_tiles(k.d_qk, k.d_v).query_rows, tiles = (S + bq - 1) / bq;
  const int64_t chunks = chunks_of(k);
  out.head_scores.assign(static_cast<size_t>(n * S), 0.0);
  for (int64_t h = 0; h < n; ++h)
    for (int64_t t = 0; t < S; ++t) {
      double total = 0.0;
      for (int64_t c = 0; c < chunks; ++c) {
        double partial = 0.0;
        for (int64_t tile = c; tile < tiles; tile += chunks)
          for (int64_t s = tile * bq; s < std::min(S, (tile + 1) * bq); ++s)
            if (!causal || t <= s) partial += static_cast<double>(out.attn_weights[static_cast<size_t>((h * S + s) * S + t)]);
        total += partial;
      }
      out.head_scores[static_cast<size_t>(h * S + t)] = total;
    }
  return out;
}

// Device memory holding `values` in T-storage (values already representable in T).
struct DeviceArray {
  void* ptr = nullptr;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  explicit DeviceArray(size_t bytes) { BOOST_REQUIRE(cudaMalloc(&ptr, bytes) == cudaSuccess); }
  DeviceArray(const std::vector<float>& values, bool bf16) : DeviceArray(values.size() * (bf16 ? 2 : 4)) {
    std::vector<unsigned char> bytes(values.size() * (bf16 ? 2 : 4));
    for (size_t i = 0; i < values.size(); ++i) {
      if (bf16) {
        const uint16_t b = mla::bf16::round_bits(values[i]);
        std::memcpy(bytes.data() + 2 * i, &b, 2);
      } else {
        std::memcpy(bytes.data() + 4 * i, &values[i], 4);
      }
    }
    BOOST_REQUIRE(cudaMemcpy(ptr, bytes.data(), bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~DeviceArray() { cudaFree(ptr); }
};

std::vector<float> download_values(const void* src, size_t count, bool bf16) {
  std::vector<unsigned char> bytes(count * (bf16 ? 2 : 4));
  BOOST_REQUIRE(cudaMemcpy(bytes.data(), src, bytes.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) {
    if (bf16) {
      uint16_t b;
      std::memcpy(&b, bytes.data() + 2 * i, 2);
      out[i] = mla::bf16::from_bits(b).to_float();
    } else {
      std::memcpy(&out[i], bytes.data() + 4 * i, 4);
    }
  }
  return out;
}

// T-storage values: normal(0, scale) rounded to bf16 in a bf16 run.
std::vector<float> random_values(int64_t count, double scale, bool bf16, uint64_t seed) {
  mla::Rng rng(seed, 1);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = round_t(static_cast<float>(scale * rng.normal()), bf16);
  return v;
}

// The kernel on the emulated device (attn_weights kept or not).
TiledOut run_tiled(const TiledCase& k, bool causal, bool bf16, float scaling, const std::vector<float>& q,
                         const std::vector<float>& key, const std::vector<float>& v, bool keep_weights) {
  const int64_t n = k.heads, S = k.S;
  const DeviceArray dq(q, bf16), dk(key, bf16), dv(v, bf16);
  BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // the synchronous uploads have landed
  const size_t eb = bf16 ? 2 : 4;
  const DeviceArray context(static_cast<size_t>(S * n * k.d_v) * eb), partials(static_cast<size_t>(n * chunks_of(k) * S) * 8),
      scores(static_cast<size_t>(n * S) * 8), weights(keep_weights ? static_cast<size_t>(n * S * S) * eb : 1);
  mla::cuda::TiledAttention in;
  in.query_states = dq.ptr;
  in.key_states = dk.ptr;
  in.value_states = dv.ptr;
  in.attn_context = context.ptr;
  in.mass_partials = static_cast<double*>(partials.ptr);
  in.head_scores = static_cast<double*>(scores.ptr);
  in.attn_weights = keep_weights ? weights.ptr : nullptr;
  in.seq_len = S;
  in.heads = n;
  in.qk_head_dim = k.d_qk;
  in.v_head_dim = k.d_v;
  in.mass_chunks = chunks_of(k);
  in.scaling = scaling;
  in.causal = causal;
  BOOST_REQUIRE(mla::cuda::launch_tiled_attention(bf16 ? mla::cuda::Storage::BF16 : mla::cuda::Storage::F32, in,
                                                     nullptr) == cudaSuccess);
  TiledOut out;
  out.attn_context = download_values(context.ptr, static_cast<size_t>(S * n * k.d_v), bf16);
  if (keep_weights) out.attn_weights = download_values(weights.ptr, static_cast<size_t>(n * S * S), bf16);
  out.head_scores.resize(static_cast<size_t>(n * S));
  BOOST_REQUIRE(cudaMemcpy(out.head_scores.data(), scores.ptr, out.head_scores.size() * 8, cudaMemcpyDeviceToHost) ==
                cudaSuccess);
  return out;
}

// Entries that differ (0 = identical, bit for bit: -0 and +0 count as different).
template <class V>
int64_t differences(const std::vector<V>& a, const std::vector<V>& b) {
  if (a.size() != b.size()) return -1;
  int64_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], sizeof(V)) != 0;
  return d;
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(cuda_tiled, DefaultDevice)

BOOST_AUTO_TEST_CASE(kernel_equals_its_contract_at_every_tile_edge) {
  // Bq x Bk = 16 x 32 for the small head dims and Kimi's (192, 128); 4 x 8 for 512-wide heads.
  // S = 1 (one key), 15 / 16 / 17 (a query tile's edge), 31 / 33 (a key tile's edge), 50;
  // C = 1 (one block walks all of a head's tiles: the CPU's mass order), 2 (tiles interleaved
  // over chunks), the backend's, and one more chunk than tiles (an empty chunk). Queries of
  // standard deviation 2 give logits of a few units; 8 gives probabilities down to ~1e-30,
  // whose double sums depend on their order (so a mass summed in another order than the
  // documented one shows).
  const std::vector<TiledCase> cases = {
      {2, 1, 16, 8, 0, 2.0},   {2, 15, 16, 8, 0, 2.0},    {2, 16, 16, 8, 1, 8.0},  {2, 17, 16, 8, 0, 2.0},
      {1, 31, 16, 8, 2, 8.0},  {2, 33, 16, 8, 0, 2.0},    {3, 50, 18, 10, 2, 8.0}, {2, 37, 192, 128, 0, 2.0},
      {1, 21, 512, 512, 0, 2.0}, {2, 20, 16, 8, 3, 8.0},  {2, 64, 16, 8, 0, 8.0},
  };
  uint64_t seed = 500;
  for (const TiledCase& k : cases) {
    BOOST_TEST_REQUIRE(mla::cuda::attention_tiles(k.d_qk, k.d_v).fits);
    for (const bool bf16 : {false, true}) {
      // |x| ~ a few units: softmax rows neither flat nor one-hot
      const float scaling = static_cast<float>(1.0 / std::sqrt(static_cast<double>(k.d_qk)));
      const std::vector<float> q = random_values(k.heads * k.S * k.d_qk, k.q_scale, bf16, seed++);
      const std::vector<float> key = random_values(k.heads * k.S * k.d_qk, 1.0, bf16, seed++);
      const std::vector<float> v = random_values(k.heads * k.S * k.d_v, 1.0, bf16, seed++);
      for (const bool causal : {true, false}) {
        BOOST_TEST_CONTEXT("n " << k.heads << " S " << k.S << " d_qk " << k.d_qk << " d_v " << k.d_v << " C "
                                << chunks_of(k) << (bf16 ? " bf16" : " fp32") << (causal ? " causal" : " none")) {
          const TiledOut want = contract(k, causal, bf16, scaling, q, key, v);
          const TiledOut got = run_tiled(k, causal, bf16, scaling, q, key, v, true);
          BOOST_TEST(differences(got.attn_weights, want.attn_weights) == 0);
          BOOST_TEST(differences(got.attn_context, want.attn_context) == 0);
          BOOST_TEST(differences(got.head_scores, want.head_scores) == 0);
          // Without attn_weights: the same numbers (the probabilities are only copied out).
          const TiledOut lean = run_tiled(k, causal, bf16, scaling, q, key, v, false);
          BOOST_TEST(differences(lean.attn_context, got.attn_context) == 0);
          BOOST_TEST(differences(lean.head_scores, got.head_scores) == 0);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(kernel_has_no_race) {
  // Blocks and their threads in descending order: the same bits (cuda_races does this for
  // whole forwards; here with C = 2, where a block walks two query tiles).
  const TiledCase k{2, 45, 16, 8, 2, 2.0};
  const std::vector<float> q = random_values(k.heads * k.S * k.d_qk, 2.0, true, 90);
  const std::vector<float> key = random_values(k.heads * k.S * k.d_qk, 1.0, true, 91);
  const std::vector<float> v = random_values(k.heads * k.S * k.d_v, 1.0, true, 92);
  const TiledOut a = run_tiled(k, true, true, 0.25f, q, key, v, true);
  mla::simt::set_thread_order(mla::simt::ThreadOrder::Descending);
  const TiledOut b = run_tiled(k, true, true, 0.25f, q, key, v, true);
  BOOST_TEST(differences(a.attn_weights, b.attn_weights) == 0);
  BOOST_TEST(differences(a.attn_context, b.attn_context) == 0);
  BOOST_TEST(differences(a.head_scores, b.head_scores) == 0);
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
        // Keeping the probabilities adds their [n, S, S] buffer for the forward's duration only.
        emu::reset_counters();
        ForwardOptions keep = o;
        keep.keep_attn_weights = true;
        gpu->forward(mla::test::random_hidden(5, cfg.hidden_size, 22), keep);
        const int64_t nss = int64_t(cfg.num_attention_heads) * 5 * 5 * eb;
        BOOST_TEST(emu::counters().bytes_high_water == prepared + old_ws + nss);
        BOOST_TEST(emu::counters().bytes_in_use == prepared + old_ws);
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

  // GEMM #3 of a forward is kv_a_proj_with_mqa; #5 is o_proj.
  gpu->prepare(cfg, w, o);
  emu::fail_nth_gemm(3);
  msg = error_text([&] { gpu->forward(hidden, o); });
  BOOST_TEST(msg.find("cublasGemmEx (kv_a_proj_with_mqa)") != std::string::npos, msg);
  BOOST_TEST(msg.find("CUBLAS_STATUS_EXECUTION_FAILED") != std::string::npos, msg);
  emu::fail_nth_gemm(5);
  msg = error_text([&] { gpu->forward(hidden, o); });
  BOOST_TEST(msg.find("cublasGemmEx (o_proj)") != std::string::npos, msg);

  // The attn_weights buffer of a forward that keeps them (the workspace exists already).
  const int64_t before_forward = emu::counters().bytes_in_use;
  emu::fail_nth_malloc(1);
  msg = error_text([&] { gpu->forward(hidden, o); });
  BOOST_TEST(msg.find("cudaMalloc(attn_weights [2, 6, 6], 288 bytes)") != std::string::npos, msg);
  BOOST_TEST(emu::counters().bytes_in_use == before_forward);

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
