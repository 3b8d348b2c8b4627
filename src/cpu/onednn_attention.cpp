// src/cpu/onednn_attention.cpp — streaming_attention's per-head products on oneDNN matmul
// primitives; see onednn_attention.hpp for the contract and docs/cpu-gemm.md §9.
//
// Shape legend as in the header. oneDNN names: src [M, K], weights [K, N], dst [M, N] (f32).
//   scores:       src = query_block [rows, d_qk], weights = key^T [d_qk, keys] (the dense
//                 row-major key [keys, d_qk] read as "ba"), dst = scores [rows, keys]
//   probs_value:  src = probs [rows, keys], weights = value [keys, d_v] ("ab"),
//                 dst = attn_context block [rows, d_v]
#include "onednn_attention.hpp"

#include "mla_build_config.h"

#if MLA_HAVE_ONEDNN
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "mla/bf16.hpp"
#include "mla/error.hpp"
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

// dst[M, N] (f32) = src[M, K] (dt) * weights[K, N] (dt), all dense; weights "ba" (the transpose
// of a row-major [N, K]) when weights_transposed, else "ab". fpmath strict, user scratchpad.
Matmul make_matmul(Dt dt, int64_t M, int64_t K, int64_t N, bool weights_transposed) {
  const memory::desc src({M, K}, dt, Tag::ab), dst({M, N}, Dt::f32, Tag::ab);
  const memory::desc weights({K, N}, dt, weights_transposed ? Tag::ba : Tag::ab);
  Matmul m;
  m.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), strict_user_scratchpad_attr(),
                                      Dnnl::get().engine);
  m.primitive = dnnl::matmul(m.pd);
  return m;
}

// The primitive for a shape, created on first use and kept. A primitive holds ~90 KB of JIT
// code (brgemm kernels for the shape and its tails: measured 92 MB for 1024 of them), so the cache
// keeps at most kCachedMatmuls and starts over when full (S > 16384 causal in one precision; a
// primitive takes ~0.25 ms to create, against ~1 s of products per head at that S). The lock
// guards the lookup only; callers hold the shared_ptr while they execute, concurrently, each
// with its own scratchpad.
constexpr size_t kCachedMatmuls = 512;

std::shared_ptr<const Matmul> cached_matmul(Dt dt, int64_t M, int64_t K, int64_t N, bool weights_transposed) {
  static std::mutex mutex;
  static std::map<std::tuple<Dt, int64_t, int64_t, int64_t, bool>, std::shared_ptr<const Matmul>> cache;
  const auto key = std::make_tuple(dt, M, K, N, weights_transposed);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= kCachedMatmuls) cache.clear();
    it = cache.emplace(key, std::make_shared<const Matmul>(make_matmul(dt, M, K, N, weights_transposed))).first;
  }
  return it->second;
}

// dst[i * ld_dst + j] = src[i * ld_src + j] for i < rows, j < cols: bits as bits (bf16) or
// floats as floats (fp32). ld_src defaults to cols (a PrecisionMatrix's rows).
template <typename T>
void copy_block(const T* src, int64_t rows, int64_t cols, T* dst, int64_t ld_dst, int64_t ld_src = 0) {
  if (ld_src == 0) ld_src = cols;
  for (int64_t i = 0; i < rows; ++i) std::memcpy(dst + i * ld_dst, src + i * ld_src, static_cast<size_t>(cols) * sizeof(T));
}

// key_states = [key_nope[h] | k_pe_roped] for keys [0, keys) as a dense [keys, d_qk] matrix in
// the operand type (bits copied as bits); value[h] [S, d_v] is read where it is stored.
class DnnlOperands final : public HeadOperands {
 public:
  explicit DnnlOperands(bool bf16) : bf16_(bf16) {}
  void load(const KeyValueStates& kv, int64_t h, int64_t keys) override {
    const int64_t d_n = kv.qk_nope_head_dim, d_r = kv.qk_rope_head_dim, d_qk = d_n + d_r;
    const PrecisionMatrix& key_nope = kv.key_nope[static_cast<size_t>(h)];
    const PrecisionMatrix& v = kv.value[static_cast<size_t>(h)];
    if (bf16_) {
      key_bits_.resize(static_cast<size_t>(keys * d_qk));
      copy_block(key_nope.bits(), keys, d_n, key_bits_.data(), d_qk);
      copy_block(kv.k_pe_roped.bits(), keys, d_r, key_bits_.data() + d_n, d_qk);
      key = key_bits_.data();
      value = v.bits();
    } else {
      key_.resize(static_cast<size_t>(keys * d_qk));
      copy_block(key_nope.values(), keys, d_n, key_.data(), d_qk);
      copy_block(kv.k_pe_roped.values(), keys, d_r, key_.data() + d_n, d_qk);
      key = key_.data();
      value = v.values();
    }
  }
  const void* key = nullptr;    // [keys, d_qk] dense, bf16 bits or fp32
  const void* value = nullptr;  // value[h] [S, d_v] as stored

