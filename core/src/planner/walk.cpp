#include "walk.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compute_cost.hpp"
#include "stratsim/core/caching_allocator.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/limits.hpp"

namespace stratsim::core::planner {

namespace {

// Every activation is at most (batch x sequence) rows of the model's widest layer; past
// kMaxTensorElements the plan is refused before any size is computed (README.md "Limits").
void check_activation_size(const Model& model, const std::vector<std::int64_t>& input_shape) {
  std::int64_t widest = 1;
  for (const Module& m : model.modules)
    for (std::int64_t width : {m.in_features, m.out_features, m.dim, m.embedding_dim, m.num_embeddings,
                               m.heads * m.head_dim, m.kv_heads * m.head_dim})
      widest = std::max(widest, width);
  std::optional<std::int64_t> elements = widest;
  for (std::size_t d = 0; d + 1 < input_shape.size(); ++d)
    if (elements) elements = checked_product(*elements, input_shape[d]);
  if (!elements || *elements > kMaxTensorElements)
    throw InputError(fmt::format(
        "batch_size {}{} x the model's widest layer ({} features) is more than 2^48 elements per activation "
        "(stratsim's limit per tensor)",
        input_shape[0], input_shape.size() > 2 ? fmt::format(" x seq_len {}", input_shape[1]) : "", widest));
}

// The model input as a plan feeds it: [batch, features], or [batch, seq, features | 1 token id].
std::vector<std::int64_t> model_input_shape(const Plan& plan, const Model& model) {
  const std::int64_t seq = plan.sequence_length(model.seq_len);
  if (seq > 0) return {plan.batch_size, seq, model.token_input ? 1 : model.input_features};
  return {plan.batch_size, model.input_features};
}

}  // namespace

Walk::Walk(const Model& model, const Plan& plan, const PlanOptions& options)
    : context_(model, plan, options),
      builder_(context_),
      live_(builder_),
      grads_(builder_),
      tp_(context_, builder_, tape_, live_),
      ddp_(context_, builder_),
      fsdp_(context_, builder_, tape_),
      fsdp2_(context_, builder_, tape_) {}

// ------------------------------------------------------------------------------------------------
// Setup: the plan's calls in order.

void Walk::apply_plan() {
  const PlanStep* fsdp1 = nullptr;
  const PlanStep* fsdp2 = nullptr;
  for (const PlanStep& step : context_.plan.steps) {
    if (std::holds_alternative<FullyShardStep>(step.body) && !fsdp1) fsdp1 = &step;
    if (std::holds_alternative<FullyShard2Step>(step.body) && !fsdp2) fsdp2 = &step;
  }
  if (fsdp1 && fsdp2)
    throw PlanError(
        fmt::format("{}: FSDP2 (torch.distributed.fsdp.fully_shard) on a model that {} shards with FSDP1; "
                    "a model uses one or the other",
                    fsdp2->where, fsdp1->where));
  for (const PlanStep& step : context_.plan.steps) {
    std::visit(
        [&](const auto& body) {
          using T = std::decay_t<decltype(body)>;
          if constexpr (std::is_same_v<T, ParallelizeStep>) tp_.apply_parallelize(body, step);
          else if constexpr (std::is_same_v<T, DistributeModuleStep>) tp_.apply_distribute(body, step);
          else if constexpr (std::is_same_v<T, ReplicateStep>) ddp_.apply_replicate(body, step);
          else if constexpr (std::is_same_v<T, FullyShardStep>) fsdp_.apply_fully_shard(body, step);
          else if constexpr (std::is_same_v<T, FullyShard2Step>) {
            // `for layer in model.layers.values(): fully_shard(layer)` as one step: "layers.*".
            for (const int m : context_.modules_matching(body.module, step.where)) {
              FullyShard2Step one = body;
              one.module = context_.model.modules[m].fqn;
              fsdp2_.apply_fully_shard(one, step);
            }
          } else {
            for (const int m : context_.modules_matching(body.module, step.where)) {
              context_.checkpointed[m] = true;
              context_.selective[m] = body.policy == CheckpointPolicy::selective_op;
              context_.region_inside_hooks[m] = body.api == CheckpointApi::composable && tp_.has_hooks(m);
              context_.reentrant[m] = body.use_reentrant;
              // Its recomputation calls the module again, hooks included, on the input the hooks
              // made: a plain tensor would be wrapped as input_layouts and redistributed twice.
              if (context_.region_inside_hooks[m] && tp_.input_hook_returns_local(m))
                throw PlanError(fmt::format(
                    "{}: composable checkpoint() on \"{}\" after PrepareModuleInput(use_local_output=True): its "
                    "recomputation would redistribute the local input again, which stratsim does not model",
                    step.where, context_.model.modules[m].fqn));
            }
          }
        },
        step.body);
  }
  finish_setup();
}

void Walk::finish_setup() {
  const Model& model = context_.model;
  check_activation_size(model, model_input_shape(context_.plan, model));  // once, before any op
  context_.used_in_forward.assign(model.params.size(), false);
  for (const ForwardStep& step : flat_forward(model)) {
    if (step.kind == ForwardStep::Kind::param_matmul) context_.used_in_forward[step.index] = true;
    else
      for (int p : model.modules[step.index].params) context_.used_in_forward[p] = true;
  }
  ddp_.collect_params();
  fsdp_.mark_roots();
  fsdp2_.mark_roots();
  // The dtype a module computes in: its FSDP unit's param_dtype under mixed precision, else the
  // parameters' dtype.
  builder_.compute_dtypes.assign(model.modules.size(), context_.act_dtype());
  for (std::size_t m = 0; m < model.modules.size(); ++m)
    for (int a = static_cast<int>(m); a >= 0; a = model.modules[a].parent)
      if (fsdp_.unit_of_module(a) >= 0) {
        builder_.compute_dtypes[m] = fsdp_.compute_dtype(fsdp_.unit_of_module(a));
        break;
      } else if (fsdp2_.group_of_module(a) >= 0) {
        builder_.compute_dtypes[m] = fsdp2_.compute_dtype(fsdp2_.group_of_module(a));
        break;
      }
  set_static_memory();
}

// Resident storage: parameters (sharded for FSDP), DDP bucket buffers, optimizer state. The
// parameters and buckets enter the allocation history now; the optimizer's state when its first
// step creates it (record_optimizer_state).
void Walk::set_static_memory() {
  const OptimizerCost optimizer = optimizer_cost(context_.plan.optimizer);
  std::int64_t param_bytes = 0, optimizer_bytes = 0;
  for (const ResidentTensor& tensor : resident_tensors()) {
    const std::int64_t bytes = tensor.numel * dtype_size(tensor.dtype);
    param_bytes += bytes;
    builder_.record_static(bytes);
    if (tensor.trained) optimizer_bytes += optimizer.resident_bytes(tensor.numel, dtype_size(tensor.dtype));
  }
  const std::int64_t bucket_bytes = ddp_.bucket_buffer_bytes();
  builder_.record_static(bucket_bytes);
  MemoryReport& memory = builder_.result.memory;
  memory.parameters = param_bytes;
  memory.optimizer_state = optimizer_bytes;
  memory.ddp_bucket_buffers = bucket_bytes;
  builder_.memory.set_static(param_bytes + optimizer_bytes + bucket_bytes);
}

// The rank's parameter storage, one tensor each, in the model's parameter order (the order the
// module allocates them and the optimizer creates their state): plain parameters and FSDP2's
// per-parameter shards, then FSDP1's flat shards.
std::vector<Walk::ResidentTensor> Walk::resident_tensors() const {
  std::vector<ResidentTensor> tensors;
  for (std::size_t p = 0; p < context_.params.size(); ++p) {
    const int param = static_cast<int>(p);
    if (context_.params[p].fsdp2_group >= 0) {
      if (const auto shard = fsdp2_.resident_shard(param)) tensors.push_back({shard->numel, shard->dtype, true});
    } else if (!sharded(param)) {
      tensors.push_back(
          {context_.params[p].local_numel, context_.model.params[p].dtype, context_.model.params[p].requires_grad});
    }
  }
  for (const FullyShard::Shard& shard : fsdp_.resident_shards()) tensors.push_back({shard.numel, shard.dtype, true});
  return tensors;
}

// The optimizer creates its state on its first step, a tensor per state and parameter (with a
// float32 master copy under master weights).
void Walk::record_optimizer_state() {
  const OptimizerCost optimizer = optimizer_cost(context_.plan.optimizer);
  for (const ResidentTensor& tensor : resident_tensors()) {
    if (!tensor.trained) continue;
    const int size = dtype_size(tensor.dtype);
    const bool master = optimizer.keeps_master(size);
    for (int state = 0; state < optimizer.states + (master ? 1 : 0); ++state)
      builder_.record_static(tensor.numel * (master ? 4 : size));
  }
}

// ------------------------------------------------------------------------------------------------
// Forward.

void Walk::forward_module(int m, Activation& act, Mode mode, std::span<const Activation> side) {
  if (mode == Mode::replay && recompute_.stopped) return;  // past the region's last saved tensor
  const bool region = mode == Mode::normal && context_.checkpointed[m];
  const Mode inner = region ? Mode::checkpointed : mode;
  if (mode != Mode::replay) ddp_.pre_forward(m);
  fsdp_.pre_forward(m, mode);
  fsdp2_.pre_forward(m, mode, act.requires_grad);
  cast_activation(act, fsdp2_.input_cast(m));
  // Composable checkpoint() after the module's style: the style's hooks run outside the region.
  // The recomputation calls the module again on the input they made, a DTensor already in the
  // layout they want (the hooks run again but redistribute nothing), so the replay skips them.
  const bool hooks_outside = region && context_.region_inside_hooks[m];
  if (hooks_outside) {
    const int before = act.id;
    tp_.input_hook(m, act, mode);
    follow(before, act);
  }
  const Activation region_input = act;
  const std::size_t region_start = tape_.size();
  const int region_first_tensor = context_.next_tensor;
  std::vector<SavedRef> region_inputs;
  // A region starts its own count of kept matmuls; the enclosing walk's resumes after it.
  const SelectiveRegion outer_selective = selective_;
  if (region) {
    selective_ = {context_.selective[m], 0};
    // checkpoint(use_reentrant=False): only the region's inputs are saved (attention's k and v
    // too); the inside is recomputed when backward first unpacks one of its tensors.
    region_inputs.emplace_back(act);
    for (const Activation& tensor : side) region_inputs.emplace_back(tensor);
    for (const SavedRef& tensor : region_inputs) live_.save(tensor);
    region_saves_ = 0;
    last_saving_entry_ = 0;
  }
  run_module_body(m, act, inner, side, hooks_outside);
  const int region_saves = region_saves_;
  if (hooks_outside) {
    const int before = act.id;
    tp_.output_hook(m, act, mode);
    follow(before, act);
  }
  fsdp_.post_forward(m, mode);
  fsdp2_.post_forward(m, mode);
  cast_activation(act, fsdp2_.output_cast(m));
  if (region) {
    selective_ = outer_selective;
    // Pushed after the region's own entries, so backward replays the region before any of them,
    // but below the pre-backward hooks on the region's output (the unit on this module, units on
    // its last submodule): autograd runs those hooks before the first node inside the region
    // unpacks a saved tensor and triggers the recomputation, so FSDP's recomputed pre-forward
    // finds them in BACKWARD_PRE and gathers nothing.
    std::vector<Activation> side_inputs(side.begin(), side.end());
    auto replay_region = [this, m, region_input, region_inputs, region_first_tensor, side_inputs, region_saves]() {
      Activation replay = region_input;
      // The recomputation recreates the region's tensors under their first-pass ids, which the
      // backward entries recorded then will release.
      const int resume = std::exchange(context_.next_tensor, region_first_tensor);
      const SelectiveRegion outer = std::exchange(selective_, {context_.selective[m], 0});
      // Reentrant: the Function's backward replays the whole forward, no early stop.
      recompute_ = context_.reentrant[m] ? Recompute{std::numeric_limits<int>::max(), 0, false}
                                         : Recompute{region_saves, 0, region_saves == 0};
      // What the recomputation makes and nothing saves is freed as it goes; its result too.
      const std::size_t mark = live_.made_mark();
      run_module_body(m, replay, Mode::replay, side_inputs, context_.region_inside_hooks[m]);
      for (int id : live_.claim_made(mark)) live_.drop(id);
      recompute_ = {};
      selective_ = outer;
      context_.next_tensor = resume;
      for (const SavedRef& tensor : region_inputs) live_.release(tensor);
    };
    // The recomputation runs when backward first unpacks a saved tensor of the region: entries
    // pushed after the region's last one that reads saved tensors (a tensor-parallel output's
    // redistribution, a residual add) run before it. A reentrant region is one autograd Function:
    // its backward recomputes before any of the region's entries.
    const std::size_t latest = context_.reentrant[m] ? SIZE_MAX : std::max(region_start, last_saving_entry_);
    tape_.insert_region_replay(std::move(replay_region), region_start, latest);
  }
}

// A dtype cast makes a new tensor: what backward sends through it (a tensor-parallel input's
// gradient all-reduce, for one) has the new dtype.
void Walk::cast_activation(Activation& act, std::optional<DType> dtype) {
  if (!dtype || act.dtype == *dtype) return;
  const int before = act.id;
  act.dtype = *dtype;
  act.id = context_.fresh_tensor();
  live_.make(act.id, act.bytes());
  follow(before, act);
}

void Walk::run_module_body(int m, Activation& act, Mode mode, std::span<const Activation> side, bool without_hooks) {
  const Module& module = context_.model.modules[m];
  if (mode == Mode::replay && recompute_.stopped) return;
  int before = act.id;
  if (!without_hooks) tp_.input_hook(m, act, mode);
  follow(before, act);
  if (module.leaf == LeafKind::container) {
    run_forward_steps(m, act, mode);
  } else if (act.dtensor) {
    const Activation input = act;
    forward_leaf(m, act, mode, side);
    before = act.id;
    tp_.leaf_hook(m, input, act, mode);
    follow(before, act);
  } else {
    forward_leaf(m, act, mode, side);
  }
  if (mode == Mode::replay && recompute_.stopped) return;
  before = act.id;
  if (!without_hooks) tp_.output_hook(m, act, mode);
  follow(before, act);
}

// A container's forward over its named tensors. A chain reads and writes slot 0 throughout; a
// graph keeps each slot's current tensor, and a tensor read by several steps gets, in backward,
// the sum of their gradients.
void Walk::run_forward_steps(int m, Activation& act, Mode mode) {
  const Module& module = context_.model.modules[m];
  std::vector<Activation> slots(module.tensors.size());
  slots[0] = act;
  sum_branch_grads(m, 0, slots[0], module.input_uses, mode);
  HeldLocals locals;
  std::vector<int> read;
  for (const ForwardStep& step : module.forward) {
    if (mode == Mode::replay && recompute_.stopped) break;
    read.clear();
    for (int slot : step.inputs) read.push_back(slots[slot].id);
    const std::size_t mark = live_.made_mark();
    if (step.kind == ForwardStep::Kind::join) {
      slots[step.output] = forward_join(m, step, slots, mode);
    } else {
      std::vector<Activation> side;
      for (std::size_t i = 1; i < step.inputs.size(); ++i) side.push_back(slots[step.inputs[i]]);
      // A chain step rewrites its own slot: run it in place rather than copy the tensor.
      const int first = step.inputs.front();
      Activation out = first == step.output ? std::move(slots[first]) : slots[first];
      if (step.kind == ForwardStep::Kind::child) forward_module(step.index, out, mode, side);
      else forward_param_matmul(step.index, out, mode);
      slots[step.output] = std::move(out);
    }
    claim_step_output(locals, mark, slots[step.output].id, step.output_uses);
    for (int id : read) release_read(locals, id);
    sum_branch_grads(m, step.output, slots[step.output], step.output_uses, mode);
  }
  act = slots[module.result];
  // The result passes to the caller (its last use is the caller's); the rest is let go.
  for (const auto& [id, uses] : locals)
    if (id == act.id) live_.hand_on(id);
    else live_.drop(id);
}

// What the step made: its output is held for its `uses` readers, anything else it made on the
// way (a cast copy, the output a redistribution replaced) is let go now unless saved.
void Walk::claim_step_output(HeldLocals& locals, std::size_t mark, int output, int uses) {
  for (int id : live_.claim_made(mark))
    if (id == output && uses > 0) locals.emplace_back(id, uses);
    else live_.drop(id);
}

// A step read `id`: after its last reader the container lets it go (a Python local no line after
// reads is freed as the frame rebinds or returns).
void Walk::release_read(HeldLocals& locals, int id) {
  const auto it = std::find_if(locals.begin(), locals.end(), [id](const auto& local) { return local.first == id; });
  if (it == locals.end() || --it->second > 0) return;
  live_.drop(id);
  locals.erase(it);
}

// Autograd accumulates the gradients of a tensor read by `uses` ops into one buffer before its
// producer's backward runs: pushed when the tensor is made, so backward runs it after all readers.
void Walk::sum_branch_grads(int m, int slot, const Activation& tensor, int uses, Mode mode) {
  if (uses < 2 || !tensor.requires_grad || mode == Mode::replay) return;
  const KernelCost kernel = grad_accumulate_cost(uses, product(tensor.shape), dtype_size(tensor.dtype));
  const std::string name =
      fmt::format("{}.{}.{}", context_.label(m), context_.model.modules[m].tensors[slot], kernel.name);
  tape_.push([this, m, kernel, name]() {
    builder_.compute(name, m, Phase::backward, kernel.op_class, kernel.flops, kernel.bytes, {}, OpRole::none);
  });
}

Activation Walk::forward_join(int m, const ForwardStep& step, const std::vector<Activation>& slots, Mode mode) {
  const Module& module = context_.model.modules[m];
  Activation out = slots[step.inputs.front()];
  out.requires_grad = false;
  std::int64_t width = 0;
  for (int slot : step.inputs) {
    const Activation& in = slots[slot];
    if (step.join != JoinKind::concat && in.shape != out.shape)
      throw PlanError(fmt::format("{}: forward {} of {} and {}: shapes [{}] and [{}] differ on this rank",
                                  context_.label(m), join_kind_name(step.join), module.tensors[step.inputs.front()],
                                  module.tensors[slot], fmt::join(out.shape, ", "), fmt::join(in.shape, ", ")));
    width += in.features();
    out.requires_grad = out.requires_grad || in.requires_grad;
  }
  if (step.join == JoinKind::concat) out.shape.back() = width;
  out.dtype = builder_.compute_dtypes[m];
  out.id = context_.fresh_tensor();
  std::vector<const Activation*> inputs;
  for (int slot : step.inputs) inputs.push_back(&slots[slot]);
  const int made = out.id;
  tp_.join_hook(m, inputs, out, mode);
  follow(made, out);
  const JoinCost cost = join_cost(step.join, step.inputs.size(), product(out.shape), dtype_size(out.dtype));
  const Phase phase = phase_of(mode);
  // "layers.0.add.x.forward": the container, the join, the tensor it writes.
  const std::string base =
      fmt::format("{}.{}.{}", context_.label(m), join_kind_name(step.join), module.tensors[step.output]);
  const std::string name = base + (phase == Phase::recompute ? ".recompute" : ".forward");
  builder_.compute(name, m, phase, "elementwise", cost.forward_flops, cost.forward_bytes, {}, OpRole::none);
  live_.make(out.id, out.bytes());
  // mul saves its inputs only when its output needs a gradient; then backward releases them.
  std::vector<SavedRef> saved;
  if (cost.saves_inputs && out.requires_grad)
    for (int slot : step.inputs) saved.emplace_back(slots[slot]);
  if (mode != Mode::checkpointed)
    for (const SavedRef& tensor : saved) live_.save(tensor);
  saved_point(mode, !saved.empty());
  if (mode == Mode::replay || !out.requires_grad) return out;
  const std::string backward = base + ".backward";
  if (!saved.empty()) last_saving_entry_ = tape_.size() + 1;
  // add hands its output's gradient to each input as it is; mul and concat make one per input.
  std::vector<GradInput> grads;
  for (int slot : step.inputs)
    if (slots[slot].requires_grad)
      grads.push_back({slots[slot].id, step.join == JoinKind::concat ? slots[slot].bytes() : out.bytes()});
  const bool shares = step.join == JoinKind::add;
  tape_.push([this, m, cost, saved, backward, grads, shares, output = out.id]() {
    if (cost.backward_bytes > 0)
      builder_.compute(backward, m, Phase::backward, "elementwise", cost.backward_flops, cost.backward_bytes, {},
                       OpRole::none);
    for (const GradInput& grad : grads)
      if (shares) grads_.share(output, grad.id);
      else grads_.make(grad.id, grad.bytes);
    for (const SavedRef& tensor : saved) live_.release(tensor);
    grads_.consume(output);
  });
  return out;
}

void Walk::forward_leaf(int m, Activation& act, Mode mode, std::span<const Activation> side) {
  const Module& module = context_.model.modules[m];
  const Phase phase = phase_of(mode);
  std::int64_t in_local = act.features(), out_local = act.features(), kv_local = 0;
  const int input_id = act.id;
  const std::int64_t input_bytes = act.bytes();
  Activation input = act;
  // A leaf computes in its FSDP unit's param_dtype under mixed precision (inputs are cast on the
  // way in, a new tensor); its output has that dtype.
  input.dtype = builder_.compute_dtypes[m];
  if (input.dtype != act.dtype) input.id = context_.fresh_tensor();
  if (module.leaf == LeafKind::linear) {
    const ParamState& weight = context_.params[module.params[0]];
    out_local = weight.local_shape[0];
    in_local = weight.local_shape[1];
    last_linear_fraction_ = static_cast<double>(out_local) / static_cast<double>(module.out_features);
    input.shape.back() = in_local;
  } else if (module.leaf == LeafKind::embedding) {
    in_local = context_.params[module.params[0]].local_shape[0];  // the table's local rows
    out_local = context_.params[module.params[0]].local_shape[1];
    input.requires_grad = false;
  } else if (module.leaf == LeafKind::rms_norm || module.leaf == LeafKind::layer_norm) {
    input.shape.back() = in_local = out_local = act.features();
  } else if (module.leaf == LeafKind::attention && !side.empty()) {
    // q, k, v as the forward names them: the widths are the projections' local outputs.
    kv_local = side.front().features();
  } else if (module.leaf == LeafKind::attention) {
    // A chain model's attention: the width of its query heads, cut the way the projection before
    // it was (tensor parallelism shards heads). The running width is the fused qkv or the KV width.
    const double fraction = last_linear_fraction_;
    input.shape.back() = in_local = out_local =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(module.heads * module.head_dim * fraction)));
  } else if (module.leaf == LeafKind::cross_entropy) {
    out_local = 1;  // the loss: one value per token, reduced
  } else if (module.dim > 0) {
    input.shape.back() = in_local = out_local = module.dim;
  }
  const LeafCost cost = leaf_cost(module, input, in_local, out_local, kv_local);
  // Compute that uses an FSDP unit's parameters waits for the unit's all-gather.
  std::vector<int> deps;
  for (int p : module.params)
    if (const int gather = gather_op(p); gather >= 0) deps.push_back(gather);
  const std::string suffix = phase == Phase::recompute ? "recompute" : "forward";
  const std::string& label = context_.label(m);
  // Selective checkpointing keeps this op's output from the first pass: the recomputation reuses it.
  const bool kept = keeps_output(module, mode);
  Activation output = input;
  output.shape.back() = out_local;
  if (module.leaf == LeafKind::cross_entropy) {  // the mean, a float32 scalar
    output.shape = {1};
    output.dtype = DType::float32;
  }
  output.id = context_.fresh_tensor();
  emit_kernels(m, phase, cost.forward_prologue);
  // The op's temporaries and what it saves of its own are taken before the extra kernels run
  // (peak_at names this op); the temporaries are given back after them.
  // The output is written after them; a cached output is the first pass's tensor, handed back.
  const bool runs = !(kept && mode == Mode::replay);
  std::vector<MemoryTracker::Tensor> temporaries;
  if (runs) {
    if (input.id != act.id) live_.make(input.id, input.bytes());  // the cast copy it reads
    const int forward = builder_.compute(fmt::format("{}.{}", label, suffix), m, phase, cost.op_class,
                                         cost.forward_flops, cost.forward_bytes, deps, OpRole::leaf);
    builder_.set_gemms(forward, cost.forward_gemms);
    temporaries = allocate_temporaries(cost.forward_workspace);
  }
  if (mode != Mode::checkpointed)
    for (std::int64_t bytes : cost.saved_parts.empty() ? std::vector{cost.saved_bytes} : cost.saved_parts)
      own_saved_[output.id].push_back(builder_.allocate(bytes, MemoryTracker::Kind::activation));
  if (runs) {
    live_.make(output.id, output.bytes());
    emit_kernels(m, phase, cost.forward_extra);
    release_temporaries(temporaries);
  } else if (kept_outputs_.erase(output.id) > 0) {
    live_.hand_on(output.id);  // the cache's reference passes to the recomputation
  }

  const bool had_grad = act.requires_grad;
  bool own_grad = false;
  for (int p : module.params) own_grad = own_grad || context_.model.params[p].requires_grad;
  output.requires_grad = (module.leaf == LeafKind::embedding ? false : had_grad) || own_grad;
  // The kept output is cached from the first pass until the recomputation takes it back.
  if (kept && runs && live_.keep(output.id)) kept_outputs_.insert(output.id);

  // What backward will read: tensors held once however many ops save them (LiveTensors), the rest is the leaf's.
  std::vector<SavedRef> saved;
  if (cost.saves_input) saved.emplace_back(input);
  if (cost.saves_output) saved.emplace_back(output);
  if (cost.saves_kv)
    for (const Activation& tensor : side) saved.emplace_back(tensor);
  if (mode != Mode::checkpointed)
    for (const SavedRef& tensor : saved) live_.save(tensor);
  saved_point(mode, !saved.empty() || cost.saved_bytes > 0);
  act = output;
  if (mode == Mode::replay) return;

  if (!saved.empty() || cost.saved_bytes > 0) last_saving_entry_ = tape_.size() + 1;
  // The gradients backward makes for what the leaf read (attention: q, k and v); an embedding's
  // indices have none.
  std::vector<GradInput> grads;
  if (module.leaf != LeafKind::embedding) {
    if (had_grad) grads.push_back({input_id, input_bytes});
    for (const Activation& tensor : side)
      if (tensor.requires_grad) grads.push_back({tensor.id, tensor.bytes()});
  }
  tape_.push([this, m, cost, saved, grads, output_id = output.id]() {
    const Module& mod = context_.model.modules[m];
    const std::string& name = context_.label(m);
    // Backward waits for the gather that is current now (pre-backward or prefetch), not the forward one.
    std::vector<int> now;
    for (int p : mod.params)
      if (const int gather = gather_op(p); gather >= 0) now.push_back(gather);
    const int op = builder_.compute(name + ".backward", m, Phase::backward, cost.op_class, cost.backward_flops,
                                    cost.backward_bytes, now, OpRole::leaf);
    builder_.set_gemms(op, cost.backward_gemms);
    std::vector<MemoryTracker::Tensor> temporaries = allocate_temporaries(cost.backward_workspace);
    emit_kernels(m, Phase::backward, cost.backward_extra);
    const auto make_grads = [&]() {
      for (const GradInput& grad : grads) grads_.make(grad.id, grad.bytes);
    };
    // The op writes its inputs' gradients before autograd frees what it saved, or, with
    // temporaries (the loss), from the last of them (cast back to the input's dtype).
    if (temporaries.empty()) make_grads();
    release_held(own_saved_, output_id);
    for (const SavedRef& tensor : saved) live_.release(tensor);
    // The temporaries go back the first taken first.
    if (!temporaries.empty()) {
      const MemoryTracker::Tensor last = temporaries.back();
      temporaries.pop_back();
      for (MemoryTracker::Tensor tensor : temporaries) builder_.release(tensor);
      make_grads();
      builder_.release(last);
    }
    // AccumulateGrad order: autograd runs the bias's accumulation before the weight's (addmm feeds
    // bias directly, weight through TBackward), i.e. parameters in reverse registration order.
    for (auto it = mod.params.rbegin(); it != mod.params.rend(); ++it) grad_ready(*it, op);
    grads_.consume(output_id);  // its gradient, read
  });
}

