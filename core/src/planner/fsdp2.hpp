// FSDP2 (torch.distributed.fsdp.fully_shard, PyTorch 2.4+ as _composable.fsdp): one parameter group
// per fully_shard call, each parameter its own DTensor sharded Shard(0) over the shard group with
// dim 0 padded to a multiple of it. No flat parameter, no auto-wrap: a call takes the parameters
// of its module that no fully_shard on a submodule took before it.
//
// Per group and iteration, as FSDPParamGroup runs it: pre-forward all-gathers the group (one
// all_gather_into_tensor of every parameter's padded shard, cast to param_dtype); post-forward
// frees it unless reshard_after_forward is false or the group is the root's (reshard_after_forward=k
// keeps 1/k of it, a clone, and re-gathers over k consecutive ranks); the pre-backward hook
// on the group's outputs re-gathers it and prefetches the group that ran forward just before; the
// post-backward hook on the group's inputs (or, when no input needs a gradient, the root's final
// callback, groups in pre-order) reduce-scatters every gradient in one collective, then
// all-reduces the shard over the replicate dim for HSDP.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "backward_tape.hpp"
#include "context.hpp"
#include "program_builder.hpp"

namespace stratsim::core::planner {

class FullyShard2 {
 public:
  FullyShard2(PlanContext& context, ProgramBuilder& builder, BackwardTape& tape);

  void apply_fully_shard(const FullyShard2Step& step, const PlanStep& where);
  void mark_roots();  // once the plan is applied: the outermost groups run lazy init
  int group_of_module(int module) const { return group_of_module_[module]; }
  DType compute_dtype(int group) const;
  // MixedPrecisionPolicy's casts at the module's boundary: its floating-point inputs to
  // param_dtype (cast_forward_inputs), its outputs to output_dtype. Unset: no cast.
  std::optional<DType> input_cast(int module) const;
  std::optional<DType> output_cast(int module) const;

  void begin_iteration();
  // `input_requires_grad`: whether the module's input needs a gradient, i.e. whether FSDP2's
  // post-backward hook on the inputs fires (otherwise the root's final callback runs it).
  void pre_forward(int module, Mode mode, bool input_requires_grad);
  void post_forward(int module, Mode mode);
  void end_backward();             // the root's post-backward final callback
  int all_gather_op(int p) const;  // the all-gather compute reading parameter p waits for
  // Parameter p's shard (its gradient's numel after the reduction) and the mesh dims its group
  // spans, ascending (HSDP: replicate and shard), and shards on.
  std::int64_t shard_numel(int p) const {
    return groups_[context_.params[p].fsdp2_group].shard_numels[index_in_group_[p]];
  }
  std::vector<int> mesh_dims(int group) const;
  const std::vector<int>& shard_dims(int group) const { return groups_[group].shard_dims; }
  void grad_ready(int p, int producer);

  // What the rank stores on the device and its optimizer steps: each group's parameter shards
  // (offloaded groups' live on the host).
  // Each parameter's local shard (a DTensor's own storage).
  struct Shard {
    std::int64_t numel = 0;
    DType dtype = DType::float32;
  };
  std::vector<Shard> resident_shards() const;
  // Parameter p's shard as the device stores it; none when its group offloads to the host.
  std::optional<Shard> resident_shard(int p) const;
  void report(PlanResult& result) const;

