// The compute cost of a module's forward and backward: FLOPs (multiply and add counted
// separately, 2 per MAC) and the bytes its kernels read and write, with the activation bytes it
// saves for backward. The simulator turns these into time; the fidelity work replaces this flat
// per-leaf model, so it lives apart from the walk.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "context.hpp"

namespace stratsim::core::planner {

struct LeafCost {
  double forward_flops = 0, backward_flops = 0;
  std::int64_t forward_bytes = 0, backward_bytes = 0, saved_bytes = 0;
  std::string op_class;
  std::vector<GemmShape> forward_gemms, backward_gemms;  // ProgramOp::gemms of the two ops
};

// A linear layer's GEMMs on `tokens` rows, in_local -> out_local: forward (t, out, in); backward
// grad_input (t, in, out) when the input needs a gradient, and grad_weight (out, in, t).
std::vector<GemmShape> linear_forward_gemms(std::int64_t tokens, std::int64_t in_local, std::int64_t out_local);
std::vector<GemmShape> linear_backward_gemms(std::int64_t tokens, std::int64_t in_local, std::int64_t out_local,
                                             bool input_grad);

// `in` is the leaf's input with its local width; in_local / out_local are the widths the leaf
// computes on (after tensor parallelism).
LeafCost leaf_cost(const Module& m, const Activation& in, std::int64_t in_local, std::int64_t out_local);

// torch.optim's single-tensor step over `elements` of `dtype_bytes` each: its FLOPs and bytes.
struct OptimizerCost {
  double flops_per_element = 0;
  int states = 0;  // optimizer state tensors per parameter
  std::int64_t bytes(std::int64_t elements, int dtype_bytes) const { return elements * dtype_bytes * (3 + 2 * states); }
};
OptimizerCost optimizer_cost(const OptimizerConfig& optimizer);

}  // namespace stratsim::core::planner
