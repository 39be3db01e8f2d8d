// Tensor parallelism as DTensor does it: parallelize_module's ColwiseParallel / RowwiseParallel
// styles shard a layer's parameters and redistribute its input and output with collectives on the
// tp group; SequenceParallel runs norms on sequence-sharded inputs; PrepareModuleInput /
// PrepareModuleOutput annotate and redistribute; distribute_module makes every parameter a
// Replicate DTensor whose Partial gradients are all-reduced in backward. Between modules a tensor
// may stay a DTensor (use_local_output=False): its consumers hand the placement of its gradient
// back through an autograd node, and the boundary that made it (from_local or redistribute) turns
// that gradient into the layout it came from, as DTensor's backward does. Owns each module's TP
// state; emits through the ProgramBuilder and records backward redistributions on the tape.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backward_tape.hpp"
#include "context.hpp"
#include "live_tensors.hpp"
#include "program_builder.hpp"

namespace stratsim::core::planner {

class TensorParallel {
 public:
  TensorParallel(PlanContext& context, ProgramBuilder& builder, BackwardTape& tape, LiveTensors& live);

  void apply_parallelize(const ParallelizeStep& step, const PlanStep& where);
  void apply_distribute(const DistributeModuleStep& step, const PlanStep& where);

  // Module hooks: the input is redistributed to the layout the style computes on, the output to the
  // declared output layout; backward redistributes the gradients the other way.
  void begin_iteration();  // DTensor gradient nodes are per backward
  void input_hook(int m, Activation& act, Mode mode);
  void output_hook(int m, Activation& act, Mode mode);

  // A leaf computing on a DTensor input (`input`, before the leaf; `output`, after): element-wise
  // leaves and norms keep the placement, a norm over a sequence-sharded input leaves its
  // parameters Partial gradients, a cross entropy under loss_parallel all-reduces its
  // statistics. What PyTorch refuses (a plain parameter against a DTensor) fails in its words.
  void leaf_hook(int m, const Activation& input, Activation& output, Mode mode);
  // A join of tensors: all plain, or all DTensors of one placement.
  void join_hook(int m, const std::vector<const Activation*>& inputs, Activation& output, Mode mode);

  // Applying the plan made each styled parameter a DTensor with distribute_tensor(src_data_rank=0):
  // the group's first rank scatters every sharded one (c10d.scatter_) and broadcasts every
  // replicated one (c10d.broadcast_), in the order the plan reached them. Emitted once, before
  // iteration 1's forward, in phase init.
  void emit_distribution();

  // Hooks of a parallelize_module style or distribute_module on module m.
  bool has_hooks(int m) const { return modules_[m].parallel || modules_[m].distributed; }
  // Whether its input hook hands the module a plain tensor (PrepareModuleInput with
  // use_local_output=True): calling the module again would wrap that tensor a second time.
  bool input_hook_returns_local(int m) const {
    return modules_[m].parallel && modules_[m].spec.style == TPStyle::prepare_input && modules_[m].spec.local_output();
  }
  // A replicated DTensor parameter whose gradient comes out Partial is all-reduced where
  // FSDP/replicate re-wrap it (from_local). Returns the op after which the gradient is ready.
  int reduce_partial_grad(int p, int producer);

 private:
  struct ModuleState {
    bool parallel = false;  // parallelize_module style
    TPModuleSpec spec;
    bool distributed = false;  // distribute_module (replicated params, from_local input)
    std::optional<Placement> input_layout;
    std::vector<int> dims;
  };

  // The layout module m's input is declared in and the one its style computes on (normalised to
  // an activation of `rank` dims). The first boundary in forward order also says how the model
  // input is laid out.
  TpBoundary boundary(int m, int rank) const;
  void apply_style(int m, const TPModuleSpec& spec, const std::vector<int>& dims, const PlanStep& where);
  void record_boundary(const TpBoundary& layouts);
  void loss_parallel(int m, const Activation& logits, Mode mode);
  void styled_input(int m, Activation& act, Mode mode);
  void styled_output(int m, Activation& act, Mode mode);

  // DTensor autograd between modules. from_local makes `act` a DTensor at `placement` (no
  // collective; backward redistributes the gradient back to it, Partial read as Replicate).
  // to_local makes it plain again (backward: the gradient arrives in the DTensor's placement).
  // redistribute_dtensor moves it to `to` (a collective; backward moves the gradient back).
  void from_local(int m, Activation& act, Placement placement, const std::vector<int>& dims, Mode mode);
  void to_local(Activation& act);
  void redistribute_dtensor(int m, Activation& act, Placement to, Mode mode, const char* what);
  void new_node(Activation& act) { act.grad_node = next_node_++; }
  // A consumer's backward leaves the placement of its share of node's gradient (shares sum).
  void leave_grad(int node, Placement placement);
  // What reached node's gradient, or `fallback` (the DTensor's own placement, Partial read as
  // Replicate: to_local's backward) when no consumer said.
  Placement take_grad(int node, Placement fallback);
  int redistribute(RedistributeOp op, const Activation& tensor, OpRole role, Placement from, Placement to,
                   const std::vector<int>& dims, Phase phase, int module, const std::string& reason);

  PlanContext& context_;
  ProgramBuilder& builder_;
  BackwardTape& tape_;
  LiveTensors& live_;  // a collective's output is a tensor the walk holds like any op's
  std::vector<ModuleState> modules_;
  std::vector<std::vector<int>> partial_grad_dims_;  // per parameter: mesh dims of its Partial gradient
  std::vector<int> distributed_params_;              // in the order distribute_tensor reached them
  std::unordered_map<int, Placement> grads_;         // grad node -> placement its consumers left
  int next_node_ = 0;
};

// The all-reduce that makes parameter p's Partial gradient (ParamState::partial_grad_dims)
// Replicate: `bytes` of `dtype`, after `dep`; c10d_functional.all_reduce, as redistribute issues it.
// FSDP2's post-backward runs it before the reduce-scatter; without FSDP the optimizer's first op
// on the gradient does.
int all_reduce_partial_param_grad(const PlanContext& context, ProgramBuilder& builder, int p, std::int64_t bytes,
                                  DType dtype, int dep, Phase phase);

}  // namespace stratsim::core::planner
