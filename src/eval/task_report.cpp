// src/eval/task_report.cpp — the scores and outputs of `mla-h2o eval --task` (mla/eval.hpp,
// docs/eval.md §7), each a pure function of the samples and their EvalResults:
//   score_answer      one run's answer on one sample (teacher-forced top-1 = greedy exact match)
//   task_cells        per (policy, budget, context, depth): samples answered exactly, tokens right
//   tasks.csv, task_samples.csv, the stdout table, needle.svg (one heat map per policy), ruler.svg
//   (RULER's average against the compression ratio, one line per policy), report.json
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "mla/decode.hpp"
#include "mla/error.hpp"
#include "mla/eval.hpp"
#include "mla/json_text.hpp"
#include "mla/provenance.hpp"
#include "mla/report.hpp"
#include "src/report/svg_util.hpp"
#include "eval_report_parts.hpp"

namespace mla {
namespace {

using eval::for_each_run;

// "50" for 50.0, "12.5" for 12.5: depths as the user wrote them
std::string depth_text(double d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", d);
  return buf;
}

std::string share(int64_t part, int64_t whole) {
  return whole > 0 ? format_double(static_cast<double>(part) / static_cast<double>(whole)) : std::string();
}

// "0.5" for a ratio, "" for NaN (an empty CSV field)
std::string ratio_field(double r) { return std::isnan(r) ? std::string() : format_double(r); }

// the panel and cell name of a run: "h2o K=128", "h2o r=0.5", "full"
std::string run_name(const TaskCell& c) {
  if (c.policy == "full") return "full";
  return c.policy + (std::isnan(c.ratio) ? " K=" + std::to_string(c.budget) : " r=" + depth_text(c.ratio));
}

}  // namespace

std::vector<TaskKind> task_kinds(const TaskSettings& t) { return t.kinds.empty() ? std::vector<TaskKind>{t.kind} : t.kinds; }

int64_t ratio_budget(double r, int64_t prompt_len) { return std::llround((1.0 - r) * static_cast<double>(prompt_len)); }

std::vector<int64_t> task_budgets(const TaskSettings& t, const std::vector<int64_t>& budgets, const TaskSample& s) {
  if (t.ratios.empty()) return budgets;
  std::vector<int64_t> out;
  for (double r : t.ratios) out.push_back(ratio_budget(r, s.prompt_len));
  return out;
}

AnswerScore score_answer(const TaskSample& sample, const EvalRun& run, const ModelConfig& cfg, const Tokenizer& tok) {
  AnswerScore s;
  const int64_t P = sample.prompt_len, a = sample.answer_token(), A = sample.answer_tokens;
  for (int64_t j = 0; j < A; ++j) {
    const int64_t i = a + j - 1 - P;  // the decoded position whose logits predict answer token j
    if (i < 0 || i >= static_cast<int64_t>(run.positions.size()))
      fail(ErrorKind::InvalidArgument, "tasks: answer token " + std::to_string(j) + " of a sample was not among the decoded positions");
    const EvalPosition& p = run.positions[static_cast<size_t>(i)];
    s.predicted += task_token_text(cfg, tok, p.predicted);
    const bool right = p.predicted == sample.ids[static_cast<size_t>(sample.answer_first + j)];
    s.correct += right;
    if (!right && s.first_miss < 0) s.first_miss = j;
  }
  s.exact = s.correct == A;
  // string_match_all: a reference is found when every one of its ids is predicted top-1
  for (const TaskReference& r : sample.refs) {
    bool found = true;
    for (int64_t i = r.first; i < r.first + r.tokens; ++i) {
      const EvalPosition& p = run.positions[static_cast<size_t>(i + (sample.request.bos ? 1 : 0) - 1 - P)];
      found = found && p.predicted == sample.ids[static_cast<size_t>(i)];
    }
    ++s.refs;
    s.found += found;
  }
  return s;
}

std::vector<TaskCell> task_cells(const TaskSettings& t, const std::vector<TaskSample>& samples,
                                 const std::vector<EvalWindow>& windows, const std::vector<int64_t>& budgets,
                                 const ModelConfig& cfg, const Tokenizer& tok) {
  std::vector<TaskCell> cells;
  if (samples.empty()) return cells;
  std::vector<int64_t> contexts;
  std::vector<double> depths;
  for (const TaskSample& s : samples) {
    if (std::find(contexts.begin(), contexts.end(), s.request.context) == contexts.end()) contexts.push_back(s.request.context);
    if (std::find(depths.begin(), depths.end(), s.request.depth) == depths.end()) depths.push_back(s.request.depth);
  }
  std::sort(contexts.begin(), contexts.end());
  std::sort(depths.begin(), depths.end());
  // run j of every window is the same (policy, budget slot): the cells of run j, contexts x depths
  size_t runs = 0;
  const size_t per_slot = 1 + windows.front().result.runs.size() / std::max<size_t>(1, task_budgets(t, budgets, samples.front()).size());
  for_each_run(windows.front().result, task_budgets(t, budgets, samples.front()), [&](const EvalRun&, int64_t) { ++runs; });
  for (size_t j = 0; j < runs; ++j)
    for (TaskKind kind : task_kinds(t))
    for (int64_t L : contexts)
      for (double d : depths) {
        TaskCell c;
        c.kind = kind;
        c.context = L;
        c.depth = d;
        c.slot = j / per_slot;
        c.ratio = t.ratios.empty() ? NAN : t.ratios[c.slot];
        for (size_t w = 0; w < samples.size(); ++w) {
          if (samples[w].request.kind != kind || samples[w].request.context != L || samples[w].request.depth != d) continue;
          size_t k = 0;
          for_each_run(windows[w].result, task_budgets(t, budgets, samples[w]), [&](const EvalRun& run, int64_t K) {
            if (k++ != j) return;
            c.policy = run.policy.label;
            c.budget = K;
            const AnswerScore a = score_answer(samples[w], run, cfg, tok);
            ++c.samples;
            c.exact += a.exact;
            c.tokens += samples[w].answer_tokens;
            c.correct += a.correct;
            c.refs += a.refs;
            c.found += a.found;
            c.match_sum += static_cast<double>(a.found) / static_cast<double>(std::max<int64_t>(1, a.refs));
          });
        }
        cells.push_back(c);
      }
  return cells;
}

double string_match_all(const TaskCell& c) { return c.samples > 0 ? 100.0 * c.match_sum / static_cast<double>(c.samples) : NAN; }

std::vector<TaskCell> ruler_averages(const std::vector<TaskCell>& cells) {
  std::vector<TaskCell> out;
  for (const TaskCell& c : cells) {
    auto it = std::find_if(out.begin(), out.end(), [&](const TaskCell& a) {
      return a.policy == c.policy && a.slot == c.slot && a.context == c.context;
    });
    if (it == out.end()) {
      out.push_back(TaskCell{});
      it = out.end() - 1;
      it->policy = c.policy;
      it->budget = c.budget;
      it->slot = c.slot;
      it->ratio = c.ratio;
      it->context = c.context;
    }
    it->samples += c.samples;
    it->refs += c.refs;
    it->found += c.found;
    it->match_sum += string_match_all(c);  // the sum of the tasks' scores
    ++it->tasks;
  }
  return out;
}

std::string ruler_tasks_csv(const TaskSettings& t, Compression compress, const std::vector<TaskCell>& cells) {
  std::string out =
      "task,query_placement,compress,policy,budget,compression_ratio,context,samples,references,found,string_match_all,"
      "exact_match,answer_token_accuracy\n";
  const auto head = [&](const std::string& task, const TaskCell& c) {
    return task + "," + query_placement_name(t.placement) + "," + compression_name(compress) + "," + csv_field(c.policy) + "," +
           std::to_string(c.budget) + "," + ratio_field(c.ratio) + "," + std::to_string(c.context) + "," +
           std::to_string(c.samples) + "," + std::to_string(c.refs) + "," + std::to_string(c.found) + ",";
  };
  for (const TaskCell& c : cells)
    out += head(task_name(c.kind), c) + format_double(string_match_all(c)) + "," + share(c.exact, c.samples) + "," +
           share(c.correct, c.tokens) + "\n";
  if (task_kinds(t).size() > 1)
    for (const TaskCell& a : ruler_averages(cells))  // RULER's average: the mean of the tasks' scores
      out += head("ruler", a) + format_double(a.match_sum / static_cast<double>(a.tasks)) + ",,\n";
  return out;
}

std::string tasks_csv(const TaskSettings& t, Compression compress, const std::vector<TaskCell>& cells) {
  if (is_ruler_task(t.kind)) return ruler_tasks_csv(t, compress, cells);
  std::string out =
      "task,query_placement,compress,policy,budget,compression_ratio,context,depth,samples,exact,exact_match,"
      "answer_token_accuracy\n";
  for (const TaskCell& c : cells)
    out += std::string(task_name(t.kind)) + "," + query_placement_name(t.placement) + "," + compression_name(compress) + "," +
           csv_field(c.policy) + "," + std::to_string(c.budget) + "," + ratio_field(c.ratio) + "," + std::to_string(c.context) + "," +
           depth_text(c.depth) + "," + std::to_string(c.samples) + "," + std::to_string(c.exact) + "," +
           share(c.exact, c.samples) + "," + share(c.correct, c.tokens) + "\n";
  return out;
}

std::string task_samples_csv(const TaskSettings& t, const std::vector<TaskSample>& samples,
                             const std::vector<EvalWindow>& windows, const std::vector<int64_t>& budgets,
                             const ModelConfig& cfg, const Tokenizer& tok) {
  // RULER's tasks: the task first, and each sample's references found (string_match_all) last
  const bool ruler = is_ruler_task(t.kind);
  std::string out = std::string(ruler ? "task," : "") +
                    "sample,context,depth,index,source,offset,prompt_len,steps,policy,budget,compression_ratio,answer,predicted,"
                    "first_miss,exact" + (ruler ? ",references,found\n" : "\n");
  for (size_t w = 0; w < samples.size(); ++w) {
    const TaskSample& s = samples[w];
    const std::vector<int64_t> Ks = task_budgets(t, budgets, s);
    for_each_run(windows[w].result, Ks, [&](const EvalRun& run, int64_t K) {
      const AnswerScore a = score_answer(s, run, cfg, tok);
      const size_t slot = static_cast<size_t>(std::find(Ks.begin(), Ks.end(), K) - Ks.begin());
      const std::string ratio = t.ratios.empty() ? std::string() : format_double(t.ratios[slot]);
      if (ruler) out += std::string(task_name(s.request.kind)) + ",";
      out += std::to_string(w) + "," + std::to_string(s.request.context) + "," + depth_text(s.request.depth) + "," +
             std::to_string(s.request.index) + "," + csv_field(s.source) + "," + std::to_string(s.filler_offset) + "," +
             std::to_string(s.prompt_len) + "," + std::to_string(s.steps) + "," + csv_field(run.policy.label) + "," +
             std::to_string(K) + "," + ratio + "," + csv_field(s.answer) + "," + csv_field(a.predicted) + "," +
             (a.first_miss < 0 ? std::string() : std::to_string(a.first_miss)) + "," + (a.exact ? "1" : "0") +
             (ruler ? "," + std::to_string(a.refs) + "," + std::to_string(a.found) : std::string()) + "\n";
    });
  }
  return out;
}

// RULER's stdout table: per (policy, budget, context) each task's string_match_all and their mean.
std::string ruler_table(const TaskSettings& t, const std::vector<TaskCell>& cells) {
  size_t width = 6;
  for (const TaskCell& c : cells) width = std::max(width, c.policy.size());
  const std::vector<TaskKind> kinds = task_kinds(t);
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-*s %6s %7s", static_cast<int>(width), "policy", "budget", "context");
  out += line;
  for (TaskKind k : kinds) {
    std::snprintf(line, sizeof line, " %15s", task_name(k));
    out += line;
  }
  out += kinds.size() > 1 ? "    ruler  (string_match_all x 100, " : "  (string_match_all x 100, ";
  out += std::to_string(t.samples) + (t.samples == 1 ? " sample" : " samples") + " per task)\n";
  for (const TaskCell& a : ruler_averages(cells)) {
    std::snprintf(line, sizeof line, "%-*s %6lld %7lld", static_cast<int>(width), a.policy.c_str(), static_cast<long long>(a.budget),
                  static_cast<long long>(a.context));
    out += line;
    for (const TaskCell& c : cells)
      if (c.policy == a.policy && c.slot == a.slot && c.context == a.context) {
        std::snprintf(line, sizeof line, " %15.2f", string_match_all(c));
        out += line;
      }
    if (kinds.size() > 1) {
      std::snprintf(line, sizeof line, " %8.2f", a.match_sum / static_cast<double>(a.tasks));
      out += line;
    }
    out += "\n";
  }
  return out;
}

std::string tasks_table(const TaskSettings& t, const std::vector<TaskCell>& cells) {
  if (is_ruler_task(t.kind)) return ruler_table(t, cells);
  size_t width = 6;
  for (const TaskCell& c : cells) width = std::max(width, c.policy.size());
  std::string out;
  char line[256];
  const bool ratios = !t.ratios.empty();
  std::snprintf(line, sizeof line, "%-*s%s %6s %7s", static_cast<int>(width), "policy", ratios ? "  ratio" : "", "budget",
                "context");
  out += line;
  for (double d : t.depths) {
    std::snprintf(line, sizeof line, " %6s", (depth_text(d) + "%").c_str());
    out += line;
  }
  out += "     all  (exact match at each depth, " + std::to_string(t.samples) + (t.samples == 1 ? " sample" : " samples") +
         " per cell)\n";
  for (size_t i = 0; i < cells.size(); i += t.depths.size()) {
    const TaskCell& c = cells[i];
    std::snprintf(line, sizeof line, "%-*s", static_cast<int>(width), c.policy.c_str());
    out += line;
    if (ratios) {
      std::snprintf(line, sizeof line, " %6s", c.policy == "full" ? "" : depth_text(c.ratio).c_str());
      out += line;
    }
    std::snprintf(line, sizeof line, " %6lld %7lld", static_cast<long long>(c.budget), static_cast<long long>(c.context));
    out += line;
    int64_t exact = 0, n = 0;
    for (size_t k = i; k < i + t.depths.size() && k < cells.size(); ++k) {
      std::snprintf(line, sizeof line, " %6.2f", static_cast<double>(cells[k].exact) / static_cast<double>(cells[k].samples));
      out += line;
      exact += cells[k].exact;
      n += cells[k].samples;
    }
    std::snprintf(line, sizeof line, " %7.3f\n", static_cast<double>(exact) / static_cast<double>(n));
    out += line;
  }
  return out;
}

// ---- needle.svg ----------------------------------------------------------------------------
//
// The panels: full (the same at every budget) first, then per budget its policies, a new row at
// each budget and after every kPerRow panels. A panel: context across (one column each, ascending),
// depth down (0 % at the top, as needle-in-a-haystack figures draw it), every cell coloured by its
// exact-match share on a red (0) - yellow (0.5) - green (1) ramp and labelled with it in percent.
namespace {

constexpr int kPerRow = 5;
constexpr double kPanelW = 220, kLabelW = 46, kTitleH = 22, kAxisH = 34, kGap = 18, kMargin = 20, kHeader = 70;

// t in [0, 1] -> #d73027 (0) .. #fee08b (0.5) .. #1a9850 (1), linear in RGB on each half
std::string accuracy_colour(double t) {
  t = std::clamp(t, 0.0, 1.0);
  const int lo[3] = {0xd7, 0x30, 0x27}, mid[3] = {0xfe, 0xe0, 0x8b}, hi[3] = {0x1a, 0x98, 0x50};
  const int* a = t < 0.5 ? lo : mid;
  const int* b = t < 0.5 ? mid : hi;
  const double u = t < 0.5 ? t * 2 : (t - 0.5) * 2;
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", static_cast<int>(std::lround(a[0] + (b[0] - a[0]) * u)),
                static_cast<int>(std::lround(a[1] + (b[1] - a[1]) * u)), static_cast<int>(std::lround(a[2] + (b[2] - a[2]) * u)));
  return buf;
}

}  // namespace

