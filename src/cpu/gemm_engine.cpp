// src/cpu/gemm_engine.cpp — the Eigen and oneDNN GEMM engines of the cpu backend's
// projections; see gemm_engine.hpp for the contract and docs/cpu-gemm.md for the figures.
//
// Shape legend: S = rows of x (tokens), in = in_features (K), out = out_features (N).
// oneDNN names: src = x [S, in] (M x K), weights = W^T [in, out] (K x N; W [out, in] row-major is
// the "ba" layout of K x N), dst = y [S, out], bias [1, out].
#include "gemm_engine.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/huge_pages.hpp"
#include "mla_build_config.h"
#include "attention_stages.hpp"  // kRowChunk

#include "kernel_check.hpp"
#include "onednn_common.hpp"

namespace mla::cpu {
namespace {

std::string eigen_version() {
  return "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
         std::to_string(EIGEN_MINOR_VERSION);
}

std::string eigen_kernel() { return MLA_HAVE_BLAS ? "OpenBLAS sgemm" : "Eigen gebp"; }

// Splits [0, count) into `threads` contiguous slices: body(begin, end).
void for_slices(int64_t count, int threads, const std::function<void(int64_t, int64_t)>& body) {
  const int64_t slices = std::clamp<int64_t>(threads, 1, std::max<int64_t>(count, 1));
  parallel_for(slices, threads, [&](int64_t slice, int) { body(count * slice / slices, count * (slice + 1) / slices); });
}

// dst[i] = the bf16 bits of src[i] for i < rows * cols ([rows, cols] row-major), row slices in parallel.
void to_bf16_bits(const float* src, int64_t rows, int64_t cols, int threads, uint16_t* dst) {
  for_slices(rows, threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin * cols; i < end * cols; ++i) dst[i] = mla::bf16::round_bits(src[i]);
  });
}

// dst = W (bf16: rounded to bf16 values), row slices in parallel.
void convert_weight(const LinearWeight& w, bool bf16, int threads, float* dst) {
  const int64_t cols = w.in_features;
  for_slices(w.out_features, threads, [&](int64_t begin, int64_t end) {
    float* out = dst + begin * cols;
    const int64_t count = (end - begin) * cols;
    std::memcpy(out, w.weight + begin * cols, static_cast<size_t>(count) * sizeof(float));
    if (bf16) round_to_bf16_inplace(out, count);
  });
}

// The bias as the engines add it: fp32 values (bf16 values in bf16 mode); empty when none.
std::vector<float> convert_bias(const LinearWeight& w, bool bf16) {
  if (w.bias == nullptr) return {};
  std::vector<float> b(w.bias, w.bias + w.out_features);
  if (bf16) round_to_bf16_inplace(b.data(), w.out_features);
  return b;
}

// W [out, in] row-major as an engine that takes it as it is keeps it: read in place from the
// loaded layer where readable_in_place allows (no copy, no fresh memory: docs/cpu-gemm.md §5),
// else copied into fresh memory (rounded to bf16 values in bf16 mode).
class WeightRows {
 public:
  WeightRows(const LinearWeight& w, bool bf16, int threads) {
    if (readable_in_place(w, bf16)) {
      owner_ = w.owner;
      data_ = w.weight;
      return;
    }
    copy_.resize(w.out_features, w.in_features);
    fault_in_huge_pages(copy_.data(), static_cast<size_t>(copy_.size()) * sizeof(float));  // fresh memory
    convert_weight(w, bf16, threads, copy_.data());
    data_ = copy_.data();
  }
  const float* data() const { return data_; }

 private:
  std::shared_ptr<const void> owner_;  // the loaded layer, when read in place
  MatrixRM copy_;                      // [out, in], otherwise
  const float* data_ = nullptr;
};

// ---- Eigen (+ OpenBLAS) --------------------------------------------------------------------

