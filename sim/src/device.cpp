// The roofline compute model: a compute op takes as long as the slower of its math at the
// device's peak for its dtype and its memory traffic at HBM bandwidth, each derated by the
// fraction of peak its op class reaches in practice, plus a fixed kernel launch cost.
#include "stratsim/sim/device.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"

namespace stratsim::sim {

double DeviceSpec::peak_for(core::DType dtype) const {
  if (auto it = peak_flops.find(dtype); it != peak_flops.end()) return it->second;
  // Integer and boolean ops have no entry of their own; they run on the float32 pipes.
  if (auto it = peak_flops.find(core::DType::float32); it != peak_flops.end()) return it->second;
  return 0;
}

// Default efficiencies (fraction of peak FLOP/s, fraction of peak memory bandwidth). They are
// round figures in the range well-tuned kernels reach on A100/H100, not measurements:
//  - gemm: cuBLAS reaches 70-80 % of dense tensor-core peak on large bf16 GEMMs.
//  - attention: FlashAttention-2 reports 50-73 % of peak forward on A100/H100; 0.6 is mid-range.
//  - elementwise, norm, embedding, optimizer: memory bound; vectorised kernels stream at 70-80 %
//    of HBM bandwidth (embedding gathers rows, so lower), and their math rarely matters.
//  - other: anything the planner does not classify.
ComputeModel ComputeModel::defaults() {
  ComputeModel model;
  model.efficiency_ = {
      {"gemm", {0.75, 0.8}},     {"attention", {0.6, 0.8}}, {"elementwise", {0.5, 0.8}}, {"norm", {0.5, 0.75}},
      {"embedding", {0.5, 0.7}}, {"optimizer", {0.5, 0.8}}, {"other", {0.5, 0.7}},
  };
  model.launch_overhead_ = 2e-6;  // a CUDA kernel launch plus PyTorch dispatch, per op
  return model;
}

const OpClassEfficiency& ComputeModel::efficiency(const std::string& op_class) const {
  static const OpClassEfficiency kPeak;  // for a model built without defaults(): no derating
  if (auto it = efficiency_.find(op_class); it != efficiency_.end()) return it->second;
  if (auto it = efficiency_.find("other"); it != efficiency_.end()) return it->second;
  return kPeak;
}

double ComputeModel::duration(const core::ProgramOp& op, const DeviceSpec& device) const {
  if (op.type != core::OpType::compute) return 0;
  const double bytes = static_cast<double>(op.bytes_accessed);
  if (op.flops <= 0 && bytes <= 0) return 0;  // a view or no-op: no kernel is launched
  const OpClassEfficiency& e = efficiency(op.op_class);
  const double peak = device.peak_for(op.dtype) * e.flops;
  const double bandwidth = device.memory_bandwidth * e.memory;
  const double math = op.flops > 0 && peak > 0 ? op.flops / peak : 0;
  const double memory = bytes > 0 && bandwidth > 0 ? bytes / bandwidth : 0;
  return std::max(math, memory) + launch_overhead_;
}

namespace {

double read_fraction(const core::JsonReader& node) {
  const double value = node.as_number();
  if (!(value > 0 && value <= 1)) node.fail(fmt::format("expected a fraction in (0, 1], got {}", value));
  return value;
}

}  // namespace

// All or nothing: a file with an error leaves the model as it was.
void ComputeModel::apply_overrides(const std::string& path) {
  ComputeModel updated = *this;
  const nlohmann::json document = core::load_document(path);
  const core::JsonReader root(document, path);
  root.allow_only({"launch_overhead_us", "op_classes"});
  if (root.has("launch_overhead_us")) {
    const core::JsonReader node = root.at("launch_overhead_us");
    const double us = node.as_number();
    if (!(us >= 0)) node.fail(fmt::format("expected a non-negative number of microseconds, got {}", us));
    updated.launch_overhead_ = us * 1e-6;
  }
  if (root.has("op_classes")) {
    const core::JsonReader classes = root.at("op_classes");
    // Only the classes the planner emits: a misspelt class would otherwise be silently unused.
    classes.allow_only({"gemm", "attention", "elementwise", "norm", "embedding", "optimizer", "other"});
    for (const std::string& name : classes.keys()) {
      const core::JsonReader entry = classes.at(name);
      entry.allow_only({"flops", "memory"});
      OpClassEfficiency& e = updated.efficiency_[name];
      if (entry.has("flops")) e.flops = read_fraction(entry.at("flops"));
      if (entry.has("memory")) e.memory = read_fraction(entry.at("memory"));
    }
  }
  *this = std::move(updated);
}

}  // namespace stratsim::sim
