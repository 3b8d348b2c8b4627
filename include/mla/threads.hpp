// include/mla/threads.hpp — the one worker pool every layer may use (no layer below src/cpu
// reaches up into the cpu backend for it).
#pragma once

#include <cstdint>
#include <functional>

namespace mla {

// Threads to use for `requested` (0 = all cores reported by the OS).
int resolve_threads(int requested);

// Runs body(i, worker) for i in [0, count) on `threads` workers (the caller is worker 0);
// items are handed out one at a time. The first exception thrown by a body is rethrown.
void parallel_for(int64_t count, int threads, const std::function<void(int64_t, int)>& body);

}  // namespace mla