// An op's temporaries, taken in order.
std::vector<MemoryTracker::Tensor> Walk::allocate_temporaries(const std::vector<std::int64_t>& temporaries) {
  std::vector<MemoryTracker::Tensor> tensors;
  for (std::int64_t bytes : temporaries) tensors.push_back(builder_.allocate(bytes));
  return tensors;
}

// The rest given back, the last taken first.
void Walk::release_temporaries(std::vector<MemoryTracker::Tensor>& tensors) {
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) builder_.release(*it);
  tensors.clear();
}

// checkpoint(use_reentrant=False) stops its recomputation once the last tensor the region saved
// for backward is recomputed (torch.utils.checkpoint's early stop): what follows the region's
// last saving op -- a tensor-parallel output's reduce-scatter, a residual add -- does not run
// again. The first pass counts the region's saving ops; the replay stops after as many.
void Walk::saved_point(Mode mode, bool saves) {
  if (!saves) return;
  if (mode == Mode::checkpointed) ++region_saves_;
  if (mode == Mode::replay && ++recompute_.saves >= recompute_.expected) recompute_.stopped = true;
}

// The kernels a leaf launches beside its main op: "attn.softmax.forward".
void Walk::emit_kernels(int m, Phase phase, const std::vector<KernelCost>& kernels) {
  const char* suffix = phase == Phase::recompute ? "recompute" : phase == Phase::backward ? "backward" : "forward";
  for (const KernelCost& kernel : kernels)
    builder_.compute(fmt::format("{}.{}.{}", context_.label(m), kernel.name, suffix), m, phase, kernel.op_class,
                     kernel.flops, kernel.bytes, {}, OpRole::none);
}

