#include "stratsim/core/model_io.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/limits.hpp"

namespace stratsim::core {
namespace {

class ModelParser {
 public:
  explicit ModelParser(Model& model) : model_(model) {}

  void parse_root(const JsonReader& doc) {
    doc.allow_only({"name", "type", "modules", "children", "parameters", "forward", "input_features", "seq_len",
                    "dtype", "token_input", "format"});
    model_.name = doc.get_string("name", "Model");
    default_dtype_ = dtype_field(doc, "dtype", DType::float32);
    model_.input_features = doc.get_int("input_features", 0);
    model_.seq_len = doc.get_int("seq_len", 0);
    if (model_.seq_len > kMaxExtent) doc.at("seq_len").fail("expected at most 2^31 positions");
    if (model_.input_features < 0) doc.at("input_features").fail("expected a positive integer");
    if (model_.seq_len < 0) doc.at("seq_len").fail("expected a positive integer");
    Module root;
    root.type = doc.get_string("type", model_.name);
    model_.modules.push_back(root);
    const char* children_key = doc.has("modules") ? "modules" : "children";
    if (doc.has("modules") && doc.has("children")) doc.fail("give either \"modules\" or \"children\", not both");
    parse_body(doc, 0, children_key);
    model_.token_input = doc.get_bool("token_input", first_leaf_is_embedding());
    finish();
  }

 private:
  Model& model_;
  DType default_dtype_ = DType::float32;
  std::int64_t total_numel_ = 0;  // parameters so far, against kMaxModelElements

  DType dtype_field(const JsonReader& node, const char* key, DType fallback) {
    if (!node.has(key)) return fallback;
    std::string text = node.at(key).as_string();
    auto dtype = parse_dtype(text);
    if (!dtype) node.at(key).fail(fmt::format("unknown dtype \"{}\" (expected float32, bfloat16, float16, ...)", text));
    return *dtype;
  }

  // Own parameters, children, and forward order of module `index`.
  void parse_body(const JsonReader& node, int index, const char* children_key) {
    if (node.has("parameters")) {
      JsonReader list = node.at("parameters");
      list.expect_array();
      for (std::size_t i = 0; i < list.size(); ++i) parse_parameter(list.at(i), index);
    }
    if (node.has(children_key)) {
      JsonReader list = node.at(children_key);
      list.expect_array();
      std::set<std::string> names;
      for (std::size_t i = 0; i < list.size(); ++i) {
        JsonReader child = list.at(i);
        child.expect_object();
        std::string name = child.has("name") ? child.at("name").as_string() : std::to_string(i);
        if (name.empty() || name.find('.') != std::string::npos)
          child.at("name").fail("a module name must be non-empty and contain no '.'");
        if (!names.insert(name).second) child.at("name").fail(fmt::format("duplicate module name \"{}\"", name));
        int child_index = parse_module(child, index, name);
        model_.modules[index].children.push_back(child_index);
      }
    }
    parse_forward(node, index);
  }

  int parse_module(const JsonReader& node, int parent, const std::string& name) {
    const int index = static_cast<int>(model_.modules.size());
    if (index >= kMaxModules) node.fail("the model would have more than 2^18 modules (stratsim's limit per model)");
    {
      Module module;
      module.name = name;
      module.parent = parent;
      module.depth = model_.modules[parent].depth + 1;
      module.fqn = join_fqn(model_.modules[parent].fqn, name);
      if (!node.has("type")) node.fail("required field \"type\" is missing");
      module.type = node.at("type").as_string();
      module.checkpoint = node.get_bool("checkpoint", false);
      module.functional = node.get_bool("functional", false);
      model_.modules.push_back(std::move(module));
    }
    const bool container = node.has("children");
    std::optional<LeafKind> leaf = container ? std::nullopt : parse_leaf_kind(model_.modules[index].type);
    if (!container && !leaf) {
      if (!node.has("parameters"))
        node.at("type").fail(fmt::format("unknown module type \"{}\" (leaf types: {}; a container needs \"children\")",
                                         model_.modules[index].type, leaf_type_list()));
    }
    if (leaf) {
      parse_leaf(node, index, *leaf);
    } else {
      node.allow_only({"name", "type", "children", "parameters", "forward", "checkpoint", "functional"});
      parse_body(node, index, "children");
    }
    return index;
  }

