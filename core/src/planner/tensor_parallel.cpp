#include "tensor_parallel.hpp"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"

namespace stratsim::core::planner {
namespace {

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

TensorParallel::TensorParallel(PlanContext& context, ProgramBuilder& builder, BackwardTape& tape, LiveTensors& live)
    : context_(context), builder_(builder), tape_(tape), live_(live) {
  modules_.resize(context.model.modules.size());
  partial_grad_dims_.assign(context.model.params.size(), {});
}

namespace {

const char* style_name(TPStyle style) {
  switch (style) {
    case TPStyle::colwise:
      return "ColwiseParallel";
    case TPStyle::rowwise:
      return "RowwiseParallel";
    case TPStyle::sequence_parallel:
      return "SequenceParallel";
    case TPStyle::prepare_input:
      return "PrepareModuleInput";
    case TPStyle::prepare_output:
      return "PrepareModuleOutput";
  }
  return "?";
}

// What a leaf does to a DTensor input's placement: keeps it (element-wise ops, dropout, norms
// over the feature dim) or is not modelled on DTensors.
bool keeps_placement(LeafKind leaf) {
  return is_elementwise(leaf) || leaf == LeafKind::dropout || leaf == LeafKind::rotary || leaf == LeafKind::rms_norm ||
         leaf == LeafKind::layer_norm;
}

bool is_norm(LeafKind leaf) { return leaf == LeafKind::rms_norm || leaf == LeafKind::layer_norm; }

// A plan's Shard(d) normalised against the activation it lays out; a dim outside it is a PlanError
// (DTensor raises an IndexError there), never an out-of-range access.
Placement in_range(Placement placement, int rank, const std::string& where, const char* what) {
  const Placement normalized = placement.normalized(rank);
  if (normalized.is_shard() && (normalized.dim < 0 || normalized.dim >= rank))
    throw PlanError(fmt::format("{}: {} {} is out of range for a {}-D activation", where, what, placement.str(), rank));
  return normalized;
}

// PyTorch's words for an op that mixes a plain tensor and a DTensor (DTensor's dispatcher).
std::string mixed_tensor_error(const std::string& where, const std::string& op) {
  return fmt::format(
      "{}: {} got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor before calling "
      "distributed operators!",
      where, op);
}

}  // namespace

void TensorParallel::apply_parallelize(const ParallelizeStep& step, const PlanStep& where) {
  const int base = context_.module_or_fail(step.module, where.where);
  const std::vector<int> dims = context_.dims_of(step.mesh_dims);
  // Every (module, style) the plan's patterns match, styled in module pre-order.
  std::vector<std::pair<int, const TPModuleSpec*>> styled;
  for (const auto& [pattern, spec] : step.plan) {
    bool matched = false;
    for (int m = base; m < context_.model.modules[base].subtree_end; ++m) {
      const Module& module = context_.model.modules[m];
      std::string relative =
          base == 0 ? module.fqn
                    : module.fqn.substr(std::min(module.fqn.size(), context_.model.modules[base].fqn.size() + 1));
      if (m == base || !fqn_matches(pattern, relative)) continue;
      matched = true;
      styled.emplace_back(m, &spec);
    }
    if (!matched)
      throw PlanError(fmt::format("{}: plan key \"{}\" matches no submodule of \"{}\"", where.where, pattern,
                                  step.module.empty() ? context_.model.name : step.module));
  }
  std::stable_sort(styled.begin(), styled.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [m, spec] : styled) apply_style(m, *spec, dims, where);
}

void TensorParallel::apply_style(int m, const TPModuleSpec& spec, const std::vector<int>& dims, const PlanStep& where) {
  const Module& module = context_.model.modules[m];
  const int tp = context_.mesh.group_size(dims);
  const char* style = style_name(spec.style);
  if (modules_[m].parallel)
    throw PlanError(
        fmt::format("{}: \"{}\" is matched by two plan entries ({} and {}); stratsim models one style "
                    "per module",
                    where.where, module.fqn, style_name(modules_[m].spec.style), style));
  const bool shards = spec.style == TPStyle::colwise || spec.style == TPStyle::rowwise;
  if (shards && module.leaf != LeafKind::linear && module.leaf != LeafKind::embedding)
    throw PlanError(fmt::format("{}: \"{}\" is a {}: {} currently only support nn.Linear and nn.Embedding!",
                                where.where, module.fqn, module.type, style));
  if (spec.style == TPStyle::sequence_parallel && !keeps_placement(module.leaf))
    throw PlanError(
        fmt::format("{}: \"{}\" is a {}: SequenceParallel is modelled on norms, dropout and "
                    "element-wise modules",
                    where.where, module.fqn, module.type));
  if (spec.style == TPStyle::sequence_parallel && spec.sequence_dim == -1)
    throw PlanError(
        fmt::format("{}: \"{}\": SequenceParallel on the last (feature) dim is not modelled", where.where, module.fqn));
  const bool owns_params = shards || spec.style == TPStyle::sequence_parallel;
  if (owns_params) {
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
  }
  modules_[m].parallel = true;
  modules_[m].spec = spec;
  modules_[m].dims = dims;
  if (spec.style == TPStyle::sequence_parallel) {
    // _replicate_module_fn: DTensor.from_local(param, [Replicate()]) -- the norm's ones init is the
    // same everywhere, so nothing is sent.
    for (int p : module.params) {
      context_.params[p].dtensor = true;
      context_.params[p].placement = Placement::replicate();
      context_.params[p].tp_dims = dims;
    }
    return;
  }
  if (!shards) return;
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
    state.replicated_grad = module.leaf != LeafKind::linear && spec.style == TPStyle::rowwise;
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

void TensorParallel::begin_iteration() { grads_.clear(); }

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
  const std::string& label = context_.label(m);
  if (tp.distributed) {
    const Placement declared = in_range(tp.input_layout.value_or(Placement::replicate()), rank, label, "input_layouts");
    return {m, declared, declared};
  }
  switch (tp.spec.style) {
    case TPStyle::sequence_parallel: {
      const Placement sequence = in_range(Placement::shard(tp.spec.sequence_dim), rank, label, "sequence_dim");
      return {m, sequence, sequence};
    }
    case TPStyle::prepare_input: {
      const Placement declared =
          in_range(tp.spec.input_layout.value_or(Placement::replicate()), rank, label, "input_layouts");
      return {m, declared,
              in_range(tp.spec.desired_input_layout.value_or(declared), rank, label, "desired_input_layouts")};
    }
    default:
      break;
  }
  const bool colwise = tp.spec.style == TPStyle::colwise;
  const bool embedding = context_.model.modules[m].leaf == LeafKind::embedding;
  const Placement default_layout = colwise ? Placement::replicate() : Placement::shard(-1);
  const Placement declared = in_range(tp.spec.input_layout.value_or(default_layout), rank, label, "input_layouts");
  // RowwiseParallel wants Shard(-1) for Linear but Replicate (token ids) for Embedding.
  const Placement desired = colwise || embedding ? Placement::replicate() : Placement::shard(-1).normalized(rank);
  return {m, declared, desired};
}

void TensorParallel::record_boundary(const TpBoundary& layouts) {
  builder_.result.tp_inputs.push_back(layouts);
  if (builder_.result.tp_inputs.size() == 1) {
    builder_.result.input_placement = layouts.declared;
    builder_.result.input_dims = modules_[layouts.module].dims;
  }
}

// ------------------------------------------------------------------------------------------------
// DTensor autograd between modules.

void TensorParallel::leave_grad(int node, Placement placement) {
  auto [it, inserted] = grads_.try_emplace(node, placement);
  // Shares of one gradient sum: a Partial share keeps the sum Partial.
  if (!inserted && placement.is_partial()) it->second = placement;
}

Placement TensorParallel::take_grad(int node, Placement fallback) {
  const auto it = grads_.find(node);
  if (it == grads_.end()) return fallback.is_partial() ? Placement::replicate() : fallback;
  const Placement placement = it->second;
  grads_.erase(it);
  return placement;
}

void TensorParallel::from_local(int m, Activation& act, Placement placement, const std::vector<int>& dims, Mode mode) {
  act.dtensor = placement;
  act.dtensor_dims = dims;
  new_node(act);
  if (mode == Mode::replay || !act.requires_grad) return;
  // _FromTorchTensor.backward: the gradient goes back to the placement the tensor was declared in
  // (Partial read as Replicate), then to the local tensor.
  const Placement declared = placement.is_partial() ? Placement::replicate() : placement;
  tape_.push([this, m, node = act.grad_node, grad = act, declared, dims]() {
    const Placement arrived = take_grad(node, declared);
    const RedistributeOp op = redistribute_op(arrived, declared, grad.rank());
    redistribute(op, grad, OpRole::tp_grad_input, arrived, declared, dims, Phase::backward, m,
                 fmt::format("tp {} from_local grad {}->{}", context_.label(m), arrived.str(), declared.str()));
  });
}

void TensorParallel::to_local(Activation& act) {
  act.dtensor.reset();
  act.dtensor_dims.clear();
  act.grad_node = -1;
}

void TensorParallel::redistribute_dtensor(int m, Activation& act, Placement to, Mode mode, const char* what) {
  const Placement from = *act.dtensor;
  const RedistributeOp op = redistribute_op(from, to, act.rank());
  if (op == RedistributeOp::none && from == to) return;
  const int size = context_.mesh.group_size(act.dtensor_dims);
  redistribute(op, act, OpRole::tp_input, from, to, act.dtensor_dims, phase_of(mode), m,
               fmt::format("tp {} {} {}->{}", context_.label(m), what, from.str(), to.str()));
  if (op != RedistributeOp::none) act.id = context_.fresh_tensor();
  reshape_after_redistribute(act, op, from, to, size);
  if (op != RedistributeOp::none) live_.make(act.id, act.bytes());
  const int before = act.grad_node;
  act.dtensor = to;
  new_node(act);
  if (mode == Mode::replay || !act.requires_grad) return;
  // Redistribute.backward: the gradient goes back to `from`, except that a Partial source takes a
  // sharded or replicated gradient as Replicate (reducing it again would be useless).
  tape_.push([this, m, before, node = act.grad_node, grad = act, from, to]() {
    const Placement arrived = take_grad(node, to);
    const Placement target = from.is_partial() && !arrived.is_partial() ? Placement::replicate() : from;
    const RedistributeOp back = redistribute_op(arrived, target, grad.rank());
    redistribute(back, grad, OpRole::tp_grad_input, arrived, target, grad.dtensor_dims, Phase::backward, m,
                 fmt::format("tp {} redistribute grad {}->{}", context_.label(m), arrived.str(), target.str()));
    leave_grad(before, target);
  });
}

// ------------------------------------------------------------------------------------------------
// Module hooks.

void TensorParallel::input_hook(int m, Activation& act, Mode mode) {
  const ModuleState& tp = modules_[m];
  if (!tp.parallel && !tp.distributed) return;
  if (!tp.distributed &&
      (tp.spec.style == TPStyle::prepare_output || (tp.spec.style == TPStyle::prepare_input && !tp.spec.input_layout)))
    return;  // no input layout: nothing to record or redistribute
  const TpBoundary layouts = boundary(m, act.rank());
  if (mode != Mode::replay && context_.iteration == 1) record_boundary(layouts);
  if (tp.distributed) {
    // input_fn: DTensor.from_local(x, [layout]) costs nothing; a sharded input makes the
    // replicated parameters' gradients Partial, reduced in backward (see output_hook).
    return;
  }
  switch (tp.spec.style) {
    case TPStyle::colwise:
    case TPStyle::rowwise:
      styled_input(m, act, mode);
      return;
    case TPStyle::sequence_parallel:
      // A DTensor not sharded on the sequence dim is redistributed; a plain tensor is taken to be
      // sharded on it already.
      if (act.dtensor) redistribute_dtensor(m, act, layouts.desired, mode, "input");
      else from_local(m, act, layouts.desired, tp.dims, mode);
      return;
    case TPStyle::prepare_input:
      if (!tp.spec.input_layout) return;
      if (!act.dtensor) from_local(m, act, layouts.declared, tp.dims, mode);
      // PyTorch compares the declared layouts, not the DTensor's own placement.
      if (layouts.declared != layouts.desired) redistribute_dtensor(m, act, layouts.desired, mode, "input");
      if (tp.spec.local_output()) to_local(act);
      return;
    case TPStyle::prepare_output:
      return;
  }
}

// ColwiseParallel / RowwiseParallel's input: a plain tensor is declared in input_layouts
// (from_local) and redistributed to the layout the style computes on; a DTensor is redistributed
// from its own placement, and its gradient goes back to whoever made it.
void TensorParallel::styled_input(int m, Activation& act, Mode mode) {
  const ModuleState& tp = modules_[m];
  const Phase phase = phase_of(mode);
  const int size = context_.mesh.group_size(tp.dims);
  const std::string& fqn = context_.model.modules[m].fqn;
  const bool colwise = tp.spec.style == TPStyle::colwise;
  const Module& module = context_.model.modules[m];
  const int rank = act.rank();
  const TpBoundary layouts = boundary(m, rank);
  const bool dtensor_input = act.dtensor.has_value();
  const Placement src = dtensor_input ? *act.dtensor : layouts.declared, dst = layouts.desired;
  // PyTorch redistributes only when input_layouts differs from the layout the style computes on;
  // a DTensor placed otherwise is then left to DTensor's op dispatch, which stratsim does not model.
  if (dtensor_input && layouts.declared == dst && src != dst)
    throw PlanError(fmt::format(
        "{}: receives a DTensor placed {} while its input_layouts ({}) equal the layout "
        "{} computes on, so PyTorch leaves the placement to DTensor's operator dispatch; "
        "not modelled (declare input_layouts={})",
        fqn, src.str(), layouts.declared.str(), colwise ? "ColwiseParallel" : "RowwiseParallel", src.str()));
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
  if (forward_op != RedistributeOp::none) live_.make(act.id, act.bytes());
  const int input_node = act.grad_node;
  to_local(act);  // the layer computes on its local shards
  if (mode == Mode::replay || !act.requires_grad) return;
  // Backward: the gradient at the desired layout (Partial for Colwise, whose weight is sharded on
  // its output dim; Shard(-1) for Rowwise) goes back to the input layout -- here for a plain
  // input (from_local's backward), by the DTensor's maker for a DTensor one.
  const Placement grad_src = colwise ? Placement::partial() : dst;
  if (dtensor_input && src == dst) {
    tape_.push([this, input_node, grad_src]() { leave_grad(input_node, grad_src); });
    return;
  }
  // Redistribute.backward takes a Partial source's sharded or replicated gradient as Replicate;
  // from_local's backward reads a Partial declaration as Replicate.
  const Placement target =
      src.is_partial() && (!dtensor_input || !grad_src.is_partial()) ? Placement::replicate() : src;
  const RedistributeOp backward_op = redistribute_op(grad_src, target, rank);
  Activation grad = act;  // the gradient has the post-redistribution local shape
  tape_.push([this, m, backward_op, grad, target, grad_src, tp, dtensor_input, input_node]() {
    redistribute(backward_op, grad, OpRole::tp_grad_input, grad_src, target, tp.dims, Phase::backward, m,
                 fmt::format("tp {} grad_input {}->{}", context_.model.modules[m].fqn, grad_src.str(), target.str()));
    if (dtensor_input) leave_grad(input_node, target);
  });
}

void TensorParallel::output_hook(int m, Activation& act, Mode mode) {
  const ModuleState& tp = modules_[m];
  if (!tp.parallel && !tp.distributed) return;
  if (tp.distributed) {
    // output_fn: to_local() costs nothing. The Partial gradients of its replicated parameters are
    // all-reduced from grad_ready (partial_grad_dims_, set in apply_distribute).
    if (mode != Mode::replay) tape_.output_replaced();
    return;
  }
  switch (tp.spec.style) {
    case TPStyle::colwise:
    case TPStyle::rowwise:
      // The output hook returns a new tensor (redistribute / to_local): hooks registered on the
      // inner output no longer sit on the module's output.
      if (mode != Mode::replay) tape_.output_replaced();
      styled_output(m, act, mode);
      return;
    case TPStyle::sequence_parallel:
      if (tp.spec.local_output() && act.dtensor) {
        if (mode != Mode::replay) tape_.output_replaced();
        to_local(act);
      }
      return;
    case TPStyle::prepare_input:
      return;  // a forward pre-hook only
    case TPStyle::prepare_output: {
      if (!tp.spec.output_layout) return;
      if (mode != Mode::replay) tape_.output_replaced();
      const int rank = act.rank();
      const Placement declared = in_range(*tp.spec.output_layout, rank, context_.label(m), "output_layouts");
      if (!act.dtensor) from_local(m, act, declared, tp.dims, mode);
      const Placement desired =
          in_range(tp.spec.desired_output_layout.value_or(declared), rank, context_.label(m), "desired_output_layouts");
      if (declared != desired) redistribute_dtensor(m, act, desired, mode, "output");
      if (tp.spec.local_output()) to_local(act);
      return;
    }
  }
}

// ColwiseParallel / RowwiseParallel's output: the local result (Shard(-1) for Colwise, Partial for
// Rowwise) is redistributed to output_layouts, then to_local unless use_local_output=False.
void TensorParallel::styled_output(int m, Activation& act, Mode mode) {
  const ModuleState& tp = modules_[m];
  const Phase phase = phase_of(mode);
  const int size = context_.mesh.group_size(tp.dims);
  const std::string& fqn = context_.model.modules[m].fqn;
  const bool colwise = tp.spec.style == TPStyle::colwise;
  const int rank = act.rank();
  const Placement local = colwise ? Placement::shard(rank - 1) : Placement::partial();
  const Placement target =
      in_range(tp.spec.output_layout.value_or(colwise ? Placement::shard(-1) : Placement::replicate()), rank,
               context_.label(m), "output_layouts");
  const RedistributeOp forward_op = redistribute_op(local, target, rank);
  if (forward_op != RedistributeOp::none) {
    redistribute(forward_op, act, OpRole::tp_output, local, target, tp.dims, phase, m,
                 fmt::format("tp {} output {}->{}", fqn, local.str(), target.str()));
    act.id = context_.fresh_tensor();
  }
  reshape_after_redistribute(act, forward_op, local, target, size);
  if (forward_op != RedistributeOp::none) live_.make(act.id, act.bytes());
  to_local(act);
  if (!tp.spec.local_output()) {
    act.dtensor = target;
    act.dtensor_dims = tp.dims;
    new_node(act);
  }
  if (mode == Mode::replay) return;
  // Backward: the output gradient arrives in `target` (Partial read as Replicate: to_local's
  // backward) or, for a DTensor output, as its consumers left it; it returns to the local layout,
  // a Partial one taking a sharded or replicated gradient as Replicate.
  const bool dtensor_output = act.dtensor.has_value();
  Activation grad = act;
  tape_.push([this, m, grad, target, local, tp, dtensor_output]() {
    const Placement fallback = target.is_partial() ? Placement::replicate() : target;
    const Placement grad_src = dtensor_output ? take_grad(grad.grad_node, fallback) : fallback;
    const Placement grad_dst = local.is_partial() && !grad_src.is_partial() ? Placement::replicate() : local;
    const RedistributeOp backward_op = redistribute_op(grad_src, grad_dst, grad.rank());
    redistribute(
        backward_op, grad, OpRole::tp_grad_output, grad_src, grad_dst, tp.dims, Phase::backward, m,
        fmt::format("tp {} grad_output {}->{}", context_.model.modules[m].fqn, grad_src.str(), grad_dst.str()));
  });
}

// ------------------------------------------------------------------------------------------------
// Leaves and joins on DTensors.

void TensorParallel::leaf_hook(int m, const Activation& input, Activation& output, Mode mode) {
  if (!input.dtensor) return;
  const Module& module = context_.model.modules[m];
  const std::string& label = context_.label(m);
  const Placement placement = *input.dtensor;
  if (module.leaf == LeafKind::cross_entropy) {
    loss_parallel(m, input, mode);
    to_local(output);
    if (mode != Mode::replay && input.requires_grad)  // the logits' gradient: sharded as they were
      tape_.push([this, node = input.grad_node, placement]() { leave_grad(node, placement); });
    return;
  }
  for (int p : module.params)
    if (!context_.params[p].dtensor) throw PlanError(mixed_tensor_error(label, module.type));
  if (!keeps_placement(module.leaf))
    throw PlanError(
        fmt::format("{}: a {} on a DTensor input ({}) is not modelled; give it a local tensor "
                    "(use_local_output=True on the style before it)",
                    label, module.type, placement.str()));
  // Norms and non-linear element-wise ops first make a Partial input Replicate (an all-reduce).
  if (placement.is_partial())
    throw PlanError(
        fmt::format("{}: a {} on a Partial DTensor (PyTorch all-reduces it first) is not modelled; "
                    "redistribute it to Replicate() or Shard(d) before",
                    label, module.type));
  if (is_norm(module.leaf) && placement.is_shard() && placement.dim == input.rank() - 1)
    throw PlanError(fmt::format("{}: a {} over a DTensor sharded on its normalized (last) dim is not modelled", label,
                                module.type));
  // The weight's gradient sums over the batch and sequence: sharded there, it is Partial.
  if (placement.is_shard())
    for (int p : module.params)
      if (partial_grad_dims_[p].empty())  // distribute_module reduces its own (reduce_partial_grad)
        context_.params[p].partial_grad_dims = input.dtensor_dims;
  output.dtensor = placement;
  output.dtensor_dims = input.dtensor_dims;
  new_node(output);
  if (mode == Mode::replay || !input.requires_grad) return;
  // Element-wise and norm backward: the input's gradient has the output's.
  tape_.push(
      [this, in = input.grad_node, out = output.grad_node, placement]() { leave_grad(in, take_grad(out, placement)); });
}

void TensorParallel::join_hook(int m, const std::vector<const Activation*>& inputs, Activation& output, Mode mode) {
  bool any = false, all = true;
  for (const Activation* in : inputs) {
    any = any || in->dtensor.has_value();
    all = all && in->dtensor.has_value();
  }
  if (!any) return;
  const std::string& label = context_.label(m);
  if (!all) throw PlanError(mixed_tensor_error(label, "a join"));
  const Placement placement = *inputs.front()->dtensor;
  for (const Activation* in : inputs)
    if (*in->dtensor != placement)
      throw PlanError(fmt::format("{}: a join of DTensors placed {} and {} is not modelled", label, placement.str(),
                                  in->dtensor->str()));
  output.dtensor = placement;
  output.dtensor_dims = inputs.front()->dtensor_dims;
  new_node(output);
  if (mode == Mode::replay || !output.requires_grad) return;
  std::vector<int> nodes;
  for (const Activation* in : inputs)
    if (in->requires_grad) nodes.push_back(in->grad_node);
  tape_.push([this, nodes, out = output.grad_node, placement]() {
    const Placement grad = take_grad(out, placement);
    for (int node : nodes) leave_grad(node, grad);
  });
}

// loss_parallel(): cross entropy over logits sharded on the class dim (torch.distributed.tensor.
// parallel.loss). log_softmax all-reduces the row max and the row sum of exponentials, nll_loss
// the target logit each rank holds or masks (_MaskPartial): three all-reduces of one float32 per
// token; backward is local.
void TensorParallel::loss_parallel(int m, const Activation& logits, Mode mode) {
  const std::string& label = context_.label(m);
  const Placement placement = *logits.dtensor;
  const int class_dim = logits.rank() - 1;
  if (!context_.plan.loss_parallel) throw PlanError(mixed_tensor_error(label, "aten.nll_loss_forward.default"));
  if (!placement.is_shard() || placement.dim != class_dim)
    throw PlanError(
        fmt::format("{}: loss_parallel() requires exactly one mesh dim to shard tensor dimension 1, "
                    "but got placements ({},) with 0 such mesh dim(s).",
                    label, placement.str()));
  const std::int64_t bytes = logits.tokens() * dtype_size(DType::float32);
  const char* what[] = {"max", "sumexp", "target logit"};
  for (const char* statistic : what) {
    const int id = builder_.collective({.kind = CollectiveKind::all_reduce,
                                        .key = "c10d_functional.all_reduce",
                                        .dims = logits.dtensor_dims,
                                        .bytes = bytes,
                                        .dtype = DType::float32,
                                        .stream = "tp." + context_.group_name(logits.dtensor_dims),
                                        .phase = phase_of(mode),
                                        .module = m,
                                        .reason = fmt::format("loss_parallel {} {}", label, statistic),
                                        .deps = {builder_.last_compute},
                                        .role = OpRole::tp_output});
    builder_.pending_deps.push_back(id);
  }
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

int all_reduce_partial_param_grad(const PlanContext& context, ProgramBuilder& builder, int p, std::int64_t bytes,
                                  DType dtype, int dep, Phase phase) {
  const Parameter& param = context.model.params[p];
  const std::vector<int>& dims = context.params[p].partial_grad_dims;
  return builder.collective({.kind = CollectiveKind::all_reduce,
                             .key = "c10d_functional.all_reduce",
                             .dims = dims,
                             .bytes = bytes,
                             .dtype = dtype,
                             .stream = "tp." + context.group_name(dims),
                             .phase = phase,
                             .module = param.module,
                             .reason = fmt::format("tp {} Partial grad -> Replicate", param.fqn),
                             .params = {param.fqn},
                             .deps = {dep},
                             .role = OpRole::tp_param_grad});
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
