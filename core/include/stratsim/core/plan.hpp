// A parallelism plan: the PyTorch calls a training script makes, in order, plus the training-loop
// settings (batch, optimizer, iterations, gradient accumulation).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "stratsim/core/dtype.hpp"
#include "stratsim/core/mesh.hpp"
#include "stratsim/core/placement.hpp"

namespace stratsim::core {

// Behaviour that changed between PyTorch releases (see README "PyTorch versions").
// The newest PyTorch 2.x whose rules stratsim knows (the golden vectors' release).
inline constexpr int kNewestTorchMinor = 15;

struct TorchVersion {
  int major = 2, minor = 4;
  // PR #121640 (2.5+): an explicit bucket_cap_mb also caps the first rebuilt bucket.
  bool explicit_cap_sets_first_bucket() const { return major > 2 || (major == 2 && minor >= 5); }
  // PR #124872 (2.4+): DTensor's Shard(i) -> Shard(j) is one all-to-all (the custom op
  // _dtensor.shard_dim_alltoall, which CommDebugMode counts under that name); before, an
  // all-gather of the shard and a local chunk along the new dim.
  bool shard_dim_alltoall() const { return major > 2 || (major == 2 && minor >= 4); }
  // FSDP2 on a shard group of one rank: from 2.9 (PR #160135) the unshard copies the shard instead
  // of all-gathering it; from 2.10 (PR #162021) the gradient is copied instead of reduce-scattered.
  bool fsdp2_gathers_one_rank() const { return major == 2 && minor < 9; }
  bool fsdp2_reduce_scatters_one_rank() const { return major == 2 && minor < 10; }
  // FSDP2's root keeps its parameters unsharded after forward. Until 2.8 it always did; from 2.8
  // (PRs #154704 and #155319, merged June 2025) only when reshard_after_forward is left unset.
  bool fsdp2_root_honours_reshard_after_forward() const { return at_least(2, 8); }
  // FSDP2's gradients without a reduce_dtype: reduced in param_dtype until 2.14; from 2.15 (PR
  // #197203, merged September 2026) in the parameter's own dtype, which the reduce-scatter then
  // carries. Recorded with 2.15 (tests/data/golden/fsdp2.json). 2.15 defers the upcast: autograd
  // writes param_dtype, chunk_cat casts up, unless gradients accumulate over micro-steps (then
  // the unsharded gradients are upcast first) or stay Partial over a non-data-parallel dim.
  bool fsdp2_grads_in_param_dtype() const { return !at_least(2, 15); }
  // parallelize_module / distribute_module make each parameter a DTensor with distribute_tensor,
  // which scatters (Shard) or broadcasts (Replicate) it from the group's first rank: c10d.scatter_
  // and c10d.broadcast_ while the plan is applied (recorded with 2.15; src_data_rank=0 is the
  // default of every release stratsim models, 2.4 on).
  bool tp_distributes_from_rank0() const { return at_least(2, 4); }
  bool at_least(int maj, int min) const { return major > maj || (major == maj && minor >= min); }
  std::string str() const;
};

// The fully_shard a step means, by PyTorch's import path: FSDP1's composable
// torch.distributed._composable.fully_shard (the seeds, PyTorch 2.1-2.5; one flat parameter per
// wrapped unit) and the FullyShardedDataParallel wrapper are FullyShardStep; FSDP2's
// torch.distributed.fsdp.fully_shard (PyTorch 2.6+; torch.distributed._composable.fsdp from 2.4)
// is FullyShard2Step.
enum class CommHook { none, allreduce, fp16_compress, bf16_compress };

struct ReplicateStep {
  std::string module;
  std::vector<std::string> mesh_dims;   // empty: the whole world
  std::optional<double> bucket_cap_mb;  // unset: PyTorch's default (25)
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  bool static_graph = false;
  bool broadcast_buffers = true;
  bool init_sync = true;
  CommHook comm_hook = CommHook::none;
  std::vector<std::string> ignored_modules;
};

enum class ShardingStrategy { full_shard, shard_grad_op, no_shard, hybrid_shard, hybrid_shard_zero2 };
enum class BackwardPrefetch { backward_pre, backward_post, none };

struct FullyShardStep {
  std::string module;
  std::vector<std::string> mesh_dims;  // 1 dim, or 2 (replicate, shard) for hybrid strategies
  ShardingStrategy strategy = ShardingStrategy::full_shard;
  std::vector<std::string> wrap_module_types;       // ModuleWrapPolicy
  std::optional<std::int64_t> wrap_min_num_params;  // size_based_auto_wrap_policy
  std::optional<DType> param_dtype, reduce_dtype, buffer_dtype;
  bool cpu_offload = false;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::backward_pre;
  bool forward_prefetch = false;
  bool use_orig_params = false;
  bool sync_module_states = false;
  bool limit_all_gathers = true;
  std::vector<std::string> ignored_modules;
};

// FSDP2: fully_shard(module, mesh, reshard_after_forward, mp_policy, offload_policy). The module's
// parameters not managed by an earlier fully_shard (on a submodule) become one parameter group, each
// parameter sharded Shard(0) with dim 0 padded to the shard group; one all-gather and one
// reduce-scatter per group (and an all-reduce over the replicate dim for HSDP).
struct FullyShard2Step {
  std::string module;
  std::vector<std::string> mesh_dims;  // 1 dim (FSDP), or 2 (replicate, shard) for HSDP
  // true: free the unsharded parameters after forward and all-gather again in backward; false: keep
  // them until backward ends. Unset: true, except for the root (see TorchVersion). An int k is read
  // as PyTorch reads it: 1 is false, the shard group's size is true; other factors (resharding to
  // groups of k ranks) are refused as not modelled.
  std::optional<bool> reshard_after_forward;
  std::optional<std::int64_t> reshard_after_forward_ranks;
  std::optional<DType> param_dtype, reduce_dtype, output_dtype;  // MixedPrecisionPolicy
  bool cast_forward_inputs = true;
  bool offload_params = false;  // CPUOffloadPolicy
  // With gradient accumulation: set_reshard_after_backward(False) on the micro-steps that do not
  // synchronise (set_requires_gradient_sync(False)), so the next forward needs no all-gather.
  bool reshard_after_backward_in_accumulation = true;
};

// full: checkpoint(module) recomputes the whole region in backward. selective_op: torchtitan's
// op-level selective checkpointing (create_selective_checkpoint_contexts): the outputs of
// flash attention and of every second matmul (aten.mm) are kept from the forward, the rest of
// the region is recomputed.
enum class CheckpointPolicy { full, selective_op };
// Which API marks the region. checkpoint_wrapper (and a model's `checkpoint: true`) wraps the
// module, its hooks included. Composable checkpoint() registers a forward pre-hook after the
// module's earlier ones and a forward hook before them: the hooks of a parallelize_module style
// applied before it run outside the region, and the recomputation sees the input they made.
enum class CheckpointApi { checkpoint_wrapper, composable };

struct CheckpointStep {
  std::string module;
  CheckpointPolicy policy = CheckpointPolicy::full;
  CheckpointApi api = CheckpointApi::checkpoint_wrapper;
  // checkpoint(use_reentrant=True) (checkpoint_wrapper's CheckpointImpl.REENTRANT, the old default,
  // and Megatron-LM's own checkpoint function): the region is one autograd Function whose
  // backward replays the whole forward, the ops after its last saved tensor included, before any
  // of the region's backward runs.
  bool use_reentrant = false;
};

// parallelize_module's ParallelStyles. colwise / rowwise shard an nn.Linear or nn.Embedding;
// sequence_parallel (SequenceParallel) runs a norm or dropout on inputs sharded along the sequence,
// its parameters Replicate DTensors (from_local: no collective); prepare_input / prepare_output
// (PrepareModuleInput / PrepareModuleOutput) only annotate and redistribute a module's input or
// output.
enum class TPStyle { colwise, rowwise, sequence_parallel, prepare_input, prepare_output };
struct TPModuleSpec {
  TPStyle style = TPStyle::colwise;
  // colwise / rowwise: input_layouts and output_layouts. prepare_input: input_layouts and
  // desired_input_layouts of the module's first positional input (unset: the input is left alone).
  // prepare_output: output_layouts and desired_output_layouts.
  std::optional<Placement> input_layout, output_layout, desired_input_layout, desired_output_layout;
  // Unset: the style's default (colwise, rowwise, prepare_output: true; sequence_parallel,
  // prepare_input: false, so that their DTensor flows on into the next module).
  std::optional<bool> use_local_output;
  int sequence_dim = 1;  // sequence_parallel
  bool local_output() const {
    return use_local_output.value_or(style != TPStyle::sequence_parallel && style != TPStyle::prepare_input);
  }
};
struct ParallelizeStep {
  std::string module;  // parallelize_module's root
  std::vector<std::string> mesh_dims;
  // relative FQN pattern (fnmatch '*') -> style. The modules are styled in module pre-order (a
  // JSON object's keys come sorted); torchtitan's plans list them in that order.
  std::vector<std::pair<std::string, TPModuleSpec>> plan;
};
struct DistributeModuleStep {
  std::string module;
  std::vector<std::string> mesh_dims;
  std::optional<Placement> input_layout;  // from_local placement of the module input (input_fn)
  bool output_to_local = true;
};

using PlanStepBody =
    std::variant<ReplicateStep, FullyShardStep, FullyShard2Step, CheckpointStep, ParallelizeStep, DistributeModuleStep>;

struct PlanStep {
  PlanStepBody body;
  std::string where;  // "plan.json: steps[2] (replicate)"
  int index = 0;
};

enum class OptimizerKind { sgd, adam, adamw };
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::sgd;
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool amsgrad = false;
  // 16-bit parameters get a float32 master copy the step updates (and float32 states), as
  // mixed-precision training without FSDP's param_dtype keeps them.
  bool master_weights = false;
  // > 0: torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, foreach=True) before each
  // step, as torchtitan does (training.max_norm): the per-gradient norms, their all-reduce over
  // the mesh dims DTensor gradients are sharded on, and the scaling of every gradient.
  double max_norm = 0;
  // Loss scaling for float16 training: torch.amp.GradScaler, or FSDP1's ShardedGradScaler when
  // the plan uses FSDP1, driven as `scaler.scale(loss).backward(); scaler.unscale_(optimizer);
  // [clip_grad_norm_]; scaler.step(optimizer); scaler.update()`. Its unscale reads and writes every
  // gradient and reduces found_inf: over the mesh dims DTensor gradients are not replicated on, and
  // over the world under FSDP1.
  bool grad_scaler = false;
};

