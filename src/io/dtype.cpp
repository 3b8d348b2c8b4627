// src/io/dtype.cpp — the safetensors dtype table: name <-> DType <-> bytes per element.
//
// The 15 dtypes this project reads (a subset of the reference crate's list; F4, F6_*,
// F8_E8M0, F8_*FNUZ and C64 are not supported and are rejected as UnknownDtype).
// Names are case-sensitive, exactly as the crate's serde enum spells them.
#include <array>
#include <cstdint>
#include <string_view>

#include "mla/safetensors.hpp"

namespace mla {

namespace {

struct DTypeRow {
  DType dtype;
  std::string_view name;
  size_t size;  // bytes per element
};

// In enum order, so kDTypeTable[static_cast<size_t>(d)].dtype == d.
constexpr std::array<DTypeRow, 15> kDTypeTable = {{
    {DType::BOOL, "BOOL", 1},
    {DType::U8, "U8", 1},
    {DType::I8, "I8", 1},
    {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::F8_E4M3, "F8_E4M3", 1},
    {DType::I16, "I16", 2},
    {DType::U16, "U16", 2},
    {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},
    {DType::I32, "I32", 4},
    {DType::U32, "U32", 4},
    {DType::F32, "F32", 4},
    {DType::F64, "F64", 8},
    {DType::I64, "I64", 8},
    {DType::U64, "U64", 8},
}};

constexpr bool table_in_enum_order() {
  for (size_t i = 0; i < kDTypeTable.size(); ++i)
    if (static_cast<size_t>(kDTypeTable[i].dtype) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "kDTypeTable must follow the DType enum order");

}  // namespace

std::string_view dtype_name(DType dtype) {
  const auto i = static_cast<size_t>(dtype);
  return i < kDTypeTable.size() ? kDTypeTable[i].name : std::string_view("?");
}

bool parse_dtype(std::string_view name, DType& out) {
  for (const DTypeRow& row : kDTypeTable) {
    if (row.name == name) {
      out = row.dtype;
      return true;
    }
  }
  return false;
}

size_t dtype_size(DType dtype) {
  const auto i = static_cast<size_t>(dtype);
  return i < kDTypeTable.size() ? kDTypeTable[i].size : 0;
}

// Product of the shape; 1 for a scalar (shape []). Saturates at UINT64_MAX on overflow;
// the reader rejects such shapes (ValidationOverflow) so a TensorInfo from a file never does.
uint64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return UINT64_MAX;
  }
  return n;
}

}  // namespace mla
