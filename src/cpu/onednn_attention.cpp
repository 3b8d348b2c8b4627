// src/cpu/onednn_attention.cpp — tiled_attention's per-head products on oneDNN matmul
// primitives; see onednn_attention.hpp for the contract and docs/cpu-gemm.md §9.
//
// Shape legend as in the header; N = the block's keys rounded up to key_granularity(S). oneDNN
// names: src [M, K], weights [K, N], dst [M, N] (f32).
//   scores:       src = query_block [rows, d_qk], weights = key^T [d_qk, N] (packed once per
//                 head, DnnlOperands), dst = scores [rows, N]
//   probs_value:  src = probs [rows, N], weights = value [N, <= 64] per group of value columns
//                 (packed once per head), dst = attn_context block [rows, <= 64]
#include "onednn_attention.hpp"

#include "mla_build_config.h"

#if MLA_HAVE_ONEDNN
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "attention_stages.hpp"
#include "onednn_common.hpp"
#include "vector_kernels.hpp"

namespace mla::cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

struct Matmul {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
};

// How a product reads its weights: plain row-major ("ab"), its transpose ("ba"), or oneDNN's
// preferred blocked layout for the shape ("any", chosen by the primitive; the operands are packed
// into it once per head).
enum class Weights { Plain, Transposed, Packed };

// dst[M, N] (f32) = src[M, K] (dt, dense) * weights[K, N] (dt). fpmath strict, user scratchpad.
Matmul make_matmul(Dt dt, int64_t M, int64_t K, int64_t N, Weights w) {
  const memory::desc src({M, K}, dt, Tag::ab), dst({M, N}, Dt::f32, Tag::ab);
  const memory::desc weights({K, N}, dt, w == Weights::Packed ? Tag::any : w == Weights::Transposed ? Tag::ba : Tag::ab);
  Matmul m;
  m.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), strict_user_scratchpad_attr(),
                                      Dnnl::get().engine);
  m.primitive = dnnl::matmul(m.pd);
  return m;
}

// The primitive for a shape, created on first use and kept. A primitive holds ~90 KB of JIT
// code (brgemm kernels for the shape and its tails: measured 92 MB for 1024 of them), so the cache
// keeps at most kCachedMatmuls and starts over when full; the key counts are multiples of
// key_granularity(S), so a run uses at most ~256 shapes per product. The lock guards the lookup
// only; callers hold the shared_ptr while they execute, concurrently, each with its own scratchpad.
constexpr size_t kCachedMatmuls = 640;

// Every shape asked of cached_matmul, for onednn_attention_shape_log (a test hook: the memory
// plan's count of primitives is checked against what a forward really creates).
std::mutex& shape_log_mutex() {
  static std::mutex m;
  return m;
}
std::set<MatmulShape>& shape_log() {
  static std::set<MatmulShape> log;
  return log;
}

// The score product's shape that onednn_attention_kernel probes.
constexpr MatmulShape kProbeShape{kQueryRowBlock, 192, 256};

std::shared_ptr<const Matmul> cached_matmul(Dt dt, int64_t M, int64_t K, int64_t N, Weights w) {
  {
    std::lock_guard<std::mutex> lock(shape_log_mutex());
    shape_log().insert({M, K, N});
  }
  static std::mutex mutex;
  static std::map<std::tuple<Dt, int64_t, int64_t, int64_t, Weights>, std::shared_ptr<const Matmul>> cache;
  const auto key = std::make_tuple(dt, M, K, N, w);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= kCachedMatmuls) cache.clear();
    it = cache.emplace(key, std::make_shared<const Matmul>(make_matmul(dt, M, K, N, w))).first;
  }
  return it->second;
}

// How the score product reads the keys, key^T [d_qk, N]. A blocked layout (the brgemm kernels')
// keeps every block's keys as the leading part of the head's packed keys (is_prefix below). The
// plain layout oneDNN picks where it has only gemm:jit (fp32 on AVX2; bf16 without AVX512-BF16) is
// row-major "ab", whose rows are N long: a block with fewer keys than the head's operand would be
// reordered into a copy of its own on every block (measured on AVX2: every score product but the
// last of each head and pass). There the keys are given as "ba" (key rows [N, d_qk], row-major),
// whose first rows are any block's keys (gemm:jit sums the same either way: compared bit for bit).
// Decided once per data type from the layout picked for the probe shape (no primitive is made).
Weights key_weights(Dt dt) {
  auto decide = [](Dt t) {
    const memory::desc src({kProbeShape.rows, kProbeShape.k}, t, Tag::ab), dst({kProbeShape.rows, kProbeShape.n}, Dt::f32, Tag::ab);
    const memory::desc any({kProbeShape.k, kProbeShape.n}, t, Tag::any);
    try {
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, any, dst), strict_user_scratchpad_attr(),
                                            Dnnl::get().engine);
      return pd.weights_desc().data.format_desc.blocking.inner_nblks > 0 ? Weights::Packed : Weights::Transposed;
    } catch (const dnnl::error&) {
      return Weights::Packed;  // no matmul for t: nothing will ask
    }
  };
  static const Weights f32 = decide(Dt::f32), bf16 = decide(Dt::bf16);
  return dt == Dt::bf16 ? bf16 : f32;
}

