// src/eval/ruler_tasks.cpp — RULER's 11 synthetic tasks (mla/tasks.hpp, docs/eval.md §7.7): the
// samples of niah_single_1..3, niah_multikey_1..3, niah_multivalue, niah_multiquery, vt, cwe and
// fwe with RULER's templates, needle sentences, draws and default counts (NVIDIA/RULER,
// scripts/data/synthetic/*.py and scripts/synthetic.yaml), in the ids of the model's tokenizer.
// The generators are this project's; the template strings are RULER's, verbatim (they are the
// protocol), and are listed in docs/eval.md §7.7.
#include <algorithm>
#include <cmath>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "mla/error.hpp"
#include "mla/random.hpp"
#include "mla/tasks.hpp"

namespace mla {
namespace {

// ---- RULER's strings (scripts/data/synthetic/constants.py, niah.py, variable_tracking.py) -------

const std::string kNiahTemplate =
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. I will quiz you "
    "about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic {type_needle_v} for {query} "
    "mentioned in the provided text?";
const std::string kNiahAnswerPrefix = " The special magic {type_needle_v} for {query} mentioned in the provided text are";
const std::string kNiahNeedle = "One of the special magic {type_needle_v} for {key} is: {value}.";
const std::string kNoise = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
const std::string kVtTemplate =
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\nQuestion: Find all "
    "variables that are assigned the value {query} in the text above.";
const std::string kVtAnswerPrefix =
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are assigned the value "
    "{query}, they are: ";
const std::string kCweTemplate =
    "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones that appear "
    "most often.\n{context}\nQuestion: What are the 10 most common words in the above list?";
const std::string kCweAnswerPrefix = " Answer: The top 10 words that appear most often in the list are:";
const std::string kFweTemplate =
    "Read the following coded text and track the frequency of each coded word. Find the three most frequently appeared "
    "coded words. {context}\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the three "
    "most frequently appeared words in the above coded text?";
const std::string kFweAnswerPrefix = " Answer: According to the coded text above, the three most frequently appeared words are:";

// synthetic.yaml's settings of the niah tasks
enum class Haystack { Noise, Essay, Needle };
enum class Draw { Words, Numbers, Uuids };
struct NiahSpec {
  Haystack haystack;
  Draw key, value;
  int num_k, num_v, num_q;
};
NiahSpec niah_spec(TaskKind k) {
  switch (k) {
    case TaskKind::NiahSingle1: return {Haystack::Noise, Draw::Words, Draw::Numbers, 1, 1, 1};
    case TaskKind::NiahSingle2: return {Haystack::Essay, Draw::Words, Draw::Numbers, 1, 1, 1};
    case TaskKind::NiahSingle3: return {Haystack::Essay, Draw::Words, Draw::Uuids, 1, 1, 1};
    case TaskKind::NiahMultikey1: return {Haystack::Essay, Draw::Words, Draw::Numbers, 4, 1, 1};
    case TaskKind::NiahMultikey2: return {Haystack::Needle, Draw::Words, Draw::Numbers, 1, 1, 1};
    case TaskKind::NiahMultikey3: return {Haystack::Needle, Draw::Uuids, Draw::Uuids, 1, 1, 1};
    case TaskKind::RulerNiahMultivalue: return {Haystack::Essay, Draw::Words, Draw::Numbers, 1, 4, 1};
    case TaskKind::NiahMultiquery: return {Haystack::Essay, Draw::Words, Draw::Numbers, 1, 1, 4};
    default: break;
  }
  fail(ErrorKind::InvalidArgument, std::string("tasks: ") + task_name(k) + " is not a niah task");
}
const char* draw_name(Draw d) { return d == Draw::Words ? "words" : d == Draw::Numbers ? "numbers" : "uuids"; }

// RULER's DEPTHS: round(linspace(0, 100, 40)) (no ties at .5 occur)
std::vector<int> ruler_depths() {
  std::vector<int> d;
  for (int i = 0; i < 40; ++i) d.push_back(static_cast<int>(std::lround(100.0 * i / 39.0)));
  return d;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}
std::string fill(std::string s, const std::map<std::string, std::string>& values) {
  for (const auto& [k, v] : values) s = replace_all(s, "{" + k + "}", v);
  return s;
}

// ---- draws (mla::Rng) ---------------------------------------------------------------------

int64_t below(Rng& rng, int64_t n) { return std::min<int64_t>(n - 1, static_cast<int64_t>(rng.uniform() * static_cast<double>(n))); }
// random.sample(range(n), k): k distinct indices, in draw order (partial Fisher-Yates)
std::vector<int64_t> sample_indices(Rng& rng, int64_t n, int64_t k) {
  if (k > n) fail(ErrorKind::InvalidArgument, "tasks: " + std::to_string(k) + " distinct places asked of " + std::to_string(n));
  std::vector<int64_t> all(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
  for (int64_t i = 0; i < k; ++i) std::swap(all[static_cast<size_t>(i)], all[static_cast<size_t>(i + below(rng, n - i))]);
  all.resize(static_cast<size_t>(k));
  return all;
}
template <class T>
void shuffle(Rng& rng, std::vector<T>& v) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<size_t>(below(rng, static_cast<int64_t>(i)))]);
}
std::string letters(Rng& rng, int n, char first) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(first + below(rng, 26)));
  return s;
}
// a 7-digit number (randint(10^6, 10^7 - 1)), a word pair "w1-w2", a version-4 UUID
std::string draw_value(Rng& rng, Draw d, const std::vector<std::string>& words) {
  if (d == Draw::Numbers) return std::to_string(1000000 + below(rng, 9000000));
  if (d == Draw::Words) {
    const std::string& a = words[static_cast<size_t>(below(rng, static_cast<int64_t>(words.size())))];
    const std::string& b = words[static_cast<size_t>(below(rng, static_cast<int64_t>(words.size())))];
    return a + "-" + b;
  }
  uint64_t hi = rng.next_u64(), lo = rng.next_u64();
  hi = (hi & ~uint64_t{0xF000}) | uint64_t{0x4000};                 // version 4
  lo = (lo & ~(uint64_t{3} << 62)) | (uint64_t{2} << 62);         // variant 10xx
  static const char hex[] = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 32; ++i) {
    const uint64_t word = i < 16 ? hi : lo;
    s.push_back(hex[(word >> (4 * (15 - i % 16))) & 15]);
    if (i == 7 || i == 11 || i == 15 || i == 19) s.push_back('-');
  }
  return s;
}

