// Measuring this host for `stratsim calibrate` (calibration.hpp): the compute the executor runs,
// Gloo's collectives through the executor, the fit, and the platform file.
#include "stratsim/exec/calibration.hpp"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <thread>
#include <utility>

#include "host_resources.hpp"
#include "stratsim/core/errors.hpp"

namespace stratsim::exec {
namespace {

using Clock = std::chrono::steady_clock;
using core::CollectiveKind;

struct Swept {
  CollectiveKind kind;
  core::DType dtype;
};
constexpr Swept kSwept[] = {
    {CollectiveKind::all_reduce, core::DType::float32},     {CollectiveKind::all_gather, core::DType::float32},
    {CollectiveKind::reduce_scatter, core::DType::float32}, {CollectiveKind::broadcast, core::DType::float32},
    {CollectiveKind::all_reduce, core::DType::float16},     {CollectiveKind::reduce_scatter, core::DType::float16}};

double mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0 : sum / static_cast<double>(values.size());
}

// The best time of GEMMs of one shape, repeated until `min_seconds` have passed (at least twice).
double time_gemm(StreamResources& resources, const core::GemmShape& shape, double min_seconds) {
  const core::GemmShape shapes[] = {shape};
  resources.prepare_gemms(shapes, core::DType::float32);
  resources.compute_gemms(shapes, core::DType::float32);  // warm: caches, first touch
  double best = INFINITY, total = 0;
  for (int rep = 0; rep < 2 || total < min_seconds; ++rep) {
    const auto start = Clock::now();
    resources.compute_gemms(shapes, core::DType::float32);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::min(best, seconds);
    total += seconds;
    if (rep > 1000) break;
  }
  return best;
}

std::string sweep_prefix(const Swept& swept, double bytes) {
  return fmt::format("sweep {} {} {} #", core::collective_kind_name(swept.kind), core::dtype_name(swept.dtype),
                     static_cast<std::int64_t>(bytes));
}

int add_collective(core::Program& program, CollectiveKind kind, double bytes, const std::string& name,
                   std::vector<int> deps, core::DType dtype = core::DType::float32) {
  core::ProgramOp op;
  op.type = core::OpType::collective;
  op.kind = kind;
  op.name = name;
  op.group = program.group_id({0});
  op.stream = program.stream_id("comm");
  op.dtype = dtype;
  op.bytes = static_cast<std::int64_t>(bytes);
  // nccl-tests conventions (communicator.hpp): all-gather's n is its output, reduce-scatter's its input.
  const int p = program.world_size;
  op.input_bytes = kind == CollectiveKind::all_gather ? op.bytes / p : op.bytes;
  op.output_bytes = kind == CollectiveKind::reduce_scatter ? op.bytes / p : op.bytes;
  op.deps = std::move(deps);
  op.phase = core::Phase::backward;
  return program.add(op).id;
}

int add_compute(core::Program& program, double flops, const std::string& name, std::vector<int> deps) {
  core::ProgramOp op;
  op.type = core::OpType::compute;
  op.name = name;
  op.op_class = "gemm";
  op.flops = flops;
  op.stream = program.stream_id("compute");
  op.deps = std::move(deps);
  op.phase = core::Phase::backward;
  return program.add(op).id;
}

// A span of time: where ops ran.
struct Window {
  double from = -INFINITY, to = INFINITY;
  bool holds(double start, double end) const { return start >= from && end <= to; }
};

// Where every recorded rank was running the ops whose names start with `prefix`: from the latest
// first start to the earliest last end.
Window common_window(const core::Program& program, const core::RunResult& run, const std::string& prefix) {
  Window common;
  for (const auto& timings : run.timings) {
    double first = INFINITY, last = -INFINITY;
    for (const core::ProgramOp& op : program.ops)
      if (op.name.starts_with(prefix))
        first = std::min(first, timings.at(op.id).start), last = std::max(last, timings.at(op.id).end);
    common.from = std::max(common.from, first), common.to = std::min(common.to, last);
  }
  return common;
}

// Durations of the ops whose names start with `prefix`: a collective's from its measured
// instance (last member in to last member out), a compute op's averaged over the ranks. Within a
// window: only the instances, or the ranks' runs of a compute op, that lie wholly inside it (all
// of them if none does; `inside` says how many did).
std::vector<double> durations(const core::Program& program, const core::RunResult& run, const std::string& prefix,
                              const Window& window = {}, int* inside_count = nullptr) {
  std::map<int, std::pair<double, double>> collective_span;
  for (const core::CollectiveRun& c : run.collectives) collective_span[c.op] = {c.start, c.end};
  std::vector<double> all, inside;
  for (const core::ProgramOp& op : program.ops) {
    if (!op.name.starts_with(prefix)) continue;
    if (op.type == core::OpType::collective) {
      auto it = collective_span.find(op.id);
      if (it == collective_span.end()) throw core::InputError(fmt::format("no measured instance of \"{}\"", op.name));
      const auto [start, end] = it->second;
      all.push_back(end - start);
      if (window.holds(start, end)) inside.push_back(end - start);
    } else {
      std::vector<double> per_rank, per_rank_inside;
      for (const auto& timings : run.timings) {
        const core::OpTiming& t = timings.at(op.id);
        per_rank.push_back(t.end - t.start);
        if (window.holds(t.start, t.end)) per_rank_inside.push_back(t.end - t.start);
      }
      all.push_back(mean(per_rank));
      if (!per_rank_inside.empty()) inside.push_back(mean(per_rank_inside));
    }
  }
  if (inside_count) *inside_count = static_cast<int>(inside.size());
  return inside.empty() ? all : inside;
}

std::string grid_prefix(const core::GemmShape& shape) {
  return fmt::format("gemm all busy {}x{}x{} #", shape.m, shape.n, shape.k);
}

std::vector<core::GemmShape> grid_shapes(const std::vector<std::int64_t>& axis) {
  std::vector<core::GemmShape> shapes;
  for (std::int64_t m : axis)
    for (std::int64_t n : axis)
      for (std::int64_t k : axis) shapes.push_back({m, n, k});
  return shapes;
}

// The GEMM grid on every rank at once, each shape after a small all-reduce that lines the ranks
// up again (drift would leave the slower rank's last instances running alone); returns the last
// grid op (the collectives wait for it), or -1 without a grid.
int add_gemm_grid(core::Program& program, const SweepSpec& spec) {
  if (spec.gemm_axis.empty()) return -1;
  int last = -1;
  for (const core::GemmShape& shape : grid_shapes(spec.gemm_axis)) {
    last = add_collective(program, CollectiveKind::all_reduce, 4,
                          fmt::format("gemm grid line-up {}x{}x{}", shape.m, shape.n, shape.k),
                          last < 0 ? std::vector<int>{} : std::vector<int>{last});
    for (int rep = -1; rep < spec.gemm_repeats; ++rep) {
      const std::string name = rep < 0 ? "warm-up " + grid_prefix(shape) : grid_prefix(shape) + std::to_string(rep);
      last = add_compute(program, shape.flops(), name, {last});
      program.ops[static_cast<std::size_t>(last)].gemms = {shape};
    }
  }
  return last;
}

// The median of every rank's run of the ops named `prefix`: a preemption in one instance of a
// microsecond GEMM would decide a mean.
double median_over_ranks(const core::Program& program, const core::RunResult& run, const std::string& prefix) {
  std::vector<double> seconds;
  for (const core::ProgramOp& op : program.ops)
    if (op.name.starts_with(prefix))
      for (const auto& timings : run.timings) seconds.push_back(timings.at(op.id).end - timings.at(op.id).start);
  if (seconds.empty()) return 0;
  std::sort(seconds.begin(), seconds.end());
  const std::size_t half = seconds.size() / 2;
  return seconds.size() % 2 ? seconds[half] : (seconds[half - 1] + seconds[half]) / 2;
}

}  // namespace

