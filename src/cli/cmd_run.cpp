// PLACEHOLDER — replaced by the owner of this subcommand.
#include "commands.hpp"
#include "mla/error.hpp"
namespace mla::cli {
int cmd_run(const std::vector<std::string>&) { fail(ErrorKind::Unsupported, "'run' is not implemented yet"); }
int cmd_demo(const std::vector<std::string>&) { fail(ErrorKind::Unsupported, "demo is not implemented yet"); }
}  // namespace mla::cli
