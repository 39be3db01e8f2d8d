#include "fsdp.hpp"

#include <algorithm>
#include <functional>
#include <utility>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"

namespace stratsim::core::planner {

FullyShard::FullyShard(PlanContext& context, ProgramBuilder& builder, BackwardTape& tape)
    : context_(context), builder_(builder), tape_(tape) {
  unit_of_module_.assign(context.model.modules.size(), -1);
}

// Where each parameter starts in the unit's flat parameter. use_orig_params aligns every
// parameter to 16 bytes of the compute dtype (FlatParamHandle._init_flat_param_and_metadata).
std::vector<std::int64_t> FullyShard::flat_offsets(const Unit& unit) const {
  const DType compute_dtype = unit.param_dtype();
  const std::int64_t aligned = unit.config.use_orig_params ? 16 / dtype_size(compute_dtype) : 1;
  std::vector<std::int64_t> offsets;
  std::int64_t numel = 0;
  for (int p : unit.params) {
    if (numel % aligned != 0) numel += aligned - numel % aligned;
    offsets.push_back(numel);
    numel += context_.params[p].local_numel;
  }
  return offsets;
}

void FullyShard::apply_fully_shard(const FullyShardStep& step, const PlanStep& where) {
  const int m = context_.module_or_fail(step.module, where.where);
  if (context_.fully_shard_step[m] >= 0)
    throw PlanError(
        fmt::format("{}: Each distinct composable distributed API can only be applied to a module once. "
                    "fully_shard has already been applied to the following module: {}",
                    where.where, context_.model.modules[m].type));
  // _get_ignored_modules: explicit ignored modules plus every subtree fully_shard cannot compose
  // with (modules under replicate()).
  std::vector<bool> ignored(context_.model.modules.size(), false);
  for (const std::string& name : step.ignored_modules) {
    int index = context_.module_or_fail(name, where.where, "ignored_modules entry");
    for (int sub = index; sub < context_.model.modules[index].subtree_end; ++sub) ignored[sub] = true;
  }
  for (int sub = m; sub < context_.model.modules[m].subtree_end; ++sub)
    if (context_.replicate_step[sub] >= 0)
      for (int s = sub; s < context_.model.modules[sub].subtree_end; ++s) ignored[s] = true;

  // Auto wrapping (_recursive_wrap): which modules below `m` become units, in post-order.
  std::vector<int> wrapped;
  const bool by_type = !step.wrap_module_types.empty();
  const bool by_size = step.wrap_min_num_params.has_value();
  std::function<std::int64_t(int, bool)> recurse = [&](int module, bool only_children) -> std::int64_t {
    std::int64_t nonwrapped = 0;
    for (int sub = module; sub < context_.model.modules[module].subtree_end; ++sub)
      if (!ignored[sub])
        for (int p : context_.model.modules[sub].params)
          if (context_.params[p].fsdp_unit < 0 && context_.params[p].ddp < 0)
            nonwrapped += context_.params[p].local_numel;
    const Module& mod = context_.model.modules[module];
    bool recurse_ok = by_type || (by_size && nonwrapped >= *step.wrap_min_num_params);
    if (!recurse_ok) return 0;
    std::int64_t wrapped_numel = 0;
    for (int child : mod.children) {
      if (ignored[child] || context_.fully_shard_step[child] >= 0) continue;
      wrapped_numel += recurse(child, false);
    }
    const std::int64_t remainder = nonwrapped - wrapped_numel;
    bool wrap_self = false;
    if (!only_children) {
      if (by_type)
        wrap_self = std::find(step.wrap_module_types.begin(), step.wrap_module_types.end(), mod.type) !=
                    step.wrap_module_types.end();
      else wrap_self = remainder >= *step.wrap_min_num_params && mod.type != "ModuleList" && mod.type != "ModuleDict";
    }
    if (wrap_self) {
      wrapped.push_back(module);
      return nonwrapped;
    }
    return wrapped_numel;
  };
  if (by_type || by_size) recurse(m, true);
  wrapped.push_back(m);  // the module fully_shard was called on is always a unit
  for (int module : wrapped) {
    context_.fully_shard_step[module] = where.index;
    build_unit(module, step, ignored, where.index);
  }
}

void FullyShard::build_unit(int module, const FullyShardStep& step, const std::vector<bool>& ignored, int step_index) {
  Unit unit;
  unit.module = module;
  unit.config = step;
  unit.step_index = step_index;
  std::vector<int> dims = context_.dims_of(step.mesh_dims);
  if (step.mesh_dims.size() == 2) {
    unit.replicate_dims = {dims[0]};
    unit.shard_dims = {dims[1]};
  } else {
    unit.shard_dims = dims;
  }
  const int unit_id = static_cast<int>(units_.size());
  for (int sub = module; sub < context_.model.modules[module].subtree_end; ++sub) {
    if (ignored[sub]) continue;
    for (int p : context_.model.modules[sub].params) {
      if (context_.params[p].fsdp_unit >= 0 || context_.params[p].ddp >= 0 || !context_.model.params[p].requires_grad)
        continue;
      context_.params[p].fsdp_unit = unit_id;
      unit.params.push_back(p);
    }
  }
  // Flat parameter size. use_orig_params aligns every parameter to 16 bytes of the compute dtype
  // and pads the total to a multiple of the shard group size.
  const int world = context_.mesh.group_size(unit.shard_dims);
  if (!unit.params.empty()) unit.orig_dtype = context_.model.params[unit.params.front()].dtype;
  const std::vector<std::int64_t> offsets = flat_offsets(unit);
  std::int64_t numel = offsets.empty() ? 0 : offsets.back() + context_.params[unit.params.back()].local_numel;
  if (step.use_orig_params && numel % world != 0) numel += world - numel % world;
  unit.numel = numel;
  const bool sharded = step.strategy != ShardingStrategy::no_shard;
  unit.shard = sharded ? ceil_div(numel, world) : numel;
  unit.padded = sharded ? unit.shard * world : numel;
  unit_of_module_[module] = unit_id;
  units_.push_back(std::move(unit));
}

int FullyShard::all_gather(int u, Phase phase, const char* why) {
  Unit& unit = units_[u];
  const DType dtype = unit.param_dtype();
  const int d = dtype_size(dtype);
  std::vector<int> deps;
  // limit_all_gathers: at most two un-freed all-gathers in flight; the CPU waits for the oldest
  // free event before issuing another.
  if (unit.config.limit_all_gathers && free_events_.size() >= 2) {
    deps.push_back(free_events_.front());
    free_events_.erase(free_events_.begin());
  }
  // The shards it gathers are the ones the last optimizer step wrote.
  deps.push_back(builder_.last_optimizer_op);
  std::vector<std::string> names;
  for (int p : unit.params) names.push_back(context_.model.params[p].fqn);
  const std::string& label = context_.label(unit.module);
  const int id = builder_.collective({.kind = CollectiveKind::all_gather,
                                      .key = "c10d._allgather_base_",
                                      .dims = unit.shard_dims,
                                      .bytes = unit.padded * d,
                                      .input_bytes = unit.shard * d,
                                      .output_bytes = unit.padded * d,
                                      .dtype = dtype,
                                      .stream = "fsdp.unshard",
                                      .phase = phase,
                                      .module = unit.module,
                                      .reason = fmt::format("fsdp unit {} ({})", label, why),
                                      .params = std::move(names),
                                      .deps = deps,
                                      .role = OpRole::fsdp_unshard});
  unit.unsharded = true;
  unit.all_gather_op = id;
  unit.unsharded_storage = builder_.allocate(unit.padded * d, MemoryTracker::Kind::unsharded, "fsdp.unshard");
  return id;
}

void FullyShard::reshard(int u) {
  Unit& unit = units_[u];
  if (!unit.unsharded) return;
  unit.unsharded = false;
  builder_.release(std::exchange(unit.unsharded_storage, ProgramBuilder::kNoTensor));
  if (unit.config.limit_all_gathers) free_events_.push_back(builder_.last_compute);
}

int FullyShard::next_backward_unit(int u) const {
  // _exec_order_utils: the unit whose post-forward ran just before this one's.
  // Looked up by index, not by scanning every unit: a scan per pre-backward made planning
  // quadratic in the number of units (18% of the instructions of a 10,000-block plan). The check
  // keeps a unit that ran forward twice (and so moved to a later index) from answering for its
  // old one, as the scan did.
  const int index = units_[u].post_forward_order;
  if (index <= 0) return -1;
  const int other = unit_by_post_forward_order_[index - 1];
  return units_[other].post_forward_order == index - 1 ? other : -1;
}

void FullyShard::pre_forward_unit(int u, Mode mode) {
  Unit& unit = units_[u];
  if (!unit.has_handle()) return;
  if (mode == Mode::replay) {
    // A recomputed region re-enters units whose pre-backward has not fired yet: they run a
    // normal pre-forward (FSDP returns early only in BACKWARD_PRE state).
    if (!unit.backward_pre_done && !unit.unsharded) all_gather(u, Phase::recompute, "recompute pre-forward");
    return;
  }
  if (!context_.first_iteration_done) first_forward_unit_order_.push_back(u);
  if (unit.prefetched) {
    unit.prefetched = false;  // its views were made when it was prefetched
  } else {
    if (!unit.unsharded) all_gather(u, Phase::forward, "pre-forward");
    mark_views(u, mode);
  }
  // forward_prefetch follows the first iteration's order, so it takes effect from iteration 2.
  if (unit.config.forward_prefetch && context_.first_iteration_done) {
    auto it = std::find(first_forward_unit_order_.begin(), first_forward_unit_order_.end(), u);
    if (it != first_forward_unit_order_.end() && it + 1 != first_forward_unit_order_.end()) {
      Unit& next = units_[*(it + 1)];
      if (!next.unsharded && !next.prefetched) {
        all_gather(*(it + 1), Phase::forward, "forward prefetch");
        next.prefetched = true;
        mark_views(*(it + 1), mode);
      }
    }
  }
}

void FullyShard::post_forward_unit(int u, Mode mode) {
  Unit& unit = units_[u];
  if (!unit.has_handle()) return;
  const ShardingStrategy s = unit.config.strategy;
  const bool reshard_after_forward = s == ShardingStrategy::full_shard || s == ShardingStrategy::hybrid_shard;
  // _post_forward returns at once in a recomputed forward that runs after the unit's
  // pre-backward (handle state BACKWARD_PRE): the parameters stay unsharded for the backward.
  if (mode == Mode::replay && unit.backward_pre_done) return;
  if (!unit.root && reshard_after_forward) reshard(u);
  if (mode == Mode::replay) return;
  unit.post_forward_order = post_forward_counter_++;
  unit_by_post_forward_order_.push_back(u);
  // The pre-backward hook sits on the unit's outputs: it fires when their gradient arrives.
  tape_.push_output_hook([this, u]() { pre_backward(u); });
}

// Every unshard in forward makes the parameters views of the flat parameter (_use_unsharded_views:
// one split, one view per parameter). Their gradients reach the flat parameter's AccumulateGrad,
// whose hook is the post-backward, only through that split node, and autograd's ready queue runs
// the node with the highest sequence number first: the split, made at the unshard, waits until
// backward has come back to the point where it was made. So the reduction sits on the tape where
// the views were made -- the unit's pre-forward, or the pre-forward of the unit before it when
// forward_prefetch made them early -- not where its last gradient is computed. The root's
// reduction comes last, a prefetched unit's after the next backward all-gather, and tensor
// parallel's input-gradient all-reduces inside the unit before it (PyTorch 2.15, recorded).
void FullyShard::mark_views(int u, Mode mode) {
  if (mode == Mode::replay) return;  // the recomputation's views carry no gradient
  ++units_[u].views_pending;
  tape_.push([this, u]() { views_reached(u); });
}

void FullyShard::views_reached(int u) {
  Unit& unit = units_[u];
  if (--unit.views_pending > 0 || unit.reduced) return;
  if (unit.used_params > 0 && unit.pending_grads == 0) post_backward(u, builder_.last_compute);
}

void FullyShard::pre_backward(int u) {
  Unit& unit = units_[u];
  if (unit.prefetched) unit.prefetched = false;
  else if (!unit.unsharded) all_gather(u, Phase::backward, "pre-backward");
  unit.backward_pre_done = true;
  if (unit.config.backward_prefetch != BackwardPrefetch::backward_pre) return;
  const int next = next_backward_unit(u);
  if (next < 0) return;
  Unit& target = units_[next];
  if (target.has_handle() && !target.unsharded && !target.backward_pre_done && !target.prefetched) {
    all_gather(next, Phase::backward, "backward prefetch");
    target.prefetched = true;
  }
}

void FullyShard::post_backward(int u, int producer) {
  Unit& unit = units_[u];
  unit.reduced = true;
  const ShardingStrategy s = unit.config.strategy;
  const bool sharded = s != ShardingStrategy::no_shard;
  const bool reshard_after_forward = s == ShardingStrategy::full_shard || s == ShardingStrategy::hybrid_shard;
  if (sharded && (context_.sync || reshard_after_forward)) reshard(u);
  if (unit.config.backward_prefetch == BackwardPrefetch::backward_post) {
    const int next = next_backward_unit(u);
    if (next >= 0 && units_[next].has_handle() && !units_[next].unsharded && !units_[next].backward_pre_done &&
        !units_[next].prefetched) {
      all_gather(next, Phase::backward, "backward prefetch");
      units_[next].prefetched = true;
    }
  }
  if (!context_.sync) return;  // no_sync: gradients accumulate unsharded
  const DType reduce = unit.config.reduce_dtype.value_or(unit.param_dtype());
  const int d = dtype_size(reduce);
  std::vector<std::string> names;
  for (int p : unit.params) names.push_back(context_.model.params[p].fqn);
  const std::string& label = context_.label(unit.module);
  int id = -1;
  if (!sharded) {
    id = builder_.collective({.kind = CollectiveKind::all_reduce,
                              .key = "c10d.allreduce_",
                              .dims = unit.shard_dims,
                              .bytes = unit.numel * d,
                              .dtype = reduce,
                              .stream = "fsdp.reduce_scatter",
                              .phase = Phase::backward,
                              .module = unit.module,
                              .reason = fmt::format("fsdp unit {} (NO_SHARD gradient)", label),
                              .params = names,
                              .deps = {producer},
                              .role = OpRole::fsdp_reduce_grad});
  } else {
    id = builder_.collective({.kind = CollectiveKind::reduce_scatter,
                              .key = "c10d._reduce_scatter_base_",
                              .dims = unit.shard_dims,
                              .bytes = unit.padded * d,
                              .input_bytes = unit.padded * d,
                              .output_bytes = unit.shard * d,
                              .dtype = reduce,
                              .stream = "fsdp.reduce_scatter",
                              .phase = Phase::backward,
                              .module = unit.module,
                              .reason = fmt::format("fsdp unit {} (post-backward)", label),
                              .params = names,
                              .deps = {producer},
                              .role = OpRole::fsdp_reduce_grad});
    if (!unit.replicate_dims.empty())
      id = builder_.collective({.kind = CollectiveKind::all_reduce,
                                .key = "c10d.allreduce_",
                                .dims = unit.replicate_dims,
                                .bytes = unit.shard * d,
                                .dtype = reduce,
                                .stream = "fsdp.all_reduce",
                                .phase = Phase::backward,
                                .module = unit.module,
                                .reason = fmt::format("fsdp unit {} (HSDP replicate)", label),
                                .params = names,
                                .deps = {id},
                                .role = OpRole::fsdp_replicate_grad});
  }
  builder_.iteration_grad_ops.push_back(id);
  // The unsharded gradient becomes the sharded one, which the reduce-scatter's stream allocates.
  builder_.release(std::exchange(unit.grad_storage, ProgramBuilder::kNoTensor));
  builder_.allocate(unit.shard * dtype_size(unit.orig_dtype), MemoryTracker::Kind::gradient, "fsdp.reduce_scatter");
  unit.grad_allocated = false;
}

// A unit is a root when no ancestor unit's lazy init reaches it (composable fully_shard). The root
// marks the states it finds with _get_fsdp_states_with_modules, which does not descend into modules
// managed by replicate() (not _composable), so a unit below a replicated module stays its own root
// even under an outer unit (test_compose.py "1fm1fm,1r1r,1fm").
void FullyShard::mark_roots() {
  const Model& model = context_.model;
  for (Unit& unit : units_) {
    unit.root = true;
    if (context_.replicate_step[unit.module] >= 0) continue;
    for (int a = model.modules[unit.module].parent; a >= 0; a = model.modules[a].parent) {
      if (context_.replicate_step[a] >= 0) break;
      if (unit_of_module_[a] >= 0) {
        unit.root = false;
        break;
      }
    }
  }
}

void FullyShard::start() {
  for (Unit& unit : units_) unit.unsharded = unit.config.strategy == ShardingStrategy::no_shard;
  for (Unit& unit : units_)
    if (unit.config.strategy == ShardingStrategy::no_shard)
      unit.unsharded_storage =
          builder_.allocate(unit.padded * dtype_size(unit.orig_dtype), MemoryTracker::Kind::unsharded);
}

DType FullyShard::compute_dtype(int unit) const { return units_[unit].param_dtype(); }

void FullyShard::begin_iteration() {
  post_forward_counter_ = 0;
  unit_by_post_forward_order_.clear();
  for (Unit& unit : units_) {
    unit.backward_pre_done = false;
    unit.prefetched = false;
    // The flat parameter's post-backward hook fires once the gradients of the parameters the
    // forward used are in: an unused parameter never gets one, and must not hold the
    // reduce-scatter back (FSDP1's hook sits on the FlatParameter's AccumulateGrad).
    unit.used_params = static_cast<int>(
        std::count_if(unit.params.begin(), unit.params.end(), [&](int p) { return context_.used_in_forward[p]; }));
    unit.pending_grads = unit.used_params;
    unit.views_pending = 0;
    unit.reduced = false;
    unit.post_forward_order = -1;
  }
  if (context_.iteration == 1) sync_module_states();
}

void FullyShard::pre_forward(int module, Mode mode) {
  if (unit_of_module_[module] >= 0) pre_forward_unit(unit_of_module_[module], mode);
}

void FullyShard::post_forward(int module, Mode mode) {
  if (unit_of_module_[module] >= 0) post_forward_unit(unit_of_module_[module], mode);
}

int FullyShard::all_gather_op(int p) const {
  const int unit = context_.params[p].fsdp_unit;
  return unit >= 0 ? units_[unit].all_gather_op : -1;
}

void FullyShard::grad_ready(int p, int producer) {
  Unit& unit = units_[context_.params[p].fsdp_unit];
  if (!unit.grad_allocated) {
    unit.grad_allocated = true;
    unit.grad_storage = builder_.allocate(unit.padded * dtype_size(unit.param_dtype()), MemoryTracker::Kind::gradient);
  }
  // Normally the views' node comes later (views_reached); a gradient that arrives after it (a
  // parameter used outside the unit's forward) reduces now.
  if (--unit.pending_grads == 0 && unit.views_pending == 0 && !unit.reduced)
    post_backward(context_.params[p].fsdp_unit, producer);
}

void FullyShard::sync_module_states() {
  for (const Unit& unit : units_) {
    if (!unit.config.sync_module_states || !unit.has_handle()) continue;
    std::vector<std::vector<int>> groups{unit.shard_dims};
    if (!unit.replicate_dims.empty()) groups.push_back(unit.replicate_dims);
    for (const auto& dims : groups)
      builder_.broadcast_module_states(unit.params, dims, unit.orig_dtype, "fsdp.unshard", unit.module,
                                       "fsdp sync_module_states", OpRole::fsdp_module_states);
  }
}

std::vector<FullyShard::Shard> FullyShard::resident_shards() const {
  std::vector<Shard> shards;
  for (const Unit& unit : units_)
    if (!unit.config.cpu_offload) shards.push_back({unit.shard, unit.orig_dtype});  // offloaded: on the CPU
  return shards;
}

void FullyShard::report(PlanResult& result) const {
  const Model& model = context_.model;
  for (const Unit& unit : units_) {
    FsdpUnitReport report;
    report.module = model.modules[unit.module].fqn;
    report.group = context_.group_name(unit.shard_dims);
    report.replicate_group = unit.replicate_dims.empty() ? "" : context_.group_name(unit.replicate_dims);
    report.group_dims = unit.shard_dims;
    report.replicate_dims = unit.replicate_dims;
    report.root = unit.root;
    for (int p : unit.params) report.params.push_back(model.params[p].fqn);
    report.offsets = flat_offsets(unit);
    report.numel = unit.numel;
    report.shard_numel = unit.shard;
    report.padded_numel = unit.padded;
    report.strategy = unit.config.strategy;
    report.sync_module_states = unit.config.sync_module_states;
    result.fsdp.push_back(std::move(report));
  }
}

}  // namespace stratsim::core::planner