// ---- a sample as parts --------------------------------------------------------------------
//
// prompt: head | context | question (through the answer prefix), every part encoded on its own;
// the context is lines joined by "\n" (noise and needle haystacks: each line a part, its "\n"
// with it), filler ids with needles inserted (essay), or one text (cwe, fwe). The continuation
// lead + refs joined by sep + tail is encoded as one text: each reference's ids are those whose
// bytes overlap it.
struct Layout {
  std::string head;
  std::vector<std::string> lines;
  bool essay = false;
  std::vector<std::string> needles;  // essay: inserted in this order at ascending depths
  std::vector<int> depths;           // essay: percent
  std::string text;                  // cwe, fwe: the context
  std::string question;
  std::string lead, sep, tail;
  std::vector<std::string> refs;
};

class Assembler {
 public:
  explicit Assembler(const Tokenizer& tok) : tok_(tok) {}
  const std::vector<uint32_t>& ids(const std::string& s) {
    auto it = cache_.find(s);
    if (it == cache_.end()) it = cache_.emplace(s, tok_.encode(s)).first;
    return it->second;
  }
  int64_t cost(const std::string& s) { return static_cast<int64_t>(ids(s).size()); }
  std::string continuation(const Layout& l) const {
    std::string c = l.lead;
    for (size_t i = 0; i < l.refs.size(); ++i) c += (i ? l.sep : "") + l.refs[i];
    return c + l.tail;
  }
  std::vector<std::string> line_parts(const Layout& l) const {
    std::vector<std::string> parts;
    for (size_t i = 0; i < l.lines.size(); ++i) parts.push_back(l.lines[i] + (i + 1 < l.lines.size() ? "\n" : ""));
    return parts;
  }
  // the ids a layout takes besides an essay's filler
  int64_t fixed_cost(const Layout& l) {
    int64_t n = cost(l.head) + cost(l.question) + cost(continuation(l)) + cost(l.text);
    for (const std::string& p : line_parts(l)) n += cost(p);
    for (const std::string& s : l.needles) n += cost(" " + s);
    return n;
  }
  const Tokenizer& tok() const { return tok_; }

