// tests/unit/test_safetensors.cpp — suite `safetensors`: the hand-written reader and writer.
//
// What is pinned here (docs/safetensors.md and docs/testing.md):
//   * writer layout, byte for byte, on a hand-written expected image;
//   * writer -> reader -> writer round trip, byte-exact, over all 15 dtypes, zero-size
//     tensors, scalars and metadata with characters that need JSON escaping;
//   * misaligned tensor data read through memcpy;
//   * a corpus of malformed images, each built here in memory, each asserting the exact
//     ErrorKind and that the message names the file (and the tensor, when there is one);
//   * the accepted edge cases (whitespace padding, null metadata, odd keys, extra fields,
//     unsorted header order);
//   * open() reads only the prefix and the header: a sparse multi-GB file whose big tensor
//     is never paged in;
//   * Io errors name the path;
//   * mla/huge_pages.hpp: zeroed buffers of every size, the fresh interior faulted in, nothing else.
// Expected values are written out by hand or computed by independent means (never by
// running the reader on its own output as the oracle).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "mla/bf16.hpp"
#include "mla/error.hpp"
#include "mla/huge_pages.hpp"
#include "mla/safetensors.hpp"
#include "test_util.hpp"

namespace {

using mla::DType;
using mla::ErrorKind;
using Bytes = std::vector<std::byte>;

// ---- image builders ------------------------------------------------------------------------

void append(Bytes& out, std::string_view text) {
  for (char c : text) out.push_back(static_cast<std::byte>(c));
}

void append_u64(Bytes& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFF));
}

// [N = header.size() (or n_override)][header][data]
Bytes image(std::string_view header, std::string_view data = "",
            std::optional<uint64_t> n_override = std::nullopt) {
  Bytes out;
  append_u64(out, n_override.value_or(header.size()));
  append(out, header);
  append(out, data);
  return out;
}

std::string zeros(size_t n) { return std::string(n, '\0'); }

// The one-tensor header most cases mutate: "t" F32 [2] at [0, 8].
const std::string kGoodEntry = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

