// mla/provenance.hpp — what every report.json records about how it was made (docs/outputs.md §7):
// the product's version and git revision, the full command line, and the SHA-256 of every model
// file the run read, so that a number can be traced to the exact binary, flags and weights.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

// (JsonWriter: mla/report.hpp)

namespace mla {

class JsonWriter;

// SHA-256 (FIPS 180-4), streamed: update() any number of times, then hex() once. The blocks run
// on the CPU's SHA extensions (x86 SHA-NI: sha256rnds2, sha256msg1/2) when it has them, checked
// at run time, else on the portable code; both give the same digest (suite report).
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  std::string hex();  // 64 lowercase hex digits; the object is spent afterwards
 private:
  void blocks(const uint8_t* p, size_t count);  // `count` 64-byte blocks into state_
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view data);

// Whether Sha256 runs on the SHA extensions now. set_sha256_extensions(false) makes it use the
// portable code (for tests and benchmarks); (true) uses the extensions when the CPU has them.
// Returns whether they are in use afterwards.
bool sha256_extensions();
bool set_sha256_extensions(bool on);

struct FileDigest {
  std::string path;    // as the run named it
  int64_t bytes = 0;
  std::string sha256;  // 64 hex digits
};

// The SHA-256 of each file, read in 4 MiB pieces; progress(done_bytes, total_bytes) after each.
// Error(Io) naming the file when one cannot be read to its end.
std::vector<FileDigest> file_digests(const std::vector<std::string>& paths,
                                     const std::function<void(int64_t, int64_t)>& progress = {});

// The process's argv, set once by main() (empty in tests that call commands directly).
void set_command_line(int argc, const char* const* argv);
const std::vector<std::string>& command_line();

// The git revision the binary was built from ("git describe --always --dirty" at build time;
// "unknown" outside a git checkout).
const char* git_revision();

// Keys of report.json: "versions" {mla_h2o, git_revision, compiler, cuda_built, openblas},
// "argv" [...] and, when model_files is not null, "model_files" [{path, bytes, sha256}].
void write_provenance(JsonWriter& w, const std::vector<FileDigest>* model_files);

}  // namespace mla