 private:
  const Tokenizer& tok_;
  std::map<std::string, std::vector<uint32_t>> cache_;
};

// ---- the tasks' layouts at a haystack size n (lines, words; essay: unused) --------------------

Layout niah_layout(const NiahSpec& spec, int64_t n, Rng& rng, const std::vector<std::string>& words) {
  const int num_k = std::max(spec.num_k, spec.num_q);  // as RULER: a key per query
  const std::string tv = draw_name(spec.value);
  std::vector<std::string> keys;
  std::vector<std::pair<int, std::string>> needles;  // (key, value)
  for (int i = 0; i < num_k; ++i) {
    keys.push_back(draw_value(rng, spec.key, words));
    for (int j = 0; j < spec.num_v; ++j) needles.emplace_back(i, draw_value(rng, spec.value, words));
  }
  shuffle(rng, needles);
  const auto needle_text = [&](const std::string& key, const std::string& value) {
    return fill(kNiahNeedle, {{"type_needle_v", tv}, {"key", key}, {"value", value}});
  };
  Layout l;
  std::vector<std::string> needle_texts;
  for (const auto& [k, v] : needles) needle_texts.push_back(needle_text(keys[static_cast<size_t>(k)], v));
  if (spec.haystack == Haystack::Essay) {
    l.essay = true;
    l.needles = needle_texts;
    const std::vector<int> all = ruler_depths();
    for (int64_t i : sample_indices(rng, static_cast<int64_t>(all.size()), static_cast<int64_t>(needles.size())))
      l.depths.push_back(all[static_cast<size_t>(i)]);
    std::sort(l.depths.begin(), l.depths.end());
  } else {
    for (int64_t i = 0; i < n; ++i)
      l.lines.push_back(spec.haystack == Haystack::Noise ? kNoise
                                                         : needle_text(draw_value(rng, spec.key, words), draw_value(rng, spec.value, words)));
    std::vector<int64_t> at = sample_indices(rng, n, static_cast<int64_t>(needles.size()));
    std::sort(at.rbegin(), at.rend());  // RULER inserts at descending indices
    for (size_t i = 0; i < at.size(); ++i) l.lines.insert(l.lines.begin() + at[i], needle_texts[i]);
  }
  std::vector<int64_t> asked = sample_indices(rng, num_k, spec.num_q);
  std::vector<std::string> queries;
  for (int64_t i : asked) queries.push_back(keys[static_cast<size_t>(i)]);
  std::string query = queries.back();
  if (queries.size() > 1) {
    query.clear();
    for (size_t i = 0; i + 1 < queries.size(); ++i) query += (i ? ", " : "") + queries[i];
    query += ", and " + queries.back();
  }
  // the answers: the asked keys' values, each key's in the order its needles appear in the text
  std::vector<std::string> in_text = l.essay ? l.needles : l.lines;
  for (int64_t i : asked)
    for (const std::string& t : in_text)
      for (const auto& [k, v] : needles)
        if (k == i && t == needle_text(keys[static_cast<size_t>(k)], v) &&
            std::find(l.refs.begin(), l.refs.end(), v) == l.refs.end())
          l.refs.push_back(v);
  std::string tmpl = kNiahTemplate + kNiahAnswerPrefix;
  std::string type_v = tv;
  if (spec.num_q * spec.num_v == 1) {  // RULER's singular rewrite
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"Some", "A"}, {"are all", "is"}, {"are", "is"}, {"answers", "answer"}})
      tmpl = replace_all(tmpl, from, to);
    type_v.pop_back();
  }
  const size_t c = tmpl.find("{context}");
  l.head = fill(tmpl.substr(0, c), {{"type_needle_v", type_v}});
  l.question = fill(tmpl.substr(c + 9), {{"type_needle_v", type_v}, {"query", query}});
  l.lead = " ";
  l.sep = ", ";
  l.tail = ".\n";
  return l;
}

