// src/cpu/tiled_attention.cpp — tiled attention + H2O mass (see the header and
// docs/long-context.md). Shape legend as in the header. The oneDNN products are in
// onednn_attention.cpp.
#include "tiled_attention.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>

#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "onednn_attention.hpp"
#include "vector_kernels.hpp"

namespace mla::cpu {

// ---- PrecisionMatrix ------------------------------------------------------------------------

PrecisionMatrix::PrecisionMatrix(int64_t rows, int64_t cols, Precision precision)
    : rows_(rows), cols_(cols), precision_(precision) {
  if (precision == Precision::BF16) {
    bits_.resize(static_cast<size_t>(rows * cols));
  } else {
    values_.resize(static_cast<size_t>(rows * cols));
  }
}

void PrecisionMatrix::set_rows(int64_t row_begin, int64_t rows, const float* src, int64_t ld_src, int threads) {
  const VectorKernels& vk = vector_kernels();
  parallel_for(rows, rows * cols_ >= (int64_t{1} << 16) ? threads : 1, [&](int64_t i, int) {
    const float* s = src + i * ld_src;
    const size_t base = static_cast<size_t>((row_begin + i) * cols_);
    if (precision_ == Precision::BF16) {
      vk.to_bf16_bits(s, cols_, bits_.data() + base);
    } else {
      std::copy_n(s, cols_, values_.data() + base);
    }
  });
}

void PrecisionMatrix::widen_rows(int64_t row_begin, int64_t rows, float* dst, int64_t ld_dst, int threads) const {
  const VectorKernels& vk = vector_kernels();
  parallel_for(rows, rows * cols_ >= (int64_t{1} << 16) ? threads : 1, [&](int64_t i, int) {
    float* d = dst + i * ld_dst;
    const size_t base = static_cast<size_t>((row_begin + i) * cols_);
    if (precision_ == Precision::BF16) {
      vk.from_bf16_bits(bits_.data() + base, cols_, d);
    } else {
      std::copy_n(values_.data() + base, cols_, d);
    }
  });
}

int64_t PrecisionMatrix::bytes() const {
  return static_cast<int64_t>(bits_.size() * sizeof(uint16_t) + values_.size() * sizeof(float));
}

// ---- KeyValueStates -------------------------------------------------------------------------

KeyValueStates::KeyValueStates(int64_t seq_len_, int64_t heads_, int64_t d_n, int64_t d_r, int64_t d_v,
                               Precision precision)
    : seq_len(seq_len_), heads(heads_), qk_nope_head_dim(d_n), qk_rope_head_dim(d_r), v_head_dim(d_v),
      k_pe_roped(seq_len_, d_r, precision) {
  key_nope.reserve(static_cast<size_t>(heads));
  value.reserve(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h) {
    key_nope.emplace_back(seq_len, d_n, precision);
    value.emplace_back(seq_len, d_v, precision);
  }
}

void KeyValueStates::set_kv_rows(int64_t row_begin, int64_t rows, const float* kv, int64_t ld_kv, int threads) {
  const int64_t d_kv = qk_nope_head_dim + v_head_dim;
  parallel_for(heads, rows * d_kv >= (int64_t{1} << 16) ? threads : 1, [&](int64_t h, int) {
    key_nope[static_cast<size_t>(h)].set_rows(row_begin, rows, kv + h * d_kv, ld_kv);
    value[static_cast<size_t>(h)].set_rows(row_begin, rows, kv + h * d_kv + qk_nope_head_dim, ld_kv);
  });
}

void KeyValueStates::set_k_pe_rows(int64_t row_begin, int64_t rows, const float* k_pe, int64_t ld) {
  k_pe_roped.set_rows(row_begin, rows, k_pe, ld);
}

int64_t KeyValueStates::bytes() const {
  int64_t b = k_pe_roped.bytes();
  for (int64_t h = 0; h < heads; ++h) b += key_nope[static_cast<size_t>(h)].bytes() + value[static_cast<size_t>(h)].bytes();
  return b;
}

// ---- tiled_attention --------------------------------------------------------------------

namespace {

int64_t block_keys(int64_t S, bool causal, int64_t row_begin, int64_t rows) { return causal ? row_begin + rows : S; }

QueryRows resolved(QueryRows r, int64_t S) {
  if (r.end < 0) r.end = S;
  return r;
}

}  // namespace

int64_t tiled_pairs(int64_t seq_len, int64_t heads, bool causal, QueryRows rows) {
  rows = resolved(rows, seq_len);
  int64_t pairs = 0;
  for (int64_t r = rows.begin; r < rows.end; r += kQueryRowBlock) {
    const int64_t n = std::min(kQueryRowBlock, rows.end - r);
    pairs += n * block_keys(seq_len, causal, r, n);
  }
  return pairs * heads;
}

namespace {

// The Eigen + OpenBLAS products: head h's keys/values widened to fp32 [keys, d_qk] / [keys, d_v],
// then cpu_kernels.hpp's block functions (single-threaded sgemm; the caller sets one BLAS thread
// per worker). Logits with row stride S, as the materialized computation.
class EigenOperands final : public HeadOperands {
 public:
  void load(const KeyValueStates& kv, int64_t h, int64_t keys) override {
    const int64_t d_n = kv.qk_nope_head_dim, d_qk = d_n + kv.qk_rope_head_dim, d_v = kv.v_head_dim;
    key.resize(keys, d_qk);
    value.resize(keys, d_v);
    kv.key_nope[static_cast<size_t>(h)].widen_rows(0, keys, key.data(), d_qk);
    kv.k_pe_roped.widen_rows(0, keys, key.data() + d_n, d_qk);
    kv.value[static_cast<size_t>(h)].widen_rows(0, keys, value.data(), d_v);
  }
  MatrixRM key;    // [keys, d_qk]  k_nope_h | k_pe_roped, fp32
  MatrixRM value;  // [keys, d_v]
};

class EigenBlockProducts final : public BlockProducts {
 public:
  EigenBlockProducts(const KeyValueStates& kv, Precision precision)
      : S_(kv.seq_len), d_qk_(kv.qk_nope_head_dim + kv.qk_rope_head_dim), d_v_(kv.v_head_dim), precision_(precision) {}
  std::unique_ptr<HeadOperands> make_operands() const override { return std::make_unique<EigenOperands>(); }
  int64_t columns(const RowBlock& block) const override { return block.keys; }
  int64_t ld_probs(const RowBlock&) const override { return S_; }
  bool takes_bits() const override { return false; }
  void scores(const HeadOperands& head, const float* query, int64_t ld_query, const RowBlock& block, float* logits,
              int64_t ld) override {
    const auto& o = static_cast<const EigenOperands&>(head);
    // block_scores reads the block's rows at query + row_begin * ld_query
    const HeadViews views{query - block.row_begin * ld_query, ld_query, o.key.data(), d_qk_, o.value.data(), d_v_};
    block_scores(views, d_qk_, block, logits, ld);
  }
  void probs_value(const HeadOperands& head, const RowBlock& block, const float* probs, const uint16_t*, int64_t ld,
                   float* out, int64_t ld_out) override {
    const auto& o = static_cast<const EigenOperands&>(head);
    const HeadViews views{nullptr, 0, o.key.data(), d_qk_, o.value.data(), d_v_};
    block_probs_value(views, probs, ld, block, d_v_, precision_, out, ld_out);
  }

