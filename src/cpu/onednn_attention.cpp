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

class DnnlHeadProducts final : public HeadProducts {
 public:
  DnnlHeadProducts(const KeyValueStates& kv, bool bf16)
      : S_(kv.seq_len), d_n_(kv.qk_nope_head_dim), d_r_(kv.qk_rope_head_dim), d_v_(kv.v_head_dim),
        d_qk_(d_n_ + d_r_), bf16_(bf16), dt_(bf16 ? Dt::bf16 : Dt::f32) {
    const size_t key = static_cast<size_t>(S_ * d_qk_), query = static_cast<size_t>(kQueryRowBlock * d_qk_);
    if (bf16) {
      query_bits_.resize(query);
      key_bits_.resize(key);
      probs_bits_.resize(static_cast<size_t>(kQueryRowBlock * S_));
    } else {
      query_.resize(query);
      key_.resize(key);
    }
    context_.resize(static_cast<size_t>(kQueryRowBlock * d_v_));
  }

  // key_states = [key_nope[h] | k_pe_roped] as dense [S, d_qk] in the operand type (bits copied
  // as bits); value[h] [S, d_v] is read where it is stored; the query block by block.
  void load_head(const float* query, int64_t ld_query, const KeyValueStates& kv, int64_t h) override {
    query_src_ = query;
    ld_query_ = ld_query;
    const PrecisionMatrix& key_nope = kv.key_nope[static_cast<size_t>(h)];
    const PrecisionMatrix& value = kv.value[static_cast<size_t>(h)];
    if (bf16_) {
      copy_block(key_nope.bits(), S_, d_n_, key_bits_.data(), d_qk_);
      copy_block(kv.k_pe_roped.bits(), S_, d_r_, key_bits_.data() + d_n_, d_qk_);
      value_ = value.bits();
    } else {
      copy_block(key_nope.values(), S_, d_n_, key_.data(), d_qk_);
      copy_block(kv.k_pe_roped.values(), S_, d_r_, key_.data() + d_n_, d_qk_);
      value_ = value.values();
    }
  }

  int64_t ld_probs(const RowBlock& block) const override { return block.keys; }

  // scores [rows, keys] = query[row_begin:row_begin+rows] key[0:keys]^T (fp32 sums), then
  // block_softmax in place (§3.6 steps 2-4; the §7 roundings of the Eigen path).
  void scores_softmax(const RowBlock& block, bool causal, float scaling, float* probs, int64_t ld) override {
    // the block's query rows [rows, d_qk], dense (bf16: q holds bf16 values, rounding is exact)
    const float* q_rows = query_src_ + block.row_begin * ld_query_;
    const void* q = query_.data();
    if (bf16_) {
      for (int64_t i = 0; i < block.rows; ++i)
        for (int64_t d = 0; d < d_qk_; ++d)
          query_bits_[static_cast<size_t>(i * d_qk_ + d)] = bf16::round_bits(q_rows[i * ld_query_ + d]);
      q = query_bits_.data();
    } else {
      copy_block(q_rows, block.rows, d_qk_, query_.data(), d_qk_, ld_query_);
    }
    const void* k = bf16_ ? static_cast<const void*>(key_bits_.data()) : static_cast<const void*>(key_.data());
    execute("q k^T", block.rows, d_qk_, block.keys, true, q, k, probs);
    block_softmax(block, causal, scaling, bf16_, probs, ld);
  }

  // out [rows, d_v] = probs [rows, keys] value[0:keys] (fp32 sums; bf16: one rounding).
  void probs_value(const RowBlock& block, const float* probs, int64_t /*ld = keys*/, float* out,
                   int64_t ld_out) override {
    const void* p = probs;
    if (bf16_) {  // the probabilities are bf16 values: rounding is exact
      const int64_t count = block.rows * block.keys;
      for (int64_t i = 0; i < count; ++i) probs_bits_[static_cast<size_t>(i)] = bf16::round_bits(probs[i]);
      p = probs_bits_.data();
    }
    execute("p v", block.rows, block.keys, d_v_, false, p, value_, context_.data());
    for (int64_t i = 0; i < block.rows; ++i) {
      const float* c = context_.data() + i * d_v_;
      float* o = out + i * ld_out;
      for (int64_t d = 0; d < d_v_; ++d) o[d] = bf16_ ? round_to_bf16(c[d]) : c[d];
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

  int64_t S_, d_n_, d_r_, d_v_, d_qk_;
  bool bf16_;
  Dt dt_;
  const float* query_src_ = nullptr;             // head h's query [S, d_qk], row stride ld_query_
  int64_t ld_query_ = 0;
  std::vector<uint16_t> query_bits_, key_bits_;  // bf16 run: [64, d_qk] (a block's rows), [S, d_qk]
  std::vector<uint16_t> probs_bits_;             // bf16 run: [64, S] (a block's [rows, keys])
  std::vector<float> query_, key_;               // fp32 run: [64, d_qk], [S, d_qk]
  std::vector<float> context_;                   // [64, d_v] a block's P·V sums
  const void* value_ = nullptr;                  // value[h] [S, d_v] as stored
  Scratchpad scratchpad_;
  dnnl::stream stream_{Dnnl::get().engine};
};

}  // namespace

std::unique_ptr<HeadProducts> make_onednn_head_products(const KeyValueStates& kv, bool bf16) {
  return std::make_unique<DnnlHeadProducts>(kv, bf16);
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

std::unique_ptr<HeadProducts> make_onednn_head_products(const KeyValueStates&, bool) {
  fail(ErrorKind::Unsupported, "cpu backend: this build has no oneDNN (meson -Donednn=enabled needs libdnnl-dev)");
}

std::string onednn_attention_kernel(bool) { return ""; }

}  // namespace mla::cpu
#endif
