// mla/safetensors.hpp — hand-written safetensors reader (mmap) and writer.
//
// File layout (https://github.com/huggingface/safetensors, format unchanged since 0.3):
//   [0, 8)        N: u64 little-endian, length of the JSON header
//   [8, 8+N)      UTF-8 JSON object: {"__metadata__": {str: str}?,
//                                     "<name>": {"dtype": "BF16", "shape": [..],
//                                                "data_offsets": [begin, end]}, ...}
//   [8+N, EOF)    byte buffer; offsets are relative to its start, end exclusive,
//                 little-endian, row-major (C order).
//
// The reader enforces every rule of the reference crate (see docs/safetensors.md §3 and §7),
// plus one deliberate divergence: duplicate tensor names are rejected (DuplicateTensor)
// even when both entries are identical. Unknown extra fields inside a tensor entry are
// ignored, as the crate does. Tensor bytes are never read until asked for: opening a
// 10 GB shard touches the 8-byte prefix and the header only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mla {

enum class DType { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };

std::string_view dtype_name(DType dtype);            // "BF16"
bool parse_dtype(std::string_view name, DType& out);  // case-sensitive, false if unknown
size_t dtype_size(DType dtype);                       // bytes per element

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<uint64_t> shape;  // logical shape, row-major
  uint64_t begin = 0;           // byte offsets into the data section, end exclusive
  uint64_t end = 0;
  uint64_t numel() const;       // product of shape (1 for a scalar)
  uint64_t nbytes() const { return end - begin; }
};

constexpr uint64_t kMaxHeaderSize = 100'000'000;

// A validated, memory-mapped safetensors file. Move-only; unmaps on destruction.
// Files must not be modified while open (a truncated mapping raises SIGBUS).
class SafetensorsFile {
 public:
  // Throws mla::Error (kinds Io, HeaderTooSmall, ..., MetadataIncompleteBuffer) with a
  // message naming the file and, where there is one, the tensor.
  static SafetensorsFile open(const std::string& path);
  // Same validation on an in-memory image (used by the fuzzer and tests); `bytes` is copied.
  static SafetensorsFile from_bytes(std::span<const std::byte> bytes, std::string display_name = "<memory>");

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }
  uint64_t header_size() const { return header_size_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Tensors in data-offset order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;  // nullptr if absent
  const TensorInfo& at(std::string_view name) const;    // throws TensorNotFound

  // The tensor's raw little-endian bytes (a view into the mapping; may be unaligned:
  // copy with memcpy, never reinterpret_cast to a wider type).
  std::span<const std::byte> bytes(const TensorInfo& info) const;

  // Element values converted to float: BF16/F16/F32/F8_E4M3/F8_E5M2 exactly, F64 rounded
  // to nearest, integer types converted. Throws Unsupported for BOOL.
  std::vector<float> to_float(const TensorInfo& info) const;
  // The same, widened to double (F64 kept exactly).
  std::vector<double> to_double(const TensorInfo& info) const;
  // The values of to_float written into `out` (out.size() must be numel, else InvalidArgument),
  // read with large pread calls (kReadBlockBytes per call, not through the mapping) and
  // converted on `threads` threads (0 = all cores), each reading and converting its own
  // blocks. Returns the flat index of the first non-finite value, or -1 when all are finite.
  int64_t read_float(const TensorInfo& info, std::span<float> out, int threads = 0) const;
  static constexpr uint64_t kReadBlockBytes = uint64_t{2} << 20;

 private:
  struct Mapping;
  // A file whose header (n bytes) is parsed and validated and whose bytes `map` holds (open:
  // mapped; from_bytes: owned): the index by name, the data section after the header.
  SafetensorsFile(std::string path, uint64_t file_size, uint64_t n, std::map<std::string, std::string> metadata,
                  std::vector<TensorInfo> tensors, std::unique_ptr<Mapping> map);
  std::string path_;
  uint64_t file_size_ = 0;
  uint64_t header_size_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::unique_ptr<Mapping> map_;
  const std::byte* data_ = nullptr;  // start of the data section
};

// One tensor to write. `data` must hold exactly numel * dtype_size bytes, little-endian.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<uint64_t> shape;
  std::span<const std::byte> data;
};

// Serializes the standard layout: 8-byte LE header length, JSON header padded with
// spaces to a multiple of 8, tensors stored in the given order with contiguous offsets.
// Names must be unique (InvalidArgument otherwise).
std::vector<std::byte> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                             const std::map<std::string, std::string>& metadata = {});
// Writes serialize_safetensors(...) to `path` (via a temporary file + rename). Throws Io.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Helpers to build TensorToWrite payloads from host arrays.
std::vector<std::byte> encode_f32(std::span<const float> values);
std::vector<std::byte> encode_f64(std::span<const double> values);
std::vector<std::byte> encode_bf16(std::span<const float> values);  // RNE rounding

}  // namespace mla
