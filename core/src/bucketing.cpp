#include "stratsim/core/bucketing.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace stratsim::core {
namespace {

struct Accumulator {
  std::vector<int> indices;
  std::int64_t bytes = 0;
  std::size_t limit_cursor = 0;
};

}  // namespace

BucketAssignment compute_bucket_assignment_by_size(const std::vector<BucketTensor>& tensors,
                                                   const std::vector<std::int64_t>& size_limits,
                                                   const std::vector<int>& tensor_indices) {
  if (size_limits.empty()) throw std::invalid_argument("bucket size limits must not be empty");
  if (!tensor_indices.empty() && tensor_indices.size() != tensors.size())
    throw std::invalid_argument("tensor_indices must match tensors");

  BucketAssignment result;
  // Keyed by (dtype, device): each key fills its own bucket and walks the limits on its own.
  // std::map keeps the leftover flush deterministic; the Reducer's unordered_map only is when a
  // single key exists, which is every case it is used for in practice.
  std::map<std::pair<int, int>, Accumulator> open;
  for (std::size_t position = 0; position < tensors.size(); ++position) {
    const BucketTensor& tensor = tensors[position];
    int index = tensor_indices.empty() ? static_cast<int>(position) : tensor_indices[position];
    if (tensor.expect_sparse_gradient) {
      // Sparse gradients cannot be flattened with others: each is a bucket of its own.
      result.buckets.push_back({index});
      result.size_limits.push_back(0);
      continue;
    }
    Accumulator& acc = open[{static_cast<int>(tensor.dtype), tensor.device}];
    acc.indices.push_back(index);
    acc.bytes += tensor.numel * dtype_size(tensor.dtype);
    std::int64_t limit = size_limits[acc.limit_cursor];
    if (acc.bytes >= limit) {
      result.buckets.push_back(std::move(acc.indices));
      result.size_limits.push_back(limit);
      acc.indices.clear();
      acc.bytes = 0;
      if (acc.limit_cursor + 1 < size_limits.size()) ++acc.limit_cursor;
    }
  }
  for (auto& [key, acc] : open) {
    if (acc.indices.empty()) continue;
    result.buckets.push_back(std::move(acc.indices));
    result.size_limits.push_back(size_limits[acc.limit_cursor]);
  }
  if (tensor_indices.empty()) {
    // Order buckets by the smallest index each holds (minima are unique, so this is total).
    std::vector<std::size_t> order(result.buckets.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    auto min_of = [&](std::size_t b) { return *std::min_element(result.buckets[b].begin(), result.buckets[b].end()); };
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return min_of(a) < min_of(b); });
    BucketAssignment sorted;
    for (std::size_t b : order) {
      sorted.buckets.push_back(std::move(result.buckets[b]));
      sorted.size_limits.push_back(result.size_limits[b]);
    }
    return sorted;
  }
  return result;
}

std::vector<std::pair<int, int>> inductor_ddp_fusion(const std::vector<std::int64_t>& bytes, std::int64_t cap_bytes) {
  std::vector<std::pair<int, int>> buckets;
  std::int64_t threshold = kMiB;
  std::int64_t current = 0;
  int begin = 0;
  const int count = static_cast<int>(bytes.size());
  for (int i = 0; i < count; ++i) {
    current += bytes[i];
    if (current < threshold && i != count - 1) continue;
    buckets.emplace_back(begin, i + 1);
    begin = i + 1;
    current = 0;
    threshold = cap_bytes;
  }
  return buckets;
}

}  // namespace stratsim::core
