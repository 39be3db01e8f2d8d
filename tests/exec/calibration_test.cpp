// stratsim calibrate's parts (exec/calibration.hpp): Gloo's cost per kind, the sweep program,
// reading a measured sweep back, the fit (recovering known coefficients), and the command itself
// end to end, its platform file read by the simulator.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "../cli_support.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/exec/calibration.hpp"

namespace stratsim::test {
namespace {

using core::CollectiveKind;

TEST(GlooCost, StepsAndVolumeOfWhatGlooRuns) {
  EXPECT_EQ(exec::gloo_cost(CollectiveKind::all_reduce, 4).steps, 6);  // ring: 2(p-1)
  EXPECT_DOUBLE_EQ(exec::gloo_cost(CollectiveKind::all_reduce, 4).volume, 1.5);
  EXPECT_EQ(exec::gloo_cost(CollectiveKind::all_gather, 4).steps, 3);
  EXPECT_DOUBLE_EQ(exec::gloo_cost(CollectiveKind::all_gather, 4).volume, 0.75);
  EXPECT_EQ(exec::gloo_cost(CollectiveKind::reduce_scatter, 8).steps, 3);  // halving: log2 p
  EXPECT_EQ(exec::gloo_cost(CollectiveKind::broadcast, 4).steps, 1);       // one-to-all
  EXPECT_DOUBLE_EQ(exec::gloo_cost(CollectiveKind::broadcast, 4).volume, 3);
}

// Samples made from known coefficients (with host contention at 4 processes on 2 cores) are fitted
// back exactly, per kind.
TEST(NetworkFit, RecoversKnownCoefficients) {
  const exec::KindFit all_reduce{50e-6, 20e-6, 1 / 2e9}, all_gather{30e-6, 10e-6, 1 / 3e9};
  std::vector<exec::CollectiveSample> samples;
  exec::NetworkFit truth;
  truth.kinds = {{CollectiveKind::all_reduce, all_reduce}, {CollectiveKind::all_gather, all_gather}};
  for (CollectiveKind kind : {CollectiveKind::all_reduce, CollectiveKind::all_gather})
    for (int p : {2, 4})
      for (double bytes : {16384.0, 1048576.0, 16777216.0}) {
        exec::CollectiveSample s{kind, core::DType::float32, p, bytes, 0};
        s.seconds = exec::predict(truth, s, 2);
        samples.push_back(s);
      }
  const exec::NetworkFit fit = exec::fit_network(samples, 2);
  for (const auto& [kind, expected] : truth.kinds) {
    const exec::KindFit& got = fit.kinds.at(kind);
    EXPECT_NEAR(got.overhead, expected.overhead, 1e-9);
    EXPECT_NEAR(got.alpha, expected.alpha, 1e-9);
    EXPECT_NEAR(got.beta / expected.beta, 1, 1e-9);
  }
  EXPECT_LT(fit.mean_abs_error, 1e-9);
  // One process count: steps never vary, so alpha cannot be told from the overhead and is 0.
  std::vector<exec::CollectiveSample> one_count;
  for (const exec::CollectiveSample& s : samples)
    if (s.procs == 2) one_count.push_back(s);
  const exec::NetworkFit flat = exec::fit_network(one_count, 2);
  EXPECT_EQ(flat.kinds.at(CollectiveKind::all_reduce).alpha, 0);
  EXPECT_NEAR(flat.kinds.at(CollectiveKind::all_reduce).overhead, 50e-6 + 2 * 20e-6, 1e-9);
  // Times that do not grow with size (a noisy host): the largest one's time is all transfer.
  const core::DType f32 = core::DType::float32;
  std::vector<exec::CollectiveSample> flat_times = {{CollectiveKind::broadcast, f32, 2, 1e6, 1e-3},
                                                    {CollectiveKind::broadcast, f32, 2, 1e3, 1.1e-3}};
  const exec::KindFit fallback = exec::fit_network(flat_times, 2).kinds.at(CollectiveKind::broadcast);
  EXPECT_EQ(fallback.overhead, 0);
  EXPECT_DOUBLE_EQ(fallback.beta, 1e-3 / 1e6);  // broadcast volume p - 1 = 1
  const std::vector<exec::CollectiveSample> zero = {{CollectiveKind::broadcast, f32, 2, 1e6, 0},
                                                    {CollectiveKind::broadcast, f32, 2, 1e3, 0}};
  EXPECT_THROW(exec::fit_network(zero, 2), core::InputError);
  // Half-precision samples get a fit of their own (Gloo reduces them in software).
  std::vector<exec::CollectiveSample> mixed = {{CollectiveKind::all_reduce, f32, 2, 1e6, 1e-3},
                                               {CollectiveKind::all_reduce, f32, 2, 4e6, 3e-3},
                                               {CollectiveKind::all_reduce, core::DType::float16, 2, 1e6, 2e-3},
                                               {CollectiveKind::all_reduce, core::DType::float16, 2, 4e6, 7e-3}};
  const exec::NetworkFit split = exec::fit_network(mixed, 2);
  EXPECT_NEAR(split.kinds.at(CollectiveKind::all_reduce).beta, 2e-3 / 3e6, 1e-15);       // (3 - 1) ms / 3 MB
  EXPECT_NEAR(split.half_kinds.at(CollectiveKind::all_reduce).beta, 5e-3 / 3e6, 1e-15);  // (7 - 2) ms / 3 MB
}

TEST(Sweep, ProgramAndReadingBack) {
  exec::SweepSpec spec;
  spec.procs = 2;
  spec.sizes = {1024, 65536};
  spec.repeats = 3;
  const core::Program program = exec::sweep_program(spec);
  // 6 series (4 kinds in float32, all-reduce and reduce-scatter in float16) x 2 sizes x
  // (warm-up + 3), then interference (warm-up, 6 all-reduces, 6 compute, 48 all-reduces beside
  // 6 compute) and 6 streaming ops.
  EXPECT_EQ(program.ops.size(), 6u * 2 * 4 + 1 + 6 + 6 + 48 + 6 + 6);
  EXPECT_EQ(program.streams, (std::vector<std::string>{"compute", "comm"}));
  // A synthetic measured run: each timed sweep instance takes (bytes + 1000) ns, compute alone
  // 2 ms and beside the all-reduces 3.1 ms, all-reduces beside compute twice as long. Each stream
  // runs its ops back to back from 0: the 48 all-reduces beside outlast the six compute ops
  // (18.6 ms), and only the first nine (2 ms each) lie inside the compute's window; the rest ran
  // alone (1 ms here) and do not count.
  core::RunResult run;
  run.world_size = 2;
  run.recorded = {{0}, {1}};
  run.timings.assign(2, std::vector<core::OpTiming>(program.ops.size()));
  double comm_clock = 0, compute_clock = 0;
  bool in_beside = false;
  for (const core::ProgramOp& op : program.ops) {
    double seconds = 1e-3;
    if (op.name.rfind("sweep", 0) == 0) seconds = (static_cast<double>(op.bytes) + 1000) * 1e-9;
    if (op.name.rfind("interference compute alone", 0) == 0) seconds = 2e-3;
    if (op.name.rfind("interference compute beside", 0) == 0) seconds = 3.1e-3;
    if (op.name.rfind("interference comm beside", 0) == 0)
      seconds = std::stoi(op.name.substr(op.name.find('#') + 1)) < 9 ? 2e-3 : 1e-3;
    if (op.name.rfind("stream shared", 0) == 0) seconds = 10e-3;
    double& clock = op.type == core::OpType::collective ? comm_clock : compute_clock;
    if (op.name.rfind("interference", 0) == 0 && op.name.find("beside") != std::string::npos) {
      if (!in_beside) comm_clock = compute_clock = 0, in_beside = true;
    }
    for (auto& timings : run.timings) timings[op.id] = {clock, clock, clock + seconds};
    if (op.type == core::OpType::collective)
      run.collectives.push_back({op.id, 0, "gloo ring", 0, 2, clock, clock + seconds, {0, 1}});
    clock += seconds;
  }
  const exec::SweepResult result = exec::read_sweep(spec, program, run);
  ASSERT_EQ(result.samples.size(), 12u);
  EXPECT_EQ(result.samples[8].dtype, core::DType::float16);
  EXPECT_EQ(result.samples[1].kind, CollectiveKind::all_reduce);
  EXPECT_DOUBLE_EQ(result.samples[1].bytes, 65536);
  EXPECT_NEAR(result.samples[1].seconds, (65536 + 1000) * 1e-9, 1e-15);
  EXPECT_NEAR(result.compute_slowdown, 1.55, 1e-9);
  EXPECT_NEAR(result.communication_slowdown, 2.0, 1e-9);  // the nine inside; all 48 would say 1.19
  EXPECT_EQ(result.comm_ops_beside, 9);
  EXPECT_EQ(result.compute_ops_beside, 6);
  EXPECT_DOUBLE_EQ(result.shared_memory_bytes_per_second, 2 * spec.stream_bytes / 10e-3);
  EXPECT_TRUE(result.busy_gemms.empty());  // no axis, no grid
  run.world_size = 4;
  EXPECT_THROW(exec::read_sweep(spec, program, run), core::InputError);
}

// With an axis the sweep opens with the GEMM grid, every rank at once: each shape lined up by a
// small all-reduce, each shape an untimed instance then the repeats, one after another, and the first
// collective of the sweep waits for the last GEMM. Read back: each shape's median over repeats and ranks.
TEST(Sweep, TheGemmGridRunsOnEveryRankBeforeTheCollectives) {
  exec::SweepSpec spec;
  spec.procs = 2;
  spec.sizes = {1024};
  spec.repeats = 1;
  spec.gemm_axis = {32, 64};
  spec.gemm_repeats = 2;
  const core::Program program = exec::sweep_program(spec);
  const int per_shape = 1 + 3;  // line-up all-reduce, warm-up, 2 timed
  EXPECT_EQ(program.ops[0].name, "gemm grid line-up 32x32x32");
  EXPECT_EQ(program.ops[1].name, "warm-up gemm all busy 32x32x32 #");
  EXPECT_EQ(program.ops[1].deps, (std::vector<int>{0}));
  EXPECT_EQ(program.ops[2].name, "gemm all busy 32x32x32 #0");
  EXPECT_EQ(program.ops[per_shape].name, "gemm grid line-up 32x32x64");
  EXPECT_EQ(program.ops[per_shape].deps, (std::vector<int>{per_shape - 1}));  // after the last GEMM
  EXPECT_EQ(program.ops[per_shape + 1].gemms, (std::vector<core::GemmShape>{{32, 32, 64}}));
  const int grid_done = 8 * per_shape - 1;
  EXPECT_EQ(program.ops[grid_done].name, "gemm all busy 64x64x64 #1");
  EXPECT_EQ(program.ops[grid_done + 1].deps, (std::vector<int>{grid_done}));  // the first collective
  EXPECT_TRUE(program.ops[grid_done + 2].deps.empty());
  core::RunResult run;
  run.world_size = 2;
  run.recorded = {{0}, {1}};
  run.timings.assign(2, std::vector<core::OpTiming>(program.ops.size()));
  for (const core::ProgramOp& op : program.ops) {
    // Rank 1 takes twice as long as rank 0; instance #1 twice as long as #0.
    const double base = op.gemms.empty() ? 1e-3 : op.gemms[0].flops() * 1e-9;
    const double instance = op.name.ends_with("#1") ? 2 : 1;
    run.timings[0][op.id] = {0, 0, base * instance};
    run.timings[1][op.id] = {0, 0, 2 * base * instance};
    if (op.type == core::OpType::collective) run.collectives.push_back({op.id, 0, "gloo ring", 0, 2, 0, 1e-3, {0, 1}});
  }
  const exec::SweepResult result = exec::read_sweep(spec, program, run);
  ASSERT_EQ(result.busy_gemms.size(), 8u);
  EXPECT_EQ(result.busy_gemms[1].shape, (core::GemmShape{32, 32, 64}));
  const double flops = core::GemmShape{32, 32, 64}.flops();
  // The median of {1, 2, 2, 4} x flops ns (ranks x instances): 2.
  EXPECT_DOUBLE_EQ(result.busy_gemms[1].seconds, flops * 1e-9 * 2);
}

// The command, quick: it measures this host for real, writes a platform file, and the simulator
// runs a plan on it.
// Each sweep whose processes had a core each measured the GEMM grid with all of them computing: the
// platform lists one grid per process count, ascending, as rates relative to the best one alone
// (here the one shape at 1, 1/2 on 2 processes, 1/4 on 4).
TEST(PlatformYaml, OneBusyGemmGridPerProcessCount) {
  exec::Calibration c;
  const core::GemmShape shape{32, 32, 32};
  c.host.axis = {32};
  c.host.cores = 4;
  c.host.gemm_flops_per_second = 1e9;
  c.host.memory_bytes_per_second = 1e10;
  c.host.gemms = {{shape, shape.flops() / 1e9}};
  c.busy = {{2, {{shape, 2 * shape.flops() / 1e9}}}, {4, {{shape, 4 * shape.flops() / 1e9}}}};
  c.procs = {2, 4};
  c.network.kinds[CollectiveKind::all_reduce] = {1e-5, 1e-6, 1e-9};
  c.host_name = "test", c.date = "today", c.command = "stratsim calibrate";
  const nlohmann::json platform = core::parse_document(exec::platform_yaml(c), "platform.yaml", true);
  const nlohmann::json& table = platform["cost_model"]["compute"]["gemm"]["float32"];
  EXPECT_EQ(table["efficiency"], nlohmann::json::array({1.0}));
  ASSERT_EQ(table["busy"].size(), 2u) << table.dump();
  EXPECT_EQ(table["busy"][0]["ranks"], 2);
  EXPECT_EQ(table["busy"][0]["values"], nlohmann::json::array({0.5}));
  EXPECT_EQ(table["busy"][1]["ranks"], 4);
  EXPECT_EQ(table["busy"][1]["values"], nlohmann::json::array({0.25}));
  // No grid measured: no busy list.
  c.busy.clear();
  EXPECT_FALSE(
      core::parse_document(exec::platform_yaml(c), "platform.yaml", true)["cost_model"]["compute"]["gemm"]["float32"]
          .contains("busy"));
}

TEST(CalibrateCli, QuickWritesAPlatformTheSimulatorTakes) {
  const std::string platform = temp_path("calibrated.yaml");
  const CliRun r = run_cli("calibrate --quick --quiet -o " + platform, true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("stratsim calibrate: wrote " + platform), std::string::npos) << r.out;
  const std::string yaml = read_file(platform);
  for (const char* field : {"preset: cpu", "cores: ", "gflops: ", "host_dram_gbps: ", "per_kind:", "float32:",
                            "compute_slowdown: ", "wholly beside the other kind"})
    EXPECT_NE(yaml.find(field), std::string::npos) << field;
  // --quick sweeps 2 processes: with a core each they measure the grid again, all at once.
  if (std::thread::hardware_concurrency() >= 2) {
    EXPECT_NE(yaml.find("busy:\n          - ranks: 2\n            values: ["), std::string::npos) << yaml;
  }
  const CliRun sim = run_cli("simulate --quiet --model zoo:Net --plan builtin:ddp --platform " + platform, true);
  ASSERT_EQ(sim.code, 0) << sim.out;
  EXPECT_NE(sim.out.find("cost model calibrated on"), std::string::npos) << sim.out;
  EXPECT_NE(sim.out.find("ring/gloo"), std::string::npos) << sim.out;  // the fitted per-kind costs ran
  EXPECT_NE(yaml.find("all_reduce/float16:"), std::string::npos);
  EXPECT_NE(yaml.find("all_reduce/bfloat16:"), std::string::npos);
  std::filesystem::remove(platform);
}

TEST(CalibrateCli, BadArgumentsFailBeforeMeasuring) {
  const CliRun odd = run_cli("calibrate --quick --procs 3 -o " + temp_path("x.yaml"));
  EXPECT_EQ(odd.code, 2);
  EXPECT_NE(odd.out.find("--procs 3: expected a power of two"), std::string::npos) << odd.out;
  const CliRun nowhere = run_cli("calibrate --quick -o /nonexistent-dir/x.yaml");
  EXPECT_EQ(nowhere.code, 2);
  EXPECT_NE(nowhere.out.find("no such directory"), std::string::npos) << nowhere.out;
}

// --nccl-tests reads measurements made elsewhere: bad input exits 2 with one line and writes nothing.
TEST(CalibrateCli, NcclTestsInputErrors) {
  const std::string data = std::string(STRATSIM_TEST_DATA) + "/nccl_tests/";
  const std::string out = temp_path("nccl-tests-bad.yaml");
  std::filesystem::remove(out);
  const CliRun kind = run_cli("calibrate --nccl-tests allreduce=" + data + "h100_2nodes_all_reduce.txt -o " + out);
  EXPECT_EQ(kind.code, 2);
  EXPECT_NE(kind.out.find("expected KIND=FILE, KIND one of all_reduce, all_gather, reduce_scatter, broadcast, "
                          "all_to_all"),
            std::string::npos)
      << kind.out;
  const CliRun twice = run_cli("calibrate --nccl-tests all_reduce=" + data +
                               "h100_2nodes_all_reduce.txt --nccl-tests "
                               "all_reduce=" +
                               data + "h100_2nodes_all_reduce.txt -o " + out);
  EXPECT_EQ(twice.code, 2);
  EXPECT_NE(twice.out.find("all_reduce on 16 ranks and 2 node(s) is measured twice"), std::string::npos) << twice.out;
  const CliRun gpu =
      run_cli("calibrate --gpu --nccl-tests all_reduce=" + data + "h100_2nodes_all_reduce.txt -o " + out);
  EXPECT_EQ(gpu.code, 2);
  EXPECT_NE(gpu.out.find("it takes no --gpu, --quick or --procs"), std::string::npos) << gpu.out;
  const CliRun not_output =
      run_cli("calibrate --nccl-tests all_gather=" + data + "../cost_models/partial.yaml -o " + out);
  EXPECT_EQ(not_output.code, 2);
  EXPECT_NE(not_output.out.find("expected nccl-tests' standard output"), std::string::npos) << not_output.out;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace stratsim::test
