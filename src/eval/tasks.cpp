// src/eval/tasks.cpp — the retrieval tasks' samples and the passkey detector (mla/tasks.hpp,
// docs/eval.md §7). Every format below is spelled once, here.
#include "mla/tasks.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "mla/error.hpp"
#include "mla/random.hpp"

namespace mla {
namespace {

constexpr int64_t kKeyDigits = 5;   // every key and value: 5 decimal digits, each uniform
constexpr int64_t kNameLetters = 5; // every name: 5 letters A-Z, each uniform, distinct in a sample
constexpr int64_t kNeedles = 4;     // multikey: 1 asked + 3 distractors; multivalue: 4 values; tracking: 4 variables
const std::string kTail = ".\n";
// The passkey task is the format models/tiny-mla-recall was trained on
// (reference/python/train_tiny_mla.py: NEEDLE and QUESTION, each padded as its row_passkey pads them).
const std::string kPasskeyQuestion = "What is the pass key? The pass key is ";

std::string passkey_needle(const std::string& k) { return " The pass key is " + k + ". Remember it. " + k + " is the pass key. "; }
std::string multikey_needle(const std::string& name, const std::string& k) {
  return " The pass key of " + name + " is " + k + ". Remember it. " + k + " is the pass key of " + name + ". ";
}
std::string multikey_question(const std::string& name) {
  return "\nWhat is the pass key of " + name + "? The pass key of " + name + " is ";
}
std::string multivalue_needle(const std::string& name, const std::string& k) {
  return " One of the pass keys of " + name + " is " + k + ". Remember it. ";
}
std::string multivalue_question(const std::string& name) {
  return "\nWhat are the pass keys of " + name + "? The pass keys of " + name + " are ";
}
std::string variable_needle(const std::string& name, const std::string& value) { return " VAR " + name + " = " + value + ". "; }
std::string variable_question(const std::string& k) { return "\nWhich variables are assigned the value " + k + "? They are "; }

std::string draw(Rng& rng, int64_t count, char first, int symbols) {
  std::string s;
  for (int64_t i = 0; i < count; ++i)
    s.push_back(static_cast<char>(first + std::min<int64_t>(symbols - 1, static_cast<int64_t>(rng.uniform() * symbols))));
  return s;
}
// `count` strings of `draw`, distinct: a repeat is drawn again
std::vector<std::string> draw_distinct(Rng& rng, int64_t count, int64_t length, char first, int symbols) {
  std::vector<std::string> out;
  while (static_cast<int64_t>(out.size()) < count) {
    std::string s = draw(rng, length, first, symbols);
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
  }
  return out;
}

// What a task inserts and asks: the needles with their depths (percent), the question, the answer.
struct Parts {
  std::vector<std::string> needles;
  std::vector<double> depths;
  std::string question, answer;
};

// Draws after the filler offset, in this order: names (if any), keys, distractor depths (multikey).
// The depths of needles that must follow each other: d_j = d + j (100 - d) / count.
Parts task_parts(TaskKind kind, double depth, Rng& rng) {
  Parts p;
  const auto spread = [&](int64_t count) {
    for (int64_t j = 0; j < count; ++j) p.depths.push_back(depth + static_cast<double>(j) * (100.0 - depth) / static_cast<double>(count));
  };
  switch (kind) {
    case TaskKind::Passkey: {
      const std::string k = draw(rng, kKeyDigits, '0', 10);
      p.needles = {passkey_needle(k)};
      p.depths = {depth};
      p.question = "\n" + kPasskeyQuestion;
      p.answer = k;
      break;
    }
    case TaskKind::NiahMultikey: {
      const std::vector<std::string> names = draw_distinct(rng, kNeedles, kNameLetters, 'A', 26);
      const std::vector<std::string> keys = draw_distinct(rng, kNeedles, kKeyDigits, '0', 10);
      for (int64_t j = 0; j < kNeedles; ++j) p.needles.push_back(multikey_needle(names[static_cast<size_t>(j)], keys[static_cast<size_t>(j)]));
      p.depths = {depth};  // the asked needle (0); the distractors anywhere
      for (int64_t j = 1; j < kNeedles; ++j) p.depths.push_back(rng.uniform() * 100.0);
      p.question = multikey_question(names[0]);
      p.answer = keys[0];
      break;
    }
    case TaskKind::NiahMultivalue: {
      const std::string name = draw(rng, kNameLetters, 'A', 26);
      const std::vector<std::string> keys = draw_distinct(rng, kNeedles, kKeyDigits, '0', 10);
      for (const std::string& k : keys) {
        p.needles.push_back(multivalue_needle(name, k));
        p.answer += (p.answer.empty() ? "" : ", ") + k;
      }
      spread(kNeedles);
      p.question = multivalue_question(name);
      break;
    }
    case TaskKind::VariableTracking: {
      const std::vector<std::string> names = draw_distinct(rng, kNeedles, kNameLetters, 'A', 26);
      const std::string k = draw(rng, kKeyDigits, '0', 10);
      for (int64_t j = 0; j < kNeedles; ++j) {
        p.needles.push_back(variable_needle(names[static_cast<size_t>(j)], j == 0 ? k : names[static_cast<size_t>(j - 1)]));
        p.answer += (j == 0 ? "" : " ") + names[static_cast<size_t>(j)];
      }
      spread(kNeedles);
      p.question = variable_question(k);
      break;
    }
    default: fail(ErrorKind::InvalidArgument, std::string("tasks: ") + task_name(kind) + " is one of RULER's tasks (ruler_tasks.cpp)");
  }
  return p;
}

}  // namespace

const char* task_name(TaskKind k) {
  switch (k) {
    case TaskKind::Passkey: return "passkey";
    case TaskKind::NiahMultikey: return "niah-multikey";
    case TaskKind::NiahMultivalue: return "niah-multivalue";
    case TaskKind::VariableTracking: return "variable-tracking";
    case TaskKind::NiahSingle1: return "niah_single_1";
    case TaskKind::NiahSingle2: return "niah_single_2";
    case TaskKind::NiahSingle3: return "niah_single_3";
    case TaskKind::NiahMultikey1: return "niah_multikey_1";
    case TaskKind::NiahMultikey2: return "niah_multikey_2";
    case TaskKind::NiahMultikey3: return "niah_multikey_3";
    case TaskKind::RulerNiahMultivalue: return "niah_multivalue";
    case TaskKind::NiahMultiquery: return "niah_multiquery";
    case TaskKind::Vt: return "vt";
    case TaskKind::Cwe: return "cwe";
    case TaskKind::Fwe: return "fwe";
  }
  return "?";
}

std::vector<std::string> task_names() {
  std::vector<std::string> names = {"passkey", "niah-multikey", "niah-multivalue", "variable-tracking"};
  for (TaskKind k : ruler_task_kinds()) names.push_back(task_name(k));
  names.push_back("ruler");
  return names;
}

std::vector<TaskKind> parse_tasks(const std::string& name) {
  if (name == "ruler") return ruler_task_kinds();
  for (TaskKind k : {TaskKind::Passkey, TaskKind::NiahMultikey, TaskKind::NiahMultivalue, TaskKind::VariableTracking})
    if (name == task_name(k)) return {k};
  for (TaskKind k : ruler_task_kinds())
    if (name == task_name(k)) return {k};
  if (name == "qa_1" || name == "qa_2")
    fail(ErrorKind::InvalidArgument, "--task " + name + ": RULER's QA tasks need " + (name == "qa_1" ? "SQuAD" : "HotpotQA") +
                                         ", which is not here (its 11 synthetic tasks are: --task ruler)");
  std::string all;
  for (const std::string& n : task_names()) all += (all.empty() ? "" : ", ") + n;
  fail(ErrorKind::InvalidArgument, "--task: unknown task '" + name + "' (" + all + ")");
}

const char* query_placement_name(QueryPlacement q) { return q == QueryPlacement::Aware ? "aware" : "agnostic"; }

int64_t task_fixed_bytes(TaskKind k) {
  Rng rng(0);
  const Parts p = task_parts(k, 0.0, rng);  // the lengths do not depend on the draws
  int64_t n = static_cast<int64_t>(p.question.size() + p.answer.size() + kTail.size());
  for (const std::string& s : p.needles) n += static_cast<int64_t>(s.size());
  return n;
}

std::vector<TaskFiller> tokenize_filler(const std::vector<FillerSource>& files, const Tokenizer& tok, int threads) {
  std::vector<TaskFiller> out;
  for (const FillerSource& f : files) {
    try {
      out.push_back(TaskFiller{f.name, tok.encode(f.bytes, threads)});
    } catch (const Error& e) {
      throw Error(e.kind(), "--text " + f.name + ": " + e.what());
    }
  }
  return out;
}

std::string task_token_text(const ModelConfig& cfg, const Tokenizer& tok, int64_t id) {
  if (id == cfg.bos_token_id) return "<bos>";
  if (id == cfg.eos_token_id) return "<eos>";
  if (id < 0 || id >= static_cast<int64_t>(tok.vocab_size())) return "<id " + std::to_string(id) + ">";
  const uint32_t one = static_cast<uint32_t>(id);
  return token_bytes_text(tok.decode(std::span<const uint32_t>(&one, 1)));
}

const char* context_unit(const Tokenizer& tok) { return tok.format() == kByteLevelFormat ? "bytes" : "tokens"; }

namespace {

}  // namespace

std::vector<int64_t> id_offsets(const std::vector<int64_t>& ids, const Tokenizer& tok) {
  std::vector<int64_t> at(ids.size() + 1, 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t one = static_cast<uint32_t>(ids[i]);
    at[i + 1] = at[i] + static_cast<int64_t>(tok.decode(std::span<const uint32_t>(&one, 1)).size());
  }
  return at;
}

namespace {

// The index of the id that starts at byte `byte` (`at` from id_offsets); every part of a sample is
// encoded on its own, so each part starts on an id (an internal error if not).
int64_t id_at_byte(const std::vector<int64_t>& at, int64_t byte) {
  const auto it = std::lower_bound(at.begin(), at.end(), byte);
  if (it == at.end() || *it != byte)
    fail(ErrorKind::InvalidArgument, "tasks: byte " + std::to_string(byte) + " of a sample does not start a token");
  return static_cast<int64_t>(it - at.begin());
}

}  // namespace

std::span<const uint32_t> take_filler(const std::vector<TaskFiller>& filler, int64_t F, double u, const std::string& task,
                                      const std::string& unit, int64_t context, TaskSample& out) {
  // offset floor(u n) over the n start positions in every file that fit F ids
  int64_t total = 0, longest = 0;
  for (const TaskFiller& f : filler) {
    total += std::max<int64_t>(0, static_cast<int64_t>(f.ids.size()) - F + 1);
    longest = std::max(longest, static_cast<int64_t>(f.ids.size()));
  }
  if (total == 0)
    fail(ErrorKind::InvalidArgument, "--text holds no " + std::to_string(F) + " consecutive " + unit + " in one file (its longest has " +
                                         std::to_string(longest) + "), the filler of a --context " + std::to_string(context) +
                                         " sample of " + task + "; a shorter --context or a longer text would fit");
  int64_t at = std::min(total - 1, static_cast<int64_t>(u * static_cast<double>(total)));
  out.filler_tokens = F;
  for (const TaskFiller& f : filler) {
    const int64_t here = std::max<int64_t>(0, static_cast<int64_t>(f.ids.size()) - F + 1);
    if (at < here) {
      out.source = f.name;
      out.filler_offset = at;
      return std::span<const uint32_t>(f.ids).subspan(static_cast<size_t>(at), static_cast<size_t>(F));
    }
    at -= here;
  }
  return {};
}

TaskSample make_task_sample(const TaskRequest& r, const std::vector<TaskFiller>& filler, const Tokenizer& tok,
                            const std::vector<std::string>& words) {
  if (is_ruler_task(r.kind)) return make_ruler_sample(r, filler, words, tok);
  const std::string task = std::string("--task ") + task_name(r.kind);
  const std::string unit = context_unit(tok);
  if (!(r.depth >= 0 && r.depth <= 100))
    fail(ErrorKind::InvalidArgument, "--depths: " + std::to_string(r.depth) + " is outside [0, 100] (percent of the filler)");
  Rng rng(r.seed, (static_cast<uint64_t>(r.context) << 24) ^ static_cast<uint64_t>(r.index));
  const double offset_draw = rng.uniform();  // the filler offset's draw comes first (docs/eval.md §7.2)
  const Parts p = task_parts(r.kind, r.depth, rng);
  // every part encoded on its own: each starts on a token boundary
  const auto encode = [&](const std::string& part) { return tok.encode(part); };
  std::vector<std::vector<uint32_t>> needles;
  for (const std::string& n : p.needles) needles.push_back(encode(n));
  const std::vector<uint32_t> question = encode(p.question), answer = encode(p.answer), tail = encode(kTail);
  int64_t fixed = static_cast<int64_t>(question.size() + answer.size() + tail.size());
  for (const auto& n : needles) fixed += static_cast<int64_t>(n.size());
  const int64_t F = r.context - fixed;
  if (F < 1)
    fail(ErrorKind::InvalidArgument, "--context " + std::to_string(r.context) + " is too short for " + task + ": its needles, "
                                     "question and answer take " + std::to_string(fixed) + " " + unit + ", so a context needs at least " +
                                     std::to_string(fixed + 1) + " (one filler " + (unit == "bytes" ? "byte" : "token") + ")");
  TaskSample out;
  out.request = r;
  const std::span<const uint32_t> text = take_filler(filler, F, offset_draw, task, unit, r.context, out);
  const auto append = [&](std::span<const uint32_t> ids) {
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.text += tok.decode(ids);
  };
  // insertion points in filler ids; equal points keep the needles' order
  std::vector<size_t> order(p.needles.size());
  std::vector<int64_t> at(p.needles.size());
  for (size_t j = 0; j < order.size(); ++j) {
    order[j] = j;
    at[j] = std::clamp<int64_t>(static_cast<int64_t>(std::floor(p.depths[j] / 100.0 * static_cast<double>(F))), 0, F);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return at[a] < at[b]; });
  int64_t from = 0;
  for (size_t j : order) {
    append(text.subspan(static_cast<size_t>(from), static_cast<size_t>(at[j] - from)));
    from = at[j];
    out.needle_at.push_back(static_cast<int64_t>(out.text.size()));
    append(needles[j]);
  }
  append(text.subspan(static_cast<size_t>(from)));
  out.question_at = static_cast<int64_t>(out.text.size());
  append(question);
  out.answer_at = static_cast<int64_t>(out.text.size());
  append(answer);
  append(tail);
  out.answer = p.answer;
  // the question's and the answer's ids, found by the byte offsets of each decoded id
  const std::vector<int64_t> offsets = id_offsets(out.ids, tok);
  out.question_first = id_at_byte(offsets, out.question_at);
  out.answer_first = id_at_byte(offsets, out.answer_at);
  out.answer_tokens = id_at_byte(offsets, out.answer_at + static_cast<int64_t>(out.answer.size())) - out.answer_first;
  out.refs = {TaskReference{out.answer, out.answer_first, out.answer_tokens}};
  const int64_t shift = r.bos ? 1 : 0, a = out.answer_token(), A = out.answer_tokens;
  out.prompt_len = r.placement == QueryPlacement::Aware ? a - 1 : out.question_first + shift;
  out.steps = a + A - 1 - out.prompt_len;
  return out;
}

Passkey find_passkey(const std::vector<int64_t>& tokens, const ModelConfig& cfg) {
  Passkey p;
  if (!cfg.byte_level_vocab) return p;
  // the text after the last question must be digits, '.', '\n'
  std::string text;
  for (int64_t t : tokens) text.push_back(t >= 0 && t < 256 ? static_cast<char>(t) : '\0');
  const size_t at = text.rfind(kPasskeyQuestion);
  if (at == std::string::npos) return p;
  size_t i = at + kPasskeyQuestion.size();
  const size_t first = i;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  if (i == first || i >= text.size() || text[i] != '.') return p;
  const std::string rest = text.substr(i + 1);
  if (rest.find_first_not_of("\n") != std::string::npos) return p;  // the key's line must end the input
  p.key = text.substr(first, i - first);
  for (size_t j = first; j < i; ++j) p.digits.push_back(static_cast<int64_t>(j));
  return p;
}

}  // namespace mla
