// The engine: contention between concurrent collectives, NCCL launch semantics (a collective
// starts when its last member issues it), stragglers, representative vs full rank modes,
// determinism and impossible mappings.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim_test_support.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/sim/simulator.hpp"

namespace stratsim::test {
namespace {

using core::CollectiveKind;
using sim::Algorithm;

// `nodes` nodes of `gpus` devices; one NIC per node (shared by its devices) or per device.
sim::PlatformSpec two_level(int nodes, int gpus, bool nic_per_gpu) {
  return one_leaf_cluster(nodes, gpus, {1e12, 1e-7}, {10e9, 1e-6}, nic_per_gpu);
}

double duration(const sim::SimResult& result, int op, int sim_rank = 0) {
  return result.timings[sim_rank][op].end - result.timings[sim_rank][op].start;
}

// Two data-parallel all-reduces (one per rail) cross the nodes at once. With one NIC per node
// they share it and each takes twice as long as alone; with a NIC per device they do not.
TEST(Contention, TwoCollectivesOnOneBottleneckTakeTwiceAsLong) {
  const double bytes = 1e9;
  sim::SimOptions options;
  options.algorithms[CollectiveKind::all_reduce] = Algorithm::ring;

  core::Program alone = empty_program({2, 1}, {"dp", "tp"});
  const int solo = add_collective(alone, CollectiveKind::all_reduce, bytes, {0});
  const sim::SimResult single = sim::simulate(alone, two_level(2, 1, false), options);

  core::Program pair = empty_program({2, 2}, {"dp", "tp"});
  const int both = add_collective(pair, CollectiveKind::all_reduce, bytes, {0});
  const sim::SimResult shared = sim::simulate(pair, two_level(2, 2, false), options);
  const sim::SimResult rails = sim::simulate(pair, two_level(2, 2, true), options);

  ASSERT_EQ(shared.collectives.size(), 2u);
  const double t1 = duration(single, solo);
  EXPECT_NEAR(duration(shared, both) / t1, 2.0, 0.01);
  for (const sim::CollectiveRun& run : shared.collectives) EXPECT_NEAR((run.end - run.start) / t1, 2.0, 0.01);
  EXPECT_NEAR(duration(rails, both) / t1, 1.0, 0.01);
}

// A collective cannot start before its last member issues it: a rank that computes twice as long
// makes the other wait, and the wait shows as issue < start.
TEST(Launch, StragglerDelaysTheCollectiveForEveryMember) {
  core::Program program = empty_program({2}, {"world"});
  const int gemm = add_compute(program, 1e12);  // 1 s at 1 TFLOP/s
  const int reduce = add_collective(program, CollectiveKind::all_reduce, 1e6, {0}, {gemm});
  sim::SimOptions options;
  sim::PlatformSpec platform = uniform_star(2);
  platform.cost.compute.apply_overrides(STRATSIM_TEST_DATA "/sim/compute_ideal.json");
  options.stragglers[1] = 2.0;
  const sim::SimResult result = sim::simulate(program, platform, options);
  ASSERT_EQ(result.rank_mode, sim::RankMode::full);
  ASSERT_EQ(result.mode, "full");
  ASSERT_EQ(result.timings.size(), 2u);
  EXPECT_NEAR(result.timings[0][gemm].end, 1.0, 1e-9);
  EXPECT_NEAR(result.timings[1][gemm].end, 2.0, 1e-9);
  EXPECT_NEAR(result.timings[0][reduce].issue, 1.0, 1e-9);
  EXPECT_NEAR(result.timings[0][reduce].start, 2.0, 1e-9);
  EXPECT_NEAR(result.timings[1][reduce].start, 2.0, 1e-9);
  EXPECT_DOUBLE_EQ(result.timings[0][reduce].end, result.timings[1][reduce].end);
}

// Compute and communication streams overlap: a collective that does not depend on the compute
// runs beside it.
TEST(Streams, IndependentCollectiveRunsBesideCompute) {
  core::Program program = empty_program({2}, {"world"});
  const int gemm = add_compute(program, 1e12);
  const int reduce = add_collective(program, CollectiveKind::all_reduce, 1e6, {0});
  sim::PlatformSpec platform = uniform_star(2);
  platform.cost.compute.apply_overrides(STRATSIM_TEST_DATA "/sim/compute_ideal.json");
  const sim::SimResult result = sim::simulate(program, platform);
  EXPECT_DOUBLE_EQ(result.timings[0][reduce].start, 0.0);
  EXPECT_LT(result.timings[0][reduce].end, result.timings[0][gemm].end);
  EXPECT_NEAR(result.makespan, 1.0, 1e-9);
}

// A group of one moves nothing, but an out-of-place collective still fills its own buffer: NCCL
// copies the send buffer into the receive buffer (one device-to-device copy), so an all-gather, a
// reduce-scatter, an all-to-all and a scatter (the root's one chunk to itself) read and write their
// bytes at the device's streaming rate. An all-reduce or a broadcast runs in place and costs only
// the launch. No communication kernel
// holds the SMs, so compute beside the copy is not slowed by interference.
TEST(OneRankGroups, OutOfPlaceKindsCopyTheirBufferInPlaceKindsOnlyLaunch) {
  const double bytes = 1e9, overhead = 5e-6, hbm = 1e12;
  core::Program program = empty_program({1}, {"world"});
  std::vector<int> ops;
  for (CollectiveKind kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter, CollectiveKind::all_to_all,
                              CollectiveKind::all_reduce, CollectiveKind::broadcast, CollectiveKind::scatter})
    ops.push_back(
        add_collective(program, kind, bytes, {0}, ops.empty() ? std::vector<int>{} : std::vector{ops.back()}));
  const int first = add_compute(program, 1e9);           // 1 ms at 1 TFLOP/s
  const int gemm = add_compute(program, 1e12, {first});  // starts during the all-gather's copy
  sim::PlatformSpec platform = uniform_star(1);
  platform.collective_overhead = overhead;
  platform.device.memory_bandwidth = hbm;
  platform.cost.interference.compute_slowdown = 1.5;
  const sim::SimResult result = sim::simulate(program, platform);
  const double copy = 2 * bytes / hbm;  // read and write: 2 ms
  EXPECT_NEAR(duration(result, ops[0]), overhead + copy, 1e-12);
  EXPECT_NEAR(duration(result, ops[1]), overhead + copy, 1e-12);
  EXPECT_NEAR(duration(result, ops[2]), overhead + copy, 1e-12);
  EXPECT_NEAR(duration(result, ops[3]), overhead, 1e-12);
  EXPECT_NEAR(duration(result, ops[4]), overhead, 1e-12);
  EXPECT_NEAR(duration(result, ops[5]), overhead + copy, 1e-12);
  ASSERT_LT(result.timings[0][gemm].start, result.timings[0][ops[0]].end);
  EXPECT_NEAR(result.timings[0][gemm].end, 1.001, 1e-9);
  for (const sim::CollectiveRun& run : result.collectives) EXPECT_EQ(run.group_size, 1);
}

core::Program planned(const std::string& model, const std::string& plan, int iterations = 2) {
  core::PlanOptions options;
  options.iterations = iterations;
  return core::plan_training(core::load_model(model), core::load_plan(plan), options).program;
}

// On a symmetric platform, one simulated rank standing for all gives every rank's timings.
TEST(RankModes, RepresentativeMatchesFullOnSymmetricInput) {
  // The 2 x 2 cases put each TP group inside its own node: representative mode runs one instance
  // of such node-local collectives and copies it, which must change nothing.
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"zoo:TestModel", "builtin:ddp", "h100"},
      {"zoo:TestModel", "builtin:fsdp", "h100"},
      {"zoo:Net", "builtin:ddp-tp", "h100"},
      {"zoo:TestModel", "builtin:fsdp-tp", "h100"},
      {"zoo:Net", "builtin:ddp-tp", "h100:nodes=2,gpus=2"},
      {"zoo:TestModel", "builtin:fsdp-tp", "h100:nodes=2,gpus=2,nic=node"}};
  for (const auto& [model, plan, platform_name] : cases) {
    const core::Program program = planned(model, plan);
    sim::PlatformSpec platform = sim::parse_platform(platform_name);
    sim::SimOptions options;
    options.mode = sim::RankMode::representative;
    const sim::SimResult representative = sim::simulate(program, platform, options);
    options.mode = sim::RankMode::full;
    const sim::SimResult full = sim::simulate(program, platform, options);
    ASSERT_EQ(representative.timings.size(), 1u) << plan;
    ASSERT_EQ(full.timings.size(), static_cast<std::size_t>(program.world_size)) << plan;
    for (std::size_t r = 0; r < full.timings.size(); ++r)
      for (const core::ProgramOp& op : program.ops) {
        EXPECT_NEAR(full.timings[r][op.id].start, representative.timings[0][op.id].start, 1e-12)
            << plan << " rank " << r << " op " << op.id << " " << op.name;
        EXPECT_NEAR(full.timings[r][op.id].end, representative.timings[0][op.id].end, 1e-12)
            << plan << " rank " << r << " op " << op.id << " " << op.name;
      }
    EXPECT_DOUBLE_EQ(full.makespan, representative.makespan) << plan;
  }
}