std::string to_string(const Bytes& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// ---- error expectations --------------------------------------------------------------------

struct BadCase {
  std::string label;        // also the display name: "<label>.safetensors"
  Bytes bytes;
  ErrorKind kind;
  std::string tensor;       // must appear in the message as 'tensor' (empty: no tensor)
};

void check_rejected(const BadCase& c) {
  const std::string display = c.label + ".safetensors";
  BOOST_TEST_CONTEXT("case " << c.label) {
    try {
      (void)mla::SafetensorsFile::from_bytes(c.bytes, display);
      BOOST_ERROR("accepted a malformed image");
    } catch (const mla::Error& e) {
      const std::string msg = e.what();
      BOOST_TEST(mla::error_kind_name(e.kind()) == mla::error_kind_name(c.kind), "message: " << msg);
      BOOST_TEST(msg.find(display) != std::string::npos, "message does not name the file: " << msg);
      if (!c.tensor.empty()) {
        BOOST_TEST(msg.find("'" + c.tensor + "'") != std::string::npos,
                   "message does not name tensor '" << c.tensor << "': " << msg);
      }
    }
  }
}

void check_all(const std::vector<BadCase>& cases) {
  for (const BadCase& c : cases) check_rejected(c);
}

mla::SafetensorsFile accept(const Bytes& bytes, const std::string& label) {
  try {
    return mla::SafetensorsFile::from_bytes(bytes, label + ".safetensors");
  } catch (const mla::Error& e) {
    BOOST_FAIL("case " << label << " rejected: " << e.what());
    throw;
  }
}

// An F32 tensor's payload from a list of values (little-endian host, as the writer assumes).
Bytes f32_bytes(std::initializer_list<float> values) {
  Bytes out(values.size() * 4);
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(safetensors)

// ---- dtype table ---------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(dtype_table) {
  struct Row {
    const char* name;
    size_t size;
  };
  // Sizes from the safetensors format definition (bits / 8).
  const Row rows[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
                      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
                      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  for (const Row& r : rows) {
    DType d{};
    BOOST_TEST_REQUIRE(mla::parse_dtype(r.name, d), r.name);
    BOOST_TEST(mla::dtype_name(d) == r.name);
    BOOST_TEST(mla::dtype_size(d) == r.size, r.name);
  }
  DType d{};
  for (const char* bad : {"bf16", "F32 ", "F8_E4M3FN", "F4", "F6_E2M3", "F8_E8M0", "C64", "", "FLOAT"})
    BOOST_TEST(!mla::parse_dtype(bad, d), bad);
}

// ---- writer --------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(writer_layout_is_byte_exact) {
  // One F32 tensor "a" = [1, 2] and metadata {"format": "pt"}. Expected image written by hand:
  // the 85-byte JSON text padded with 3 spaces to 88 (a multiple of 8), N = 88 as u64 LE,
  // then 1.0f = 0x3F800000 and 2.0f = 0x40000000, little-endian.
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  BOOST_TEST_REQUIRE(json.size() == 85u);  // 32 bytes of metadata part + 53 of tensor part
  const std::string padded = json + "   ";  // 85 -> 88
  Bytes expected = image(padded, std::string("\x00\x00\x80\x3F\x00\x00\x00\x40", 8));

  const Bytes data = f32_bytes({1.0f, 2.0f});
  const Bytes got = mla::serialize_safetensors({{"a", DType::F32, {2}, data}}, {{"format", "pt"}});
  BOOST_TEST(to_string(got) == to_string(expected));
}

BOOST_AUTO_TEST_CASE(writer_escapes_names_and_metadata) {
  // Name a"b\c<TAB><0x01>é ; metadata value with a newline.
  const std::string name = std::string("a\"b\\c\t\x01") + "\xC3\xA9";
  const Bytes data = f32_bytes({5.0f});
  const Bytes got = mla::serialize_safetensors({{name, DType::F32, {}, data}}, {{"k", "x\ny"}});
  const std::string text = to_string(got);
  BOOST_TEST(text.find(R"("k":"x\ny")") != std::string::npos);
  BOOST_TEST(text.find(R"("a\"b\\c\t\u0001)" "\xC3\xA9\"") != std::string::npos);
  const mla::SafetensorsFile f = accept(got, "escaped");
  BOOST_TEST_REQUIRE(f.tensors().size() == 1u);
  BOOST_TEST(f.tensors()[0].name == name);
  BOOST_TEST(f.metadata().at("k") == "x\ny");
  BOOST_TEST(f.to_float(f.at(name))[0] == 5.0f);
  BOOST_TEST(f.header_size() % 8 == 0u);
}

BOOST_AUTO_TEST_CASE(writer_rejects_bad_input) {
  const Bytes four = f32_bytes({1.0f});
  auto kind_of = [](auto&& fn) {
    try {
      fn();
    } catch (const mla::Error& e) {
      return std::string(mla::error_kind_name(e.kind()));
    }
    return std::string("no error");
  };
  BOOST_TEST(kind_of([&] { mla::serialize_safetensors({{"x", DType::F32, {1}, four}, {"x", DType::F32, {1}, four}}); }) ==
             "InvalidArgument");
  BOOST_TEST(kind_of([&] { mla::serialize_safetensors({{"x", DType::F32, {2}, four}}); }) == "InvalidArgument");
  BOOST_TEST(kind_of([&] { mla::serialize_safetensors({{"__metadata__", DType::F32, {1}, four}}); }) ==
             "InvalidArgument");
  BOOST_TEST(kind_of([&] { mla::serialize_safetensors({{"\xff", DType::F32, {1}, four}}); }) == "InvalidArgument");
  BOOST_TEST(kind_of([&] { mla::write_safetensors("/nonexistent-dir-mla/x.safetensors", {}); }) == "Io");
  try {
    mla::write_safetensors("/nonexistent-dir-mla/x.safetensors", {});
  } catch (const mla::Error& e) {
    BOOST_TEST(std::string(e.what()).find("/nonexistent-dir-mla/x.safetensors") != std::string::npos);
  }
}

// A file written by the Python `safetensors` package (0.8.0, numpy front end), kept here as
// hex so CI needs no Python. It was made with:
//   save_file({"w": np.arange(6, dtype=np.float32).reshape(2,3), "b": np.array([1.5, -2.25]),
//              "i": np.array([[-3, 7]], dtype=np.int64), "h": np.array([0.5, 65504], dtype=np.float16),
//              "u": np.array([255, 0, 1], dtype=np.uint8), "e": np.zeros((2,0), dtype=np.float32)},
//             path, metadata={"format": "np", "q\"x": "\u00e9\n"})
// The reader must decode it, and the writer, given the same tensors in the same order, must
// reproduce it byte for byte (same JSON spelling, key order and space padding).
BOOST_AUTO_TEST_CASE(python_written_file_reads_and_rewrites_byte_exact) {
  const std::string hex =
      "80010000000000007b225f5f6d657461646174615f5f223a7b22666f726d6174223a226e70222c22715c2278223a22c3"
      "a95c6e227d2c2269223a7b226474797065223a22493634222c227368617065223a5b312c325d2c22646174615f6f6666"
      "73657473223a5b302c31365d7d2c2262223a7b226474797065223a22463634222c227368617065223a5b325d2c226461"
      "74615f6f666673657473223a5b31362c33325d7d2c2265223a7b226474797065223a22463332222c227368617065223a"
      "5b322c305d2c22646174615f6f666673657473223a5b33322c33325d7d2c2277223a7b226474797065223a2246333222"
      "2c227368617065223a5b322c335d2c22646174615f6f666673657473223a5b33322c35365d7d2c2268223a7b22647479"
      "7065223a22463136222c227368617065223a5b325d2c22646174615f6f666673657473223a5b35362c36305d7d2c2275"
      "223a7b226474797065223a225538222c227368617065223a5b335d2c22646174615f6f666673657473223a5b36302c36"
      "335d7d7d20202020fdffffffffffffff0700000000000000000000000000f83f00000000000002c0000000000000803f"
      "0000004000004040000080400000a0400038ff7bff0001";
  Bytes file;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    file.push_back(static_cast<std::byte>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  BOOST_TEST_REQUIRE(file.size() == 455u);
  const mla::SafetensorsFile f = accept(file, "python-written");
  BOOST_TEST(f.header_size() == 384u);
  BOOST_TEST(f.metadata() == (std::map<std::string, std::string>{{"format", "np"}, {"q\"x", "\xC3\xA9\n"}}));
  BOOST_TEST_REQUIRE(f.tensors().size() == 6u);
  const char* order[] = {"i", "b", "e", "w", "h", "u"};  // data-offset order (ties by name)
  for (size_t k = 0; k < 6; ++k) BOOST_TEST(f.tensors()[k].name == order[k]);
  BOOST_TEST(f.to_double(f.at("w")) == (std::vector<double>{0, 1, 2, 3, 4, 5}));
  BOOST_TEST(f.at("w").shape == (std::vector<uint64_t>{2, 3}));
  BOOST_TEST(f.to_double(f.at("b")) == (std::vector<double>{1.5, -2.25}));
  BOOST_TEST(f.to_double(f.at("i")) == (std::vector<double>{-3, 7}));
  BOOST_TEST(f.to_double(f.at("h")) == (std::vector<double>{0.5, 65504}));
  BOOST_TEST(f.to_double(f.at("u")) == (std::vector<double>{255, 0, 1}));
  BOOST_TEST(f.at("e").shape == (std::vector<uint64_t>{2, 0}));
  BOOST_TEST(f.to_double(f.at("e")).empty());

  std::vector<mla::TensorToWrite> again;
  for (const mla::TensorInfo& t : f.tensors()) again.push_back({t.name, t.dtype, t.shape, f.bytes(t)});
  BOOST_TEST(to_string(mla::serialize_safetensors(again, f.metadata())) == to_string(file));
}

// All 15 dtypes, a zero-size tensor, a scalar, metadata: writer -> reader -> writer is
// byte-identical, and every payload comes back unchanged.
BOOST_AUTO_TEST_CASE(round_trip_all_dtypes_byte_exact) {
  struct Item {
    std::string name;
    DType dtype;
    std::vector<uint64_t> shape;
  };
  const std::vector<Item> items = {
      {"bool", DType::BOOL, {3}},          {"u8", DType::U8, {2, 2}},    {"i8", DType::I8, {5}},
      {"e5m2", DType::F8_E5M2, {3}},       {"e4m3", DType::F8_E4M3, {1, 3}},
      {"i16", DType::I16, {2}},            {"u16", DType::U16, {3}},     {"f16", DType::F16, {2, 1}},
      {"bf16", DType::BF16, {4}},          {"i32", DType::I32, {1}},     {"u32", DType::U32, {2}},
      {"f32", DType::F32, {2, 3}},         {"f64", DType::F64, {2}},     {"i64", DType::I64, {1}},
      {"u64", DType::U64, {2}},            {"empty", DType::F32, {2, 0}}, {"scalar", DType::F64, {}},
      {"z.empty.2", DType::BF16, {0}},
  };
  std::vector<Bytes> payloads;
  for (size_t k = 0; k < items.size(); ++k) {
    uint64_t n = 1;
    for (uint64_t d : items[k].shape) n *= d;
    Bytes p(n * mla::dtype_size(items[k].dtype));
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::byte>((k * 37 + i * 11 + 1) & 0xFF);
    payloads.push_back(std::move(p));
  }
  std::vector<mla::TensorToWrite> first;
  for (size_t k = 0; k < items.size(); ++k) first.push_back({items[k].name, items[k].dtype, items[k].shape, payloads[k]});
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "quote \" slash \\ tab \t"}};
  const Bytes image1 = mla::serialize_safetensors(first, meta);

  const mla::SafetensorsFile f = accept(image1, "roundtrip");
  BOOST_TEST_REQUIRE(f.tensors().size() == items.size());
  BOOST_TEST(f.metadata() == meta);
  BOOST_TEST(f.header_size() % 8 == 0u);
  std::vector<mla::TensorToWrite> second;
  for (size_t k = 0; k < items.size(); ++k) {
    const mla::TensorInfo& t = f.tensors()[k];  // offset order == the order written
    BOOST_TEST(t.name == items[k].name);
    BOOST_TEST(mla::dtype_name(t.dtype) == mla::dtype_name(items[k].dtype));
    BOOST_TEST(t.shape == items[k].shape);
    const auto raw = f.bytes(t);
    BOOST_TEST((raw.empty() || std::memcmp(raw.data(), payloads[k].data(), raw.size()) == 0));
    BOOST_TEST(raw.size() == payloads[k].size());
    second.push_back({t.name, t.dtype, t.shape, raw});
  }
  const Bytes image2 = mla::serialize_safetensors(second, f.metadata());
  BOOST_TEST(to_string(image1) == to_string(image2));

  // Through the file system too.
  const std::string dir = mla::test::scratch_dir("safetensors-rt");
  const std::string path = dir + "/rt.safetensors";
  mla::write_safetensors(path, first, meta);
  BOOST_TEST(mla::test::read_text(path) == to_string(image1));
  const mla::SafetensorsFile g = mla::SafetensorsFile::open(path);
  BOOST_TEST(g.path() == path);
  BOOST_TEST(g.file_size() == image1.size());
  BOOST_TEST(g.tensors().size() == items.size());
  BOOST_TEST(std::filesystem::directory_iterator(dir)->path() == std::filesystem::path(path));  // no temp left
  std::filesystem::remove_all(dir);
}