// The products' key counts are rounded up to this (a multiple of 64): 64 up to S = 16384, then
// doubled until S / granularity <= 256, so a causal run creates at most ~256 primitives per
// product (creating one costs ~0.25 ms; without the rounding S = 131072 would need 2048 per
// product and head). The extra keys are zero rows of the packed operands and masked columns of
// the logits (exactly 0 probabilities): at most granularity - 1 per block, < 0.4 % more work.
int64_t key_granularity(int64_t S) {
  int64_t g = kQueryRowBlock;
  while (S > 256 * g) g *= 2;
  return g;
}
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The layouts of two weights descs agree on the elements of the smaller one, i.e. `block` is
// the leading part of `full` along `dim` (same type, same blocking, the same stride for every
// dimension that has more than one outer block in `block`).
bool is_prefix(const memory::desc& block, const memory::desc& full, int dim) {
  const dnnl_memory_desc_t &b = block.data, &f = full.data;
  if (b.data_type != f.data_type || b.ndims != 2 || f.ndims != 2 || b.format_kind != dnnl_blocked ||
      f.format_kind != dnnl_blocked || b.offset0 != 0 || f.offset0 != 0)
    return false;
  const dnnl_blocking_desc_t &bb = b.format_desc.blocking, &fb = f.format_desc.blocking;
  if (bb.inner_nblks != fb.inner_nblks) return false;
  for (int i = 0; i < bb.inner_nblks; ++i)
    if (bb.inner_blks[i] != fb.inner_blks[i] || bb.inner_idxs[i] != fb.inner_idxs[i]) return false;
  for (int d = 0; d < 2; ++d) {
    if (d != dim && (b.dims[d] != f.dims[d] || b.padded_dims[d] != f.padded_dims[d])) return false;
    int64_t inner = 1;
    for (int i = 0; i < bb.inner_nblks; ++i)
      if (bb.inner_idxs[i] == d) inner *= bb.inner_blks[i];
    if (b.padded_dims[d] > inner && bb.strides[d] != fb.strides[d]) return false;
  }
  return b.padded_dims[dim] <= f.padded_dims[dim];
}

// dst[i * ld_dst + j] = src[i * ld_src + j] for i < rows, j < cols: bits as bits (bf16) or
// floats as floats (fp32). ld_src defaults to cols (a PrecisionMatrix's rows).
template <typename T>
void copy_block(const T* src, int64_t rows, int64_t cols, T* dst, int64_t ld_dst, int64_t ld_src = 0) {
  if (ld_src == 0) ld_src = cols;
  for (int64_t i = 0; i < rows; ++i) std::memcpy(dst + i * ld_dst, src + i * ld_src, static_cast<size_t>(cols) * sizeof(T));
}

// One packed operand: oneDNN memory in the blocked layout a primitive prefers, for the largest
// shape of the call, zero beyond the real rows.
struct Packed {
  memory::desc md;
  memory mem;
  // Packs `src` (plain desc src_md over data) into the layout `md_full`, reusing the buffer.
  void pack(const memory::desc& md_full, const memory::desc& src_md, const void* data, dnnl::stream& stream) {
    const dnnl::engine& engine = Dnnl::get().engine;
    if (!mem || mem.get_desc().get_size() < md_full.get_size()) mem = memory(md_full, engine);
    md = md_full;
    memory dst(md, engine, mem.get_data_handle());
    std::memset(dst.get_data_handle(), 0, md.get_size());
    memory src(src_md, engine, const_cast<void*>(data));
    dnnl::reorder(src, dst).execute(stream, src, dst);
    stream.wait();
    count_reorder(&OnednnReorders::head_operands);
  }
};

