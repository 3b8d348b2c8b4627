// src/cli/cmd_compare.cpp — `mla-h2o compare A.safetensors B.safetensors`: tensor-by-tensor
// comparison (A is the reference) with the library's compare_safetensors (mla/compare.hpp),
// the same code the tests and the golden cross-check use.
//
// Exit status: 0 every common tensor within |a-b| <= atol + rtol*|a| (defaults rtol 1e-5,
// atol 1e-6: numpy.allclose's rtol with a tighter atol, suited to fp32 vs fp32 of the same
// backend; compare bf16 runs with e.g. --rtol 2e-2 --atol 1e-3), 1 some tensor outside
// tolerance, a shape mismatch, or no common tensor; 2 usage error or unreadable file.
#include <cstdio>

#include "args.hpp"
#include "commands.hpp"
#include "mla/compare.hpp"
#include "mla/error.hpp"
#include "mla/safetensors.hpp"

namespace mla::cli {
namespace {

CommandSpec compare_spec() {
  CommandSpec spec;
  spec.name = "compare";
  spec.synopsis =
      "mla-h2o compare: tensor-by-tensor comparison of two safetensors files (A = reference).\n"
      "Per common tensor: max abs / max rel error, ||a-b||/||a||, cosine, worst index.\n"
      "Exit 0 when every common tensor satisfies |a-b| <= atol + rtol*|a|, 1 when not, 2 on usage error.";
  spec.usage = "mla-h2o compare A.safetensors B.safetensors [--rtol R] [--atol A] [--tensors a,b]";
  spec.max_positional = 2;
  spec.positional_help = "A, B  the two files (e.g. tensors.safetensors of two runs, or a PyTorch dump)";
  spec.flags = {
      {"rtol", "R", "relative tolerance", "1e-5"},
      {"atol", "A", "absolute tolerance", "1e-6"},
      {"tensors", "LIST", "only these tensors, comma-separated (each must be in both files)", "all common"},
  };
  return spec;
}

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s + ",") {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  if (out.empty()) fail(ErrorKind::InvalidArgument, "--tensors: empty list");
  return out;
}

}  // namespace

int cmd_compare(const std::vector<std::string>& argv) {
  const CommandSpec spec = compare_spec();
  const Args a = Args::parse(spec, argv);
  if (print_help_if_asked(a, spec)) return 0;
  if (a.positional().size() != 2)
    fail(ErrorKind::InvalidArgument, "expected two files A.safetensors B.safetensors, got " +
                                         std::to_string(a.positional().size()) + " (see mla-h2o compare --help)");
  CompareOptions opt;
  opt.rtol = a.real("rtol", 1e-5);
  opt.atol = a.real("atol", 1e-6);
  if (opt.rtol < 0) fail(ErrorKind::InvalidArgument, "--rtol must be >= 0");
  if (opt.atol < 0) fail(ErrorKind::InvalidArgument, "--atol must be >= 0");
  if (a.has("tensors")) opt.tensors = split_names(a.str("tensors"));
  const std::string& pa = a.positional()[0];
  const std::string& pb = a.positional()[1];
  CompareResult r;
  try {
    const SafetensorsFile fa = SafetensorsFile::open(pa);
    const SafetensorsFile fb = SafetensorsFile::open(pb);
    r = compare_safetensors(fa, fb, opt);
  } catch (const Error& e) {
    // Could not compare at all: a usage-level failure (exit 2), not a numerical verdict (exit 1).
    throw Error(ErrorKind::InvalidArgument, e.what());
  }
  std::fputs(compare_table(r, pa, pb).c_str(), stdout);
  return r.all_within() ? 0 : 1;
}

}  // namespace mla::cli
