// src/eval/resume_area.cpp — `eval --resume`'s staging area inside the output directory
// (mla/resume_area.hpp has the layout and the rules; docs/scale-out.md §2).
#include "mla/resume_area.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>

#include "mla/error.hpp"
#include "mla/output_set.hpp"
#include "mla/provenance.hpp"
#include "mla/regular_file.hpp"
#include "mla_build_config.h"

namespace mla {
namespace {

constexpr const char* kHead = "mla-h2o resume area v1\n";

std::string producer_line() { return std::string("producer mla-h2o ") + MLA_VERSION + " " + git_revision() + "\n"; }

// A value on one line: newlines and tabs escaped.
std::string one_line(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\\') out += "\\\\";
    else out += c;
  }
  return out;
}

// The settings file's lines after its head: (key, value) in order.
std::vector<std::pair<std::string, std::string>> settings_lines(const std::string& text, std::string& producer) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string line = text.substr(at, end - at);
    if (line.rfind("producer ", 0) == 0) producer = line.substr(9);
    if (line.rfind("setting ", 0) == 0) {
      const size_t tab = line.find('\t');
      if (tab != std::string::npos) out.emplace_back(line.substr(8, tab - 8), line.substr(tab + 1));
    }
    at = end + 1;
  }
  return out;
}

void write_durably(const std::string& path, const std::string& bytes, const std::string& shown) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (fd < 0) fail(ErrorKind::Io, "cannot write " + shown + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "the system wrote nothing";
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(ErrorKind::Io, "cannot write " + shown + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  const bool ok = ::fsync(fd) == 0;
  const std::string why = ok ? "" : std::strerror(errno);
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = ok ? std::strerror(errno) : why;
    ::unlink(tmp.c_str());
    fail(ErrorKind::Io, "cannot write " + shown + ": " + reason);
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    ::fsync(d);  // the rename itself on disk
    ::close(d);
  }
}

// "window-000012.rec" -> 12; false for any other name.
bool record_index(const std::string& name, uint64_t& index) {
  if (name.size() <= 11 || name.rfind("window-", 0) != 0 || name.compare(name.size() - 4, 4, ".rec") != 0) return false;
  const std::string digits = name.substr(7, name.size() - 11);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 12) return false;
  index = std::strtoull(digits.c_str(), nullptr, 10);
  return true;
}

// Whether the area holds nothing but what its settings file's writing leaves (its temporary names).
bool only_settings_names(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (!d) return false;
  bool only = true;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != ".." && n.rfind("settings.tmp.", 0) != 0) only = false;
  }
  ::closedir(d);
  return only;
}

std::atomic<int64_t> g_stored{0};

}  // namespace

std::string resume_settings_text(const std::vector<ResumeSetting>& settings) {
  std::string text = std::string(kHead) + producer_line();
  for (const ResumeSetting& s : settings) text += "setting " + one_line(s.key) + "\t" + one_line(s.value) + "\n";
  return text;
}

bool ResumeArea::check_presence(const OutputSet& out, bool resume) {
  const std::string path = out.target() + "/" + kResumeArea;
  const std::string shown = (std::filesystem::path(out.dir()) / kResumeArea).string();
  struct stat st {};
  const bool exists = ::lstat(path.c_str(), &st) == 0;
  if (exists && !S_ISDIR(st.st_mode))
    fail(ErrorKind::InvalidArgument, "output directory " + out.dir() + " holds '" + kResumeArea + "', which is not a directory; remove it");
  if (exists && !resume)
    fail(ErrorKind::InvalidArgument, "output directory " + out.dir() + " holds the staging area of an unfinished eval (" + shown +
                                         "): add --resume to continue it with the same settings, or remove " + shown +
                                         " to start over");
  if (!exists && resume)
    fail(ErrorKind::InvalidArgument, "--resume: output directory " + out.dir() + " holds no staging area (" + shown +
                                         "): there is no unfinished eval to continue; run without --resume");
  return exists;
}

