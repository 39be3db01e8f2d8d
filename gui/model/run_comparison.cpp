#include "model/run_comparison.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "stratsim/core/errors.hpp"

namespace stratsim::gui {
namespace {

void require_timeline(const LoadedDocument& document) {
  if (!document.store || document.kind == core::DocumentKind::program)
    throw core::InputError(fmt::format(
        "{}: has no run to compare (a run report or a program): open a timeline (simulate/run --timeline) or a "
        "profiler trace",
        document.path.toStdString()));
}

// A document's collectives: a trace's as read, a timeline's on `ranks` (those of the other side).
core::CollectiveSide side_of(const LoadedDocument& document, const std::vector<int>& ranks) {
  if (document.trace_side) return *document.trace_side;
  return core::timeline_side(document.store->timeline(), document.path.toStdString(), ranks);
}

std::size_t slot_of(const core::CollectiveSide& side, int rank) {
  return static_cast<std::size_t>(std::lower_bound(side.ranks.begin(), side.ranks.end(), rank) - side.ranks.begin());
}

}  // namespace

RunComparison::RunComparison(std::shared_ptr<const LoadedDocument> predicted,
                             std::shared_ptr<const LoadedDocument> measured)
    : predicted_(std::move(predicted)), measured_(std::move(measured)) {
  require_timeline(*predicted_);
  require_timeline(*measured_);
  measured_side_ = measured_->trace_side ? measured_->trace_side
                                         : std::make_shared<const core::CollectiveSide>(side_of(*measured_, {}));
  predicted_side_ = side_of(*predicted_, measured_side_->ranks);
  result_ = core::match_collectives(predicted_side_, *measured_side_);
  counts_ = core::count_differences(predicted_side_, *measured_side_, result_);
}

const core::SideCollective& RunComparison::predictedCollective(const core::MatchedCollective& pair) const {
  return predicted_side_.by_rank[slot_of(predicted_side_, pair.rank)][pair.predicted];
}
const core::SideCollective& RunComparison::measuredCollective(const core::MatchedCollective& pair) const {
  return measured_side_->by_rank[slot_of(*measured_side_, pair.rank)][pair.measured];
}
const core::SideCollective& RunComparison::collectiveOf(const core::UnmatchedCollective& u) const {
  const core::CollectiveSide& side = u.predicted_side ? predicted_side_ : *measured_side_;
  return side.by_rank[slot_of(side, u.rank)][u.index];
}

// A trace's collective is the op trace_timeline made of it on the rank's row; a timeline's is its
// program op on the recorded rank that stands for the rank.
OpRef RunComparison::refOf(const LoadedDocument& document, const core::CollectiveSide& side, int rank,
                           std::int32_t index) const {
  const std::size_t slot = slot_of(side, rank);
  const core::SideCollective& c = side.by_rank[slot][index];
  if (document.trace_side) {
    const auto& ops = document.trace_collective_ops;
    if (slot >= ops.size() || c.source < 0 || static_cast<std::size_t>(c.source) >= ops[slot].size()) return {};
    return {static_cast<int>(slot), ops[slot][c.source]};
  }
  const auto& recorded = document.store->result().recorded;
  for (std::size_t r = 0; r < recorded.size(); ++r)
    if (std::find(recorded[r].begin(), recorded[r].end(), rank) != recorded[r].end())
      return {static_cast<int>(r), c.source};
  return {};
}

OpRef RunComparison::predictedOp(const core::MatchedCollective& pair) const {
  return refOf(*predicted_, predicted_side_, pair.rank, pair.predicted);
}
OpRef RunComparison::measuredOp(const core::MatchedCollective& pair) const {
  return refOf(*measured_, *measured_side_, pair.rank, pair.measured);
}
OpRef RunComparison::opOf(const core::UnmatchedCollective& u) const {
  return u.predicted_side ? refOf(*predicted_, predicted_side_, u.rank, u.index)
                          : refOf(*measured_, *measured_side_, u.rank, u.index);
}

double RunComparison::iterationOffset(std::size_t pair) const {
  if (pair >= result_.iterations.size()) return 0;
  const auto [p, m] = result_.iterations[pair];
  // A trace's iterations (ProfilerStep#N is N + 1) are renumbered from 1 in its timeline.
  const auto start = [](const LoadedDocument& document, int iteration) {
    int shown = iteration;
    if (document.trace_side) {  // a trace side's iteration is ProfilerStep#N + 1
      const auto it = document.trace_iteration_of_step.find(iteration - 1);
      if (it == document.trace_iteration_of_step.end()) return 0.0;
      shown = it->second;
    }
    for (const core::IterationStats& it : document.store->analysis().iterations)
      if (it.iteration == shown) return it.start;
    return 0.0;
  };
  return start(*measured_, m) - start(*predicted_, p);
}

}  // namespace stratsim::gui
