// The vertical layout of the timeline: per recorded rank a header row, then one row per stream
// unless the rank is collapsed. Pure, so collapsing and hit-testing are tested without widgets.
#pragma once

#include <vector>

namespace stratsim::gui {

struct LaneRow {
  bool header = false;  // the rank's header row (its label; the rank's streams merged when collapsed)
  int recorded = 0;
  int stream = -1;  // -1 for a header row
  int y = 0, height = 0;
};

class LaneLayout {
 public:
  void reset(int recorded_ranks, int streams);
  void setLaneHeight(int height);  // stream rows; headers keep kHeaderHeight
  int laneHeight() const { return lane_height_; }
  void toggle(int recorded);
  void setCollapsed(int recorded, bool collapsed);
  bool collapsed(int recorded) const;

  const std::vector<LaneRow>& rows() const { return rows_; }
  int totalHeight() const { return total_height_; }
  const LaneRow* rowAt(int y) const;                       // nullptr outside every row
  const LaneRow* laneRow(int recorded, int stream) const;  // nullptr when collapsed

  static constexpr int kHeaderHeight = 18;
  static constexpr int kDefaultLaneHeight = 22;

 private:
  void rebuild();
  int streams_ = 0;
  int lane_height_ = kDefaultLaneHeight;
  std::vector<bool> collapsed_;
  std::vector<LaneRow> rows_;
  int total_height_ = 0;
};

}  // namespace stratsim::gui
