// src/cli/progress.hpp — progress of long work on stderr, the same way for every command:
// nothing during the first MLA_PROGRESS_AFTER seconds (default 1; 0 = always), then one line
// rewritten in place (at most 4 times a second):
//   run: attention FLOP 1.23T/22.0T (5.6%), 12.4 s elapsed, ~3 min 30 s left
// where "elapsed" counts from the start of the work (the forward) and "left" extrapolates.
// ended by a newline when the work finishes. --quiet turns it off; stdout is never touched.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace mla::cli {

// MLA_PROGRESS_AFTER (seconds >= 0), default 1; a malformed value is an Error(InvalidArgument).
double progress_after_seconds();

// "850 ms", "12.4 s", "5 min 14 s", "2 h 03 min"
std::string format_duration(double seconds);

// A unit count as the progress line shows it: exact below 100000, else three significant digits
// and a suffix: "99999", "123k", "1.23M", "45.6G", "351T".
std::string format_count(int64_t n);

class ProgressLine {
 public:
  // command: the line's prefix ("run"); quiet: print nothing.
  ProgressLine(std::string command, bool quiet);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // `done` of `total` units of `stage` finished. "elapsed" counts from the construction; the
  // estimate of what is left extrapolates the rate seen since the stage's first report. A new
  // stage name starts a new line. Not thread-safe: callers serialise (ForwardOptions::progress).
  void update(const std::string& stage, int64_t done, int64_t total);
  // Ends the current line (if one was shown).
  void finish();
  // A ForwardOptions::progress callback that forwards to update().
  std::function<void(const char*, int64_t, int64_t)> callback();

 private:
  using Clock = std::chrono::steady_clock;
  std::string command_;
  bool quiet_;
  double after_;
  Clock::time_point created_, stage_start_, last_print_;
  std::string stage_;
  int64_t stage_first_done_ = 0;
  bool shown_ = false;
};

}  // namespace mla::cli
