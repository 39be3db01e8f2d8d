// analyse(), text_report() and json_report() on hand-made programs and results whose overlap,
// exposed communication, idle time, waits, throughput and bandwidths are known exactly. Nothing
// runs here: the inputs are what the simulator or real execution would produce.
#include <gtest/gtest.h>

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "stratsim/core/run_analysis.hpp"

namespace stratsim::core {
namespace {

// A program with streams compute, ddp, tp and groups dp (size 8) and tp (size 4).
Program base_program() {
  Program program;
  program.world_size = 8;
  program.streams = {"compute", "ddp", "tp"};
  program.groups = {{{0}, "dp", 8}, {{1}, "tp", 4}};
  program.iterations = 1;
  return program;
}

int add_compute(Program& program, const std::string& name, int iteration = 1, double flops = 0) {
  ProgramOp op;
  op.name = name;
  op.iteration = iteration;
  op.flops = flops;
  op.op_class = "gemm";
  return program.add(op).id;
}

int add_collective(Program& program, const std::string& name, int stream, int group,
                   CollectiveKind kind = CollectiveKind::all_reduce, int iteration = 1) {
  ProgramOp op;
  op.type = OpType::collective;
  op.name = name;
  op.stream = stream;
  op.group = group;
  op.kind = kind;
  op.iteration = iteration;
  return program.add(op).id;
}

// One representative simulated rank standing for all ranks, with the given per-op timings.
RunResult representative(const Program& program, std::vector<OpTiming> timings, double makespan) {
  RunResult result;
  result.mode = "representative";
  result.platform = "test platform";
  result.world_size = program.world_size;
  std::vector<int> all(program.world_size);
  for (int r = 0; r < program.world_size; ++r) all[r] = r;
  result.recorded = {all};
  result.timings = {std::move(timings)};
  result.iteration_end = {makespan};
  result.makespan = makespan;
  return result;
}

double stream_busy(const RankStats& stats, const std::string& stream) {
  for (const StreamStats& s : stats.streams)
    if (s.stream == stream) return s.busy;
  ADD_FAILURE() << "no stream " << stream;
  return -1;
}

TEST(Analysis, PartialOverlapHalfTheCommunication) {
  Program program = base_program();
  add_compute(program, "fwd");
  add_collective(program, "ddp.bucket0", 1, 0);
  // compute [0,10), comm [5,15) issued at 3: half the communication runs under compute.
  const RunResult result = representative(program, {{0, 0, 10}, {3, 5, 15}}, 20);
  const Analysis a = analyse(program, result, {});
  ASSERT_EQ(a.ranks.size(), 1u);
  const RankStats& r = a.ranks[0];
  EXPECT_DOUBLE_EQ(r.compute, 10);
  EXPECT_DOUBLE_EQ(r.communication, 10);
  EXPECT_DOUBLE_EQ(r.overlap, 0.5);
  EXPECT_DOUBLE_EQ(r.exposed_communication, 5);
  EXPECT_DOUBLE_EQ(r.idle, 5);  // makespan 20 minus the busy union [0,15)
  EXPECT_DOUBLE_EQ(r.wait_at_collective, 2);
  EXPECT_DOUBLE_EQ(stream_busy(r, "compute"), 10);
  EXPECT_DOUBLE_EQ(stream_busy(r, "ddp"), 10);
  EXPECT_DOUBLE_EQ(stream_busy(r, "tp"), 0);
  EXPECT_EQ(r.ranks.size(), 8u);
  EXPECT_DOUBLE_EQ(a.makespan, 20);
}

TEST(Analysis, FullyHiddenCommunicationIsNotExposed) {
  Program program = base_program();
  add_compute(program, "bwd");
  add_collective(program, "ddp.bucket0", 1, 0);
  const RunResult result = representative(program, {{0, 0, 10}, {2, 2, 8}}, 10);
  const RankStats r = analyse(program, result, {}).ranks[0];
  EXPECT_DOUBLE_EQ(r.overlap, 1);
  EXPECT_DOUBLE_EQ(r.exposed_communication, 0);
  EXPECT_DOUBLE_EQ(r.idle, 0);
  EXPECT_DOUBLE_EQ(r.wait_at_collective, 0);
}

TEST(Analysis, NoCommunicationHasZeroOverlap) {
  Program program = base_program();
  add_compute(program, "a");
  add_compute(program, "b");
  // A gap [4,6) between the two kernels is idle, as is the tail [9,10).
  const RunResult result = representative(program, {{0, 0, 4}, {6, 6, 9}}, 10);
  const RankStats r = analyse(program, result, {}).ranks[0];
  EXPECT_DOUBLE_EQ(r.communication, 0);
  EXPECT_DOUBLE_EQ(r.overlap, 0);
  EXPECT_DOUBLE_EQ(r.exposed_communication, 0);
  EXPECT_DOUBLE_EQ(r.compute, 7);
  EXPECT_DOUBLE_EQ(r.idle, 3);
}

TEST(Analysis, CommunicationOnTwoStreamsIsCountedOnce) {
  Program program = base_program();
  add_collective(program, "ddp.bucket0", 1, 0);
  add_collective(program, "tp.mlp", 2, 1);
  add_compute(program, "fwd");
  // ddp [0,4) and tp [2,6) overlap each other: comm union [0,6); compute [5,10) covers [5,6).
  const RunResult result = representative(program, {{0, 0, 4}, {1, 2, 6}, {5, 5, 10}}, 10);
  const RankStats r = analyse(program, result, {}).ranks[0];
  EXPECT_DOUBLE_EQ(r.communication, 6);
  EXPECT_DOUBLE_EQ(r.compute, 5);
  EXPECT_DOUBLE_EQ(r.overlap, 1.0 / 6.0);
  EXPECT_DOUBLE_EQ(r.exposed_communication, 5);
  EXPECT_DOUBLE_EQ(r.idle, 0);
  EXPECT_DOUBLE_EQ(r.wait_at_collective, 1);
  EXPECT_DOUBLE_EQ(stream_busy(r, "ddp"), 4);
  EXPECT_DOUBLE_EQ(stream_busy(r, "tp"), 4);
}

// A collective that runs entirely inside a longer one on another stream: the union keeps the longer
// one's end. ddp [0,8) contains tp [2,4): communication is 8 s, not cut back to 4 s at tp's end.
TEST(Analysis, CommunicationInsideLongerCommunicationKeepsItsEnd) {
  Program program = base_program();
  add_collective(program, "ddp.bucket0", 1, 0);
  add_collective(program, "tp.mlp", 2, 1);
  add_compute(program, "fwd");
  const RunResult result = representative(program, {{0, 0, 8}, {2, 2, 4}, {6, 6, 10}}, 10);
  const Analysis a = analyse(program, result, {});
  const RankStats& r = a.ranks[0];
  EXPECT_DOUBLE_EQ(r.communication, 8);
  EXPECT_DOUBLE_EQ(r.exposed_communication, 6);  // compute [6,10) hides [6,8)
  EXPECT_DOUBLE_EQ(r.overlap, 2.0 / 8.0);
  EXPECT_DOUBLE_EQ(r.idle, 0);
  // The per-iteration view merges the same intervals, clipped to the iteration's window.
  ASSERT_EQ(a.iterations.size(), 1u);
  EXPECT_DOUBLE_EQ(a.iterations[0].communication, 8);
  EXPECT_DOUBLE_EQ(a.iterations[0].exposed_communication, 6);
}

TEST(Analysis, ZeroDurationOpsAddNothing) {
  Program program = base_program();
  add_compute(program, "a");
  add_compute(program, "empty");
  add_collective(program, "empty.ar", 1, 0);
  const RunResult result = representative(program, {{0, 0, 4}, {4, 4, 4}, {4, 6, 6}}, 8);
  const RankStats r = analyse(program, result, {}).ranks[0];
  EXPECT_DOUBLE_EQ(r.compute, 4);
  EXPECT_DOUBLE_EQ(r.communication, 0);
  EXPECT_DOUBLE_EQ(r.overlap, 0);
  EXPECT_DOUBLE_EQ(r.idle, 4);
  EXPECT_DOUBLE_EQ(r.wait_at_collective, 2);  // a zero-length collective can still wait
}

TEST(Analysis, StepTimesAndThroughputPerIteration) {
  Program program = base_program();
  program.iterations = 2;
  add_compute(program, "it1.a", 1, 3e12);
  add_compute(program, "it1.b", 1, 1e12);
  add_compute(program, "it2.a", 2, 3e12);
  add_collective(program, "it2.ar", 1, 0, CollectiveKind::all_reduce, 2);
  RunResult result = representative(program, {{0, 0, 1}, {1, 1, 2}, {2, 2, 3}, {3, 3, 3.5}}, 3.5);
  result.iteration_end = {2.0, 3.5};
  const Analysis a = analyse(program, result, {64, 1024});
  ASSERT_EQ(a.iterations.size(), 2u);
  const IterationStats& first = a.iterations[0];
  EXPECT_EQ(first.iteration, 1);
  EXPECT_DOUBLE_EQ(first.start, 0);
  EXPECT_DOUBLE_EQ(first.end, 2);
  EXPECT_DOUBLE_EQ(first.step_time, 2);
  EXPECT_DOUBLE_EQ(first.samples_per_second, 32);
  EXPECT_DOUBLE_EQ(first.tokens_per_second, 32 * 1024);
  EXPECT_DOUBLE_EQ(first.model_tflops_per_device, 2);  // 4e12 FLOP in 2 s
  const IterationStats& second = a.iterations[1];
  EXPECT_EQ(second.iteration, 2);
  EXPECT_DOUBLE_EQ(second.start, 2);
  EXPECT_DOUBLE_EQ(second.step_time, 1.5);
  EXPECT_DOUBLE_EQ(second.samples_per_second, 64 / 1.5);
  EXPECT_DOUBLE_EQ(second.model_tflops_per_device, 2);  // collectives' FLOPs do not count
}

TEST(Analysis, TokensAreZeroForNonSequenceModels) {
  Program program = base_program();
  add_compute(program, "a");
  const Analysis a = analyse(program, representative(program, {{0, 0, 0.5}}, 0.5), {16, 0});
  EXPECT_DOUBLE_EQ(a.iterations[0].samples_per_second, 32);
  EXPECT_DOUBLE_EQ(a.iterations[0].tokens_per_second, 0);
}

TEST(Analysis, CollectiveBandwidthsFollowNcclTests) {
  Program program = base_program();
  const int ar = add_collective(program, "ddp.bucket0", 1, 0, CollectiveKind::all_reduce);
  const int ag = add_collective(program, "tp.gather", 2, 1, CollectiveKind::all_gather);
  RunResult result = representative(program, {{0, 0, 0.5}, {0.5, 0.5, 0.5}}, 1);
  result.collectives = {{ar, 0, "ring", 1e9, 8, 0, 0.5, {0, 1, 2, 3, 4, 5, 6, 7}},
                        {ag, 1, "direct", 4e8, 4, 0.25, 0.5, {4, 5, 6, 7}},
                        {ag, 0, "direct", 4e8, 4, 0.5, 0.5, {0, 1, 2, 3}}};
  const Analysis a = analyse(program, result, {});
  ASSERT_EQ(a.collectives.size(), 3u);
  const CollectiveStats& c = a.collectives[0];
  EXPECT_EQ(c.name, "ddp.bucket0");
  EXPECT_EQ(c.group, "dp");
  EXPECT_EQ(c.kind, CollectiveKind::all_reduce);
  EXPECT_EQ(c.algorithm, "ring");
  EXPECT_DOUBLE_EQ(c.duration, 0.5);
  EXPECT_DOUBLE_EQ(c.algbw, 2e9);
  EXPECT_DOUBLE_EQ(c.busbw, 2e9 * 14 / 8);  // all_reduce: 2(p-1)/p
  const CollectiveStats& g = a.collectives[1];
  EXPECT_EQ(g.group, "tp");
  EXPECT_EQ(g.instance, 1);
  EXPECT_DOUBLE_EQ(g.algbw, 1.6e9);
  EXPECT_DOUBLE_EQ(g.busbw, 1.6e9 * 3 / 4);     // all_gather: (p-1)/p
  EXPECT_DOUBLE_EQ(a.collectives[2].algbw, 0);  // zero duration: no bandwidth, not infinity
  EXPECT_DOUBLE_EQ(a.collectives[2].busbw, 0);
}

TEST(Analysis, BusiestLinksTopTenByUtilisationThenName) {
  Program program = base_program();
  add_compute(program, "a");
  RunResult result = representative(program, {{0, 0, 1}}, 1);
  for (int i = 0; i < 12; ++i) result.links.push_back({"link" + std::to_string(i), 1e9, 1e8 * i, 0.1 * (i % 6)});
  const Analysis a = analyse(program, result, {});
  ASSERT_EQ(a.busiest_links.size(), 10u);
  const std::vector<std::string> expected = {"link11", "link5", "link10", "link4", "link3",
                                             "link9",  "link2", "link8",  "link1", "link7"};
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(a.busiest_links[i].name, expected[i]) << i;
}

// A million chained intervals: the sweep stays exact at scale (its speed is benchmarked, not timed here).
TEST(Analysis, MillionOpsAreMeasuredExactly) {
  Program program = base_program();
  const int n = 500'000;  // pairs: 1e6 ops
  std::vector<OpTiming> timings;
  timings.reserve(2 * n);
  program.ops.reserve(2 * n);
  for (int i = 0; i < n; ++i) {
    add_compute(program, "c");
    add_collective(program, "r", 1, 0);
    // compute [2i, 2i+1.5), comm [2i+1, 2i+2.5): each comm overlaps its compute and the next one by 0.5.
    timings.push_back({2.0 * i, 2.0 * i, 2.0 * i + 1.5});
    timings.push_back({2.0 * i + 1, 2.0 * i + 1, 2.0 * i + 2.5});
  }
  const RunResult result = representative(program, std::move(timings), 2.0 * n + 0.5);
  const Analysis a = analyse(program, result, {});
  const RankStats& r = a.ranks[0];
  EXPECT_NEAR(r.compute, 1.5 * n, 1e-6);
  EXPECT_NEAR(r.communication, 1.5 * n, 1e-6);
  EXPECT_NEAR(r.exposed_communication, 0.5 * n + 0.5, 1e-6);  // the last comm has no next compute
  EXPECT_NEAR(r.idle, 0, 1e-6);
}

TEST(Analysis, FullModeHasOneEntryPerSimulatedRank) {
  Program program = base_program();
  program.world_size = 2;
  add_compute(program, "a");
  RunResult result;
  result.mode = "full";
  result.world_size = 2;
  result.recorded = {{0}, {1}};
  result.timings = {{{0, 0, 1}}, {{0, 0, 2}}};  // rank 1 straggles
  result.iteration_end = {2};
  result.makespan = 2;
  const Analysis a = analyse(program, result, {});
  ASSERT_EQ(a.ranks.size(), 2u);
  EXPECT_EQ(a.ranks[1].ranks, std::vector<int>{1});
  EXPECT_DOUBLE_EQ(a.ranks[0].idle, 1);
  EXPECT_DOUBLE_EQ(a.ranks[1].idle, 0);
}

// A small run with collectives and links for the report tests.
struct Sample {
  Program program;
  RunResult result;
  Analysis analysis;
};

Sample sample() {
  Sample s;
  s.program = base_program();
  add_compute(s.program, "fwd", 1, 2e12);
  const int ar = add_collective(s.program, "ddp.bucket0", 1, 0);
  s.result = representative(s.program, {{0, 0, 0.010}, {0.010, 0.011, 0.015}}, 0.015);
  s.result.collectives = {{ar, 0, "ring", 1e8, 8, 0.011, 0.015, {0, 1, 2, 3, 4, 5, 6, 7}}};
  s.result.links = {{"node0.nic", 25e9, 1e8, 0.27}, {"node0.nvlink", 300e9, 2e8, 0.04}};
  s.result.wall_seconds = 0.123;
  s.analysis = analyse(s.program, s.result, {32, 2048});
  return s;
}

TEST(Report, TextNamesModeIterationsRanksCollectivesAndLinks) {
  const Sample s = sample();
  const std::string text = text_report(s.program, s.result, s.analysis);
  for (const char* expected :
       {"platform: test platform", "1 simulated rank stands for all 8 ranks", "15.000 ms", "TFLOP/s/device", "0-7",
        "stream busy: compute 10.000 ms, ddp 4.000 ms, tp 0 s", "all_reduce", "dp", "ring", "node0.nic", "27.0%"})
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
}

TEST(Report, TextListsTheFirstEightSimulatedRanks) {
  Program program = base_program();
  program.world_size = 10;
  add_compute(program, "a");
  RunResult result;
  result.mode = "full";
  result.world_size = 10;
  for (int r = 0; r < 10; ++r) {
    result.recorded.push_back({r});
    result.timings.push_back({{0, 0, 1}});
  }
  result.iteration_end = {1};
  result.makespan = 1;
  const std::string text = text_report(program, result, analyse(program, result, {}));
  EXPECT_NE(text.find("... (2 more)"), std::string::npos) << text;
  EXPECT_NE(text.find("mode: full (10 simulated ranks of 10)"), std::string::npos) << text;
}

TEST(Report, JsonHasDocumentedFieldsAndNoWallTime) {
  Sample s = sample();
  const nlohmann::json doc = json_report(s.program, s.result, s.analysis);
  EXPECT_EQ(doc["format"], "stratsim.simulation");
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["mode"], "representative");
  EXPECT_EQ(doc["world_size"], 8);
  EXPECT_DOUBLE_EQ(doc["makespan_s"].get<double>(), 0.015);
  const nlohmann::json& it = doc["iterations"][0];
  for (const char* key :
       {"iteration", "start_s", "end_s", "step_time_s", "samples_per_s", "tokens_per_s", "model_tflops_per_device"})
    EXPECT_TRUE(it.contains(key)) << key;
  const nlohmann::json& rank = doc["ranks"][0];
  EXPECT_NEAR(rank["exposed_communication_s"].get<double>(), 0.004, 1e-12);
  EXPECT_NEAR(rank["wait_at_collective_s"].get<double>(), 0.001, 1e-12);
  EXPECT_NEAR(rank["streams"]["ddp"].get<double>(), 0.004, 1e-12);
  const nlohmann::json& c = doc["collectives"][0];
  EXPECT_EQ(c["kind"], "all_reduce");
  EXPECT_EQ(c["group"], "dp");
  EXPECT_EQ(c["algorithm"], "ring");
  EXPECT_NEAR(c["algbw_GBps"].get<double>(), 25, 1e-9);
  EXPECT_NEAR(c["busbw_GBps"].get<double>(), 25 * 14.0 / 8, 1e-9);
  EXPECT_EQ(doc["links"].size(), 2u);
  EXPECT_EQ(doc["links"][0]["name"], "node0.nic");
  EXPECT_DOUBLE_EQ(doc["links"][0]["bandwidth_GBps"].get<double>(), 25);
  const std::string first = doc.dump();
  EXPECT_EQ(first.find("wall"), std::string::npos);
  s.result.wall_seconds = 99;  // host time must not reach the deterministic output
  EXPECT_EQ(json_report(s.program, s.result, analyse(s.program, s.result, {32, 2048})).dump(), first);
}

// The producer's words go where run_result.hpp says, and its JSON keys never replace the report's.
TEST(Report, ProducerNotesAndExtraKeys) {
  Sample s = sample();
  s.result.mode_notes = {"network folded onto 8 of 16 nodes"};
  s.result.notes = {"20 SimGrid flows"};
  s.result.extra = {{"folded_nodes", 8}, {"format", "not the report's"}};
  const std::string text = text_report(s.program, s.result, s.analysis);
  EXPECT_NE(text.find("mode: representative (1 simulated rank stands for all 8 ranks); network folded onto 8 of 16 "
                      "nodes\nmakespan: 15.000 ms (20 SimGrid flows)\n"),
            std::string::npos)
      << text;
  const nlohmann::json doc = json_report(s.program, s.result, s.analysis);
  EXPECT_EQ(doc["folded_nodes"], 8);
  EXPECT_EQ(doc["format"], "stratsim.simulation");
  EXPECT_FALSE(doc.contains("source"));
}

// A measured run: every rank recorded, no links, no simulator wording.
TEST(Report, MeasuredRunReadsAsMeasured) {
  Program program = base_program();
  program.world_size = 2;
  add_compute(program, "a");
  RunResult result;
  result.source = "gloo";
  result.mode = "measured";
  result.platform = "2 gloo ranks on host";
  result.world_size = 2;
  result.recorded = {{0}, {1}};
  result.timings = {{{0, 0, 1}}, {{0, 0, 2}}};
  result.iteration_end = {2};
  result.makespan = 2;
  result.wall_seconds = 3;
  const Analysis analysis = analyse(program, result, {});
  const std::string text = text_report(program, result, analysis);
  for (const char* expected :
       {"stratsim run (gloo): 1 ops, 1 iterations, world size 2\n", "mode: measured (2 recorded ranks of 2)\n",
        "makespan: 2.000 s (ran in 3.000 s)\n", "per recorded rank:"})
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
  for (const char* absent : {"simulat", "SimGrid", "busiest links"})
    EXPECT_EQ(text.find(absent), std::string::npos) << absent << "\n" << text;
  const nlohmann::json doc = json_report(program, result, analysis);
  EXPECT_EQ(doc["format"], "stratsim.simulation");  // one format, so stratsim compare reads both alike
  EXPECT_EQ(doc["source"], "gloo");
  EXPECT_EQ(doc["mode"], "measured");
  EXPECT_EQ(doc["ranks"].size(), 2u);
  EXPECT_TRUE(doc["links"].empty());
}

// Throughput counts the ranks that see distinct data: tensor-parallel ranks share their samples.
TEST(Analysis, WorkloadCountsDataParallelRanks) {
  Model model;
  model.seq_len = 128;
  Plan plan;
  plan.world_size = 8;
  plan.mesh = DeviceMesh({2, 4}, {"dp", "tp"});
  plan.batch_size = 4;
  EXPECT_DOUBLE_EQ(workload_of(model, plan).samples_per_step, 32);
  EXPECT_DOUBLE_EQ(workload_of(model, plan).tokens_per_sample, 128);
  ParallelizeStep tp;
  tp.mesh_dims = {"tp"};
  plan.steps.push_back({tp, "", 0});
  plan.seq_len = 64;
  EXPECT_DOUBLE_EQ(workload_of(model, plan).samples_per_step, 8);
  EXPECT_DOUBLE_EQ(workload_of(model, plan).tokens_per_sample, 64);
}

TEST(Format, SecondsWithSiPrefixes) {
  EXPECT_EQ(format_seconds(0), "0 s");
  EXPECT_EQ(format_seconds(12.3456), "12.346 s");
  EXPECT_EQ(format_seconds(0.012345), "12.345 ms");
  EXPECT_EQ(format_seconds(3.5e-6), "3.500 us");
  EXPECT_EQ(format_seconds(42e-9), "42.000 ns");
  EXPECT_EQ(format_seconds(-1e-19), "0 s");  // rounding noise of a difference, not a negative time
}

TEST(Format, RankListsCollapseRanges) {
  EXPECT_EQ(describe_ranks({3}), "3");
  EXPECT_EQ(describe_ranks({0, 1, 2, 3}), "0-3");
  EXPECT_EQ(describe_ranks({0, 1, 2, 3, 8, 9, 10, 11}), "0-3,8-11");
  EXPECT_EQ(describe_ranks({0, 2, 4, 6, 8}, 2), "0,2,... (5 ranks)");
  EXPECT_EQ(describe_ranks({}), "");
}

TEST(Format, BusBandwidthFactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::all_reduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::all_gather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::reduce_scatter, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::all_to_all, 2), 0.5);
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::broadcast, 16), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(CollectiveKind::all_reduce, 1), 0.0);
  EXPECT_THROW(busbw_factor(CollectiveKind::all_reduce, 0), std::invalid_argument);
}

}  // namespace
}  // namespace stratsim::core
