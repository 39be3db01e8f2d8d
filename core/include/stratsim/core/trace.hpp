// Timelines of a run, simulated or measured, as Chrome-trace JSON that Perfetto and
// chrome://tracing open (one process per recorded rank, one thread per stream, flow arrows for
// dependencies, HTA-readable "rank": N). The project's own timeline, which the viewer reads, is
// timeline.hpp.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "stratsim/core/program.hpp"
#include "stratsim/core/run_result.hpp"

namespace stratsim::core {

// Merged Chrome trace of every recorded rank. Returns the text (the HTA rank key needs a space
// after the colon, which nlohmann's compact dump does not write).
std::string chrome_trace(const Program& program, const RunResult& result);

}  // namespace stratsim::core
