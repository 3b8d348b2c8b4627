// tests/fuzz/fuzz_config.cpp — libFuzzer target for the config.json parser.
//
// Each input is taken as the text of a config.json. parse_config either rejects it with
// mla::Error (the expected outcome for most inputs) or returns a geometry; an accepted one must
// survive a round trip through our own writer: parse(config_to_json(cfg)) == cfg, field by
// field (both layouts, flat and nested). Anything else (another exception, a crash, an ASan or
// UBSan report, a round-trip mismatch) is a finding.
//
// Build and run as fuzz_safetensors (docs/testing.md §6), with tests/data/fuzz_seeds/config/.
#include <cstddef>
#include <cstdint>
#include <string_view>

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
  for (const bool nested : {false, true}) {
    mla::AttentionConfig again = mla::parse_config(mla::config_to_json(cfg, nested), "round trip");
    // The layout and the model_type follow the writer; every number must come back exactly.
    again.nested_text_config = cfg.nested_text_config;
    again.model_type = cfg.model_type;
    if (!(again == cfg)) __builtin_trap();
  }
  return 0;
}
