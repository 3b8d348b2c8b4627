// src/cpu/streaming_attention.cpp — streamed attention + H2O mass (see the header and
// docs/long-context.md). Shape legend as in the header. The oneDNN products are in
// onednn_attention.cpp.
#include "streaming_attention.hpp"

#include <algorithm>
#include <mutex>

#include "mla/bf16.hpp"
#include "onednn_attention.hpp"

namespace mla::cpu {

// ---- PrecisionMatrix ------------------------------------------------------------------------

PrecisionMatrix::PrecisionMatrix(int64_t rows, int64_t cols, bool bf16) : rows_(rows), cols_(cols), bf16_(bf16) {
  if (bf16) {
    bits_.resize(static_cast<size_t>(rows * cols));
  } else {
    values_.resize(static_cast<size_t>(rows * cols));
  }
}

void PrecisionMatrix::set_rows(int64_t row_begin, int64_t rows, const float* src, int64_t ld_src) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* s = src + i * ld_src;
    const size_t base = static_cast<size_t>((row_begin + i) * cols_);
    if (bf16_) {
      for (int64_t j = 0; j < cols_; ++j) bits_[base + static_cast<size_t>(j)] = bf16::round_bits(s[j]);
    } else {
      std::copy_n(s, cols_, values_.data() + base);
    }
  }
}

void PrecisionMatrix::widen_rows(int64_t row_begin, int64_t rows, float* dst, int64_t ld_dst) const {
  for (int64_t i = 0; i < rows; ++i) {
    float* d = dst + i * ld_dst;
    const size_t base = static_cast<size_t>((row_begin + i) * cols_);
    if (bf16_) {
      for (int64_t j = 0; j < cols_; ++j) d[j] = bf16::from_bits(bits_[base + static_cast<size_t>(j)]).to_float();
    } else {
      std::copy_n(values_.data() + base, cols_, d);
    }
  }
}

int64_t PrecisionMatrix::bytes() const {
  return static_cast<int64_t>(bits_.size() * sizeof(uint16_t) + values_.size() * sizeof(float));
}

// ---- KeyValueStates -------------------------------------------------------------------------

KeyValueStates::KeyValueStates(int64_t seq_len_, int64_t heads_, int64_t d_n, int64_t d_r, int64_t d_v, bool bf16)
    : seq_len(seq_len_), heads(heads_), qk_nope_head_dim(d_n), qk_rope_head_dim(d_r), v_head_dim(d_v),
      k_pe_roped(seq_len_, d_r, bf16) {
  key_nope.reserve(static_cast<size_t>(heads));
  value.reserve(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h) {
    key_nope.emplace_back(seq_len, d_n, bf16);
    value.emplace_back(seq_len, d_v, bf16);
  }
}

void KeyValueStates::set_kv_rows(int64_t row_begin, int64_t rows, const float* kv, int64_t ld_kv) {
  const int64_t d_kv = qk_nope_head_dim + v_head_dim;
  for (int64_t h = 0; h < heads; ++h) {
    key_nope[static_cast<size_t>(h)].set_rows(row_begin, rows, kv + h * d_kv, ld_kv);
    value[static_cast<size_t>(h)].set_rows(row_begin, rows, kv + h * d_kv + qk_nope_head_dim, ld_kv);
  }
}

void KeyValueStates::set_k_pe_rows(int64_t row_begin, int64_t rows, const float* k_pe, int64_t ld) {
  k_pe_roped.set_rows(row_begin, rows, k_pe, ld);
}

int64_t KeyValueStates::bytes() const {
  int64_t b = k_pe_roped.bytes();
  for (int64_t h = 0; h < heads; ++h) b += key_nope[static_cast<size_t>(h)].bytes() + value[static_cast<size_t>(h)].bytes();
  return b;
}

// ---- streaming_attention --------------------------------------------------------------------

int64_t streaming_blocks(int64_t seq_len, int64_t heads) {
  return heads * ((seq_len + kQueryRowBlock - 1) / kQueryRowBlock);
}