class EigenLinear final : public PreparedLinear {
 public:
  EigenLinear(const LinearWeight& w, bool bf16, int threads)
      : out_(w.out_features), in_(w.in_features), weight_(w, bf16, threads), bias_(convert_bias(w, bf16)), bf16_(bf16) {}
  void run(const MatrixRM& x, int threads, MatrixRM& y) override {
    linear(x, Eigen::Map<const MatrixRM>(weight_.data(), out_, in_), bias_.empty() ? nullptr : bias_.data(),
           bf16_ ? Precision::BF16 : Precision::FP32, threads, y);
  }
  std::string kernel() const override { return eigen_kernel(); }
  std::vector<int64_t> slice_bounds() const override {  // cpu::linear's fixed kLinearSlice columns
    return fixed_width_bounds(out_, kLinearSlice);
  }

 private:
  int64_t out_, in_;
  WeightRows weight_;  // [out, in]
  std::vector<float> bias_;
  bool bf16_;
};

class EigenEngine final : public GemmEngine {
 public:
  Gemm kind() const override { return Gemm::Eigen; }
  std::string name() const override { return eigen_version() + (MLA_HAVE_BLAS ? " + OpenBLAS sgemm" : ""); }
  std::string kernel() const override { return eigen_kernel(); }
  std::unique_ptr<PreparedLinear> prepare(const LinearWeight& w, bool bf16, int threads) override {
    return std::make_unique<EigenLinear>(w, bf16, threads);
  }
  GemmHoldings holdings() const override {
    GemmHoldings h;
    h.weights_as_stored = true;
    return h;
  }
};

#if MLA_HAVE_ONEDNN
// ---- oneDNN ----------------------------------------------------------------------------------

// onednn_reorders' counts, one per field of OnednnReorders.
std::atomic<int64_t> g_weight_reorders{0}, g_head_operand_reorders{0}, g_per_block_reorders{0};

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

// Workers for one product of `macs` multiply-adds: one below kParallelMacs, where starting a
// thread costs more than the second core gains (the cpu suite's small geometries). The result
// does not depend on it: the same slices run either way.
constexpr int64_t kParallelMacs = int64_t{1} << 24;
int dnnl_threads_for(int64_t macs, int threads) { return macs < kParallelMacs ? 1 : threads; }

// The matmul primitive descriptor y[S, out] (f32) = x[S, in] (dt) * W^T[in, out] (dt, layout
// `weights`) + bias[1, out] (f32). fpmath mode strict: f32 stays f32.
dnnl::matmul::primitive_desc matmul_pd(int64_t S, int64_t in, int64_t out, Dt dt, const memory::desc& weights, bool bias,
                                       int64_t ld_dst = 0) {
  const memory::desc src({S, in}, dt, Tag::ab);
  const memory::desc dst = ld_dst == 0 ? memory::desc({S, out}, Dt::f32, Tag::ab)
                                       : memory::desc({S, out}, Dt::f32, memory::dims{ld_dst, 1});
  const dnnl::primitive_attr attr = strict_user_scratchpad_attr();
  Dnnl& d = Dnnl::get();
  if (bias) {
    const memory::desc b({1, out}, Dt::f32, Tag::ab);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, b, dst), attr, d.engine);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), attr, d.engine);
}

// The kernel oneDNN picks for a typical projection (S 256, in 1024, out 1024; weights in the
// layout it prefers): its name ("" when it has none for this data type on this CPU), and whether
// that layout is plain (unblocked: gemm:jit, fp32 on AVX2, which also accepts a strided dst).
// The engine decides once from this probe, and every projection it prepares follows (the
// choice follows the kernel, which follows the ISA and the data type, not the shape).
struct KernelProbe {
  std::string kernel;
  bool plain_weights = false;
};
KernelProbe probe_kernel(Dt dt) {
  try {
    const memory::desc any({1024, 1024}, dt, Tag::any);
    const dnnl::matmul::primitive_desc pd = matmul_pd(256, 1024, 1024, dt, any, false);
    const memory::desc md = pd.weights_desc();
    return {pd.impl_info_str(), md.data.format_kind == dnnl_blocked && md.data.format_desc.blocking.inner_nblks == 0};
  } catch (const dnnl::error&) {
    return {};
  }
}

std::string isa_name() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "isa " + std::to_string(static_cast<int>(dnnl_get_effective_cpu_isa()));
  }
}

