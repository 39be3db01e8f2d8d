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

// A kernel (or a run of memory-bound kernels) a leaf launches beside its main op, priced apart
// because it does not overlap it: unfused attention's softmax between its two GEMMs.
struct KernelCost {
  std::string name;  // suffix of the op name: "softmax" -> "attn.softmax.forward"
  std::string op_class;
  double flops = 0;
  std::int64_t bytes = 0;
};

// What a leaf saves for backward: whole tensors it shares with other ops (its input, its output,
// attention's k and v), held once however many ops save them, and bytes only it holds (masks,
// statistics, token ids).
struct LeafCost {
  double forward_flops = 0, backward_flops = 0;
  std::int64_t forward_bytes = 0, backward_bytes = 0;
  std::int64_t saved_bytes = 0;           // the leaf's own saved bytes
  std::vector<std::int64_t> saved_parts;  // the tensors they are, where more than one
  // Tensors the op allocates while it runs beyond its output, what it saves and the gradients it
  // hands on (its working copies: the loss's float32 logits and gradients), in the order it takes
  // them. Forward's are held until the op's own saved bytes are allocated; backward's until its
  // saved tensors are released, the last until the input's gradient is made from it.
  std::vector<std::int64_t> forward_workspace, backward_workspace;
  bool saves_input = false, saves_output = false, saves_kv = false;
  std::string op_class;
  std::vector<GemmShape> forward_gemms, backward_gemms;  // ProgramOp::gemms of the two ops
  std::vector<KernelCost> forward_extra, backward_extra;
  // Separate PyTorch ops that run just before the leaf (repeat_kv before attention): selective
  // checkpointing recomputes them even when it keeps the leaf's own output.
  std::vector<KernelCost> forward_prologue;
};

// A linear layer's GEMMs on `tokens` rows, in_local -> out_local: forward (t, out, in); backward
// grad_input (t, in, out) when the input needs a gradient, and grad_weight (out, in, t).
std::vector<GemmShape> linear_forward_gemms(std::int64_t tokens, std::int64_t in_local, std::int64_t out_local);
std::vector<GemmShape> linear_backward_gemms(std::int64_t tokens, std::int64_t in_local, std::int64_t out_local,
                                             bool input_grad);

// `in` is the leaf's input with its local width; in_local / out_local are the widths the leaf
// computes on (after tensor parallelism). Attention reads q as `in`; kv_local is the local width
// of k (and v) when the forward names them, 0 for a chain model's attention (one fused input).
LeafCost leaf_cost(const Module& m, const Activation& in, std::int64_t in_local, std::int64_t out_local,
                   std::int64_t kv_local = 0);

// A join step (residual add, gating multiply, concatenation) of tensors with `elements` each in
// the output, `inputs` of them, and the gradient accumulation a branch needs in backward.
struct JoinCost {
  double forward_flops = 0, backward_flops = 0;
  std::int64_t forward_bytes = 0, backward_bytes = 0;  // backward_bytes 0: no backward kernel
  bool saves_inputs = false;
};
JoinCost join_cost(JoinKind kind, std::size_t inputs, std::int64_t elements, int dtype_bytes);
// Autograd sums the gradients of a tensor read `uses` times: uses - 1 element-wise adds.
KernelCost grad_accumulate_cost(int uses, std::int64_t elements, int dtype_bytes);

// torch.optim's single-tensor step over `elements` of `dtype_bytes` each: its FLOPs, the bytes it
// moves and the memory it keeps. With master weights a 16-bit parameter has a float32 copy and
// float32 states: the step reads the 16-bit gradient, updates the copy and the states, and writes
// the 16-bit parameter back.
struct OptimizerCost {
  double flops_per_element = 0;
  int states = 0;  // optimizer state tensors per parameter
  bool master_weights = false;

  bool keeps_master(int dtype_bytes) const { return master_weights && dtype_bytes < 4; }
  std::int64_t bytes(std::int64_t elements, int dtype_bytes) const {
    if (keeps_master(dtype_bytes)) return elements * (2 * dtype_bytes + 8 + 8 * states);
    return elements * dtype_bytes * (3 + 2 * states);
  }
  std::int64_t resident_bytes(std::int64_t elements, int dtype_bytes) const {
    if (keeps_master(dtype_bytes)) return elements * 4 * (states + 1);
    return elements * dtype_bytes * states;
  }
};
OptimizerCost optimizer_cost(const OptimizerConfig& optimizer);

}  // namespace stratsim::core::planner
