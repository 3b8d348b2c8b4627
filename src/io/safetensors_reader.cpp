// src/io/safetensors_reader.cpp — validating safetensors reader (mmap, lazy tensor bytes).
//
// File layout (N = header length):
//   [0, 8)          N, u64 little-endian
//   [8, 8+N)        UTF-8 JSON object {"__metadata__": {str: str} | null ?,
//                                      "<name>": {"dtype", "shape", "data_offsets"}, ...}
//   [8+N, EOF)      data section, data_len = file_size - 8 - N bytes; tensor offsets are
//                   relative to its start, [begin, end) with end exclusive
//
// Checks, in the order of the reference crate (huggingface/safetensors tensor.rs,
// read_metadata + Metadata::validate), each mapped to one ErrorKind:
//   1. file_size < 8                                   -> HeaderTooSmall
//   2. N > kMaxHeaderSize (100,000,000)                -> HeaderTooLarge
//   3. 8 + N overflows or exceeds file_size            -> InvalidHeaderLength
//   4. header bytes not UTF-8                          -> InvalidHeaderUtf8
//   5. header not one JSON object (trailing bytes, NUL padding, bad nesting, lone
//      surrogates included), schema violations        -> InvalidHeaderJson
//      dtype string not in the table (case-sensitive)  -> UnknownDtype
//      the same tensor name twice                      -> DuplicateTensor (stricter than
//                                                         the crate, which keeps the last)
//   6. tensors sorted by (begin, end), walked from 0:
//      begin != previous end, or end < begin           -> InvalidOffset
//      numel or numel * dtype_size overflows 64 bits   -> ValidationOverflow
//      end - begin != numel * dtype_size               -> TensorInvalidInfo
//   7. last end != data_len (short or trailing bytes)  -> MetadataIncompleteBuffer
// Unknown extra fields inside a tensor entry are ignored, as the crate does.
// Deliberate divergence: duplicate keys inside "__metadata__" are rejected
// (InvalidHeaderJson); serde keeps the last one silently.
//
// Opening reads the 8-byte prefix and the N header bytes with pread, validates, and only
// then maps the whole file read-only; tensor bytes are touched only by bytes()/to_*(), or
// read with pread in 2 MiB blocks by read_float (the loader's path: parallel conversion).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include <simdjson.h>

#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/regular_file.hpp"
#include "mla/safetensors.hpp"

static_assert(std::endian::native == std::endian::little,
              "the safetensors reader assumes a little-endian host");

namespace mla {

// The bytes behind a SafetensorsFile: either a read-only mapping of the file (open) or an
// owned copy (from_bytes).
struct SafetensorsFile::Mapping {
  void* addr = nullptr;           // mmap result, or nullptr
  size_t length = 0;              // mapped length (= file_size)
  int fd = -1;                    // the open file (read_float's pread calls), or -1
  std::vector<std::byte> owned;   // (file_size,) copy for from_bytes
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (addr != nullptr) ::munmap(addr, length);
    if (fd >= 0) ::close(fd);
  }
  const std::byte* base() const {
    return addr != nullptr ? static_cast<const std::byte*>(addr) : owned.data();
  }
};

