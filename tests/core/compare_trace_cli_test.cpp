// `stratsim compare` against real PyTorch profiler traces (tests/data/kineto): the simulation of
// the model and plan the trace ran matches every collective; a plan that differs is reported
// collective by collective, not refused; inputs that cannot be compared op by op fail with status 2.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../cli_support.hpp"

namespace {

using json = nlohmann::json;
using stratsim::test::read_file;
using stratsim::test::run_cli;
using stratsim::test::temp_path;

const std::string kGloo = std::string(STRATSIM_TEST_DATA) + "/kineto/ddp_simplemlp_gloo";

// The simulation of what record_gloo_ddp.py ran: DDP(SimpleMLP) on 2 CPU processes, 3 steps.
std::string simulate(const std::string& name, const std::string& plan = "builtin:ddp",
                     const std::string& model = "zoo:SimpleMLP") {
  const std::string timeline = temp_path(name);
  const auto r = run_cli("simulate --model " + model + " --plan " + plan +
                         " --iterations 3 --platform cpu:procs=2 --timeline " + timeline + " -o /dev/null");
  EXPECT_EQ(r.code, 0) << r.out;
  return timeline;
}

TEST(CompareTraceCli, TheSimulationOfTheTracedRunMatchesEveryCollective) {
  const std::string timeline = simulate("ddp_sim.json");
  const auto r = run_cli("compare " + timeline + " " + kGloo + " --json", true);
  ASSERT_EQ(r.code, 0) << r.out;
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["format"], "stratsim.op_comparison");
  EXPECT_EQ(doc["predicted_compared"], 16);
  EXPECT_EQ(doc["measured_compared"], 16);
  EXPECT_EQ(doc["matched"].size(), 16u);
  EXPECT_TRUE(doc["unmatched"].empty()) << doc["unmatched"].dump(2);
  EXPECT_EQ(doc["iterations"].size(), 3u);
  EXPECT_EQ(doc["alignment"], "by number: iterations 1-3");
  for (const json& m : doc["matched"]) {
    EXPECT_EQ(m["iteration"], m["measured_iteration"]);
    EXPECT_GT(m["measured_s"].get<double>(), 0);
    EXPECT_EQ(m["group"], json::array({0, 1}));
  }
  EXPECT_EQ(doc["overall"]["count"], 16);
  EXPECT_EQ(doc["steps"].size(), 3u);

  // the files named one by one read the same as their folder
  const auto files = run_cli("compare " + timeline + " " + kGloo + "/rank0.json " + kGloo + "/rank1.json --json", true);
  ASSERT_EQ(files.code, 0) << files.out;
  EXPECT_EQ(json::parse(files.out)["matched"], doc["matched"]);

  const auto text = run_cli("compare " + timeline + " " + kGloo, true);
  ASSERT_EQ(text.code, 0);
  EXPECT_NE(text.out.find("matched 16 collectives: 16 of 16 predicted, 16 of 16 measured (0 unmatched)"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("by kind and size:"), std::string::npos);
}

TEST(CompareTraceCli, AnotherModelIsReportedCollectiveByCollective) {
  // net1 30 wide instead of 32: the same collectives, but the gradient bucket and the module
  // states are 7,112 bytes instead of 7,584; the parameter count and shapes and the bucket
  // rebuild's broadcasts are the same size.
  const std::string model = temp_path("narrow_mlp.json");
  std::ofstream(model) << R"({"name": "NarrowMLP", "modules": [
      {"name": "net1", "type": "Linear", "in_features": 50, "out_features": 30}, {"name": "relu", "type": "ReLU"},
      {"name": "net2", "type": "Linear", "in_features": 30, "out_features": 8}]})";
  const std::string timeline = simulate("narrow_sim.json", "builtin:ddp", model);
  const auto r = run_cli("compare " + timeline + " " + kGloo + " --json", true);
  ASSERT_EQ(r.code, 0) << r.out;
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["matched"].size(), 8u);     // per rank: count, shapes, 2 rebuild broadcasts
  ASSERT_EQ(doc["unmatched"].size(), 16u);  // per rank and side: module states, 3 bucket all-reduces
  for (const json& u : doc["unmatched"]) {
    const std::string reason = u["reason"];
    EXPECT_NE(reason.find("bytes differ (predicted 6.95 KiB (7,112 B), measured 7.41 KiB (7,584 B))"),
              std::string::npos)
        << reason;
  }
}

TEST(CompareTraceCli, InputsThatCannotBeComparedOpByOpFailWithStatus2) {
  const std::string timeline = simulate("ddp_sim_for_errors.json");
  const std::string report = temp_path("ddp_report.json");
  ASSERT_EQ(
      run_cli("simulate --model zoo:SimpleMLP --plan builtin:ddp --platform cpu:procs=2 --json -o " + report).code, 0);
  auto r = run_cli("compare " + report + " " + kGloo);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find(report + ": a run report has no per-collective times"), std::string::npos) << r.out;

  const std::string program = temp_path("ddp_program.json");
  ASSERT_EQ(run_cli("plan --model zoo:SimpleMLP --plan builtin:ddp --emit-program " + program + " -o /dev/null").code,
            0);
  r = run_cli("compare " + program + " " + kGloo);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find(program + ": a program has no times to compare"), std::string::npos) << r.out;

  const std::string not_trace = temp_path("not_a_trace.json");
  std::ofstream(not_trace) << R"({"hello": 1})";
  const std::string out = temp_path("compare_out.txt");
  r = run_cli("compare " + timeline + " " + not_trace + " " + not_trace + " -o " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find(not_trace + ": not a PyTorch profiler trace"), std::string::npos) << r.out;
  EXPECT_FALSE(std::ifstream(out).good()) << "no partial output";
}

}  // namespace
