// src/io/output_set.cpp — a command's outputs written as one set (mla/output_set.hpp,
// docs/outputs.md §6): the lock, the checks of the directory, the staging directory beside it,
// the atomic exchange, and the cleanup on an error or a signal.
//
// The signal handler may only make async-signal-safe calls, so each live set is described in a
// fixed table of plain character buffers (its staging path, the directory to remove when the set
// created it, the line to print), and the staging directory is removed with open/getdents64/
// unlinkat/rmdir (it is flat: a set holds plain files only).
#include "mla/output_set.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <map>
#include <set>
#include <vector>

#include "mla/error.hpp"
#include "mla_build_config.h"

namespace mla {
namespace {

namespace fs = std::filesystem;

std::string sys_error() { return std::strerror(errno); }

// ---- what the signal handler knows ---------------------------------------------------------

enum SlotState : int { kFree = 0, kStaging = 1, kCommitting = 2 };

struct Slot {
  std::atomic<int> state{kFree};
  bool remove_target = false;  // the set created its directory: removed when abandoned
  char staging[4096] = {};
  char target[4096] = {};
  // the line printed: "mla-h2o run: interrupted by " + "SIGINT" + "; out left as it was\n"
  char message_head[320] = {};
  char message_tail[320] = {};
};
constexpr int kSlots = 4;
Slot g_slots[kSlots];
std::atomic<int> g_pending_signal{0};
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[3];
std::mutex g_mutex;  // slot allocation and the abandoned note (never taken by the handler)
std::string g_abandoned_note;

static_assert(std::atomic<int>::is_always_lock_free);

// Removes the plain files of `path` and then the directory; async-signal-safe.
void remove_flat_dir(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    alignas(8) char buf[4096];
    bool removed = true;
    while (removed) {  // entries removed while listing may hide others: list again until none goes
      removed = false;
      ::lseek(fd, 0, SEEK_SET);
      for (long n; (n = ::syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0;) {
        for (long off = 0; off < n;) {
          // struct linux_dirent64: u64 d_ino, s64 d_off, u16 d_reclen, u8 d_type, char d_name[]
          unsigned short reclen = 0;
          std::memcpy(&reclen, buf + off + 16, sizeof reclen);
          const char* name = buf + off + 19;
          const bool dots = name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
          if (!dots && ::unlinkat(fd, name, 0) == 0) removed = true;
          off += reclen;
        }
      }
    }
    ::close(fd);
  }
  ::rmdir(path);
}

void restore_and_raise(int sig) {
  for (int k = 0; k < 3; ++k)
    if (kSignals[k] == sig) ::sigaction(sig, &g_previous[k], nullptr);
  ::raise(sig);
}

void on_signal(int sig) {
  bool committing = false;
  for (Slot& s : g_slots) {
    int expected = kStaging;
    if (s.state.load() == kCommitting) committing = true;
    if (!s.state.compare_exchange_strong(expected, kFree)) continue;
    remove_flat_dir(s.staging);
    if (s.remove_target) ::rmdir(s.target);
    const char* name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
    for (const char* part : {static_cast<const char*>(s.message_head), name, static_cast<const char*>(s.message_tail)})
      if (::write(STDERR_FILENO, part, std::strlen(part)) < 0) break;
  }
  if (committing) {  // the set is being moved into place: finish that, then the signal (commit())
    g_pending_signal.store(sig);
    return;
  }
  restore_and_raise(sig);
}

void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int k = 0; k < 3; ++k) {
      struct sigaction now {};
      ::sigaction(kSignals[k], nullptr, &g_previous[k]);
      if (g_previous[k].sa_handler == SIG_IGN) continue;  // e.g. SIGHUP under nohup: stays ignored
      now.sa_handler = on_signal;
      sigemptyset(&now.sa_mask);
      now.sa_flags = SA_RESTART;
      ::sigaction(kSignals[k], &now, nullptr);
    }
  });
}

void copy_text(char* dst, size_t size, const std::string& src) {
  const size_t n = std::min(size - 1, src.size());
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

// ---- the directory -----------------------------------------------------------------------------

std::vector<std::string> entries_of(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) fail(ErrorKind::Io, "cannot list output directory " + dir + ": " + sys_error());
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  ::closedir(d);
  return out;
}

// The text of `path` when it is a small regular file (never a FIFO that would block), else "".
std::string small_file(const std::string& path, int64_t max_bytes) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > max_bytes) return "";
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return "";
  std::string text(static_cast<size_t>(st.st_size), '\0');
  const ssize_t n = ::read(fd, text.data(), text.size());
  ::close(fd);
  return n == static_cast<ssize_t>(text.size()) ? text : "";
}

