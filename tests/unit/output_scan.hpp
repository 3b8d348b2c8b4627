// tests/unit/output_scan.hpp — the scan of every output the suites' commands wrote (issue 46):
// no successful run may write a non-finite number. Run by the test module's global fixture over
// its scratch area before the area is removed (test_util.cpp); docs/testing.md describes it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mla::test {

// Byte offsets of every `nan` or `inf` / `infinity` in `text` (any case) that stands as a number:
// not inside a word ("info", "nanos", "faults-nan-eval"), an optional sign before it.
std::vector<size_t> non_finite_tokens(std::string_view text);

// Every finding under `root`, one line each ("PATH: 'inf' at byte N: ...context..."), over
//   - each output set (a directory holding the manifest .mla-h2o-set): every file in it, a
//     safetensors file by its header and the values of its F64 / F32 / F16 / BF16 tensors (a
//     file over 64 MiB by its header alone);
//   - the stdout and stderr of each command run_cli ran that exited 0 (the files beside "exit");
// skipping what kAllowed lists (output_scan.cpp), each with the reason it must hold NaN.
std::vector<std::string> scan_outputs(const std::string& root);

}  // namespace mla::test