namespace {

constexpr uint64_t kPrefixSize = 8;  // the u64 header length

// ---- message helpers ----------------------------------------------------------------------

// A tensor name or JSON key as it appears in a message: control bytes, quote and backslash
// escaped as \xNN, cut after 200 bytes (at a UTF-8 character boundary).
std::string printable(std::string_view name) {
  constexpr size_t kMaxShown = 200;
  size_t shown = std::min(name.size(), kMaxShown);
  if (shown < name.size()) {
    while (shown > 0 && (static_cast<unsigned char>(name[shown]) & 0xC0u) == 0x80u) --shown;
  }
  std::string out;
  out.reserve(shown + 16);
  for (size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7F || c == '\'' || c == '\\') {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (shown < name.size()) out += "...(" + std::to_string(name.size()) + " bytes)";
  return out;
}

std::string tensor_prefix(const std::string& file, std::string_view tensor) {
  return file + ": tensor '" + printable(tensor) + "': ";
}

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string known_dtypes_text() {
  std::string s;
  for (int i = 0; i <= static_cast<int>(DType::U64); ++i) {
    s += (i ? ", " : "");
    s += dtype_name(static_cast<DType>(i));
  }
  return s;
}

// ---- steps 1-3: the 8-byte prefix ---------------------------------------------------------

// Returns N after checks 1-3; `prefix` holds the first 8 bytes (file_size >= 8 checked by
// the caller, which must not map or read anything before).
uint64_t check_prefix(const std::string& file, uint64_t file_size, const std::byte* prefix) {
  uint64_t n = 0;
  std::memcpy(&n, prefix, sizeof n);  // little-endian host (static_assert above)
  if (n > kMaxHeaderSize) {
    fail(ErrorKind::HeaderTooLarge, file + ": header length " + std::to_string(n) +
                                        " exceeds the limit of " + std::to_string(kMaxHeaderSize) +
                                        " bytes");
  }
  uint64_t header_end = 0;
  if (__builtin_add_overflow(kPrefixSize, n, &header_end) || header_end > file_size) {
    fail(ErrorKind::InvalidHeaderLength, file + ": header length " + std::to_string(n) +
                                             " runs past the end of the file (" +
                                             std::to_string(file_size) + " bytes)");
  }
  return n;
}

void check_too_small(const std::string& file, uint64_t file_size) {
  if (file_size < kPrefixSize) {
    fail(ErrorKind::HeaderTooSmall, file + ": file is " + std::to_string(file_size) +
                                        " bytes, shorter than the 8-byte header length");
  }
}

// ---- step 5: JSON schema -------------------------------------------------------------------

struct ParsedHeader {
  std::map<std::string, std::string> metadata;
  std::vector<TensorInfo> tensors;  // in header order until sort_and_validate
};

// A shape entry or data offset: a JSON integer >= 0 that fits in u64 (no fraction, no
// exponent, no string, no null).
uint64_t read_index(const std::string& where, simdjson::dom::element value) {
  uint64_t u = 0;
  if (value.get(u) == simdjson::SUCCESS) return u;  // a UINT64, or an INT64 >= 0
  int64_t s = 0;
  if (value.get(s) == simdjson::SUCCESS)
    fail(ErrorKind::InvalidHeaderJson, where + "negative value " + std::to_string(s));
  if (value.is_double())
    fail(ErrorKind::InvalidHeaderJson, where + "value is not an integer (fraction or exponent form)");
  fail(ErrorKind::InvalidHeaderJson, where + "value is not a non-negative integer");
}

// One "<name>": {"dtype": .., "shape": [..], "data_offsets": [b, e]} entry.
TensorInfo parse_tensor_entry(const std::string& file, std::string_view name,
                              simdjson::dom::element value) {
  const std::string where = tensor_prefix(file, name);
  simdjson::dom::object entry;
  if (value.get(entry) != simdjson::SUCCESS)
    fail(ErrorKind::InvalidHeaderJson, where + "entry is not a JSON object");

  TensorInfo info;
  info.name = std::string(name);
  bool has_dtype = false, has_shape = false, has_offsets = false;
  for (simdjson::dom::key_value_pair field : entry) {
    const std::string_view key = field.key;
    if (key == "dtype") {
      if (has_dtype) fail(ErrorKind::InvalidHeaderJson, where + "duplicate field 'dtype'");
      has_dtype = true;
      std::string_view dtype;
      if (field.value.get(dtype) != simdjson::SUCCESS)
        fail(ErrorKind::InvalidHeaderJson, where + "dtype is not a string");
      if (!parse_dtype(dtype, info.dtype)) {
        fail(ErrorKind::UnknownDtype, where + "unknown dtype '" + printable(dtype) +
                                          "' (known, case-sensitive: " + known_dtypes_text() + ")");
      }
    } else if (key == "shape") {
      if (has_shape) fail(ErrorKind::InvalidHeaderJson, where + "duplicate field 'shape'");
      has_shape = true;
      simdjson::dom::array dims;
      if (field.value.get(dims) != simdjson::SUCCESS)
        fail(ErrorKind::InvalidHeaderJson, where + "shape is not a JSON array");
      size_t axis = 0;
      for (simdjson::dom::element dim : dims) {
        info.shape.push_back(read_index(where + "shape[" + std::to_string(axis) + "]: ", dim));
        ++axis;
      }
    } else if (key == "data_offsets") {
      if (has_offsets) fail(ErrorKind::InvalidHeaderJson, where + "duplicate field 'data_offsets'");
      has_offsets = true;
      simdjson::dom::array offsets;
      if (field.value.get(offsets) != simdjson::SUCCESS)
        fail(ErrorKind::InvalidHeaderJson, where + "data_offsets is not a JSON array");
      if (offsets.size() != 2) {
        fail(ErrorKind::InvalidHeaderJson, where + "data_offsets has " +
                                               std::to_string(offsets.size()) +
                                               " entries, expected exactly 2 [begin, end]");
      }
      info.begin = read_index(where + "data_offsets[0]: ", offsets.at(0).value_unsafe());
      info.end = read_index(where + "data_offsets[1]: ", offsets.at(1).value_unsafe());
    }
    // Any other field is ignored (reference-crate behaviour).
  }
  if (!has_dtype) fail(ErrorKind::InvalidHeaderJson, where + "missing field 'dtype'");
  if (!has_shape) fail(ErrorKind::InvalidHeaderJson, where + "missing field 'shape'");
  if (!has_offsets) fail(ErrorKind::InvalidHeaderJson, where + "missing field 'data_offsets'");
  return info;
}

// "__metadata__": null or {str: str} with unique keys.
void parse_metadata(const std::string& file, simdjson::dom::element value,
                    std::map<std::string, std::string>& metadata) {
  if (value.is_null()) return;
  simdjson::dom::object object;
  if (value.get(object) != simdjson::SUCCESS)
    fail(ErrorKind::InvalidHeaderJson, file + ": __metadata__ is neither an object nor null");
  for (simdjson::dom::key_value_pair field : object) {
    std::string_view text;
    if (field.value.get(text) != simdjson::SUCCESS) {
      fail(ErrorKind::InvalidHeaderJson, file + ": __metadata__ value of key '" +
                                             printable(field.key) + "' is not a string");
    }
    if (!metadata.emplace(std::string(field.key), std::string(text)).second) {
      fail(ErrorKind::InvalidHeaderJson,
           file + ": __metadata__ key '" + printable(field.key) + "' appears twice");
    }
  }
}

// Steps 4-5: UTF-8, then the JSON object and its schema.
ParsedHeader parse_header(const std::string& file, std::string_view header) {
  if (!simdjson::validate_utf8(header.data(), header.size()))
    fail(ErrorKind::InvalidHeaderUtf8, file + ": header is not valid UTF-8");

  // The DOM parser validates the whole document (structure, trailing content, string
  // escapes, depth <= 1024 without recursion); the copy carries SIMDJSON_PADDING zero bytes.
  const simdjson::padded_string padded(header);
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (const auto err = parser.parse(padded).get(root); err != simdjson::SUCCESS) {
    fail(ErrorKind::InvalidHeaderJson,
         file + ": header is not a single valid JSON document: " + simdjson::error_message(err));
  }
  simdjson::dom::object object;
  if (root.get(object) != simdjson::SUCCESS)
    fail(ErrorKind::InvalidHeaderJson, file + ": header root is not a JSON object");

  ParsedHeader parsed;
  std::set<std::string_view> seen;  // tensor names so far (views into the parser)
  bool seen_metadata = false;
  for (simdjson::dom::key_value_pair field : object) {
    const std::string_view key = field.key;
    if (key == "__metadata__") {
      if (seen_metadata) fail(ErrorKind::InvalidHeaderJson, file + ": __metadata__ appears twice");
      seen_metadata = true;
      parse_metadata(file, field.value, parsed.metadata);
      continue;
    }
    if (!seen.insert(key).second) {
      fail(ErrorKind::DuplicateTensor,
           tensor_prefix(file, key) + "the tensor name appears twice in the header");
    }
    parsed.tensors.push_back(parse_tensor_entry(file, key, field.value));
  }
  return parsed;
}

// ---- steps 6-7: offsets and sizes ----------------------------------------------------------

void sort_and_validate(const std::string& file, uint64_t data_len, std::vector<TensorInfo>& tensors) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t start = 0;  // where the next tensor must begin
  for (const TensorInfo& t : tensors) {
    const std::string where = tensor_prefix(file, t.name);
    const std::string offsets = "data_offsets [" + std::to_string(t.begin) + ", " +
                                std::to_string(t.end) + "]";
    if (t.end < t.begin) fail(ErrorKind::InvalidOffset, where + offsets + " end before begin");
    if (t.begin != start) {
      fail(ErrorKind::InvalidOffset,
           where + offsets + " must begin at byte " + std::to_string(start) +
               (start == 0 ? " (start of the data section)" : " (end of the previous tensor)") +
               (t.begin < start ? ": overlaps a previous tensor" : ": leaves a gap"));
    }
    uint64_t numel = 1;
    for (uint64_t d : t.shape) {
      if (__builtin_mul_overflow(numel, d, &numel)) {
        fail(ErrorKind::ValidationOverflow,
             where + "shape " + shape_text(t.shape) + " element count overflows 64 bits");
      }
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(t.dtype)), &nbytes)) {
      fail(ErrorKind::ValidationOverflow, where + "dtype " + std::string(dtype_name(t.dtype)) +
                                              " shape " + shape_text(t.shape) +
                                              " byte size overflows 64 bits");
    }
    if (t.end - t.begin != nbytes) {
      fail(ErrorKind::TensorInvalidInfo,
           where + "dtype " + std::string(dtype_name(t.dtype)) + " shape " + shape_text(t.shape) +
               " needs " + std::to_string(nbytes) + " bytes but data_offsets span " +
               std::to_string(t.end - t.begin));
    }
    start = t.end;
  }
  if (start != data_len) {
    const std::string last =
        tensors.empty() ? std::string(" (no tensors)")
                        : " (last tensor '" + printable(tensors.back().name) + "' ends at byte " +
                              std::to_string(start) + ")";
    fail(ErrorKind::MetadataIncompleteBuffer,
         file + ": tensors cover " + std::to_string(start) + " bytes" + last +
             " but the data section holds " + std::to_string(data_len) +
             (start < data_len ? ": trailing bytes after the last tensor"
                               : ": data section is truncated"));
  }
}