// One head's operands for keys [0, keys): key_states [key_nope[h] | k_pe_roped] (d_qk columns)
// and value[h] (d_v columns, in groups of at most 64), each packed once into the layout
// oneDNN's brgemm prefers for the largest product of the call (bf16: [K/32][N/64][16][64][2];
// measured 20-30 % faster than the plain operands, which the primitive would repack on every
// block), with key rows up to `keys` rounded to key_granularity(S), the extra rows zero. Where
// oneDNN has only gemm:jit, whose layouts are plain, the keys are "ba" (key_weights). Each pack
// is counted in onednn_reorders().head_operands.
class DnnlOperands final : public HeadOperands {
 public:
  DnnlOperands(int64_t S, int64_t d_qk, int64_t d_v, bool bf16)
      : S_(S), d_qk_(d_qk), d_v_(d_v), bf16_(bf16), dt_(bf16 ? Dt::bf16 : Dt::f32), granularity_(key_granularity(S)) {}

  void load(const KeyValueStates& kv, int64_t h, int64_t keys) override {
    DnnlThreads one_thread(1);
    const int64_t d_n = kv.qk_nope_head_dim, d_r = kv.qk_rope_head_dim, n_pad = round_up(keys, granularity_);
    const int64_t stored = std::min(keys, S_);
    const size_t elem = bf16_ ? sizeof(uint16_t) : sizeof(float);
    dense_.assign(static_cast<size_t>(n_pad * std::max(d_qk_, d_v_)) * elem, 0);
    // keys: dense [n_pad, d_qk] (= key^T [d_qk, n_pad] "ba"), then packed
    const PrecisionMatrix& key_nope = kv.key_nope[static_cast<size_t>(h)];
    if (bf16_) {
      auto* d = reinterpret_cast<uint16_t*>(dense_.data());
      copy_block(key_nope.bits(), stored, d_n, d, d_qk_);
      copy_block(kv.k_pe_roped.bits(), stored, d_r, d + d_n, d_qk_);
    } else {
      auto* d = reinterpret_cast<float*>(dense_.data());
      copy_block(key_nope.values(), stored, d_n, d, d_qk_);
      copy_block(kv.k_pe_roped.values(), stored, d_r, d + d_n, d_qk_);
    }
    key.pack(cached_matmul(dt_, kQueryRowBlock, d_qk_, n_pad, key_weights(dt_))->pd.weights_desc(),
             memory::desc({d_qk_, n_pad}, dt_, Tag::ba), dense_.data(), stream_);
    // values: dense [n_pad, d_v], then each group of <= 64 columns packed as its own [n_pad, w]
    const PrecisionMatrix& v = kv.value[static_cast<size_t>(h)];
    std::memset(dense_.data(), 0, dense_.size());
    std::memcpy(dense_.data(), bf16_ ? static_cast<const void*>(v.bits()) : static_cast<const void*>(v.values()),
                static_cast<size_t>(stored * d_v_) * elem);
    value.resize(static_cast<size_t>((d_v_ + kValueGroup - 1) / kValueGroup));
    for (size_t g = 0; g < value.size(); ++g) {
      const int64_t c0 = static_cast<int64_t>(g) * kValueGroup, w = std::min(kValueGroup, d_v_ - c0);
      value[g].pack(cached_matmul(dt_, kQueryRowBlock, n_pad, w, Weights::Packed)->pd.weights_desc(),
                    memory::desc({n_pad, w}, dt_, memory::dims{d_v_, 1}), dense_.data() + c0 * static_cast<int64_t>(elem),
                    stream_);
    }
  }

  static constexpr int64_t kValueGroup = 64;
  Packed key;                 // key^T [d_qk, n_pad]
  std::vector<Packed> value;  // value[:, group] [n_pad, <= 64]

 private:
  int64_t S_, d_qk_, d_v_;
  bool bf16_;
  Dt dt_;
  int64_t granularity_;
  std::vector<char> dense_;  // [n_pad, max(d_qk, d_v)] the plain operand being packed
  dnnl::stream stream_{Dnnl::get().engine};
};

class DnnlBlockProducts final : public BlockProducts {
 public:
  DnnlBlockProducts(const KeyValueStates& kv, bool bf16)
      : S_(kv.seq_len), d_qk_(kv.qk_nope_head_dim + kv.qk_rope_head_dim), d_v_(kv.v_head_dim), bf16_(bf16),
        dt_(bf16 ? Dt::bf16 : Dt::f32), granularity_(key_granularity(S_)) {
    const size_t query = static_cast<size_t>(kQueryRowBlock * d_qk_);
    if (bf16) {
      query_bits_.resize(query);
    } else {
      query_.resize(query);
    }
    context_.resize(static_cast<size_t>(kQueryRowBlock * DnnlOperands::kValueGroup));
  }

