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

std::string printable_text(std::string_view s, size_t max_bytes) {
  std::string out;
  const auto hex = [&](unsigned char c) {
    static const char digits[] = "0123456789abcdef";
    out += "\\x";
    out += digits[c >> 4];
    out += digits[c & 15];
  };
  for (size_t i = 0; i < s.size();) {
    if (i >= max_bytes) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) {
        hex(c);
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // a UTF-8 sequence: lead byte, then 1-3 continuation bytes (no overlongs, no surrogates)
    const size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (ok && len == 3) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);
    }
    if (ok && len == 4) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
    }
    if (!ok) {
      hex(c);
      ++i;
      continue;
    }
    out.append(s.substr(i, len));
    i += len;
  }
  return out;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace mla
