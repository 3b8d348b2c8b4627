// mla/output_set.hpp — a command's outputs, written as one set: its output directory holds the
// previous complete set or the new complete one, never a mix of the two and never a partial
// file (docs/outputs.md §6, "The output contract").
//
//   OutputSet out(dir, "run");                          // before any work: lock, staging directory
//   out.write("scores.csv", scores_csv(...));           // into the staging directory
//   write_tensor_dump(out.add("tensors.safetensors"), ...);  // a writer that takes a path
//   info.files = out.paths_with({"report.json"});       // report.json lists every file of the set
//   out.write("report.json", report_json(rep));
//   out.commit();                                       // the set replaces dir's contents in one step
//
// The rules:
//   * `dir` is created when missing. When it exists it must be a directory that holds nothing or
//     an earlier mla-h2o set: its manifest, .mla-h2o-set, names every entry with the size and a
//     fingerprint (64-bit FNV-1a) of the file written, and every entry must still be that regular
//     file. Anything else (a foreign file, a directory under a listed name, a changed file, a
//     report.json without a manifest) is refused before any work, so nothing mla-h2o did not
//     write is ever removed. A `dir` that is, holds or lies inside an input is refused too.
//   * One writer at a time: the writer holds flock(LOCK_EX) on `dir`; a second one fails at once
//     with one line.
//   * Files are written into a private staging directory beside `dir` (same parent, so the same
//     filesystem): ".NAME.mla-h2o-<pid>-<k>". commit() writes the manifest, flushes every file to
//     disk, then exchanges the staging directory with `dir` in one atomic step
//     (renameat2 RENAME_EXCHANGE) and removes the previous set, now in the staging place.
//   * Just before the exchange, and again just before the previous set is deleted, the directory
//     is checked once more: still the one claimed (device and inode), holding exactly the entries
//     it held then, each as written. When anything changed (a file or folder added, --out moved
//     away and replaced) nothing is removed: `dir` is left as it is, the new set is moved to a
//     sibling "NAME.mla-h2o-new" (or "-2", "-3", ...), and commit() throws one line naming both.
//   * The staging directory holds a marker, .mla-h2o-staging, listing the set's names as they are
//     added. A staging directory is removed only if it holds what one holds (the marker and
//     those names, or a complete earlier set, or nothing), never for its name alone.
//   * Without commit (an error, or SIGINT / SIGTERM / SIGHUP) the staging directory is removed,
//     `dir` is left exactly as it was (removed again if this set created it), and the error line
//     says so (abandoned_output_note()). A staging directory left by a killed process (SIGKILL,
//     power loss) is removed by the next writer of the same directory.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace mla {

class OutputSet {
 public:
  enum class Lock { FailIfHeld, Wait };
  // Claims `dir` for `command` ("run", "synth", ...): see the rules above. Throws Error(Io) or
  // Error(InvalidArgument) with one line naming the directory.
  // `inputs`: the files and directories the command reads; a `dir` that is, holds or lies inside
  // one of them is refused (the exchange would replace it).
  // `resume_area`: `dir` may also hold eval's resume area (kResumeArea, mla/resume_area.hpp),
  // which the set then neither claims nor checks; it is removed with the previous set on commit.
  OutputSet(std::string dir, std::string command, Lock lock = Lock::FailIfHeld,
            const std::vector<std::string>& inputs = {}, bool resume_area = false);
  ~OutputSet();
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;

  const std::string& dir() const { return dir_; }  // as given
  const std::string& target() const { return target_; }  // absolute, its links resolved

  // The resume area inside the directory (created when missing): from here the directory is
  // kept when the set is abandoned, whether or not this set created it (the area holds finished
  // work). Only for a set claimed with resume_area.
  std::string resume_area_path();
  // The resume area removed again (a run that failed before any window finished: nothing to
  // resume); the directory is then treated as before resume_area_path().
  void drop_resume_area();

  // The staging path of file `name` (a plain file name: no '/', not hidden, not added before),
  // recorded as part of the set, for writers that take a path.
  std::string add(const std::string& name);
  // add(name), then the bytes written to it (created exclusively; a failed or short write is an
  // Error(Io) naming the file and the system's reason).
  void write(const std::string& name, std::string_view bytes);
  // The final paths (dir/name) of every file added so far, in order, then those of `also` (files
  // about to be written, such as the reports that list them) not added yet.
  std::vector<std::string> paths_with(std::initializer_list<std::string> also = {}) const;
  // Moves the set into place (see the rules above). Nothing may be added afterwards.
  // A no-op inside a part (begin_part with a prefix): the outer commit() moves the whole set.
  void commit();
  bool committed() const { return committed_; }
  // A set written by several steps as one (demo --model: layer 0's run, then eval): from here
  // every name added gets `prefix` ("layer0-") and commit() waits; begin_part("") ends the parts,
  // and the next commit() moves the whole set, or nothing if any step failed.
  void begin_part(const std::string& prefix);

 private:
  enum class Moved { Exchanged, Renamed, MovedAside };
  void seal();                                     // the manifest, every file on disk, the marker gone
  Moved move_into_place();                         // the exchange (or its fallbacks)
  [[noreturn]] void divert(const std::string& why);  // the new set to a sibling, then the error line
  void remove_previous(Moved how);                 // the previous set, checked again, then deleted
  void release();                                  // the signal slot and the lock, then a pending signal

  // What the directory held when the set claimed it, checked again before the exchange and the deletion.
  struct Found {
    uint64_t dev = 0, ino = 0;
    std::vector<std::string> entries;  // sorted
    std::string manifest;              // the earlier set's manifest ("" when none)
  };
  Found found_;
  std::string dir_, command_, target_, staging_;
  std::string prefix_;  // of the part being written; commit() waits while it is not empty
  std::vector<std::string> names_;
  int lock_fd_ = -1;
  int slot_ = -1;  // in the signal handler's table
  bool created_target_ = false, committed_ = false, resume_area_ = false;
  bool created_before_area_ = false;  // the set created the directory before its resume area kept it
};

// After a command failed: "; DIR left as it was" (or "; DIR not created") for the last output
// set abandoned in this process, else "". main() appends it to the error line.
std::string abandoned_output_note();

// For tests: `hook(stage, path)` is called with stage "swap" and the output directory just before
// it is checked for the exchange, and with "delete" and the previous set's place just before that
// is checked for deletion (what a user could do at that moment, done deterministically). An
// empty function removes the hook.
void set_output_set_hook(std::function<void(const std::string& stage, const std::string& path)> hook);

// The manifest's file name inside every set.
inline constexpr const char* kOutputManifest = ".mla-h2o-set";
// The marker inside a staging directory: "mla-h2o staging set", then "name NAME" per file added.
inline constexpr const char* kStagingMarker = ".mla-h2o-staging";
// eval's resume area inside an output directory, and whether a name is one of its files
// (settings, window-NNNNNN.rec, and their temporary names NAME.tmp.PID): only those are removed.
inline constexpr const char* kResumeArea = ".mla-h2o-resume";
bool resume_area_file(const std::string& name);

}  // namespace mla
