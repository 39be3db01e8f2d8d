// analyse(): step times and throughput per iteration, per recorded rank the HTA-style temporal
// breakdown (compute, communication, exposed communication, overlap, idle, wait at collectives),
// per collective instance algbw/busbw, and the busiest links. Every per-rank quantity is a
// measure of a union of intervals, computed by sorting and merging (O(n log n) in the op count).
#include "stratsim/core/run_analysis.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

#include "run_views.hpp"

namespace stratsim::core {
namespace {

using Interval = std::pair<double, double>;  // [first, second)

// Sorts and merges intervals into disjoint ones in increasing order. Empty intervals (zero-duration
// ops) are dropped: they add nothing to any measure.
std::vector<Interval> merge(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end());
  std::vector<Interval> merged;
  for (const auto& [begin, end] : intervals) {
    if (end <= begin) continue;
    if (!merged.empty() && begin <= merged.back().second) merged.back().second = std::max(merged.back().second, end);
    else merged.emplace_back(begin, end);
  }
  return merged;
}

double measure(const std::vector<Interval>& merged) {
  double total = 0;
  for (const auto& [begin, end] : merged) total += end - begin;
  return total;
}

// |a ∩ b| for two merged (disjoint, sorted) lists: one sweep over both.
double intersection(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double total = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double begin = std::max(a[i].first, b[j].first);
    const double end = std::min(a[i].second, b[j].second);
    if (end > begin) total += end - begin;
    // Advance whichever ends first; the other may still overlap the next interval.
    if (a[i].second < b[j].second) ++i;
    else ++j;
  }
  return total;
}

// The run's makespan, or when the result carries none (hand-made results), the latest end seen.
double makespan_of(const RunResult& result) {
  if (result.makespan > 0) return result.makespan;
  double makespan = 0;
  for (double end : result.iteration_end) makespan = std::max(makespan, end);
  for (const auto& rank : result.timings)
    for (const OpTiming& t : rank) makespan = std::max(makespan, t.end);
  return makespan;
}

// Communication, exposed communication and overlap of one rank inside one iteration's window
// [it.start, it.end): every op interval clipped to the window, so work that spills over from the
// previous iteration counts where it runs.
void window_overlap(const Program& program, const std::vector<OpTiming>& timings, IterationStats& it) {
  std::vector<Interval> compute, communication;
  const std::size_t n = std::min(timings.size(), program.ops.size());
  for (std::size_t i = 0; i < n; ++i) {
    const Interval clipped{std::max(timings[i].start, it.start), std::min(timings[i].end, it.end)};
    if (clipped.second <= clipped.first) continue;
    (program.ops[i].type == OpType::compute ? compute : communication).push_back(clipped);
  }
  const std::vector<Interval> compute_union = merge(std::move(compute));
  const std::vector<Interval> comm_union = merge(std::move(communication));
  it.communication = measure(comm_union);
  const double both = intersection(comm_union, compute_union);
  it.exposed_communication = it.communication - both;
  it.overlap = it.communication > 0 ? both / it.communication : 0.0;
}

std::vector<IterationStats> iteration_stats(const Program& program, const RunResult& result, const Workload& workload) {
  const std::size_t count = result.iteration_end.size();
  std::vector<double> flops(count, 0.0);
  for (const ProgramOp& op : program.ops)
    if (op.type == OpType::compute && op.iteration >= 1 && static_cast<std::size_t>(op.iteration) <= count)
      flops[op.iteration - 1] += op.flops;
  std::vector<IterationStats> out;
  double start = 0;
  for (std::size_t i = 0; i < count; ++i) {
    IterationStats it;
    it.iteration = static_cast<int>(i) + 1;
    it.start = start;
    it.end = result.iteration_end[i];
    it.step_time = it.end - it.start;
    if (it.step_time > 0) {
      it.samples_per_second = workload.samples_per_step / it.step_time;
      it.tokens_per_second = it.samples_per_second * workload.tokens_per_sample;
      it.model_tflops_per_device = flops[i] / it.step_time / 1e12;
    }
    if (!result.timings.empty()) window_overlap(program, result.timings.front(), it);
    out.push_back(it);
    start = it.end;
  }
  return out;
}

// One recorded rank inside [begin, end): every interval clipped to the window, so a range
// selected in the viewer and the run's totals (the window [0, makespan]) come from this one code.
RankStats rank_stats(const Program& program, const std::vector<OpTiming>& timings, std::vector<int> ranks, double begin,
                     double end) {
  RankStats stats;
  stats.ranks = std::move(ranks);
  std::vector<Interval> compute, communication;
  std::vector<std::vector<Interval>> per_stream(program.streams.size());
  const auto clip = [&](double from, double to) { return Interval{std::max(from, begin), std::min(to, end)}; };
  const std::size_t n = std::min(timings.size(), program.ops.size());
  for (std::size_t i = 0; i < n; ++i) {
    const ProgramOp& op = program.ops[i];
    const OpTiming& t = timings[i];
    const Interval interval = clip(t.start, t.end);
    if (op.type == OpType::compute) {
      compute.push_back(interval);
    } else {
      communication.push_back(interval);
      const Interval wait = clip(t.issue, t.start);
      stats.wait_at_collective += std::max(0.0, wait.second - wait.first);
    }
    if (op.stream >= 0 && static_cast<std::size_t>(op.stream) < per_stream.size())
      per_stream[op.stream].push_back(interval);
  }
  const std::vector<Interval> compute_union = merge(std::move(compute));
  const std::vector<Interval> comm_union = merge(std::move(communication));
  stats.compute = measure(compute_union);
  stats.communication = measure(comm_union);
  const double both = intersection(comm_union, compute_union);
  stats.exposed_communication = stats.communication - both;
  stats.overlap = stats.communication > 0 ? both / stats.communication : 0.0;
  stats.idle = std::max(0.0, (end - begin) - (stats.compute + stats.communication - both));
  for (std::size_t s = 0; s < per_stream.size(); ++s)
    stats.streams.push_back({program.streams[s], measure(merge(std::move(per_stream[s])))});
  return stats;
}

