#include "stratsim/core/model.hpp"

#include <numeric>

namespace stratsim::core {

std::string_view leaf_kind_name(LeafKind kind) {
  switch (kind) {
    case LeafKind::container: return "container";
    case LeafKind::linear: return "Linear";
    case LeafKind::relu: return "ReLU";
    case LeafKind::sigmoid: return "Sigmoid";
    case LeafKind::silu: return "SiLU";
    case LeafKind::gelu: return "GELU";
    case LeafKind::tanh: return "Tanh";
    case LeafKind::dropout: return "Dropout";
    case LeafKind::identity: return "Identity";
    case LeafKind::rms_norm: return "RMSNorm";
    case LeafKind::layer_norm: return "LayerNorm";
    case LeafKind::embedding: return "Embedding";
    case LeafKind::attention: return "ScaledDotProductAttention";
  }
  return "?";
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
      else steps.push_back(step);
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
