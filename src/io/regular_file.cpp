// src/io/regular_file.cpp — input files opened only when they are regular files
// (mla/regular_file.hpp).
#include <algorithm>
#include "mla/regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mla {

std::string file_kind_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    default: return "not a file";
  }
}

int open_regular_file(const std::string& path, ErrorKind kind) {
  // O_NONBLOCK: opening a FIFO does not wait for a writer; cleared below for a regular file
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail(kind, path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    fail(kind, path + ": cannot stat: " + why);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(kind, path + ": not a regular file (" + file_kind_name(st.st_mode) + ")");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

namespace {
// Up to `count` bytes of fd from its start into a string (fewer when the file is shorter).
std::string read_up_to(int fd, const std::string& path, int64_t count, ErrorKind kind) {
  std::string text(static_cast<size_t>(count), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      fail(kind, path + ": read error: " + why);
    }
    if (n == 0) break;  // shrank meanwhile
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(done);
  return text;
}
}  // namespace

std::string read_regular_file(const std::string& path, int64_t max_bytes, ErrorKind kind) {
  const int fd = open_regular_file(path, kind);
  struct stat st {};
  ::fstat(fd, &st);
  if (st.st_size > max_bytes) {
    ::close(fd);
    fail(kind, path + ": " + std::to_string(st.st_size) + " bytes, more than the " + std::to_string(max_bytes) +
                   " such a file may hold");
  }
  return read_up_to(fd, path, st.st_size, kind);
}

std::string read_regular_file_prefix(const std::string& path, int64_t prefix_bytes, ErrorKind kind) {
  const int fd = open_regular_file(path, kind);
  struct stat st {};
  ::fstat(fd, &st);
  return read_up_to(fd, path, std::min<int64_t>(std::max<int64_t>(prefix_bytes, 0), st.st_size), kind);
}

}  // namespace mla
