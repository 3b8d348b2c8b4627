// src/cpu/streaming_attention.cpp — streamed attention + H2O mass (see the header and
// docs/long-context.md). Shape legend as in the header.
#include "streaming_attention.hpp"

#include <algorithm>
#include <mutex>

#include "mla/bf16.hpp"

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

void streaming_attention(const float* query, int64_t ld_query, const KeyValueStates& kv, bool causal,
                         float scaling, bool bf16, int threads, const BlockProgress& progress,
                         const StreamingOutputs& out) {
  const int64_t S = kv.seq_len, n = kv.heads, d_n = kv.qk_nope_head_dim, d_r = kv.qk_rope_head_dim;
  const int64_t d_v = kv.v_head_dim, d_qk = d_n + d_r;
  const int workers = static_cast<int>(std::clamp<int64_t>(threads, 1, std::max<int64_t>(n, 1)));
  struct Workspace {
    MatrixRM key;     // [S, d_qk]  k_nope_h | k_pe_roped, fp32
    MatrixRM value;   // [S, d_v]
    MatrixRM logits;  // [64, S]    one row block's logits, then its probabilities
  };
  std::vector<Workspace> spaces(static_cast<size_t>(workers));
  for (Workspace& w : spaces) {
    w.key.resize(S, d_qk);
    w.value.resize(S, d_v);
    w.logits.resize(std::min(kQueryRowBlock, S), S);
  }
  const int64_t total = streaming_blocks(S, n);
  int64_t done = 0;
  std::mutex progress_mutex;
  BlasThreads one_blas_thread_per_worker(1);
  parallel_for(n, workers, [&](int64_t h, int worker) {
    Workspace& w = spaces[static_cast<size_t>(worker)];
    kv.key_nope[static_cast<size_t>(h)].widen_rows(0, S, w.key.data(), d_qk);
    kv.k_pe_roped.widen_rows(0, S, w.key.data() + d_n, d_qk);
    kv.value[static_cast<size_t>(h)].widen_rows(0, S, w.value.data(), d_v);
    const HeadViews views{query + h * d_qk, ld_query, w.key.data(), d_qk, w.value.data(), d_v};
    double* mass = out.head_scores + h * S;  // [S]
    std::fill(mass, mass + S, 0.0);
    for (int64_t row_begin = 0; row_begin < S; row_begin += kQueryRowBlock) {
      const int64_t rows = std::min(kQueryRowBlock, S - row_begin);
      const RowBlock block{row_begin, rows, causal ? row_begin + rows : S};
      float* probs = w.logits.data();  // [rows, keys], row stride S
      block_scores_softmax(views, d_qk, block, causal, scaling, bf16, probs, S);
      block_probs_value(views, probs, S, block, d_v, bf16, out.attn_context + row_begin * out.ld_context + h * d_v,
                        out.ld_context);
      block_column_sums(probs, S, block, causal, mass);
      if (out.attn_weights != nullptr) {  // [n, S, S] row h*S + s: probabilities, 0 past the block's keys
        for (int64_t i = 0; i < rows; ++i) {
          double* dst = out.attn_weights + (h * S + row_begin + i) * S;
          std::copy_n(probs + i * S, block.keys, dst);
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
