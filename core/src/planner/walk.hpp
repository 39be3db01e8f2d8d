// The walk: one training run as PyTorch executes it. Setup applies the plan's calls in order
// (validating composition the way PyTorch does); each iteration runs the module tree's forward
// with its hooks (DDP pre-forward, FSDP unshard, DTensor input/output redistribution), replays the
// backward tape in reverse (gradient-ready events feed the DDP Reducer and FSDP post-backward
// hooks, checkpointed regions recompute), then steps the optimizer. The parallelisms own their
// state and emit through the ProgramBuilder; the walk only decides when each one runs.
#pragma once

#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backward_tape.hpp"
#include "compute_cost.hpp"
#include "context.hpp"
#include "ddp.hpp"
#include "fsdp.hpp"
#include "fsdp2.hpp"

#include "live_tensors.hpp"
#include "program_builder.hpp"
#include "tensor_parallel.hpp"

namespace stratsim::core::planner {

class Walk {
 public:
  Walk(const Model& model, const Plan& plan, const PlanOptions& options);
  PlanResult run();

 private:
  void apply_plan();
  void finish_setup();
  void set_static_memory();
  struct ResidentTensor {
    std::int64_t numel = 0;
    DType dtype = DType::float32;
    bool trained = true;  // requires_grad: the optimizer keeps state for it
  };
  std::vector<ResidentTensor> resident_tensors() const;
  void record_optimizer_state();
  bool optimizer_state_recorded_ = false;
  void run_iteration();
  // `act` is the module's input and becomes its output; `side` are further inputs the forward
  // names (attention's k and v).
  void forward_module(int m, Activation& act, Mode mode, std::span<const Activation> side = {});
  void cast_activation(Activation& act, std::optional<DType> dtype);
  // `without_hooks`: the module's parallelize_module hooks run outside (composable checkpoint()).
  void run_module_body(int m, Activation& act, Mode mode, std::span<const Activation> side, bool without_hooks = false);
  void run_forward_steps(int m, Activation& act, Mode mode);
  // The tensors a container's forward holds (it made them) and the reads left of each, in the
  // order it made them; the input is its caller's.
  using HeldLocals = std::vector<std::pair<int, int>>;
  void claim_step_output(HeldLocals& locals, std::size_t mark, int output, int uses);
  void release_read(HeldLocals& locals, int id);
  void sum_branch_grads(int m, int slot, const Activation& tensor, int uses, Mode mode);
  Activation forward_join(int m, const ForwardStep& step, const std::vector<Activation>& slots, Mode mode);
  void forward_leaf(int m, Activation& act, Mode mode, std::span<const Activation> side);
  bool keeps_output(const Module& module, Mode mode);
  void emit_kernels(int m, Phase phase, const std::vector<KernelCost>& kernels);
  std::vector<MemoryTracker::Tensor> allocate_temporaries(const std::vector<std::int64_t>& temporaries);
  void release_temporaries(std::vector<MemoryTracker::Tensor>& tensors);
  void forward_param_matmul(int p, Activation& act, Mode mode);
  void grad_ready(int p, int producer);
  int gather_op(int p) const;  // the FSDP all-gather compute reading p waits for, -1 if none
  bool sharded(int p) const { return context_.params[p].fsdp_unit >= 0 || context_.params[p].fsdp2_group >= 0; }
  void optimizer_step();
  void clip_grad_norm();
  void unscale_grads();
  std::vector<int> non_replicate_grad_dims(int p) const;
  bool grad_is_dtensor(int p) const;
  std::int64_t local_grad_numel(int p) const;
  void report_params();

  PlanContext context_;
  ProgramBuilder builder_;
  BackwardTape tape_;
  LiveTensors live_;
  ActivationGrads grads_;
  TensorParallel tp_;
  DataParallel ddp_;
  FullyShard fsdp_;
  FullyShard2 fsdp2_;
  double last_linear_fraction_ = 1.0;  // local/global output width of the last Linear run
  // The checkpoint region being run (first pass or recomputation) under the selective policy.
  struct SelectiveRegion {
    bool active = false;
    int matmuls = 0;
  };
  SelectiveRegion selective_;
  // The recomputation being replayed: the saving ops its first pass counted, those seen so far,
  // and whether it has stopped (see saved_point).
  struct Recompute {
    int expected = 0;
    int saves = 0;
    bool stopped = false;
  };
  Recompute recompute_;
  int region_saves_ = 0;  // saving ops of the checkpointed region on its first pass
  // One past the tape entry of the last backward that reads saved tensors (the region's replay
  // goes there: autograd recomputes when such an entry first unpacks one).
  std::size_t last_saving_entry_ = 0;
  void saved_point(Mode mode, bool saves);
  // Storage held under an op's output tensor id, which a recomputation recreates: what a leaf
  // saves for its backward beyond the tensors it reads or writes (attention's statistics).
  using HeldByTensor = std::unordered_map<int, std::vector<MemoryTracker::Tensor>>;
  HeldByTensor own_saved_;
  // Outputs selective checkpointing caches from the first pass (a reference each in live_) until
  // the recomputation takes them back.
  std::unordered_set<int> kept_outputs_;
  // A hook gave `act` a new tensor (a cast, a redistribution): backward's gradient is the same one.
  void follow(int before, const Activation& act) { grads_.link(act.id, before); }
  // What a backward makes for the tensors its op read: their ids and bytes.
  struct GradInput {
    int id = -1;
    std::int64_t bytes = 0;
  };
  void release_held(HeldByTensor& held, int id) {
    const auto it = held.find(id);
    if (it == held.end()) return;
    for (MemoryTracker::Tensor tensor : it->second) builder_.release(tensor);
    held.erase(it);
  }
};

}  // namespace stratsim::core::planner