// torchtitan's op-level policy (_save_list): flash attention's outputs and every second aten.mm,
// counted from the start of each pass over the region (the first mm is kept, the second not).
bool Walk::keeps_output(const Module& module, Mode mode) {
  if (!selective_.active || mode == Mode::normal) return false;
  // A Linear with a bias runs as aten.addmm, which the policy neither saves nor counts.
  if (module.leaf == LeafKind::linear && !module.bias) return ++selective_.matmuls % 2 == 1;
  return module.leaf == LeafKind::attention && module.fused;
}

void Walk::forward_param_matmul(int p, Activation& act, Mode mode) {
  if (act.dtensor)  // torch.mm(x, self.p) with x a DTensor and p a plain parameter
    throw PlanError(fmt::format(
        "{}: aten.mm.default got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor before "
        "calling distributed operators!",
        context_.model.params[p].fqn));
  const Parameter& param = context_.model.params[p];
  const ParamState& state = context_.params[p];
  const int m = param.module;
  const Phase phase = phase_of(mode);
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
  const SavedRef saved(act);  // mm saves its input for the weight's gradient
  std::vector<int> deps;
  if (const int gather = gather_op(p); gather >= 0) deps.push_back(gather);
  const std::string base = fmt::format("{}.mm", param.fqn);
  const int forward =
      builder_.compute(base + (phase == Phase::recompute ? ".recompute" : ".forward"), m, phase, "gemm", flops,
                       (t * act.features() + state.local_numel + t * out) * d, deps, OpRole::param_matmul, {param.fqn});
  const bool is_matrix = state.local_shape.size() == 2;
  const std::int64_t in_width = is_matrix ? state.local_shape[0] : 0;
  if (is_matrix) builder_.set_gemms(forward, linear_forward_gemms(t, in_width, out));
  const int output_id = context_.fresh_tensor();
  if (mode != Mode::checkpointed) live_.save(saved);
  saved_point(mode, saved.bytes > 0);
  const bool input_grad = act.requires_grad;
  act.shape.back() = out;
  act.requires_grad = true;
  act.id = output_id;
  live_.make(output_id, act.bytes());
  if (mode == Mode::replay) return;
  if (saved.bytes > 0) last_saving_entry_ = tape_.size() + 1;
  tape_.push([this, p, m, flops, input_grad, base, is_matrix, t, in_width, out, saved, output_id]() {
    std::vector<int> now;
    if (const int gather = gather_op(p); gather >= 0) now.push_back(gather);
    const int op = builder_.compute(base + ".backward", m, Phase::backward, "gemm", flops * (input_grad ? 2 : 1), 0,
                                    now, OpRole::param_matmul, {context_.model.params[p].fqn});
    if (is_matrix) builder_.set_gemms(op, linear_backward_gemms(t, in_width, out, input_grad));
    if (input_grad) grads_.make(saved.id, saved.bytes);
    live_.release(saved);
    grad_ready(p, op);
    grads_.consume(output_id);
  });
}