// Writes W [out, in] (rounded to bf16 when bf16) straight into `dst`, whose layout `md` is the
// blocked layout a primitive chose for W^T [in, out], in one pass parallel over output features.
// Element (k, n) of W^T lives at k_offset[k] + n_offset[n]: per dimension, its outer block index
// times the stride plus its digits in the inner blocks (dnnl_blocking_desc_t; inner_blks[last]
// is the innermost). Returns false for a layout that is not plain blocked, or has an offset
// (oneDNN's reorder handles it).
bool pack_blocked(const LinearWeight& w, const memory::desc& md_, memory& dst_memory, Dt dt, bool bf16, int threads) {
  const dnnl_memory_desc_t& md = md_.data;
  if (md.format_kind != dnnl_blocked || md.ndims != 2 || md.offset0 != 0) return false;
  const int64_t in = w.in_features, out = w.out_features;
  const dnnl_blocking_desc_t& blk = md.format_desc.blocking;
  auto offsets = [&](int dim, int64_t count) {
    int64_t block = 1;
    for (int j = 0; j < blk.inner_nblks; ++j)
      if (blk.inner_idxs[j] == dim) block *= blk.inner_blks[j];
    std::vector<int64_t> off(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      int64_t o = (i / block) * blk.strides[dim], rest = i % block, inner_stride = 1;
      for (int j = blk.inner_nblks - 1; j >= 0; --j) {
        if (blk.inner_idxs[j] == dim) {
          o += (rest % blk.inner_blks[j]) * inner_stride;
          rest /= blk.inner_blks[j];
        }
        inner_stride *= blk.inner_blks[j];
      }
      off[static_cast<size_t>(i)] = o;
    }
    return off;
  };
  const std::vector<int64_t> k_offset = offsets(0, in), n_offset = offsets(1, out);
  if (md.padded_dims[0] != in || md.padded_dims[1] != out)  // the padding must hold zeros
    std::memset(dst_memory.get_data_handle(), 0, md_.get_size());
  // Tiles of 64 output features x 64 input features: the tile's rows are read in address
  // order into a buffer that stays in L1, then written k-major, the blocked layout's order.
  // (Reading W column-wise directly would touch 64 rows whose stride is a multiple of 4 KiB:
  // all in one L1 set.)
  constexpr int64_t kTile = 64;
  auto pack = [&](auto* dst, auto convert) {
    for_slices(out, threads, [&](int64_t begin, int64_t end) {
      float tile[kTile][kTile];
      for (int64_t n0 = begin; n0 < end; n0 += kTile) {
        const int64_t rows = std::min(end - n0, kTile);
        for (int64_t k0 = 0; k0 < in; k0 += kTile) {
          const int64_t cols = std::min(in - k0, kTile);
          for (int64_t r = 0; r < rows; ++r)
            std::memcpy(tile[r], w.weight + (n0 + r) * in + k0, static_cast<size_t>(cols) * sizeof(float));
          for (int64_t c = 0; c < cols; ++c) {
            auto* o = dst + k_offset[static_cast<size_t>(k0 + c)];
            for (int64_t r = 0; r < rows; ++r) convert(tile[r][c], o[n_offset[static_cast<size_t>(n0 + r)]]);
          }
        }
      }
    });
  };
  if (dt == Dt::bf16) {
    pack(static_cast<uint16_t*>(dst_memory.get_data_handle()), [](float x, uint16_t& o) { o = mla::bf16::round_bits(x); });
  } else if (bf16) {  // bf16 values on the fp32 kernel
    pack(static_cast<float*>(dst_memory.get_data_handle()), [](float x, float& o) { o = mla::round_to_bf16(x); });
  } else {
    pack(static_cast<float*>(dst_memory.get_data_handle()), [](float x, float& o) { o = x; });
  }
  return true;
}

