// src/io/safetensors_writer.cpp — safetensors writer (standard layout) and payload encoders.
//
// Output layout (N = padded header length, a multiple of 8, so the data section is
// 8-byte aligned):
//   [0, 8)        N, u64 little-endian
//   [8, 8+N)      {"__metadata__":{"k":"v",..},"<name>":{"dtype":"F32","shape":[..],
//                  "data_offsets":[begin,end]},..} followed by 0..7 spaces
//   [8+N, EOF)    the tensors' bytes, in the order given, contiguous from offset 0
// "__metadata__" is written first, and only when the metadata map is non-empty (keys in
// std::map order). Names and strings are JSON-escaped; they must be valid UTF-8.
// write_safetensors writes "<path>.tmp.<pid>" and renames it over `path`, so a reader never
// sees a half-written file.
#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include <simdjson.h>

#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/json_text.hpp"
#include "mla/safetensors.hpp"

static_assert(std::endian::native == std::endian::little,
              "the safetensors writer assumes a little-endian host");

namespace mla {

namespace {

void require_utf8(std::string_view text, const std::string& what) {
  if (!simdjson::validate_utf8(text.data(), text.size()))
    fail(ErrorKind::InvalidArgument, "safetensors writer: " + what + " is not valid UTF-8");
}

// numel * dtype_size with overflow check; InvalidArgument naming the tensor on overflow.
uint64_t expected_nbytes(const TensorToWrite& t) {
  uint64_t n = 1;
  for (uint64_t d : t.shape) {
    if (__builtin_mul_overflow(n, d, &n))
      fail(ErrorKind::InvalidArgument, "safetensors writer: tensor '" + t.name + "': shape overflows 64 bits");
  }
  if (__builtin_mul_overflow(n, static_cast<uint64_t>(dtype_size(t.dtype)), &n))
    fail(ErrorKind::InvalidArgument, "safetensors writer: tensor '" + t.name + "': byte size overflows 64 bits");
  return n;
}

}  // namespace

std::vector<std::byte> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                             const std::map<std::string, std::string>& metadata) {
  // Pass 1: the JSON header, with offsets accumulated in the given order.
  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first_key = true;
    for (const auto& [key, value] : metadata) {
      require_utf8(key, "metadata key");
      require_utf8(value, "metadata value of key '" + key + "'");
      if (!first_key) header += ',';
      first_key = false;
      header += json_quote(key);
      header += ':';
      header += json_quote(value);
    }
    header += '}';
    first = false;
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;  // running end of the data section
  for (const TensorToWrite& t : tensors) {
    require_utf8(t.name, "a tensor name");
    if (t.name == "__metadata__")
      fail(ErrorKind::InvalidArgument, "safetensors writer: '__metadata__' is reserved, not a tensor name");
    if (!names.insert(t.name).second)
      fail(ErrorKind::InvalidArgument, "safetensors writer: tensor '" + t.name + "' given twice");
    const uint64_t nbytes = expected_nbytes(t);
    if (nbytes != t.data.size()) {
      fail(ErrorKind::InvalidArgument, "safetensors writer: tensor '" + t.name + "': dtype " +
                                           std::string(dtype_name(t.dtype)) + " needs " +
                                           std::to_string(nbytes) + " bytes but " +
                                           std::to_string(t.data.size()) + " were given");
    }
    if (!first) header += ',';
    first = false;
    header += json_quote(t.name);
    header += ":{\"dtype\":\"";
    header += dtype_name(t.dtype);
    header += "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) header += (i ? "," : "") + std::to_string(t.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + nbytes) + "]}";
    offset += nbytes;
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');  // pad so the data section is 8-aligned
  if (header.size() > kMaxHeaderSize) {
    fail(ErrorKind::InvalidArgument, "safetensors writer: header would be " +
                                         std::to_string(header.size()) + " bytes, over the limit of " +
                                         std::to_string(kMaxHeaderSize));
  }

  // Pass 2: prefix, header, tensor bytes.
  std::vector<std::byte> out(8 + header.size() + offset);
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  std::byte* data = out.data() + 8 + header.size();
  for (const TensorToWrite& t : tensors) {
    if (!t.data.empty()) std::memcpy(data, t.data.data(), t.data.size());
    data += t.data.size();
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::vector<std::byte> image = serialize_safetensors(tensors, metadata);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(ErrorKind::Io, path + ": cannot create " + tmp + ": " + std::strerror(errno));
  const std::byte* p = image.data();
  size_t left = image.size();
  while (left > 0) {
    const ssize_t put = ::write(fd, p, left);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      const std::string reason = put < 0 ? std::strerror(errno) : "no progress";
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(ErrorKind::Io, path + ": write failed: " + reason);
    }
    p += put;
    left -= static_cast<size_t>(put);
  }
  if (::close(fd) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp.c_str());
    fail(ErrorKind::Io, path + ": close failed: " + reason);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp.c_str());
    fail(ErrorKind::Io, path + ": cannot rename " + tmp + " into place: " + reason);
  }
}

// ---- payload encoders (little-endian host) -------------------------------------------------

std::vector<std::byte> encode_f32(std::span<const float> values) {
  std::vector<std::byte> out(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<std::byte> encode_f64(std::span<const double> values) {
  std::vector<std::byte> out(values.size() * sizeof(double));
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<std::byte> encode_bf16(std::span<const float> values) {
  std::vector<std::byte> out(values.size() * sizeof(uint16_t));
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = bf16::round_bits(values[i]);
    std::memcpy(out.data() + i * sizeof(uint16_t), &bits, sizeof bits);
  }
  return out;
}

}  // namespace mla