std::string needle_svg(const TaskSettings& t, const std::vector<TaskCell>& cells, const std::string& title) {
  using svg::num;
  using svg::xml_escape;
  const size_t C = t.contexts.size(), D = t.depths.size();
  const size_t per_run = C * D;
  // the panels' first cells, in drawing order, and the row each starts
  struct PanelAt {
    size_t first;
    int row, col;
  };
  std::vector<PanelAt> panels;
  int row = -1, col = kPerRow;
  size_t slots = 0;
  for (const TaskCell& c : cells) slots = std::max(slots, c.slot + 1);
  for (size_t b = 0; b < slots; ++b) {
    col = kPerRow;  // a new row at each budget
    for (size_t i = 0; i < cells.size(); i += per_run) {
      if (cells[i].slot != b) continue;
      const bool full = cells[i].policy == "full";
      if (full && b > 0) continue;  // drawn once
      if (col >= kPerRow || (full && b == 0)) {
        ++row;
        col = 0;
      }
      panels.push_back(PanelAt{i, row, col++});
      if (full) col = kPerRow;  // full alone in its row
    }
  }
  const double cell_w = (kPanelW - kLabelW) / static_cast<double>(std::max<size_t>(C, 1));
  const double cell_h = std::clamp(150.0 / static_cast<double>(std::max<size_t>(D, 1)), 14.0, 26.0);
  const double panel_h = kTitleH + cell_h * static_cast<double>(D) + kAxisH;
  const double width = 2 * kMargin + kPerRow * kPanelW + (kPerRow - 1) * kGap;
  const double height = kHeader + (row + 1) * (panel_h + kGap) + kMargin;

  std::string s;
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + num(width) + "\" height=\"" + num(height) +
       "\" viewBox=\"0 0 " + num(width) + " " + num(height) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s += "<title>" + xml_escape(title) + "</title>\n";
  s += "<rect x=\"0\" y=\"0\" width=\"" + num(width) + "\" height=\"" + num(height) + "\" fill=\"#ffffff\"/>\n";
  s += "<text x=\"" + num(width / 2) + "\" y=\"26\" text-anchor=\"middle\" font-size=\"15\">" + xml_escape(title) + "</text>\n";
  // legend: the ramp at 0, 25, 50, 75, 100 %
  s += "<g id=\"legend\">\n<text x=\"" + num(kMargin) + "\" y=\"52\">exact match (share of samples):</text>\n";
  for (int k = 0; k <= 4; ++k)
    s += "<rect x=\"" + num(kMargin + 190 + 56 * k) + "\" y=\"41\" width=\"14\" height=\"14\" fill=\"" +
         accuracy_colour(k / 4.0) + "\" stroke=\"#999999\"/><text x=\"" + num(kMargin + 208 + 56 * k) + "\" y=\"52\">" +
         std::to_string(25 * k) + " %</text>\n";
  s += "<text x=\"" + num(kMargin + 480) + "\" y=\"52\">columns: context (" + t.context_unit + "); rows: needle depth (% of the filler)</text>\n";
  s += "</g>\n";
  for (const PanelAt& p : panels) {
    const TaskCell& head = cells[p.first];
    const std::string name = run_name(head);
    const double x0 = kMargin + p.col * (kPanelW + kGap), y0 = kHeader + p.row * (panel_h + kGap);
    const double gx = x0 + kLabelW, gy = y0 + kTitleH;
    std::string id = name;
    std::replace(id.begin(), id.end(), ' ', '@');  // "h2o@K=128", "h2o@r=0.5"
    s += "<g id=\"panel:" + xml_escape(id) + "\">\n";
    s += "<text x=\"" + num(x0 + kPanelW / 2) + "\" y=\"" + num(y0 + 15) + "\" text-anchor=\"middle\" font-size=\"12\">" +
         xml_escape(name) + "</text>\n";
    for (size_t k = 0; k < per_run && p.first + k < cells.size(); ++k) {
      const TaskCell& c = cells[p.first + k];
      const size_t ci = k / D, di = k % D;
      const double v = c.samples > 0 ? static_cast<double>(c.exact) / static_cast<double>(c.samples) : 0.0;
      const double x = gx + cell_w * static_cast<double>(ci), y = gy + cell_h * static_cast<double>(di);
      s += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(cell_w) + "\" height=\"" + num(cell_h) +
           "\" fill=\"" + accuracy_colour(v) + "\" stroke=\"#ffffff\"><title>" + xml_escape(name) +
           (std::isnan(c.ratio) || c.policy == "full" ? std::string() : " (K=" + std::to_string(c.budget) + ")") + ", context " +
           std::to_string(c.context) + ", depth " + depth_text(c.depth) + " %: " + std::to_string(c.exact) + " of " +
           std::to_string(c.samples) + " exact</title></rect>\n";
      s += "<text x=\"" + num(x + cell_w / 2) + "\" y=\"" + num(y + cell_h / 2 + 4) + "\" text-anchor=\"middle\" font-size=\"10\">" +
           std::to_string(static_cast<int>(std::lround(100 * v))) + "</text>\n";
    }
    for (size_t di = 0; di < D; ++di)
      s += "<text x=\"" + num(gx - 4) + "\" y=\"" + num(gy + cell_h * (static_cast<double>(di) + 0.5) + 4) +
           "\" text-anchor=\"end\">" + depth_text(t.depths[di]) + " %</text>\n";
    const size_t every = static_cast<size_t>(std::ceil(36.0 / cell_w));  // context labels >= 36 px apart
    for (size_t ci = 0; ci < C; ci += every)
      s += "<text x=\"" + num(gx + cell_w * (static_cast<double>(ci) + 0.5)) + "\" y=\"" +
           num(gy + cell_h * static_cast<double>(D) + 14) + "\" text-anchor=\"middle\">" + std::to_string(t.contexts[ci]) +
           "</text>\n";
    s += "</g>\n";
  }
  s += "</svg>\n";
  return s;
}

