// cuda/cuda_backend.cpp — the "cuda" backend: one layer of HF DeepseekV3Attention (eager) on
// one GPU, projections through cuBLAS, the rest in the hand-written kernels of rms_norm.cu,
// rope.cu, tiled_attention.cu (the attention and its H2O mass, never an [n, S, S] tensor)
// and layout.cu.
//
// Shape legend: S = tokens (queries = keys, no cache), H = hidden_size, n = num_attention_heads,
//   r_q = q_lora_rank, r_kv = kv_lora_rank, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim,
//   d_v = v_head_dim, d_qk = d_n + d_r. "T-storage" = fp32 in fp32 mode, bf16 in bf16 mode.
//
// Numerics (docs/math.md §7): activations are stored in T-storage between steps, so every HF
// bf16 rounding point is a store. GEMMs (the projections): cublasGemmEx with CUBLAS_COMPUTE_32F
// (fp32 accumulation; bf16 inputs and outputs in bf16 mode = one rounding per output, as
// PyTorch), reduced-precision split-K reductions disallowed; TF32 only when
// ForwardOptions::allow_tf32 in fp32 mode (CUBLAS_COMPUTE_32F_FAST_TF32). The attention's two
// products run in tiled_attention.cu (fp32 accumulation, one rounding each, never TF32).
// Kernels are built with --fmad=false so no multiply-add is contracted behind the equations' back.
//
// Flow of forward(): host builds the bf16/fp32 input and cos/sin tables (src/math
// rope_tables, in fp32 as HF); then the stages, as in the reference and the cpu backend, each
// a member function bracketed by cudaEvents (StageEvents): upload (async copies), q_path,
// kv_path, rope, attend, o_proj -> ONE cudaStreamSynchronize -> export (downloads; stage
// times read from the events). No host synchronisation inside the enqueued part. The H2O
// selection is not done here: it runs on the host from head_scores / token_scores, with the
// same code as for the CPU. Device memory is O(S) (workspace_layout.hpp); the [n, S, S]
// probabilities get a buffer of their own, for one forward, only when keep_attn_weights.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cuda/cuda_check.hpp"
#include "cuda/gemm_plan.hpp"
#include "cuda/kernels.hpp"
#include "cuda/launch_geometry.hpp"
#include "cuda/workspace_layout.hpp"
#include "mla/attention.hpp"
#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/h2o_selector.hpp"
#include "mla/rope.hpp"
#include "mla/stage_timer.hpp"
#include "mla/validate.hpp"

static_assert(static_cast<int>(cudaErrorInsufficientDriver) == mla::cuda::kCudaErrorInsufficientDriver);
static_assert(static_cast<int>(cudaErrorNoDevice) == mla::cuda::kCudaErrorNoDevice);