// 64-bit FNV-1a of `n` bytes, continuing from `h`.
constexpr uint64_t kFnvOffset = 1469598103934665603ull;
uint64_t fnv1a(const unsigned char* bytes, size_t n, uint64_t h = kFnvOffset) {
  for (size_t i = 0; i < n; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}

// FNV-1a of a file's bytes (the manifest's check that an entry is the file mla-h2o wrote; not a
// cryptographic hash: it guards against mistakes, not against an adversary who edits the manifest
// too). False when the file cannot be read.
bool file_fingerprint(const std::string& path, uint64_t& hash) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  hash = kFnvOffset;
  std::vector<unsigned char> buf(size_t{1} << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    hash = fnv1a(buf.data(), static_cast<size_t>(n), hash);
  }
  ::close(fd);
  return true;
}

std::string hex64(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

// One file of an earlier set as its manifest records it.
struct ManifestEntry {
  int64_t size = -1;
  std::string hash;  // hex64 of file_fingerprint
};

// The files an earlier set's manifest lists (line "file SIZE HASH NAME"); `found` false when the
// directory has no manifest of this format (a report.json alone is never trusted: anyone can
// write one).
std::map<std::string, ManifestEntry> manifest_files_of(const std::string& text, bool& found) {
  found = false;
  if (text.rfind("mla-h2o output set\n", 0) != 0) return {};
  found = true;
  std::map<std::string, ManifestEntry> files;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (line.rfind("file ", 0) == 0) {  // a line of another form (an earlier version's) lists nothing
      const size_t sp1 = line.find(' ', 5), sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
      if (sp2 != std::string::npos && sp2 - sp1 == 17) {
        ManifestEntry e;
        char* stop = nullptr;
        e.size = std::strtoll(line.c_str() + 5, &stop, 10);
        if (stop == line.c_str() + sp1 && e.size >= 0) {
          e.hash = line.substr(sp1 + 1, 16);
          files[line.substr(sp2 + 1)] = e;
        }
      }
    }
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return files;
}

std::string manifest_text(const std::string& dir) { return small_file(dir + "/" + kOutputManifest, int64_t{1} << 20); }

std::map<std::string, ManifestEntry> manifest_files(const std::string& dir, bool& found) {
  return manifest_files_of(manifest_text(dir), found);
}

// Why entry `name` of `dir` is not the file an earlier set's manifest says mla-h2o wrote there;
// "" when it is (a regular file of the recorded size and content).
std::string not_as_written(const std::string& dir, const std::string& name, const ManifestEntry& e) {
  struct stat st {};
  const std::string path = dir + "/" + name;
  if (::lstat(path.c_str(), &st) != 0) return "cannot be read (" + sys_error() + ")";
  if (S_ISDIR(st.st_mode)) return "is a directory, where mla-h2o wrote a file";
  if (!S_ISREG(st.st_mode)) return "is not a regular file, where mla-h2o wrote one";
  if (st.st_size != e.size) return "has changed since mla-h2o wrote it (its size)";
  uint64_t hash = 0;
  if (!file_fingerprint(path, hash)) return "cannot be read (" + sys_error() + ")";
  if (hex64(hash) != e.hash) return "has changed since mla-h2o wrote it (its content)";
  return "";
}

// The staging prefix of output directory `name`: ".NAME.mla-h2o-", with a long NAME cut to 160
// bytes plus its fingerprint, so that ".NAME.mla-h2o-<pid>-<k>" stays within NAME_MAX (255) for
// any valid name (a 250-byte --out was refused).
std::string staging_prefix(const std::string& name) {
  if (name.size() <= 200) return "." + name + ".mla-h2o-";
  const uint64_t h = fnv1a(reinterpret_cast<const unsigned char*>(name.data()), name.size());
  return "." + name.substr(0, 160) + "~" + hex64(h) + ".mla-h2o-";
}

// Refuses an output directory that is, holds or lies inside one of the command's inputs: the
// exchange would replace the input with the outputs (docs/outputs.md §6).
void check_apart_from_inputs(const std::string& shown, const fs::path& target, const std::vector<std::string>& inputs) {
  const std::string t = target.string();
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (in.empty() || !fs::exists(in, ec)) continue;  // e.g. --tokens 3,17,250: no path
    const fs::path p = fs::weakly_canonical(fs::absolute(in, ec), ec);
    if (ec) continue;
    const std::string i = p.string();
    const char* how = nullptr;
    if (i == t) how = "is";
    else if (i.rfind(t + "/", 0) == 0) how = "holds";
    else if (t.rfind(i + "/", 0) == 0) how = "lies inside";
    if (how)
      fail(ErrorKind::InvalidArgument, "output directory " + shown + " " + how + " the input " + in +
                                           ", which the new set would replace; pass another --out");
  }
}

