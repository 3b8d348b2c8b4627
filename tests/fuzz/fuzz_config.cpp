// tests/fuzz/fuzz_config.cpp — libFuzzer target for the config.json parser.
//
// Each input is taken as the text of a config.json. parse_config either rejects it with
// mla::Error (the expected outcome for most inputs) or returns a geometry; an accepted one must
// survive a round trip through our own writer (config_round_trip.hpp: both layouts, field by
// field). Anything else (another exception, a crash, an ASan or UBSan report, a round-trip
// mismatch) is a finding; a finding's input becomes a seed, and the unit test
// config/every_fuzz_seed_round_trips replays every seed with the same rule in every build.
//
// Build and run as fuzz_safetensors (docs/testing.md §6), with tests/data/fuzz_seeds/config/.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config_round_trip.hpp"
#include "mla/config.hpp"
#include "mla/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  mla::AttentionConfig cfg;
  try {
    cfg = mla::parse_config(text, "fuzz/config.json");
  } catch (const mla::Error&) {
    return 0;  // rejected input
  }
  if (!mla::fuzz::config_round_trip_failure(cfg).empty()) __builtin_trap();
  return 0;
}
