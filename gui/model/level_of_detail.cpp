#include "model/level_of_detail.hpp"

#include <algorithm>
#include <array>

namespace stratsim::gui {
namespace {

constexpr int kExactLimit = 8;  // at most this many ops in a column: sum each one's share exactly
constexpr int kSamples = 8;     // more: the dominant category from this many point samples

struct LaneView {
  const std::vector<std::int32_t>& ops;
  const std::vector<core::OpTiming>& timings;
  const std::vector<double>& busy_before;

  const core::OpTiming& at(std::size_t i) const { return timings[ops[i]]; }
  // First index whose op starts at or after t.
  std::size_t firstStartingFrom(double t, std::size_t from) const {
    const auto it = std::lower_bound(ops.begin() + static_cast<std::ptrdiff_t>(from), ops.end(), t,
                                     [&](std::int32_t id, double time) { return timings[id].start < time; });
    return static_cast<std::size_t>(it - ops.begin());
  }
  // Busy time of ops [i, j) inside [a, b): their prefix sum, less the part of the first op before
  // a and the part of the last op after b (ops on one stream do not overlap).
  double busyIn(std::size_t i, std::size_t j, double a, double b) const {
    if (i >= j) return 0;
    const core::OpTiming& first = at(i);
    const core::OpTiming& last = at(j - 1);
    const double before = std::max(0.0, std::min(a, first.end) - first.start);
    const double after = std::max(0.0, last.end - std::max(b, last.start));
    return std::max(0.0, busy_before[j] - busy_before[i] - before - after);
  }
};

}  // namespace

std::vector<PixelColumn> laneColumns(const TimelineStore& store, int recorded, int stream, const Viewport& viewport) {
  std::vector<PixelColumn> columns(static_cast<std::size_t>(viewport.width()));
  const Lane& lane = store.lane(recorded, stream);
  const LaneView view{*lane.ops, store.result().timings[recorded], lane.busy_before};
  const std::size_t n = view.ops.size();
  const double width_seconds = viewport.secondsPerPixel();
  std::size_t cursor = 0;
  for (std::size_t x = 0; x < columns.size(); ++x) {
    const double a = viewport.start() + static_cast<double>(x) * width_seconds, b = a + width_seconds;
    // The ops touching [a, b): from the last one starting before a (it may reach into the column)
    // to the last one starting before b.
    std::size_t i = view.firstStartingFrom(a, cursor);
    if (i > 0 && view.at(i - 1).end > a) --i;
    const std::size_t j = view.firstStartingFrom(b, i);
    cursor = i;
    if (i >= j || i >= n) continue;
    PixelColumn& column = columns[x];
    std::array<double, kCategoryCount> share{};
    if (j - i <= kExactLimit) {
      double busy = 0;
      for (std::size_t k = i; k < j; ++k) {
        const core::OpTiming& t = view.at(k);
        const double covered = std::max(0.0, std::min(t.end, b) - std::max(t.start, a));
        busy += covered;
        share[static_cast<int>(store.category(view.ops[k]))] += covered;
      }
      column.busy = static_cast<float>(std::min(1.0, busy / width_seconds));
      if (j - i == 1) column.op = view.ops[i];
    } else {
      column.busy = static_cast<float>(std::min(1.0, view.busyIn(i, j, a, b) / width_seconds));
      for (int s = 0; s < kSamples; ++s) {
        const double t = a + (s + 0.5) * width_seconds / kSamples;
        std::size_t k = view.firstStartingFrom(t, i);
        if (k > i && view.at(k - 1).end > t) share[static_cast<int>(store.category(view.ops[k - 1]))] += 1;
      }
    }
    // An op of zero duration still marks its column.
    if (column.busy == 0) column.busy = 1.0f / 64;
    column.dominant = static_cast<Category>(std::max_element(share.begin(), share.end()) - share.begin());
    if (share[static_cast<int>(column.dominant)] == 0) column.dominant = store.category(view.ops[i]);
  }
  return columns;
}

std::vector<ColumnRun> columnRuns(const std::vector<PixelColumn>& columns) {
  std::vector<ColumnRun> runs;
  for (int x = 0; x < static_cast<int>(columns.size()); ++x) {
    const PixelColumn& c = columns[x];
    if (c.busy <= 0) continue;
    if (!runs.empty() && runs.back().last == x - 1 && runs.back().column.op == c.op &&
        runs.back().column.dominant == c.dominant && (c.op >= 0 || runs.back().column.busy == c.busy)) {
      runs.back().last = x;
      continue;
    }
    runs.push_back({x, x, c});
  }
  return runs;
}

}  // namespace stratsim::gui