// A staging directory's name for `target` (prefix, then "<pid>-<k>") whose process no longer runs.
bool stale_staging_name(const std::string& entry, const std::string& prefix) {
  if (entry.rfind(prefix, 0) != 0) return false;
  const std::string rest = entry.substr(prefix.size());
  const size_t dash = rest.find('-');
  if (dash == 0 || dash == std::string::npos || rest.find_first_not_of("0123456789") != dash) return false;
  const long pid = std::strtol(rest.substr(0, dash).c_str(), nullptr, 10);
  if (pid == static_cast<long>(::getpid())) {  // ours only if one of this process's live sets
    for (const Slot& s : g_slots)
      if (s.state.load() != kFree && fs::path(s.staging).filename() == entry) return false;
    return true;
  }
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// The names a staging directory's marker lists; `found` false without a marker of this format.
std::set<std::string> marker_names(const std::string& dir, bool& found) {
  const std::string text = small_file(dir + "/" + kStagingMarker, int64_t{1} << 20);
  found = text.rfind("mla-h2o staging set\n", 0) == 0;
  std::set<std::string> names;
  for (size_t at = 0; found && at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    if (text.compare(at, 5, "name ") == 0 && end > at + 5) names.insert(text.substr(at + 5, end - at - 5));
    at = end + 1;
  }
  return names;
}

// Whether `entry` is a file a staging directory of the set `names` holds: its marker, its
// manifest, one of the names, or a writer's temporary of one ("NAME.tmp.<pid>").
bool staging_file(const std::string& entry, const std::set<std::string>& names) {
  if (entry == kStagingMarker || entry == kOutputManifest || names.count(entry)) return true;
  const size_t tmp = entry.rfind(".tmp.");
  return tmp != std::string::npos && tmp + 5 < entry.size() && names.count(entry.substr(0, tmp)) &&
         entry.find_first_not_of("0123456789", tmp + 5) == std::string::npos;
}

// Removes the regular files of `dir` that staging_file() accepts, then `dir` when that emptied it;
// anything else stays, and so does `dir` with it. Never throws (the destructor calls it): a
// directory that cannot be listed (gone already) is left to rmdir.
void remove_staging_files(const std::string& dir, const std::set<std::string>& names) noexcept {
  std::vector<std::string> entries;
  try {
    entries = entries_of(dir);
  } catch (...) {
  }
  for (const std::string& e : entries) {
    struct stat st {};
    if (staging_file(e, names) && ::lstat((dir + "/" + e).c_str(), &st) == 0 && S_ISREG(st.st_mode))
      ::unlink((dir + "/" + e).c_str());
  }
  ::rmdir(dir.c_str());
}

// Whether `dir` holds only what a staging directory holds at some moment: nothing; its marker
// with its names (regular files, before the exchange); or, after the exchange, the previous set,
// every entry listed by its manifest and as written. Then also the names to remove.
bool holds_only_staging(const std::string& dir, std::set<std::string>& names) {
  std::vector<std::string> entries;
  try {
    entries = entries_of(dir);
  } catch (const Error&) {
    return false;
  }
  bool marked = false, listed = false;
  names = marker_names(dir, marked);
  const std::map<std::string, ManifestEntry> set = manifest_files(dir, listed);
  for (const std::string& e : entries) {
    struct stat st {};
    if (::lstat((dir + "/" + e).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
    if (marked && staging_file(e, names)) continue;
    const auto it = set.find(e);
    if (!marked && listed && (e == kOutputManifest || (it != set.end() && not_as_written(dir, e, it->second).empty()))) {
      names.insert(e);
      continue;
    }
    return false;
  }
  return true;
}

void write_all(int fd, std::string_view bytes, const std::string& what) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? sys_error() : "the system wrote nothing";
      ::close(fd);
      fail(ErrorKind::Io, "cannot write " + what + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
}

void fsync_path(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) fail(ErrorKind::Io, "cannot write " + what + ": " + sys_error());
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? sys_error() : "";
  ::close(fd);
  if (rc != 0) fail(ErrorKind::Io, "cannot write " + what + ": " + why);
}

// The directory --out names, as the set will replace it: absolute, normalised, its symbolic links
// resolved (the set replaces the real directory).
fs::path resolved_target(const std::string& dir) {
  if (dir.empty()) fail(ErrorKind::InvalidArgument, "output directory: empty path");
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "out/" -> "out"
  p = fs::weakly_canonical(p, ec);
  if (ec || p == p.root_path() || !p.has_filename())
    fail(ErrorKind::InvalidArgument, "output directory '" + dir + "': not a directory an output set can replace");
  return p;
}

// The target directory, created (with its parents) when it does not exist: whether this call created it.
bool open_target(const std::string& dir, const std::string& target, const std::string& parent) {
  struct stat st {};
  if (::lstat(target.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) fail(ErrorKind::Io, "output directory " + dir + " exists and is not a directory");
    return false;
  }
  if (errno != ENOENT) fail(ErrorKind::Io, "cannot use output directory " + dir + ": " + sys_error());
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) fail(ErrorKind::Io, "cannot create output directory " + dir + ": " + ec.message());
  if (::mkdir(target.c_str(), 0777) == 0) return true;
  if (errno != EEXIST) fail(ErrorKind::Io, "cannot create output directory " + dir + ": " + sys_error());
  return false;
}

// The lock, on the directory itself (its descriptor; `st` its inode); a writer that committed
// meanwhile may have exchanged it for a new one, so the locked inode must still be the one at the path.
int lock_target(const std::string& dir, const std::string& target, OutputSet::Lock lock, struct stat& st) {
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(target.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fail(ErrorKind::Io, "cannot open output directory " + dir + ": " + sys_error());
    if (::flock(fd, LOCK_EX | (lock == OutputSet::Lock::Wait ? 0 : LOCK_NB)) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK)
        fail(ErrorKind::Io, "another mla-h2o process is writing to " + dir +
                                " (it holds the directory's lock); wait for it to finish or pass another --out");
      fail(ErrorKind::Io, "cannot lock output directory " + dir + ": " + std::strerror(err));
    }
    struct stat locked {}, now {};
    if (::fstat(fd, &locked) == 0 && ::stat(target.c_str(), &now) == 0 && locked.st_ino == now.st_ino &&
        locked.st_dev == now.st_dev) {
      st = locked;
      return fd;
    }
    ::close(fd);
    if (attempt == 3) fail(ErrorKind::Io, "output directory " + dir + " keeps being replaced by another process");
  }
}