// Values of each dtype decode to the numbers a hand computation gives.
BOOST_AUTO_TEST_CASE(to_float_and_to_double_values) {
  Bytes data;
  auto put = [&data](const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    data.insert(data.end(), b, b + n);
  };
  const uint8_t u8[2] = {0, 255};
  const int8_t i8[2] = {-128, 127};
  const uint8_t e4m3[2] = {0x7E, 0xB8};   // 448, -1.0
  const uint8_t e5m2[2] = {0x3C, 0x7B};   // 1.0, 57344
  const int16_t i16[2] = {-32768, 7};
  const uint16_t u16[2] = {65535, 1};
  const uint16_t f16[2] = {0x3C00, 0x0001};  // 1.0, 2^-24
  const uint16_t b16[2] = {0x3F80, 0xC040};  // 1.0, -3.0
  const int32_t i32[2] = {-5, 2147483647};
  const uint32_t u32[2] = {4294967295u, 3};
  const float f32[2] = {0.1f, -2.5f};
  const double f64[2] = {0.1, 1e300};
  const int64_t i64[2] = {-9, 1LL << 53};
  const uint64_t u64[2] = {(1ULL << 53) + 1, 8};
  put(u8, 2); put(i8, 2); put(e4m3, 2); put(e5m2, 2); put(i16, 4); put(u16, 4); put(f16, 4);
  put(b16, 4); put(i32, 8); put(u32, 8); put(f32, 8); put(f64, 16); put(i64, 16); put(u64, 16);
  std::string header = "{";
  const char* names[] = {"U8", "I8", "F8_E4M3", "F8_E5M2", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64"};
  const size_t widths[] = {1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8};
  size_t off = 0;
  for (size_t k = 0; k < 14; ++k) {
    header += std::string(k ? "," : "") + "\"" + names[k] + "\":{\"dtype\":\"" + names[k] +
              "\",\"shape\":[2],\"data_offsets\":[" + std::to_string(off) + "," +
              std::to_string(off + 2 * widths[k]) + "]}";
    off += 2 * widths[k];
  }
  header += "}";
  const mla::SafetensorsFile f = accept(image(header, to_string(data)), "values");
  auto d = [&f](const char* n) { return f.to_double(f.at(n)); };
  BOOST_TEST(d("U8") == (std::vector<double>{0, 255}));
  BOOST_TEST(d("I8") == (std::vector<double>{-128, 127}));
  BOOST_TEST(d("F8_E4M3") == (std::vector<double>{448, -1}));
  BOOST_TEST(d("F8_E5M2") == (std::vector<double>{1, 57344}));
  BOOST_TEST(d("I16") == (std::vector<double>{-32768, 7}));
  BOOST_TEST(d("U16") == (std::vector<double>{65535, 1}));
  BOOST_TEST(d("F16") == (std::vector<double>{1, std::ldexp(1.0, -24)}));
  BOOST_TEST(d("BF16") == (std::vector<double>{1, -3}));
  BOOST_TEST(d("I32") == (std::vector<double>{-5, 2147483647.0}));
  BOOST_TEST(d("U32") == (std::vector<double>{4294967295.0, 3}));
  BOOST_TEST(d("F32") == (std::vector<double>{static_cast<double>(0.1f), -2.5}));
  BOOST_TEST(d("F64") == (std::vector<double>{0.1, 1e300}));
  BOOST_TEST(d("I64") == (std::vector<double>{-9, 9007199254740992.0}));
  BOOST_TEST(d("U64") == (std::vector<double>{9007199254740992.0, 8}));  // 2^53+1 rounds to even
  // to_float: F64 rounds to nearest float; 1e300 overflows to +inf.
  const std::vector<float> f64f = f.to_float(f.at("F64"));
  BOOST_TEST(f64f[0] == 0.1f);
  BOOST_TEST(std::isinf(f64f[1]));
  BOOST_TEST(f.to_float(f.at("F32"))[0] == 0.1f);
  BOOST_TEST(f.to_float(f.at("U32"))[0] == 4294967296.0f);
  // at() / find() on a missing name.
  BOOST_TEST(f.find("nope") == nullptr);
  try {
    (void)f.at("nope");
    BOOST_ERROR("at() found a missing tensor");
  } catch (const mla::Error& e) {
    BOOST_TEST(mla::error_kind_name(e.kind()) == "TensorNotFound");
    BOOST_TEST(std::string(e.what()).find("values.safetensors") != std::string::npos);
    BOOST_TEST(std::string(e.what()).find("'nope'") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(bool_to_float_is_unsupported) {
  const mla::SafetensorsFile f =
      accept(image(R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x00", 2)), "bool");
  BOOST_TEST(f.bytes(f.at("m")).size() == 2u);
  try {
    (void)f.to_float(f.at("m"));
    BOOST_ERROR("BOOL converted");
  } catch (const mla::Error& e) {
    BOOST_TEST(mla::error_kind_name(e.kind()) == "Unsupported");
    BOOST_TEST(std::string(e.what()).find("'m'") != std::string::npos);
  }
}

// An F32 tensor at data offset 2 (and the data section itself not 8-aligned): values read
// through memcpy, no typed misaligned loads (UBSan -fsanitize=alignment builds check this).
BOOST_AUTO_TEST_CASE(misaligned_f32_reads_correctly) {
  const std::string header =
      R"({"pad":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"x":{"dtype":"F32","shape":[3],"data_offsets":[2,14]}} )";
  Bytes payload = {std::byte{7}, std::byte{9}};
  const Bytes xs = f32_bytes({1.5f, -0.0f, 3.0e-40f});  // a denormal too
  payload.insert(payload.end(), xs.begin(), xs.end());
  const mla::SafetensorsFile f = accept(image(header, to_string(payload)), "misaligned");
  const std::vector<float> x = f.to_float(f.at("x"));
  BOOST_TEST_REQUIRE(x.size() == 3u);
  BOOST_TEST(x[0] == 1.5f);
  BOOST_TEST(std::bit_cast<uint32_t>(x[1]) == 0x80000000u);
  BOOST_TEST(x[2] == 3.0e-40f);
  BOOST_TEST(f.to_double(f.at("pad")) == (std::vector<double>{7, 9}));
}

// ---- accepted edge cases -------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(accepts_edge_cases) {
  const std::string data8 = zeros(8);
  // Whitespace padding (space, tab, CR, LF) after the object and leading whitespace.
  accept(image("{" + kGoodEntry + "} \t\r\n", data8), "trailing-ws");
  accept(image(" \n{" + kGoodEntry + "}", data8), "leading-ws");
  // No tensors at all: {} with an empty data section.
  BOOST_TEST(accept(image("{}"), "empty-object").tensors().empty());
  // __metadata__ null, and an empty metadata object.
  BOOST_TEST(accept(image(R"({"__metadata__":null,)" + kGoodEntry + "}", data8), "meta-null").metadata().empty());
  BOOST_TEST(accept(image(R"({"__metadata__":{},)" + kGoodEntry + "}", data8), "meta-empty").metadata().empty());
  // Key "" and a key holding an escaped NUL; a non-ASCII key; a 1 MB key.
  {
    const mla::SafetensorsFile f = accept(
        image(R"({"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
              "xy"),
        "odd-keys");
    BOOST_TEST(f.find("") != nullptr);
    BOOST_TEST(f.find(std::string_view("a\0b", 3)) != nullptr);
    BOOST_TEST(static_cast<char>(f.bytes(f.at(std::string_view("a\0b", 3)))[0]) == 'y');
  }
  {
    const std::string key = "\xE5\xB1\x82.\xF0\x9F\x98\x80";  // CJK + emoji
    const mla::SafetensorsFile f =
        accept(image("{\"" + key + R"(":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "z"), "utf8-key");
    BOOST_TEST(f.find(key) != nullptr);
  }
  {
    const std::string key(1 << 20, 'k');
    const mla::SafetensorsFile f =
        accept(image("{\"" + key + R"(":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "z"), "1mb-key");
    BOOST_TEST(f.find(key) != nullptr);
  }
  // Unknown extra fields inside a tensor entry are ignored (reference-crate policy).
  {
    const mla::SafetensorsFile f = accept(
        image(R"({"t":{"extra":{"deep":[1,2,{"x":null}]},"dtype":"F32","shape":[2],"data_offsets":[0,8],"z":-1.5}})",
              data8),
        "extra-field");
    BOOST_TEST(f.at("t").numel() == 2u);
  }
  // Zero-size tensors: [2,0] at [k,k], several at one offset; a scalar [] with 4 bytes;
  // header order unsorted -> tensors() in offset order.
  {
    const std::string header =
        R"({"s":{"dtype":"F32","shape":[],"data_offsets":[4,8]},)"
        R"("z2":{"dtype":"F16","shape":[0],"data_offsets":[4,4]},)"
        R"("z1":{"dtype":"F32","shape":[2,0],"data_offsets":[4,4]},)"
        R"("a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
    const mla::SafetensorsFile f =
        accept(image(header, std::string("\x01\x00\x00\x00\x00\x00\x20\x41", 8)), "zero-size");
    BOOST_TEST_REQUIRE(f.tensors().size() == 4u);
    BOOST_TEST(f.tensors()[0].name == "a");
    BOOST_TEST(f.tensors()[1].name == "z1");  // ties at [4,4] broken by name
    BOOST_TEST(f.tensors()[2].name == "z2");
    BOOST_TEST(f.tensors()[3].name == "s");
    BOOST_TEST(f.at("s").numel() == 1u);
    BOOST_TEST(f.to_float(f.at("s")) == (std::vector<float>{10.0f}));
    BOOST_TEST(f.to_float(f.at("z1")).empty());
    BOOST_TEST(f.at("z1").numel() == 0u);
  }
  // Shape entries at u64 max are integers; here a 0 in the shape makes numel 0.
  accept(image(R"({"t":{"dtype":"U8","shape":[18446744073709551615,0],"data_offsets":[0,0]}})"), "u64max-dim");
}

// ---- malformed images ----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(rejects_bad_length_prefix) {
  const std::string data8 = zeros(8);
  const std::string good = "{" + kGoodEntry + "}";
  Bytes seven(7, std::byte{0});
  check_all({
      {"empty-file", Bytes{}, ErrorKind::HeaderTooSmall, ""},
      {"seven-bytes", seven, ErrorKind::HeaderTooSmall, ""},
      {"n-u64-max", image(good, data8, UINT64_MAX), ErrorKind::HeaderTooLarge, ""},
      {"n-over-cap", image(good, data8, mla::kMaxHeaderSize + 1), ErrorKind::HeaderTooLarge, ""},
      // The cap itself is allowed; this image is then simply too short.
      {"n-at-cap-short", image(good, data8, mla::kMaxHeaderSize), ErrorKind::InvalidHeaderLength, ""},
      {"n-past-eof", image("{}", "", 100), ErrorKind::InvalidHeaderLength, ""},
      {"n-past-eof-by-1", image(good, "", good.size() + 1), ErrorKind::InvalidHeaderLength, ""},
      {"n-zero", image(good, data8, 0), ErrorKind::InvalidHeaderJson, ""},
  });
}

BOOST_AUTO_TEST_CASE(rejects_bad_utf8) {
  const std::string data8 = zeros(8);
  check_all({
      {"utf8-ff", image("{\"\xff\":1}"), ErrorKind::InvalidHeaderUtf8, ""},
      {"utf8-overlong", image("{\"\xc0\xaf\":1}"), ErrorKind::InvalidHeaderUtf8, ""},
      {"utf8-surrogate", image("{\"\xed\xa0\x80\":1}"), ErrorKind::InvalidHeaderUtf8, ""},
      {"utf8-truncated", image("{\"t\xe2\x82\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data8),
       ErrorKind::InvalidHeaderUtf8, ""},
  });
}

BOOST_AUTO_TEST_CASE(rejects_bad_json) {
  const std::string data8 = zeros(8);
  const std::string good = "{" + kGoodEntry + "}";
  const std::string deep = R"({"__metadata__":{"k":)" + std::string(2000, '[') + std::string(2000, ']') + "}}";
  const std::string deep200 = R"({"__metadata__":{"k":)" + std::string(200, '[') + std::string(200, ']') + "}}";
  check_all({
      {"json-open-brace", image("{"), ErrorKind::InvalidHeaderJson, ""},
      {"json-array-root", image("[]"), ErrorKind::InvalidHeaderJson, ""},
      {"json-number-root", image("42"), ErrorKind::InvalidHeaderJson, ""},
      {"json-string-root", image("\"x\""), ErrorKind::InvalidHeaderJson, ""},
      {"json-spaces-only", image("        "), ErrorKind::InvalidHeaderJson, ""},
      {"json-bom", image("\xEF\xBB\xBF" + good, data8), ErrorKind::InvalidHeaderJson, ""},
      {"json-single-quotes", image("{'t':1}"), ErrorKind::InvalidHeaderJson, ""},
      {"json-trailing-comma", image("{" + kGoodEntry + ",}", data8), ErrorKind::InvalidHeaderJson, ""},
      {"json-nan-literal", image(R"({"t":{"dtype":"F32","shape":[NaN],"data_offsets":[0,8]}})", data8),
       ErrorKind::InvalidHeaderJson, ""},
      {"json-nul-padding", image(good + zeros(5), data8), ErrorKind::InvalidHeaderJson, ""},
      {"json-two-objects", image("{}{}"), ErrorKind::InvalidHeaderJson, ""},
      {"json-trailing-garbage", image(good + " xx", data8), ErrorKind::InvalidHeaderJson, ""},
      {"json-extra-brace", image(good + "}", data8), ErrorKind::InvalidHeaderJson, ""},
      {"json-deep-2000", image(deep), ErrorKind::InvalidHeaderJson, ""},
      {"json-deep-200", image(deep200), ErrorKind::InvalidHeaderJson, ""},
      {"json-lone-surrogate", image(R"({"a\ud800":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data8),
       ErrorKind::InvalidHeaderJson, ""},
      {"json-raw-control-char", image("{\"a\x01\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data8),
       ErrorKind::InvalidHeaderJson, ""},
      {"json-leading-zero", image(R"({"t":{"dtype":"F32","shape":[02],"data_offsets":[0,8]}})", data8),
       ErrorKind::InvalidHeaderJson, ""},
  });
}

BOOST_AUTO_TEST_CASE(rejects_schema_violations) {
  const std::string d8 = zeros(8);
  auto entry = [&](const std::string& name, const std::string& body) {
    return image("{\"" + name + "\":" + body + "}", d8);
  };
  check_all({
      {"missing-dtype", entry("w", R"({"shape":[2],"data_offsets":[0,8]})"), ErrorKind::InvalidHeaderJson, "w"},
      {"missing-shape", entry("w", R"({"dtype":"F32","data_offsets":[0,8]})"), ErrorKind::InvalidHeaderJson, "w"},
      {"missing-offsets", entry("w", R"({"dtype":"F32","shape":[2]})"), ErrorKind::InvalidHeaderJson, "w"},
      {"entry-not-object", entry("w", "[1,2]"), ErrorKind::InvalidHeaderJson, "w"},
      {"entry-string", entry("w", "\"F32\""), ErrorKind::InvalidHeaderJson, "w"},
      {"dtype-F128", entry("w", R"({"dtype":"F128","shape":[2],"data_offsets":[0,8]})"), ErrorKind::UnknownDtype, "w"},
      {"dtype-lower", entry("w", R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})"), ErrorKind::UnknownDtype, "w"},
      {"dtype-empty", entry("w", R"({"dtype":"","shape":[2],"data_offsets":[0,8]})"), ErrorKind::UnknownDtype, "w"},
      {"dtype-C64", entry("w", R"({"dtype":"C64","shape":[1],"data_offsets":[0,8]})"), ErrorKind::UnknownDtype, "w"},
      {"dtype-number", entry("w", R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})"), ErrorKind::InvalidHeaderJson, "w"},
      {"dtype-twice", entry("w", R"({"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]})"),
       ErrorKind::InvalidHeaderJson, "w"},
      {"offsets-len-1", entry("w", R"({"dtype":"F32","shape":[2],"data_offsets":[8]})"), ErrorKind::InvalidHeaderJson, "w"},
      {"offsets-len-3", entry("w", R"({"dtype":"F32","shape":[2],"data_offsets":[0,8,8]})"), ErrorKind::InvalidHeaderJson, "w"},
      {"offsets-strings", entry("w", R"({"dtype":"F32","shape":[2],"data_offsets":["0","8"]})"),
       ErrorKind::InvalidHeaderJson, "w"},
      {"offsets-object", entry("w", R"({"dtype":"F32","shape":[2],"data_offsets":{"a":0}})"), ErrorKind::InvalidHeaderJson, "w"},
      {"offsets-negative", entry("w", R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})"), ErrorKind::InvalidHeaderJson, "w"},
      {"shape-negative", entry("w", R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), ErrorKind::InvalidHeaderJson, "w"},
      {"shape-fraction", entry("w", R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"), ErrorKind::InvalidHeaderJson, "w"},
      {"shape-exponent", entry("w", R"({"dtype":"F32","shape":[2e0],"data_offsets":[0,8]})"), ErrorKind::InvalidHeaderJson, "w"},
      {"shape-string", entry("w", R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})"), ErrorKind::InvalidHeaderJson, "w"},
      {"shape-null", entry("w", R"({"dtype":"F32","shape":[null],"data_offsets":[0,8]})"), ErrorKind::InvalidHeaderJson, "w"},
      {"shape-not-array", entry("w", R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"), ErrorKind::InvalidHeaderJson, "w"},
      {"shape-u64max-plus-1", entry("w", R"({"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,8]})"),
       ErrorKind::InvalidHeaderJson, ""},
      {"meta-number", image(R"({"__metadata__":{"a":1},)" + kGoodEntry + "}", d8), ErrorKind::InvalidHeaderJson, ""},
      {"meta-nested", image(R"({"__metadata__":{"a":{"b":"c"}},)" + kGoodEntry + "}", d8), ErrorKind::InvalidHeaderJson, ""},
      {"meta-array", image(R"({"__metadata__":["a"],)" + kGoodEntry + "}", d8), ErrorKind::InvalidHeaderJson, ""},
      {"meta-twice", image(R"({"__metadata__":{"a":"b"},)" + kGoodEntry + R"(,"__metadata__":{"c":"d"}})", d8),
       ErrorKind::InvalidHeaderJson, ""},
      {"meta-key-twice", image(R"({"__metadata__":{"a":"b","a":"c"},)" + kGoodEntry + "}", d8), ErrorKind::InvalidHeaderJson, ""},
      {"meta-as-tensor", image(R"({"__metadata__":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d8),
       ErrorKind::InvalidHeaderJson, ""},
      {"dup-identical", image("{" + kGoodEntry + "," + kGoodEntry + "}", d8), ErrorKind::DuplicateTensor, "t"},
      {"dup-different",
       image("{" + kGoodEntry + R"(,"t":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", zeros(16)),
       ErrorKind::DuplicateTensor, "t"},
  });
}

BOOST_AUTO_TEST_CASE(rejects_bad_offsets_and_sizes) {
  auto t = [](const std::string& name, const std::string& dtype, const std::string& shape, uint64_t b, uint64_t e) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(b) + "," + std::to_string(e) + "]}";
  };
  std::string ten = "{";
  for (int i = 0; i < 10; ++i) ten += (i ? "," : "") + t("x" + std::to_string(i), "F32", "[4]", 0, 16);
  ten += "}";
  const std::string big = "18446744073709551615";  // u64 max
  std::vector<BadCase> cases = {
      {"begin-after-end", image("{" + t("a", "U8", "[0]", 0, 0) + "," + t("b", "U8", "[0]", 8, 0) + "}", zeros(8)),
       ErrorKind::InvalidOffset, "b"},
      {"gap-at-start", image("{" + t("g", "F32", "[2]", 4, 12) + "}", zeros(12)), ErrorKind::InvalidOffset, "g"},
      {"hole", image("{" + t("a", "F32", "[2]", 0, 8) + "," + t("b", "F32", "[2]", 12, 20) + "}", zeros(20)),
       ErrorKind::InvalidOffset, "b"},
      {"overlap", image("{" + t("a", "F32", "[2]", 0, 8) + "," + t("b", "F32", "[2]", 4, 12) + "}", zeros(12)),
       ErrorKind::InvalidOffset, "b"},
      {"ten-at-0-16", image(ten, zeros(16)), ErrorKind::InvalidOffset, "x1"},
      {"offsets-past-end", image("{" + t("a", "F32", "[2]", 0, 8) + "}", zeros(4)),
       ErrorKind::MetadataIncompleteBuffer, ""},
      {"short-data", image("{" + t("a", "F32", "[2]", 0, 8) + "}", zeros(7)), ErrorKind::MetadataIncompleteBuffer, ""},
      {"trailing-byte", image("{" + t("a", "F32", "[2]", 0, 8) + "}", zeros(9)), ErrorKind::MetadataIncompleteBuffer, ""},
      {"no-tensors-trailing", image("{}", "polyglot"), ErrorKind::MetadataIncompleteBuffer, ""},
      {"numel-overflow-2^32x2^32", image("{" + t("n", "F32", "[4294967296,4294967296]", 0, 8) + "}", zeros(8)),
       ErrorKind::ValidationOverflow, "n"},
      {"numel-overflow-2x2^63", image("{" + t("n", "U8", "[2,9223372036854775808]", 0, 8) + "}", zeros(8)),
       ErrorKind::ValidationOverflow, "n"},
      {"nbytes-overflow-2^62-f32", image("{" + t("n", "F32", "[4611686018427387904]", 0, 8) + "}", zeros(8)),
       ErrorKind::ValidationOverflow, "n"},
      {"nbytes-overflow-u64max-i16", image("{" + t("n", "I16", "[" + big + "]", 0, 8) + "}", zeros(8)),
       ErrorKind::ValidationOverflow, "n"},
      // numel and nbytes fit, offsets near 2^64: the data section can never match.
      {"offsets-near-2^64", image("{" + t("n", "U8", "[" + big + "]", 0, UINT64_MAX) + "}", zeros(8)),
       ErrorKind::MetadataIncompleteBuffer, ""},
  };
  // Size mismatch, one case per dtype width: the tensor declares one element more bytes.
  for (const char* dtype : {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32",
                            "F32", "F64", "I64", "U64"}) {
    DType d{};
    BOOST_TEST_REQUIRE(mla::parse_dtype(dtype, d));
    const uint64_t w = mla::dtype_size(d);
    cases.push_back({std::string("size-mismatch-") + dtype,
                     image("{" + t("m", dtype, "[2]", 0, 3 * w) + "}", zeros(3 * w)), ErrorKind::TensorInvalidInfo, "m"});
  }
  check_all(cases);

  // The message of a size mismatch spells out both sizes (the example of docs/safetensors.md §3).
  try {
    (void)mla::SafetensorsFile::from_bytes(image("{" + t("x.weight", "BF16", "[2,3]", 0, 10) + "}", zeros(10)),
                                           "model-00001-of-000064.safetensors");
    BOOST_ERROR("size mismatch accepted");
  } catch (const mla::Error& e) {
    BOOST_TEST(std::string(e.what()) ==
               "model-00001-of-000064.safetensors: tensor 'x.weight': dtype BF16 shape [2, 3] needs 12 bytes "
               "but data_offsets span 10");
  }
}

// ---- files on disk -------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(open_errors_name_the_path) {
  const std::string dir = mla::test::scratch_dir("safetensors-open");
  auto kind_and_message = [](const std::string& path) -> std::pair<std::string, std::string> {
    try {
      (void)mla::SafetensorsFile::open(path);
    } catch (const mla::Error& e) {
      return {std::string(mla::error_kind_name(e.kind())), e.what()};
    }
    return {"no error", ""};
  };
  const std::string missing = dir + "/missing.safetensors";
  auto [k1, m1] = kind_and_message(missing);
  BOOST_TEST(k1 == "Io");
  BOOST_TEST(m1.find(missing) != std::string::npos);
  auto [k2, m2] = kind_and_message(dir);
  BOOST_TEST(k2 == "Io");
  BOOST_TEST(m2.find(dir) != std::string::npos);
  const std::string empty = dir + "/empty.safetensors";
  mla::test::write_text(empty, "");
  auto [k3, m3] = kind_and_message(empty);
  BOOST_TEST(k3 == "HeaderTooSmall");
  BOOST_TEST(m3.find(empty) != std::string::npos);
  const std::string bad = dir + "/bad.safetensors";
  mla::test::write_text(bad, to_string(image("{" + kGoodEntry + "}", zeros(7))));
  auto [k4, m4] = kind_and_message(bad);
  BOOST_TEST(k4 == "MetadataIncompleteBuffer");
  BOOST_TEST(m4.find(bad) != std::string::npos);
  std::filesystem::remove_all(dir);
}

// open() reads the prefix and the header only. A sparse file of 4 GiB + 20 bytes holds
// "a" (F32 [2]), "huge" (U8 [4 GiB]) and "b" (F32 [3]); after opening it and reading a and b,
// (1) the bytes read through read()/pread() are about the header's size (/proc/self/io rchar),
// (2) the pages of "huge" away from its ends are not in the page cache (mincore), and
// (3) the file still occupies only a few KB of disk.
BOOST_AUTO_TEST_CASE(open_does_not_read_tensor_data) {
  const uint64_t huge = 4ULL << 30;
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("huge":{"dtype":"U8","shape":[)" + std::to_string(huge) + R"(],"data_offsets":[8,)" +
                             std::to_string(8 + huge) + R"(]},"b":{"dtype":"F32","shape":[3],"data_offsets":[)" +
                             std::to_string(8 + huge) + "," + std::to_string(20 + huge) + "]}}";
  const std::string dir = mla::test::scratch_dir("safetensors-sparse");
  const std::string path = dir + "/sparse.safetensors";
  const uint64_t data_start = 8 + header.size();
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    BOOST_TEST_REQUIRE(fd >= 0);
    Bytes head;
    append_u64(head, header.size());
    append(head, header);
    const Bytes a = f32_bytes({1.0f, -2.0f});
    const Bytes b = f32_bytes({3.0f, 4.0f, 5.0f});
    bool ok = ::pwrite(fd, head.data(), head.size(), 0) == static_cast<ssize_t>(head.size());
    ok = ok && ::pwrite(fd, a.data(), 8, static_cast<off_t>(data_start)) == 8;
    ok = ok && ::pwrite(fd, b.data(), 12, static_cast<off_t>(data_start + 8 + huge)) == 12;
    ok = ok && ::close(fd) == 0;
    BOOST_TEST_REQUIRE(ok);
  }
  auto rchar = []() -> int64_t {
    std::ifstream io("/proc/self/io");
    std::string key;
    int64_t value = -1;
    while (io >> key >> value) {
      if (key == "rchar:") return value;
    }
    return -1;
  };
  const int64_t before = rchar();
  const mla::SafetensorsFile f = mla::SafetensorsFile::open(path);
  const int64_t after = rchar();
  if (before >= 0 && after >= 0) {
    BOOST_TEST(after - before <= static_cast<int64_t>(8 + header.size() + 4096));
  } else {
    BOOST_TEST_MESSAGE("/proc/self/io not readable; rchar check skipped");
  }
  BOOST_TEST(f.to_float(f.at("a")) == (std::vector<float>{1.0f, -2.0f}));
  BOOST_TEST(f.to_float(f.at("b")) == (std::vector<float>{3.0f, 4.0f, 5.0f}));
  BOOST_TEST(f.at("huge").nbytes() == huge);

  // Pages of "huge" from 64 MiB in to 64 MiB before its end: none resident.
  const std::span<const std::byte> h = f.bytes(f.at("huge"));
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(h.data()) + (64u << 20)) & ~(page - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(h.data()) + h.size() - (64u << 20)) & ~(page - 1);
  const size_t pages = (hi - lo) / page;
  std::vector<unsigned char> resident(pages);
  BOOST_TEST_REQUIRE(::mincore(reinterpret_cast<void*>(lo), hi - lo, resident.data()) == 0);
  size_t in_core = 0;
  for (unsigned char r : resident) in_core += (r & 1u);
  BOOST_TEST(in_core == 0u);

  struct stat st {};
  BOOST_TEST_REQUIRE(::stat(path.c_str(), &st) == 0);
  BOOST_TEST(static_cast<uint64_t>(st.st_size) == data_start + 20 + huge);
  BOOST_TEST(static_cast<uint64_t>(st.st_blocks) * 512 <= 1u << 20);  // still sparse
  std::filesystem::remove_all(dir);
}

// mla/huge_pages.hpp (the loader's and the engines' big buffers): the contents are those of a
// plain vector for every size, tiny ones below 2 MiB included; fault_in_huge_pages faults in
// exactly the 2 MiB-aligned interior of fresh memory, and nothing outside it.
BOOST_AUTO_TEST_CASE(huge_page_buffers) {
  for (const size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{1000}, (size_t{1} << 19) - 1, (size_t{3} << 20) + 5}) {
    std::vector<float> f = mla::huge_page_vector<float>(n);
    BOOST_TEST_REQUIRE(f.size() == n);
    BOOST_TEST(std::all_of(f.begin(), f.end(), [](float x) { return std::bit_cast<uint32_t>(x) == 0; }));
    for (size_t i = 0; i < n; ++i) f[i] = static_cast<float>(i);
    bool kept = true;
    for (size_t i = 0; i < n; ++i) kept = kept && f[i] == static_cast<float>(i);
    BOOST_TEST(kept);
    const std::vector<uint16_t> b = mla::huge_page_vector<uint16_t>(n + 7);
    BOOST_TEST_REQUIRE(b.size() == n + 7);
    BOOST_TEST(std::all_of(b.begin(), b.end(), [](uint16_t x) { return x == 0; }));
  }
  const mla::TensorF t = mla::huge_page_tensor<float>("w", {3, 1 << 19});
  BOOST_TEST(t.name == "w");
  BOOST_TEST((t.shape == std::vector<int64_t>{3, 1 << 19}));
  BOOST_TEST(t.data.size() == size_t{3} << 19);

  BOOST_TEST(mla::fault_in_huge_pages(nullptr, 1 << 24).huge_bytes == 0u);
  float small[1024];  // no aligned 2 MiB block inside
  const mla::FaultedIn none = mla::fault_in_huge_pages(small, sizeof small);
  BOOST_TEST(none.huge_bytes + none.small_bytes == 0u);

  // A fresh mapping of 8 MiB + 4 KiB, used from 12 KiB in: the interior is [2 MiB, 8 MiB) of the
  // mapping (when the mapping itself is 2 MiB-aligned) or 3 huge pages' worth, never more.
  const size_t huge = mla::kHugePageBytes, length = 4 * huge + 4096;
  void* map = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  BOOST_TEST_REQUIRE(map != MAP_FAILED);
  const auto base = reinterpret_cast<uintptr_t>(map);
  const uintptr_t begin = base + 3 * 4096, end = base + length;
  const uintptr_t first = (begin + huge - 1) & ~uintptr_t{huge - 1}, last = end & ~uintptr_t{huge - 1};
  const mla::FaultedIn done = mla::fault_in_huge_pages(reinterpret_cast<void*>(begin), end - begin);
  const size_t faulted = done.huge_bytes + done.small_bytes;
  BOOST_TEST_MESSAGE("fault_in_huge_pages: " << done.huge_bytes << " bytes on huge pages, " << done.small_bytes << " on 4 KiB pages");
  BOOST_TEST((faulted == 0 || faulted == last - first));  // 0: madvise unsupported here
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident(length / page + 1);
  BOOST_TEST_REQUIRE(::mincore(map, length, resident.data()) == 0);
  size_t inside = 0, outside = 0;
  for (size_t i = 0; i < length / page; ++i) {
    const uintptr_t at = base + i * page;
    ((at >= first && at < last) ? inside : outside) += (resident[i] & 1u);
  }
  BOOST_TEST(outside == 0u);
  if (faulted != 0) BOOST_TEST(inside == (last - first) / page);
  bool zero = true;
  for (uintptr_t at = begin; at < end; at += 64) zero = zero && *reinterpret_cast<const uint64_t*>(at) == 0;
  BOOST_TEST(zero);
  ::munmap(map, length);
}

BOOST_AUTO_TEST_SUITE_END()
