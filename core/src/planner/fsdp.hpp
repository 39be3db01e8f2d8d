// FSDP1 / composable fully_shard (v1): units with flat parameters sharded over their group, as
// FullyShardedDataParallel runs them. Setup wraps modules into units (auto-wrap policies, ignored
// modules) and sizes each flat parameter (use_orig_params alignment, padding to the group);
// forward all-gathers a unit before its first use and reshards after (by strategy), with forward
// and backward prefetch and the all-gather rate limiter; backward re-gathers in pre-backward hooks
// and reduce-scatters (or all-reduces, for NO_SHARD and HSDP) when autograd reaches the flat
// parameter, which is later than its last gradient (see views_reached).
// Owns the units; emits through the ProgramBuilder and hooks into the BackwardTape.
#pragma once

#include <cstdint>
#include <vector>

#include "backward_tape.hpp"
#include "context.hpp"
#include "program_builder.hpp"

namespace stratsim::core::planner {

class FullyShard {
 public:
  FullyShard(PlanContext& context, ProgramBuilder& builder, BackwardTape& tape);

  void apply_fully_shard(const FullyShardStep& step, const PlanStep& where);
  // Once the whole plan is applied: which units are roots (lazy init reaches no further).
  void mark_roots();
  // NO_SHARD units keep their parameters unsharded throughout.
  void start();
  int unit_of_module(int module) const { return unit_of_module_[module]; }
  DType compute_dtype(int unit) const;

  void begin_iteration();  // per-iteration hook state; sync_module_states in iteration 1
  void pre_forward(int module, Mode mode);
  void post_forward(int module, Mode mode);
  // The all-gather the compute that reads parameter p waits for (-1 when p is not sharded).
  int all_gather_op(int p) const;
  void grad_ready(int p, int producer);  // a gradient of one of the unit's parameters is in

  // The flat-parameter shards resident on the device (CPU-offloaded units' live on the host): what
  // the rank stores and what its optimizer steps.
  struct Shard {
    std::int64_t numel = 0;
    DType dtype = DType::float32;
  };
  std::vector<Shard> resident_shards() const;
  void report(PlanResult& result) const;

 private:
  struct Unit {
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
    int pending_grads = 0;  // used parameters whose gradient is not in yet
    int used_params = 0;    // parameters the forward reads (no gradient, no reduction)
    int views_pending = 0;  // forward views whose autograd node backward has not reached
    bool reduced = false;   // post-backward ran this iteration
    int post_forward_order = -1;
    int all_gather_op = -1;
    bool grad_allocated = false;
    // Their storage in the allocation history: the padded unsharded flat parameter (allocated on
    // the unshard stream, or for ever under NO_SHARD) and its unsharded gradient.
    MemoryTracker::Tensor unsharded_storage = MemoryTracker::kNoTensor, grad_storage = MemoryTracker::kNoTensor;
    bool has_handle() const { return !params.empty(); }
    DType param_dtype() const { return config.param_dtype.value_or(orig_dtype); }
  };

  void build_unit(int module, const FullyShardStep& step, const std::vector<bool>& ignored, int step_index);
  std::vector<std::int64_t> flat_offsets(const Unit& unit) const;
  int all_gather(int u, Phase phase, const char* why);
  void reshard(int u);
  int next_backward_unit(int u) const;
  void pre_forward_unit(int u, Mode mode);
  void post_forward_unit(int u, Mode mode);
  void pre_backward(int u);
  void post_backward(int u, int producer);
  void mark_views(int u, Mode mode);
  void views_reached(int u);
  void sync_module_states();

  PlanContext& context_;
  ProgramBuilder& builder_;
  BackwardTape& tape_;
  std::vector<Unit> units_;
  std::vector<int> unit_of_module_;  // FSDP unit rooted at a module, -1 if none
  int post_forward_counter_ = 0;
  std::vector<int> unit_by_post_forward_order_;  // this iteration: post-forward index -> unit
  std::vector<int> first_forward_unit_order_;    // forward_prefetch follows iteration 1's order
  std::vector<int> free_events_;                 // rate limiter: compute ops after which a unit was freed
};

}  // namespace stratsim::core::planner