 private:
  int64_t S_, d_qk_, d_v_;
  Precision precision_;
};

// The heads being worked on: one slot per worker at most (a worker holds one (head, block) item
// at a time, so at most `workers` heads are unfinished), each with the head's operands, loaded
// by the worker that takes the head's first block, and the index of the next block whose mass
// may be added (blocks add their column sums in row order).
class HeadSlots {
 public:
  HeadSlots(int workers, const BlockProducts& engine) : slots_(static_cast<size_t>(workers)) {
    for (Slot& s : slots_) s.operands = engine.make_operands();
  }

  // The operands of head h for keys [0, keys): the first caller for h loads them (into a slot
  // no unfinished head uses), later callers wait until they are loaded.
  const HeadOperands& acquire(int64_t h, bool first, const KeyValueStates& kv, int64_t keys) {
    Slot* slot = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (first) {
        for (Slot& s : slots_)
          if (s.head < 0) {
            slot = &s;
            break;
          }
        if (slot == nullptr) fail(ErrorKind::InvalidArgument, "tiled_attention: more heads in flight than workers");
        slot->head = h;
        slot->ready = false;
        slot->next_block = 0;
      } else {
        changed_.wait(lock, [&] { return aborted_ || ((slot = find(h)) != nullptr && slot->ready); });
        if (aborted_) throw_aborted();
        return *slot->operands;
      }
    }
    slot->operands->load(kv, h, keys);  // outside the lock: other heads go on
    {
      std::lock_guard<std::mutex> lock(mutex_);
      slot->ready = true;
    }
    changed_.notify_all();
    return *slot->operands;
  }

