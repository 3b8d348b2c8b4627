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

// SHA-256 (FIPS 180-4), streamed: update() any number of times, then hex() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  std::string hex();  // 64 lowercase hex digits; the object is spent afterwards
 private:
  void block(const uint8_t* p);  // one 64-byte block into state_
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view data);

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
