// The built-in models: every model the seed tests use, with PyTorch's module names so parameter
// FQNs match, and a parameterised decoder-only transformer for planning real LLMs.
#include <fmt/format.h>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/limits.hpp"
#include "stratsim/core/model_io.hpp"

namespace stratsim::core {
namespace {

using json = nlohmann::json;

json linear(const std::string& name, std::int64_t in, std::int64_t out, bool bias = true) {
  return {{"name", name}, {"type", "Linear"}, {"in_features", in}, {"out_features", out}, {"bias", bias}};
}
json leaf(const std::string& name, const std::string& type) { return {{"name", name}, {"type", type}}; }
json functional(const std::string& name, const std::string& type) {
  return {{"name", name}, {"type", type}, {"functional", true}};
}
json container(const std::string& name, const std::string& type, json children) {
  return {{"name", name}, {"type", type}, {"children", std::move(children)}};
}

// test_replicate_with_compiler.py: four Linear(DIM, DIM), DIM = 2000.
json net(std::int64_t dim, bool checkpoint_fc1) {
  json fc1 = linear("fc1", dim, dim);
  if (checkpoint_fc1) fc1["checkpoint"] = true;
  return {{"name", checkpoint_fc1 ? "NetCheckpoint" : "Net"},
          {"modules", {fc1, linear("fc2", dim, dim), linear("fc3", dim, dim), linear("fc4", dim, dim)}}};
}

// torch.testing._internal.common_dist_composable.UnitModule.
json unit_module(const std::string& name) {
  return container(name, "UnitModule",
                   {linear("l1", 100, 100),
                    container("seq", "Sequential", {leaf("0", "ReLU"), linear("1", 100, 100), leaf("2", "ReLU")}),
                    linear("l2", 100, 100)});
}

json simple_mlp(const std::string& name) {
  return container(
      name, "SimpleMLP",
      {linear("net1", 50, 32), leaf("relu", "ReLU"), linear("net2", 32, 8), functional("sigmoid", "Sigmoid")});
}

json mlp_module(const std::string& name) {
  return container(name, "MLPModule", {linear("net1", 10, 16), leaf("relu", "ReLU"), linear("net2", 16, 10)});
}

json rmsnorm_python(const std::string& name, std::int64_t dim) {
  return {{"name", name}, {"type", "RMSNormPython"}, {"dim", dim}};
}

std::int64_t option_int(const std::map<std::string, std::string>& options, const std::string& key,
                        std::int64_t fallback) {
  auto it = options.find(key);
  if (it == options.end()) return fallback;
  try {
    std::size_t used = 0;
    long long value = std::stoll(it->second, &used);
    // Layers are checked here, before a model of them is written out: each adds modules, and the
    // model's limit (2^18 modules) would only be reached after generating it.
    const std::int64_t most = key == "layers" ? kMaxZooLayers : kMaxExtent;
    if (used == it->second.size() && value > 0 && value <= most) return value;
  } catch (const std::exception&) {
  }
  throw InputError(fmt::format("option {}: expected a positive integer up to {}, got \"{}\"", key,
                               key == "layers" ? kMaxZooLayers : kMaxExtent, it->second));
}

// A probability in [0, 1), as SDPA's dropout_p takes it.
double option_probability(const std::map<std::string, std::string>& options, const std::string& key) {
  const std::string& text = options.at(key);
  try {
    std::size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size() && value >= 0 && value < 1) return value;
  } catch (const std::exception&) {
  }
  throw InputError(fmt::format("option {}: expected a probability in [0, 1), got \"{}\"", key, text));
}

void check_options(const std::map<std::string, std::string>& options, std::initializer_list<const char*> allowed) {
  for (const auto& [key, value] : options) {
    bool ok = false;
    for (const char* name : allowed) ok = ok || key == name;
    if (!ok) {
      std::string names;
      for (const char* name : allowed) names += (names.empty() ? "" : ", ") + std::string(name);
      throw InputError(fmt::format("option {}: unknown (expected one of: {})", key, names));
    }
  }
}

json transformer_from_options(const std::map<std::string, std::string>& options, TransformerConfig config) {
  check_options(options, {"layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "style", "dtype", "norm",
                          "attention", "dropout"});
  config.layers = option_int(options, "layers", config.layers);
  config.hidden = option_int(options, "hidden", config.hidden);
  config.heads = option_int(options, "heads", config.heads);
  config.kv_heads = option_int(options, "kv_heads", config.kv_heads == 0 ? config.heads : config.kv_heads);
  config.ffn = option_int(options, "ffn", config.ffn);
  config.vocab = option_int(options, "vocab", config.vocab);
  config.seq = option_int(options, "seq", config.seq);
  if (auto it = options.find("style"); it != options.end()) {
    if (it->second != "llama" && it->second != "gpt")
      throw InputError(fmt::format("option style: expected llama or gpt, got \"{}\"", it->second));
    config.style = it->second;
  }
  if (auto it = options.find("norm"); it != options.end()) {
    if (it->second != "eager" && it->second != "fused")
      throw InputError(fmt::format("option norm: expected eager or fused, got \"{}\"", it->second));
    config.eager_rms_norm = it->second == "eager";
  }
  if (auto it = options.find("attention"); it != options.end()) {
    if (it->second != "flash" && it->second != "math")
      throw InputError(fmt::format("option attention: expected flash or math, got \"{}\"", it->second));
    config.flash_attention = it->second == "flash";
  }
  if (options.contains("dropout")) config.attention_dropout = option_probability(options, "dropout");
  if (auto it = options.find("dtype"); it != options.end()) {
    if (!parse_dtype(it->second)) throw InputError(fmt::format("option dtype: unknown dtype \"{}\"", it->second));
    config.dtype = it->second;
  }
  if (config.hidden % config.heads != 0)
    throw InputError(fmt::format("option heads: hidden {} is not divisible by heads {}", config.hidden, config.heads));
  if (config.heads % config.kv_heads != 0)
    throw InputError(
        fmt::format("option kv_heads: heads {} is not divisible by kv_heads {}", config.heads, config.kv_heads));
  return transformer_document(config);
}

TransformerConfig preset(std::string style, std::int64_t layers, std::int64_t hidden, std::int64_t heads,
                         std::int64_t kv_heads, std::int64_t ffn, std::int64_t vocab, std::int64_t seq) {
  TransformerConfig c;
  c.style = std::move(style);
  c.layers = layers;
  c.hidden = hidden;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.ffn = ffn;
  c.vocab = vocab;
  c.seq = seq;
  return c;
}

std::vector<ZooEntry> make_zoo() {
  std::vector<ZooEntry> entries;
  auto fixed = [&](std::string name, std::string description, json doc) {
    entries.push_back({std::move(name), std::move(description), "",
                       [doc](const std::map<std::string, std::string>&) { return doc; }});
  };
  entries.push_back(
      {"Net", "test_replicate_with_compiler.py: fc1..fc4 = Linear(DIM, DIM), DIM=2000", "dim=2000", [](const auto& o) {
         check_options(o, {"dim"});
         return net(option_int(o, "dim", 2000), false);
       }});
  entries.push_back({"NetCheckpoint", "Net(checkpoint=True): fc1 runs under checkpoint(use_reentrant=False)",
                     "dim=2000", [](const auto& o) {
                       check_options(o, {"dim"});
                       return net(option_int(o, "dim", 2000), true);
                     }});
  fixed("ReplicateNet", "test_replicate.py Net: fc1..fc3 = Linear(2, 2)",
        {{"name", "ReplicateNet"}, {"modules", {linear("fc1", 2, 2), linear("fc2", 2, 2), linear("fc3", 2, 2)}}});
  fixed("SimpleMLP", "test_data_parallel.py: net1 Linear(50,32), ReLU, net2 Linear(32,8), sigmoid",
        {{"name", "SimpleMLP"}, {"modules", simple_mlp("")["children"]}});
  fixed("WrapperModule", "test_data_parallel.py batch-dim analysis: mlp = SimpleMLP",
        {{"name", "WrapperModule"}, {"modules", {simple_mlp("mlp")}}});
  fixed("UnitModule", "common_dist_composable.UnitModule: l1, seq(ReLU, Linear, ReLU), l2 (100 wide)",
        {{"name", "UnitModule"}, {"modules", unit_module("")["children"]}});
  fixed("CompositeModel", "common_dist_composable.CompositeModel: l1, u1, u2 (UnitModule), l2",
        {{"name", "CompositeModel"},
         {"modules", {linear("l1", 100, 100), unit_module("u1"), unit_module("u2"), linear("l2", 100, 100)}}});
  fixed("CompositeParamModel", "common_dist_composable.CompositeParamModel: l, u1, u2, root parameter p (100x100)",
        {{"name", "CompositeParamModel"},
         {"modules", {linear("l", 100, 100), unit_module("u1"), unit_module("u2")}},
         {"parameters", {{{"name", "p"}, {"shape", {100, 100}}}}}});
  fixed("SaveForwardInputsModel", "common_distributed.SaveForwardInputsModel: c1, c2 each with l = Linear(100, 100)",
        {{"name", "SaveForwardInputsModel"},
         {"modules",
          {container("c1", "SaveForwardInputsModule", {linear("l", 100, 100)}),
           container("c2", "SaveForwardInputsModule", {linear("l", 100, 100)})}}});
  fixed("MLPModule", "common_dtensor.MLPModule: net1 Linear(10,16), ReLU, net2 Linear(16,10)",
        {{"name", "MLPModule"}, {"modules", mlp_module("")["children"]}});
  fixed("RMSNormPython", "common_dtensor.RMSNormPython(10)",
        {{"name", "RMSNormPython"}, {"modules", {rmsnorm_python("norm", 10)}}});
  fixed("SimpleModel",
        "test_fsdp_tp_integration.py SimpleModel: net1 Linear(5,8), ReLU, net2 Linear(8,4), net3 Linear(4,12)",
        {{"name", "SimpleModel"},
         {"modules", {linear("net1", 5, 8), leaf("relu", "ReLU"), linear("net2", 8, 4), linear("net3", 4, 12)}}});
  fixed("TestModel",
        "test_fsdp_tp_extension_grad: mlp = MLPModule, mlp_norm = RMSNormPython(10); forward mlp(mlp_norm(x))",
        {{"name", "TestModel"},
         {"modules", {mlp_module("mlp"), rmsnorm_python("mlp_norm", 10)}},
         {"forward", {"mlp_norm", "mlp"}}});
  const std::string transformer_options =
      "layers,hidden,heads,kv_heads,ffn,vocab,seq,style=llama|gpt,dtype,norm=eager|fused,attention=flash|math,dropout";
  entries.push_back({"gpt", "decoder-only transformer; defaults LLaMA-7B-like (32 x 4096, ffn 11008, seq 2048)",
                     transformer_options,
                     [](const auto& o) { return transformer_from_options(o, TransformerConfig{}); }});
  entries.push_back({"llama2-7b", "LLaMA-2 7B: 32 layers, hidden 4096, 32 heads, ffn 11008, vocab 32000, seq 4096",
                     transformer_options, [](const auto& o) {
                       return transformer_from_options(o, preset("llama", 32, 4096, 32, 32, 11008, 32000, 4096));
                     }});
  entries.push_back({"llama2-70b", "LLaMA-2 70B: 80 layers, hidden 8192, 64 heads (8 KV), ffn 28672, seq 4096",
                     transformer_options, [](const auto& o) {
                       return transformer_from_options(o, preset("llama", 80, 8192, 64, 8, 28672, 32000, 4096));
                     }});
  entries.push_back({"gpt3-175b", "GPT-3 175B: 96 layers, hidden 12288, 96 heads, ffn 49152, vocab 50257, seq 2048",
                     transformer_options, [](const auto& o) {
                       return transformer_from_options(o, preset("gpt", 96, 12288, 96, 96, 49152, 50257, 2048));
                     }});
  return entries;
}

// A forward step of a graph: call a child (or join with `op`) on named tensors.
json call(const std::string& child, json in, const std::string& out) {
  return {{"call", child}, {"in", std::move(in)}, {"out", out}};
}
json join(const std::string& op, json in, const std::string& out) {
  return {{"op", op}, {"in", std::move(in)}, {"out", out}};
}

json sdpa(const TransformerConfig& c, std::int64_t kv_heads) {
  json leaf = {{"name", "sdpa"},       {"type", "ScaledDotProductAttention"}, {"heads", c.heads},
               {"kv_heads", kv_heads}, {"head_dim", c.hidden / c.heads},      {"functional", true}};
  // Only what differs from SDPA's defaults is written, so the default models' documents stay as
  // they were.
  if (!c.flash_attention) leaf["fused"] = false;
  if (c.attention_dropout > 0) leaf["dropout"] = c.attention_dropout;
  return leaf;
}

// torchtitan's attention repeats k and v to the query heads before SDPA (repeat_kv).
json sdpa_after_repeat_kv(const TransformerConfig& c, std::int64_t kv_heads) {
  json leaf = sdpa(c, kv_heads);
  if (kv_heads < c.heads) leaf["repeat_kv"] = true;
  return leaf;
}

// Pre-norm residual block: x + attention(norm(x)), then x + ffn(norm(x)).
json residual_forward(const std::string& norm1, const std::string& attention, const std::string& norm2,
                      const std::string& ffn) {
  return {call(norm1, "x", "h"), call(attention, "h", "a"), join("add", {"x", "a"}, "x"),
          call(norm2, "x", "h"), call(ffn, "h", "f"),       join("add", {"x", "f"}, "x")};
}

json rms_norm(const std::string& name, const TransformerConfig& c) {
  return {{"name", name}, {"type", "RMSNorm"}, {"dim", c.hidden}, {"fused", !c.eager_rms_norm}};
}

// torchtitan's llama3 TransformerBlock: q, k, v projections of one input, rotary embeddings on q
// and k, k and v repeated to the query heads, flash attention, and a SwiGLU feed-forward
// w2(silu(w1 x) * w3 x).
json llama_block(const std::string& name, const TransformerConfig& c) {
  const std::int64_t head_dim = c.hidden / c.heads;
  const std::int64_t kv = c.kv_heads == 0 ? c.heads : c.kv_heads;
  json attention =
      container("attention", "Attention",
                {linear("wq", c.hidden, c.heads * head_dim, false), linear("wk", c.hidden, kv * head_dim, false),
                 linear("wv", c.hidden, kv * head_dim, false), functional("rope", "RotaryEmbedding"),
                 sdpa_after_repeat_kv(c, kv), linear("wo", c.heads * head_dim, c.hidden, false)});
  attention["forward"] = {call("wq", "x", "q"),   call("wk", "x", "k"),   call("wv", "x", "v"),
                          call("rope", "q", "q"), call("rope", "k", "k"), call("sdpa", {"q", "k", "v"}, "o"),
                          call("wo", "o", "o")};
  json ffn = container("feed_forward", "FeedForward",
                       {linear("w1", c.hidden, c.ffn, false), linear("w2", c.ffn, c.hidden, false),
                        linear("w3", c.hidden, c.ffn, false), functional("silu", "SiLU")});
  ffn["forward"] = {call("w1", "x", "g"), call("silu", "g", "g"), call("w3", "x", "u"), join("mul", {"g", "u"}, "g"),
                    call("w2", "g", "y")};
  json block =
      container(name, "TransformerBlock", {attention, ffn, rms_norm("attention_norm", c), rms_norm("ffn_norm", c)});
  block["forward"] = residual_forward("attention_norm", "attention", "ffn_norm", "feed_forward");
  return block;
}

// nanoGPT's Block: one fused qkv projection (c_attn) feeding attention, GELU MLP.
json gpt_block(const std::string& name, const TransformerConfig& c) {
  json attention =
      container("attn", "CausalSelfAttention",
                {linear("c_attn", c.hidden, 3 * c.hidden), sdpa(c, c.heads), linear("c_proj", c.hidden, c.hidden)});
  json mlp = container("mlp", "MLP",
                       {linear("c_fc", c.hidden, c.ffn), leaf("gelu", "GELU"), linear("c_proj", c.ffn, c.hidden)});
  json block = container(name, "Block",
                         {{{"name", "ln_1"}, {"type", "LayerNorm"}, {"dim", c.hidden}},
                          attention,
                          {{"name", "ln_2"}, {"type", "LayerNorm"}, {"dim", c.hidden}},
                          mlp});
  block["forward"] = residual_forward("ln_1", "attn", "ln_2", "mlp");
  return block;
}

}  // namespace