struct Plan {
  std::string origin;  // file name or "builtin:NAME"
  int world_size = 1;
  DeviceMesh mesh;
  std::int64_t batch_size = 1;  // per rank, per micro-step
  std::int64_t seq_len = 0;     // sequence models; 0 = model default (sequence_length())
  bool input_requires_grad = false;
  int iterations = 0;                   // 0 = not set
  int gradient_accumulation_steps = 1;  // no_sync for the first k-1 of every k micro-steps
  OptimizerConfig optimizer;
  TorchVersion torch_version;
  // The loss runs under torch.distributed.tensor.parallel.loss_parallel(): a cross entropy over
  // logits sharded on the class dimension all-reduces the max, the sum of exponentials and the
  // target logits instead of gathering the logits.
  bool loss_parallel = false;
  std::optional<double> device_memory_gib;
  std::vector<PlanStep> steps;

  // The sequence length a sequence model runs with: the plan's, else the model's own (0 for a
  // model without one).
  std::int64_t sequence_length(std::int64_t model_seq_len) const { return seq_len > 0 ? seq_len : model_seq_len; }
};

Plan load_plan(const std::string& spec);  // file, or "builtin:NAME"
// The plan document itself (JSON; a YAML file as the JSON it reads as), for editing and saving.
nlohmann::json plan_document(const std::string& spec);
class JsonReader;
Plan parse_plan(const JsonReader& doc);
std::vector<std::string> builtin_plan_names();

std::string_view strategy_name(ShardingStrategy strategy);
std::string_view comm_hook_name(CommHook hook);

}  // namespace stratsim::core
