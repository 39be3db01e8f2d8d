#include "fsdp2.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"
#include "tensor_parallel.hpp"

namespace stratsim::core::planner {

// The allocator pools FSDP2's buffers come from (PyTorch's caching allocator keeps one per stream).
constexpr const char* kAllGatherCopyInStream = "fsdp.all_gather_copy_in";
constexpr const char* kReduceScatterStream = "fsdp.reduce_scatter";

FullyShard2::FullyShard2(PlanContext& context, ProgramBuilder& builder, BackwardTape& tape)
    : context_(context), builder_(builder), tape_(tape) {
  group_of_module_.assign(context.model.modules.size(), -1);
  index_in_group_.assign(context.model.params.size(), -1);
  has_grad_.assign(context.model.params.size(), false);
}

void FullyShard2::apply_fully_shard(const FullyShard2Step& step, const PlanStep& where) {
  const Model& model = context_.model;
  const int m = context_.module_or_fail(step.module, where.where);
  // FSDP1's composable fully_shard and FSDP2's register under the same name with
  // @contract, so either refuses a module the other already took.
  if (context_.fully_shard_step[m] >= 0)
    throw PlanError(
        fmt::format("{}: Each distinct composable distributed API can only be applied to a module once. "
                    "fully_shard has already been applied to the following module: {}",
                    where.where, model.modules[m].type));
  context_.fully_shard_step[m] = where.index;
  Group group;
  group.module = m;
  group.config = step;
  const std::vector<int> dims = context_.dims_of(step.mesh_dims);
  if (dims.size() == 2) {
    group.replicate_dims = {dims[0]};
    group.shard_dims = {dims[1]};
  } else {
    group.shard_dims = dims;
  }
  group.world = context_.mesh.group_size(group.shard_dims);
  if (step.reshard_after_forward_ranks) {
    // _get_post_forward_mesh_info's rules and words.
    const std::int64_t k = *step.reshard_after_forward_ranks;
    if (k < 1 || k > group.world || group.world % k != 0)
      throw PlanError(fmt::format("{}: If passing reshard_after_forward as an int, it should be a factor of {}, not {}",
                                  where.where, group.world, k));
    group.config.reshard_after_forward = k != 1;
    if (k != 1 && k != group.world) group.post_forward_ranks = static_cast<int>(k);
  }
  const int id = static_cast<int>(groups_.size());
  // _get_managed_states: the module's parameters, less those of submodules that a fully_shard
  // (or replicate) already manages; frozen parameters are sharded too.
  std::vector<bool> skip(model.modules.size(), false);
  for (int sub = m; sub < model.modules[m].subtree_end; ++sub) {
    if (skip[sub]) continue;
    const bool managed = sub != m && (context_.fully_shard_step[sub] >= 0 || context_.replicate_step[sub] >= 0);
    if (managed) {
      for (int s = sub; s < model.modules[sub].subtree_end; ++s) skip[s] = true;
      continue;
    }
    for (int p : model.modules[sub].params) {
      ParamState& state = context_.params[p];
      if (state.fsdp2_group >= 0 || state.fsdp_unit >= 0 || state.ddp >= 0) continue;
      state.fsdp2_group = id;
      index_in_group_[p] = static_cast<int>(group.params.size());
      group.params.push_back(p);
    }
  }
  if (!group.params.empty()) group.orig_dtype = model.params[group.params.front()].dtype;
  // FSDPParam._init_sharded_param: chunk dim 0 into W pieces of ceil(dim0 / W) rows, padding the
  // last ones; the all-gather's input is every parameter's padded shard back to back.
  for (int p : group.params) {
    const std::vector<std::int64_t>& shape = context_.params[p].local_shape;
    std::int64_t rest = 1;
    for (std::size_t i = 1; i < shape.size(); ++i) rest *= shape[i];
    const std::int64_t rows = shape.empty() ? 1 : ceil_div(shape[0], group.world);
    group.shard_numels.push_back(rows * rest);
    group.shard_numel += rows * rest;
  }
  group_of_module_[m] = id;
  groups_.push_back(std::move(group));
}

// The root is the outermost fully_shard: no ancestor has one. Lazy init keeps the root's
// parameters unsharded after forward (backward needs them at once).
void FullyShard2::mark_roots() {
  const Model& model = context_.model;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    Group& group = groups_[g];
    group.root = true;
    group.root_group = static_cast<int>(g);
    for (int a = model.modules[group.module].parent; a >= 0; a = model.modules[a].parent)
      if (group_of_module_[a] >= 0) {
        group.root = false;
        group.root_group = group_of_module_[a];  // outermost ancestor wins: keep climbing
      }
  }
  post_forward_order_.assign(groups_.size(), {});
  pre_order_.clear();
  for (std::size_t m = 0; m < model.modules.size(); ++m)
    if (group_of_module_[m] >= 0) pre_order_.push_back(group_of_module_[m]);
}

