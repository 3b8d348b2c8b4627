// tests/unit/test_tasks.cpp — suite tasks: `mla-h2o eval --task` (mla/tasks.hpp, docs/eval.md §7),
// RULER-style retrieval samples generated from a filler and a seed, scored by exact match.
//
//   * generation: a sample is the same for the same seed and differs for another; sample s at one
//     context has the same filler and keys at every depth; every task's sample has exactly
//     --context bytes; the byte layout of each task spelled out by hand on a filler of known bytes
//     (the needle at floor(depth F / 100), the question, the answer, eval's P and N for both
//     placements); the passkey detector finds the passkey task's key.
//   * scoring: an answer read from hand-made predictions (exact, first miss, predicted text), the
//     cells and tasks.csv counted by hand, needle.svg's cells; teacher forcing is causal (a token
//     changed at one position changes no logit before it, for every policy), which is why the
//     teacher-forced exact match is greedy generation's.
//   * the shipped models/tiny-mla-recall: the full cache answers every passkey sample at 1 k bytes;
//     streaming at K = 64, whose cache cannot hold a needle at depth 10 % when the answer is
//     predicted, answers none; at a budget above the context it answers as full does.
//   * the CLI: outputs listed in report.json, the same files for the same seed, and one error
//     line with nothing written for each bad input.
#include <boost/test/unit_test.hpp>

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "mla/checkpoint.hpp"
#include "mla/error.hpp"
#include "mla/eval.hpp"
#include "mla/model.hpp"
#include "mla/policy.hpp"
#include "mla/tasks.hpp"
#include "mla/tokenizer.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

namespace {

using mla::QueryPlacement;
using mla::TaskKind;
using mla::TaskRequest;
using mla::TaskSample;
using mla::test::RunResult;
using mla::test::run_cli;
using mla::test::scratch_dir;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
size_t count_of(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

std::string recall_model() { return mla::test::data_dir() + "/../../models/tiny-mla-recall"; }
std::string fixture() { return mla::test::data_dir() + "/golden/whole-model/model"; }

// F bytes "a".."z" repeated: every byte of the filler is known.
std::string letters(int64_t F) {
  std::string s;
  for (int64_t i = 0; i < F; ++i) s.push_back(static_cast<char>('a' + i % 26));
  return s;
}

TaskRequest request(TaskKind kind, int64_t context, double depth, int64_t index = 0, uint64_t seed = 7,
                    QueryPlacement placement = QueryPlacement::Agnostic) {
  TaskRequest r;
  r.kind = kind;
  r.context = context;
  r.depth = depth;
  r.index = index;
  r.seed = seed;
  r.placement = placement;
  return r;
}

// The byte-level model's tokenizer, and a sample of the filler files under it.
const mla::Tokenizer& bytes_tok() {
  static const std::unique_ptr<mla::Tokenizer> t = mla::byte_level_tokenizer();
  return *t;
}
TaskSample sample_of(const TaskRequest& r, const std::vector<mla::FillerSource>& filler) {
  return mla::make_task_sample(r, mla::tokenize_filler(filler, bytes_tok()), bytes_tok());
}

const TaskKind kAll[] = {TaskKind::Passkey, TaskKind::NiahMultikey, TaskKind::NiahMultivalue, TaskKind::VariableTracking};

bool all_of_class(const std::string& s, char lo, char hi) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) { return c >= lo && c <= hi; });
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tasks)

// ---- generation -----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(samples_are_deterministic_from_the_seed) {
  const std::vector<mla::FillerSource> filler = {{"a.txt", letters(3000)}, {"b.txt", letters(5000).substr(7)}};
  for (TaskKind k : kAll) {
    BOOST_TEST_CONTEXT(mla::task_name(k)) {
      const TaskSample a = sample_of(request(k, 1500, 30), filler);
      const TaskSample b = sample_of(request(k, 1500, 30), filler);
      BOOST_TEST(a.text == b.text);
      BOOST_TEST(a.text.size() == 1500u);
      BOOST_TEST((a.source == b.source && a.filler_offset == b.filler_offset));
      // another seed or another index: another sample (filler offset or key)
      const TaskSample c = sample_of(request(k, 1500, 30, 0, 8), filler);
      const TaskSample d = sample_of(request(k, 1500, 30, 1), filler);
      BOOST_TEST(c.text != a.text);
      BOOST_TEST(d.text != a.text);
      // the same sample at another depth: the same filler, keys and names; the needles moved
      const TaskSample e = sample_of(request(k, 1500, 80), filler);
      BOOST_TEST((e.source == a.source && e.filler_offset == a.filler_offset));
      BOOST_TEST(e.answer == a.answer);
      BOOST_TEST(e.needle_at != a.needle_at);
      BOOST_TEST(e.text != a.text);
      // the filler lies in one file: the bytes outside the needles are that file's
      const std::string& file = a.source == "a.txt" ? filler[0].bytes : filler[1].bytes;
      BOOST_TEST(a.text.substr(0, static_cast<size_t>(a.needle_at.front())) ==
                 file.substr(static_cast<size_t>(a.filler_offset), static_cast<size_t>(a.needle_at.front())));
      BOOST_TEST(a.filler_tokens == 1500 - mla::task_fixed_bytes(k));
    }
  }
}

