// Platforms: preset parsing and errors, description files, the compute model, and the SimGrid
// platforms build_platform() makes (routes, latencies, bandwidths, one exact timed transfer).
//
// SimGrid allows one engine per process, so every test that builds a platform runs in a forked
// child (in_engine); the child's gtest assertions print as usual and its exit code tells the parent.
#include "stratsim/sim/platform.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <simgrid/s4u.hpp>
#include <string>
#include <vector>

#include "stratsim/core/errors.hpp"
#include "stratsim/sim/device.hpp"

namespace stratsim::sim {
namespace {

namespace sg4 = simgrid::s4u;
using core::DType;
using core::InputError;

const std::string kData = std::string(STRATSIM_TEST_DATA) + "/platforms/";

// The InputError message parse_platform(text) throws, or "" when it does not throw.
std::string parse_error(const std::string& text) {
  try {
    parse_platform(text);
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

std::string overrides_error(const std::string& file) {
  ComputeModel model = ComputeModel::defaults();
  try {
    model.apply_overrides(kData + file);
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

// Runs `body` in a forked child owning a configured SimGrid engine. The child exits 0 when
// `body` raised no gtest failure and threw nothing.
void in_engine(const std::function<void(sg4::Engine&)>& body) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0) << "fork failed";
  if (pid == 0) {
    int code = 0;
    try {
      int argc = 1;
      char name[] = "platform_test";
      char* argv[] = {name, nullptr};
      sg4::Engine engine(&argc, argv);
      configure_simgrid(engine);
      body(engine);
      code = ::testing::Test::HasFailure() ? 1 : 0;
    } catch (const std::exception& error) {
      std::fprintf(stderr, "child threw: %s\n", error.what());
      code = 2;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(code);  // no engine teardown, no gtest epilogue in the child
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "child failed: "
      << (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                            : "signal " + std::to_string(WTERMSIG(status)));
}

// A route's links as a sorted list (SimGrid 3.32's Dijkstra zones return a route's links out of
// order; only the set matters to the simulation), their bandwidths, and the route latency.
struct Route {
  std::vector<std::string> links;
  std::map<std::string, double> bandwidth;
  double latency = 0;
};

Route route(const sg4::Host* from, const sg4::Host* to) {
  std::vector<sg4::Link*> links;
  Route r;
  from->route_to(to, links, &r.latency);
  for (const sg4::Link* link : links) {
    r.links.push_back(link->get_name());
    r.bandwidth[link->get_name()] = link->get_bandwidth();
  }
  std::sort(r.links.begin(), r.links.end());
  return r;
}

std::vector<std::string> sorted(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  return names;
}

sg4::Host* host(const BuiltPlatform& built, const std::string& name) {
  for (sg4::Host* h : built.devices)
    if (h->get_name() == name) return h;
  ADD_FAILURE() << "no device " << name;
  return built.devices.front();
}

// ---------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------

TEST(PlatformParse, PresetsHaveDatasheetFigures) {
  const PlatformSpec h100 = parse_platform("h100");
  EXPECT_EQ(h100.kind, PlatformKind::node);
  EXPECT_EQ(h100.name, "h100");
  EXPECT_EQ(h100.preset, "h100");
  EXPECT_EQ(h100.device.name, "H100-SXM5-80GB");
  EXPECT_EQ(h100.device_count(), 8);
  EXPECT_DOUBLE_EQ(h100.device.peak_for(DType::bfloat16), 989.4e12);
  EXPECT_DOUBLE_EQ(h100.device.peak_for(DType::float16), 989.4e12);
  EXPECT_DOUBLE_EQ(h100.device.peak_for(DType::float32), 67e12);
  EXPECT_DOUBLE_EQ(h100.device.peak_for(DType::float64), 34e12);
  EXPECT_DOUBLE_EQ(h100.device.peak_for(DType::int64), 67e12);  // falls back to float32
  EXPECT_DOUBLE_EQ(h100.device.memory_bandwidth, 3.35e12);
  EXPECT_DOUBLE_EQ(h100.nvlink_bandwidth, 450e9);
  EXPECT_DOUBLE_EQ(h100.nic_bandwidth, 50e9);
  EXPECT_TRUE(h100.nic_per_gpu);
  EXPECT_DOUBLE_EQ(h100.collective_overhead, 5e-6);

  const PlatformSpec a100 = parse_platform("a100");
  EXPECT_DOUBLE_EQ(a100.device.peak_for(DType::bfloat16), 312e12);
  EXPECT_DOUBLE_EQ(a100.device.peak_for(DType::float32), 19.5e12);
  EXPECT_DOUBLE_EQ(a100.device.memory_bandwidth, 2039e9);
  EXPECT_DOUBLE_EQ(a100.nvlink_bandwidth, 300e9);
  EXPECT_DOUBLE_EQ(a100.nic_bandwidth, 25e9);

  const PlatformSpec h200 = parse_platform("h200");
  EXPECT_DOUBLE_EQ(h200.device.memory_bandwidth, 4.8e12);
  EXPECT_DOUBLE_EQ(h200.device.memory_bytes, 150109880320.0);  // what CUDA reports on an H200 SXM
  EXPECT_DOUBLE_EQ(h200.device.peak_for(DType::bfloat16), 989.4e12);

  const PlatformSpec cpu = parse_platform("cpu");
  EXPECT_EQ(cpu.kind, PlatformKind::cpu_host);
  EXPECT_EQ(cpu.device_count(), 4);
  EXPECT_GT(cpu.loopback_bandwidth, 0);
  EXPECT_DOUBLE_EQ(cpu.collective_overhead, 20e-6);
  EXPECT_DOUBLE_EQ(cpu.device.peak_for(DType::bfloat16), cpu.device.peak_for(DType::float32));
}

TEST(PlatformParse, OptionsOverrideEveryField) {
  const PlatformSpec s = parse_platform(
      "H100:nodes=4, gpus=4,nic=node,fabric=spine-leaf,oversub=2,nodes_per_leaf=2,nvlink_gbps=400,nic_gbps=100,"
      "nvlink_lat_us=1,nic_lat_us=2,switch_lat_us=0.5,overhead_us=0,tflops_bf16=900,tflops_fp16=800,tflops_fp32=60,"
      "tflops_fp64=30,hbm_gbps=3000,hbm_gib=96");
  EXPECT_EQ(s.kind, PlatformKind::cluster);
  EXPECT_EQ(s.nodes, 4);
  EXPECT_EQ(s.gpus_per_node, 4);
  EXPECT_EQ(s.device_count(), 16);
  EXPECT_FALSE(s.nic_per_gpu);
  EXPECT_EQ(s.fabric, Fabric::spine_leaf);
  EXPECT_DOUBLE_EQ(s.oversubscription, 2);
  EXPECT_EQ(s.nodes_per_leaf, 2);
  EXPECT_DOUBLE_EQ(s.nvlink_bandwidth, 400e9);
  EXPECT_DOUBLE_EQ(s.nic_bandwidth, 100e9);
  EXPECT_DOUBLE_EQ(s.nvlink_latency, 1e-6);
  EXPECT_DOUBLE_EQ(s.nic_latency, 2e-6);
  EXPECT_DOUBLE_EQ(s.switch_latency, 0.5e-6);
  EXPECT_DOUBLE_EQ(s.collective_overhead, 0);
  EXPECT_DOUBLE_EQ(s.device.peak_for(DType::bfloat16), 900e12);
  EXPECT_DOUBLE_EQ(s.device.peak_for(DType::float16), 800e12);
  EXPECT_DOUBLE_EQ(s.device.peak_for(DType::float32), 60e12);
  EXPECT_DOUBLE_EQ(s.device.peak_for(DType::float64), 30e12);
  EXPECT_DOUBLE_EQ(s.device.memory_bandwidth, 3000e9);
  EXPECT_DOUBLE_EQ(s.device.memory_bytes, 96.0 * (1 << 30));

  EXPECT_EQ(parse_platform("h100:nodes=1").kind, PlatformKind::node);
  EXPECT_EQ(parse_platform("a100:fabric=fat_tree").fabric, Fabric::fat_tree);

  const PlatformSpec cpu = parse_platform(
      "cpu:procs=6,gbps=2,lat_us=10,gflops=400,loopback_gbps=8,dram_gbps=30,"
      "mem_gib=8,overhead_us=50");
  EXPECT_EQ(cpu.kind, PlatformKind::cpu_host);
  EXPECT_EQ(cpu.nodes, 1);
  EXPECT_EQ(cpu.gpus_per_node, 6);
  EXPECT_DOUBLE_EQ(cpu.nvlink_bandwidth, 2e9);
  EXPECT_DOUBLE_EQ(cpu.nvlink_latency, 10e-6);
  EXPECT_DOUBLE_EQ(cpu.device.peak_for(DType::float32), 400e9);
  EXPECT_DOUBLE_EQ(cpu.device.peak_for(DType::float64), 200e9);  // keeps its ratio to float32
  EXPECT_DOUBLE_EQ(cpu.loopback_bandwidth, 8e9);
  EXPECT_DOUBLE_EQ(cpu.device.memory_bandwidth, 30e9);
  EXPECT_DOUBLE_EQ(cpu.collective_overhead, 50e-6);
  EXPECT_DOUBLE_EQ(cpu.device.memory_bytes, 8.0 * (1 << 30));
}

TEST(PlatformParse, ErrorsNameTheOption) {
  EXPECT_EQ(parse_error("tpu"), "unknown platform preset \"tpu\" (known: a100, h100, h200, cpu)");
  EXPECT_EQ(parse_error("tpu:nodes=2"), "unknown platform preset \"tpu\" (known: a100, h100, h200, cpu)");
  EXPECT_EQ(parse_error("h100:nodes=0"), "platform option nodes: expected a positive integer, got \"0\"");
  EXPECT_EQ(parse_error("h100:nodes=2.5"), "platform option nodes: expected a positive integer, got \"2.5\"");
  EXPECT_EQ(parse_error("h100:nodes=abc"), "platform option nodes: expected a positive integer, got \"abc\"");
  EXPECT_EQ(parse_error("h100:gpus=-1"), "platform option gpus: expected a positive integer, got \"-1\"");
  EXPECT_EQ(parse_error("h100:nic=switch"), "platform option nic: expected gpu or node, got \"switch\"");
  EXPECT_EQ(parse_error("h100:fabric=torus"), "platform option fabric: expected fat-tree or spine-leaf, got \"torus\"");
  EXPECT_EQ(parse_error("h100:oversub=0.5"), "platform option oversub: expected a number >= 1, got \"0.5\"");
  EXPECT_EQ(parse_error("h100:nic_gbps=0"), "platform option nic_gbps: expected a positive number, got \"0\"");
  EXPECT_EQ(parse_error("h100:nvlink_gbps="), "platform option nvlink_gbps: expected a positive number, got \"\"");
  EXPECT_EQ(parse_error("h100:hbm_gbps=inf"), "platform option hbm_gbps: expected a positive number, got \"inf\"");
  EXPECT_EQ(parse_error("h100:nic_lat_us=-1"),
            "platform option nic_lat_us: expected a non-negative number, got \"-1\"");
  EXPECT_EQ(parse_error("h100:nodes=2,nodes=3"), "platform option nodes: given more than once");
  EXPECT_NE(parse_error("h100:nodes").find("platform option \"nodes\": expected key=value (options: nodes, gpus"),
            std::string::npos);
  EXPECT_NE(parse_error("h100:").find("expected key=value"), std::string::npos);
  EXPECT_NE(parse_error("h100:procs=4").find("platform option procs: unknown for preset h100 (expected one of: nodes,"),
            std::string::npos);
  EXPECT_NE(parse_error("cpu:nodes=2").find("platform option nodes: unknown for preset cpu (expected one of: procs,"),
            std::string::npos);
  EXPECT_EQ(parse_error("h100:nodes=100000,gpus=100000"),
            "platform option nodes: 100000 nodes x 100000 GPUs = 10000000000 devices; at most 131072 are supported");
  EXPECT_EQ(parse_error("h100:nodes=200,nodes_per_leaf=256"),
            "platform option nodes_per_leaf: 1600 GPUs under one leaf switch; at most 1024 are supported (use smaller "
            "leaves: at oversub=1 the spine keeps them non-blocking)");
  EXPECT_EQ(parse_error("h100:nodes=8193,gpus=1,nodes_per_leaf=2"),
            "platform option nodes_per_leaf: 4097 leaf switches; at most 4096 are supported (use larger leaves)");
  EXPECT_EQ(parse_error("h100:nodes=1,gpus=2000").size(), 0u);  // one node: no leaf
  EXPECT_EQ(parse_error("h100:nodes=3000000000"),
            "platform option nodes: expected a positive integer, got \"3000000000\"");
  EXPECT_NE(parse_error("").find("empty"), std::string::npos);
}

TEST(PlatformParse, DescriptionFiles) {
  const PlatformSpec json = parse_platform(kData + "cluster.json");
  EXPECT_EQ(json.name, kData + "cluster.json");
  EXPECT_EQ(json.kind, PlatformKind::cluster);
  EXPECT_EQ(json.preset, "h100");
  EXPECT_EQ(json.nodes, 4);
  EXPECT_FALSE(json.nic_per_gpu);
  EXPECT_EQ(json.fabric, Fabric::spine_leaf);
  EXPECT_DOUBLE_EQ(json.oversubscription, 2);
  EXPECT_EQ(json.nodes_per_leaf, 2);
  EXPECT_DOUBLE_EQ(json.nic_bandwidth, 100e9);

  const PlatformSpec yaml = parse_platform(kData + "cpu.yaml");
  EXPECT_EQ(yaml.kind, PlatformKind::cpu_host);
  EXPECT_EQ(yaml.device_count(), 8);
  EXPECT_DOUBLE_EQ(yaml.nvlink_bandwidth, 10e9);
  EXPECT_DOUBLE_EQ(yaml.nvlink_latency, 5e-6);

  EXPECT_EQ(parse_error(kData + "bad_key.json"),
            kData +
                "bad_key.json: nodez: unknown field (expected one of: preset, cost_model, nodes, gpus, nic, fabric, "
                "oversub, nodes_per_leaf, nvlink_gbps, nic_gbps, nvlink_lat_us, nic_lat_us, switch_lat_us, "
                "overhead_us, tflops_bf16, tflops_fp16, tflops_fp32, tflops_fp64, hbm_gbps, hbm_gib, power_w, model)");
  EXPECT_EQ(parse_error(kData + "bad_value.yaml"), kData + "bad_value.yaml: oversub: expected a number >= 1, got 0.5");
  EXPECT_EQ(parse_error(kData + "bad_preset.json"),
            kData + "bad_preset.json: preset: unknown platform preset \"tpu-v5\" (known: a100, h100, h200, cpu)");
  EXPECT_EQ(parse_error(kData + "bad_type.json"), kData + "bad_type.json: nic: expected a string, got number 8");
  EXPECT_EQ(parse_error(kData + "missing.json"), kData + "missing.json: cannot open file (No such file or directory)");
  EXPECT_EQ(parse_error(kData + "too_big.yaml"),
            kData + "too_big.yaml: nodes: 100000 nodes x 8 GPUs = 800000 devices; at most 131072 are supported");
}

TEST(PlatformParse, XmlFiles) {
  const PlatformSpec xml = parse_platform(kData + "two_zones.xml");
  EXPECT_EQ(xml.kind, PlatformKind::xml);
  EXPECT_EQ(xml.xml_file, kData + "two_zones.xml");
  EXPECT_EQ(xml.name, kData + "two_zones.xml");
  EXPECT_EQ(parse_error(kData + "missing.xml"), kData + "missing.xml: cannot read platform file");
  EXPECT_EQ(parse_error(kData), "unknown platform preset \"" + kData + "\" (known: a100, h100, h200, cpu)");
}

// Presets match in any case; an unknown name is quoted as written (a directory's path keeps its
// case: a checkout under /tmp/Build.X once read back as /tmp/build.x).
TEST(PlatformParse, PresetNamesIgnoreCaseAndErrorsQuoteTheText) {
  EXPECT_EQ(parse_platform("H100:nodes=2").preset, "h100");
  EXPECT_EQ(parse_error("/Some/Dir/"), "unknown platform preset \"/Some/Dir/\" (known: a100, h100, h200, cpu)");
}

TEST(PlatformParse, Describe) {
  auto starts = [](const std::string& text, const std::string& prefix) {
    EXPECT_EQ(text.substr(0, prefix.size()), prefix);
  };
  starts(
      describe_platform(parse_platform("h100:nodes=2")),
      "2 x 8 H100-SXM5-80GB, NVLink 450 GB/s, 1 NIC/GPU 50 GB/s, fat-tree 1:1 (4 nodes per leaf; 989.4 TFLOP/s bf16");
  starts(describe_platform(parse_platform("a100:nodes=16,nic=node,fabric=spine-leaf,oversub=2")),
         "16 x 8 A100-SXM4-80GB, NVLink 300 GB/s, 1 NIC/node 25 GB/s, spine-leaf 2:1 (4 nodes per leaf;");
  EXPECT_NE(describe_platform(parse_platform("h100:nodes=2")).find("same leaf 2.63 us, across leaves 2.89 us"),
            std::string::npos);
  starts(describe_platform(parse_platform("h200")),
         "1 x 8 H200-SXM-141GB, NVLink 450 GB/s (989.4 TFLOP/s bf16, HBM 4800");
  starts(describe_platform(parse_platform("cpu:procs=2")),
         "2 processes on one CPU host, loopback 5 GB/s per process, 20");
  EXPECT_NE(describe_platform(parse_platform(kData + "two_zones.xml")).find("two_zones.xml"), std::string::npos);

  const std::vector<PresetInfo> presets = platform_presets();
  ASSERT_EQ(presets.size(), 4u);
  EXPECT_EQ(presets[0].name, "a100");
  EXPECT_EQ(presets[3].name, "cpu");
  EXPECT_NE(presets[1].options.find("nodes_per_leaf"), std::string::npos);
  EXPECT_NE(presets[3].options.find("procs"), std::string::npos);
  for (const PresetInfo& preset : presets) EXPECT_FALSE(preset.description.empty());
}

// ---------------------------------------------------------------------------------------------
// Compute model
// ---------------------------------------------------------------------------------------------

core::ProgramOp compute_op(const std::string& op_class, double flops, std::int64_t bytes) {
  core::ProgramOp op;
  op.type = core::OpType::compute;
  op.op_class = op_class;
  op.flops = flops;
  op.bytes_accessed = bytes;
  op.dtype = DType::bfloat16;
  return op;
}

TEST(ComputeModel, RooflineBothRegimes) {
  const ComputeModel model = ComputeModel::defaults();
  const DeviceSpec h100 = parse_platform("h100").device;
  EXPECT_DOUBLE_EQ(model.launch_overhead(), 2e-6);
  // Math bound: 1e15 FLOPs at 0.75 of 989.4 TFLOP/s; its 1 MB of traffic is negligible.
  EXPECT_DOUBLE_EQ(model.duration(compute_op("gemm", 1e15, 1000000), h100), 1e15 / (989.4e12 * 0.75) + 2e-6);
  // Memory bound: 1 GB at 0.8 of 3.35 TB/s.
  EXPECT_DOUBLE_EQ(model.duration(compute_op("elementwise", 1e9, 1000000000), h100), 1e9 / (3.35e12 * 0.8) + 2e-6);
  // The dtype picks the peak.
  core::ProgramOp fp32 = compute_op("gemm", 1e15, 0);
  fp32.dtype = DType::float32;
  EXPECT_DOUBLE_EQ(model.duration(fp32, h100), 1e15 / (67e12 * 0.75) + 2e-6);
  // Nothing to do: no kernel, no launch cost. Collectives are not compute.
  EXPECT_EQ(model.duration(compute_op("elementwise", 0, 0), h100), 0);
  core::ProgramOp collective = compute_op("gemm", 1e12, 1000);
  collective.type = core::OpType::collective;
  EXPECT_EQ(model.duration(collective, h100), 0);
  // Unknown classes use "other".
  EXPECT_EQ(&model.efficiency("conv3d"), &model.efficiency("other"));
  for (const char* op_class : {"gemm", "attention", "elementwise", "norm", "embedding", "optimizer",
                               "multi_tensor_copy", "cast", "strided_copy", "attention_scores", "other"}) {
    ASSERT_EQ(model.efficiencies().count(op_class), 1u) << op_class;
    EXPECT_GT(model.efficiency(op_class).flops, 0);
    EXPECT_LE(model.efficiency(op_class).memory, 1);
  }
}

// power_w: FLOP-bound work slows by the cost model's factor for that limit (h100: 0.809 at 500 W,
// Meta's figure for its 500 W parts), linear in watts up to the rated 700 W; memory-bound work
// and the kernel floor keep their rates. No figure is extrapolated.
TEST(ComputeModel, PowerLimitSlowsFlopBoundWork) {
  const PlatformSpec rated = parse_platform("h100");
  const PlatformSpec capped = parse_platform("h100:power_w=500");
  const PlatformSpec between = parse_platform("h100:power_w=600");
  const ComputeModel& model = rated.cost.compute;
  EXPECT_DOUBLE_EQ(model.power().flops_factor(500), 0.809);
  EXPECT_DOUBLE_EQ(model.power().flops_factor(600), (0.809 + 1) / 2);
  EXPECT_DOUBLE_EQ(model.power().flops_factor(700), 1);
  core::ProgramOp gemm = compute_op("gemm", 2.0 * 8192 * 8192 * 8192, 0);
  gemm.gemms = {{8192, 8192, 8192}};
  const double at_rated = model.duration(gemm, rated.device);
  EXPECT_DOUBLE_EQ(model.duration(gemm, capped.device), at_rated / 0.809);
  EXPECT_DOUBLE_EQ(model.duration(gemm, between.device), at_rated / ((0.809 + 1) / 2));
  const core::ProgramOp attention = compute_op("attention", 1e14, 1000);
  EXPECT_DOUBLE_EQ(model.duration(attention, capped.device), model.duration(attention, rated.device) / 0.809);
  const core::ProgramOp copy = compute_op("elementwise", 1e6, 1000000000);
  EXPECT_DOUBLE_EQ(model.duration(copy, capped.device), model.duration(copy, rated.device));
  EXPECT_NE(describe_platform(capped).find("power limit 500 W"), std::string::npos);
  EXPECT_EQ(parse_error("h100:power_w=450"),
            "platform option power_w: 450 W is below the lowest limit the cost model has a figure for (500 W)");
  EXPECT_EQ(parse_error("h100:power_w=800"),
            "platform option power_w: 800 W is above the rated 700 W of the cost model's device");
  EXPECT_EQ(parse_error("h100:model=ideal,power_w=500"),
            "platform option power_w: the cost model \"ideal\" has no figures for a power limit (compute.power)");
  EXPECT_EQ(parse_error("a100:power_w=300"),
            "platform option power_w: the cost model \"a100 (published)\" has no figures for a power limit "
            "(compute.power)");
}

TEST(ComputeModel, BadPowerFiguresNameTheField) {
  EXPECT_EQ(overrides_error("bad_power.yaml"),
            kData + "bad_power.yaml: power.limits[1].watts: expected watts above 500 and below rated_w 700, got 450");
}

TEST(ComputeModel, OverridesFile) {
  ComputeModel model = ComputeModel::defaults();
  model.apply_overrides(kData + "compute_overrides.json");
  EXPECT_DOUBLE_EQ(model.launch_overhead(), 4e-6);
  EXPECT_DOUBLE_EQ(model.efficiency("gemm").flops, 0.5);
  EXPECT_DOUBLE_EQ(model.efficiency("gemm").memory, 0.8);  // untouched
  EXPECT_DOUBLE_EQ(model.efficiency("norm").flops, 1);
  EXPECT_DOUBLE_EQ(model.efficiency("norm").memory, 0.5);
  EXPECT_DOUBLE_EQ(model.efficiency("attention").flops, 0.6);
}

TEST(ComputeModel, BadOverridesNameFileAndField) {
  EXPECT_EQ(overrides_error("bad_compute_overrides.yaml"),
            kData + "bad_compute_overrides.yaml: op_classes.gemm.flops: expected a fraction in (0, 1], got 1.5");
  EXPECT_EQ(
      overrides_error("bad_compute_class.json"),
      kData +
          "bad_compute_class.json: op_classes.gemn: unknown field (expected one of: gemm, attention, "
          "elementwise, norm, embedding, optimizer, multi_tensor_copy, cast, strided_copy, attention_scores, other)");
  EXPECT_EQ(overrides_error("bad_key.json"),
            kData +
                "bad_key.json: nodez: unknown field (expected one of: launch_overhead_us, kernel_floor_us, "
                "op_classes, gemm, power, source)");
  EXPECT_EQ(overrides_error("nope.json"), kData + "nope.json: cannot open file (No such file or directory)");
  // A failed file leaves the model as it was.
  ComputeModel model = ComputeModel::defaults();
  EXPECT_THROW(model.apply_overrides(kData + "bad_compute_overrides.yaml"), InputError);
  EXPECT_DOUBLE_EQ(model.launch_overhead(), 2e-6);
}

// ---------------------------------------------------------------------------------------------
// SimGrid platforms
// ---------------------------------------------------------------------------------------------

TEST(PlatformBuild, SingleNodeNvlinkStar) {
  in_engine([](sg4::Engine&) {
    const PlatformSpec spec = parse_platform("h100:model=ideal");
    const BuiltPlatform built = build_platform(spec);
    ASSERT_EQ(built.devices.size(), 8u);
    EXPECT_EQ(built.node_of, std::vector<int>(8, 0));
    EXPECT_EQ(built.devices[3]->get_name(), "node0.gpu3");
    EXPECT_DOUBLE_EQ(built.devices[0]->get_speed(), 989.4e12);
    EXPECT_EQ(built.links.size(), 16u);
    const Route r = route(built.devices[2], built.devices[5]);
    EXPECT_EQ(r.links, sorted({"node0.gpu2.nvlink_UP", "node0.gpu5.nvlink_DOWN"}));
    EXPECT_DOUBLE_EQ(r.latency, 2 * spec.nvlink_latency);
    EXPECT_DOUBLE_EQ(r.bandwidth.at("node0.gpu5.nvlink_DOWN"), 450e9);
  });
}

// One 1 GB transfer between two GPUs of a node takes latency + bytes / bandwidth exactly: no
// LV08 factors, no TCP window bound, no cross traffic (configure_simgrid).
TEST(PlatformBuild, TimedTransferIsExact) {
  in_engine([](sg4::Engine& engine) {
    const PlatformSpec spec = parse_platform("h100:model=ideal,nodes=2");
    const BuiltPlatform built = build_platform(spec);
    sg4::Host* a = host(built, "node0.gpu0");
    sg4::Host* b = host(built, "node0.gpu1");
    sg4::Host* c = host(built, "node1.gpu6");
    double intra = -1, inter = -1;
    sg4::Actor::create("sender", a, [&] {
      sg4::Comm::sendto(a, b, 1000000000);
      intra = sg4::Engine::get_clock();
      sg4::Comm::sendto(a, c, 1000000000);
      inter = sg4::Engine::get_clock() - intra;
    });
    engine.run();
    const double expected_intra = 2 * spec.nvlink_latency + 1e9 / spec.nvlink_bandwidth;
    EXPECT_NEAR(intra, expected_intra, 1e-9 * expected_intra);
    const double expected_inter = 2 * spec.nic_latency + spec.switch_latency + 1e9 / spec.nic_bandwidth;
    EXPECT_NEAR(inter, expected_inter, 1e-9 * expected_inter);
  });
}

// Runs concurrent 1 GB transfers (pairs of device names) and returns when each finished.
std::vector<double> concurrent_transfers(sg4::Engine& engine, const BuiltPlatform& built,
                                         const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::vector<double> finish(pairs.size(), -1);
  sg4::Actor::create("driver", built.devices.front(), [&] {
    std::vector<sg4::CommPtr> comms;
    for (const auto& [from, to] : pairs)
      comms.push_back(sg4::Comm::sendto_async(host(built, from), host(built, to), 1000000000));
    sg4::Comm::wait_all(comms);
    for (std::size_t i = 0; i < comms.size(); ++i) finish[i] = comms[i]->get_finish_time();
  });
  engine.run();
  return finish;
}

// Flows that share a bottleneck split it evenly: one NIC per node, and an oversubscribed uplink.
TEST(PlatformBuild, SharedNicAndUplinkContend) {
  in_engine([](sg4::Engine& engine) {
    const PlatformSpec spec = parse_platform("h100:model=ideal,nodes=2,nic=node");
    const BuiltPlatform built = build_platform(spec);
    const std::vector<double> t =
        concurrent_transfers(engine, built, {{"node0.gpu0", "node1.gpu0"}, {"node0.gpu1", "node1.gpu1"}});
    const double expected = 2 * spec.nic_latency + spec.switch_latency + 2e9 / spec.nic_bandwidth;
    EXPECT_NEAR(t[0], expected, 1e-9 * expected);
    EXPECT_NEAR(t[1], expected, 1e-9 * expected);
  });
  in_engine([](sg4::Engine& engine) {
    // Leaf uplink: 2 nodes x 100 GB/s / 4 = 50 GB/s, shared by two cross-leaf flows.
    const PlatformSpec spec =
        parse_platform("h100:model=ideal,nodes=4,nodes_per_leaf=2,oversub=4,nic=node,nic_gbps=100");
    const BuiltPlatform built = build_platform(spec);
    const std::vector<double> t =
        concurrent_transfers(engine, built, {{"node0.gpu0", "node2.gpu0"}, {"node1.gpu0", "node3.gpu0"}});
    const double expected = 2 * spec.nic_latency + 3 * spec.switch_latency + 2e9 / 50e9;
    EXPECT_NEAR(t[0], expected, 1e-9 * expected);
    EXPECT_NEAR(t[1], expected, 1e-9 * expected);
  });
}

TEST(PlatformBuild, ClusterRoutesOneLeaf) {
  in_engine([](sg4::Engine&) {
    const PlatformSpec spec = parse_platform("h100:model=ideal,nodes=3");
    const BuiltPlatform built = build_platform(spec);
    ASSERT_EQ(built.devices.size(), 24u);
    EXPECT_EQ(built.node_of[7], 0);
    EXPECT_EQ(built.node_of[8], 1);
    EXPECT_EQ(built.devices[8]->get_name(), "node1.gpu0");
    // Per node: 8 NVLinks and 8 NICs and a port, two directions each. One leaf: no uplinks.
    EXPECT_EQ(built.links.size(), 3u * (8 + 8 + 1) * 2);

    const Route intra = route(host(built, "node1.gpu0"), host(built, "node1.gpu7"));
    EXPECT_EQ(intra.links, sorted({"node1.gpu0.nvlink_UP", "node1.gpu7.nvlink_DOWN"}));
    EXPECT_DOUBLE_EQ(intra.latency, 2 * spec.nvlink_latency);

    const Route inter = route(host(built, "node0.gpu0"), host(built, "node2.gpu3"));
    EXPECT_EQ(inter.links, sorted({"node0.gpu0.nic_UP", "node0.port_UP", "node2.port_DOWN", "node2.gpu3.nic_DOWN"}));
    EXPECT_DOUBLE_EQ(inter.latency, 2 * spec.nic_latency + spec.switch_latency);
    EXPECT_DOUBLE_EQ(inter.bandwidth.at("node0.gpu0.nic_UP"), 50e9);
    EXPECT_DOUBLE_EQ(inter.bandwidth.at("node0.port_UP"), 400e9);  // 8 NICs

    const Route back = route(host(built, "node2.gpu3"), host(built, "node0.gpu0"));
    EXPECT_EQ(back.links, sorted({"node2.gpu3.nic_UP", "node2.port_UP", "node0.port_DOWN", "node0.gpu0.nic_DOWN"}));
  });
}

TEST(PlatformBuild, ClusterRoutesAcrossLeavesWithOversubscription) {
  in_engine([](sg4::Engine&) {
    const PlatformSpec spec = parse_platform("h100:model=ideal,nodes=5,nodes_per_leaf=2,oversub=2");
    const BuiltPlatform built = build_platform(spec);
    ASSERT_EQ(built.devices.size(), 40u);
    EXPECT_EQ(built.node_of.back(), 4);
    // Nodes 0 and 1 share leaf 0: no uplink.
    const Route same_leaf = route(host(built, "node0.gpu1"), host(built, "node1.gpu1"));
    EXPECT_EQ(same_leaf.links,
              sorted({"node0.gpu1.nic_UP", "node0.port_UP", "node1.port_DOWN", "node1.gpu1.nic_DOWN"}));
    // Node 4 sits alone under leaf 2.
    const Route cross = route(host(built, "node0.gpu2"), host(built, "node4.gpu5"));
    EXPECT_EQ(cross.links, sorted({"node0.gpu2.nic_UP", "node0.port_UP", "leaf0.uplink_UP", "leaf2.uplink_DOWN",
                                   "node4.port_DOWN", "node4.gpu5.nic_DOWN"}));
    EXPECT_DOUBLE_EQ(cross.latency, 2 * spec.nic_latency + 3 * spec.switch_latency);
    // A leaf serves 2 nodes x 8 NICs x 50 GB/s = 800 GB/s down; 2:1 leaves 400 GB/s up.
    EXPECT_DOUBLE_EQ(cross.bandwidth.at("leaf0.uplink_UP"), 400e9);
    EXPECT_DOUBLE_EQ(cross.bandwidth.at("leaf2.uplink_DOWN"), 400e9);
    EXPECT_EQ(built.links.size(), 5u * (8 + 8 + 1) * 2 + 3 * 2);
  });
  in_engine([](sg4::Engine&) {
    const BuiltPlatform built = build_platform(parse_platform("h100:model=ideal,nodes=4,nodes_per_leaf=2,oversub=1"));
    const Route cross = route(built.devices[0], built.devices[31]);
    EXPECT_DOUBLE_EQ(cross.bandwidth.at("leaf0.uplink_UP"), 800e9);  // non-blocking
  });
}

TEST(PlatformBuild, NicPerNodeIsShared) {
  in_engine([](sg4::Engine&) {
    PlatformSpec spec = parse_platform(kData + "cluster.json");  // h100, 4 nodes, nic=node 100 GB/s
    spec.cost = CostModel::ideal();                              // links at their line rate
    const BuiltPlatform built = build_platform(spec);
    const Route a = route(host(built, "node0.gpu0"), host(built, "node1.gpu0"));
    const Route b = route(host(built, "node0.gpu5"), host(built, "node1.gpu2"));
    EXPECT_EQ(a.links, sorted({"node0.nic_UP", "node0.port_UP", "node1.port_DOWN", "node1.nic_DOWN"}));
    EXPECT_EQ(b.links, sorted({"node0.nic_UP", "node0.port_UP", "node1.port_DOWN", "node1.nic_DOWN"}));
    EXPECT_DOUBLE_EQ(a.bandwidth.at("node0.nic_UP"), 100e9);
    EXPECT_DOUBLE_EQ(a.bandwidth.at("node0.port_UP"), 100e9);
    // Leaf of 2 nodes x 100 GB/s at 2:1.
    const Route cross = route(host(built, "node0.gpu0"), host(built, "node3.gpu0"));
    EXPECT_EQ(cross.bandwidth.count("leaf0.uplink_UP"), 1u);
    EXPECT_DOUBLE_EQ(cross.bandwidth.at("leaf0.uplink_UP"), 100e9);
    // Intra-node still NVLink.
    EXPECT_EQ(route(host(built, "node2.gpu0"), host(built, "node2.gpu1")).links,
              sorted({"node2.gpu0.nvlink_UP", "node2.gpu1.nvlink_DOWN"}));
    EXPECT_EQ(built.links.size(), 4u * (8 + 1 + 1) * 2 + 2 * 2);
  });
}

TEST(PlatformBuild, CpuHostSharesTheMemoryLink) {
  in_engine([](sg4::Engine&) {
    const PlatformSpec spec = parse_platform("cpu:procs=3,model=ideal");
    const BuiltPlatform built = build_platform(spec);
    ASSERT_EQ(built.devices.size(), 3u);
    EXPECT_EQ(built.node_of, (std::vector<int>{0, 0, 0}));
    const Route r = route(built.devices[0], built.devices[2]);
    EXPECT_EQ(r.links, sorted({"proc0.loopback_UP", "host.memory", "proc2.loopback_DOWN"}));
    EXPECT_DOUBLE_EQ(r.latency, 2 * spec.nvlink_latency);
    EXPECT_DOUBLE_EQ(r.bandwidth.at("proc0.loopback_UP"), 5e9);
    EXPECT_DOUBLE_EQ(r.bandwidth.at("host.memory"), 20e9);
    EXPECT_EQ(built.links.size(), 1u + 3 * 2);
  });
}

TEST(PlatformBuild, XmlPlatform) {
  in_engine([](sg4::Engine&) {
    const BuiltPlatform built = build_platform(parse_platform(kData + "two_zones.xml"));
    ASSERT_EQ(built.devices.size(), 13u);
    // Natural name order: a2 before a10.
    EXPECT_EQ(built.devices[2]->get_name(), "a2");
    EXPECT_EQ(built.devices[10]->get_name(), "a10");
    EXPECT_EQ(built.devices[11]->get_name(), "b0");
    EXPECT_EQ(built.node_of[10], 0);
    EXPECT_EQ(built.node_of[11], 1);
    bool backbone = false;
    for (const sg4::Link* link : built.links) backbone = backbone || link->get_name() == "backbone";
    EXPECT_TRUE(backbone);
    for (const sg4::Link* link : built.links) EXPECT_EQ(link->get_name().rfind("__", 0), std::string::npos);
    const Route r = route(host(built, "a0"), host(built, "b1"));
    EXPECT_NE(std::find(r.links.begin(), r.links.end(), "backbone"), r.links.end());
  });
}

TEST(PlatformBuild, BrokenXmlIsAnInputError) {
  in_engine([](sg4::Engine&) {
    try {
      build_platform(parse_platform(kData + "broken.xml"));
      ADD_FAILURE() << "no error";
    } catch (const InputError& error) {
      EXPECT_EQ(std::string(error.what()).rfind(kData + "broken.xml: invalid SimGrid platform: ", 0), 0u)
          << error.what();
    }
  });
}

// 2048 nodes x 8 GPUs builds, and routes from every GPU resolve (build time and memory are
// measured in benchmarks/, not asserted here).
TEST(PlatformBuild, LargeClusterRoutes) {
  in_engine([](sg4::Engine&) {
    const BuiltPlatform built = build_platform(parse_platform("h100:model=ideal,nodes=2048,oversub=2"));
    ASSERT_EQ(built.devices.size(), 16384u);
    const std::size_t n = built.devices.size();
    for (std::size_t i = 0; i < n; i += 97) {
      EXPECT_FALSE(route(built.devices[i], built.devices[(i + n / 2) % n]).links.empty());
      EXPECT_FALSE(route(built.devices[i], built.devices[i ^ 8]).links.empty());
    }
    const Route cross = route(host(built, "node0.gpu0"), built.devices.back());
    EXPECT_EQ(cross.links, sorted({"node0.gpu0.nic_UP", "node0.port_UP", "leaf0.uplink_UP", "leaf511.uplink_DOWN",
                                   "node2047.port_DOWN", "node2047.gpu7.nic_DOWN"}));
    EXPECT_DOUBLE_EQ(cross.bandwidth.at("leaf0.uplink_UP"), 4 * 8 * 50e9 / 2);
  });
}

}  // namespace
}  // namespace stratsim::sim
