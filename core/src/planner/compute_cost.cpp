#include "compute_cost.hpp"

namespace stratsim::core::planner {

std::vector<GemmShape> linear_forward_gemms(std::int64_t tokens, std::int64_t in_local, std::int64_t out_local) {
  return {{tokens, out_local, in_local}};
}

std::vector<GemmShape> linear_backward_gemms(std::int64_t tokens, std::int64_t in_local, std::int64_t out_local,
                                             bool input_grad) {
  std::vector<GemmShape> gemms;
  if (input_grad) gemms.push_back({tokens, in_local, out_local});
  gemms.push_back({out_local, in_local, tokens});
  return gemms;
}

// Coefficients for element-wise and norm kernels follow their eager PyTorch implementations (see
// README "Compute model").
LeafCost leaf_cost(const Module& m, const Activation& in, std::int64_t in_local, std::int64_t out_local) {
  LeafCost cost;
  const double tokens = static_cast<double>(in.tokens());
  const int d = dtype_size(in.dtype);
  const std::int64_t t = in.tokens();
  switch (m.leaf) {
    case LeafKind::linear: {
      const double mac = tokens * in_local * out_local;
      cost.op_class = "gemm";
      cost.forward_flops = 2 * mac + (m.bias ? tokens * out_local : 0);
      // grad_weight always; grad_input only when the input requires grad.
      cost.backward_flops = 2 * mac * (in.requires_grad ? 2 : 1) + (m.bias ? tokens * out_local : 0);
      const std::int64_t weight = in_local * out_local * d;
      cost.forward_bytes = t * in_local * d + weight + t * out_local * d;
      cost.backward_bytes = 2 * cost.forward_bytes + weight;
      cost.saved_bytes = t * in_local * d;
      cost.forward_gemms = linear_forward_gemms(t, in_local, out_local);
      cost.backward_gemms = linear_backward_gemms(t, in_local, out_local, in.requires_grad);
      break;
    }
    case LeafKind::relu:
    case LeafKind::sigmoid:
    case LeafKind::silu:
    case LeafKind::gelu:
    case LeafKind::tanh:
    case LeafKind::dropout:
    case LeafKind::identity: {
      const double per = m.leaf == LeafKind::relu       ? 1
                         : m.leaf == LeafKind::identity ? 0
                         : m.leaf == LeafKind::dropout  ? 2
                                                        : 4;
      const std::int64_t f = in.features();
      cost.op_class = "elementwise";
      cost.forward_flops = per * tokens * f;
      cost.backward_flops = (per + 1) * tokens * f;
      cost.forward_bytes = 2 * t * f * d;
      cost.backward_bytes = 3 * t * f * d;
      cost.saved_bytes = m.leaf == LeafKind::identity ? 0 : t * f * (m.leaf == LeafKind::dropout ? 1 : d);
      break;
    }
    case LeafKind::rms_norm:
    case LeafKind::layer_norm: {
      const std::int64_t f = in.features();
      const double per = m.leaf == LeafKind::rms_norm ? 4 : 5;
      cost.op_class = "norm";
      cost.forward_flops = per * tokens * f;
      cost.backward_flops = 2 * per * tokens * f;
      cost.forward_bytes = 2 * t * f * d;
      cost.backward_bytes = 3 * t * f * d;
      cost.saved_bytes = t * f * d + t * 4 * (m.leaf == LeafKind::layer_norm ? 2 : 1);
      break;
    }
    case LeafKind::embedding: {
      cost.op_class = "embedding";
      cost.forward_flops = 0;
      cost.backward_flops = tokens * out_local;  // scatter-add of the gradient rows
      cost.forward_bytes = t * 8 + 2 * t * out_local * d;
      cost.backward_bytes = t * 8 + 2 * t * out_local * d;
      cost.saved_bytes = t * 8;
      break;
    }
    case LeafKind::attention: {
      // softmax(Q K^T) V over the local heads: Q K^T and P V each 2*b*s^2*width; causal masks half.
      const std::int64_t width = in.features();
      const double batch = in.rank() == 3 ? static_cast<double>(in.shape[0]) : 1.0;
      const double seq = in.rank() == 3 ? static_cast<double>(in.shape[1]) : tokens;
      const double fraction = m.causal ? 0.5 : 1.0;
      cost.op_class = "attention";
      cost.forward_flops = 4 * batch * seq * seq * width * fraction;
      cost.backward_flops = 2.5 * cost.forward_flops;  // flash backward recomputes P
      cost.forward_bytes = 4 * t * width * d;
      cost.backward_bytes = 8 * t * width * d;
      cost.saved_bytes = 4 * t * width * d;
      break;
    }
    case LeafKind::container:
      break;
  }
  return cost;
}

OptimizerCost optimizer_cost(const OptimizerConfig& opt) {
  OptimizerCost cost;
  cost.flops_per_element = 2;  // p -= lr * g
  if (opt.kind == OptimizerKind::sgd) {
    if (opt.momentum != 0) {
      cost.flops_per_element += 2;
      cost.states = 1;
    }
  } else {
    cost.flops_per_element = 12;
    cost.states = opt.amsgrad ? 3 : 2;
  }
  if (opt.weight_decay != 0) cost.flops_per_element += 2;
  return cost;
}

}  // namespace stratsim::core::planner