// Every task's layout on a filler of known bytes, spelled here independently of the generator.
BOOST_AUTO_TEST_CASE(layouts_by_hand) {
  // passkey: F = 200 filler bytes, one file of exactly F, so the offset is 0
  const std::string needle_head = " The pass key is ";
  const int64_t fixed = mla::task_fixed_bytes(TaskKind::Passkey);
  BOOST_TEST(fixed == static_cast<int64_t>(std::string(" The pass key is 12345. Remember it. 12345 is the pass key. ").size() +
                                           std::string("\nWhat is the pass key? The pass key is 12345.\n").size()));
  const int64_t F = 200, L = F + fixed;
  const std::vector<mla::FillerSource> filler = {{"f", letters(F)}};
  for (double depth : {0.0, 33.0, 100.0}) {
    const TaskSample s = sample_of(request(TaskKind::Passkey, L, depth), filler);
    const std::string key = s.answer;
    BOOST_TEST_REQUIRE(key.size() == 5u);
    BOOST_TEST(all_of_class(key, '0', '9'));
    const size_t at = static_cast<size_t>(std::floor(depth / 100.0 * F));  // 0, 66, 200
    const std::string expected = letters(F).substr(0, at) + " The pass key is " + key + ". Remember it. " + key +
                                 " is the pass key. " + letters(F).substr(at) + "\nWhat is the pass key? The pass key is " +
                                 key + ".\n";
    BOOST_TEST(s.text == expected);
    BOOST_TEST(s.filler_offset == 0);
    BOOST_TEST(s.needle_at.at(0) == static_cast<int64_t>(at));
    // eval's split, the BOS at token 0: the answer's first byte is token answer_at + 1
    const int64_t question = F + 60, answer = question + 39;  // the needle is 60 bytes, the question 39
    BOOST_TEST(s.question_at == question);
    BOOST_TEST(s.answer_at == answer);
    BOOST_TEST(s.prompt_len == question + 1);          // agnostic: BOS + haystack
    BOOST_TEST(s.steps == answer + 1 + 5 - 1 - (question + 1));
    const TaskSample aware = sample_of(request(TaskKind::Passkey, L, depth, 0, 7, QueryPlacement::Aware), filler);
    BOOST_TEST(aware.text == s.text);
    BOOST_TEST(aware.prompt_len == answer);           // all of the question but its last byte
    BOOST_TEST(aware.steps == 5);
    // the passkey detector (eval's --text inputs) finds this key where the answer is
    mla::ModelConfig cfg;
    cfg.byte_level_vocab = true;
    cfg.bos_token_id = 256;
    std::vector<int64_t> ids = {256};
    for (unsigned char c : s.text) ids.push_back(c);
    const mla::Passkey p = mla::find_passkey(ids, cfg);
    BOOST_TEST(p.key == key);
    BOOST_TEST(p.digits.front() == s.answer_token());
  }

  // niah-multikey: 4 needles of 4 distinct names and keys; the question asks the one at the depth
  {
    const int64_t Fm = 400, Lm = Fm + mla::task_fixed_bytes(TaskKind::NiahMultikey);
    const TaskSample s = sample_of(request(TaskKind::NiahMultikey, Lm, 50), {{"f", letters(Fm)}});
    BOOST_TEST_REQUIRE(s.needle_at.size() == 4u);
    const std::string q = s.text.substr(static_cast<size_t>(s.question_at), static_cast<size_t>(s.answer_at - s.question_at));
    BOOST_TEST_REQUIRE(q.rfind("\nWhat is the pass key of ", 0) == 0u);
    const std::string name = q.substr(25, 5);
    BOOST_TEST(all_of_class(name, 'A', 'Z'));
    BOOST_TEST(q == "\nWhat is the pass key of " + name + "? The pass key of " + name + " is ");
    const std::string asked = " The pass key of " + name + " is " + s.answer + ". Remember it. " + s.answer +
                              " is the pass key of " + name + ". ";
    BOOST_TEST(count_of(s.text, asked) == 1u);
    BOOST_TEST(count_of(s.text, " The pass key of ") == 4u + 1u);  // 4 needles, and the question
    BOOST_TEST(count_of(s.text, name) == 2u + 2u);                   // its needle, and the question
    // the asked needle starts at filler offset floor(0.5 F) plus the needles before it
    const size_t asked_at = s.text.find(asked);
    int64_t before = 0;
    for (int64_t n : s.needle_at)
      if (n < static_cast<int64_t>(asked_at)) before += 1;
    const int64_t needle_len = static_cast<int64_t>(asked.size());  // every needle has this length
    BOOST_TEST(static_cast<int64_t>(asked_at) == Fm / 2 + before * needle_len);
    BOOST_TEST(s.text.substr(static_cast<size_t>(s.answer_at)) == s.answer + ".\n");
  }

  // niah-multivalue: one name, 4 keys at depths d + j (100 - d) / 4; the answer lists them in text order
  {
    const int64_t Fv = 400, Lv = Fv + mla::task_fixed_bytes(TaskKind::NiahMultivalue);
    const TaskSample s = sample_of(request(TaskKind::NiahMultivalue, Lv, 20), {{"f", letters(Fv)}});
    BOOST_TEST_REQUIRE(s.needle_at.size() == 4u);
    const size_t name_at = s.text.find(" One of the pass keys of ") + 25;
    const std::string name = s.text.substr(name_at, 5);
    std::string answer;
    for (size_t j = 0; j < 4; ++j) {
      const std::string head = " One of the pass keys of " + name + " is ";
      const size_t n = static_cast<size_t>(s.needle_at[j]);
      BOOST_TEST_REQUIRE(s.text.compare(n, head.size(), head) == 0);
      const std::string key = s.text.substr(n + head.size(), 5);
      BOOST_TEST(s.text.substr(n, head.size() + 5 + 15) == head + key + ". Remember it. ");
      answer += (j ? ", " : "") + key;
      const int64_t filler_at = static_cast<int64_t>(std::floor((20.0 + static_cast<double>(j) * 20.0) / 100.0 * Fv));  // 80, 160, 240, 320
      BOOST_TEST(s.needle_at[j] == filler_at + static_cast<int64_t>(j * head.size() + j * 20));
    }
    BOOST_TEST(s.answer == answer);
    BOOST_TEST(s.text.substr(static_cast<size_t>(s.question_at)) ==
               "\nWhat are the pass keys of " + name + "? The pass keys of " + name + " are " + answer + ".\n");
  }

  // variable-tracking: VAR A = key, VAR B = A, VAR C = B, VAR D = C; the answer is the chain
  {
    const int64_t Ft = 300, Lt = Ft + mla::task_fixed_bytes(TaskKind::VariableTracking);
    const TaskSample s = sample_of(request(TaskKind::VariableTracking, Lt, 0), {{"f", letters(Ft)}});
    BOOST_TEST_REQUIRE(s.needle_at.size() == 4u);
    BOOST_TEST(s.needle_at[0] == 0);
    std::vector<std::string> names;
    std::string key;
    for (size_t j = 0; j < 4; ++j) {
      const size_t n = static_cast<size_t>(s.needle_at[j]);
      BOOST_TEST_REQUIRE(s.text.compare(n, 5, " VAR ") == 0);
      names.push_back(s.text.substr(n + 5, 5));
      const std::string value = s.text.substr(n + 13, 5);
      if (j == 0) key = value;
      else BOOST_TEST(value == names[j - 1]);
      BOOST_TEST(s.text.substr(n, 20) == " VAR " + names[j] + " = " + value + ". ");
    }
    BOOST_TEST(all_of_class(key, '0', '9'));
    BOOST_TEST(std::set<std::string>(names.begin(), names.end()).size() == 4u);
    BOOST_TEST(s.answer == names[0] + " " + names[1] + " " + names[2] + " " + names[3]);
    BOOST_TEST(s.text.substr(static_cast<size_t>(s.question_at)) ==
               "\nWhich variables are assigned the value " + key + "? They are " + s.answer + ".\n");
  }
}