// The locked target can be replaced by a set: writable, not a mount point, not holding the
// current directory, and what it holds is an earlier set, all of it, as written.
// `entries` and `manifest`: what it holds, as checked (the entries sorted).
void check_replaceable(const std::string& dir, const std::string& target, const std::string& parent, const struct stat& st,
                       std::vector<std::string>& entries, std::string& manifest, bool resume_area) {
  if (::access(target.c_str(), W_OK | X_OK) != 0)
    fail(ErrorKind::Io, "output directory " + dir + " is not writable: " + sys_error());
  struct stat up {};
  if (::stat(parent.c_str(), &up) == 0 && up.st_dev != st.st_dev)
    fail(ErrorKind::Io, "output directory " + dir + " is a mount point, so a new set cannot replace it in one step; "
                        "pass a directory below it");
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  if (!ec) {
    const std::string here = fs::weakly_canonical(cwd, ec).string();
    if (!ec && (here == target || here.rfind(target + "/", 0) == 0))
      fail(ErrorKind::InvalidArgument, "output directory " + dir + " holds the current directory; pass a directory of its own");
  }
  entries = entries_of(target);
  if (resume_area) {  // eval's resume area: its own checks (mla/resume_area.hpp), never part of a set
    struct stat area {};
    const std::string path = target + "/" + kResumeArea;
    if (::lstat(path.c_str(), &area) == 0 && S_ISDIR(area.st_mode))
      entries.erase(std::remove(entries.begin(), entries.end(), std::string(kResumeArea)), entries.end());
  }
  std::sort(entries.begin(), entries.end());
  if (entries.empty()) return;
  manifest = manifest_text(target);
  bool found = false;
  const std::map<std::string, ManifestEntry> listed = manifest_files_of(manifest, found);
  const std::string advice = "; pass a new or empty directory (an earlier mla-h2o set there is replaced as a whole)";
  for (const std::string& e : entries) {
    if (e == kOutputManifest && found) continue;
    const auto it = listed.find(e);
    if (it == listed.end())
      fail(ErrorKind::Io, "output directory " + dir + " holds '" + e + "', which " +
                              (found ? "its earlier mla-h2o set does not list" : "mla-h2o did not write") + advice);
    if (const std::string why = not_as_written(target, e, it->second); !why.empty())
      fail(ErrorKind::Io, "output directory " + dir + " holds '" + e + "', which " + why + ", so it is not removed" + advice);
  }
}

// Staging directories of writers that died (SIGKILL, power loss).
void remove_stale_staging(const std::string& parent, const std::string& prefix) {
  DIR* d = ::opendir(parent.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d))
    if (stale_staging_name(e->d_name, prefix)) stale.push_back(e->d_name);
  ::closedir(d);
  for (const std::string& s : stale) {  // by its contents, never by its name alone (issue 46)
    const std::string path = (fs::path(parent) / s).string();
    std::set<std::string> names;
    if (holds_only_staging(path, names)) remove_staging_files(path, names);
  }
}