// vt: one chain of 4 hops in noise lines, after RULER's one in-context example (3-letter names,
// sized to 500 ids as RULER sizes it, its answer after it)
struct Chain {
  std::vector<std::string> vars, lines;
  std::string value;
};
Chain vt_chain(Rng& rng, int letters_per_name) {
  Chain c;
  while (c.vars.size() < 5) {
    std::string v = letters(rng, letters_per_name, 'A');
    if (std::find(c.vars.begin(), c.vars.end(), v) == c.vars.end()) c.vars.push_back(v);
  }
  c.value = std::to_string(10000 + below(rng, 89999));
  c.lines.push_back("VAR " + c.vars[0] + " = " + c.value);
  for (size_t j = 0; j + 1 < c.vars.size(); ++j) c.lines.push_back("VAR " + c.vars[j + 1] + " = VAR " + c.vars[j] + " ");
  return c;
}
std::string vt_context(const Chain& c, int64_t n, Rng& rng) {
  std::vector<std::string> lines(static_cast<size_t>(n), kNoise);
  std::vector<int64_t> at = sample_indices(rng, n, static_cast<int64_t>(c.lines.size()));
  std::sort(at.begin(), at.end());
  for (size_t j = 0; j < at.size(); ++j) lines.insert(lines.begin() + at[j] + static_cast<int64_t>(j), c.lines[j]);
  std::string s;
  for (size_t i = 0; i < lines.size(); ++i) s += (i ? "\n" : "") + lines[i];
  return replace_all(s, ". \n", ".\n");
}
std::string vt_prompt(const Chain& c, const std::string& context, bool question_only) {
  const std::string t = kVtTemplate + kVtAnswerPrefix;
  const size_t at = t.find("{context}");
  const std::map<std::string, std::string> v = {{"query", c.value}, {"num_v", "5"}};
  return question_only ? fill(t.substr(at + 9), v) : fill(t.substr(0, at), v) + context + fill(t.substr(at + 9), v);
}

// cwe: RULER's get_example: num_words distinct words, the first 10 common (repeated cr times),
// the rest ur times, shuffled, as "1. w 2. w ..."
std::pair<std::string, std::vector<std::string>> cwe_example(Rng& rng, int64_t num_words, int cr, int ur,
                                                             const std::vector<std::string>& words) {
  std::vector<std::string> chosen;
  for (int64_t i : sample_indices(rng, static_cast<int64_t>(words.size()), num_words)) chosen.push_back(words[static_cast<size_t>(i)]);
  std::vector<std::string> list;
  for (size_t i = 0; i < chosen.size(); ++i)
    for (int r = 0; r < (i < 10 ? cr : ur); ++r) list.push_back(chosen[i]);
  shuffle(rng, list);
  std::string s;
  for (size_t i = 0; i < list.size(); ++i) s += (i ? " " : "") + std::to_string(i + 1) + ". " + list[i];
  chosen.resize(10);
  return {s, chosen};
}
std::string numbered(const std::vector<std::string>& w) {
  std::string s;
  for (size_t i = 0; i < w.size(); ++i) s += (i ? " " : "") + std::to_string(i + 1) + ". " + w[i];
  return s;
}