HostMeasurement measure_host(const std::vector<std::int64_t>& axis, double min_seconds_per_shape,
                             const std::function<void(int, int)>& progress) {
  HostMeasurement host;
  host.axis = axis;
  host.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto resources = detail::make_host_resources();
  host.gemm_flops_per_second = resources->calibrate();
  host.memory_bytes_per_second = resources->memory_bandwidth();
  const std::vector<core::GemmShape> shapes = grid_shapes(axis);
  for (const core::GemmShape& shape : shapes) {
    // A fresh resource per shape: its operands are freed before the next, so a grid of large
    // shapes never holds them all (the busy grid of the sweep does: the executor prepares them all).
    auto shape_resources = detail::make_host_resources();
    host.gemms.push_back({shape, time_gemm(*shape_resources, shape, min_seconds_per_shape)});
    if (progress) progress(static_cast<int>(host.gemms.size()), static_cast<int>(shapes.size()));
  }
  return host;
}

core::Program sweep_program(const SweepSpec& spec) {
  core::Program program;
  program.mesh = core::DeviceMesh({spec.procs}, {"world"});
  program.world_size = spec.procs;
  program.iterations = 1;
  program.streams = {"compute", "comm"};
  // The collectives start once the grid is done: they would slow it, and it them.
  const int grid_done = add_gemm_grid(program, spec);
  std::vector<int> after_grid = grid_done >= 0 ? std::vector<int>{grid_done} : std::vector<int>{};
  // Each kind and size starts with an untimed instance: the first of a size grows the buffers and
  // Gloo's scratch (allocation and first touch), which no steady-state step pays.
  for (const Swept& swept : kSwept)
    for (double bytes : spec.sizes) {
      add_collective(program, swept.kind, bytes, "warm-up " + sweep_prefix(swept, bytes), std::exchange(after_grid, {}),
                     swept.dtype);
      for (int rep = 0; rep < spec.repeats; ++rep)
        add_collective(program, swept.kind, bytes, sweep_prefix(swept, bytes) + std::to_string(rep), {}, swept.dtype);
    }
  // Interference: all-reduces alone, compute alone (after them), then both at once.
  int last = add_collective(program, CollectiveKind::all_reduce, spec.interference_bytes, "warm-up interference", {});
  for (int i = 0; i < spec.interference_ops; ++i)
    last = add_collective(program, CollectiveKind::all_reduce, spec.interference_bytes,
                          fmt::format("interference comm alone #{}", i), {});
  for (int i = 0; i < spec.interference_ops; ++i)
    last = add_compute(program, spec.interference_flops, fmt::format("interference compute alone #{}", i),
                       i == 0 ? std::vector<int>{last} : std::vector<int>{});
  const int compute_done = last;
  for (int i = 0; i < spec.interference_comm_ops; ++i)
    last = add_collective(program, CollectiveKind::all_reduce, spec.interference_bytes,
                          fmt::format("interference comm beside compute #{}", i),
                          i == 0 ? std::vector<int>{compute_done} : std::vector<int>{});
  const int comm_done = last;
  for (int i = 0; i < spec.interference_ops; ++i)
    add_compute(program, spec.interference_flops, fmt::format("interference compute beside comm #{}", i), {});
  // Memory-bound ops on every rank at once (flops 0: the executor streams y += a x over the bytes),
  // once the collectives are done.
  for (int i = 0; i < spec.interference_ops; ++i) {
    const int op = add_compute(program, 0, fmt::format("stream shared #{}", i),
                               i == 0 ? std::vector<int>{comm_done} : std::vector<int>{});
    program.ops[static_cast<std::size_t>(op)].bytes_accessed = static_cast<std::int64_t>(spec.stream_bytes);
    program.ops[static_cast<std::size_t>(op)].op_class = "elementwise";
  }
  return program;
}

