// mla-h2o: MLA attention (Kimi K2.6 / DeepSeek-V3) + H2O KV-cache eviction, no ML framework.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "commands.hpp"
#include "inputs.hpp"
#include "mla/error.hpp"
#include "mla/ranks.hpp"
#include "mla/output_set.hpp"
#include "mla/provenance.hpp"
#include "mla_build_config.h"

namespace {

struct Command {
  const char* name;
  int (*fn)(const std::vector<std::string>&);
  const char* summary;
};

const Command kCommands[] = {
    {"demo", mla::cli::cmd_demo, "synthesize a Kimi K2.6-shaped layer 0 and run the published Kimi K2.6 layer-0 H2O demo's configuration on it"},
    {"run", mla::cli::cmd_run, "one layer's attention + H2O selection on a checkpoint"},
    {"decode", mla::cli::cmd_decode, "decode-time eviction on the latent cache: policies compared step by step"},
    {"eval", mla::cli::cmd_eval, "a whole model's next-token predictions with every layer's cache evicted by each policy"},
    {"sweep", mla::cli::cmd_sweep, "run + H2O on every listed layer, one layer in memory at a time; per-layer report"},
    {"select", mla::cli::cmd_select, "H2O selection on scores from any implementation (CSV or safetensors)"},
    {"compare", mla::cli::cmd_compare, "tensor-by-tensor comparison of two safetensors dumps"},
    {"inspect", mla::cli::cmd_inspect, "list a safetensors file's or checkpoint's tensors and geometry"},
    {"tokenize", mla::cli::cmd_tokenize, "a checkpoint's own tokenizer (tokenizer.json, tiktoken.model): text to ids, or ids to text"},
    {"synth", mla::cli::cmd_synth, "write a synthetic checkpoint with the real Kimi K2.6 layout"},
};

void usage(std::FILE* out) {
  std::fprintf(out, "mla-h2o %s: MLA attention (HF DeepseekV3Attention) and H2O KV-cache eviction\n\n", MLA_VERSION);
  std::fprintf(out, "usage: mla-h2o COMMAND [options]   (mla-h2o COMMAND --help for its options)\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-9s %s\n", c.name, c.summary);
}

// stdout flushed and checked: a full disk (> /dev/full) or a closed pipe is one error line and
// exit status 1, never a silent 0 (the command's files are already in place by then).
int finish_stdout(const char* cmd, int rc) {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return rc;
  const int err = errno;
  std::fprintf(stderr, "mla-h2o %s: error: cannot write to standard output: %s%s\n", cmd,
               err ? std::strerror(err) : "write error", rc == 0 ? " (the outputs on disk are complete)" : "");
  return rc == 0 ? 1 : rc;
}

}  // namespace

int main(int argc, char** argv) {
  // A closed pipe (mla-h2o eval ... | head -1) makes a write fail with EPIPE, reported by
  // finish_stdout, instead of killing the process with SIGPIPE after its outputs were written.
  std::signal(SIGPIPE, SIG_IGN);
  mla::set_command_line(argc, argv);  // report.json's "argv"
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    usage(stdout);
    return finish_stdout("--help", 0);
  }
  if (cmd == "--version") {
    std::printf("mla-h2o %s (%s)\n", MLA_VERSION, MLA_COMPILER);
    return finish_stdout("--version", 0);
  }
  std::vector<std::string> rest(argv + 2, argv + argc);
  // Under a launcher of several processes (mpirun -n R, srun) only eval spreads its work over
  // them (mla/ranks.hpp); any other command would run R times over the same output. One line,
  // from rank 0.
  const mla::LaunchedAs launch = mla::launched_as();
  if (launch.size > 1 && cmd != "eval" && !(rest.size() == 1 && (rest[0] == "--help" || rest[0] == "-h"))) {
    if (launch.rank == 0)
      std::fprintf(stderr, "mla-h2o %s: error: started by %s as %d processes, but only eval spreads its work over ranks: %s "
                           "would run %d times over; run it without %s\n", cmd.c_str(), launch.how.c_str(), launch.size,
                   cmd.c_str(), launch.size, launch.how.c_str());
    return 2;
  }
  // The error line, once: ranks other than 0 have sent theirs to rank 0, which prints it naming
  // the rank; then every rank's process ends (MPI_Abort) so that none waits for the failed one.
  const auto failed = [&](const char* name, const std::string& what, int code) {
    if (launch.rank == 0 || launch.size <= 1)
      std::fprintf(stderr, "mla-h2o %s: error: %s%s\n", name, mla::printable_text(what, 4096).c_str(),
                   mla::abandoned_output_note().c_str());
    std::fflush(stderr);
    mla::abort_ranks_if_several(code);
    return code;
  };
  for (const auto& c : kCommands) {
    if (cmd != c.name) continue;
    try {
      (void)mla::cli::model_sha256_enabled();  // a malformed MLA_MODEL_SHA256 fails before any work
      const int rc = c.fn(rest);
      mla::finalize_ranks();
      return finish_stdout(c.name, rc);
    } catch (const mla::Error& e) {
      return failed(c.name, e.what(), e.kind() == mla::ErrorKind::InvalidArgument ? 2 : 1);
    } catch (const std::bad_alloc&) {
      return failed(c.name, "out of memory", 1);
    } catch (const std::exception& e) {
      return failed(c.name, e.what(), 1);
    }
  }
  std::fprintf(stderr, "mla-h2o: error: unknown command '%s' (see mla-h2o --help)\n", cmd.c_str());
  return 2;
}