// The layout of `kind` at haystack size n; `small` = RULER's settings below max_seq_length 4096.
Layout ruler_layout(TaskKind kind, int64_t n, int64_t context, Rng& rng, const std::vector<std::string>& words, Assembler& as) {
  switch (kind) {
    case TaskKind::Vt: {
      // the in-context example: RULER's vt at max_seq_length 500 (its largest noise count that fits)
      const Chain ex = vt_chain(rng, 3);
      Rng ex_rng = rng;
      int64_t lo = 5, hi = 200;  // at least a line per chain line
      while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        Rng r = ex_rng;
        if (as.cost(vt_prompt(ex, vt_context(ex, mid, r), false)) <= 500) lo = mid;
        else hi = mid - 1;
      }
      const std::string example = vt_prompt(ex, vt_context(ex, lo, ex_rng), false) + " " + ex.vars[0] + " " + ex.vars[1] + " " +
                                  ex.vars[2] + " " + ex.vars[3] + " " + ex.vars[4] + "\n";
      rng = ex_rng;  // the sample's own draws come after the example's
      const Chain c = vt_chain(rng, 5);
      Layout l;
      l.head = example + "\n" + vt_prompt(c, "", false).substr(0, kVtTemplate.find("{context}"));
      l.text = vt_context(c, n, rng);
      l.question = vt_prompt(c, "", true);
      l.refs = c.vars;
      l.sep = " ";
      l.tail = "\n";
      return l;
    }
    case TaskKind::Cwe: {
      const bool small = context < 4096;
      const auto [ex_text, ex_common] = cwe_example(rng, small ? 20 : 40, small ? 3 : 10, small ? 1 : 3, words);
      const auto [text, common] = cwe_example(rng, n, small ? 6 : 30, small ? 1 : 3, words);
      const std::string t = kCweTemplate + kCweAnswerPrefix;
      const size_t at = t.find("{context}");
      Layout l;
      l.head = t.substr(0, at) + ex_text + t.substr(at + 9) + " " + numbered(ex_common) + "\n" + t.substr(0, at);
      l.text = text;
      l.question = t.substr(at + 9);
      l.lead = " ";
      l.sep = " ";
      l.tail = "\n";
      for (size_t i = 0; i < common.size(); ++i) l.refs.push_back(common[i]);
      return l;
    }
    case TaskKind::Fwe: {
      // coded words: vocab_size = (max_seq_length - 50) / 50 distinct 6-letter words, vocab[0] = "..."
      const int64_t V = std::max<int64_t>(4, (context - 50) / 50);
      std::vector<std::string> vocab;
      while (static_cast<int64_t>(vocab.size()) < V) {
        std::string w = letters(rng, 6, 'a');
        if (std::find(vocab.begin(), vocab.end(), w) == vocab.end()) vocab.push_back(w);
      }
      std::sort(vocab.begin(), vocab.end());
      shuffle(rng, vocab);
      vocab[0] = "...";
      const double zeta2 = 1.6449340668482264;  // zeta(2) = pi^2 / 6; alpha = 2
      std::vector<std::string> sampled;
      for (int64_t k = 1; k <= V; ++k)
        for (int64_t c = 0; c < static_cast<int64_t>(static_cast<double>(n) * std::pow(static_cast<double>(k), -2.0) / zeta2); ++c)
          sampled.push_back(vocab[static_cast<size_t>(k - 1)]);
      shuffle(rng, sampled);
      const std::string t = kFweTemplate + kFweAnswerPrefix;
      const size_t at = t.find("{context}");
      Layout l;
      l.head = t.substr(0, at);
      for (size_t i = 0; i < sampled.size(); ++i) l.text += (i ? " " : "") + sampled[i];
      l.question = t.substr(at + 9);
      l.refs = {vocab[1], vocab[2], vocab[3]};
      l.lead = " ";
      l.sep = ", ";
      l.tail = ".\n";
      return l;
    }
    default: return niah_layout(niah_spec(kind), n, rng, words);
  }
}

bool uses_essay(TaskKind k) { return k != TaskKind::Vt && k != TaskKind::Cwe && k != TaskKind::Fwe && niah_spec(k).haystack == Haystack::Essay; }

}  // namespace

bool is_ruler_task(TaskKind k) { return k >= TaskKind::NiahSingle1; }

