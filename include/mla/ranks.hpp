// mla/ranks.hpp — the processes of one run (`mpirun -n R mla-h2o eval ...`, docs/scale-out.md):
// the launcher's environment, and messages between the ranks through MPI (OpenMPI from Debian,
// optional at build: -Dmpi=auto|enabled|disabled). Only eval spreads its work (its windows and a
// task's samples); every other command, and a build without MPI, refuses to run under a launcher
// of more than one process, where it would repeat itself R times.
//
// Messages are (tag, bytes) of any length (sent as a length, then pieces of at most 1 GiB, so
// MPI's int counts never overflow), all to or from rank 0, under one mutex per process
// (MPI_THREAD_SERIALIZED): any thread may send or receive.
#pragma once

#include <cstdint>
#include <string>

namespace mla {

// What the launcher set (OpenMPI's OMPI_COMM_WORLD_SIZE / _RANK, PMIx's, Slurm's PMI_SIZE /
// SLURM_PROCID): how many processes it started, and which one this is; 1 and 0 when none.
struct LaunchedAs {
  int size = 1, rank = 0;
  std::string how;  // "mpirun", "srun", or "" when not launched as one of several
};
LaunchedAs launched_as();
bool mpi_built();  // MLA_HAVE_MPI

class Ranks {
 public:
  enum Tag : int { Hello = 1, Start = 2, Record = 3, Progress = 4, Failure = 5 };
  struct Message {
    int from = -1;
    int tag = 0;
    std::string bytes;
  };
  // The world: MPI initialized once (when launched as several processes and built with MPI),
  // else one rank. Error(Unsupported) when launched as several without MPI.
  static Ranks& world();
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool several() const { return size_ > 1; }

  void send(int to, Tag tag, const std::string& bytes);
  // The next message to this rank from `from` (-1: any rank), waiting for it; other threads may
  // send meanwhile (the wait polls, it does not hold the lock).
  Message receive(int from = -1);
  // Ends every rank's process (MPI_Abort) with `code`; a no-op with one rank.
  void abort(int code);
  void finalize();  // at exit, once

 private:
  Ranks() = default;
  friend void abort_ranks_if_several(int);
  friend void finalize_ranks();
  static Ranks* initialized();  // the world when MPI was initialized, else null
  int rank_ = 0, size_ = 1;
  bool initialized_ = false, finalized_ = false;
};

// When MPI was initialized with several ranks: MPI_Abort(code), ending every rank (main(), after
// the error line); otherwise nothing.
void abort_ranks_if_several(int code);
// MPI_Finalize when it was initialized (main(), after a command returned).
void finalize_ranks();

}  // namespace mla