// One projection on oneDNN, split by output features into column slices that run side by side,
// one single-threaded matmul primitive per slice (docs/cpu-gemm.md §4). oneDNN 2.6's own
// threading does not speed up three of the five Kimi projections (q_a_proj, kv_a_proj_with_mqa,
// kv_b_proj ran as fast on 2 threads as on 1), and its brgemm kernel refuses a strided dst;
// slicing ourselves scales every shape. The slices are fixed by the weight's shape alone
// (onednn_slice_count) and dealt out to the workers, so every column is computed by the same
// primitive, of the same width, whatever --threads is: a column's value may depend on its slice's
// width (on AMX it does: the brgemm kernel's K blocking follows N), never on the thread count.
//
// Slice j owns output features [n0_j, n0_j + n_j): W's rows n0_j.. packed into the blocked
// layout its primitive picked, its bias, its primitives per row count, and a dst buffer
// [rows, n_j] that the slice's worker copies (rounds, in bf16 mode) into y's columns (a
// projection with one slice writes y directly). Where the kernel takes W plain (gemm:jit: fp32
// on AVX2, and bf16 values on that fp32 kernel), the slice keeps W's rows as they are ("ba"),
// its primitive writes straight into y's columns (a strided dst): no buffer, no copy, and slice
// bounds on multiples of 16 (docs/cpu-gemm.md §4).
class DnnlLinear final : public PreparedLinear {
 public:
  // plain: the engine's KernelProbe.plain_weights
  DnnlLinear(const LinearWeight& w, bool bf16, Dt dt, bool plain, int threads)
      : in_(w.in_features), out_(w.out_features), dt_(dt), bf16_(bf16), plain_(plain) {
    // Slice boundaries on multiples of 64 features (the blocked layouts' N block; 16 for a plain
    // layout). Their count depends on out alone (onednn_slice_count), never on --threads: a kernel
    // may order an output's K sum by the width of the slice it is handed (oneDNN's AMX brgemm
    // does), so a thread-dependent split would change bits.
    const int64_t slices = onednn_slice_count(out_), q = plain_ ? kPlainSliceQuantum : kOnednnSliceQuantum;
    int64_t begin = 0;
    for (int64_t j = 1; j <= slices; ++j) {
      const int64_t end = j == slices ? out_ : (out_ * j / slices + q / 2) / q * q;
      slices_.push_back(std::make_unique<Slice>(w, begin, end - begin, dt_, bf16, plain_));
      begin = end;
    }
    for (auto& s : slices_) s->pack(w, threads);
    Dnnl::get().stream.wait();
    DnnlThreads one_thread(1);  // a primitive plans its threads when created: one, as every slice runs
    kernel_ = slices_.front()->primitive(kBlockedRowChunk).pd.impl_info_str();
  }

  void run(const MatrixRM& x, int threads, MatrixRM& y) override {
    try {
      run_slices(x, threads, y);
    } catch (const dnnl::error& e) {
      fail(ErrorKind::Unsupported, "cpu backend: " + onednn_version() + " cannot multiply [" + std::to_string(x.rows()) +
                                       ", " + std::to_string(in_) + "] by [" + std::to_string(in_) + ", " +
                                       std::to_string(out_) + "]: " + e.what() + " (--gemm eigen avoids oneDNN)");
    }
  }

  std::string kernel() const override { return kernel_; }
  std::vector<int64_t> slice_bounds() const override {
    std::vector<int64_t> b;
    for (const auto& s : slices_) b.push_back(s->first());
    b.push_back(out_);
    return b;
  }

 private:
  // x is multiplied in chunks of this many rows (bounds each slice's dst buffer, [kBlockedRowChunk,
  // n_j] fp32, at any S).
  static constexpr int64_t kBlockedRowChunk = 512;
  // ... and with a plain layout, which needs no buffer, in chunks of the forward's own row chunk
  // (bounds the primitives a slice keeps, one per row count; gemm:jit runs best on all the rows).
  static constexpr int64_t kPlainRowChunk = kRowChunk;  // attention_stages.hpp
  static_assert(kRowChunk % kBlockedRowChunk == 0, "a pipeline chunk is whole blocked chunks (attention_stages.hpp)");

  struct Primitive {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul matmul;
  };

  class Slice {
   public:
    Slice(const LinearWeight& w, int64_t n0, int64_t n, Dt dt, bool bf16, bool plain)
        : n0_(n0), n_(n), in_(w.in_features), dt_(dt), bf16_(bf16), plain_(plain), ld_(w.out_features),
          bias_(convert_bias({w.name, nullptr, n, w.in_features, w.bias ? w.bias + n0 : nullptr}, bf16)) {
      // The layout the primitive prefers (the same for every row count: docs/cpu-gemm.md §3).
      weights_md_ = plain_ ? memory::desc({in_, n_}, dt_, Tag::ba)
                           : matmul_pd(kBlockedRowChunk, in_, n_, dt_, memory::desc({in_, n_}, dt_, Tag::any), !bias_.empty())
                                 .weights_desc();
      if (plain_) return;  // pack() gives the memory W's rows
      weights_ = memory(weights_md_, Dnnl::get().engine);
      fault_in_huge_pages(weights_.get_data_handle(), weights_md_.get_size());  // fresh memory
    }

