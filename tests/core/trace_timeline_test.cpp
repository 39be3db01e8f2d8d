// trace_timeline on the real fixtures (tests/data/kineto): the trace becomes a timeline whose
// collectives are the trace's, one per rank per collective, whose run analyses and survives the
// timeline format's round trip, and whose ranks line up event by event.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "../cli_support.hpp"
#include "stratsim/core/run_analysis.hpp"
#include "stratsim/core/timeline.hpp"
#include "stratsim/core/trace_timeline.hpp"

namespace stratsim::core {
namespace {

const std::string kGloo = std::string(STRATSIM_TEST_DATA) + "/kineto/ddp_simplemlp_gloo";
const std::string kNccl = std::string(STRATSIM_TEST_DATA) + "/kineto/nccl_hta/rank0.json.gz";

int collective_ops(const Program& program) {
  int n = 0;
  for (const ProgramOp& op : program.ops) n += op.type == OpType::collective;
  return n;
}

TEST(TraceTimeline, AGlooTraceBecomesATimelineOfItsCollectivesAndCpuOps) {
  const ProfilerTrace trace = read_profiler_trace({kGloo});
  const TraceTimeline t = trace_timeline(trace);
  const Program& program = t.timeline.program;
  const RunResult& result = t.timeline.result;
  EXPECT_EQ(program.world_size, 2);
  EXPECT_EQ(program.iterations, 3);
  EXPECT_EQ(t.first_step, 0);
  EXPECT_EQ(collective_ops(program), 8);
  ASSERT_EQ(result.recorded, (std::vector<std::vector<int>>{{0}, {1}}));
  // every collective of every rank became an op, the same op on both ranks (SPMD)
  for (std::size_t slot = 0; slot < 2; ++slot)
    for (std::size_t i = 0; i < t.collective_ops[slot].size(); ++i) {
      const int id = t.collective_ops[slot][i];
      ASSERT_GE(id, 0);
      EXPECT_EQ(program.ops[id].type, OpType::collective);
      EXPECT_EQ(program.ops[id].bytes, trace.ranks[slot].collectives[i].bytes);
      EXPECT_EQ(result.timings[slot][id].end, trace.ranks[slot].collectives[i].end);
    }
  // one instance per collective, both ranks in it
  ASSERT_EQ(result.collectives.size(), 8u);
  for (const CollectiveRun& run : result.collectives) EXPECT_EQ(run.ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(program.ops[t.collective_ops[0][3]].comm_key, "c10d.allreduce_");
  // it analyses, and the timeline format carries it unchanged
  const Analysis analysis = analyse(program, result, {});
  ASSERT_EQ(analysis.iterations.size(), 3u);
  EXPECT_GT(analysis.ranks[0].communication, 0);
  EXPECT_GT(analysis.ranks[0].compute, 0);
  const Timeline back = timeline_from_json(timeline_json(program, result), "trace.json");
  EXPECT_EQ(back.program.ops.size(), program.ops.size());
  EXPECT_DOUBLE_EQ(analyse(back.program, back.result, {}).makespan, analysis.makespan);
}

TEST(TraceTimeline, AnNcclTraceNumbersItsProfiledStepsFromOne) {
  const TraceTimeline t = trace_timeline(read_profiler_trace({kNccl}));
  EXPECT_EQ(t.first_step, 4);
  EXPECT_EQ(t.timeline.program.iterations, 3);
  EXPECT_EQ(collective_ops(t.timeline.program), 21);
  ASSERT_EQ(t.timeline.result.mode_notes.size(), 1u);
  EXPECT_EQ(t.timeline.result.mode_notes[0], "ProfilerStep#4-6 as iterations 1-3");
  int per_iteration[3] = {0, 0, 0};
  for (const ProgramOp& op : t.timeline.program.ops)
    if (op.type == OpType::collective) ++per_iteration[op.iteration - 1];
  EXPECT_EQ(per_iteration[0], 7);
  EXPECT_EQ(per_iteration[1], 7);
  EXPECT_EQ(per_iteration[2], 7);
  EXPECT_NO_THROW(timeline_from_json(timeline_json(t.timeline.program, t.timeline.result), "nccl.json"));
}

// Gloo gives each collective to whichever worker thread is free: on one rank the second of two
// broadcasts may start first. Both ranks issued them in the same order, and that order lines
// them up: each op carries one collective of the same size on every rank.
TEST(TraceTimeline, CollectivesLineUpInIssueOrderWhicheverWorkerStartedFirst) {
  ProfilerTrace trace = read_profiler_trace({kGloo});
  TraceCollective &first = trace.ranks[1].collectives[4], &second = trace.ranks[1].collectives[5];
  ASSERT_NE(first.bytes, second.bytes);  // the bucket rebuild's indices and sizes
  std::swap(first.start, second.start);
  std::swap(first.end, second.end);
  ASSERT_GT(first.start, second.start);
  const TraceTimeline t = trace_timeline(trace);
  for (std::size_t slot = 0; slot < 2; ++slot)
    for (std::size_t i = 0; i < trace.ranks[slot].collectives.size(); ++i)
      EXPECT_EQ(t.timeline.program.ops[t.collective_ops[slot][i]].bytes, trace.ranks[slot].collectives[i].bytes)
          << "rank " << slot << " collective " << i;
}

// A step's GPU work that outlives its CPU span stays in its iteration, so iterations end in order
// and the first does not stretch over the whole run (iteration_end once read the makespan).
TEST(TraceTimeline, TailKernelsStayInTheirIterations) {
  ProfilerTrace trace = read_profiler_trace({kNccl});
  const TraceTimeline t = trace_timeline(trace);
  const auto& ends = t.timeline.result.iteration_end;
  ASSERT_EQ(ends.size(), 3u);
  EXPECT_LT(ends[0], ends[1]);
  EXPECT_LT(ends[1], ends[2]);
  EXPECT_LT(ends[0], t.timeline.result.makespan * 0.5);
  const Analysis analysis = analyse(t.timeline.program, t.timeline.result, {});
  for (const IterationStats& it : analysis.iterations) EXPECT_GT(it.step_time, 0.1) << it.iteration;  // ~220 ms steps
}

TEST(TraceTimeline, RanksWithFewerEventsArePaddedAndSaySo) {
  ProfilerTrace trace = read_profiler_trace({kGloo});
  trace.ranks[1].collectives.pop_back();  // rank 1 lost its last all-reduce
  const TraceTimeline t = trace_timeline(trace);
  EXPECT_EQ(collective_ops(t.timeline.program), 8);
  const int last = t.collective_ops[0].back();
  const OpTiming& padded = t.timeline.result.timings[1][last];
  EXPECT_EQ(padded.start, padded.end);
  ASSERT_FALSE(t.timeline.result.notes.empty());
  EXPECT_NE(t.timeline.result.notes[0].find("1 event positions some ranks lack"), std::string::npos)
      << t.timeline.result.notes[0];
}

// A process group that names a rank twice is no group: the reader reads it as unknown, and a trace
// built in code with such a group still gives a timeline whose group sizes fit its world (the
// timeline format refuses a group larger than the world; the fuzzer found one).
TEST(TraceTimeline, AGroupNamingARankTwiceCountsAsUnknown) {
  nlohmann::json rank0;
  std::ifstream(kGloo + "/rank0.json") >> rank0;
  rank0["distributedInfo"]["pg_config"][0]["ranks"] = {0, 1, 1};
  const std::string edited = test::temp_path("rank0_group_twice.json");
  std::ofstream(edited) << rank0.dump();
  ProfilerTrace trace = read_profiler_trace({edited, kGloo + "/rank1.json"});
  for (const TraceCollective& c : trace.ranks[0].collectives) EXPECT_TRUE(c.group.empty());
  for (const TraceCollective& c : trace.ranks[1].collectives) EXPECT_EQ(c.group, (std::vector<int>{0, 1}));

  trace.ranks[1].collectives[0].group = {1, 1};
  const TraceTimeline t = trace_timeline(trace);
  for (const CollectiveRun& run : t.timeline.result.collectives) EXPECT_LE(run.group_size, 2);
  const Timeline back = timeline_from_json(timeline_json(t.timeline.program, t.timeline.result), "trace.json");
  EXPECT_EQ(back.result.collectives.size(), t.timeline.result.collectives.size());
}

}  // namespace
}  // namespace stratsim::core