DType FullyShard2::compute_dtype(int group) const { return groups_[group].param_dtype(); }

std::optional<DType> FullyShard2::input_cast(int module) const {
  const int g = group_of_module_[module];
  if (g < 0 || !groups_[g].config.cast_forward_inputs) return std::nullopt;
  return groups_[g].config.param_dtype;
}

std::optional<DType> FullyShard2::output_cast(int module) const {
  const int g = group_of_module_[module];
  return g < 0 ? std::nullopt : groups_[g].config.output_dtype;
}

bool FullyShard2::reshard_after_forward(const Group& group) const {
  if (!group.root) return group.config.reshard_after_forward.value_or(true);
  if (!context_.plan.torch_version.fsdp2_root_honours_reshard_after_forward()) return false;
  return group.config.reshard_after_forward.value_or(false);
}

// A shard group of one rank copies instead of gathering from 2.9 (PR #160135).
bool FullyShard2::gathers(const Group& group) const {
  return group.world > 1 || context_.plan.torch_version.fsdp2_gathers_one_rank();
}

void FullyShard2::begin_iteration() {
  for (std::vector<int>& order : post_forward_order_) order.clear();
  callback_roots_.clear();
  for (Group& group : groups_) {
    group.pre_backward_done = false;
    group.post_backward_done = false;
    group.accumulated = group.grads_pending;
  }
}

int FullyShard2::copy_kernel(int g, const char* what, Phase phase, const char* op_class, std::int64_t bytes,
                             std::vector<int> deps) {
  const Group& group = groups_[g];
  // The waits pending for the model's next op (DTensor results) are not FSDP2's: they stay for it.
  std::vector<int> pending = std::exchange(builder_.pending_deps, {});
  const int id = builder_.compute(fmt::format("fsdp2.{} {}", what, context_.label(group.module)), group.module, phase,
                                  op_class, 0, bytes, std::move(deps), OpRole::fsdp2_copy);
  builder_.pending_deps = std::move(pending);
  return id;
}

