// NCCL's tuner (nccl_tuner.hpp): its estimates against an independent reimplementation of
// tuning.cc at 2.30.7 for the h100 preset's node (benchmarks/README.md, "What NCCL's own tuner
// says"), the choice among what the simulator runs, and the engine running what it chose.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim_test_support.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/sim/cost_model.hpp"
#include "stratsim/sim/nccl_tuner.hpp"
#include "stratsim/sim/simulator.hpp"

namespace stratsim::test {
namespace {

using core::CollectiveKind;
using sim::Algorithm;
using sim::NcclAlgorithm;
using sim::NcclProtocol;

constexpr double MiB = 1 << 20;

const sim::NcclTuner& h100_tuner() {
  static const sim::CostModel model = sim::CostModel::preset("h100");
  return *model.network.tuner;
}

// m nodes of 8 members.
std::vector<int> nodes_of_8(int m) {
  std::vector<int> nodes(8 * m);
  for (int i = 0; i < 8 * m; ++i) nodes[i] = i / 8;
  return nodes;
}

double tuner_us(CollectiveKind kind, NcclAlgorithm algorithm, NcclProtocol protocol, int nodes, double bytes) {
  return *sim::nccl_tuner_time(h100_tuner(), kind, algorithm, protocol, nodes, 8 * nodes, bytes) * 1e6;
}

// The reference: each value as the reimplementation printed it (us, four decimals).
TEST(NcclTuner, EstimatesMatchTheReimplementationOfTuningCc) {
  const auto AR = CollectiveKind::all_reduce, AG = CollectiveKind::all_gather;
  EXPECT_NEAR(tuner_us(AR, NcclAlgorithm::ring, NcclProtocol::ll, 1, MiB), 28.0142, 1e-3);
  EXPECT_NEAR(tuner_us(AR, NcclAlgorithm::nvls, NcclProtocol::simple, 1, 2 * MiB), 32.7101, 1e-3);
  EXPECT_NEAR(tuner_us(AR, NcclAlgorithm::nvls, NcclProtocol::simple, 1, 64 * MiB), 271.7238, 1e-3);
  EXPECT_NEAR(tuner_us(AR, NcclAlgorithm::tree, NcclProtocol::ll128, 2, MiB), 62.5057, 1e-3);
  EXPECT_NEAR(tuner_us(AR, NcclAlgorithm::nvls_tree, NcclProtocol::simple, 2, 2 * MiB), 75.3185, 1e-3);
  // Rings of Simple across nodes pay 1.4 x their latency past the plateau (4 nodes, 1 GiB).
  EXPECT_NEAR(tuner_us(AR, NcclAlgorithm::ring, NcclProtocol::simple, 4, 1024 * MiB), 5813.5627, 1e-2);
  EXPECT_NEAR(tuner_us(AG, NcclAlgorithm::ring, NcclProtocol::ll, 10, MiB), 151.6583, 1e-3);
  EXPECT_NEAR(tuner_us(AG, NcclAlgorithm::ring, NcclProtocol::ll128, 10, 128 * MiB), 634.4305, 1e-3);
  // LL128 capped at 36.7 GB/s a channel loses to Simple at 256 MiB on 10 nodes, narrowly.
  EXPECT_NEAR(tuner_us(AG, NcclAlgorithm::ring, NcclProtocol::simple, 10, 256 * MiB), 1062.7125, 1e-2);
  EXPECT_NEAR(tuner_us(AG, NcclAlgorithm::ring, NcclProtocol::ll128, 10, 256 * MiB), 1085.8611, 1e-2);
  // What NCCL does not run: NVLS under LL, NVLS across nodes, NVLSTree inside one, trees for gathers.
  EXPECT_FALSE(sim::nccl_tuner_time(h100_tuner(), AR, NcclAlgorithm::nvls, NcclProtocol::ll, 1, 8, MiB));
  EXPECT_FALSE(sim::nccl_tuner_time(h100_tuner(), AR, NcclAlgorithm::nvls, NcclProtocol::simple, 2, 16, MiB));
  EXPECT_FALSE(sim::nccl_tuner_time(h100_tuner(), AR, NcclAlgorithm::nvls_tree, NcclProtocol::simple, 1, 8, MiB));
  EXPECT_FALSE(sim::nccl_tuner_time(h100_tuner(), AG, NcclAlgorithm::tree, NcclProtocol::simple, 2, 16, MiB));
}

// Its choice, mapped onto the simulator's algorithms: NCCL's tree is the chain inside a node and
// the hierarchical tree across nodes; NVLS and NVLSTree only where the switches reduce.
TEST(NcclTuner, ChoosesAsNcclDoesAmongWhatTheSimulatorRuns) {
  sim::LinkCosts costs;
  costs.nvls_beta = costs.nvls_tree_beta = 1e-12;
  const auto choose = [&](CollectiveKind kind, int nodes, double bytes) {
    return *sim::nccl_tuner_choice(h100_tuner(), kind, nodes_of_8(nodes), bytes, costs);
  };
  const auto AR = CollectiveKind::all_reduce, AG = CollectiveKind::all_gather;
  EXPECT_EQ(choose(AR, 1, MiB).algorithm, Algorithm::ring);
  EXPECT_EQ(choose(AR, 1, MiB).protocol, NcclProtocol::ll);
  EXPECT_EQ(choose(AR, 1, 2 * MiB).algorithm, Algorithm::nvls);
  EXPECT_EQ(choose(AR, 2, MiB).algorithm, Algorithm::hierarchical);
  EXPECT_EQ(choose(AR, 2, MiB).protocol, NcclProtocol::ll128);
  EXPECT_EQ(choose(AR, 4, 64 * MiB).algorithm, Algorithm::nvls_tree);
  EXPECT_EQ(choose(AR, 4, 1024 * MiB).algorithm, Algorithm::ring);
  EXPECT_EQ(choose(AG, 10, 128 * MiB).protocol, NcclProtocol::ll128);
  EXPECT_EQ(choose(AG, 10, 256 * MiB).protocol, NcclProtocol::simple);
  // Without the switches' reduction the trees and the rings are left: at 64 MiB on 4 nodes NCCL's
  // estimates put the ring under LL128 (587 us) ahead of its trees (806 us under Simple).
  const sim::LinkCosts plain;
  EXPECT_EQ(sim::nccl_tuner_choice(h100_tuner(), AR, nodes_of_8(1), 2 * MiB, plain)->algorithm, Algorithm::ring);
  const sim::TunerChoice without = *sim::nccl_tuner_choice(h100_tuner(), AR, nodes_of_8(4), 64 * MiB, plain);
  EXPECT_EQ(without.algorithm, Algorithm::ring);
  EXPECT_EQ(without.protocol, NcclProtocol::ll128);
  // NCCL_ALGO set: only the protocol is NCCL's (the chain is NCCL's tree on one node).
  EXPECT_EQ(sim::nccl_tuner_choice(h100_tuner(), AR, nodes_of_8(1), MiB, costs, Algorithm::chain)->protocol,
            NcclProtocol::ll128);
  EXPECT_FALSE(sim::nccl_tuner_choice(h100_tuner(), AR, nodes_of_8(1), MiB, costs, Algorithm::tree));
  // Uneven groups, counts of GPUs a node the data has no graphs for, and kinds NCCL does not tune
  // are left to the model.
  EXPECT_FALSE(sim::nccl_tuner_choice(h100_tuner(), AR, {0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, MiB, costs));
  EXPECT_FALSE(sim::nccl_tuner_choice(h100_tuner(), AR, std::vector<int>(3, 0), MiB, costs));
  EXPECT_FALSE(sim::nccl_tuner_choice(h100_tuner(), AR, {0, 0, 0, 1, 1, 1}, MiB, costs));
  EXPECT_FALSE(sim::nccl_tuner_choice(h100_tuner(), CollectiveKind::all_to_all, nodes_of_8(2), MiB, costs));
}

// m nodes of k members each.
std::vector<int> nodes_of(int m, int k) {
  std::vector<int> nodes(k * m);
  for (int i = 0; i < k * m; ++i) nodes[i] = i / k;
  return nodes;
}

// Groups that hold fewer of a node's GPUs run on the graphs NCCL's search finds for those GPUs
// (network.tuner.graphs.fewer_gpus). Estimates worked by hand from tuning.cc:
// - 4 GPUs of one node, 32 MiB all-reduce: the ring's 12 channels of 30 GB/s (360 busbw, 240
//   algbw over 6 steps of 4) under Simple, 8.4 + 6 x 3.4 us + 32 MiB / 240 GB/s = 168.61 us; under
//   LL128 0.92 of it (220.8 algbw), 14 + 6 x 1.9 + 151.97 = 177.37 us.
// - 4 GPUs on each of 10 nodes, 64 MiB all-reduce under NVLSTree: 4 heads of min(48 x 0.85 x 3/4 x
//   2, 48, 45.5 GB/s cap) = 45.5, 182 busbw, 93.33 algbw over 78 steps of 40; 25 + 2 x 3 x 20.9 us
//   latency: 869.42 us.
TEST(NcclTuner, GroupsOfFewerGpusANodeRunTheirOwnGraphs) {
  const auto AR = CollectiveKind::all_reduce, AG = CollectiveKind::all_gather;
  const auto us = [](CollectiveKind kind, NcclAlgorithm algorithm, NcclProtocol protocol, int nodes, int ranks,
                     double bytes) {
    return *sim::nccl_tuner_time(h100_tuner(), kind, algorithm, protocol, nodes, ranks, bytes) * 1e6;
  };
  EXPECT_NEAR(us(AR, NcclAlgorithm::ring, NcclProtocol::simple, 1, 4, 32 * MiB), 168.6104, 1e-3);
  EXPECT_NEAR(us(AR, NcclAlgorithm::ring, NcclProtocol::ll128, 1, 4, 32 * MiB), 177.3675, 1e-3);
  EXPECT_NEAR(us(AR, NcclAlgorithm::nvls_tree, NcclProtocol::simple, 10, 40, 64 * MiB), 869.4235, 1e-3);
  EXPECT_FALSE(sim::nccl_tuner_time(h100_tuner(), AR, NcclAlgorithm::ring, NcclProtocol::simple, 1, 3, MiB));

  sim::LinkCosts costs;
  costs.nvls_beta = costs.nvls_tree_beta = 1e-12;
  const auto choose = [&](CollectiveKind kind, int nodes, int per_node, double bytes) {
    return *sim::nccl_tuner_choice(h100_tuner(), kind, nodes_of(nodes, per_node), bytes, costs);
  };
  // A TP group of 4: the ring at every size (NVLS with 4 heads is slower by NCCL's estimate), LL
  // at 1 MiB, Simple from 32 MiB (NCCL's estimate puts it ahead of LL128 there).
  EXPECT_EQ(choose(AR, 1, 4, MiB).algorithm, Algorithm::ring);
  EXPECT_EQ(choose(AR, 1, 4, MiB).protocol, NcclProtocol::ll);
  EXPECT_EQ(choose(AR, 1, 4, 32 * MiB).protocol, NcclProtocol::simple);
  EXPECT_EQ(choose(AR, 1, 4, 1024 * MiB).algorithm, Algorithm::ring);
  EXPECT_EQ(choose(AG, 1, 2, 16 * MiB).algorithm, Algorithm::ring);
  // Data-parallel groups of TP x DP across 10 nodes: NVLSTree to 512 MiB with 4 GPUs a node, then
  // the ring (the measured busbw jumps between the two, benchmarks/README.md); with one GPU a node
  // NCCL's tree is the double binary tree alone, under LL128 at 1 MiB.
  EXPECT_EQ(choose(AR, 10, 4, 64 * MiB).algorithm, Algorithm::nvls_tree);
  EXPECT_EQ(choose(AR, 10, 4, 512 * MiB).algorithm, Algorithm::nvls_tree);
  EXPECT_EQ(choose(AR, 10, 4, 1024 * MiB).algorithm, Algorithm::ring);
  const sim::TunerChoice one_a_node = choose(AR, 10, 1, MiB);
  EXPECT_EQ(one_a_node.algorithm, Algorithm::tree);
  EXPECT_EQ(one_a_node.protocol, NcclProtocol::ll128);
  EXPECT_EQ(choose(AR, 10, 1, 1024 * MiB).algorithm, Algorithm::ring);
  EXPECT_EQ(choose(AG, 10, 2, 1024 * MiB).protocol, NcclProtocol::simple);
}

// The engine runs the tuner's pair and prices it with the model: on 10 H100 nodes a 256 MiB
// all-gather runs the ring under Simple (NCCL's choice); without the tuner the model's own costs
// take LL128, whose 0.92 of the link it prices faster.
TEST(NcclTuner, TheSimulationRunsWhatItChose) {
  core::Program program = empty_program({80}, {"world"});
  add_collective(program, CollectiveKind::all_gather, 256 * MiB, {0});
  sim::PlatformSpec platform = sim::parse_platform("h100:nodes=10");
  const sim::SimResult tuned = sim::simulate(program, platform);
  EXPECT_EQ(tuned.collectives[0].algorithm, "ring/Simple");
  platform.cost.network.tuner.reset();
  const sim::SimResult own = sim::simulate(program, platform);
  EXPECT_EQ(own.collectives[0].algorithm, "ring/LL128");
  EXPECT_GT(tuned.collectives[0].end - tuned.collectives[0].start, own.collectives[0].end - own.collectives[0].start);
}

// Groups of fewer GPUs a node too: one GPU on each of 10 nodes runs NCCL's double binary tree
// under LL128 at 1 MiB, 4 GPUs on each NVLSTree at 64 MiB (where the model's own costs took its
// hierarchical tree under LL128, 29 % fast against the published run).
TEST(NcclTuner, TheSimulationRunsWhatItChoseForFewerGpusANode) {
  const auto run = [](const std::string& platform_name, int ranks, double bytes, bool tuned) {
    core::Program program = empty_program({ranks}, {"world"});
    add_collective(program, CollectiveKind::all_reduce, bytes, {0});
    sim::PlatformSpec platform = sim::parse_platform(platform_name);
    if (!tuned) platform.cost.network.tuner.reset();
    return sim::simulate(program, platform).collectives[0].algorithm;
  };
  EXPECT_EQ(run("h100:nodes=10,gpus=1", 10, MiB, true), "tree/LL128");
  EXPECT_EQ(run("h100:nodes=10,gpus=4", 40, 64 * MiB, true), "nvls_tree/Simple");
  EXPECT_EQ(run("h100:nodes=10,gpus=4", 40, 64 * MiB, false), "hierarchical/LL128");
}

// Bad tuner sections fail with the file and field.
TEST(NcclTuner, BadSectionsNameTheField) {
  const std::string data = std::string(STRATSIM_TEST_DATA) + "/cost_models/";
  const auto error = [&](const std::string& file) {
    sim::CostModel model = sim::CostModel::preset("h100");
    try {
      model.apply_file(data + file);
    } catch (const core::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("bad_tuner_node_classes.yaml"),
            data +
                "bad_tuner_node_classes.yaml: network.tuner.ll_max_gbps: expected 3 numbers (one node, two "
                "nodes, three and more), got 2");
  EXPECT_EQ(error("bad_tuner_fewer_gpus.yaml"),
            data +
                "bad_tuner_fewer_gpus.yaml: network.tuner.graphs.fewer_gpus.across_nodes.8: expected a key that "
                "counts the group's GPUs a node, 1 to 7 (fewer than gpus_per_node), got \"8\"");
  EXPECT_EQ(error("bad_tuner_channels.yaml"),
            data +
                "bad_tuner_channels.yaml: network.tuner.graphs.one_node.ring.channels: expected channels from 1 "
                "to 64, got 0");
}

}  // namespace
}  // namespace stratsim::test