  // `node` is where the parameter comes from, named when it is too large.
  void add_param(const JsonReader& node, int module, const std::string& name, std::vector<std::int64_t> shape,
                 DType dtype, bool requires_grad = true) {
    std::optional<std::int64_t> numel = 1;
    for (std::int64_t extent : shape)
      if (numel) numel = checked_product(*numel, extent);
    if (!numel || *numel > kMaxTensorElements)
      node.fail(fmt::format("parameter \"{}\" would have more than 2^48 elements (stratsim's limit per tensor)", name));
    total_numel_ += *numel;
    if (total_numel_ > kMaxModelElements)
      node.fail("the model would have more than 2^50 parameters (stratsim's limit per model)");
    Parameter p;
    p.name = name;
    p.module = module;
    p.fqn = join_fqn(model_.modules[module].fqn, name);
    p.shape = std::move(shape);
    p.dtype = dtype;
    p.requires_grad = requires_grad;
    model_.modules[module].params.push_back(static_cast<int>(model_.params.size()));
    model_.params.push_back(std::move(p));
  }

  std::int64_t positive(const JsonReader& node, const char* key) {
    std::int64_t value = node.at(key).as_int();
    if (value <= 0 || value > kMaxExtent)
      node.at(key).fail(fmt::format("expected a positive integer up to 2^31, got {}", value));
    return value;
  }

  void parse_leaf(const JsonReader& node, int index, LeafKind kind) {
    Module& m = model_.modules[index];
    m.leaf = kind;
    const DType dtype = dtype_field(node, "dtype", default_dtype_);
    switch (kind) {
      case LeafKind::linear: {
        node.allow_only({"name", "type", "in_features", "out_features", "bias", "dtype", "checkpoint"});
        m.in_features = positive(node, "in_features");
        m.out_features = positive(node, "out_features");
        m.bias = node.get_bool("bias", true);
        const std::int64_t in = m.in_features, out = m.out_features;
        const bool bias = m.bias;
        add_param(node, index, "weight", {out, in}, dtype);
        if (bias) add_param(node, index, "bias", {out}, dtype);
        break;
      }
      case LeafKind::rms_norm:
      case LeafKind::layer_norm: {
        node.allow_only({"name", "type", "dim", "normalized_shape", "eps", "elementwise_affine", "bias", "dtype",
                         "checkpoint", "fused"});
        m.fused = node.get_bool("fused", true);
        if (kind == LeafKind::layer_norm && !m.fused)
          node.at("fused").fail(
              "LayerNorm always runs one kernel (native_layer_norm); only RMSNorm has an eager composite");
        const char* key = node.has("dim") ? "dim" : "normalized_shape";
        if (!node.has(key)) node.fail("required field \"dim\" is missing");
        m.dim = positive(node, key);
        const std::int64_t dim = m.dim;
        if (node.get_bool("elementwise_affine", true)) {
          add_param(node, index, "weight", {dim}, dtype);
          if (kind == LeafKind::layer_norm && node.get_bool("bias", true)) add_param(node, index, "bias", {dim}, dtype);
        }
        break;
      }
      case LeafKind::embedding: {
        node.allow_only({"name", "type", "num_embeddings", "embedding_dim", "sparse", "dtype", "checkpoint"});
        m.num_embeddings = positive(node, "num_embeddings");
        m.embedding_dim = positive(node, "embedding_dim");
        m.sparse = node.get_bool("sparse", false);
        const std::int64_t rows = m.num_embeddings, cols = m.embedding_dim;
        add_param(node, index, "weight", {rows, cols}, dtype);
        break;
      }
      case LeafKind::attention: {
        node.allow_only({"name", "type", "heads", "kv_heads", "head_dim", "causal", "fused", "dropout", "repeat_kv",
                         "functional", "checkpoint"});
        m.heads = positive(node, "heads");
        m.head_dim = positive(node, "head_dim");
        m.kv_heads_given = node.has("kv_heads");
        m.kv_heads = m.kv_heads_given ? positive(node, "kv_heads") : m.heads;
        if (m.heads % m.kv_heads != 0)
          node.at("kv_heads").fail(fmt::format("heads {} is not a multiple of kv_heads {}", m.heads, m.kv_heads));
        m.repeat_kv = node.get_bool("repeat_kv", false);
        if (m.repeat_kv && m.kv_heads == m.heads)
          node.at("repeat_kv")
              .fail(fmt::format("needs kv_heads below heads (both are {}): there is nothing to repeat", m.heads));
        m.causal = node.get_bool("causal", true);
        m.fused = node.get_bool("fused", true);
        m.dropout = node.get_number("dropout", 0);
        if (!(m.dropout >= 0 && m.dropout < 1)) node.at("dropout").fail("expected a probability in [0, 1)");
        break;
      }
      case LeafKind::cross_entropy: {
        // The loss reads the logits: its width is the vocabulary, taken from the running tensor.
        node.allow_only({"name", "type", "functional", "checkpoint"});
        break;
      }
      default:
        node.allow_only({"name", "type", "features", "functional", "checkpoint", "p", "inplace", "approximate"});
        m.dim = node.has("features") ? positive(node, "features") : 0;
        break;
    }
  }