// FSDP2's kernels around a gather, with bytes read plus written (measured on an H100 with
// PyTorch 2.11: benchmarks/accuracy/gpu/measured/*.json, "scopes"):
//  - copy-in (foreach_all_gather, on the all-gather copy-in stream): under MixedPrecisionPolicy
//    a cast of each shard to param_dtype into one flat buffer, then _foreach_copy_ of that buffer
//    into the all-gather input; without a cast only the second copy;
//  - copy-out (foreach_all_gather_copy_out, when the group's forward or backward waits for it):
//    split_with_sizes_copy of the gathered buffer into the unsharded parameters, one strided
//    multi-tensor copy of all of them.
// A shard group of one rank that does not gather (2.9+) does neither: wait_for_unshard casts each
// shard (all_gather_inputs) and copies it into the unsharded parameter.
// The copy-in is priced on the compute stream: its kernels share the device with the model's
// (on one H100 the pre-backward casts ran at 0.59 of the copy rate beside the reduce-scatter
// stream's copies), and they run before the collective that waits for them either way.
void FullyShard2::unshard(int g, Phase phase, const char* why) {
  Group& group = groups_[g];
  if (group.unsharded || group.params.empty()) return;
  group.unsharded = true;
  group.copy_out_pending = true;
  const DType dtype = group.param_dtype();
  const int d = dtype_size(dtype);
  if (!gathers(group)) {
    group.all_gather_op = -1;
    return;
  }
  std::vector<std::string> names;
  for (int p : group.params) names.push_back(context_.model.params[p].fqn);
  // From the post-forward shards (already in param_dtype): no cast, a copy of 1/k of the
  // unsharded parameters, gathered over the post-forward run of k ranks.
  const bool post_forward = group.sharded_post_forward;
  const std::int64_t input_numel = post_forward ? group.post_forward_numel() : group.shard_numel;
  const std::int64_t copy_in_bytes = post_forward ? input_numel * 2 * d : group.copy_in_bytes();
  const int copy_in = copy_kernel(g, "all_gather_copy_in", phase, "elementwise", copy_in_bytes);
  // foreach_all_gather allocates on the copy-in stream: the shards cast into one flat buffer,
  // freed when it returns, and the flat output the collective fills (its input is a view of it).
  const MemoryTracker::Tensor cast =
      post_forward || !group.casts_params()
          ? ProgramBuilder::kNoTensor
          : builder_.allocate(group.shard_numel * d, MemoryTracker::Kind::other, kAllGatherCopyInStream);
  group.all_gather_output =
      builder_.allocate(group.unsharded_numel() * d, MemoryTracker::Kind::unsharded, kAllGatherCopyInStream);
  builder_.release(cast);
  // The shards it gathers are the ones the last optimizer step wrote.
  std::vector<int> deps = {copy_in};
  if (builder_.last_optimizer_op >= 0) deps.push_back(builder_.last_optimizer_op);
  group.all_gather_op =
      builder_.collective({.kind = CollectiveKind::all_gather,
                           .key = "c10d._allgather_base_",
                           .dims = group.shard_dims,
                           .block_size = post_forward ? group.post_forward_ranks : 0,
                           .bytes = group.unsharded_numel() * d,
                           .input_bytes = input_numel * d,
                           .output_bytes = group.unsharded_numel() * d,
                           .dtype = dtype,
                           .stream = "fsdp.all_gather",
                           .phase = phase,
                           .module = group.module,
                           .reason = fmt::format("fsdp2 group {} ({})", context_.label(group.module), why),
                           .params = std::move(names),
                           .deps = std::move(deps),
                           .role = OpRole::fsdp_unshard});
}

void FullyShard2::wait_for_unshard(int g, Phase phase) {
  Group& group = groups_[g];
  if (!group.copy_out_pending) return;
  group.copy_out_pending = false;
  const int d = dtype_size(group.param_dtype());
  // FSDPParam.to_unsharded frees them after the copy-out; freed here, just before it, the peak
  // (a running maximum over the ops) is the same.
  free_post_forward_shards(g);
  if (group.all_gather_op >= 0) {
    allocate_unsharded_params(g, false);
    copy_kernel(g, "all_gather_copy_out", phase, "multi_tensor_copy", group.unsharded_numel() * 2 * d,
                {group.all_gather_op});
    // A forward gather's output stays referenced until the next group's copy-out has waited for
    // it; a backward one is freed once its own copy-out has.
    const MemoryTracker::Tensor output = std::exchange(group.all_gather_output, ProgramBuilder::kNoTensor);
    builder_.release(phase == Phase::forward ? std::exchange(forward_gather_output_, output) : output);
    return;
  }
  allocate_unsharded_params(g, group.casts_params());
  copy_kernel(g, "copy_shards", phase, "elementwise", group.copy_in_bytes());
}

