// cuda/error_text.hpp — the words of every CUDA/cuBLAS failure message. Plain C++ (codes
// are passed as ints, names as strings) so the suite cuda_host pins the messages on machines
// without CUDA; cuda_check.hpp feeds it the real cudaGetErrorName/cublasGetStatusName text.
#pragma once

#include <string>
#include <string_view>

namespace mla::cuda {

// "cudaMalloc(&ptr, bytes) failed at cuda/cuda_backend.cpp:120: cudaErrorMemoryAllocation (2): out of memory"
inline std::string failure_message(std::string_view call, std::string_view file, int line, int code,
                                   std::string_view code_name, std::string_view description) {
  std::string m = "cuda: ";
  m += call;
  m += " failed at ";
  m += file;
  m += ":" + std::to_string(line) + ": ";
  m += code_name;
  m += " (" + std::to_string(code) + ")";
  if (!description.empty() && description != code_name) {
    m += ": ";
    m += description;
  }
  return m;
}

// Runtime error codes with a stable value in every CUDA release (driver_types.h); the cuda
// backend static_asserts them against the enum.
inline constexpr int kCudaErrorInsufficientDriver = 35;
inline constexpr int kCudaErrorNoDevice = 100;

// Why cudaGetDeviceCount failed, in words a user can act on. ANY error means "no usable GPU"
// (without a driver the runtime reports 35, not 100).
inline std::string explain_device_count_error(int code, std::string_view code_name) {
  std::string why = "no usable CUDA device: cudaGetDeviceCount returned ";
  why += code_name;
  why += " (" + std::to_string(code) + ")";
  if (code == kCudaErrorInsufficientDriver)
    why += ": no NVIDIA driver (libcuda.so.1) is installed, or it is older than CUDA 13 needs";
  else if (code == kCudaErrorNoDevice)
    why += ": the driver sees no GPU (check CUDA_VISIBLE_DEVICES)";
  return why;
}

inline std::string explain_zero_devices() {
  return "no usable CUDA device: cudaGetDeviceCount found 0 devices";
}

}  // namespace mla::cuda