// ------------------------------------------------------------------------------------------------
// Backward: gradient-ready events, in the order autograd's AccumulateGrad runs them.

void Walk::grad_ready(int p, int producer) {
  const Parameter& param = context_.model.params[p];
  if (!param.requires_grad) return;
  producer = tp_.reduce_partial_grad(p, producer);
  if (context_.params[p].fsdp_unit >= 0) {
    // FSDP1 flattens the local gradients: a Partial one is reduced before it loses its placement.
    if (!context_.params[p].partial_grad_dims.empty())
      producer = all_reduce_partial_param_grad(context_, builder_, p, context_.param_bytes(p),
                                               context_.model.params[p].dtype, producer, Phase::backward);
    fsdp_.grad_ready(p, producer);
    return;
  }
  if (context_.params[p].fsdp2_group >= 0) {
    fsdp2_.grad_ready(p, producer);
    return;
  }
  if (!ddp_.gradient_as_bucket_view(p)) builder_.allocate(context_.param_bytes(p), MemoryTracker::Kind::gradient);
  ddp_.grad_ready(p, producer);
}

int Walk::gather_op(int p) const {
  if (context_.params[p].fsdp_unit >= 0) return fsdp_.all_gather_op(p);
  if (context_.params[p].fsdp2_group >= 0) return fsdp2_.all_gather_op(p);
  return -1;
}