// The unsharded parameters the copy-out (or, for a group of one rank that does not gather, the
// copy of each shard) fills: a tensor each, on the compute stream. Without the gather each shard
// is first cast to param_dtype on its own (all_gather_inputs), and that temporary lives until the
// next parameter's replaces it.
void FullyShard2::allocate_unsharded_params(int g, bool cast_each) {
  Group& group = groups_[g];
  const int d = dtype_size(group.param_dtype());
  MemoryTracker::Tensor cast = ProgramBuilder::kNoTensor;
  for (std::int64_t shard : group.shard_numels) {
    if (cast_each) {
      const MemoryTracker::Tensor next = builder_.allocate(shard * d);
      builder_.release(std::exchange(cast, next));
    }
    group.unsharded_params.push_back(builder_.allocate(shard * group.world * d, MemoryTracker::Kind::unsharded));
  }
  builder_.release(cast);
}

void FullyShard2::reshard(int g) {
  Group& group = groups_[g];
  free_post_forward_shards(g);
  if (!group.unsharded) return;
  group.unsharded = false;
  group.copy_out_pending = false;
  for (MemoryTracker::Tensor param : group.unsharded_params) builder_.release(param);
  group.unsharded_params.clear();
}

// FSDPParam.to_sharded_post_forward: each parameter keeps its post-forward rank's 1/k of the
// unsharded (padded) parameter, a clone, so the unsharded parameters can be freed; the
// pre-backward all-gather then runs over the k ranks of the post-forward mesh only.
void FullyShard2::reshard_to_post_forward(int g, Phase phase) {
  Group& group = groups_[g];
  if (!group.unsharded) return;
  const int d = dtype_size(group.param_dtype());
  const std::int64_t bytes = group.post_forward_numel() * d;
  copy_kernel(g, "reshard_to_post_forward", phase, "elementwise", bytes * 2);
  group.post_forward_storage = builder_.allocate(bytes, MemoryTracker::Kind::unsharded);
  reshard(g);
  group.sharded_post_forward = true;
}

void FullyShard2::free_post_forward_shards(int g) {
  Group& group = groups_[g];
  if (!group.sharded_post_forward) return;
  group.sharded_post_forward = false;
  builder_.release(std::exchange(group.post_forward_storage, ProgramBuilder::kNoTensor));
}

void FullyShard2::pre_forward(int module, Mode mode, bool input_requires_grad) {
  const int g = group_of_module_[module];
  if (g < 0) return;
  if (mode == Mode::replay) {
    // Recomputation in backward: the pre-backward hook has gathered the group already, unless the
    // region reaches a group whose outputs have no gradient yet.
    unshard(g, Phase::recompute, "recompute pre-forward");
    wait_for_unshard(g, Phase::recompute);
    return;
  }
  unshard(g, Phase::forward, "pre-forward");
  wait_for_unshard(g, Phase::forward);
  // RegisterPostBackwardFunction on the inputs that need a gradient: it runs once autograd has
  // passed back through the whole module, i.e. after every tape entry the module pushes now.
  if (input_requires_grad)
    tape_.push([this, g]() {
      if (!groups_[g].post_backward_done) post_backward(g);
    });
}

void FullyShard2::post_forward(int module, Mode mode) {
  const int g = group_of_module_[module];
  if (g < 0 || mode == Mode::replay) return;
  if (reshard_after_forward(groups_[g])) {
    if (groups_[g].post_forward_ranks > 0) reshard_to_post_forward(g, Phase::forward);
    else reshard(g);
  }
  // The root's post-forward drops the last forward gather's output.
  if (groups_[g].root) builder_.release(std::exchange(forward_gather_output_, ProgramBuilder::kNoTensor));
  // A fully_shard module whose parameters all belong to its children has no FSDPParamGroup: it
  // neither enters the post-forward order (so backward prefetch skips it, from the group after it
  // to the one before) nor runs a pre-backward of its own.
  if (groups_[g].params.empty()) return;
  std::vector<int>& order = post_forward_order_[groups_[g].root_group];
  order.push_back(g);
  const int index = static_cast<int>(order.size()) - 1;
  // register_multi_grad_hook on the outputs: the first output gradient runs the pre-backward.
  tape_.push_output_hook([this, g, index]() { pre_backward(g, index); });
}