BOOST_AUTO_TEST_CASE(bad_requests_are_one_error) {
  const std::vector<mla::FillerSource> filler = {{"f", letters(100)}};
  const auto message = [&](const TaskRequest& r) {
    try {
      (void)sample_of(r, filler);
    } catch (const mla::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const int64_t fixed = mla::task_fixed_bytes(TaskKind::Passkey);
  BOOST_TEST(contains(message(request(TaskKind::Passkey, fixed, 50)), "is too short for --task passkey"));
  BOOST_TEST(message(request(TaskKind::Passkey, fixed + 1, 50)).empty());  // one filler byte: a sample
  BOOST_TEST(contains(message(request(TaskKind::Passkey, fixed + 101, 50)), "holds no 101 consecutive bytes in one file"));
  BOOST_TEST(contains(message(request(TaskKind::Passkey, fixed + 50, 101)), "outside [0, 100]"));
}

// ---- scoring --------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(answers_cells_and_figure_by_hand) {
  mla::ModelConfig cfg;
  cfg.byte_level_vocab = true;
  cfg.bos_token_id = 256;
  const int64_t F = 40, L = F + mla::task_fixed_bytes(TaskKind::Passkey);
  std::vector<TaskSample> samples;
  std::vector<mla::EvalWindow> windows;
  // two samples at depth 10, one at depth 90; full right everywhere, "h2o" wrong at digit 2 of sample 0
  for (double d : {10.0, 90.0})
    for (int64_t i = 0; i < (d == 10.0 ? 2 : 1); ++i) {
      samples.push_back(sample_of(request(TaskKind::Passkey, L, d, i), {{"f", letters(F + 10)}}));
      const TaskSample& s = samples.back();
      mla::EvalResult r;
      const auto run = [&](const std::string& policy, bool wrong) {
        mla::EvalRun run;
        run.policy = mla::policy_preset(policy);
        run.budget = 8;
        for (int64_t x = s.prompt_len; x < s.prompt_len + s.steps; ++x) {
          mla::EvalPosition p;
          p.position = x;
          const int64_t j = x + 1 - s.answer_token();  // the answer token this position predicts
          p.predicted = j >= 0 ? static_cast<unsigned char>(s.answer[static_cast<size_t>(j)]) : 'q';
          if (wrong && j == 2) p.predicted = s.answer[2] == '0' ? '1' : '0';
          run.positions.push_back(p);
        }
        return run;
      };
      r.full = run("full", false);
      r.runs.push_back(run("h2o", samples.size() == 1));
      windows.push_back(mla::EvalWindow{s.source, s.filler_offset, r});
    }
  const mla::AnswerScore ok = mla::score_answer(samples[0], windows[0].result.full, cfg, bytes_tok());
  BOOST_TEST((ok.exact && ok.correct == 5 && ok.first_miss == -1 && ok.predicted == samples[0].answer));
  const mla::AnswerScore miss = mla::score_answer(samples[0], windows[0].result.runs[0], cfg, bytes_tok());
  BOOST_TEST((!miss.exact && miss.correct == 4 && miss.first_miss == 2));
  BOOST_TEST(miss.predicted.substr(0, 2) == samples[0].answer.substr(0, 2));
  BOOST_TEST(miss.predicted[2] != samples[0].answer[2]);
  // cells: full (depth 10: 2 of 2, depth 90: 1 of 1), h2o (depth 10: 1 of 2 exact, 9 of 10 digits)
  mla::TaskSettings t;
  t.contexts = {L};
  t.depths = {10, 90};
  t.samples = 2;
  const std::vector<mla::TaskCell> cells = mla::task_cells(t, samples, windows, {8}, cfg, bytes_tok());
  BOOST_TEST_REQUIRE(cells.size() == 4u);
  BOOST_TEST((cells[0].policy == "full" && cells[0].depth == 10.0 && cells[0].samples == 2 && cells[0].exact == 2));
  BOOST_TEST((cells[2].policy == "h2o" && cells[2].depth == 10.0 && cells[2].exact == 1 && cells[2].correct == 9 &&
              cells[2].tokens == 10));
  BOOST_TEST((cells[3].policy == "h2o" && cells[3].depth == 90.0 && cells[3].exact == 1));
  const std::string csv = mla::tasks_csv(t, mla::Compression::Decode, cells);
  BOOST_TEST(contains(csv, "\npasskey,agnostic,decode,h2o,8,," + std::to_string(L) + ",10,2,1,0.5,0.90000000000000002\n"), csv);
  const std::string per_sample = mla::task_samples_csv(t, samples, windows, {8}, cfg, bytes_tok());
  BOOST_TEST(count_of(per_sample, "\n") == 1u + 3u * 2u);
  BOOST_TEST(contains(per_sample, ",h2o,8,," + samples[0].answer + "," + miss.predicted + ",2,0\n"), per_sample);
  // needle.svg: a panel for full and one for h2o; the half-right cell is yellow, the wrong-free green
  const std::string svg = mla::needle_svg(t, cells, "t");
  BOOST_TEST(count_of(svg, "<g id=\"panel:") == 2u);
  BOOST_TEST(contains(svg, "<g id=\"panel:h2o@K=8\">"));
  BOOST_TEST(contains(svg, "fill=\"#fee08b\" stroke=\"#ffffff\"><title>h2o K=8, context " + std::to_string(L) +
                               ", depth 10 %: 1 of 2 exact</title>"), svg);
  BOOST_TEST(contains(svg, "fill=\"#1a9850\" stroke=\"#ffffff\"><title>full, context " + std::to_string(L) +
                               ", depth 90 %: 1 of 1 exact</title>"));
}

// Teacher forcing is causal: changing the token fed at position P + 5 changes no logit at the
// positions before it, for any policy under either protocol, so up to greedy decoding's first
// departure from the answer its inputs and outputs are the teacher-forced ones.
BOOST_AUTO_TEST_CASE(teacher_forcing_is_causal) {
  const mla::Checkpoint ckpt = mla::Checkpoint::open(fixture(), "");
  const mla::ModelConfig cfg = mla::load_model_config(ckpt.config_path());
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 29; ++i) ids.push_back((i * 37 + 11) % 97);
  for (mla::Compression c : {mla::Compression::Decode, mla::Compression::Prefill}) {
    mla::EvalOptions o;
    o.prompt_len = 16;
    o.steps = 12;
    o.budgets = {6};
    o.policies = mla::parse_policy_list(  // every preset, with windows and sinks that fit P = 16, K = 6
        "h2o:sinks=1,recent=2,h2o-normalized:sinks=1,recent=2,tova:sinks=1,recent=2,streaming:sinks=1,snapkv:window=4,"
        "snapkv-maxpool:window=4,pyramidkv:window=4,beta=2,knorm:sinks=1,recent=2,expected-attention:sinks=1,recent=2,future=8,"
        "scissorhands:window=4,recent=2,value-aware:sinks=1,recent=2,keydiff:sinks=1,recent=2,leverage:sinks=1,recent=2,"
        "cur:sinks=1,recent=2,local=4,lagkv:sinks=1,recent=2,lag=4,"
        "chunkkv:press=h2o,press.sinks=1,press.recent=2,chunk=3,criticalkv:press.window=4,adakv:press.window=4,alpha=50%,random,kvzip,oracle");
    o.precision = mla::Precision::FP32;
    o.compress = c;
    o.threads = 1;
    o.keep_logits = true;
    const mla::EvalResult a = mla::run_eval(ckpt, cfg, ids, o);
    std::vector<int64_t> changed = ids;
    changed[16 + 5] = (changed[16 + 5] + 50) % 97;
    const mla::EvalResult b = mla::run_eval(ckpt, cfg, changed, o);
    BOOST_TEST_REQUIRE(a.runs.size() == 21u);  // every preset but full (not a run)
    BOOST_TEST_REQUIRE(b.runs.size() == 21u);
    const int64_t V = cfg.attention.vocab_size;
    for (size_t k = 0; k < a.runs.size(); ++k) {
      BOOST_TEST_CONTEXT(a.runs[k].policy.label << " " << mla::compression_name(c)) {
        const std::vector<float>&la = a.runs[k].logits.data, &lb = b.runs[k].logits.data;
        BOOST_TEST(std::memcmp(la.data(), lb.data(), static_cast<size_t>(5 * V) * sizeof(float)) == 0);  // positions P .. P+4
        BOOST_TEST(std::memcmp(la.data() + 5 * V, lb.data() + 5 * V, static_cast<size_t>(V) * sizeof(float)) != 0);  // P+5 sees it
      }
    }
  }
}

// ---- the shipped recall model ---------------------------------------------------------------

