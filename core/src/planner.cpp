// The strategy core. One Planner walks a training run the way PyTorch executes it: module hooks in
// forward (DDP pre-forward, FSDP unshard, DTensor input/output redistribution), a backward tape
// replayed in reverse (gradient-ready events feed the DDP Reducer and FSDP post-backward hooks,
// checkpointed regions recompute), then the optimizer step. Every collective and compute op it
// meets goes into the program with its stream and dependencies.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "planner_state.hpp"
#include "stratsim/core/bucketing.hpp"
#include "stratsim/core/errors.hpp"

namespace stratsim::core {
namespace {

using detail::DdpInstance;
using detail::FsdpUnit;
using detail::ParamState;
using detail::TPState;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
std::int64_t product(const std::vector<std::int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

// fnmatch-style match of one dotted pattern against a dotted name, atom by atom, as
// parallelize_module resolves its plan keys.
bool glob_atom(std::string_view pattern, std::string_view text) {
  if (pattern.empty()) return text.empty();
  if (pattern[0] == '*') {
    for (std::size_t i = 0; i <= text.size(); ++i)
      if (glob_atom(pattern.substr(1), text.substr(i))) return true;
    return false;
  }
  if (text.empty()) return false;
  return (pattern[0] == '?' || pattern[0] == text[0]) && glob_atom(pattern.substr(1), text.substr(1));
}
bool glob_fqn(const std::string& pattern, const std::string& name) {
  std::vector<std::string> pa, na;
  auto split = [](const std::string& s, std::vector<std::string>& out) {
    std::size_t start = 0;
    while (true) {
      std::size_t dot = s.find('.', start);
      out.push_back(s.substr(start, dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  };
  split(pattern, pa);
  split(name, na);
  if (pa.size() != na.size()) return false;
  for (std::size_t i = 0; i < pa.size(); ++i)
    if (!glob_atom(pa[i], na[i])) return false;
  return true;
}

// The running activation: local shape [batch, (seq,) features] on the planned rank.
struct Activation {
  std::vector<std::int64_t> shape;
  bool requires_grad = false;
  DType dtype = DType::float32;
  std::int64_t features() const { return shape.back(); }
  std::int64_t tokens() const { return product(shape) / shape.back(); }
  std::int64_t bytes() const { return product(shape) * dtype_size(dtype); }
  int rank() const { return static_cast<int>(shape.size()); }
};

// Bytes of `tensor` with dimension `dim` padded to a multiple of `chunks`.
std::int64_t padded_bytes(const Activation& tensor, int dim, int chunks) {
  const std::int64_t extent = tensor.shape[static_cast<std::size_t>(dim)];
  if (extent == 0) return 0;
  return tensor.bytes() / extent * (ceil_div(extent, chunks) * chunks);
}

struct LeafCost {
  double forward_flops = 0, backward_flops = 0;
  std::int64_t forward_bytes = 0, backward_bytes = 0, saved_bytes = 0;
  std::string op_class;
};

// normal: plain forward. checkpointed: inside a checkpoint region on the first pass (nothing saved,
// backward entries still recorded). replay: the region's recomputation during backward (saves
// activations, records nothing, phase "recompute").
enum class Mode { normal, checkpointed, replay };

class Planner {
 public:
  Planner(const Model& model, const Plan& plan, const PlanOptions& options)
      : model_(model), plan_(plan), mesh_(plan.mesh), options_(options) {}

  PlanResult run();

 private:
  const Model& model_;
  const Plan& plan_;
  const DeviceMesh& mesh_;
  PlanOptions options_;
  PlanResult result_;

  std::vector<ParamState> params_;
  std::vector<TPState> tp_;
  std::vector<bool> checkpointed_;
  std::vector<int> unit_of_module_;          // FSDP unit rooted at a module, -1 if none
  std::vector<int> fully_shard_step_;        // plan step that put fully_shard on a module
  std::vector<int> replicate_step_;          // plan step that put replicate on a module
  std::vector<FsdpUnit> units_;
  std::vector<DdpInstance> ddps_;
  std::vector<std::string> step_where_;

  // Per-iteration runtime.
  int iteration_ = 1;
  bool sync_ = true;
  std::vector<std::function<void()>> tape_;
  // FSDP pre-backward entries at the end of tape_ whose hooks sit on the current activation
  // tensor: tape_[hook_run_begin_, hook_run_end_), valid while hook_run_end_ == tape_.size().
  std::size_t hook_run_begin_ = 0, hook_run_end_ = SIZE_MAX;
  int last_compute_ = -1;
  int last_optimizer_op_ = -1;
  double last_linear_fraction_ = 1.0;  // local/global output width of the last Linear run
  int post_forward_counter_ = 0;
  std::vector<int> unit_by_post_forward_order_;  // this iteration: post-forward index -> unit
  std::vector<int> first_forward_unit_order_;  // forward_prefetch follows iteration 1's order
  std::vector<int> iteration_grad_ops_;   // collectives the optimizer waits for
  std::vector<int> pending_deps_;          // collectives the next compute op must wait for
  std::vector<std::vector<int>> partial_grad_dims_;  // replicated DTensor params with Partial grads
  std::vector<int> free_events_;            // FSDP rate limiter: compute ops after which a unit was freed
  bool first_iteration_done_ = false;

  // Memory.
  std::int64_t static_bytes_ = 0, dynamic_bytes_ = 0, activation_bytes_ = 0, unsharded_bytes_ = 0;
  std::int64_t peak_ = 0, activation_peak_ = 0, unsharded_peak_ = 0, grad_bytes_ = 0, grad_peak_ = 0;
  std::string peak_at_;

  // --- setup -------------------------------------------------------------------------------------
  // FQN -> module index, built once in setup(): Model::find_module is a linear scan, and plans that
  // name every layer (fully_shard or checkpoint per block) made setup quadratic in the layer count
  // (10,000 layers: ~1 s, more than the rest of planning). FQNs are unique; emplace keeps the first
  // as find_module would.
  std::unordered_map<std::string_view, int> module_index_;

  int module_or_fail(const std::string& fqn, const std::string& where, const char* field = "module") const {
    const auto it = module_index_.find(fqn);
    const int index = it == module_index_.end() ? -1 : it->second;
    if (index < 0)
      throw PlanError(fmt::format("{}: {} \"{}\" is not a submodule of {}", where, field, fqn, model_.name));
    return index;
  }
  std::vector<int> dims_of(const std::vector<std::string>& names) const {
    std::vector<int> dims;
    for (const auto& name : names) dims.push_back(mesh_.dim_index(name));
    if (dims.empty())
      for (int d = 0; d < mesh_.ndim(); ++d) dims.push_back(d);  // the default (world) group
    return dims;
  }
  std::string group_name(const std::vector<int>& dims) const { return mesh_.describe_dims(dims); }
  DType act_dtype() const { return model_.params.empty() ? DType::float32 : model_.params.front().dtype; }

  void setup();
  void apply_parallelize(const ParallelizeStep& step, const PlanStep& where);
  void apply_distribute(const DistributeModuleStep& step, const PlanStep& where);
  void apply_replicate(const ReplicateStep& step, const PlanStep& where);
  void apply_fully_shard(const FullyShardStep& step, const PlanStep& where);
  std::vector<std::int64_t> flat_offsets(const FsdpUnit& unit) const;
  void finish_setup();
  void collect_ddp_params();
  void build_unit(int module, const FullyShardStep& step, const std::vector<bool>& ignored, int step_index);

  // --- execution ---------------------------------------------------------------------------------
  void run_iteration();
  void forward_module(int m, Activation& act, Mode mode);
  void forward_leaf(int m, Activation& act, Mode mode);
  void forward_param_matmul(int p, Activation& act, Mode mode);
  void grad_ready(int param, int producer);
  void tp_input_hook(int m, Activation& act, Mode mode);
  // The layout module m's input is declared in and the one its style computes on (normalised to
  // an activation of `rank` dims).
  TpBoundary tp_boundary(int m, int rank) const;
  void record_tp_boundary(const TpBoundary& boundary);
  std::vector<bool> used_in_forward_;  // per parameter: some forward step reads it
  void tp_output_hook(int m, Activation& act, Mode mode);

  void ddp_pre_forward(DdpInstance& ddp);
  void ddp_mark_ready(DdpInstance& ddp, int variable, int producer);
  void ddp_launch(DdpInstance& ddp, int bucket, int producer);
  void ddp_end_backward(DdpInstance& ddp);
  void ddp_rebuild(DdpInstance& ddp);

  void fsdp_pre_forward(int u, Mode mode);
  void fsdp_post_forward(int u, Mode mode);
  void fsdp_pre_backward(int u);
  void fsdp_post_backward(int u, int producer);
  int fsdp_all_gather(int u, Phase phase, const char* why);
  void fsdp_reshard(int u);
  int next_backward_unit(int u) const;

  void optimizer_step();
  void sync_module_states();

  LeafCost leaf_cost(const Module& m, const Activation& in, std::int64_t in_local, std::int64_t out_local) const;

  // --- emission ----------------------------------------------------------------------------------
  DType compute_dtype(int module) const;
  int emit_compute(const std::string& name, int module, Phase phase, const std::string& op_class, double flops,
                   std::int64_t bytes, std::vector<int> deps = {});
  int emit_collective(CollectiveKind kind, const std::string& key, const std::vector<int>& dims, std::int64_t bytes,
                      std::int64_t in_bytes, std::int64_t out_bytes, DType dtype, const std::string& stream,
                      Phase phase, int module, const std::string& reason, std::vector<std::string> params,
                      std::vector<int> deps);
  int emit_redistribute(RedistributeOp op, const Activation& tensor, OpRole role, Placement from, Placement to,
                        const std::vector<int>& dims, Phase phase, int module, const std::string& reason);
  // Marks op `id` with what it acts on (see OpRole); returns `id`.
  int tag(int id, OpRole role, std::vector<std::string> params = {}) {
    if (id < 0) return id;
    ProgramOp& op = result_.program.ops[id];
    op.role = role;
    if (!params.empty()) op.params = std::move(params);
    return id;
  }
  void memory(std::int64_t delta, bool activation = false, bool unsharded = false, bool grad = false);
};

// ------------------------------------------------------------------------------------------------
// Setup: apply the plan's calls in order, validating composition the way PyTorch does.

void Planner::setup() {
  const std::size_t modules = model_.modules.size();
  module_index_.reserve(modules);
  for (std::size_t m = 0; m < modules; ++m) module_index_.emplace(model_.modules[m].fqn, static_cast<int>(m));
  params_.resize(model_.params.size());
  for (std::size_t p = 0; p < model_.params.size(); ++p) {
    params_[p].local_shape = model_.params[p].shape;
    params_[p].local_numel = model_.params[p].numel();
  }
  tp_.resize(modules);
  partial_grad_dims_.assign(model_.params.size(), {});
  checkpointed_.assign(modules, false);
  for (std::size_t m = 0; m < modules; ++m) checkpointed_[m] = model_.modules[m].checkpoint;
  unit_of_module_.assign(modules, -1);
  fully_shard_step_.assign(modules, -1);
  replicate_step_.assign(modules, -1);
  for (const PlanStep& step : plan_.steps) {
    std::visit(
        [&](const auto& body) {
          using T = std::decay_t<decltype(body)>;
          if constexpr (std::is_same_v<T, ParallelizeStep>) apply_parallelize(body, step);
          else if constexpr (std::is_same_v<T, DistributeModuleStep>) apply_distribute(body, step);
          else if constexpr (std::is_same_v<T, ReplicateStep>) apply_replicate(body, step);
          else if constexpr (std::is_same_v<T, FullyShardStep>) apply_fully_shard(body, step);
          else checkpointed_[module_or_fail(body.module, step.where)] = true;
        },
        step.body);
  }
  finish_setup();
}

void Planner::apply_parallelize(const ParallelizeStep& step, const PlanStep& where) {
  const int base = module_or_fail(step.module, where.where);
  const std::vector<int> dims = dims_of(step.mesh_dims);
  const int tp = mesh_.group_size(dims);
  for (const auto& [pattern, spec] : step.plan) {
    bool matched = false;
    for (int m = base; m < model_.modules[base].subtree_end; ++m) {
      const Module& module = model_.modules[m];
      std::string relative = base == 0 ? module.fqn : module.fqn.substr(std::min(module.fqn.size(), model_.modules[base].fqn.size() + 1));
      if (m == base || !glob_fqn(pattern, relative)) continue;
      matched = true;
      const char* style = spec.style == TPStyle::colwise ? "ColwiseParallel" : "RowwiseParallel";
      if (module.leaf != LeafKind::linear && module.leaf != LeafKind::embedding)
        throw PlanError(fmt::format("{}: \"{}\" is a {}: {} currently only support nn.Linear and nn.Embedding!",
                                    where.where, module.fqn, module.type, style));
      bool replicated = false;  // replicate() collects its parameters lazily: look at the modules
      for (int a = m; a >= 0; a = model_.modules[a].parent) replicated = replicated || replicate_step_[a] >= 0;
      for (int p : module.params) {
        if (params_[p].fsdp_unit >= 0 || replicated)
          throw PlanError(fmt::format("{}: parameter {} is already managed by fully_shard/replicate; apply "
                                      "parallelize_module first", where.where, model_.params[p].fqn));
        if (params_[p].dtensor)
          throw PlanError(fmt::format("{}: parameter {} is already a DTensor", where.where, model_.params[p].fqn));
      }
      tp_[m].parallel = true;
      tp_[m].spec = spec;
      tp_[m].dims = dims;
      // Linear weight is [out, in]: Colwise shards out (dim 0, bias too), Rowwise shards in (dim 1,
      // bias replicated). Embedding weight is [num, dim]: Colwise shards dim 1, Rowwise dim 0.
      for (int p : module.params) {
        ParamState& state = params_[p];
        const Parameter& param = model_.params[p];
        int shard_dim = -1;
        if (module.leaf == LeafKind::linear)
          shard_dim = spec.style == TPStyle::colwise ? 0 : (param.name == "weight" ? 1 : -1);
        else
          shard_dim = spec.style == TPStyle::colwise ? 1 : 0;
        state.dtensor = true;
        state.tp_dims = dims;
        if (shard_dim < 0 || shard_dim >= static_cast<int>(param.shape.size())) {
          state.placement = Placement::replicate();
          continue;
        }
        state.placement = Placement::shard(shard_dim);
        const std::int64_t extent = param.shape[shard_dim];
        if (extent % tp != 0)
          result_.warnings.push_back(fmt::format("{}: {} dim {} = {} is not divisible by the {} group size {}; "
                                                 "DTensor shards it unevenly (padded to {})",
                                                 where.where, param.fqn, shard_dim, extent, group_name(dims), tp,
                                                 ceil_div(extent, tp) * tp));
        state.local_shape[shard_dim] = ceil_div(extent, tp);
        state.local_numel = product(state.local_shape);
      }
    }
    if (!matched)
      throw PlanError(fmt::format("{}: plan key \"{}\" matches no submodule of \"{}\"", where.where, pattern,
                                  step.module.empty() ? model_.name : step.module));
  }
}

void Planner::apply_distribute(const DistributeModuleStep& step, const PlanStep& where) {
  const int m = module_or_fail(step.module, where.where);
  tp_[m].distributed = true;
  tp_[m].input_layout = step.input_layout;
  tp_[m].dims = dims_of(step.mesh_dims);
  const bool sharded_input = step.input_layout && step.input_layout->is_shard();
  // partition_fn=None: every parameter becomes a Replicate DTensor.
  for (int sub = m; sub < model_.modules[m].subtree_end; ++sub)
    for (int p : model_.modules[sub].params) {
      params_[p].dtensor = true;
      params_[p].placement = Placement::replicate();
      params_[p].tp_dims = tp_[m].dims;
      // A replicated weight applied to a sharded input gets a Partial gradient; the from_local
      // (Replicate) that FSDP/replicate wrap it in all-reduces it in backward.
      if (sharded_input && model_.params[p].requires_grad) partial_grad_dims_[p] = tp_[m].dims;
    }
}

void Planner::apply_replicate(const ReplicateStep& step, const PlanStep& where) {
  const int m = module_or_fail(step.module, where.where);
  // contract(): each composable API applies once per module; replicate refuses fully_shard's modules.
  if (replicate_step_[m] >= 0)
    throw PlanError(fmt::format("{}: Each distinct composable distributed API can only be applied to a module once. "
                                "replicate has already been applied to the following module: {}",
                                where.where, model_.modules[m].type));
  if (fully_shard_step_[m] >= 0)
    throw PlanError(fmt::format("{}: Cannot apply `replicate()` on a Module already managed by `fully_shard`", where.where));
  replicate_step_[m] = where.index;
  for (const std::string& name : step.ignored_modules) module_or_fail(name, where.where, "ignored_modules entry");
  // replicate() is lazy: DDP, and the parameter list it reduces, is built in the first forward,
  // after every call of the plan (collect_ddp_params), so a fully_shard() applied later to a
  // submodule still takes that submodule's parameters out of DDP.
  DdpInstance ddp;
  ddp.module = m;
  ddp.config = step;
  ddp.dims = dims_of(step.mesh_dims);
  ddp.where = where.where;
  ddps_.push_back(std::move(ddp));
}

void Planner::collect_ddp_params() {
  for (int id = 0; id < static_cast<int>(ddps_.size()); ++id) {
    DdpInstance& ddp = ddps_[id];
    const int m = ddp.module;
    const ReplicateStep& step = ddp.config;
    std::vector<bool> skip(model_.modules.size(), false);
    for (const std::string& name : step.ignored_modules) {
      const int ignored = model_.find_module(name);
      for (int sub = ignored; sub < model_.modules[ignored].subtree_end; ++sub) skip[sub] = true;
    }
    // _collect_params: pre-order, own parameters first; fully-sharded (and replicated) subtrees and
    // ignored modules are skipped whole.
    for (int sub = m; sub < model_.modules[m].subtree_end; ++sub) {
      if (skip[sub]) continue;
      bool managed_elsewhere = (sub != m && (fully_shard_step_[sub] >= 0 || replicate_step_[sub] >= 0)) ||
                               (sub == m && fully_shard_step_[sub] >= 0);
      if (managed_elsewhere) {
        for (int s = sub; s < model_.modules[sub].subtree_end; ++s) skip[s] = true;
        continue;
      }
      for (int p : model_.modules[sub].params)
        if (model_.params[p].requires_grad && params_[p].ddp < 0 && params_[p].fsdp_unit < 0) ddp.params.push_back(p);
    }
    // DistributedDataParallel(self._param_list) refuses a list with nothing to reduce.
    if (ddp.params.empty())
      throw PlanError(fmt::format("{}: DistributedDataParallel is not needed when a module doesn't have any parameter "
                                  "that requires a gradient.", ddp.where));
    for (std::size_t v = 0; v < ddp.params.size(); ++v) {
      params_[ddp.params[v]].ddp = id;
      params_[ddp.params[v]].ddp_index = static_cast<int>(v);
    }
    // Construction-time buckets (_ddp_init_helper): one bucket of everything unless
    // find_unused_parameters (and not static_graph), then [first cap, cap] over registration order.
    std::vector<BucketTensor> tensors;
    for (int p : ddp.params) tensors.push_back({params_[p].local_numel, model_.params[p].dtype, 0, model_.modules[model_.params[p].module].sparse});
    const std::int64_t cap = step.bucket_cap_mb ? static_cast<std::int64_t>(*step.bucket_cap_mb * kMiB) : kDefaultBucketBytesCap;
    std::vector<std::int64_t> limits{kUnlimitedBucketBytes};
    if (step.find_unused_parameters && !step.static_graph) {
      std::int64_t first = (step.bucket_cap_mb && plan_.torch_version.explicit_cap_sets_first_bucket()) ? cap : kDefaultFirstBucketBytes;
      limits = {first, cap};
      if (first == cap) limits = {cap};
    }
    BucketAssignment assignment = compute_bucket_assignment_by_size(tensors, limits);
    std::reverse(assignment.buckets.begin(), assignment.buckets.end());
    std::reverse(assignment.size_limits.begin(), assignment.size_limits.end());
    ddp.initial_buckets = assignment.buckets;
    ddp.initial_limits = assignment.size_limits;
    ddp.buckets = ddp.initial_buckets;
    ddp.limits = ddp.initial_limits;
    for (int p : ddp.params) ddp.bucket_buffer_bytes += params_[p].local_numel * dtype_size(model_.params[p].dtype);
  }
}

// Where each parameter starts in the unit's flat parameter. use_orig_params aligns every
// parameter to 16 bytes of the compute dtype (FlatParamHandle._init_flat_param_and_metadata).
std::vector<std::int64_t> Planner::flat_offsets(const FsdpUnit& unit) const {
  const DType compute_dtype = unit.config.param_dtype.value_or(unit.orig_dtype);
  const std::int64_t aligned = unit.config.use_orig_params ? 16 / dtype_size(compute_dtype) : 1;
  std::vector<std::int64_t> offsets;
  std::int64_t numel = 0;
  for (int p : unit.params) {
    if (numel % aligned != 0) numel += aligned - numel % aligned;
    offsets.push_back(numel);
    numel += params_[p].local_numel;
  }
  return offsets;
}

void Planner::apply_fully_shard(const FullyShardStep& step, const PlanStep& where) {
  const int m = module_or_fail(step.module, where.where);
  if (fully_shard_step_[m] >= 0)
    throw PlanError(fmt::format("{}: Each distinct composable distributed API can only be applied to a module once. "
                                "fully_shard has already been applied to the following module: {}",
                                where.where, model_.modules[m].type));
  // _get_ignored_modules: explicit ignored modules plus every subtree fully_shard cannot compose
  // with (modules under replicate()).
  std::vector<bool> ignored(model_.modules.size(), false);
  for (const std::string& name : step.ignored_modules) {
    int index = module_or_fail(name, where.where, "ignored_modules entry");
    for (int sub = index; sub < model_.modules[index].subtree_end; ++sub) ignored[sub] = true;
  }
  for (int sub = m; sub < model_.modules[m].subtree_end; ++sub)
    if (replicate_step_[sub] >= 0)
      for (int s = sub; s < model_.modules[sub].subtree_end; ++s) ignored[s] = true;

  // Auto wrapping (_recursive_wrap): which modules below `m` become units, in post-order.
  std::vector<int> wrapped;
  const bool by_type = !step.wrap_module_types.empty();
  const bool by_size = step.wrap_min_num_params.has_value();
  std::function<std::int64_t(int, bool)> recurse = [&](int module, bool only_children) -> std::int64_t {
    std::int64_t nonwrapped = 0;
    for (int sub = module; sub < model_.modules[module].subtree_end; ++sub)
      if (!ignored[sub])
        for (int p : model_.modules[sub].params)
          if (params_[p].fsdp_unit < 0 && params_[p].ddp < 0) nonwrapped += params_[p].local_numel;
    const Module& mod = model_.modules[module];
    bool recurse_ok = by_type || (by_size && nonwrapped >= *step.wrap_min_num_params);
    if (!recurse_ok) return 0;
    std::int64_t wrapped_numel = 0;
    for (int child : mod.children) {
      if (ignored[child] || fully_shard_step_[child] >= 0) continue;
      wrapped_numel += recurse(child, false);
    }
    const std::int64_t remainder = nonwrapped - wrapped_numel;
    bool wrap_self = false;
    if (!only_children) {
      if (by_type)
        wrap_self = std::find(step.wrap_module_types.begin(), step.wrap_module_types.end(), mod.type) != step.wrap_module_types.end();
      else
        wrap_self = remainder >= *step.wrap_min_num_params && mod.type != "ModuleList" && mod.type != "ModuleDict";
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
    fully_shard_step_[module] = where.index;
    build_unit(module, step, ignored, where.index);
  }
}

void Planner::build_unit(int module, const FullyShardStep& step, const std::vector<bool>& ignored, int step_index) {
  FsdpUnit unit;
  unit.module = module;
  unit.config = step;
  unit.step_index = step_index;
  std::vector<int> dims = dims_of(step.mesh_dims);
  if (step.mesh_dims.size() == 2) {
    unit.replicate_dims = {dims[0]};
    unit.shard_dims = {dims[1]};
  } else {
    unit.shard_dims = dims;
  }
  const int unit_id = static_cast<int>(units_.size());
  for (int sub = module; sub < model_.modules[module].subtree_end; ++sub) {
    if (ignored[sub]) continue;
    for (int p : model_.modules[sub].params) {
      if (params_[p].fsdp_unit >= 0 || params_[p].ddp >= 0 || !model_.params[p].requires_grad) continue;
      params_[p].fsdp_unit = unit_id;
      unit.params.push_back(p);
    }
  }
  // Flat parameter size. use_orig_params aligns every parameter to 16 bytes of the compute dtype
  // and pads the total to a multiple of the shard group size.
  const int world = mesh_.group_size(unit.shard_dims);
  if (!unit.params.empty()) unit.orig_dtype = model_.params[unit.params.front()].dtype;
  const std::vector<std::int64_t> offsets = flat_offsets(unit);
  std::int64_t numel = offsets.empty() ? 0 : offsets.back() + params_[unit.params.back()].local_numel;
  if (step.use_orig_params && numel % world != 0) numel += world - numel % world;
  unit.numel = numel;
  const bool sharded = step.strategy != ShardingStrategy::no_shard;
  unit.shard = sharded ? ceil_div(numel, world) : numel;
  unit.padded = sharded ? unit.shard * world : numel;
  unit_of_module_[module] = unit_id;
  units_.push_back(std::move(unit));
}

void Planner::finish_setup() {
  used_in_forward_.assign(model_.params.size(), false);
  for (const ForwardStep& step : flat_forward(model_)) {
    if (step.kind == ForwardStep::Kind::param_matmul) used_in_forward_[step.index] = true;
    else
      for (int p : model_.modules[step.index].params) used_in_forward_[p] = true;
  }
  collect_ddp_params();
  // A unit is a root when no ancestor unit's lazy init reaches it (composable fully_shard). The
  // root marks the states it finds with _get_fsdp_states_with_modules, which does not descend
  // into modules managed by replicate() (not _composable), so a unit below a replicated module
  // stays its own root even under an outer unit (test_compose.py "1fm1fm,1r1r,1fm").
  for (FsdpUnit& unit : units_) {
    unit.root = true;
    if (replicate_step_[unit.module] >= 0) continue;
    for (int a = model_.modules[unit.module].parent; a >= 0; a = model_.modules[a].parent) {
      if (replicate_step_[a] >= 0) break;
      if (unit_of_module_[a] >= 0) {
        unit.root = false;
        break;
      }
    }
  }
  // Resident storage: parameters (sharded for FSDP), DDP bucket buffers, optimizer state.
  int states = 0;
  if (plan_.optimizer.kind == OptimizerKind::sgd) states = plan_.optimizer.momentum != 0 ? 1 : 0;
  else states = plan_.optimizer.amsgrad ? 3 : 2;
  std::int64_t param_bytes = 0, optimizer_bytes = 0;
  for (std::size_t p = 0; p < params_.size(); ++p) {
    if (params_[p].fsdp_unit >= 0) continue;
    std::int64_t bytes = params_[p].local_numel * dtype_size(model_.params[p].dtype);
    param_bytes += bytes;
    if (model_.params[p].requires_grad) optimizer_bytes += bytes * states;
  }
  for (const FsdpUnit& unit : units_) {
    std::int64_t bytes = unit.shard * dtype_size(unit.orig_dtype);
    if (!unit.config.cpu_offload) {
      param_bytes += bytes;
      optimizer_bytes += bytes * states;
    }
  }
  std::int64_t bucket_bytes = 0;
  for (const DdpInstance& ddp : ddps_)
    if (!ddp.config.gradient_as_bucket_view) bucket_bytes += ddp.bucket_buffer_bytes;
  result_.memory.parameters = param_bytes;
  result_.memory.optimizer_state = optimizer_bytes;
  result_.memory.ddp_bucket_buffers = bucket_bytes;
  static_bytes_ = param_bytes + optimizer_bytes + bucket_bytes;
}

// ------------------------------------------------------------------------------------------------
// Emission helpers.

void Planner::memory(std::int64_t delta, bool activation, bool unsharded, bool grad) {
  dynamic_bytes_ += delta;
  if (activation) activation_bytes_ += delta;
  if (unsharded) unsharded_bytes_ += delta;
  if (grad) grad_bytes_ += delta;
  activation_peak_ = std::max(activation_peak_, activation_bytes_);
  unsharded_peak_ = std::max(unsharded_peak_, unsharded_bytes_);
  grad_peak_ = std::max(grad_peak_, grad_bytes_);
  if (static_bytes_ + dynamic_bytes_ > peak_) {
    peak_ = static_bytes_ + dynamic_bytes_;
    const auto& ops = result_.program.ops;
    peak_at_ = ops.empty() ? "start" : fmt::format("iteration {} {}", ops.back().iteration, ops.back().name);
  }
}

// The dtype a module computes in: its FSDP unit's param_dtype under mixed precision, else the
// parameters' dtype. The simulator picks the device's peak FLOP/s by it.
DType Planner::compute_dtype(int module) const {
  for (int a = module; a >= 0; a = model_.modules[a].parent) {
    const int unit = unit_of_module_[a];
    if (unit >= 0) return units_[unit].config.param_dtype.value_or(units_[unit].orig_dtype);
  }
  return act_dtype();
}

int Planner::emit_compute(const std::string& name, int module, Phase phase, const std::string& op_class, double flops,
                          std::int64_t bytes, std::vector<int> deps) {
  ProgramOp op;
  op.iteration = iteration_;
  op.type = OpType::compute;
  op.name = name;
  op.module = model_.modules[module].fqn;
  op.phase = phase;
  op.stream = 0;
  op.op_class = op_class;
  op.dtype = compute_dtype(module);
  op.flops = flops;
  op.bytes_accessed = bytes;
  std::sort(deps.begin(), deps.end());
  deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
  deps.insert(deps.end(), pending_deps_.begin(), pending_deps_.end());
  pending_deps_.clear();
  std::sort(deps.begin(), deps.end());
  deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
  std::erase(deps, -1);
  op.deps = std::move(deps);
  last_compute_ = result_.program.add(std::move(op)).id;
  result_.iterations.back().compute_flops += flops;
  return last_compute_;
}

int Planner::emit_collective(CollectiveKind kind, const std::string& key, const std::vector<int>& dims,
                             std::int64_t bytes, std::int64_t in_bytes, std::int64_t out_bytes, DType dtype,
                             const std::string& stream, Phase phase, int module, const std::string& reason,
                             std::vector<std::string> params, std::vector<int> deps) {
  Program& program = result_.program;
  ProgramOp op;
  op.iteration = iteration_;
  op.type = OpType::collective;
  op.kind = kind;
  op.comm_key = key;
  op.group = program.group_id(dims);
  op.bytes = bytes;
  op.input_bytes = in_bytes;
  op.output_bytes = out_bytes;
  op.dtype = dtype;
  op.stream = program.stream_id(stream);
  op.phase = phase;
  op.module = model_.modules[module].fqn;
  op.reason = reason;
  op.params = params;
  op.name = fmt::format("{} {}", collective_kind_name(kind), reason);
  std::erase(deps, -1);
  std::sort(deps.begin(), deps.end());
  deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
  op.deps = std::move(deps);
  const int id = program.add(std::move(op)).id;

  CollectiveRecord record;
  record.iteration = iteration_;
  record.op_id = id;
  record.op = key;
  record.kind = kind;
  record.group = group_name(dims);
  record.group_id = result_.program.ops.back().group;
  record.bytes = bytes;
  record.input_bytes = in_bytes;
  record.output_bytes = out_bytes;
  record.dtype = dtype;
  record.phase = phase;
  record.module = model_.modules[module].fqn;
  record.reason = reason;
  record.params = std::move(params);
  result_.iterations.back().collectives.push_back(std::move(record));
  return id;
}

// One DTensor redistribution of `tensor` (the local tensor before it) on `dims`.
int Planner::emit_redistribute(RedistributeOp op, const Activation& tensor, OpRole role, Placement from, Placement to,
                               const std::vector<int>& dims, Phase phase, int module, const std::string& reason) {
  const int size = mesh_.group_size(dims);
  const std::int64_t local = tensor.bytes();
  // A reduce-scatter or all-to-all onto Shard(d) sends dimension d padded to size * ceil(n / size),
  // as DTensor pads uneven shards before the collective (Shard._reduce_shard_tensor and
  // _to_new_shard_dim); an all-gather's local shard is already the padded chunk.
  const std::int64_t padded = to.is_shard() ? padded_bytes(tensor, to.normalized(tensor.rank()).dim, size) : local;
  const std::string stream = "tp." + group_name(dims);
  const std::vector<int> deps{last_compute_};
  int id = -1;
  switch (op) {
    case RedistributeOp::none: return -1;
    case RedistributeOp::all_gather:
      id = emit_collective(CollectiveKind::all_gather, "c10d_functional.all_gather_into_tensor", dims, local * size, local,
                           local * size, tensor.dtype, stream, phase, module, reason, {}, deps);
      break;
    case RedistributeOp::reduce_scatter:
      id = emit_collective(CollectiveKind::reduce_scatter, "c10d_functional.reduce_scatter_tensor", dims, padded, padded,
                           padded / size, tensor.dtype, stream, phase, module, reason, {}, deps);
      break;
    case RedistributeOp::all_reduce:
      id = emit_collective(CollectiveKind::all_reduce, "c10d_functional.all_reduce", dims, local, local, local,
                           tensor.dtype, stream, phase, module, reason, {}, deps);
      break;
    case RedistributeOp::all_to_all:
      id = emit_collective(CollectiveKind::all_to_all, "c10d_functional.all_to_all_single", dims, padded, padded, padded,
                           tensor.dtype, stream, phase, module, reason, {}, deps);
      break;
  }
  ProgramOp& emitted = result_.program.ops[id];
  emitted.role = role;
  emitted.from = from;
  emitted.to = to;
  // DTensor collectives are waited on before their result is used: the next compute depends on it.
  pending_deps_.push_back(id);
  return id;
}

// ------------------------------------------------------------------------------------------------
// Compute costs. FLOPs count multiply and add separately (2 per MAC); bytes are the tensors a
// kernel reads and writes. Coefficients for element-wise and norm kernels follow their eager
// PyTorch implementations (see README "Compute model").

LeafCost Planner::leaf_cost(const Module& m, const Activation& in, std::int64_t in_local, std::int64_t out_local) const {
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
      break;
    }
    case LeafKind::relu:
    case LeafKind::sigmoid:
    case LeafKind::silu:
    case LeafKind::gelu:
    case LeafKind::tanh:
    case LeafKind::dropout:
    case LeafKind::identity: {
      const double per = m.leaf == LeafKind::relu ? 1 : m.leaf == LeafKind::identity ? 0 : m.leaf == LeafKind::dropout ? 2 : 4;
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
    case LeafKind::container: break;
  }
  return cost;
}

// ------------------------------------------------------------------------------------------------
// Forward.

void Planner::forward_module(int m, Activation& act, Mode mode) {
  const Module& module = model_.modules[m];
  const bool region = mode == Mode::normal && checkpointed_[m];
  const Mode inner = region ? Mode::checkpointed : mode;
  if (mode != Mode::replay)
    for (DdpInstance& ddp : ddps_)
      if (ddp.module == m) ddp_pre_forward(ddp);
  const int unit = unit_of_module_[m];
  if (unit >= 0) fsdp_pre_forward(unit, mode);
  const Activation region_input = act;
  const std::size_t region_start = tape_.size();
  std::int64_t region_saved = 0;
  if (region) {
    // checkpoint(use_reentrant=False): only the region's input is saved; the inside is recomputed
    // when backward first unpacks one of its tensors.
    region_saved = act.bytes();
    memory(region_saved, true);
  }
  tp_input_hook(m, act, inner);
  if (module.leaf != LeafKind::container) {
    forward_leaf(m, act, inner);
  } else {
    for (const ForwardStep& step : module.forward) {
      if (step.kind == ForwardStep::Kind::child) forward_module(step.index, act, inner);
      else forward_param_matmul(step.index, act, inner);
    }
  }
  tp_output_hook(m, act, inner);
  if (unit >= 0) fsdp_post_forward(unit, mode);
  if (region) {
    // Pushed after the region's own entries, so backward replays the region before any of them,
    // but below the pre-backward hooks on the region's output (the unit on this module, units on
    // its last submodule): autograd runs those hooks before the first node inside the region
    // unpacks a saved tensor and triggers the recomputation, so FSDP's recomputed pre-forward
    // finds them in BACKWARD_PRE and gathers nothing.
    auto replay_region = [this, m, region_input, region_saved]() {
      Activation replay = region_input;
      const Module& mod = model_.modules[m];
      tp_input_hook(m, replay, Mode::replay);
      if (mod.leaf != LeafKind::container) {
        forward_leaf(m, replay, Mode::replay);
      } else {
        for (const ForwardStep& step : mod.forward) {
          if (step.kind == ForwardStep::Kind::child) forward_module(step.index, replay, Mode::replay);
          else forward_param_matmul(step.index, replay, Mode::replay);
        }
      }
      tp_output_hook(m, replay, Mode::replay);
      memory(-region_saved, true);
    };
    const std::size_t at =
        hook_run_end_ == tape_.size() ? std::max(hook_run_begin_, region_start) : tape_.size();
    tape_.insert(tape_.begin() + static_cast<std::ptrdiff_t>(at), std::move(replay_region));
    if (at == hook_run_begin_ && hook_run_end_ + 1 == tape_.size()) {
      ++hook_run_begin_;  // the hooks still end the tape, one slot later
      ++hook_run_end_;
    }
  }
}

void Planner::forward_leaf(int m, Activation& act, Mode mode) {
  const Module& module = model_.modules[m];
  const Phase phase = mode == Mode::replay ? Phase::recompute : Phase::forward;
  std::int64_t in_local = act.features(), out_local = act.features();
  Activation input = act;
  if (module.leaf == LeafKind::linear) {
    const ParamState& weight = params_[module.params[0]];
    out_local = weight.local_shape[0];
    in_local = weight.local_shape[1];
    last_linear_fraction_ = static_cast<double>(out_local) / static_cast<double>(module.out_features);
    input.shape.back() = in_local;
  } else if (module.leaf == LeafKind::embedding) {
    out_local = params_[module.params[0]].local_shape[1];
    input.requires_grad = false;
  } else if (module.leaf == LeafKind::rms_norm || module.leaf == LeafKind::layer_norm) {
    input.shape.back() = in_local = out_local = act.features();
  } else if (module.leaf == LeafKind::attention) {
    // Width of the attention core: its query heads, cut the way the projection before it was
    // (tensor parallelism shards heads). The running width would be the fused qkv or the KV width.
    const double fraction = last_linear_fraction_;
    input.shape.back() = in_local = out_local =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(module.heads * module.head_dim * fraction)));
  } else if (module.dim > 0) {
    input.shape.back() = in_local = out_local = module.dim;
  }
  const LeafCost cost = leaf_cost(module, input, in_local, out_local);
  // Compute that uses an FSDP unit's parameters waits for the unit's all-gather.
  std::vector<int> deps;
  for (int p : module.params)
    if (params_[p].fsdp_unit >= 0) deps.push_back(units_[params_[p].fsdp_unit].all_gather_op);
  const std::string suffix = phase == Phase::recompute ? "recompute" : "forward";
  const std::string label = module.fqn.empty() ? model_.name : module.fqn;
  tag(emit_compute(fmt::format("{}.{}", label, suffix), m, phase, cost.op_class, cost.forward_flops, cost.forward_bytes,
                   deps),
      OpRole::leaf);
  if (mode != Mode::checkpointed) memory(cost.saved_bytes, true);

  act.shape.back() = out_local;
  const bool had_grad = act.requires_grad;
  bool own_grad = false;
  for (int p : module.params) own_grad = own_grad || model_.params[p].requires_grad;
  act.requires_grad = (module.leaf == LeafKind::embedding ? false : had_grad) || own_grad;
  if (mode == Mode::replay) return;

  tape_.push_back([this, m, cost]() {
    const Module& mod = model_.modules[m];
    const std::string name = fmt::format("{}.backward", mod.fqn.empty() ? model_.name : mod.fqn);
    // Backward waits for the gather that is current now (pre-backward or prefetch), not the forward one.
    std::vector<int> now;
    for (int p : mod.params)
      if (params_[p].fsdp_unit >= 0) now.push_back(units_[params_[p].fsdp_unit].all_gather_op);
    const int op =
        tag(emit_compute(name, m, Phase::backward, cost.op_class, cost.backward_flops, cost.backward_bytes, now),
            OpRole::leaf);
    memory(-cost.saved_bytes, true);
    // AccumulateGrad order: autograd runs the bias's accumulation before the weight's (addmm feeds
    // bias directly, weight through TBackward), i.e. parameters in reverse registration order.
    for (auto it = mod.params.rbegin(); it != mod.params.rend(); ++it) grad_ready(*it, op);
  });
}

void Planner::forward_param_matmul(int p, Activation& act, Mode mode) {
  const Parameter& param = model_.params[p];
  const ParamState& state = params_[p];
  const int m = param.module;
  const Phase phase = mode == Mode::replay ? Phase::recompute : Phase::forward;
  const std::int64_t t = act.tokens();
  const int d = dtype_size(act.dtype);
  double flops = 0;
  std::int64_t out = act.features();
  if (state.local_shape.size() == 2) {
    flops = 2.0 * t * state.local_shape[0] * state.local_shape[1];
    out = state.local_shape[1];
  } else {
    flops = static_cast<double>(t) * state.local_numel;
  }
  const std::int64_t saved = t * act.features() * d;
  std::vector<int> deps;
  if (state.fsdp_unit >= 0) deps.push_back(units_[state.fsdp_unit].all_gather_op);
  const std::string base = fmt::format("{}.mm", param.fqn);
  tag(emit_compute(base + (phase == Phase::recompute ? ".recompute" : ".forward"), m, phase, "gemm", flops,
                   (t * act.features() + state.local_numel + t * out) * d, deps),
      OpRole::param_matmul, {param.fqn});
  if (mode != Mode::checkpointed) memory(saved, true);
  const bool input_grad = act.requires_grad;
  act.shape.back() = out;
  act.requires_grad = true;
  if (mode == Mode::replay) return;
  tape_.push_back([this, p, m, flops, saved, input_grad, base]() {
    std::vector<int> now;
    if (params_[p].fsdp_unit >= 0) now.push_back(units_[params_[p].fsdp_unit].all_gather_op);
    const int op =
        tag(emit_compute(base + ".backward", m, Phase::backward, "gemm", flops * (input_grad ? 2 : 1), 0, now),
            OpRole::param_matmul, {model_.params[p].fqn});
    memory(-saved, true);
    grad_ready(p, op);
  });
}

// The layout a DTensor boundary declares for its input (input_layouts / distribute_module's
// from_local) and the one its style computes on. The first boundary in forward order also says
// how the model input is laid out: every module before it passes the rows through unchanged.
TpBoundary Planner::tp_boundary(int m, int rank) const {
  const TPState& tp = tp_[m];
  const bool colwise = tp.parallel && tp.spec.style == TPStyle::colwise;
  const bool embedding = model_.modules[m].leaf == LeafKind::embedding;
  const Placement default_layout = tp.distributed || colwise ? Placement::replicate() : Placement::shard(-1);
  const Placement declared =
      (tp.distributed ? tp.input_layout : tp.spec.input_layout).value_or(default_layout).normalized(rank);
  // RowwiseParallel wants Shard(-1) for Linear but Replicate (token ids) for Embedding.
  const Placement desired = tp.distributed ? declared
                            : colwise || embedding ? Placement::replicate()
                                                   : Placement::shard(-1).normalized(rank);
  return {m, declared, desired};
}

void Planner::record_tp_boundary(const TpBoundary& boundary) {
  result_.tp_inputs.push_back(boundary);
  if (result_.tp_inputs.size() == 1) {
    result_.input_placement = boundary.declared;
    result_.input_dims = tp_[boundary.module].dims;
  }
}

// DTensor input handling of a module (parallelize_module style or distribute_module input_fn).
void Planner::tp_input_hook(int m, Activation& act, Mode mode) {
  const TPState& tp = tp_[m];
  if (!tp.parallel && !tp.distributed) return;
  const TpBoundary boundary = tp_boundary(m, act.rank());
  if (mode != Mode::replay && iteration_ == 1) record_tp_boundary(boundary);
  const Phase phase = mode == Mode::replay ? Phase::recompute : Phase::forward;
  const int size = mesh_.group_size(tp.dims);
  const std::string& fqn = model_.modules[m].fqn;
  if (tp.distributed) {
    // input_fn: DTensor.from_local(x, [layout]) costs nothing; a sharded input makes the
    // replicated parameters' gradients Partial, reduced in backward (see tp_output_hook).
    return;
  }
  const bool colwise = tp.spec.style == TPStyle::colwise;
  const Module& module = model_.modules[m];
  const int rank = act.rank();
  const Placement src = boundary.declared, dst = boundary.desired;
  if (module.leaf == LeafKind::linear) {
    // Branching blocks (wq/wk/wv read the same input) make the running width unreliable: take
    // the layer's in_features, local under a Shard(-1) input layout.
    const bool sharded_features = src.is_shard() && src.dim == rank - 1;
    act.shape.back() = sharded_features ? ceil_div(module.in_features, size) : module.in_features;
  }
  const RedistributeOp forward_op = redistribute_op(src, dst, rank);
  Activation before = act;
  if (forward_op != RedistributeOp::none) {
    emit_redistribute(forward_op, before, OpRole::tp_input, src, dst, tp.dims, phase, m,
                      fmt::format("tp {} input {}->{}", fqn, src.str(), dst.str()));
  }
  // Local shape after redistribution.
  if (forward_op == RedistributeOp::all_gather) act.shape[src.dim] *= size;
  if (src.is_replicate() && dst.is_shard()) act.shape[dst.dim] = ceil_div(act.shape[dst.dim], size);
  if (forward_op == RedistributeOp::all_to_all) {
    act.shape[src.dim] *= size;
    act.shape[dst.dim] = ceil_div(act.shape[dst.dim], size);
  }
  if (mode == Mode::replay || !act.requires_grad) return;
  // Backward: the gradient at the desired layout (Partial for Colwise, whose weight is sharded on
  // its output dim; Shard(-1) for Rowwise) goes back to the input layout.
  const Placement grad_src = colwise ? Placement::partial() : dst;
  const RedistributeOp backward_op = redistribute_op(grad_src, src, rank);
  if (backward_op == RedistributeOp::none) return;
  Activation grad = act;  // the gradient has the post-redistribution local shape
  tape_.push_back([this, m, backward_op, grad, src, grad_src, tp]() {
    emit_redistribute(backward_op, grad, OpRole::tp_grad_input, grad_src, src, tp.dims, Phase::backward, m,
                      fmt::format("tp {} grad_input {}->{}", model_.modules[m].fqn, grad_src.str(), src.str()));
  });
}

void Planner::tp_output_hook(int m, Activation& act, Mode mode) {
  const TPState& tp = tp_[m];
  if (!tp.parallel && !tp.distributed) return;
  // The output hook returns a new tensor (redistribute / to_local): hooks registered on the
  // inner output no longer sit on the module's output.
  if (mode != Mode::replay) hook_run_end_ = SIZE_MAX;
  const Phase phase = mode == Mode::replay ? Phase::recompute : Phase::forward;
  const int size = mesh_.group_size(tp.dims);
  const std::string& fqn = model_.modules[m].fqn;
  if (tp.distributed) {
    // output_fn: to_local() costs nothing. The Partial gradients of its replicated parameters are
    // all-reduced from grad_ready (partial_grad_dims_, set in apply_distribute).
    return;
  }
  const bool colwise = tp.spec.style == TPStyle::colwise;
  const int rank = act.rank();
  const Placement local = colwise ? Placement::shard(rank - 1) : Placement::partial();
  const Placement target = tp.spec.output_layout.value_or(colwise ? Placement::shard(-1) : Placement::replicate()).normalized(rank);
  const RedistributeOp forward_op = redistribute_op(local, target, rank);
  if (forward_op != RedistributeOp::none) {
    emit_redistribute(forward_op, act, OpRole::tp_output, local, target, tp.dims, phase, m,
                      fmt::format("tp {} output {}->{}", fqn, local.str(), target.str()));
  }
  if (forward_op == RedistributeOp::all_gather) act.shape[local.dim] *= size;
  if (forward_op == RedistributeOp::reduce_scatter) act.shape[target.dim] = ceil_div(act.shape[target.dim], size);
  if (forward_op == RedistributeOp::all_to_all) {
    act.shape[local.dim] *= size;
    act.shape[target.dim] = ceil_div(act.shape[target.dim], size);
  }
  if (mode == Mode::replay) return;
  // Backward: the output gradient arrives in `target` (a Partial target reads as Replicate) and
  // returns to the local layout (Partial reads as Replicate).
  const Placement grad_src = target.is_partial() ? Placement::replicate() : target;
  const Placement grad_dst = local.is_partial() ? Placement::replicate() : local;
  const RedistributeOp backward_op = redistribute_op(grad_src, grad_dst, rank);
  if (backward_op == RedistributeOp::none) return;
  Activation grad = act;
  tape_.push_back([this, m, backward_op, grad, grad_src, grad_dst, tp]() {
    emit_redistribute(backward_op, grad, OpRole::tp_grad_output, grad_src, grad_dst, tp.dims, Phase::backward, m,
                      fmt::format("tp {} grad_output {}->{}", model_.modules[m].fqn, grad_src.str(), grad_dst.str()));
  });
}

// ------------------------------------------------------------------------------------------------
// Backward: gradient-ready events.

void Planner::grad_ready(int p, int producer) {
  const Parameter& param = model_.params[p];
  if (!param.requires_grad) return;
  ParamState& state = params_[p];
  const std::int64_t grad_bytes = state.local_numel * dtype_size(param.dtype);
  if (!partial_grad_dims_[p].empty()) {
    producer = tag(emit_collective(CollectiveKind::all_reduce, "c10d_functional.all_reduce", partial_grad_dims_[p],
                                   grad_bytes, grad_bytes, grad_bytes, param.dtype,
                                   "tp." + group_name(partial_grad_dims_[p]), Phase::backward, param.module,
                                   fmt::format("tp {} Partial grad -> Replicate", param.fqn), {param.fqn}, {producer}),
                   OpRole::tp_param_grad);
    pending_deps_.push_back(producer);
  }
  if (state.fsdp_unit >= 0) {
    FsdpUnit& unit = units_[state.fsdp_unit];
    if (!unit.grad_allocated) {
      unit.grad_allocated = true;
      memory(unit.padded * dtype_size(unit.config.param_dtype.value_or(unit.orig_dtype)), false, false, true);
    }
    if (--unit.pending_grads == 0) fsdp_post_backward(state.fsdp_unit, producer);
    return;
  }
  const bool bucket_view = state.ddp >= 0 && ddps_[state.ddp].config.gradient_as_bucket_view;
  if (!bucket_view) memory(grad_bytes, false, false, true);
  if (state.ddp >= 0) ddp_mark_ready(ddps_[state.ddp], state.ddp_index, producer);
}

// ------------------------------------------------------------------------------------------------
// DDP (Reducer) runtime.

void Planner::ddp_pre_forward(DdpInstance& ddp) {
  const std::vector<int>& dims = ddp.dims;
  const std::string stream = "ddp." + group_name(dims);
  if (!ddp.initialized) {
    // replicate() builds DDP lazily in the first forward: the parameter shape check (allgather of
    // the count, broadcast of shapes and strides) and, with init_sync, the broadcast of the
    // module states from rank 0 in 250 MiB coalesced buckets.
    ddp.initialized = true;
    const int size = mesh_.group_size(dims);
    std::int64_t meta = 0;
    for (int p : ddp.params) meta += 2 * static_cast<std::int64_t>(model_.params[p].shape.size());
    tag(emit_collective(CollectiveKind::all_gather, "c10d.allgather_", dims, 8 * size, 8, 8 * size, DType::int64,
                        stream, Phase::init, ddp.module, "ddp verify parameter count", {}, {}),
        OpRole::ddp_param_count);
    tag(emit_collective(CollectiveKind::broadcast, "c10d.broadcast_", dims, 8 * meta, 8 * meta, 8 * meta, DType::int64,
                        stream, Phase::init, ddp.module, "ddp verify parameter shapes", {}, {}),
        OpRole::ddp_param_shapes);
    if (ddp.config.init_sync && size > 1) {
      constexpr std::int64_t kBroadcastBucket = 250 * kMiB;
      std::vector<std::string> names;
      std::int64_t bytes = 0;
      auto flush = [&]() {
        if (names.empty()) return;
        pending_deps_.push_back(
            tag(emit_collective(CollectiveKind::broadcast, "c10d.broadcast_", dims, bytes, bytes, bytes, act_dtype(),
                                stream, Phase::init, ddp.module, "ddp sync module states", names, {}),
                OpRole::ddp_module_states));
        names.clear();
        bytes = 0;
      };
      for (int p : ddp.params) {
        const std::int64_t b = params_[p].local_numel * dtype_size(model_.params[p].dtype);
        if (bytes > 0 && bytes + b > kBroadcastBucket) flush();
        names.push_back(model_.params[p].fqn);
        bytes += b;
      }
      flush();
    }
  }
  if (!ddp.rebuilt && !ddp.ready_order.empty()) ddp_rebuild(ddp);
  // require_backward_grad_sync = not no_sync: hooks only do work in synced backwards.
  ddp.hooks_active = sync_;
  ddp.delay_all_reduce = sync_ && ddp.config.static_graph && ddp.synced_backwards == 0;
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

void Planner::ddp_rebuild(DdpInstance& ddp) {
  // Reducer::rebuild_buckets: gradient-ready order, limits [first cap, cap], no re-sorting; then
  // sync_bucket_indices broadcasts the layout from rank 0 (indices + count, then bucket sizes).
  const ReplicateStep& config = ddp.config;
  const std::int64_t cap = config.bucket_cap_mb ? static_cast<std::int64_t>(*config.bucket_cap_mb * kMiB) : kDefaultBucketBytesCap;
  const std::int64_t first =
      (config.bucket_cap_mb && plan_.torch_version.explicit_cap_sets_first_bucket()) ? cap : kDefaultFirstBucketBytes;
  std::vector<BucketTensor> tensors;
  for (int v : ddp.ready_order) {
    const int p = ddp.params[v];
    tensors.push_back({params_[p].local_numel, model_.params[p].dtype, 0, model_.modules[model_.params[p].module].sparse});
  }
  BucketAssignment assignment = compute_bucket_assignment_by_size(tensors, {first, cap}, ddp.ready_order);
  ddp.buckets = assignment.buckets;
  ddp.limits = assignment.size_limits;
  ddp.rebuilt = true;
  ddp.rebuilt_at = iteration_;
  const std::string stream = "ddp." + group_name(ddp.dims);
  const std::int64_t indices_bytes = 4 * (static_cast<std::int64_t>(ddp.params.size()) + 1);
  const std::int64_t sizes_bytes = 4 * static_cast<std::int64_t>(ddp.buckets.size());
  pending_deps_.push_back(tag(emit_collective(CollectiveKind::broadcast, "c10d.broadcast_", ddp.dims, indices_bytes,
                                              indices_bytes, indices_bytes, DType::int32, stream, Phase::forward,
                                              ddp.module, "ddp rebuild bucket indices", {}, {last_compute_}),
                              OpRole::ddp_bucket_indices));
  pending_deps_.push_back(tag(emit_collective(CollectiveKind::broadcast, "c10d.broadcast_", ddp.dims, sizes_bytes,
                                              sizes_bytes, sizes_bytes, DType::int32, stream, Phase::forward,
                                              ddp.module, "ddp rebuild bucket sizes", {}, {last_compute_}),
                              OpRole::ddp_bucket_sizes));
}

void Planner::ddp_mark_ready(DdpInstance& ddp, int variable, int producer) {
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
    ddp_launch(ddp, ddp.next_bucket++, producer);
  if (ddp.next_bucket == static_cast<int>(ddp.buckets.size()) && ddp.config.find_unused_parameters &&
      !ddp.config.static_graph && ddp.ready[ddp.buckets.size() - 1]) {
    ddp.ready.back() = false;  // issue the used-map reduction once
    const std::int64_t bytes = 4 * static_cast<std::int64_t>(ddp.params.size());
    iteration_grad_ops_.push_back(emit_collective(CollectiveKind::all_reduce, "c10d.allreduce_", ddp.dims, bytes, bytes, bytes,
                                                  DType::int32, "ddp." + group_name(ddp.dims), Phase::backward, ddp.module,
                                                  "ddp local_used_map", {}, {producer}));
    tag(iteration_grad_ops_.back(), OpRole::ddp_used_map);
  }
}

void Planner::ddp_launch(DdpInstance& ddp, int bucket, int producer) {
  const CommHook hook = ddp.config.comm_hook;
  const bool compress = hook == CommHook::fp16_compress || hook == CommHook::bf16_compress;
  std::int64_t bytes = 0;
  DType dtype = DType::float32;
  std::vector<std::string> names;
  for (int v : ddp.buckets[bucket]) {
    const int p = ddp.params[v];
    dtype = model_.params[p].dtype;
    bytes += params_[p].local_numel * (compress ? 2 : dtype_size(dtype));
    names.push_back(model_.params[p].fqn);
  }
  if (hook == CommHook::fp16_compress) dtype = DType::float16;
  if (hook == CommHook::bf16_compress) dtype = DType::bfloat16;
  const int id = emit_collective(CollectiveKind::all_reduce, "c10d.allreduce_", ddp.dims, bytes, bytes, bytes, dtype,
                                 "ddp." + group_name(ddp.dims), Phase::backward, ddp.module,
                                 fmt::format("ddp bucket {}", bucket), std::move(names), {producer});
  iteration_grad_ops_.push_back(tag(id, OpRole::ddp_bucket));
}

void Planner::ddp_end_backward(DdpInstance& ddp) {
  if (!ddp.hooks_active) return;
  if (ddp.delay_all_reduce) {
    // Static graph, first iteration: _DDPSink queues delay_all_reduce after backward: the used
    // map first, then every bucket of the construction-time layout.
    const std::int64_t bytes = 4 * static_cast<std::int64_t>(ddp.params.size());
    iteration_grad_ops_.push_back(emit_collective(CollectiveKind::all_reduce, "c10d.allreduce_", ddp.dims, bytes, bytes, bytes,
                                                  DType::int32, "ddp." + group_name(ddp.dims), Phase::backward, ddp.module,
                                                  "ddp local_used_map", {}, {last_compute_}));
    tag(iteration_grad_ops_.back(), OpRole::ddp_used_map);
    for (int b = 0; b < static_cast<int>(ddp.buckets.size()); ++b) ddp_launch(ddp, b, last_compute_);
  }
  ++ddp.synced_backwards;
}

// ------------------------------------------------------------------------------------------------
// FSDP runtime (FSDP1 flat parameters, composable fully_shard).

int Planner::fsdp_all_gather(int u, Phase phase, const char* why) {
  FsdpUnit& unit = units_[u];
  const DType dtype = unit.config.param_dtype.value_or(unit.orig_dtype);
  const int d = dtype_size(dtype);
  std::vector<int> deps;
  // limit_all_gathers: at most two un-freed all-gathers in flight; the CPU waits for the oldest
  // free event before issuing another.
  if (unit.config.limit_all_gathers && free_events_.size() >= 2) {
    deps.push_back(free_events_.front());
    free_events_.erase(free_events_.begin());
  }
  // The shards it gathers are the ones the last optimizer step wrote.
  deps.push_back(last_optimizer_op_);
  std::vector<std::string> names;
  for (int p : unit.params) names.push_back(model_.params[p].fqn);
  const std::string label = model_.modules[unit.module].fqn.empty() ? model_.name : model_.modules[unit.module].fqn;
  const int id = emit_collective(CollectiveKind::all_gather, "c10d._allgather_base_", unit.shard_dims, unit.padded * d,
                                 unit.shard * d, unit.padded * d, dtype, "fsdp.unshard", phase, unit.module,
                                 fmt::format("fsdp unit {} ({})", label, why), std::move(names), deps);
  tag(id, OpRole::fsdp_unshard);
  unit.unsharded = true;
  unit.all_gather_op = id;
  memory(unit.padded * d, false, true);
  return id;
}

void Planner::fsdp_reshard(int u) {
  FsdpUnit& unit = units_[u];
  if (!unit.unsharded) return;
  unit.unsharded = false;
  memory(-unit.padded * dtype_size(unit.config.param_dtype.value_or(unit.orig_dtype)), false, true);
  if (unit.config.limit_all_gathers) free_events_.push_back(last_compute_);
}

int Planner::next_backward_unit(int u) const {
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

void Planner::fsdp_pre_forward(int u, Mode mode) {
  FsdpUnit& unit = units_[u];
  if (!unit.has_handle()) return;
  if (mode == Mode::replay) {
    // A recomputed region re-enters units whose pre-backward has not fired yet: they run a
    // normal pre-forward (FSDP returns early only in BACKWARD_PRE state).
    if (!unit.backward_pre_done && !unit.unsharded) fsdp_all_gather(u, Phase::recompute, "recompute pre-forward");
    return;
  }
  if (!first_iteration_done_) first_forward_unit_order_.push_back(u);
  if (unit.prefetched) unit.prefetched = false;
  else if (!unit.unsharded) fsdp_all_gather(u, Phase::forward, "pre-forward");
  // forward_prefetch follows the first iteration's order, so it takes effect from iteration 2.
  if (unit.config.forward_prefetch && first_iteration_done_) {
    auto it = std::find(first_forward_unit_order_.begin(), first_forward_unit_order_.end(), u);
    if (it != first_forward_unit_order_.end() && it + 1 != first_forward_unit_order_.end()) {
      FsdpUnit& next = units_[*(it + 1)];
      if (!next.unsharded && !next.prefetched) {
        fsdp_all_gather(*(it + 1), Phase::forward, "forward prefetch");
        next.prefetched = true;
      }
    }
  }
}

void Planner::fsdp_post_forward(int u, Mode mode) {
  FsdpUnit& unit = units_[u];
  if (!unit.has_handle()) return;
  const ShardingStrategy s = unit.config.strategy;
  const bool reshard_after_forward = s == ShardingStrategy::full_shard || s == ShardingStrategy::hybrid_shard;
  // _post_forward returns at once in a recomputed forward that runs after the unit's
  // pre-backward (handle state BACKWARD_PRE): the parameters stay unsharded for the backward.
  if (mode == Mode::replay && unit.backward_pre_done) return;
  if (!unit.root && reshard_after_forward) fsdp_reshard(u);
  if (mode == Mode::replay) return;
  unit.post_forward_order = post_forward_counter_++;
  unit_by_post_forward_order_.push_back(u);
  // The pre-backward hook sits on the unit's outputs: it fires when their gradient arrives.
  if (hook_run_end_ != tape_.size()) hook_run_begin_ = tape_.size();
  tape_.push_back([this, u]() { fsdp_pre_backward(u); });
  hook_run_end_ = tape_.size();
}

void Planner::fsdp_pre_backward(int u) {
  FsdpUnit& unit = units_[u];
  if (unit.prefetched) unit.prefetched = false;
  else if (!unit.unsharded) fsdp_all_gather(u, Phase::backward, "pre-backward");
  unit.backward_pre_done = true;
  if (unit.config.backward_prefetch != BackwardPrefetch::backward_pre) return;
  const int next = next_backward_unit(u);
  if (next < 0) return;
  FsdpUnit& target = units_[next];
  if (target.has_handle() && !target.unsharded && !target.backward_pre_done && !target.prefetched) {
    fsdp_all_gather(next, Phase::backward, "backward prefetch");
    target.prefetched = true;
  }
}

void Planner::fsdp_post_backward(int u, int producer) {
  FsdpUnit& unit = units_[u];
  const ShardingStrategy s = unit.config.strategy;
  const bool sharded = s != ShardingStrategy::no_shard;
  const bool reshard_after_forward = s == ShardingStrategy::full_shard || s == ShardingStrategy::hybrid_shard;
  if (sharded && (sync_ || reshard_after_forward)) fsdp_reshard(u);
  if (unit.config.backward_prefetch == BackwardPrefetch::backward_post) {
    const int next = next_backward_unit(u);
    if (next >= 0 && units_[next].has_handle() && !units_[next].unsharded && !units_[next].backward_pre_done &&
        !units_[next].prefetched) {
      fsdp_all_gather(next, Phase::backward, "backward prefetch");
      units_[next].prefetched = true;
    }
  }
  if (!sync_) return;  // no_sync: gradients accumulate unsharded
  const DType reduce = unit.config.reduce_dtype.value_or(unit.config.param_dtype.value_or(unit.orig_dtype));
  const int d = dtype_size(reduce);
  std::vector<std::string> names;
  for (int p : unit.params) names.push_back(model_.params[p].fqn);
  const std::string label = model_.modules[unit.module].fqn.empty() ? model_.name : model_.modules[unit.module].fqn;
  int id = -1;
  if (!sharded) {
    id = emit_collective(CollectiveKind::all_reduce, "c10d.allreduce_", unit.shard_dims, unit.numel * d, unit.numel * d,
                         unit.numel * d, reduce, "fsdp.reduce_scatter", Phase::backward, unit.module,
                         fmt::format("fsdp unit {} (NO_SHARD gradient)", label), names, {producer});
    tag(id, OpRole::fsdp_reduce_grad);
  } else {
    id = emit_collective(CollectiveKind::reduce_scatter, "c10d._reduce_scatter_base_", unit.shard_dims, unit.padded * d,
                         unit.padded * d, unit.shard * d, reduce, "fsdp.reduce_scatter", Phase::backward, unit.module,
                         fmt::format("fsdp unit {} (post-backward)", label), names, {producer});
    tag(id, OpRole::fsdp_reduce_grad);
    if (!unit.replicate_dims.empty())
      id = tag(emit_collective(CollectiveKind::all_reduce, "c10d.allreduce_", unit.replicate_dims, unit.shard * d,
                               unit.shard * d, unit.shard * d, reduce, "fsdp.all_reduce", Phase::backward, unit.module,
                               fmt::format("fsdp unit {} (HSDP replicate)", label), names, {id}),
               OpRole::fsdp_replicate_grad);
  }
  iteration_grad_ops_.push_back(id);
  // The unsharded gradient becomes the sharded one.
  const std::int64_t unsharded = unit.padded * dtype_size(unit.config.param_dtype.value_or(unit.orig_dtype));
  memory(unit.shard * dtype_size(unit.orig_dtype) - unsharded, false, false, true);
  unit.grad_allocated = false;
}

void Planner::sync_module_states() {
  constexpr std::int64_t kBroadcastBucket = 250 * kMiB;
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
    const FsdpUnit& unit = units_[u];
    if (!unit.config.sync_module_states || !unit.has_handle()) continue;
    std::vector<std::vector<int>> groups{unit.shard_dims};
    if (!unit.replicate_dims.empty()) groups.push_back(unit.replicate_dims);
    for (const auto& dims : groups) {
      std::vector<std::string> names;
      std::int64_t bytes = 0;
      auto flush = [&]() {
        if (names.empty()) return;
        tag(emit_collective(CollectiveKind::broadcast, "c10d.broadcast_", dims, bytes, bytes, bytes, unit.orig_dtype,
                            "fsdp.unshard", Phase::init, unit.module, "fsdp sync_module_states", names, {}),
            OpRole::fsdp_module_states);
        names.clear();
        bytes = 0;
      };
      for (int p : unit.params) {
        const std::int64_t b = params_[p].local_numel * dtype_size(model_.params[p].dtype);
        if (bytes > 0 && bytes + b > kBroadcastBucket) flush();
        names.push_back(model_.params[p].fqn);
        bytes += b;
      }
      flush();
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Optimizer and the iteration loop.

void Planner::optimizer_step() {
  const OptimizerConfig& opt = plan_.optimizer;
  double per_element = 2;  // p -= lr * g
  int states = 0;
  if (opt.kind == OptimizerKind::sgd) {
    if (opt.momentum != 0) {
      per_element += 2;
      states = 1;
    }
  } else {
    per_element = 12;
    states = opt.amsgrad ? 3 : 2;
  }
  if (opt.weight_decay != 0) per_element += 2;
  double elements = 0;
  std::int64_t bytes = 0;
  for (std::size_t p = 0; p < params_.size(); ++p) {
    if (params_[p].fsdp_unit >= 0 || !model_.params[p].requires_grad) continue;
    elements += static_cast<double>(params_[p].local_numel);
    bytes += params_[p].local_numel * dtype_size(model_.params[p].dtype) * (3 + 2 * states);
  }
  for (const FsdpUnit& unit : units_) {
    if (unit.config.cpu_offload) continue;  // the sharded step runs on the CPU
    elements += static_cast<double>(unit.shard);
    bytes += unit.shard * dtype_size(unit.orig_dtype) * (3 + 2 * states);
  }
  last_optimizer_op_ = tag(emit_compute("optimizer.step", 0, Phase::optimizer, "optimizer", per_element * elements,
                                        bytes, iteration_grad_ops_),
                           OpRole::optimizer);
  // zero_grad(set_to_none=True)
  memory(-grad_bytes_, false, false, true);
}

void Planner::run_iteration() {
  sync_ = iteration_ % plan_.gradient_accumulation_steps == 0;
  IterationRecord record;
  record.index = iteration_;
  record.sync = sync_;
  result_.iterations.push_back(record);
  tape_.clear();
  hook_run_end_ = SIZE_MAX;
  iteration_grad_ops_.clear();
  post_forward_counter_ = 0;
  unit_by_post_forward_order_.clear();
  for (FsdpUnit& unit : units_) {
    unit.backward_pre_done = false;
    unit.prefetched = false;
    // The flat parameter's post-backward hook fires once the gradients of the parameters the
    // forward used are in: an unused parameter never gets one, and must not hold the
    // reduce-scatter back (FSDP1's hook sits on the FlatParameter's AccumulateGrad).
    unit.pending_grads = static_cast<int>(
        std::count_if(unit.params.begin(), unit.params.end(), [&](int p) { return used_in_forward_[p]; }));
    unit.post_forward_order = -1;
  }
  if (iteration_ == 1) sync_module_states();

  const std::int64_t seq = plan_.seq_len > 0 ? plan_.seq_len : model_.seq_len;
  Activation act;
  act.dtype = act_dtype();
  act.requires_grad = plan_.input_requires_grad;
  if (seq > 0) act.shape = {plan_.batch_size, seq, model_.token_input ? 1 : model_.input_features};
  else act.shape = {plan_.batch_size, model_.input_features};
  forward_module(0, act, Mode::normal);
  first_iteration_done_ = true;

  for (auto it = tape_.rbegin(); it != tape_.rend(); ++it) (*it)();
  for (DdpInstance& ddp : ddps_) ddp_end_backward(ddp);
  if (sync_) optimizer_step();
}

PlanResult Planner::run() {
  if (options_.rank < 0 || options_.rank >= plan_.world_size)
    throw PlanError(fmt::format("--rank {} is outside the world of {} ranks", options_.rank, plan_.world_size));
  result_.rank = options_.rank;
  result_.coordinate = mesh_.coordinate(options_.rank);
  result_.program.world_size = plan_.world_size;
  result_.program.mesh = mesh_;
  result_.program.stream_id("compute");
  setup();
  for (FsdpUnit& unit : units_) unit.unsharded = unit.config.strategy == ShardingStrategy::no_shard;
  for (FsdpUnit& unit : units_)
    if (unit.config.strategy == ShardingStrategy::no_shard) memory(unit.padded * dtype_size(unit.orig_dtype), false, true);
  const int iterations = options_.iterations > 0 ? options_.iterations : plan_.iterations > 0 ? plan_.iterations : 3;
  for (iteration_ = 1; iteration_ <= iterations; ++iteration_) {
    if (iteration_ == iterations) {
      // Report the steady state: peaks of the last iteration only.
      peak_ = static_bytes_ + dynamic_bytes_;
      activation_peak_ = activation_bytes_;
      unsharded_peak_ = unsharded_bytes_;
      grad_peak_ = grad_bytes_;
      peak_at_ = "iteration start";
    }
    run_iteration();
  }
  result_.program.iterations = iterations;

  for (const auto& group : result_.program.groups) result_.group_ranks.push_back(mesh_.group_ranks(options_.rank, group.mesh_dims));
  MemoryReport& memory = result_.memory;
  memory.gradients = grad_peak_;
  memory.activations = activation_peak_;
  memory.unsharded_params_peak = unsharded_peak_;
  memory.peak = peak_;
  memory.peak_at = peak_at_;
  if (plan_.device_memory_gib) {
    memory.device_memory_bytes = *plan_.device_memory_gib * 1024.0 * 1024.0 * 1024.0;
    memory.out_of_memory = static_cast<double>(memory.peak) > *memory.device_memory_bytes;
    if (memory.out_of_memory)
      result_.warnings.push_back(fmt::format("out of memory: peak {:.2f} GiB exceeds the device's {:.2f} GiB (at {})",
                                             memory.peak / 1073741824.0, *plan_.device_memory_gib, memory.peak_at));
  }

  auto to_buckets = [&](const DdpInstance& ddp, const std::vector<std::vector<int>>& buckets,
                        const std::vector<std::int64_t>& limits) {
    std::vector<DdpBucket> out;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      DdpBucket bucket;
      bucket.indices = buckets[b];
      bucket.size_limit = b < limits.size() ? limits[b] : 0;
      for (int v : buckets[b]) {
        const int p = ddp.params[v];
        bucket.params.push_back(model_.params[p].fqn);
        bucket.bytes += params_[p].local_numel * dtype_size(model_.params[p].dtype);
      }
      out.push_back(std::move(bucket));
    }
    return out;
  };
  for (const DdpInstance& ddp : ddps_) {
    DdpReport report;
    report.module = model_.modules[ddp.module].fqn;
    report.group = group_name(ddp.dims);
    report.group_dims = ddp.dims;
    report.group_size = mesh_.group_size(ddp.dims);
    report.comm_hook = ddp.config.comm_hook;
    report.init_sync = ddp.config.init_sync;
    const std::string& prefix = model_.modules[ddp.module].fqn;
    for (int p : ddp.params)
      report.params.push_back(prefix.empty() ? model_.params[p].fqn : model_.params[p].fqn.substr(prefix.size() + 1));
    report.initial = to_buckets(ddp, ddp.initial_buckets, ddp.initial_limits);
    if (ddp.rebuilt) report.rebuilt = to_buckets(ddp, ddp.buckets, ddp.limits);
    report.rebuilt_at_iteration = ddp.rebuilt_at;
    // Compiled DDP (python_reducer): Inductor fuses the per-parameter all-reduces in backward order.
    std::vector<std::int64_t> bytes;
    for (int v : ddp.first_ready_order)
      bytes.push_back(params_[ddp.params[v]].local_numel * dtype_size(model_.params[ddp.params[v]].dtype));
    const std::int64_t cap = ddp.config.bucket_cap_mb ? static_cast<std::int64_t>(*ddp.config.bucket_cap_mb * kMiB) : kDefaultBucketBytesCap;
    for (auto [begin, end] : inductor_ddp_fusion(bytes, cap)) {
      std::vector<int> indices(ddp.first_ready_order.begin() + begin, ddp.first_ready_order.begin() + end);
      const std::int64_t threshold = report.compiled.empty() ? kMiB : cap;  // Inductor's first bucket: 1 MiB
      report.compiled.push_back(to_buckets(ddp, {indices}, {threshold}).front());
    }
    result_.ddp.push_back(std::move(report));
  }
  for (const FsdpUnit& unit : units_) {
    FsdpUnitReport report;
    report.module = model_.modules[unit.module].fqn;
    report.group = group_name(unit.shard_dims);
    report.replicate_group = unit.replicate_dims.empty() ? "" : group_name(unit.replicate_dims);
    report.group_dims = unit.shard_dims;
    report.replicate_dims = unit.replicate_dims;
    report.root = unit.root;
    for (int p : unit.params) report.params.push_back(model_.params[p].fqn);
    report.offsets = flat_offsets(unit);
    report.numel = unit.numel;
    report.shard_numel = unit.shard;
    report.padded_numel = unit.padded;
    report.strategy = unit.config.strategy;
    report.sync_module_states = unit.config.sync_module_states;
    result_.fsdp.push_back(std::move(report));
  }
  for (const ParamState& state : params_) {
    ParamLayout layout;
    layout.local_shape = state.local_shape;
    layout.placement = state.dtensor ? state.placement : Placement::replicate();
    if (state.dtensor) layout.tp_dims = state.tp_dims;
    layout.fsdp_unit = state.fsdp_unit;
    layout.ddp = state.ddp;
    result_.params.push_back(std::move(layout));
  }
  return std::move(result_);
}

}  // namespace

PlanResult plan_training(const Model& model, const Plan& plan, const PlanOptions& options) {
  return Planner(model, plan, options).run();
}

std::map<std::string, int> PlanResult::counts() const {
  std::map<std::string, int> out;
  if (iterations.empty()) return out;
  for (const CollectiveRecord& c : iterations.back().collectives) ++out[c.op];
  return out;
}

std::map<std::string, std::map<std::string, int>> PlanResult::counts_by_phase() const {
  std::map<std::string, std::map<std::string, int>> out;
  if (iterations.empty()) return out;
  for (const CollectiveRecord& c : iterations.back().collectives) ++out[std::string(phase_name(c.phase))][c.op];
  return out;
}

std::map<std::string, std::map<std::string, int>> PlanResult::counts_by_module() const {
  std::map<std::string, std::map<std::string, int>> out;
  if (iterations.empty()) return out;
  for (const CollectiveRecord& c : iterations.back().collectives) ++out[c.module.empty() ? "<root>" : c.module][c.op];
  return out;
}

}  // namespace stratsim::core
