// A device's speed and the roofline model that turns a compute op's FLOPs and bytes into seconds.
#pragma once

#include <map>
#include <string>

#include "stratsim/core/dtype.hpp"
#include "stratsim/core/program.hpp"

namespace stratsim::sim {

struct DeviceSpec {
  std::string name;                          // "H100-SXM5-80GB"
  std::map<core::DType, double> peak_flops;  // dense math FLOP/s by the op's dtype
  double memory_bandwidth = 0;               // HBM (or DRAM) bytes/s
  double memory_bytes = 0;                   // device memory capacity

  // Peak for `dtype`; a dtype without its own entry falls back to float32's.
  double peak_for(core::DType dtype) const;
};

// Fraction of the peak an op class reaches: FLOP/s and memory bandwidth separately.
struct OpClassEfficiency {
  double flops = 1.0;
  double memory = 1.0;
};

// Roofline: time = max(flops / (peak(dtype) * e.flops), bytes / (bandwidth * e.memory)) + launch.
// The default efficiencies are documented in sim/README.md; a JSON/YAML file overrides them:
//   {"launch_overhead_us": 4, "op_classes": {"gemm": {"flops": 0.75, "memory": 0.8}}}
class ComputeModel {
 public:
  static ComputeModel defaults();
  // Throws core::InputError naming the file and field on bad input.
  void apply_overrides(const std::string& path);

  double duration(const core::ProgramOp& op, const DeviceSpec& device) const;  // seconds
  const OpClassEfficiency& efficiency(const std::string& op_class) const;      // "other" when unknown
  const std::map<std::string, OpClassEfficiency>& efficiencies() const { return efficiency_; }
  double launch_overhead() const { return launch_overhead_; }

 private:
  std::map<std::string, OpClassEfficiency> efficiency_;
  double launch_overhead_ = 0;  // seconds per compute op
};

}  // namespace stratsim::sim
