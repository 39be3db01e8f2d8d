#include <gtest/gtest.h>

#include "stratsim/core/bucketing.hpp"

using namespace stratsim::core;

namespace {
std::vector<BucketTensor> tensors(std::initializer_list<std::pair<std::int64_t, DType>> items) {
  std::vector<BucketTensor> out;
  for (auto [numel, dtype] : items) out.push_back({numel, dtype, 0, false});
  return out;
}
constexpr DType F = DType::float32;
constexpr DType D = DType::float64;
}  // namespace

// Reference vectors 1-4 (test_c10d_common.py ComputeBucketAssignmentTest).
TEST(ComputeBucketAssignment, SingleLimitSingleDtype) {
  auto r = compute_bucket_assignment_by_size(tensors({{100, F}, {200, F}, {100, F}, {50, F}}), {400});
  EXPECT_EQ(r.buckets, (std::vector<std::vector<int>>{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(r.size_limits, (std::vector<std::int64_t>{400, 400, 400, 400}));
}

TEST(ComputeBucketAssignment, SingleLimitMultiDtype) {
  auto r = compute_bucket_assignment_by_size(tensors({{50, F}, {25, D}, {50, F}, {25, D}, {50, F}, {25, D}}), {400});
  EXPECT_EQ(r.buckets, (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4}, {5}}));
}

TEST(ComputeBucketAssignment, MultiLimitSingleDtype) {
  auto r = compute_bucket_assignment_by_size(tensors({{10, F}, {10, F}, {10, F}, {10, F}}), {40, 80});
  EXPECT_EQ(r.buckets, (std::vector<std::vector<int>>{{0}, {1, 2}, {3}}));
  EXPECT_EQ(r.size_limits, (std::vector<std::int64_t>{40, 80, 80}));
}

TEST(ComputeBucketAssignment, MultiLimitMultiDtype) {
  auto r = compute_bucket_assignment_by_size(tensors({{50, F}, {25, D}, {50, F}, {25, D}, {50, F}, {25, D}}), {200, 400});
  EXPECT_EQ(r.buckets, (std::vector<std::vector<int>>{{0}, {1}, {2, 4}, {3, 5}}));
  EXPECT_EQ(r.size_limits, (std::vector<std::int64_t>{200, 200, 400, 400}));
}

TEST(ComputeBucketAssignment, ExplicitIndicesKeepCloseOrder) {
  // 4 x Linear(2000, 2000) in gradient-ready order: vector 5's rebuilt buckets.
  std::vector<BucketTensor> t;
  std::vector<int> order{7, 6, 5, 4, 3, 2, 1, 0};
  for (int i : order) t.push_back({i % 2 == 0 ? 4000000 : 2000, F, 0, false});
  auto r = compute_bucket_assignment_by_size(t, {kMiB, 25 * kMiB}, order);
  EXPECT_EQ(r.buckets, (std::vector<std::vector<int>>{{7, 6}, {5, 4, 3, 2}, {1, 0}}));
  EXPECT_EQ(r.size_limits, (std::vector<std::int64_t>{kMiB, 25 * kMiB, 25 * kMiB}));
}

TEST(ComputeBucketAssignment, SparseGradientsAreAlone) {
  std::vector<BucketTensor> t{{10, F, 0, false}, {10, F, 0, true}, {10, F, 0, false}};
  auto r = compute_bucket_assignment_by_size(t, {1000});
  EXPECT_EQ(r.buckets, (std::vector<std::vector<int>>{{0, 2}, {1}}));
}

// Reference vector 10: Inductor fusion of 4 x Linear(2000, 2000) in backward order -> 3 buckets;
// 3 x Linear(2, 2) -> 1.
TEST(InductorFusion, SeedBucketCounts) {
  std::vector<std::int64_t> net{8000, 16000000, 8000, 16000000, 8000, 16000000, 8000, 16000000};
  auto buckets = inductor_ddp_fusion(net, 25 * kMiB);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0], (std::pair<int, int>{0, 2}));
  EXPECT_EQ(buckets[1], (std::pair<int, int>{2, 6}));
  EXPECT_EQ(buckets[2], (std::pair<int, int>{6, 8}));
  EXPECT_EQ(inductor_ddp_fusion({8, 16, 8, 16, 8, 16}, 25 * kMiB).size(), 1u);
}

