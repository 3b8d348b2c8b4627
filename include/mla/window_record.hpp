// mla/window_record.hpp — one finished eval window as bytes: the unit of `eval --resume`'s
// staging area (a file per window) and of `mpirun ... eval`'s gather (a message per window).
// One format for both (docs/scale-out.md §2), so a window computed on any rank, or before a
// crash, is the same bytes and restores the same EvalWindow, bit for bit: every double and
// float is stored as its IEEE-754 bits, never printed.
//
// Layout (little-endian; u64 = 8 bytes, f64 = the 8 bytes of a double, str = u64 length + bytes):
//   "mla-h2o window record v1\n"                      the magic line (24 bytes)
//   str  settings digest                              (sha256 hex of the run's settings, mla/resume_area.hpp)
//   u64  window index                                 its place in the run's window order
//   u64  input digest                                 FNV-1a 64 of its token ids (the input it was computed from)
//   u64  payload bytes, then the payload:
//        str source, i64 offset, str engine,
//        passkey: str key, u64 n, n x i64 digit positions,
//        stage_seconds, profile: u64 n, n x (str name, f64 seconds),
//        u64 runs (full first, then the runs in EvalResult order), each:
//          str label, i64 budget, u64 positions, each: i64 position, token, predicted; f64 nll, kl,
//          predicted_prob; u8 top1_agree, top1_correct; u64 layers, each: i64 layer, budget;
//          f64 mean_cache_len, mean_held, mean_mass_recall, min_mass_recall, mean_attn_rel_error,
//          max_attn_rel_error, mean_hidden_rel_error
//        u64 tensors (--dump-tensors' full_logits, then hidden_states), each: str name,
//          u64 rank, rank x i64 dims, the floats' bits
//   u64  FNV-1a 64 of every byte before it              (a torn or altered record is refused)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mla/eval.hpp"

namespace mla {

// FNV-1a 64 of a window's token ids (each id as 8 little-endian bytes).
uint64_t token_ids_digest(const std::vector<int64_t>& ids);

std::string encode_window_record(const EvalWindow& w, uint64_t index, uint64_t input_digest,
                                 const std::string& settings_digest);

// The header of a record, read before its payload is trusted.
struct WindowRecordHeader {
  std::string settings_digest;
  uint64_t index = 0;
  uint64_t input_digest = 0;
};

// The window index a record says it holds (its header only, before anything is checked).
uint64_t record_window_index(std::string_view bytes, const std::string& what);

// Decodes a record written by encode_window_record. `what` names it in errors (a file, "rank 3").
// Error(InvalidValue), one line naming `what`: not a record of this version, a checksum that
// does not match, a truncated payload. The runs' policies are restored from `opt` (the run order
// of run_eval: full, then per budget per policy), each label checked against the one stored.
EvalWindow decode_window_record(std::string_view bytes, const EvalOptions& opt, const std::string& what,
                                WindowRecordHeader& header);

}  // namespace mla