  void parse_parameter(const JsonReader& node, int module) {
    node.allow_only({"name", "shape", "dtype", "requires_grad"});
    std::string name = node.at("name").as_string();
    if (name.empty() || name.find('.') != std::string::npos)
      node.at("name").fail("a parameter name must be non-empty and contain no '.'");
    JsonReader shape_node = node.at("shape");
    shape_node.expect_array();
    std::vector<std::int64_t> shape;
    for (std::size_t i = 0; i < shape_node.size(); ++i) {
      std::int64_t extent = shape_node.at(i).as_int();
      if (extent <= 0 || extent > kMaxExtent) shape_node.at(i).fail("expected a positive extent up to 2^31");
      shape.push_back(extent);
    }
    for (int existing : model_.modules[module].params)
      if (model_.params[existing].name == name) node.at("name").fail(fmt::format("duplicate parameter \"{}\"", name));
    add_param(node, module, name, std::move(shape), dtype_field(node, "dtype", default_dtype_),
              node.get_bool("requires_grad", true));
  }

  void parse_forward(const JsonReader& node, int index) {
    Module& m = model_.modules[index];
    if (!node.has("forward")) {
      for (int child : m.children) m.forward.push_back({ForwardStep::Kind::child, child});
      for (int param : m.params) m.forward.push_back({ForwardStep::Kind::param_matmul, param});
      return;
    }
    const JsonReader list = node.at("forward");
    if (list.is_string()) {
      m.forward.push_back(chain_step(list, index, list.as_string(), 0));
      return;
    }
    list.expect_array();
    int current = 0;  // the slot the previous step wrote
    for (std::size_t i = 0; i < list.size(); ++i) {
      const JsonReader item = list.at(i);
      if (item.is_string()) {
        m.forward.push_back(chain_step(item, index, item.as_string(), current));
      } else {
        m.forward.push_back(graph_step(item, index));
        m.graph = true;
      }
      current = m.forward.back().output;
    }
    m.result = current;
    count_uses(m);
  }

  // A child module or own parameter named in `forward`: {kind, index}.
  ForwardStep resolve_call(const JsonReader& where, int index, const std::string& name) {
    const Module& m = model_.modules[index];
    for (int child : m.children)
      if (model_.modules[child].name == name) return {ForwardStep::Kind::child, child};
    for (int param : m.params)
      if (model_.params[param].name == name) return {ForwardStep::Kind::param_matmul, param};
    where.fail(fmt::format("\"{}\" is neither a child module nor a parameter of this module", name));
  }

