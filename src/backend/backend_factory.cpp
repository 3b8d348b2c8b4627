// src/backend/backend_factory.cpp — choosing a backend: the names of the run options, the
// factory, and the memory each backend describes (mla/memory_plan.hpp).
//
//   make_backend(Auto)      -> cuda when cuda_available(), else cpu
//   make_backend(Reference) -> the scalar double-precision reference (reference/)
//   make_backend(Cpu)       -> the cpu backend (src/cpu: oneDNN or Eigen + OpenBLAS GEMMs)
//   make_backend(Cuda)      -> the cuBLAS backend (cuda/); throws Error(Cuda) without a usable GPU
#include <memory>

#include "mla/attention.hpp"
#include "mla/error.hpp"
#include "mla/memory_plan.hpp"

namespace mla {

const char* mask_name(Mask m) {
  switch (m) {
    case Mask::Causal: return "causal";
    case Mask::None: return "none";
  }
  return "?";
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::BF16: return "bf16";
  }
  return "?";
}

const char* backend_name(BackendKind b) {
  switch (b) {
    case BackendKind::Auto: return "auto";
    case BackendKind::Reference: return "reference";
    case BackendKind::Cpu: return "cpu";
    case BackendKind::Cuda: return "cuda";
  }
  return "?";
}

std::unique_ptr<Backend> make_backend(BackendKind kind) {
  switch (kind) {
    case BackendKind::Auto: return cuda_available() ? make_cuda_backend() : make_cpu_backend();
    case BackendKind::Reference: return make_reference_backend();
    case BackendKind::Cpu: return make_cpu_backend();
    case BackendKind::Cuda: return make_cuda_backend();
  }
  fail(ErrorKind::InvalidArgument, "unknown backend kind");
}

BackendMemory backend_memory(const AttentionConfig& cfg, const MemoryRequest& req) {
  switch (req.backend) {
    case BackendKind::Reference: return reference_backend_memory(cfg, req);
    case BackendKind::Cuda: return cuda_backend_memory(cfg, req);
    case BackendKind::Cpu:
    case BackendKind::Auto: break;  // a plan is made for a resolved backend; Auto plans as cpu
  }
  return cpu_backend_memory(cfg, req);
}

}  // namespace mla
