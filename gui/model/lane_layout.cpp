#include "model/lane_layout.hpp"

#include <algorithm>

namespace stratsim::gui {

void LaneLayout::reset(int recorded_ranks, int streams) {
  streams_ = streams;
  collapsed_.assign(static_cast<std::size_t>(std::max(0, recorded_ranks)), false);
  rebuild();
}

void LaneLayout::setLaneHeight(int height) {
  lane_height_ = std::max(1, height);
  rebuild();
}

void LaneLayout::toggle(int recorded) { setCollapsed(recorded, !collapsed(recorded)); }

void LaneLayout::setCollapsed(int recorded, bool collapsed) {
  if (recorded < 0 || static_cast<std::size_t>(recorded) >= collapsed_.size()) return;
  collapsed_[recorded] = collapsed;
  rebuild();
}

bool LaneLayout::collapsed(int recorded) const {
  return recorded >= 0 && static_cast<std::size_t>(recorded) < collapsed_.size() && collapsed_[recorded];
}

void LaneLayout::rebuild() {
  rows_.clear();
  int y = 0;
  for (std::size_t r = 0; r < collapsed_.size(); ++r) {
    rows_.push_back({true, static_cast<int>(r), -1, y, kHeaderHeight});
    y += kHeaderHeight;
    if (collapsed_[r]) continue;
    for (int s = 0; s < streams_; ++s) {
      rows_.push_back({false, static_cast<int>(r), s, y, lane_height_});
      y += lane_height_;
    }
  }
  total_height_ = y;
}

const LaneRow* LaneLayout::rowAt(int y) const {
  const auto it =
      std::upper_bound(rows_.begin(), rows_.end(), y, [](int value, const LaneRow& row) { return value < row.y; });
  if (it == rows_.begin()) return nullptr;
  const LaneRow& row = *(it - 1);
  return y < row.y + row.height ? &row : nullptr;
}

const LaneRow* LaneLayout::laneRow(int recorded, int stream) const {
  for (const LaneRow& row : rows_)
    if (!row.header && row.recorded == recorded && row.stream == stream) return &row;
  return nullptr;
}

}  // namespace stratsim::gui
