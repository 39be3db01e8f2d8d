#include "ddp.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"

namespace stratsim::core::planner {

std::int64_t bucket_cap_bytes(const ReplicateStep& step) {
  return step.bucket_cap_mb ? static_cast<std::int64_t>(*step.bucket_cap_mb * kMiB) : kDefaultBucketBytesCap;
}

DataParallel::DataParallel(PlanContext& context, ProgramBuilder& builder) : context_(context), builder_(builder) {}

void DataParallel::apply_replicate(const ReplicateStep& step, const PlanStep& where) {
  const int m = context_.module_or_fail(step.module, where.where);
  // contract(): each composable API applies once per module; replicate refuses fully_shard's modules.
  if (context_.replicate_step[m] >= 0)
    throw PlanError(
        fmt::format("{}: Each distinct composable distributed API can only be applied to a module once. "
                    "replicate has already been applied to the following module: {}",
                    where.where, context_.model.modules[m].type));
  if (context_.fully_shard_step[m] >= 0)
    throw PlanError(
        fmt::format("{}: Cannot apply `replicate()` on a Module already managed by `fully_shard`", where.where));
  context_.replicate_step[m] = where.index;
  for (const std::string& name : step.ignored_modules)
    context_.module_or_fail(name, where.where, "ignored_modules entry");
  Instance ddp;
  ddp.module = m;
  ddp.config = step;
  ddp.dims = context_.dims_of(step.mesh_dims);
  ddp.where = where.where;
  instances_.push_back(std::move(ddp));
}

std::vector<BucketTensor> DataParallel::bucket_tensors(const Instance& ddp, const std::vector<int>& variables) const {
  const Model& model = context_.model;
  std::vector<BucketTensor> tensors;
  for (int v : variables) {
    const int p = ddp.params[v];
    tensors.push_back(
        {context_.params[p].local_numel, model.params[p].dtype, 0, model.modules[model.params[p].module].sparse});
  }
  return tensors;
}

void DataParallel::collect_params() {
  const Model& model = context_.model;
  for (int id = 0; id < static_cast<int>(instances_.size()); ++id) {
    Instance& ddp = instances_[id];
    const int m = ddp.module;
    const ReplicateStep& step = ddp.config;
    std::vector<bool> skip(model.modules.size(), false);
    for (const std::string& name : step.ignored_modules) {
      const int ignored = model.find_module(name);
      for (int sub = ignored; sub < model.modules[ignored].subtree_end; ++sub) skip[sub] = true;
    }
    // _collect_params: pre-order, own parameters first; fully-sharded (and replicated) subtrees and
    // ignored modules are skipped whole.
    for (int sub = m; sub < model.modules[m].subtree_end; ++sub) {
      if (skip[sub]) continue;
      bool managed_elsewhere =
          (sub != m && (context_.fully_shard_step[sub] >= 0 || context_.replicate_step[sub] >= 0)) ||
          (sub == m && context_.fully_shard_step[sub] >= 0);
      if (managed_elsewhere) {
        for (int s = sub; s < model.modules[sub].subtree_end; ++s) skip[s] = true;
        continue;
      }
      for (int p : model.modules[sub].params)
        if (model.params[p].requires_grad && context_.params[p].ddp < 0 && context_.params[p].fsdp_unit < 0 &&
            context_.params[p].fsdp2_group < 0)
          ddp.params.push_back(p);
    }
    // DistributedDataParallel(self._param_list) refuses a list with nothing to reduce.
    if (ddp.params.empty())
      throw PlanError(
          fmt::format("{}: DistributedDataParallel is not needed when a module doesn't have any parameter "
                      "that requires a gradient.",
                      ddp.where));
    for (std::size_t v = 0; v < ddp.params.size(); ++v) {
      context_.params[ddp.params[v]].ddp = id;
      context_.params[ddp.params[v]].ddp_index = static_cast<int>(v);
    }
    // Construction-time buckets (_ddp_init_helper): one bucket of everything unless
    // find_unused_parameters (and not static_graph), then [first cap, cap] over registration order.
    std::vector<int> registration(ddp.params.size());
    for (std::size_t v = 0; v < registration.size(); ++v) registration[v] = static_cast<int>(v);
    const std::int64_t cap = bucket_cap_bytes(step);
    std::vector<std::int64_t> limits{kUnlimitedBucketBytes};
    if (step.find_unused_parameters && !step.static_graph) {
      std::int64_t first = (step.bucket_cap_mb && context_.plan.torch_version.explicit_cap_sets_first_bucket())
                               ? cap
                               : kDefaultFirstBucketBytes;
      limits = {first, cap};
      if (first == cap) limits = {cap};
    }
    BucketAssignment assignment = compute_bucket_assignment_by_size(bucket_tensors(ddp, registration), limits);
    std::reverse(assignment.buckets.begin(), assignment.buckets.end());
    std::reverse(assignment.size_limits.begin(), assignment.size_limits.end());
    ddp.initial_buckets = assignment.buckets;
    ddp.initial_limits = assignment.size_limits;
    ddp.buckets = ddp.initial_buckets;
    ddp.limits = ddp.initial_limits;
    for (int p : ddp.params) ddp.bucket_buffer_bytes += context_.param_bytes(p);
  }
}

// replicate() builds DDP lazily in the first forward: the parameter shape check (allgather of the
// count, broadcast of shapes and strides) and, with init_sync, the broadcast of the module states
// from rank 0 in 250 MiB coalesced buckets.
void DataParallel::construct(Instance& ddp) {
  ddp.initialized = true;
  const std::vector<int>& dims = ddp.dims;
  const int size = context_.mesh.group_size(dims);
  std::int64_t meta = 0;
  for (int p : ddp.params) meta += 2 * static_cast<std::int64_t>(context_.model.params[p].shape.size());
  builder_.collective({.kind = CollectiveKind::all_gather,
                       .key = "c10d.allgather_",
                       .dims = dims,
                       .bytes = 8 * size,
                       .input_bytes = 8,
                       .output_bytes = 8 * size,
                       .dtype = DType::int64,
                       .stream = stream(ddp),
                       .phase = Phase::init,
                       .module = ddp.module,
                       .reason = "ddp verify parameter count",
                       .role = OpRole::ddp_param_count});
  builder_.collective({.kind = CollectiveKind::broadcast,
                       .key = "c10d.broadcast_",
                       .dims = dims,
                       .bytes = 8 * meta,
                       .dtype = DType::int64,
                       .stream = stream(ddp),
                       .phase = Phase::init,
                       .module = ddp.module,
                       .reason = "ddp verify parameter shapes",
                       .role = OpRole::ddp_param_shapes});
  if (ddp.config.init_sync && size > 1)
    for (int id : builder_.broadcast_module_states(ddp.params, dims, context_.act_dtype(), stream(ddp), ddp.module,
                                                   "ddp sync module states", OpRole::ddp_module_states))
      builder_.pending_deps.push_back(id);
}

void DataParallel::pre_forward(int module) {
  for (Instance& ddp : instances_) {
    if (ddp.module != module) continue;
    if (!ddp.initialized) construct(ddp);
    if (!ddp.rebuilt && !ddp.ready_order.empty()) rebuild(ddp);
    // require_backward_grad_sync = not no_sync: hooks only do work in synced backwards.
    ddp.hooks_active = context_.sync;
    ddp.delay_all_reduce = context_.sync && ddp.config.static_graph && ddp.synced_backwards == 0;
    const std::size_t buckets = ddp.buckets.size();
    ddp.pending.assign(buckets, 0);
    ddp.ready.assign(buckets, false);
    ddp.bucket_of.assign(ddp.params.size(), -1);
    for (std::size_t b = 0; b < buckets; ++b) {
      ddp.pending[b] = static_cast<int>(ddp.buckets[b].size());
      for (int v : ddp.buckets[b]) ddp.bucket_of[v] = static_cast<int>(b);
    }
    ddp.next_bucket = 0;
  }
}

// Reducer::rebuild_buckets: gradient-ready order, limits [first cap, cap], no re-sorting; then
// sync_bucket_indices broadcasts the layout from rank 0 (indices + count, then bucket sizes).
void DataParallel::rebuild(Instance& ddp) {
  const ReplicateStep& config = ddp.config;
  const std::int64_t cap = bucket_cap_bytes(config);
  const std::int64_t first = (config.bucket_cap_mb && context_.plan.torch_version.explicit_cap_sets_first_bucket())
                                 ? cap
                                 : kDefaultFirstBucketBytes;
  BucketAssignment assignment =
      compute_bucket_assignment_by_size(bucket_tensors(ddp, ddp.ready_order), {first, cap}, ddp.ready_order);
  ddp.buckets = assignment.buckets;
  ddp.limits = assignment.size_limits;
  ddp.rebuilt = true;
  ddp.rebuilt_at = context_.iteration;
  const auto broadcast_layout = [&](std::int64_t bytes, const char* reason, OpRole role) {
    builder_.pending_deps.push_back(builder_.collective({.kind = CollectiveKind::broadcast,
                                                         .key = "c10d.broadcast_",
                                                         .dims = ddp.dims,
                                                         .bytes = bytes,
                                                         .dtype = DType::int32,
                                                         .stream = stream(ddp),
                                                         .phase = Phase::forward,
                                                         .module = ddp.module,
                                                         .reason = reason,
                                                         .deps = {builder_.last_compute},
                                                         .role = role}));
  };
  broadcast_layout(4 * (static_cast<std::int64_t>(ddp.params.size()) + 1), "ddp rebuild bucket indices",
                   OpRole::ddp_bucket_indices);
  broadcast_layout(4 * static_cast<std::int64_t>(ddp.buckets.size()), "ddp rebuild bucket sizes",
                   OpRole::ddp_bucket_sizes);
}

void DataParallel::grad_ready(int p, int producer) {
  const ParamState& state = context_.params[p];
  if (state.ddp >= 0) mark_ready(instances_[state.ddp], state.ddp_index, producer);
}

bool DataParallel::gradient_as_bucket_view(int p) const {
  const int ddp = context_.params[p].ddp;
  return ddp >= 0 && instances_[ddp].config.gradient_as_bucket_view;
}

void DataParallel::mark_ready(Instance& ddp, int variable, int producer) {
  if (!ddp.hooks_active) return;
  const bool should_rebuild = (ddp.config.static_graph || !ddp.config.find_unused_parameters) && !ddp.rebuilt;
  // Static graph records the ready order in its second synced iteration (the first only counts).
  const bool record = should_rebuild && (!ddp.config.static_graph || ddp.synced_backwards == 1);
  if (record) ddp.ready_order.push_back(variable);
  if (ddp.synced_backwards == 0) ddp.first_ready_order.push_back(variable);
  if (ddp.delay_all_reduce) return;
  const int bucket = ddp.bucket_of[variable];
  if (--ddp.pending[bucket] == 0) ddp.ready[bucket] = true;
  // Buckets launch strictly in index order.
  while (ddp.next_bucket < static_cast<int>(ddp.buckets.size()) && ddp.ready[ddp.next_bucket])
    launch(ddp, ddp.next_bucket++, producer);
  if (ddp.next_bucket == static_cast<int>(ddp.buckets.size()) && ddp.config.find_unused_parameters &&
      !ddp.config.static_graph && ddp.ready[ddp.buckets.size() - 1]) {
    ddp.ready.back() = false;  // issue the used-map reduction once
    reduce_used_map(ddp, producer);
  }
}

// find_unused_parameters (and static graph's first iteration) all-reduce local_used_map, one int32
// per parameter.
void DataParallel::reduce_used_map(Instance& ddp, int producer) {
  const std::int64_t bytes = 4 * static_cast<std::int64_t>(ddp.params.size());
  builder_.iteration_grad_ops.push_back(builder_.collective({.kind = CollectiveKind::all_reduce,
                                                             .key = "c10d.allreduce_",
                                                             .dims = ddp.dims,
                                                             .bytes = bytes,
                                                             .dtype = DType::int32,
                                                             .stream = stream(ddp),
                                                             .phase = Phase::backward,
                                                             .module = ddp.module,
                                                             .reason = "ddp local_used_map",
                                                             .deps = {producer},
                                                             .role = OpRole::ddp_used_map}));
}

void DataParallel::launch(Instance& ddp, int bucket, int producer) {
  const CommHook hook = ddp.config.comm_hook;
  const bool compress = hook == CommHook::fp16_compress || hook == CommHook::bf16_compress;
  std::int64_t bytes = 0;
  DType dtype = DType::float32;
  std::vector<std::string> names;
  for (int v : ddp.buckets[bucket]) {
    const int p = ddp.params[v];
    dtype = context_.model.params[p].dtype;
    bytes += context_.params[p].local_numel * (compress ? 2 : dtype_size(dtype));
    names.push_back(context_.model.params[p].fqn);
  }
  if (hook == CommHook::fp16_compress) dtype = DType::float16;
  if (hook == CommHook::bf16_compress) dtype = DType::bfloat16;
  builder_.iteration_grad_ops.push_back(builder_.collective({.kind = CollectiveKind::all_reduce,
                                                             .key = "c10d.allreduce_",
                                                             .dims = ddp.dims,
                                                             .bytes = bytes,
                                                             .dtype = dtype,
                                                             .stream = stream(ddp),
                                                             .phase = Phase::backward,
                                                             .module = ddp.module,
                                                             .reason = fmt::format("ddp bucket {}", bucket),
                                                             .params = std::move(names),
                                                             .deps = {producer},
                                                             .role = OpRole::ddp_bucket}));
}

void DataParallel::end_backward() {
  for (Instance& ddp : instances_) {
    if (!ddp.hooks_active) continue;
    if (ddp.delay_all_reduce) {
      // Static graph, first iteration: _DDPSink queues delay_all_reduce after backward: the used
      // map first, then every bucket of the construction-time layout.
      reduce_used_map(ddp, builder_.last_compute);
      for (int b = 0; b < static_cast<int>(ddp.buckets.size()); ++b) launch(ddp, b, builder_.last_compute);
    }
    ++ddp.synced_backwards;
  }
}

std::int64_t DataParallel::bucket_buffer_bytes() const {
  std::int64_t bytes = 0;
  for (const Instance& ddp : instances_)
    if (!ddp.config.gradient_as_bucket_view) bytes += ddp.bucket_buffer_bytes;
  return bytes;
}

std::vector<DdpBucket> DataParallel::to_buckets(const Instance& ddp, const std::vector<std::vector<int>>& buckets,
                                                const std::vector<std::int64_t>& limits) const {
  std::vector<DdpBucket> out;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    DdpBucket bucket;
    bucket.indices = buckets[b];
    bucket.size_limit = b < limits.size() ? limits[b] : 0;
    for (int v : buckets[b]) {
      const int p = ddp.params[v];
      bucket.params.push_back(context_.model.params[p].fqn);
      bucket.bytes += context_.param_bytes(p);
    }
    out.push_back(std::move(bucket));
  }
  return out;
}