  std::unique_ptr<HeadOperands> make_operands() const override {
    return std::make_unique<DnnlOperands>(S_, d_qk_, d_v_, bf16_);
  }
  int64_t columns(const RowBlock& block) const override { return round_up(block.keys, granularity_); }
  int64_t ld_probs(const RowBlock& block) const override { return columns(block); }
  bool takes_bits() const override { return bf16_; }

  // logits [rows, N] = query[rows, d_qk] key[0:N]^T (fp32 sums; §3.6 step 2), N = columns(block).
  void scores(const HeadOperands& head, const float* q_rows, int64_t ld_query, const RowBlock& block, float* logits,
              int64_t /*ld = N*/) override {
    const auto& o = static_cast<const DnnlOperands&>(head);
    // the block's query rows [rows, d_qk], dense (bf16: q holds bf16 values, rounding is exact)
    const void* q = query_.data();
    if (bf16_) {
      const VectorKernels& vk = vector_kernels();
      for (int64_t i = 0; i < block.rows; ++i) vk.to_bf16_bits(q_rows + i * ld_query, d_qk_, query_bits_.data() + i * d_qk_);
      q = query_bits_.data();
    } else {
      copy_block(q_rows, block.rows, d_qk_, query_.data(), d_qk_, ld_query);
    }
    execute("q k^T", block.rows, d_qk_, columns(block), 1, key_weights(dt_), q, o.key, logits);
  }

  // out [rows, d_v] = p [rows, N] value[0:N] (fp32 sums; bf16: bits in, one rounding), per
  // group of value columns.
  void probs_value(const HeadOperands& head, const RowBlock& block, const float* probs, const uint16_t* bits,
                   int64_t /*ld = N*/, float* out, int64_t ld_out) override {
    const auto& o = static_cast<const DnnlOperands&>(head);
    const void* p = bf16_ ? static_cast<const void*>(bits) : static_cast<const void*>(probs);
    for (size_t g = 0; g < o.value.size(); ++g) {
      const int64_t c0 = static_cast<int64_t>(g) * DnnlOperands::kValueGroup;
      const int64_t w = std::min(DnnlOperands::kValueGroup, d_v_ - c0);
      execute("p v", block.rows, columns(block), w, 0, Weights::Packed, p, o.value[g], context_.data());
      for (int64_t i = 0; i < block.rows; ++i) {
        float* dst = out + i * ld_out + c0;
        std::copy_n(context_.data() + i * w, w, dst);
        if (bf16_) round_to_bf16_inplace(dst, w);
      }
    }
  }

 private:
  // dst [M, N] = src [M, K] weights [K, N] on this worker: one OpenMP thread, its own stream
  // and scratchpad. The weights (read as `layout`) are the leading part (along `dim`) of the
  // packed operand; if the primitive chose another layout for this shape, that part is reordered
  // into it first (counted in onednn_reorders().per_block: not expected, see key_weights).
  void execute(const char* what, int64_t M, int64_t K, int64_t N, int dim, Weights layout, const void* src,
               const Packed& weights, float* dst) {
    try {
      DnnlThreads one_thread(1);  // also while a primitive is created: it plans its threads then
      const std::shared_ptr<const Matmul> held = cached_matmul(dt_, M, K, N, layout);
      const Matmul& m = *held;
      const dnnl::engine& engine = Dnnl::get().engine;
      memory w(m.pd.weights_desc(), engine, weights.mem.get_data_handle());
      if (!is_prefix(m.pd.weights_desc(), weights.md, dim)) {
        repacked_ = memory(m.pd.weights_desc(), engine);
        const memory::desc part = weights.md.submemory_desc({K, N}, {0, 0});
        memory from(part, engine, weights.mem.get_data_handle());
        dnnl::reorder(from, repacked_).execute(stream_, from, repacked_);
        w = repacked_;
        count_reorder(&OnednnReorders::per_block);
      }
      m.primitive.execute(stream_, {{DNNL_ARG_SRC, memory(m.pd.src_desc(), engine, const_cast<void*>(src))},
                                    {DNNL_ARG_WEIGHTS, w},
                                    {DNNL_ARG_DST, memory(m.pd.dst_desc(), engine, dst)},
                                    {DNNL_ARG_SCRATCHPAD, scratchpad_.for_primitive(m.pd.scratchpad_desc(), engine)}});
      stream_.wait();
    } catch (const dnnl::error& e) {
      fail(ErrorKind::Unsupported, "cpu backend: " + onednn_version() + " cannot compute the attention's " + what +
                                       " [" + std::to_string(M) + ", " + std::to_string(K) + "] x [" +
                                       std::to_string(K) + ", " + std::to_string(N) + "]: " + e.what() +
                                       " (--gemm eigen avoids oneDNN)");
    }
  }