// Property: every index lands in exactly one bucket, whatever the sizes and limits.
TEST(ComputeBucketAssignment, EveryTensorInExactlyOneBucket) {
  std::uint64_t state = 12345;
  auto next = [&]() { return state = state * 6364136223846793005ULL + 1442695040888963407ULL; };
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(next() % 40);
    std::vector<BucketTensor> t;
    for (int i = 0; i < n; ++i) t.push_back({1 + static_cast<std::int64_t>(next() % 5000), next() % 3 == 0 ? D : F, 0, next() % 17 == 0});
    std::vector<std::int64_t> limits{1 + static_cast<std::int64_t>(next() % 8000), 1 + static_cast<std::int64_t>(next() % 30000)};
    auto r = compute_bucket_assignment_by_size(t, limits);
    std::vector<int> seen(n, 0);
    for (const auto& bucket : r.buckets) {
      ASSERT_FALSE(bucket.empty());
      for (int i : bucket) ++seen[i];
    }
    for (int i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "trial " << trial;
    for (std::size_t b = 1; b < r.buckets.size(); ++b)
      EXPECT_LT(*std::min_element(r.buckets[b - 1].begin(), r.buckets[b - 1].end()),
                *std::min_element(r.buckets[b].begin(), r.buckets[b].end()));
  }
}

// A bucket that never filled keeps the limit its key had reached, not the last one in the list
// (reducer.cpp appends the leftover with the key's current limit). 3 x Linear(2, 2) in ready order
// under the default rebuild limits [1 MiB, 25 MiB]: 72 B never reach 1 MiB, so the one bucket is
// the first bucket and its recorded limit is 1 MiB.
TEST(ComputeBucketAssignment, LeftoverBucketKeepsItsKeysCurrentLimit) {
  std::vector<BucketTensor> t;
  const std::vector<int> order{5, 4, 3, 2, 1, 0};
  for (int i : order) t.push_back({i % 2 == 0 ? 4 : 2, F, 0, false});
  const auto r = compute_bucket_assignment_by_size(t, {kMiB, 25 * kMiB}, order);
  EXPECT_EQ(r.buckets, (std::vector<std::vector<int>>{{5, 4, 3, 2, 1, 0}}));
  EXPECT_EQ(r.size_limits, (std::vector<std::int64_t>{kMiB}));
  // Two keys: the float64 key closes a bucket and moves on to 80; the float32 key never closes
  // one, so its leftover still carries the first limit, 40.
  const auto mixed = compute_bucket_assignment_by_size(tensors({{5, D}, {1, F}, {1, F}}), {40, 80});
  EXPECT_EQ(mixed.buckets, (std::vector<std::vector<int>>{{0}, {1, 2}}));
  EXPECT_EQ(mixed.size_limits, (std::vector<std::int64_t>{40, 40}));
}

// Inductor's bucket closes when the running size is no longer below the threshold (`curr <
// threshold` keeps accumulating), so a block of exactly 1 MiB closes the first bucket alone.
// 3 x Linear(512, 512, bias=False) in backward order: weights of 512 * 512 * 4 = 1,048,576 B each.
// First bucket [c] (1 MiB is not < 1 MiB), then the 25 MiB cap: [b, a] (the last block closes).
TEST(InductorFusion, ABlockOfExactlyTheThresholdClosesTheBucket) {
  const std::int64_t weight = 512 * 512 * 4;
  ASSERT_EQ(weight, kMiB);
  const auto buckets = inductor_ddp_fusion({weight, weight, weight}, 25 * kMiB);
  EXPECT_EQ(buckets, (std::vector<std::pair<int, int>>{{0, 1}, {1, 3}}));
  // And one byte short of the threshold keeps accumulating: [c', b] | [a].
  const auto short_by_one = inductor_ddp_fusion({weight - 1, weight, weight}, 25 * kMiB);
  EXPECT_EQ(short_by_one, (std::vector<std::pair<int, int>>{{0, 2}, {2, 3}}));
}