SweepResult read_sweep(const SweepSpec& spec, const core::Program& program, const core::RunResult& run) {
  if (run.world_size != spec.procs || run.timings.empty())
    throw core::InputError(fmt::format("the sweep's result has {} ranks, expected {}", run.world_size, spec.procs));
  SweepResult result;
  for (const core::GemmShape& shape : grid_shapes(spec.gemm_axis))
    result.busy_gemms.push_back({shape, median_over_ranks(program, run, grid_prefix(shape))});
  for (const Swept& swept : kSwept)
    for (double bytes : spec.sizes) {
      const std::string prefix = sweep_prefix(swept, bytes);
      // The mean, not the median: Gloo on a busy host stalls now and then for a scheduler tick,
      // and a training step's collectives add up those stalls as their mean says.
      result.samples.push_back({swept.kind, swept.dtype, spec.procs, bytes, mean(durations(program, run, prefix))});
    }
  // Beside: only what ran wholly while the other kind ran on every rank (the collectives outlast
  // the compute; those after it ran alone).
  const double comm_alone = mean(durations(program, run, "interference comm alone"));
  const double compute_alone = mean(durations(program, run, "interference compute alone"));
  const Window comm_window = common_window(program, run, "interference comm beside");
  const Window compute_window = common_window(program, run, "interference compute beside");
  const double comm_beside =
      mean(durations(program, run, "interference comm beside", compute_window, &result.comm_ops_beside));
  const double compute_beside =
      mean(durations(program, run, "interference compute beside", comm_window, &result.compute_ops_beside));
  if (compute_alone > 0) result.compute_slowdown = std::max(1.0, compute_beside / compute_alone);
  const double stream = mean(durations(program, run, "stream shared"));
  if (stream > 0) result.shared_memory_bytes_per_second = spec.procs * spec.stream_bytes / stream;
  if (comm_alone > 0) result.communication_slowdown = std::max(1.0, comm_beside / comm_alone);
  return result;
}

