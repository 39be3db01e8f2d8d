// What the viewer holds for one open timeline: core's Program and RunResult (read by core, never
// parsed here), the run's analysis, and per lane (recorded rank x stream) the indexes that make
// drawing cost proportional to pixels rather than ops: the lane's op ids in start order and a
// prefix sum of their durations. Immutable once built, so the UI thread and a loader thread can
// share it as shared_ptr<const TimelineStore>.
#pragma once

#include <QString>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "stratsim/core/run_analysis.hpp"
#include "stratsim/core/timeline.hpp"

namespace stratsim::gui {

// One op on one recorded rank: recorded = index into RunResult::timings, op = ProgramOp id.
struct OpRef {
  int recorded = -1;
  int op = -1;
  bool valid() const { return recorded >= 0 && op >= 0; }
  friend bool operator==(OpRef, OpRef) = default;
};

// What colour an op is drawn in: compute, or the collective's kind.
// compute, then one per core::CollectiveKind in its order (category_of maps kind k to k + 1).
enum class Category : std::uint8_t { compute, all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, scatter };
inline constexpr int kCategoryCount = 7;
Category category_of(const core::ProgramOp& op);
QString category_name(Category category);

// One row of the timeline. A stream's ops run in program order on every rank (program.hpp), so
// the op ids are shared by the stream's lanes on all recorded ranks; what is per lane is the prefix
// sum of durations that gives any pixel's busy time in O(log n).
struct Lane {
  int recorded = 0;
  int stream = 0;
  const std::vector<std::int32_t>* ops = nullptr;  // op ids on this stream, in program order
  std::vector<double> busy_before;                 // busy_before[i] = total duration of ops[0..i)
};

class TimelineStore {
 public:
  explicit TimelineStore(core::Timeline timeline);

  const core::Timeline& timeline() const { return timeline_; }
  const core::Program& program() const { return timeline_.program; }
  const core::RunResult& result() const { return timeline_.result; }
  const core::Analysis& analysis() const { return analysis_; }
  int version() const { return timeline_.version; }
  double makespan() const { return analysis_.makespan; }
  int recordedRanks() const { return static_cast<int>(timeline_.result.timings.size()); }
  int streams() const { return static_cast<int>(timeline_.program.streams.size()); }
  QString rankLabel(int recorded) const;  // "rank 3", "ranks 0-1023 (representative)"

  // Lanes in display order: recorded rank, then stream.
  const std::vector<Lane>& lanes() const { return lanes_; }
  const Lane& lane(int recorded, int stream) const { return lanes_[recorded * streams() + stream]; }

  const core::OpTiming& timing(OpRef op) const { return timeline_.result.timings[op.recorded][op.op]; }
  const core::ProgramOp& op(OpRef ref) const { return timeline_.program.ops[ref.op]; }
  Category category(int op) const { return categories_[op]; }

  // The op on the lane covering time t (or the nearest within `slack` seconds), invalid if none.
  OpRef opAt(int recorded, int stream, double t, double slack) const;
  // The next / previous op on the same lane, invalid at either end.
  OpRef nextOnLane(OpRef op) const;
  OpRef previousOnLane(OpRef op) const;
  // Ops whose name, module or kind contains `text` (case-insensitive), on every recorded rank,
  // by start time.
  std::vector<OpRef> find(const QString& text) const;
  // The same collective group instance on the other recorded ranks (the op itself included);
  // for a compute op, just the op.
  std::vector<OpRef> instancesOf(OpRef op) const;
  // The collective instance `op` took part in (RunResult::collectives index), -1 if none.
  int collectiveRunOf(OpRef op) const;
  // Ops that depend on `op` (the reverse of ProgramOp::deps), on the same recorded rank.
  std::vector<OpRef> dependantsOf(OpRef op) const;

  std::size_t memoryBytes() const;  // what the store holds beyond core's Timeline

 private:
  void buildLanes();
  void buildInstanceIndex();

  core::Timeline timeline_;
  core::Analysis analysis_;
  std::vector<Category> categories_;  // per program op
  std::vector<Lane> lanes_;
  std::vector<std::vector<std::int32_t>> stream_ops_;  // per stream: its op ids in program order
  std::vector<std::int32_t> position_;                 // per program op: its index in its stream's ops
  // (op, rank) -> CollectiveRun index, as a sorted vector of keys for binary search
  std::vector<std::pair<std::uint64_t, std::int32_t>> run_by_op_rank_;
  std::vector<std::vector<std::int32_t>> dependants_;  // per program op
};

}  // namespace stratsim::gui
