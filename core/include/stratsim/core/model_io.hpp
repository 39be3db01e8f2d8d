// Reading models: JSON/YAML files in the format documented in README.md ("Model format"), and
// the built-in zoo ("zoo:NAME" or "zoo:NAME:key=value,key=value").
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model.hpp"

namespace stratsim::core {

Model load_model(const std::string& spec);
Model parse_model(const JsonReader& doc);

struct ZooEntry {
  std::string name;
  std::string description;
  std::string parameters;  // "" or the accepted key=value options with defaults
  std::function<nlohmann::json(const std::map<std::string, std::string>&)> build;
};

const std::vector<ZooEntry>& zoo();
// The model document of a zoo entry (useful to start a model file from).
nlohmann::json zoo_document(const std::string& spec);

// A GPT/LLaMA-style decoder as a model document. `style` "llama" (RMSNorm, SwiGLU, no biases) or
// "gpt" (LayerNorm, GELU MLP, biases).
struct TransformerConfig {
  std::string style = "llama";
  std::int64_t layers = 32, hidden = 4096, heads = 32, kv_heads = 0, ffn = 11008, vocab = 32000,
               seq = 2048;
  std::string dtype = "float32";
  bool eager_rms_norm = true;  // llama style: torchtitan's RMSNorm, a chain of eager kernels
  // Attention: one flash kernel (SDPA's fused path), or the math path that materialises the
  // [batch, heads, seq, seq] scores (pre-flash training code such as Megatron-LM's 2021 GPT).
  bool flash_attention = true;
  double attention_dropout = 0;  // SDPA's dropout_p on the attention probabilities
};
nlohmann::json transformer_document(const TransformerConfig& config);

}  // namespace stratsim::core