GlooCost gloo_cost(CollectiveKind kind, int p) {
  const double q = static_cast<double>(p);
  switch (kind) {
    case CollectiveKind::all_reduce:  // ring: reduce-scatter then all-gather around the ring
      return {2 * (p - 1), 2 * (q - 1) / q};
    case CollectiveKind::all_gather:  // ring
      return {p - 1, (q - 1) / q};
    case CollectiveKind::reduce_scatter:  // recursive halving: log2 p exchanges of halving blocks
      return {static_cast<int>(std::lround(std::log2(q))), (q - 1) / q};
    case CollectiveKind::broadcast:  // one-to-all: the root sends the buffer to each rank
      return {1, q - 1};
    case CollectiveKind::all_to_all:  // pairwise
      return {p - 1, (q - 1) / q};
    case CollectiveKind::scatter:  // one-to-all: the root sends each rank its block
      return {1, (q - 1) / q};
  }
  return {};
}

double predict(const NetworkFit& fit, const CollectiveSample& sample, int cores) {
  const GlooCost cost = gloo_cost(sample.kind, sample.procs);
  const double contention = std::max(1.0, static_cast<double>(sample.procs) / std::max(1, cores));
  const KindFit& k = (sample.dtype == core::DType::float32 ? fit.kinds : fit.half_kinds).at(sample.kind);
  return k.overhead + cost.steps * k.alpha + cost.volume * contention * sample.bytes * k.beta;
}

namespace {

// Rows scaled by 1/sqrt(t): between absolute error (the large collectives that dominate a training
// step decide the bandwidth) and relative error (the small ones still shape the fixed costs). A
// negative coefficient is pinned to 0 and the rest refitted (an active-set loop over three unknowns).
KindFit fit_kind(const std::vector<CollectiveSample>& samples, int cores) {
  const Eigen::Index n = static_cast<Eigen::Index>(samples.size());
  Eigen::MatrixXd a(n, 3);
  Eigen::VectorXd target(n);
  bool steps_vary = false;
  for (Eigen::Index i = 0; i < n; ++i) {
    const CollectiveSample& s = samples[static_cast<std::size_t>(i)];
    const GlooCost cost = gloo_cost(s.kind, s.procs);
    const double contention = std::max(1.0, static_cast<double>(s.procs) / std::max(1, cores));
    steps_vary = steps_vary || cost.steps != gloo_cost(s.kind, samples.front().procs).steps;
    const double w = 1 / std::sqrt(s.seconds);
    a.row(i) << w, cost.steps * w, cost.volume * contention * s.bytes * w;
    target(i) = s.seconds * w;
  }
  std::vector<bool> free = {true, steps_vary, true};
  Eigen::Vector3d coefficients = Eigen::Vector3d::Zero();
  for (int round = 0; round < 3; ++round) {
    std::vector<Eigen::Index> columns;
    for (Eigen::Index c = 0; c < 3; ++c)
      if (free[static_cast<std::size_t>(c)]) columns.push_back(c);
    Eigen::MatrixXd sub(n, static_cast<Eigen::Index>(columns.size()));
    for (std::size_t c = 0; c < columns.size(); ++c) sub.col(static_cast<Eigen::Index>(c)) = a.col(columns[c]);
    const Eigen::VectorXd solution = sub.colPivHouseholderQr().solve(target);
    coefficients.setZero();
    bool negative = false;
    for (std::size_t c = 0; c < columns.size(); ++c) {
      coefficients(columns[c]) = solution(static_cast<Eigen::Index>(c));
      if (solution(static_cast<Eigen::Index>(c)) < 0)
        free[static_cast<std::size_t>(columns[c])] = false, negative = true;
    }
    if (!negative) break;
    coefficients = coefficients.cwiseMax(0.0);
  }
  return {coefficients(0), coefficients(1), coefficients(2)};
}

}  // namespace

