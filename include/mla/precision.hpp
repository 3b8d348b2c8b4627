// mla/precision.hpp — the one precision type of a run: how every backend rounds its operands and
// results (docs/math.md §7). Only the enum, so the per-instruction-set vector kernels
// (src/cpu/vector_kernels_*.cpp, compiled with their own -m flags) can take it without inline code.
#pragma once

namespace mla {

enum class Precision { FP32, BF16 };      // bf16 = PyTorch bf16 eager rounding (docs/math.md §7)
const char* precision_name(Precision p);  // "fp32" | "bf16"

}  // namespace mla
