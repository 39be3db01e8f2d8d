// `stratsim simulate` and `stratsim platforms` through the real binary: outputs, exit codes,
// one-line errors, and no partial output on failure.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "../cli_support.hpp"
#include "../process_support.hpp"
#include "stratsim/core/model_io.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/planner.hpp"
#include "stratsim/core/run_analysis.hpp"
#include "stratsim/core/timeline.hpp"
#include "stratsim/core/trace.hpp"
#include "stratsim/sim/simulator.hpp"

namespace {

namespace core = stratsim::core;
namespace sim = stratsim::sim;

using stratsim::test::CliRun;
using stratsim::test::read_file;
using stratsim::test::temp_path;

CliRun run(const std::string& args, bool stdout_only = false) { return stratsim::test::run_cli(args, stdout_only); }

std::string data(const std::string& name) { return std::string(STRATSIM_TEST_DATA) + "/" + name; }

// The library run of the same inputs, done in this process: the command must print and write
// exactly what the library computes for the model, plan and platform it was given (or defaults to).
struct LibraryRun {
  core::Program program;
  sim::SimResult result;
  core::Analysis analysis;
  core::Workload workload;
};

LibraryRun library_run(const std::string& model_spec, const std::string& plan_spec, const std::string& platform) {
  const core::Model model = core::load_model(model_spec);
  const core::Plan plan = core::load_plan(plan_spec);
  LibraryRun run;
  run.program = core::plan_training(model, plan).program;
  run.result = sim::simulate(run.program, sim::parse_platform(platform));
  run.workload = core::workload_of(model, plan);
  run.analysis = core::analyse(run.program, run.result, run.workload);
  return run;
}

}  // namespace

// The documented defaults: zoo:Net under builtin:ddp (2 ranks) on one h100 node, 3 iterations.
TEST(SimulateCli, DefaultRunIsNetDdpOnOneH100Node) {
  CliRun r = run("simulate --quiet", true);
  ASSERT_EQ(r.code, 0) << r.out;
  const LibraryRun expected = library_run("zoo:Net", "builtin:ddp", "h100");
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')),
            "stratsim simulate: " + std::to_string(expected.program.ops.size()) + " ops, 3 iterations, world size 2");
  EXPECT_NE(r.out.find("\nmode: representative (1 simulated rank stands for all 2 ranks)\n"), std::string::npos)
      << r.out;
  ASSERT_EQ(expected.analysis.iterations.size(), 3u);
  EXPECT_EQ(r.out, core::text_report(expected.program, expected.result, expected.analysis));
}

// The text report is byte-identical for the same inputs (sim/README.md promises it); the host time
// goes to stderr, and --quiet leaves it out.
TEST(SimulateCli, TheTextReportIsByteIdenticalAndTheHostTimeGoesToStderr) {
  const CliRun a = run("simulate", true), b = run("simulate", true);
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.out.find("simulated in"), std::string::npos) << a.out;
  const CliRun both = run("simulate");
  EXPECT_NE(both.out.find("stratsim simulate: simulated in "), std::string::npos) << both.out;
  EXPECT_EQ(run("simulate --quiet").out.find("simulated in"), std::string::npos);
}

