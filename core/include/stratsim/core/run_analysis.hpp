// What a run means, simulated or measured: step times, throughput, per rank and stream busy,
// exposed and overlapped communication as Holistic Trace Analysis defines it, waits at
// collectives, per-collective algbw/busbw, link utilisation. Pure functions of the program and the
// RunResult, so the simulator and real execution report alike (formats in sim/README.md).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "stratsim/core/model.hpp"
#include "stratsim/core/plan.hpp"
#include "stratsim/core/program.hpp"
#include "stratsim/core/run_result.hpp"

namespace stratsim::core {

// What one step processes, for throughput (from the plan: batch per rank times data-parallel ranks).
struct Workload {
  double samples_per_step = 0;   // global batch per iteration
  double tokens_per_sample = 0;  // 0 for non-sequence models
};

// Global samples per micro-step: the per-rank batch times the ranks that see distinct data (the
// mesh dims no tensor-parallel step shards over); tokens from the plan's or the model's seq_len.
Workload workload_of(const Model& model, const Plan& plan);

struct StreamStats {
  std::string stream;
  double busy = 0;  // union of this stream's op intervals
};

struct RankStats {
  std::vector<int> ranks;            // the ranks this recorded rank stands for
  double compute = 0;                // union of compute-op intervals
  double communication = 0;          // union of collective intervals (start..end)
  double exposed_communication = 0;  // |union(comm) \ union(compute)|
  double overlap = 0;                // HTA comp_comm_overlap: |comm ∩ compute| / |comm| (0 when no comm)
  double idle = 0;                   // makespan minus |union(compute) ∪ union(comm)|
  double wait_at_collective = 0;     // sum over collectives of start - issue
  std::vector<StreamStats> streams;
};

struct IterationStats {
  int iteration = 1;
  double start = 0, end = 0, step_time = 0;
  double samples_per_second = 0, tokens_per_second = 0;
  double model_tflops_per_device = 0;  // compute FLOPs of the iteration / step time / 1e12
  // Within [start, end) on the first recorded rank, as RankStats defines them.
  double communication = 0, exposed_communication = 0, overlap = 0;
};

struct CollectiveStats {
  int op = 0;
  std::string name;
  CollectiveKind kind = CollectiveKind::all_reduce;
  std::string group;  // "dp"
  int instance = 0;
  std::string algorithm;  // CollectiveRun::algorithm
  int group_size = 1;
  double bytes = 0;
  double start = 0, end = 0, duration = 0;
  double algbw = 0, busbw = 0;  // bytes/s, nccl-tests definitions
};

struct Analysis {
  std::vector<IterationStats> iterations;
  std::vector<RankStats> ranks;  // per recorded rank
  std::vector<CollectiveStats> collectives;
  std::vector<LinkLoad> busiest_links;  // top 10 by utilisation
  double makespan = 0;
};

Analysis analyse(const Program& program, const RunResult& result, const Workload& workload);

// Per recorded rank, RankStats restricted to the window [begin, end): every op interval (and a
// collective's wait, issue..start) clipped to it, idle = (end - begin) - |compute ∪ communication|.
// analyse() computes its per-rank totals with it over [0, makespan], so a range selected in the
// viewer and the run's totals share one code path.
std::vector<RankStats> analyse_window(const Program& program, const RunResult& result, double begin, double end);

// The text report and its JSON form ("stratsim.simulation" v1 whatever the source, with "source"
// for measured runs; documented in sim/README.md). The producer's RunResult::mode_notes, notes and
// extra go where run_result.hpp says; nothing else in them is specific to one producer.
std::string text_report(const Program& program, const RunResult& result, const Analysis& analysis);
nlohmann::json json_report(const Program& program, const RunResult& result, const Analysis& analysis);

// "12.345 ms": seconds with an SI prefix (s, ms, us, ns) and three decimals; "0 s" below 0.5 ps.
std::string format_seconds(double seconds);
// Compact rank list: "3", "0-1023", "0-3,8-11"; past max_ranges ranges it ends ",... (N ranks)".
std::string describe_ranks(const std::vector<int>& ranks, std::size_t max_ranges = 4);

// nccl-tests bus-bandwidth factor: all_reduce 2(p-1)/p; all_gather, reduce_scatter, all_to_all
// (p-1)/p; broadcast 1. Throws std::invalid_argument for p < 1.
double busbw_factor(CollectiveKind kind, int p);

}  // namespace stratsim::core
