// Two open documents compared collective by collective, for the side-by-side view: core's
// matching (core::match_collectives, the same as `stratsim compare`), the count differences, and
// for every matched pair the op it is in each document's timeline, so a table row can select both.
// Pure (no widgets); built off the UI thread if need be.
#pragma once

#include <QString>

#include <memory>
#include <vector>

#include "model/document_loader.hpp"
#include "stratsim/core/op_matching.hpp"

namespace stratsim::gui {

class RunComparison {
 public:
  // `predicted` and `measured` need a timeline (a timeline file or a profiler trace); throws
  // core::InputError naming the one that has none.
  RunComparison(std::shared_ptr<const LoadedDocument> predicted, std::shared_ptr<const LoadedDocument> measured);

  const LoadedDocument& predicted() const { return *predicted_; }
  const LoadedDocument& measured() const { return *measured_; }
  const std::shared_ptr<const TimelineStore>& predictedStore() const { return predicted_->store; }
  const std::shared_ptr<const TimelineStore>& measuredStore() const { return measured_->store; }
  const core::CollectiveSide& predictedSide() const { return predicted_side_; }
  const core::CollectiveSide& measuredSide() const { return *measured_side_; }
  const core::OpComparison& result() const { return result_; }
  const std::vector<core::CountDifference>& counts() const { return counts_; }

  // The ops of a matched pair, or of an unmatched collective, in their documents' stores.
  OpRef predictedOp(const core::MatchedCollective& pair) const;
  OpRef measuredOp(const core::MatchedCollective& pair) const;
  OpRef opOf(const core::UnmatchedCollective& unmatched) const;
  const core::SideCollective& predictedCollective(const core::MatchedCollective& pair) const;
  const core::SideCollective& measuredCollective(const core::MatchedCollective& pair) const;
  const core::SideCollective& collectiveOf(const core::UnmatchedCollective& unmatched) const;

  // What to add to a predicted time to get the measured time at which the same iteration starts
  // (the pair of iterations `pair` indexes in result().iterations): auto-alignment.
  double iterationOffset(std::size_t pair) const;

 private:
  OpRef refOf(const LoadedDocument& document, const core::CollectiveSide& side, int rank, std::int32_t index) const;

  std::shared_ptr<const LoadedDocument> predicted_, measured_;
  core::CollectiveSide predicted_side_;
  std::shared_ptr<const core::CollectiveSide> measured_side_;
  core::OpComparison result_;
  std::vector<core::CountDifference> counts_;
};

}  // namespace stratsim::gui