TEST(SimulateCli, WritesReportTraceAndTimeline) {
  const std::string report = temp_path("report.json"), trace = temp_path("trace.json"),
                    timeline = temp_path("timeline.json");
  CliRun r = run("simulate --quiet --model zoo:TestModel --plan builtin:fsdp-tp --platform h100:gpus=4 --json -o " +
                     report + " --trace " + trace + " --timeline " + timeline,
                 true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(r.out.empty()) << r.out;
  const LibraryRun expected = library_run("zoo:TestModel", "builtin:fsdp-tp", "h100:gpus=4");
  const auto doc = nlohmann::json::parse(read_file(report));
  EXPECT_EQ(doc["format"], "stratsim.simulation");
  EXPECT_EQ(doc["iterations"].size(), 3u);  // the default when the plan sets none
  EXPECT_EQ(doc, core::json_report(expected.program, expected.result, expected.analysis));
  const std::string trace_text = read_file(trace);
  EXPECT_TRUE(std::regex_search(trace_text, std::regex("\"rank\":\\s+\\d+"))) << "HTA needs a space after \"rank\":";
  EXPECT_EQ(trace_text, core::chrome_trace(expected.program, expected.result));
  const auto timeline_doc = nlohmann::json::parse(read_file(timeline));
  EXPECT_EQ(timeline_doc["format"], "stratsim.timeline");
  EXPECT_EQ(timeline_doc, core::timeline_json(expected.program, expected.result, expected.workload));
  for (const auto& path : {report, trace, timeline}) std::filesystem::remove(path);
}

TEST(SimulateCli, SameInputsGiveByteIdenticalJson) {
  const std::string args =
      "simulate --quiet --model zoo:Net --plan builtin:ddp-tp --platform h100:nodes=2,gpus=2 --json";
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

// The README's XML example, as a user runs it: it simulates (it used to crash in SimGrid's
// link-load plugin), with the XML's own link names in the report; its JSON byte-identical twice.
TEST(SimulateCli, AnXmlPlatformSimulates) {
  const std::string args = "simulate --quiet --platform " + data("platforms/two_zones.xml");
  const CliRun text = run(args, true);
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("busiest links:"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("left_link_0_UP"), std::string::npos) << text.out;
  const CliRun a = run(args + " --json", true), b = run(args + " --json", true);
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_EQ(a.out, b.out);
}

// SimGrid aborts (xbt_assert) on some XML it parses: the simulation process dies, and the user
// sees one line naming the file with SimGrid's own reason, exit 2, not SimGrid's log and
// backtrace. Inputs found by tests/fuzz/xml_platform_fuzzer.cpp.
TEST(SimulateCli, AnXmlPlatformSimGridAbortsOnIsOneLineNamingTheFile) {
  const std::string regressions = std::string(STRATSIM_SOURCE_DIR) + "/tests/fuzz/regressions/xml_platform/";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"simgrid-aborts-on-duplicate-link.xml", "Link 'l2' declared several times in the platform. (it died: Aborted)"},
      {"simgrid-aborts-on-unknown-routing.xml", "Not a valid model! (it died: Aborted)"},
  };
  for (const auto& [file, reason] : cases) {
    const CliRun r = run("simulate --quiet --platform " + regressions + file);
    EXPECT_EQ(r.code, 2) << r.out;
    // (find, not equality: a sanitizer build may add its own warnings on stderr)
    EXPECT_NE(r.out.find("stratsim: error: " + regressions + file + ": SimGrid could not load the platform: " + reason +
                         "\n"),
              std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("Backtrace"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("CRITICAL"), std::string::npos) << r.out;
  }
}

// A platform SimGrid loads but that has no path between two hosts whose ranks talk: SimGrid's
// network model would abort on the first send (fuzzer finding); stratsim names the file and the
// pair, exit 2.
TEST(SimulateCli, AnXmlPlatformMissingARouteNamesTheFileAndThePair) {
  const std::string file =
      std::string(STRATSIM_SOURCE_DIR) + "/tests/fuzz/regressions/xml_platform/simgrid-aborts-on-a-missing-route.xml";
  const CliRun r = run("simulate --quiet --platform " + file);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("stratsim: error: " + file +
                       ": no route from gpu0 to gpu1: expected a path between every two hosts whose ranks communicate "
                       "(a <route> for each pair under routing=\"Full\")\n"),
            std::string::npos)
      << r.out;
}

