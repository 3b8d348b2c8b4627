// src/scale_out/ranks.cpp — the processes of one run and their messages (mla/ranks.hpp,
// docs/scale-out.md). Without MPI at build (-Dmpi=disabled, or no libopenmpi-dev found) there is
// one rank and a launch as several is refused.
#include "mla/ranks.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "mla/error.hpp"
#include "mla_build_config.h"

#if MLA_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only (OpenMPI's C++ bindings do not build under -Werror)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace mla {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end && *end == '\0' && n >= 0 && n < (1 << 24) ? static_cast<int>(n) : fallback;
}

#if MLA_HAVE_MPI
std::mutex g_mpi;  // MPI_THREAD_SERIALIZED: one MPI call at a time in this process
constexpr uint64_t kPiece = uint64_t{1} << 30;
constexpr int kPieceTag = 64;  // + the message's tag: its pieces after the length
#endif

}  // namespace

LaunchedAs launched_as() {
  LaunchedAs l;
  if (const int n = env_int("OMPI_COMM_WORLD_SIZE", 0); n > 0) {
    l.size = n;
    l.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    l.how = "mpirun";
  } else if (const int s = env_int("PMI_SIZE", 0); s > 0) {
    l.size = s;
    l.rank = env_int("PMI_RANK", 0);
    l.how = "mpirun";
  } else if (const int t = env_int("SLURM_NTASKS", 0); t > 0 && std::getenv("SLURM_PROCID")) {
    l.size = t;
    l.rank = env_int("SLURM_PROCID", 0);
    l.how = "srun";
  }
  if (l.size <= 1) return LaunchedAs{};
  return l;
}

bool mpi_built() { return MLA_HAVE_MPI != 0; }

namespace { Ranks* g_world = nullptr; }

Ranks* Ranks::initialized() { return g_world && g_world->initialized_ ? g_world : nullptr; }

void abort_ranks_if_several(int code) {
  if (Ranks* w = Ranks::initialized(); w && w->several()) w->abort(code);
}
void finalize_ranks() {
  if (Ranks* w = Ranks::initialized()) w->finalize();
}

Ranks& Ranks::world() {
  static Ranks w;
  g_world = &w;
  static std::once_flag once;
  std::call_once(once, [] {
    const LaunchedAs l = launched_as();
    if (l.size <= 1) return;
#if MLA_HAVE_MPI
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      fail(ErrorKind::Io, "MPI_Init_thread failed");
    if (provided < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      fail(ErrorKind::Unsupported, "this MPI gives threads level " + std::to_string(provided) +
                                       ", below MPI_THREAD_SERIALIZED, which eval's receiving thread needs");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &w.rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &w.size_);
    w.initialized_ = true;
#else
    fail(ErrorKind::Unsupported, "started by " + l.how + " as " + std::to_string(l.size) +
                                     " processes, but this mla-h2o was built without MPI (-Dmpi=disabled, or "
                                     "libopenmpi-dev not found): each process would run the whole eval, " +
                                     std::to_string(l.size) + " times over; rebuild with -Dmpi=enabled");
#endif
  });
  return w;
}

#if MLA_HAVE_MPI
void Ranks::send(int to, Tag tag, const std::string& bytes) {
  const std::lock_guard<std::mutex> g(g_mpi);
  uint64_t n = bytes.size();
  if (MPI_Send(&n, 8, MPI_BYTE, to, tag, MPI_COMM_WORLD) != MPI_SUCCESS)
    fail(ErrorKind::Io, "rank " + std::to_string(rank_) + ": MPI_Send to rank " + std::to_string(to) + " failed");
  for (uint64_t at = 0; at < n; at += kPiece) {
    const int len = static_cast<int>(std::min(kPiece, n - at));
    if (MPI_Send(bytes.data() + at, len, MPI_BYTE, to, kPieceTag + tag, MPI_COMM_WORLD) != MPI_SUCCESS)
      fail(ErrorKind::Io, "rank " + std::to_string(rank_) + ": MPI_Send to rank " + std::to_string(to) + " failed");
  }
}

Ranks::Message Ranks::receive(int from) {
  for (;;) {
    {
      const std::lock_guard<std::mutex> g(g_mpi);
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(from < 0 ? MPI_ANY_SOURCE : from, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
      if (flag && st.MPI_TAG < kPieceTag) {  // a message's length: its pieces follow from the same rank
        Message m;
        m.from = st.MPI_SOURCE;
        m.tag = st.MPI_TAG;
        uint64_t n = 0;
        MPI_Recv(&n, 8, MPI_BYTE, m.from, m.tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        m.bytes.resize(n);
        for (uint64_t at = 0; at < n; at += kPiece) {
          const int len = static_cast<int>(std::min(kPiece, n - at));
          MPI_Recv(m.bytes.data() + at, len, MPI_BYTE, m.from, kPieceTag + m.tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        return m;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void Ranks::abort(int code) {
  if (initialized_ && !finalized_) MPI_Abort(MPI_COMM_WORLD, code);
}

void Ranks::finalize() {
  if (!initialized_ || finalized_) return;
  finalized_ = true;
  MPI_Finalize();
}
#else
void Ranks::send(int, Tag, const std::string&) { fail(ErrorKind::Unsupported, "no MPI in this build"); }
Ranks::Message Ranks::receive(int) { fail(ErrorKind::Unsupported, "no MPI in this build"); }
void Ranks::abort(int) {}
void Ranks::finalize() {}
#endif

}  // namespace mla