CollectiveStats collective_stats(const Program& program, const CollectiveRun& run) {
  CollectiveStats stats;
  stats.op = run.op;
  stats.instance = run.instance;
  stats.algorithm = run.algorithm;
  stats.group_size = run.group_size;
  stats.bytes = run.bytes;
  stats.start = run.start;
  stats.end = run.end;
  stats.duration = run.end - run.start;
  if (run.op >= 0 && static_cast<std::size_t>(run.op) < program.ops.size()) {
    const ProgramOp& op = program.ops[run.op];
    stats.name = op.name;
    stats.kind = op.kind;
    stats.group = detail::group_name(program, op);
  }
  if (stats.duration > 0) {
    stats.algbw = stats.bytes / stats.duration;
    stats.busbw = stats.algbw * busbw_factor(stats.kind, stats.group_size);
  }
  return stats;
}

std::vector<LinkLoad> busiest(std::vector<LinkLoad> links, std::size_t limit) {
  std::sort(links.begin(), links.end(), [](const LinkLoad& a, const LinkLoad& b) {
    if (a.utilisation != b.utilisation) return a.utilisation > b.utilisation;
    return a.name < b.name;
  });
  if (links.size() > limit) links.resize(limit);
  return links;
}

}  // namespace

Workload workload_of(const Model& model, const Plan& plan) {
  std::set<std::string> tp_dims;
  for (const PlanStep& step : plan.steps)
    if (const auto* tp = std::get_if<ParallelizeStep>(&step.body))
      tp_dims.insert(tp->mesh_dims.begin(), tp->mesh_dims.end());
  int tp_size = 1;
  for (const std::string& dim : tp_dims)
    if (int d = plan.mesh.dim_index(dim); d >= 0) tp_size *= plan.mesh.dim_size(d);
  Workload workload;
  workload.samples_per_step = static_cast<double>(plan.batch_size) * plan.world_size / tp_size;
  workload.tokens_per_sample = static_cast<double>(plan.sequence_length(model.seq_len));
  return workload;
}

Analysis analyse(const Program& program, const RunResult& result, const Workload& workload) {
  Analysis analysis;
  analysis.makespan = makespan_of(result);
  analysis.iterations = iteration_stats(program, result, workload);
  analysis.ranks = analyse_window(program, result, 0.0, analysis.makespan);
  analysis.collectives.reserve(result.collectives.size());
  for (const CollectiveRun& run : result.collectives) analysis.collectives.push_back(collective_stats(program, run));
  analysis.busiest_links = busiest(result.links, 10);
  return analysis;
}

std::vector<RankStats> analyse_window(const Program& program, const RunResult& result, double begin, double end) {
  std::vector<RankStats> ranks;
  ranks.reserve(result.timings.size());
  for (std::size_t s = 0; s < result.timings.size(); ++s)
    ranks.push_back(rank_stats(program, result.timings[s], detail::ranks_of(result, s), begin, std::max(begin, end)));
  return ranks;
}

std::string format_seconds(double seconds) {
  const double magnitude = std::fabs(seconds);
  // Below half a picosecond the value prints as 0.000 ns anyway: that is rounding noise (a makespan
  // minus a union of intervals), so say zero.
  if (magnitude < 5e-13) return "0 s";
  if (magnitude >= 1) return fmt::format("{:.3f} s", seconds);
  if (magnitude >= 1e-3) return fmt::format("{:.3f} ms", seconds * 1e3);
  if (magnitude >= 1e-6) return fmt::format("{:.3f} us", seconds * 1e6);
  return fmt::format("{:.3f} ns", seconds * 1e9);
}

std::string describe_ranks(const std::vector<int>& ranks, std::size_t max_ranges) {
  std::string out;
  std::size_t ranges = 0;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (ranges == max_ranges) return out + fmt::format(",... ({} ranks)", ranks.size());
    if (ranges) out += ',';
    out += j > i ? fmt::format("{}-{}", ranks[i], ranks[j]) : fmt::format("{}", ranks[i]);
    ++ranges;
    i = j + 1;
  }
  return out;
}

double busbw_factor(CollectiveKind kind, int p) {
  if (p < 1) throw std::invalid_argument(fmt::format("a collective needs at least one member, got {}", p));
  switch (kind) {
    case CollectiveKind::all_reduce:
      return 2.0 * (p - 1) / p;
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_to_all:
    case CollectiveKind::scatter:  // nccl-tests: (p-1)/p, the root sends all but its own chunk
      return static_cast<double>(p - 1) / p;
    case CollectiveKind::broadcast:
      return 1.0;
  }
  return 1.0;
}

}  // namespace stratsim::core
