// chrome_trace() on hand-made results: the Chrome trace parses, every slice has
// the fields Perfetto and HTA need, flows pair up and bind inside their slices, metadata names every
// process and thread used, slices on one thread nest, HTA finds the rank, and output is deterministic.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "stratsim/core/timeline.hpp"
#include "stratsim/core/trace.hpp"

namespace stratsim::core {
namespace {

using json = nlohmann::json;

// fwd -> bwd on compute; bwd -> all_reduce on ddp (issued at 3, started at 3.5 when the last member
// came); a tp all_gather of zero duration; the optimizer waits for the all_reduce.
Program program() {
  Program p;
  p.world_size = 2;
  p.streams = {"compute", "ddp", "tp"};
  p.groups = {{{0}, "dp", 2}};
  p.iterations = 1;
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
  ar.phase = Phase::backward;
  ar.stream = 1;
  ar.deps = {1};
  ar.group = 0;
  ar.bytes = ar.input_bytes = ar.output_bytes = 8192;
  ar.dtype = DType::bfloat16;
  p.add(ar);
  ProgramOp ag = ar;
  ag.name = "tp.gather";
  ag.kind = CollectiveKind::all_gather;
  ag.stream = 2;
  ag.deps = {0};
  ag.output_bytes = 8192;
  ag.input_bytes = 4096;
  p.add(ag);
  ProgramOp opt = fwd;
  opt.name = "optimizer.step";
  opt.phase = Phase::optimizer;
  opt.op_class = "optimizer";
  opt.deps = {2};
  p.add(opt);
  return p;
}

// Times in seconds. Rank 0 reaches the all_reduce at 3; rank 1, the last member, at 3 + late.
std::vector<OpTiming> timings(double late) { return {{0, 0, 1}, {1, 1, 3}, {3 + late, 3.5, 5}, {1, 1, 1}, {5, 5, 6}}; }

RunResult full_result() {
  RunResult r;
  r.mode = "full";
  r.platform = "2 nodes";
  r.world_size = 2;
  r.recorded = {{0}, {1}};
  r.timings = {timings(0), timings(0.5)};
  r.collectives = {{2, 0, "ring", 8192, 2, 3.5, 5, {0, 1}}, {3, 0, "direct", 8192, 2, 1, 1, {0, 1}}};
  r.links = {{"l0", 25e9, 8192, 0.1}};
  r.iteration_end = {6};
  r.makespan = 6;
  r.wall_seconds = 1.5;
  return r;
}

RunResult representative_result() {
  RunResult r = full_result();
  r.mode = "representative";
  r.recorded = {{0, 1}};
  r.timings = {timings(0)};
  return r;
}

std::int64_t ns(const json& us) { return std::llround(us.get<double>() * 1000.0); }

std::vector<json> events_with_phase(const json& trace, const std::string& ph) {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == ph) out.push_back(e);
  return out;
}

const json* find_slice(const json& trace, const std::string& name, int pid) {
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["name"] == name && e["pid"] == pid) return &e;
  return nullptr;
}

TEST(ChromeTrace, EverySliceHasTheFieldsViewersNeed) {
  const json trace = json::parse(chrome_trace(program(), full_result()));
  const std::vector<json> slices = events_with_phase(trace, "X");
  EXPECT_FALSE(slices.empty());
  for (const json& e : slices)
    for (const char* key : {"pid", "tid", "ts", "dur", "name", "cat"}) EXPECT_TRUE(e.contains(key)) << key << e;
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  EXPECT_EQ(trace["distributedInfo"]["world_size"], 2);
}

TEST(ChromeTrace, RankKeyHasTheSpaceHtaNeeds) {
  const std::string text = chrome_trace(program(), full_result());
  EXPECT_TRUE(std::regex_search(text, std::regex("\"rank\":\\s+\\d+")));
}