// ---- ruler.svg -----------------------------------------------------------------------------
//
// kvpress's leaderboard figure: RULER's average (ruler_averages, the value of tasks.csv's "ruler"
// rows, or the one task's string_match_all) against the compression ratio, one line per policy,
// full as a horizontal line over the ratios' span; one panel per context. A run has one query
// placement and one --compress, named in each panel's title. With --cache-budget the x axis is K.
std::string ruler_svg(const TaskSettings& t, Compression compress, const std::vector<TaskCell>& cells, const std::string& title) {
  const bool ratios = !t.ratios.empty();
  const std::vector<TaskCell> avg = ruler_averages(cells);
  std::vector<double> xs;  // the x of every slot but full's
  for (const TaskCell& a : avg)
    if (a.policy != "full") {
      const double x = ratios ? a.ratio : static_cast<double>(a.budget);
      if (std::find(xs.begin(), xs.end(), x) == xs.end()) xs.push_back(x);
    }
  std::sort(xs.begin(), xs.end());
  std::vector<std::string> policies;  // full first, then the policies in run order
  for (const TaskCell& a : avg)
    if (std::find(policies.begin(), policies.end(), a.policy) == policies.end()) policies.push_back(a.policy);
  std::stable_partition(policies.begin(), policies.end(), [](const std::string& p) { return p == "full"; });
  std::vector<svg::Panel> panels;
  for (int64_t L : t.contexts) {
    svg::Panel panel{"context " + std::to_string(L) + " " + t.context_unit + ", query " + query_placement_name(t.placement) +
                         ", --compress " + compression_name(compress),
                     ratios ? "compression ratio r (K = round((1 - r) P) at each sample's P)" : "cache budget K (latent rows per layer)",
                     task_kinds(t).size() > 1 ? "RULER average (string_match_all x 100, mean over the tasks)"
                                              : std::string(task_name(t.kind)) + " string_match_all x 100",
                     {}, ratios ? xs : std::vector<double>{}};
    for (size_t k = 0; k < policies.size(); ++k) {
      svg::Series sr{policies[k] == "full" ? "full (no eviction)" : policies[k], "", {}};
      sr.id = "ruler:" + policies[k];
      sr.style = static_cast<int64_t>(k);
      for (const TaskCell& a : avg) {
        if (a.policy != policies[k] || a.context != L) continue;
        const double y = a.match_sum / static_cast<double>(a.tasks);  // tasks.csv's average
        const std::string tip = run_name(a) + (ratios && a.policy != "full" ? " (K=" + std::to_string(a.budget) + ")" : "") +
                                ": " + format_double(y);
        if (a.policy == "full") {  // the reference: one value, drawn across the x span
          for (double x : {xs.empty() ? 0.0 : xs.front(), xs.empty() ? 0.0 : xs.back()}) {
            if (!sr.points.empty() && sr.points.back().first == x) break;  // one x: one dot
            sr.points.emplace_back(x, y);
            sr.tips.push_back(tip);
          }
          break;
        }
        sr.points.emplace_back(ratios ? a.ratio : static_cast<double>(a.budget), y);
        sr.tips.push_back(tip);
      }
      std::vector<size_t> order(sr.points.size());  // ascending x
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sr.points[a].first < sr.points[b].first; });
      svg::Series sorted = sr;
      for (size_t i = 0; i < order.size(); ++i) {
        sorted.points[i] = sr.points[order[i]];
        sorted.tips[i] = sr.tips[order[i]];
      }
      if (!sorted.points.empty()) panel.series.push_back(sorted);
    }
    for (size_t k = 0; k < panel.series.size(); ++k) panel.series[k].id += "@" + std::to_string(L);  // unique in the file
    panels.push_back(panel);
  }
  return svg::panel_chart(title, panels);
}