namespace {

// The Eigen + OpenBLAS products: head h's keys/values widened to fp32 [S, d_qk] / [S, d_v],
// then cpu_kernels.hpp's block functions (single-threaded sgemm; the caller sets one BLAS
// thread per worker). Probabilities with row stride S, as the materialized computation.
class EigenHeadProducts final : public HeadProducts {
 public:
  EigenHeadProducts(const KeyValueStates& kv, bool bf16)
      : S_(kv.seq_len), d_n_(kv.qk_nope_head_dim), d_qk_(d_n_ + kv.qk_rope_head_dim), d_v_(kv.v_head_dim), bf16_(bf16) {
    key_.resize(S_, d_qk_);
    value_.resize(S_, d_v_);
  }
  void load_head(const float* query, int64_t ld_query, const KeyValueStates& kv, int64_t h) override {
    kv.key_nope[static_cast<size_t>(h)].widen_rows(0, S_, key_.data(), d_qk_);
    kv.k_pe_roped.widen_rows(0, S_, key_.data() + d_n_, d_qk_);
    kv.value[static_cast<size_t>(h)].widen_rows(0, S_, value_.data(), d_v_);
    views_ = HeadViews{query, ld_query, key_.data(), d_qk_, value_.data(), d_v_};
  }
  int64_t ld_probs(const RowBlock&) const override { return S_; }
  void scores_softmax(const RowBlock& block, bool causal, float scaling, float* probs, int64_t ld) override {
    block_scores_softmax(views_, d_qk_, block, causal, scaling, bf16_, probs, ld);
  }
  void probs_value(const RowBlock& block, const float* probs, int64_t ld, float* out, int64_t ld_out) override {
    block_probs_value(views_, probs, ld, block, d_v_, bf16_, out, ld_out);
  }

 private:
  int64_t S_, d_n_, d_qk_, d_v_;
  bool bf16_;
  MatrixRM key_;    // [S, d_qk]  k_nope_h | k_pe_roped, fp32
  MatrixRM value_;  // [S, d_v]
  HeadViews views_{};
};

}  // namespace

std::unique_ptr<HeadProducts> make_head_products(Gemm engine, const KeyValueStates& kv, bool bf16) {
  if (engine == Gemm::OneDnn) return make_onednn_head_products(kv, bf16);
  return std::make_unique<EigenHeadProducts>(kv, bf16);
}

void streaming_attention(const float* query, int64_t ld_query, const KeyValueStates& kv, bool causal,
                         float scaling, bool bf16, int threads, Gemm products, const BlockProgress& progress,
                         const StreamingOutputs& out) {
  const int64_t S = kv.seq_len, n = kv.heads, d_qk = kv.qk_nope_head_dim + kv.qk_rope_head_dim;
  const int64_t d_v = kv.v_head_dim;
  const int workers = static_cast<int>(std::clamp<int64_t>(threads, 1, std::max<int64_t>(n, 1)));
  struct Workspace {
    std::unique_ptr<HeadProducts> products;
    MatrixRM logits;  // [64, S]    one row block's logits, then its probabilities
  };
  std::vector<Workspace> spaces(static_cast<size_t>(workers));
  for (Workspace& w : spaces) {
    w.products = make_head_products(products, kv, bf16);
    w.logits.resize(std::min(kQueryRowBlock, S), S);
  }
  const int64_t total = streaming_blocks(S, n);
  int64_t done = 0;
  std::mutex progress_mutex;
  BlasThreads one_blas_thread_per_worker(1);
  parallel_for(n, workers, [&](int64_t h, int worker) {
    Workspace& w = spaces[static_cast<size_t>(worker)];
    w.products->load_head(query + h * d_qk, ld_query, kv, h);
    double* mass = out.head_scores + h * S;  // [S]
    std::fill(mass, mass + S, 0.0);
    for (int64_t row_begin = 0; row_begin < S; row_begin += kQueryRowBlock) {
      const int64_t rows = std::min(kQueryRowBlock, S - row_begin);
      const RowBlock block{row_begin, rows, causal ? row_begin + rows : S};
      float* probs = w.logits.data();  // [rows, keys], row stride ld
      const int64_t ld = w.products->ld_probs(block);
      w.products->scores_softmax(block, causal, scaling, probs, ld);
      w.products->probs_value(block, probs, ld, out.attn_context + row_begin * out.ld_context + h * d_v,
                              out.ld_context);
      block_column_sums(probs, ld, block, causal, mass);
      if (out.attn_weights != nullptr) {  // [n, S, S] row h*S + s: probabilities, 0 past the block's keys
        for (int64_t i = 0; i < rows; ++i) {
          double* dst = out.attn_weights + (h * S + row_begin + i) * S;
          std::copy_n(probs + i * ld, block.keys, dst);
          std::fill(dst + block.keys, dst + S, 0.0);
        }
      }
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        progress(++done, total);
      }
    }
  });
}

}  // namespace mla::cpu
