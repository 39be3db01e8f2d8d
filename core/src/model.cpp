#include "stratsim/core/model.hpp"

#include "stratsim/core/enum_names.hpp"

#include <numeric>

namespace stratsim::core {

namespace {

// Module types the model format knows as leaves. The first name of a kind is its canonical one;
// RMSNormPython and SDPA are aliases. Containers have no type name of their own.
constexpr EnumNames<LeafKind, 17> kLeafTypes{{{{LeafKind::linear, "Linear"},
                                               {LeafKind::relu, "ReLU"},
                                               {LeafKind::sigmoid, "Sigmoid"},
                                               {LeafKind::silu, "SiLU"},
                                               {LeafKind::gelu, "GELU"},
                                               {LeafKind::tanh, "Tanh"},
                                               {LeafKind::dropout, "Dropout"},
                                               {LeafKind::identity, "Identity"},
                                               {LeafKind::rms_norm, "RMSNorm"},
                                               {LeafKind::rms_norm, "RMSNormPython"},
                                               {LeafKind::layer_norm, "LayerNorm"},
                                               {LeafKind::embedding, "Embedding"},
                                               {LeafKind::attention, "ScaledDotProductAttention"},
                                               {LeafKind::attention, "SDPA"},
                                               {LeafKind::rotary, "RotaryEmbedding"},
                                               {LeafKind::cross_entropy, "CrossEntropyLoss"},
                                               {LeafKind::cross_entropy, "CrossEntropy"}}}};

constexpr EnumNames<JoinKind, 3> kJoinKinds{
    {{{JoinKind::add, "add"}, {JoinKind::mul, "mul"}, {JoinKind::concat, "concat"}}}};

}  // namespace

std::string_view leaf_kind_name(LeafKind kind) { return kLeafTypes.name(kind, "container"); }

std::string_view join_kind_name(JoinKind kind) { return kJoinKinds.name(kind, "?"); }

std::optional<JoinKind> parse_join_kind(std::string_view name) { return kJoinKinds.parse(name); }

std::optional<LeafKind> parse_leaf_kind(std::string_view type) { return kLeafTypes.parse(type); }

bool is_elementwise(LeafKind kind) {
  return kind == LeafKind::relu || kind == LeafKind::sigmoid || kind == LeafKind::silu || kind == LeafKind::gelu ||
         kind == LeafKind::tanh || kind == LeafKind::identity;
}

std::string leaf_type_list() {
  std::string out;
  for (const auto& [kind, name] : kLeafTypes.entries) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

std::int64_t Parameter::numel() const {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

int Model::find_module(std::string_view fqn) const {
  for (std::size_t i = 0; i < modules.size(); ++i)
    if (modules[i].fqn == fqn) return static_cast<int>(i);
  return -1;
}

int Model::find_param(std::string_view fqn) const {
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i].fqn == fqn) return static_cast<int>(i);
  return -1;
}

std::int64_t Model::subtree_numel(int module) const {
  std::int64_t total = 0;
  for (const Parameter& p : params)
    if (in_subtree(p.module, module)) total += p.numel();
  return total;
}

std::int64_t Model::total_numel() const { return subtree_numel(0); }

std::vector<ForwardStep> flat_forward(const Model& model) {
  std::vector<ForwardStep> steps;
  auto visit = [&](auto&& self, int m) -> void {
    const Module& module = model.modules[m];
    if (module.leaf != LeafKind::container) return steps.push_back({ForwardStep::Kind::child, m});
    for (const ForwardStep& step : module.forward) {
      if (step.kind == ForwardStep::Kind::child) self(self, step.index);
      else if (step.kind == ForwardStep::Kind::param_matmul) steps.push_back(step);
    }
  };
  if (!model.modules.empty()) visit(visit, 0);
  return steps;
}

std::string join_fqn(std::string_view prefix, std::string_view name) {
  if (prefix.empty()) return std::string(name);
  if (name.empty()) return std::string(prefix);
  return std::string(prefix) + "." + std::string(name);
}

}  // namespace stratsim::core
