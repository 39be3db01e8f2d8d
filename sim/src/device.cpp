// The compute model: a compute op takes as long as the slower of its math and its memory traffic,
// each at the fraction of peak it reaches in practice (by GEMM shape where the model has a
// table, else by op class), never less than its kernels' launch floor.
#include "stratsim/sim/device.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "cost_model_fields.hpp"
#include "stratsim/core/errors.hpp"
#include "stratsim/core/json_reader.hpp"

namespace stratsim::sim {

double DeviceSpec::peak_for(core::DType dtype) const {
  if (auto it = peak_flops.find(dtype); it != peak_flops.end()) return it->second;
  // Integer and boolean ops have no entry of their own; they run on the float32 pipes.
  if (auto it = peak_flops.find(core::DType::float32); it != peak_flops.end()) return it->second;
  return 0;
}

// The round figures the simulator used before measured cost models, kept for the cpu preset
// until `stratsim calibrate` measures the host (fraction of peak FLOP/s, of peak memory bandwidth):
//  - gemm: cuBLAS reaches 70-80 % of dense tensor-core peak on large bf16 GEMMs.
//  - attention: FlashAttention-2 reports 50-73 % of peak forward on A100/H100; 0.6 is mid-range.
//  - elementwise, norm, embedding, optimizer: memory bound; vectorised kernels stream at 70-80 %
//    of HBM bandwidth (embedding gathers rows, so lower), and their math rarely matters.
//  - multi_tensor_copy: one kernel copying many tensors at their own offsets (FSDP2's chunk_cat
//    and split_with_sizes_copy): memory bound, as elementwise here; slower on GPUs (the presets).
//  - cast: a dtype conversion PyTorch's copy kernel runs without vectorised loads (bfloat16 or
//    float16 up to float32; the way down has a vectorised kernel and is elementwise).
//  - strided_copy: a copy of a strided or expanded view into a contiguous tensor (repeat_kv).
//    Both as elementwise here; slower on GPUs (the presets).
//  - attention_scores: the math path of attention's kernels over the [batch, heads, seq, seq]
//    scores (the causal mask's add, softmax, dropout, and their backward): memory bound, as
//    elementwise here; slower on A100 (the preset).
//  - other: anything the planner does not classify.
ComputeModel ComputeModel::defaults() {
  ComputeModel model;
  model.efficiency_ = {
      {"gemm", {0.75, 0.8}},
      {"attention", {0.6, 0.8}},
      {"elementwise", {0.5, 0.8}},
      {"norm", {0.5, 0.75}},
      {"embedding", {0.5, 0.7}},
      {"optimizer", {0.5, 0.8}},
      {"multi_tensor_copy", {0.5, 0.8}},
      {"cast", {0.5, 0.8}},
      {"strided_copy", {0.5, 0.8}},
      {"attention_scores", {0.5, 0.8}},
      {"other", {0.5, 0.7}},
  };
  model.launch_overhead_ = 2e-6;  // a CUDA kernel launch plus PyTorch dispatch, per op
  return model;
}

ComputeModel ComputeModel::ideal() { return ComputeModel{}; }

const OpClassEfficiency& ComputeModel::efficiency(const std::string& op_class) const {
  static const OpClassEfficiency kPeak;  // a class the model does not name runs at peak
  if (auto it = efficiency_.find(op_class); it != efficiency_.end()) return it->second;
  if (auto it = efficiency_.find("other"); it != efficiency_.end()) return it->second;
  return kPeak;
}

namespace {

// Position of log2(x) on a log2-spaced axis: the lower index and the weight of the upper one.
std::pair<std::size_t, double> locate(const std::vector<double>& axis, double x) {
  if (axis.size() == 1 || x <= axis.front()) return {0, 0.0};
  if (x >= axis.back()) return {axis.size() - 2, 1.0};
  const std::size_t upper = static_cast<std::size_t>(std::upper_bound(axis.begin(), axis.end(), x) - axis.begin());
  const double lo = std::log2(axis[upper - 1]), hi = std::log2(axis[upper]);
  return {upper - 1, (std::log2(x) - lo) / (hi - lo)};
}

}  // namespace

double PowerDerating::flops_factor(double watts) const {
  if (empty() || limits.empty() || watts >= rated_w) return 1;
  if (watts <= limits.front().first) return limits.front().second;
  // Between two listed limits, or the highest one and the rated power (factor 1).
  for (std::size_t i = 0; i < limits.size(); ++i) {
    const auto [w0, f0] = limits[i];
    const auto [w1, f1] = i + 1 < limits.size() ? limits[i + 1] : std::pair<double, double>{rated_w, 1.0};
    if (watts <= w1) return f0 + (f1 - f0) * (watts - w0) / (w1 - w0);
  }
  return 1;
}

const std::vector<double>& GemmTable::grid_for(int ranks_computing) const {
  // One rank has the host to itself; more price from the grid of the most ranks up to their
  // count, or the fewest measured when they are fewer than any.
  if (ranks_computing <= 1 || busy.empty()) return efficiency;
  const std::vector<double>* grid = &busy.front().values;
  for (const Busy& measured : busy)
    if (measured.ranks <= ranks_computing) grid = &measured.values;
  return *grid;
}

double GemmTable::at(double mm, double nn, double kk, int ranks_computing) const {
  const std::vector<double>& values = grid_for(ranks_computing);
  const auto [i, wi] = locate(m, mm);
  const auto [j, wj] = locate(n, nn);
  const auto [l, wl] = locate(k, kk);
  const std::size_t nj = n.size(), nl = k.size();
  auto value = [&](std::size_t a, std::size_t b, std::size_t c) {
    a = std::min(a, m.size() - 1), b = std::min(b, nj - 1), c = std::min(c, nl - 1);
    return values[(a * nj + b) * nl + c];
  };
  double result = 0;
  for (int da = 0; da < 2; ++da)
    for (int db = 0; db < 2; ++db)
      for (int dc = 0; dc < 2; ++dc) {
        const double weight = (da ? wi : 1 - wi) * (db ? wj : 1 - wj) * (dc ? wl : 1 - wl);
        if (weight > 0) result += weight * value(i + da, j + db, l + dc);
      }
  return result;
}

double ComputeModel::duration(const core::ProgramOp& op, const DeviceSpec& device) const {
  if (op.type != core::OpType::compute) return 0;
  const double bytes = static_cast<double>(op.bytes_accessed);
  if (op.flops <= 0 && bytes <= 0) return 0;  // a view or no-op: no kernel is launched
  const OpClassEfficiency& e = efficiency(op.op_class);
  const double peak = device.peak_for(op.dtype);
  double math = 0;
  double other_flops = op.flops;
  auto table = gemm_.find(op.dtype);
  if (table != gemm_.end() && (peak > 0 || table->second.rates))
    for (const core::GemmShape& g : op.gemms) {
      const double flops = g.flops();
      math += flops / table->second.rate(static_cast<double>(g.m), static_cast<double>(g.n), static_cast<double>(g.k),
                                         peak, device.ranks_computing);
      other_flops -= flops;
    }
  const double class_peak = peak * e.flops_for(op.phase);
  if (other_flops > 0 && class_peak > 0) math += other_flops / class_peak;
  if (device.power_limit_w > 0) math /= power_.flops_factor(device.power_limit_w);
  const double bandwidth = device.memory_bandwidth * e.memory;
  const double memory = bytes > 0 && bandwidth > 0 ? bytes / bandwidth : 0;
  const double kernels = static_cast<double>(std::max<std::size_t>(1, op.gemms.size()));
  return std::max({math, memory, kernels * kernel_floor_}) + launch_overhead_;
}

namespace {

using detail::read_fraction;
using detail::read_microseconds;

std::vector<double> read_axis(const core::JsonReader& table, const char* key) {
  const core::JsonReader node = table.at(key);
  node.expect_array();
  if (node.size() == 0 || node.size() > 64) node.fail("expected 1 to 64 sizes");
  std::vector<double> axis;
  for (std::size_t i = 0; i < node.size(); ++i) {
    const double size = node.at(i).as_number();
    if (!(size >= 1 && size <= 1e12)) node.at(i).fail(fmt::format("expected a size from 1 to 1e12, got {}", size));
    if (!axis.empty() && size <= axis.back()) node.at(i).fail("expected sizes in ascending order");
    axis.push_back(size);
  }
  return axis;
}

// A measured rate: positive and below any device's (10 PFLOP/s dense is beyond every GPU so far).
double read_tflops(const core::JsonReader& node) {
  const double value = node.as_number();
  if (!(value > 0 && value <= 10000))
    node.fail(fmt::format("expected TFLOP/s above 0 and at most 10000, got {}", value));
  return value * 1e12;
}

// power: {rated_w: 700, limits: [{watts: 500, flops: 0.809, source: ...}, ...]}
PowerDerating read_power(const core::JsonReader& node) {
  node.expect_object();
  node.allow_only({"rated_w", "limits", "source"});
  PowerDerating power;
  power.rated_w = node.at("rated_w").as_number();
  if (!(power.rated_w > 0 && power.rated_w <= 10000))
    node.at("rated_w").fail(fmt::format("expected watts above 0 and at most 10000, got {}", power.rated_w));
  const core::JsonReader limits = node.at("limits");
  limits.expect_array();
  for (std::size_t i = 0; i < limits.size(); ++i) {
    const core::JsonReader entry = limits.at(i);
    entry.expect_object();
    entry.allow_only({"watts", "flops", "source"});
    const double watts = entry.at("watts").as_number();
    const double before = power.limits.empty() ? 0 : power.limits.back().first;
    if (!(watts > before && watts < power.rated_w))
      entry.at("watts").fail(
          fmt::format("expected watts above {} and below rated_w {}, got {}", before, power.rated_w, watts));
    power.limits.emplace_back(watts, read_fraction(entry.at("flops")));
  }
  return power;
}

// `busy: [{ranks: R, values: [...]}, ...]`, ascending in ranks; or its older spelling, one grid as
// `all_cores_busy: [...]` measured by `all_cores_busy_ranks` (default 2) processes.
template <typename ReadValues>
void read_busy_grids(const core::JsonReader& node, const ReadValues& read_values, std::vector<GemmTable::Busy>& out) {
  const auto read_ranks = [](const core::JsonReader& ranks) {
    const std::int64_t count = ranks.as_int();
    if (count < 2 || count > 65536)
      ranks.fail(fmt::format("expected 2 to 65536 ranks computing at once, got {}", count));
    return static_cast<int>(count);
  };
  if (node.has("busy")) {
    if (node.has("all_cores_busy") || node.has("all_cores_busy_ranks"))
      node.fail("expected busy or its older spelling all_cores_busy, not both");
    const core::JsonReader list = node.at("busy");
    list.expect_array();
    for (std::size_t i = 0; i < list.size(); ++i) {
      const core::JsonReader entry = list.at(i);
      entry.allow_only({"ranks", "values"});
      GemmTable::Busy grid;
      grid.ranks = read_ranks(entry.at("ranks"));
      if (!out.empty() && grid.ranks <= out.back().ranks)
        entry.at("ranks").fail(fmt::format("expected more than the {} ranks before it (ascending)", out.back().ranks));
      read_values(entry.at("values"), grid.values);
      out.push_back(std::move(grid));
    }
    return;
  }
  if (node.has("all_cores_busy_ranks") && !node.has("all_cores_busy"))
    node.at("all_cores_busy_ranks").fail("expected all_cores_busy, the values these ranks measured");
  if (!node.has("all_cores_busy")) return;
  GemmTable::Busy grid;
  if (node.has("all_cores_busy_ranks")) grid.ranks = read_ranks(node.at("all_cores_busy_ranks"));
  read_values(node.at("all_cores_busy"), grid.values);
  out.push_back(std::move(grid));
}

GemmTable read_gemm_table(const core::JsonReader& node) {
  node.allow_only({"m", "n", "k", "efficiency", "tflops", "busy", "all_cores_busy", "all_cores_busy_ranks", "source"});
  GemmTable table;
  table.m = read_axis(node, "m");
  table.n = read_axis(node, "n");
  table.k = read_axis(node, "k");
  table.rates = node.has("tflops");
  if (table.rates == node.has("efficiency"))
    node.fail("expected exactly one of efficiency (fractions of the dtype's peak) and tflops (measured rates)");
  const std::size_t expected = table.m.size() * table.n.size() * table.k.size();
  const auto read_values = [&](const core::JsonReader& list, std::vector<double>& out) {
    list.expect_array();
    if (list.size() != expected)
      list.fail(fmt::format("expected {} x {} x {} = {} values (k fastest), got {}", table.m.size(), table.n.size(),
                            table.k.size(), expected, list.size()));
    for (std::size_t i = 0; i < list.size(); ++i)
      out.push_back(table.rates ? read_tflops(list.at(i)) : read_fraction(list.at(i)));
  };
  read_values(node.at(table.rates ? "tflops" : "efficiency"), table.efficiency);
  read_busy_grids(node, read_values, table.busy);
  return table;
}

}  // namespace

// All or nothing: a document with an error leaves the model as it was.
void ComputeModel::apply(const core::JsonReader& root) {
  root.expect_object();
  ComputeModel updated = *this;
  root.allow_only({"launch_overhead_us", "kernel_floor_us", "op_classes", "gemm", "power", "source"});
  if (root.has("launch_overhead_us")) updated.launch_overhead_ = read_microseconds(root.at("launch_overhead_us"));
  if (root.has("kernel_floor_us")) updated.kernel_floor_ = read_microseconds(root.at("kernel_floor_us"));
  if (root.has("op_classes")) {
    const core::JsonReader classes = root.at("op_classes");
    classes.expect_object();
    // Only the classes the planner emits: a misspelt class would otherwise be silently unused.
    classes.allow_only(core::kOpClasses);
    for (const std::string& name : classes.keys()) {
      const core::JsonReader entry = classes.at(name);
      entry.expect_object();
      entry.allow_only({"flops", "memory", "backward_flops", "source"});
      OpClassEfficiency& e = updated.efficiency_[name];
      if (entry.has("flops")) e.flops = read_fraction(entry.at("flops"));
      if (entry.has("memory")) e.memory = read_fraction(entry.at("memory"));
      if (entry.has("backward_flops")) e.backward_flops = read_fraction(entry.at("backward_flops"));
    }
  }
  if (root.has("gemm")) {
    const core::JsonReader tables = root.at("gemm");
    tables.expect_object();
    for (const std::string& name : tables.keys()) {
      const auto dtype = core::parse_dtype(name);
      if (!dtype) tables.at(name).fail("unknown dtype (expected float32, bfloat16, float16, ...)");
      updated.gemm_[*dtype] = read_gemm_table(tables.at(name));
    }
  }
  if (root.has("power")) updated.power_ = read_power(root.at("power"));
  *this = std::move(updated);
}

void ComputeModel::apply_overrides(const std::string& path) {
  const nlohmann::json document = core::load_document(path);
  apply(core::JsonReader(document, path));
}

}  // namespace stratsim::sim
