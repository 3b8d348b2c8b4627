// mla/error.hpp — the project's one error type.
//
// Every failure the library can detect (bad file, bad config, wrong shape, bad
// argument, CUDA failure) is thrown as mla::Error with a kind and a message that
// names the file / tensor / key / flag involved. The CLI prints `mla-h2o: error:
// <message>` on one line and exits 2 (bad usage) or 1 (anything else).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace mla {

enum class ErrorKind {
  // --- safetensors (names follow the reference crate's SafeTensorError) ---
  Io,                        // open/stat/mmap/read/write failed
  HeaderTooSmall,            // file shorter than 8 bytes
  HeaderTooLarge,            // header length > 100,000,000 bytes
  InvalidHeaderLength,       // 8 + N overflows or exceeds the file size
  InvalidHeaderUtf8,         // header bytes are not UTF-8
  InvalidHeaderJson,         // not JSON / not an object / schema violation / trailing bytes
  UnknownDtype,              // dtype string outside the known list
  DuplicateTensor,           // the same tensor name twice (stricter than the crate)
  InvalidOffset,             // begin != previous end, end < begin (gaps, overlaps)
  TensorInvalidInfo,         // shape x dtype size != end - begin
  ValidationOverflow,        // numel or byte size overflows 64 bits
  MetadataIncompleteBuffer,  // data section shorter or longer than the last offset
  TensorNotFound,            // asked for a tensor the file/checkpoint does not hold
  // --- model / checkpoint ---
  Config,                    // config.json missing key, wrong type, inconsistent value
  Shape,                     // a tensor's shape or dtype disagrees with the config
  Checkpoint,                // index.json problems, missing shard, layer out of range
  // --- run time ---
  InvalidArgument,           // bad CLI flag or option value
  InvalidValue,              // NaN/Inf/negative where not allowed (inputs, scores)
  Unsupported,               // valid input the project does not implement
  Cuda,                      // CUDA runtime / cuBLAS error, or no usable device
};

std::string_view error_kind_name(ErrorKind kind);

// `s` fit for one line of an error message: control bytes and bytes that are not valid UTF-8
// written as \xNN, cut after `max_bytes` with "...". Text taken from an input file (a CSV
// field, a header) goes through it, and main() passes every message through it too.
std::string printable_text(std::string_view s, size_t max_bytes = 64);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] inline void fail(ErrorKind kind, const std::string& message) {
  throw Error(kind, message);
}

}  // namespace mla
