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
#include <span>
#include <string>
#include <vector>

#include "mla/model.hpp"
#include "mla/tokenizer.hpp"

namespace mla {

// This project's four tasks, then RULER's 11 synthetic tasks under RULER's names (docs/eval.md §7.7).
enum class TaskKind {
  Passkey, NiahMultikey, NiahMultivalue, VariableTracking,
  NiahSingle1, NiahSingle2, NiahSingle3, NiahMultikey1, NiahMultikey2, NiahMultikey3, RulerNiahMultivalue, NiahMultiquery,
  Vt, Cwe, Fwe
};
// "passkey" | "niah-multikey" | "niah-multivalue" | "variable-tracking" | "niah_single_1" ... "fwe"
const char* task_name(TaskKind k);
std::vector<std::string> task_names();  // every name --task takes, "ruler" included
// The tasks of a --task name: one, or RULER's 11 for "ruler". Error(InvalidArgument), one line:
// an unknown name (the names listed), qa_1 / qa_2 (SQuAD and HotpotQA are not here).
std::vector<TaskKind> parse_tasks(const std::string& name);
bool is_ruler_task(TaskKind k);
std::vector<TaskKind> ruler_task_kinds();  // RULER's 11, in synthetic.yaml's order
// Whether a RULER task draws words (its keys, cwe's list) from ruler_words.
bool ruler_task_needs_words(TaskKind k);

// Is the question inside the prompt the policy compresses (kvpress's query-aware), or after it?
enum class QueryPlacement { Aware, Agnostic };
const char* query_placement_name(QueryPlacement q);  // "aware" | "agnostic"

// The bytes a sample needs besides its filler: needles, question, answer and the final ".\n".
// The same for every sample of a task (names and keys have fixed lengths); on a byte-level model
// it is also the ids they take.
int64_t task_fixed_bytes(TaskKind k);

// One reference string of a sample (RULER's "outputs"): its text and its ids in the sample,
// ids[first .. first + tokens) (the ids whose decoded bytes overlap it).
struct TaskReference {
  std::string text;
  int64_t first = 0, tokens = 0;
};

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
// The byte offset in decode(ids) at which each id starts, then where the text ends ([ids + 1]):
// each id decoded on its own.
std::vector<int64_t> id_offsets(const std::vector<int64_t>& ids, const Tokenizer& tok);
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
  // the strings scored (string_match_all): this project's tasks: the answer; RULER's: each value,
  // variable or word asked for, in the order of the teacher-forced continuation
  std::vector<TaskReference> refs;
  int64_t prompt_len = 0;      // eval's P for this sample
  int64_t steps = 0;           // eval's N
  int64_t answer_token() const { return answer_first + (request.bos ? 1 : 0); }  // token index of the answer's first id
};

// The sample, or Error(InvalidArgument) with one line: a context too short for the task's needles
// and question (no filler id left), a depth outside [0, 100], no filler file holding F ids.
// `filler` holds tok's ids of each file (tokenize_filler).
// F consecutive ids of one filler file at the draw u in [0, 1): offset floor(u n) over the n places
// in the files (name order) where F ids fit; sets out.source, filler_offset, filler_tokens. No
// such place is one error line naming `task`, `unit` and the context.
std::span<const uint32_t> take_filler(const std::vector<TaskFiller>& filler, int64_t F, double u, const std::string& task,
                                      const std::string& unit, int64_t context, TaskSample& out);
// RULER's tasks: `words` from ruler_words (those that draw words need 20 or more).
TaskSample make_task_sample(const TaskRequest& r, const std::vector<TaskFiller>& filler, const Tokenizer& tok,
                            const std::vector<std::string>& words = {});

// RULER's word draws (its wonderwords lists are not here, nor /usr/share/dict): the lowercase words
// of 3-10 letters A-z-bounded in the files' text that occur at least kRulerWordMinCount times, sorted.
inline constexpr int64_t kRulerWordMinCount = 20;
std::vector<std::string> ruler_words(const std::vector<FillerSource>& files);
// A RULER task's sample (make_task_sample calls it for those kinds).
TaskSample make_ruler_sample(const TaskRequest& r, const std::vector<TaskFiller>& filler, const std::vector<std::string>& words,
                             const Tokenizer& tok);

// A passkey input (models/tiny-mla/eval/passkey-*.txt and the passkey task's samples) ends with
// the line "What is the pass key? The pass key is NNNNN." (then a newline): the key's digits are
// the tokens at `digits`. Found on byte-level token ids only; empty when the input is not one.
struct Passkey {
  std::string key;              // "70969"
  std::vector<int64_t> digits;  // positions of the key's digits in the token ids, ascending
};
Passkey find_passkey(const std::vector<int64_t>& tokens, const ModelConfig& cfg);

}  // namespace mla
