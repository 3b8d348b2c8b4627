// Built when the project is configured without CUDA: the cuda backend reports why it is
// unavailable instead of existing.
#include "mla/attention.hpp"
#include "mla/error.hpp"

namespace mla {

bool cuda_available(std::string* why) {
  if (why) *why = "mla-h2o was built without CUDA (configure with -Dcuda=enabled and nvcc on PATH)";
  return false;
}

int64_t cuda_free_memory() { return -1; }

std::unique_ptr<Backend> make_cuda_backend() {
  std::string why;
  cuda_available(&why);
  fail(ErrorKind::Cuda, "--backend cuda: " + why);
}

}  // namespace mla