// ---- file access ---------------------------------------------------------------------------

struct FdGuard {
  int fd = -1;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads exactly `size` bytes at `offset`; a short read (file changed underneath) is Io.
void pread_exact(const std::string& file, int fd, void* buf, uint64_t size, uint64_t offset) {
  auto* out = static_cast<char*>(buf);
  while (size > 0) {
    const ssize_t got = ::pread(fd, out, size, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      fail(ErrorKind::Io, file + ": read failed at byte " + std::to_string(offset) + ": " +
                              std::strerror(errno));
    }
    if (got == 0) {
      fail(ErrorKind::Io, file + ": unexpected end of file at byte " + std::to_string(offset));
    }
    out += got;
    size -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

// ---- element conversion --------------------------------------------------------------------

// Element i of a little-endian array of T at p, loaded with memcpy (p may be misaligned).
template <class T>
T load(const std::byte* p, uint64_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

// out[i] = decode(element i of the little-endian array of Stored at p), for i < n.
template <class Stored, class Out, class Decode>
void convert_each(const std::byte* p, uint64_t n, Out* out, Decode decode) {
  for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(decode(load<Stored>(p, i)));
}

// out[i] = value of element i of the little-endian array of info.dtype at p, for i < n.
template <class Out>
void convert_into(const std::string& file, const TensorInfo& info, const std::byte* p, uint64_t n, Out* out) {
  const auto as_is = [](auto v) { return v; };
  switch (info.dtype) {
    case DType::BOOL:
      fail(ErrorKind::Unsupported, tensor_prefix(file, info.name) +
                                       "dtype BOOL cannot be converted to floating point");
    case DType::U8: return convert_each<uint8_t>(p, n, out, as_is);
    case DType::I8: return convert_each<int8_t>(p, n, out, as_is);
    case DType::F8_E5M2: return convert_each<uint8_t>(p, n, out, [](uint8_t b) { return fp8_e5m2_to_float(b); });
    case DType::F8_E4M3: return convert_each<uint8_t>(p, n, out, [](uint8_t b) { return fp8_e4m3fn_to_float(b); });
    case DType::I16: return convert_each<int16_t>(p, n, out, as_is);
    case DType::U16: return convert_each<uint16_t>(p, n, out, as_is);
    case DType::F16: return convert_each<uint16_t>(p, n, out, [](uint16_t b) { return f16_to_float(b); });
    case DType::BF16: return convert_each<uint16_t>(p, n, out, [](uint16_t b) { return bf16::from_bits(b).to_float(); });
    case DType::I32: return convert_each<int32_t>(p, n, out, as_is);
    case DType::U32: return convert_each<uint32_t>(p, n, out, as_is);
    case DType::F32: return convert_each<float>(p, n, out, as_is);
    case DType::F64: return convert_each<double>(p, n, out, as_is);
    case DType::I64: return convert_each<int64_t>(p, n, out, as_is);
    case DType::U64: return convert_each<uint64_t>(p, n, out, as_is);
  }
}

template <class Out>
std::vector<Out> convert(const std::string& file, const TensorInfo& info, const std::byte* p) {
  const uint64_t n = info.nbytes() / dtype_size(info.dtype);
  std::vector<Out> out(n);
  convert_into(file, info, p, n, out.data());
  return out;
}

// Index of the first non-finite value of v[0, n), or -1. A branch-free pass first (vectorised).
int64_t first_non_finite(const float* v, uint64_t n) {
  uint32_t any = 0;
  for (uint64_t i = 0; i < n; ++i) any |= ((std::bit_cast<uint32_t>(v[i]) & 0x7F800000u) == 0x7F800000u);
  if (any == 0) return -1;
  for (uint64_t i = 0; i < n; ++i)
    if ((std::bit_cast<uint32_t>(v[i]) & 0x7F800000u) == 0x7F800000u) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace

// ---- SafetensorsFile -----------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile::SafetensorsFile(std::string path, uint64_t file_size, uint64_t n, std::map<std::string, std::string> metadata,
                                 std::vector<TensorInfo> tensors, std::unique_ptr<Mapping> map)
    : path_(std::move(path)),
      file_size_(file_size),
      header_size_(n),
      metadata_(std::move(metadata)),
      tensors_(std::move(tensors)),
      map_(std::move(map)),
      data_(map_->base() + kPrefixSize + n) {
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  FdGuard fd{open_regular_file(path)};  // a FIFO or device is refused before anything could block
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) fail(ErrorKind::Io, path + ": cannot stat: " + std::strerror(errno));
  const auto file_size = static_cast<uint64_t>(st.st_size);

  check_too_small(path, file_size);  // before any read or mmap (mmap of length 0 is EINVAL)
  std::byte prefix[kPrefixSize];
  pread_exact(path, fd.fd, prefix, kPrefixSize, 0);
  const uint64_t n = check_prefix(path, file_size, prefix);
  std::string header(n, '\0');  // allocated only now that 8 + n <= file_size
  pread_exact(path, fd.fd, header.data(), n, kPrefixSize);

  ParsedHeader parsed = parse_header(path, header);
  sort_and_validate(path, file_size - kPrefixSize - n, parsed.tensors);

  auto map = std::make_unique<Mapping>();
  void* addr = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (addr == MAP_FAILED) fail(ErrorKind::Io, path + ": mmap failed: " + std::strerror(errno));
  map->addr = addr;
  map->length = file_size;
  map->fd = fd.fd;  // kept open for read_float
  fd.fd = -1;

  return SafetensorsFile(path, file_size, n, std::move(parsed.metadata), std::move(parsed.tensors), std::move(map));
}

SafetensorsFile SafetensorsFile::from_bytes(std::span<const std::byte> bytes, std::string display_name) {
  const uint64_t file_size = bytes.size();
  check_too_small(display_name, file_size);
  const uint64_t n = check_prefix(display_name, file_size, bytes.data());
  const std::string_view header(reinterpret_cast<const char*>(bytes.data()) + kPrefixSize, n);

  ParsedHeader parsed = parse_header(display_name, header);
  sort_and_validate(display_name, file_size - kPrefixSize - n, parsed.tensors);

  auto map = std::make_unique<Mapping>();
  map->owned.assign(bytes.begin(), bytes.end());

  return SafetensorsFile(std::move(display_name), file_size, n, std::move(parsed.metadata), std::move(parsed.tensors),
                         std::move(map));
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& SafetensorsFile::at(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) fail(ErrorKind::TensorNotFound, path_ + ": no tensor named '" + printable(name) + "'");
  return *info;
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo& info) const {
  const uint64_t data_len = file_size_ - kPrefixSize - header_size_;
  if (info.end < info.begin || info.end > data_len || map_ == nullptr) {
    fail(ErrorKind::InvalidArgument,
         tensor_prefix(path_, info.name) + "data_offsets [" + std::to_string(info.begin) + ", " +
             std::to_string(info.end) + "] are not inside this file's data section");
  }
  return {data_ + info.begin, static_cast<size_t>(info.nbytes())};
}

// A TensorInfo passed in by the caller (normally one of tensors()) must be self-consistent
// before its bytes are decoded: numel * dtype_size == end - begin, without overflow.
static void check_info_consistent(const std::string& file, const TensorInfo& info, size_t nbytes) {
  uint64_t numel = 1, need = 0;
  bool overflow = false;
  for (uint64_t d : info.shape) overflow = overflow || __builtin_mul_overflow(numel, d, &numel);
  overflow = overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(info.dtype)), &need);
  if (overflow || need != nbytes) {
    fail(ErrorKind::InvalidArgument,
         tensor_prefix(file, info.name) + "dtype " + std::string(dtype_name(info.dtype)) + " shape " +
             shape_text(info.shape) + " does not match its byte range of " + std::to_string(nbytes));
  }
}

std::vector<float> SafetensorsFile::to_float(const TensorInfo& info) const {
  const std::span<const std::byte> raw = bytes(info);
  check_info_consistent(path_, info, raw.size());
  return convert<float>(path_, info, raw.data());
}

std::vector<double> SafetensorsFile::to_double(const TensorInfo& info) const {
  const std::span<const std::byte> raw = bytes(info);
  check_info_consistent(path_, info, raw.size());
  return convert<double>(path_, info, raw.data());
}

int64_t SafetensorsFile::read_float(const TensorInfo& info, std::span<float> out, int threads) const {
  const std::span<const std::byte> raw = bytes(info);
  check_info_consistent(path_, info, raw.size());
  const uint64_t esize = dtype_size(info.dtype), n = raw.size() / esize;
  if (out.size() != n) {
    fail(ErrorKind::InvalidArgument, tensor_prefix(path_, info.name) + "read_float into " + std::to_string(out.size()) +
                                         " floats, but the tensor has " + std::to_string(n) + " elements");
  }
  // Blocks of kReadBlockBytes, handed out one at a time; each worker reads a block into its own
  // buffer (cache-resident) and converts it into `out`.
  const uint64_t block = std::max<uint64_t>(kReadBlockBytes / esize, 1), blocks = (n + block - 1) / block;
  const unsigned hw = std::thread::hardware_concurrency();
  const uint64_t workers = std::clamp<uint64_t>(threads > 0 ? static_cast<uint64_t>(threads) : std::max(hw, 1u), 1, std::max<uint64_t>(blocks, 1));
  const int fd = map_->fd;
  const uint64_t file_offset = kPrefixSize + header_size_ + info.begin;
  std::atomic<uint64_t> next{0};
  std::atomic<int64_t> first_bad{std::numeric_limits<int64_t>::max()};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&]() {
    try {
      std::vector<std::byte> buffer(fd >= 0 ? static_cast<size_t>(block * esize) : 0);
      for (uint64_t b = next.fetch_add(1); b < blocks; b = next.fetch_add(1)) {
        const uint64_t begin = b * block, count = std::min(block, n - begin);
        const std::byte* src = raw.data() + begin * esize;
        if (fd >= 0) {
          pread_exact(path_, fd, buffer.data(), count * esize, file_offset + begin * esize);
          src = buffer.data();
        }
        convert_into(path_, info, src, count, out.data() + begin);
        const int64_t bad = first_non_finite(out.data() + begin, count);
        if (bad >= 0) {
          int64_t seen = first_bad.load();
          const int64_t at = static_cast<int64_t>(begin) + bad;
          while (at < seen && !first_bad.compare_exchange_weak(seen, at)) {
          }
        }
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next.store(blocks);
    }
  };
  std::vector<std::thread> pool;
  for (uint64_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  return first_bad.load() == std::numeric_limits<int64_t>::max() ? -1 : first_bad.load();
}

}  // namespace mla