TEST(Determinism, SameInputsGiveIdenticalResults) {
  const core::Program program = planned("zoo:TestModel", "builtin:fsdp-tp", 3);
  const sim::PlatformSpec platform = sim::parse_platform("h100:nodes=2,gpus=2,nic=node");
  const sim::SimResult a = sim::simulate(program, platform);
  const sim::SimResult b = sim::simulate(program, platform);
  ASSERT_EQ(a.timings.size(), b.timings.size());
  for (std::size_t s = 0; s < a.timings.size(); ++s)
    for (std::size_t i = 0; i < a.timings[s].size(); ++i) {
      EXPECT_EQ(a.timings[s][i].start, b.timings[s][i].start);
      EXPECT_EQ(a.timings[s][i].end, b.timings[s][i].end);
    }
  ASSERT_EQ(a.collectives.size(), b.collectives.size());
  for (std::size_t i = 0; i < a.collectives.size(); ++i) {
    EXPECT_EQ(a.collectives[i].start, b.collectives[i].start);
    EXPECT_EQ(a.collectives[i].end, b.collectives[i].end);
  }
  EXPECT_EQ(a.makespan, b.makespan);
}

// The result crosses the pipe from the simulation process whole: core's fields and the
// simulator's own, and the notes and extra that core's reports print.
TEST(Result, IsARunResultWithTheSimulatorsNotes) {
  const core::Program program = planned("zoo:TestModel", "builtin:fsdp-tp", 1);
  const sim::SimResult result = sim::simulate(program, sim::parse_platform("h100:nodes=2,gpus=2,nic=node"));
  EXPECT_EQ(result.source, "simulation");
  EXPECT_EQ(result.mode, "representative");
  EXPECT_EQ(result.rank_mode, sim::RankMode::representative);
  EXPECT_EQ(result.recorded, (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
  EXPECT_GT(result.wall_seconds, 0);
  // One record per group instance of every collective op: a group of size s on the 4 ranks has
  // 4 / s instances, all recorded although representative mode simulates the rank-0 view.
  std::size_t instances = 0;
  for (const core::ProgramOp& op : program.ops)
    if (op.type == core::OpType::collective)
      instances +=
          static_cast<std::size_t>(program.world_size / program.mesh.group_size(program.groups[op.group].mesh_dims));
  ASSERT_GT(instances, 0u);
  EXPECT_EQ(result.collectives.size(), instances);
  // "ring/LL128": the algorithm, then the NCCL protocol the cost model picked for it.
  for (const sim::CollectiveRun& run : result.collectives) {
    const auto slash = run.algorithm.find('/');
    EXPECT_TRUE(sim::parse_algorithm(run.algorithm.substr(0, slash)).has_value()) << run.algorithm;
    if (slash != std::string::npos) {
      const std::string protocol = run.algorithm.substr(slash + 1);
      EXPECT_TRUE(protocol == "LL" || protocol == "LL128" || protocol == "Simple") << run.algorithm;
    }
  }
  EXPECT_EQ(result.notes, std::vector<std::string>{std::to_string(result.flows) + " SimGrid flows"});
  EXPECT_TRUE(result.mode_notes.empty());  // two nodes on one leaf: nothing to fold
  EXPECT_EQ(result.extra, (nlohmann::json{{"folded_nodes", 0}, {"total_nodes", 2}}));
}

// SimGrid XML platforms, end to end: SimGrid's own cluster form, explicit Full routes and two
// zones joined by a backbone. Every device trains (FSDP over the world), every collective runs,
// the link loads are counted (an XML cluster's link directions have no link-load extension, so
// SimGrid's plugin crashed on them), and the run is deterministic.
TEST(XmlPlatforms, SimulateEndToEndWithLinkLoads) {
  struct Case {
    const char* file;
    int world;
    const char* busy_link;  // a link the run must load
  };
  for (const Case& c : {Case{"simgrid_cluster.xml", 8, "acme_backbone"}, Case{"full_routing.xml", 4, "l3"},
                        Case{"two_zones.xml", 13, "backbone"}}) {
    SCOPED_TRACE(c.file);
    const nlohmann::json plan = {{"world_size", c.world},
                                 {"batch_size", 2},
                                 {"iterations", 2},
                                 {"steps", {{{"fully_shard", {{"module", ""}}}}}}};
    const core::Program program =
        core::plan_training(core::load_model("zoo:Net"), core::parse_plan(core::JsonReader(plan, "plan")), {}).program;
    const sim::PlatformSpec platform =
        sim::parse_platform(std::string(STRATSIM_TEST_DATA) + "/platforms/" + std::string(c.file));
    const sim::SimResult result = sim::simulate(program, platform, {});
    EXPECT_GT(result.makespan, 0);
    ASSERT_FALSE(result.collectives.empty());
    for (const sim::CollectiveRun& run : result.collectives) EXPECT_GT(run.end, run.start) << "op " << run.op;
    bool loaded = false;
    for (const sim::LinkLoad& link : result.links) {
      EXPECT_GT(link.bytes, 0) << link.name;
      EXPECT_LE(link.utilisation, 1.0 + 1e-9) << link.name;
      loaded = loaded || link.name == c.busy_link;
    }
    EXPECT_TRUE(loaded) << c.busy_link << " carried nothing";
    const sim::SimResult again = sim::simulate(program, platform, {});
    EXPECT_EQ(again.makespan, result.makespan);
    ASSERT_EQ(again.links.size(), result.links.size());
    for (std::size_t i = 0; i < result.links.size(); ++i) EXPECT_EQ(again.links[i].bytes, result.links[i].bytes);
  }
}

TEST(Errors, MoreRanksThanDevicesIsAnInputError) {
  const core::Program program = planned("zoo:TestModel", "builtin:fsdp");  // 4 ranks
  try {
    sim::simulate(program, sim::parse_platform("h100:gpus=2"));
    FAIL() << "expected InputError";
  } catch (const core::InputError& error) {
    EXPECT_NE(std::string(error.what()).find("has 2 devices but the plan needs 4 ranks"), std::string::npos)
        << error.what();
  }
}

TEST(Errors, StragglerOutsideTheWorld) {
  const core::Program program = planned("zoo:TestModel", "builtin:ddp");
  sim::SimOptions options;
  options.stragglers[7] = 2;
  EXPECT_THROW(sim::simulate(program, sim::parse_platform("h100"), options), core::InputError);
}

}  // namespace
}  // namespace stratsim::test
