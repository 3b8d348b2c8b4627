// mla/stage_timer.hpp — named, timed stages: the one way a backend's forward and the CLI's
// commands record where their time goes.
//
//   StageSeconds stages;
//   {
//     StageTimer t(stages, "q_path");   // appends {"q_path", seconds} when the scope ends
//     ...
//   }
//   seconds_of(stages, "q_path");       // a record by name, never by position
//
// A backend's forward runs its stages through one StageRunner, so it reads as the calls it is:
//   const StageRunner stage(stages, after);   // after("q_path") once the stage is done (progress)
//   MatrixRM q = stage("q_path", [&] { return q_path(L, x); });
// (a stage called again, chunk after chunk, adds to its one record).
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace mla {

// (stage name, wall seconds), in execution order.
using StageSeconds = std::vector<std::pair<std::string, double>>;

// Appends {name, seconds from construction to the end of its scope} to `records`. When the
// scope is left by an exception nothing is recorded (the run failed; its timings do not matter).
class StageTimer {
 public:
  StageTimer(StageSeconds& records, std::string name)
      : records_(records), name_(std::move(name)), exceptions_(std::uncaught_exceptions()),
        start_(std::chrono::steady_clock::now()) {}
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;
  ~StageTimer() {
    if (std::uncaught_exceptions() == exceptions_) records_.emplace_back(std::move(name_), elapsed());
  }
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  StageSeconds& records_;
  std::string name_;
  int exceptions_;
  std::chrono::steady_clock::time_point start_;
};

// Runs f() as the stage `name` and returns its result:
//   const Checkpoint ckpt = timed(stages, "open checkpoint", [&] { return Checkpoint::open(path); });
template <class F>
auto timed(StageSeconds& records, std::string name, F&& f) {
  StageTimer t(records, std::move(name));
  return std::forward<F>(f)();
}

// Adds `seconds` to the record named `name`, appending the record when there is none.
inline void add_seconds(StageSeconds& records, std::string_view name, double seconds) {
  for (auto& r : records)
    if (r.first == name) {
      r.second += seconds;
      return;
    }
  records.emplace_back(std::string(name), seconds);
}

// The stages of one forward, in order: stage(name, f) runs f() as the stage `name` (timed into
// `records`), then calls after(name) when given (a backend's progress), and returns f()'s result.
// A stage run more than once (a backend that works in row chunks) keeps one record, its total,
// at the place of its first run. Nothing is recorded when f() throws.
class StageRunner {
 public:
  explicit StageRunner(StageSeconds& records, std::function<void(std::string_view stage)> after = nullptr)
      : records_(records), after_(std::move(after)) {}
  template <class F>
  auto operator()(const char* name, F&& f) const {
    const auto start = std::chrono::steady_clock::now();
    auto record = [&] {
      add_seconds(records_, name, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      if (after_) after_(name);
    };
    if constexpr (std::is_void_v<std::invoke_result_t<F>>) {
      std::forward<F>(f)();
      record();
    } else {
      auto result = std::forward<F>(f)();
      record();
      return result;
    }
  }

 private:
  StageSeconds& records_;
  std::function<void(std::string_view)> after_;
};

// Sum of every record.
inline double total_seconds(const StageSeconds& records) {
  double s = 0.0;
  for (const auto& r : records) s += r.second;
  return s;
}

// Sum of the records named `name` (0 when there is none).
inline double seconds_of(const StageSeconds& records, std::string_view name) {
  double s = 0.0;
  for (const auto& r : records)
    if (r.first == name) s += r.second;
  return s;
}

}  // namespace mla