// The staging directory beside the target, with the permissions the target has (mode >= 0) or
// would get (-1: created by this set).
std::string make_staging(const std::string& dir, const std::string& parent, const std::string& prefix, int mode) {
  static std::atomic<int> counter{0};
  const std::string staging = (fs::path(parent) / (prefix + std::to_string(::getpid()) + "-" + std::to_string(counter++))).string();
  if (::mkdir(staging.c_str(), 0777) != 0)
    fail(ErrorKind::Io, "cannot create a staging directory beside " + dir + " (in " + parent + "): " + sys_error());
  const std::string marker = staging + "/" + kStagingMarker;
  const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    const std::string why = sys_error();
    ::rmdir(staging.c_str());
    fail(ErrorKind::Io, "cannot create a staging directory beside " + dir + " (in " + parent + "): " + why);
  }
  const std::string head = "mla-h2o staging set\npid " + std::to_string(::getpid()) + "\n";
  const bool ok = ::write(fd, head.data(), head.size()) == static_cast<ssize_t>(head.size());
  const std::string why = ok ? "" : sys_error();
  ::close(fd);
  if (!ok) {
    ::unlink(marker.c_str());
    ::rmdir(staging.c_str());
    fail(ErrorKind::Io, "cannot create a staging directory beside " + dir + " (in " + parent + "): " + why);
  }
  if (mode >= 0) ::chmod(staging.c_str(), static_cast<mode_t>(mode));
  return staging;
}

// Appends "name NAME" to the staging marker, so that a later writer can tell the set's files.
void mark_name(const std::string& staging, const std::string& name, const std::string& dir) {
  const int fd = ::open((staging + "/" + kStagingMarker).c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) fail(ErrorKind::Io, "cannot write the staging marker of " + dir + ": " + sys_error());
  write_all(fd, "name " + name + "\n", "the staging marker of " + dir);
  if (::close(fd) != 0) fail(ErrorKind::Io, "cannot write the staging marker of " + dir + ": " + sys_error());
}

std::function<void(const std::string&, const std::string&)>& test_hook() {
  static std::function<void(const std::string&, const std::string&)> hook;
  return hook;
}

// Why directory `path` is no longer what the set found at its start: device `dev`, inode `ino`,
// exactly `entries`, each as `manifest` records it; "" when it still is.
std::string changed_since_start(const std::string& path, uint64_t dev, uint64_t ino, const std::vector<std::string>& entries,
                                const std::string& manifest, bool resume_area) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return "it is gone (" + sys_error() + ")";
  if (!S_ISDIR(st.st_mode) || st.st_dev != dev || st.st_ino != ino)
    return "it is no longer the directory the run started with: it was moved away or replaced";
  std::vector<std::string> now;
  try {
    now = entries_of(path);
  } catch (const Error& e) {
    return e.what();
  }
  if (resume_area) now.erase(std::remove(now.begin(), now.end(), std::string(kResumeArea)), now.end());
  std::sort(now.begin(), now.end());
  for (const std::string& e : now)
    if (!std::binary_search(entries.begin(), entries.end(), e)) return "it now holds '" + e + "', which mla-h2o did not write";
  for (const std::string& e : entries)
    if (!std::binary_search(now.begin(), now.end(), e)) return "'" + e + "' was removed from it";
  if (entries.empty()) return "";
  if (manifest_text(path) != manifest) return "its manifest " + std::string(kOutputManifest) + " has changed";
  bool found = false;
  const std::map<std::string, ManifestEntry> listed = manifest_files_of(manifest, found);
  for (const std::string& e : entries) {
    if (e == kOutputManifest) continue;
    const auto it = listed.find(e);
    const std::string why = it == listed.end() ? "is not listed" : not_as_written(path, e, it->second);
    if (!why.empty()) return "'" + e + "' " + why;
  }
  return "";
}

// A sibling of `target` the new set can be moved to without replacing anything: "NAME.mla-h2o-new",
// else "-2", "-3", ...; `staging` stays where it is ("" returned) when none can be had.
std::string move_to_sibling(const std::string& staging, const std::string& target) {
  const fs::path t(target);
  std::string name = t.filename().string();
  if (name.size() > 200) name = staging_prefix(name).substr(1, 160 + 17);
  for (int k = 1; k <= 100; ++k) {
    const std::string sibling = (t.parent_path() / (name + ".mla-h2o-new" + (k == 1 ? "" : "-" + std::to_string(k)))).string();
    int rc = static_cast<int>(::syscall(SYS_renameat2, AT_FDCWD, staging.c_str(), AT_FDCWD, sibling.c_str(), 1 /* RENAME_NOREPLACE */));
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {  // no RENAME_NOREPLACE: rename(2) replaces at most an empty directory
      struct stat st {};
      if (::lstat(sibling.c_str(), &st) == 0) continue;
      rc = ::rename(staging.c_str(), sibling.c_str());
    }
    if (rc == 0) return sibling;
    if (errno != EEXIST && errno != ENOTEMPTY) return "";
  }
  return "";
}