TEST(ChromeTrace, FlowsPairUpAndBindInsideTheirSlices) {
  const json trace = json::parse(chrome_trace(program(), full_result()));
  std::map<std::int64_t, json> starts, finishes;
  for (const json& e : events_with_phase(trace, "s"))
    EXPECT_TRUE(starts.emplace(e["id"].get<std::int64_t>(), e).second);
  for (const json& e : events_with_phase(trace, "f")) {
    EXPECT_TRUE(finishes.emplace(e["id"].get<std::int64_t>(), e).second);
    EXPECT_EQ(e["bp"], "e");
  }
  ASSERT_EQ(starts.size(), 6u);  // three deps on each of two ranks
  for (const auto& [id, s] : starts) {
    ASSERT_TRUE(finishes.count(id)) << id;
    EXPECT_EQ(s["cat"], "dep");
    EXPECT_EQ(s["pid"], finishes[id]["pid"]);
  }
  // bwd [1,3) s -> ddp all_reduce [3.5,5) on rank 0: s inside bwd, f inside the all_reduce.
  const json& s = starts.begin()->second;
  const json& f = finishes.begin()->second;
  EXPECT_EQ(s["tid"], 1);
  EXPECT_EQ(f["tid"], 2);
  EXPECT_TRUE(ns(s["ts"]) > 1'000'000'000 && ns(s["ts"]) < 3'000'000'000) << s;
  EXPECT_TRUE(ns(f["ts"]) > 3'500'000'000 && ns(f["ts"]) < 5'000'000'000) << f;
}

TEST(ChromeTrace, MetadataNamesEveryProcessAndThreadUsed) {
  for (const RunResult& result : {full_result(), representative_result()}) {
    const json trace = json::parse(chrome_trace(program(), result));
    std::set<int> processes;
    std::set<std::pair<int, int>> threads;
    for (const json& e : events_with_phase(trace, "M")) {
      if (e["name"] == "process_name") processes.insert(e["pid"].get<int>());
      if (e["name"] == "thread_name") threads.emplace(e["pid"].get<int>(), e["tid"].get<int>());
    }
    for (const json& e : trace["traceEvents"]) {
      if (e["ph"] == "M") continue;
      EXPECT_TRUE(processes.count(e["pid"].get<int>())) << e;
      EXPECT_TRUE(threads.count({e["pid"].get<int>(), e["tid"].get<int>()})) << e;
    }
  }
}

TEST(ChromeTrace, ProcessesAreNamedByTheRanksTheyStandFor) {
  const json full = json::parse(chrome_trace(program(), full_result()));
  const json rep = json::parse(chrome_trace(program(), representative_result()));
  std::set<std::string> names;
  for (const json& e : events_with_phase(full, "M"))
    if (e["name"] == "process_name") names.insert(e["args"]["name"].get<std::string>());
  EXPECT_EQ(names, (std::set<std::string>{"rank 0", "rank 1"}));
  for (const json& e : events_with_phase(rep, "M"))
    if (e["name"] == "process_name") {
      EXPECT_EQ(e["args"]["name"], "ranks 0-1 (representative)");
    }
  for (const json& e : events_with_phase(rep, "M"))
    if (e["name"] == "thread_name" && e["tid"] == 2) {
      EXPECT_EQ(e["args"]["name"], "ddp");
    }
}

