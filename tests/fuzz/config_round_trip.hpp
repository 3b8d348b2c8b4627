// tests/fuzz/config_round_trip.hpp — the one round-trip rule for config.json, shared by the
// fuzzer (tests/fuzz/fuzz_config.cpp) and the unit test that replays its seeds
// (config/every_fuzz_seed_round_trips): an accepted config written by our own writer, in either
// layout (flat or nested), must parse back to the same AttentionConfig field by field. The layout
// and the model_type follow the writer, so those two are taken from the original before comparing.
#pragma once

#include <string>

#include "mla/config.hpp"

namespace mla::fuzz {

// "" when cfg survives both layouts, else the layout that lost something and the text written.
inline std::string config_round_trip_failure(const AttentionConfig& cfg) {
  for (const bool nested : {false, true}) {
    const std::string text = config_to_json(cfg, nested);
    AttentionConfig again = parse_config(text, "round trip");
    again.nested_text_config = cfg.nested_text_config;
    again.model_type = cfg.model_type;
    if (!(again == cfg)) return std::string(nested ? "nested" : "flat") + " layout changed the config:\n" + text;
  }
  return "";
}

}  // namespace mla::fuzz