nlohmann::json transformer_document(const TransformerConfig& c) {
  json layers = json::array();
  for (std::int64_t i = 0; i < c.layers; ++i)
    layers.push_back(c.style == "gpt" ? gpt_block(std::to_string(i), c) : llama_block(std::to_string(i), c));
  json doc;
  doc["name"] = c.style == "gpt" ? "GPT" : "Transformer";
  doc["dtype"] = c.dtype;
  doc["seq_len"] = c.seq;
  // The training loss over the vocabulary ends both: F.cross_entropy(logits.float(), labels).
  if (c.style == "gpt") {
    doc["modules"] = {
        {{"name", "wte"}, {"type", "Embedding"}, {"num_embeddings", c.vocab}, {"embedding_dim", c.hidden}},
        {{"name", "wpe"}, {"type", "Embedding"}, {"num_embeddings", c.seq}, {"embedding_dim", c.hidden}},
        container("h", "ModuleList", layers),
        {{"name", "ln_f"}, {"type", "LayerNorm"}, {"dim", c.hidden}},
        linear("lm_head", c.hidden, c.vocab, false),
        functional("loss", "CrossEntropyLoss")};
    // Token and position embeddings are summed.
    doc["forward"] = {call("wte", "x", "tok"),
                      call("wpe", "x", "pos"),
                      join("add", {"tok", "pos"}, "h"),
                      "h",
                      "ln_f",
                      "lm_head",
                      "loss"};
  } else {
    doc["modules"] = {
        {{"name", "tok_embeddings"}, {"type", "Embedding"}, {"num_embeddings", c.vocab}, {"embedding_dim", c.hidden}},
        container("layers", "ModuleList", layers),
        rms_norm("norm", c),
        linear("output", c.hidden, c.vocab, false),
        functional("loss", "CrossEntropyLoss")};
  }
  return doc;
}

const std::vector<ZooEntry>& zoo() {
  static const std::vector<ZooEntry> entries = make_zoo();
  return entries;
}

}  // namespace stratsim::core
