// Runs the real `stratsim` binary: exit codes, one-line errors naming file and field, and no
// partial output on failure.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <thread>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../cli_support.hpp"

namespace {

using stratsim::test::CliRun;

CliRun run(const std::string& args, bool stdout_only = false) { return stratsim::test::run_cli(args, stdout_only); }

std::string data(const std::string& name) { return std::string(STRATSIM_TEST_DATA) + "/" + name; }

int lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

}  // namespace

TEST(Cli, DefaultMainJobPlansTheSeedModelUnderDdp) {
  CliRun r = run("plan");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("rebuilt buckets (gradient-ready order): 3 buckets"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ddp_buckets = 3"), std::string::npos);
}

TEST(Cli, JsonReportHasTheDocumentedFields) {
  CliRun r = run("plan --model zoo:TestModel --plan " + data("seed_fsdp_tp.yaml") + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["counts"]["c10d_functional.reduce_scatter_tensor"], 2);
  EXPECT_EQ(doc["counts"]["c10d_functional.all_gather_into_tensor"], 2);
  EXPECT_EQ(doc["counts"]["c10d_functional.all_reduce"], 1);
  EXPECT_EQ(doc["counts"]["c10d._allgather_base_"], 1);
  EXPECT_EQ(doc["counts"]["c10d._reduce_scatter_base_"], 1);
  const auto& first = doc["iterations"][0]["collectives"][0];
  for (const char* key : {"op", "kind", "group", "ranks", "bytes", "dtype", "phase", "params"})
    EXPECT_TRUE(first.contains(key)) << key;
  EXPECT_EQ(first["kind"], "all_gather");
  EXPECT_EQ(first["bytes"], 752);
  EXPECT_EQ(first["ranks"], nlohmann::json({0, 2}));
  EXPECT_TRUE(doc["memory"].contains("peak"));
}

TEST(Cli, RankOptionShowsThatRanksGroups) {
  CliRun r = run("plan --model zoo:TestModel --plan " + data("seed_fsdp_tp.yaml") + " --json --rank 3");
  ASSERT_EQ(r.code, 0) << r.out;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["coordinate"], nlohmann::json({1, 1}));
  EXPECT_EQ(doc["iterations"][0]["collectives"][0]["ranks"], nlohmann::json({1, 3}));
  EXPECT_EQ(doc["iterations"][0]["collectives"][1]["ranks"], nlohmann::json({2, 3}));
}

TEST(Cli, EmitProgramWritesAParseableProgram) {
  const std::string path = testing::TempDir() + "/program.json";
  std::filesystem::remove(path);
  CliRun r = run("plan --model zoo:Net --plan builtin:ddp --emit-program " + path);
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream in(path);
  auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["format"], "stratsim.program");
  EXPECT_EQ(doc["streams"][0], "compute");
  EXPECT_GT(doc["ops"].size(), 10u);
}

// An output that is a device or a pipe is written in place, never replaced by a renamed file: as
// root, `-o /dev/null` once turned /dev/null into a regular file. A FIFO stands for the device
// here (a reader drains it), so the test cannot damage the machine it runs on.
TEST(Cli, OutputsThatAreNotRegularFilesAreWrittenInPlace) {
  const std::string fifo = testing::TempDir() + "/stratsim-output-fifo";
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string drained;
  std::thread reader([&] {
    std::ifstream in(fifo);
    drained.assign(std::istreambuf_iterator<char>(in), {});
  });
  CliRun r = run("plan --model zoo:Net --plan builtin:ddp --json -o " + fifo + " --emit-program " + fifo + ".program");
  if (!std::filesystem::is_fifo(fifo)) {
    reader.detach();  // it waits on the FIFO that was renamed over; the process's exit ends it
    FAIL() << "the FIFO was replaced by a regular file";
  }
  reader.join();
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(drained.find("\"counts\""), std::string::npos) << drained.substr(0, 200);
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
  std::filesystem::remove(fifo);
  std::filesystem::remove(fifo + ".program");
}

TEST(Cli, SameInputsGiveByteIdenticalOutput) {
  const std::string args = "plan --model zoo:CompositeParamModel --plan builtin:fsdp --json";
  CliRun a = run(args), b = run(args);
  ASSERT_EQ(a.code, 0);
  EXPECT_EQ(a.out, b.out);
}

TEST(Cli, ZooListsTheSeedModels) {
  CliRun r = run("zoo");
  ASSERT_EQ(r.code, 0);
  for (const char* name :
       {"Net", "NetCheckpoint", "SimpleMLP", "WrapperModule", "UnitModule", "CompositeModel", "CompositeParamModel",
        "SaveForwardInputsModel", "MLPModule", "RMSNormPython", "SimpleModel", "TestModel", "gpt", "llama2-7b"})
    EXPECT_NE(r.out.find(name), std::string::npos) << name;
}

