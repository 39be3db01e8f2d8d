// Internal state of the planner, shared by its translation units (not installed).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "stratsim/core/planner.hpp"

namespace stratsim::core::detail {

// A parameter as the planned rank holds it.
struct ParamState {
  std::vector<std::int64_t> local_shape;  // after tensor parallelism (padded shard)
  std::int64_t local_numel = 0;
  bool dtensor = false;       // parallelize_module / distribute_module made it a DTensor
  Placement placement;        // its placement on `tp_dims`
  std::vector<int> tp_dims;
  int fsdp_unit = -1;
  int ddp = -1;               // DDP instance
  int ddp_index = -1;         // variable index inside that instance
};

struct TPState {
  bool parallel = false;  // parallelize_module style
  TPModuleSpec spec;
  bool distributed = false;  // distribute_module (replicated params, from_local input)
  std::optional<Placement> input_layout;
  std::vector<int> dims;
};

struct FsdpUnit {
  int module = 0;
  FullyShardStep config;
  std::vector<int> shard_dims, replicate_dims;
  std::vector<int> params;  // flat parameter contents, in flattening order
  std::int64_t numel = 0, shard = 0, padded = 0;
  DType orig_dtype = DType::float32;
  bool root = false;
  int step_index = 0;
  // runtime
  bool unsharded = false;
  bool prefetched = false;
  bool backward_pre_done = false;
  int pending_grads = 0;
  int post_forward_order = -1;
  int all_gather_op = -1;
  bool grad_allocated = false;
  bool has_handle() const { return !params.empty(); }
};

struct DdpInstance {
  int module = 0;
  std::string where;  // the plan step that called replicate()
  ReplicateStep config;
  std::vector<int> dims;
  std::vector<int> params;  // model parameter indices in DDP variable order
  std::vector<std::vector<int>> buckets;  // variable indices
  std::vector<std::int64_t> limits;
  std::vector<std::vector<int>> initial_buckets;
  std::vector<std::int64_t> initial_limits;
  bool rebuilt = false;
  int rebuilt_at = 0;                 // iteration whose forward rebuilt the buckets
  int synced_backwards = 0;
  std::vector<int> ready_order;       // recorded for the rebuild
  std::vector<int> first_ready_order; // first synced backward (compiled-DDP figure)
  bool initialized = false;
  // runtime, per backward
  bool hooks_active = false;
  bool delay_all_reduce = false;
  std::vector<int> pending;
  std::vector<bool> ready;
  std::vector<int> bucket_of;
  int next_bucket = 0;
  std::vector<int> launched_ops;
  std::int64_t bucket_buffer_bytes = 0;
};

}  // namespace stratsim::core::detail