NetworkFit fit_network(const std::vector<CollectiveSample>& samples, int cores) {
  std::map<std::pair<bool, CollectiveKind>, std::vector<CollectiveSample>> by_kind;  // (half precision, kind)
  for (const CollectiveSample& s : samples) by_kind[{s.dtype != core::DType::float32, s.kind}].push_back(s);
  NetworkFit fit;
  for (const auto& [key, group] : by_kind) {
    const CollectiveKind kind = key.second;
    if (group.size() < 2)
      throw core::InputError(fmt::format("fitting {} needs at least 2 sizes", core::collective_kind_name(kind)));
    KindFit k = fit_kind(group, cores);
    if (!(k.beta > 0)) {
      // The times did not grow with size (a noisy host): all of the largest one's time is
      // transfer, which bounds the bandwidth from below.
      const CollectiveSample& largest =
          *std::max_element(group.begin(), group.end(), [](const auto& a, const auto& b) { return a.bytes < b.bytes; });
      const double contention = std::max(1.0, static_cast<double>(largest.procs) / std::max(1, cores));
      k = {0, 0, largest.seconds / (gloo_cost(kind, largest.procs).volume * contention * largest.bytes)};
    }
    if (!(k.beta > 0) || !std::isfinite(k.beta))
      throw core::InputError(fmt::format("no {} time was measured", core::collective_kind_name(kind)));
    (key.first ? fit.half_kinds : fit.kinds)[kind] = k;
  }
  double error = 0;
  for (const CollectiveSample& s : samples) error += std::abs(predict(fit, s, cores) / s.seconds - 1);
  fit.mean_abs_error = error / static_cast<double>(samples.size());
  return fit;
}

