// mla/memory_available.hpp — how much memory this process may still allocate: the one probe of
// the machine the memory plan (mla/memory_plan.hpp) compares its estimate with.
//
// Host: the smallest of MemAvailable (/proc/meminfo) and the room left under the cgroup's limit
// (v2: memory.max - memory.current of the process's group and each ancestor; v1:
// memory.limit_in_bytes - memory.usage_in_bytes), or MLA_MEMORY_AVAILABLE=BYTES when set
// (suffixes K, M, G, T: powers of 1024), which tests use to fake a small machine.
// Device: cuda_free_memory() (mla/attention.hpp, cudaMemGetInfo), filled in by the caller.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mla {

struct MemoryBudget {
  int64_t host_bytes = -1;   // -1 = unknown (no check)
  std::string host_source;   // "MemAvailable", "cgroup v2 memory.max - memory.current", "MLA_MEMORY_AVAILABLE"
  int64_t device_bytes = -1; // cuda: free device memory (cuda_free_memory()); -1 = unknown
};

// What this process may still allocate on the host (see the file comment). Never throws for a
// missing file; MLA_MEMORY_AVAILABLE that is not a byte count is an Error(InvalidArgument).
MemoryBudget host_memory_budget();

// What this process has resident now (/proc/self/statm: resident pages x page size): its code,
// the libraries' relocated data and whatever it has touched; -1 where that cannot be read.
int64_t process_resident_bytes();

// Parsers of the files above (tests feed them text): bytes, or -1 when absent / unlimited.
int64_t parse_meminfo_available(std::string_view meminfo);
int64_t parse_cgroup_limit(std::string_view text);  // "max\n" -> -1, "8589934592\n" -> 8589934592
int64_t parse_byte_count(std::string_view text);    // "8G", "512M", "1073741824"; -1 when malformed

}  // namespace mla
