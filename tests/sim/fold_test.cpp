// Folding (simulator.hpp): representative mode simulates K of N nodes with periodic boundaries.
// On every plan shape whose groups fold and whose collectives run rings or hierarchical rails,
// the folded run must reproduce the unfolded run's timings exactly (same max-min rates, op for op
// and collective for collective); the double binary tree folds structurally and stays within
// 1e-3. Shapes that cannot fold must run unfolded and say why.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/core/run_analysis.hpp"
#include "stratsim/sim/simulator.hpp"

namespace stratsim::test {
namespace {

using json = nlohmann::json;
using sim::Algorithm;

const json kTpPlan = {{"layers.*.attention.wq", "colwise"},    {"layers.*.attention.wk", "colwise"},
                      {"layers.*.attention.wv", "colwise"},    {"layers.*.attention.wo", "rowwise"},
                      {"layers.*.feed_forward.w1", "colwise"}, {"layers.*.feed_forward.w3", "colwise"},
                      {"layers.*.feed_forward.w2", "rowwise"}};
const json kBlocks = {{"module_types", {"TransformerBlock"}}};

core::Program program_for(const json& plan, int iterations = 2) {
  core::PlanOptions options;
  options.iterations = iterations;
  static const core::Model model = core::load_model("zoo:llama2-7b:layers=2");
  return core::plan_training(model, core::parse_plan(core::JsonReader(plan, "fold_test")), options).program;
}

json fsdp(int world) {
  return {
      {"world_size", world}, {"batch_size", 1}, {"steps", {{{"fully_shard", {{"module", ""}, {"policy", kBlocks}}}}}}};
}

// Megatron TP on the inner `tp` ranks, then replicate or fully_shard on the outer dim. PyTorch
// `version`: from 2.4 parallelize_module scatters each sharded parameter from the tp group's first
// rank when the plan is applied.
json tp_by(int world, int tp, const std::string& outer, const std::string& version = "2.4") {
  json outer_step = outer == "replicate"
                        ? json{{"replicate", {{"module", ""}, {"mesh_dim", "dp"}}}}
                        : json{{"fully_shard", {{"module", ""}, {"mesh_dim", "dp"}, {"policy", kBlocks}}}};
  return {{"world_size", world},
          {"torch_version", version},
          {"mesh", {{"shape", {world / tp, tp}}, {"dim_names", {"dp", "tp"}}}},
          {"batch_size", 1},
          {"steps", {{{"parallelize_module", {{"module", ""}, {"mesh_dim", "tp"}, {"plan", kTpPlan}}}}, outer_step}}};
}

struct Runs {
  sim::SimResult folded, unfolded;
};

Runs run_both(const core::Program& program, const std::string& platform_name, sim::SimOptions options = {}) {
  const sim::PlatformSpec platform = sim::parse_platform(platform_name);
  Runs runs;
  options.fold = true;
  runs.folded = sim::simulate(program, platform, options);
  options.fold = false;
  runs.unfolded = sim::simulate(program, platform, options);
  return runs;
}

// Every op of the representative rank and every collective instance, within `tolerance` relative.
void expect_same_timings(const core::Program& program, const Runs& runs, double tolerance) {
  const auto near = [tolerance](double a, double b) {
    return std::abs(a - b) <= tolerance * std::max(std::abs(b), 1e-9);
  };
  ASSERT_EQ(runs.folded.timings.size(), 1u);
  ASSERT_EQ(runs.unfolded.timings.size(), 1u);
  for (const core::ProgramOp& op : program.ops) {
    const sim::OpTiming& a = runs.folded.timings[0][op.id];
    const sim::OpTiming& b = runs.unfolded.timings[0][op.id];
    EXPECT_TRUE(near(a.start, b.start) && near(a.end, b.end))
        << "op " << op.id << " " << op.name << ": folded " << a.start << ".." << a.end << ", unfolded " << b.start
        << ".." << b.end;
  }
  std::map<std::pair<int, int>, const sim::CollectiveRun*> unfolded;
  for (const sim::CollectiveRun& run : runs.unfolded.collectives) unfolded[{run.op, run.instance}] = &run;
  ASSERT_EQ(runs.folded.collectives.size(), unfolded.size());
  for (const sim::CollectiveRun& run : runs.folded.collectives) {
    const sim::CollectiveRun& other = *unfolded.at({run.op, run.instance});
    EXPECT_EQ(run.ranks, other.ranks);
    EXPECT_EQ(run.group_size, other.group_size);
    EXPECT_EQ(run.algorithm, other.algorithm);
    EXPECT_TRUE(near(run.start, other.start) && near(run.end, other.end))
        << "op " << run.op << " instance " << run.instance;
  }
  ASSERT_EQ(runs.folded.iteration_end.size(), runs.unfolded.iteration_end.size());
  for (std::size_t i = 0; i < runs.folded.iteration_end.size(); ++i)
    EXPECT_TRUE(near(runs.folded.iteration_end[i], runs.unfolded.iteration_end[i])) << "iteration " << i + 1;
  EXPECT_TRUE(near(runs.folded.makespan, runs.unfolded.makespan));
  EXPECT_LT(runs.folded.flows, runs.unfolded.flows);
}

constexpr double kExact = 1e-12;

TEST(Fold, WorldShardedFsdpIsExact) {
  const core::Program program = program_for(fsdp(256));
  const Runs runs = run_both(program, "h100:nodes=32");
  EXPECT_EQ(runs.folded.folded_nodes, 8);  // two leaves of 4 nodes
  EXPECT_EQ(runs.folded.total_nodes, 32);
  EXPECT_EQ(runs.unfolded.folded_nodes, 0);
  expect_same_timings(program, runs, kExact);
  // Every collective is a ring over the world: a phase starts one flow per simulated member, so
  // the fold starts exactly 8/32 of the full run's flows.
  EXPECT_EQ(runs.folded.flows * 32, runs.unfolded.flows * 8);
}

// One NIC per node and a 4:1 oversubscribed spine: the folded flows share the node NICs and
// the leaf uplinks exactly as the full job's do.
TEST(Fold, SharedNicsAndOversubscribedSpineAreExact) {
  const core::Program program = program_for(fsdp(256));
  for (const char* platform : {"h100:nodes=32,nic=node,fabric=spine-leaf,oversub=4", "h100:nodes=32,oversub=3"}) {
    SCOPED_TRACE(platform);
    const Runs runs = run_both(program, platform);
    EXPECT_EQ(runs.folded.folded_nodes, 8);
    expect_same_timings(program, runs, kExact);
  }
}

// FSDP2 with reshard_after_forward=8: the backward all-gathers run over node-local runs of 8 of
// the world group (a sub-group), beside the world's gathers and reduce-scatters.
TEST(Fold, Fsdp2PostForwardRunsAreExact) {
  const json fsdp2 = {{"torch.distributed.fsdp.fully_shard", {{"module", "layers.*"}, {"reshard_after_forward", 8}}}};
  const json root = {{"torch.distributed.fsdp.fully_shard", {{"module", ""}}}};
  const core::Program program =
      program_for({{"world_size", 256}, {"batch_size", 1}, {"torch_version", "2.15"}, {"steps", {fsdp2, root}}});
  int runs_of_8 = 0;
  for (const core::ProgramGroup& group : program.groups) runs_of_8 += group.block_size == 8 ? 1 : 0;
  ASSERT_EQ(runs_of_8, 1);
  const Runs runs = run_both(program, "h100:nodes=32");
  EXPECT_EQ(runs.folded.folded_nodes, 8);
  expect_same_timings(program, runs, kExact);
  for (const sim::CollectiveRun& run : runs.unfolded.collectives)
    if (program.groups[program.ops[run.op].group].block_size == 8) {
      ASSERT_EQ(run.ranks.size(), 8u);
      EXPECT_EQ(run.ranks.front() / 8, run.ranks.back() / 8) << "a run of 8 stays on its node";
    }
}

// Data-parallel rails across nodes beside node-local TP, and FSDP on those rails.
TEST(Fold, RailsBesideNodeLocalTensorParallelAreExact) {
  sim::SimOptions ring;
  ring.algorithms[core::CollectiveKind::all_reduce] = Algorithm::ring;
  for (const char* outer : {"replicate", "fully_shard"}) {
    SCOPED_TRACE(outer);
    const core::Program program = program_for(tp_by(256, 8, outer));
    const Runs runs = run_both(program, "h100:nodes=32", ring);
    EXPECT_EQ(runs.folded.folded_nodes, 8);
    expect_same_timings(program, runs, kExact);
  }
}

// Tensor parallelism across 8 nodes and 4 data-parallel replicas 8 nodes apart: K must hold two
// replicas, so it is 16 nodes; the replicas' ring closes over the two. PyTorch 2.3's rules: its
// parallelize_module issues no scatter (see the next test for 2.4's).
TEST(Fold, GroupsSpanningNodesPickALargerFold) {
  sim::SimOptions ring;
  ring.algorithms[core::CollectiveKind::all_reduce] = Algorithm::ring;
  const core::Program program = program_for(tp_by(256, 64, "replicate", "2.3"));
  const Runs runs = run_both(program, "h100:nodes=32", ring);
  EXPECT_EQ(runs.folded.folded_nodes, 16);
  expect_same_timings(program, runs, kExact);
}

// From 2.4 the same plan scatters the tp weights from one root per 8-node group: a direct
// collective across nodes, which loads the spine differently on fewer nodes, so the run is not
// folded (and says why); node-local tensor parallelism still folds exactly.
TEST(Fold, AScatterAcrossNodesDoesNotFold) {
  sim::SimOptions ring;
  ring.algorithms[core::CollectiveKind::all_reduce] = Algorithm::ring;
  const core::Program across = program_for(tp_by(256, 64, "replicate", "2.4"));
  const sim::SimResult result = sim::simulate(across, sim::parse_platform("h100:nodes=32"), ring);
  EXPECT_EQ(result.folded_nodes, 0);
  EXPECT_NE(result.fold_note.find("runs direct scatter over 64 members, which does not fold"), std::string::npos)
      << result.fold_note;
  const core::Program local = program_for(tp_by(256, 8, "replicate", "2.4"));
  const Runs runs = run_both(local, "h100:nodes=32", ring);
  EXPECT_EQ(runs.folded.folded_nodes, 8);
  expect_same_timings(local, runs, kExact);
}

// The double binary tree folds by structure (each member keeps its parent and children, the
// trees keep the full depth), not by translation: close, not exact. The ideal cost model, where
// the alpha-beta selector picks the tree for these buckets (under NCCL's protocols rings win).
TEST(Fold, TreeAllReduceIsWithinOneThousandth) {
  const core::Program program = program_for(tp_by(256, 8, "replicate"));
  const Runs runs = run_both(program, "h100:nodes=32,model=ideal");
  EXPECT_EQ(runs.folded.folded_nodes, 8);
  bool has_tree = false;
  for (const sim::CollectiveRun& run : runs.folded.collectives) has_tree = has_tree || run.algorithm == "tree";
  EXPECT_TRUE(has_tree) << "the data-parallel buckets were expected to pick the tree";
  expect_same_timings(program, runs, 1e-3);
}

// DDP over the world of 32 H100 nodes: NCCL's NVLSTree for the buckets (NVLS in each node, the
// rails' trees across), folded onto 8 nodes whose rails carry the busiest node's load. Within a
// millionth, not exact: a folded rail's hops are not the full trees' routes (some cross the spine),
// so route latencies differ by tens of nanoseconds.
TEST(Fold, NvlsTreeAllReduceAcrossNodesFolds) {
  const json ddp = {{"world_size", 256}, {"batch_size", 1}, {"steps", {{{"replicate", {{"module", ""}}}}}}};
  const core::Program program = program_for(ddp);
  const Runs runs = run_both(program, "h100:nodes=32");
  EXPECT_EQ(runs.folded.folded_nodes, 8);
  bool has_nvls_tree = false;
  for (const sim::CollectiveRun& run : runs.folded.collectives)
    has_nvls_tree = has_nvls_tree || run.algorithm == "nvls_tree/Simple";
  EXPECT_TRUE(has_nvls_tree) << "the buckets were expected to run NVLSTree";
  expect_same_timings(program, runs, 1e-6);
}

TEST(Fold, UnfoldableRunsSayWhy) {
  sim::SimOptions direct;
  direct.algorithms[core::CollectiveKind::all_gather] = Algorithm::direct;
  direct.algorithms[core::CollectiveKind::reduce_scatter] = Algorithm::direct;
  // Direct reaches every member from every member: no shift-invariant image on fewer nodes.
  const sim::SimResult result =
      sim::simulate(program_for(fsdp(64), 1), sim::parse_platform("h100:nodes=8,nodes_per_leaf=1"), direct);
  EXPECT_EQ(result.folded_nodes, 0);
  EXPECT_NE(result.fold_note.find("does not fold"), std::string::npos) << result.fold_note;

  // Full mode, a single node, and fold = false do not fold and need no note.
  sim::SimOptions full;
  full.mode = sim::RankMode::full;
  const sim::SimResult single = sim::simulate(program_for(fsdp(8), 1), sim::parse_platform("h100"));
  EXPECT_EQ(single.folded_nodes, 0);
  EXPECT_EQ(single.fold_note, "");
  const sim::SimResult full_mode =
      sim::simulate(program_for(fsdp(64), 1), sim::parse_platform("h100:nodes=8,nodes_per_leaf=1"), full);
  EXPECT_EQ(full_mode.folded_nodes, 0);

  // 12 nodes under leaves of 4: no multiple of two leaves divides 12 below 12.
  const sim::SimResult odd = sim::simulate(program_for(fsdp(96), 1), sim::parse_platform("h100:nodes=12"));
  EXPECT_EQ(odd.folded_nodes, 0);
  EXPECT_NE(odd.fold_note.find("divides"), std::string::npos) << odd.fold_note;
}

TEST(Fold, ReportsSayHowTheNetworkWasFolded) {
  const core::Program program = program_for(fsdp(128), 1);
  const sim::SimResult result = sim::simulate(program, sim::parse_platform("h100:nodes=16"));
  const core::Analysis analysis = core::analyse(program, result, core::Workload{});
  EXPECT_EQ(core::json_report(program, result, analysis)["folded_nodes"], 8);
  EXPECT_EQ(core::json_report(program, result, analysis)["total_nodes"], 16);
  EXPECT_NE(core::text_report(program, result, analysis).find("network folded onto 8 of 16 nodes"), std::string::npos);
}

}  // namespace
}  // namespace stratsim::test