 private:
  struct Group {
    int module = 0;
    FullyShard2Step config;
    std::vector<int> shard_dims, replicate_dims;
    std::vector<int> params;  // registration order
    std::vector<std::int64_t> shard_numels;
    std::int64_t shard_numel = 0;  // all-gather input per rank
    int world = 1;
    int post_forward_ranks = 0;  // reshard_after_forward=k with 1 < k < world; else 0
    DType orig_dtype = DType::float32;
    bool root = false;
    int root_group = 0;  // the root whose lazy init shares its contexts with this group
    // runtime
    bool unsharded = false;
    bool pre_backward_done = false;
    bool post_backward_done = false;
    bool grads_pending = false;         // some parameter has a gradient not yet reduced
    bool copy_out_pending = false;      // unsharded, but its unsharded parameters are not written yet
    bool accumulated = false;           // an earlier micro-step left unsharded gradients (no sync)
    bool sharded_post_forward = false;  // holds post-forward shards (reshard_after_forward=k)
    int all_gather_op = -1;
    // Their storage in the allocation history: the unsharded parameters (with the post-forward
    // shards under reshard_after_forward=k) and each parameter's unsharded gradient.
    std::vector<MemoryTracker::Tensor> unsharded_params, unsharded_grads;  // per parameter
    MemoryTracker::Tensor all_gather_output = MemoryTracker::kNoTensor, post_forward_storage = MemoryTracker::kNoTensor;
    DType param_dtype() const { return config.param_dtype.value_or(orig_dtype); }
    // MixedPrecisionPolicy casts the shards to param_dtype before gathering them.
    bool casts_params() const { return param_dtype() != orig_dtype; }
    // Bytes read plus written to make the all-gather input (or, on one rank, the unsharded
    // parameters): the cast of each shard to param_dtype, if any, then a copy in param_dtype.
    std::int64_t copy_in_bytes() const {
      const std::int64_t d = dtype_size(param_dtype());
      return (casts_params() ? shard_numel * (dtype_size(orig_dtype) + d) : 0) + shard_numel * 2 * d;
    }
    // MixedPrecisionPolicy without reduce_dtype: see TorchVersion::fsdp2_grads_in_param_dtype.
    DType reduce_dtype(const TorchVersion& version) const {
      return config.reduce_dtype.value_or(version.fsdp2_grads_in_param_dtype() ? param_dtype() : orig_dtype);
    }
    std::int64_t unsharded_numel() const { return shard_numel * world; }
    // A post-forward shard: 1/k of the padded unsharded parameters.
    std::int64_t post_forward_numel() const { return unsharded_numel() / post_forward_ranks; }
    // The dtype autograd writes the unsharded gradients in (before the cast to reduce_dtype).
    DType grad_dtype(const TorchVersion& version) const {
      return version.fsdp2_grads_in_param_dtype() ? param_dtype() : orig_dtype;
    }
    // The dtype chunk_cat reads them in: 2.15 defers the upcast to the parameters' dtype
    // (_set_unsharded_grad_dtypes(defer_upcast=True)) unless they accumulated over a micro-step.
    DType chunk_cat_dtype(const TorchVersion& version) const {
      return version.fsdp2_grads_in_param_dtype() || !accumulated ? param_dtype() : orig_dtype;
    }
  };

  bool reshard_after_forward(const Group& group) const;
  bool gathers(const Group& group) const;
  void unshard(int g, Phase phase, const char* why);
  void wait_for_unshard(int g, Phase phase);
  // One of FSDP2's own copy kernels on the compute stream (role fsdp2_copy).
  int copy_kernel(int g, const char* what, Phase phase, const char* op_class, std::int64_t bytes,
                  std::vector<int> deps = {});
  // _get_gradient_divide_factors: what foreach_reduce divides by in kernels of its own, before
  // and after the reduction (1: nothing).
  struct DivideFactors {
    int pre = 1;
    double post = 1;
  };
  DivideFactors divide_factors(const Group& group, DType reduce) const;
  // The kernels after the reduction: the post-divide and the cast of the reduced shard to the
  // parameters' dtype, on the stream the reduction ended on ("": the compute stream), after op
  // `after`. Returns the last op.
  int post_reduce(int g, std::int64_t shard, DType reduce, bool postdivide, const std::string& stream, int after);
  void reshard(int g);
  void reshard_to_post_forward(int g, Phase phase);
  void free_post_forward_shards(int g);
  void pre_backward(int g, int post_forward_index);
  void post_backward(int g);

  PlanContext& context_;
  ProgramBuilder& builder_;
  BackwardTape& tape_;
  std::vector<Group> groups_;
  std::vector<int> group_of_module_;
  // Per model parameter: its position in its group, and whether it holds a gradient not yet
  // reduced (looked up per gradient: a scan of the group would make a whole-model group quadratic).
  std::vector<int> index_in_group_;
  // Buffers FSDP2 holds past the op that made them (FSDPCommContext's all_gather_state and
  // reduce_scatter_state): the last forward gather's flat output, freed at the next group's
  // copy-out, and the last reduce-scatter's input, freed at the next group's reduction.
  MemoryTracker::Tensor forward_gather_output_ = MemoryTracker::kNoTensor,
                        reduce_scatter_input_ = MemoryTracker::kNoTensor;
  void allocate_unsharded_params(int g, bool cast_each);
  std::vector<bool> has_grad_;
  // Per root (FSDPCommContext.post_forward_order): this iteration's post-forwards, by group.
  std::vector<std::vector<int>> post_forward_order_;
  std::vector<int> pre_order_;       // groups in module pre-order (a final callback's order)
  std::vector<int> callback_roots_;  // roots in the order their final callbacks were queued
};

}  // namespace stratsim::core::planner
