// Builders shared by the simulator tests: hand-made programs and platforms whose timings are
// known in closed form.
#pragma once

#include <string>
#include <vector>

#include "stratsim/core/program.hpp"
#include "stratsim/sim/platform.hpp"

namespace stratsim::test {

// A program on a mesh of `shape` with named dims; streams "compute" and "comm".
inline core::Program empty_program(std::vector<int> shape, std::vector<std::string> dims) {
  core::Program program;
  program.mesh = core::DeviceMesh(std::move(shape), std::move(dims));
  program.world_size = program.mesh.world_size();
  program.iterations = 1;
  program.streams = {"compute", "comm"};
  return program;
}

inline int add_collective(core::Program& program, core::CollectiveKind kind, double bytes,
                          const std::vector<int>& dims, std::vector<int> deps = {}, const std::string& stream = "comm") {
  core::ProgramOp op;
  op.type = core::OpType::collective;
  op.kind = kind;
  op.name = std::string(core::collective_kind_name(kind));
  op.group = program.group_id(dims);
  op.stream = program.stream_id(stream);
  op.bytes = op.input_bytes = op.output_bytes = static_cast<std::int64_t>(bytes);
  op.deps = std::move(deps);
  op.phase = core::Phase::backward;
  return program.add(op).id;
}

inline int add_compute(core::Program& program, double flops, std::vector<int> deps = {}, int iteration = 1) {
  core::ProgramOp op;
  op.type = core::OpType::compute;
  op.name = "gemm";
  op.op_class = "gemm";
  op.flops = flops;
  op.stream = 0;
  op.iteration = iteration;
  op.deps = std::move(deps);
  op.phase = core::Phase::backward;
  return program.add(op).id;
}

// One node of `gpus` devices, each on its own NVLink-like link to a non-blocking switch: the
// uniform platform of the closed forms (alpha = 2 * latency between any two devices).
inline sim::PlatformSpec uniform_star(int gpus, double bandwidth = 50e9, double latency = 1e-6) {
  sim::PlatformSpec spec;
  spec.name = "uniform-star";
  spec.kind = sim::PlatformKind::node;
  spec.preset = "h100";
  spec.device.name = "test-device";
  spec.device.peak_flops[core::DType::float32] = 1e12;
  spec.device.memory_bandwidth = 1e12;
  spec.nodes = 1;
  spec.gpus_per_node = gpus;
  spec.nvlink_bandwidth = bandwidth;
  spec.nvlink_latency = latency;
  spec.nic_bandwidth = bandwidth;
  spec.nic_latency = latency;
  spec.collective_overhead = 0;
  return spec;
}

// `nodes` nodes of `gpus` devices under one non-blocking leaf switch: NVLink-like links inside a
// node (uniform_star's), one NIC per device (rail-optimised) or per node across.
struct LinkSpec {
  double bandwidth = 0, latency = 0;
};
inline sim::PlatformSpec one_leaf_cluster(int nodes, int gpus, LinkSpec nvlink, LinkSpec nic, bool nic_per_gpu,
                                          double switch_latency = 0) {
  sim::PlatformSpec spec = uniform_star(gpus, nvlink.bandwidth, nvlink.latency);
  spec.name = "one-leaf-cluster";
  spec.kind = sim::PlatformKind::cluster;
  spec.nodes = nodes;
  spec.nic_bandwidth = nic.bandwidth;
  spec.nic_latency = nic.latency;
  spec.nic_per_gpu = nic_per_gpu;
  spec.nodes_per_leaf = nodes;
  spec.oversubscription = 1;
  spec.switch_latency = switch_latency;
  return spec;
}

}  // namespace stratsim::test