std::string eval_tasks_report_json(const EvalRunInfo& info, const ModelConfig& cfg, const EvalOptions& opt,
                                   const TaskSettings& t, const std::vector<TaskSample>& samples,
                                   const std::vector<EvalWindow>& windows, const std::vector<TaskCell>& cells) {
  JsonWriter j;
  j.begin_object();
  j.key("format").value("mla-h2o eval report v1");
  j.key("command").value("eval");
  write_provenance(j, &info.model_files);
  eval::write_run_keys(j, info, cfg, opt, windows.front().result.engine);
  j.key("task").begin_object();
  j.key("name").value(task_kinds(t).size() > 1 ? "ruler" : task_name(t.kind));
  j.key("query_placement").value(query_placement_name(t.placement));
  j.key("contexts").array(t.contexts);
  j.key("context_unit").value(t.context_unit);
  j.key("depths_percent").array(t.depths);
  j.key("samples_per_cell").value(t.samples);
  j.key("seed").value(static_cast<int64_t>(t.seed));
  j.key("scoring").value(is_ruler_task(t.kind)
                             ? "string_match_all: the share of the reference strings found x 100, a reference found when every "
                               "one of its tokens is top-1 under teacher forcing"
                             : "exact match: every answer token top-1 under teacher forcing (equal to greedy generation's exact match)");
  j.end_object();
  j.key("compress").value(compression_name(opt.compress));
  // every K that ran (with ratios: each context's), and the ratios with their K per context
  std::vector<int64_t> all_budgets;
  for (const TaskCell& c : cells)
    if (std::find(all_budgets.begin(), all_budgets.end(), c.budget) == all_budgets.end()) all_budgets.push_back(c.budget);
  std::sort(all_budgets.begin(), all_budgets.end());
  j.key("budgets").array(all_budgets);
  j.key("compression_ratios");
  if (t.ratios.empty()) {
    j.null();
  } else {
    j.begin_array();
    for (size_t b = 0; b < t.ratios.size(); ++b) {
      j.begin_object().key("ratio").value(t.ratios[b]).key("budget_at_context").begin_object();
      for (int64_t L : t.contexts)
        for (const TaskCell& c : cells)
          if (c.slot == b && c.context == L) {
            j.key(std::to_string(L)).value(c.budget);
            break;
          }
      j.end_object().end_object();
    }
    j.end_array();
  }
  j.key("policies").begin_array();
  for (const PolicySettings& s : opt.policies) policy_settings_json(j, s, all_budgets);
  j.end_array();
  j.key("samples").begin_array();
  for (const TaskSample& s : samples)
    j.begin_object()
        .key("task").value(task_name(s.request.kind))
        .key("context").value(s.request.context)
        .key("depth").value(s.request.depth)
        .key("index").value(s.request.index)
        .key("source").value(s.source)
        .key("offset").value(s.filler_offset)
        .key("answer").value(s.answer)
        .key("answer_position").value(s.answer_token())
        .key("prompt_len").value(s.prompt_len)
        .key("steps").value(s.steps)
        .end_object();
  j.end_array();
  j.key("cells").begin_array();
  for (const TaskCell& c : cells) {
    j.begin_object().key("policy").value(c.policy).key("budget").value(c.budget).key("compression_ratio");
    if (std::isnan(c.ratio)) j.null();
    else j.value(c.ratio);
    j.key("task").value(task_name(c.kind)).key("context").value(c.context)
        .key("depth").value(c.depth)
        .key("samples").value(c.samples)
        .key("exact").value(c.exact)
        .key("answer_tokens").value(c.tokens)
        .key("answer_tokens_correct").value(c.correct)
        .key("references").value(c.refs)
        .key("references_found").value(c.found);
    if (is_ruler_task(c.kind)) j.key("string_match_all").value(string_match_all(c));
    j.end_object();
  }
  j.end_array();
  eval::write_tail_keys(j, info, windows);
  j.end_object();
  return j.str() + "\n";
}

}  // namespace mla
