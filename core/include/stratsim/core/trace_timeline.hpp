// A PyTorch profiler trace as a stratsim timeline (Program + measured RunResult), so the viewer
// draws it, analyses it and puts it beside a simulation with the code that serves stratsim's own
// runs. The program is the trace's: one op per event position on each stream (the k-th kernel of
// "stream 7" on every rank is op k of that stream, as SPMD training runs the same kernels
// everywhere), collectives with the kind, bytes and group the trace gives, and one iteration per
// ProfilerStep#N (the first profiled step is iteration 1).
//
//   const core::TraceTimeline t = core::trace_timeline(core::read_profiler_trace({"traces/"}));
//   core::analyse(t.timeline.program, t.timeline.result, {});
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "stratsim/core/profiler_trace.hpp"
#include "stratsim/core/timeline.hpp"

namespace stratsim::core {

struct TraceTimeline {
  Timeline timeline;
  // [rank index in the trace][index into that rank's collectives] -> the op it became.
  std::vector<std::vector<std::int32_t>> collective_ops;
  int first_step = 0;                    // the ProfilerStep#N that is iteration 1
  std::map<int, int> iteration_of_step;  // ProfilerStep#N -> the iteration it is drawn as
};

// Ranks whose event sequences differ on a stream (a rank that ran more kernels) keep every event
// they have; the positions a rank lacks are drawn as zero-length ops at its last event's end, and
// RunResult::notes says how many there were.
TraceTimeline trace_timeline(const ProfilerTrace& trace);

}  // namespace stratsim::core
