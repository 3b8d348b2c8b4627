// The unmodified cuda/tiled_attention.cu compiled as C++ for the host SIMT emulator (simt.hpp
// supplies MLA_LAUNCH, MLA_DYNAMIC_SHARED and the CUDA built-ins).
#include "simt.hpp"

#include "cuda/tiled_attention.cu"