// ------------------------------------------------------------------------------------------------
// Optimizer and the iteration loop.

void Walk::optimizer_step() {
  const OptimizerCost cost = optimizer_cost(context_.plan.optimizer);
  double elements = 0;
  std::int64_t bytes = 0;
  for (std::size_t p = 0; p < context_.params.size(); ++p) {
    if (sharded(static_cast<int>(p)) || !context_.model.params[p].requires_grad) continue;
    elements += static_cast<double>(context_.params[p].local_numel);
    bytes += cost.bytes(context_.params[p].local_numel, dtype_size(context_.model.params[p].dtype));
  }
  for (const FullyShard::Shard& shard : fsdp_.resident_shards()) {
    elements += static_cast<double>(shard.numel);
    bytes += cost.bytes(shard.numel, dtype_size(shard.dtype));
  }
  for (const FullyShard2::Shard& shard : fsdp2_.resident_shards()) {
    elements += static_cast<double>(shard.numel);
    bytes += cost.bytes(shard.numel, dtype_size(shard.dtype));
  }
  // A Partial gradient (a SequenceParallel norm's) stays so in .grad: the optimizer's first op on
  // it redistributes it to the parameter's Replicate, in parameter order. It waits for the
  // gradient's other reductions (DDP's bucket all-reduce of the same tensor). clip_grad_norm_'s
  // _foreach_norm redistributes them too, into temporaries: the step all-reduces them again
  // (recorded with 2.15).
  if (context_.plan.optimizer.grad_scaler) unscale_grads();
  const std::vector<int> reduced = builder_.iteration_grad_ops;
  const auto reduce_partial_grads = [&]() {
    for (std::size_t p = 0; p < context_.params.size(); ++p) {
      const ParamState& state = context_.params[p];
      if (state.partial_grad_dims.empty() || sharded(static_cast<int>(p)) || !context_.model.params[p].requires_grad)
        continue;
      const int id = all_reduce_partial_param_grad(
          context_, builder_, static_cast<int>(p), context_.param_bytes(static_cast<int>(p)),
          context_.model.params[p].dtype, builder_.last_compute, Phase::optimizer);
      builder_.result.program.ops[id].deps.insert(builder_.result.program.ops[id].deps.end(), reduced.begin(),
                                                  reduced.end());
      builder_.iteration_grad_ops.push_back(id);
    }
  };
  reduce_partial_grads();
  if (context_.plan.optimizer.max_norm > 0) {
    clip_grad_norm();
    reduce_partial_grads();
  }
  builder_.last_optimizer_op =
      builder_.compute("optimizer.step", 0, Phase::optimizer, "optimizer", cost.flops_per_element * elements, bytes,
                       builder_.iteration_grad_ops, OpRole::optimizer);
  if (!optimizer_state_recorded_) record_optimizer_state();
  optimizer_state_recorded_ = true;
  // zero_grad(set_to_none=True)
  builder_.memory.release_all(MemoryTracker::Kind::gradient, builder_.result.program.ops);
}