// FSDPParamGroup.pre_backward: gather the group, then prefetch the group whose post-forward ran
// just before this one's under the same root (_backward_prefetch), so its all-gather overlaps this
// group's backward. The first pre-backward under a root queues that root's final callback.
void FullyShard2::pre_backward(int g, int index) {
  Group& group = groups_[g];
  if (group.pre_backward_done) return;
  group.pre_backward_done = true;
  if (std::find(callback_roots_.begin(), callback_roots_.end(), group.root_group) == callback_roots_.end())
    callback_roots_.push_back(group.root_group);
  unshard(g, Phase::backward, "pre-backward");
  wait_for_unshard(g, Phase::backward);
  if (index > 0) unshard(post_forward_order_[group.root_group][index - 1], Phase::backward, "backward prefetch");
}

// FSDPParamGroup.post_backward: reshard, then one reduce-scatter of every gradient the group has
// (foreach_reduce), cast to reduce_dtype; HSDP all-reduces the reduced shard over the replicate
// dim. Without gradient sync the gradients stay unsharded and accumulate.
void FullyShard2::post_backward(int g) {
  Group& group = groups_[g];
  group.post_backward_done = true;
  const bool reshard_after_backward = context_.sync || group.config.reshard_after_backward_in_accumulation;
  if (reshard_after_backward) reshard(g);
  if (!context_.sync || !group.grads_pending) return;
  const DType reduce = group.reduce_dtype(context_.plan.torch_version);
  const int d = dtype_size(reduce);
  std::int64_t shard = 0;
  std::vector<std::string> names;
  std::vector<int> reduced;
  for (std::size_t i = 0; i < group.params.size(); ++i) {
    const int p = group.params[i];
    if (!has_grad_[p]) continue;
    has_grad_[p] = false;
    reduced.push_back(p);
    shard += group.shard_numels[i];
    names.push_back(context_.model.params[p].fqn);
  }
  group.grads_pending = false;
  const std::string& label = context_.label(group.module);
  // _get_grad_inner_tensor: a gradient Partial over a non-data-parallel dim (a SequenceParallel
  // norm's) is all-reduced there first, in the gradient's dtype.
  const DType grad_dtype = group.grad_dtype(context_.plan.torch_version);
  std::vector<int> partial_reductions;
  for (const int p : reduced)
    if (!context_.params[p].partial_grad_dims.empty())
      partial_reductions.push_back(
          all_reduce_partial_param_grad(context_, builder_, p, context_.params[p].local_numel * dtype_size(grad_dtype),
                                        grad_dtype, builder_.last_compute, Phase::backward));
  // foreach_reduce_scatter_copy_in: one chunk_cat of the unsharded gradients into the
  // reduce-scatter input, cast to reduce_dtype, on the compute stream. The input of the last
  // reduction is freed first (the stream has waited for it), the unsharded gradients after.
  const std::int64_t unsharded = shard * group.world;
  builder_.release(std::exchange(reduce_scatter_input_, ProgramBuilder::kNoTensor));
  reduce_scatter_input_ = builder_.allocate(unsharded * d);
  for (MemoryTracker::Tensor grad : group.unsharded_grads) builder_.release(grad);
  group.unsharded_grads.clear();
  const DType read = group.chunk_cat_dtype(context_.plan.torch_version);
  int id = copy_kernel(g, "reduce_scatter_copy_in", Phase::backward, "multi_tensor_copy",
                       unsharded * (dtype_size(read) + d), partial_reductions);
  const DivideFactors divide = divide_factors(group, reduce);
  if (divide.pre > 1)
    id = builder_.side_compute("fsdp.reduce_scatter", fmt::format("fsdp2.predivide {}", label), group.module,
                               Phase::backward, "elementwise", unsharded * 2 * d, {id}, OpRole::fsdp2_copy);
  const bool scatters = group.world > 1 || context_.plan.torch_version.fsdp2_reduce_scatters_one_rank();
  std::string stream = "fsdp.reduce_scatter";
  if (scatters) {
    id = builder_.collective({.kind = CollectiveKind::reduce_scatter,
                              .key = "c10d._reduce_scatter_base_",
                              .dims = group.shard_dims,
                              .bytes = shard * group.world * d,
                              .input_bytes = shard * group.world * d,
                              .output_bytes = shard * d,
                              .dtype = reduce,
                              .stream = stream,
                              .phase = Phase::backward,
                              .module = group.module,
                              .reason = fmt::format("fsdp2 group {} (post-backward)", label),
                              .params = names,
                              .deps = {id},
                              .role = OpRole::fsdp_reduce_grad});
  } else {
    // A group of one rank copies the input into the output (2.10+). Priced on the compute stream:
    // on one H100 these copies shared the HBM with the next group's casts rather than overlapping.
    id = copy_kernel(g, "reduce_copy", Phase::backward, "elementwise", shard * 2 * d, {id});
    stream.clear();
  }
  if (!group.replicate_dims.empty()) {
    stream = "fsdp.all_reduce";
    id = builder_.collective({.kind = CollectiveKind::all_reduce,
                              .key = "c10d.allreduce_",
                              .dims = group.replicate_dims,
                              .bytes = shard * d,
                              .dtype = reduce,
                              .stream = stream,
                              .phase = Phase::backward,
                              .module = group.module,
                              .reason = fmt::format("fsdp2 group {} (HSDP replicate)", label),
                              .params = std::move(names),
                              .deps = {id},
                              .role = OpRole::fsdp_replicate_grad});
  }
  id = post_reduce(g, shard, reduce, divide.post != 1, stream, id);
  if (id >= 0) builder_.iteration_grad_ops.push_back(id);
  // The reduced shard, on the reduce-scatter stream, becomes the parameters' sharded gradients
  // (views of it), cast first when they have another dtype.
  const MemoryTracker::Tensor output = builder_.allocate(
      shard * d, reduce == group.orig_dtype ? MemoryTracker::Kind::gradient : MemoryTracker::Kind::other,
      kReduceScatterStream);
  if (reduce != group.orig_dtype) {
    builder_.allocate(shard * dtype_size(group.orig_dtype), MemoryTracker::Kind::gradient, kReduceScatterStream);
    builder_.release(output);
  }
}

