// mla/validate.hpp — the one validator of a forward's inputs: (config, weights, hidden
// states, options). Every backend calls it first (prepare: validate_layer; forward:
// check_prepared + validate_input), so the reference, cpu and cuda backends accept the same
// inputs and refuse the others with the same ErrorKind and the same message, which names
// what is wrong and never the backend.
//
// Shape legend: S = tokens, H = hidden_size.
#pragma once

#include "mla/attention.hpp"
#include "mla/checkpoint.hpp"
#include "mla/config.hpp"
#include "mla/tensor.hpp"

namespace mla {

// Error(Config): a geometry the layer cannot have. hidden_size, num_attention_heads,
// kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim (even), v_head_dim > 0; q_lora_rank >= 0
// (0 = null); num_key_value_heads 0 (unset) or num_attention_heads.
void validate_config(const AttentionConfig& cfg);

// Error(InvalidArgument): latent_norm_eps finite and > 0, position_offset >= 0, threads >= 0.
void validate_options(const ForwardOptions& opt);

// Against the table of mla/layer_tensors.hpp: each tensor the config implies is present with
// its shape and as many values (Error(Shape)); no other tensor is given (Error(Shape): e.g. a
// q bias with q_lora_rank null, where HF's q_proj has none); every value is finite, and stays
// finite rounded to bf16 in bf16 mode (Error(InvalidValue), naming tensor, row and column).
void validate_weights(const AttentionConfig& cfg, const LayerWeights& w, Precision p);

// hidden [S, H]: Error(Shape) for another rank, width or value count; Error(InvalidArgument)
// for S = 0; Error(InvalidValue) for NaN/Inf (or a value bf16 rounds to Inf in bf16 mode),
// naming row and column.
void validate_hidden(const AttentionConfig& cfg, const TensorF& hidden, Precision p);

// prepare(): validate_config, validate_options, validate_weights.
void validate_layer(const AttentionConfig& cfg, const LayerWeights& w, const ForwardOptions& opt);
// forward(): validate_options, validate_hidden.
void validate_input(const AttentionConfig& cfg, const TensorF& hidden, const ForwardOptions& opt);

// forward() before prepare(), or in another precision than prepare()'s: Error(InvalidArgument).
void check_prepared(bool prepared, Precision prepared_in, const ForwardOptions& opt);

// The result's post-condition: attn_output [S, H] finite (fp32/bf16 arithmetic can overflow);
// Error(InvalidValue) naming row and column.
void check_attn_output_finite(const TensorD& attn_output, Precision p);

}  // namespace mla