namespace mla {
namespace cuda {
namespace {

// ---- RAII wrappers: every device resource is released when its owner goes away ----------

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int64_t bytes, const std::string& what) : bytes_(bytes) {
    if (bytes <= 0) return;
    const cudaError_t st = cudaMalloc(&ptr_, static_cast<size_t>(bytes));
    if (st != cudaSuccess) {
      ptr_ = nullptr;
      clear_last_error();  // see cuda_check.hpp
      fail(ErrorKind::Cuda, failure_message("cudaMalloc(" + what + ", " + std::to_string(bytes) + " bytes)",
                                            __FILE__, __LINE__, static_cast<int>(st), cudaGetErrorName(st),
                                            cudaGetErrorString(st)));
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  void* get() const { return ptr_; }
  int64_t bytes() const { return bytes_; }

 private:
  void release() noexcept {
    if (ptr_) cudaFree(ptr_);  // a destructor cannot throw; a failed free leaves nothing to do
    ptr_ = nullptr;
  }
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

class Stream {
 public:
  Stream() { MLA_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { cudaStreamDestroy(s_); }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class CublasHandle {
 public:
  CublasHandle() { MLA_CUBLAS_CHECK(cublasCreate(&h_)); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle() { cublasDestroy(h_); }
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

class Event {
 public:
  Event() { MLA_CUDA_CHECK(cudaEventCreate(&e_)); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { cudaEventDestroy(e_); }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// ---- host <-> device value conversion ------------------------------------------------------

// fp32 values -> T-storage bytes (bf16: mla::bf16 round to nearest even, the project's one rule).
std::vector<unsigned char> to_storage(const float* v, int64_t count, Storage st) {
  const int64_t eb = st == Storage::BF16 ? 2 : 4;
  std::vector<unsigned char> bytes(static_cast<size_t>(count * eb));
  if (st == Storage::F32) {
    if (count > 0) std::memcpy(bytes.data(), v, static_cast<size_t>(count) * 4);
  } else {
    for (int64_t i = 0; i < count; ++i) {
      const uint16_t b = bf16::round_bits(v[i]);
      std::memcpy(bytes.data() + i * 2, &b, 2);
    }
  }
  return bytes;
}

// T-storage bytes -> doubles (exact widening).
std::vector<double> storage_to_double(const std::vector<unsigned char>& bytes, Storage st) {
  const size_t eb = st == Storage::BF16 ? 2 : 4;
  std::vector<double> out(bytes.size() / eb);
  for (size_t i = 0; i < out.size(); ++i) {
    if (st == Storage::F32) {
      float f;
      std::memcpy(&f, bytes.data() + i * 4, 4);
      out[i] = f;
    } else {
      uint16_t b;
      std::memcpy(&b, bytes.data() + i * 2, 2);
      out[i] = bf16::from_bits(b).to_float();
    }
  }
  return out;
}

cublasOperation_t cublas_op(Op op) { return op == Op::T ? CUBLAS_OP_T : CUBLAS_OP_N; }

// The cuda counterpart of StageTimer (mla/stage_timer.hpp): a stage is bracketed by two events
// recorded on the stream, so its time is the device's; seconds() reads them once the stream
// has been synchronised. `stage("q_path", [&] { q_path(run); });` times one stage.
class StageEvents {
 public:
  explicit StageEvents(cudaStream_t stream) : stream_(stream) {}

  class Scope {
   public:
    Scope(StageEvents& owner, const char* name) : owner_(owner) { owner_.begin(name); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() { owner_.end(); }

   private:
    StageEvents& owner_;
  };
  // The counterpart of StageRunner: runs f() as the stage `name`.
  template <class F>
  void operator()(const char* name, F&& f) {
    const Scope timed_scope(*this, name);
    std::forward<F>(f)();
  }

  // (name, seconds) of every stage, in order; call after the stream is synchronised.
  StageSeconds seconds() const {
    if (end_status_ != cudaSuccess)
      fail(ErrorKind::Cuda, failure_message("cudaEventRecord (end of a stage)", __FILE__, __LINE__,
                                            static_cast<int>(end_status_), cudaGetErrorName(end_status_),
                                            cudaGetErrorString(end_status_)));
    StageSeconds out;
    for (const Timed& t : stages_) {
      float ms = 0.0f;
      MLA_CUDA_CHECK(cudaEventElapsedTime(&ms, t.start->get(), t.end->get()));
      out.emplace_back(t.name, static_cast<double>(ms) * 1e-3);
    }
    return out;
  }

 private:
  struct Timed {
    std::string name;
    std::unique_ptr<Event> start, end;
  };
  void begin(const char* name) {
    stages_.push_back(Timed{name, std::make_unique<Event>(), std::make_unique<Event>()});
    MLA_CUDA_CHECK(cudaEventRecord(stages_.back().start->get(), stream_));
  }
  void end() noexcept {  // runs in a destructor: a failure is kept and reported by seconds()
    const cudaError_t st = cudaEventRecord(stages_.back().end->get(), stream_);
    if (st != cudaSuccess && end_status_ == cudaSuccess) end_status_ = st;
  }

  cudaStream_t stream_;
  std::vector<Timed> stages_;
  cudaError_t end_status_ = cudaSuccess;
};

// ---- the backend ---------------------------------------------------------------------------

// One layer's weights on the device, in T-storage. Linear weights stay [out, in] row-major.
struct DeviceWeights {
  DeviceBuffer q_a_proj;                 // [r_q, H]
  DeviceBuffer q_a_layernorm;            // [r_q]
  DeviceBuffer q_b_proj;                 // [n*d_qk, r_q]
  DeviceBuffer q_proj;                   // [n*d_qk, H]   (q_lora_rank null only)
  DeviceBuffer kv_a_proj_with_mqa;       // [r_kv + d_r, H]
  DeviceBuffer kv_a_layernorm;           // [r_kv]
  DeviceBuffer kv_b_proj;                // [n*(d_n+d_v), r_kv]
  DeviceBuffer o_proj;                   // [H, n*d_v]
  DeviceBuffer q_a_proj_bias;            // [r_q]                   attention_bias + q_lora only
  DeviceBuffer kv_a_proj_with_mqa_bias;  // [r_kv + d_r]            attention_bias only
  DeviceBuffer o_proj_bias;              // [H]                     attention_bias only
};

// What one forward's stages read besides the weights and the workspace.
struct RunSettings {
  int64_t S = 0;            // tokens
  float scaling = 1.0f;     // softmax scale (double, then fp32 as PyTorch's scalar multiply uses it)
  float eps = 1e-6f;        // q_a_layernorm / kv_a_layernorm eps
  bool causal = true;       // causal mask (HF adds finfo(dtype).min to hidden keys: p = 0 exactly)
  bool tf32 = false;
};

// Selects the device; the backend's first member, so the stream, the cuBLAS handle and every
// buffer are created on that device (members are constructed in declaration order).
class DeviceSelection {
 public:
  explicit DeviceSelection(int device) : device_(device) { MLA_CUDA_CHECK(cudaSetDevice(device)); }
  int get() const { return device_; }

 private:
  int device_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    cudaDeviceProp prop{};
    MLA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_.get()));
    int cublas_version = 0;
    MLA_CUBLAS_CHECK(cublasGetVersion(blas_.get(), &cublas_version));
    device_text_ = "cuBLAS " + std::to_string(cublas_version) + " on " + prop.name + " (cc " +
                   std::to_string(prop.major) + "." + std::to_string(prop.minor) + ")";
    MLA_CUBLAS_CHECK(cublasSetStream(blas_.get(), stream_.get()));
    // One rounding per GEMM output: no split-K partial sums kept in bf16.
    MLA_CUBLAS_CHECK(cublasSetMathMode(
        blas_.get(), static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    // A workspace of our own: cuBLAS then never allocates behind our back and results do not
    // depend on which stream ran first (cuBLAS reproducibility notes).
    blas_workspace_ = DeviceBuffer(kCublasWorkspaceBytes, "cuBLAS workspace");
    MLA_CUBLAS_CHECK(cublasSetWorkspace(blas_.get(), blas_workspace_.get(), static_cast<size_t>(kCublasWorkspaceBytes)));
  }

  std::string name() const override { return "cuda"; }
  std::string description() const override { return device_text_; }

  void prepare(const AttentionConfig& cfg, const LayerWeights& w, const ForwardOptions& opt) override {
    weights_.reset();  // old layer freed first (peak = one layer); stays empty if this throws
    validate_layer(cfg, w, opt);
    cfg_ = cfg;
    storage_ = opt.precision == Precision::BF16 ? Storage::BF16 : Storage::F32;
    precision_ = opt.precision;
    DeviceWeights dw;  // absent tensors (empty) stay unallocated
    dw.q_a_proj = upload(w.q_a_proj);
    dw.q_a_layernorm = upload(w.q_a_layernorm);
    dw.q_b_proj = upload(w.q_b_proj);
    dw.q_proj = upload(w.q_proj);
    dw.kv_a_proj_with_mqa = upload(w.kv_a_proj_with_mqa);
    dw.kv_a_layernorm = upload(w.kv_a_layernorm);
    dw.kv_b_proj = upload(w.kv_b_proj);
    dw.o_proj = upload(w.o_proj);
    dw.q_a_proj_bias = upload(w.q_a_proj_bias);
    dw.kv_a_proj_with_mqa_bias = upload(w.kv_a_proj_with_mqa_bias);
    dw.o_proj_bias = upload(w.o_proj_bias);
    weights_ = std::make_unique<DeviceWeights>(std::move(dw));
    workspace_ = DeviceBuffer();  // its layout depends on the geometry: rebuilt by the next forward
    workspace_seq_len_ = -1;
  }

  ForwardResult forward(const TensorF& hidden, const ForwardOptions& opt) override;

 private:
  static constexpr int64_t kCublasWorkspaceBytes = int64_t(32) << 20;  // 32 MiB

  // ---- the stages of forward, in HF's order (each enqueues on stream_, nothing blocks) ----
  // upload: hidden_states, cos, sin (host T-storage bytes) -> their slots
  void upload_input(const std::vector<unsigned char>& hidden, const std::vector<unsigned char>& cos,
                    const std::vector<unsigned char>& sin);
  // q_path (§3.1 / §3.2): q = q_b_proj(q_a_layernorm(q_a_proj(x)))  or  q = q_proj(x)
  void q_path(const RunSettings& run);
  // kv_path (§3.3): compressed_kv = kv_a_proj_with_mqa(x) = [latent | k_pe];
  //                 kv = kv_b_proj(kv_a_layernorm(latent))
  void kv_path(const RunSettings& run);
  // rope (§3.4, §6): HF-layout query/key/value states with RoPE on the rope halves
  void rope(const RunSettings& run);
  // attend (§3.6 steps 2-6): attn_context = merge_heads(softmax(mask(scaling q k^T)) . value_states)
  //                          and the H2O head sums, streamed; the probabilities into
  //                          attn_weights (an [n, S, S] buffer) only when it is given
  void attend(const RunSettings& run, void* attn_weights);
  // o_proj (§3.6 step 7): attn_output = attn_context . W_o^T (+ b)
  void o_proj(const RunSettings& run);
  // export (after the stream is synchronised): downloads, widening, token scores
  ForwardResult export_result(const RunSettings& run, const ForwardOptions& opt, const void* attn_weights);

  int64_t elem_bytes() const { return storage_ == Storage::BF16 ? 2 : 4; }

  // A validated weight (mla/validate.hpp) in T-storage on the device; empty stays empty.
  // The copy is enqueued on the compute stream and waited for: a plain cudaMemcpy would run on
  // the legacy default stream, which a cudaStreamNonBlocking stream is not ordered after (and
  // from pageable memory it may return before the data has landed), so the first forward could
  // read weights still in flight. Waiting per tensor also frees its host staging copy at once.
  DeviceBuffer upload(const TensorF& t) const {
    if (t.empty()) return DeviceBuffer();
    const std::vector<unsigned char> bytes = to_storage(t.ptr(), t.numel(), storage_);
    DeviceBuffer buf(static_cast<int64_t>(bytes.size()), "weight " + t.name);
    MLA_CUDA_CHECK(cudaMemcpyAsync(buf.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream_.get()));
    MLA_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    return buf;
  }

  // The workspace for S tokens, reallocated only when S changes.
  // (prepare() drops it, since the layout also depends on the geometry.)
  void ensure_workspace(int64_t S) {
    const WorkspaceDims d = workspace_dims(cfg_, S, elem_bytes());
    if (workspace_.get() && workspace_seq_len_ == S && workspace_elem_bytes_ == d.elem_bytes) return;
    workspace_ = DeviceBuffer();  // free the old one first: peak memory = one workspace
    layout_ = workspace_layout(d);
    workspace_ = DeviceBuffer(layout_.total_bytes, "workspace for S = " + std::to_string(S));
    workspace_seq_len_ = S;
    workspace_elem_bytes_ = d.elem_bytes;
  }
  void* slot(Slot s) const { return static_cast<unsigned char*>(workspace_.get()) + layout_.slots[s].offset; }

  // One GEMM described by a GemmPlan (gemm_plan.hpp holds each derivation). beta = 1 adds C.
  void gemm(const GemmPlan& g, const void* A, const void* B, void* C, float beta, bool allow_tf32) {
    const cudaDataType_t dt = storage_ == Storage::BF16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t ct =
        (storage_ == Storage::F32 && allow_tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const float alpha = 1.0f;
    const cublasStatus_t st =
        cublasGemmEx(blas_.get(), cublas_op(g.op_a), cublas_op(g.op_b), int(g.m), int(g.n), int(g.k), &alpha, A, dt,
                     int(g.lda), B, dt, int(g.ldb), &beta, C, dt, int(g.ldc), ct, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
      fail(ErrorKind::Cuda, failure_message("cublasGemmEx (" + g.what + ")", __FILE__, __LINE__, static_cast<int>(st),
                                            cublasGetStatusName(st), cublasGetStatusString(st)));
  }

  // y = x·W^T (+ b): bias rows first, then the GEMM with beta = 1 (one rounding, as addmm).
  void linear(const std::string& what, const void* x, int64_t rows, int64_t in, const DeviceBuffer& weight,
              const DeviceBuffer& bias, int64_t out, void* y, bool allow_tf32) {
    float beta = 0.0f;
    if (bias.get()) {
      MLA_CUDA_CHECK(launch_broadcast_rows(storage_, bias.get(), y, rows, out, stream_.get()));
      beta = 1.0f;
    }
    gemm(linear_plan(what, rows, in, out), weight.get(), x, y, beta, allow_tf32);
  }

  AttentionConfig cfg_;
  Storage storage_ = Storage::F32;
  Precision precision_ = Precision::FP32;
  DeviceSelection device_{0};  // first: selected before stream_ and blas_ exist
  std::string device_text_;
  Stream stream_;
  CublasHandle blas_;
  DeviceBuffer blas_workspace_;
  std::unique_ptr<DeviceWeights> weights_;
  DeviceBuffer workspace_;
  WorkspaceLayout layout_;
  int64_t workspace_seq_len_ = -1, workspace_elem_bytes_ = 0;
};

ForwardResult CudaBackend::forward(const TensorF& hidden, const ForwardOptions& opt) {
  check_prepared(weights_ != nullptr, precision_, opt);
  validate_input(cfg_, hidden, opt);
  const AttentionConfig& c = cfg_;
  const int64_t H = c.hidden_size, n = c.num_attention_heads, d_r = c.qk_rope_head_dim;
  const int64_t S = hidden.dim(0);
  // Device limits, not input errors: the tiled attention's tiles must fit in a block's
  // shared memory, and one block per (head, chunk) in the grid.
  const AttentionTiles tiles = attention_tiles(c.qk_head_dim(), c.v_head_dim);
  if (!tiles.fits)
    fail(ErrorKind::Unsupported, "cuda: head dims qk " + std::to_string(c.qk_head_dim()) + ", v " +
                                     std::to_string(c.v_head_dim) + " need " + std::to_string(tiles.shared_bytes) +
                                     " bytes of shared memory per block, more than " +
                                     std::to_string(kMaxDynamicShared));
  if (n * attention_mass_chunks(n, attention_query_tiles(S, tiles)) > kMaxGridX)
    fail(ErrorKind::Unsupported, "cuda: " + std::to_string(n) + " heads exceed the attention's grid limit");
  if (!row_launch_fits(S)) fail(ErrorKind::Unsupported, "cuda: S = " + std::to_string(S) + " exceeds the grid limit");

  // Host side: input and cos/sin tables (fp32 as HF's rotary module) in T-storage.
  const RopeTables tables = rope_tables(c, position_ids(opt.position_offset, S));
  if (tables.seq_len != S || tables.rope_dim != d_r)
    fail(ErrorKind::Shape, "cuda: rope_tables returned [" + std::to_string(tables.seq_len) + ", " +
                               std::to_string(tables.rope_dim) + "], expected [S, qk_rope_head_dim]");
  RunSettings run;
  run.S = S;
  run.scaling = static_cast<float>(softmax_scale(c));
  run.eps = static_cast<float>(opt.latent_norm_eps);
  run.causal = opt.mask == Mask::Causal;
  run.tf32 = opt.allow_tf32;
  const std::vector<unsigned char> hidden_bytes = to_storage(hidden.ptr(), S * H, storage_);
  // DeepseekV3: [S, d_r] in T-storage (bf16-rounded in bf16 mode, as HF's `.to(x.dtype)`);
  // DeepseekV2: the d_r/2 distinct frequencies [S, d_r/2] in fp32 (freqs_cis is never rounded),
  // which takes no more bytes of the kCos / kSin slots than [S, d_r] elements do.
  const bool complex = c.rope_style() == RopeStyle::Complex;
  const auto table_bytes = [&](const std::vector<float>& t) {
    if (!complex) return to_storage(t.data(), S * d_r, storage_);
    std::vector<float> half(static_cast<size_t>(S * (d_r / 2)));
    for (int64_t s = 0; s < S; ++s)
      std::copy_n(t.data() + s * d_r, d_r / 2, half.data() + s * (d_r / 2));
    return to_storage(half.data(), S * (d_r / 2), Storage::F32);
  };
  const std::vector<unsigned char> cos_bytes = table_bytes(tables.cos);
  const std::vector<unsigned char> sin_bytes = table_bytes(tables.sin);
  ensure_workspace(S);
  // The [n, S, S] probabilities: only when asked for, for this forward only (freed on return).
  DeviceBuffer attn_weights;
  if (opt.keep_attn_weights)
    attn_weights = DeviceBuffer(attn_weights_bytes(workspace_dims(c, S, elem_bytes())),
                                "attn_weights [" + std::to_string(n) + ", " + std::to_string(S) + ", " +
                                    std::to_string(S) + "]");

  // The stages, enqueued on one stream without a host synchronisation, each bracketed by events.
  StageEvents stage(stream_.get());
  stage("upload", [&] { upload_input(hidden_bytes, cos_bytes, sin_bytes); });
  stage("q_path", [&] { q_path(run); });
  stage("kv_path", [&] { kv_path(run); });
  stage("rope", [&] { rope(run); });
  stage("attend", [&] { attend(run, attn_weights.get()); });
  stage("o_proj", [&] { o_proj(run); });
  // The one synchronisation of the forward.
  MLA_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  StageSeconds stages = stage.seconds();
  ForwardResult r = StageRunner(stages)("export", [&] { return export_result(run, opt, attn_weights.get()); });
  r.stage_seconds = std::move(stages);
  return r;
}

void CudaBackend::upload_input(const std::vector<unsigned char>& hidden, const std::vector<unsigned char>& cos,
                               const std::vector<unsigned char>& sin) {
  const cudaStream_t stream = stream_.get();
  MLA_CUDA_CHECK(cudaMemcpyAsync(slot(kHiddenStates), hidden.data(), hidden.size(), cudaMemcpyHostToDevice, stream));
  MLA_CUDA_CHECK(cudaMemcpyAsync(slot(kCos), cos.data(), cos.size(), cudaMemcpyHostToDevice, stream));
  MLA_CUDA_CHECK(cudaMemcpyAsync(slot(kSin), sin.data(), sin.size(), cudaMemcpyHostToDevice, stream));
}

void CudaBackend::q_path(const RunSettings& run) {
  const AttentionConfig& c = cfg_;
  const DeviceWeights& w = *weights_;
  const int64_t S = run.S, H = c.hidden_size, r_q = c.q_lora_rank, n_qk = c.num_attention_heads * c.qk_head_dim();
  if (!c.has_q_lora()) {
    linear("q_proj", slot(kHiddenStates), S, H, w.q_proj, DeviceBuffer(), n_qk, slot(kQ), run.tf32);  // no bias in HF
    return;
  }
  linear("q_a_proj", slot(kHiddenStates), S, H, w.q_a_proj, w.q_a_proj_bias, r_q, slot(kQA), run.tf32);
  MLA_CUDA_CHECK(launch_rms_norm(storage_, slot(kQA), r_q, w.q_a_layernorm.get(), slot(kQANormed), S, r_q, run.eps,
                                 stream_.get()));
  linear("q_b_proj", slot(kQANormed), S, r_q, w.q_b_proj, DeviceBuffer(), n_qk, slot(kQ), run.tf32);
}

void CudaBackend::kv_path(const RunSettings& run) {
  const AttentionConfig& c = cfg_;
  const DeviceWeights& w = *weights_;
  const int64_t S = run.S, H = c.hidden_size, r_kv = c.kv_lora_rank, d_r = c.qk_rope_head_dim;
  const int64_t n_kv = c.num_attention_heads * (c.qk_nope_head_dim + c.v_head_dim);
  linear("kv_a_proj_with_mqa", slot(kHiddenStates), S, H, w.kv_a_proj_with_mqa, w.kv_a_proj_with_mqa_bias, r_kv + d_r,
         slot(kCompressedKv), run.tf32);
  MLA_CUDA_CHECK(launch_rms_norm(storage_, slot(kCompressedKv), r_kv + d_r, w.kv_a_layernorm.get(), slot(kLatentNormed),
                                 S, r_kv, run.eps, stream_.get()));
  linear("kv_b_proj", slot(kLatentNormed), S, r_kv, w.kv_b_proj, DeviceBuffer(), n_kv, slot(kKv), run.tf32);
}

void CudaBackend::rope(const RunSettings& run) {
  const AttentionConfig& c = cfg_;
  const int64_t S = run.S, n = c.num_attention_heads, d_n = c.qk_nope_head_dim, d_r = c.qk_rope_head_dim;
  MLA_CUDA_CHECK(launch_build_query_states(storage_, slot(kQ), slot(kCos), slot(kSin), slot(kQueryStates), S, n, d_n,
                                           d_r, c.rope_style(), stream_.get()));
  MLA_CUDA_CHECK(launch_build_key_value_states(storage_, slot(kKv), slot(kCompressedKv), c.kv_lora_rank, slot(kCos),
                                               slot(kSin), slot(kKeyStates), slot(kValueStates), S, n, d_n, d_r,
                                               c.v_head_dim, c.rope_style(), stream_.get()));
}

void CudaBackend::attend(const RunSettings& run, void* attn_weights) {
  const AttentionConfig& c = cfg_;
  // tiled_attention.cu: attn_context [S, n*d_v], head_scores [n, S] (and attn_weights [n, S, S])
  TiledAttention in;
  in.query_states = slot(kQueryStates);
  in.key_states = slot(kKeyStates);
  in.value_states = slot(kValueStates);
  in.attn_context = slot(kAttnContext);
  in.mass_partials = static_cast<double*>(slot(kMassPartials));
  in.head_scores = static_cast<double*>(slot(kHeadScores));
  in.attn_weights = attn_weights;
  in.seq_len = run.S;
  in.heads = c.num_attention_heads;
  in.qk_head_dim = c.qk_head_dim();
  in.v_head_dim = c.v_head_dim;
  in.mass_chunks = mass_chunks(workspace_dims(c, run.S, elem_bytes()));  // the C kMassPartials is sized for
  in.scaling = run.scaling;
  in.causal = run.causal;
  MLA_CUDA_CHECK(launch_tiled_attention(storage_, in, stream_.get()));
}

void CudaBackend::o_proj(const RunSettings& run) {
  const AttentionConfig& c = cfg_;
  const DeviceWeights& w = *weights_;
  linear("o_proj", slot(kAttnContext), run.S, c.num_attention_heads * c.v_head_dim, w.o_proj, w.o_proj_bias,
         c.hidden_size, slot(kAttnOutput), run.tf32);
}

ForwardResult CudaBackend::export_result(const RunSettings& run, const ForwardOptions& opt, const void* attn_weights) {
  const AttentionConfig& c = cfg_;
  const int64_t S = run.S, H = c.hidden_size, n = c.num_attention_heads, d_v = c.v_head_dim, d_qk = c.qk_head_dim();
  auto download_from = [&](const void* src, int64_t byte_count, const std::string& name, std::vector<int64_t> shape) {
    std::vector<unsigned char> bytes(static_cast<size_t>(byte_count));
    MLA_CUDA_CHECK(cudaMemcpy(bytes.data(), src, bytes.size(), cudaMemcpyDeviceToHost));
    TensorD t(name, std::move(shape));
    t.data = storage_to_double(bytes, storage_);
    return t;
  };
  auto download = [&](Slot s, const std::string& name, std::vector<int64_t> shape) {
    return download_from(slot(s), layout_.slots[s].bytes(), name, std::move(shape));
  };
  ForwardResult r;
  r.computed_in_double = false;
  r.attn_output = download(kAttnOutput, "attn_output", {S, H});
  check_attn_output_finite(r.attn_output, precision_);
  if (opt.keep_attn_weights)
    r.attn_weights = download_from(attn_weights, attn_weights_bytes(workspace_dims(c, S, elem_bytes())), "attn_weights",
                                   {n, S, S});
  if (opt.keep_states) {
    r.query_states = download(kQueryStates, "query_states", {n, S, d_qk});
    r.key_states = download(kKeyStates, "key_states", {n, S, d_qk});
    r.value_states = download(kValueStates, "value_states", {n, S, d_v});
  }
  if (opt.keep_latent_cache) {  // [S, r_kv + d_r] = latent_normed | k_pe_roped (= head 0's key rope half)
    const int64_t r_kv = c.kv_lora_rank, d_n = c.qk_nope_head_dim, d_r = c.qk_rope_head_dim;
    const TensorD latent = download(kLatentNormed, "latent_normed", {S, r_kv});
    const TensorD keys = opt.keep_states ? r.key_states : download(kKeyStates, "key_states", {n, S, d_qk});
    r.latent_cache = TensorD("latent_cache", {S, r_kv + d_r});
    for (int64_t s = 0; s < S; ++s) {
      double* row = r.latent_cache.ptr() + s * (r_kv + d_r);
      for (int64_t k = 0; k < r_kv; ++k) row[k] = latent.data[static_cast<size_t>(s * r_kv + k)];
      for (int64_t d = 0; d < d_r; ++d) row[r_kv + d] = keys.data[static_cast<size_t>(s * d_qk + d_n + d)];
    }
  }
  r.head_scores.resize(static_cast<size_t>(n * S));
  MLA_CUDA_CHECK(cudaMemcpy(r.head_scores.data(), slot(kHeadScores), r.head_scores.size() * sizeof(double),
                            cudaMemcpyDeviceToHost));
  r.token_scores = token_scores_from_heads(r.head_scores, n);  // heads ascending, in double on the host
  return r;
}

}  // namespace
}  // namespace cuda

bool cuda_available(std::string* why) {
  int count = 0;
  const cudaError_t st = cudaGetDeviceCount(&count);
  if (st != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error so later runtime calls start clean
    if (why) *why = cuda::explain_device_count_error(static_cast<int>(st), cudaGetErrorName(st));
    return false;
  }
  if (count <= 0) {
    if (why) *why = cuda::explain_zero_devices();
    return false;
  }
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = "no usable CUDA device: cannot read device 0's compute capability";
    return false;
  }
  if (major < 8) {
    if (why)
      *why = "no usable CUDA device: device 0 has compute capability " + std::to_string(major) + "." +
             std::to_string(minor) + "; this build holds code for sm_80 and newer only (bf16 GEMMs need it)";
    return false;
  }
  if (why) why->clear();
  return true;
}

int64_t cuda_free_memory() {
  if (!cuda_available()) return -1;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();  // not sticky: leave the runtime clean for the backend
    return -1;
  }
  return static_cast<int64_t>(free_bytes);
}

std::unique_ptr<Backend> make_cuda_backend() {
  std::string why;
  if (!cuda_available(&why)) fail(ErrorKind::Cuda, "--backend cuda: " + why);
  return std::make_unique<cuda::CudaBackend>();
}

}  // namespace mla
