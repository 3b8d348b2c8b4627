// src/report/inspect.cpp — `mla-h2o inspect --json` (mla/report.hpp, docs/checkpoints.md §5): one
// JSON object through the report's JsonWriter. The config and quantization values come as the
// JSON literals inspect's text shows (a number in its shortest form, a list of names), so text
// and JSON give the same values.
#include <string>
#include <vector>

#include "mla/report.hpp"

namespace mla {
namespace {

// [{"shard", "name", "dtype", "shape", "bytes", "data_offsets"}, ...] ("shard" in checkpoint mode)
void tensors_json(JsonWriter& w, const std::vector<InspectRow>& rows, bool with_shard) {
  w.begin_array();
  for (const InspectRow& r : rows) {
    const TensorInfo& t = r.info;
    w.begin_object();
    if (with_shard) w.key("shard").value(r.shard);
    w.key("name").value(t.name);
    w.key("dtype").value(dtype_name(t.dtype));
    w.key("shape").begin_array();
    for (const uint64_t d : t.shape) w.value(static_cast<int64_t>(d));
    w.end_array();
    w.key("bytes").value(static_cast<int64_t>(t.nbytes()));
    w.key("data_offsets").begin_array().value(static_cast<int64_t>(t.begin)).value(static_cast<int64_t>(t.end)).end_array();
    w.end_object();
  }
  w.end_array();
}

void literals_json(JsonWriter& w, const std::vector<std::pair<std::string, std::string>>& pairs) {
  w.begin_object();
  for (const auto& [key, literal] : pairs) w.key(key).raw(literal);
  w.end_object();
}

}  // namespace

std::string inspect_file_json(const InspectedFile& f) {
  JsonWriter w;
  w.begin_object();
  w.key("kind").value("file");
  w.key("path").value(f.path);
  w.key("file_size").value(static_cast<int64_t>(f.file_size));
  w.key("header_size").value(static_cast<int64_t>(f.header_size));
  w.key("metadata").begin_object();
  for (const auto& [key, value] : f.metadata) w.key(key).value(value);
  w.end_object();
  w.key("tensors");
  tensors_json(w, f.tensors, false);
  w.end_object();
  return w.str() + "\n";
}

std::string inspect_checkpoint_json(const InspectedCheckpoint& c) {
  JsonWriter w;
  w.begin_object();
  w.key("kind").value("checkpoint");
  w.key("path").value(c.path);
  w.key("prefix").value(c.prefix);
  w.key("shards").value(c.shards);
  w.key("missing_shards").array(c.missing_shards);
  w.key("tensors");
  tensors_json(w, c.tensors, true);
  w.key("config");
  literals_json(w, c.config);
  w.key("quantization");
  if (c.quantization.empty()) w.null();
  else literals_json(w, c.quantization);
  w.key("layers_present").array(c.layers_present);
  w.key("layer0_attention_parameters");
  if (c.layer0_attention_parameters) w.value(static_cast<int64_t>(*c.layer0_attention_parameters));
  else w.null();
  w.key("tokenizer");
  if (c.tokenizer.empty()) w.null();
  else literals_json(w, c.tokenizer);
  w.end_object();
  return w.str() + "\n";
}

}  // namespace mla