std::vector<TaskKind> ruler_task_kinds() {
  return {TaskKind::NiahSingle1,   TaskKind::NiahSingle2,   TaskKind::NiahSingle3,         TaskKind::NiahMultikey1,
          TaskKind::NiahMultikey2, TaskKind::NiahMultikey3, TaskKind::RulerNiahMultivalue, TaskKind::NiahMultiquery,
          TaskKind::Vt,            TaskKind::Cwe,           TaskKind::Fwe};
}

bool ruler_task_needs_words(TaskKind k) {
  if (k == TaskKind::Cwe) return true;
  if (k == TaskKind::Vt || k == TaskKind::Fwe) return false;
  const NiahSpec s = niah_spec(k);
  return s.key == Draw::Words || s.value == Draw::Words;
}

std::vector<std::string> ruler_words(const std::vector<FillerSource>& files) {
  std::map<std::string, int64_t> counts;
  const auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  for (const FillerSource& f : files) {
    const std::string& t = f.bytes;
    for (size_t i = 0; i < t.size();) {
      if (!alpha(t[i])) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < t.size() && alpha(t[j])) ++j;
      const std::string w = t.substr(i, j - i);
      if (w.size() >= 3 && w.size() <= 10 && std::all_of(w.begin(), w.end(), [](char c) { return c >= 'a' && c <= 'z'; })) ++counts[w];
      i = j;
    }
  }
  std::vector<std::string> out;
  for (const auto& [w, n] : counts)
    if (n >= kRulerWordMinCount) out.push_back(w);
  return out;  // sorted (std::map)
}

