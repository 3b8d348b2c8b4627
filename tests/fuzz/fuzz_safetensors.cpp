// tests/fuzz/fuzz_safetensors.cpp — libFuzzer target for the safetensors reader.
//
// Each input is taken as a whole file image: SafetensorsFile::from_bytes validates it, and
// every tensor of an accepted image is touched (raw bytes for all, to_double for those of
// at most 4096 elements, BOOL excepted since it has no float conversion). The only
// acceptable failure is mla::Error; anything else (another exception, a crash, an ASan or
// UBSan report) is a finding.
//
// Build and run (see docs/testing.md §6):
//   CXX=clang++ meson setup build-fuzz -Dcuda=disabled -Dfuzz=true -Dbuildtype=debugoptimized \
//       -Db_sanitize=address,undefined -Db_lundef=false
//   ninja -C build-fuzz tests/fuzz_safetensors
//   build-fuzz/tests/fuzz_safetensors -max_total_time=30 -max_len=4096 <corpus-dir> tests/data/fuzz_seeds/safetensors
#include <cstddef>
#include <cstdint>
#include <span>

#include "mla/error.hpp"
#include "mla/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const mla::SafetensorsFile file = mla::SafetensorsFile::from_bytes(bytes, "fuzz.safetensors");
    volatile double sink = 0;
    for (const mla::TensorInfo& info : file.tensors()) {
      const std::span<const std::byte> raw = file.bytes(info);
      if (!raw.empty()) sink = sink + static_cast<double>(raw[0]) + static_cast<double>(raw[raw.size() - 1]);
      if (info.dtype == mla::DType::BOOL || info.numel() > 4096) continue;
      for (double v : file.to_double(info)) sink = sink + v;
      const mla::TensorInfo* again = file.find(info.name);
      if (again != &file.at(info.name)) __builtin_trap();  // find/at must agree
    }
    (void)sink;
  } catch (const mla::Error&) {
    // Rejected input: the expected outcome for most fuzz inputs.
  }
  return 0;
}