// NCCL divides float32 and bfloat16 sums itself (ReduceOp.AVG). Any other reduce dtype (float16,
// float64) over N > 1 data-parallel ranks divides in kernels of its own, against overflow: by
// the largest power of two p with p*p < N dividing N before the reduce-scatter, by N / p after.
FullyShard2::DivideFactors FullyShard2::divide_factors(const Group& group, DType reduce) const {
  DivideFactors factors;
  const int ranks = group.world * (group.replicate_dims.empty() ? 1 : context_.mesh.group_size(group.replicate_dims));
  if (reduce == DType::float32 || reduce == DType::bfloat16 || ranks == 1) return factors;
  while (ranks % factors.pre == 0 && ranks / factors.pre > factors.pre) factors.pre *= 2;
  factors.post = static_cast<double>(ranks) / factors.pre;
  return factors;
}

int FullyShard2::post_reduce(int g, std::int64_t shard, DType reduce, bool postdivide, const std::string& stream,
                             int after) {
  const Group& group = groups_[g];
  const auto kernel = [&](const char* what, std::int64_t bytes) {
    after = stream.empty() ? copy_kernel(g, what, Phase::backward, "elementwise", bytes, {after})
                           : builder_.side_compute(
                                 stream, fmt::format("fsdp2.{} {}", what, context_.label(group.module)), group.module,
                                 Phase::backward, "elementwise", bytes, {after}, OpRole::fsdp2_copy);
  };
  if (postdivide) kernel("postdivide", shard * 2 * dtype_size(reduce));
  // _cast_and_view_sharded_grads: the shard becomes the gradient in the parameters' own dtype.
  if (reduce != group.orig_dtype) kernel("cast_grads", shard * (dtype_size(reduce) + dtype_size(group.orig_dtype)));
  return after;
}