void DataParallel::report(PlanResult& result) const {
  const Model& model = context_.model;
  for (const Instance& ddp : instances_) {
    DdpReport report;
    report.module = model.modules[ddp.module].fqn;
    report.group = context_.group_name(ddp.dims);
    report.group_dims = ddp.dims;
    report.group_size = context_.mesh.group_size(ddp.dims);
    report.comm_hook = ddp.config.comm_hook;
    report.init_sync = ddp.config.init_sync;
    const std::string& prefix = model.modules[ddp.module].fqn;
    for (int p : ddp.params)
      report.params.push_back(prefix.empty() ? model.params[p].fqn : model.params[p].fqn.substr(prefix.size() + 1));
    report.initial = to_buckets(ddp, ddp.initial_buckets, ddp.initial_limits);
    if (ddp.rebuilt) report.rebuilt = to_buckets(ddp, ddp.buckets, ddp.limits);
    report.rebuilt_at_iteration = ddp.rebuilt_at;
    // Compiled DDP (python_reducer): Inductor fuses the per-parameter all-reduces in backward order.
    std::vector<std::int64_t> bytes;
    for (int v : ddp.first_ready_order) bytes.push_back(context_.param_bytes(ddp.params[v]));
    const std::int64_t cap = bucket_cap_bytes(ddp.config);
    for (auto [begin, end] : inductor_ddp_fusion(bytes, cap)) {
      std::vector<int> indices(ddp.first_ready_order.begin() + begin, ddp.first_ready_order.begin() + end);
      const std::int64_t threshold = report.compiled.empty() ? kMiB : cap;  // Inductor's first bucket: 1 MiB
      report.compiled.push_back(to_buckets(ddp, {indices}, {threshold}).front());
    }
    result.ddp.push_back(std::move(report));
  }
}

}  // namespace stratsim::core::planner
