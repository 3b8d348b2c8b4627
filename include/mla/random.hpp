// mla/random.hpp — the project's one documented random generator, so that every seeded
// output (synthetic checkpoints, --seq-len/--seed inputs) is reproducible in any language.
//
//   state_0 = seed;  next_u64():  state += 0x9E3779B97F4A7C15;      (SplitMix64)
//                                 z = state;
//                                 z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
//                                 z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
//                                 return z ^ (z >> 31);
//   uniform():  (next_u64() >> 11) * 2^-53                           in [0, 1)
//   normal():   Box-Muller on two uniforms u1, u2 (u1 replaced by 1-u1 so it is in (0, 1]):
//               r = sqrt(-2 ln u1); returns r cos(2 pi u2), then r sin(2 pi u2) on the next call.
// Streams for different purposes are derived with `Rng(seed, stream)`: state_0 =
// SplitMix64(seed ^ (stream * 0xD1B54A32D192ED03)).
#pragma once

#include <cmath>
#include <cstdint>

namespace mla {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  Rng(uint64_t seed, uint64_t stream) : state_(seed ^ (stream * 0xD1B54A32D192ED03ull)) { state_ = next_u64(); }

  uint64_t next_u64() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform(), u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double two_pi = 6.283185307179586476925286766559;
    spare_ = r * std::sin(two_pi * u2);
    has_spare_ = true;
    return r * std::cos(two_pi * u2);
  }

 private:
  uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace mla
