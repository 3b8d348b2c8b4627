// include/mla/json_text.hpp — JSON string literals, for every JSON this project writes
// (report.json, inspect --json, config.json from synth, safetensors metadata).
#pragma once

#include <string>
#include <string_view>

namespace mla {

// JSON string literal with quotes (RFC 8259 §7): escapes " \ and control characters
// (\n \r \t \b \f by name, the rest as \u00XX); invalid UTF-8 bytes become U+FFFD, so the
// document is always valid JSON.
std::string json_quote(std::string_view s);

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is not valid (overlong forms,
// surrogates and code points above U+10FFFF are invalid). i < s.size().
size_t utf8_sequence_length(std::string_view s, size_t i);

}  // namespace mla
