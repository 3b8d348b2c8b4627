// PLACEHOLDER — replaced by the owner of this subcommand.
#include "commands.hpp"
#include "mla/error.hpp"
namespace mla::cli {
int cmd_synth(const std::vector<std::string>&) { fail(ErrorKind::Unsupported, "'synth' is not implemented yet"); }

}  // namespace mla::cli
