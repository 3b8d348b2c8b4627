// PLACEHOLDER — replaced by the owner of this subcommand.
#include "commands.hpp"
#include "mla/error.hpp"
namespace mla::cli {
int cmd_select(const std::vector<std::string>&) { fail(ErrorKind::Unsupported, "'select' is not implemented yet"); }

}  // namespace mla::cli