// eval's resume area, by its own files only (anything else in it keeps it, and so the previous set's place).
void remove_resume_area(const std::string& path) noexcept {
  std::vector<std::string> entries;
  try {
    entries = entries_of(path);
  } catch (...) {
    return;
  }
  for (const std::string& e : entries) {
    struct stat st {};
    if (resume_area_file(e) && ::lstat((path + "/" + e).c_str(), &st) == 0 && S_ISREG(st.st_mode))
      ::unlink((path + "/" + e).c_str());
  }
  ::rmdir(path.c_str());
}

// A free slot for the signal handlers (what to remove and say if the process is interrupted).
int claim_slot(const std::string& staging, const std::string& target, bool created_target, const std::string& command,
               const std::string& dir) {
  const std::lock_guard<std::mutex> g(g_mutex);
  for (int k = 0; k < kSlots; ++k) {
    Slot& s = g_slots[k];
    if (s.state.load() != kFree) continue;
    copy_text(s.staging, sizeof s.staging, staging);
    copy_text(s.target, sizeof s.target, target);
    s.remove_target = created_target;
    copy_text(s.message_head, sizeof s.message_head, "mla-h2o " + command + ": interrupted by ");
    copy_text(s.message_tail, sizeof s.message_tail, "; " + dir + (created_target ? " not created" : " left as it was") + "\n");
    s.state.store(kStaging);
    return k;
  }
  fail(ErrorKind::Io, "too many output sets open at once in one process");
}

}  // namespace

OutputSet::OutputSet(std::string dir, std::string command, Lock lock, const std::vector<std::string>& inputs, bool resume_area)
    : dir_(std::move(dir)), command_(std::move(command)), resume_area_(resume_area) {
  const fs::path p = resolved_target(dir_);
  target_ = p.string();
  const std::string parent = p.parent_path().string(), name = p.filename().string();
  check_apart_from_inputs(dir_, p, inputs);  // before anything is created
  created_target_ = open_target(dir_, target_, parent);
  struct stat st {};
  lock_fd_ = lock_target(dir_, target_, lock, st);
  try {
    check_replaceable(dir_, target_, parent, st, found_.entries, found_.manifest, resume_area_);
    found_.dev = static_cast<uint64_t>(st.st_dev);
    found_.ino = static_cast<uint64_t>(st.st_ino);
    const std::string prefix = staging_prefix(name);
    remove_stale_staging(parent, prefix);
    staging_ = make_staging(dir_, parent, prefix, created_target_ ? -1 : static_cast<int>(st.st_mode & 07777));
    slot_ = claim_slot(staging_, target_, created_target_, command_, dir_);
    install_handlers();
  } catch (...) {
    if (!staging_.empty()) ::rmdir(staging_.c_str());
    if (created_target_) ::rmdir(target_.c_str());
    ::close(lock_fd_);
    throw;
  }
}

OutputSet::~OutputSet() {
  if (!committed_) {
    remove_staging_files(staging_, std::set<std::string>(names_.begin(), names_.end()));  // only what the set wrote
    if (created_target_) ::rmdir(target_.c_str());
    if (std::uncaught_exceptions() > 0) {
      const std::lock_guard<std::mutex> g(g_mutex);
      g_abandoned_note = "; " + dir_ + (created_target_ ? " not created" : " left as it was") +
                         (resume_area_ && ::access((target_ + "/" + kResumeArea).c_str(), F_OK) == 0
                              ? ", its finished windows kept in " + std::string(kResumeArea) + " for --resume"
                              : "");
    }
  }
  if (slot_ >= 0) g_slots[slot_].state.store(kFree);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::string OutputSet::add(const std::string& plain_name) {
  const std::string name = prefix_ + plain_name;
  if (committed_) fail(ErrorKind::Io, "output set " + dir_ + ": '" + name + "' added after the set was committed");
  if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos || name.find('\n') != std::string::npos)
    fail(ErrorKind::InvalidArgument, "output set " + dir_ + ": '" + name + "' is not a plain file name");
  for (const std::string& n : names_)
    if (n == name) fail(ErrorKind::InvalidArgument, "output set " + dir_ + ": '" + name + "' written twice");
  mark_name(staging_, name, dir_);
  names_.push_back(name);
  return staging_ + "/" + name;
}

