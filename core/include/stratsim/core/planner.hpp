// The strategy core: (model, mesh, plan) -> the collectives PyTorch issues and the program each
// rank runs, with counts and memory.
//
//   const core::Model model = core::load_model("zoo:Net");            // model_io.hpp
//   const core::Plan plan = core::load_plan("builtin:ddp");           // plan.hpp
//   const core::PlanResult result = core::plan_training(model, plan, {.rank = 0});
//   for (const auto& [op, count] : result.counts()) std::cout << op << " x" << count << "\n";
//   const core::Program& program = result.program;                    // what sim/ and exec/ run
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "stratsim/core/model.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/program.hpp"

namespace stratsim::core {

struct PlanOptions {
  int rank = 0;
  int iterations = 0;  // 0: the plan's, else 3 (enough for DDP's rebuilt buckets to settle)
};

// One collective as seen from the planned rank.
struct CollectiveRecord {
  int iteration = 1;
  int op_id = 0;   // ProgramOp id
  std::string op;  // CommDebugMode key without "torch.ops."
  CollectiveKind kind = CollectiveKind::all_reduce;
  std::string group;  // mesh dims of the group, "dp"
  int group_id = 0;   // Program::groups index; PlanResult::group_ranks has the ranks
  std::int64_t bytes = 0, input_bytes = 0, output_bytes = 0;
  DType dtype = DType::float32;
  Phase phase = Phase::forward;
  std::string module;
  std::string reason;
  std::vector<std::string> params;
};

struct DdpBucket {
  std::vector<std::string> params;  // in bucket order
  std::vector<int> indices;         // DDP variable indices
  std::int64_t bytes = 0;           // gradient bytes (param dtype)
  std::int64_t size_limit = 0;
};

struct DdpReport {
  std::string module;
  std::string group;
  std::vector<int> group_dims;  // mesh dims of `group`
  int group_size = 1;
  CommHook comm_hook = CommHook::none;
  bool init_sync = true;            // module states broadcast from the group's first rank at construction
  std::vector<std::string> params;  // DDP variable order (replicate's _param_names)
  std::vector<DdpBucket> initial;   // construction-time buckets
  std::vector<DdpBucket> rebuilt;   // after the first synced backward; empty if never rebuilt
  int rebuilt_at_iteration = 0;     // forward that rebuilds (0 = never)
  std::vector<DdpBucket> compiled;  // Inductor fused buckets (compiled DDP, python_reducer)
};

struct FsdpUnitReport {
  std::string module;           // unit root FQN
  std::string group;            // shard group dims
  std::string replicate_group;  // HSDP inter group dims, "" otherwise
  bool root = false;
  std::vector<int> group_dims, replicate_dims;  // mesh dims of `group` and `replicate_group`
  std::vector<std::string> params;
  std::vector<std::int64_t> offsets;  // per param: where its local elements start in the flat parameter
  std::int64_t numel = 0;             // N (with alignment padding)
  std::int64_t shard_numel = 0;       // S = ceil(N / W)
  std::int64_t padded_numel = 0;      // W * S
  ShardingStrategy strategy = ShardingStrategy::full_shard;
  bool sync_module_states = false;
};

// An FSDP2 parameter group: one fully_shard call's parameters, each its own Shard(0) DTensor.
struct FsdpParamGroupReport {
  std::string module;
  std::string group, replicate_group;  // shard dims; replicate dims for HSDP ("" otherwise)
  std::vector<int> group_dims, replicate_dims;
  bool root = false;
  bool reshard_after_forward = true;  // as it runs: false for the root
  // reshard_after_forward=k (1 < k < W): after forward each rank keeps 1/k of the unsharded
  // parameters and the pre-backward all-gather runs over runs of k consecutive group members.
  int post_forward_ranks = 0;
  std::vector<std::string> params;
  std::vector<std::int64_t> shard_numels;  // per param: ceil(dim0 / W) rows, the rank's padded shard
  std::int64_t shard_numel = 0;            // the all-gather's input per rank (sum of shard_numels)
  std::int64_t unsharded_numel = 0;        // W * shard_numel
};

// One step of the rank's allocation history as the planner models it: a tensor's storage taken or
// given back, on the stream whose caching-allocator pool serves it (0: the compute stream; others
// index PlanResult::memory_streams). Replayed through core::CachingAllocator it gives the
// reserved peak (caching_allocator.hpp).
struct MemoryEvent {
  bool allocate = true;  // false: released
  int tensor = 0;        // unique per allocation
  std::int64_t bytes = 0;
  int stream = 0;
  int op = -1;        // the program op last emitted when it happened (-1: before any)
  int iteration = 0;  // the training iteration it belongs to (0: while the plan is applied)
};

struct MemoryReport {
  std::int64_t parameters = 0;  // resident parameter storage (sharded where FSDP shards)
  std::int64_t gradients = 0;   // resident gradients after backward
  std::int64_t optimizer_state = 0;
  std::int64_t ddp_bucket_buffers = 0;
  std::int64_t activations = 0;            // peak saved (and checkpoint-cached) activations
  std::int64_t unsharded_params_peak = 0;  // FSDP unsharded flat parameters alive at once, peak
  std::int64_t peak = 0;  // peak over the step of the above, op outputs, activation gradients, temporaries
  std::string peak_at;                     // op name where the peak occurs
  // What the rank held when the peak was reached; the five sum to `peak`. Resident: parameters,
  // optimizer state, bucket buffers. Outputs and temporaries: op outputs nothing saved yet,
  // activation gradients, the ops' temporaries, FSDP's communication buffers.
  struct AtPeak {
    std::int64_t resident = 0, activations = 0, unsharded_params = 0, gradients = 0, outputs_and_temporaries = 0;
  };
  AtPeak at_peak;
  // What PyTorch's caching allocator would reserve for the allocation history (memory_events)
  // with its default segments and with expandable_segments:True; 0 without a history.
  std::int64_t reserved_peak = 0;
  std::int64_t reserved_peak_expandable = 0;
  std::optional<double> device_memory_bytes;
  bool out_of_memory = false;
};

// How the planned rank holds one model parameter after the plan's calls.
struct ParamLayout {
  std::vector<std::int64_t> local_shape;  // after tensor parallelism (a shard of the full shape)
  Placement placement;                    // on tp_dims; Replicate when not a DTensor
  std::vector<int> tp_dims;               // empty when not a DTensor
  int fsdp_unit = -1;                     // index into PlanResult::fsdp
  int fsdp2_group = -1;                   // index into PlanResult::fsdp2
  int ddp = -1;                           // index into PlanResult::ddp
};

// A DTensor boundary (a parallelize_module style or distribute_module's input_fn) as the plan
// declares it: the layout the module's input is declared in (input_layouts, from_local) and the
// one the style computes on (redistributed from the declared one, locally or by the program's
// tp_input collective).
struct TpBoundary {
  int module = 0;
  Placement declared, desired;
};

struct IterationRecord {
  int index = 1;
  bool sync = true;  // false under no_sync (gradient accumulation)
  std::vector<CollectiveRecord> collectives;
  double compute_flops = 0;
};

struct PlanResult {
  int rank = 0;
  std::vector<int> coordinate;
  // What applying the plan issues (parallelize_module / distribute_module's distribute_tensor), in
  // order: program ops of iteration 1, phase init, run before its forward; not in the counts.
  std::vector<CollectiveRecord> setup;
  std::vector<IterationRecord> iterations;
  Program program;
  std::vector<std::vector<int>> group_ranks;  // per Program group: the planned rank's members
  std::vector<DdpReport> ddp;
  std::vector<FsdpUnitReport> fsdp;
  std::vector<FsdpParamGroupReport> fsdp2;
  std::vector<ParamLayout> params;  // per model parameter (Model::params order)
  // How the model input is laid out over the first tensor-parallel module's dims (Shard(0): the
  // ranks of a tp group feed different rows; Replicate: the same rows). Replicate, no dims,
  // without tensor parallelism.
  Placement input_placement;
  std::vector<int> input_dims;
  std::vector<TpBoundary> tp_inputs;  // in forward order
  MemoryReport memory;
  std::vector<MemoryEvent> memory_events;   // every iteration's, in program order
  std::vector<std::string> memory_streams;  // the allocator pools' streams: [0] is "compute"
  std::vector<std::string> warnings;

  // CommDebugMode-style counts of the last iteration.
  std::map<std::string, int> counts() const;
  std::map<std::string, std::map<std::string, int>> counts_by_phase() const;
  std::map<std::string, std::map<std::string, int>> counts_by_module() const;
};

PlanResult plan_training(const Model& model, const Plan& plan, const PlanOptions& options = {});

}  // namespace stratsim::core