TEST(ChromeTrace, SlicesOnOneThreadNestOrAreDisjoint) {
  // The all_gather moves behind the all_reduce [3.5,5) on ddp and is issued at 4, before that one
  // ended: its wait slice must start at 5, not 4, or it would partially overlap the all_reduce.
  Program p = program();
  p.ops[3].stream = 1;
  RunResult result = full_result();
  result.timings[0][3] = {4, 5.5, 6};
  const json trace = json::parse(chrome_trace(p, result));
  const json* wait = find_slice(trace, "wait all_gather", 0);
  ASSERT_NE(wait, nullptr);
  EXPECT_EQ(ns((*wait)["ts"]), 5'000'000'000);
  std::map<std::pair<int, int>, std::vector<std::pair<std::int64_t, std::int64_t>>> by_thread;
  for (const json& e : events_with_phase(trace, "X"))
    by_thread[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]));
  for (auto& [thread, slices] : by_thread) {
    // Longest first among equal starts, so a parent precedes its children.
    std::sort(slices.begin(), slices.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<std::int64_t> open;  // ends of the enclosing slices
    for (const auto& [begin, end] : slices) {
      while (!open.empty() && open.back() <= begin) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(end, open.back()) << "partial overlap on pid " << thread.first << " tid " << thread.second << " at "
                                    << begin;
      }
      open.push_back(end);
    }
  }
}

TEST(ChromeTrace, CollectivesCarryKinetoCommArgsAndAWaitSlice) {
  const json trace = json::parse(chrome_trace(program(), full_result()));
  const json* ar = find_slice(trace, "nccl:all_reduce", 1);
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ((*ar)["cat"], "kernel");
  EXPECT_EQ(ns((*ar)["ts"]), 3'500'000'000);
  EXPECT_EQ(ns((*ar)["dur"]), 1'500'000'000);
  const json& args = (*ar)["args"];
  EXPECT_EQ(args["Collective name"], "all_reduce");
  EXPECT_EQ(args["In msg nelems"], 4096);  // 8192 bytes of bfloat16
  EXPECT_EQ(args["Out msg nelems"], 4096);
  EXPECT_EQ(args["Group size"], 2);
  EXPECT_EQ(args["dtype"], "BFloat16");
  EXPECT_EQ(args["Process Group Name"], "dp");
  EXPECT_EQ(args["algorithm"], "ring");
  EXPECT_EQ(args["op id"], 2);
  EXPECT_EQ(args["iteration"], 1);
  EXPECT_EQ(args["phase"], "backward");
  EXPECT_EQ(args["stream"], 2);
  const json* ag = find_slice(trace, "nccl:all_gather", 0);
  ASSERT_NE(ag, nullptr);
  EXPECT_EQ((*ag)["args"]["In msg nelems"], 2048);
  EXPECT_EQ((*ag)["args"]["algorithm"], "direct");
  // Rank 1 issued at 3.5 = start: no wait. Rank 0 issued at 3 and waited 0.5 s for it.
  const json* wait = find_slice(trace, "wait all_reduce", 0);
  ASSERT_NE(wait, nullptr);
  EXPECT_EQ(ns((*wait)["ts"]), 3'000'000'000);
  EXPECT_EQ(ns((*wait)["dur"]), 500'000'000);
  EXPECT_EQ(find_slice(trace, "wait all_reduce", 1), nullptr);
  const json* fwd = find_slice(trace, "fc1.forward", 0);
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ((*fwd)["args"]["flops"], 2e9);
  EXPECT_EQ((*fwd)["args"]["bytes"], 4096);
  EXPECT_EQ((*fwd)["args"]["op_class"], "gemm");
  EXPECT_EQ((*fwd)["tid"], 1);
}

TEST(ChromeTrace, IsDeterministic) {
  RunResult other = full_result();
  other.wall_seconds = 42;
  EXPECT_EQ(chrome_trace(program(), full_result()), chrome_trace(program(), other));
}

// A measured run names its source where a simulated one gives its simulated rank count.
TEST(ChromeTrace, MeasuredRunsNameTheirSource) {
  RunResult r = full_result();
  r.source = "gloo";
  r.mode = "measured";
  r.links.clear();
  const json trace = json::parse(chrome_trace(program(), r));
  EXPECT_EQ(trace["otherData"]["source"], "gloo");
  EXPECT_EQ(trace["otherData"]["recorded_ranks"], 2);
  EXPECT_FALSE(trace["otherData"].contains("simulated_ranks"));
}

}  // namespace
}  // namespace stratsim::core