void OutputSet::write(const std::string& name, std::string_view bytes) {
  const std::string path = add(name), shown = (fs::path(dir_) / (prefix_ + name)).string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) fail(ErrorKind::Io, "cannot write " + shown + ": " + sys_error());
  write_all(fd, bytes, shown);
  if (::close(fd) != 0) fail(ErrorKind::Io, "cannot write " + shown + ": " + sys_error());
}

std::vector<std::string> OutputSet::paths_with(std::initializer_list<std::string> also) const {
  std::vector<std::string> out;
  for (const std::string& n : names_) out.push_back((fs::path(dir_) / n).string());
  for (const std::string& plain : also)
    if (const std::string n = prefix_ + plain; std::find(names_.begin(), names_.end(), n) == names_.end())
      out.push_back((fs::path(dir_) / n).string());
  return out;
}

void OutputSet::seal() {
  // Each file's size and fingerprint, so that the next writer removes only what this one wrote.
  std::string manifest = std::string("mla-h2o output set\nproducer mla-h2o ") + MLA_VERSION + "\ncommand " + command_ + "\n";
  for (const std::string& n : names_) {
    struct stat st {};
    const std::string path = staging_ + "/" + n, shown = (fs::path(dir_) / n).string();
    errno = 0;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      fail(ErrorKind::Io, "cannot write " + shown + ": it was never written (" + (errno ? sys_error() : "not a file") + ")");
    fsync_path(path, shown);
    uint64_t hash = 0;
    if (!file_fingerprint(path, hash)) fail(ErrorKind::Io, "cannot read back " + shown + ": " + sys_error());
    manifest += "file " + std::to_string(st.st_size) + " " + hex64(hash) + " " + n + "\n";
  }
  const std::string manifest_path = staging_ + "/" + kOutputManifest;
  const int fd = ::open(manifest_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) fail(ErrorKind::Io, "cannot write the manifest of " + dir_ + ": " + sys_error());
  write_all(fd, manifest, (fs::path(dir_) / kOutputManifest).string());
  if (::close(fd) != 0) fail(ErrorKind::Io, "cannot write the manifest of " + dir_ + ": " + sys_error());
  fsync_path(manifest_path, dir_ + "/" + kOutputManifest);
  // The marker goes once the manifest is on disk: the set then describes itself as any set does.
  if (::unlink((staging_ + "/" + kStagingMarker).c_str()) != 0)
    fail(ErrorKind::Io, "cannot remove the staging marker of " + dir_ + ": " + sys_error());
  fsync_path(staging_, dir_);
}

OutputSet::Moved OutputSet::move_into_place() {
  Moved how = Moved::Exchanged;
  bool ok = ::syscall(SYS_renameat2, AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), 2 /* RENAME_EXCHANGE */) == 0;
  int err = errno;
  if (!ok && (err == EINVAL || err == ENOSYS || err == EOPNOTSUPP)) {
    // No RENAME_EXCHANGE on this filesystem: rename(2) replaces an empty directory atomically;
    // a non-empty one is moved aside first (a moment without the directory).
    how = Moved::Renamed;
    ok = ::rename(staging_.c_str(), target_.c_str()) == 0;
    err = errno;
    if (!ok && (err == ENOTEMPTY || err == EEXIST)) {
      const std::string aside = staging_ + "-old";
      how = Moved::MovedAside;
      ok = ::rename(target_.c_str(), aside.c_str()) == 0 && ::rename(staging_.c_str(), target_.c_str()) == 0;
      err = errno;
      if (ok) staging_ = aside;
    }
  }
  if (!ok) {
    g_slots[slot_].state.store(kStaging);
    if (const int sig = g_pending_signal.exchange(0)) on_signal(sig);
    fail(ErrorKind::Io, "cannot move the new set into " + dir_ + ": " + std::strerror(err));
  }
  committed_ = true;
  if (const int parent = ::open(fs::path(target_).parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); parent >= 0) {
    ::fsync(parent);  // the exchange itself on disk; it has happened whatever this says
    ::close(parent);
  }
  return how;
}

void OutputSet::release() {
  if (slot_ >= 0) g_slots[slot_].state.store(kFree);
  slot_ = -1;
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
  if (const int sig = g_pending_signal.exchange(0)) restore_and_raise(sig);
}

void OutputSet::divert(const std::string& why) {
  g_slots[slot_].state.store(kCommitting);
  const std::string sibling = move_to_sibling(staging_, target_);
  committed_ = true;  // the new set is kept, wherever it now is, and nothing else is removed
  if (!sibling.empty()) staging_ = sibling;
  release();
  fail(ErrorKind::Io, "output directory " + dir_ + " changed while mla-h2o " + command_ + " ran (" + why +
                          "), so it is left as it is; the new set is in " + staging_);
}