    int64_t first() const { return n0_; }

    // W's rows [n0, n0 + n) (rounded to bf16 in bf16 mode) into the slice's layout.
    void pack(const LinearWeight& w, int threads) {
      const LinearWeight rows{w.name, w.weight + n0_ * in_, n_, in_, nullptr, w.owner, w.bf16_values};
      if (plain_ && dt_ == Dt::f32) {  // "ba": W's rows as they are, in place or copied
        rows_ = std::make_unique<WeightRows>(rows, bf16_, threads);
        weights_ = memory(weights_md_, Dnnl::get().engine, const_cast<float*>(rows_->data()));
        return;
      }
      if (plain_) {  // "ba" of bf16 operands (gemm:jit's bf16 kernel): W's rows as bf16 bits
        // The layout reads 2-byte elements, so the rows are converted, never read as stored:
        // handing it W's fp32 rows returned garbage with exit 0 (AVX512_CORE and _VNNI levels).
        bits_.resize(static_cast<size_t>(n_ * in_));
        to_bf16_bits(rows.weight, n_, in_, threads, bits_.data());
        weights_ = memory(weights_md_, Dnnl::get().engine, bits_.data());
        return;
      }
      if (pack_blocked(rows, weights_md_, weights_, dt_, bf16_, threads)) return;
      // A layout the packer does not know: oneDNN reorders W [n, in] (the "ba" layout of W^T).
      Dnnl& d = Dnnl::get();
      const memory::desc plain({in_, n_}, dt_, Tag::ba);
      std::vector<uint16_t> bits;
      std::vector<float> rounded;
      void* src_data = const_cast<float*>(rows.weight);
      if (bf16_ && dt_ == Dt::f32) {
        rounded.assign(rows.weight, rows.weight + in_ * n_);
        round_to_bf16_inplace(rounded.data(), in_ * n_);
        src_data = rounded.data();
      } else if (bf16_) {
        bits.resize(static_cast<size_t>(in_ * n_));
        to_bf16_bits(rows.weight, n_, in_, 1, bits.data());
        src_data = bits.data();
      }
      memory src(plain, d.engine, src_data);
      dnnl::reorder(src, weights_).execute(d.stream, src, weights_);
      d.stream.wait();
      count_reorder(&OnednnReorders::weights);
    }

    // y[:, n0 : n0 + n] = x W_slice^T (+ bias), chunk by chunk of rows; x_src: x as the
    // primitive reads it (bf16 bits with bf16 operands, else fp32), [S, in]. One thread.
    void run(const void* x_src, int64_t S, MatrixRM& y) {
      Dnnl& d = Dnnl::get();
      const size_t elem = dt_ == Dt::bf16 ? sizeof(uint16_t) : sizeof(float);
      // the primitive writes y's columns itself: a plain layout's strided dst, or the only slice
      const bool direct = plain_ || n_ == y.cols();
      const int64_t chunk = plain_ ? kPlainRowChunk : kBlockedRowChunk;
      if (!direct) dst_.resize(static_cast<size_t>(std::min(S, chunk) * n_));
      for (int64_t r0 = 0; r0 < S; r0 += chunk) {
        const int64_t rows = std::min(chunk, S - r0);
        const Primitive& p = primitive(rows);
        float* out_rows = direct ? y.data() + r0 * y.cols() + n0_ : dst_.data();
        memory src(p.pd.src_desc(), d.engine, const_cast<char*>(static_cast<const char*>(x_src) + r0 * in_ * elem));
        memory dst(p.pd.dst_desc(), d.engine, out_rows);
        memory scratchpad = scratchpad_.for_primitive(p.pd.scratchpad_desc(), d.engine);
        std::unordered_map<int, memory> args = {
            {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scratchpad}};
        if (!bias_.empty()) args.emplace(DNNL_ARG_BIAS, memory(memory::desc({1, n_}, Dt::f32, Tag::ab), d.engine, bias_.data()));
        dnnl::stream stream(d.engine);  // one stream per call: slices run on concurrent threads
        p.matmul.execute(stream, args);
        stream.wait();
        for (int64_t i = 0; i < rows; ++i) {  // into y's columns; bf16: the one rounding of each output
          float* out = y.data() + (r0 + i) * y.cols() + n0_;
          if (!direct) std::copy_n(dst_.data() + i * n_, n_, out);
          if (bf16_) round_to_bf16_inplace(out, n_);
        }
      }
    }