namespace {

// PyTorch's repr of a DeviceMesh, as its errors print it: DeviceMesh((dp=2, tp=4), 'cuda', stride=(4, 1)).
std::string mesh_repr(const DeviceMesh& mesh, const std::vector<int>& dims) {
  std::vector<std::string> sizes, strides;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    sizes.push_back(fmt::format("{}={}", mesh.dim_names()[dims[i]], mesh.shape()[dims[i]]));
    // A dim of one rank prints no stride: ().
    std::int64_t stride = 1;
    for (std::size_t j = dims[i] + 1; j < mesh.shape().size(); ++j) stride *= mesh.shape()[j];
    strides.push_back(mesh.shape()[dims[i]] == 1 ? "()" : std::to_string(stride));
  }
  return fmt::format("DeviceMesh(({}), 'cuda', stride=({}{}))", fmt::join(sizes, ", "), fmt::join(strides, ", "),
                     dims.size() == 1 ? "," : "");
}

// torch.stack's result type: the one dtype, or the widest floating point among several.
DType promoted(const std::vector<DType>& dtypes) {
  DType result = dtypes.front();
  for (DType dtype : dtypes)
    if (dtype != result) result = dtype == DType::float64 || result == DType::float64 ? DType::float64 : DType::float32;
  return result;
}

}  // namespace

// torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, foreach=True), as torchtitan calls
// it before the step (recorded with 2.15): _foreach_norm of every gradient (per dtype group), a
// stack of the norms and their norm, clip_grads_with_norm_'s _foreach_mul_ of every gradient by
// min(1, max_norm / (total + 1e-6)). DTensor gradients give norms Partial on each mesh dim the
// gradient is sharded on; the stack of them is all-reduced there, one all-reduce per such dim of
// more than one rank, in mesh order, carrying one norm per gradient.
void Walk::clip_grad_norm() {
  const Model& model = context_.model;
  const DeviceMesh& mesh = context_.mesh;
  const std::string where = "optimizer.max_norm: clip_grad_norm_";
  struct Grad {
    DType dtype;
    bool dtensor = false;
    std::int64_t numel = 0;      // the local tensor's
    std::vector<int> mesh_dims;  // the DTensor's mesh
    // DTensor's dispatch takes a plain tensor of one element for a replicated scalar.
    bool mixes() const { return !dtensor && numel != 1; }
  };
  std::vector<Grad> grads;
  std::int64_t elements = 0, bytes = 0;
  std::vector<bool> sharded_dims(mesh.shape().size(), false);
  for (std::size_t i = 0; i < model.params.size(); ++i) {
    const int p = static_cast<int>(i);
    const ParamState& state = context_.params[p];
    if (!model.params[p].requires_grad || !context_.used_in_forward[p]) continue;
    if (state.fsdp_unit >= 0)
      throw PlanError(
          fmt::format("{}: FSDP1 clips its flat parameters with FullyShardedDataParallel.clip_grad_norm_, "
                      "which stratsim does not model yet (FSDP2, DDP and tensor parallel plans clip "
                      "with torch.nn.utils.clip_grad_norm_)",
                      where));
    Grad grad{model.params[p].dtype, grad_is_dtensor(p), local_grad_numel(p), {}};
    elements += grad.numel;
    bytes += grad.numel * dtype_size(grad.dtype);
    if (state.dtensor) {
      grad.mesh_dims = state.tp_dims;
      if (state.placement.is_shard())
        for (int d : state.tp_dims) sharded_dims[d] = true;
    }
    if (state.fsdp2_group >= 0) {
      for (int d : fsdp2_.mesh_dims(state.fsdp2_group)) grad.mesh_dims.push_back(d);
      for (int d : fsdp2_.shard_dims(state.fsdp2_group)) sharded_dims[d] = true;
    }
    std::sort(grad.mesh_dims.begin(), grad.mesh_dims.end());
    grad.mesh_dims.erase(std::unique(grad.mesh_dims.begin(), grad.mesh_dims.end()), grad.mesh_dims.end());
    grads.push_back(std::move(grad));
  }
  if (grads.empty()) return;
  // Where PyTorch fails, in its order. _foreach_norm runs per dtype group: one holding DTensors and
  // a plain gradient fails there. The norms are scalars (a plain one passes for replicated), so
  // the stack fails only on DTensors of different meshes; PyTorch stacks the dtype groups in its
  // own (hash) order, which the planner does not reproduce: with several dtypes the message may
  // name the two meshes the other way round. _foreach_mul_ by the DTensor clip coefficient then
  // fails on any plain gradient left.
  const auto mixed = [&](const char* op) {
    return PlanError(
        fmt::format("{}: {} got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to "
                    "DTensor before calling distributed operators!",
                    where, op));
  };
  const auto in_group_with_dtensors = [&](const Grad& plain) {
    return std::any_of(grads.begin(), grads.end(), [&](const Grad& g) { return g.dtensor && g.dtype == plain.dtype; });
  };
  for (const Grad& grad : grads)
    if (grad.mixes() && in_group_with_dtensors(grad)) throw mixed("aten._foreach_norm.Scalar");
  // The stack names the first operand on another mesh, then the first operand's.
  const auto first = std::find_if(grads.begin(), grads.end(), [](const Grad& g) { return g.dtensor; });
  for (const Grad& grad : grads)
    if (grad.dtensor && grad.mesh_dims != first->mesh_dims)
      throw PlanError(fmt::format("{}: All operands in aten.stack.default must have the same mesh, but got {} and {}.",
                                  where, mesh_repr(mesh, grad.mesh_dims), mesh_repr(mesh, first->mesh_dims)));
  if (first != grads.end() && std::any_of(grads.begin(), grads.end(), [](const Grad& g) { return g.mixes(); }))
    throw mixed("aten._foreach_mul_.Tensor");
  const int norms =
      builder_.compute("clip_grad_norm.norm", 0, Phase::optimizer, "optimizer", 2.0 * static_cast<double>(elements),
                       bytes, builder_.iteration_grad_ops, OpRole::clip_grad_norm);
  int last = norms;
  std::vector<DType> dtypes;
  for (const Grad& grad : grads) dtypes.push_back(grad.dtype);
  const DType norm_dtype = promoted(dtypes);
  const std::int64_t norm_bytes = static_cast<std::int64_t>(grads.size()) * dtype_size(norm_dtype);
  for (std::size_t d = 0; d < sharded_dims.size(); ++d) {
    if (!sharded_dims[d] || mesh.shape()[d] == 1) continue;
    last = builder_.collective({.kind = CollectiveKind::all_reduce,
                                .key = "c10d_functional.all_reduce",
                                .dims = {static_cast<int>(d)},
                                .bytes = norm_bytes,
                                .dtype = norm_dtype,
                                .stream = "clip_grad_norm",
                                .phase = Phase::optimizer,
                                .module = 0,
                                .reason = fmt::format("clip_grad_norm_ ({} gradient norms)", grads.size()),
                                .deps = {last},
                                .role = OpRole::clip_grad_norm});
  }
  builder_.compute("clip_grad_norm.scale", 0, Phase::optimizer, "optimizer", static_cast<double>(elements), 2 * bytes,
                   {last}, OpRole::clip_grad_norm);
}