  // Runs add() when block `index` (0-based within the call) of head h is next in row order;
  // the head's slot is freed after its last block (`blocks` in the call).
  template <typename Add>
  void add_in_order(int64_t h, int64_t index, int64_t blocks, Add&& add) {
    Slot* slot = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] {
        return aborted_ || ((slot = find(h)) != nullptr && slot->ready && slot->next_block == index);
      });
      if (aborted_) throw_aborted();
    }
    add();  // only this worker may add head h's mass now
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (++slot->next_block == blocks) slot->head = -1;
    }
    changed_.notify_all();
  }

 // A worker failed: the blocks it held will never be added, so every waiting worker stops.
  void abort() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      aborted_ = true;
    }
    changed_.notify_all();
  }

 private:
  struct Slot {
    int64_t head = -1;  // -1: free
    bool ready = false;
    int64_t next_block = 0;
    std::unique_ptr<HeadOperands> operands;
  };
  [[noreturn]] static void throw_aborted() {
    fail(ErrorKind::InvalidArgument, "tiled_attention: stopped because another worker failed");
  }
  Slot* find(int64_t h) {
    for (Slot& s : slots_)
      if (s.head == h) return &s;
    return nullptr;
  }
  std::mutex mutex_;
  std::condition_variable changed_;
  bool aborted_ = false;
  std::vector<Slot> slots_;
};

}  // namespace

std::unique_ptr<BlockProducts> make_block_products(Gemm engine, const KeyValueStates& kv, Precision precision) {
  // onednn_attention.hpp still takes a bool (left to its owner; docs/backends.md §8)
  if (engine == Gemm::OneDnn) return make_onednn_block_products(kv, precision == Precision::BF16);
  return std::make_unique<EigenBlockProducts>(kv, precision);
}

