// mla/regular_file.hpp — opening an input file only when it is a regular file. A FIFO, a device,
// a socket or a directory is refused before anything could block: open(2) of a FIFO for reading
// waits for a writer, so the file is opened non-blocking, checked with fstat, and only then read.
#pragma once

#include <cstdint>
#include <string>

#include "mla/error.hpp"

namespace mla {

// A read-only descriptor of `path` (the caller closes it), or an Error of `kind` that names the
// path: "PATH: not a regular file (a FIFO)", "PATH: cannot open: No such file or directory".
int open_regular_file(const std::string& path, ErrorKind kind = ErrorKind::Io);

// The whole file as text, refused as above, or when it holds more than `max_bytes`.
std::string read_regular_file(const std::string& path, int64_t max_bytes, ErrorKind kind = ErrorKind::Io);

// The first `prefix_bytes` bytes of the file (all of it when shorter), refused as above: an input
// is read only as far as the run needs.
std::string read_regular_file_prefix(const std::string& path, int64_t prefix_bytes, ErrorKind kind = ErrorKind::Io);

// "a FIFO", "a directory", "a character device", ... for an st_mode.
std::string file_kind_name(unsigned mode);

}  // namespace mla
