// A device's speed and the compute model that turns a compute op's FLOPs, bytes and GEMM shapes
// into seconds.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "stratsim/core/dtype.hpp"
#include "stratsim/core/json_reader.hpp"
#include "stratsim/core/program.hpp"

namespace stratsim::sim {

struct DeviceSpec {
  std::string name;                          // "H100-SXM5-80GB"
  std::map<core::DType, double> peak_flops;  // dense math FLOP/s by the op's dtype
  double memory_bandwidth = 0;               // HBM (or DRAM) bytes/s
  double memory_bytes = 0;                   // device memory capacity
  // Ranks computing at the same time on this device's host (a CPU host's SPMD processes; 1
  // elsewhere): from as many as a table's all-cores-busy values were measured with, GEMMs are
  // priced from those (the simulator sets this).
  int ranks_computing = 1;
  // The board power limit (platform option power_w), watts; 0: the rated one the cost model's
  // rates were measured at.
  double power_limit_w = 0;

  // Peak for `dtype`; a dtype without its own entry falls back to float32's.
  double peak_for(core::DType dtype) const;
};

// Fraction of the peak an op class reaches: FLOP/s and memory bandwidth separately, and FLOP/s in
// backward where it differs (flash attention's backward reaches less of the peak than its forward).
struct OpClassEfficiency {
  double flops = 1.0;
  double memory = 1.0;
  double backward_flops = 0;  // 0: as `flops`
  double flops_for(core::Phase phase) const {
    return phase == core::Phase::backward && backward_flops > 0 ? backward_flops : flops;
  }
};

// GEMM efficiency (fraction of the dtype's dense peak) or measured rate (FLOP/s) on a grid of
// shapes, interpolated linearly in log2(m), log2(n), log2(k) and clamped at the grid's edges:
// efficiency rises with each dimension until the tiles fill the SMs, so a log scale keeps the
// steps between measured sizes even. Rates are what `stratsim calibrate --gpu` measures: they
// need no notion of the peak, which the published figure and the device's clocks disagree on.
// A CPU host's table may hold the same grid measured again with ranks computing at once, a core
// each (`busy`, one grid per process count that `stratsim calibrate` swept): SPMD ranks run their
// GEMMs at the same time, and they share the memory system, the caches and the host's clocks: on
// the VMs measured here two processes each ran GEMMs 20-30 % slower than one alone, on 2 cores and
// on 16 alike.
struct GemmTable {
  std::vector<double> m, n, k;     // ascending sizes, at least one each
  std::vector<double> efficiency;  // m.size() x n.size() x k.size() values, k fastest: one process
  struct Busy {
    int ranks = 2;               // processes computing at once when the values were measured
    std::vector<double> values;  // the same grid, in the same unit
  };
  std::vector<Busy> busy;  // ascending in ranks
  bool rates = false;      // true: the values are FLOP/s, not fractions of the peak
  // A run of one rank prices from `efficiency`; a run of R > 1 from the grid of the most ranks up
  // to R (the simulator time-slices ranks beyond the cores on its own), or the fewest when R is
  // below them all: ranks computing at once are nearer any busy grid than one process alone
  // (benchmarks/README.md, "On a 16-core host").
  const std::vector<double>& grid_for(int ranks_computing) const;
  double at(double m, double n, double k, int ranks_computing = 1) const;
  // FLOP/s of a GEMM of this shape on a device whose dense peak for the dtype is `peak`.
  double rate(double m, double n, double k, double peak, int ranks_computing = 1) const {
    const double value = at(m, n, k, ranks_computing);
    return rates ? value : peak * value;
  }
};

// How a board power limit below the rated one slows FLOP-bound work: the clock the limit holds
// under load scales every GEMM, attention kernel and other op's math; memory-bound work draws
// less power and keeps its rate. A factor per published limit, linear in watts between them and
// 1 at the rated power.
struct PowerDerating {
  double rated_w = 0;                             // 0: the model has no figures
  std::vector<std::pair<double, double>> limits;  // (watts, FLOP rate factor), ascending, below rated_w
  bool empty() const { return rated_w <= 0; }
  double lowest_w() const { return limits.empty() ? rated_w : limits.front().first; }
  double flops_factor(double watts) const;  // watts in [lowest_w(), rated_w]; 1 when empty
};

// Roofline per op, with a measured GEMM efficiency where the model has one for the op's shapes:
//   math   = sum over its GEMMs of 2mnk / (peak(dtype) x gemm_efficiency(m, n, k)) (or / the
//            table's measured rate),
//            plus any other FLOPs at peak x e.flops (ops without shapes: all of them);
//   memory = bytes / (HBM x e.memory);
//   time   = max(math, memory, kernels x kernel_floor) + launch_overhead,
// where kernels is the number of GEMMs (at least 1) and math is divided by the power derating's
// factor when the device runs below its rated power. The preset cost models (cost_model.hpp) fill
// it from published figures; a JSON/YAML file overrides members (sim/README.md "Cost model"):
//   {"launch_overhead_us": 4, "kernel_floor_us": 3, "op_classes": {"gemm": {"flops": 0.75}},
//    "gemm": {"bfloat16": {"m": [...], "n": [...], "k": [...], "efficiency": [...]}}}
// where a table may give "tflops": [...] (measured rates) in place of "efficiency".
class ComputeModel {
 public:
  static ComputeModel ideal();     // every efficiency 1, no floor, no launch cost: the bare roofline
  static ComputeModel defaults();  // the round figures used before measured models (cpu preset)
  // Throws core::InputError naming the file and field on bad input; all or nothing.
  void apply_overrides(const std::string& path);
  void apply(const core::JsonReader& root);  // the same, from a parsed document (a cost model's "compute")

  double duration(const core::ProgramOp& op, const DeviceSpec& device) const;  // seconds
  const OpClassEfficiency& efficiency(const std::string& op_class) const;      // "other" when unknown
  const std::map<std::string, OpClassEfficiency>& efficiencies() const { return efficiency_; }
  const std::map<core::DType, GemmTable>& gemm_tables() const { return gemm_; }
  double launch_overhead() const { return launch_overhead_; }
  double kernel_floor() const { return kernel_floor_; }
  const PowerDerating& power() const { return power_; }

 private:
  std::map<std::string, OpClassEfficiency> efficiency_;
  PowerDerating power_;
  std::map<core::DType, GemmTable> gemm_;
  double launch_overhead_ = 0;  // seconds per compute op, added (dispatch not hidden by the GPU queue)
  double kernel_floor_ = 0;     // seconds: no kernel finishes faster
};

}  // namespace stratsim::sim
