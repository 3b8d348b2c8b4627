// src/cli/progress.cpp — see progress.hpp.
#include "progress.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "mla/error.hpp"

namespace mla::cli {

double progress_after_seconds() {
  const char* v = std::getenv("MLA_PROGRESS_AFTER");
  if (!v || !*v) return 1.0;
  double s = -1.0;
  const char* end = v + std::char_traits<char>::length(v);
  const auto [p, ec] = std::from_chars(v, end, s);
  if (ec != std::errc() || p != end || !(s >= 0.0) || !std::isfinite(s))
    fail(ErrorKind::InvalidArgument,
         std::string("environment variable MLA_PROGRESS_AFTER='") + v + "' is not a number of seconds >= 0");
  return s;
}

std::string format_duration(double seconds) {
  char buf[48];
  if (seconds < 1.0) {
    std::snprintf(buf, sizeof buf, "%.0f ms", seconds * 1e3);
  } else if (seconds < 60.0) {
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  } else if (seconds < 3600.0) {
    const long m = static_cast<long>(seconds / 60.0);
    std::snprintf(buf, sizeof buf, "%ld min %02ld s", m, static_cast<long>(seconds) - 60 * m);
  } else if (seconds < 1e7) {
    const long h = static_cast<long>(seconds / 3600.0);
    std::snprintf(buf, sizeof buf, "%ld h %02ld min", h, static_cast<long>((seconds - 3600.0 * h) / 60.0));
  } else {
    std::snprintf(buf, sizeof buf, "%.0f days", seconds / 86400.0);
  }
  return buf;
}

std::string format_count(int64_t n) {
  if (n < 100000) return std::to_string(n);
  static const char* const kSuffix[] = {"k", "M", "G", "T", "P", "E"};
  double v = static_cast<double>(n);
  int i = -1;
  while (v >= 999.5 && i < 5) {
    v /= 1000.0;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, v < 9.995 ? "%.2f%s" : v < 99.95 ? "%.1f%s" : "%.0f%s", v, kSuffix[i]);
  return buf;
}

ProgressLine::ProgressLine(std::string command, bool quiet)
    : command_(std::move(command)), quiet_(quiet), after_(progress_after_seconds()), created_(Clock::now()),
      stage_start_(created_), last_print_(created_) {}

ProgressLine::~ProgressLine() { finish(); }

void ProgressLine::update(const std::string& stage, int64_t done, int64_t total) {
  if (quiet_) return;
  const auto now = Clock::now();
  if (stage != stage_) {  // the estimate's rate is measured from a stage's first report on
    finish();
    stage_ = stage;
    stage_start_ = now;
    stage_first_done_ = done;
  }
  const double since_start = std::chrono::duration<double>(now - created_).count();
  const double since_print = std::chrono::duration<double>(now - last_print_).count();
  const bool last = done >= total;
  if (since_start < after_ || (shown_ && since_print < 0.25 && !last)) return;
  std::string line = command_ + ": " + stage_ + " " + format_count(done) + "/" + format_count(total);
  char pct[32];
  std::snprintf(pct, sizeof pct, " (%.1f%%)", total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0);
  line += pct;
  line += ", " + format_duration(since_start) + " elapsed";
  const double rate_seconds = std::chrono::duration<double>(now - stage_start_).count();
  if (!last && done > stage_first_done_ && rate_seconds > 0) {
    const double per_unit = rate_seconds / static_cast<double>(done - stage_first_done_);
    line += ", ~" + format_duration(per_unit * static_cast<double>(total - done)) + " left";
  }
  std::fprintf(stderr, "\r%s\033[K", line.c_str());
  std::fflush(stderr);
  shown_ = true;
  last_print_ = now;
}

void ProgressLine::finish() {
  if (shown_) std::fputc('\n', stderr);
  shown_ = false;
}

std::function<void(const char*, int64_t, int64_t)> ProgressLine::callback() {
  if (quiet_) return {};
  return [this](const char* stage, int64_t done, int64_t total) { update(stage, done, total); };
}

}  // namespace mla::cli
