// src/report/files.cpp — the output directory and text files of run / demo / select.
// Every failure is an Error(Io) that names the path and the system's reason.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "mla/error.hpp"
#include "mla/report.hpp"

namespace mla {

void ensure_output_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (dir.empty()) fail(ErrorKind::InvalidArgument, "output directory: empty path");
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st) && !fs::is_directory(st))
    fail(ErrorKind::Io, "output directory " + dir + " exists and is not a directory");
  if (!fs::exists(st)) {
    fs::create_directories(dir, ec);
    if (ec) fail(ErrorKind::Io, "cannot create output directory " + dir + ": " + ec.message());
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail(ErrorKind::Io, "output directory " + dir + " is not writable: " + std::strerror(errno));
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail(ErrorKind::Io, "cannot write " + path + ": " + std::strerror(errno));
  const size_t n = std::fwrite(text.data(), 1, text.size(), f);
  const int close_rc = std::fclose(f);
  if (n != text.size() || close_rc != 0) {
    std::remove(tmp.c_str());
    fail(ErrorKind::Io, "cannot write " + path + ": short write");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    fail(ErrorKind::Io, "cannot write " + path + ": " + why);
  }
}

}  // namespace mla