// Outside FSDP1, the gradient a parameter holds at the step: a DTensor under FSDP2 or tensor
// parallelism, of FSDP2's shard or the tensor-parallel local shape.
bool Walk::grad_is_dtensor(int p) const { return context_.params[p].fsdp2_group >= 0 || context_.params[p].dtensor; }

std::int64_t Walk::local_grad_numel(int p) const {
  const ParamState& state = context_.params[p];
  return state.fsdp2_group >= 0 ? fsdp2_.shard_numel(p) : state.local_numel;
}

// The mesh dims of more than one rank on which DTensor parameter p's gradient is not Replicate, in
// mesh order: FSDP2's shard dims, a tensor-parallel Shard (but a RowwiseParallel embedding's
// gradient is Replicate), and outside FSDP2 a SequenceParallel norm's Partial (FSDP2's
// post-backward reduces it).
std::vector<int> Walk::non_replicate_grad_dims(int p) const {
  const ParamState& state = context_.params[p];
  std::vector<bool> not_replicate(context_.mesh.shape().size(), false);
  if (state.dtensor && state.placement.is_shard() && (state.fsdp2_group >= 0 || !state.replicated_grad))
    for (int d : state.tp_dims) not_replicate[d] = true;
  if (state.fsdp2_group >= 0)
    for (int d : fsdp2_.shard_dims(state.fsdp2_group)) not_replicate[d] = true;
  else
    for (int d : state.partial_grad_dims) not_replicate[d] = true;
  std::vector<int> dims;
  for (std::size_t d = 0; d < not_replicate.size(); ++d)
    if (not_replicate[d] && context_.mesh.shape()[d] > 1) dims.push_back(static_cast<int>(d));
  return dims;
}

// GradScaler.unscale_(optimizer), as a float16 training loop calls it before clipping and the
// step (recorded with 2.15). It groups the gradients by dtype in optimizer (parameter) order and
// runs _amp_foreach_non_finite_check_and_unscale_ once per group: a read and a write of every
// gradient. On DTensor gradients DTensor's handler for that op reduces found_inf (one float32) by
// max, one all-reduce per mesh dim on which the group's first gradient is not Replicate (Shard,
// or a SequenceParallel norm's Partial), in mesh order. torch.amp.GradScaler refuses float16
// gradients; FSDP1's ShardedGradScaler takes them and then all-reduces found_inf over the world.
// scaler.step's found_inf.item() (a host sync) and scaler.update's one-element kernel are not
// modelled.
void Walk::unscale_grads() {
  const Model& model = context_.model;
  const bool sharded_scaler = std::any_of(context_.params.begin(), context_.params.end(),
                                          [](const ParamState& state) { return state.fsdp_unit >= 0; });
  const std::string where = sharded_scaler ? "optimizer.grad_scaler: ShardedGradScaler.unscale_"
                                           : "optimizer.grad_scaler: GradScaler.unscale_";
  struct Group {
    DType dtype;
    std::vector<int> first_dims;  // mesh dims the group's first gradient is not Replicate on
    bool first_seen = false, dtensor = false, plain = false;
  };
  std::vector<Group> groups;
  std::int64_t elements = 0, bytes = 0;
  // FSDP1's flat parameters hold their units' gradients: plain tensors, one shard per unit. They are
  // left out of the dtype groups (so a plan mixing them with DTensor gradients of their dtype is not
  // refused as PyTorch would).
  for (const FullyShard::Shard& shard : fsdp_.resident_shards()) {
    elements += shard.numel;
    bytes += shard.numel * dtype_size(shard.dtype);
  }
  for (std::size_t i = 0; i < model.params.size(); ++i) {
    const int p = static_cast<int>(i);
    const ParamState& state = context_.params[p];
    if (!model.params[p].requires_grad || !context_.used_in_forward[p]) continue;
    const DType dtype = model.params[p].dtype;
    if (dtype == DType::float16 && !sharded_scaler)
      throw PlanError(fmt::format("{}: Attempting to unscale FP16 gradients.", where));
    if (state.fsdp_unit >= 0) continue;
    const bool dtensor = grad_is_dtensor(p);
    const std::int64_t numel = local_grad_numel(p);
    elements += numel;
    bytes += numel * dtype_size(dtype);
    auto group = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.dtype == dtype; });
    if (group == groups.end()) group = groups.insert(groups.end(), Group{dtype, {}});
    // DTensor's dispatch takes a plain tensor of one element for a replicated scalar.
    if (dtensor) group->dtensor = true;
    else if (numel != 1) group->plain = true;
    if (group->first_seen) continue;
    group->first_seen = true;
    if (dtensor) group->first_dims = non_replicate_grad_dims(p);
  }
  if (groups.empty() && !sharded_scaler) return;
  for (const Group& group : groups)
    if (group.dtensor && group.plain)
      throw PlanError(fmt::format(
          "{}: aten._amp_foreach_non_finite_check_and_unscale_.default: got mixed torch.Tensor and DTensor, need "
          "to convert all torch.Tensor to DTensor before calling distributed operators! Please see "
          "https://docs.pytorch.org/docs/main/distributed.tensor.html#mixed-tensor-and-dtensor-operations for more "
          "details.",
          where));
  int last = builder_.compute("grad_scaler.unscale", 0, Phase::optimizer, "optimizer", static_cast<double>(elements),
                              2 * bytes, builder_.iteration_grad_ops, OpRole::grad_scaler);
  const auto reduce_found_inf = [&](const char* key, std::vector<int> dims, const char* reason) {
    last = builder_.collective({.kind = CollectiveKind::all_reduce,
                                .key = key,
                                .dims = std::move(dims),
                                .bytes = dtype_size(DType::float32),
                                .dtype = DType::float32,
                                .stream = "grad_scaler",
                                .phase = Phase::optimizer,
                                .module = 0,
                                .reason = reason,
                                .deps = {last},
                                .role = OpRole::grad_scaler});
  };
  for (const Group& group : groups)
    for (int d : group.first_dims)
      reduce_found_inf("c10d_functional.all_reduce", {d}, "GradScaler.unscale_: found_inf of DTensor gradients (max)");
  if (sharded_scaler && context_.mesh.world_size() > 1) {
    std::vector<int> world(context_.mesh.shape().size());
    std::iota(world.begin(), world.end(), 0);
    reduce_found_inf("c10d.allreduce_", world, "ShardedGradScaler.unscale_: found_inf over the world");
  }
  builder_.iteration_grad_ops.push_back(last);
}