void tiled_attention(const float* query, int64_t ld_query, const KeyValueStates& kv, bool causal,
                         float scaling, Precision precision, int threads, Gemm products,
                         const BlockProgress& progress, const TiledOutputs& out, QueryRows rows) {
  const int64_t S = kv.seq_len, n = kv.heads, d_qk = kv.qk_nope_head_dim + kv.qk_rope_head_dim;
  const int64_t d_v = kv.v_head_dim;
  rows = resolved(rows, S);
  if (rows.begin % kQueryRowBlock != 0 || rows.begin < 0 || rows.end > S || rows.begin > rows.end)
    fail(ErrorKind::InvalidArgument, "tiled_attention: query rows [" + std::to_string(rows.begin) + ", " +
                                  std::to_string(rows.end) + ") of " + std::to_string(S));
  const int64_t blocks = (rows.end - rows.begin + kQueryRowBlock - 1) / kQueryRowBlock;  // per head
  const int64_t items = n * blocks;
  if (items == 0) return;
  const int workers = static_cast<int>(std::clamp<int64_t>(threads, 1, items));
  const VectorKernels& vk = vector_kernels();
  struct Workspace {
    std::unique_ptr<BlockProducts> products;
    std::vector<float> logits;     // [64, keys]: one row block's logits, then (fp32) its probabilities
    std::vector<uint16_t> bits;    // [64, keys]: its probabilities as bf16 bits (takes_bits())
  };
  std::vector<Workspace> spaces(static_cast<size_t>(workers));
  const int64_t max_keys = causal ? rows.end : S, max_rows = std::min(kQueryRowBlock, rows.end - rows.begin);
  for (Workspace& w : spaces) {
    w.products = make_block_products(products, kv, precision);
    const RowBlock largest{rows.begin, max_rows, max_keys};
    w.logits.resize(static_cast<size_t>(max_rows * w.products->ld_probs(largest)));
    if (w.products->takes_bits()) w.bits.resize(static_cast<size_t>(max_rows * w.products->columns(largest)));
  }
  HeadSlots slots(workers, *spaces.front().products);
  const int64_t total = tiled_pairs(S, n, causal, rows);
  int64_t done = 0;
  std::mutex progress_mutex;
  BlasThreads one_blas_thread_per_worker(1);
  // one (head, block) item: the block's logits, softmax rows, P·V, then its mass in row order
  auto stream_block = [&](int64_t item, int worker) {
    Workspace& w = spaces[static_cast<size_t>(worker)];
    const int64_t h = item / blocks, index = item % blocks;
    const int64_t row_begin = rows.begin + index * kQueryRowBlock;
    const int64_t block_rows = std::min(kQueryRowBlock, rows.end - row_begin);
    const RowBlock block{row_begin, block_rows, block_keys(S, causal, row_begin, block_rows)};
    const HeadOperands& head = slots.acquire(h, index == 0, kv, max_keys);
    // logits [rows, columns], then each row's softmax while it is in cache
    const int64_t ld = w.products->ld_probs(block), columns = w.products->columns(block);
    float* logits = w.logits.data();
    uint16_t* bits = w.products->takes_bits() ? w.bits.data() : nullptr;
    const float* q = query + (row_begin - rows.begin) * ld_query + h * d_qk;
    w.products->scores(head, q, ld_query, block, logits, ld);
    for (int64_t i = 0; i < block_rows; ++i) {
      const int64_t visible = causal ? row_begin + i + 1 : block.keys;
      float* row = logits + i * ld;
      vk.softmax_row(row, visible, columns, scaling, precision, bits != nullptr ? nullptr : row,
                     bits != nullptr ? bits + i * columns : nullptr);
    }
    if (out.attn_context != nullptr)  // (decode's prefill needs only the mass)
      w.products->probs_value(head, block, logits, bits, bits != nullptr ? columns : ld,
                              out.attn_context + (row_begin - rows.begin) * out.ld_context + h * d_v, out.ld_context);
    slots.add_in_order(h, index, blocks, [&] {
      double* mass = out.head_scores + h * S;  // [S]
      if (row_begin == 0) std::fill(mass, mass + S, 0.0);
      if (bits != nullptr) {
        vk.add_bits_to_mass(bits, columns, block_rows, block.keys, mass);
      } else {
        vk.add_rows_to_mass(logits, ld, block_rows, block.keys, mass);
      }
    });
    if (out.attn_weights != nullptr) {  // [n, S, S] row h*S + s: probabilities, 0 past the block's keys
      std::vector<float> widened(bits != nullptr ? static_cast<size_t>(block.keys) : 0);
      for (int64_t i = 0; i < block_rows; ++i) {
        const float* p = logits + i * ld;
        if (bits != nullptr) {
          vk.from_bf16_bits(bits + i * columns, block.keys, widened.data());
          p = widened.data();
        }
        double* dst = out.attn_weights + (h * S + row_begin + i) * S;
        std::copy_n(p, block.keys, dst);
        std::fill(dst + block.keys, dst + S, 0.0);
      }
    }
    if (progress) {
      std::lock_guard<std::mutex> lock(progress_mutex);
      done += block_rows * block.keys;
      progress(done, total);
    }
  };
  parallel_for(items, workers, [&](int64_t item, int worker) {
    try {
      stream_block(item, worker);
    } catch (...) {
      slots.abort();
      throw;
    }
  });
}

}  // namespace mla::cpu
