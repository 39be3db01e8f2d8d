#include "model/program_layout.hpp"

#include <algorithm>

namespace stratsim::gui {

core::Timeline unscheduledTimeline(core::Program program) {
  core::Timeline timeline;
  core::RunResult& result = timeline.result;
  result.source = "program";
  result.mode = "unscheduled";
  result.platform = "no platform: slots, not times";
  result.world_size = program.world_size;
  result.recorded = {{0}};
  std::vector<core::OpTiming> timings(program.ops.size());
  std::vector<double> stream_free(program.streams.size(), 0.0);
  std::vector<double> iteration_end(static_cast<std::size_t>(std::max(1, program.iterations)), 0.0);
  for (const core::ProgramOp& op : program.ops) {
    double slot = stream_free[op.stream];
    for (int dep : op.deps) slot = std::max(slot, timings[dep].start + kSlotSeconds);
    // Drawn 80% of a slot wide, so the gap between neighbours shows the arrows between them.
    timings[op.id] = {slot, slot, slot + 0.8 * kSlotSeconds};
    stream_free[op.stream] = slot + kSlotSeconds;
    if (op.iteration >= 1 && static_cast<std::size_t>(op.iteration) <= iteration_end.size())
      iteration_end[op.iteration - 1] = std::max(iteration_end[op.iteration - 1], slot + kSlotSeconds);
  }
  for (std::size_t i = 1; i < iteration_end.size(); ++i)
    iteration_end[i] = std::max(iteration_end[i], iteration_end[i - 1]);
  result.timings.push_back(std::move(timings));
  result.iteration_end = iteration_end;
  result.makespan = iteration_end.back();
  timeline.program = std::move(program);
  return timeline;
}

}  // namespace stratsim::gui