void Walk::run_iteration() {
  const Plan& plan = context_.plan;
  const Model& model = context_.model;
  context_.sync = context_.iteration % plan.gradient_accumulation_steps == 0;
  builder_.begin_iteration(context_.iteration, context_.sync);
  if (context_.iteration == 1 && context_.plan.torch_version.tp_distributes_from_rank0()) tp_.emit_distribution();
  tape_.clear();
  live_.clear();
  fsdp_.begin_iteration();
  fsdp2_.begin_iteration();
  tp_.begin_iteration();

  Activation act;
  act.dtype = context_.act_dtype();
  act.requires_grad = plan.input_requires_grad;
  act.id = context_.fresh_tensor();  // the model input: ops that save it share it
  act.shape = model_input_shape(plan, model);
  const std::size_t mark = live_.made_mark();
  forward_module(0, act, Mode::normal);
  const std::vector<int> outputs = live_.claim_made(mark);  // the loss: held through backward
  context_.first_iteration_done = true;

  tape_.run_backward();
  grads_.clear();
  for (int id : outputs) live_.drop(id);
  fsdp2_.end_backward();
  ddp_.end_backward();
  if (context_.sync) optimizer_step();
}

namespace {

// The caching allocator replayed over the history: its segments never go back, so the peak is
// what it holds at the end.
std::int64_t reserved_peak(const std::vector<MemoryEvent>& history, AllocatorConfig config) {
  std::vector<AllocatorEvent> events;
  events.reserve(history.size());
  for (const MemoryEvent& event : history)
    events.push_back({.action = event.allocate ? AllocatorEvent::Action::alloc : AllocatorEvent::Action::free,
                      .address = static_cast<std::uint64_t>(event.tensor),
                      .size = event.bytes,
                      .stream = event.stream});
  return replay_allocator_trace(events, config, false).peak_reserved;
}

}  // namespace

PlanResult Walk::run() {
  const Plan& plan = context_.plan;
  const PlanOptions& options = context_.options;
  if (options.rank < 0 || options.rank >= plan.world_size)
    throw PlanError(fmt::format("--rank {} is outside the world of {} ranks", options.rank, plan.world_size));
  PlanResult& result = builder_.result;
  result.rank = options.rank;
  result.coordinate = context_.mesh.coordinate(options.rank);
  result.program.world_size = plan.world_size;
  result.program.mesh = context_.mesh;
  result.program.stream_id("compute");
  apply_plan();
  fsdp_.start();
  const int iterations = options.iterations > 0 ? options.iterations : plan.iterations > 0 ? plan.iterations : 3;
  for (context_.iteration = 1; context_.iteration <= iterations; ++context_.iteration) {
    if (context_.iteration == iterations) builder_.memory.start_steady_state();  // report the last iteration's peaks
    run_iteration();
  }
  result.program.iterations = iterations;

  for (int group = 0; group < static_cast<int>(result.program.groups.size()); ++group)
    result.group_ranks.push_back(result.program.group_ranks(group, options.rank));
  MemoryReport& memory = result.memory;
  builder_.memory.fill(memory);
  result.memory_events = builder_.memory.take_events();
  memory.reserved_peak = reserved_peak(result.memory_events, {.expandable_segments = false});
  memory.reserved_peak_expandable = reserved_peak(result.memory_events, {.expandable_segments = true});
  if (plan.device_memory_gib) {
    memory.device_memory_bytes = *plan.device_memory_gib * 1024.0 * 1024.0 * 1024.0;
    memory.out_of_memory = static_cast<double>(memory.peak) > *memory.device_memory_bytes;
    if (memory.out_of_memory)
      result.warnings.push_back(fmt::format("out of memory: peak {:.2f} GiB exceeds the device's {:.2f} GiB (at {})",
                                            memory.peak / 1073741824.0, *plan.device_memory_gib, memory.peak_at));
    // Below the device but above it once fragmented: PyTorch's allocator, when cudaMalloc fails,
    // frees every cached block it can and retries, which synchronizes the device each time.
    const std::int64_t reserved = std::min(memory.reserved_peak, memory.reserved_peak_expandable);
    if (!memory.out_of_memory && static_cast<double>(reserved) > *memory.device_memory_bytes)
      result.warnings.push_back(fmt::format(
          "memory fragmentation: the caching allocator would reserve {:.2f} GiB ({:.2f} GiB with "
          "expandable_segments), more than the device's {:.2f} GiB; the step fits only by freeing the cache and "
          "retrying (torch.cuda.memory_stats()[\"num_alloc_retries\"]), each retry synchronizing the device",
          memory.reserved_peak / 1073741824.0, memory.reserved_peak_expandable / 1073741824.0,
          *plan.device_memory_gib));
  }
  ddp_.report(result);
  fsdp_.report(result);
  fsdp2_.report(result);
  report_params();
  return std::move(result);
}

void Walk::report_params() {
  for (const ParamState& state : context_.params) {
    ParamLayout layout;
    layout.local_shape = state.local_shape;
    layout.placement = state.dtensor ? state.placement : Placement::replicate();
    if (state.dtensor) layout.tp_dims = state.tp_dims;
    layout.fsdp_unit = state.fsdp_unit;
    layout.fsdp2_group = state.fsdp2_group;
    layout.ddp = state.ddp;
    builder_.result.params.push_back(std::move(layout));
  }
}

}  // namespace stratsim::core::planner
