#include "mla/error.hpp"

#include <string>

#include "mla/tensor.hpp"

namespace mla {

std::string_view error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Io: return "Io";
    case ErrorKind::HeaderTooSmall: return "HeaderTooSmall";
    case ErrorKind::HeaderTooLarge: return "HeaderTooLarge";
    case ErrorKind::InvalidHeaderLength: return "InvalidHeaderLength";
    case ErrorKind::InvalidHeaderUtf8: return "InvalidHeaderUtf8";
    case ErrorKind::InvalidHeaderJson: return "InvalidHeaderJson";
    case ErrorKind::UnknownDtype: return "UnknownDtype";
    case ErrorKind::DuplicateTensor: return "DuplicateTensor";
    case ErrorKind::InvalidOffset: return "InvalidOffset";
    case ErrorKind::TensorInvalidInfo: return "TensorInvalidInfo";
    case ErrorKind::ValidationOverflow: return "ValidationOverflow";
    case ErrorKind::MetadataIncompleteBuffer: return "MetadataIncompleteBuffer";
    case ErrorKind::TensorNotFound: return "TensorNotFound";
    case ErrorKind::Config: return "Config";
    case ErrorKind::Shape: return "Shape";
    case ErrorKind::Checkpoint: return "Checkpoint";
    case ErrorKind::InvalidArgument: return "InvalidArgument";
    case ErrorKind::InvalidValue: return "InvalidValue";
    case ErrorKind::Unsupported: return "Unsupported";
    case ErrorKind::Cuda: return "Cuda";
  }
  return "Unknown";
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace mla
