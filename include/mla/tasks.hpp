// mla/tasks.hpp — RULER-style retrieval tasks (`mla-h2o eval --task`, docs/eval.md §7): samples
// generated from a filler text, a tokenizer and a seed, and the passkey input that eval recognises
// in a --text file. The one home of the needle and question formats. The task layer sees text and a
// Tokenizer (mla/tokenizer.hpp; a byte-level model's is byte_level_tokenizer(), one id per byte),
// never bytes: every length below is in that tokenizer's ids.
//
// A sample is L ids (--context L; the model's BOS comes before them):
//   filler with the task's needles inserted | question | answer | ".\n"
// The filler is F = L - (the ids of the needles, question, answer and ".\n", each part encoded on
// its own) consecutive ids of one filler file's ids (each file encoded whole), at an offset drawn
// from the seed; needle j goes in at filler id floor(depth_j / 100 * F). Every part starts on a
// token boundary, so the answer's ids are encode(answer) (docs/eval.md §7.2). Sample s at context L
// draws its filler, keys and names from Rng(seed, stream(L, s)) and so is the same at every depth:
// only the needles move.
//
// Where eval splits a sample (tokens = BOS + ids; the answer's first id is token a, A ids):
//   aware     the prompt holds the question but its last id: P = a - 1, N = A
//   agnostic  the prompt is BOS + the haystack; the question is decoded: P = the question's first
//             token, N = a + A - 1 - P
// so every answer token is predicted from a decoded position, through the evicted cache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mla/model.hpp"
#include "mla/tokenizer.hpp"

namespace mla {

enum class TaskKind { Passkey, NiahMultikey, NiahMultivalue, VariableTracking };
const char* task_name(TaskKind k);  // "passkey" | "niah-multikey" | "niah-multivalue" | "variable-tracking"
std::vector<std::string> task_names();
TaskKind parse_task(const std::string& name);  // Error(InvalidArgument) listing the names

// Is the question inside the prompt the policy compresses (kvpress's query-aware), or after it?
enum class QueryPlacement { Aware, Agnostic };
const char* query_placement_name(QueryPlacement q);  // "aware" | "agnostic"

// The bytes a sample needs besides its filler: needles, question, answer and the final ".\n".
// The same for every sample of a task (names and keys have fixed lengths); on a byte-level model
// it is also the ids they take.
int64_t task_fixed_bytes(TaskKind k);

// One file the filler is cut from.
struct FillerSource {
  std::string name;
  std::string bytes;
};

// A filler file as the task layer reads it: its ids under the model's tokenizer (the file encoded
// whole, no special tokens added).
struct TaskFiller {
  std::string name;
  std::vector<uint32_t> ids;
};
// Each file encoded by `tok` (`threads` as Tokenizer::encode); an encoding error names the file.
std::vector<TaskFiller> tokenize_filler(const std::vector<FillerSource>& files, const Tokenizer& tok, int threads = 1);
// Token `id` as printable text (task_samples.csv): "<bos>" / "<eos>" for the config's ids, "<id N>"
// past tok's vocabulary, else token_bytes_text of its bytes (on a byte-level model:
// byte_level_token_text).
std::string task_token_text(const ModelConfig& cfg, const Tokenizer& tok, int64_t id);
// What --context counts: "bytes" for byte_level_tokenizer(), else "tokens".
const char* context_unit(const Tokenizer& tok);

struct TaskRequest {
  TaskKind kind = TaskKind::Passkey;
  int64_t context = 0;        // L ids after the BOS
  double depth = 0;           // percent of the filler before the (first) needle, [0, 100]
  int64_t index = 0;          // s: the sample at this context
  uint64_t seed = 0;
  QueryPlacement placement = QueryPlacement::Agnostic;
  bool bos = true;            // the model's tokens start with a BOS (ids shift by one)
};

struct TaskSample {
  TaskRequest request;
  std::string source;          // the filler's file
  int64_t filler_offset = 0;   // its first id in that file's ids (a byte offset on byte-level models)
  int64_t filler_tokens = 0;   // F
  std::string text;            // the sample's text: decode(ids)
  std::vector<int64_t> ids;    // its L ids (no BOS)
  std::vector<int64_t> needle_at;  // first byte of each needle in `text`, in text order
  int64_t question_at = 0;     // first byte of the question ("\n" ...) in `text`
  int64_t answer_at = 0;       // first byte of the answer in `text`
  std::string answer;          // the answer's text
  // The answer's ids, found by byte offsets: ids[answer_first .. answer_first + answer_tokens)
  // are the ids whose decoded bytes lie in [answer_at, answer_at + |answer|); question_first the id
  // whose bytes start at question_at.
  int64_t answer_first = 0, answer_tokens = 0, question_first = 0;
  int64_t prompt_len = 0;      // eval's P for this sample
  int64_t steps = 0;           // eval's N
  int64_t answer_token() const { return answer_first + (request.bos ? 1 : 0); }  // token index of the answer's first id
};

// The sample, or Error(InvalidArgument) with one line: a context too short for the task's needles
// and question (no filler id left), a depth outside [0, 100], no filler file holding F ids.
// `filler` holds tok's ids of each file (tokenize_filler).
TaskSample make_task_sample(const TaskRequest& r, const std::vector<TaskFiller>& filler, const Tokenizer& tok);

// A passkey input (models/tiny-mla/eval/passkey-*.txt and the passkey task's samples) ends with
// the line "What is the pass key? The pass key is NNNNN." (then a newline): the key's digits are
// the tokens at `digits`. Found on byte-level token ids only; empty when the input is not one.
struct Passkey {
  std::string key;              // "70969"
  std::vector<int64_t> digits;  // positions of the key's digits in the token ids, ascending
};
Passkey find_passkey(const std::vector<int64_t>& tokens, const ModelConfig& cfg);

}  // namespace mla
