#include "tensor_parallel.hpp"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"

namespace stratsim::core::planner {
namespace {

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

// Bytes of `tensor` with dimension `dim` padded to a multiple of `chunks`.
std::int64_t padded_bytes(const Activation& tensor, int dim, int chunks) {
  const std::int64_t extent = tensor.shape[static_cast<std::size_t>(dim)];
  if (extent == 0) return 0;
  return tensor.bytes() / extent * (ceil_div(extent, chunks) * chunks);
}

// The local shape after redistributing `act` from `src` to `dst` over `size` ranks: a gathered
// dimension grows to the padded whole, a scattered or locally chunked one shrinks to the padded
// shard (ceil), an all-to-all does both.
void reshape_after_redistribute(Activation& act, RedistributeOp op, Placement src, Placement dst, int size) {
  if (op == RedistributeOp::all_gather || op == RedistributeOp::all_to_all) act.shape[src.dim] *= size;
  const bool scattered = op == RedistributeOp::reduce_scatter || op == RedistributeOp::all_to_all;
  const bool chunked = src.is_replicate() && dst.is_shard();  // Replicate -> Shard: a local chunk
  if (scattered || chunked) act.shape[dst.dim] = ceil_div(act.shape[dst.dim], size);
}

}  // namespace

TensorParallel::TensorParallel(PlanContext& context, ProgramBuilder& builder, BackwardTape& tape)
    : context_(context), builder_(builder), tape_(tape) {
  modules_.resize(context.model.modules.size());
  partial_grad_dims_.assign(context.model.params.size(), {});
}

void TensorParallel::apply_parallelize(const ParallelizeStep& step, const PlanStep& where) {
  const int base = context_.module_or_fail(step.module, where.where);
  const std::vector<int> dims = context_.dims_of(step.mesh_dims);
  const int tp = context_.mesh.group_size(dims);
  for (const auto& [pattern, spec] : step.plan) {
    bool matched = false;
    for (int m = base; m < context_.model.modules[base].subtree_end; ++m) {
      const Module& module = context_.model.modules[m];
      std::string relative =
          base == 0 ? module.fqn
                    : module.fqn.substr(std::min(module.fqn.size(), context_.model.modules[base].fqn.size() + 1));
      if (m == base || !glob_fqn(pattern, relative)) continue;
      matched = true;
      const char* style = spec.style == TPStyle::colwise ? "ColwiseParallel" : "RowwiseParallel";
      if (module.leaf != LeafKind::linear && module.leaf != LeafKind::embedding)
        throw PlanError(fmt::format("{}: \"{}\" is a {}: {} currently only support nn.Linear and nn.Embedding!",
                                    where.where, module.fqn, module.type, style));
      bool replicated = false;  // replicate() collects its parameters lazily: look at the modules
      for (int a = m; a >= 0; a = context_.model.modules[a].parent)
        replicated = replicated || context_.replicate_step[a] >= 0;
      for (int p : module.params) {
        if (context_.params[p].fsdp_unit >= 0 || context_.params[p].fsdp2_group >= 0 || replicated)
          throw PlanError(
              fmt::format("{}: parameter {} is already managed by fully_shard/replicate; apply "
                          "parallelize_module first",
                          where.where, context_.model.params[p].fqn));
        if (context_.params[p].dtensor)
          throw PlanError(
              fmt::format("{}: parameter {} is already a DTensor", where.where, context_.model.params[p].fqn));
      }
      modules_[m].parallel = true;
      modules_[m].spec = spec;
      modules_[m].dims = dims;
      // Linear weight is [out, in]: Colwise shards out (dim 0, bias too), Rowwise shards in (dim 1,
      // bias replicated). Embedding weight is [num, dim]: Colwise shards dim 1, Rowwise dim 0.
      for (int p : module.params) {
        ParamState& state = context_.params[p];
        const Parameter& param = context_.model.params[p];
        int shard_dim = -1;
        if (module.leaf == LeafKind::linear)
          shard_dim = spec.style == TPStyle::colwise ? 0 : (param.name == "weight" ? 1 : -1);
        else shard_dim = spec.style == TPStyle::colwise ? 1 : 0;
        state.dtensor = true;
        state.tp_dims = dims;
        distributed_params_.push_back(p);
        if (shard_dim < 0 || shard_dim >= static_cast<int>(param.shape.size())) {
          state.placement = Placement::replicate();
          continue;
        }
        state.placement = Placement::shard(shard_dim);
        const std::int64_t extent = param.shape[shard_dim];
        if (extent % tp != 0)
          builder_.result.warnings.push_back(fmt::format(
              "{}: {} dim {} = {} is not divisible by the {} group size {}; "
              "DTensor shards it unevenly (padded to {})",
              where.where, param.fqn, shard_dim, extent, context_.group_name(dims), tp, ceil_div(extent, tp) * tp));
        state.local_shape[shard_dim] = ceil_div(extent, tp);
        state.local_numel = product(state.local_shape);
      }
    }
    if (!matched)
      throw PlanError(fmt::format("{}: plan key \"{}\" matches no submodule of \"{}\"", where.where, pattern,
                                  step.module.empty() ? context_.model.name : step.module));
  }
}

void TensorParallel::apply_distribute(const DistributeModuleStep& step, const PlanStep& where) {
  const int m = context_.module_or_fail(step.module, where.where);
  modules_[m].distributed = true;
  modules_[m].input_layout = step.input_layout;
  modules_[m].dims = context_.dims_of(step.mesh_dims);
  const bool sharded_input = step.input_layout && step.input_layout->is_shard();
  // partition_fn=None: every parameter becomes a Replicate DTensor.
  for (int sub = m; sub < context_.model.modules[m].subtree_end; ++sub)
    for (int p : context_.model.modules[sub].params) {
      if (!context_.params[p].dtensor) distributed_params_.push_back(p);
      context_.params[p].dtensor = true;
      context_.params[p].placement = Placement::replicate();
      context_.params[p].tp_dims = modules_[m].dims;
      // A replicated weight applied to a sharded input gets a Partial gradient; the from_local
      // (Replicate) that FSDP/replicate wrap it in all-reduces it in backward.
      if (sharded_input && context_.model.params[p].requires_grad) partial_grad_dims_[p] = modules_[m].dims;
    }
}

void TensorParallel::emit_distribution() {
  for (int p : distributed_params_) {
    const ParamState& state = context_.params[p];
    const Parameter& param = context_.model.params[p];
    const int d = dtype_size(param.dtype);
    const int size = context_.mesh.group_size(state.tp_dims);
    CollectiveSpec spec;
    spec.dims = state.tp_dims;
    spec.dtype = param.dtype;
    spec.stream = "tp." + context_.group_name(state.tp_dims);
    spec.phase = Phase::init;
    spec.module = param.module;
    spec.params = {param.fqn};
    spec.role = OpRole::tp_distribute;
    if (state.placement.is_shard()) {
      // Shard._split_tensor pads every chunk to ceil(n / size) rows: the root sends size of them.
      spec.kind = CollectiveKind::scatter;
      spec.key = "c10d.scatter_";
      spec.bytes = spec.input_bytes = state.local_numel * size * d;
      spec.output_bytes = state.local_numel * d;
      spec.reason = fmt::format("tp distribute_tensor {} {}", param.fqn, state.placement.str());
    } else {
      spec.kind = CollectiveKind::broadcast;
      spec.key = "c10d.broadcast_";
      spec.bytes = state.local_numel * d;
      spec.reason = fmt::format("tp distribute_tensor {} Replicate()", param.fqn);
    }
    builder_.collective(std::move(spec));
  }
}

// The layout a DTensor boundary declares for its input (input_layouts / distribute_module's
// from_local) and the one its style computes on. The first boundary in forward order also says
// how the model input is laid out: every module before it passes the rows through unchanged.
TpBoundary TensorParallel::boundary(int m, int rank) const {
  const ModuleState& tp = modules_[m];
  const bool colwise = tp.parallel && tp.spec.style == TPStyle::colwise;
  const bool embedding = context_.model.modules[m].leaf == LeafKind::embedding;
  const Placement default_layout = tp.distributed || colwise ? Placement::replicate() : Placement::shard(-1);
  const Placement declared =
      (tp.distributed ? tp.input_layout : tp.spec.input_layout).value_or(default_layout).normalized(rank);
  // RowwiseParallel wants Shard(-1) for Linear but Replicate (token ids) for Embedding.
  const Placement desired = tp.distributed         ? declared
                            : colwise || embedding ? Placement::replicate()
                                                   : Placement::shard(-1).normalized(rank);
  return {m, declared, desired};
}

void TensorParallel::record_boundary(const TpBoundary& layouts) {
  builder_.result.tp_inputs.push_back(layouts);
  if (builder_.result.tp_inputs.size() == 1) {
    builder_.result.input_placement = layouts.declared;
    builder_.result.input_dims = modules_[layouts.module].dims;
  }
}

// DTensor input handling of a module (parallelize_module style or distribute_module input_fn).
void TensorParallel::input_hook(int m, Activation& act, Mode mode) {
  const ModuleState& tp = modules_[m];
  if (!tp.parallel && !tp.distributed) return;
  const TpBoundary layouts = boundary(m, act.rank());
  if (mode != Mode::replay && context_.iteration == 1) record_boundary(layouts);
  if (tp.distributed) {
    // input_fn: DTensor.from_local(x, [layout]) costs nothing; a sharded input makes the
    // replicated parameters' gradients Partial, reduced in backward (see output_hook).
    return;
  }
  const Phase phase = phase_of(mode);
  const int size = context_.mesh.group_size(tp.dims);
  const std::string& fqn = context_.model.modules[m].fqn;
  const bool colwise = tp.spec.style == TPStyle::colwise;
  const Module& module = context_.model.modules[m];
  const int rank = act.rank();
  const Placement src = layouts.declared, dst = layouts.desired;
  if (module.leaf == LeafKind::linear) {
    // Branching blocks (wq/wk/wv read the same input) make the running width unreliable: take
    // the layer's in_features, local under a Shard(-1) input layout.
    const bool sharded_features = src.is_shard() && src.dim == rank - 1;
    act.shape.back() = sharded_features ? ceil_div(module.in_features, size) : module.in_features;
  }
  const RedistributeOp forward_op = redistribute_op(src, dst, rank);
  Activation before = act;
  if (forward_op != RedistributeOp::none) {
    redistribute(forward_op, before, OpRole::tp_input, src, dst, tp.dims, phase, m,
                 fmt::format("tp {} input {}->{}", fqn, src.str(), dst.str()));
    act.id = context_.fresh_tensor();  // a collective's output is a new tensor
  }
  reshape_after_redistribute(act, forward_op, src, dst, size);
  if (mode == Mode::replay || !act.requires_grad) return;
  // Backward: the gradient at the desired layout (Partial for Colwise, whose weight is sharded on
  // its output dim; Shard(-1) for Rowwise) goes back to the input layout.
  const Placement grad_src = colwise ? Placement::partial() : dst;
  const RedistributeOp backward_op = redistribute_op(grad_src, src, rank);
  if (backward_op == RedistributeOp::none) return;
  Activation grad = act;  // the gradient has the post-redistribution local shape
  tape_.push([this, m, backward_op, grad, src, grad_src, tp]() {
    redistribute(backward_op, grad, OpRole::tp_grad_input, grad_src, src, tp.dims, Phase::backward, m,
                 fmt::format("tp {} grad_input {}->{}", context_.model.modules[m].fqn, grad_src.str(), src.str()));
  });
}

void TensorParallel::output_hook(int m, Activation& act, Mode mode) {
  const ModuleState& tp = modules_[m];
  if (!tp.parallel && !tp.distributed) return;
  // The output hook returns a new tensor (redistribute / to_local): hooks registered on the
  // inner output no longer sit on the module's output.
  if (mode != Mode::replay) tape_.output_replaced();
  if (tp.distributed) {
    // output_fn: to_local() costs nothing. The Partial gradients of its replicated parameters are
    // all-reduced from grad_ready (partial_grad_dims_, set in apply_distribute).
    return;
  }
  const Phase phase = phase_of(mode);
  const int size = context_.mesh.group_size(tp.dims);
  const std::string& fqn = context_.model.modules[m].fqn;
  const bool colwise = tp.spec.style == TPStyle::colwise;
  const int rank = act.rank();
  const Placement local = colwise ? Placement::shard(rank - 1) : Placement::partial();
  const Placement target =
      tp.spec.output_layout.value_or(colwise ? Placement::shard(-1) : Placement::replicate()).normalized(rank);
  const RedistributeOp forward_op = redistribute_op(local, target, rank);
  if (forward_op != RedistributeOp::none) {
    redistribute(forward_op, act, OpRole::tp_output, local, target, tp.dims, phase, m,
                 fmt::format("tp {} output {}->{}", fqn, local.str(), target.str()));
    act.id = context_.fresh_tensor();
  }
  reshape_after_redistribute(act, forward_op, local, target, size);
  if (mode == Mode::replay) return;
  // Backward: the output gradient arrives in `target` (a Partial target reads as Replicate) and
  // returns to the local layout (Partial reads as Replicate).
  const Placement grad_src = target.is_partial() ? Placement::replicate() : target;
  const Placement grad_dst = local.is_partial() ? Placement::replicate() : local;
  const RedistributeOp backward_op = redistribute_op(grad_src, grad_dst, rank);
  if (backward_op == RedistributeOp::none) return;
  Activation grad = act;
  tape_.push([this, m, backward_op, grad, grad_src, grad_dst, tp]() {
    redistribute(
        backward_op, grad, OpRole::tp_grad_output, grad_src, grad_dst, tp.dims, Phase::backward, m,
        fmt::format("tp {} grad_output {}->{}", context_.model.modules[m].fqn, grad_src.str(), grad_dst.str()));
  });
}

// One DTensor redistribution of `tensor` (the local tensor before it) on `dims`.
int TensorParallel::redistribute(RedistributeOp op, const Activation& tensor, OpRole role, Placement from, Placement to,
                                 const std::vector<int>& dims, Phase phase, int module, const std::string& reason) {
  if (op == RedistributeOp::none) return -1;
  // Before 2.4 DTensor moved a shard to another dim by an all-gather and a local chunk.
  if (op == RedistributeOp::all_to_all && !context_.plan.torch_version.shard_dim_alltoall())
    op = RedistributeOp::all_gather;
  const int size = context_.mesh.group_size(dims);
  const std::int64_t local = tensor.bytes();
  // A reduce-scatter or all-to-all onto Shard(d) sends dimension d padded to size * ceil(n / size),
  // as DTensor pads uneven shards before the collective (Shard._reduce_shard_tensor and
  // _to_new_shard_dim); an all-gather's local shard is already the padded chunk.
  const std::int64_t padded = to.is_shard() ? padded_bytes(tensor, to.normalized(tensor.rank()).dim, size) : local;
  CollectiveSpec spec;
  spec.dims = dims;
  spec.dtype = tensor.dtype;
  spec.stream = "tp." + context_.group_name(dims);
  spec.phase = phase;
  spec.module = module;
  spec.reason = reason;
  spec.deps = {builder_.last_compute};
  spec.role = role;
  switch (op) {
    case RedistributeOp::none:
      break;
    case RedistributeOp::all_gather:
      spec.kind = CollectiveKind::all_gather;
      spec.key = "c10d_functional.all_gather_into_tensor";
      spec.bytes = spec.output_bytes = local * size;
      spec.input_bytes = local;
      break;
    case RedistributeOp::reduce_scatter:
      spec.kind = CollectiveKind::reduce_scatter;
      spec.key = "c10d_functional.reduce_scatter_tensor";
      spec.bytes = spec.input_bytes = padded;
      spec.output_bytes = padded / size;
      break;
    case RedistributeOp::all_reduce:
      spec.kind = CollectiveKind::all_reduce;
      spec.key = "c10d_functional.all_reduce";
      spec.bytes = local;
      break;
    case RedistributeOp::all_to_all:
      spec.kind = CollectiveKind::all_to_all;
      spec.key = "_dtensor.shard_dim_alltoall";
      spec.bytes = padded;
      break;
  }
  ProgramOp& emitted = builder_.result.program.ops[builder_.collective(std::move(spec))];
  emitted.from = from;
  emitted.to = to;
  // DTensor collectives are waited on before their result is used: the next compute depends on it.
  builder_.pending_deps.push_back(emitted.id);
  return emitted.id;
}

int TensorParallel::reduce_partial_grad(int p, int producer) {
  if (partial_grad_dims_[p].empty()) return producer;
  const Parameter& param = context_.model.params[p];
  const std::int64_t grad_bytes = context_.param_bytes(p);
  const std::vector<int>& dims = partial_grad_dims_[p];
  const int id = builder_.collective({.kind = CollectiveKind::all_reduce,
                                      .key = "c10d_functional.all_reduce",
                                      .dims = dims,
                                      .bytes = grad_bytes,
                                      .dtype = param.dtype,
                                      .stream = "tp." + context_.group_name(dims),
                                      .phase = Phase::backward,
                                      .module = param.module,
                                      .reason = fmt::format("tp {} Partial grad -> Replicate", param.fqn),
                                      .params = {param.fqn},
                                      .deps = {producer},
                                      .role = OpRole::tp_param_grad});
  builder_.pending_deps.push_back(id);
  return id;
}

}  // namespace stratsim::core::planner
