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
  // Groups that do not fill whole nodes of 8, and kinds NCCL does not tune, are left to the model.
  EXPECT_FALSE(sim::nccl_tuner_choice(h100_tuner(), AR, std::vector<int>(4, 0), MiB, costs));
  EXPECT_FALSE(sim::nccl_tuner_choice(h100_tuner(), AR, {0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, MiB, costs));
  EXPECT_FALSE(sim::nccl_tuner_choice(h100_tuner(), CollectiveKind::all_to_all, nodes_of_8(2), MiB, costs));
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
  EXPECT_EQ(error("bad_tuner_channels.yaml"),
            data +
                "bad_tuner_channels.yaml: network.tuner.graphs.one_node.ring.channels: expected channels from 1 "
                "to 64, got 0");
}

}  // namespace
}  // namespace stratsim::test