ResumeArea::ResumeArea(OutputSet& out, const std::vector<ResumeSetting>& settings, bool resume)
    : out_(out), exceptions_(std::uncaught_exceptions()) {
  path_ = out.target() + "/" + kResumeArea;
  shown_ = (std::filesystem::path(out.dir()) / kResumeArea).string();
  const std::string text = resume_settings_text(settings);
  digest_ = sha256_hex(text);
  const std::string settings_path = path_ + "/settings", settings_shown = shown_ + "/settings";
  if (!check_presence(out, resume)) {
    out.resume_area_path();
    write_durably(settings_path, text, settings_shown);
    return;
  }
  out.resume_area_path();  // from here the directory is kept whatever happens
  if (::access(settings_path.c_str(), F_OK) != 0 && errno == ENOENT && only_settings_names(path_)) {
    // killed between creating the area and writing its settings: nothing was finished there
    write_durably(settings_path, text, settings_shown);
    return;
  }
  const std::string had = read_regular_file(settings_path, int64_t{1} << 24, ErrorKind::InvalidArgument);
  if (had.rfind(kHead, 0) != 0)
    fail(ErrorKind::InvalidArgument, "--resume: " + settings_shown + " is not the settings file of an mla-h2o resume area "
                                     "of this version; remove " + shown_ + " to start over");
  std::string producer_had, producer_now;
  const auto old_lines = settings_lines(had, producer_had);
  const auto new_lines = settings_lines(text, producer_now);
  if (producer_had != producer_now)
    fail(ErrorKind::InvalidArgument, "--resume: " + shown_ + " was written by " + producer_had + ", this is " + producer_now +
                                         ": its windows may not match this build's bit for bit; remove " + shown_ + " to start over");
  for (size_t i = 0; i < std::max(old_lines.size(), new_lines.size()); ++i) {
    const std::string key = i < new_lines.size() ? new_lines[i].first : old_lines[i].first;
    const std::string was = i < old_lines.size() && old_lines[i].first == key ? old_lines[i].second : "(not given)";
    const std::string now = i < new_lines.size() && new_lines[i].first == key ? new_lines[i].second : "(not given)";
    if (i >= old_lines.size() || i >= new_lines.size() || old_lines[i] != new_lines[i])
      fail(ErrorKind::InvalidArgument, "--resume: the unfinished eval in " + shown_ + " ran with " + key + " " + was +
                                           ", this run gives " + now + "; a resumed run repeats every setting but --threads, "
                                           "--resume and --quiet (its finished windows are kept)");
  }
  if (had != text)  // the same lines in another form
    fail(ErrorKind::InvalidArgument, "--resume: " + settings_shown + " does not read as this run's settings; remove " + shown_ +
                                         " to start over");
  DIR* d = ::opendir(path_.c_str());
  if (!d) fail(ErrorKind::Io, "--resume: cannot list " + shown_ + ": " + std::strerror(errno));
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) names.push_back(e->d_name);
  ::closedir(d);
  for (const std::string& n : names) {
    uint64_t index = 0;
    if (!record_index(n, index)) continue;
    found_[index] = read_regular_file(path_ + "/" + n, int64_t{1} << 40, ErrorKind::InvalidValue);
  }
}

ResumeArea::~ResumeArea() {
  if (std::uncaught_exceptions() > exceptions_ && stored_ == 0 && found_.empty()) out_.drop_resume_area();
}

std::string ResumeArea::record_path(uint64_t index) const {
  char name[32];
  std::snprintf(name, sizeof name, "window-%06llu.rec", static_cast<unsigned long long>(index));
  return shown_ + "/" + name;
}

void ResumeArea::store(uint64_t index, const std::string& record) {
  char name[32];
  std::snprintf(name, sizeof name, "window-%06llu.rec", static_cast<unsigned long long>(index));
  write_durably(path_ + "/" + name, record, shown_ + "/" + name);
  ++stored_;
  note_window_kept();
}

void note_window_kept() {
  ++g_stored;
  static const int64_t after = [] {
    const char* v = std::getenv("MLA_TEST_KILL_AFTER_WINDOWS");
    return v ? std::atoll(v) : int64_t{0};
  }();
  if (after > 0 && g_stored.load() >= after) ::raise(SIGKILL);
}

}  // namespace mla
