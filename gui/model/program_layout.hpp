// A program (plan --emit-program) has no times. To show it as a DAG per stream in the timeline
// view, each op gets a slot: one after the previous op on its stream and after every dependency
// (ASAP levels), drawn as if a slot lasted one microsecond. The view labels it "slots, not times".
#pragma once

#include "stratsim/core/timeline.hpp"

namespace stratsim::gui {

inline constexpr double kSlotSeconds = 1e-6;

core::Timeline unscheduledTimeline(core::Program program);

}  // namespace stratsim::gui