    // The primitive for `rows` rows, created on first use (the packed weights serve every row count).
    const Primitive& primitive(int64_t rows) {
      const int64_t ld_dst = plain_ ? ld_ : 0;
      auto it = primitives_.find(rows);
      if (it != primitives_.end()) return it->second;
      dnnl::matmul::primitive_desc pd = matmul_pd(rows, in_, n_, dt_, weights_md_, !bias_.empty(), ld_dst);
      if (pd.weights_desc() != weights_md_)
        fail(ErrorKind::Unsupported, "oneDNN chose another weight layout for " + std::to_string(rows) + " rows");
      dnnl::matmul mm(pd);
      return primitives_.emplace(rows, Primitive{pd, mm}).first->second;
    }

   private:
    int64_t n0_, n_, in_;
    Dt dt_;
    bool bf16_;
    bool plain_;
    int64_t ld_;  // out of the whole projection: y's row stride
    std::vector<float> bias_;  // [n] (bf16 values in bf16 mode), empty when none
    memory::desc weights_md_;
    memory weights_;           // W_slice^T [in, n] in the primitive's layout
    std::unique_ptr<WeightRows> rows_;  // plain fp32 layouts: the memory behind weights_
    std::vector<uint16_t> bits_;        // plain bf16 layouts: W's rows [n, in] as bf16 bits
    std::map<int64_t, Primitive> primitives_;
    std::vector<float> dst_;   // [min(S, kBlockedRowChunk), n]
    Scratchpad scratchpad_;    // this slice's own (user scratchpad mode)
  };

  // y [S, out] = x [S, in] W^T (+ bias): the slices on up to `threads` workers.
  void run_slices(const MatrixRM& x, int threads, MatrixRM& y) {
    const int64_t S = x.rows();
    y.resize(S, out_);
    std::vector<uint16_t> x_bf16;  // bf16 mode: x's values are bf16 values, so this is exact
    const void* x_src = x.data();
    if (dt_ == Dt::bf16) {
      x_bf16.resize(static_cast<size_t>(S * in_));
      to_bf16_bits(x.data(), S, in_, threads, x_bf16.data());
      x_src = x_bf16.data();
    }
    parallel_for(static_cast<int64_t>(slices_.size()), dnnl_threads_for(S * in_ * out_, threads), [&](int64_t j, int) {
      DnnlThreads one_thread(1);
      slices_[static_cast<size_t>(j)]->run(x_src, S, y);
    });
  }

  int64_t in_, out_;
  Dt dt_;
  bool bf16_;
  bool plain_ = false;
  std::vector<std::unique_ptr<Slice>> slices_;
  std::string kernel_;
};

class DnnlEngine final : public GemmEngine {
 public:
  // operands: bf16, or f32 (fp32 runs, and bf16 values on the fp32 kernel where oneDNN has no
  // bf16 matmul for this CPU).
  DnnlEngine(const KernelProbe& probe, Dt operands, bool bf16)
      : kernel_(probe.kernel), plain_(probe.plain_weights), operands_(operands), bf16_(bf16) {}
  Gemm kind() const override { return Gemm::OneDnn; }
  std::string name() const override { return onednn_version(); }
  std::string kernel() const override { return kernel_; }
  std::unique_ptr<PreparedLinear> prepare(const LinearWeight& w, bool bf16, int threads) override {
    try {
      return std::make_unique<DnnlLinear>(w, bf16, operands_, plain_, threads);
    } catch (const dnnl::error& e) {
      fail(ErrorKind::Unsupported, "cpu backend: " + onednn_version() + " cannot prepare " + w.name + " [" +
                                       std::to_string(w.out_features) + ", " + std::to_string(w.in_features) +
                                       "]: " + e.what() + " (--gemm eigen avoids oneDNN)");
    }
  }

