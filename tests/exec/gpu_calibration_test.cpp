// stratsim calibrate --gpu (exec/gpu_calibration.hpp): the grid a GPU's memory allows, the preset
// a GPU's name maps to, the platform file written from a measurement (read back by the simulator),
// and the command itself: measuring for real on a GPU, or failing with the reason without one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../cli_support.hpp"
#include "stratsim/exec/backend.hpp"
#include "stratsim/exec/gpu_calibration.hpp"

namespace stratsim::test {
namespace {

using core::DType;

TEST(GpuAxis, StopsWhereThreeOperandsOutgrowAQuarterOfFreeMemory) {
  EXPECT_EQ(exec::gpu_axis(64, 32768, 2, 80e9).size(), 10u);   // 3 x 32768^2 x 4 B = 12.9 GB <= 20 GB
  EXPECT_EQ(exec::gpu_axis(64, 32768, 2, 10e9).back(), 8192);  // 16384: 3.2 GB > 2.5 GB
  EXPECT_EQ(exec::gpu_axis(64, 16384, 4, 80e9), (std::vector<std::int64_t>{64, 256, 1024, 4096, 16384}));
  EXPECT_TRUE(exec::gpu_axis(64, 32768, 2, 1e3).empty());
}

TEST(GpuPreset, ByNameThenByComputeCapability) {
  exec::GpuMeasurement gpu;
  bool guessed = true;
  gpu.name = "NVIDIA H100 80GB HBM3";
  EXPECT_EQ(exec::gpu_preset_for(gpu, guessed), "h100");
  EXPECT_FALSE(guessed);
  gpu.name = "NVIDIA H200";
  EXPECT_EQ(exec::gpu_preset_for(gpu, guessed), "h200");
  gpu.name = "NVIDIA A100-SXM4-80GB";
  EXPECT_EQ(exec::gpu_preset_for(gpu, guessed), "a100");
  gpu.name = "NVIDIA L40S", gpu.compute_major = 8;
  EXPECT_EQ(exec::gpu_preset_for(gpu, guessed), "a100");
  EXPECT_TRUE(guessed);
  gpu.name = "NVIDIA B200", gpu.compute_major = 10;
  EXPECT_EQ(exec::gpu_preset_for(gpu, guessed), "h100");
  gpu.name = "NVIDIA H100 PCIe";  // the preset's part is SXM: flagged
  EXPECT_EQ(exec::gpu_preset_for(gpu, guessed), "h100");
  EXPECT_TRUE(guessed);
}

// A measurement made up of round numbers: a 2^3 grid whose GEMMs run at 100 + i TFLOP/s.
exec::GpuCalibration made_up() {
  exec::GpuCalibration c;
  c.host_name = "testhost", c.date = "2026-11-24", c.command = "stratsim calibrate --gpu";
  exec::GpuMeasurement& gpu = c.gpu;
  gpu.name = "NVIDIA H100 80GB HBM3", gpu.compute_major = 9, gpu.multiprocessors = 132;
  gpu.memory_bytes = 79.1 * (1 << 30), gpu.peak_memory_bytes_per_second = 3.35e12;
  gpu.copy_bytes_per_second = 2.68e12, gpu.kernel_floor_seconds = 2.2e-6;
  gpu.axis = {256, 4096};
  for (DType dtype : {DType::bfloat16, DType::float32}) {
    int i = 0;
    for (std::int64_t m : gpu.axis)
      for (std::int64_t n : gpu.axis)
        for (std::int64_t k : gpu.axis) {
          const core::GemmShape shape{m, n, k};
          gpu.gemms[dtype].push_back({shape, shape.flops() / ((100.0 + i++) * 1e12)});
        }
  }
  return c;
}

TEST(GpuPlatformYaml, HoldsTheMeasuredRatesAndTheSimulatorTakesIt) {
  const std::string yaml = exec::gpu_platform_yaml(made_up());
  for (const char* field :
       {"preset: h100\n", "hbm_gib: 79.1\n", "hbm_gbps: 3350\n", "kernel_floor_us: 2.200",
        "elementwise: {memory: 0.800", "      bfloat16:\n", "      float32:\n", "m: [256, 4096]",
        "tflops: [\n          100, 101,\n          102, 103,\n          104, 105,\n          106, 107]"})
    EXPECT_NE(yaml.find(field), std::string::npos) << field << "\n" << yaml;
  const std::string platform = temp_path("gpu.yaml");
  std::ofstream(platform) << yaml;
  const CliRun sim = run_cli("simulate --quiet --model zoo:Net --plan builtin:ddp --platform " + platform, true);
  EXPECT_EQ(sim.code, 0) << sim.out;
  EXPECT_NE(sim.out.find("cost model calibrated NVIDIA H100 80GB HBM3"), std::string::npos) << sim.out;
  std::filesystem::remove(platform);
}

TEST(CalibrateGpuCli, WithoutAGpuFailsWithTheReasonAndWritesNothing) {
  std::string why;
  if (exec::visible_gpus(why) > 0) GTEST_SKIP() << "this host has a GPU: CalibrateGpuCli.QuickOnTheGpu measures it";
  const std::string platform = temp_path("gpu.yaml");
  const CliRun r = run_cli("calibrate --gpu --quiet -o " + platform);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("calibrate --gpu: "), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(platform));
  const CliRun procs = run_cli("calibrate --gpu --procs 2 -o " + platform);
  EXPECT_EQ(procs.code, 2);
  EXPECT_NE(procs.out.find("--procs: Gloo process counts"), std::string::npos) << procs.out;
}

TEST(CalibrateGpuCli, QuickOnTheGpu) {
  std::string why;
  if (exec::visible_gpus(why) == 0) GTEST_SKIP() << "no GPU calibration: no usable CUDA GPU (" << why << ")";
  const std::string platform = temp_path("gpu.yaml");
  const CliRun r = run_cli("calibrate --gpu --quick --quiet -o " + platform, true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("TFLOP/s on a "), std::string::npos) << r.out;  // 5^3 where 12.9 GB are free
  EXPECT_EQ(read_file(platform).find("CUDA graphs could not be captured"), std::string::npos);
  const CliRun sim = run_cli("simulate --quiet --model zoo:Net --plan builtin:ddp --platform " + platform, true);
  EXPECT_EQ(sim.code, 0) << sim.out;
  std::filesystem::remove(platform);
}

}  // namespace
}  // namespace stratsim::test
