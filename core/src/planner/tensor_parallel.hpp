// Tensor parallelism as DTensor does it: parallelize_module's ColwiseParallel / RowwiseParallel
// styles shard a layer's parameters and redistribute its input and output with collectives on the
// tp group; distribute_module makes every parameter a Replicate DTensor whose Partial gradients
// are all-reduced in backward. Owns each module's TP state; emits through the ProgramBuilder and
// records backward redistributions on the tape.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "backward_tape.hpp"
#include "context.hpp"
#include "program_builder.hpp"

namespace stratsim::core::planner {

class TensorParallel {
 public:
  TensorParallel(PlanContext& context, ProgramBuilder& builder, BackwardTape& tape);

  void apply_parallelize(const ParallelizeStep& step, const PlanStep& where);
  void apply_distribute(const DistributeModuleStep& step, const PlanStep& where);

  // Module hooks: the input is redistributed to the layout the style computes on, the output to the
  // declared output layout; backward redistributes the gradients the other way.
  void input_hook(int m, Activation& act, Mode mode);
  void output_hook(int m, Activation& act, Mode mode);

  // Applying the plan made each styled parameter a DTensor with distribute_tensor(src_data_rank=0):
  // the group's first rank scatters every sharded one (c10d.scatter_) and broadcasts every
  // replicated one (c10d.broadcast_), in the order the plan reached them. Emitted once, before
  // iteration 1's forward, in phase init.
  void emit_distribution();

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
  void record_boundary(const TpBoundary& layouts);
  int redistribute(RedistributeOp op, const Activation& tensor, OpRole role, Placement from, Placement to,
                   const std::vector<int>& dims, Phase phase, int module, const std::string& reason);

  PlanContext& context_;
  ProgramBuilder& builder_;
  BackwardTape& tape_;
  std::vector<ModuleState> modules_;
  std::vector<std::vector<int>> partial_grad_dims_;  // per parameter: mesh dims of its Partial gradient
  std::vector<int> distributed_params_;              // in the order distribute_tensor reached them
};

}  // namespace stratsim::core::planner