  ForwardStep chain_step(const JsonReader& where, int index, const std::string& name, int current) {
    ForwardStep step = resolve_call(where, index, name);
    step.inputs = {current};
    step.output = current;
    return step;
  }

  // {call: CHILD, in: T | [T...], out: T} or {op: add|mul|concat, in: [T, T...], out: T}.
  ForwardStep graph_step(const JsonReader& item, int index) {
    item.expect_object();
    item.allow_only({"call", "op", "in", "out"});
    if (item.has("call") == item.has("op")) item.fail("a forward step object needs exactly one of \"call\" or \"op\"");
    ForwardStep step;
    if (item.has("call")) {
      step = resolve_call(item.at("call"), index, item.at("call").as_string());
    } else {
      const std::string op = item.at("op").as_string();
      const auto join = parse_join_kind(op);
      if (!join) item.at("op").fail(fmt::format("unknown op \"{}\" (expected add, mul or concat)", op));
      step.kind = ForwardStep::Kind::join;
      step.join = *join;
    }
    if (!item.has("in")) item.fail("required field \"in\" is missing (the tensors the step reads)");
    step.inputs.clear();
    for (const std::string& name : item.get_string_list("in"))
      step.inputs.push_back(slot_or_fail(item.at("in"), index, name));
    check_arity(item, step);
    if (!item.has("out")) item.fail("required field \"out\" is missing (the tensor the step writes)");
    step.output = slot_for_write(item.at("out"), index);
    return step;
  }

  // The slot of tensor `name` in module `index`, -1 when the forward has not written it yet.
  int find_slot(int index, const std::string& name) const {
    const std::vector<std::string>& tensors = model_.modules[index].tensors;
    const auto it = std::find(tensors.begin(), tensors.end(), name);
    return it == tensors.end() ? -1 : static_cast<int>(it - tensors.begin());
  }

  int slot_or_fail(const JsonReader& where, int index, const std::string& name) {
    if (const int slot = find_slot(index, name); slot >= 0) return slot;
    std::string known;
    for (const std::string& t : model_.modules[index].tensors) known += (known.empty() ? "" : ", ") + t;
    where.fail(fmt::format("no tensor \"{}\" yet (the input is \"x\"; tensors so far: {})", name, known));
  }

  int slot_for_write(const JsonReader& where, int index) {
    const std::string name = where.as_string();
    if (name.empty()) where.fail("a tensor name must be non-empty");
    if (const int slot = find_slot(index, name); slot >= 0) return slot;  // rebinding, as x = x + h does
    std::vector<std::string>& tensors = model_.modules[index].tensors;
    tensors.push_back(name);
    return static_cast<int>(tensors.size() - 1);
  }

  // Attention reads q (and optionally k and v); a join two or more tensors; everything else one.
  void check_arity(const JsonReader& item, const ForwardStep& step) {
    const std::size_t n = step.inputs.size();
    if (step.kind == ForwardStep::Kind::join) {
      if (n < 2) item.at("in").fail(fmt::format("{} joins two or more tensors, got {}", join_kind_name(step.join), n));
      return;
    }
    const bool attention =
        step.kind == ForwardStep::Kind::child && model_.modules[step.index].leaf == LeafKind::attention;
    if (attention && n != 1 && n != 3)
      item.at("in").fail(fmt::format("attention reads q, k and v (or one fused tensor), got {} tensors", n));
    if (!attention && n != 1) {
      const std::string what =
          step.kind == ForwardStep::Kind::child ? model_.modules[step.index].type : "a parameter matmul";
      item.at("in").fail(fmt::format("{} takes one input tensor, got {}", what, n));
    }
  }

