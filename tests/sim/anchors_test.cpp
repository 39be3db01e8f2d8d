// Hand-worked anchors: collectives whose schedule (flows, bytes, latency steps) and simulated time
// are derived by hand from the alpha-beta rules and the test platform's link parameters, never
// from closed_form_time or estimate_time. The exactness tests compare SimGrid against the closed
// forms in sim/src/collectives/; a bug shared by a schedule and its closed form (or by the engine and
// every uniform platform) passes those, and fails here.
//
// Rules (simulators.md section 5, and the engine's contract in collective.hpp): a phase's flows
// start together; a flow takes its route latency plus bytes / bottleneck bandwidth (max-min
// shares when flows share a link); after the last flow ends the phase adds (latency_steps - 1)
// times the LARGEST route latency among its flows. Byte conventions follow nccl-tests: n is the
// all-gather output, the reduce-scatter input, the broadcast buffer, the bytes each rank sends in
// all-to-all, the all-reduce buffer.
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "sim_test_support.hpp"
#include "stratsim/sim/collective.hpp"
#include "stratsim/sim/simulator.hpp"

namespace stratsim::test {
namespace {

using core::CollectiveKind;
using sim::Algorithm;
using sim::Flow;
using sim::Schedule;

constexpr double us = 1e-6;

// Flat platform: one star of p devices, 50 GB/s and 1 us per link. A device-to-device route is
// [up link of src, down link of dst]: alpha = 2 x 1 us = 2 us, beta = 1 / 50e9 = 2e-11 s/B
// (1 MB = 1e6 B takes 20 us).
sim::PlatformSpec flat(int p) { return uniform_star(p, 50e9, 1 * us); }

// Two-tier platform: nodes of g devices under one leaf switch. NVLink 400 GB/s, 0.5 us per link:
// alpha_i = 2 x 0.5 = 1 us, beta_i = 2.5e-12 s/B (1 MB: 2.5 us). One 50 GB/s, 1 us NIC per device
// and a 0.5 us leaf switch: route [nic up, port up, port down, nic down] with port latency
// 0.25 us each, alpha_e = 1 + 0.25 + 0.25 + 1 = 2.5 us, beta_e = 2e-11 s/B (1 MB: 20 us).
sim::PlatformSpec two_tier(int nodes, int gpus) {
  return one_leaf_cluster(nodes, gpus, {400e9, 0.5 * us}, {50e9, 1 * us}, true, 0.5 * us);
}

std::vector<int> node_of_members(int g, int m) {
  std::vector<int> nodes;
  for (int i = 0; i < g * m; ++i) nodes.push_back(i / g);
  return nodes;
}

// A phase's flows as sorted (src, dst, bytes), so they compare as a set.
std::vector<std::tuple<int, int, double>> sorted_flows(const std::vector<Flow>& flows) {
  std::vector<std::tuple<int, int, double>> out;
  for (const Flow& flow : flows) out.emplace_back(flow.src, flow.dst, flow.bytes);
  std::sort(out.begin(), out.end());
  return out;
}

struct ExpectedPhase {
  int latency_steps;
  std::vector<Flow> flows;
};

void expect_schedule(const Schedule& schedule, const std::vector<ExpectedPhase>& expected) {
  ASSERT_EQ(schedule.phases.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE("phase " + std::to_string(i) + " '" + schedule.phases[i].label + "'");
    EXPECT_EQ(schedule.phases[i].latency_steps, expected[i].latency_steps);
    EXPECT_EQ(sorted_flows(schedule.phases[i].flows), sorted_flows(expected[i].flows));
  }
}

// A ring over each member list (member i sends to member i + 1, the last to the first), `bytes`
// per flow.
std::vector<Flow> rings(const std::vector<std::vector<int>>& members, double bytes) {
  std::vector<Flow> flows;
  for (const auto& ring : members)
    for (std::size_t i = 0; i < ring.size(); ++i) flows.push_back({ring[i], ring[(i + 1) % ring.size()], bytes});
  return flows;
}

// Every member of each group sends `bytes` to every other member of that group.
std::vector<Flow> all_pairs(const std::vector<std::vector<int>>& groups, double bytes) {
  std::vector<Flow> flows;
  for (const auto& group : groups)
    for (int src : group)
      for (int dst : group)
        if (src != dst) flows.push_back({src, dst, bytes});
  return flows;
}

// Simulated duration of one collective over the whole platform (world group, p members).
double simulated(CollectiveKind kind, Algorithm algorithm, const sim::PlatformSpec& platform, int p, double bytes) {
  core::Program program = empty_program({p}, {"world"});
  const int op = add_collective(program, kind, bytes, {0});
  sim::SimOptions options;
  options.algorithms[kind] = algorithm;
  const sim::SimResult result = sim::simulate(program, platform, options);
  return result.timings[0][op].end - result.timings[0][op].start;
}

void expect_time(double simulated_seconds, double expected_seconds) {
  EXPECT_NEAR(simulated_seconds, expected_seconds, 1e-9 * expected_seconds)
      << "simulated " << simulated_seconds / us << " us, hand-worked " << expected_seconds / us << " us";
}

// ---------------------------------------------------------------------------------------------
// Flat algorithms on the flat star (alpha = 2 us, 1 MB = 20 us).

// Ring all-gather, p = 4, n = 4 MB: chunks of n/p = 1 MB; each member forwards p - 1 = 3 chunks
// to its successor in one pipelined phase of p - 1 = 3 latency steps.
// Time: flow 2 us + 3 MB x 20 us/MB = 62 us, then 2 more steps x 2 us = 4 us: 66 us.
TEST(HandWorkedRing, AllGather) {
  const Schedule schedule = sim::build_schedule(CollectiveKind::all_gather, Algorithm::ring, {0, 0, 0, 0}, 4e6);
  expect_schedule(schedule, {{3, rings({{0, 1, 2, 3}}, 3e6)}});
  expect_time(simulated(CollectiveKind::all_gather, Algorithm::ring, flat(4), 4, 4e6), 66 * us);
}

// Ring reduce-scatter, p = 5, n = 5 MB (the input): chunks of 1 MB, p - 1 = 4 per member, 4 steps.
// Time: 2 us + 4 MB x 20 us/MB = 82 us, then 3 x 2 us = 6 us: 88 us.
TEST(HandWorkedRing, ReduceScatter) {
  const Schedule schedule = sim::build_schedule(CollectiveKind::reduce_scatter, Algorithm::ring, {0, 0, 0, 0, 0}, 5e6);
  expect_schedule(schedule, {{4, rings({{0, 1, 2, 3, 4}}, 4e6)}});
  expect_time(simulated(CollectiveKind::reduce_scatter, Algorithm::ring, flat(5), 5, 5e6), 88 * us);
}

// Ring broadcast is a pipelined chain from member 0 (0 -> 1 -> 2 -> 3, no closing hop): each
// hop forwards the whole 1 MB, the hops overlap, so one phase of p - 1 = 3 latency steps.
// Time: 2 us + 1 MB x 20 us/MB = 22 us, then 2 x 2 us: 26 us.
TEST(HandWorkedRing, BroadcastIsAPipelinedChain) {
  const Schedule schedule = sim::build_schedule(CollectiveKind::broadcast, Algorithm::ring, {0, 0, 0, 0}, 1e6);
  expect_schedule(schedule, {{3, {{0, 1, 1e6}, {1, 2, 1e6}, {2, 3, 1e6}}}});
  expect_time(simulated(CollectiveKind::broadcast, Algorithm::ring, flat(4), 4, 1e6), 26 * us);
}

// Ring (pairwise) all-to-all, p = 4, n = 4 MB sent per rank: step k = 1, 2, 3 sends the 1 MB
// block for member i + k; three phases of one latency step each.
// Time: 3 x (2 us + 1 MB x 20 us/MB) = 3 x 22 us = 66 us.
TEST(HandWorkedRing, AllToAllIsPairwise) {
  const Schedule schedule = sim::build_schedule(CollectiveKind::all_to_all, Algorithm::ring, {0, 0, 0, 0}, 4e6);
  std::vector<ExpectedPhase> expected;
  for (int k = 1; k <= 3; ++k) {
    std::vector<Flow> flows;
    for (int i = 0; i < 4; ++i) flows.push_back({i, (i + k) % 4, 1e6});
    expected.push_back({1, flows});
  }
  expect_schedule(schedule, expected);
  expect_time(simulated(CollectiveKind::all_to_all, Algorithm::ring, flat(4), 4, 4e6), 66 * us);
}

// Direct all-to-all, p = 4, n = 4 MB: one phase, every member sends its 1 MB block to each of the
// 3 others at once. Each up and down link carries 3 flows, so each gets 50/3 GB/s.
// Time: 2 us + 3 MB x 20 us/MB = 62 us.
TEST(HandWorkedDirect, AllToAll) {
  const Schedule schedule = sim::build_schedule(CollectiveKind::all_to_all, Algorithm::direct, {0, 0, 0, 0}, 4e6);
  expect_schedule(schedule, {{1, all_pairs({{0, 1, 2, 3}}, 1e6)}});
  expect_time(simulated(CollectiveKind::all_to_all, Algorithm::direct, flat(4), 4, 4e6), 62 * us);
}

// ---------------------------------------------------------------------------------------------
// Hierarchical on the two-tier cluster (alpha_i = 1 us, 1 MB = 2.5 us over NVLink; alpha_e =
// 2.5 us, 1 MB = 20 us over a NIC). Node j holds members j*g .. j*g + g - 1; rail l is the members
// with local index l. A node's port carries its g rails' flows at g x 50 GB/s, never less than
// they need, so each inter-node flow runs at its NIC's 50 GB/s.

// All-gather, g = 4, m = 2, n = 8 MB: each rail first gathers its shard n/g = 2 MB across nodes
// (ring of m = 2: (m-1)/m x 2 MB = 1 MB each way, m - 1 = 1 step), then each node runs a ring
// all-gather of the full 8 MB ((g-1)/g x 8 MB = 6 MB per member, g - 1 = 3 steps).
// Time: inter 2.5 us + 1 MB x 20 = 22.5 us; intra 1 us + 6 MB x 2.5 = 16 us, + 2 x 1 us = 18 us;
// total 40.5 us.
TEST(HandWorkedHierarchical, AllGather) {
  const Schedule schedule =
      sim::build_schedule(CollectiveKind::all_gather, Algorithm::hierarchical, node_of_members(4, 2), 8e6);
  expect_schedule(schedule,
                  {{1, rings({{0, 4}, {1, 5}, {2, 6}, {3, 7}}, 1e6)}, {3, rings({{0, 1, 2, 3}, {4, 5, 6, 7}}, 6e6)}});
  expect_time(simulated(CollectiveKind::all_gather, Algorithm::hierarchical, two_tier(2, 4), 8, 8e6), 40.5 * us);
}

// Reduce-scatter, g = 2, m = 3, n = 6 MB: each node reduce-scatters the full input (ring of 2:
// 1/2 x 6 MB = 3 MB, 1 step), then each rail reduce-scatters its 3 MB shard across the 3 nodes
// (2/3 x 3 MB = 2 MB, m - 1 = 2 steps).
// Time: intra 1 us + 3 MB x 2.5 = 8.5 us; inter 2.5 us + 2 MB x 20 = 42.5 us, + 1 x 2.5 us = 45 us;
// total 53.5 us.
TEST(HandWorkedHierarchical, ReduceScatter) {
  const Schedule schedule =
      sim::build_schedule(CollectiveKind::reduce_scatter, Algorithm::hierarchical, node_of_members(2, 3), 6e6);
  expect_schedule(schedule, {{1, rings({{0, 1}, {2, 3}, {4, 5}}, 3e6)}, {2, rings({{0, 2, 4}, {1, 3, 5}}, 2e6)}});
  expect_time(simulated(CollectiveKind::reduce_scatter, Algorithm::hierarchical, two_tier(3, 2), 6, 6e6), 53.5 * us);
}

// Broadcast, g = 4, m = 2, n = 2 MB from member 0: a chain across nodes on rail 0 (0 -> 4, the
// whole 2 MB, m - 1 = 1 step), then a chain inside each node (0 -> 1 -> 2 -> 3, 4 -> 5 -> 6 -> 7,
// 2 MB per hop, g - 1 = 3 steps).
// Time: inter 2.5 us + 2 MB x 20 = 42.5 us; intra 1 us + 2 MB x 2.5 = 6 us, + 2 x 1 us = 8 us;
// total 50.5 us.
TEST(HandWorkedHierarchical, Broadcast) {
  const Schedule schedule =
      sim::build_schedule(CollectiveKind::broadcast, Algorithm::hierarchical, node_of_members(4, 2), 2e6);
  expect_schedule(schedule, {{1, {{0, 4, 2e6}}},
                             {3, {{0, 1, 2e6}, {1, 2, 2e6}, {2, 3, 2e6}, {4, 5, 2e6}, {5, 6, 2e6}, {6, 7, 2e6}}}});
  expect_time(simulated(CollectiveKind::broadcast, Algorithm::hierarchical, two_tier(2, 4), 8, 2e6), 50.5 * us);
}

// All-to-all, g = 4, m = 2, n = 8 MB sent per rank (1 MB per destination): first every member
// hands each local peer the blocks for that peer's rail (m = 2 blocks: n/g = 2 MB per flow), then
// each rail exchanges across nodes the blocks its node holds for the peer (g = 4 blocks: n/m =
// 4 MB per flow). One latency step each.
// Time: intra: 3 flows of 2 MB share each NVLink direction: 1 us + 6 MB x 2.5 = 16 us; inter: one
// 4 MB flow per NIC direction: 2.5 us + 4 MB x 20 = 82.5 us; total 98.5 us.
TEST(HandWorkedHierarchical, AllToAll) {
  const Schedule schedule =
      sim::build_schedule(CollectiveKind::all_to_all, Algorithm::hierarchical, node_of_members(4, 2), 8e6);
  expect_schedule(schedule, {{1, all_pairs({{0, 1, 2, 3}, {4, 5, 6, 7}}, 2e6)},
                             {1, all_pairs({{0, 4}, {1, 5}, {2, 6}, {3, 7}}, 4e6)}});
  expect_time(simulated(CollectiveKind::all_to_all, Algorithm::hierarchical, two_tier(2, 4), 8, 8e6), 98.5 * us);
}

// ---------------------------------------------------------------------------------------------
// The ring across nodes on the two-tier cluster: one channel per NIC, so a ring per node on NVLink
// carrying (g-1)/g of what each member sends around the whole ring (R), and a ring per rail
// carrying R/g, all at once (pipelined). Latency steps split as NCCL's: S(m-1) across nodes,
// S(p-m) inside (S = 2 for all-reduce); after the flows each phase adds its other steps.

// All-reduce, g = 2, m = 2, n = 4 MB: R = 2 x 3/4 x 4 MB = 6 MB. Node rings {0,1}, {2,3} carry
// 3 MB per flow, 2(p-m) = 4 steps; rails {0,2}, {1,3} carry 3 MB per flow, 2(m-1) = 2 steps.
// Flows: NVLink 1 us + 3 MB x 2.5 = 8.5 us; NIC 2.5 us + 3 MB x 20 = 62.5 us. Then 3 x 1 us +
// 1 x 2.5 us: 68 us. (The flat ring through one NIC per node took 135 us.)
TEST(HandWorkedRingAcrossNodes, AllReduce) {
  const Schedule schedule = sim::build_schedule(CollectiveKind::all_reduce, Algorithm::ring, {0, 0, 1, 1}, 4e6);
  EXPECT_TRUE(schedule.pipelined);
  expect_schedule(schedule, {{4, rings({{0, 1}, {2, 3}}, 3e6)}, {2, rings({{0, 2}, {1, 3}}, 3e6)}});
  expect_time(simulated(CollectiveKind::all_reduce, Algorithm::ring, two_tier(2, 2), 4, 4e6), 68 * us);
}

// All-gather, g = 4, m = 2, n = 8 MB: R = 7/8 x 8 MB = 7 MB. Node rings carry 3/4 x 7 = 5.25 MB
// per flow, p - m = 6 steps; rails carry 7/4 = 1.75 MB, m - 1 = 1 step. Flows: NVLink 1 us +
// 5.25 MB x 2.5 = 14.125 us; NIC 2.5 us + 1.75 MB x 20 = 37.5 us (a node's port carries its 4
// rails at 4 x 50 GB/s). Then 5 x 1 us: 42.5 us.
TEST(HandWorkedRingAcrossNodes, AllGather) {
  const Schedule schedule =
      sim::build_schedule(CollectiveKind::all_gather, Algorithm::ring, node_of_members(4, 2), 8e6);
  expect_schedule(schedule, {{6, rings({{0, 1, 2, 3}, {4, 5, 6, 7}}, 5.25e6)},
                             {1, rings({{0, 4}, {1, 5}, {2, 6}, {3, 7}}, 1.75e6)}});
  expect_time(simulated(CollectiveKind::all_gather, Algorithm::ring, two_tier(2, 4), 8, 8e6), 42.5 * us);
}

// ---------------------------------------------------------------------------------------------
// One phase, different route latencies. The phase's remaining latency steps are charged at the
// LARGEST latency among its flows: a ring or chain cannot advance faster than its slowest hop.

// Broadcast (a pipelined chain from member 0, one channel) over 2 nodes of 2 devices, n = 4 MB:
// 0 -> 1 and 2 -> 3 stay on NVLink (1 us), 1 -> 2 crosses the leaf (2.5 us); p - 1 = 3 steps.
// Flows: NVLink 1 us + 4 MB x 2.5 = 11 us; NIC 2.5 us + 4 MB x 20 = 82.5 us. Then 2 x 2.5 us:
// 87.5 us. (The first flow, 0 -> 1, is intra-node.)
TEST(MixedLatencyPhase, ChainBroadcastAcrossTwoNodesPaysTheSlowestHop) {
  const Schedule schedule = sim::build_schedule(CollectiveKind::broadcast, Algorithm::ring, {0, 0, 1, 1}, 4e6);
  expect_schedule(schedule, {{3, {{0, 1, 4e6}, {1, 2, 4e6}, {2, 3, 4e6}}}});
  expect_time(simulated(CollectiveKind::broadcast, Algorithm::ring, two_tier(2, 2), 4, 4e6), 87.5 * us);
}

// All-gather on 3 members of the same cluster (2 on node 0, 1 on node 1: uneven, so one flat ring),
// n = 3 MB: 2/3 x 3 MB = 2 MB per member, p - 1 = 2 steps. Flows: 0 -> 1 on NVLink 1 us + 2 MB x
// 2.5 = 6 us; 1 -> 2 and 2 -> 0 across 2.5 us + 2 MB x 20 = 42.5 us. Then 1 x 2.5 us: 45 us.
TEST(MixedLatencyPhase, UnevenRingAllGatherPaysTheSlowestHop) {
  const Schedule schedule = sim::build_schedule(CollectiveKind::all_gather, Algorithm::ring, {0, 0, 1}, 3e6);
  expect_schedule(schedule, {{2, rings({{0, 1, 2}}, 2e6)}});
  expect_time(simulated(CollectiveKind::all_gather, Algorithm::ring, two_tier(2, 2), 3, 3e6), 45 * us);
}

}  // namespace
}  // namespace stratsim::test