std::string platform_yaml(const Calibration& c) {
  const HostMeasurement& host = c.host;
  // The peak is the best rate seen, blocks or shapes, so every efficiency is at most 1.
  double peak = host.gemm_flops_per_second;
  for (const GemmTiming& g : host.gemms) peak = std::max(peak, g.shape.flops() / g.seconds);
  std::string axis;
  for (std::int64_t s : host.axis) axis += (axis.empty() ? "" : ", ") + std::to_string(s);
  // Rows of the grid's last axis, each on a line indented as `indent`.
  const auto efficiencies = [&](const std::vector<GemmTiming>& gemms, const std::string& indent) {
    std::string list;
    for (std::size_t i = 0; i < gemms.size(); ++i) {
      const double e = std::clamp(gemms[i].shape.flops() / gemms[i].seconds / peak, 1e-4, 1.0);
      list += fmt::format("{}{:.4f}", i == 0 ? "" : (i % host.axis.size() == 0 ? ",\n" + indent : ", "), e);
    }
    return list;
  };
  const std::string efficiency = efficiencies(host.gemms, "        ");
  // One grid per process count, each in the host grid's order (a grid of other shapes is left out).
  std::string busy;
  for (const Calibration::BusyGrid& grid : c.busy) {
    const bool same_grid = grid.gemms.size() == host.gemms.size() &&
                           std::equal(host.gemms.begin(), host.gemms.end(), grid.gemms.begin(),
                                      [](const GemmTiming& a, const GemmTiming& b) { return a.shape == b.shape; });
    if (same_grid)
      busy += fmt::format("          - ranks: {}\n            values: [\n              {}]\n", grid.procs,
                          efficiencies(grid.gemms, "              "));
  }
  if (!busy.empty())
    busy =
        "        # The same shapes on as many processes at once, each on its own core (the median): what\n"
        "        # SPMD ranks get, sharing the host's memory system and clocks.\n"
        "        busy:\n" +
        busy;
  const int procs = *std::max_element(c.procs.begin(), c.procs.end());
  double fastest = INFINITY;  // seconds per byte of the fastest kind: the links' rate
  for (const auto& [kind, k] : c.network.kinds) fastest = std::min(fastest, k.beta);
  std::string per_kind;
  auto entry = [&](const std::string& key, const KindFit& k) {
    per_kind += fmt::format(
        "      {}: {{name: gloo, bandwidth_fraction: {:.4g}, base_latency_us: {:.4g}, step_latency_us: {:.4g}}}\n", key,
        std::min(1.0, fastest / k.beta), k.overhead * 1e6, k.alpha * 1e6);
  };
  for (const auto& [kind, k] : c.network.kinds) entry(std::string(core::collective_kind_name(kind)), k);
  // Gloo has no bfloat16: it reduces it as float16 (exec/README.md), so both get the half fit.
  for (const auto& [kind, k] : c.network.half_kinds)
    for (const char* dtype : {"float16", "bfloat16"})
      entry(fmt::format("{}/{}", core::collective_kind_name(kind), dtype), k);
  // The executor's kernels run every class at the measured rates: each at 1 of the peak above.
  std::string op_classes;
  for (std::string_view name : core::kOpClasses) op_classes += fmt::format("      {}: {{flops: 1, memory: 1}}\n", name);
  std::string measured;
  for (const CollectiveSample& s : c.sweep.samples)
    measured +=
        fmt::format("#   {:<15} {:<8} p={} {:>10} B  measured {:>9.1f} us  fitted {:>9.1f} us\n",
                    core::collective_kind_name(s.kind), core::dtype_name(s.dtype), s.procs,
                    static_cast<std::int64_t>(s.bytes), s.seconds * 1e6, predict(c.network, s, host.cores) * 1e6);
  return fmt::format(
      R"(# Written by `{command}` on {host} ({date}).
# A `cpu` platform with this host's figures: `stratsim simulate --platform THIS_FILE`. It predicts
# `stratsim run --compute gemm` (Gloo over loopback) on this host; raise procs to simulate more
# ranks (cores stays: ranks beyond it share the cores).
#
# Network fit per kind, t = overhead + steps x alpha + volume x max(1, procs/cores) x n / bandwidth,
# over {samples} measurements (mean |error| {fit_error:.1f} %; each a mean over repeats):
{measured}preset: cpu
procs: {procs}
cores: {cores}
gflops: {gflops:.4g}
dram_gbps: {dram:.4g}
# All ranks streaming at once share this ({shared_procs} processes measured together).
host_dram_gbps: {shared_dram:.4g}
# The links at the fastest kind's bandwidth; each kind's own share, fixed cost and step cost are
# under cost_model.network.per_kind.
gbps: {gbps:.4g}
lat_us: 0
overhead_us: 0
# Loopback copies share the memory system, but the fitted per-process bandwidth already holds what
# sharing cost at the measured process counts: no second bound.
loopback_gbps: 100000
cost_model:
  name: calibrated on {host} ({date})
  sources:
    - "stratsim calibrate: Eigen float32 GEMMs on a {n_axis}^3 grid of shapes (best of repeats), y += a x over 64 MiB, Gloo collectives over loopback on {procs_list} processes through the executor"
  compute:
    launch_overhead_us: 0
    kernel_floor_us: 0
    # Rates relative to the peak above (gflops): the executor's kernels, measured.
    op_classes:
{op_classes}    gemm:
      float32:
        m: [{axis}]
        n: [{axis}]
        k: [{axis}]
        efficiency: [
        {efficiency}]
{busy}  network:
    link_efficiency: {{loopback: 1.0}}
    algorithms: {{all_reduce: ring, all_gather: ring, reduce_scatter: rhd, broadcast: direct, all_to_all: ring}}
    per_kind:
{per_kind}
  interference:
    # Compute beside all-reduces (Gloo's transport threads take cores), and all-reduces beside
    # compute, against each alone; measured on {interference_procs} processes, from the ops that ran
    # wholly beside the other kind on every rank: {compute_beside} compute ops, {comm_beside} all-reduces
    # (0: none did, and the factor averages every op, diluted by those that ran alone).
    compute_slowdown: {compute_slowdown:.3f}
    communication_slowdown: {comm_slowdown:.3f}
)",
      fmt::arg("command", c.command), fmt::arg("host", c.host_name), fmt::arg("date", c.date),
      fmt::arg("samples", c.sweep.samples.size()), fmt::arg("fit_error", 100 * c.network.mean_abs_error),
      fmt::arg("measured", measured), fmt::arg("procs", procs), fmt::arg("cores", host.cores),
      fmt::arg("gflops", peak / 1e9), fmt::arg("dram", host.memory_bytes_per_second / 1e9),
      fmt::arg("shared_procs", c.procs.front()), fmt::arg("shared_dram", c.sweep.shared_memory_bytes_per_second / 1e9),
      fmt::arg("gbps", 1e-9 / fastest), fmt::arg("per_kind", per_kind), fmt::arg("n_axis", host.axis.size()),
      fmt::arg("procs_list", fmt::join(c.procs, " and ")), fmt::arg("axis", axis), fmt::arg("efficiency", efficiency),
      fmt::arg("busy", busy), fmt::arg("op_classes", op_classes), fmt::arg("interference_procs", c.procs.front()),
      fmt::arg("compute_slowdown", c.sweep.compute_slowdown), fmt::arg("compute_beside", c.sweep.compute_ops_beside),
      fmt::arg("comm_beside", c.sweep.comm_ops_beside), fmt::arg("comm_slowdown", c.sweep.communication_slowdown));
}

}  // namespace stratsim::exec