  int64_t S_, d_qk_, d_v_;
  bool bf16_;
  Dt dt_;
  int64_t granularity_;
  std::vector<uint16_t> query_bits_;  // bf16 run: [64, d_qk] (a block's rows)
  std::vector<float> query_;          // fp32 run: [64, d_qk]
  std::vector<float> context_;        // [64, <= 64] one value group's P·V sums
  memory repacked_;                   // a weights part in another layout (see execute)
  Scratchpad scratchpad_;
  dnnl::stream stream_{Dnnl::get().engine};
};

}  // namespace

std::unique_ptr<BlockProducts> make_onednn_block_products(const KeyValueStates& kv, bool bf16) {
  return std::make_unique<DnnlBlockProducts>(kv, bf16);
}

std::string onednn_attention_kernel(bool bf16) {
  try {
    DnnlThreads one_thread(1);  // the cached primitive is planned for the one thread a worker gives it
    const Dt dt = bf16 ? Dt::bf16 : Dt::f32;
    return cached_matmul(dt, kProbeShape.rows, kProbeShape.k, kProbeShape.n, key_weights(dt))->pd.impl_info_str();
  } catch (const dnnl::error&) {
    return "";
  }
}

std::set<MatmulShape> onednn_attention_shapes(int64_t S, int64_t d_qk, int64_t d_v) {
  // A causal block [r, r + rows) of a query pass sees keys [0, r + rows), rounded up to the
  // granularity g; the pass's operands are packed for its last block. The full 64-row blocks end
  // at every multiple of 64 up to S rounded down, so over all passes they and the packing shapes
  // take every multiple of g from g to round_up(S, g) (g is a multiple of 64); only the last
  // block of the run can be shorter (S mod 64 rows, the last pass's end: keys S). This walks
  // those at most ~257 key counts, not the S / 64 blocks: the plan is made for any S.
  std::set<MatmulShape> shapes;
  if (S <= 0) return shapes;
  const int64_t g = key_granularity(S), group = DnnlOperands::kValueGroup;
  auto add = [&](int64_t rows, int64_t n_keys) {  // one block's two products (P·V per value group)
    shapes.insert({rows, d_qk, n_keys});
    for (int64_t c0 = 0; c0 < d_v; c0 += group) shapes.insert({rows, n_keys, std::min(group, d_v - c0)});
  };
  for (int64_t n_keys = g; n_keys <= round_up(S, g); n_keys += g) add(kQueryRowBlock, n_keys);
  if (S % kQueryRowBlock != 0) add(S % kQueryRowBlock, round_up(S, g));
  return shapes;
}

int64_t onednn_attention_primitives(int64_t S, int64_t d_qk, int64_t d_v) {
  std::set<MatmulShape> shapes = onednn_attention_shapes(S, d_qk, d_v);
  shapes.insert(kProbeShape);  // onednn_attention_kernel's, made when the weights are prepared
  return static_cast<int64_t>(shapes.size());
}

std::set<MatmulShape> onednn_attention_shape_log(bool clear) {
  std::lock_guard<std::mutex> lock(shape_log_mutex());
  std::set<MatmulShape> log = shape_log();
  if (clear) shape_log().clear();
  return log;
}

}  // namespace mla::cpu

#else  // no oneDNN: tiled_attention never asks for these

#include "mla/error.hpp"

namespace mla::cpu {

std::unique_ptr<BlockProducts> make_onednn_block_products(const KeyValueStates&, bool) {
  fail(ErrorKind::Unsupported, "cpu backend: this build has no oneDNN (meson -Donednn=enabled needs libdnnl-dev)");
}

std::string onednn_attention_kernel(bool) { return ""; }

std::set<MatmulShape> onednn_attention_shapes(int64_t, int64_t, int64_t) { return {}; }
int64_t onednn_attention_primitives(int64_t, int64_t, int64_t) { return 0; }
std::set<MatmulShape> onednn_attention_shape_log(bool) { return {}; }

}  // namespace mla::cpu
#endif