  GemmHoldings holdings() const override {
    GemmHoldings h;
    h.weights = operands_ == Dt::bf16 ? Precision::BF16 : Precision::FP32;
    h.slice_buffers = !plain_;
    h.input_copy = operands_ == Dt::bf16;
    h.attention_products = (operands_ == Dt::bf16) == bf16_ && !attention_refused_ ? Gemm::OneDnn : Gemm::Eigen;
    h.weights_as_stored = plain_ && operands_ == Dt::f32;  // bf16 operands: rows converted to bits
    return h;
  }
  // The kernel check refused the per-head products: they run on Eigen beside these projections.
  void refuse_attention_products() { attention_refused_ = true; }

 private:
  std::string kernel_;
  bool plain_;  // every projection on W's plain rows (KernelProbe)
  bool attention_refused_ = false;
  Dt operands_;
  bool bf16_;
};
#endif  // MLA_HAVE_ONEDNN

}  // namespace

bool onednn_built() { return MLA_HAVE_ONEDNN != 0; }

#if MLA_HAVE_ONEDNN
void count_reorder(int64_t OnednnReorders::*kind) {
  std::atomic<int64_t>& counter = kind == &OnednnReorders::weights         ? g_weight_reorders
                                  : kind == &OnednnReorders::head_operands ? g_head_operand_reorders
                                                                           : g_per_block_reorders;
  counter.fetch_add(1, std::memory_order_relaxed);
}

OnednnReorders onednn_reorders() {
  return {g_weight_reorders.load(std::memory_order_relaxed), g_head_operand_reorders.load(std::memory_order_relaxed),
          g_per_block_reorders.load(std::memory_order_relaxed)};
}
#else
OnednnReorders onednn_reorders() { return {}; }
#endif

std::vector<int64_t> fixed_width_bounds(int64_t out, int64_t width) {
  std::vector<int64_t> b;
  for (int64_t n0 = 0; n0 < out; n0 += width) b.push_back(n0);
  b.push_back(out);
  return b;
}

int64_t onednn_slice_count(int64_t out) {
  constexpr int64_t kTarget = 512;  // about this many features per slice
  const int64_t most = std::max<int64_t>(out / kOnednnSliceQuantum, 1);
  const int64_t wanted = (out + kTarget - 1) / kTarget;
  return std::clamp<int64_t>((wanted + 3) / 4 * 4, 1, most);  // a multiple of 4: 2 or 4 workers share evenly
}

#if MLA_HAVE_ONEDNN
namespace {

// The kernel check's verdicts (kernel_check.hpp), once per process for each precision, operand
// type and test-hook setting: "" or why the product was refused.
struct CheckVerdicts {
  std::string projection, attention;
};
const CheckVerdicts& kernel_verdicts(DnnlEngine& engine, bool bf16, Dt operands) {
  static std::mutex mutex;
  static std::map<std::tuple<bool, Dt, std::string>, CheckVerdicts> verdicts;
  const char* fault = std::getenv(kKernelCheckFaultVariable);
  const auto key = std::make_tuple(bf16, operands, std::string(fault ? fault : ""));
  std::lock_guard<std::mutex> lock(mutex);
  auto it = verdicts.find(key);
  if (it != verdicts.end()) return it->second;
  CheckVerdicts v;
  v.projection = check_projection_kernel(engine, bf16);
  if (v.projection.empty() && engine.holdings().attention_products == Gemm::OneDnn) v.attention = check_attention_kernel(bf16);
  return verdicts.emplace(key, v).first->second;
}

// `engine` once its kernels passed the check: a refused projection kernel gives the Eigen
// engine (auto) or one error line (--gemm onednn); refused per-head products run on Eigen
// beside oneDNN's projections (auto) or are one error line (--gemm onednn).
std::unique_ptr<GemmEngine> checked(std::unique_ptr<DnnlEngine> engine, Gemm choice, bool bf16, Dt operands, std::string& why) {
  const CheckVerdicts& v = kernel_verdicts(*engine, bf16, operands);
  const std::string& refused = v.projection.empty() ? v.attention : v.projection;
  if (refused.empty()) return engine;
  if (choice == Gemm::OneDnn) fail(ErrorKind::Unsupported, "--gemm onednn: " + refused + " (--gemm eigen avoids oneDNN)");
  if (!v.projection.empty()) {
    why = v.projection + ": refused, so the Eigen engine runs";
    auto eigen = std::make_unique<EigenEngine>();
    eigen->refused = v.projection;
    return eigen;
  }
  why += "; " + v.attention + ": refused, so the per-head products run on Eigen";
  engine->refuse_attention_products();
  engine->refused = v.attention;
  return engine;
}

}  // namespace
#endif

