// Level of detail: what one lane shows in each pixel column of a viewport. The cost is
// O(pixels x log ops) per lane whatever the zoom, because a column's busy time comes from the
// lane's prefix sums and its colour from at most kSamples lookups: a million ops paint as fast as
// a thousand. Sub-pixel ops are never dropped: they add to their column's busy fraction.
#pragma once

#include <cstdint>
#include <vector>

#include "model/timeline_store.hpp"
#include "model/viewport.hpp"

namespace stratsim::gui {

struct PixelColumn {
  float busy = 0;                         // fraction of the column's time some op ran, 0..1
  Category dominant = Category::compute;  // the category that covers most of it (when busy > 0)
  std::int32_t op = -1;                   // the op, when exactly one op touches the column
};

// Columns [0, viewport.width()) of lane (recorded, stream).
std::vector<PixelColumn> laneColumns(const TimelineStore& store, int recorded, int stream, const Viewport& viewport);

// A run of equal columns, for drawing one rectangle instead of one line per pixel.
struct ColumnRun {
  int first = 0, last = 0;  // columns, inclusive
  PixelColumn column;
};
std::vector<ColumnRun> columnRuns(const std::vector<PixelColumn>& columns);

}  // namespace stratsim::gui
