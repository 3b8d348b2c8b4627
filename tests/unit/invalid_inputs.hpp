// tests/unit/invalid_inputs.hpp — every kind of invalid input a backend can be given, as one
// list shared by the unit suite `validate` (reference, cpu, and cuda when a GPU is usable) and
// the emulated cuda suite (tests/emulation/test_emulation.cpp): each case must give the same
// ErrorKind and the same message from every backend (mla/validate.hpp), and the message must
// name what is wrong.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mla/attention.hpp"
#include "mla/error.hpp"

namespace mla::test {

struct InvalidCase {
  std::string name;                  // "config qk_nope_head_dim = 0", ...
  AttentionConfig cfg;
  LayerWeights weights;
  TensorF hidden;                    // [S, H] unless the case is about it
  ForwardOptions prepare_options;
  ForwardOptions forward_options;
  bool call_prepare = true;          // false: forward() without prepare()
  ErrorKind kind = ErrorKind::InvalidArgument;  // expected
  std::string message_part;          // expected inside the message
};

// Small cases on the tiny geometries (S = 3).
std::vector<InvalidCase> invalid_cases();

// Runs each case on a fresh backend of each maker (prepare, then forward) and checks with
// Boost.Test that each throws mla::Error of the case's kind, with the case's message part,
// and with the same message as the first maker's backend.
using BackendMaker = std::function<std::unique_ptr<Backend>()>;
void expect_same_errors(const std::vector<BackendMaker>& makers);

}  // namespace mla::test
