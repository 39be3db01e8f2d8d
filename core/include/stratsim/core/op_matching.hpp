// Collective by collective, a prediction against a measurement: each collective one rank ran is
// matched to its counterpart by (rank, process group, kind, sequence number within that group and
// kind in the step, bytes), and the duration error of every pair is summed up per collective kind
// x size and per stream, with the mean and the geometric mean of |error| that the simulation
// literature reports. What cannot be matched is listed with the reason, not an error that stops
// the comparison. `stratsim compare` prints it; the viewer shows the same matching.
//
//   const core::ProfilerTrace trace = core::read_profiler_trace({"traces/"});
//   const core::CollectiveSide measured = core::trace_side(trace, "traces/");
//   const core::CollectiveSide predicted = core::timeline_side(timeline, "sim.json", measured.ranks);
//   const core::OpComparison c = core::match_collectives(predicted, measured);
//   std::cout << core::op_comparison_text(c, predicted, measured, /*top=*/15);
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "stratsim/core/comparison.hpp"
#include "stratsim/core/profiler_trace.hpp"
#include "stratsim/core/timeline.hpp"

namespace stratsim::core {

// One collective on one rank, from either side, reduced to what matching needs. Compact: a
// comparison holds one per collective per rank, hundreds of thousands of them.
struct SideCollective {
  std::int32_t group = -1;      // index into CollectiveSide::groups; -1 when the source does not say
  std::int32_t iteration = -1;  // 1-based training step; -1 outside every profiled step
  std::int32_t stream = 0;      // index into CollectiveSide::streams
  std::int32_t label = 0;       // index into CollectiveSide::labels
  std::int32_t source = 0;      // a timeline's program op id; a trace's index into the rank's collectives
  std::int32_t comm_key = 0;    // index into CollectiveSide::comm_keys
  std::int8_t kind = -1;        // CollectiveKind; -1 for a collective stratsim does not model
  std::int64_t bytes = -1;      // program.hpp's logical bytes; -1 when the source does not say
  // What the rank spent on it, waiting for its peers included (a profiler's collective kernel or
  // Gloo annotation, a simulated op's issue..end).
  double begin = 0, end = 0;
  double duration() const { return end - begin; }
};

struct CollectiveSide {
  std::string file;
  std::string description;  // "simulation (representative), 2 ranks" / "PyTorch profiler trace (gloo), 2 ranks"
  int world_size = 0;
  std::vector<int> ranks;                            // the ranks it has, ascending
  std::vector<std::vector<SideCollective>> by_rank;  // parallel to ranks, each in issue order
  std::vector<std::vector<int>> groups;              // member ranks, ascending
  std::vector<std::string> group_names;              // "dp", "default_pg"
  std::vector<std::string> streams;                  // stream names
  std::vector<std::string> labels;                   // "ddp.bucket0", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
  std::vector<std::string> unmodelled_kinds;         // PyTorch's name of each label's collective when kind is -1
  std::vector<std::string> comm_keys;                // CommDebugMode keys: "c10d.allreduce_"
  std::map<int, double> step_times;                  // iteration -> step time, seconds
  std::string step_source;                           // how step_times were taken
};

// A timeline's collectives (simulated, or a measured stratsim run) on `ranks` (default: the first
// rank each recorded rank stands for). A representative simulation's recorded rank serves every
// rank it stands for.
CollectiveSide timeline_side(const Timeline& timeline, const std::string& file, const std::vector<int>& ranks = {});
// A profiler trace's collectives; ProfilerStep#N is iteration N + 1 (the profiler's steps count from 0).
CollectiveSide trace_side(const ProfilerTrace& trace, const std::string& file);

struct MatchedCollective {
  int rank = 0;
  int predicted_iteration = 0, measured_iteration = 0;
  int sequence = 0;  // its position among the step's collectives of this kind on this group and rank
  std::int32_t predicted = 0, measured = 0;  // indices into the sides' by_rank of `rank`
  double predicted_duration = 0, measured_duration = 0;
  std::optional<double> error() const;  // (predicted - measured) / measured; none when measured is 0
};

struct UnmatchedCollective {
  bool predicted_side = false;  // which side's collective
  int rank = 0;
  std::int32_t index = 0;  // into that side's by_rank of `rank`
  std::string reason;
};

// Errors over a set of matched pairs.
struct ErrorSummary {
  std::string label;  // "all_reduce 4-16 KiB", "stream nccl", "all"
  int count = 0;
  double predicted_total = 0, measured_total = 0;  // seconds
  std::optional<double> mean_abs_error, geomean_abs_error;
};

struct OpComparison {
  std::vector<std::pair<int, int>> iterations;  // (predicted, measured) iterations compared
  std::string alignment;                        // how they were paired, in words
  std::vector<MatchedCollective> matched;       // by rank, then predicted issue order
  std::vector<UnmatchedCollective> unmatched;
  int predicted_compared = 0, measured_compared = 0;  // collectives in the compared iterations
  std::vector<std::string> notes;                     // what was inferred or left out, in words
  std::vector<ComparisonRow> steps;                   // step time per iteration pair
  ErrorSummary overall;
  std::vector<ErrorSummary> by_kind_size, by_stream;
};

OpComparison match_collectives(const CollectiveSide& predicted, const CollectiveSide& measured);

// CommDebugMode counts of the compared iterations, per key and process group (by members), on
// the lowest rank both sides have, and how the measured run's differ from the prediction's.
struct CountDifference {
  std::string comm_key;  // "c10d.allreduce_"
  std::string group;     // "dp [0-1]" (the predicted side's name, else the measured side's)
  int predicted = 0, measured = 0;
  std::string change;  // "added" (only measured), "removed" (only predicted), "more", "fewer", "unchanged"
};
std::vector<CountDifference> count_differences(const CollectiveSide& predicted, const CollectiveSide& measured,
                                               const OpComparison& comparison);

// "1 KiB - 4 KiB": the power-of-4 size bucket a collective's bytes fall in ("< 1 KiB", ">= 1 TiB",
// "of unknown size" for -1).
std::string size_bucket(std::int64_t bytes);
// Summary over `errors`: mean and geometric mean of |error| (an error of exactly 0 counts as
// 1e-9 in the geometric mean, which would otherwise be 0).
ErrorSummary summarise_errors(std::string label, const std::vector<MatchedCollective>& pairs);

std::string op_comparison_text(const OpComparison& comparison, const CollectiveSide& predicted,
                               const CollectiveSide& measured, int top);
// "format": "stratsim.op_comparison", version 1.
nlohmann::json op_comparison_json(const OpComparison& comparison, const CollectiveSide& predicted,
                                  const CollectiveSide& measured);

}  // namespace stratsim::core