// SIGTERM to `simulate` while SimGrid runs in its child: the child dies with it (it used to run on,
// reparented, holding gigabytes).
TEST(SimulateCli, ASignalledSimulateLeavesNoSimulationProcess) {
  const std::string plan = temp_path("long1024.json");
  // FSDP per block on 1,024 GPUs, not folded: about 3 s of simulation per iteration.
  std::ofstream(plan)
      << R"({"world_size": 1024, "steps": [{"fully_shard": {"module": "", "policy": {"module_types": ["TransformerBlock"]}}}]})";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::freopen("/dev/null", "w", stdout);
    ::freopen("/dev/null", "w", stderr);
    ::execl(STRATSIM_BINARY, STRATSIM_BINARY, "simulate", "--quiet", "--model", "zoo:llama2-7b", "--plan", plan.c_str(),
            "--platform", "h100:nodes=128", "--no-fold", "--iterations", "20", nullptr);
    ::_exit(127);
  }
  pid_t simulation = 0;
  for (int i = 0; i < 3000 && simulation == 0; ++i) {  // up to 30 s: a sanitizer build plans slowly
    if (const auto found = stratsim::test::processes::children_of(pid); !found.empty()) simulation = found.front();
    else std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_NE(simulation, 0) << "the simulation process never started";
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));
  bool gone = false;
  for (int i = 0; i < 300 && !gone; ++i) {
    gone = stratsim::test::processes::ended(simulation);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "simulation process " << simulation << " outlived simulate";
  if (!gone) ::kill(simulation, SIGKILL);
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
  for (const std::string& platform : {std::string("nosuch"), std::string("h100:nodes=zero"),
                                      std::string("h100:bogus=1"), data("platforms/does_not_exist.xml")}) {
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
  // An algorithm that cannot run on a group's shape is named with the op and group before anything
  // runs (it aborted SimGrid inside the run before).
  CliRun flat = run("simulate --quiet --platform h100 --algorithm all_reduce=hierarchical");
  EXPECT_EQ(flat.code, 2) << flat.out;
  EXPECT_EQ(flat.out,
            "stratsim: error: hierarchical needs at least 2 nodes with at least 2 members each (got 1 node(s) of 2) "
            "(op 11 \"all_reduce ddp bucket 0\", group world)\n");
  CliRun across = run("simulate --quiet --platform a100:gpus=2,nodes=2 --algorithm all_reduce=nvls_tree");
  EXPECT_EQ(across.code, 2) << across.out;
  EXPECT_NE(across.out.find("algorithm nvls_tree: this platform's switches cannot reduce"), std::string::npos)
      << across.out;
  const std::string ddp4 = temp_path("ddp4.yaml");
  std::ofstream(ddp4) << "world_size: 4\nsteps:\n  - replicate: {module: \"\"}\n";
  CliRun tree = run("simulate --plan " + ddp4 + " --platform h100:gpus=2,nodes=2 --algorithm all_reduce=NVLSTree");
  EXPECT_EQ(tree.code, 0) << tree.out;
  EXPECT_NE(tree.out.find("nvls_tree/Simple"), std::string::npos) << tree.out;
}

TEST(PlatformsCli, ListsPresetsAndDescribesOne) {
  CliRun list = run("platforms");
  ASSERT_EQ(list.code, 0) << list.out;
  // One line per preset, "  NAME  description", in the documented order.
  std::vector<std::string> presets;
  const std::regex preset_line("\n  ([a-z0-9]+) +[A-Z]");
  for (auto it = std::sregex_iterator(list.out.begin(), list.out.end(), preset_line); it != std::sregex_iterator();
       ++it)
    presets.push_back((*it)[1]);
  EXPECT_EQ(presets, (std::vector<std::string>{"a100", "h100", "h200", "cpu"})) << list.out;
  // The preset's documented figures (sim/README.md): NVLink 0.3 us per link, so 0.6 us GPU to GPU;
  // same leaf = NIC 1.25 + leaf switch 0.13 + NIC 1.25 = 2.63 us; across leaves adds the spine and
  // a second leaf switch: 2.63 + 2 x 0.13 = 2.89 us.
  CliRun one = run("platforms h100:nodes=4");
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_EQ(one.out,
            "4 x 8 H100-SXM5-80GB, NVLink 450 GB/s, 1 NIC/GPU 50 GB/s, fat-tree 1:1 (4 nodes per leaf; 989.4 TFLOP/s "
            "bf16, HBM 3350 GB/s, 80 GiB; latency NVLink 0.6 us, same leaf 2.63 us, across leaves 2.89 us; collective "
            "overhead 5 us; cost model h100 (published))\n");
}