// At 1 k bytes the full cache answers every passkey sample (the model card: 95-100 % per depth).
// streaming:sinks=4 at K = 64 holds the 4 sinks and the 60 newest tokens: when the first digit is
// predicted (agnostic: 39 question bytes decoded) none of the needle at depth 10 % is in any
// layer's cache, so no sample can be answered from it. At K = 2048 > the sample nothing is
// evicted and streaming answers as full does.
BOOST_AUTO_TEST_CASE(the_needle_is_lost_when_evicted_and_kept_at_full_cache) {
  const std::string out = scratch_dir("tasks-recall") + "/o";
  const RunResult r = run_cli("eval --checkpoint '" + recall_model() + "' --text '" + recall_model() +
                              "/eval/heldout.txt' --task passkey --context 1024 --depths 10 --samples 3 --cache-budget 64,2048 "
                              "--policy streaming:sinks=4 --quiet --threads 2 --out '" + out + "'");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string csv = mla::test::read_text(out + "/tasks.csv");
  BOOST_TEST(contains(csv, "\npasskey,agnostic,decode,full,64,,1024,10,3,3,1,1\n"), csv);
  BOOST_TEST(contains(csv, "\npasskey,agnostic,decode,streaming:sinks=4,64,,1024,10,3,0,0,"), csv);
  BOOST_TEST(contains(csv, "\npasskey,agnostic,decode,streaming:sinks=4,2048,,1024,10,3,3,1,1\n"), csv);
  // the needle lies before the kept tokens: its first byte is far below P + 1 - 60
  simdjson::dom::parser parser;
  simdjson::dom::element j = parser.load(out + "/report.json");
  for (simdjson::dom::element s : j["samples"].get_array()) {
    const int64_t P = s["prompt_len"].get_int64().value();
    BOOST_TEST(P == 1 + 1024 - 39 - 5 - 2);  // BOS + the haystack
  }
  // the predicted digits are shown; streaming's at K = 64 are not the answer
  const std::string per_sample = mla::test::read_text(out + "/task_samples.csv");
  BOOST_TEST(count_of(per_sample, ",streaming:sinks=4,64,") == 3u);
  BOOST_TEST(count_of(per_sample, ",0\n") == 3u, per_sample);  // exactly the three K = 64 rows are wrong
  // needle.svg: full once, then one panel per budget; the lost cell red, the kept ones green
  const std::string svg = mla::test::read_text(out + "/needle.svg");
  BOOST_TEST(count_of(svg, "<g id=\"panel:") == 3u);
  BOOST_TEST(contains(svg, "fill=\"#d73027\" stroke=\"#ffffff\"><title>streaming:sinks=4 K=64, context 1024, depth 10 %: 0 of 3"), svg);
  BOOST_TEST(contains(svg, "fill=\"#1a9850\" stroke=\"#ffffff\"><title>streaming:sinks=4 K=2048, context 1024, depth 10 %: 3 of 3"));
}

// ---- the CLI --------------------------------------------------------------------------------

// --compression-ratio: each sample's budget is K = round((1 - r) P) at its own P, so the same
// ratio runs at another K in each context; tasks.csv, report.json and needle.svg say both.
BOOST_AUTO_TEST_CASE(compression_ratios_per_context) {
  const std::string out = scratch_dir("tasks-ratio") + "/o";
  const RunResult r = run_cli("eval --checkpoint '" + recall_model() + "' --text '" + recall_model() +
                              "/eval/heldout.txt' --task passkey --context 300,600 --depths 50 --samples 1 "
                              "--compression-ratio 0.5,0.75 --compress prefill --policy streaming:sinks=2 --quiet --threads 2 --out '" +
                              out + "'");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  // agnostic P = 1 + L - 46 (the question, the answer and ".\n" follow the haystack): 255 and 555
  const int64_t P300 = 255, P600 = 555;
  const auto K = [](double ratio, int64_t P) { return std::to_string(std::llround((1 - ratio) * static_cast<double>(P))); };
  const std::string csv = mla::test::read_text(out + "/tasks.csv");
  BOOST_TEST(count_of(csv, "\n") == 1u + 2u * 2u * 2u);  // (full + streaming) x 2 ratios x 2 contexts
  BOOST_TEST(contains(csv, ",streaming:sinks=2," + K(0.75, P300) + ",0.75,300,50,1,"), csv);
  BOOST_TEST(contains(csv, ",streaming:sinks=2," + K(0.75, P600) + ",0.75,600,50,1,"), csv);
  BOOST_TEST(contains(csv, ",streaming:sinks=2," + K(0.5, P600) + ",0.5,600,50,1,"), csv);
  BOOST_TEST(contains(csv, ",full," + K(0.75, P300) + ",0.75,300,50,1,1,1,1\n"), csv);  // full repeated at each ratio
  simdjson::dom::parser parser;
  simdjson::dom::element j = parser.load(out + "/report.json");
  BOOST_TEST(j["samples"].at(0)["prompt_len"].get_int64().value() == P300);
  BOOST_TEST(j["samples"].at(1)["prompt_len"].get_int64().value() == P600);
  simdjson::dom::element first = j["compression_ratios"].at(0);  // K ascending: the larger ratio first
  BOOST_TEST(first["ratio"].get_double().value() == 0.75);
  BOOST_TEST(std::to_string(first["budget_at_context"]["600"].get_int64().value()) == K(0.75, P600));
  const std::string svg = mla::test::read_text(out + "/needle.svg");
  BOOST_TEST(contains(svg, "<g id=\"panel:streaming:sinks=2@r=0.5\">"));
  BOOST_TEST(contains(svg, "<title>streaming:sinks=2 r=0.75 (K=" + K(0.75, P600) + "), context 600, depth 50 %:"), svg);
  // eval.csv: each sample's rows at its own K
  const std::string ecsv = mla::test::read_text(out + "/eval.csv");
  BOOST_TEST(contains(ecsv, "\n1,streaming:sinks=2," + K(0.5, P600) + ","));
  BOOST_TEST(contains(ecsv, "\n0,streaming:sinks=2," + K(0.5, P300) + ","));
}

BOOST_AUTO_TEST_CASE(cli_outputs_and_determinism) {
  const std::string dir = scratch_dir("tasks-cli");
  const std::string base = "eval --checkpoint '" + recall_model() + "' --text '" + recall_model() +
                           "/eval/heldout.txt' --task niah-multikey --context 400,500 --depths 0,50,100 --samples 2 "
                           "--cache-budget 96 --policy h2o:sinks=2,recent=8 --query-placement aware --quiet --threads 2";
  const RunResult a = run_cli(base + " --out '" + dir + "/a'");
  BOOST_REQUIRE_MESSAGE(a.exit_code == 0, a.err);
  const RunResult b = run_cli(base + " --out '" + dir + "/b'");
  const RunResult c = run_cli(base + " --seed 3 --out '" + dir + "/c'");
  BOOST_REQUIRE((b.exit_code == 0 && c.exit_code == 0));
  for (const char* f : {"/tasks.csv", "/task_samples.csv", "/eval.csv", "/needle.svg"})
    BOOST_TEST(mla::test::read_text(dir + "/a" + f) == mla::test::read_text(dir + "/b" + f), f);
  BOOST_TEST(mla::test::read_text(dir + "/a/task_samples.csv") != mla::test::read_text(dir + "/c/task_samples.csv"));
  // tasks.csv: 2 runs (full, h2o) x 2 contexts x 3 depths
  const std::string csv = mla::test::read_text(dir + "/a/tasks.csv");
  BOOST_TEST(count_of(csv, "\n") == 1u + 2u * 2u * 3u);
  BOOST_TEST(csv.rfind("task,query_placement,compress,policy,budget,compression_ratio,context,depth,samples,exact,exact_match,"
                       "answer_token_accuracy\n", 0) == 0u);
  BOOST_TEST(contains(csv, "\nniah-multikey,aware,decode,\"h2o:sinks=2,recent=8\",96,,500,100,2,"), csv);
  BOOST_TEST(contains(a.out, "exact match"), a.out);
  simdjson::dom::parser parser;
  simdjson::dom::element j = parser.load(dir + "/a/report.json");
  std::set<std::string> files;
  for (simdjson::dom::element f : j["files"].get_array())
    files.insert(std::filesystem::path(std::string(f.get_string().value())).filename().string());
  BOOST_TEST((files == std::set<std::string>{"tasks.csv", "task_samples.csv", "eval.csv", "needle.svg", "report.json"}));
  BOOST_TEST(std::string(j["task"]["name"].get_string().value()) == "niah-multikey");
  BOOST_TEST(std::string(j["task"]["query_placement"].get_string().value()) == "aware");
  BOOST_TEST(j["samples"].get_array().size() == 12u);
  for (simdjson::dom::element s : j["samples"].get_array())  // aware: the prompt ends one byte before the answer
    BOOST_TEST(s["prompt_len"].get_int64().value() + 1 == s["answer_position"].get_int64().value());
  // eval.csv has every decoded position of every sample and run: aware decodes the answer's 5 positions
  BOOST_TEST(count_of(mla::test::read_text(dir + "/a/eval.csv"), "\n") == 1u + 12u * 2u * 5u);
}

