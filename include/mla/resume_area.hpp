// mla/resume_area.hpp — `eval --resume`'s staging area: the finished windows of an eval that
// has not committed its output set yet, kept inside the output directory D as
// D/.mla-h2o-resume/ (docs/scale-out.md §2, docs/outputs.md §6).
//
//   D/.mla-h2o-resume/settings           "mla-h2o resume area v1", the producer (version and git
//                                        revision), then "setting KEY<TAB>VALUE" per setting: every
//                                        eval option but --threads, --resume, --quiet and --out, and
//                                        each model file's sha256 ("model-file PATH")
//   D/.mla-h2o-resume/window-NNNNNN.rec  one finished window (mla/window_record.hpp), written
//                                        to a temporary name, flushed, then renamed: a record is
//                                        there whole or not at all
//
// Every eval with --out keeps one while it runs; the commit of its output set removes it with the
// previous set. A run killed at any moment (SIGKILL included) leaves D as it was plus this area;
// `--resume` continues from it and writes outputs byte-identical to an uninterrupted run. Without
// --resume a D holding an area is refused with a line saying --resume; with --resume, an area
// whose producer or settings differ is refused naming the first difference, and a record that
// does not decode is refused naming its file. The finished windows stay in every case.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mla {

class OutputSet;

struct ResumeSetting {
  std::string key;    // "--cache-budget", "model-file model.safetensors"
  std::string value;  // as given (or the default), a sha256 for a model file
};

class ResumeArea {
 public:
  // Opens (resume) or creates (not resume) the area inside `out`'s directory. Errors: one line
  // (InvalidArgument) as above. `out` must have been claimed with its resume area allowed.
  ResumeArea(OutputSet& out, const std::vector<ResumeSetting>& settings, bool resume);
  // Left by an error with no window finished (none found, none stored): the area goes again, so
  // that a run which failed at its first window leaves --out as it was.
  ~ResumeArea();
  ResumeArea(const ResumeArea&) = delete;
  ResumeArea& operator=(const ResumeArea&) = delete;

  // Before any work: whether `out`'s directory holds an area, checked against --resume (the same
  // refusals as the constructor's, given before the model is loaded). Returns whether it holds one.
  static bool check_presence(const OutputSet& out, bool resume);

  // sha256 hex of the settings text: every record carries it.
  const std::string& settings_digest() const { return digest_; }
  // The records found by --resume, by window index (empty otherwise), and each one's file.
  const std::map<uint64_t, std::string>& found() const { return found_; }
  std::string record_path(uint64_t index) const;
  // Writes window `index`'s record (whole or not at all, flushed to disk before it counts).
  void store(uint64_t index, const std::string& record);
  const std::string& dir() const { return shown_; }  // "D/.mla-h2o-resume", for messages

 private:
  OutputSet& out_;
  int exceptions_ = 0;
  std::atomic<int64_t> stored_{0};  // records written by this run (from its workers)
  std::string path_, shown_, digest_;
  std::map<uint64_t, std::string> found_;
};

// The settings text of `settings` (what the settings file holds).
std::string resume_settings_text(const std::vector<ResumeSetting>& settings);

// A finished window kept (stored here, or sent to rank 0). For tests: after K of them the process
// kills itself with SIGKILL (environment MLA_TEST_KILL_AFTER_WINDOWS=K), a crash at a known point.
void note_window_kept();

}  // namespace mla
