// mla/tasks.hpp — RULER-style retrieval tasks for byte-level models (`mla-h2o eval --task`,
// docs/eval.md §7): samples generated from a filler text and a seed, and the passkey input that
// eval recognises in a --text file. The one home of the needle and question formats.
//
// A sample is L bytes (--context L; the model's BOS comes before them):
//   filler with the task's needles inserted | question | answer | ".\n"
// The filler is F = L - (needles + question + answer + 2) consecutive bytes of one filler source,
// at an offset drawn from the seed; needle j goes in at filler offset floor(depth_j / 100 * F).
// Sample s at context L draws its filler, keys and names from Rng(seed, stream(L, s)) and so is the
// same at every depth: only the needles move.
//
// Where eval splits a sample (tokens = BOS + bytes; the answer's first byte is token a):
//   aware     the prompt holds the question but its last byte: P = a - 1, N = |answer|
//   agnostic  the prompt is BOS + the haystack; the question is decoded: P = the question's first
//             token, N = a + |answer| - 1 - P
// so every answer token is predicted from a decoded position, through the evicted cache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mla/model.hpp"

namespace mla {

enum class TaskKind { Passkey, NiahMultikey, NiahMultivalue, VariableTracking };
const char* task_name(TaskKind k);  // "passkey" | "niah-multikey" | "niah-multivalue" | "variable-tracking"
std::vector<std::string> task_names();
TaskKind parse_task(const std::string& name);  // Error(InvalidArgument) listing the names

// Is the question inside the prompt the policy compresses (kvpress's query-aware), or after it?
enum class QueryPlacement { Aware, Agnostic };
const char* query_placement_name(QueryPlacement q);  // "aware" | "agnostic"

// The bytes a sample needs besides its filler: needles, question, answer and the final ".\n".
// The same for every sample of a task (names and keys have fixed lengths).
int64_t task_fixed_bytes(TaskKind k);

// One file the filler is cut from.
struct FillerSource {
  std::string name;
  std::string bytes;
};

struct TaskRequest {
  TaskKind kind = TaskKind::Passkey;
  int64_t context = 0;        // L bytes after the BOS
  double depth = 0;           // percent of the filler before the (first) needle, [0, 100]
  int64_t index = 0;          // s: the sample at this context
  uint64_t seed = 0;
  QueryPlacement placement = QueryPlacement::Agnostic;
  bool bos = true;            // the model's tokens start with a BOS (ids shift by one)
};

struct TaskSample {
  TaskRequest request;
  std::string source;          // the filler's file
  int64_t filler_offset = 0;   // its first byte in that file
  int64_t filler_bytes = 0;    // F
  std::string bytes;           // the L bytes
  std::vector<int64_t> needle_at;  // first byte of each needle in `bytes`, in text order
  int64_t question_at = 0;     // first byte of the question ("\n" ...) in `bytes`
  int64_t answer_at = 0;       // first byte of the answer in `bytes`
  std::string answer;          // the bytes scored
  int64_t prompt_len = 0;      // eval's P for this sample
  int64_t steps = 0;           // eval's N
  int64_t answer_token() const { return answer_at + (request.bos ? 1 : 0); }  // token index of answer[0]
};

// The sample, or Error(InvalidArgument) with one line: a context too short for the task's needles
// and question (no filler byte left), a depth outside [0, 100], no filler source holding F bytes.
TaskSample make_task_sample(const TaskRequest& r, const std::vector<FillerSource>& filler);

// A passkey input (models/tiny-mla/eval/passkey-*.txt and the passkey task's samples) ends with
// the line "What is the pass key? The pass key is NNNNN." (then a newline): the key's digits are
// the tokens at `digits`. Found on byte-level token ids only; empty when the input is not one.
struct Passkey {
  std::string key;              // "70969"
  std::vector<int64_t> digits;  // positions of the key's digits in the token ids, ascending
};
Passkey find_passkey(const std::vector<int64_t>& tokens, const ModelConfig& cfg);

}  // namespace mla