std::unique_ptr<GemmEngine> make_gemm_engine(Gemm choice, bool bf16, std::string& why) {
  const char* precision = bf16 ? "bf16" : "fp32";
  if (choice == Gemm::Eigen) {
    why = "--gemm eigen";
    return std::make_unique<EigenEngine>();
  }
#if MLA_HAVE_ONEDNN
  KernelProbe probe = probe_kernel(bf16 ? Dt::bf16 : Dt::f32);
  Dt operands = bf16 ? Dt::bf16 : Dt::f32;
  const std::string lib = onednn_version();
  std::string on_f32;
  if (probe.kernel.empty() && bf16) {  // no bf16 matmul (AVX2): bf16 values on the fp32 kernel, exact
    probe = probe_kernel(Dt::f32);
    operands = Dt::f32;
    on_f32 = ", bf16 values on its fp32 kernel (" + lib + " has no bf16 matmul for this CPU, " + isa_name() + ")";
  }
  if (probe.kernel.empty()) {
    why = lib + " has no " + precision + " matmul for this CPU (" + isa_name() + ")";
    return std::make_unique<EigenEngine>();
  }
  if (choice == Gemm::OneDnn) {
    why = "--gemm onednn" + on_f32;
    return checked(std::make_unique<DnnlEngine>(probe, operands, bf16), choice, bf16, operands, why);
  }
  if (probe.kernel.rfind("brg:", 0) == 0) {
    why = lib + " has a brgemm " + precision + " kernel for this CPU (" + probe.kernel + ")";
    return checked(std::make_unique<DnnlEngine>(probe, operands, bf16), choice, bf16, operands, why);
  }
  if (operands == Dt::f32) {  // gemm:jit on W's plain rows, writing y's columns in place
    why = lib + "'s fp32 kernel on this CPU is " + probe.kernel + " (" + isa_name() +
          "): its column slices on W's plain rows outrun Eigen + OpenBLAS" + on_f32;
    return checked(std::make_unique<DnnlEngine>(probe, operands, bf16), choice, bf16, operands, why);
  }
  why = lib + "'s " + precision + " kernel on this CPU is " + probe.kernel + ", not a brgemm kernel (" + isa_name() +
        "): the Eigen engine is at least as fast";
  return std::make_unique<EigenEngine>();
#else
  if (choice == Gemm::OneDnn)
    fail(ErrorKind::Unsupported, "--gemm onednn: this build has no oneDNN (meson -Donednn=enabled needs libdnnl-dev)");
  why = std::string("built without oneDNN (") + precision + ")";
  return std::make_unique<EigenEngine>();
#endif
}

}  // namespace mla::cpu

namespace mla {

const char* gemm_name(Gemm g) {
  switch (g) {
    case Gemm::Auto: return "auto";
    case Gemm::Eigen: return "eigen";
    case Gemm::OneDnn: return "onednn";
  }
  return "?";
}

std::string gemm_label(const std::string& engine, const std::string& kernel) {
  if (engine.empty() || engine.find(kernel) != std::string::npos) return engine;
  return engine + ", " + kernel;
}

std::string gemm_auto_summary() {
  std::string s;
  for (const bool bf16 : {false, true}) {
    std::string why;
    const auto engine = cpu::make_gemm_engine(Gemm::Auto, bf16, why);
    s += std::string(bf16 ? "; bf16: " : "fp32: ") + gemm_label(engine->name(), engine->kernel());
  }
  return s;
}

}  // namespace mla