void OutputSet::remove_previous(Moved how) {
  if (test_hook()) test_hook()("delete", staging_);
  if (how != Moved::Renamed) {  // the previous set, now in the staging place: still what was claimed?
    const std::string why = changed_since_start(staging_, found_.dev, found_.ino, found_.entries, found_.manifest, resume_area_);
    if (!why.empty()) {
      // exchanged back when the system can, so that the user's directory keeps its place
      if (how == Moved::Exchanged &&
          ::syscall(SYS_renameat2, AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), 2 /* RENAME_EXCHANGE */) == 0)
        divert(why);
      const std::string previous = staging_;
      release();
      fail(ErrorKind::Io, "the new set is in " + dir_ + ", but the previous one, in " + previous + ", changed while mla-h2o " +
                              command_ + " ran (" + why + "), so it is kept there");
    }
  }
  for (const std::string& e : found_.entries) ::unlink((staging_ + "/" + e).c_str());  // exactly what was claimed
  if (resume_area_) remove_resume_area(staging_ + "/" + kResumeArea);  // the finished run's windows: done with
  const bool gone = ::rmdir(staging_.c_str()) == 0 || errno == ENOENT;
  const std::string reason = gone ? "" : sys_error();
  release();
  if (!gone)
    fail(ErrorKind::Io, "the new set is in " + dir_ + ", but the previous one could not be removed from " + staging_ + ": " +
                            reason + "; remove it by hand");
}

void OutputSet::commit() {
  if (committed_) return;
  if (!prefix_.empty()) return;  // a part of a set written by several steps: the outer commit() follows
  seal();  // the manifest, then every file and the directory on disk (a full disk may only say so here)
  if (test_hook()) test_hook()("swap", target_);
  // From here until the previous set is gone, a signal waits for us.
  g_slots[slot_].state.store(kCommitting);
  if (const std::string why = changed_since_start(target_, found_.dev, found_.ino, found_.entries, found_.manifest, resume_area_);
      !why.empty())
    divert(why);
  remove_previous(move_into_place());
}

std::string OutputSet::resume_area_path() {
  if (!resume_area_) fail(ErrorKind::Io, "output set " + dir_ + ": no resume area was allowed for " + command_);
  const std::string path = target_ + "/" + kResumeArea;
  if (::mkdir(path.c_str(), 0777) != 0 && errno != EEXIST)
    fail(ErrorKind::Io, "cannot create " + dir_ + "/" + kResumeArea + ": " + sys_error());
  if (created_target_ || slot_ >= 0) {  // from here the directory holds finished work: never removed when abandoned
    created_before_area_ = created_before_area_ || created_target_;
    created_target_ = false;
    const std::lock_guard<std::mutex> g(g_mutex);
    if (slot_ >= 0) {
      g_slots[slot_].remove_target = false;
      copy_text(g_slots[slot_].message_tail, sizeof g_slots[slot_].message_tail,
                "; " + dir_ + " keeps the finished windows in " + kResumeArea + " for --resume\n");
    }
  }
  return path;
}

void OutputSet::drop_resume_area() {
  if (!resume_area_ || committed_) return;
  remove_resume_area(target_ + "/" + kResumeArea);
  created_target_ = created_before_area_;
  const std::lock_guard<std::mutex> g(g_mutex);
  if (slot_ >= 0) {
    g_slots[slot_].remove_target = created_target_;
    copy_text(g_slots[slot_].message_tail, sizeof g_slots[slot_].message_tail,
              "; " + dir_ + (created_target_ ? " not created" : " left as it was") + "\n");
  }
}

bool resume_area_file(const std::string& name) {
  const auto digits = [](const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; };
  std::string base = name;
  if (const size_t tmp = name.rfind(".tmp."); tmp != std::string::npos) {
    if (!digits(name.substr(tmp + 5))) return false;
    base = name.substr(0, tmp);
  }
  if (base == "settings") return true;
  return base.size() > 11 && base.rfind("window-", 0) == 0 && base.compare(base.size() - 4, 4, ".rec") == 0 &&
         digits(base.substr(7, base.size() - 11));
}

void OutputSet::begin_part(const std::string& prefix) {
  if (committed_) fail(ErrorKind::Io, "output set " + dir_ + ": a part begun after the set was committed");
  prefix_ = prefix;
}

void set_output_set_hook(std::function<void(const std::string& stage, const std::string& path)> hook) {
  test_hook() = std::move(hook);
}

std::string abandoned_output_note() {
  const std::lock_guard<std::mutex> g(g_mutex);
  return g_abandoned_note;
}

}  // namespace mla