  // How many steps read each version of each slot; the returned version counts once more (its
  // reader is the parent). A version read more than once is a branch: backward sums its gradients.
  static void count_uses(Module& m) {
    std::vector<int*> version(m.tensors.size(), nullptr);
    m.input_uses = 0;
    version[0] = &m.input_uses;
    for (ForwardStep& step : m.forward) step.output_uses = 0;
    for (ForwardStep& step : m.forward) {
      for (int slot : step.inputs) ++*version[slot];
      version[step.output] = &step.output_uses;
    }
    ++*version[m.result];
  }

  bool first_leaf_is_embedding() const {
    for (const Module& m : model_.modules)
      if (m.leaf != LeafKind::container) return m.leaf == LeafKind::embedding;
    return false;
  }

  // Pre-order indices are assigned while parsing; record subtree extents and reorder parameters into
  // named_parameters() order (pre-order over modules, own parameters first).
  void finish() {
    for (int i = static_cast<int>(model_.modules.size()) - 1; i >= 0; --i) {
      Module& m = model_.modules[i];
      m.subtree_end = i + 1;
      for (int child : m.children)
        m.subtree_end = std::max<std::int64_t>(m.subtree_end, model_.modules[child].subtree_end);
    }
    std::vector<Parameter> ordered;
    std::vector<int> remap(model_.params.size());
    for (Module& m : model_.modules)
      for (int& p : m.params) {
        remap[p] = static_cast<int>(ordered.size());
        ordered.push_back(model_.params[p]);
        p = remap[p];
      }
    for (Module& m : model_.modules)
      for (ForwardStep& step : m.forward)
        if (step.kind == ForwardStep::Kind::param_matmul) step.index = remap[step.index];
    model_.params = std::move(ordered);
    if (model_.input_features == 0) model_.input_features = infer_input_features();
  }

  std::int64_t infer_input_features() const {
    for (const Module& m : model_.modules) {
      if (m.leaf == LeafKind::linear) return m.in_features;
      if (m.leaf == LeafKind::rms_norm || m.leaf == LeafKind::layer_norm) return m.dim;
      if (m.leaf == LeafKind::embedding) return 1;
      if (m.leaf != LeafKind::container && m.dim > 0) return m.dim;
    }
    return 1;
  }
};

std::map<std::string, std::string> parse_options(const std::string& text, const std::string& spec) {
  std::map<std::string, std::string> options;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    std::size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw InputError(fmt::format("{}: expected key=value options after the model name, got \"{}\"", spec, item));
    options[item.substr(0, eq)] = item.substr(eq + 1);
    start = end + 1;
  }
  return options;
}

}  // namespace

Model parse_model(const JsonReader& doc) {
  doc.expect_object();
  Model model;
  ModelParser(model).parse_root(doc);
  if (model.params.empty()) doc.fail("the model has no parameters");
  return model;
}

nlohmann::json zoo_document(const std::string& spec) {
  std::string body = spec.substr(4);  // after "zoo:"
  std::string name = body.substr(0, body.find(':'));
  std::string option_text = body.find(':') == std::string::npos ? "" : body.substr(body.find(':') + 1);
  for (const ZooEntry& entry : zoo()) {
    if (entry.name != name) continue;
    auto options = parse_options(option_text, spec);
    if (entry.parameters.empty() && !options.empty())
      throw InputError(fmt::format("{}: model \"{}\" takes no options", spec, name));
    try {
      return entry.build(options);
    } catch (const InputError& error) {
      // The builders name the option; the spec says which --model it was.
      throw InputError(fmt::format("{}: {}", spec, error.what()));
    }
  }
  std::string names;
  for (const ZooEntry& entry : zoo()) names += (names.empty() ? "" : ", ") + entry.name;
  throw InputError(fmt::format("{}: no built-in model \"{}\" (available: {})", spec, name, names));
}

Model load_model(const std::string& spec) {
  if (spec.starts_with("zoo:")) {
    nlohmann::json doc = zoo_document(spec);
    return parse_model(JsonReader(doc, spec));
  }
  nlohmann::json doc = load_document(spec);
  return parse_model(JsonReader(doc, spec));
}

}  // namespace stratsim::core
