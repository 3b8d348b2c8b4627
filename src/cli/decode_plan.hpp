// src/cli/decode_plan.hpp — `mla-h2o decode` and `mla-h2o demo --decode` (cmd_decode.cpp): the
// plan read from the flags, and the pipeline that runs it in the shape of `run`'s
// (run_pipeline.hpp): load (shared) -> prefill + projections -> token features -> decode steps
// -> outputs, each stage timed (StageTimer), progress on stderr (ProgressLine).
//
// Shape legend: T = P + N rows, H = hidden_size.
#pragma once

#include <cstdint>
#include <string>

#include "args.hpp"
#include "run_pipeline.hpp"
#include "mla/decode.hpp"

namespace mla::cli {

struct DecodePlan {
  RunPlan run;                  // command, checkpoint, layer, input, backend (cpu | reference),
                                // forward options (precision, threads, gemm, latent eps), quiet,
                                // out_dir, notes (run.forward.mask is causal; run.dump_tensors is
                                // false: run's dump is not written)
  DecodeOptions decode;         // P, N (0 = T - P), budgets, policies; layer and num_layers
                                // are set from the checkpoint when it is loaded
  DecodeAttention attention = DecodeAttention::Absorbed;
  bool dump_tensors = false;    // decode_tensors.safetensors
};

// The flags of `mla-h2o decode` (after the input source flags) and their reading into a plan.
CommandSpec decode_spec();
DecodePlan read_decode_plan(const Args& a);

// load, prefill + projections, token features, decode steps, outputs; prints the summary.
int execute_decode(const DecodePlan& plan);

}  // namespace mla::cli
