// What every part of the planner reads: the inputs (model, plan, mesh, options), each parameter's
// state as the planned rank holds it, which plan step put which composable API on which module, and
// the running activation. Internal to core (not installed).
#pragma once

#include <cstdint>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "stratsim/core/planner.hpp"

namespace stratsim::core::planner {

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
inline std::int64_t product(const std::vector<std::int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

// fnmatch of a dotted pattern against a dotted FQN, atom by atom ('*' stays inside one atom), as
// parallelize_module resolves its plan keys.
bool fqn_matches(const std::string& pattern, const std::string& fqn);

// A parameter as the planned rank holds it.
struct ParamState {
  std::vector<std::int64_t> local_shape;  // after tensor parallelism (padded shard)
  std::int64_t local_numel = 0;
  bool dtensor = false;  // parallelize_module / distribute_module made it a DTensor
  Placement placement;   // its placement on `tp_dims`
  std::vector<int> tp_dims;
  int fsdp_unit = -1;    // FSDP1 unit
  int fsdp2_group = -1;  // FSDP2 parameter group
  int ddp = -1;          // DDP instance
  int ddp_index = -1;    // variable index inside that instance
  // A replicated DTensor parameter (SequenceParallel's norm weight) applied to an input sharded
  // along a non-feature dim gets a Partial gradient on these mesh dims; autograd leaves it so, and
  // FSDP2's post-backward or the optimizer's first op all-reduces it.
  std::vector<int> partial_grad_dims;
  // RowwiseParallel's Embedding: its weight is Shard(0), but embedding_dense_backward's sharding
  // gives it a Replicate gradient (recorded with 2.15).
  bool replicated_grad = false;
};

// A tensor of the forward: local shape [batch, (seq,) features] on the planned rank. `id` names
// the storage, so two ops that save the same tensor for backward hold it once (-1: not tracked).
struct Activation {
  std::vector<std::int64_t> shape;
  bool requires_grad = false;
  DType dtype = DType::float32;
  int id = -1;
  // A DTensor between modules (SequenceParallel's or PrepareModuleInput's output with
  // use_local_output=False): its placement on `dtensor_dims`, and the autograd node through which
  // its consumers hand back the placement of its gradient. Unset: a plain tensor.
  std::optional<Placement> dtensor;
  std::vector<int> dtensor_dims;
  int grad_node = -1;
  std::int64_t features() const { return shape.back(); }
  std::int64_t tokens() const { return product(shape) / shape.back(); }
  std::int64_t bytes() const { return product(shape) * dtype_size(dtype); }
  int rank() const { return static_cast<int>(shape.size()); }
};

// normal: plain forward. checkpointed: inside a checkpoint region on the first pass (nothing saved,
// backward entries still recorded). replay: the region's recomputation during backward (saves
// activations, records nothing, phase "recompute").
enum class Mode { normal, checkpointed, replay };
inline Phase phase_of(Mode mode) { return mode == Mode::replay ? Phase::recompute : Phase::forward; }

class PlanContext {
 public:
  PlanContext(const Model& model, const Plan& plan, const PlanOptions& options);

  const Model& model;
  const Plan& plan;
  const DeviceMesh& mesh;
  const PlanOptions options;

  std::vector<ParamState> params;
  std::vector<bool> checkpointed;  // per module: checkpoint() wraps it
  std::vector<bool> selective;     // per module: ... with torchtitan's op-level selective policy
  // per module: composable checkpoint() applied after its parallelize_module style, so the region
  // lies between the style's input and output hooks (CheckpointApi::composable)
  std::vector<bool> region_inside_hooks;
  std::vector<bool> reentrant;        // per module: checkpoint(use_reentrant=True) wraps it
  std::vector<int> fully_shard_step;  // per module: plan step that put fully_shard on it, -1 if none
  std::vector<int> replicate_step;    // per module: plan step that put replicate on it, -1 if none
  std::vector<bool> used_in_forward;  // per parameter: some forward step reads it

  // The training step being planned: 1-based micro-step, whether it synchronises gradients, and
  // whether the first iteration's forward has finished (prefetch orders are recorded in it).
  int iteration = 1;
  bool sync = true;
  bool first_iteration_done = false;

  // A new tensor's id. Ids follow forward order, so a checkpointed region's recomputation, which
  // rewinds `next_tensor` to the region's start, gives each tensor the id its first pass gave it.
  int fresh_tensor() { return next_tensor++; }
  int next_tensor = 0;

  int module_or_fail(const std::string& fqn, const std::string& where, const char* field = "module") const;
  // A plan step's "module" as fnmatch pattern over dotted FQNs ("layers.*", as torchtitan loops
  // over model.layers): the matches in pre-order; a name without '*' or '?' is the module itself.
  std::vector<int> modules_matching(const std::string& pattern, const std::string& where) const;
  std::vector<int> dims_of(const std::vector<std::string>& names) const;
  std::string group_name(const std::vector<int>& dims) const { return mesh.describe_dims(dims); }
  DType act_dtype() const { return model.params.empty() ? DType::float32 : model.params.front().dtype; }
  std::int64_t param_bytes(int p) const { return params[p].local_numel * dtype_size(model.params[p].dtype); }
  const std::string& label(int module) const;  // the module's FQN, or the model's name for the root

 private:
  // FQN -> module index: Model::find_module is a linear scan, and plans that name every layer
  // (fully_shard or checkpoint per block) made setup quadratic in the layer count (10,000 layers:
  // ~1 s, more than the rest of planning). FQNs are unique; emplace keeps the first as find_module
  // would.
  std::unordered_map<std::string_view, int> module_index_;
};

}  // namespace stratsim::core::planner