TaskSample make_ruler_sample(const TaskRequest& r, const std::vector<TaskFiller>& filler, const std::vector<std::string>& words,
                             const Tokenizer& tok) {
  const std::string task = std::string("--task ") + task_name(r.kind);
  const std::string unit = context_unit(tok);
  if (ruler_task_needs_words(r.kind) && words.size() < 20)
    fail(ErrorKind::InvalidArgument, task + " draws its words from --text's: lowercase words of 3-10 letters seen at least " +
                                         std::to_string(kRulerWordMinCount) + " times, and it has " + std::to_string(words.size()) +
                                         " (20 or more needed); a longer --text would give more");
  Assembler as(tok);
  const Rng base(r.seed, (static_cast<uint64_t>(r.context) << 24) ^ static_cast<uint64_t>(r.index));
  const bool essay = uses_essay(r.kind);
  // the largest haystack (lines, words) whose sample fits L ids, as RULER's binary search; an
  // essay's filler takes what the rest leaves
  const auto layout_at = [&](int64_t n) {
    Rng rng = base;
    return ruler_layout(r.kind, n, r.context, rng, words, as);
  };
  const int64_t least = r.kind == TaskKind::Cwe ? 11 : r.kind == TaskKind::Fwe ? 10 : essay ? 0 : 5;
  int64_t n = least;
  if (r.kind == TaskKind::Cwe && static_cast<int64_t>(words.size()) < least)
    fail(ErrorKind::InvalidArgument, task + " needs 11 distinct words from --text, it gives " + std::to_string(words.size()));
  const int64_t fixed_least = as.fixed_cost(layout_at(least));
  if (fixed_least + (essay ? 1 : 0) > r.context)
    fail(ErrorKind::InvalidArgument, "--context " + std::to_string(r.context) + " is too short for " + task + ": RULER's template, " +
                                         "needles, question and answer take " + std::to_string(fixed_least) + " " + unit +
                                         (essay ? " before any filler" : " with the smallest haystack") +
                                         ", so they do not fit");
  if (!essay) {
    int64_t lo = least, hi = std::max<int64_t>(least, r.context);
    if (r.kind == TaskKind::Cwe) hi = std::min<int64_t>(hi, static_cast<int64_t>(words.size()));
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (as.fixed_cost(layout_at(mid)) <= r.context) lo = mid;
      else hi = mid - 1;
    }
    n = lo;
  }
  const Layout l = layout_at(n);
  TaskSample out;
  out.request = r;
  const auto add = [&](std::span<const uint32_t> ids) {
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.text += tok.decode(ids);
  };
  add(as.ids(l.head));
  if (essay) {
    const int64_t F = r.context - as.fixed_cost(l);
    Rng rng = base;
    (void)ruler_layout(r.kind, n, r.context, rng, words, as);  // the draws after the layout's
    const std::span<const uint32_t> text = take_filler(filler, F, rng.uniform(), task, unit, r.context, out);
    // each needle at floor(depth F / 100), moved on to the next id that starts with white space
    // (RULER puts its needles between sentences)
    int64_t from = 0;
    for (size_t j = 0; j < l.needles.size(); ++j) {
      int64_t at = std::clamp<int64_t>(static_cast<int64_t>(std::floor(l.depths[j] / 100.0 * static_cast<double>(F))), from, F);
      while (at < F) {
        const std::string b = tok.decode(text.subspan(static_cast<size_t>(at), 1));
        if (!b.empty() && (b[0] == ' ' || b[0] == '\n')) break;
        ++at;
      }
      add(text.subspan(static_cast<size_t>(from), static_cast<size_t>(at - from)));
      out.needle_at.push_back(static_cast<int64_t>(out.text.size()) + 1);
      add(as.ids(" " + l.needles[j]));
      from = at;
    }
    add(text.subspan(static_cast<size_t>(from)));
  } else {
    out.source = "(" + std::string(task_name(r.kind)) + " haystack)";
    for (const std::string& p : as.line_parts(l)) {
      if (p.rfind("One of the special magic", 0) == 0 || p.rfind("VAR ", 0) == 0) out.needle_at.push_back(static_cast<int64_t>(out.text.size()));
      add(as.ids(p));
    }
    const int64_t context_at = static_cast<int64_t>(out.text.size());
    add(as.ids(l.text));
    if (r.kind == TaskKind::Vt)  // the chain's lines
      for (size_t at = out.text.find("VAR ", static_cast<size_t>(context_at)); at != std::string::npos; at = out.text.find("VAR ", at + 4))
        out.needle_at.push_back(static_cast<int64_t>(at));
  }
  out.question_at = static_cast<int64_t>(out.text.size());
  add(as.ids(l.question));
  const int64_t cont_at = static_cast<int64_t>(out.text.size());
  add(as.ids(as.continuation(l)));
  // the references' ids: those whose decoded bytes overlap each reference's bytes
  const std::vector<int64_t> at = id_offsets(out.ids, tok);
  const auto first_at_or_after = [&](int64_t byte) {
    return static_cast<int64_t>(std::lower_bound(at.begin(), at.end(), byte) - at.begin());
  };
  out.question_first = first_at_or_after(out.question_at);
  int64_t byte = cont_at + static_cast<int64_t>(l.lead.size());
  for (size_t i = 0; i < l.refs.size(); ++i) {
    if (i) byte += static_cast<int64_t>(l.sep.size());
    const int64_t b = byte, e = byte + static_cast<int64_t>(l.refs[i].size());
    const int64_t first = static_cast<int64_t>(std::upper_bound(at.begin(), at.end(), b) - at.begin()) - 1;
    out.refs.push_back(TaskReference{l.refs[i], first, first_at_or_after(e) - first});
    byte = e;
  }
  out.answer_first = out.refs.front().first;
  out.answer_tokens = out.refs.back().first + out.refs.back().tokens - out.answer_first;
  out.answer_at = at[static_cast<size_t>(out.answer_first)];
  out.answer = out.text.substr(static_cast<size_t>(out.answer_at),
                               static_cast<size_t>(at[static_cast<size_t>(out.answer_first + out.answer_tokens)] - out.answer_at));
  const int64_t shift = r.bos ? 1 : 0, a = out.answer_token(), A = out.answer_tokens;
  out.prompt_len = r.placement == QueryPlacement::Aware ? a - 1 : out.question_first + shift;
  out.steps = a + A - 1 - out.prompt_len;
  return out;
}

}  // namespace mla