// _root_post_backward_final_callback, per root in the order the callbacks were queued: every group
// under it whose post-backward did not run (its inputs needed no gradient, so no hook fired), in
// module pre-order. The root's reduction thus comes last unless its inputs needed a gradient.
void FullyShard2::end_backward() {
  for (int root : callback_roots_)
    for (int g : pre_order_)
      if (groups_[g].root_group == root && !groups_[g].post_backward_done) post_backward(g);
  // The root's final callback waits for the last reduce-scatter and drops its input.
  builder_.release(std::exchange(reduce_scatter_input_, ProgramBuilder::kNoTensor));
}

std::vector<int> FullyShard2::mesh_dims(int group) const {
  std::vector<int> dims = groups_[group].replicate_dims;
  dims.insert(dims.end(), groups_[group].shard_dims.begin(), groups_[group].shard_dims.end());
  std::sort(dims.begin(), dims.end());
  return dims;
}

int FullyShard2::all_gather_op(int p) const {
  const int g = context_.params[p].fsdp2_group;
  return g >= 0 ? groups_[g].all_gather_op : -1;
}

void FullyShard2::grad_ready(int p, int /*producer*/) {
  Group& group = groups_[context_.params[p].fsdp2_group];
  if (has_grad_[p]) return;  // accumulates into the unsharded gradient it already has
  has_grad_[p] = true;
  group.grads_pending = true;
  // The gradient autograd writes is the unsharded parameter's, in its dtype (grad_dtype).
  const std::int64_t bytes =
      group.shard_numels[index_in_group_[p]] * group.world * dtype_size(group.grad_dtype(context_.plan.torch_version));
  group.unsharded_grads.push_back(builder_.allocate(bytes, MemoryTracker::Kind::gradient));
}

std::optional<FullyShard2::Shard> FullyShard2::resident_shard(int p) const {
  const Group& group = groups_[context_.params[p].fsdp2_group];
  if (group.config.offload_params) return std::nullopt;
  return Shard{shard_numel(p), group.orig_dtype};
}

std::vector<FullyShard2::Shard> FullyShard2::resident_shards() const {
  std::vector<Shard> shards;
  for (const Group& group : groups_)
    if (!group.config.offload_params)
      for (std::int64_t numel : group.shard_numels) shards.push_back({numel, group.orig_dtype});
  return shards;
}

void FullyShard2::report(PlanResult& result) const {
  const Model& model = context_.model;
  for (const Group& group : groups_) {
    FsdpParamGroupReport report;
    report.module = model.modules[group.module].fqn;
    report.group = context_.group_name(group.shard_dims);
    report.replicate_group = group.replicate_dims.empty() ? "" : context_.group_name(group.replicate_dims);
    report.group_dims = group.shard_dims;
    report.replicate_dims = group.replicate_dims;
    report.root = group.root;
    report.reshard_after_forward = reshard_after_forward(group);
    if (report.reshard_after_forward) report.post_forward_ranks = group.post_forward_ranks;
    for (int p : group.params) report.params.push_back(model.params[p].fqn);
    report.shard_numels = group.shard_numels;
    report.shard_numel = group.shard_numel;
    report.unsharded_numel = group.unsharded_numel();
    result.fsdp2.push_back(std::move(report));
  }
}

}  // namespace stratsim::core::planner
