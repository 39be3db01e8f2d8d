// Turns the ranks' measured records into one RunResult, the form every report and timeline
// writer reads.
#include <algorithm>
#include <tuple>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"
#include "stratsim/exec/executor.hpp"

namespace stratsim::exec {
namespace {

void check_records(const core::Program& program, const std::vector<RankRecord>& records) {
  if (static_cast<int>(records.size()) != program.world_size)
    throw core::InputError(fmt::format("{} rank records for a world of {}", records.size(), program.world_size));
  for (int r = 0; r < program.world_size; ++r)
    if (records[r].rank != r || records[r].timings.size() != program.ops.size())
      throw core::InputError(fmt::format("rank record {} does not match the program", r));
}

// A collective instance starts on every member when the last one entered it: until then the
// library was waiting for it (what the simulator calls wait-at-collective).
void collective_runs(const core::Program& program, const std::vector<RankRecord>& records, core::RunResult& result) {
  std::vector<std::vector<std::vector<int>>> instances(program.groups.size());
  for (const core::ProgramOp& op : program.ops) {
    if (op.type != core::OpType::collective) continue;
    auto& groups = instances[op.group];
    if (groups.empty()) groups = program.all_groups(op.group);
    for (int i = 0; i < static_cast<int>(groups.size()); ++i) {
      const std::vector<int>& members = groups[i];
      core::CollectiveRun run;
      run.op = op.id;
      run.instance = i;
      run.algorithm = records[members.front()].algorithms[op.id];
      run.bytes = static_cast<double>(op.bytes);
      run.group_size = static_cast<int>(members.size());
      run.ranks = members;
      for (int rank : members) {
        run.start = std::max(run.start, records[rank].timings[op.id].issue);
        run.end = std::max(run.end, records[rank].timings[op.id].end);
      }
      for (int rank : members) {
        core::OpTiming& timing = result.timings[rank][op.id];
        timing.start = std::min(run.start, timing.end);
      }
      result.collectives.push_back(std::move(run));
    }
  }
  std::sort(result.collectives.begin(), result.collectives.end(), [](const auto& a, const auto& b) {
    return std::tie(a.start, a.op, a.instance) < std::tie(b.start, b.op, b.instance);
  });
}

// The ranks' calibrated GEMM rates and memory bandwidths: what a simulated platform's compute
// peak and DRAM bandwidth should be set from (`cpu:gflops=...,dram_gbps=...`), so they go in the
// report.
void compute_rates(const std::vector<RankRecord>& records, core::RunResult& result) {
  std::vector<double> gflops, gbps;
  for (const RankRecord& record : records) {
    gflops.push_back(record.gemm_flops_per_second / 1e9);
    gbps.push_back(record.memory_bytes_per_second / 1e9);
  }
  const auto [low, high] = std::minmax_element(gflops.begin(), gflops.end());
  result.notes.push_back(fmt::format("GEMM {:.1f}-{:.1f} GFLOP/s per rank", *low, *high));
  result.extra["gemm_gflops_per_rank"] = gflops;
  const auto [slow, fast] = std::minmax_element(gbps.begin(), gbps.end());
  if (*slow <= 0) return;
  result.notes.push_back(fmt::format("memory {:.1f}-{:.1f} GB/s per rank", *slow, *fast));
  result.extra["memory_gbps_per_rank"] = gbps;
}

}  // namespace

core::RunResult assemble(const core::Program& program, const std::vector<RankRecord>& records,
                         const std::string& source, const std::string& platform) {
  check_records(program, records);
  core::RunResult result;
  result.source = source;
  result.mode = "measured";
  result.platform = platform;
  result.world_size = program.world_size;
  for (const RankRecord& record : records) {
    result.recorded.push_back({record.rank});
    result.timings.push_back(record.timings);
    result.wall_seconds = std::max(result.wall_seconds, record.wall_seconds);
  }
  collective_runs(program, records, result);
  compute_rates(records, result);
  result.iteration_end.assign(std::max(program.iterations, 1), 0.0);
  for (const auto& timings : result.timings)
    for (const core::ProgramOp& op : program.ops) {
      result.makespan = std::max(result.makespan, timings[op.id].end);
      if (op.iteration >= 1 && op.iteration <= static_cast<int>(result.iteration_end.size()))
        result.iteration_end[op.iteration - 1] = std::max(result.iteration_end[op.iteration - 1], timings[op.id].end);
    }
  for (std::size_t i = 1; i < result.iteration_end.size(); ++i)
    result.iteration_end[i] = std::max(result.iteration_end[i], result.iteration_end[i - 1]);
  return result;
}

}  // namespace stratsim::exec
