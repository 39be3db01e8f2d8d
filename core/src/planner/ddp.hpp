// DistributedDataParallel and composable replicate(): the Reducer as PyTorch runs it. Construction
// (lazily, in the first forward): the parameter shape check and the module-state broadcast, then
// the construction-time buckets; each synced backward marks gradients ready in autograd's order
// and launches bucket all-reduces strictly in bucket order; after the first synced backward the
// buckets are rebuilt in gradient-ready order and their layout broadcast from rank 0. Owns the DDP
// instances; emits through the ProgramBuilder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "context.hpp"
#include "program_builder.hpp"
#include "stratsim/core/bucketing.hpp"

namespace stratsim::core::planner {

class DataParallel {
 public:
  DataParallel(PlanContext& context, ProgramBuilder& builder);

  void apply_replicate(const ReplicateStep& step, const PlanStep& where);
  // replicate() is lazy: DDP, and the parameter list it reduces, is built in the first forward,
  // after every call of the plan, so a fully_shard() applied later to a submodule still takes that
  // submodule's parameters out of DDP. Call once the whole plan is applied.
  void collect_params();

  void pre_forward(int module);               // every instance on `module`
  void grad_ready(int p, int producer);       // autograd hook of parameter p
  void end_backward();                        // every instance, after the backward pass
  bool gradient_as_bucket_view(int p) const;  // p's .grad is a view into its bucket
  std::int64_t bucket_buffer_bytes() const;   // bucket copies held besides .grad
  void report(PlanResult& result) const;

 private:
  struct Instance {
    int module = 0;
    std::string where;  // the plan step that called replicate()
    ReplicateStep config;
    std::vector<int> dims;
    std::vector<int> params;                // model parameter indices in DDP variable order
    std::vector<std::vector<int>> buckets;  // variable indices
    std::vector<std::int64_t> limits;
    std::vector<std::vector<int>> initial_buckets;
    std::vector<std::int64_t> initial_limits;
    bool rebuilt = false;
    int rebuilt_at = 0;  // iteration whose forward rebuilt the buckets
    int synced_backwards = 0;
    std::vector<int> ready_order;        // recorded for the rebuild
    std::vector<int> first_ready_order;  // first synced backward (compiled-DDP figure)
    bool initialized = false;
    std::int64_t bucket_buffer_bytes = 0;
    // runtime, per backward
    bool hooks_active = false;
    bool delay_all_reduce = false;
    std::vector<int> pending;
    std::vector<bool> ready;
    std::vector<int> bucket_of;
    int next_bucket = 0;
  };

  std::string stream(const Instance& ddp) const { return "ddp." + context_.group_name(ddp.dims); }
  std::vector<BucketTensor> bucket_tensors(const Instance& ddp, const std::vector<int>& variables) const;
  void construct(Instance& ddp);
  void rebuild(Instance& ddp);
  void mark_ready(Instance& ddp, int variable, int producer);
  void launch(Instance& ddp, int bucket, int producer);
  void reduce_used_map(Instance& ddp, int producer);
  std::vector<DdpBucket> to_buckets(const Instance& ddp, const std::vector<std::vector<int>>& buckets,
                                    const std::vector<std::int64_t>& limits) const;

  PlanContext& context_;
  ProgramBuilder& builder_;
  std::vector<Instance> instances_;
};

// bucket_cap_mb as the Reducer's byte cap: int(bucket_cap_mb * 1024 * 1024), 25 MiB when unset.
std::int64_t bucket_cap_bytes(const ReplicateStep& step);

}  // namespace stratsim::core::planner
