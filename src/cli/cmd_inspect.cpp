// PLACEHOLDER — replaced by the owner of this subcommand.
#include "commands.hpp"
#include "mla/error.hpp"
namespace mla::cli {
int cmd_inspect(const std::vector<std::string>&) { fail(ErrorKind::Unsupported, "'inspect' is not implemented yet"); }

}  // namespace mla::cli
