// src/io/memory_available.cpp — the probe of what this process may still allocate (see
// mla/memory_available.hpp): /proc/meminfo, the cgroup's limit, or MLA_MEMORY_AVAILABLE.
#include "mla/memory_available.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "mla/error.hpp"

namespace mla {
namespace {

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

int64_t process_resident_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(in >> size >> resident) || resident <= 0) return -1;
  const long page = ::sysconf(_SC_PAGESIZE);
  return page > 0 ? resident * static_cast<int64_t>(page) : -1;
}

int64_t parse_byte_count(std::string_view text) {
  const std::string t = trim(text);
  if (t.empty()) return -1;
  size_t digits = 0;
  while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
  if (digits == 0 || digits > 18) return -1;
  int64_t v = std::stoll(t.substr(0, digits));
  const std::string suffix = t.substr(digits);
  int shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "KiB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GiB") {
    shift = 30;
  } else if (suffix == "T" || suffix == "TiB") {
    shift = 40;
  } else {
    return -1;
  }
  if (v > (INT64_MAX >> shift)) return -1;
  return v << shift;
}

int64_t parse_meminfo_available(std::string_view meminfo) {
  const std::string_view key = "MemAvailable:";
  const size_t at = meminfo.find(key);
  if (at == std::string_view::npos) return -1;
  std::string_view rest = meminfo.substr(at + key.size());
  rest = rest.substr(0, rest.find('\n'));
  std::string t = trim(rest);
  if (t.size() > 3 && t.substr(t.size() - 3) == " kB") t = trim(t.substr(0, t.size() - 3));
  const int64_t kb = parse_byte_count(t);
  return kb < 0 || kb > (INT64_MAX >> 10) ? -1 : kb << 10;
}

int64_t parse_cgroup_limit(std::string_view text) {
  const std::string t = trim(text);
  if (t == "max") return -1;
  const int64_t v = parse_byte_count(t);
  // cgroup v1 writes "no limit" as a huge page-rounded number (~2^63)
  return v >= (int64_t{1} << 60) ? -1 : v;
}

MemoryBudget host_memory_budget() {
  MemoryBudget b;
  if (const char* fake = std::getenv("MLA_MEMORY_AVAILABLE"); fake && *fake) {
    b.host_bytes = parse_byte_count(fake);
    if (b.host_bytes < 0)
      fail(ErrorKind::InvalidArgument, std::string("environment variable MLA_MEMORY_AVAILABLE='") + fake +
                                           "' is not a byte count (e.g. 8589934592 or 8G)");
    b.host_source = "MLA_MEMORY_AVAILABLE";
    return b;
  }
  b.host_bytes = parse_meminfo_available(read_small_file("/proc/meminfo"));
  if (b.host_bytes >= 0) b.host_source = "MemAvailable";
  auto consider = [&](int64_t limit, int64_t usage, const std::string& what) {
    if (limit < 0) return;
    const int64_t room = std::max<int64_t>(0, limit - std::max<int64_t>(usage, 0));
    if (b.host_bytes < 0 || room < b.host_bytes) {
      b.host_bytes = room;
      b.host_source = what;
    }
  };
  // cgroup v2: "0::/path" in /proc/self/cgroup; the limit of the group and of each ancestor
  const std::string self = read_small_file("/proc/self/cgroup");
  if (const size_t at = self.find("0::"); at != std::string::npos) {
    std::string path = trim(std::string_view(self).substr(at + 3, self.find('\n', at) - at - 3));
    while (true) {
      const std::string dir = "/sys/fs/cgroup" + (path == "/" ? std::string() : path);
      const std::string max = read_small_file(dir + "/memory.max");
      if (!max.empty())
        consider(parse_cgroup_limit(max), parse_cgroup_limit(read_small_file(dir + "/memory.current")),
                 "cgroup v2 memory.max - memory.current");
      if (path.empty() || path == "/") break;
      path = path.substr(0, path.find_last_of('/'));
    }
  } else {
    const std::string limit = read_small_file("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    if (!limit.empty())
      consider(parse_cgroup_limit(limit), parse_cgroup_limit(read_small_file("/sys/fs/cgroup/memory/memory.usage_in_bytes")),
               "cgroup v1 memory.limit_in_bytes - usage");
  }
  return b;
}

}  // namespace mla
