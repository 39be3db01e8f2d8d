// match_collectives on hand-made sides with known answers: pairs by (rank, group, kind, sequence,
// bytes), every collective matched at most once and every compared one either matched or listed
// with its reason; iteration pairing; errors and their mean and geometric mean.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "stratsim/core/op_matching.hpp"

namespace stratsim::core {
namespace {

constexpr std::int8_t kAllReduce = static_cast<std::int8_t>(CollectiveKind::all_reduce);
constexpr std::int8_t kAllGather = static_cast<std::int8_t>(CollectiveKind::all_gather);

// One side over ranks {0, 1}, one group {0, 1} (index 0) and one stream.
CollectiveSide side(const std::string& file) {
  CollectiveSide s;
  s.file = file;
  s.world_size = 2;
  s.ranks = {0, 1};
  s.by_rank.resize(2);
  s.groups = {{0, 1}};
  s.group_names = {"dp"};
  s.streams = {"comm"};
  s.labels = {"op"};
  s.comm_keys = {"c10d.allreduce_"};
  s.unmodelled_kinds = {""};
  return s;
}

SideCollective collective(std::int8_t kind, std::int64_t bytes, int iteration, double duration, int group = 0) {
  SideCollective c;
  c.kind = kind;
  c.bytes = bytes;
  c.iteration = iteration;
  c.group = group;
  c.begin = 1.0;
  c.end = 1.0 + duration;
  return c;
}

// Every compared collective is matched once or listed once.
void expect_accounted(const OpComparison& c) {
  std::set<std::tuple<bool, int, int>> seen;
  for (const MatchedCollective& m : c.matched) {
    EXPECT_TRUE(seen.insert({true, m.rank, m.predicted}).second);
    EXPECT_TRUE(seen.insert({false, m.rank, m.measured}).second);
  }
  int unmatched_predicted = 0;
  for (const UnmatchedCollective& u : c.unmatched) {
    EXPECT_TRUE(seen.insert({u.predicted_side, u.rank, u.index}).second) << u.reason;
    unmatched_predicted += u.predicted_side;
  }
  EXPECT_EQ(static_cast<int>(c.matched.size()) + unmatched_predicted, c.predicted_compared);
}

TEST(OpMatching, PairsByKindAndSequenceWithinGroupAndIteration) {
  CollectiveSide p = side("p"), m = side("m");
  for (int r = 0; r < 2; ++r) {
    // predicted: gather, reduce, reduce; measured issues the two kinds interleaved differently
    p.by_rank[r] = {collective(kAllGather, 100, 1, 2.0), collective(kAllReduce, 10, 1, 1.0),
                    collective(kAllReduce, 20, 1, 3.0)};
    m.by_rank[r] = {collective(kAllReduce, 10, 1, 2.0), collective(kAllGather, 100, 1, 4.0),
                    collective(kAllReduce, 20, 1, 3.0)};
  }
  const OpComparison c = match_collectives(p, m);
  EXPECT_TRUE(c.unmatched.empty());
  ASSERT_EQ(c.matched.size(), 6u);
  expect_accounted(c);
  // rank 0: predicted 0 (gather) <-> measured 1; predicted 1 <-> measured 0; predicted 2 <-> measured 2
  EXPECT_EQ(c.matched[0].predicted, 0);
  EXPECT_EQ(c.matched[0].measured, 1);
  EXPECT_EQ(c.matched[1].measured, 0);
  EXPECT_EQ(c.matched[1].sequence, 0);
  EXPECT_EQ(c.matched[2].sequence, 1);
  EXPECT_DOUBLE_EQ(*c.matched[0].error(), -0.5);  // 2 s predicted, 4 s measured
  EXPECT_DOUBLE_EQ(*c.matched[1].error(), -0.5);
  EXPECT_DOUBLE_EQ(*c.matched[2].error(), 0.0);
  EXPECT_EQ(c.alignment, "by number: iterations 1");
}

TEST(OpMatching, ErrorsSummariseAsMeanAndGeometricMean) {
  CollectiveSide p = side("p"), m = side("m");
  p.ranks = m.ranks = {0};
  p.by_rank.resize(1), m.by_rank.resize(1);
  // |errors| 0.1 and 0.4: mean 0.25, geomean 0.2
  p.by_rank[0] = {collective(kAllReduce, 2048, 1, 1.1), collective(kAllReduce, 2048, 1, 1.4)};
  m.by_rank[0] = {collective(kAllReduce, 2048, 1, 1.0), collective(kAllReduce, 2048, 1, 1.0)};
  const OpComparison c = match_collectives(p, m);
  ASSERT_TRUE(c.overall.mean_abs_error && c.overall.geomean_abs_error);
  EXPECT_NEAR(*c.overall.mean_abs_error, 0.25, 1e-12);
  EXPECT_NEAR(*c.overall.geomean_abs_error, 0.2, 1e-12);
  ASSERT_EQ(c.by_kind_size.size(), 1u);
  EXPECT_EQ(c.by_kind_size[0].label, "all_reduce 1 KiB - 4 KiB");
  EXPECT_EQ(c.by_kind_size[0].count, 2);
  EXPECT_NEAR(c.by_kind_size[0].predicted_total, 2.5, 1e-12);
  ASSERT_EQ(c.by_stream.size(), 1u);
  EXPECT_EQ(c.by_stream[0].label, "comm | comm");
}

// A trace as the prediction: it may not name its groups, or know its bytes; matched by kind and
// order then, and unknown bytes refuse no pair.
TEST(OpMatching, APredictionWithoutGroupsOrBytesStillMatches) {
  CollectiveSide p = side("trace"), m = side("sim.json");
  p.ranks = m.ranks = {0};
  p.by_rank.resize(1), m.by_rank.resize(1);
  p.by_rank[0] = {collective(kAllReduce, -1, 1, 1.0, -1), collective(kAllReduce, 30, 1, 1.0, -1)};
  m.by_rank[0] = {collective(kAllReduce, 10, 1, 1.0), collective(kAllReduce, 30, 1, 1.0)};
  const OpComparison c = match_collectives(p, m);
  EXPECT_EQ(c.matched.size(), 2u);
  EXPECT_TRUE(c.unmatched.empty());
  ASSERT_EQ(c.by_kind_size.size(), 1u);
  EXPECT_EQ(c.by_kind_size[0].label, "all_reduce < 1 KiB");
}

TEST(OpMatching, SizeBucketsArePowersOfFour) {
  EXPECT_EQ(size_bucket(-1), "of unknown size");
  EXPECT_EQ(size_bucket(std::int64_t{1} << 40), ">= 1 TiB");
  EXPECT_EQ(size_bucket((std::int64_t{1} << 40) - 1), "256 GiB - 1 TiB");
  EXPECT_EQ(size_bucket(0), "< 1 KiB");
  EXPECT_EQ(size_bucket(1023), "< 1 KiB");
  EXPECT_EQ(size_bucket(1024), "1 KiB - 4 KiB");
  EXPECT_EQ(size_bucket(4096), "4 KiB - 16 KiB");
  EXPECT_EQ(size_bucket(300 << 10), "256 KiB - 1 MiB");
  EXPECT_EQ(size_bucket(std::int64_t{1} << 20), "1 MiB - 4 MiB");
  EXPECT_EQ(size_bucket(std::int64_t{3} << 30), "1 GiB - 4 GiB");
}

TEST(OpMatching, DifferentBytesAndMissingCollectivesAreListedWithTheirReasons) {
  CollectiveSide p = side("sim.json"), m = side("trace");
  p.ranks = m.ranks = {0};
  p.by_rank.resize(1), m.by_rank.resize(1);
  p.by_rank[0] = {collective(kAllReduce, 10, 1, 1.0), collective(kAllReduce, 20, 1, 1.0),
                  collective(kAllReduce, 30, 1, 1.0)};
  m.by_rank[0] = {collective(kAllReduce, 10, 1, 1.0), collective(kAllReduce, 25, 1, 1.0)};
  const OpComparison c = match_collectives(p, m);
  expect_accounted(c);
  ASSERT_EQ(c.matched.size(), 1u);
  ASSERT_EQ(c.unmatched.size(), 3u);
  EXPECT_EQ(c.unmatched[0].reason,
            "all_reduce #2 on dp [0-1] in iteration 1: bytes differ (predicted 20 B, measured 25 B)");
  EXPECT_TRUE(c.unmatched[0].predicted_side);
  EXPECT_FALSE(c.unmatched[1].predicted_side);
  EXPECT_EQ(c.unmatched[2].reason, "no counterpart: predicted has 3 all_reduce on dp [0-1] in iteration 1, measured 2");
}

TEST(OpMatching, GroupsMustAgreeByMembers) {
  CollectiveSide p = side("p"), m = side("m");
  p.ranks = m.ranks = {0};
  p.by_rank.resize(1), m.by_rank.resize(1);
  m.groups = {{0, 1}, {0, 2}};  // the measured side's group 0 is named differently but has the same members
  m.group_names = {"default_pg", "other"};
  p.by_rank[0] = {collective(kAllReduce, 10, 1, 1.0)};
  m.by_rank[0] = {collective(kAllReduce, 10, 1, 1.0, /*group=*/1), collective(kAllReduce, 10, 1, 1.0, 0)};
  const OpComparison c = match_collectives(p, m);
  ASSERT_EQ(c.matched.size(), 1u);
  EXPECT_EQ(c.matched[0].measured, 1);
  ASSERT_EQ(c.unmatched.size(), 1u);
  EXPECT_EQ(c.unmatched[0].reason,
            "no counterpart: measured has 1 all_reduce on other [0,2] in iteration 1, predicted 0");
}

TEST(OpMatching, WithoutGroupsARankIsMatchedOverAllGroupsAndSaysSo) {
  CollectiveSide p = side("p"), m = side("m");
  p.ranks = m.ranks = {0};
  p.by_rank.resize(1), m.by_rank.resize(1);
  p.groups = {{0, 1}, {0, 2}};
  p.group_names = {"dp", "tp"};
  p.by_rank[0] = {collective(kAllReduce, 10, 1, 1.0, 0), collective(kAllReduce, 30, 1, 1.0, 1)};
  m.by_rank[0] = {collective(kAllReduce, 10, 1, 1.0, -1), collective(kAllReduce, 30, 1, 1.0, -1)};
  const OpComparison c = match_collectives(p, m);
  EXPECT_EQ(c.matched.size(), 2u);
  EXPECT_TRUE(c.unmatched.empty());
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_NE(c.notes[0].find("matched by kind and order over all groups"), std::string::npos);
}

TEST(OpMatching, OutsideStepsUnmodelledKindsAndMissingRanksAreReasons) {
  CollectiveSide p = side("sim.json"), m = side("trace");
  p.ranks = {0};
  p.by_rank.resize(1);
  p.world_size = 1;
  p.by_rank[0] = {collective(kAllReduce, 10, 1, 1.0)};
  m.labels = {"op", "gloo:barrier"};
  m.unmodelled_kinds = {"", "barrier"};
  SideCollective barrier = collective(-1, -1, 1, 1.0);
  barrier.label = 1;
  m.by_rank[0] = {collective(kAllReduce, 10, -1, 1.0), barrier, collective(kAllReduce, 10, 1, 1.0)};
  m.by_rank[1] = {collective(kAllReduce, 10, 1, 1.0)};
  const OpComparison c = match_collectives(p, m);
  expect_accounted(c);
  ASSERT_EQ(c.matched.size(), 1u);
  EXPECT_EQ(c.matched[0].measured, 2);
  std::vector<std::string> reasons;
  for (const UnmatchedCollective& u : c.unmatched) reasons.push_back(u.reason);
  EXPECT_EQ(reasons, (std::vector<std::string>{"issued outside every profiled step (no ProfilerStep#N encloses it)",
                                               "barrier: not a collective stratsim models",
                                               "rank 1 is not in sim.json (1 ranks)"}));
}

TEST(OpMatching, StepsPairByNumberElseTheLastOfEach) {
  CollectiveSide p = side("p"), m = side("m");
  p.ranks = m.ranks = {0};
  p.by_rank.resize(1), m.by_rank.resize(1);
  for (int i = 1; i <= 3; ++i) p.by_rank[0].push_back(collective(kAllReduce, 10, i, 1.0));
  for (int i = 5; i <= 6; ++i) m.by_rank[0].push_back(collective(kAllReduce, 10, i, 1.0));
  p.step_times = {{1, 1.0}, {2, 2.0}, {3, 3.0}};
  m.step_times = {{5, 2.5}, {6, 2.5}};
  const OpComparison c = match_collectives(p, m);
  EXPECT_EQ(c.iterations, (std::vector<std::pair<int, int>>{{2, 5}, {3, 6}}));
  EXPECT_NE(c.alignment.find("the last 2 of each"), std::string::npos) << c.alignment;
  EXPECT_EQ(c.matched.size(), 2u);
  EXPECT_EQ(c.predicted_compared, 2) << "iteration 1 is not compared";
  ASSERT_EQ(c.steps.size(), 2u);
  EXPECT_DOUBLE_EQ(*c.steps[0].error(), -0.2);
  EXPECT_DOUBLE_EQ(*c.steps[1].error(), 0.2);
}

TEST(OpMatching, CountsDifferPerKeyAndGroup) {
  CollectiveSide p = side("p"), m = side("m");
  p.ranks = m.ranks = {0};
  p.by_rank.resize(1), m.by_rank.resize(1);
  p.comm_keys = {"c10d.allreduce_", "c10d._allgather_base_", "c10d.broadcast_"};
  m.comm_keys = {"c10d.allreduce_", "c10d.broadcast_", "c10d.barrier"};
  const auto keyed = [](SideCollective c, int key) {
    c.comm_key = key;
    return c;
  };
  // predicted: 2 all-reduce, 1 all-gather, 1 broadcast; measured: 3 all-reduce, 1 broadcast, 1 barrier
  p.by_rank[0] = {keyed(collective(kAllReduce, 10, 1, 1), 0), keyed(collective(kAllReduce, 10, 1, 1), 0),
                  keyed(collective(kAllGather, 10, 1, 1), 1), keyed(collective(3, 10, 1, 1), 2)};
  m.by_rank[0] = {keyed(collective(kAllReduce, 10, 1, 1), 0), keyed(collective(kAllReduce, 10, 1, 1), 0),
                  keyed(collective(kAllReduce, 10, 1, 1), 0), keyed(collective(3, 10, 1, 1), 1),
                  keyed(collective(-1, -1, 1, 1), 2)};
  const OpComparison c = match_collectives(p, m);
  std::vector<std::string> rows;
  for (const CountDifference& d : count_differences(p, m, c))
    rows.push_back(d.comm_key + " " + d.group + " " + std::to_string(d.predicted) + " " + std::to_string(d.measured) +
                   " " + d.change);
  EXPECT_EQ(rows,
            (std::vector<std::string>{"c10d._allgather_base_ dp [0-1] 1 0 removed", "c10d.allreduce_ dp [0-1] 2 3 more",
                                      "c10d.barrier dp [0-1] 0 1 added", "c10d.broadcast_ dp [0-1] 1 1 unchanged"}));
}

}  // namespace
}  // namespace stratsim::core
