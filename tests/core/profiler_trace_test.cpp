// read_profiler_trace on real traces (tests/data/kineto/README.md): a Gloo/CPU trace recorded here
// with PyTorch 2.15 and an NCCL/GPU trace from HTA's fixtures read as the collectives PyTorch ran,
// with the kinds, sizes, groups and steps those runs had; bad files fail in one line naming them.
#include <gtest/gtest.h>

#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../cli_support.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/profiler_trace.hpp"

namespace stratsim::core {
namespace {

using json = nlohmann::json;
using test::temp_path;

const std::string kGloo = std::string(STRATSIM_TEST_DATA) + "/kineto/ddp_simplemlp_gloo";
const std::string kNccl = std::string(STRATSIM_TEST_DATA) + "/kineto/nccl_hta/rank0.json.gz";

struct Expected {
  CollectiveKind kind;
  std::int64_t bytes;
  int step;
};

// DDP(SimpleMLP) on 2 ranks, constructed inside the profiler: what DDP's constructor, the bucket
// rebuild of the second step and one bucket per step issue (zoo:SimpleMLP has 1,896 float32
// parameters: 7,584 bytes; 4 parameters with 6 dims: 12 int64 shapes and strides).
const std::vector<Expected> kDdpCollectives = {
    {CollectiveKind::all_gather, 16, 0},    // parameter count: one int64 per rank
    {CollectiveKind::broadcast, 96, 0},     // parameter shapes and strides
    {CollectiveKind::broadcast, 7584, 0},   // module states
    {CollectiveKind::all_reduce, 7584, 0},  // bucket 0
    {CollectiveKind::broadcast, 20, 1},     // rebuilt bucket indices: 4 parameters + 1, int32
    {CollectiveKind::broadcast, 4, 1},      // rebuilt bucket sizes
    {CollectiveKind::all_reduce, 7584, 1}, {CollectiveKind::all_reduce, 7584, 2},
};

// CommDebugMode's keys for them: the c10d calls that enqueued each Gloo collective.
const std::vector<std::string> kDdpKeys = {"c10d.allgather_", "c10d.broadcast_", "c10d.broadcast_", "c10d.allreduce_",
                                           "c10d.broadcast_", "c10d.broadcast_", "c10d.allreduce_", "c10d.allreduce_"};

TEST(ProfilerTrace, AGlooTraceReadsAsTheCollectivesDdpIssued) {
  const ProfilerTrace trace = read_profiler_trace({kGloo});
  ASSERT_EQ(trace.world_size, 2);
  ASSERT_EQ(trace.ranks.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const RankTrace& rank = trace.ranks[r];
    EXPECT_EQ(rank.rank, r);
    EXPECT_EQ(rank.backend, "gloo");
    ASSERT_EQ(rank.steps.size(), 3u);
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ(rank.steps[s].number, s);
      EXPECT_LT(rank.steps[s].start, rank.steps[s].end);
    }
    ASSERT_EQ(rank.collectives.size(), kDdpCollectives.size());
    for (std::size_t i = 0; i < kDdpCollectives.size(); ++i) {
      const TraceCollective& c = rank.collectives[i];
      SCOPED_TRACE("rank " + std::to_string(r) + " collective " + std::to_string(i) + " (" + c.name + ")");
      ASSERT_TRUE(c.kind.has_value());
      EXPECT_EQ(*c.kind, kDdpCollectives[i].kind);
      EXPECT_EQ(c.bytes, kDdpCollectives[i].bytes);
      EXPECT_EQ(c.step, kDdpCollectives[i].step);
      EXPECT_EQ(c.group, (std::vector<int>{0, 1}));
      EXPECT_EQ(c.group_size, 2);
      EXPECT_EQ(c.comm_key, kDdpKeys[i]);
      // the c10d call enqueues it, a Gloo worker thread runs it
      EXPECT_LE(c.issued, c.start);
      EXPECT_LT(c.start, c.end);
      EXPECT_NE(rank.streams[c.stream].find("pt_gloo_runloop"), std::string::npos) << rank.streams[c.stream];
    }
    // compute: the outermost CPU ops, none of them a c10d call
    EXPECT_GT(rank.activities.size(), 20u);
    for (const TraceActivity& a : rank.activities) EXPECT_EQ(a.name.rfind("c10d::", 0), std::string::npos) << a.name;
  }
  // one clock: both ranks ran the same steps at about the same time (one host)
  EXPECT_NEAR(trace.ranks[0].steps[2].end, trace.ranks[1].steps[2].end, 0.05);
}

TEST(ProfilerTrace, AnNcclTraceReadsItsKernelsWithRecordParamCommsArguments) {
  const ProfilerTrace trace = read_profiler_trace({kNccl});
  ASSERT_EQ(trace.ranks.size(), 1u);
  EXPECT_EQ(trace.world_size, 2);
  const RankTrace& rank = trace.ranks[0];
  EXPECT_EQ(rank.backend, "nccl");
  ASSERT_EQ(rank.steps.size(), 3u);
  EXPECT_EQ(rank.steps[0].number, 4);
  // per step: 2 buffer broadcasts (int8), then 5 bucket all-reduces (float32)
  const std::vector<std::int64_t> buckets = {2049000, 7875584, 6563840, 6637568, 2431040};
  ASSERT_EQ(rank.collectives.size(), 21u);
  for (int s = 0; s < 3; ++s) {
    std::vector<std::int64_t> all_reduce;
    int broadcasts = 0;
    for (const TraceCollective& c : rank.collectives) {
      if (c.step != 4 + s) continue;
      ASSERT_TRUE(c.kind.has_value()) << c.name;
      EXPECT_EQ(c.group, (std::vector<int>{0, 1}));
      EXPECT_EQ(rank.streams[c.stream], "stream 40");
      EXPECT_LT(c.issued, c.start) << "the launch comes before the kernel";
      EXPECT_EQ(c.comm_key, *c.kind == CollectiveKind::all_reduce ? "c10d.allreduce_" : "c10d.broadcast_");
      if (*c.kind == CollectiveKind::all_reduce) {
        EXPECT_EQ(c.dtype, "Float");
        EXPECT_EQ(c.bytes % 4, 0);
        all_reduce.push_back(c.bytes / 4);
      } else {
        EXPECT_EQ(*c.kind, CollectiveKind::broadcast);
        ++broadcasts;
      }
    }
    std::vector<std::int64_t> sorted = all_reduce, expected = buckets;
    std::sort(sorted.begin(), sorted.end());
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(sorted, expected) << "step " << 4 + s;
    EXPECT_EQ(broadcasts, 2);
  }
  // compute kernels and copies on their streams
  EXPECT_GT(rank.activities.size(), 2000u);
}

// --- bad input: one InputError naming the file and what is missing ---

std::string write(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string error_of(const std::vector<std::string>& paths) {
  try {
    read_profiler_trace(paths);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

json minimal_trace(int rank) {
  return {{"distributedInfo", {{"rank", rank}, {"world_size", 2}}},
          {"traceEvents",
           {{{"ph", "X"}, {"cat", "user_annotation"}, {"name", "ProfilerStep#0"}, {"ts", 10.0}, {"dur", 5.0}}}}};
}

TEST(ProfilerTrace, ADocumentThatIsNotAChromeTraceIsNamed) {
  const std::string path = write("not_trace.json", R"({"events": []})");
  const std::string error = error_of({path});
  EXPECT_NE(error.find(path + ": not a PyTorch profiler trace"), std::string::npos) << error;
}

TEST(ProfilerTrace, ATruncatedTraceSaysWhereItEnds) {
  std::ifstream in(kGloo + "/rank0.json");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const std::string path = write("truncated.json", text.substr(0, text.size() / 2));
  const std::string error = error_of({path});
  EXPECT_EQ(error.rfind(path + ": ", 0), 0u) << error;
  EXPECT_NE(error.find("line"), std::string::npos) << error;
}

TEST(ProfilerTrace, ATraceWithoutStepsSaysHowToRecordThem) {
  json trace = minimal_trace(0);
  trace["traceEvents"][0]["name"] = "forward";
  const std::string path = write("no_steps.json", trace.dump());
  const std::string error = error_of({path});
  EXPECT_NE(error.find(path + ": no ProfilerStep#N annotations"), std::string::npos) << error;
  EXPECT_NE(error.find("prof.step()"), std::string::npos) << error;
}

TEST(ProfilerTrace, AnEventOfTheWrongShapeIsNamedByItsPath) {
  json trace = minimal_trace(0);
  trace["traceEvents"].push_back({{"ph", "X"}, {"name", "k"}, {"ts", "soon"}, {"dur", 1}});
  const std::string path = write("bad_event.json", trace.dump());
  EXPECT_NE(error_of({path}).find(path + ": traceEvents[1].ts: expected a number"), std::string::npos)
      << error_of({path});
  trace["traceEvents"][1] = {{"ph", "X"}, {"name", "k"}, {"ts", 1.0}, {"dur", -3.0}};
  std::ofstream(path) << trace.dump();
  EXPECT_NE(error_of({path}).find("traceEvents[1].dur: expected a duration of at least 0"), std::string::npos);
}

// Numbers a trace may hold but no run has: refused with the field, never overflowed.
TEST(ProfilerTrace, RanksTimesAndClocksOutOfRangeAreRefused) {
  json trace = minimal_trace(0);
  trace["distributedInfo"] = {{"rank", 2147483647}};
  const std::string rank = write("huge_rank.json", trace.dump());
  EXPECT_NE(error_of({rank}).find(rank + ": distributedInfo.rank: expected a rank from 0 to 16777215"),
            std::string::npos)
      << error_of({rank});
  trace["distributedInfo"] = {{"rank", 0}, {"world_size", 2147483647}};
  const std::string world = write("huge_world.json", trace.dump());
  EXPECT_NE(error_of({world}).find("distributedInfo.world_size: expected 1 to 16777216 ranks"), std::string::npos);
  trace = minimal_trace(0);
  trace["baseTimeNanoseconds"] = -9223372036854775807LL;
  const std::string base = write("negative_base.json", trace.dump());
  EXPECT_NE(error_of({base}).find(base + ": baseTimeNanoseconds: expected nanoseconds since 1970"), std::string::npos)
      << error_of({base});
  trace = minimal_trace(0);
  trace["traceEvents"].push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", "k"}, {"ts", 1e308}, {"dur", 1e308}});
  const std::string far = write("far_future.json", trace.dump());
  EXPECT_NE(error_of({far}).find("traceEvents[1].ts: expected microseconds within 1e15"), std::string::npos)
      << error_of({far});
}

// A GPU kernel belongs to the step that launched it, even when it runs after that step's CPU span.
TEST(ProfilerTrace, KernelsBelongToTheStepThatLaunchedThem) {
  const auto step = [](int n, double ts) {
    return json{{"ph", "X"},
                {"cat", "user_annotation"},
                {"name", "ProfilerStep#" + std::to_string(n)},
                {"ts", ts},
                {"dur", 100.0}};
  };
  const auto launch = [](int correlation, double ts) {
    return json{{"ph", "X"},
                {"cat", "cuda_runtime"},
                {"name", "cudaLaunchKernel"},
                {"ts", ts},
                {"dur", 1.0},
                {"args", {{"correlation", correlation}}}};
  };
  const auto kernel = [](int correlation, double ts) {
    return json{
        {"ph", "X"}, {"cat", "kernel"}, {"name", "gemm"}, {"pid", 0},
        {"tid", 7},  {"ts", ts},        {"dur", 50.0},    {"args", {{"correlation", correlation}, {"stream", 7}}}};
  };
  json trace = {
      {"distributedInfo", {{"rank", 0}, {"world_size", 1}}},
      {"traceEvents", {step(0, 0), step(1, 200), launch(1, 90), kernel(1, 150), launch(2, 290), kernel(2, 400)}}};
  const std::string path = write("tail_kernels.json", trace.dump());
  const RankTrace rank = read_profiler_trace({path}).ranks.at(0);
  ASSERT_EQ(rank.activities.size(), 2u);
  EXPECT_EQ(rank.activities[0].step, 0);  // ran between the steps
  EXPECT_EQ(rank.activities[1].step, 1);  // ran after the last step's span
}

TEST(ProfilerTrace, FilesMustSayDistinctRanksWithinTheWorld) {
  const std::string a = write("rank_a.json", minimal_trace(0).dump());
  const std::string b = write("rank_b.json", minimal_trace(0).dump());
  EXPECT_NE(error_of({a, b}).find("rank 0 again"), std::string::npos) << error_of({a, b});
  const std::string c = write("rank_c.json", minimal_trace(5).dump());
  EXPECT_NE(error_of({a, c}).find("distributedInfo.rank 5 is past the world size 2"), std::string::npos);
  json unnamed = minimal_trace(0);
  unnamed.erase("distributedInfo");
  const std::string d = write("rank_d.json", unnamed.dump());
  EXPECT_NE(error_of({a, d}).find(d + ": no distributedInfo.rank"), std::string::npos) << error_of({a, d});
  // alone, a file without a rank is rank 0
  EXPECT_EQ(read_profiler_trace({d}).ranks.at(0).rank, 0);
}

TEST(ProfilerTrace, AFolderWithoutTracesAndBrokenGzipAreNamed) {
  const std::string folder = temp_path("empty_traces");
  std::filesystem::create_directories(folder);
  EXPECT_NE(error_of({folder}).find(folder + ": no .json or .json.gz profiler traces"), std::string::npos);
  std::ifstream in(kNccl, std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), {});
  const std::string cut = write("cut.json.gz", gz.substr(0, gz.size() / 2));
  EXPECT_NE(error_of({cut}).find(cut + ": truncated gzip data"), std::string::npos) << error_of({cut});
  std::string corrupt = gz;
  for (std::size_t i = 20; i < 200; ++i) corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5a);
  const std::string bad = write("corrupt.json.gz", corrupt);
  EXPECT_NE(error_of({bad}).find(bad + ": not valid gzip data"), std::string::npos) << error_of({bad});
}

}  // namespace
}  // namespace stratsim::core
