// The formats core owns in both directions: timeline v2 (program + RunResult) written and read
// back to the same analysis, timeline v1 files still read, the RunResult codec's checks with the
// field path in every error, read_document's kind detection, progress and cancel; and the two
// views the viewer builds on: analyse_window (HTA figures for a time range) and collective_counts
// (CommDebugMode counts from a program).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "planner_test_support.hpp"
#include "stratsim/core/collective_counts.hpp"
#include "stratsim/core/document.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/run_analysis.hpp"
#include "stratsim/core/timeline.hpp"

namespace stratsim::core {
namespace {

using json = nlohmann::json;

// Two ranks on a 2-rank mesh: forward, backward, a DDP all-reduce overlapping nothing on the
// second stream, and the optimizer step after it.
Program program() {
  Program p;
  p.world_size = 2;
  p.mesh = DeviceMesh({2}, {"dp"});
  p.iterations = 1;
  p.streams = {"compute", "ddp"};
  p.group_id({0});
  ProgramOp fwd;
  fwd.name = "fc1.forward";
  fwd.module = "fc1";
  fwd.op_class = "gemm";
  fwd.flops = 2e9;
  fwd.bytes_accessed = 4096;
  p.add(fwd);
  ProgramOp bwd = fwd;
  bwd.name = "fc1.backward";
  bwd.phase = Phase::backward;
  p.add(bwd);
  ProgramOp ar;
  ar.type = OpType::collective;
  ar.name = "ddp.bucket0";
  ar.module = "";
  ar.comm_key = "c10d.allreduce_";
  ar.phase = Phase::backward;
  ar.stream = 1;
  ar.deps = {0};
  ar.group = 0;
  ar.bytes = ar.input_bytes = ar.output_bytes = 8192;
  ar.dtype = DType::bfloat16;
  ar.params = {"fc1.weight", "fc1.bias"};
  ar.role = OpRole::ddp_bucket;
  p.add(ar);
  ProgramOp opt = fwd;
  opt.name = "optimizer.step";
  opt.module = "";
  opt.phase = Phase::optimizer;
  opt.op_class = "optimizer";
  opt.deps = {2};
  p.add(opt);
  return p;
}

// Rank 1 reaches the all-reduce `late` seconds after rank 0. On rank 0: forward [0,1), backward
// [1,3), all-reduce [1.5,4) (issued at 1), optimizer [4,5).
std::vector<OpTiming> timings(double late) { return {{0, 0, 1}, {1, 1, 3}, {1 + late, 1.5, 4}, {4, 4, 5}}; }

RunResult result() {
  RunResult r;
  r.mode = "full";
  r.platform = "2 nodes";
  r.world_size = 2;
  r.recorded = {{0}, {1}};
  r.timings = {timings(0), timings(0.5)};
  r.collectives = {{2, 0, "ring", 8192, 2, 1.5, 4, {0, 1}}};
  r.links = {{"l0", 25e9, 8192, 0.1}};
  r.iteration_end = {5};
  r.makespan = 5;
  r.wall_seconds = 1.5;
  r.mode_notes = {"network folded"};
  r.notes = {"4 SimGrid flows"};
  r.extra = {{"folded_nodes", 1}};
  return r;
}

// The figures a reader of the file gets: the JSON report, which prints every analysed number.
json report_of(const Program& p, const RunResult& r) { return json_report(p, r, analyse(p, r, {8, 0})); }

std::string error_of(const json& doc) {
  try {
    timeline_from_json(doc, "t.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(TimelineV2, CarriesTheProgramAndTheRun) {
  const json doc = timeline_json(program(), result());
  EXPECT_EQ(doc["format"], "stratsim.timeline");
  EXPECT_EQ(doc["version"], 2);
  EXPECT_EQ(doc["program"], program_to_json(program()));
  const Program p = program();
  EXPECT_EQ(doc["run"], run_result_to_json(result(), &p));
  EXPECT_EQ(doc["run"]["timings"][1]["issue_s"], json({0.0, 1.0, 1.5, 4.0}));
  EXPECT_EQ(doc["run"]["collectives"]["algorithm"], json({"ring"}));
  EXPECT_EQ(doc["run"]["collectives"]["ranks"], json({nullptr})) << "the mesh group's ranks come from the program";
  EXPECT_EQ(run_result_to_json(result())["collectives"]["ranks"], json({{0, 1}})) << "without the program, listed";
  EXPECT_EQ(doc["run"]["timings"][0]["end_s"], json({1.0, 3.0, 4.0, 5.0}));
  EXPECT_EQ(doc.dump().find("wall"), std::string::npos) << "host time is not deterministic output";
}

TEST(TimelineV2, CarriesTheWorkloadForThroughput) {
  const Timeline back = timeline_from_json(timeline_json(program(), result(), {8, 2048}), "t.json");
  EXPECT_EQ(back.workload.samples_per_step, 8);
  EXPECT_EQ(back.workload.tokens_per_sample, 2048);
  EXPECT_EQ(report_of(back.program, back.result), report_of(program(), result())) << "report_of uses {8, 0}";
  json doc = timeline_json(program(), result(), {8, 2048});
  doc["workload"]["samples_per_step"] = -1;
  EXPECT_EQ(error_of(doc), "t.json: workload: expected non-negative samples_per_step and tokens_per_sample");
  doc.erase("workload");
  EXPECT_EQ(timeline_from_json(doc, "t.json").workload.samples_per_step, 0) << "optional";
}

TEST(TimelineV2, ReadsBackToTheSameProgramRunAndAnalysis) {
  const json written = json::parse(timeline_json(program(), result()).dump());
  const Timeline back = timeline_from_json(written, "t.json");
  EXPECT_EQ(back.version, 2);
  EXPECT_EQ(program_to_json(back.program), program_to_json(program()));
  EXPECT_EQ(run_result_to_json(back.result), run_result_to_json(result()));
  EXPECT_EQ(back.result.collectives[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(back.result.timings[1][2].issue, 1.5);
  EXPECT_EQ(back.result.links[0].bandwidth, 25e9);
  EXPECT_EQ(back.result.extra, json({{"folded_nodes", 1}}));
  EXPECT_EQ(report_of(back.program, back.result), report_of(program(), result()));
  EXPECT_EQ(timeline_json(back.program, back.result), written);
}

// What the old writer wrote for program()/result(): per rank an op list, collectives with names.
json v1_document() {
  json ranks = json::array();
  const RunResult r = result();
  const Program p = program();
  for (std::size_t s = 0; s < 2; ++s) {
    json ops = json::array();
    for (const ProgramOp& op : p.ops)
      ops.push_back({{"op", op.id},
                     {"name", op.name},
                     {"module", op.module},
                     {"stream", op.stream},
                     {"kind", op.type == OpType::compute ? "compute" : "all_reduce"},
                     {"iteration", 1},
                     {"phase", phase_name(op.phase)},
                     {"deps", op.deps},
                     {"issue_s", r.timings[s][op.id].issue},
                     {"start_s", r.timings[s][op.id].start},
                     {"end_s", r.timings[s][op.id].end}});
    ranks.push_back({{"ranks", {s}}, {"ops", ops}});
  }
  return {{"format", "stratsim.timeline"},
          {"version", 1},
          {"source", "simulated"},
          {"world_size", 2},
          {"platform", "2 nodes"},
          {"mode", "full"},
          {"makespan_s", 5.0},
          {"streams", {"compute", "ddp"}},
          {"ranks", ranks},
          {"collectives",
           {{{"op", 2},
             {"instance", 0},
             {"algorithm", "ring"},
             {"bytes", 8192},
             {"group_size", 2},
             {"start_s", 1.5},
             {"end_s", 4.0},
             {"ranks", {0, 1}},
             {"name", "ddp.bucket0"},
             {"kind", "all_reduce"},
             {"group", "dp"}}}},
          {"links", {{{"name", "l0"}, {"bandwidth_GBps", 25.0}, {"bytes", 8192}, {"utilisation", 0.1}}}},
          {"iteration_end_s", {5.0}}};
}

TEST(TimelineV1, StillReadsWithWhatItCarried) {
  const Timeline v1 = timeline_from_json(v1_document(), "old.json");
  EXPECT_EQ(v1.version, 1);
  ASSERT_EQ(v1.program.ops.size(), 4u);
  EXPECT_EQ(v1.program.ops[2].name, "ddp.bucket0");
  EXPECT_EQ(v1.program.ops[2].type, OpType::collective);
  EXPECT_EQ(v1.program.ops[2].kind, CollectiveKind::all_reduce);
  EXPECT_EQ(v1.program.ops[2].bytes, 8192);
  EXPECT_EQ(v1.program.ops[3].deps, std::vector<int>{2});
  EXPECT_EQ(v1.program.ops[3].phase, Phase::optimizer);
  ASSERT_EQ(v1.program.groups.size(), 1u);
  EXPECT_EQ(v1.program.groups[0].name, "dp");
  EXPECT_EQ(v1.program.groups[0].size, 2);
  EXPECT_EQ(v1.program.ops[0].flops, 0) << "v1 carried no FLOPs";
  EXPECT_EQ(v1.result.source, "simulation");
  EXPECT_EQ(v1.result.recorded, (std::vector<std::vector<int>>{{0}, {1}}));
  EXPECT_EQ(v1.result.timings[1][2].issue, 1.5);
  EXPECT_EQ(v1.result.collectives[0].algorithm, "ring");
  EXPECT_EQ(v1.result.links[0].bandwidth, 25e9);
  // Everything but FLOP-derived figures analyses as the original did.
  const Analysis original = analyse(program(), result(), {8, 0});
  const Analysis read = analyse(v1.program, v1.result, {8, 0});
  ASSERT_EQ(read.ranks.size(), 2u);
  for (std::size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(read.ranks[s].compute, original.ranks[s].compute);
    EXPECT_EQ(read.ranks[s].exposed_communication, original.ranks[s].exposed_communication);
    EXPECT_EQ(read.ranks[s].wait_at_collective, original.ranks[s].wait_at_collective);
  }
  EXPECT_EQ(read.collectives[0].busbw, original.collectives[0].busbw);
  EXPECT_EQ(read.iterations[0].step_time, original.iterations[0].step_time);
}

TEST(TimelineErrors, NameTheFieldAndWhatWasExpected) {
  const json good = timeline_json(program(), result());
  json doc = good;
  doc["version"] = 3;
  EXPECT_EQ(error_of(doc), "t.json: version: unsupported timeline version 3 (expected 1 or 2)");
  doc = good;
  doc["format"] = "stratsim.program";
  EXPECT_EQ(error_of(doc), "t.json: not a stratsim timeline (format must be \"stratsim.timeline\")");
  doc = good;
  doc["run"]["timings"][1]["end_s"].erase(3);
  EXPECT_EQ(error_of(doc),
            "t.json: run.timings[1]: issue_s, start_s and end_s must have one entry per op (got 4, 4 and 3)");
  doc = good;
  doc["run"]["timings"][0]["end_s"][1] = 0.5;
  EXPECT_EQ(error_of(doc), "t.json: run.timings[0].end_s[1]: op 1 ends before it starts (0.5 < 1)");
  doc = good;
  doc["run"]["timings"][0]["start_s"][2] = "soon";
  EXPECT_EQ(error_of(doc), "t.json: run.timings[0].start_s[2]: expected a number, got string");
  doc = good;
  doc["program"]["ops"][2]["phase"] = "sideways";
  EXPECT_NE(error_of(doc).find("t.json: program.ops[2].phase: "), std::string::npos) << error_of(doc);
  doc = good;
  doc["run"]["collectives"]["op"][0] = 1;
  EXPECT_EQ(error_of(doc),
            "t.json: run.collectives.ranks[0]: null (the mesh group's ranks) needs a program whose group for this op "
            "has this instance");
  doc["run"]["collectives"]["ranks"][0] = {0, 1};
  EXPECT_EQ(error_of(doc), "t.json: run.collectives.op[0]: op 1 is not a collective of the program");
  doc = good;
  doc["run"]["collectives"]["ranks"][0] = {1, 7};
  EXPECT_EQ(error_of(doc), "t.json: run.collectives.ranks[0][1]: rank 7 is outside the world (0..1)");
  doc = good;
  doc["run"]["collectives"]["start_s"] = json::array();
  EXPECT_EQ(error_of(doc), "t.json: run.collectives.start_s: expected one entry per collective instance (1), got 0");
  doc = good;
  doc["run"]["timings"][0] = {{"issue_s", json::array()}, {"start_s", json::array()}, {"end_s", json::array()}};
  EXPECT_EQ(error_of(doc), "t.json: run.timings[0]: expected one timing per program op (4), got 0");
  doc = good;
  doc["run"]["recorded"].erase(1);
  EXPECT_EQ(error_of(doc), "t.json: run: recorded and timings must have one entry per recorded rank (got 1 and 2)");
  doc = good;
  doc["run"]["wall_seconds"] = 3;
  EXPECT_EQ(error_of(doc).rfind("t.json: run.wall_seconds: unknown field", 0), 0u) << error_of(doc);
  doc = v1_document();
  doc["ranks"][1]["ops"].erase(0);
  EXPECT_EQ(error_of(doc), "t.json: ranks[1].ops: expected the 4 ops of the first recorded rank, got 3");
}

class DocumentFile : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    const auto path = std::filesystem::temp_directory_path() / ("stratsim-document-test-" + name);
    std::ofstream(path) << text;
    paths_.push_back(path);
    return path.string();
  }
  void TearDown() override {
    for (const auto& path : paths_) std::filesystem::remove(path);
  }

 private:
  std::vector<std::filesystem::path> paths_;
};

TEST_F(DocumentFile, DetectsTheKindFromTheFormatField) {
  const std::string timeline = write("t.json", timeline_json(program(), result()).dump());
  const Document t = read_document(timeline);
  EXPECT_EQ(t.kind, DocumentKind::timeline);
  EXPECT_EQ(t.origin, timeline);
  EXPECT_EQ(t.timeline.program.ops.size(), 4u);
  const Document p = document_from_json(program_to_json(program()), "p.json");
  EXPECT_EQ(p.kind, DocumentKind::program);
  EXPECT_EQ(p.program.ops[2].name, "ddp.bucket0");
  const Document r = document_from_json(report_of(program(), result()), "r.json");
  EXPECT_EQ(r.kind, DocumentKind::run_report);
  EXPECT_EQ(r.report.document["format"], "stratsim.simulation");
}

TEST_F(DocumentFile, BadFilesSayWhatIsWrongInTheCliWords) {
  const auto message = [](const std::string& path) {
    try {
      read_document(path);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string syntax = write("syntax.json", "{\"format\": \"stratsim.timeline\",\n  \"version\": }");
  EXPECT_EQ(message(syntax).rfind(syntax + ": line 2, column 14: invalid JSON: ", 0), 0u) << message(syntax);
  const std::string other = write("other.json", R"({"format": "chrome.trace"})");
  EXPECT_EQ(
      message(other),
      other +
          ": format: expected stratsim.timeline, stratsim.simulation or stratsim.program (or a profiler trace), got "
          "\"chrome.trace\"");
  const std::string none = write("none.json", "[1, 2]");
  EXPECT_NE(message(none).find(none + ": "), std::string::npos);
  EXPECT_EQ(message("/nonexistent/x.json"), "/nonexistent/x.json: cannot open file (No such file or directory)");
}

// A run large enough for several progress points (the reader reports every MiB it parses).
RunResult long_result(int ranks) {
  RunResult r = result();
  r.world_size = ranks;
  r.recorded.clear();
  r.timings.clear();
  for (int s = 0; s < ranks; ++s) {
    r.recorded.push_back({s});
    r.timings.push_back(timings(0.1 * s));
  }
  return r;
}

TEST_F(DocumentFile, ReportsProgressAndCanBeCancelled) {
  Program p = program();
  p.world_size = 60000;
  p.mesh = DeviceMesh({60000}, {"dp"});
  const std::string path = write("big.json", timeline_json(p, long_result(60000)).dump());
  ASSERT_GT(std::filesystem::file_size(path), 4u << 20);
  std::vector<double> seen;
  read_document(path, [&](double fraction) {
    seen.push_back(fraction);
    return true;
  });
  ASSERT_GE(seen.size(), 5u);
  EXPECT_EQ(seen.front(), 0.0);
  EXPECT_EQ(seen.back(), 1.0);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  int calls = 0;
  EXPECT_THROW(read_document(path, [&](double) { return ++calls < 3; }), ReadCancelled);
  EXPECT_EQ(calls, 3);
}

// ---- analyse_window ----

TEST(AnalyseWindow, OverTheWholeRunIsTheRunsTotals) {
  const Analysis whole = analyse(program(), result(), {8, 0});
  const std::vector<RankStats> window = analyse_window(program(), result(), 0, 5);
  ASSERT_EQ(window.size(), whole.ranks.size());
  for (std::size_t s = 0; s < window.size(); ++s) {
    EXPECT_EQ(window[s].compute, whole.ranks[s].compute);
    EXPECT_EQ(window[s].communication, whole.ranks[s].communication);
    EXPECT_EQ(window[s].idle, whole.ranks[s].idle);
    EXPECT_EQ(window[s].wait_at_collective, whole.ranks[s].wait_at_collective);
  }
}

// Rank 0 in [2, 4.5): backward [2,3), all-reduce [2,4), optimizer [4,4.5); wait is 1..1.5, outside.
// Rank 1 in [1.2, 2): backward [1.2,2), all-reduce issued at 1.5, started 1.5: no wait.
TEST(AnalyseWindow, ClipsEveryIntervalToTheWindow) {
  const std::vector<RankStats> w = analyse_window(program(), result(), 2, 4.5);
  EXPECT_DOUBLE_EQ(w[0].compute, 1.5);
  EXPECT_DOUBLE_EQ(w[0].communication, 2);
  EXPECT_DOUBLE_EQ(w[0].exposed_communication, 1);
  EXPECT_DOUBLE_EQ(w[0].overlap, 0.5);
  EXPECT_DOUBLE_EQ(w[0].idle, 0);
  EXPECT_DOUBLE_EQ(w[0].wait_at_collective, 0);
  ASSERT_EQ(w[0].streams.size(), 2u);
  EXPECT_DOUBLE_EQ(w[0].streams[0].busy, 1.5);
  EXPECT_DOUBLE_EQ(w[0].streams[1].busy, 2);
  const std::vector<RankStats> early = analyse_window(program(), result(), 0.5, 1.25);
  EXPECT_DOUBLE_EQ(early[0].compute, 0.75);
  EXPECT_DOUBLE_EQ(early[0].wait_at_collective, 0.25) << "issued at 1, started at 1.5: 1..1.25 is in the window";
  EXPECT_DOUBLE_EQ(early[0].idle, 0);
  const std::vector<RankStats> after = analyse_window(program(), result(), 5, 7);
  EXPECT_DOUBLE_EQ(after[0].idle, 2) << "a window past the run is all idle";
  EXPECT_DOUBLE_EQ(after[0].compute, 0);
}

// Compute + communication - overlap + idle is the window's length, for any window.
TEST(AnalyseWindow, TheBreakdownAddsUpToTheWindow) {
  for (double begin : {0.0, 0.3, 1.0, 1.7, 3.9})
    for (double length : {0.1, 0.5, 1.0, 2.5, 6.0}) {
      for (const RankStats& s : analyse_window(program(), result(), begin, begin + length)) {
        const double both = s.communication - s.exposed_communication;
        EXPECT_NEAR(s.compute + s.communication - both + s.idle, length, 1e-12) << begin << "+" << length;
        EXPECT_LE(s.exposed_communication, s.communication);
      }
    }
}

// ---- collective_counts ----

TEST(CollectiveCounts, GroupsByIterationKeyPhaseModuleAndGroup) {
  Program p = program();
  ProgramOp second = p.ops[2];
  second.name = "ddp.bucket1";
  second.deps = {1};
  second.bytes = 100;
  p.add(second);
  ProgramOp later = p.ops[2];
  later.iteration = 2;
  later.deps = {};
  p.add(later);
  const std::vector<CollectiveCount> counts = collective_counts(p);
  ASSERT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts[0].iteration, 1);
  EXPECT_EQ(counts[0].comm_key, "c10d.allreduce_");
  EXPECT_EQ(counts[0].group, "dp");
  EXPECT_EQ(counts[0].phase, Phase::backward);
  EXPECT_EQ(counts[0].count, 2);
  EXPECT_EQ(counts[0].bytes, 8192 + 100);
  EXPECT_EQ(counts[0].ops, (std::vector<int>{2, 4}));
  EXPECT_EQ(counts[1].iteration, 2);
  EXPECT_EQ(counts[1].count, 1);
}

// From the program alone, the last iteration's counts are the ones `plan` prints (PlanResult::counts,
// the CommDebugMode vectors of the seeds), for DDP, FSDP and FSDP + TP.
TEST(CollectiveCounts, TheLastIterationMatchesThePlannersCounts) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"zoo:Net", R"({"world_size":2,"iterations":2,"steps":[{"replicate":{"module":""}}]})"},
      {"zoo:CompositeParamModel",
       R"({"world_size":2,"iterations":2,"steps":[{"replicate":{"module":"u1"}},{"fully_shard":{"module":"","policy":{"module_types":["UnitModule"]}}}]})"},
      {"zoo:MLPModule",
       R"({"world_size":4,"mesh":{"shape":[2,2],"dim_names":["dp","tp"]},"iterations":2,"steps":[{"parallelize_module":{"module":"","mesh_dim":"tp","plan":{"net1":"ColwiseParallel","net2":"RowwiseParallel"}}},{"fully_shard":{"module":"","mesh_dim":"dp"}}]})"},
  };
  for (const auto& [model, plan] : cases) {
    const PlanResult r = test::run_plan(model, plan);
    std::map<std::string, int> from_program;
    for (const CollectiveCount& c : collective_counts(r.program))
      if (c.iteration == r.program.iterations) from_program[c.comm_key] += c.count;
    EXPECT_EQ(from_program, r.counts()) << model;
    EXPECT_FALSE(from_program.empty()) << model;
  }
}

}  // namespace
}  // namespace stratsim::core