TEST(Cli, HelpExitsZero) {
  EXPECT_EQ(run("--help").code, 0);
  EXPECT_EQ(run("plan --help").code, 0);
}

struct BadInput {
  std::string args;
  std::string expected;  // substring of the single error line
};

class CliBadInput : public testing::TestWithParam<BadInput> {};

TEST_P(CliBadInput, OneClearErrorLineAndExitCode2) {
  const BadInput& c = GetParam();
  const std::string output = testing::TempDir() + "/should_not_exist.json";
  std::filesystem::remove(output);
  CliRun r = run(c.args + " -o " + output);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(c.expected), std::string::npos) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_FALSE(std::filesystem::exists(output)) << "partial output left behind";
}

INSTANTIATE_TEST_SUITE_P(
    Inputs, CliBadInput,
    testing::Values(
        BadInput{"plan --plan " + data("bad_syntax.json"), "bad_syntax.json: line 3, column 1: invalid JSON"},
        BadInput{"plan --plan " + data("bad_syntax.yaml"), "bad_syntax.yaml: line 4"},
        BadInput{"plan --plan " + data("unknown_field.json"), "steps[0].replicate.bucket_cap: unknown field"},
        BadInput{"plan --plan " + data("wrong_type.json"),
                 "steps[0].replicate.bucket_cap_mb: expected a number, got the string \"big\""},
        BadInput{"plan --plan " + data("impossible_mesh.json"),
                 "impossible_mesh.json: mesh: mesh shape multiplies to 6 ranks but world_size is 4"},
        BadInput{"plan --model zoo:CompositeModel --plan " + data("replicate_after_fully_shard.json"),
                 "steps[1] (replicate): Cannot apply `replicate()` on a Module already managed by `fully_shard`"},
        BadInput{"plan --plan " + data("bad_device_id.json"),
                 "steps[0] (replicate): Expected device_id to be int or torch.device, but got <class 'list'>"},
        BadInput{"plan --plan " + data("missing_module.json"),
                 "steps[0] (replicate): module \"nope\" is not a submodule of Net"},
        BadInput{"plan --model zoo:SimpleMLP --plan " + data("tp_on_relu.json"),
                 "ColwiseParallel currently only support nn.Linear and nn.Embedding!"},
        BadInput{"plan --model " + data("unknown_module_type.json"), "modules[0].type: unknown module type \"Conv2d\""},
        BadInput{"plan --model " + data("bad_linear.json"),
                 "modules[0].in_features: expected a positive integer up to 2^31, got 0"},
        BadInput{"plan --model " + data("no_such_file.json"), "no_such_file.json: cannot open file"},
        BadInput{"plan --model zoo:Nope", "zoo:Nope: no built-in model \"Nope\""},
        BadInput{"plan --model zoo:gpt:layers=x", "zoo:gpt:layers=x: option layers: expected a positive integer"},
        BadInput{"plan --plan builtin:nope", "builtin:nope: no built-in plan \"nope\""},
        BadInput{"plan --rank 7", "--rank 7 is outside the world of 2 ranks"},
        BadInput{"plan --iterations 0", "--iterations"}, BadInput{"plan --bogus", "--bogus"},
        // Issue 13: versions past the known rules, raw bytes echoed into the line, NaN options.
        BadInput{"plan --plan " + data("future_torch.json"),
                 "future_torch.json: torch_version: stratsim knows PyTorch's rules up to 2.15, got \"99.99\""},
        BadInput{"plan --json --plan " + data("raw_byte.yaml"),
                 "raw_byte.yaml: line 3, column 1: invalid UTF-8 (YAML text must be UTF-8)"},
        BadInput{"run --compute-scale nan", "--compute-scale: expected a finite number > 0, got nan"},
        BadInput{"run --train --atol inf", "--atol: expected a finite number >= 0, got inf"},
        // Refused before the run, not after it.
        BadInput{"run --trace /nonexistent/x", "/nonexistent/x: cannot write file (no directory /nonexistent)"},
        BadInput{"simulate --trace /nonexistent/t.json", "/nonexistent/t.json: cannot write file (no directory"},
        BadInput{"simulate --timeline /", "/: cannot write file (it is a directory)"}));

TEST(Cli, YamlAndJsonModelsAgree) {
  CliRun r = run("plan --model " + data("tiny_model.json") + " --plan builtin:ddp --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["ddp"][0]["param_names"], nlohmann::json({"scale", "fc1.weight", "fc1.bias", "block.0.weight",
                                                          "block.1.weight", "head.weight", "head.bias"}));
}
