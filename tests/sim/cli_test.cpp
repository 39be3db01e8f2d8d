// `stratsim simulate` and `stratsim platforms` through the real binary: outputs, exit codes,
// one-line errors, and no partial output on failure.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "../cli_support.hpp"

namespace {

using stratsim::test::CliRun;
using stratsim::test::read_file;
using stratsim::test::temp_path;

CliRun run(const std::string& args, bool stdout_only = false) { return stratsim::test::run_cli(args, stdout_only); }

std::string data(const std::string& name) { return std::string(STRATSIM_TEST_DATA) + "/" + name; }

}  // namespace

TEST(SimulateCli, DefaultRunReportsStepTimeAndOverlap) {
  CliRun r = run("simulate --quiet");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("overlap"), std::string::npos) << r.out;
}

TEST(SimulateCli, WritesReportTraceAndTimeline) {
  const std::string report = temp_path("report.json"), trace = temp_path("trace.json"), timeline = temp_path("timeline.json");
  CliRun r = run("simulate --quiet --model zoo:TestModel --plan builtin:fsdp-tp --platform h100:gpus=4 --json -o " + report +
                 " --trace " + trace + " --timeline " + timeline,
                 true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(r.out.empty()) << r.out;
  const auto doc = nlohmann::json::parse(read_file(report));
  EXPECT_EQ(doc["format"], "stratsim.simulation");
  EXPECT_FALSE(doc["iterations"].empty());
  const std::string trace_text = read_file(trace);
  EXPECT_TRUE(std::regex_search(trace_text, std::regex("\"rank\":\\s+\\d+"))) << "HTA needs a space after \"rank\":";
  EXPECT_FALSE(nlohmann::json::parse(trace_text)["traceEvents"].empty());
  EXPECT_EQ(nlohmann::json::parse(read_file(timeline))["format"], "stratsim.timeline");
  for (const auto& path : {report, trace, timeline}) std::filesystem::remove(path);
}

TEST(SimulateCli, SameInputsGiveByteIdenticalJson) {
  const std::string args = "simulate --quiet --model zoo:Net --plan builtin:ddp-tp --platform h100:nodes=2,gpus=2 --json";
  const CliRun a = run(args, true), b = run(args, true);
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_EQ(a.out, b.out);
}

// 128 ranks on 16 nodes fold onto 8; --no-fold simulates all 16 and predicts the same steps.
TEST(SimulateCli, FoldsTheNetworkUnlessToldNotTo) {
  const std::string plan = temp_path("fsdp128.json");
  std::ofstream(plan) << R"({"world_size": 128, "steps": [{"fully_shard": {"module": ""}}]})";
  const std::string args = "simulate --quiet --model zoo:TestModel --plan " + plan + " --platform h100:nodes=16 --json";
  const CliRun folded = run(args, true), unfolded = run(args + " --no-fold", true);
  ASSERT_EQ(folded.code, 0) << folded.out;
  ASSERT_EQ(unfolded.code, 0) << unfolded.out;
  const auto a = nlohmann::json::parse(folded.out), b = nlohmann::json::parse(unfolded.out);
  EXPECT_EQ(a["folded_nodes"], 8);
  EXPECT_EQ(b["folded_nodes"], 0);
  EXPECT_EQ(a["iterations"], b["iterations"]);
  EXPECT_EQ(a["collectives"], b["collectives"]);
  std::filesystem::remove(plan);
}

TEST(SimulateCli, MoreRanksThanDevicesFailsClearly) {
  const std::string trace = temp_path("never.json");
  CliRun r = run("simulate --quiet --plan builtin:fsdp --model zoo:TestModel --platform h100:gpus=2 --trace " + trace);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("stratsim: error: platform \"h100:gpus=2\" has 2 devices but the plan needs 4 ranks"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(trace));
}

TEST(SimulateCli, BadPlatformsFailWithExitCode2) {
  for (const std::string& platform : {std::string("nosuch"), std::string("h100:nodes=zero"), std::string("h100:bogus=1"),
                                      data("platforms/does_not_exist.xml")}) {
    CliRun r = run("simulate --quiet --platform " + platform);
    EXPECT_EQ(r.code, 2) << platform << ": " << r.out;
    EXPECT_NE(r.out.find("stratsim: error: "), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
}

TEST(SimulateCli, BadAlgorithmAndStragglerOptions) {
  EXPECT_EQ(run("simulate --quiet --algorithm all_gather=tree").code, 2);
  EXPECT_EQ(run("simulate --quiet --algorithm all_reduce=magic").code, 2);
  EXPECT_EQ(run("simulate --quiet --straggler 1").code, 2);
  EXPECT_EQ(run("simulate --quiet --straggler 9=2").code, 2);
  CliRun ok = run("simulate --quiet --straggler 1=2 --algorithm all_reduce=tree");
  EXPECT_EQ(ok.code, 0) << ok.out;
}

TEST(PlatformsCli, ListsPresetsAndDescribesOne) {
  CliRun list = run("platforms");
  ASSERT_EQ(list.code, 0) << list.out;
  for (const char* name : {"a100", "h100", "h200", "cpu"}) EXPECT_NE(list.out.find(name), std::string::npos) << name;
  CliRun one = run("platforms h100:nodes=4");
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_NE(one.out.find("H100"), std::string::npos) << one.out;
}