namespace {

void expect_task_error(const std::string& args, const std::string& word, const std::string& checkpoint = recall_model()) {
  const std::string out = scratch_dir("tasks-err") + "/o";
  const RunResult r = run_cli("eval --checkpoint '" + checkpoint + "' --out '" + out + "' " + args);
  BOOST_TEST_CONTEXT("eval " << args << "\nstderr: " << r.err) {
    BOOST_TEST(r.exit_code != 0);
    BOOST_TEST(r.err.rfind("mla-h2o eval: error: ", 0) == 0u);
    BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    BOOST_TEST(contains(r.err, word));
    BOOST_TEST(!std::filesystem::exists(out));  // nothing written
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(cli_errors) {
  const std::string text = "--text '" + recall_model() + "/eval/heldout.txt' ";
  const std::string ok = text + "--task passkey --context 400 --cache-budget 64 --policy streaming --quiet ";
  // a context too short for the needles and the question (passkey: 106 bytes besides the filler; variable-tracking 161)
  expect_task_error(text + "--task passkey --context 106 --cache-budget 64", "--context 106 is too short for --task passkey: its "
                                                                             "needles, question and answer take 106 bytes");
  expect_task_error(text + "--task variable-tracking --context 161 --cache-budget 64", "too short for --task variable-tracking");
  // a model with neither a tokenizer nor a byte-level vocabulary
  expect_task_error(ok, "holds no tokenizer.json or tiktoken.model and the model is not byte-level", fixture());
  // bad --depths, --samples 0, an unknown task
  expect_task_error(ok + "--depths 10,abc", "--depths: 'abc' is not a number");
  expect_task_error(ok + "--depths 10,", "--depths: '' is not a number");
  expect_task_error(ok + "--depths 120", "--depths 120 is outside [0, 100]");
  expect_task_error(ok + "--depths -5", "outside [0, 100]");
  expect_task_error(ok + "--depths 50,50", "--depths gives 50 twice");
  expect_task_error(ok + "--samples 0", "--samples: 0 is out of range");
  expect_task_error(text + "--task needle --context 400 --cache-budget 64", "unknown task 'needle'");
  // flags the layout replaces, flags without --task, a filler too short
  expect_task_error(ok + "--prompt-len 100", "leave --prompt-len out");
  expect_task_error(ok + "--compression-ratio 0.5", "--cache-budget and --compression-ratio are two ways");
  expect_task_error(text + "--task passkey --context 400 --compression-ratio 0.5,0.5", "gives a ratio twice");
  expect_task_error(text + "--task passkey --context 400 --compression-ratio 1.5", "outside [0, 1)");
  expect_task_error(text + "--task passkey --context 400 --compression-ratio 0.999 --policy streaming",
                    "leaves K = round((1 - r) P) = 0 of P = 355 (the prompt of a --context 400 sample) tokens");
  expect_task_error(text + "--task passkey --cache-budget 64", "needs --context");
  expect_task_error("--task passkey --context 400 --cache-budget 64", "needs --text");
  expect_task_error(text + "--prompt-len 10 --steps 4 --cache-budget 8 --depths 10", "--depths is a flag of the retrieval tasks");
  const std::string small = scratch_dir("tasks-small") + "/f.txt";
  mla::test::write_text(small, "a short filler");
  expect_task_error("--text '" + small + "' --task passkey --context 400 --cache-budget 64", "holds no 294 consecutive bytes in one file (its longest has 14)");
  // a ratio whose K at some context leaves no room after what a policy protects: that context and its Ks named
  expect_task_error(text + "--task passkey --context 400,2000 --compression-ratio 0.9 --policy snapkv",
                    "(--compression-ratio at --context 400, P = 355: 0.9 -> " + std::to_string(std::llround((1 - 0.9) * 355.0)) + ")");
  // a budget that leaves no room after what a policy protects (the eval check, per context)
  expect_task_error(text + "--task passkey --context 400 --cache-budget 64 --policy h2o --sinks 30 --recent 40", "never evicts");
}

// ---- RULER's tasks (docs/eval.md §7.7) ------------------------------------------------------

namespace {

std::string replace_word(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}
std::vector<std::string> recall_words() {
  static const std::vector<std::string> w =
      mla::ruler_words({{"heldout.txt", mla::test::read_text(recall_model() + "/eval/heldout.txt")}});
  return w;
}
TaskSample ruler_sample(TaskKind k, int64_t L, int64_t index = 0) {
  static const std::vector<mla::TaskFiller> filler =
      mla::tokenize_filler({{"heldout.txt", mla::test::read_text(recall_model() + "/eval/heldout.txt")}}, bytes_tok());
  return mla::make_task_sample(request(k, L, 0, index), filler, bytes_tok(), recall_words());
}
// the bytes of reference r in the sample: its ids (one a byte here)
std::string ref_bytes(const TaskSample& s, const mla::TaskReference& r) {
  std::string out;
  for (int64_t i = r.first; i < r.first + r.tokens; ++i) out.push_back(static_cast<char>(s.ids[static_cast<size_t>(i)]));
  return out;
}

}  // namespace

// Every RULER task's sample: at most --context ids, RULER's template strings (spelled here from
// RULER's constants.py, with its singular rewrite for one value), its needles in the context, and
// each reference at its ids in the teacher-forced continuation.
BOOST_AUTO_TEST_CASE(ruler_layouts) {
  BOOST_TEST_REQUIRE(recall_words().size() >= 20u);
  const std::vector<std::string> words = recall_words();
  BOOST_TEST(std::is_sorted(words.begin(), words.end()));
  const std::string single_head = "A special magic number is hidden within the following text. Make sure to memorize it. I will quiz "
                                  "you about the number afterwards.\n";
  const std::string multi_head = "Some special magic numbers are hidden within the following text. Make sure to memorize it. I will "
                                 "quiz you about the numbers afterwards.\n";
  for (TaskKind k : mla::ruler_task_kinds()) {
    BOOST_TEST_CONTEXT(mla::task_name(k)) {
      const TaskSample s = ruler_sample(k, 2048);
      BOOST_TEST(s.ids.size() <= 2048u);
      BOOST_TEST(s.ids.size() >= 1900u, s.ids.size());  // the haystack fills the context
      BOOST_TEST_REQUIRE(!s.refs.empty());
      for (const mla::TaskReference& r : s.refs) BOOST_TEST(ref_bytes(s, r) == r.text);
      const std::string context = s.text.substr(0, static_cast<size_t>(s.question_at));
      // the question through the answer prefix, and the continuation's lead (" " but for vt) before the first reference
      const std::string question = s.text.substr(static_cast<size_t>(s.question_at), static_cast<size_t>(s.answer_at - s.question_at) -
                                                                                        (k == TaskKind::Vt ? 0 : 1));
      BOOST_TEST(s.text.substr(static_cast<size_t>(s.question_at + static_cast<int64_t>(question.size())), 1) == (k == TaskKind::Vt ? s.refs[0].text.substr(0, 1) : " "));
      if (k == TaskKind::Vt) {
        BOOST_TEST_REQUIRE(s.refs.size() == 5u);
        const size_t eq = question.find("assigned the value ") + 19;
        const std::string value = question.substr(eq, 5);
        BOOST_TEST(all_of_class(value, '0', '9'));
        BOOST_TEST(contains(context, "VAR " + s.refs[0].text + " = " + value + "\n"));
        for (size_t j = 1; j < 5; ++j) BOOST_TEST(contains(context, "VAR " + s.refs[j].text + " = VAR " + s.refs[j - 1].text + " \n"));
        BOOST_TEST(question == "\nQuestion: Find all variables that are assigned the value " + value + " in the text above. Answer: "
                               "According to the chain(s) of variable assignment in the text above, 5 variables are assigned the "
                               "value " + value + ", they are: ");
        BOOST_TEST(count_of(context, "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n") == 2u);
        BOOST_TEST(s.text.substr(static_cast<size_t>(s.answer_at)) == s.refs[0].text + " " + s.refs[1].text + " " + s.refs[2].text +
                                                                       " " + s.refs[3].text + " " + s.refs[4].text + "\n");
      } else if (k == TaskKind::Cwe) {
        BOOST_TEST_REQUIRE(s.refs.size() == 10u);
        BOOST_TEST(context.rfind("Below is a numbered list of words. In these words, some appear more often than others. Memorize "
                                 "the ones that appear most often.\n", 0) == 0u);
        BOOST_TEST(question == "\nQuestion: What are the 10 most common words in the above list? Answer: The top 10 words that "
                               "appear most often in the list are:");
        const std::string list = context.substr(context.rfind("most often.\n") + 12);  // the asked list, after the example
        for (const mla::TaskReference& r : s.refs) BOOST_TEST(count_of(list, ". " + r.text + " ") + count_of(list, ". " + r.text + "\n") >= 5u, r.text);
      } else if (k == TaskKind::Fwe) {
        BOOST_TEST_REQUIRE(s.refs.size() == 3u);
        BOOST_TEST(context.rfind("Read the following coded text and track the frequency of each coded word. Find the three most "
                                 "frequently appeared coded words. ", 0) == 0u);
        BOOST_TEST(question == "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the three most "
                               "frequently appeared words in the above coded text? Answer: According to the coded text above, the "
                               "three most frequently appeared words are:");
        const auto n = [&](const std::string& w) { return count_of(" " + context + " ", " " + w + " "); };
        BOOST_TEST((n("...") > n(s.refs[0].text) && n(s.refs[0].text) > n(s.refs[1].text) && n(s.refs[1].text) > n(s.refs[2].text)));
        BOOST_TEST(n(s.refs[2].text) > 0u);
      } else {
        const bool one = k == TaskKind::NiahSingle1 || k == TaskKind::NiahSingle2 || k == TaskKind::NiahSingle3 ||
                         k == TaskKind::NiahMultikey1 || k == TaskKind::NiahMultikey2 || k == TaskKind::NiahMultikey3;
        const std::string tv = k == TaskKind::NiahSingle3 || k == TaskKind::NiahMultikey3 ? "uuid" : "number";
        BOOST_TEST(context.rfind(one ? replace_word(single_head, "number", tv) : multi_head, 0) == 0u);
        const size_t refs = k == TaskKind::RulerNiahMultivalue || k == TaskKind::NiahMultiquery ? 4u : 1u;
        BOOST_TEST(s.refs.size() == refs);
        // each value in its needle sentence, the question asking for its key(s)
        for (const mla::TaskReference& r : s.refs) {
          const size_t at = context.find(" is: " + r.text + ".");
          BOOST_TEST_REQUIRE(at != std::string::npos);
          const size_t head = context.rfind("One of the special magic " + tv + "s for ", at);
          BOOST_TEST_REQUIRE(head != std::string::npos);
          const std::string key = context.substr(head + 31 + tv.size(), at - head - 31 - tv.size());
          BOOST_TEST(contains(question, key));
          if (tv == "number") BOOST_TEST((r.text.size() == 7u && all_of_class(r.text, '0', '9')));
          else BOOST_TEST((r.text.size() == 36u && r.text[14] == '4' && r.text[8] == '-'));
        }
        if (one)
          BOOST_TEST(contains(question, "\nWhat is the special magic " + tv + " for "), question);
        else
          BOOST_TEST(contains(question, "\nWhat are all the special magic numbers for "), question);
        BOOST_TEST(contains(question, one ? " mentioned in the provided text? The special magic " + tv + " for "
                                          : " mentioned in the provided text? The special magic numbers for "));
        BOOST_TEST(question.ends_with(one ? " mentioned in the provided text is" : " mentioned in the provided text are"));
        if (k == TaskKind::NiahMultiquery) BOOST_TEST(contains(question, ", and "));
        const size_t needles = count_of(context, "One of the special magic ");
        if (k == TaskKind::NiahMultikey2 || k == TaskKind::NiahMultikey3) BOOST_TEST(needles > 5u);  // the needle haystack
        else BOOST_TEST(needles == (k == TaskKind::NiahMultikey1 || refs == 4u ? 4u : 1u));
        if (k == TaskKind::NiahSingle1) BOOST_TEST(count_of(context, "The grass is green. The sky is blue. The sun is yellow. Here we go. "
                                                                     "There and back again.\n") > 5u);
        std::string cont = " ";
        for (size_t i = 0; i < s.refs.size(); ++i) cont += (i ? ", " : "") + s.refs[i].text;
        BOOST_TEST(s.text.substr(static_cast<size_t>(s.answer_at) - 1) == cont + ".\n");
      }
    }
  }
  // needles that do not fit the context: one error line naming what they take
  try {
    (void)ruler_sample(TaskKind::Vt, 300);
    BOOST_ERROR("a 300-byte vt sample was made");
  } catch (const mla::Error& e) {
    BOOST_TEST(contains(e.what(), "--context 300 is too short for --task vt: RULER's template, needles, question and answer take "),
               e.what());
  }
}

// string_match_all by hand: a niah_multivalue sample's 4 values, one of whose digits the run
// misses (3 of 4 found: 75), and a miss in a separator only (4 of 4); the cell and RULER's
// average over two tasks in tasks.csv.
BOOST_AUTO_TEST_CASE(ruler_string_match_all_by_hand) {
  mla::ModelConfig cfg;
  cfg.byte_level_vocab = true;
  cfg.bos_token_id = 256;
  std::vector<TaskSample> samples = {ruler_sample(TaskKind::RulerNiahMultivalue, 900), ruler_sample(TaskKind::NiahSingle1, 900)};
  std::vector<mla::EvalWindow> windows;
  for (size_t w = 0; w < samples.size(); ++w) {
    const TaskSample& s = samples[w];
    const auto run = [&](const std::string& policy, int64_t wrong_id) {
      mla::EvalRun run;
      run.policy = mla::policy_preset(policy);
      run.budget = 8;
      for (int64_t x = s.prompt_len; x < s.prompt_len + s.steps; ++x) {
        mla::EvalPosition p;
        const int64_t id = x + 1 - 1;  // the sample id this position predicts (token x + 1, BOS first)
        p.predicted = id >= 0 && id < static_cast<int64_t>(s.ids.size()) ? s.ids[static_cast<size_t>(id)] : 0;
        if (id == wrong_id) p.predicted = (p.predicted + 1) % 256;
        run.positions.push_back(p);
      }
      return run;
    };
    mla::EvalResult r;
    r.full = run("full", -1);
    // h2o: sample 0 misses the 3rd digit of its 2nd value; sample 1 the "." after its value, which
    // no decoded position predicts (the scored span ends with the last reference)
    r.runs.push_back(run("h2o", w == 0 ? s.refs[1].first + 2 : s.refs[0].first + s.refs[0].tokens));
    windows.push_back(mla::EvalWindow{"", 0, r});
  }
  const mla::AnswerScore a = mla::score_answer(samples[0], windows[0].result.runs[0], cfg, bytes_tok());
  BOOST_TEST((a.refs == 4 && a.found == 3 && !a.exact));
  const mla::AnswerScore b = mla::score_answer(samples[1], windows[1].result.runs[0], cfg, bytes_tok());
  BOOST_TEST((b.refs == 1 && b.found == 1));
  mla::TaskSettings t;
  t.kind = TaskKind::RulerNiahMultivalue;
  t.kinds = {TaskKind::RulerNiahMultivalue, TaskKind::NiahSingle1};
  t.contexts = {900};
  t.depths = {0};
  t.samples = 1;
  const std::vector<mla::TaskCell> cells = mla::task_cells(t, samples, windows, {8}, cfg, bytes_tok());
  BOOST_TEST_REQUIRE(cells.size() == 4u);  // (full, h2o) x 2 tasks
  BOOST_TEST(mla::string_match_all(cells[2]) == 75.0);
  BOOST_TEST(mla::string_match_all(cells[3]) == 100.0);
  const std::string csv = mla::tasks_csv(t, mla::Compression::Decode, cells);
  BOOST_TEST(csv.rfind("task,query_placement,compress,policy,budget,compression_ratio,context,samples,references,found,"
                       "string_match_all,exact_match,answer_token_accuracy\n", 0) == 0u);
  BOOST_TEST(contains(csv, "\nniah_multivalue,agnostic,decode,h2o,8,,900,1,4,3,75,0,"), csv);
  BOOST_TEST(contains(csv, "\nniah_single_1,agnostic,decode,h2o,8,,900,1,1,1,100,1,1\n"), csv);
  BOOST_TEST(contains(csv, "\nruler,agnostic,decode,h2o,8,,900,2,5,4,87.5,,\n"), csv);           // (75 + 100) / 2
  BOOST_TEST(contains(csv, "\nruler,agnostic,decode,full,8,,900,2,5,5,100,,\n"), csv);
  // ruler.svg with --cache-budget: K on the x axis, the averages above as the dots' values
  const std::string svg = mla::ruler_svg(t, mla::Compression::Decode, cells, "t");
  BOOST_TEST(contains(svg, "<title>h2o K=8: 87.5</title>"), svg);
  BOOST_TEST(count_of(svg, "<title>full: 100</title>") == 1u, svg);  // one K: full's line is one point
  BOOST_TEST(contains(svg, ">cache budget K (latent rows per layer)</text>"), svg);
  BOOST_TEST(count_of(svg, "<polyline ") == 2u);
}

// ruler.svg from hand-made cells: one panel per context, a line per policy in each (ids unique in
// the file), the ratios as x labels, the dots at the averages of the two tasks' scores.
BOOST_AUTO_TEST_CASE(ruler_svg_panels_by_hand) {
  mla::TaskSettings t;
  t.kind = TaskKind::NiahSingle1;
  t.kinds = {TaskKind::NiahSingle1, TaskKind::Vt};
  t.contexts = {1000, 2000};
  t.depths = {0};
  t.ratios = {0.5, 0.25};
  t.context_unit = "bytes";
  std::vector<mla::TaskCell> cells;
  // slot b: full then snapkv; per task and context one sample scored found / refs
  for (size_t b = 0; b < 2; ++b)
    for (const char* policy : {"full", "snapkv"})
      for (TaskKind k : t.kinds)
        for (int64_t L : t.contexts) {
          mla::TaskCell c;
          c.kind = k;
          c.policy = policy;
          c.slot = b;
          c.ratio = t.ratios[b];
          c.context = L;
          c.budget = std::llround((1 - c.ratio) * static_cast<double>(L));
          c.samples = 1;
          c.refs = 4;
          c.found = std::string(policy) == "full" ? 4 : static_cast<int64_t>(b) + (k == TaskKind::Vt ? 1 : 0) + (L == 2000 ? 1 : 0);
          c.match_sum = static_cast<double>(c.found) / 4.0;
          cells.push_back(c);
        }
  const std::string svg = mla::ruler_svg(t, mla::Compression::Prefill, cells, "t");
  BOOST_TEST(count_of(svg, "<polyline ") == 4u);  // (full, snapkv) x 2 contexts
  for (const char* id : {"ruler:full@1000", "ruler:snapkv@1000", "ruler:full@2000", "ruler:snapkv@2000"})
    BOOST_TEST(count_of(svg, std::string("id=\"") + id + "\"") == 1u, id);
  BOOST_TEST(contains(svg, ">context 1000 bytes, query agnostic, --compress prefill</text>"), svg);
  BOOST_TEST(contains(svg, ">context 2000 bytes, query agnostic, --compress prefill</text>"), svg);
  BOOST_TEST(count_of(svg, "text-anchor=\"middle\">0.25</text>") == 2u);
  BOOST_TEST(count_of(svg, "text-anchor=\"middle\">0.5</text>") == 2u);
  // snapkv at r = 0.5 (slot 0), context 1000: (0/4 + 1/4) x 100 / 2 tasks = 12.5; r = 0.25, 2000: (2/4 + 3/4) / 2 = 62.5
  BOOST_TEST(contains(svg, "<title>snapkv r=0.5 (K=500): 12.5</title>"), svg);
  BOOST_TEST(contains(svg, "<title>snapkv r=0.25 (K=1500): 62.5</title>"), svg);
  BOOST_TEST(count_of(svg, "<title>full: 100</title>") == 4u);  // both ends of each panel's span
  // the x axis ascends: r = 0.25 left of r = 0.5 in the first panel's snapkv line
  const size_t line = svg.find("id=\"ruler:snapkv@1000\"");
  const size_t pts = svg.find("points=\"", line) + 8;
  BOOST_TEST(svg.substr(pts, 6) == "70.00,");
}

// --task ruler on the recall model: every task's row and RULER's average per run in tasks.csv
// (the average recomputed here from the rows), one sample per task; bad input is one line.
BOOST_AUTO_TEST_CASE(cli_ruler_all_tasks) {
  const std::string out = scratch_dir("tasks-ruler") + "/o";
  const RunResult r = run_cli("eval --checkpoint '" + recall_model() + "' --text '" + recall_model() +
                              "/eval/heldout.txt' --task ruler --context 2048 --samples 1 --cache-budget 128 --policy "
                              "streaming:sinks=4 --quiet --threads 2 --out '" + out + "'");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string csv = mla::test::read_text(out + "/tasks.csv");
  BOOST_TEST(count_of(csv, "\n") == 1u + 2u * 11u + 2u);  // (full, streaming) x 11 tasks, then 2 averages
  for (const char* run : {"full", "streaming:sinks=4"}) {
    double sum = 0;
    for (TaskKind k : mla::ruler_task_kinds()) {
      const std::string head = std::string("\n") + mla::task_name(k) + ",agnostic,decode," + run + ",128,,2048,1,";
      const size_t at = csv.find(head);
      BOOST_TEST_REQUIRE(at != std::string::npos, head);
      std::vector<std::string> f;
      std::string line = csv.substr(at + 1, csv.find('\n', at + 1) - at - 1), x;
      for (char c : line + ",") {
        if (c == ',') { f.push_back(x); x.clear(); } else { x += c; }
      }
      sum += std::stod(f.at(10));
    }
    const size_t at = csv.find(std::string("\nruler,agnostic,decode,") + run + ",128,,2048,11,");
    BOOST_TEST_REQUIRE(at != std::string::npos, csv);
    std::string line = csv.substr(at + 1, csv.find('\n', at + 1) - at - 1);
    for (int i = 0; i < 10; ++i) line = line.substr(line.find(',') + 1);
    BOOST_TEST(std::abs(std::stod(line.substr(0, line.find(','))) - sum / 11) < 1e-9, line);
  }
  BOOST_TEST(!std::filesystem::exists(out + "/needle.svg"));
  const std::string per = mla::test::read_text(out + "/task_samples.csv");
  BOOST_TEST(per.rfind("task,sample,", 0) == 0u);
  BOOST_TEST(count_of(per, "\n") == 1u + 11u * 2u);
  const size_t cwe = per.find("\ncwe,9,2048,");
  BOOST_TEST_REQUIRE(cwe != std::string::npos);
  const std::string row = per.substr(cwe + 1, per.find('\n', cwe + 1) - cwe - 1);
  BOOST_TEST(row.substr(0, row.rfind(',')).ends_with(",10"), row);  // cwe's 10 references, then those found
  BOOST_TEST(contains(r.out, "ruler  (string_match_all x 100"), r.out);
  const std::string text = "--text '" + recall_model() + "/eval/heldout.txt' ";
  expect_task_error(text + "--task qa_1 --context 1024 --cache-budget 64", "RULER's QA tasks need SQuAD, which is not here");
  expect_task_error(text + "--task qa_2 --context 1024 --cache-budget 64", "HotpotQA");
  expect_task_error(text + "--task niah_single_2 --context 1024 --depths 50 --cache-budget 64", "leave --depths out");
  expect_task_error(text + "--task niah_multikey_3 --context 150 --cache-budget 64", "--context 150 is too short for --task niah_multikey_3");
  expect_task_error(text + "--task ruler --context 1024 --cache-budget 64 --policy streaming", "--context 1024 is too short for --task niah_multikey_3");
}


// ruler.svg on the recall model: --task ruler at two ratios and two policies gives one panel, one
// polyline per policy and full, the ratios as the x axis's labels, and every dot's value (its
// tooltip) is tasks.csv's "ruler" row for that run, drawn where the y axis's ticks put that value.
BOOST_AUTO_TEST_CASE(cli_ruler_svg) {
  const std::string out = scratch_dir("tasks-ruler-svg") + "/o";
  const RunResult r = run_cli("eval --checkpoint '" + recall_model() + "' --text '" + recall_model() +
                              "/eval/heldout.txt' --task ruler --context 2048 --samples 1 --compression-ratio 0.25,0.75 --policy "
                              "streaming:sinks=4,h2o --quiet --threads 2 --out '" + out + "'");
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string csv = mla::test::read_text(out + "/tasks.csv");
  const std::string svg = mla::test::read_text(out + "/ruler.svg");
  BOOST_TEST(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0u);
  BOOST_TEST(svg.ends_with("</svg>\n"));
  BOOST_TEST(count_of(svg, "<polyline ") == 3u);  // full, streaming, h2o
  for (const char* id : {"ruler:full@2048", "ruler:streaming:sinks=4@2048", "ruler:h2o@2048"})
    BOOST_TEST(count_of(svg, std::string("<polyline id=\"") + id + "\"") == 1u, id);
  for (const char* x : {"0.25", "0.75"}) BOOST_TEST(contains(svg, std::string("text-anchor=\"middle\">") + x + "</text>"), x);
  BOOST_TEST(contains(svg, "compression ratio r"));
  // the y axis: the printed positions of its lowest and highest tick labels (y = Y(v) + 4)
  std::vector<std::pair<double, double>> y_ticks;  // (value, pixel)
  for (size_t at = svg.find("<text x=\"64.00\" y=\""); at != std::string::npos; at = svg.find("<text x=\"64.00\" y=\"", at + 1)) {
    const size_t y = at + std::strlen("<text x=\"64.00\" y=\"");
    const size_t v = svg.find('>', y) + 1;
    y_ticks.emplace_back(std::stod(svg.substr(v, svg.find('<', v) - v)), std::stod(svg.substr(y)) - 4);
  }
  BOOST_TEST_REQUIRE(y_ticks.size() >= 2u);
  const auto [v0, p0] = y_ticks.front();
  const auto [v1, p1] = y_ticks.back();
  const double px = mla::test::tolerance("ruler.svg dot y", "svg-printed-vs-tick-mapping", "double").atol;
  // every ruler row of tasks.csv: its dot, with its value as tasks.csv prints it, at its height
  size_t rows = 0, full_dots = 0;
  for (size_t at = csv.find("\nruler,"); at != std::string::npos; at = csv.find("\nruler,", at + 1)) {
    std::vector<std::string> f;
    std::string x;
    for (char c : csv.substr(at + 1, csv.find('\n', at + 1) - at - 1) + ",") {
      if (c == ',') { f.push_back(x); x.clear(); } else { x += c; }
    }
    ++rows;
    const std::string policy = f.at(3), budget = f.at(4), ratio = f.at(5), value = f.at(10);
    char r_text[32];
    std::snprintf(r_text, sizeof r_text, "%g", std::stod(ratio));
    const std::string tip = policy == "full" ? "<title>full: " + value + "</title>"
                                             : "<title>" + policy + " r=" + r_text + " (K=" + budget + "): " + value + "</title>";
    const size_t dot = svg.find(tip);
    BOOST_TEST_REQUIRE(dot != std::string::npos, tip + "\n" + svg);
    const size_t circle = svg.rfind("<circle ", dot);
    const size_t cy = svg.find("cy=\"", circle) + 4;
    const double want = p0 + (std::stod(value) - v0) * (p1 - p0) / (v1 - v0);
    BOOST_TEST(std::abs(std::stod(svg.substr(cy)) - want) <= px, tip);
    if (policy == "full") full_dots = count_of(svg, tip);
  }
  BOOST_TEST(rows == 6u);       // (full, streaming, h2o) x 2 ratios
  BOOST_TEST(full_dots == 2u);  // full: one value, drawn at both ends of the ratios' span
  BOOST_TEST(count_of(svg, "<circle ") == 6u);
}

BOOST_AUTO_TEST_SUITE_END()