 private:
  bool bf16_;
  std::vector<uint16_t> key_bits_;  // bf16 run
  std::vector<float> key_;          // fp32 run
};

class DnnlBlockProducts final : public BlockProducts {
 public:
  DnnlBlockProducts(const KeyValueStates& kv, bool bf16)
      : d_qk_(kv.qk_nope_head_dim + kv.qk_rope_head_dim), d_v_(kv.v_head_dim), bf16_(bf16),
        dt_(bf16 ? Dt::bf16 : Dt::f32) {
    const size_t query = static_cast<size_t>(kQueryRowBlock * d_qk_);
    if (bf16) {
      query_bits_.resize(query);
    } else {
      query_.resize(query);
    }
    context_.resize(static_cast<size_t>(kQueryRowBlock * d_v_));
  }

  std::unique_ptr<HeadOperands> make_operands() const override { return std::make_unique<DnnlOperands>(bf16_); }
  int64_t ld_probs(const RowBlock& block) const override { return block.keys; }
  bool takes_bits() const override { return bf16_; }

  // logits [rows, keys] = query[rows, d_qk] key[0:keys]^T (fp32 sums; §3.6 step 2).
  void scores(const HeadOperands& head, const float* q_rows, int64_t ld_query, const RowBlock& block, float* logits,
              int64_t /*ld = keys*/) override {
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
    execute("q k^T", block.rows, d_qk_, block.keys, true, q, o.key, logits);
  }

  // out [rows, d_v] = p [rows, keys] value[0:keys] (fp32 sums; bf16: bits in, one rounding).
  void probs_value(const HeadOperands& head, const RowBlock& block, const float* probs, const uint16_t* bits,
                   int64_t /*ld = keys*/, float* out, int64_t ld_out) override {
    const auto& o = static_cast<const DnnlOperands&>(head);
    const void* p = bf16_ ? static_cast<const void*>(bits) : static_cast<const void*>(probs);
    execute("p v", block.rows, block.keys, d_v_, false, p, o.value, context_.data());
    for (int64_t i = 0; i < block.rows; ++i) {
      float* dst = out + i * ld_out;
      std::copy_n(context_.data() + i * d_v_, d_v_, dst);
      if (bf16_) round_to_bf16_inplace(dst, d_v_);
    }
  }

 private:
  // dst [M, N] = src [M, K] weights [K, N] on this worker: one OpenMP thread, its own stream
  // and scratchpad.
  void execute(const char* what, int64_t M, int64_t K, int64_t N, bool weights_transposed, const void* src,
               const void* weights, float* dst) {
    try {
      DnnlThreads one_thread(1);  // also while a primitive is created: it plans its threads then
      const std::shared_ptr<const Matmul> held = cached_matmul(dt_, M, K, N, weights_transposed);
      const Matmul& m = *held;
      const dnnl::engine& engine = Dnnl::get().engine;
      m.primitive.execute(stream_, {{DNNL_ARG_SRC, memory(m.pd.src_desc(), engine, const_cast<void*>(src))},
                                    {DNNL_ARG_WEIGHTS, memory(m.pd.weights_desc(), engine, const_cast<void*>(weights))},
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

  int64_t d_qk_, d_v_;
  bool bf16_;
  Dt dt_;
  std::vector<uint16_t> query_bits_;  // bf16 run: [64, d_qk] (a block's rows)
  std::vector<float> query_;          // fp32 run: [64, d_qk]
  std::vector<float> context_;        // [64, d_v] a block's P·V sums
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
    return cached_matmul(bf16 ? Dt::bf16 : Dt::f32, kQueryRowBlock, 192, 256, true)->pd.impl_info_str();
  } catch (const dnnl::error&) {
    return "";
  }
}

}  // namespace mla::cpu

#else  // no oneDNN: streaming_attention never asks for these

#include "mla/error.hpp"

namespace mla::cpu {

std::unique_ptr<BlockProducts> make_onednn_block_products(const KeyValueStates&, bool) {
  fail(ErrorKind::Unsupported, "cpu backend: this build has no oneDNN (meson -Donednn=enabled needs libdnnl-dev)");
}

std::string onednn_attention_kernel(bool) { return ""; }

}  // namespace mla::cpu
#endif
