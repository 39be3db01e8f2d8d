// DDP gradient bucketing exactly as c10d's Reducer assigns it
// (compute_bucket_assignment_by_size in torch/csrc/distributed/c10d/reducer.cpp), and the
// compiled-DDP fusion rule of Inductor's ddp_fusion pass.
#pragma once

#include <cstdint>
#include <vector>

#include "stratsim/core/dtype.hpp"

namespace stratsim::core {

struct BucketTensor {
  std::int64_t numel = 0;
  DType dtype = DType::float32;
  int device = 0;
  bool expect_sparse_gradient = false;
};

struct BucketAssignment {
  std::vector<std::vector<int>> buckets;   // variable indices per bucket
  std::vector<std::int64_t> size_limits;   // the limit each bucket was built under
};

// `tensors` in scan order. With empty `tensor_indices` the recorded index of position i is i and
// buckets are sorted by their smallest index; otherwise the recorded index is tensor_indices[i] and
// buckets stay in the order they closed. A bucket closes once its bytes reach the current limit;
// each (dtype, device) advances its own cursor through `size_limits`, the last limit repeating.
BucketAssignment compute_bucket_assignment_by_size(const std::vector<BucketTensor>& tensors,
                                                   const std::vector<std::int64_t>& size_limits,
                                                   const std::vector<int>& tensor_indices = {});

// Inductor's _bucket_size_fusion: walk gradients in order, first threshold 1 MiB then `cap_bytes`;
// a bucket closes when it reaches the threshold or at the last gradient. Returns the buckets as
// position ranges [begin, end) into `bytes`.
std::vector<std::pair<int, int>> inductor_ddp_fusion(const std::vector<std::int64_t>& bytes,
                                                     std::int64_t cap_bytes);

constexpr std::int64_t kMiB = 1024 * 1024;
constexpr std::int64_t kDefaultFirstBucketBytes = kMiB;
constexpr std::int64_t kDefaultBucketBytesCap = 25 * kMiB;
constexpr std::int64_t kUnlimitedBucketBytes = INT64_MAX;  // sys.maxsize

}  // namespace stratsim::core
